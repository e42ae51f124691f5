//! The fallback claim key: a digest of the canonical payload.
//!
//! For a payment whose replay primitive this crate does not read (Aptos,
//! Stellar, Sui, TON, Algorand, Hedera, an EVM transfer method it does not
//! know...), the key names the signed payload itself:
//! `x402:{network}:digest:{sha256 hex}` over the scheme and the payload's
//! canonical JSON (object keys sorted, no whitespace). A copy of the header,
//! re-encoded or with its keys reordered, is the same key.
//!
//! The limit: only copies are caught. Two payloads that differ in any byte
//! of their canonical JSON are two keys, even when they spend one
//! authorization (the payer signing the same nonce or sequence number
//! twice). Such a second payment passes this guard; the chain still settles
//! only one of them, so on a route that settles after its handler the
//! second handler's response is withheld (402, settlement failed), and on a
//! route that settles first the handler does not run. Its cost is the
//! handler's work, bounded by the payer's own signatures.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// What the digest starts with, so that it never equals a hash of the same
/// bytes made for another purpose.
const DOMAIN: &[u8] = b"x402 claim digest v1\n";

/// The fallback key of a payment of `scheme` on `network` whose scheme
/// payload is `payload`; `None` when the payload is not a non-empty JSON
/// object (nothing in it names an authorization).
pub(crate) fn digest_key(network: &str, scheme: &str, payload: &Value) -> Option<String> {
    match payload {
        Value::Object(object) if !object.is_empty() => {}
        _ => return None,
    }
    let mut canonical = String::with_capacity(512);
    write_canonical(payload, &mut canonical);
    let mut hasher = Sha256::new();
    hasher.update(DOMAIN);
    hasher.update(scheme.as_bytes());
    hasher.update(b"\n");
    hasher.update(canonical.as_bytes());
    let digest = hasher.finalize();
    let mut key = String::with_capacity(network.len() + 80);
    let _ = write!(key, "x402:{network}:digest:");
    for byte in digest {
        let _ = write!(key, "{byte:02x}");
    }
    Some(key)
}

/// Writes `value` as canonical JSON: object keys in byte order, no
/// whitespace, strings and numbers as serde_json writes them.
pub(crate) fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(key, out);
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(text) => push_json_string(text, out),
        // Null, booleans and numbers have one serde_json form each.
        other => out.push_str(&other.to_string()),
    }
}

fn push_json_string(text: &str, out: &mut String) {
    // A string always serialises; the fallback is never taken.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}
