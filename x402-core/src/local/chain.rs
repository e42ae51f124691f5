//! The chain ledger: settles over JSON-RPC with alloy.

use std::{fmt, time::Duration};

use alloy_network::{EthereumWallet, TransactionBuilder};
use alloy_primitives::{Address, Bytes, B256};
use alloy_provider::{DynProvider, Provider, ProviderBuilder};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolEvent};
use async_trait::async_trait;
use tokio::sync::Mutex;

use super::{reason, Ledger, LedgerError, LedgerState, Transfer, TransferOutcome};
use crate::network;

mod sol {
    alloy_sol_types::sol! {
        function balanceOf(address account) external view returns (uint256);
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function transferWithAuthorization(
            address from,
            address to,
            uint256 value,
            uint256 validAfter,
            uint256 validBefore,
            bytes32 nonce,
            uint8 v,
            bytes32 r,
            bytes32 s
        ) external;
        event Transfer(address indexed from, address indexed to, uint256 value);
    }
}

/// The default time to wait for a settlement's receipt.
const DEFAULT_RECEIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the receipt is polled.
const RECEIPT_POLL: Duration = Duration::from_millis(100);

/// A ledger on an EVM chain, over JSON-RPC: reads `balanceOf` and
/// `authorizationState` from the token, and settles by sending
/// `transferWithAuthorization(from, to, value, validAfter, validBefore, nonce,
/// v, r, s)` from the facilitator's key, which pays the gas.
///
/// `verify` also dry-runs the transfer with `eth_call` from the facilitator's
/// address, so a payment the token would refuse (say, signed for an EIP-712
/// name the token does not have) is invalid before any gas is spent.
///
/// A settlement estimates gas (a node that refuses it, e.g. on a revert,
/// gives `success: false` with [`reason::TRANSACTION_FAILED`], the node's
/// message and no transaction), sends, waits for the receipt and checks its
/// status (a mined revert gives [`reason::TRANSACTION_FAILED`] with the
/// transaction hash) and the token's `Transfer(from, to, value)` log. Transactions are submitted one at a time
/// (the account nonce is read from the node's pending state under a lock), so
/// concurrent settlements never collide on the facilitator account's nonce;
/// waiting for receipts happens outside the lock.
///
/// The ledger serves the one chain its RPC endpoint reports.
///
/// ```no_run
/// use x402_core::local::{ChainLedger, LocalFacilitator};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let key = std::env::var("FACILITATOR_KEY")?; // never hard-code a key
/// let ledger = ChainLedger::new("http://127.0.0.1:8545", &key).await?;
/// let facilitator = LocalFacilitator::builder(ledger).network("eip155:84532").build()?;
/// # let _ = facilitator; Ok(()) }
/// ```
pub struct ChainLedger {
    provider: DynProvider,
    signer: Address,
    chain_id: u64,
    /// Scheme and host of the RPC URL (the path may carry an API key).
    endpoint: String,
    send: Mutex<()>,
    receipt_timeout: Duration,
}

impl fmt::Debug for ChainLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainLedger")
            .field("endpoint", &self.endpoint)
            .field("chain_id", &self.chain_id)
            .field("signer", &self.signer)
            .field("receipt_timeout", &self.receipt_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a [`ChainLedger`] could not be created.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainLedgerError {
    /// The private key is not 32 bytes of hex or not a valid secp256k1 key.
    /// (The key itself is never part of the message.)
    #[error("the facilitator private key is not a valid secp256k1 key (0x and 64 hex digits)")]
    InvalidKey,
    /// The RPC URL is not usable.
    #[error("invalid RPC URL")]
    InvalidUrl,
    /// The node could not be reached or did not report its chain id.
    #[error("could not read the chain id from the RPC endpoint")]
    Rpc(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// `scheme://host[:port]` of a URL, without path, query or credentials.
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = host.rsplit('@').next().unwrap_or("");
    format!("{scheme}://{host}")
}

fn backend(e: impl std::error::Error + Send + Sync + 'static) -> LedgerError {
    LedgerError::Backend(Box::new(e))
}

impl ChainLedger {
    /// Connects to the node at `rpc_url` (http, https or ws) with the
    /// facilitator's `private_key` (`0x` and 64 hex digits) and reads the
    /// chain id.
    pub async fn new(rpc_url: &str, private_key: &str) -> Result<Self, ChainLedgerError> {
        let hex = private_key.trim();
        let hex = hex.strip_prefix("0x").unwrap_or(hex);
        let bytes: B256 = hex.parse().map_err(|_| ChainLedgerError::InvalidKey)?;
        let signer =
            PrivateKeySigner::from_bytes(&bytes).map_err(|_| ChainLedgerError::InvalidKey)?;
        let address = signer.address();
        let provider = ProviderBuilder::new()
            .disable_recommended_fillers()
            .with_gas_estimation()
            .with_simple_nonce_management()
            .fetch_chain_id()
            .wallet(EthereumWallet::from(signer))
            .connect(rpc_url)
            .await
            .map_err(|_| ChainLedgerError::InvalidUrl)?
            .erased();
        let chain_id = provider
            .get_chain_id()
            .await
            .map_err(|e| ChainLedgerError::Rpc(Box::new(e)))?;
        Ok(Self {
            provider,
            signer: address,
            chain_id,
            endpoint: redact(rpc_url),
            send: Mutex::new(()),
            receipt_timeout: DEFAULT_RECEIPT_TIMEOUT,
        })
    }

    /// Sets how long a settlement waits for its receipt (default 60 s).
    #[must_use]
    pub fn receipt_timeout(mut self, timeout: Duration) -> Self {
        self.receipt_timeout = timeout;
        self
    }

    /// The chain id the RPC endpoint reported.
    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    /// The provider, to read the chain (`eth_call`, receipts) with the same
    /// connection.
    pub fn provider(&self) -> &DynProvider {
        &self.provider
    }

    fn check_chain(&self, t: &Transfer<'_>) -> Result<(), LedgerError> {
        if t.chain_id == self.chain_id {
            Ok(())
        } else {
            Err(LedgerError::UnsupportedNetwork {
                network: t.network.to_owned(),
                why: format!("the RPC endpoint serves chain id {}", self.chain_id),
            })
        }
    }

    async fn call<C: SolCall>(&self, to: Address, call: &C) -> Result<C::Return, LedgerError> {
        let request = TransactionRequest::default()
            .with_to(to)
            .with_input(Bytes::from(call.abi_encode()));
        let out = self.provider.call(request).await.map_err(backend)?;
        C::abi_decode_returns(&out).map_err(backend)
    }

    /// The `transferWithAuthorization(..., v, r, s)` transaction of a
    /// transfer; `None` when the signature is not 65 bytes.
    fn settle_request(&self, t: &Transfer<'_>) -> Option<TransactionRequest> {
        let auth = &t.payload.authorization;
        let sig = t.payload.signature.as_ref();
        let (Some(r), Some(s), Some(&v), None) =
            (sig.get(..32), sig.get(32..64), sig.get(64), sig.get(65))
        else {
            return None;
        };
        let v = if v < 27 { v + 27 } else { v };
        let call = sol::transferWithAuthorizationCall {
            from: auth.from,
            to: auth.to,
            value: auth.value.get(),
            validAfter: auth.valid_after,
            validBefore: auth.valid_before,
            nonce: auth.nonce,
            v,
            r: B256::from_slice(r),
            s: B256::from_slice(s),
        };
        Some(
            TransactionRequest::default()
                .with_from(self.signer)
                .with_to(t.asset)
                .with_input(Bytes::from(call.abi_encode())),
        )
    }

    async fn wait_for_receipt(
        &self,
        hash: B256,
    ) -> Result<alloy_rpc_types_eth::TransactionReceipt, LedgerError> {
        let deadline = tokio::time::Instant::now() + self.receipt_timeout;
        loop {
            if let Some(receipt) = self
                .provider
                .get_transaction_receipt(hash)
                .await
                .map_err(backend)?
            {
                return Ok(receipt);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LedgerError::Backend(
                    format!("no receipt for transaction {hash:#x} within the timeout").into(),
                ));
            }
            tokio::time::sleep(RECEIPT_POLL).await;
        }
    }
}

#[async_trait]
impl Ledger for ChainLedger {
    fn signer(&self) -> Address {
        self.signer
    }

    fn check_network(&self, network: &str) -> Result<(), LedgerError> {
        match network::evm_chain_id(network) {
            Some(id) if id == self.chain_id => Ok(()),
            _ => Err(LedgerError::UnsupportedNetwork {
                network: network.to_owned(),
                why: format!("the RPC endpoint serves chain id {}", self.chain_id),
            }),
        }
    }

    async fn state(&self, t: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
        self.check_chain(t)?;
        let balance = self
            .call(t.asset, &sol::balanceOfCall { account: t.from() })
            .await?;
        let nonce_used = self
            .call(
                t.asset,
                &sol::authorizationStateCall {
                    authorizer: t.from(),
                    nonce: t.nonce(),
                },
            )
            .await?;
        Ok(LedgerState::new(nonce_used, balance))
    }

    async fn simulate(&self, t: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        self.check_chain(t)?;
        let Some(request) = self.settle_request(t) else {
            return Ok(Some("the signature is not 65 bytes".to_owned()));
        };
        match self.provider.call(request).await {
            Ok(_) => Ok(None),
            Err(e) => match e.as_error_resp() {
                Some(payload) => Ok(Some(payload.message.to_string())),
                None => Err(backend(e)),
            },
        }
    }

    async fn transfer(&self, t: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        self.check_chain(t)?;
        let auth = &t.payload.authorization;
        let Some(request) = self.settle_request(t) else {
            return Ok(TransferOutcome::refused(reason::SIGNATURE));
        };

        // One submission at a time: the nonce filler reads the pending nonce,
        // which includes the previous submission once it is in the pool.
        let sent = {
            let _guard = self.send.lock().await;
            self.provider.send_transaction(request).await
        };
        let hash = match sent {
            Ok(pending) => *pending.tx_hash(),
            Err(e) => {
                return match e.as_error_resp() {
                    // The node refused it (gas estimation reverted): a business
                    // failure, no transaction was sent.
                    Some(payload) => Ok(TransferOutcome::Refused {
                        reason: reason::TRANSACTION_FAILED.to_owned(),
                        message: Some(payload.message.to_string()),
                        transaction: None,
                    }),
                    None => Err(backend(e)),
                };
            }
        };
        let receipt = self.wait_for_receipt(hash).await?;
        let transaction = format!("{hash:#x}");
        if !receipt.status() {
            return Ok(TransferOutcome::Refused {
                reason: reason::TRANSACTION_FAILED.to_owned(),
                message: Some("the settlement transaction reverted".to_owned()),
                transaction: Some(transaction),
            });
        }
        let moved = receipt.inner.logs().iter().any(|log| {
            log.address() == t.asset
                && sol::Transfer::decode_log(&log.inner).is_ok_and(|event| {
                    event.from == auth.from
                        && event.to == auth.to
                        && event.value == auth.value.get()
                })
        });
        if !moved {
            return Ok(TransferOutcome::Refused {
                reason: reason::TRANSACTION_FAILED.to_owned(),
                message: Some("the transaction emitted no matching Transfer event".to_owned()),
                transaction: Some(transaction),
            });
        }
        Ok(TransferOutcome::Settled { transaction })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_drops_path_and_credentials() {
        assert_eq!(
            redact("https://user:pw@rpc.example/v2/SECRETKEY?x=1"),
            "https://rpc.example"
        );
        assert_eq!(redact("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
    }
}
