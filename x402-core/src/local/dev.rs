//! The in-memory dev ledger.

use std::{
    collections::{HashMap, HashSet},
    sync::{Mutex, MutexGuard},
};

use alloy_primitives::{address, keccak256, Address, B256, U256};
use async_trait::async_trait;

use super::{reason, Ledger, LedgerError, LedgerState, Permit2Transfer, Transfer, TransferOutcome};
use crate::{money::AtomicAmount, network};

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
    /// EIP-3009 nonces, per token.
    used: HashSet<NonceKey>,
    /// Permit2 nonces, per owner (kept apart from EIP-3009's).
    permit2_used: HashSet<Permit2NonceKey>,
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
        self.lock().used.contains(&(network, asset, from, nonce))
    }

    /// Whether `owner` has spent the Permit2 `nonce` on `network`.
    pub fn permit2_nonce_used(&self, network: &str, owner: Address, nonce: U256) -> bool {
        let Ok(network) = dev_network(network) else {
            return false;
        };
        self.lock().permit2_used.contains(&(network, owner, nonce))
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
            .contains(&(network.clone(), t.asset, t.from(), t.nonce()));
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

        let mut state = self.lock();
        if state.used.contains(&nonce_key) {
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
        state.used.insert(nonce_key);
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
            .contains(&(network.clone(), t.from(), t.nonce()));
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

        let mut state = self.lock();
        if state.permit2_used.contains(&nonce_key) {
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
        state.permit2_used.insert(nonce_key);
        drop(state);
        Ok(TransferOutcome::Settled {
            transaction: Self::permit2_transaction_id(&network, from, t.nonce()),
        })
    }
}
