//! Key derivation tests.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{json, Value};

use super::*;
use crate::proto::{FacilitatorRequest, PaymentPayload, PaymentRequirements, PreparedRequest};

const NETWORK: &str = "eip155:84532";
const ASSET: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const FROM: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const NONCE: &str = "0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480";
const SIGNATURE: &str = "0x2d6a7588d6acca505cbf0d9a4a227e0c52c6c34008c8e8986a1283259764173608a2ce6496642e377d6da8dbbf5836e9bd15092f9ecab05ded3d6293af148b571c";
const NOW: u64 = 1_750_000_000;
const DAY: u64 = 24 * 60 * 60;

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn eip3009(from: &str, nonce: &str, valid_before: u64) -> Value {
    json!({
        "signature": SIGNATURE,
        "authorization": {
            "from": from,
            "to": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "value": "10000",
            "validAfter": "0",
            "validBefore": valid_before.to_string(),
            "nonce": nonce,
        }
    })
}

fn permit2(nonce: &str, deadline: &str) -> Value {
    json!({
        "signature": SIGNATURE,
        "permit2Authorization": {
            "from": FROM,
            "permitted": {"token": ASSET, "amount": "10000"},
            "spender": "0x402085c248EeA27D92E8b30b2C58ed07f9E20001",
            "nonce": nonce,
            "deadline": deadline,
            "witness": {"to": "0x9876543210987654321098765432109876543210", "validAfter": "0"}
        }
    })
}

fn requirements_v2(network: &str, asset: &str) -> Value {
    json!({
        "scheme": "exact",
        "network": network,
        "amount": "10000",
        "asset": asset,
        "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
        "maxTimeoutSeconds": 60,
        "extra": {"name": "USDC", "version": "2"}
    })
}

fn v2(network: &str, asset: &str, payload: Value) -> (PaymentPayload, PaymentRequirements) {
    let accepted = requirements_v2(network, asset);
    let mut payment = json!({"x402Version": 2, "accepted": accepted});
    payment["payload"] = payload;
    let payment = PaymentPayload::from_value(payment).unwrap();
    let requirements = PaymentRequirements::V2(serde_json::from_value(accepted).unwrap());
    (payment, requirements)
}

fn v1(network_v1: &str, asset: &str, payload: Value) -> (PaymentPayload, PaymentRequirements) {
    let mut payment = json!({"x402Version": 1, "scheme": "exact", "network": network_v1});
    payment["payload"] = payload;
    let payment = PaymentPayload::from_value(payment).unwrap();
    let requirements = PaymentRequirements::V1(
        serde_json::from_value(json!({
            "scheme": "exact",
            "network": network_v1,
            "maxAmountRequired": "10000",
            "resource": "https://example.com/paid",
            "description": "",
            "mimeType": "",
            "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "maxTimeoutSeconds": 60,
            "asset": asset,
            "extra": {"name": "USDC", "version": "2"}
        }))
        .unwrap(),
    );
    (payment, requirements)
}

fn key_of(
    pair: &(PaymentPayload, PaymentRequirements),
    network: &str,
) -> Result<ClaimKey, ClaimKeyError> {
    claim_key_at(&pair.0, &pair.1, network, now())
}

#[test]
fn eip3009_key_is_case_insensitive() {
    let lower = v2(
        NETWORK,
        &ASSET.to_lowercase(),
        eip3009(&FROM.to_lowercase(), NONCE, NOW + 60),
    );
    let mixed_nonce = format!("0x{}", NONCE[2..].to_uppercase());
    let upper = v2(
        NETWORK,
        &format!("0x{}", ASSET[2..].to_uppercase()),
        eip3009(
            &format!("0x{}", FROM[2..].to_uppercase()),
            &mixed_nonce,
            NOW + 60,
        ),
    );
    let checksummed = v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 60));
    let key = key_of(&lower, NETWORK).unwrap();
    assert_eq!(
        key.key,
        format!(
            "x402:{NETWORK}:{}:{}:{}",
            ASSET.to_lowercase(),
            FROM.to_lowercase(),
            NONCE
        )
    );
    assert_eq!(key_of(&upper, NETWORK).unwrap(), key);
    assert_eq!(key_of(&checksummed, NETWORK).unwrap(), key);
}

#[test]
fn eip3009_key_separates_what_differs() {
    let base = key_of(&v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 60)), NETWORK).unwrap();
    let other_nonce = format!("{}1", &NONCE[..NONCE.len() - 1]);
    let changed = [
        key_of(
            &v2(NETWORK, ASSET, eip3009(FROM, &other_nonce, NOW + 60)),
            NETWORK,
        ),
        key_of(
            &v2(
                NETWORK,
                ASSET,
                eip3009(
                    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    NONCE,
                    NOW + 60,
                ),
            ),
            NETWORK,
        ),
        key_of(
            &v2(
                NETWORK,
                "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                eip3009(FROM, NONCE, NOW + 60),
            ),
            NETWORK,
        ),
        key_of(
            &v2("eip155:8453", ASSET, eip3009(FROM, NONCE, NOW + 60)),
            "eip155:8453",
        ),
    ];
    for other in changed {
        assert_ne!(other.unwrap().key, base.key);
    }
}

#[test]
fn permit2_nonce_forms_collide() {
    let keys: Vec<_> = ["1", "01", "0x1", "0x01"]
        .into_iter()
        .map(|nonce| {
            key_of(
                &v2(NETWORK, ASSET, permit2(nonce, &(NOW + 3600).to_string())),
                NETWORK,
            )
            .unwrap()
            .key
        })
        .collect();
    assert_eq!(
        keys[0],
        format!("x402:{NETWORK}:permit2:{}:1", FROM.to_lowercase())
    );
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
    let two = key_of(
        &v2(NETWORK, ASSET, permit2("2", &(NOW + 3600).to_string())),
        NETWORK,
    )
    .unwrap();
    assert_ne!(two.key, keys[0]);
}

#[test]
fn permit2_expiry_follows_the_deadline() {
    let deadline = NOW + 30 * DAY;
    let key = key_of(
        &v2(NETWORK, ASSET, permit2("7", &deadline.to_string())),
        NETWORK,
    )
    .unwrap();
    assert_eq!(key.expires_at, at(deadline + 60));
    let hex_deadline = format!("{deadline:#x}");
    let key = key_of(&v2(NETWORK, ASSET, permit2("7", &hex_deadline)), NETWORK).unwrap();
    assert_eq!(key.expires_at, at(deadline + 60));
}

#[test]
fn lifetime_is_expiry_plus_grace_and_at_least_900_s() {
    // Soon-expiring: kept for the minimum.
    let soon = key_of(&v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 60)), NETWORK).unwrap();
    assert_eq!(soon.expires_at, at(NOW + 900));
    // Already expired (the facilitator would say so; the floor still holds).
    let past = key_of(
        &v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW - 100)),
        NETWORK,
    )
    .unwrap();
    assert_eq!(past.expires_at, at(NOW + 900));
    // Long-lived: until validBefore + 60 s.
    let week = key_of(
        &v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 7 * DAY)),
        NETWORK,
    )
    .unwrap();
    assert_eq!(week.expires_at, at(NOW + 7 * DAY + 60));
    // Exactly 366 days is still accepted.
    let max = key_of(
        &v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 366 * DAY)),
        NETWORK,
    )
    .unwrap();
    assert_eq!(max.expires_at, at(NOW + 366 * DAY + 60));
}

#[test]
fn expiry_beyond_366_days_is_refused() {
    let err = key_of(
        &v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 366 * DAY + 1)),
        NETWORK,
    )
    .unwrap_err();
    assert!(matches!(err, ClaimKeyError::LifetimeTooLong), "{err:?}");
    assert_eq!(err.reason(), "authorization_lifetime_too_long");

    // validBefore = 2^256 - 1: "forever".
    let mut forever = eip3009(FROM, NONCE, 0);
    forever["authorization"]["validBefore"] = json!(alloy_primitives::U256::MAX.to_string());
    let err = key_of(&v2(NETWORK, ASSET, forever), NETWORK).unwrap_err();
    assert!(matches!(err, ClaimKeyError::LifetimeTooLong), "{err:?}");

    let err = key_of(
        &v2(
            NETWORK,
            ASSET,
            permit2("1", "0xffffffffffffffffffffffffffffffffffffffff"),
        ),
        NETWORK,
    )
    .unwrap_err();
    assert!(matches!(err, ClaimKeyError::LifetimeTooLong), "{err:?}");
}

#[test]
fn v1_and_v2_copies_share_a_key() {
    let payload = eip3009(FROM, NONCE, NOW + 60);
    let from_v2 = key_of(&v2(NETWORK, ASSET, payload.clone()), NETWORK).unwrap();
    // The engine passes the CAIP-2 id for v1 payments too.
    let from_v1 = key_of(&v1("base-sepolia", ASSET, payload), NETWORK).unwrap();
    assert_eq!(from_v1, from_v2);

    let payload = permit2("5", &(NOW + 3600).to_string());
    let from_v2 = key_of(&v2(NETWORK, ASSET, payload.clone()), NETWORK).unwrap();
    let from_v1 = key_of(&v1("base-sepolia", ASSET, payload), NETWORK).unwrap();
    assert_eq!(from_v1, from_v2);
}

/// A transaction: `slots` signature slots of `fill`, then `message`.
fn svm_tx(slots: u8, fill: u8, message: &[u8]) -> String {
    let mut tx = vec![slots];
    tx.extend(std::iter::repeat_n(fill, usize::from(slots) * 64));
    tx.extend_from_slice(message);
    STANDARD.encode(tx)
}

#[test]
fn svm_key_ignores_the_fee_payer_signature() {
    let network = crate::network::SOLANA_DEVNET;
    let mint = "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU";
    let message = b"\x02\x00\x01\x03pay 10000 to the seller";
    let unsigned = v2(network, mint, json!({"transaction": svm_tx(2, 0, message)}));
    let signed = v2(
        network,
        mint,
        json!({"transaction": svm_tx(2, 0x5a, message)}),
    );
    let key = key_of(&unsigned, network).unwrap();
    assert!(
        key.key.starts_with(&format!("x402:{network}:")),
        "{}",
        key.key
    );
    assert_eq!(key_of(&signed, network).unwrap(), key);
    // Another message is another payment.
    let other = v2(
        network,
        mint,
        json!({"transaction": svm_tx(2, 0, b"\x02\x00\x01\x03pay 20000")}),
    );
    assert_ne!(key_of(&other, network).unwrap().key, key.key);
    // v1 copy, same key.
    let v1_copy = v1(
        "solana-devnet",
        mint,
        json!({"transaction": svm_tx(2, 0x11, message)}),
    );
    assert_eq!(key_of(&v1_copy, network).unwrap(), key);
    // Lifetime: maxTimeoutSeconds (60) is below the floor.
    assert_eq!(key.expires_at, at(NOW + 900));
}

#[test]
fn svm_lifetime_honours_long_timeouts() {
    let network = crate::network::SOLANA_DEVNET;
    let (payment, PaymentRequirements::V2(mut requirements)) = v2(
        network,
        "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU",
        json!({"transaction": svm_tx(1, 0, b"message")}),
    ) else {
        unreachable!("v2 builds v2 requirements")
    };
    requirements.max_timeout_seconds = 3600;
    let requirements = PaymentRequirements::V2(requirements);
    let key = claim_key_at(&payment, &requirements, network, now()).unwrap();
    assert_eq!(key.expires_at, at(NOW + 3600 + 60));
}

#[test]
fn other_networks_and_unknown_evm_shapes_are_keyed_by_digest() {
    // Another network family: a digest of the scheme and the canonical
    // payload (was `claim_unsupported` before every network was guarded).
    let stellar = v2(
        "stellar:testnet",
        "USDC",
        json!({"transaction": "AAAA", "n": 1}),
    );
    let key = key_of(&stellar, "stellar:testnet").unwrap();
    assert!(
        key.key.starts_with("x402:stellar:testnet:digest:"),
        "{}",
        key.key
    );
    assert_eq!(key.key.len(), "x402:stellar:testnet:digest:".len() + 64);
    // Kept for maxTimeoutSeconds (60) + grace, at least 900 s.
    assert_eq!(key.expires_at, at(NOW + 900));

    // Key order and whitespace do not matter: a re-encoded copy is a copy.
    let reordered: Value = serde_json::from_str(r#"{ "n" : 1, "transaction" : "AAAA" }"#).unwrap();
    let copy = v2("stellar:testnet", "USDC", reordered);
    assert_eq!(key_of(&copy, "stellar:testnet").unwrap().key, key.key);
    // Anything else does: another value, network or scheme.
    let other = v2(
        "stellar:testnet",
        "USDC",
        json!({"transaction": "AAAB", "n": 1}),
    );
    assert_ne!(key_of(&other, "stellar:testnet").unwrap().key, key.key);
    assert_ne!(key_of(&stellar, "stellar:pubnet").unwrap().key, key.key);
    let mut scheme = requirements_v2("stellar:testnet", "USDC");
    scheme["scheme"] = json!("other");
    let mut payment = json!({"x402Version": 2, "accepted": scheme});
    payment["payload"] = json!({"transaction": "AAAA", "n": 1});
    let payment = PaymentPayload::from_value(payment).unwrap();
    let req = PaymentRequirements::V2(serde_json::from_value(scheme).unwrap());
    assert_ne!(
        key_of(&(payment, req), "stellar:testnet").unwrap().key,
        key.key
    );

    // A long maxTimeoutSeconds is honoured.
    let mut long = requirements_v2("aptos:2", "0x1::usdc");
    long["maxTimeoutSeconds"] = json!(3600);
    let mut payment = json!({"x402Version": 2, "accepted": long});
    payment["payload"] = json!({"transaction": "0x01"});
    let payment = PaymentPayload::from_value(payment).unwrap();
    let req = PaymentRequirements::V2(serde_json::from_value(long).unwrap());
    assert_eq!(
        key_of(&(payment, req), "aptos:2").unwrap().expires_at,
        at(NOW + 3600 + 60)
    );

    // An EVM payload of an unknown shape.
    let unknown = v2(
        NETWORK,
        ASSET,
        json!({"signature": SIGNATURE, "newMethod": {}}),
    );
    let key = key_of(&unknown, NETWORK).unwrap();
    assert!(
        key.key.starts_with("x402:eip155:84532:digest:"),
        "{}",
        key.key
    );

    // Without the fallback, both have no key.
    for (pair, network) in [(&stellar, "stellar:testnet"), (&unknown, NETWORK)] {
        let err = key::derive(&pair.0, &pair.1, network, now(), false, None).unwrap_err();
        assert!(matches!(err, ClaimKeyError::Unsupported { .. }), "{err:?}");
        assert_eq!(err.reason(), "claim_unsupported");
    }
}

#[test]
fn payloads_that_name_nothing_are_unsupported() {
    for payload in [json!({}), json!(null), json!("x"), json!([1])] {
        let pair = v2("stellar:testnet", "USDC", payload.clone());
        let err = key_of(&pair, "stellar:testnet").unwrap_err();
        assert!(
            matches!(err, ClaimKeyError::Unsupported { .. }),
            "{payload}: {err:?}"
        );
        assert_eq!(err.reason(), "claim_unsupported");
    }
}

#[test]
fn near_payloads_are_keyed_by_sender_key_and_nonce() {
    // A delegate action built by hand (the signed vector and its generator
    // are in tests/near_vector.rs): alice.testnet, one Transfer, nonce 7.
    fn borsh_string(out: &mut Vec<u8>, s: &str) {
        out.extend((s.len() as u32).to_le_bytes());
        out.extend(s.as_bytes());
    }
    let delegate = |nonce: u64, tail: &[u8]| {
        let mut b = Vec::new();
        borsh_string(&mut b, "alice.testnet");
        borsh_string(&mut b, "usdc.testnet");
        b.extend(1u32.to_le_bytes());
        b.push(3); // Transfer
        b.extend(1u128.to_le_bytes());
        b.extend(nonce.to_le_bytes());
        b.extend(1060u64.to_le_bytes());
        b.push(0);
        b.extend([0u8; 32]); // the all-zero ed25519 key: "1111…1" in base58
        b.push(0);
        b.extend([9u8; 64]);
        b.extend(tail);
        STANDARD.encode(b)
    };
    let pair = |text: String| {
        v2(
            "near:testnet",
            "usdc.testnet",
            json!({"signedDelegateAction": text}),
        )
    };
    let key = key_of(&pair(delegate(7, &[])), "near:testnet").unwrap();
    assert_eq!(
        key.key,
        format!(
            "x402:near:testnet:alice.testnet:ed25519:{}:7",
            "1".repeat(32)
        )
    );
    // 2 × maxTimeoutSeconds (60) + grace, at least 900 s.
    assert_eq!(key.expires_at, at(NOW + 900));

    for (payload, expected) in [
        (json!({}), near::NearPayloadError::MissingSignedDelegate),
        (
            json!({"signedDelegateAction": "%%"}),
            near::NearPayloadError::Base64,
        ),
        (
            json!({"signedDelegateAction": "AAAA"}),
            near::NearPayloadError::Truncated,
        ),
        (
            json!({"signedDelegateAction": delegate(7, &[1, 2])}),
            near::NearPayloadError::TrailingBytes(2),
        ),
    ] {
        let err = key_of(&v2("near:testnet", "usdc.testnet", payload), "near:testnet").unwrap_err();
        assert_eq!(err.reason(), "invalid_payload");
        match err {
            ClaimKeyError::InvalidNearPayload(e) => assert_eq!(e, expected),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn malformed_payloads_have_no_key() {
    let mut bad = eip3009(FROM, NONCE, NOW + 60);
    bad["authorization"]["nonce"] = json!("not hex");
    let err = key_of(&v2(NETWORK, ASSET, bad), NETWORK).unwrap_err();
    assert!(
        matches!(err, ClaimKeyError::InvalidEvmPayload(_)),
        "{err:?}"
    );
    assert_eq!(err.reason(), "invalid_payload");

    let err = key_of(
        &v2(NETWORK, "usdc", eip3009(FROM, NONCE, NOW + 60)),
        NETWORK,
    )
    .unwrap_err();
    assert!(matches!(err, ClaimKeyError::InvalidAsset(_)), "{err:?}");

    let network = crate::network::SOLANA_DEVNET;
    let err = key_of(&v2(network, "mint", json!({"tx": "AA=="})), network).unwrap_err();
    assert!(
        matches!(err, ClaimKeyError::InvalidSvmPayload(_)),
        "{err:?}"
    );
    let err = key_of(&v2(network, "mint", json!({"transaction": "%%"})), network).unwrap_err();
    assert!(
        matches!(err, ClaimKeyError::InvalidSvmTransaction(_)),
        "{err:?}"
    );
}

/// The engine reads a payment's EVM payload once, for its pre-check and for
/// the claim: a key derived from that reading is the key derived from the
/// payment, and a payload the reading could not take still gets its own
/// error (or the digest fallback).
#[test]
fn a_payload_read_once_keys_as_the_payment_does() {
    let prepared_of = |pair: &(PaymentPayload, PaymentRequirements)| {
        FacilitatorRequest::new(pair.0.clone(), pair.1.clone()).map(PreparedRequest::new)
    };
    let mut bad = eip3009(FROM, NONCE, NOW + 60);
    bad["authorization"]["nonce"] = json!("not hex");
    let cases = [
        v2(NETWORK, ASSET, eip3009(FROM, NONCE, NOW + 60)),
        v2(NETWORK, ASSET, permit2("7", &(NOW + 60).to_string())),
        v2(NETWORK, ASSET, bad),
        v2(
            NETWORK,
            ASSET,
            json!({"signature": SIGNATURE, "newMethod": {}}),
        ),
        v2(NETWORK, "usdc", eip3009(FROM, NONCE, NOW + 60)),
    ];
    for pair in &cases {
        let prepared = prepared_of(pair).expect("one version");
        let read = prepared.evm_payload();
        // Read once: the second call answers the same reading.
        assert!(std::ptr::eq(
            read.map_or(std::ptr::null(), |p| p as *const _),
            prepared
                .evm_payload()
                .map_or(std::ptr::null(), |p| p as *const _)
        ));
        let direct = key::derive(&pair.0, &pair.1, NETWORK, now(), true, None);
        let shared = key::derive(&pair.0, &pair.1, NETWORK, now(), true, Some(read));
        match (direct, shared) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => {
                assert_eq!(a.reason(), b.reason());
                assert_eq!(a.to_string(), b.to_string());
            }
            other => panic!("{:?}: {other:?}", pair.0),
        }
    }
    // The two readable ones were read; the others were not.
    let read: Vec<bool> = cases
        .iter()
        .map(|pair| prepared_of(pair).unwrap().evm_payload().is_some())
        .collect();
    assert_eq!(read, [true, true, false, false, true]);

    // A copy of the engine's context given another payment reads that one.
    let prepared = prepared_of(&cases[0]).unwrap();
    let ctx = crate::hooks::PaymentContext::of_request("/r", &prepared, NETWORK);
    assert!(matches!(ctx.evm_payload(), Some(Some(_))));
    let mut other = ctx;
    other.payload = &cases[1].0;
    assert!(other.evm_payload().is_none());
    let key = |c: &crate::hooks::PaymentContext<'_>| {
        key::derive(
            c.payload,
            c.requirements,
            NETWORK,
            now(),
            true,
            c.evm_payload(),
        )
        .unwrap()
    };
    assert_eq!(key(&ctx), key_of(&cases[0], NETWORK).unwrap());
    assert_eq!(key(&other), key_of(&cases[1], NETWORK).unwrap());
}

#[test]
fn arbitrary_payloads_never_panic() {
    let payloads = [
        json!(null),
        json!([]),
        json!("0x"),
        json!({"authorization": null}),
        json!({"authorization": {}, "permit2Authorization": {}}),
        json!({"transaction": 7}),
    ];
    for payload in payloads {
        for network in [NETWORK, crate::network::SOLANA_MAINNET, "x:y", ""] {
            let _ = key_of(&v2(network, ASSET, payload.clone()), network);
        }
    }
    // A time before the epoch is treated as the epoch.
    let pair = v2(NETWORK, ASSET, eip3009(FROM, NONCE, 60));
    let key = claim_key_at(
        &pair.0,
        &pair.1,
        NETWORK,
        UNIX_EPOCH - Duration::from_secs(5),
    )
    .unwrap();
    assert_eq!(key.expires_at, at(900));
}
