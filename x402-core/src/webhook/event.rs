//! Event types and bodies.

use std::{fmt, str::FromStr};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::{
    hooks::PaymentContext,
    proto::{PaymentPayload, PaymentRequirements, SettleResponse},
};

/// What happened. Serialized as the body's `type`, e.g. `"payment.settled"`.
///
/// ```
/// use x402_core::webhook::EventType;
///
/// assert_eq!(EventType::PaymentSettled.as_str(), "payment.settled");
/// assert_eq!("session.opened".parse::<EventType>().unwrap(), EventType::SessionOpened);
/// assert_eq!(
///     "invoice.paid".parse::<EventType>().unwrap(),
///     EventType::Other("invoice.paid".into()),
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// `payment.settled`: the facilitator moved the money.
    PaymentSettled,
    /// `payment.settlement_failed`: the facilitator refused to settle
    /// (`data.errorReason` says why). The buyer was not charged.
    PaymentSettlementFailed,
    /// `payment.settlement_unknown`: `/settle` gave no answer (timeout,
    /// transport error); the transfer may or may not have happened. Reconcile
    /// against the chain.
    PaymentSettlementUnknown,
    /// `session.opened`: a prepaid session was bought and settled.
    SessionOpened,
    /// `session.open_failed`: a prepaid session was paid for (the payment
    /// settled, the opening call was served) but could not be stored; the
    /// buyer holds no token. Make it good (refund, or credit the payer).
    /// A copy is also kept among the dead letters.
    SessionOpenFailed,
    /// A type this version does not know (received by a verifier).
    Other(String),
}

impl EventType {
    /// The wire name.
    pub fn as_str(&self) -> &str {
        match self {
            Self::PaymentSettled => "payment.settled",
            Self::PaymentSettlementFailed => "payment.settlement_failed",
            Self::PaymentSettlementUnknown => "payment.settlement_unknown",
            Self::SessionOpened => "session.opened",
            Self::SessionOpenFailed => "session.open_failed",
            Self::Other(s) => s,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EventType {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "payment.settled" => Self::PaymentSettled,
            "payment.settlement_failed" => Self::PaymentSettlementFailed,
            "payment.settlement_unknown" => Self::PaymentSettlementUnknown,
            "session.opened" => Self::SessionOpened,
            "session.open_failed" => Self::SessionOpenFailed,
            other => Self::Other(other.to_owned()),
        })
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        Ok(s.parse().unwrap_or(Self::Other(s)))
    }
}

/// The `data` object of a payment or session event.
///
/// Amounts are decimal strings of atomic units; `network` is a CAIP-2 id
/// whatever the payment's protocol version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct EventData {
    /// The network as a CAIP-2 id (`eip155:8453`).
    pub network: String,
    /// The asset (token contract or mint address).
    pub asset: String,
    /// The amount in atomic units: the settled amount when the receipt names
    /// one, else the requirement's amount.
    pub amount: String,
    /// The paying address, when known.
    #[serde(default)]
    pub payer: Option<String>,
    /// The recipient.
    pub pay_to: String,
    /// The transaction hash or signature (`""` when nothing settled).
    #[serde(default)]
    pub transaction: String,
    /// The paid resource's URL, when known.
    #[serde(default)]
    pub resource: Option<String>,
    /// The matched route's pattern (`/report`).
    pub route: String,
    /// The payment scheme (`exact`, `upto`).
    pub scheme: String,
    /// The payment's protocol version (1 or 2).
    pub x402_version: u8,
    /// A machine-readable reason, for failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
    /// Further fields (e.g. a session's `sessionId`, `calls`, `ttlSeconds`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EventData {
    /// The data of an event about the payment in `ctx`, with what the
    /// facilitator's `receipt` says when there is one.
    pub fn from_context(ctx: &PaymentContext<'_>, receipt: Option<&SettleResponse>) -> Self {
        let requirements = ctx.requirements;
        let amount = receipt
            .and_then(|r| r.amount)
            .unwrap_or_else(|| requirements.amount());
        Self {
            network: ctx.network.to_owned(),
            asset: requirements.asset().to_owned(),
            amount: amount.to_string(),
            payer: receipt.and_then(|r| r.payer.clone()),
            pay_to: requirements.pay_to().to_owned(),
            transaction: receipt.map(|r| r.transaction.clone()).unwrap_or_default(),
            resource: resource_url(requirements, ctx.payload),
            route: ctx.route.to_owned(),
            scheme: requirements.scheme().to_owned(),
            x402_version: ctx.payload.version().number(),
            error_reason: receipt.and_then(|r| r.error_reason.clone()),
            extra: Map::new(),
        }
    }
}

/// v1 requirements name the resource; v2 payments carry the buyer's copy of
/// it.
fn resource_url(requirements: &PaymentRequirements, payload: &PaymentPayload) -> Option<String> {
    match (requirements, payload) {
        (PaymentRequirements::V1(r), _) if !r.resource.is_empty() => Some(r.resource.clone()),
        (_, PaymentPayload::V2(p)) => p.resource.as_ref().map(|r| r.url.clone()),
        _ => None,
    }
}

/// A webhook event: the signed body's contents plus the `webhook-id` it was
/// sent under.
///
/// The body is `{"type": ..., "timestamp": <RFC 3339>, "data": {...}}`; the
/// id travels in the `webhook-id` header, stays the same across retries, and
/// is what receivers deduplicate on (delivery is at-least-once).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WebhookEvent {
    /// The `webhook-id` (`msg_...`). Not part of the body.
    #[serde(skip)]
    pub id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// When it happened, RFC 3339 in UTC.
    pub timestamp: String,
    /// The details.
    pub data: EventData,
}

impl WebhookEvent {
    /// A new event of `event_type`, timestamped now, with a fresh random id.
    pub fn new(event_type: EventType, data: EventData) -> Self {
        Self {
            id: new_message_id(),
            event_type,
            timestamp: crate::webhook::time::rfc3339_now(),
            data,
        }
    }

    /// The exact bytes that are signed and sent.
    pub fn to_body(&self) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(self)
    }
}

/// A fresh `msg_` id: 128 random bits, base64url.
pub(crate) fn new_message_id() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::random();
    format!(
        "msg_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}
