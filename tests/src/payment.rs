//! Payment header builders: payments signed by [`PAYER`]'s test key (the
//! one of `x402_core::testing`), for a facilitator stand-in that says
//! valid.

use serde_json::{json, Value};
use x402_core::{codec, proto::v2, testing};

use crate::{PAYER, PAY_TO};

/// `0x` + hex of `n` random bytes.
pub fn random_hex(n: usize) -> String {
    let mut out = String::with_capacity(2 + 2 * n);
    out.push_str("0x");
    for _ in 0..n {
        out.push_str(&format!("{:02x}", rand::random::<u8>()));
    }
    out
}

/// The v2 payment JSON for `accepted` (a row copied from a 402's `accepts`),
/// in the transfer method the row advertises, signed by [`PAYER`]'s test key
/// (`x402_core::testing::payment`) so that the engine's pre-check passes it;
/// the stand-in facilitator then says valid.
pub fn v2_payment(accepted: &Value, resource: Option<&Value>) -> Value {
    let mut payment = match serde_json::from_value::<v2::PaymentRequirements>(accepted.clone()) {
        Ok(row) => codec::decode(testing::payment(&row).as_bytes(), 1 << 20).unwrap(),
        // Not a requirement this crate reads (a test's odd row): the shape
        // only, with an EIP-3009 authorization that cannot be signed.
        Err(_) => json!({
            "x402Version": 2,
            "payload": eip3009_payload(
                accepted["payTo"].as_str().unwrap_or(PAY_TO),
                accepted["amount"].as_str().unwrap_or("0"),
            ),
        }),
    };
    payment["accepted"] = accepted.clone();
    if let Some(resource) = resource {
        payment["resource"] = resource.clone();
    }
    payment
}

/// An EIP-3009 authorization from [`PAYER`] with a random signature: the
/// shape of a payment (for rows that say too little to sign, and for
/// payments refused before any signature is looked at).
pub fn eip3009_payload(to: &str, value: &str) -> Value {
    let valid_before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    json!({
        "signature": random_hex(65),
        "authorization": {
            "from": PAYER,
            "to": to,
            "value": value,
            "validAfter": "0",
            "validBefore": valid_before.to_string(),
            "nonce": random_hex(32),
        }
    })
}

/// A signed Permit2 payload for `accepted` (an `upto` row, or an `exact`
/// one moved by Permit2 whatever it advertises).
pub fn permit2_payload(accepted: &Value) -> Value {
    let mut row = accepted.clone();
    if row["scheme"] != "upto" {
        row["extra"]["assetTransferMethod"] = json!("permit2");
    }
    v2_payment(&row, None)["payload"].take()
}

/// Signs a v2 payment (JSON, as [`v2_payment`] gives it) again after a test
/// changed its payload: by [`PAYER`]'s key, for its `accepted` row.
pub fn resign(payment: &mut Value) {
    let row: v2::PaymentRequirements = serde_json::from_value(payment["accepted"].clone()).unwrap();
    if let Some(signature) = testing::sign(&row, &payment["payload"]) {
        payment["payload"]["signature"] = json!(signature);
    }
}

/// A `PAYMENT-SIGNATURE` value for `accepted`.
pub fn v2_header(accepted: &Value) -> String {
    encode(&v2_payment(accepted, None))
}

/// The v1 payment JSON (`X-PAYMENT`) for `(scheme, network)` (a v1 name):
/// [`PAYER`] pays `amount` of the network's USDC to [`PAY_TO`], signed.
pub fn v1_payment(scheme: &str, network: &str, amount: &str) -> Value {
    let caip2 = x402_core::network::caip2(network).unwrap_or(network);
    let asset = x402_core::network::default_stablecoin(caip2)
        .map_or(crate::USDC_BASE_SEPOLIA.to_owned(), |c| {
            c.address.to_owned()
        });
    let row = json!({
        "scheme": "exact", "network": caip2, "amount": amount, "asset": asset,
        "payTo": PAY_TO, "maxTimeoutSeconds": 300,
        "extra": {"name": "USDC", "version": "2"},
    });
    json!({
        "x402Version": 1,
        "scheme": scheme,
        "network": network,
        "payload": v2_payment(&row, None)["payload"],
    })
}

/// An `X-PAYMENT` value: `exact` on `network` (a v1 name).
pub fn v1_header(network: &str) -> String {
    encode(&v1_payment("exact", network, "10000"))
}

/// Base64 of any JSON with the crate's own codec.
pub fn encode(value: &Value) -> String {
    codec::encode(value).unwrap()
}
