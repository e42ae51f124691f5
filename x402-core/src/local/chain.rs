//! The chain ledger: settles over JSON-RPC with alloy.

use std::{fmt, time::Duration};

use alloy_network::{EthereumWallet, TransactionBuilder};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_provider::{DynProvider, Provider, ProviderBuilder};
use alloy_rpc_types_eth::TransactionRequest;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolEvent};
use async_trait::async_trait;
use tokio::sync::Mutex;

use super::{reason, Ledger, LedgerError, LedgerState, Permit2Transfer, Transfer, TransferOutcome};
use crate::{
    evm::{EXACT_PERMIT2_PROXY, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY},
    network,
};

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
        function allowance(address owner, address spender) external view returns (uint256);
        function nonceBitmap(address owner, uint256 word) external view returns (uint256);
    }
}

/// `x402UptoPermit2Proxy.settle` (with Permit2's `PermitTransferFrom`).
mod upto_proxy {
    alloy_sol_types::sol! {
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        struct PermitTransferFrom {
            TokenPermissions permitted;
            uint256 nonce;
            uint256 deadline;
        }

        struct Witness {
            address to;
            address facilitator;
            uint256 validAfter;
        }

        function settle(
            PermitTransferFrom permit,
            uint256 amount,
            address owner,
            Witness witness,
            bytes signature
        ) external;
    }
}

/// `x402ExactPermit2Proxy.settle` (with Permit2's `PermitTransferFrom`).
mod exact_proxy {
    alloy_sol_types::sol! {
        struct TokenPermissions {
            address token;
            uint256 amount;
        }

        struct PermitTransferFrom {
            TokenPermissions permitted;
            uint256 nonce;
            uint256 deadline;
        }

        struct Witness {
            address to;
            uint256 validAfter;
        }

        function settle(
            PermitTransferFrom permit,
            address owner,
            Witness witness,
            bytes signature
        ) external;
    }
}

/// Which of Permit2 and the x402 proxies have code on the chain (read when
/// the ledger is created).
#[derive(Debug, Clone, Copy, Default)]
struct Permit2Deployment {
    permit2: bool,
    exact_proxy: bool,
    upto_proxy: bool,
}

/// The transfer a settlement must emit, as the token's `Transfer` event.
struct ExpectedTransfer {
    token: Address,
    from: Address,
    to: Address,
    value: U256,
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
/// It also settles Permit2 witness transfers (`upto`, and `exact` over
/// Permit2) when Permit2 has code at its canonical address
/// ([`PERMIT2_ADDRESS`]) on the chain when the ledger is created: it reads the
/// owner's Permit2 nonce bitmap, balance and allowance to Permit2, and
/// settles by calling the scheme's x402 proxy (`settle(permit, amount, owner,
/// witness, signature)` on [`UPTO_PERMIT2_PROXY`], `settle(permit, owner,
/// witness, signature)` on [`EXACT_PERMIT2_PROXY`]) from the facilitator's
/// key, which must be the `upto` witness's facilitator. A proxy without code
/// is refused with [`reason::PERMIT2_PROXY_NOT_DEPLOYED`].
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
    permit2: Permit2Deployment,
}

impl fmt::Debug for ChainLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChainLedger")
            .field("endpoint", &self.endpoint)
            .field("chain_id", &self.chain_id)
            .field("signer", &self.signer)
            .field("receipt_timeout", &self.receipt_timeout)
            .field("permit2", &self.permit2)
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
    /// The node could not be reached or did not report its chain id. (Its
    /// source names the endpoint by scheme and host only.)
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

/// `text` with every URL in it (`scheme://` up to a space, quote, bracket or
/// comma) cut down by [`redact`].
fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        // The scheme's characters are ASCII, so their count is their length.
        let scheme = rest[..at]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .count();
        let start = at - scheme;
        let end = rest[at..]
            .find(|c: char| c.is_whitespace() || "\"'()<>[]{},".contains(c))
            .map_or(rest.len(), |i| at + i);
        out.push_str(&rest[..start]);
        out.push_str(&redact(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A node's error as text, its sources included, with every URL cut to
/// `scheme://host[:port]`: node URLs often carry an API key in their path or
/// query, and the transport's errors name the URL they failed on.
#[derive(Debug)]
struct RpcFailure(String);

impl RpcFailure {
    fn new(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut text = error.to_string();
        let mut source = error.source();
        while let Some(e) = source {
            // Many errors repeat their source's message in their own.
            let message = e.to_string();
            if !text.contains(&message) {
                text.push_str(": ");
                text.push_str(&message);
            }
            source = e.source();
        }
        Self(redact_urls(&text))
    }
}

impl fmt::Display for RpcFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RpcFailure {}

fn backend(e: impl std::error::Error + 'static) -> LedgerError {
    LedgerError::Backend(Box::new(RpcFailure::new(&e)))
}

fn rpc(e: impl std::error::Error + 'static) -> ChainLedgerError {
    ChainLedgerError::Rpc(Box::new(RpcFailure::new(&e)))
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
        let chain_id = provider.get_chain_id().await.map_err(rpc)?;
        let has_code = |address: Address| {
            let provider = provider.clone();
            async move {
                provider
                    .get_code_at(address)
                    .await
                    .map(|code| !code.is_empty())
                    .map_err(rpc)
            }
        };
        let permit2 = Permit2Deployment {
            permit2: has_code(PERMIT2_ADDRESS).await?,
            exact_proxy: has_code(EXACT_PERMIT2_PROXY).await?,
            upto_proxy: has_code(UPTO_PERMIT2_PROXY).await?,
        };
        Ok(Self {
            provider,
            signer: address,
            chain_id,
            endpoint: redact(rpc_url),
            send: Mutex::new(()),
            receipt_timeout: DEFAULT_RECEIPT_TIMEOUT,
            permit2,
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
        self.check_chain_id(t.network, t.chain_id)
    }

    fn check_chain_id(&self, network: &str, chain_id: u64) -> Result<(), LedgerError> {
        if chain_id == self.chain_id {
            Ok(())
        } else {
            Err(LedgerError::UnsupportedNetwork {
                network: network.to_owned(),
                why: format!("the RPC endpoint serves chain id {}", self.chain_id),
            })
        }
    }

    /// The proxy's `settle` transaction of a Permit2 transfer; `Err` with a
    /// reason code when the proxy has no code.
    fn permit2_settle_request(
        &self,
        t: &Permit2Transfer<'_>,
    ) -> Result<TransactionRequest, &'static str> {
        let auth = &t.payload.permit2_authorization;
        let (token, amount) = (auth.permitted.token, auth.permitted.amount.get());
        let signature = t.payload.signature.clone();
        let (proxy, input) = match auth.witness.facilitator {
            Some(facilitator) => {
                if !self.permit2.upto_proxy {
                    return Err(reason::PERMIT2_PROXY_NOT_DEPLOYED);
                }
                let call = upto_proxy::settleCall {
                    permit: upto_proxy::PermitTransferFrom {
                        permitted: upto_proxy::TokenPermissions { token, amount },
                        nonce: auth.nonce,
                        deadline: auth.deadline,
                    },
                    amount: t.amount,
                    owner: auth.from,
                    witness: upto_proxy::Witness {
                        to: auth.witness.to,
                        facilitator,
                        validAfter: auth.witness.valid_after,
                    },
                    signature,
                };
                (UPTO_PERMIT2_PROXY, call.abi_encode())
            }
            None => {
                if !self.permit2.exact_proxy {
                    return Err(reason::PERMIT2_PROXY_NOT_DEPLOYED);
                }
                let call = exact_proxy::settleCall {
                    permit: exact_proxy::PermitTransferFrom {
                        permitted: exact_proxy::TokenPermissions { token, amount },
                        nonce: auth.nonce,
                        deadline: auth.deadline,
                    },
                    owner: auth.from,
                    witness: exact_proxy::Witness {
                        to: auth.witness.to,
                        validAfter: auth.witness.valid_after,
                    },
                    signature,
                };
                (EXACT_PERMIT2_PROXY, call.abi_encode())
            }
        };
        Ok(TransactionRequest::default()
            .with_from(self.signer)
            .with_to(proxy)
            .with_input(Bytes::from(input)))
    }

    /// Dry-runs `request` with `eth_call`: `Some(message)` when it reverts.
    async fn dry_run(&self, request: TransactionRequest) -> Result<Option<String>, LedgerError> {
        match self.provider.call(request).await {
            Ok(_) => Ok(None),
            Err(e) => match e.as_error_resp() {
                Some(payload) => Ok(Some(payload.message.to_string())),
                None => Err(backend(e)),
            },
        }
    }

    /// Sends a settlement, waits for its receipt and checks that it emitted
    /// the `expected` transfer; a failure is refused with `failure`.
    async fn submit(
        &self,
        request: TransactionRequest,
        expected: ExpectedTransfer,
        failure: &'static str,
    ) -> Result<TransferOutcome, LedgerError> {
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
                        reason: failure.to_owned(),
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
                reason: failure.to_owned(),
                message: Some("the settlement transaction reverted".to_owned()),
                transaction: Some(transaction),
            });
        }
        let moved = receipt.inner.logs().iter().any(|log| {
            log.address() == expected.token
                && sol::Transfer::decode_log(&log.inner).is_ok_and(|event| {
                    event.from == expected.from
                        && event.to == expected.to
                        && event.value == expected.value
                })
        });
        if !moved {
            return Ok(TransferOutcome::Refused {
                reason: failure.to_owned(),
                message: Some("the transaction emitted no matching Transfer event".to_owned()),
                transaction: Some(transaction),
            });
        }
        Ok(TransferOutcome::Settled { transaction })
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
        self.dry_run(request).await
    }

    async fn transfer(&self, t: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        self.check_chain(t)?;
        let auth = &t.payload.authorization;
        let Some(request) = self.settle_request(t) else {
            return Ok(TransferOutcome::refused(reason::SIGNATURE));
        };
        let expected = ExpectedTransfer {
            token: t.asset,
            from: auth.from,
            to: auth.to,
            value: auth.value.get(),
        };
        self.submit(request, expected, reason::TRANSACTION_FAILED)
            .await
    }

    fn supports_permit2(&self) -> bool {
        self.permit2.permit2
    }

    async fn permit2_state(&self, t: &Permit2Transfer<'_>) -> Result<LedgerState, LedgerError> {
        self.check_chain_id(t.network, t.chain_id)?;
        let balance = self
            .call(t.token(), &sol::balanceOfCall { account: t.from() })
            .await?;
        let allowance = self
            .call(
                t.token(),
                &sol::allowanceCall {
                    owner: t.from(),
                    spender: PERMIT2_ADDRESS,
                },
            )
            .await?;
        // Permit2's unordered nonces: bit `nonce & 0xff` of word `nonce >> 8`.
        let nonce = t.nonce();
        let bitmap = self
            .call(
                PERMIT2_ADDRESS,
                &sol::nonceBitmapCall {
                    owner: t.from(),
                    word: nonce >> 8usize,
                },
            )
            .await?;
        let bit = U256::from(1u8) << usize::from(nonce.byte(0));
        let nonce_used = bitmap & bit != U256::ZERO;
        Ok(LedgerState::new(nonce_used, balance).with_permit2_allowance(allowance))
    }

    async fn permit2_simulate(
        &self,
        t: &Permit2Transfer<'_>,
    ) -> Result<Option<String>, LedgerError> {
        self.check_chain_id(t.network, t.chain_id)?;
        match self.permit2_settle_request(t) {
            Ok(request) => self.dry_run(request).await,
            Err(reason) => Ok(Some(reason.to_owned())),
        }
    }

    async fn permit2_transfer(
        &self,
        t: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        self.check_chain_id(t.network, t.chain_id)?;
        let request = match self.permit2_settle_request(t) {
            Ok(request) => request,
            Err(reason) => return Ok(TransferOutcome::refused(reason)),
        };
        let expected = ExpectedTransfer {
            token: t.token(),
            from: t.from(),
            to: t.to(),
            value: t.amount,
        };
        let failure = if t.is_upto() {
            reason::UPTO_TRANSACTION_FAILED
        } else {
            reason::TRANSACTION_FAILED
        };
        self.submit(request, expected, failure).await
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

    #[test]
    fn urls_in_error_text_lose_path_query_and_credentials() {
        assert_eq!(
            redact_urls(
                "error sending request for url (https://base.example/v2/SECRETKEY?k=1): \
                 see wss://u:SECRET@node.example:8546/ws, or <http://x.example/a>"
            ),
            "error sending request for url (https://base.example): \
             see wss://node.example:8546, or <http://x.example>"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
        assert_eq!(redact_urls("ends with ://"), "ends with ://");
    }

    #[tokio::test]
    async fn node_errors_never_show_the_rpc_url_path() {
        // Nothing listens on port 1: the connection is refused.
        let url = "http://127.0.0.1:1/v2/SECRETKEY?apikey=SECRETQUERY";
        let key = "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d";
        let Err(error) = ChainLedger::new(url, key).await else {
            panic!("a node on port 1 answered");
        };
        let mut chain = format!("{error} {error:?}");
        let mut source = std::error::Error::source(&error);
        while let Some(e) = source {
            chain.push_str(&format!(" {e} {e:?}"));
            source = e.source();
        }
        assert!(!chain.contains("SECRET"), "{chain}");
        assert!(chain.contains("127.0.0.1:1"), "{chain}");
    }
}
