//! The upstream `batch-settlement` scheme on EVM, seller side: the buyer
//! deposits into an escrow channel once, then signs a cumulative voucher per
//! request; the seller checks each voucher with a signature check and claims
//! the latest ones on chain in batches.
//!
//! A route offers it with [`Offer::batch_settlement`] (v2 only; the
//! challenge carries `extra.receiverAuthorizer`, `extra.withdrawDelay`, the
//! token's EIP-712 `name`/`version` and, for Permit2 tokens,
//! `assetTransferMethod`). The `amount` is the per-request ceiling; the
//! handler reports what a call cost through the same
//! [`Meter`](crate::meter::Meter) and `Settlement-Overrides` header as
//! `upto`, and is charged that (the ceiling when it reports nothing).
//!
//! ```
//! use alloy_primitives::address;
//! use x402_core::{batch::BatchSettlement, route::Route, Engine, Offer};
//! # use x402_core::testing::StandIn;
//!
//! let authorizer = address!("00000000000000000000000000000000000a11ce");
//! let engine = Engine::builder(StandIn::new())
//!     .batch_settlement(BatchSettlement::in_memory())
//!     .route(Route::get("/batch").offer(
//!         Offer::batch_settlement(
//!             "eip155:84532",
//!             "1000",
//!             "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!             Some(authorizer),
//!         )
//!         .withdraw_delay(900),
//!     ))
//!     .build()?;
//! # let _ = engine;
//! # Ok::<(), x402_core::engine::ConfigError>(())
//! ```
//!
//! # What the engine does per request
//!
//! Requests on one channel are serialised: a request holds the channel
//! (a `pending` mark in its [record](ChannelRecord), in the
//! [store](ChannelStore), so across instances too) from before its voucher
//! is checked until its handler's outcome is recorded; another request on
//! the channel waits for it (up to [`BatchSettlement::busy_wait`]), then is
//! checked against the new count, so no two handlers charge against the
//! same cumulative amount.
//!
//! - `voucher` / `deposit`: `maxClaimableAmount` must equal
//!   `chargedCumulativeAmount + amount`, else the corrective 402
//!   (`invalid_batch_settlement_evm_cumulative_amount_mismatch`, the
//!   channel's `channelState` and the latest `voucherState` in the batch
//!   row's `extra`). A plain EOA voucher on a channel whose mirrored chain
//!   state is fresh ([`BatchSettlement::onchain_ttl`]) is verified in
//!   process (EIP-712 recovery, at most the balance, above the claimed
//!   total); anything else goes to the facilitator's `/verify`. Deposits
//!   are settled through the facilitator after the handler succeeded.
//! - The charge is committed only after the handler succeeded; a failed
//!   handler (status 400 or more) changes nothing, and the buyer can send
//!   the same voucher again.
//! - `refund`: verified by the facilitator, the handler is skipped, and the
//!   refund (with the claim of the latest voucher, and the receiver
//!   authorizer's signatures when the seller holds that key) is settled at
//!   once.
//!
//! Receipts follow the spec's payment response contract: voucher calls get
//! `transaction: ""`, `amount: ""`, `extra.chargedAmount` and
//! `extra.channelState`.
//!
//! After-verify hooks (the replay claim among them) do not run for
//! batch-settlement payments: vouchers are cumulative, and the channel's
//! count is their replay protection.
//!
//! The [`Claimer`] claims the latest vouchers of many channels in one
//! `claimWithSignature` and settles them to the receiver.

use std::{fmt, sync::Arc, time::Duration};

use alloy_primitives::{Address, Bytes, B256};
use serde_json::Value;

use crate::route::{IntoPrice, Offer};

mod channel;
mod claimer;
pub mod eip712;
mod payload;
pub mod reason;
pub mod store;
pub mod verify;

pub use self::channel::{ChannelRecord, ClaimMark, OnchainState, Pending};
pub(crate) use self::claimer::refund_payload;
pub use self::claimer::{ClaimError, ClaimReport, Claimer, RefundReport};
pub use self::eip712::BATCH_SETTLEMENT_ADDRESS;
pub use self::payload::{BatchPayload, ChannelConfig, Voucher};
#[cfg(feature = "redis")]
pub use self::store::RedisChannelStore;
pub(crate) use self::store::{update, Change};
pub use self::store::{ChannelStore, ChannelStoreError, MemoryChannelStore};

/// The scheme's name.
pub const BATCH_SETTLEMENT: &str = "batch-settlement";
/// The shortest withdraw delay the contract takes (15 minutes).
pub const MIN_WITHDRAW_DELAY: u64 = 900;
/// The longest withdraw delay the contract takes (30 days).
pub const MAX_WITHDRAW_DELAY: u64 = 2_592_000;

/// Signs as the channel's receiver authorizer: claim batches and refunds.
///
/// The key is the seller's (or, when the seller delegates, it stays with the
/// facilitator and no signer is configured). Implementations must never log
/// the key.
#[async_trait::async_trait]
pub trait AuthorizerSigner: Send + Sync + 'static {
    /// The authorizer's address.
    fn address(&self) -> Address;
    /// Signs an EIP-712 digest: 65 bytes `r || s || v`.
    async fn sign_digest(&self, digest: B256) -> Result<Bytes, SignerError>;
}

/// Why a digest could not be signed.
#[derive(Debug, thiserror::Error)]
#[error("the receiver authorizer could not sign: {0}")]
pub struct SignerError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

#[cfg(feature = "batch-signer")]
#[async_trait::async_trait]
impl AuthorizerSigner for alloy_signer_local::PrivateKeySigner {
    fn address(&self) -> Address {
        alloy_signer::Signer::address(self)
    }

    async fn sign_digest(&self, digest: B256) -> Result<Bytes, SignerError> {
        let signature = alloy_signer::SignerSync::sign_hash_sync(self, &digest)
            .map_err(|e| SignerError(Box::new(e)))?;
        Ok(Bytes::from(signature.as_bytes().to_vec()))
    }
}

/// The engine's batch-settlement state: where channels live, how long
/// mirrored chain state is trusted, and the receiver authorizer's signer
/// when the seller holds that key.
#[derive(Clone)]
pub struct BatchSettlement {
    pub(crate) store: Arc<dyn ChannelStore>,
    pub(crate) signer: Option<Arc<dyn AuthorizerSigner>>,
    pub(crate) onchain_ttl: Duration,
    pub(crate) busy_wait: Duration,
    pub(crate) contract: Address,
}

impl fmt::Debug for BatchSettlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The signer's address only: never the key.
        f.debug_struct("BatchSettlement")
            .field("authorizer", &self.signer.as_ref().map(|s| s.address()))
            .field("onchain_ttl", &self.onchain_ttl)
            .field("busy_wait", &self.busy_wait)
            .field("contract", &self.contract)
            .finish_non_exhaustive()
    }
}

impl Default for BatchSettlement {
    fn default() -> Self {
        Self::in_memory()
    }
}

impl BatchSettlement {
    /// Channels in `store`.
    pub fn new(store: impl ChannelStore) -> Self {
        Self::with_store(Arc::new(store))
    }

    /// Channels in a shared `store`.
    pub fn with_store(store: Arc<dyn ChannelStore>) -> Self {
        Self {
            store,
            signer: None,
            onchain_ttl: Duration::from_secs(300),
            busy_wait: Duration::from_secs(2),
            contract: BATCH_SETTLEMENT_ADDRESS,
        }
    }

    /// Channels in this process's memory (the default).
    pub fn in_memory() -> Self {
        Self::new(MemoryChannelStore::new())
    }

    /// Signs claims and refunds with the seller's own receiver-authorizer
    /// key. Without one, the facilitator signs (the route's
    /// `receiverAuthorizer` must then be the facilitator's).
    #[must_use]
    pub fn authorizer(mut self, signer: impl AuthorizerSigner) -> Self {
        self.signer = Some(Arc::new(signer));
        self
    }

    /// How long chain state mirrored from the facilitator is trusted for
    /// checking vouchers in process (default 5 minutes; the spec wants it
    /// well below the withdraw delay). Zero sends every voucher to the
    /// facilitator.
    #[must_use]
    pub fn onchain_ttl(mut self, ttl: Duration) -> Self {
        self.onchain_ttl = ttl;
        self
    }

    /// How long a request waits for another request on the same channel
    /// before it is refused with `invalid_batch_settlement_evm_channel_busy`
    /// (default 2 s).
    #[must_use]
    pub fn busy_wait(mut self, wait: Duration) -> Self {
        self.busy_wait = wait;
        self
    }

    /// The escrow contract's address (default: the canonical
    /// [`BATCH_SETTLEMENT_ADDRESS`]); it is part of every EIP-712 domain.
    #[must_use]
    pub fn contract(mut self, contract: Address) -> Self {
        self.contract = contract;
        self
    }

    /// The channel store.
    pub fn store(&self) -> &Arc<dyn ChannelStore> {
        &self.store
    }

    /// The receiver authorizer's address, when the seller signs.
    pub fn authorizer_address(&self) -> Option<Address> {
        self.signer.as_ref().map(|s| s.address())
    }

    /// The EIP-712 domain of the escrow on `network`, if it is EVM.
    pub fn domain(&self, network: &str) -> Option<alloy_sol_types::Eip712Domain> {
        crate::network::evm_chain_id(network).map(|id| eip712::domain(id, self.contract))
    }
}

impl Offer {
    /// A `batch-settlement` offer: up to `ceiling` per request on `network`
    /// to `pay_to`, through channels whose claims and refunds
    /// `receiver_authorizer` authorizes (`None`: the facilitator's, from its
    /// `/supported`). The withdraw delay defaults to the minimum, 900 s.
    pub fn batch_settlement(
        network: impl Into<String>,
        ceiling: impl IntoPrice,
        pay_to: impl Into<String>,
        receiver_authorizer: Option<Address>,
    ) -> Self {
        let offer = Self::new(BATCH_SETTLEMENT, network, ceiling, pay_to)
            .extra("withdrawDelay", Value::from(MIN_WITHDRAW_DELAY));
        match receiver_authorizer {
            Some(a) => offer.extra("receiverAuthorizer", Value::String(a.to_checksum(None))),
            None => offer,
        }
    }

    /// The withdraw delay a `batch-settlement` channel must have (seconds,
    /// 900 to 2 592 000).
    #[must_use]
    pub fn withdraw_delay(self, seconds: u64) -> Self {
        self.extra("withdrawDelay", Value::from(seconds))
    }

    /// The smallest deposit a `batch-settlement` buyer is asked for
    /// (`extra.minDeposit`, atomic units); clients deposit at least this, so
    /// one deposit covers many calls.
    #[must_use]
    pub fn min_deposit(self, atomic: u128) -> Self {
        self.extra("minDeposit", Value::String(atomic.to_string()))
    }
}

#[cfg(test)]
mod tests;
