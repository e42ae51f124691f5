//! The in-memory dev ledger.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard},
};

use alloy_primitives::{address, keccak256, Address, B256, U256};
use async_trait::async_trait;

use super::{reason, Ledger, LedgerError, LedgerState, Permit2Transfer, Transfer, TransferOutcome};
use crate::unix::now as unix_now;
use crate::{money::AtomicAmount, network, swept::SweptMap};

/// The address the dev ledger reports as its signer in `/supported`. It holds
/// no key: the dev ledger signs nothing.
pub const DEV_LEDGER_SIGNER: Address = address!("00000000000000000000000000000000000dE402");

/// `(network, asset, owner)`.
type BalanceKey = (String, Address, Address);
/// `(network, asset, from, nonce)`.
type NonceKey = (String, Address, Address, B256);
/// `(network, owner, nonce)`: Permit2 spends a nonce per owner, across tokens.
type Permit2NonceKey = (String, Address, U256);

#[derive(Debug, Default)]
struct State {
    balances: HashMap<BalanceKey, U256>,
    /// EIP-3009 nonces, per token, with their authorization's `validBefore`.
    used: SweptMap<NonceKey, u64>,
    /// Permit2 nonces, per owner (kept apart from EIP-3009's), with their
    /// permit's `deadline`.
    permit2_used: SweptMap<Permit2NonceKey, u64>,
}

/// A ledger in memory, for offline development and tests: token balances,
/// used EIP-3009 nonces per network and token, and used Permit2 nonces per
/// network and owner, with no chain behind them.
///
/// It settles EIP-3009 authorizations and Permit2 witness transfers (the
/// `upto` scheme, and `exact` over Permit2) as if Permit2 and the x402
/// proxies were deployed and the payer had approved Permit2: a Permit2
/// transfer moves [`Permit2Transfer::amount`] and spends the owner's nonce.
///
/// It is **not** a chain: nothing it settles is real money, so it refuses
/// mainnet networks (see [`network::is_mainnet`]), and the `transaction` it
/// returns is a deterministic id ([`transaction_id`](Self::transaction_id),
/// [`permit2_transaction_id`](Self::permit2_transaction_id)), not a
/// transaction hash.
///
/// Nonce and balance updates happen under one lock: of concurrent settlements
/// of one authorization, exactly one succeeds.
///
/// Like a chain, it keeps every used nonce for its whole life, unless it was
/// built with [`forget_expired_nonces`](Self::forget_expired_nonces), as a
/// long-running dev server's should be.
///
/// ```
/// use alloy_primitives::address;
/// use x402_core::local::DevLedger;
///
/// let ledger = DevLedger::new();
/// let usdc = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
/// let payer = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
/// ledger.fund("eip155:84532", usdc, payer, 5_000u64)?;
/// ledger.fund("base-sepolia", usdc, payer, 1_000u64)?; // the same network, v1 name
/// assert_eq!(ledger.balance("eip155:84532", usdc, payer).to::<u64>(), 6_000);
/// assert!(ledger.fund("eip155:8453", usdc, payer, 1u64).is_err()); // Base mainnet
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct DevLedger {
    state: Mutex<State>,
    /// Whether expiry is checked and expired nonces forgotten.
    expiring: bool,
}

/// Why the dev ledger refused a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DevLedgerError {
    /// The network is a mainnet (or an unknown chain, which counts as one).
    #[error("the dev ledger refuses mainnet network {0:?}: it would fake real-money settlements")]
    Mainnet(String),
    /// The network is not an EVM network.
    #[error("network {0:?} is not an EVM network")]
    NotEvm(String),
    /// Crediting would overflow a uint256.
    #[error("balance overflow")]
    Overflow,
}

/// The CAIP-2 id of a dev network, or why it is refused.
fn dev_network(network: &str) -> Result<String, DevLedgerError> {
    let caip2 = if network.contains(':') {
        network.to_owned()
    } else {
        network::caip2(network)
            .ok_or_else(|| DevLedgerError::NotEvm(network.to_owned()))?
            .to_owned()
    };
    if network::evm_chain_id(&caip2).is_none() {
        return Err(DevLedgerError::NotEvm(network.to_owned()));
    }
    if network::is_mainnet(&caip2) {
        return Err(DevLedgerError::Mainnet(network.to_owned()));
    }
    Ok(caip2)
}

impl DevLedger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Refuses, at settlement, an EIP-3009 authorization whose
    /// `validBefore` has passed ([`reason::VALID_BEFORE`]) and a Permit2
    /// permit whose `deadline` has ([`reason::PERMIT2_DEADLINE_EXPIRED`]),
    /// by the system clock, as the token contract and Permit2 do by the
    /// block's time; and, since an expired authorization can never settle
    /// again, forgets its used nonce once it has expired (at most a minute
    /// later, as the ledger grows). A long-running server's ledger then
    /// holds only the nonces of authorizations that are still valid.
    ///
    /// Without it, every used nonce is kept for the ledger's life and no
    /// clock is read: settling depends on the facilitator's checks alone, so
    /// tests may drive the facilitator with a clock of their own.
    ///
    /// ```
    /// use x402_core::local::DevLedger;
    ///
    /// let ledger = DevLedger::new().forget_expired_nonces();
    /// # drop(ledger);
    /// ```
    pub fn forget_expired_nonces(mut self) -> Self {
        self.expiring = true;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent across a panic (no update is split), so
        // a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Credits `amount` of `asset` to `owner` on `network` (CAIP-2 id or v1
    /// name). Refuses mainnet networks.
    pub fn fund(
        &self,
        network: &str,
        asset: Address,
        owner: Address,
        amount: impl Into<AtomicAmount>,
    ) -> Result<(), DevLedgerError> {
        let network = dev_network(network)?;
        let mut state = self.lock();
        let balance = state.balances.entry((network, asset, owner)).or_default();
        *balance = balance
            .checked_add(amount.into().get())
            .ok_or(DevLedgerError::Overflow)?;
        Ok(())
    }

    /// The balance of `owner` in `asset` on `network` (zero when unknown).
    pub fn balance(&self, network: &str, asset: Address, owner: Address) -> U256 {
        let Ok(network) = dev_network(network) else {
            return U256::ZERO;
        };
        self.lock()
            .balances
            .get(&(network, asset, owner))
            .copied()
            .unwrap_or_default()
    }

    /// Whether `from` has used `nonce` for `asset` on `network`.
    pub fn nonce_used(&self, network: &str, asset: Address, from: Address, nonce: B256) -> bool {
        let Ok(network) = dev_network(network) else {
            return false;
        };
        self.lock()
            .used
            .contains_key(&(network, asset, from, nonce))
    }

    /// Whether `owner` has spent the Permit2 `nonce` on `network`.
    pub fn permit2_nonce_used(&self, network: &str, owner: Address, nonce: U256) -> bool {
        let Ok(network) = dev_network(network) else {
            return false;
        };
        self.lock()
            .permit2_used
            .contains_key(&(network, owner, nonce))
    }

    /// The id the dev ledger returns for a settled Permit2 transfer: `0x` and
    /// the hex of `keccak256("permit2" ‖ network ‖ owner ‖ nonce)`, the
    /// network as its CAIP-2 id and the nonce as 32 big-endian bytes. Not a
    /// transaction hash.
    ///
    /// ```
    /// use alloy_primitives::{Address, U256};
    /// use x402_core::local::DevLedger;
    /// let id = DevLedger::permit2_transaction_id("eip155:84532", Address::ZERO, U256::from(7));
    /// assert_eq!(id.len(), 66);
    /// assert_ne!(id, DevLedger::permit2_transaction_id("eip155:84532", Address::ZERO, U256::from(8)));
    /// ```
    pub fn permit2_transaction_id(network: &str, owner: Address, nonce: U256) -> String {
        let mut material = Vec::with_capacity(network.len() + 59);
        material.extend_from_slice(b"permit2");
        material.extend_from_slice(network.as_bytes());
        material.extend_from_slice(owner.as_slice());
        material.extend_from_slice(&nonce.to_be_bytes::<32>());
        format!("{:#x}", keccak256(&material))
    }

    /// The id the dev ledger returns for a settled authorization:
    /// `0x` and the hex of `keccak256(network ‖ asset ‖ from ‖ nonce)` with the
    /// network as its CAIP-2 id. Not a transaction hash.
    ///
    /// ```
    /// use alloy_primitives::{Address, B256};
    /// use x402_core::local::DevLedger;
    /// let id = DevLedger::transaction_id("eip155:84532", Address::ZERO, Address::ZERO, B256::ZERO);
    /// assert_eq!(id.len(), 66);
    /// assert_eq!(id, DevLedger::transaction_id("eip155:84532", Address::ZERO, Address::ZERO, B256::ZERO));
    /// ```
    pub fn transaction_id(network: &str, asset: Address, from: Address, nonce: B256) -> String {
        let mut material = Vec::with_capacity(network.len() + 72);
        material.extend_from_slice(network.as_bytes());
        material.extend_from_slice(asset.as_slice());
        material.extend_from_slice(from.as_slice());
        material.extend_from_slice(nonce.as_slice());
        format!("{:#x}", keccak256(&material))
    }
}

fn unsupported(network: &str, e: &DevLedgerError) -> LedgerError {
    LedgerError::UnsupportedNetwork {
        network: network.to_owned(),
        why: e.to_string(),
    }
}

#[async_trait]
impl Ledger for DevLedger {
    fn signer(&self) -> Address {
        DEV_LEDGER_SIGNER
    }

    fn check_network(&self, network: &str) -> Result<(), LedgerError> {
        dev_network(network)
            .map(drop)
            .map_err(|e| unsupported(network, &e))
    }

    async fn state(&self, t: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
        let network = dev_network(t.network).map_err(|e| unsupported(t.network, &e))?;
        let state = self.lock();
        let nonce_used = state
            .used
            .contains_key(&(network.clone(), t.asset, t.from(), t.nonce()));
        let balance = state
            .balances
            .get(&(network, t.asset, t.from()))
            .copied()
            .unwrap_or_default();
        Ok(LedgerState::new(nonce_used, balance))
    }

    async fn transfer(&self, t: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        let network = dev_network(t.network).map_err(|e| unsupported(t.network, &e))?;
        let (from, to, value) = (t.from(), t.payload.authorization.to, t.value());
        let nonce_key = (network.clone(), t.asset, from, t.nonce());
        let from_key = (network.clone(), t.asset, from);
        let to_key = (network.clone(), t.asset, to);

        // Valid while `now < validBefore`, as in EIP-3009.
        let valid_before = t.payload.authorization.valid_before.saturating_to::<u64>();
        let now = unix_now();
        if self.expiring && valid_before <= now {
            return Ok(TransferOutcome::refused(reason::VALID_BEFORE));
        }

        let mut state = self.lock();
        if state.used.contains_key(&nonce_key) {
            return Ok(TransferOutcome::refused(reason::NONCE_USED));
        }
        let from_balance = state.balances.get(&from_key).copied().unwrap_or_default();
        let Some(from_after) = from_balance.checked_sub(value) else {
            return Ok(TransferOutcome::refused(reason::INSUFFICIENT_BALANCE));
        };
        if from != to {
            let to_balance = state.balances.get(&to_key).copied().unwrap_or_default();
            let Some(to_after) = to_balance.checked_add(value) else {
                return Ok(TransferOutcome::Refused {
                    reason: reason::TRANSACTION_FAILED.to_owned(),
                    message: Some("recipient balance overflow".to_owned()),
                    transaction: None,
                });
            };
            state.balances.insert(from_key, from_after);
            state.balances.insert(to_key, to_after);
        }
        if self.expiring {
            state.used.make_room(now, |&until| until > now);
        }
        state.used.insert(nonce_key, valid_before);
        drop(state);
        Ok(TransferOutcome::Settled {
            transaction: Self::transaction_id(&network, t.asset, from, t.nonce()),
        })
    }

    fn supports_permit2(&self) -> bool {
        true
    }

    async fn permit2_state(&self, t: &Permit2Transfer<'_>) -> Result<LedgerState, LedgerError> {
        let network = dev_network(t.network).map_err(|e| unsupported(t.network, &e))?;
        let state = self.lock();
        let nonce_used = state
            .permit2_used
            .contains_key(&(network.clone(), t.from(), t.nonce()));
        let balance = state
            .balances
            .get(&(network, t.token(), t.from()))
            .copied()
            .unwrap_or_default();
        Ok(LedgerState::new(nonce_used, balance))
    }

    async fn permit2_transfer(
        &self,
        t: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        let network = dev_network(t.network).map_err(|e| unsupported(t.network, &e))?;
        let (from, to, token, amount) = (t.from(), t.to(), t.token(), t.amount);
        // What the x402 proxies enforce: `upto` moves at most the permitted
        // amount, `exact` exactly it.
        if amount > t.permitted() {
            return Ok(TransferOutcome::refused(
                reason::UPTO_AMOUNT_EXCEEDS_PERMITTED,
            ));
        }
        if !t.is_upto() && amount != t.permitted() {
            return Ok(TransferOutcome::refused(reason::PERMIT2_INVALID_AMOUNT));
        }
        let nonce_key = (network.clone(), from, t.nonce());
        let from_key = (network.clone(), token, from);
        let to_key = (network.clone(), token, to);

        // Valid while `now <= deadline`, as in Permit2.
        let deadline = t
            .payload
            .permit2_authorization
            .deadline
            .saturating_to::<u64>();
        let now = unix_now();
        if self.expiring && deadline < now {
            return Ok(TransferOutcome::refused(reason::PERMIT2_DEADLINE_EXPIRED));
        }

        let mut state = self.lock();
        if state.permit2_used.contains_key(&nonce_key) {
            return Ok(TransferOutcome::refused(reason::PERMIT2_INVALID_NONCE));
        }
        let from_balance = state.balances.get(&from_key).copied().unwrap_or_default();
        let Some(from_after) = from_balance.checked_sub(amount) else {
            return Ok(TransferOutcome::refused(
                reason::PERMIT2_INSUFFICIENT_BALANCE,
            ));
        };
        if from != to {
            let to_balance = state.balances.get(&to_key).copied().unwrap_or_default();
            let Some(to_after) = to_balance.checked_add(amount) else {
                return Ok(TransferOutcome::Refused {
                    reason: if t.is_upto() {
                        reason::UPTO_TRANSACTION_FAILED
                    } else {
                        reason::TRANSACTION_FAILED
                    }
                    .to_owned(),
                    message: Some("recipient balance overflow".to_owned()),
                    transaction: None,
                });
            };
            state.balances.insert(from_key, from_after);
            state.balances.insert(to_key, to_after);
        }
        if self.expiring {
            state.permit2_used.make_room(now, |&until| until >= now);
        }
        state.permit2_used.insert(nonce_key, deadline);
        drop(state);
        Ok(TransferOutcome::Settled {
            transaction: Self::permit2_transaction_id(&network, from, t.nonce()),
        })
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::Bytes;

    use super::*;
    use crate::evm::{Eip3009Authorization, ExactEvmPayload};

    const NETWORK: &str = "eip155:84532";
    const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
    const PAYER: Address = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
    const SELLER: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");

    /// An authorization of 1 unit with nonce `n`, valid until `valid_before`
    /// (the ledger checks no signature: the facilitator does).
    fn payload(n: u64, valid_before: u64) -> ExactEvmPayload {
        ExactEvmPayload {
            signature: Bytes::from(vec![0u8; 65]),
            authorization: Eip3009Authorization {
                from: PAYER,
                to: SELLER,
                value: AtomicAmount::from(1u64),
                valid_after: U256::ZERO,
                valid_before: U256::from(valid_before),
                nonce: B256::from(U256::from(n)),
            },
        }
    }

    async fn settle(ledger: &DevLedger, payload: &ExactEvmPayload) -> TransferOutcome {
        let t = Transfer {
            network: NETWORK,
            chain_id: 84532,
            asset: TOKEN,
            payload,
        };
        ledger.transfer(&t).await.unwrap()
    }

    fn refused_for(outcome: &TransferOutcome) -> Option<&str> {
        match outcome {
            TransferOutcome::Refused { reason, .. } => Some(reason),
            TransferOutcome::Settled { .. } => None,
        }
    }

    #[tokio::test]
    async fn by_default_nonces_are_kept_and_no_clock_is_read() {
        let ledger = DevLedger::new();
        ledger.fund(NETWORK, TOKEN, PAYER, 10u64).unwrap();
        // Long expired by the system clock: the ledger leaves that to the
        // facilitator (whose clock tests may set).
        let old = payload(1, 1_740_672_154);
        assert_eq!(refused_for(&settle(&ledger, &old).await), None);
        assert_eq!(
            refused_for(&settle(&ledger, &old).await),
            Some(reason::NONCE_USED)
        );
        assert!(ledger.nonce_used(NETWORK, TOKEN, PAYER, old.authorization.nonce));
    }

    #[tokio::test]
    async fn forgets_nonces_only_of_authorizations_that_can_no_longer_settle() {
        let ledger = DevLedger::new().forget_expired_nonces();
        ledger.fund(NETWORK, TOKEN, PAYER, 10_000u64).unwrap();

        let expired = payload(0, unix_now() - 1);
        assert_eq!(
            refused_for(&settle(&ledger, &expired).await),
            Some(reason::VALID_BEFORE)
        );

        // Short-lived nonces and one long-lived one: as many as the ledger
        // holds before its first sweep.
        let soon = unix_now() + 2;
        let short: Vec<_> = (1..crate::swept::MIN_SWEEP_LEN as u64)
            .map(|n| payload(n, soon))
            .collect();
        for p in &short {
            assert_eq!(refused_for(&settle(&ledger, p).await), None);
        }
        let long = payload(1_000_000, unix_now() + 3600);
        assert_eq!(refused_for(&settle(&ledger, &long).await), None);
        // Still valid: a replay is refused for its nonce.
        assert_eq!(
            refused_for(&settle(&ledger, &short[0]).await),
            Some(reason::NONCE_USED)
        );

        while unix_now() < soon {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        // Expired: refused for its expiry, whether or not its nonce is kept.
        assert_eq!(
            refused_for(&settle(&ledger, &short[0]).await),
            Some(reason::VALID_BEFORE)
        );
        // The next new nonce sweeps the expired ones; the live one stays.
        let next = payload(2_000_000, unix_now() + 3600);
        assert_eq!(refused_for(&settle(&ledger, &next).await), None);
        assert_eq!(ledger.lock().used.len(), 2);
        assert!(!ledger.nonce_used(NETWORK, TOKEN, PAYER, short[0].authorization.nonce));
        assert!(ledger.nonce_used(NETWORK, TOKEN, PAYER, long.authorization.nonce));
        assert_eq!(
            refused_for(&settle(&ledger, &long).await),
            Some(reason::NONCE_USED)
        );
        assert_eq!(
            ledger.balance(NETWORK, TOKEN, SELLER),
            U256::from(short.len() + 2)
        );
    }
}
