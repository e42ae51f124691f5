//! What a call returns: [`Purchase`].

use http::HeaderMap;
use x402_core::{
    money::AtomicAmount,
    proto::{PaymentPayload, SettleResponse},
};

use crate::{
    challenge::Challenge,
    session::{self, SessionUse},
};

/// The outcome of [`Buyer::get`](crate::Buyer::get) or
/// [`Buyer::request`](crate::Buyer::request).
///
/// A free resource has `challenge: None`. A paid one has the challenge, the
/// payment that was sent, and — when the seller settled — the receipt and
/// the amount: `paid` is `Some` only for a 2xx response with a successful
/// receipt. A payment the seller refused (a `402`, or a failed receipt) is
/// not a `Purchase` but a
/// [`BuyerError::PaymentRefused`](crate::BuyerError::PaymentRefused); a
/// paid call answered otherwise without a receipt (a `500` of the handler,
/// say) is one with `paid: None`. Check `status` and `paid` before trusting
/// `body`.
#[derive(Debug, Clone)]
pub struct Purchase {
    /// The final HTTP status.
    pub status: u16,
    /// The final response headers.
    pub headers: HeaderMap,
    /// The final response body.
    pub body: bytes::Bytes,
    /// The 402 challenge, if there was one (a call redeemed from a session
    /// has none).
    pub challenge: Option<Challenge>,
    /// The payment sent on the retry, if one was sent.
    pub payment: Option<PaymentPayload>,
    /// The decoded `PAYMENT-RESPONSE` (or `X-PAYMENT-RESPONSE`) receipt.
    pub receipt: Option<SettleResponse>,
    /// What was charged to the budget: the signed amount, when the response
    /// was a success with a successful receipt.
    pub paid: Option<AtomicAmount>,
    /// How the call used a prepaid session: `Opened` when this payment
    /// bought one, `Redeemed` when a held session paid for it.
    pub session: Option<SessionUse>,
}

impl Purchase {
    /// A purchase of nothing yet: the response's status and headers (the
    /// session token, if any, marked sensitive), no body.
    pub(crate) fn unpaid(response: &reqwest::Response, session: Option<SessionUse>) -> Self {
        Purchase {
            status: response.status().as_u16(),
            headers: session::scrub(response.headers()),
            body: Default::default(),
            challenge: None,
            payment: None,
            receipt: None,
            paid: None,
            session,
        }
    }

    /// Reads the response's body into the purchase.
    pub(crate) async fn with_body(
        mut self,
        response: reqwest::Response,
    ) -> Result<Self, reqwest::Error> {
        self.body = response.bytes().await?;
        Ok(self)
    }
}
