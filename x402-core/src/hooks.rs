//! Lifecycle hooks: code that runs at each step of a paid request.
//!
//! A hook is a type implementing [`PaymentHooks`]; every method has a default
//! that does nothing, so a hook overrides only the steps it cares about. Hooks
//! run in registration order and are async and `Send`.
//!
//! | Step | Method | May |
//! |---|---|---|
//! | a protected route is requested | [`on_protected_request`](PaymentHooks::on_protected_request) | grant access without payment, or refuse |
//! | before the facilitator's `/verify` | [`before_verify`](PaymentHooks::before_verify) | abort with a reason, or skip the facilitator with a verdict |
//! | after a **valid** verdict | [`after_verify`](PaymentHooks::after_verify) | abort with a reason (the replay claim does this) |
//! | `/verify` failed to answer | [`on_verify_failure`](PaymentHooks::on_verify_failure) | recover with a verdict |
//! | before `/settle` | [`before_settle`](PaymentHooks::before_settle) | abort with a reason |
//! | after `/settle` answered | [`after_settle`](PaymentHooks::after_settle) | observe |
//! | `/settle` failed to answer | [`on_settle_failure`](PaymentHooks::on_settle_failure) | recover with a receipt |
//! | a verified payment ends unsettled | [`on_payment_canceled`](PaymentHooks::on_payment_canceled) | clean up (release a claim) |
//! | a settled payment opened a session | [`on_session_opened`](PaymentHooks::on_session_opened) | observe |
//! | a settled payment's session could not be stored | [`on_session_open_failed`](PaymentHooks::on_session_open_failed) | record it for the seller |
//!
//! Once a settlement started, it runs to completion with its hooks (the
//! `after_settle`, `on_settle_failure` and session hooks) on a task of its
//! own, whatever the client's connection does.
//!
//! Unlike upstream, hooks fail closed: a hook that returns an error from a
//! step that gates the handler stops the request (503 with `Retry-After` for
//! [`HookError::Unavailable`], 500 otherwise), and the handler does not run.
//!
//! ```
//! use async_trait::async_trait;
//! use x402_core::hooks::{AfterVerify, HookError, PaymentContext, PaymentHooks};
//! use x402_core::proto::VerifyResponse;
//!
//! /// Refuses payers on a deny list.
//! #[derive(Debug)]
//! struct DenyList(Vec<String>);
//!
//! #[async_trait]
//! impl PaymentHooks for DenyList {
//!     async fn after_verify(
//!         &self,
//!         _ctx: &PaymentContext<'_>,
//!         verdict: &VerifyResponse,
//!     ) -> Result<AfterVerify, HookError> {
//!         let payer = verdict.payer.as_deref().unwrap_or_default().to_lowercase();
//!         if self.0.contains(&payer) {
//!             return Ok(AfterVerify::Abort { reason: "payer_refused".into() });
//!         }
//!         Ok(AfterVerify::Continue)
//!     }
//! }
//! ```

use std::{error::Error as StdError, fmt, time::Duration};

mod steps;
pub use steps::HookSteps;

use async_trait::async_trait;
use http::StatusCode;

use crate::{
    evm::EvmPayload,
    facilitator::FacilitatorError,
    proto::{PaymentPayload, PaymentRequirements, PreparedRequest, SettleResponse, VerifyResponse},
    route::RequestView,
};

/// What a protected request is, for [`PaymentHooks::on_protected_request`].
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// The request.
    pub request: RequestView<'a>,
    /// The matched route's pattern.
    pub route: &'a str,
}

/// A payment being processed, for the hooks after the payment was read.
///
/// The engine makes these; to call hooks yourself (from another flow, or
/// in a hook's tests), make one with [`PaymentContext::new`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PaymentContext<'a> {
    /// The matched route's pattern.
    pub route: &'a str,
    /// The buyer's payment, as sent.
    pub payload: &'a PaymentPayload,
    /// The seller's requirement it matched, in the payment's version shape
    /// (for `upto` settles, with the charge as its amount).
    pub requirements: &'a PaymentRequirements,
    /// The network as a CAIP-2 id, whatever the version.
    pub network: &'a str,
    /// The engine's facilitator request holding `payload` and
    /// `requirements`, when the engine made this context: what it has
    /// parsed of the payment is read from there, not parsed again.
    prepared: Prepared<'a>,
}

impl<'a> PaymentContext<'a> {
    /// The context of `payload`, paid against `requirements` on `network`
    /// (CAIP-2) at the route whose pattern is `route`.
    ///
    /// ```
    /// use x402_core::hooks::PaymentContext;
    /// use x402_core::proto::{PaymentPayload, PaymentRequirements};
    ///
    /// fn context<'a>(
    ///     payload: &'a PaymentPayload,
    ///     requirements: &'a PaymentRequirements,
    /// ) -> PaymentContext<'a> {
    ///     PaymentContext::new("/weather", payload, requirements, "eip155:8453")
    /// }
    /// ```
    pub fn new(
        route: &'a str,
        payload: &'a PaymentPayload,
        requirements: &'a PaymentRequirements,
        network: &'a str,
    ) -> Self {
        Self {
            route,
            payload,
            requirements,
            network,
            prepared: Prepared(None),
        }
    }

    /// The context of the engine's `request` (its payment and requirement).
    pub(crate) fn of_request(
        route: &'a str,
        request: &'a PreparedRequest,
        network: &'a str,
    ) -> Self {
        Self {
            route,
            payload: &request.payment_payload,
            requirements: &request.payment_requirements,
            network,
            prepared: Prepared(Some(request)),
        }
    }

    /// The payment's `payload` as an EVM payment when the engine has read it
    /// already: `Some(None)` when it is not one, `None` when this context
    /// has no such reading (read it yourself). A copy of an engine's
    /// context whose `payload` was changed has none.
    pub(crate) fn evm_payload(&self) -> Option<Option<&'a EvmPayload>> {
        self.prepared
            .0
            .filter(|request| std::ptr::eq(self.payload, &request.payment_payload))
            .map(PreparedRequest::evm_payload)
    }
}

/// A context's engine request; its `Debug` leaves it out (the context shows
/// its payment and requirement already).
#[derive(Clone, Copy)]
struct Prepared<'a>(Option<&'a PreparedRequest>);

impl fmt::Debug for Prepared<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// The answer of [`PaymentHooks::on_protected_request`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProtectedRequest {
    /// Go on with the payment flow.
    Continue,
    /// Serve without payment and without settlement.
    GrantAccess,
    /// Refuse with a status (403 by default) and a reason.
    Refuse {
        /// The status.
        status: StatusCode,
        /// A machine-readable reason, written into the response.
        reason: String,
    },
}

/// The answer of [`PaymentHooks::before_verify`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BeforeVerify {
    /// Call the facilitator.
    Continue,
    /// Refuse the payment (402 with this reason).
    Abort {
        /// A machine-readable reason.
        reason: String,
    },
    /// Do not call the facilitator; use this verdict.
    Skip(VerifyResponse),
}

/// The answer of [`PaymentHooks::after_verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AfterVerify {
    /// Go on to the handler.
    Continue,
    /// Refuse the payment (402 with this reason); the handler does not run.
    Abort {
        /// A machine-readable reason.
        reason: String,
    },
}

/// The answer of [`PaymentHooks::before_settle`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum BeforeSettle {
    /// Settle.
    Continue,
    /// Do not settle: 402 with a failure receipt carrying this reason.
    Abort {
        /// A machine-readable reason.
        reason: String,
    },
}

/// Why a verified payment ended without settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The handler answered with this status (≥ 400).
    HandlerFailed(StatusCode),
    /// The handler failed without a response (it errored, its response
    /// body failed midway, or an `upto` handler reported a malformed
    /// charge).
    HandlerAborted,
    /// A later hook refused the request after this one accepted it.
    Refused,
    /// The client went away (its request was dropped) before the payment
    /// was settled.
    ClientGone {
        /// Whether claims on the payment are kept: `true` once the handler
        /// started and the engine keeps claims on hang-up (its default; see
        /// `EngineBuilder::release_claims_on_hang_up`). The handler may have
        /// done its work, and a released claim would let the same
        /// authorization start it again by hanging up each time. `false`
        /// when the request was abandoned before its handler started.
        keep_claim: bool,
    },
}

impl CancelReason {
    /// Whether a hook holding something for the payment (a replay claim)
    /// should release it: always, except for a client that hung up while
    /// its handler ran, under the engine's default policy.
    ///
    /// ```
    /// use http::StatusCode;
    /// use x402_core::hooks::CancelReason;
    ///
    /// assert!(CancelReason::HandlerFailed(StatusCode::BAD_GATEWAY).releases_claim());
    /// assert!(CancelReason::Refused.releases_claim());
    /// assert!(!CancelReason::ClientGone { keep_claim: true }.releases_claim());
    /// ```
    pub fn releases_claim(self) -> bool {
        !matches!(self, Self::ClientGone { keep_claim: true })
    }
}

/// A settled payment bought a prepaid session that could not be stored:
/// the buyer paid and holds no token. Given to
/// [`PaymentHooks::on_session_open_failed`]; the seller must act on it
/// (refund, or credit the buyer another way).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOpenFailed {
    /// The session offer's id.
    pub offer_id: String,
    /// Calls sold, the opening call included (which was served).
    pub calls: u64,
    /// Its scope.
    pub scope: String,
    /// Attempts made to store it.
    pub attempts: u32,
    /// The last attempt's error, for logs (never sent to the buyer).
    pub error: String,
}

/// A prepaid session that a settled payment opened. The token itself is
/// never given to hooks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionOpened {
    /// The session offer's id.
    pub offer_id: String,
    /// Calls sold.
    pub calls: u64,
    /// Calls left after the opening call.
    pub remaining: u64,
    /// Unix seconds when it expires.
    pub expires_at: u64,
    /// Its scope.
    pub scope: String,
}

/// A hook could not do its job. Hooks fail closed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    /// A backend the hook needs is down or slow: 503 with `Retry-After`.
    #[error("{reason}: backend unavailable")]
    Unavailable {
        /// The reason code written in the 503 body (e.g. `claim_unavailable`).
        reason: &'static str,
        /// The `Retry-After` value.
        retry_after: Duration,
        /// The cause, logged and never shown.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },
    /// Anything else: 500 with an opaque body.
    #[error("hook failed")]
    Other(#[source] Box<dyn StdError + Send + Sync>),
}

/// Code that runs at the steps of a paid request. See the [module
/// docs](self).
#[async_trait]
pub trait PaymentHooks: Send + Sync + 'static {
    /// Whether this hook implements
    /// [`on_protected_request`](Self::on_protected_request). The default,
    /// `true`, is always correct. A hook that keeps the default
    /// `on_protected_request` may return `false`: when no hook of an engine
    /// inspects requests, the engine answers an unpaid request with its
    /// ready-made 402 without waiting on any hook
    /// ([`Processing::now`](crate::engine::Processing::now)).
    /// A hook that returns `false` yet implements `on_protected_request` is
    /// skipped for those requests.
    fn inspects_requests(&self) -> bool {
        true
    }

    /// The steps this hook takes part in; the engine calls it at those
    /// only. The default, [`HookSteps::ALL`], is always correct; a hook that
    /// keeps the default of some methods may leave their steps out, and then
    /// costs nothing there (each call of an `async` trait method allocates
    /// its future). A hook whose steps leave out a method it implements is
    /// not called there.
    fn steps(&self) -> HookSteps {
        HookSteps::ALL
    }

    /// A protected route was requested, before anything else.
    async fn on_protected_request(
        &self,
        _ctx: &RequestContext<'_>,
    ) -> Result<ProtectedRequest, HookError> {
        Ok(ProtectedRequest::Continue)
    }

    /// A payment matched a requirement; the facilitator is about to verify it.
    async fn before_verify(&self, _ctx: &PaymentContext<'_>) -> Result<BeforeVerify, HookError> {
        Ok(BeforeVerify::Continue)
    }

    /// The payment was verified valid. Runs only for valid verdicts.
    async fn after_verify(
        &self,
        _ctx: &PaymentContext<'_>,
        _verdict: &VerifyResponse,
    ) -> Result<AfterVerify, HookError> {
        Ok(AfterVerify::Continue)
    }

    /// The facilitator gave no verdict. Return `Some` to recover with one.
    async fn on_verify_failure(
        &self,
        _ctx: &PaymentContext<'_>,
        _error: &FacilitatorError,
    ) -> Option<VerifyResponse> {
        None
    }

    /// Settlement is about to be requested.
    async fn before_settle(&self, _ctx: &PaymentContext<'_>) -> Result<BeforeSettle, HookError> {
        Ok(BeforeSettle::Continue)
    }

    /// The facilitator answered `/settle` (successfully or not).
    async fn after_settle(&self, _ctx: &PaymentContext<'_>, _receipt: &SettleResponse) {}

    /// The facilitator gave no settlement answer. Return `Some` to recover.
    async fn on_settle_failure(
        &self,
        _ctx: &PaymentContext<'_>,
        _error: &FacilitatorError,
    ) -> Option<SettleResponse> {
        None
    }

    /// A verified payment ended without a settlement attempt. Release what
    /// the hook holds for it when [`CancelReason::releases_claim`] says so.
    async fn on_payment_canceled(&self, _ctx: &PaymentContext<'_>, _reason: CancelReason) {}

    /// A settled payment opened a prepaid session.
    async fn on_session_opened(
        &self,
        _ctx: &PaymentContext<'_>,
        _receipt: &SettleResponse,
        _session: &SessionOpened,
    ) {
    }

    /// A settled payment bought a session that could not be stored after
    /// retries: the buyer was answered with the paid response and
    /// `X-PAYMENT-SESSION-ERROR`, and holds no token.
    async fn on_session_open_failed(
        &self,
        _ctx: &PaymentContext<'_>,
        _receipt: &SettleResponse,
        _failure: &SessionOpenFailed,
    ) {
    }
}
