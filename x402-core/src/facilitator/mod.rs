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

use async_trait::async_trait;

use crate::proto::{FacilitatorRequest, SettleResponse, SupportedResponse, VerifyResponse};

#[cfg(feature = "http-facilitator")]
mod http;
mod router;

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

    /// What the facilitator handles, with the `extra` values sellers copy into
    /// their requirements.
    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError>;
}

#[async_trait]
impl<F: Facilitator + ?Sized> Facilitator for Arc<F> {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        (**self).verify(request).await
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        (**self).settle(request).await
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        (**self).supported().await
    }
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
