//! The NEAR `exact` test vector (`tests/data/near_signed_delegate.json`):
//! how it is made, and that the crate's claim key reads it.
//!
//! Upstream's NEAR tests sign fresh random keys at run time and commit no
//! vector, so this file is the generator. It encodes a NEP-366
//! `SignedDelegateAction` with the `borsh` crate's derive (types mirroring
//! nearcore's `DelegateAction`, not this crate's reader) and signs it with
//! ed25519 (ring) from a fixed seed, the way NEAR does: over
//! `sha256(borsh(u32 2^30 + 366) ‖ borsh(delegate_action))` (NEP-461). The
//! signature is deterministic, so the test regenerates the vector and
//! checks the committed file is what it makes; `X402_WRITE_TEST_VECTORS=1`
//! writes it instead.
//!
//! When the file was written it was also checked outside this crate: NEAR's
//! own JavaScript library (`@near-js/transactions` 2.5.1 with
//! `@near-js/crypto`, installed in a scratch directory, not a dependency of
//! this workspace) decoded it with its `SCHEMA.SignedDelegate`, re-encoded
//! it to the same bytes, hashed its `encodeDelegateAction` to the same
//! `signedHashHex`, printed the same `ed25519:<base58>` key and verified the
//! signature; Python's `cryptography` verified it too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::PathBuf, time::SystemTime};

use base64::{engine::general_purpose::STANDARD, Engine as _};
use borsh::BorshSerialize;
use ring::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use x402_core::{
    claim::claim_key_at,
    proto::{PaymentPayload, PaymentRequirements},
};

// nearcore's types, as far as the vector needs them.

#[derive(BorshSerialize)]
enum PublicKey {
    Ed25519([u8; 32]),
}

#[derive(BorshSerialize)]
enum Signature {
    Ed25519([u8; 64]),
}

#[derive(BorshSerialize)]
struct FunctionCallAction {
    method_name: String,
    args: Vec<u8>,
    gas: u64,
    deposit: u128,
}

/// `NonDelegateAction`: the variants before `FunctionCall` keep its tag (2).
#[derive(BorshSerialize)]
#[allow(dead_code)]
enum Action {
    CreateAccount,
    DeployContract(Vec<u8>),
    FunctionCall(FunctionCallAction),
}

#[derive(BorshSerialize)]
struct DelegateAction {
    sender_id: String,
    receiver_id: String,
    actions: Vec<Action>,
    nonce: u64,
    max_block_height: u64,
    public_key: PublicKey,
}

#[derive(BorshSerialize)]
struct SignedDelegateAction {
    delegate_action: DelegateAction,
    signature: Signature,
}

/// NEP-461's prefix for NEP-366 delegate actions: `2^30 + 366`.
const DELEGATE_DISCRIMINANT: u32 = (1 << 30) + 366;

const NETWORK: &str = "near:testnet";

fn key_pair() -> Ed25519KeyPair {
    let seed = Sha256::digest(b"x402-core NEAR exact test vector");
    Ed25519KeyPair::from_seed_unchecked(&seed).unwrap()
}

/// The signed delegate action for `nonce` and `max_block_height`, and the
/// hash that was signed.
fn signed_delegate(nonce: u64, max_block_height: u64) -> (Vec<u8>, [u8; 32]) {
    let keys = key_pair();
    let public: [u8; 32] = keys.public_key().as_ref().try_into().unwrap();
    let delegate = DelegateAction {
        sender_id: "alice.testnet".into(),
        receiver_id: "usdc.testnet".into(),
        actions: vec![Action::FunctionCall(FunctionCallAction {
            method_name: "ft_transfer".into(),
            args: br#"{"receiver_id":"merchant.testnet","amount":"1000000"}"#.to_vec(),
            gas: 30_000_000_000_000,
            deposit: 1,
        })],
        nonce,
        max_block_height,
        public_key: PublicKey::Ed25519(public),
    };
    let mut signable = borsh::to_vec(&DELEGATE_DISCRIMINANT).unwrap();
    signable.extend(borsh::to_vec(&delegate).unwrap());
    let hash: [u8; 32] = Sha256::digest(&signable).into();
    let signature: [u8; 64] = keys.sign(&hash).as_ref().try_into().unwrap();
    let signed = SignedDelegateAction {
        delegate_action: delegate,
        signature: Signature::Ed25519(signature),
    };
    (borsh::to_vec(&signed).unwrap(), hash)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn vector_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/near_signed_delegate.json")
}

fn committed() -> Value {
    serde_json::from_str(&std::fs::read_to_string(vector_path()).unwrap()).unwrap()
}

/// A v2 payment carrying `signed_delegate` for the fixture's requirement.
fn payment(signed_delegate: &str) -> (PaymentPayload, PaymentRequirements) {
    let accepted = json!({
        "scheme": "exact", "network": NETWORK, "amount": "1000000",
        "asset": "usdc.testnet", "payTo": "merchant.testnet", "maxTimeoutSeconds": 60,
    });
    let payment = PaymentPayload::from_value(json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": {"signedDelegateAction": signed_delegate},
    }))
    .unwrap();
    let requirements = PaymentRequirements::V2(serde_json::from_value(accepted).unwrap());
    (payment, requirements)
}

#[test]
fn the_committed_vector_is_what_the_generator_makes() {
    let (bytes, hash) = signed_delegate(5, 1060);
    let keys = key_pair();
    let made = json!({
        "description": "NEP-366 SignedDelegateAction: alice.testnet pays 1000000 usdc.testnet \
            to merchant.testnet (one ft_transfer, 1 yoctoNEAR, 30 Tgas), access key nonce 5, \
            max_block_height 1060, ed25519 key from sha256(\"x402-core NEAR exact test vector\"). \
            Made by x402-core/tests/near_vector.rs.",
        "network": NETWORK,
        "signedDelegateAction": STANDARD.encode(&bytes),
        "senderId": "alice.testnet",
        "publicKeyHex": hex(keys.public_key().as_ref()),
        "publicKey": committed_or(&["publicKey"], ""),
        "nonce": 5,
        "maxBlockHeight": 1060,
        "signedHashHex": hex(&hash),
        "claimKey": committed_or(&["claimKey"], ""),
    });
    if std::env::var_os("X402_WRITE_TEST_VECTORS").is_some() {
        std::fs::create_dir_all(vector_path().parent().unwrap()).unwrap();
        std::fs::write(
            vector_path(),
            serde_json::to_string_pretty(&made).unwrap() + "\n",
        )
        .unwrap();
        return;
    }
    assert_eq!(
        committed(),
        made,
        "regenerate with X402_WRITE_TEST_VECTORS=1"
    );
}

/// A committed field (while rewriting, the value already there).
fn committed_or(path: &[&str], default: &str) -> Value {
    std::fs::read_to_string(vector_path())
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|v| path.iter().try_fold(v, |v, k| v.get(k).cloned()))
        .unwrap_or_else(|| json!(default))
}

#[test]
fn the_vector_signature_verifies() {
    let vector = committed();
    let bytes = STANDARD
        .decode(vector["signedDelegateAction"].as_str().unwrap())
        .unwrap();
    // The signature is the last 64 bytes, after its key-type tag (0).
    let (signed_part, signature) = bytes.split_at(bytes.len() - 64);
    assert_eq!(signed_part.last(), Some(&0), "ed25519 signature tag");
    let delegate = &signed_part[..signed_part.len() - 1];
    let mut signable = DELEGATE_DISCRIMINANT.to_le_bytes().to_vec();
    signable.extend_from_slice(delegate);
    let hash = Sha256::digest(&signable);
    assert_eq!(hex(&hash), vector["signedHashHex"]);
    let public = (0..64)
        .step_by(2)
        .map(|i| u8::from_str_radix(&vector["publicKeyHex"].as_str().unwrap()[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .unwrap();
    UnparsedPublicKey::new(&ED25519, &public)
        .verify(&hash, signature)
        .expect("the vector's signature must verify");
}

#[test]
fn the_claim_key_is_signer_public_key_and_nonce() {
    let vector = committed();
    let (payment, requirements) = payment(vector["signedDelegateAction"].as_str().unwrap());
    let key = claim_key_at(&payment, &requirements, NETWORK, SystemTime::now()).unwrap();
    assert_eq!(key.key, vector["claimKey"]);
    assert_eq!(
        key.key,
        format!(
            "x402:{NETWORK}:alice.testnet:{}:5",
            vector["publicKey"].as_str().unwrap()
        )
    );
}

#[test]
fn another_encoding_of_one_nonce_is_one_claim_and_another_nonce_is_not() {
    let now = SystemTime::now();
    let key = |nonce, height| {
        let (bytes, _) = signed_delegate(nonce, height);
        let (payment, requirements) = payment(&STANDARD.encode(bytes));
        claim_key_at(&payment, &requirements, NETWORK, now)
            .unwrap()
            .key
    };
    // The same nonce signed again with a later max_block_height: different
    // bytes, one on-chain spend, one claim.
    assert_eq!(key(5, 1060), key(5, 2000));
    assert_ne!(key(5, 1060), key(6, 1060));
}
