//! Why the engine refused a request: the outcomes table of the design, as a
//! type. Its own module, so that metrics can count refusals without
//! importing the engine that makes them.

use std::time::Duration;

use http::StatusCode;

use crate::proto::SettleResponse;

/// Why the engine refused to serve a protected request, with the status and
/// reason code each maps to. This is the outcomes table of the design, and
/// the one place it is written.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Refusal {
    /// No payment header: 402 `payment_required`.
    PaymentRequired,
    /// A payment header that could not be read: 402 with the decode reason.
    InvalidHeader(&'static str),
    /// A payment that matches nothing offered: 402 `no_matching_requirements`.
    NoMatchingRequirements,
    /// The facilitator (or a hook) said invalid: 402 with its reason.
    Invalid(String),
    /// A hook refused the payment after verification: 402 with its reason
    /// (`payment_replayed` for a replay claim).
    Aborted(String),
    /// The facilitator could not be reached or answered garbage: 502
    /// `facilitator_unavailable`.
    FacilitatorUnavailable,
    /// A hook's backend is down: 503 with its reason and `Retry-After`.
    Unavailable {
        /// The reason code.
        reason: &'static str,
        /// The `Retry-After` delay.
        retry_after: Duration,
    },
    /// A hook failed: 500 `internal_error`.
    Internal,
    /// A hook refused the request before payment: its status and reason.
    Forbidden {
        /// The status.
        status: StatusCode,
        /// The reason code.
        reason: String,
    },
    /// The facilitator refused settlement: 402 with a failure receipt; the
    /// handler's body is withheld.
    SettlementFailed(Box<SettleResponse>),
    /// The settlement's outcome is unknown: 502 `settlement_unknown`.
    SettlementUnknown,
    /// A path whose meaning depends on how it is decoded, where a protected
    /// route's parameter or wildcard could take it: 400 `ambiguous_path`
    /// (see [`boundary`](crate::boundary)).
    AmbiguousPath,
    /// The client is over one of its [abuse limits](crate::limit): 429
    /// `rate_limited` with `Retry-After`, before any hook or facilitator
    /// call.
    RateLimited {
        /// How long until the client may try again (`Retry-After`, rounded
        /// up to whole seconds).
        retry_after: Duration,
    },
}

impl Refusal {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::PaymentRequired
            | Self::InvalidHeader(_)
            | Self::NoMatchingRequirements
            | Self::Invalid(_)
            | Self::Aborted(_)
            | Self::SettlementFailed(_) => StatusCode::PAYMENT_REQUIRED,
            Self::FacilitatorUnavailable | Self::SettlementUnknown => StatusCode::BAD_GATEWAY,
            Self::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Forbidden { status, .. } => *status,
            Self::AmbiguousPath => StatusCode::BAD_REQUEST,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The reason code written into the response.
    pub fn reason(&self) -> &str {
        match self {
            Self::PaymentRequired => "payment_required",
            Self::InvalidHeader(r) => r,
            Self::NoMatchingRequirements => "no_matching_requirements",
            Self::Invalid(r) | Self::Aborted(r) => r,
            Self::FacilitatorUnavailable => "facilitator_unavailable",
            Self::Unavailable { reason, .. } => reason,
            Self::Internal => "internal_error",
            Self::Forbidden { reason, .. } => reason,
            Self::SettlementFailed(receipt) => receipt
                .error_reason
                .as_deref()
                .unwrap_or("settlement_failed"),
            Self::SettlementUnknown => "settlement_unknown",
            Self::AmbiguousPath => "ambiguous_path",
            Self::RateLimited { .. } => "rate_limited",
        }
    }

    /// Whether the answer is a payment challenge (a 402 that lists the offers).
    pub fn is_challenge(&self) -> bool {
        self.status() == StatusCode::PAYMENT_REQUIRED
    }
}
