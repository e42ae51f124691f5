//! The chain ledger: settles over JSON-RPC with alloy.

use std::{fmt, net::SocketAddr, time::Duration};

use alloy_network::{
    eip2718::Encodable2718, EthereumWallet, NetworkTransactionBuilder, TransactionBuilder,
};
use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_provider::{transport::RpcError, DynProvider, Provider, ProviderBuilder};
use alloy_rpc_client::ClientBuilder;
use alloy_rpc_types_eth::{TransactionReceipt, TransactionRequest};
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::{SolCall, SolEvent};
use async_trait::async_trait;
use reqwest::Url;
use tokio::sync::Mutex;

use super::{
    reason, transport::HttpTransport, Ledger, LedgerError, LedgerState, Permit2Transfer, Transfer,
    TransferOutcome,
};
use crate::{
    evm::{EXACT_PERMIT2_PROXY, PERMIT2_ADDRESS, UPTO_PERMIT2_PROXY},
    network,
};

mod broadcast;
mod redact;

pub(super) use self::redact::redact;
use self::{broadcast::*, redact::*};

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
/// A settlement estimates gas and fees (a node that refuses that, e.g. on a
/// revert, gives `success: false` with [`reason::TRANSACTION_FAILED`] and no
/// transaction: nothing was signed or sent), signs the transaction locally,
/// sends it with `eth_sendRawTransaction`, waits for the receipt and checks
/// its status (a mined revert gives [`reason::TRANSACTION_FAILED`] with the
/// transaction hash) and the token's `Transfer(from, to, value)` log.
/// Transactions are submitted one at a time (the account nonce is read from
/// the node's pending state under a lock), so concurrent settlements never
/// collide on the facilitator account's nonce; estimating and waiting for
/// receipts happen outside the lock.
///
/// Once a transaction may have been sent, the ledger never answers
/// "refused": a node's error that leaves open whether it (or a copy of it,
/// or another transaction with its nonce) is pending or mined ("already
/// known", "nonce too low", "replacement transaction underpriced", ...), no
/// answer at all, or no receipt within the
/// [receipt timeout](ChainLedger::receipt_timeout) is
/// [`LedgerError::SettlementUnknown`], which the facilitator's `settle`
/// answers as an error (the engine's 502 `settlement_unknown`, the payment
/// kept claimed). A node's error text goes to `tracing`, never into a
/// response.
///
/// The ledger serves the one chain its RPC endpoint reports.
///
/// # The RPC URL in logs and errors
///
/// Node URLs often carry an API key (in the path, the query or the
/// userinfo). With an `http://` or `https://` URL (or `localhost:PORT`, or a
/// bare `IP:PORT`, read as `http://`), the ledger talks to the node over its
/// own HTTP transport, which names the node as `scheme://host[:port]` only,
/// in its `tracing` spans and events (DEBUG and TRACE, target
/// `x402_core::local::transport`) and in its errors; userinfo is sent as
/// HTTP basic authentication. (alloy's HTTP transport, which it replaces,
/// records the full URL in a DEBUG span on every request.)
///
/// A `ws://` or `wss://` URL goes to alloy's own connection, which this
/// crate builds without WebSocket support: it is refused as
/// [`ChainLedgerError::InvalidUrl`] unless the application enables the
/// `ws` feature of `alloy-provider` itself. alloy's WebSocket transport
/// (`alloy-transport-ws`, as read at 2.4) puts no URL in its spans or
/// events, but its reconnect loop logs connection errors (at WARN and ERROR)
/// in the WebSocket library's words, which this crate cannot cut down (the
/// ledger's own errors still name the node by scheme and host only); prefer
/// `https://` for a URL that carries a secret.
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
    /// Signs settlements locally, so each one's hash is known before it is
    /// sent.
    wallet: EthereumWallet,
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

impl ChainLedger {
    /// Connects to the node at `rpc_url` (`http://` or `https://`; `ws://`
    /// and `wss://` only with alloy's WebSocket support enabled, see
    /// [the RPC URL in logs](ChainLedger#the-rpc-url-in-logs-and-errors))
    /// with the facilitator's `private_key` (`0x` and 64 hex digits) and
    /// reads the chain id.
    pub async fn new(rpc_url: &str, private_key: &str) -> Result<Self, ChainLedgerError> {
        let hex = private_key.trim();
        let hex = hex.strip_prefix("0x").unwrap_or(hex);
        let bytes: B256 = hex.parse().map_err(|_| ChainLedgerError::InvalidKey)?;
        let signer =
            PrivateKeySigner::from_bytes(&bytes).map_err(|_| ChainLedgerError::InvalidKey)?;
        let address = signer.address();
        let wallet = EthereumWallet::from(signer);
        let builder = ProviderBuilder::new()
            .disable_recommended_fillers()
            .with_gas_estimation()
            .with_simple_nonce_management()
            .fetch_chain_id()
            .wallet(wallet.clone());
        let provider = match http_url(rpc_url) {
            Some(url) => {
                let transport = HttpTransport::new(url).map_err(rpc)?;
                let is_local = transport.is_local();
                let client = ClientBuilder::default().transport(transport, is_local);
                builder.connect_client(client).erased()
            }
            // ws://, wss:// and the rest: alloy's own connection string.
            None => builder
                .connect(rpc_url)
                .await
                .map_err(|_| ChainLedgerError::InvalidUrl)?
                .erased(),
        };
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
            wallet,
            send: Mutex::new(()),
            receipt_timeout: DEFAULT_RECEIPT_TIMEOUT,
            permit2,
        })
    }

    /// Sets how long a settlement waits for its receipt (default 60 s). A
    /// sent transaction without a receipt by then is
    /// [`LedgerError::SettlementUnknown`]: it may still be mined.
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
                // The node's text, for logs: the facilitator never answers
                // with it.
                Some(payload) => Ok(Some(redact_urls(&payload.message))),
                None => Err(backend(e)),
            },
        }
    }

    /// Sends a settlement, waits for its receipt and checks that it emitted
    /// the `expected` transfer; a failure is refused with `failure`.
    ///
    /// Refused only while nothing can have been sent (estimating gas and
    /// fees, reading the nonce, or a broadcast the node refused for what the
    /// transaction is: see [`classify_broadcast_error`]), or when the
    /// receipt shows the tokens did not move. Once the transaction may have
    /// been sent and no receipt says what became of it, the outcome is
    /// [`LedgerError::SettlementUnknown`].
    async fn submit(
        &self,
        request: TransactionRequest,
        expected: ExpectedTransfer,
        failure: &'static str,
    ) -> Result<TransferOutcome, LedgerError> {
        // Gas and fees first, outside the lock: nothing is signed or sent
        // yet, so a node's refusal here (gas estimation reverted) certainly
        // moved nothing.
        let request = match self.with_gas_and_fees(request).await {
            Ok(request) => request,
            Err(e) => return not_sent(e, failure),
        };
        // One submission at a time: the nonce is the node's pending count,
        // which includes the previous submission once it is in the pool.
        let (hash, sent) = {
            let _guard = self.send.lock().await;
            let nonce = match self
                .provider
                .get_transaction_count(self.signer)
                .pending()
                .await
            {
                Ok(nonce) => nonce,
                Err(e) => return not_sent(e, failure),
            };
            let envelope = request
                .with_nonce(nonce)
                .with_chain_id(self.chain_id)
                .build(&self.wallet)
                .await
                .map_err(backend)?;
            let hash = *envelope.tx_hash();
            let sent = self
                .provider
                .send_raw_transaction(&envelope.encoded_2718())
                .await;
            (hash, sent)
        };
        let transaction = format!("{hash:#x}");
        if let Err(e) = sent {
            let verdict = e.as_error_resp().map(|payload| {
                let data = payload.data.as_ref().map_or("", |d| d.get());
                classify_broadcast_error(payload.code, &format!("{} {data}", payload.message))
            });
            let failure_text = RpcFailure::new(&e);
            if verdict == Some(Broadcast::Refused) {
                return Ok(TransferOutcome::Refused {
                    reason: failure.to_owned(),
                    message: Some(failure_text.0),
                    transaction: None,
                });
            }
            // An answer that leaves open whether this transaction (or a copy
            // of it, sent by a proxy retrying a lost answer) is pending or
            // mined, or no answer at all. A receipt would settle the
            // question; without one the outcome is unknown.
            match self.provider.get_transaction_receipt(hash).await {
                Ok(Some(receipt)) => {
                    tracing::info!(
                        transaction = %transaction,
                        error = %failure_text,
                        "x402: the node answered the settlement with an error, but the transaction is mined"
                    );
                    return Ok(check_receipt(&receipt, &expected, failure, transaction));
                }
                Ok(None) | Err(_) => {
                    return Err(LedgerError::SettlementUnknown {
                        transaction: Some(transaction),
                        source: Box::new(failure_text),
                    })
                }
            }
        }
        let receipt = self.wait_for_receipt(hash, &transaction).await?;
        Ok(check_receipt(&receipt, &expected, failure, transaction))
    }

    /// `request` with its gas limit (`eth_estimateGas`, which dry-runs it)
    /// and fees (EIP-1559 from `eth_feeHistory`, or the legacy gas price on a
    /// chain without a base fee).
    async fn with_gas_and_fees(
        &self,
        request: TransactionRequest,
    ) -> Result<TransactionRequest, alloy_provider::transport::TransportError> {
        let gas = self.provider.estimate_gas(request.clone()).await?;
        let request = request.with_gas_limit(gas);
        Ok(match self.provider.estimate_eip1559_fees().await {
            Ok(fees) => request
                .with_max_fee_per_gas(fees.max_fee_per_gas)
                .with_max_priority_fee_per_gas(fees.max_priority_fee_per_gas),
            Err(RpcError::UnsupportedFeature(_)) => {
                request.with_gas_price(self.provider.get_gas_price().await?)
            }
            Err(e) => return Err(e),
        })
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

    /// Polls for the receipt of a sent transaction until the receipt
    /// timeout. A node error while polling is retried; no receipt by the
    /// deadline is [`LedgerError::SettlementUnknown`]: the transaction may
    /// still be mined.
    async fn wait_for_receipt(
        &self,
        hash: B256,
        transaction: &str,
    ) -> Result<TransactionReceipt, LedgerError> {
        let deadline = tokio::time::Instant::now() + self.receipt_timeout;
        let mut last_error = None;
        loop {
            match self.provider.get_transaction_receipt(hash).await {
                Ok(Some(receipt)) => return Ok(receipt),
                Ok(None) => {}
                Err(e) => last_error = Some(RpcFailure::new(&e)),
            }
            if tokio::time::Instant::now() >= deadline {
                let timeout = self.receipt_timeout;
                let why = match last_error {
                    Some(e) => format!("no receipt within {timeout:?}; last error: {e}"),
                    None => format!("no receipt within {timeout:?}"),
                };
                return Err(LedgerError::SettlementUnknown {
                    transaction: Some(transaction.to_owned()),
                    source: why.into(),
                });
            }
            tokio::time::sleep(RECEIPT_POLL).await;
        }
    }
}

/// A refusal for an error met before anything was sent: an answer from the
/// node (say, gas estimation reverted) is a refusal with its message (kept
/// for logs, never sent to the buyer); no answer is a backend error.
fn not_sent(
    e: alloy_provider::transport::TransportError,
    failure: &'static str,
) -> Result<TransferOutcome, LedgerError> {
    if e.as_error_resp().is_some() {
        Ok(TransferOutcome::Refused {
            reason: failure.to_owned(),
            message: Some(RpcFailure::new(&e).0),
            transaction: None,
        })
    } else {
        Err(backend(e))
    }
}

/// The outcome a mined settlement's receipt shows: settled when it succeeded
/// and emitted the `expected` transfer, else refused with `failure` and the
/// transaction hash.
fn check_receipt(
    receipt: &TransactionReceipt,
    expected: &ExpectedTransfer,
    failure: &'static str,
    transaction: String,
) -> TransferOutcome {
    if !receipt.status() {
        return TransferOutcome::Refused {
            reason: failure.to_owned(),
            message: Some("the settlement transaction reverted".to_owned()),
            transaction: Some(transaction),
        };
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
        return TransferOutcome::Refused {
            reason: failure.to_owned(),
            message: Some("the transaction emitted no matching Transfer event".to_owned()),
            transaction: Some(transaction),
        };
    }
    TransferOutcome::Settled { transaction }
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

    /// `eth_getBalance` of the signer (latest block).
    async fn gas_balance(&self) -> Result<Option<U256>, LedgerError> {
        let balance = self
            .provider
            .get_balance(self.signer)
            .await
            .map_err(backend)?;
        Ok(Some(balance))
    }
}

#[cfg(test)]
mod tests;
