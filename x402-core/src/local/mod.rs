//! An in-process EVM facilitator: verifies `exact` (EIP-3009 or Permit2) and
//! `upto` (Permit2) payments itself and settles them through a [`Ledger`],
//! with no third party.
//!
//! - [`LocalFacilitator`] implements [`Facilitator`] for the `exact` scheme
//!   with EIP-3009 `transferWithAuthorization` payloads (protocol v1 and v2)
//!   or Permit2 witness transfers (v2), and for the `upto` scheme with
//!   Permit2 witness transfers (v2), when its ledger
//!   [settles Permit2](Ledger::supports_permit2).
//! - [`DevLedger`] keeps balances and used nonces in memory, for offline
//!   development and tests. It refuses mainnet networks and returns a
//!   deterministic id, not a transaction hash.
//! - `ChainLedger` (feature `chain`) settles on a real chain over JSON-RPC.
//!
//! ```
//! use std::sync::Arc;
//! use alloy_primitives::address;
//! use x402_core::local::{DevLedger, LocalFacilitator};
//! use x402_core::proto::X402Version;
//! use x402_core::Facilitator;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let usdc = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
//! let payer = address!("857b06519E91e3A54538791bDbb0E22373e36b66");
//! let ledger = Arc::new(DevLedger::new());
//! ledger.fund("eip155:84532", usdc, payer, 1_000_000u64)?;
//! let facilitator = LocalFacilitator::builder(ledger.clone())
//!     .network("eip155:84532")
//!     .build()?;
//! let supported = facilitator.supported().await?;
//! // v2 `exact` on `eip155:84532`, v1 `exact` on `base-sepolia`, v2 `upto`.
//! assert_eq!(supported.kinds.len(), 3);
//! let upto = supported.kind(X402Version::V2, "upto", "eip155:84532").unwrap();
//! // Sellers copy it into their `upto` requirements; buyers sign it.
//! assert!(upto.extra.as_ref().unwrap().contains_key("facilitatorAddress"));
//! # Ok(()) }
//! ```
//!
//! # `exact` with EIP-3009
//!
//! The checks, in order, with the reason code of each failure (the TypeScript
//! v2 facilitator's codes): both schemes are `exact`
//! ([`reason::SCHEME`]); the payment's network is the requirement's
//! ([`reason::NETWORK_MISMATCH`]) and one this facilitator serves
//! ([`reason::UNSUPPORTED_NETWORK`]); `extra.name` and `extra.version` are
//! present ([`reason::MISSING_EIP712_DOMAIN`]); the payload parses
//! ([`reason::PAYLOAD`]); the signature recovers `authorization.from` in the
//! domain `{extra.name, extra.version, chainId of the requirement's network,
//! verifyingContract: asset}` ([`reason::SIGNATURE`], or
//! [`reason::UNDEPLOYED_SMART_WALLET`] for a signature longer than 65 bytes);
//! `to == payTo` ([`reason::RECIPIENT_MISMATCH`]); `validBefore >= now +
//! margin` ([`reason::VALID_BEFORE`]); `validAfter <= now`
//! ([`reason::VALID_AFTER`]); `value == amount` ([`reason::VALUE`]); then the
//! ledger: the nonce is unused ([`reason::NONCE_USED`]) and the payer's balance
//! covers the value ([`reason::INSUFFICIENT_BALANCE`]); on `verify` only, the
//! ledger's dry run of the transfer succeeds ([`reason::SIMULATION_FAILED`];
//! the chain ledger runs `eth_call`, which catches e.g. a token whose real
//! EIP-712 name differs from `extra.name`).
//!
//! `settle` runs the same checks again (without the dry run) and then asks the
//! ledger to move the tokens.
//!
//! What the ledger answers becomes the facilitator's answer: a
//! [refusal](TransferOutcome::Refused) is `success: false` with the ledger's
//! reason code and a fixed `errorMessage`; a [`LedgerError`] (among them
//! [`LedgerError::SettlementUnknown`], a transaction that may have been
//! sent) is an error, which the engine answers 502 `settlement_unknown`. No
//! ledger or node text reaches an answer (a dry run's refusal answers a
//! fixed `invalidMessage`): it goes to `tracing`.
//!
//! # `upto`, and `exact` with Permit2
//!
//! The payload is a Permit2 `PermitWitnessTransferFrom` signed in Permit2's
//! domain (`{name: "Permit2", chainId, verifyingContract: Permit2}`); the
//! spender is an x402 proxy, and an `upto` witness names the facilitator
//! allowed to settle. An `upto` requirement's `amount` is the ceiling at
//! `verify` and the charge at `settle` (the seller replaces it).
//!
//! The checks, in order, with the reason code of each failure:
//!
//! 1. for `upto`, both schemes are `upto` and the protocol is v2
//!    ([`reason::UPTO_SCHEME`]) and the networks match
//!    ([`reason::UPTO_NETWORK_MISMATCH`]); for `exact`, as above;
//! 2. the network is served ([`reason::UNSUPPORTED_NETWORK`]);
//! 3. the ledger settles Permit2 and the protocol is v2
//!    ([`reason::UNSUPPORTED_PAYLOAD_TYPE`]);
//! 4. `asset` and `payTo` are addresses ([`reason::INVALID_REQUIREMENTS`]);
//! 5. the payload is a Permit2 payload whose witness names a facilitator for
//!    `upto` and none for `exact` ([`reason::UPTO_PAYLOAD`],
//!    [`reason::PAYLOAD`]);
//! 6. `spender` is the scheme's proxy ([`reason::PERMIT2_SPENDER`]);
//! 7. `witness.to == payTo` ([`reason::PERMIT2_RECIPIENT_MISMATCH`]);
//! 8. `witness.facilitator` is the ledger's signer
//!    ([`reason::UPTO_FACILITATOR_MISMATCH`]);
//! 9. `deadline >= now + margin` ([`reason::PERMIT2_DEADLINE_EXPIRED`]);
//! 10. `witness.validAfter <= now` ([`reason::PERMIT2_NOT_YET_VALID`]);
//! 11. the amount: `permitted.amount == amount` at `verify` and for `exact`
//!     ([`reason::PERMIT2_AMOUNT_MISMATCH`]); at an `upto` `settle`, the
//!     charge `<= permitted.amount`
//!     ([`reason::UPTO_SETTLEMENT_EXCEEDS_AMOUNT`]) and `permitted.amount`
//!     is the ceiling the payment accepted
//!     ([`reason::PERMIT2_AMOUNT_MISMATCH`]);
//! 12. `permitted.token == asset` ([`reason::PERMIT2_TOKEN_MISMATCH`]);
//! 13. the signature recovers `from` ([`reason::PERMIT2_SIGNATURE`]);
//! 14. the ledger: the owner's Permit2 nonce is unused
//!     ([`reason::PERMIT2_INVALID_NONCE`]), the balance covers the amount
//!     ([`reason::PERMIT2_INSUFFICIENT_BALANCE`]), the payer's allowance to
//!     Permit2 covers it when the ledger reads it
//!     ([`reason::PERMIT2_ALLOWANCE_REQUIRED`]), and on `verify` the dry run
//!     succeeds ([`reason::PERMIT2_SIMULATION_FAILED`]).
//!
//! An `upto` charge of `0` settles with `success: true`, `transaction: ""` and
//! `amount: "0"` without asking the ledger (the engine already skips the
//! facilitator for it). Every Permit2 receipt carries `amount`.

use std::{
    collections::BTreeMap,
    fmt,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{Address, B256, U256};
use async_trait::async_trait;

use crate::{
    evm::{eip3009_domain, EvmPayload, ExactEvmPayload, SignatureError},
    facilitator::{Facilitator, FacilitatorError, OtherError},
    money::AtomicAmount,
    network,
    proto::{
        FacilitatorRequest, SettleResponse, SupportedKind, SupportedResponse, VerifyResponse,
        X402Version,
    },
};

#[cfg(feature = "chain")]
mod chain;
mod dev;
mod permit2;
#[cfg(feature = "chain")]
mod transport;

#[cfg(feature = "chain")]
#[cfg_attr(docsrs, doc(cfg(feature = "chain")))]
pub use self::chain::{ChainLedger, ChainLedgerError};
pub use self::dev::{DevLedger, DevLedgerError, DEV_LEDGER_SIGNER};
use self::permit2::CheckedPermit2;
pub use self::permit2::Permit2Transfer;

/// The reason codes this facilitator answers with (`invalidReason` /
/// `errorReason`).
pub mod reason {
    /// A scheme other than `exact` on either side.
    pub const SCHEME: &str = "invalid_exact_evm_scheme";
    /// The payment names another network than the requirement.
    pub const NETWORK_MISMATCH: &str = "invalid_exact_evm_network_mismatch";
    /// The requirement's network is not one this facilitator serves.
    pub const UNSUPPORTED_NETWORK: &str = "invalid_network";
    /// `extra.name` or `extra.version` is missing from the requirement.
    pub const MISSING_EIP712_DOMAIN: &str = "invalid_exact_evm_missing_eip712_domain";
    /// The requirement's `asset` or `payTo` is not an EVM address.
    pub const INVALID_REQUIREMENTS: &str = "invalid_payment_requirements";
    /// The payload is not an EIP-3009 payload.
    pub const PAYLOAD: &str = "invalid_exact_evm_payload";
    /// A Permit2 payload (not handled by this facilitator).
    pub const UNSUPPORTED_PAYLOAD_TYPE: &str = "unsupported_payload_type";
    /// The signature does not recover `authorization.from`.
    pub const SIGNATURE: &str = "invalid_exact_evm_signature";
    /// A smart-wallet signature (longer than 65 bytes), not supported.
    pub const UNDEPLOYED_SMART_WALLET: &str = "invalid_exact_evm_payload_undeployed_smart_wallet";
    /// `authorization.to` is not the requirement's `payTo`.
    pub const RECIPIENT_MISMATCH: &str = "invalid_exact_evm_recipient_mismatch";
    /// Expired, or expiring within the margin.
    pub const VALID_BEFORE: &str = "invalid_exact_evm_payload_authorization_valid_before";
    /// Not valid yet.
    pub const VALID_AFTER: &str = "invalid_exact_evm_payload_authorization_valid_after";
    /// `authorization.value` differs from the requirement's amount.
    pub const VALUE: &str = "invalid_exact_evm_authorization_value";
    /// The token already used (or cancelled) this nonce.
    pub const NONCE_USED: &str = "invalid_exact_evm_nonce_already_used";
    /// The payer's balance is below the value.
    pub const INSUFFICIENT_BALANCE: &str = "invalid_exact_evm_insufficient_balance";
    /// Simulating the transfer on the chain failed (the token refuses it).
    pub const SIMULATION_FAILED: &str = "invalid_exact_evm_transaction_simulation_failed";
    /// The settlement transaction reverted, the node refused it, or it did
    /// not move the tokens.
    pub const TRANSACTION_FAILED: &str = "invalid_exact_evm_transaction_failed";

    /// `upto`: a scheme other than `upto` on either side, or protocol v1.
    pub const UPTO_SCHEME: &str = "invalid_upto_evm_scheme";
    /// `upto`: the payment names another network than the requirement.
    pub const UPTO_NETWORK_MISMATCH: &str = "invalid_upto_evm_network_mismatch";
    /// `upto`: the payload is not a Permit2 payload with an `upto` witness
    /// (one naming a facilitator).
    pub const UPTO_PAYLOAD: &str = "invalid_upto_evm_payload";
    /// `upto`: `witness.facilitator` is not this facilitator's signer.
    pub const UPTO_FACILITATOR_MISMATCH: &str = "upto_facilitator_mismatch";
    /// `upto`: a ledger was asked to move more than the permitted amount.
    pub const UPTO_AMOUNT_EXCEEDS_PERMITTED: &str = "upto_amount_exceeds_permitted";
    /// `upto`: the charge to settle is above `permitted.amount`.
    pub const UPTO_SETTLEMENT_EXCEEDS_AMOUNT: &str =
        "invalid_upto_evm_payload_settlement_exceeds_amount";
    /// `upto`: the settlement transaction reverted or moved nothing.
    pub const UPTO_TRANSACTION_FAILED: &str = "invalid_upto_evm_transaction_failed";

    /// Permit2: `spender` is not the scheme's x402 proxy.
    pub const PERMIT2_SPENDER: &str = "invalid_permit2_spender";
    /// Permit2: `witness.to` is not the requirement's `payTo`.
    pub const PERMIT2_RECIPIENT_MISMATCH: &str = "invalid_permit2_recipient_mismatch";
    /// Permit2: `deadline` has passed, or falls within the margin.
    pub const PERMIT2_DEADLINE_EXPIRED: &str = "permit2_deadline_expired";
    /// Permit2: `witness.validAfter` is in the future.
    pub const PERMIT2_NOT_YET_VALID: &str = "permit2_not_yet_valid";
    /// Permit2: `permitted.amount` is not the required amount (the price for
    /// `exact`, the ceiling for `upto`).
    pub const PERMIT2_AMOUNT_MISMATCH: &str = "permit2_amount_mismatch";
    /// Permit2: `permitted.token` is not the requirement's `asset`.
    pub const PERMIT2_TOKEN_MISMATCH: &str = "permit2_token_mismatch";
    /// Permit2: the signature does not recover `from` over the
    /// `PermitWitnessTransferFrom` digest in Permit2's domain.
    pub const PERMIT2_SIGNATURE: &str = "invalid_permit2_signature";
    /// Permit2: the payer's balance is below the amount.
    pub const PERMIT2_INSUFFICIENT_BALANCE: &str = "permit2_insufficient_balance";
    /// Permit2: the owner has already used this nonce.
    pub const PERMIT2_INVALID_NONCE: &str = "permit2_invalid_nonce";
    /// Permit2: a ledger was asked to move another amount than an `exact`
    /// permit allows.
    pub const PERMIT2_INVALID_AMOUNT: &str = "permit2_invalid_amount";
    /// Permit2: the payer has not approved Permit2 for the amount on the token.
    pub const PERMIT2_ALLOWANCE_REQUIRED: &str = "permit2_allowance_required";
    /// Permit2: simulating the settlement on the chain failed.
    pub const PERMIT2_SIMULATION_FAILED: &str = "permit2_simulation_failed";
    /// Permit2: the scheme's x402 proxy (or Permit2) has no code on the chain.
    pub const PERMIT2_PROXY_NOT_DEPLOYED: &str = "permit2_proxy_not_deployed";
}

/// The default margin before `validBefore`: an authorization must stay valid
/// at least this long after verification (about a block's time).
pub const DEFAULT_VALID_BEFORE_MARGIN: Duration = Duration::from_secs(6);

/// A source of the current unix time in seconds.
///
/// [`SystemClock`] reads the system clock; tests can use [`FixedClock`] or
/// any `fn() -> u64`.
///
/// ```
/// use x402_core::local::{Clock, FixedClock};
/// assert_eq!(FixedClock(1_740_672_100).now(), 1_740_672_100);
/// fn epoch() -> u64 { 0 }
/// assert_eq!((epoch as fn() -> u64).now(), 0);
/// ```
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current unix time in seconds.
    fn now(&self) -> u64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }
}

/// A clock stopped at a unix time in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedClock(pub u64);

impl Clock for FixedClock {
    fn now(&self) -> u64 {
        self.0
    }
}

impl Clock for fn() -> u64 {
    fn now(&self) -> u64 {
        self()
    }
}

/// One EIP-3009 transfer, as a [`Ledger`] sees it. Every check that needs no
/// ledger state has passed.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Transfer<'a> {
    /// The network as a CAIP-2 id (`eip155:84532`).
    pub network: &'a str,
    /// The EVM chain id of `network`.
    pub chain_id: u64,
    /// The token contract.
    pub asset: Address,
    /// The signed authorization.
    pub payload: &'a ExactEvmPayload,
}

impl Transfer<'_> {
    /// The payer.
    pub fn from(&self) -> Address {
        self.payload.authorization.from
    }

    /// The amount in atomic units.
    pub fn value(&self) -> U256 {
        self.payload.authorization.value.get()
    }

    /// The authorization's nonce.
    pub fn nonce(&self) -> B256 {
        self.payload.authorization.nonce
    }
}

/// What a ledger knows about a transfer before it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerState {
    /// Whether the token has already used (or cancelled) the nonce; for
    /// Permit2, whether the owner has spent it.
    pub nonce_used: bool,
    /// The payer's balance of the token, in atomic units.
    pub balance: U256,
    /// Permit2 only: the payer's ERC-20 allowance to Permit2, when the ledger
    /// knows it (`None`: not checked, e.g. the dev ledger, which needs none).
    pub permit2_allowance: Option<U256>,
}

impl LedgerState {
    /// A state with these values.
    pub fn new(nonce_used: bool, balance: U256) -> Self {
        Self {
            nonce_used,
            balance,
            permit2_allowance: None,
        }
    }

    /// With the payer's allowance to Permit2.
    #[must_use]
    pub fn with_permit2_allowance(mut self, allowance: U256) -> Self {
        self.permit2_allowance = Some(allowance);
        self
    }
}

/// How a transfer ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransferOutcome {
    /// The tokens moved.
    Settled {
        /// The transaction hash (a chain) or a deterministic id (the dev ledger).
        transaction: String,
    },
    /// The tokens did not move, for a business reason, and no transaction
    /// that could still move them is pending. (A transfer that may have been
    /// sent and whose outcome is not known is
    /// [`LedgerError::SettlementUnknown`], never a refusal.)
    Refused {
        /// A reason code (see [`reason`]): lowercase ASCII letters, digits
        /// and `_`. The facilitator answers
        /// [`reason::TRANSACTION_FAILED`] (or
        /// [`reason::UPTO_TRANSACTION_FAILED`]) in place of anything else.
        reason: String,
        /// Detail for logs (a node's error text, say). The facilitator
        /// writes it to `tracing` and never into its answer.
        message: Option<String>,
        /// The transaction hash, when a transaction was sent and reverted.
        transaction: Option<String>,
    },
}

impl TransferOutcome {
    /// A refusal with a reason code and no transaction.
    pub fn refused(reason: impl Into<String>) -> Self {
        Self::Refused {
            reason: reason.into(),
            message: None,
            transaction: None,
        }
    }
}

/// Why a ledger could not answer (as opposed to refusing a transfer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The ledger does not serve this network.
    #[error("ledger does not serve network {network:?}: {why}")]
    UnsupportedNetwork {
        /// The network.
        network: String,
        /// Why.
        why: String,
    },
    /// The ledger cannot settle this kind of transfer (e.g. Permit2).
    #[error("the ledger does not settle {0} transfers")]
    Unsupported(&'static str),
    /// The node or backing store failed.
    #[error("ledger backend error")]
    Backend(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A settlement transaction may have been sent and whether it moved the
    /// tokens is not known: the node's answer to the submission left it open
    /// ("already known", "nonce too low", "replacement transaction
    /// underpriced", no answer at all, ...), or no receipt came within the
    /// timeout. The facilitator's `settle` answers it with an error, never
    /// with a refusal: the engine's 502 `settlement_unknown`, the payment
    /// kept claimed.
    #[error("the settlement transaction may have been sent; its outcome is unknown")]
    SettlementUnknown {
        /// The transaction's hash, when one was computed, to reconcile by.
        transaction: Option<String>,
        /// What went wrong (a node's error text, for logs only).
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// Where the money moves: a chain, or memory.
///
/// Implementations must make [`transfer`](Ledger::transfer) atomic per
/// authorization: of concurrent transfers of one `(asset, from, nonce)`, at
/// most one succeeds.
#[async_trait]
pub trait Ledger: Send + Sync + fmt::Debug + 'static {
    /// The address that submits settlements, listed in `/supported` signers.
    fn signer(&self) -> Address;

    /// Whether the ledger can serve `network` (a CAIP-2 id); checked when the
    /// facilitator is built.
    fn check_network(&self, network: &str) -> Result<(), LedgerError>;

    /// The nonce's state and the payer's balance.
    async fn state(&self, transfer: &Transfer<'_>) -> Result<LedgerState, LedgerError>;

    /// Dry-runs the transfer without making it (an `eth_call` on a chain):
    /// `Some(message)` when it would fail. Run by `verify` only, after the
    /// other checks pass. The default simulates nothing.
    async fn simulate(&self, transfer: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        let _ = transfer;
        Ok(None)
    }

    /// Moves the tokens.
    async fn transfer(&self, transfer: &Transfer<'_>) -> Result<TransferOutcome, LedgerError>;

    /// Whether the ledger settles Permit2 witness transfers (the `upto`
    /// scheme, and `exact` with `assetTransferMethod: "permit2"`). The
    /// facilitator lists `upto` in `/supported`, and accepts Permit2
    /// payloads, only when it does. The default is `false`.
    fn supports_permit2(&self) -> bool {
        false
    }

    /// The Permit2 nonce's state for the owner and the owner's balance of
    /// the token. Called only when [`supports_permit2`](Ledger::supports_permit2)
    /// is `true`; the default answers [`LedgerError::Unsupported`].
    async fn permit2_state(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<LedgerState, LedgerError> {
        let _ = transfer;
        Err(LedgerError::Unsupported("Permit2"))
    }

    /// Dry-runs a Permit2 transfer, as [`simulate`](Ledger::simulate) does
    /// for EIP-3009. The default simulates nothing.
    async fn permit2_simulate(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<Option<String>, LedgerError> {
        let _ = transfer;
        Ok(None)
    }

    /// Moves [`Permit2Transfer::amount`] of the permitted token from the
    /// owner to `witness.to` and spends the owner's Permit2 nonce. Atomic per
    /// `(owner, nonce)`: of concurrent transfers, at most one succeeds. The
    /// default answers [`LedgerError::Unsupported`].
    async fn permit2_transfer(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        let _ = transfer;
        Err(LedgerError::Unsupported("Permit2"))
    }
}

#[async_trait]
impl<L: Ledger + ?Sized> Ledger for Arc<L> {
    fn signer(&self) -> Address {
        (**self).signer()
    }

    fn check_network(&self, network: &str) -> Result<(), LedgerError> {
        (**self).check_network(network)
    }

    async fn state(&self, transfer: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
        (**self).state(transfer).await
    }

    async fn simulate(&self, transfer: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
        (**self).simulate(transfer).await
    }

    async fn transfer(&self, transfer: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
        (**self).transfer(transfer).await
    }

    fn supports_permit2(&self) -> bool {
        (**self).supports_permit2()
    }

    async fn permit2_state(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<LedgerState, LedgerError> {
        (**self).permit2_state(transfer).await
    }

    async fn permit2_simulate(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<Option<String>, LedgerError> {
        (**self).permit2_simulate(transfer).await
    }

    async fn permit2_transfer(
        &self,
        transfer: &Permit2Transfer<'_>,
    ) -> Result<TransferOutcome, LedgerError> {
        (**self).permit2_transfer(transfer).await
    }
}

/// Why a [`LocalFacilitator`] could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalConfigError {
    /// A network is not an EVM network this crate can name.
    #[error("network {0:?} is not an EVM network (CAIP-2 eip155:<id> or a known v1 name)")]
    NotEvm(String),
    /// The ledger refuses a network.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// No network was configured.
    #[error("a local facilitator needs at least one network")]
    NoNetworks,
}

/// Builds a [`LocalFacilitator`].
#[must_use]
pub struct LocalFacilitatorBuilder {
    ledger: Arc<dyn Ledger>,
    networks: Vec<String>,
    clock: Arc<dyn Clock>,
    margin: Duration,
}

impl fmt::Debug for LocalFacilitatorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalFacilitatorBuilder")
            .field("ledger", &self.ledger)
            .field("networks", &self.networks)
            .field("clock", &self.clock)
            .field("margin", &self.margin)
            .finish()
    }
}

impl LocalFacilitatorBuilder {
    /// Adds a network to serve: a CAIP-2 id (`eip155:84532`) or a v1 name
    /// (`base-sepolia`).
    pub fn network(mut self, network: impl Into<String>) -> Self {
        self.networks.push(network.into());
        self
    }

    /// Adds several networks.
    pub fn networks<I, S>(mut self, networks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.networks.extend(networks.into_iter().map(Into::into));
        self
    }

    /// Sets the clock (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Sets how long an authorization must stay valid after verification
    /// (default [`DEFAULT_VALID_BEFORE_MARGIN`], 6 s).
    pub fn valid_before_margin(mut self, margin: Duration) -> Self {
        self.margin = margin;
        self
    }

    /// Checks the networks with the ledger and builds the facilitator.
    pub fn build(self) -> Result<LocalFacilitator, LocalConfigError> {
        if self.networks.is_empty() {
            return Err(LocalConfigError::NoNetworks);
        }
        let mut networks = BTreeMap::new();
        for name in &self.networks {
            let caip2 = caip2_of(name).ok_or_else(|| LocalConfigError::NotEvm(name.clone()))?;
            let chain_id = network::evm_chain_id(&caip2)
                .ok_or_else(|| LocalConfigError::NotEvm(name.clone()))?;
            self.ledger.check_network(&caip2)?;
            networks.insert(caip2, chain_id);
        }
        Ok(LocalFacilitator {
            ledger: self.ledger,
            networks,
            clock: self.clock,
            margin: self.margin.as_secs(),
            recovered: Arc::new(RecoveredSigners::default()),
        })
    }
}

/// The CAIP-2 id of an EVM network named either way.
fn caip2_of(name: &str) -> Option<String> {
    let caip2 = if name.contains(':') {
        name.to_owned()
    } else {
        network::caip2(name)?.to_owned()
    };
    network::evm_chain_id(&caip2).map(|_| caip2)
}

/// An in-process facilitator for EVM networks, settling through a [`Ledger`]:
/// `exact` with EIP-3009 (v1 and v2) or Permit2 (v2), and `upto` with Permit2
/// (v2) when the ledger [settles Permit2](Ledger::supports_permit2). See the
/// [module docs](self) for the checks.
///
/// ```
/// use std::sync::Arc;
/// use x402_core::local::{DevLedger, FixedClock, LocalFacilitator};
///
/// let facilitator = LocalFacilitator::builder(DevLedger::new())
///     .network("base-sepolia")
///     .clock(FixedClock(1_740_672_100))
///     .build()?;
/// assert_eq!(facilitator.networks().collect::<Vec<_>>(), ["eip155:84532"]);
///
/// // Mainnets are refused by the dev ledger.
/// assert!(LocalFacilitator::builder(DevLedger::new()).network("eip155:8453").build().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct LocalFacilitator {
    ledger: Arc<dyn Ledger>,
    /// CAIP-2 id → chain id.
    networks: BTreeMap<String, u64>,
    clock: Arc<dyn Clock>,
    margin: u64,
    recovered: Arc<RecoveredSigners>,
}

/// Signers recovered recently, so that settling a payment does not repeat
/// the elliptic-curve recovery its verification just did. Recovery is a pure
/// function of the digest and the signature, so a remembered answer is
/// always the right one; every other check (window, nonce, balance) still
/// runs again at settlement.
#[derive(Debug, Default)]
struct RecoveredSigners(std::sync::Mutex<std::collections::HashMap<B256, Address>>);

impl RecoveredSigners {
    /// Bound on remembered signers; past it the memory starts over.
    const CAPACITY: usize = 4096;

    fn recover(&self, digest: B256, signature: &[u8]) -> Result<Address, SignatureError> {
        let key = alloy_primitives::keccak256([digest.as_slice(), signature].concat());
        // The map holds plain values: a panic elsewhere cannot leave an entry
        // half-written, so a poisoned lock is still sound to use.
        let lock = || {
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some(signer) = lock().get(&key) {
            return Ok(*signer);
        }
        let signer = crate::evm::recover_signer(digest, signature)?;
        let mut map = lock();
        if map.len() >= Self::CAPACITY {
            map.clear();
        }
        map.insert(key, signer);
        Ok(signer)
    }
}

impl fmt::Debug for LocalFacilitator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalFacilitator")
            .field("ledger", &self.ledger)
            .field("networks", &self.networks)
            .field("clock", &self.clock)
            .field("margin", &self.margin)
            .finish()
    }
}

/// Which facilitator call a check runs for: the amount of an `upto`
/// requirement is the ceiling at `verify` and the charge at `settle`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Verify,
    Settle,
}

/// A payment that passed every check, with what settling it needs.
enum Checked {
    Eip3009(CheckedEip3009),
    Permit2(CheckedPermit2),
}

impl Checked {
    fn payer(&self) -> Address {
        match self {
            Self::Eip3009(c) => c.payload.authorization.from,
            Self::Permit2(c) => c.payload.permit2_authorization.from,
        }
    }
}

/// An EIP-3009 payment that passed every check.
struct CheckedEip3009 {
    network: String,
    chain_id: u64,
    asset: Address,
    payload: ExactEvmPayload,
}

impl CheckedEip3009 {
    fn transfer(&self) -> Transfer<'_> {
        Transfer {
            network: &self.network,
            chain_id: self.chain_id,
            asset: self.asset,
            payload: &self.payload,
        }
    }
}

/// A refusal: a reason code, a message and the payer when known.
struct Refusal {
    reason: &'static str,
    message: String,
    payer: Option<String>,
}

/// The requirement's asset and recipient as EVM addresses.
fn requirement_addresses(
    requirements: &crate::proto::PaymentRequirements,
) -> Result<(Address, Address), Refusal> {
    match (
        requirements.asset().parse::<Address>(),
        requirements.pay_to().parse::<Address>(),
    ) {
        (Ok(asset), Ok(pay_to)) => Ok((asset, pay_to)),
        _ => Err(refuse(
            reason::INVALID_REQUIREMENTS,
            "the requirement's asset and payTo must be EVM addresses",
            None,
        )),
    }
}

fn refuse(reason: &'static str, message: impl Into<String>, payer: Option<Address>) -> Refusal {
    Refusal {
        reason,
        message: message.into(),
        payer: payer.map(|p| p.to_checksum(None)),
    }
}

fn ledger_error(e: LedgerError) -> FacilitatorError {
    FacilitatorError::Other(OtherError(Arc::new(e)))
}

/// A ledger error while moving the tokens, as `settle`'s error (the engine
/// answers 502 `settlement_unknown` and keeps the payment claimed). Its
/// sources (a node's error text) are logged here: only its fixed `Display`
/// travels on.
fn settlement_error(e: LedgerError, network: &str) -> FacilitatorError {
    let transaction = match &e {
        LedgerError::SettlementUnknown { transaction, .. } => transaction.as_deref(),
        _ => None,
    };
    tracing::error!(
        error = %e,
        detail = %error_chain(&e),
        transaction,
        network,
        "x402: the ledger could not settle; the outcome is unknown"
    );
    ledger_error(e)
}

/// An error and its sources as one line, for logs.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Whether `s` has the shape of a reason code: 1 to 64 lowercase ASCII
/// letters, digits and `_` (a node's message, with spaces, never has).
fn is_reason_code(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// The `invalidMessage` / `errorMessage` a refusal answers with. The
/// facilitator's own checks write their own text; a dry run's refusal
/// carries the ledger's (a node's revert message, say), which goes to
/// `tracing` and is answered with a fixed sentence, or kept when it is a
/// reason code.
fn wire_message(reason: &'static str, message: String) -> String {
    if reason != reason::SIMULATION_FAILED && reason != reason::PERMIT2_SIMULATION_FAILED {
        return message;
    }
    if is_reason_code(&message) {
        return message;
    }
    tracing::info!(reason, detail = %message, "x402: the ledger's dry run refused the payment");
    "the token refused the transfer in a dry run".to_owned()
}

/// The `errorReason` and `errorMessage` of a ledger's refusal: its reason
/// when it is a reason code, else `fallback`, and a fixed sentence. The
/// ledger's message (a node's error text, say) goes to `tracing` only.
fn refused_settlement(
    reason: &str,
    message: Option<&str>,
    transaction: Option<&str>,
    fallback: &'static str,
    network: &str,
) -> (String, &'static str) {
    let answer = if is_reason_code(reason) {
        reason
    } else {
        fallback
    };
    tracing::warn!(
        reason = answer,
        ledger_reason = reason,
        detail = message,
        transaction,
        network,
        "x402: the ledger refused the settlement"
    );
    let sentence = if transaction.is_some() {
        "the settlement transaction did not move the tokens"
    } else {
        "the ledger refused the transfer; nothing was sent"
    };
    (answer.to_owned(), sentence)
}

impl LocalFacilitator {
    /// Starts building a facilitator that settles through `ledger`.
    pub fn builder(ledger: impl Ledger) -> LocalFacilitatorBuilder {
        LocalFacilitatorBuilder {
            ledger: Arc::new(ledger),
            networks: Vec::new(),
            clock: Arc::new(SystemClock),
            margin: DEFAULT_VALID_BEFORE_MARGIN,
        }
    }

    /// The networks served, as CAIP-2 ids.
    pub fn networks(&self) -> impl Iterator<Item = &str> + '_ {
        self.networks.keys().map(String::as_str)
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// Every check but the ledger's.
    fn check_offline(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<Checked, Refusal> {
        let payment = &request.payment_payload;
        let requirements = &request.payment_requirements;

        if requirements.scheme() == permit2::UPTO {
            return self
                .check_upto_offline(request, phase)
                .map(Checked::Permit2);
        }
        if payment.scheme() != "exact" || requirements.scheme() != "exact" {
            return Err(refuse(
                reason::SCHEME,
                format!(
                    "scheme must be exact (payment {:?}, requirement {:?})",
                    short(payment.scheme()),
                    short(requirements.scheme())
                ),
                None,
            ));
        }
        let (network, chain_id) = self.served_network(request, reason::NETWORK_MISMATCH)?;

        let parsed = EvmPayload::from_value(payment.payload());
        if let Ok(EvmPayload::Permit2(payload)) = parsed {
            return self
                .check_permit2_offline(
                    request,
                    permit2::Permit2Kind::Exact,
                    payload,
                    (network, chain_id),
                    phase,
                )
                .map(Checked::Permit2);
        }

        let extra = requirements.extra();
        let (Some(name), Some(version)) = (
            extra.get("name").and_then(|v| v.as_str()),
            extra.get("version").and_then(|v| v.as_str()),
        ) else {
            return Err(refuse(
                reason::MISSING_EIP712_DOMAIN,
                "the requirement's extra has no EIP-712 name and version",
                None,
            ));
        };
        let (asset, pay_to) = requirement_addresses(requirements)?;

        let payload = match parsed {
            Ok(EvmPayload::Eip3009(p)) => p,
            Ok(_) => {
                return Err(refuse(
                    reason::UNSUPPORTED_PAYLOAD_TYPE,
                    "only EIP-3009 payloads are supported",
                    None,
                ))
            }
            Err(e) => return Err(refuse(reason::PAYLOAD, e.to_string(), None)),
        };
        let auth = &payload.authorization;
        let payer = Some(auth.from);

        let domain = eip3009_domain(name, version, chain_id, asset);
        let digest = auth.signing_hash(&domain);
        match self.recovered.recover(digest, &payload.signature) {
            Ok(signer) if signer == auth.from => {}
            Ok(_) => {
                return Err(refuse(
                    reason::SIGNATURE,
                    "the signature does not recover authorization.from",
                    payer,
                ))
            }
            Err(e @ SignatureError::UnsupportedLength { .. }) => {
                return Err(refuse(
                    reason::UNDEPLOYED_SMART_WALLET,
                    e.to_string(),
                    payer,
                ))
            }
            Err(e) => return Err(refuse(reason::SIGNATURE, e.to_string(), payer)),
        }
        if auth.to != pay_to {
            return Err(refuse(
                reason::RECIPIENT_MISMATCH,
                "authorization.to is not the requirement's payTo",
                payer,
            ));
        }
        let now = self.clock.now();
        if auth.valid_before < U256::from(now).saturating_add(U256::from(self.margin)) {
            return Err(refuse(
                reason::VALID_BEFORE,
                format!("the authorization expires before now + {} s", self.margin),
                payer,
            ));
        }
        if auth.valid_after > U256::from(now) {
            return Err(refuse(
                reason::VALID_AFTER,
                "the authorization is not valid yet",
                payer,
            ));
        }
        if auth.value != requirements.amount() {
            return Err(refuse(
                reason::VALUE,
                format!(
                    "authorization.value {} is not the required amount {}",
                    auth.value,
                    requirements.amount()
                ),
                payer,
            ));
        }
        Ok(Checked::Eip3009(CheckedEip3009 {
            network,
            chain_id,
            asset,
            payload,
        }))
    }

    /// The requirement's network as `(CAIP-2 id, chain id)`, after checking
    /// that the payment names the same one (else `mismatch`) and that this
    /// facilitator serves it.
    fn served_network(
        &self,
        request: &FacilitatorRequest,
        mismatch: &'static str,
    ) -> Result<(String, u64), Refusal> {
        let requirements = &request.payment_requirements;
        if request.payment_payload.network() != requirements.network() {
            return Err(refuse(
                mismatch,
                "the payment names another network than the requirement",
                None,
            ));
        }
        caip2_of(requirements.network())
            .and_then(|caip2| self.networks.get_key_value(&caip2))
            .map(|(n, id)| (n.clone(), *id))
            .ok_or_else(|| {
                refuse(
                    reason::UNSUPPORTED_NETWORK,
                    format!(
                        "network {:?} is not served by this facilitator",
                        short(requirements.network())
                    ),
                    None,
                )
            })
    }

    /// Every check, the ledger's included; at `verify`, a dry run too.
    async fn check(
        &self,
        request: &FacilitatorRequest,
        phase: Phase,
    ) -> Result<Result<Checked, Refusal>, FacilitatorError> {
        let checked = match self.check_offline(request, phase) {
            Ok(c) => c,
            Err(r) => return Ok(Err(r)),
        };
        let refusal = match &checked {
            Checked::Eip3009(c) => self.check_eip3009_ledger(c, phase).await?,
            Checked::Permit2(c) => self.check_permit2_ledger(c, phase).await?,
        };
        Ok(match refusal {
            Some(r) => Err(r),
            None => Ok(checked),
        })
    }

    /// The ledger's checks of an EIP-3009 payment: `Some` refusal, or `None`.
    async fn check_eip3009_ledger(
        &self,
        checked: &CheckedEip3009,
        phase: Phase,
    ) -> Result<Option<Refusal>, FacilitatorError> {
        let state = self
            .ledger
            .state(&checked.transfer())
            .await
            .map_err(ledger_error)?;
        let payer = Some(checked.payload.authorization.from);
        if state.nonce_used {
            return Ok(Some(refuse(
                reason::NONCE_USED,
                "the token has already used this authorization's nonce",
                payer,
            )));
        }
        if state.balance < checked.payload.authorization.value.get() {
            return Ok(Some(refuse(
                reason::INSUFFICIENT_BALANCE,
                "the payer's balance is below the value",
                payer,
            )));
        }
        if phase == Phase::Verify {
            if let Some(message) = self
                .ledger
                .simulate(&checked.transfer())
                .await
                .map_err(ledger_error)?
            {
                return Ok(Some(refuse(reason::SIMULATION_FAILED, message, payer)));
            }
        }
        Ok(None)
    }
}

/// At most 64 characters of untrusted input, for messages.
fn short(s: &str) -> &str {
    match s.char_indices().nth(64) {
        Some((end, _)) => &s[..end],
        None => s,
    }
}

#[async_trait]
impl Facilitator for LocalFacilitator {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        Ok(match self.check(request, Phase::Verify).await? {
            Ok(checked) => VerifyResponse::valid(checked.payer().to_checksum(None)),
            Err(r) => VerifyResponse {
                invalid_message: Some(wire_message(r.reason, r.message)),
                ..VerifyResponse::invalid(r.reason, r.payer)
            },
        })
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        let network = request.payment_requirements.network().to_owned();
        // No separate dry run: a chain ledger's gas estimation is one.
        let checked = match self.check(request, Phase::Settle).await? {
            Ok(c) => c,
            Err(r) => {
                return Ok(SettleResponse {
                    error_message: Some(wire_message(r.reason, r.message)),
                    payer: r.payer,
                    ..SettleResponse::failure(network, r.reason)
                })
            }
        };
        let payer = checked.payer().to_checksum(None);
        let (outcome, amount) = match &checked {
            Checked::Eip3009(c) => (
                self.ledger
                    .transfer(&c.transfer())
                    .await
                    .map_err(|e| settlement_error(e, &network))?,
                c.payload.authorization.value,
            ),
            Checked::Permit2(c) if c.amount.is_zero() => {
                // A zero `upto` charge moves nothing and sends nothing.
                return Ok(SettleResponse {
                    success: true,
                    payer: Some(payer),
                    transaction: String::new(),
                    network,
                    amount: Some(AtomicAmount::ZERO),
                    ..SettleResponse::default()
                });
            }
            Checked::Permit2(c) => (
                self.ledger
                    .permit2_transfer(&c.transfer())
                    .await
                    .map_err(|e| settlement_error(e, &network))?,
                AtomicAmount::from(c.amount),
            ),
        };
        Ok(match outcome {
            TransferOutcome::Settled { transaction } => SettleResponse {
                success: true,
                payer: Some(payer),
                transaction,
                network,
                amount: Some(amount),
                ..SettleResponse::default()
            },
            TransferOutcome::Refused {
                reason,
                message,
                transaction,
            } => {
                let fallback = if request.payment_requirements.scheme() == permit2::UPTO {
                    reason::UPTO_TRANSACTION_FAILED
                } else {
                    reason::TRANSACTION_FAILED
                };
                let (reason, sentence) = refused_settlement(
                    &reason,
                    message.as_deref(),
                    transaction.as_deref(),
                    fallback,
                    &network,
                );
                SettleResponse {
                    error_message: Some(sentence.to_owned()),
                    payer: Some(payer),
                    transaction: transaction.unwrap_or_default(),
                    ..SettleResponse::failure(network, reason)
                }
            }
        })
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        let mut kinds = Vec::new();
        for caip2 in self.networks.keys() {
            kinds.push(SupportedKind {
                x402_version: X402Version::V2,
                scheme: "exact".to_owned(),
                network: caip2.clone(),
                extra: None,
            });
            if let Some(v1) = network::v1_name(caip2) {
                kinds.push(SupportedKind {
                    x402_version: X402Version::V1,
                    scheme: "exact".to_owned(),
                    network: v1.to_owned(),
                    extra: None,
                });
            }
        }
        if self.ledger.supports_permit2() {
            let mut extra = crate::proto::JsonObject::new();
            extra.insert(
                "facilitatorAddress".to_owned(),
                serde_json::Value::String(self.ledger.signer().to_checksum(None)),
            );
            for caip2 in self.networks.keys() {
                kinds.push(SupportedKind {
                    x402_version: X402Version::V2,
                    scheme: permit2::UPTO.to_owned(),
                    network: caip2.clone(),
                    extra: Some(extra.clone()),
                });
            }
        }
        let mut signers = BTreeMap::new();
        signers.insert(
            "eip155:*".to_owned(),
            vec![self.ledger.signer().to_checksum(None)],
        );
        Ok(SupportedResponse {
            kinds,
            extensions: Vec::new(),
            signers,
        })
    }
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{address, Bytes};
    use alloy_signer::SignerSync;
    use alloy_signer_local::PrivateKeySigner;
    use serde_json::json;

    use super::*;
    use crate::evm::Eip3009Authorization;

    const NETWORK: &str = "eip155:84532";
    const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
    const SELLER: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
    const NOW: u64 = 1_740_672_100;
    /// A node's error text, with a URL carrying a key: it must never reach
    /// an answer.
    const NODE_TEXT: &str =
        "execution reverted: FiatTokenV2: invalid signature (https://rpc.example/v2/SECRETKEY)";

    /// What the scripted ledger's `transfer` answers.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        Refused {
            reason: &'static str,
            transaction: Option<&'static str>,
        },
        Unknown,
        Backend,
    }

    /// A ledger that approves every state check and answers `simulate` and
    /// `transfer` as scripted, with [`NODE_TEXT`] as its detail.
    #[derive(Debug)]
    struct Scripted {
        simulate: Option<&'static str>,
        transfer: Answer,
    }

    #[async_trait]
    impl Ledger for Scripted {
        fn signer(&self) -> Address {
            Address::repeat_byte(0x11)
        }

        fn check_network(&self, _: &str) -> Result<(), LedgerError> {
            Ok(())
        }

        async fn state(&self, _: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
            Ok(LedgerState::new(false, U256::from(1_000_000u64)))
        }

        async fn simulate(&self, _: &Transfer<'_>) -> Result<Option<String>, LedgerError> {
            Ok(self.simulate.map(str::to_owned))
        }

        async fn transfer(&self, _: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
            match self.transfer {
                Answer::Refused {
                    reason,
                    transaction,
                } => Ok(TransferOutcome::Refused {
                    reason: reason.to_owned(),
                    message: Some(NODE_TEXT.to_owned()),
                    transaction: transaction.map(str::to_owned),
                }),
                Answer::Unknown => Err(LedgerError::SettlementUnknown {
                    transaction: Some("0xabc".to_owned()),
                    source: NODE_TEXT.into(),
                }),
                Answer::Backend => Err(LedgerError::Backend(NODE_TEXT.into())),
            }
        }
    }

    fn facilitator(simulate: Option<&'static str>, transfer: Answer) -> LocalFacilitator {
        LocalFacilitator::builder(Scripted { simulate, transfer })
            .network(NETWORK)
            .clock(FixedClock(NOW))
            .build()
            .unwrap()
    }

    /// A v2 `exact` request for 1000 units, signed by a fixed key.
    fn request() -> FacilitatorRequest {
        let key = PrivateKeySigner::from_bytes(&B256::repeat_byte(7)).unwrap();
        let authorization = Eip3009Authorization {
            from: key.address(),
            to: SELLER,
            value: AtomicAmount::from(1_000u64),
            valid_after: U256::from(NOW - 600),
            valid_before: U256::from(NOW + 300),
            nonce: B256::repeat_byte(9),
        };
        let domain = eip3009_domain("USDC", "2", 84532, TOKEN);
        let signature = key
            .sign_hash_sync(&authorization.signing_hash(&domain))
            .unwrap();
        let payload = ExactEvmPayload {
            signature: Bytes::from(signature.as_bytes().to_vec()),
            authorization,
        };
        let requirements = json!({
            "scheme": "exact",
            "network": NETWORK,
            "amount": "1000",
            "asset": TOKEN.to_checksum(None),
            "payTo": SELLER.to_checksum(None),
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"},
        });
        serde_json::from_value(json!({
            "x402Version": 2,
            "paymentPayload": {
                "x402Version": 2,
                "accepted": requirements,
                "payload": serde_json::to_value(payload).unwrap(),
            },
            "paymentRequirements": requirements,
        }))
        .unwrap()
    }

    /// Everything an answer shows, as JSON text.
    fn shown(answer: &impl serde::Serialize) -> String {
        let text = serde_json::to_string(answer).unwrap();
        for leak in ["FiatToken", "invalid signature", "SECRETKEY", "rpc.example"] {
            assert!(!text.contains(leak), "{leak:?} leaked in {text}");
        }
        text
    }

    #[tokio::test]
    async fn a_ledger_refusal_answers_its_reason_code_and_never_its_message() {
        let refused = Answer::Refused {
            reason: reason::TRANSACTION_FAILED,
            transaction: None,
        };
        let receipt = facilitator(None, refused).settle(&request()).await.unwrap();
        shown(&receipt);
        assert!(!receipt.success);
        assert_eq!(
            receipt.error_reason.as_deref(),
            Some(reason::TRANSACTION_FAILED)
        );
        assert_eq!(
            receipt.error_message.as_deref(),
            Some("the ledger refused the transfer; nothing was sent")
        );
        assert_eq!(receipt.transaction, "");
        assert!(receipt.payer.is_some());

        // A mined revert keeps its transaction hash (the ledger's own).
        let reverted = Answer::Refused {
            reason: reason::TRANSACTION_FAILED,
            transaction: Some("0xdef"),
        };
        let receipt = facilitator(None, reverted)
            .settle(&request())
            .await
            .unwrap();
        shown(&receipt);
        assert_eq!(receipt.transaction, "0xdef");
        assert_eq!(
            receipt.error_message.as_deref(),
            Some("the settlement transaction did not move the tokens")
        );
    }

    #[tokio::test]
    async fn a_ledger_reason_that_is_not_a_code_is_answered_as_transaction_failed() {
        for odd in [
            "rpc error: nonce too low",
            "Insufficient funds",
            "",
            "a_code_that_is_far_too_long_to_be_one_of_ours_because_it_goes_on_and_on",
        ] {
            let answer = Answer::Refused {
                reason: odd,
                transaction: None,
            };
            let receipt = facilitator(None, answer).settle(&request()).await.unwrap();
            assert_eq!(
                receipt.error_reason.as_deref(),
                Some(reason::TRANSACTION_FAILED),
                "{odd:?}"
            );
            assert!(odd.is_empty() || !shown(&receipt).contains(odd), "{odd:?}");
        }
        // A ledger's own code is kept.
        let answer = Answer::Refused {
            reason: reason::NONCE_USED,
            transaction: None,
        };
        let receipt = facilitator(None, answer).settle(&request()).await.unwrap();
        assert_eq!(receipt.error_reason.as_deref(), Some(reason::NONCE_USED));
    }

    #[tokio::test]
    async fn an_unknown_outcome_is_an_error_never_a_refusal() {
        for answer in [Answer::Unknown, Answer::Backend] {
            let Err(error) = facilitator(None, answer).settle(&request()).await else {
                panic!("{answer:?} must be an error: the engine's settlement_unknown");
            };
            let display = error.to_string();
            assert!(!display.contains("FiatToken"), "{display}");
            assert!(!display.contains("SECRETKEY"), "{display}");
            let FacilitatorError::Other(OtherError(inner)) = &error else {
                panic!("{error:?}");
            };
            let ledger = inner.downcast_ref::<LedgerError>().unwrap();
            match (answer, ledger) {
                (
                    Answer::Unknown,
                    LedgerError::SettlementUnknown {
                        transaction: Some(hash),
                        ..
                    },
                ) => assert_eq!(hash, "0xabc"),
                (Answer::Backend, LedgerError::Backend(_)) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            LedgerError::SettlementUnknown {
                transaction: None,
                source: NODE_TEXT.into(),
            }
            .to_string(),
            "the settlement transaction may have been sent; its outcome is unknown"
        );
    }

    #[tokio::test]
    async fn a_dry_run_refusal_answers_a_fixed_message() {
        let settled = Answer::Refused {
            reason: reason::TRANSACTION_FAILED,
            transaction: None,
        };
        let verdict = facilitator(Some(NODE_TEXT), settled)
            .verify(&request())
            .await
            .unwrap();
        shown(&verdict);
        assert!(!verdict.is_valid);
        assert_eq!(
            verdict.invalid_reason.as_deref(),
            Some(reason::SIMULATION_FAILED)
        );
        assert_eq!(
            verdict.invalid_message.as_deref(),
            Some("the token refused the transfer in a dry run")
        );
        // A reason code from the ledger is kept as the message.
        let verdict = facilitator(Some(reason::PERMIT2_PROXY_NOT_DEPLOYED), settled)
            .verify(&request())
            .await
            .unwrap();
        assert_eq!(
            verdict.invalid_message.as_deref(),
            Some(reason::PERMIT2_PROXY_NOT_DEPLOYED)
        );
        // No dry-run refusal: valid.
        let verdict = facilitator(None, settled).verify(&request()).await.unwrap();
        assert!(verdict.is_valid, "{verdict:?}");
    }

    #[test]
    fn reason_codes_have_one_shape() {
        for code in [
            reason::TRANSACTION_FAILED,
            reason::UPTO_TRANSACTION_FAILED,
            reason::PERMIT2_PROXY_NOT_DEPLOYED,
            reason::UNDEPLOYED_SMART_WALLET,
        ] {
            assert!(is_reason_code(code), "{code}");
        }
        for text in [
            "",
            "nonce too low",
            "Nonce_too_low",
            "already-known",
            "x402: error",
            NODE_TEXT,
        ] {
            assert!(!is_reason_code(text), "{text}");
        }
        assert!(!is_reason_code(&"a".repeat(65)));
    }
}
