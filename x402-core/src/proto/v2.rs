//! Protocol version 2: `PAYMENT-REQUIRED`, `PAYMENT-SIGNATURE`, `PAYMENT-RESPONSE`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{JsonObject, Version};
use crate::money::AtomicAmount;

/// What the protected resource is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    /// The resource's URL.
    pub url: String,
    /// What the buyer gets (`""` when unset, as the TypeScript and Python SDKs
    /// write it).
    #[serde(default)]
    pub description: String,
    /// The media type of the paid response (`""` when unset).
    #[serde(default)]
    pub mime_type: String,
}

/// One way to pay for a resource: an entry of `accepts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    /// The payment scheme (`exact`, `upto`, ...).
    pub scheme: String,
    /// The CAIP-2 network id (`eip155:84532`).
    pub network: String,
    /// Atomic units: the price for `exact`, the ceiling for `upto` (and the
    /// charge in an `upto` settle request).
    pub amount: AtomicAmount,
    /// The token contract or mint.
    pub asset: String,
    /// The recipient.
    pub pay_to: String,
    /// How long the seller waits for the payment to settle.
    pub max_timeout_seconds: u64,
    /// Scheme data (EIP-712 `name`/`version`, `feePayer`, ...); always
    /// written, as `{}` when empty.
    #[serde(default)]
    pub extra: JsonObject,
    /// Fields this crate does not know, kept as they came.
    #[serde(flatten)]
    pub other: JsonObject,
}

/// The challenge in the `PAYMENT-REQUIRED` header of a 402.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    /// Always `2`.
    pub x402_version: Version<2>,
    /// Why the request was not served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The resource being sold.
    pub resource: ResourceInfo,
    /// The ways to pay.
    pub accepts: Vec<PaymentRequirements>,
    /// Extension declarations (`bazaar`, `session`, ...); omitted when empty.
    #[serde(default, skip_serializing_if = "JsonObject::is_empty")]
    pub extensions: JsonObject,
}

/// A buyer's payment in the `PAYMENT-SIGNATURE` header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentPayload {
    /// Always `2`.
    pub x402_version: Version<2>,
    /// The resource, as the buyer copied it from the challenge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceInfo>,
    /// The requirement the buyer chose, as the buyer copied it. The seller
    /// never trusts it: it is only used to find the seller's own requirement.
    pub accepted: PaymentRequirements,
    /// The scheme-specific signed payload.
    pub payload: Value,
    /// Extension data echoed and added by the buyer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extensions: Option<JsonObject>,
    /// Fields this crate does not know, kept as they came.
    #[serde(flatten)]
    pub other: JsonObject,
}
