//! Building a route's 402 challenge in both protocol versions.
//!
//! One response serves both kinds of client: the `PAYMENT-REQUIRED` header
//! carries the v2 [`PaymentRequired`](v2::PaymentRequired) and the JSON body
//! the v1 [`PaymentRequirementsResponse`](v1::PaymentRequirementsResponse).
//! The v1 body holds only the rows a strict v1 client accepts: `exact` rows on
//! networks whose v1 name the legacy clients know. Everything else (`upto`,
//! CAIP-2-only networks, session offers) is v2 only.
//!
//! ```
//! use x402_core::challenge;
//! use x402_core::money::AtomicAmount;
//! use x402_core::proto::{v2, JsonObject};
//!
//! let row = |scheme: &str, network: &str| v2::PaymentRequirements {
//!     scheme: scheme.into(),
//!     network: network.into(),
//!     amount: AtomicAmount::from(10_000u64),
//!     asset: "0x036CbD53842c5426634e7929541eC2318f3dCF7e".into(),
//!     pay_to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C".into(),
//!     max_timeout_seconds: 300,
//!     extra: JsonObject::new(),
//!     other: JsonObject::new(),
//! };
//! let accepts = [row("exact", "eip155:84532"), row("upto", "eip155:84532"), row("exact", "eip155:31337")];
//! let resource = v2::ResourceInfo { url: "http://localhost/r".into(), ..Default::default() };
//! let v1 = challenge::v1_body(&resource, &accepts, None, "payment_required");
//! assert_eq!(v1.accepts.len(), 1);
//! assert_eq!(v1.accepts[0].network, "base-sepolia");
//! ```

use crate::{
    network,
    proto::{v1, v2, JsonObject, Version},
    route::EXACT,
};

/// The v1 row for a v2 requirement, or `None` when strict v1 clients would
/// reject it (a scheme other than `exact`, or a network without a v1 name
/// they know).
pub fn v1_row(
    requirement: &v2::PaymentRequirements,
    resource: &v2::ResourceInfo,
    output_schema: Option<&JsonObject>,
) -> Option<v1::PaymentRequirements> {
    if requirement.scheme != EXACT || !network::legacy_v1_accepts(&requirement.network) {
        return None;
    }
    let v1_network = network::v1_name(&requirement.network)?;
    Some(v1::PaymentRequirements {
        scheme: requirement.scheme.clone(),
        network: v1_network.to_owned(),
        max_amount_required: requirement.amount,
        resource: resource.url.clone(),
        description: resource.description.clone(),
        mime_type: resource.mime_type.clone(),
        output_schema: output_schema.cloned(),
        pay_to: requirement.pay_to.clone(),
        max_timeout_seconds: requirement.max_timeout_seconds,
        asset: requirement.asset.clone(),
        extra: (!requirement.extra.is_empty()).then(|| requirement.extra.clone()),
        other: JsonObject::new(),
    })
}

/// The v2 challenge.
pub fn payment_required(
    resource: &v2::ResourceInfo,
    accepts: &[v2::PaymentRequirements],
    extensions: &JsonObject,
    error: &str,
) -> v2::PaymentRequired {
    v2::PaymentRequired {
        x402_version: Version,
        error: Some(error.to_owned()),
        resource: resource.clone(),
        accepts: accepts.to_vec(),
        extensions: extensions.clone(),
    }
}

/// The v1 body: the rows of `accepts` strict v1 clients accept.
pub fn v1_body(
    resource: &v2::ResourceInfo,
    accepts: &[v2::PaymentRequirements],
    output_schema: Option<&JsonObject>,
    error: &str,
) -> v1::PaymentRequirementsResponse {
    v1::PaymentRequirementsResponse {
        x402_version: Version,
        error: error.to_owned(),
        accepts: accepts
            .iter()
            .filter_map(|r| v1_row(r, resource, output_schema))
            .collect(),
        payer: None,
    }
}
