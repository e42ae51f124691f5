//! Facilitators: the services that verify and settle payments.
//!
//! A [`Facilitator`] answers three questions: is this payment valid for this
//! requirement (`verify`), move the money (`settle`), and what can you handle
//! (`supported`). The engine holds one `Arc<dyn Facilitator>`; several can be
//! combined with [`FacilitatorRouter`], which routes by network and scheme.
//!
//! Implementations shipped here:
//! - [`HttpFacilitator`] (feature `http-facilitator`, on by default): a
//!   client for any facilitator that speaks the x402 HTTP API.
//! - [`FacilitatorRouter`]: routes requests to other facilitators.
//! - [`FailoverFacilitator`]: several facilitators for the same payments,
//!   tried in order behind circuit breakers, never settling a payment twice
//!   (see [its module](failover)).
//!
//! A custom facilitator is one trait implementation:
//!
//! ```
//! use async_trait::async_trait;
//! use x402_core::facilitator::{Facilitator, FacilitatorError};
//! use x402_core::proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};
//!
//! #[derive(Debug)]
//! struct AlwaysInvalid;
//!
//! #[async_trait]
//! impl Facilitator for AlwaysInvalid {
//!     async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
//!         Ok(VerifyResponse::invalid("closed_for_maintenance", None))
//!     }
//!     async fn settle(&self, r: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> {
//!         Ok(SettleResponse::failure(r.payment_requirements.network(), "closed_for_maintenance"))
//!     }
//!     async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
//!         Ok(SupportedResponse::default())
//!     }
//! }
//! ```

use std::{error::Error as StdError, fmt, sync::Arc};

use alloy_primitives::U256;
use async_trait::async_trait;

use crate::{
    proto::{
        FacilitatorRequest, PreparedRequest, SettleResponse, SupportedResponse, VerifyResponse,
    },
    route::BoxFuture,
};

pub mod failover;
#[cfg(feature = "http-facilitator")]
mod http;
mod router;

pub use self::failover::{
    BreakerState, FailoverConfigError, FailoverError, FailoverFacilitator,
    FailoverFacilitatorBuilder, MemberHealth, MemberStatus,
};
#[cfg(feature = "http-facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "http-facilitator")))]
pub use self::http::{
    AuthHeaders, Endpoint, HttpFacilitator, HttpFacilitatorBuilder, HttpFacilitatorConfigError,
};
pub use self::router::FacilitatorRouter;

/// A service that verifies and settles x402 payments.
///
/// Business outcomes (an invalid payment, a refused settlement) are `Ok`
/// answers with `isValid: false` / `success: false`. `Err` means the
/// facilitator could not give an answer at all: unreachable, timed out, or
/// answering something that is not a verdict.
#[async_trait]
pub trait Facilitator: Send + Sync + 'static {
    /// Checks a payment against the seller's requirement without moving money.
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError>;

    /// Moves the money.
    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError>;

    /// [`verify`](Self::verify) for a request whose body is kept once
    /// written: the engine verifies and settles through these two, so that a
    /// facilitator that posts the request (like [`HttpFacilitator`]) writes
    /// its JSON once for both calls. The default calls `verify`.
    async fn verify_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.verify(request).await
    }

    /// [`settle`](Self::settle) for a request whose body is kept once
    /// written (see [`verify_prepared`](Self::verify_prepared)). The default
    /// calls `settle`.
    async fn settle_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.settle(request).await
    }

    /// What the facilitator handles, with the `extra` values sellers copy into
    /// their requirements.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError>;

    /// A look at the facilitator now, for [readiness](crate::readiness):
    /// its `/supported` answer, asked past any cache, and the wallets it
    /// pays settlement gas from.
    ///
    /// The default answers [`supported`](Facilitator::supported) (cached or
    /// not, as this facilitator caches it) and no wallets. Override it to
    /// ask past a cache (without storing a failure in it, so a probe never
    /// breaks payments) or to report gas; [`HttpFacilitator`],
    /// [`FacilitatorRouter`] and the in-process `LocalFacilitator` do.
    async fn health(&self) -> FacilitatorHealth {
        FacilitatorHealth::new(self.supported().await)
    }
}

/// A method of `Facilitator for Arc<F>` taking a request: it hands back the
/// shared facilitator's own future (an `async fn` would box a second future
/// around it on every call).
macro_rules! forward_request {
    ($($method:ident($request:ty) -> $answer:ty;)*) => {$(
        fn $method<'s, 'r, 'a>(&'s self, request: &'r $request) -> BoxFuture<'a, $answer>
        where
            's: 'a,
            'r: 'a,
            Self: 'a,
        {
            (**self).$method(request)
        }
    )*};
}

impl<F: Facilitator + ?Sized> Facilitator for Arc<F> {
    forward_request! {
        verify(FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError>;
        settle(FacilitatorRequest) -> Result<SettleResponse, FacilitatorError>;
        verify_prepared(PreparedRequest) -> Result<VerifyResponse, FacilitatorError>;
        settle_prepared(PreparedRequest) -> Result<SettleResponse, FacilitatorError>;
    }

    fn supported<'s, 'a>(&'s self) -> BoxFuture<'a, Result<SupportedResponse, FacilitatorError>>
    where
        's: 'a,
        Self: 'a,
    {
        (**self).supported()
    }

    fn health<'s, 'a>(&'s self) -> BoxFuture<'a, FacilitatorHealth>
    where
        's: 'a,
        Self: 'a,
    {
        (**self).health()
    }
}

/// What [`Facilitator::health`] found: the facilitator's `/supported` answer
/// (or why there is none) and the wallets it pays settlement gas from.
///
/// ```
/// use x402_core::facilitator::{FacilitatorHealth, GasWallet};
/// use x402_core::proto::SupportedResponse;
///
/// let health = FacilitatorHealth::new(Ok(SupportedResponse::default())).with_wallet(
///     GasWallet::new(
///         "eip155:84532",
///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///         Some(alloy_primitives::U256::from(10u64)),
///         alloy_primitives::U256::from(1_000u64),
///     ),
/// );
/// assert!(health.wallets[0].low_gas());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct FacilitatorHealth {
    /// The `/supported` answer, or the error that came instead.
    pub supported: Result<SupportedResponse, FacilitatorError>,
    /// The wallets that pay settlement gas (none for a hosted facilitator,
    /// whose gas is its own business).
    pub wallets: Vec<GasWallet>,
}

impl FacilitatorHealth {
    /// A health report with this `/supported` answer and no wallets.
    pub fn new(supported: Result<SupportedResponse, FacilitatorError>) -> Self {
        Self {
            supported,
            wallets: Vec::new(),
        }
    }

    /// With one more gas wallet.
    #[must_use]
    pub fn with_wallet(mut self, wallet: GasWallet) -> Self {
        self.wallets.push(wallet);
        self
    }
}

/// A wallet that pays the gas of settlements on one network, with its
/// balance.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GasWallet {
    /// The network, as a CAIP-2 id.
    pub network: String,
    /// The wallet's address.
    pub address: String,
    /// The native balance in wei (or the chain's smallest unit); `None` when
    /// it could not be read.
    pub balance: Option<U256>,
    /// Below this balance the wallet counts as [low on gas](Self::low_gas).
    pub low_gas_threshold: U256,
}

impl GasWallet {
    /// A wallet on `network` at `address` holding `balance` (`None`: not
    /// readable), low on gas under `low_gas_threshold`.
    pub fn new(
        network: impl Into<String>,
        address: impl Into<String>,
        balance: Option<U256>,
        low_gas_threshold: U256,
    ) -> Self {
        Self {
            network: network.into(),
            address: address.into(),
            balance,
            low_gas_threshold,
        }
    }

    /// Whether the balance is known and under the threshold.
    pub fn low_gas(&self) -> bool {
        self.balance.is_some_and(|b| b < self.low_gas_threshold)
    }
}

impl FacilitatorError {
    /// The kind of failure, without its details (which may carry a
    /// facilitator's text): what [readiness](crate::readiness) reports.
    pub fn kind(&self) -> FacilitatorErrorKind {
        match self {
            Self::Transport(_) => FacilitatorErrorKind::Transport,
            Self::Timeout => FacilitatorErrorKind::Timeout,
            Self::Status { .. } => FacilitatorErrorKind::Status,
            Self::Malformed(_) => FacilitatorErrorKind::Malformed,
            Self::Unrouted { .. } => FacilitatorErrorKind::Unrouted,
            Self::SettlementPending { .. } => FacilitatorErrorKind::SettlementPending,
            Self::Other(_) => FacilitatorErrorKind::Other,
        }
    }
}

/// What kind of [`FacilitatorError`] a call ended with; serialised in
/// snake_case (`"timeout"`, `"status"`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FacilitatorErrorKind {
    /// [`FacilitatorError::Transport`].
    Transport,
    /// [`FacilitatorError::Timeout`].
    Timeout,
    /// [`FacilitatorError::Status`].
    Status,
    /// [`FacilitatorError::Malformed`].
    Malformed,
    /// [`FacilitatorError::Unrouted`].
    Unrouted,
    /// [`FacilitatorError::SettlementPending`].
    SettlementPending,
    /// [`FacilitatorError::Other`].
    Other,
}

/// A facilitator gave no usable answer. Never shown to buyers: the engine
/// answers 502 `facilitator_unavailable` and logs this.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FacilitatorError {
    /// The request could not be sent or the reply not read.
    #[error("facilitator transport error")]
    Transport(#[source] Box<dyn StdError + Send + Sync>),
    /// No reply within the deadline.
    #[error("facilitator timed out")]
    Timeout,
    /// A non-success HTTP status without a verdict in the body.
    #[error("facilitator answered HTTP {status}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The facilitator's `error` text, if it sent one (kept for logs).
        message: Option<String>,
    },
    /// A success status whose body is not the expected JSON.
    #[error("facilitator answered malformed JSON: {0}")]
    Malformed(String),
    /// No facilitator handles this network and scheme.
    #[error("no facilitator handles scheme {scheme:?} on network {network:?}")]
    Unrouted {
        /// The scheme.
        scheme: String,
        /// The network.
        network: String,
    },
    /// The facilitator broadcast the settlement but still answered
    /// `settlement_pending` after the engine's retries
    /// ([`PendingRetry`](crate::engine::PendingRetry)): the outcome is
    /// unknown, the transaction may yet land.
    #[error("settlement still pending after {attempts} attempts (transaction {transaction:?})")]
    SettlementPending {
        /// The broadcast transaction, as the facilitator named it (may be
        /// empty).
        transaction: String,
        /// How many settle calls were made.
        attempts: u32,
    },
    /// Anything else, from a custom facilitator.
    #[error(transparent)]
    Other(OtherError),
}

/// An error from a custom facilitator or backend, shared so it can be cloned
/// into logs and metrics.
#[derive(Clone)]
pub struct OtherError(pub Arc<dyn StdError + Send + Sync>);

impl fmt::Debug for OtherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for OtherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for OtherError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    };

    use async_trait::async_trait;

    use super::{Facilitator, FacilitatorError, FacilitatorHealth};
    use crate::proto::{
        FacilitatorRequest, PaymentPayload, PaymentRequirements, PreparedRequest, SettleResponse,
        SupportedResponse, VerifyResponse,
    };

    /// Answers each method with its own name, and counts the calls.
    #[derive(Default)]
    struct Named {
        calls: [AtomicUsize; 6],
    }

    impl Named {
        fn called(&self, i: usize) {
            self.calls[i].fetch_add(1, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl Facilitator for Named {
        async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> {
            self.called(0);
            Ok(VerifyResponse::invalid("verify", None))
        }
        async fn settle(&self, _: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> {
            self.called(1);
            Ok(SettleResponse::failure("n", "settle"))
        }
        async fn verify_prepared(
            &self,
            _: &PreparedRequest,
        ) -> Result<VerifyResponse, FacilitatorError> {
            self.called(2);
            Ok(VerifyResponse::invalid("verify_prepared", None))
        }
        async fn settle_prepared(
            &self,
            _: &PreparedRequest,
        ) -> Result<SettleResponse, FacilitatorError> {
            self.called(3);
            Ok(SettleResponse::failure("n", "settle_prepared"))
        }
        async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
            self.called(4);
            Ok(SupportedResponse {
                extensions: vec!["supported".into()],
                ..SupportedResponse::default()
            })
        }
        async fn health(&self) -> FacilitatorHealth {
            self.called(5);
            FacilitatorHealth::new(Err(FacilitatorError::Timeout))
        }
    }

    /// A shared facilitator (`Arc<F>`, `Arc<dyn Facilitator>`, and an `Arc`
    /// of those) answers each method with the inner one's answer, one call
    /// each.
    #[tokio::test]
    async fn a_shared_facilitator_is_the_facilitator() {
        let accepted = serde_json::json!({
            "scheme": "exact", "network": "eip155:84532", "amount": "1000",
            "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C", "maxTimeoutSeconds": 60,
        });
        let payload = serde_json::json!({"x402Version": 2, "accepted": accepted, "payload": {}});
        let request = FacilitatorRequest::new(
            PaymentPayload::from_value(payload).unwrap(),
            PaymentRequirements::V2(serde_json::from_value(accepted).unwrap()),
        )
        .expect("one version");
        let prepared = PreparedRequest::new(request.clone());
        let inner = Arc::new(Named::default());
        let shared: Arc<dyn Facilitator> = inner.clone();
        let twice = Arc::new(shared.clone());
        for facilitator in [&shared as &dyn Facilitator, &*twice, &inner] {
            let reason = |v: VerifyResponse| v.invalid_reason.unwrap_or_default();
            let error = |s: SettleResponse| s.error_reason.unwrap_or_default();
            assert_eq!(
                reason(facilitator.verify(&request).await.unwrap()),
                "verify"
            );
            assert_eq!(error(facilitator.settle(&request).await.unwrap()), "settle");
            assert_eq!(
                reason(facilitator.verify_prepared(&prepared).await.unwrap()),
                "verify_prepared"
            );
            assert_eq!(
                error(facilitator.settle_prepared(&prepared).await.unwrap()),
                "settle_prepared"
            );
            assert_eq!(
                facilitator.supported().await.unwrap().extensions,
                ["supported"]
            );
            assert!(facilitator.health().await.supported.is_err());
        }
        let counts: Vec<usize> = inner
            .calls
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .collect();
        assert_eq!(counts, [3; 6]);
    }
}
