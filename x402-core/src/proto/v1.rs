//! Protocol version 1: the challenge in the 402 body, `X-PAYMENT`,
//! `X-PAYMENT-RESPONSE`.
//!
//! Strict v1 clients validate every entry of `accepts` and give up on the
//! whole challenge if one fails, so these types never write `null`:
//! `mimeType` and `description` are always strings, `outputSchema` and `extra`
//! are objects or absent.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{JsonObject, Version};
use crate::money::AtomicAmount;

/// One way to pay, in the version 1 shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// The scheme (strict v1 clients know only `exact`).
    pub scheme: String,
    /// The v1 network name (`base-sepolia`).
    pub network: String,
    /// The price in atomic units.
    pub max_amount_required: AtomicAmount,
    /// The absolute URL of the resource.
    pub resource: String,
    /// What the buyer gets (may be `""`).
    #[serde(default)]
    pub description: String,
    /// The media type of the paid response (may be `""`).
    #[serde(default)]
    pub mime_type: String,
    /// v1's informal discovery hook; an object or absent, never `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<JsonObject>,
    /// The recipient.
    pub pay_to: String,
    /// How long the seller waits for the payment to settle.
    pub max_timeout_seconds: u64,
    /// The token contract or mint.
    pub asset: String,
    /// Scheme data; an object or absent, never `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<JsonObject>,
    /// Fields this crate does not know, kept as they came.
    #[serde(flatten)]
    pub other: JsonObject,
}

/// The JSON body of a version 1 402.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsResponse {
    /// Always `1`.
    pub x402_version: Version<1>,
    /// Why the request was not served.
    #[serde(default)]
    pub error: String,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// The payer, after a failed verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
}

/// A buyer's payment in the `X-PAYMENT` header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// Always `1`.
    pub x402_version: Version<1>,
    /// The scheme paid with.
    pub scheme: String,
    /// The v1 network name.
    pub network: String,
    /// The scheme-specific signed payload.
    pub payload: Value,
    /// Fields this crate does not know, kept as they came.
    #[serde(flatten)]
    pub other: JsonObject,
}
