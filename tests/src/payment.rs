//! Payment header builders. The stand-in does not check signatures; these
//! only have the right shape.

use serde_json::{json, Value};
use x402_core::codec;

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

/// An EIP-3009 `exact` payload: a 65-byte signature and an authorization
/// with a random 32-byte nonce, valid for the next five minutes.
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

/// A Permit2 payload for `accepted` (an `upto` or Permit2 `exact` row): a
/// 65-byte signature and a permit with a random nonce, valid for the next
/// five minutes.
pub fn permit2_payload(accepted: &Value) -> Value {
    let deadline = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let proxy = if accepted["scheme"] == "upto" {
        x402_core::evm::UPTO_PERMIT2_PROXY
    } else {
        x402_core::evm::EXACT_PERMIT2_PROXY
    };
    json!({
        "signature": random_hex(65),
        "permit2Authorization": {
            "from": PAYER,
            "permitted": {"token": accepted["asset"], "amount": accepted["amount"]},
            "spender": proxy.to_checksum(None),
            "nonce": random_hex(16),
            "deadline": deadline.to_string(),
            "witness": {"to": accepted["payTo"], "validAfter": "0"},
        }
    })
}

/// The v2 payment JSON for `accepted` (a row copied from a 402's `accepts`),
/// in the transfer method the row advertises.
pub fn v2_payment(accepted: &Value, resource: Option<&Value>) -> Value {
    let to = accepted["payTo"].as_str().unwrap_or(PAY_TO);
    let value = accepted["amount"].as_str().unwrap_or("0");
    let payload = if accepted["extra"]["assetTransferMethod"] == "permit2" {
        permit2_payload(accepted)
    } else {
        eip3009_payload(to, value)
    };
    let mut payment = json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": payload,
    });
    if let Some(resource) = resource {
        payment["resource"] = resource.clone();
    }
    payment
}

/// A `PAYMENT-SIGNATURE` value for `accepted`.
pub fn v2_header(accepted: &Value) -> String {
    encode(&v2_payment(accepted, None))
}

/// The v1 payment JSON (`X-PAYMENT`) for `(scheme, network)`.
pub fn v1_payment(scheme: &str, network: &str, amount: &str) -> Value {
    json!({
        "x402Version": 1,
        "scheme": scheme,
        "network": network,
        "payload": eip3009_payload(PAY_TO, amount),
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
