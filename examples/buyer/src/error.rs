//! What can go wrong in a purchase: [`BuyerError`], and the kinds it carries
//! ([`Refusal`] when the buyer itself declined, [`ConfigError`],
//! [`ChallengeError`], [`EncodeError`]).
//!
//! Messages are lowercase without a trailing period and describe their own
//! layer only: a cause (a `reqwest` error, a decoding error) is reached with
//! [`std::error::Error::source`], never formatted into the message.

use std::{fmt, time::SystemTimeError};

use alloy_primitives::Address;
use x402_core::{codec, money::AtomicAmount, proto::SettleResponse};

/// What can go wrong in a purchase.
///
/// Which variants come from what the server sent:
///
/// * before paying: [`ChallengeMissing`](Self::ChallengeMissing) and
///   [`MalformedChallenge`](Self::MalformedChallenge) (an unreadable 402), or
///   a [`Refused`](Self::Refused) [`Refusal`] (a readable 402 the buyer will
///   not pay, or a redirect); nothing was signed;
/// * after paying: [`PaymentRefused`](Self::PaymentRefused) (the seller did
///   not accept the payment; nothing was charged to the budget),
///   [`BadReceipt`](Self::BadReceipt), or a [`Refusal::Redirect`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuyerError {
    /// The buyer declined to pay, or to go on. Nothing was signed, except
    /// for a [`Refusal::Redirect`] answered to the paid request.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The builder was misconfigured.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The HTTP request failed (connecting, a timeout, reading a body).
    ///
    /// On the paid request, the amount stays reserved against
    /// [`max_total`](crate::BuyerBuilder::max_total) (the seller may have
    /// settled), unless the connection was never made.
    #[error("http request failed")]
    Http(#[from] reqwest::Error),
    /// The server answered `402 Payment Required` with neither a
    /// `PAYMENT-REQUIRED` header nor a v1 JSON challenge body.
    #[error(
        "402 response without an x402 challenge (no PAYMENT-REQUIRED header, {})",
        if *.body_over_limit { "body over the size limit" } else { "no v1 JSON body" }
    )]
    ChallengeMissing {
        /// Whether the body was longer than
        /// [`MAX_CHALLENGE_BODY_BYTES`](crate::MAX_CHALLENGE_BODY_BYTES), so
        /// it was not read.
        body_over_limit: bool,
    },
    /// The 402's challenge cannot be read.
    #[error("malformed 402 challenge")]
    MalformedChallenge(#[from] ChallengeError),
    /// The seller did not accept the payment: it answered the paid request
    /// with `402`, or with a receipt saying `success: false`. The amount was
    /// released: nothing was charged to the budget.
    #[error(
        "the seller refused the payment (HTTP {status}{})",
        .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
    )]
    PaymentRefused {
        /// The status of the answer to the paid request.
        status: u16,
        /// Why, as the seller put it: the receipt's `errorReason`, else the
        /// `error` of the challenge it answered with, if either says.
        reason: Option<String>,
        /// The decoded receipt (`PAYMENT-RESPONSE` or `X-PAYMENT-RESPONSE`),
        /// if the seller sent one.
        receipt: Option<Box<SettleResponse>>,
    },
    /// The answer to the paid request carries a receipt header that does not
    /// decode. The payment may have been settled, so the amount stays
    /// reserved against [`max_total`](crate::BuyerBuilder::max_total).
    #[error("malformed payment receipt header")]
    BadReceipt(#[source] codec::DecodeError),
    /// The request's body cannot be cloned (a stream), so it cannot be
    /// retried with a payment.
    #[error("the request body cannot be cloned for the paid retry")]
    BodyNotCloneable,
    /// The signer failed to sign the authorization.
    #[error("signing the payment failed")]
    Signing(#[from] alloy_signer::Error),
    /// The signed payment could not be written into a header (a bug, not
    /// something a server can cause).
    #[error("encoding the payment failed")]
    Encode(#[from] EncodeError),
    /// The system clock is before 1970, so no validity window can be signed.
    #[error("the system clock is before the unix epoch")]
    Clock(#[from] SystemTimeError),
}

/// Why a buyer declined to pay (or to go on). Nothing was signed for any
/// refusal except a [`Refusal::Redirect`] of the paid request.
///
/// When every offer of a challenge was declined for the same kind of reason
/// (every one over the cap, say), the refusal is that of the first offer;
/// otherwise it is [`NoAcceptableOffer`](Self::NoAcceptableOffer), listing
/// each offer's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No offer passed every check. `declined` has one entry per offer, in
    /// challenge order; it is empty when the challenge offers no way to pay
    /// at all (an empty `accepts`).
    #[error("no acceptable offer: {}", DeclinedList(.declined))]
    NoAcceptableOffer {
        /// Why each offer was declined, in challenge order.
        declined: Vec<DeclinedOffer>,
    },
    /// The offer is not something this buyer signs: see
    /// [`UnsupportedOffer`].
    #[error(transparent)]
    Unsupported(#[from] UnsupportedOffer),
    /// The offer costs more than the per-call cap.
    #[error("offer of {amount} exceeds the per-call cap of {cap}")]
    OverPerCallCap {
        /// The offer's amount.
        amount: AtomicAmount,
        /// The per-call cap.
        cap: AtomicAmount,
    },
    /// The offer costs more than what is left of the total budget (counting
    /// payments in flight).
    #[error("offer of {amount} exceeds the remaining budget of {remaining}")]
    OverBudget {
        /// The offer's amount.
        amount: AtomicAmount,
        /// What was left of the budget.
        remaining: AtomicAmount,
    },
    /// The offer's network (as the seller wrote it) is not allowed.
    #[error("network `{0}` is not allowed")]
    NetworkNotAllowed(String),
    /// The offer's asset is not allowed.
    #[error("asset `{0}` is not allowed")]
    AssetNotAllowed(Address),
    /// The offer's recipient (`payTo`) is not allowed.
    #[error("recipient `{0}` is not allowed")]
    RecipientNotAllowed(Address),
    /// The requested URL's origin (`scheme://host[:port]`) is not allowed.
    #[error("origin `{0}` is not allowed")]
    OriginNotAllowed(String),
    /// The server answered with a redirect, which is never followed.
    #[error("refusing to follow a redirect to `{location}`")]
    Redirect {
        /// The `Location` header (or the URL a custom client was redirected
        /// to).
        location: String,
    },
}

/// One offer of a challenge and why it was declined, in
/// [`Refusal::NoAcceptableOffer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclinedOffer {
    /// The offer's index in the challenge's `accepts`.
    pub index: usize,
    /// Why it was declined.
    pub refusal: Refusal,
}

impl fmt::Display for DeclinedOffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offer {}: {}", self.index, self.refusal)
    }
}

/// `offer 0: ...; offer 1: ...`, or a note that there was none.
struct DeclinedList<'a>(&'a [DeclinedOffer]);

impl fmt::Display for DeclinedList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("the challenge offers none");
        }
        for (i, declined) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{declined}")?;
        }
        Ok(())
    }
}

/// Why an offer is not one this buyer signs: it pays only `exact` EVM
/// offers by EIP-3009 `transferWithAuthorization`, with the token's EIP-712
/// domain in `extra`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UnsupportedOffer {
    /// The scheme is not `exact`.
    #[error("unsupported scheme `{0}` (this buyer pays `exact` only)")]
    Scheme(String),
    /// The network is not an EVM chain this buyer knows.
    #[error("unsupported network `{0}` (not a known EVM chain)")]
    Network(String),
    /// `extra.assetTransferMethod` is set to something else than `eip3009`
    /// (`permit2`, say).
    #[error("unsupported assetTransferMethod {0} (this buyer signs eip3009 only)")]
    TransferMethod(serde_json::Value),
    /// The `asset` is not an address.
    #[error("asset `{0}` is not an address")]
    InvalidAsset(String),
    /// The `payTo` is not an address.
    #[error("payTo `{0}` is not an address")]
    InvalidPayTo(String),
    /// `extra.name` or `extra.version` (the token's EIP-712 domain) is
    /// missing.
    #[error("extra.name and extra.version (the EIP-712 domain) are missing")]
    MissingDomain,
}

/// A [`BuyerBuilder`](crate::BuyerBuilder) setting that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// [`max_per_call`](crate::BuyerBuilder::max_per_call) was not set.
    #[error("max_per_call is required")]
    MissingMaxPerCall,
    /// A network is neither CAIP-2 (`eip155:84532`) nor a known v1 name.
    #[error("unknown network name `{0}` (neither CAIP-2 nor a known v1 name)")]
    UnknownNetwork(String),
    /// An origin is not `http(s)://host[:port]`.
    #[error("`{0}` is not an http(s)://host[:port] origin")]
    InvalidOrigin(String),
}

/// Why a 402's challenge could not be read, in
/// [`BuyerError::MalformedChallenge`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChallengeError {
    /// The v2 `PAYMENT-REQUIRED` header does not decode to a challenge.
    #[error("invalid PAYMENT-REQUIRED header")]
    Header(#[source] codec::DecodeError),
    /// The body says `x402Version: 1` but is not a valid v1 challenge.
    #[error("invalid v1 challenge body")]
    V1Body(#[source] serde_json::Error),
}

/// Why a signed payment could not be written into its header, in
/// [`BuyerError::Encode`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The payload could not be written as JSON.
    #[error("could not write the payment payload as JSON")]
    Payload(#[source] serde_json::Error),
    /// The payment could not be encoded for its header.
    #[error("could not encode the payment header")]
    Header(#[source] codec::EncodeError),
    /// The encoded payment is not a valid header value.
    #[error("the encoded payment is not a valid header value")]
    HeaderValue(#[source] http::header::InvalidHeaderValue),
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn messages_are_lowercase_and_causes_are_sources() {
        let err =
            BuyerError::MalformedChallenge(ChallengeError::Header(codec::DecodeError::NotBase64));
        assert_eq!(err.to_string(), "malformed 402 challenge");
        let cause = err.source().map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("invalid PAYMENT-REQUIRED header"));
        let root = err
            .source()
            .and_then(|e| e.source())
            .map(ToString::to_string);
        assert_eq!(root, Some(codec::DecodeError::NotBase64.to_string()));
    }

    #[test]
    fn refusals_read_as_themselves() {
        let err = BuyerError::from(Refusal::OverPerCallCap {
            amount: AtomicAmount::from(2u64),
            cap: AtomicAmount::from(1u64),
        });
        assert_eq!(err.to_string(), "offer of 2 exceeds the per-call cap of 1");
        let none = Refusal::NoAcceptableOffer { declined: vec![] };
        assert_eq!(
            none.to_string(),
            "no acceptable offer: the challenge offers none"
        );
        let two = Refusal::NoAcceptableOffer {
            declined: vec![
                DeclinedOffer {
                    index: 0,
                    refusal: UnsupportedOffer::MissingDomain.into(),
                },
                DeclinedOffer {
                    index: 1,
                    refusal: Refusal::NetworkNotAllowed("eip155:1".into()),
                },
            ],
        };
        assert_eq!(
            two.to_string(),
            "no acceptable offer: offer 0: extra.name and extra.version (the EIP-712 domain) \
             are missing; offer 1: network `eip155:1` is not allowed"
        );
    }

    #[test]
    fn payment_refused_names_the_reason_when_there_is_one() {
        let with = BuyerError::PaymentRefused {
            status: 402,
            reason: Some("insufficient_funds".into()),
            receipt: None,
        };
        assert_eq!(
            with.to_string(),
            "the seller refused the payment (HTTP 402: insufficient_funds)"
        );
        let without = BuyerError::PaymentRefused {
            status: 402,
            reason: None,
            receipt: None,
        };
        assert_eq!(
            without.to_string(),
            "the seller refused the payment (HTTP 402)"
        );
    }
}
