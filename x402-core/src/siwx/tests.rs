#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use http::{Request, Response, StatusCode};
use serde_json::Value;

use super::message::siwe_message;
use super::*;
use crate::{
    codec,
    testing::{self, StandIn},
    Engine, Offer, Route, VerifiedPayment,
};

const OFFICIAL: &str = include_str!("testdata/official.json");

fn official() -> Value {
    serde_json::from_str(OFFICIAL).unwrap()
}

/// The payload the official client would send for `info`, unsigned.
fn payload_of(info: &Value, address: &str) -> SiwxPayload {
    let mut v = info.clone();
    v["address"] = address.into();
    v["signature"] = "0x".into();
    serde_json::from_value(v).unwrap()
}

#[test]
fn message_rebuild_matches_the_official_helper() {
    let vectors = official();
    let messages = vectors["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    for v in messages {
        let p = payload_of(&v["info"], v["address"].as_str().unwrap());
        assert_eq!(
            siwe_message(&p).unwrap(),
            v["message"].as_str().unwrap(),
            "{}",
            v["info"]
        );
    }
}

#[test]
fn official_proof_decodes_and_recovers_its_signer() {
    let vectors = official();
    let proof = &vectors["proof"];
    let p: SiwxPayload =
        codec::decode(proof["header"].as_str().unwrap().as_bytes(), 1 << 14).unwrap();
    assert_eq!(serde_json::to_value(&p).unwrap(), proof["payload"]);
    let message = siwe_message(&p).unwrap();
    let signature = alloy_primitives::hex::decode(&p.signature[2..]).unwrap();
    let digest = alloy_primitives::eip191_hash_message(message.as_bytes());
    let signer = crate::evm::recover_signer(digest, &signature).unwrap();
    assert_eq!(signer.to_checksum(None), proof["signer"].as_str().unwrap());
    // One character changed in the message: another signer.
    let mut other = p.clone();
    other.statement = Some("Sign in to the demo!".into());
    let digest = alloy_primitives::eip191_hash_message(siwe_message(&other).unwrap().as_bytes());
    assert_ne!(
        crate::evm::recover_signer(digest, &signature).ok(),
        Some(signer)
    );
}

#[test]
fn messages_refuse_line_breaks_and_bad_chains() {
    let vectors = official();
    let base = payload_of(
        &vectors["messages"][0]["info"],
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    );
    let mut p = base.clone();
    p.statement = Some("a\nURI: https://evil.example".into());
    assert!(siwe_message(&p).is_err());
    let mut p = base.clone();
    p.resources = Some(vec!["x\r".into()]);
    assert!(siwe_message(&p).is_err());
    let mut p = base;
    p.chain_id = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".into();
    assert!(siwe_message(&p).is_err());
}

#[test]
fn nonces_are_bound_to_key_route_and_issue_time() {
    let key = NonceKey::random();
    let at = "2026-01-31T12:00:00.000Z";
    let nonce = key.issue("/a", at);
    assert_eq!(nonce.len(), 32, "32 hex digits, as the extension specifies");
    assert!(nonce.bytes().all(|b| b.is_ascii_alphanumeric()));
    assert_ne!(nonce, key.issue("/a", at), "nonces are random");
    assert!(key.issued(&nonce, "/a", at));
    assert!(!key.issued(&nonce, "/b", at), "another route");
    assert!(
        !key.issued(&nonce, "/a", "2026-01-31T12:04:00.000Z"),
        "another issuedAt"
    );
    assert!(!NonceKey::random().issued(&nonce, "/a", at), "another key");
    let mut forged = nonce.clone().into_bytes();
    forged[31] = if forged[31] == b'f' { b'e' } else { b'f' };
    assert!(!key.issued(&String::from_utf8(forged).unwrap(), "/a", at));
    for bad in ["", "abc", &nonce.to_uppercase(), &format!("{nonce}0")] {
        assert!(!key.issued(bad, "/a", at), "{bad}");
    }
    let same = NonceKey::from_hex(&"11".repeat(32)).unwrap();
    let n = same.issue("/a", at);
    assert!(NonceKey::from_bytes([0x11; 32]).issued(&n, "/a", at));
    assert!(NonceKey::from_hex("00").is_none());
    assert!(!format!("{same:?}").contains("11"));
}

#[tokio::test]
async fn memory_store_uses_a_nonce_once_and_expires_access() {
    let store = MemorySignInStore::new();
    let now = crate::unix::now();
    assert!(store.use_nonce("n1", now + 60).await.unwrap());
    assert!(!store.use_nonce("n1", now + 60).await.unwrap());
    assert!(store.use_nonce("n2", now + 60).await.unwrap());
    assert!(!store.has_access("/r", "0xab", now).await.unwrap());
    store.record_access("/r", "0xab", now + 10).await.unwrap();
    assert!(store.has_access("/r", "0xab", now).await.unwrap());
    assert!(!store.has_access("/other", "0xab", now).await.unwrap());
    assert!(!store.has_access("/r", "0xab", now + 11).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_nonce_use_is_atomic_under_concurrency() {
    let store = Arc::new(MemorySignInStore::new());
    let exp = crate::unix::now() + 60;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.use_nonce("shared", exp).await.unwrap()
        }));
    }
    let mut won = 0;
    for t in tasks {
        won += usize::from(t.await.unwrap());
    }
    assert_eq!(won, 1);
}

#[test]
fn origins_leave_default_ports_out() {
    assert_eq!(
        origin_and_domain("https", "API.example.com:443"),
        ("https://api.example.com".into(), "api.example.com".into())
    );
    assert_eq!(
        origin_and_domain("http", "127.0.0.1:4021"),
        ("http://127.0.0.1:4021".into(), "127.0.0.1:4021".into())
    );
    assert_eq!(origin_and_domain("http", "a:80").1, "a");
}

// --- The engine, end to end with the stand-in facilitator. ---

const ORIGIN: &str = "https://api.example.com";
const ROUTE: &str = "/siwx/demo";

fn payer_key() -> PrivateKeySigner {
    // `testing::PAYER`'s key, the payer the stand-in settles for.
    let secret = alloy_primitives::keccak256(b"x402_core::testing payer");
    PrivateKeySigner::from_bytes(&secret).unwrap()
}

fn engine(facilitator: Arc<StandIn>) -> Engine {
    Engine::builder_arc(facilitator)
        .public_origin(ORIGIN)
        .route(
            Route::get(ROUTE)
                .offer(Offer::exact("eip155:84532", "$0.001", testing::PAY_TO))
                .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600)).statement("Sign in")),
        )
        .build()
        .unwrap()
}

/// The 402's sign-in-with-x declaration, for a request whose `Host` lies.
async fn declaration_of(engine: &Engine) -> Value {
    let request = Request::get(ROUTE)
        .header("host", "evil.example")
        .body(())
        .unwrap();
    let challenge = testing::challenge(engine, request).await;
    let ext = challenge.extensions.get(SIGN_IN_WITH_X).cloned().unwrap();
    serde_json::to_value(ext).unwrap()
}

/// What the official client does with a declaration: the payload for the
/// first chain, signed (EIP-191) by `key`; `tweak` edits the fields first.
fn sign(declaration: &Value, key: &PrivateKeySigner, tweak: impl FnOnce(&mut Value)) -> String {
    let chain = &declaration["supportedChains"][0];
    let mut v = declaration["info"].clone();
    v["chainId"] = chain["chainId"].clone();
    v["type"] = chain["type"].clone();
    v["address"] = key.address().to_checksum(None).into();
    v["signature"] = "0x".into();
    tweak(&mut v);
    let mut p: SiwxPayload = serde_json::from_value(v).unwrap();
    let message = siwe_message(&p).unwrap();
    let signature = key.sign_message_sync(message.as_bytes()).unwrap();
    p.signature = format!("0x{}", alloy_primitives::hex::encode(signature.as_bytes()));
    codec::encode(&p).unwrap()
}

async fn handler(request: Request<()>) -> Response<String> {
    let payment = request
        .extensions()
        .get::<VerifiedPayment>()
        .cloned()
        .unwrap();
    let who = payment.sign_in.map(|s| s.address).unwrap_or_default();
    Response::new(format!("amount={} signed_in={who}", payment.amount))
}

async fn send(engine: &Engine, header: Option<(&str, String)>) -> Response<bytes::Bytes> {
    let mut request = Request::get(ROUTE);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    testing::serve(engine, request.body(()).unwrap(), handler).await
}

fn error_of(response: &Response<bytes::Bytes>) -> String {
    let header = response.headers().get(codec::PAYMENT_REQUIRED).unwrap();
    let challenge: Value = codec::decode(header.as_bytes(), 1 << 20).unwrap();
    challenge["error"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_challenge_names_the_public_origin_and_a_fresh_nonce() {
    let engine = engine(Arc::new(StandIn::new()));
    let a = declaration_of(&engine).await;
    let b = declaration_of(&engine).await;
    let info = &a["info"];
    assert_eq!(info["domain"], "api.example.com");
    assert_eq!(info["uri"], "https://api.example.com/siwx/demo");
    assert_eq!(info["resources"][0], "https://api.example.com/siwx/demo");
    assert_eq!(info["version"], "1");
    assert_eq!(info["statement"], "Sign in");
    assert_eq!(a["supportedChains"][0]["chainId"], "eip155:84532");
    assert_eq!(a["supportedChains"][0]["type"], "eip191");
    assert_ne!(info["nonce"], b["info"]["nonce"]);
    let issued = time::parse_millis(info["issuedAt"].as_str().unwrap()).unwrap();
    let expires = time::parse_millis(info["expirationTime"].as_str().unwrap()).unwrap();
    assert_eq!(expires - issued, 300_000);
}

#[tokio::test]
async fn pay_once_then_sign_in_without_paying() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(facilitator.clone());
    let key = payer_key();

    // Never paid: refused, the handler does not run (it would panic
    // without a payment), nothing is asked of the facilitator.
    let decl = declaration_of(&engine).await;
    let refused = send(&engine, Some(("sign-in-with-x", sign(&decl, &key, |_| {})))).await;
    assert_eq!(refused.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&refused), "invalid_siwx_not_paid");
    facilitator.assert_calls(0, 0);

    // Pay once.
    let challenge = testing::challenge(&engine, Request::get(ROUTE).body(()).unwrap()).await;
    let paid = send(
        &engine,
        Some(("payment-signature", testing::pay(&challenge))),
    )
    .await;
    assert_eq!(paid.status(), StatusCode::OK);
    facilitator.assert_calls(1, 1);

    // Signed in: the handler runs, amount 0, no facilitator call, no receipt.
    let decl = declaration_of(&engine).await;
    let proof = sign(&decl, &key, |_| {});
    let ok = send(&engine, Some(("sign-in-with-x", proof.clone()))).await;
    assert_eq!(ok.status(), StatusCode::OK, "{:?}", ok.headers());
    assert_eq!(ok.body(), &format!("amount=0 signed_in={}", testing::PAYER));
    assert!(!ok.headers().contains_key("payment-response"));
    facilitator.assert_calls(1, 1);

    // The same proof again: its nonce is spent.
    let replayed = send(&engine, Some(("sign-in-with-x", proof))).await;
    assert_eq!(replayed.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&replayed), "invalid_siwx_nonce");

    // A wallet that never paid, with a fresh nonce.
    let stranger = PrivateKeySigner::random();
    let decl = declaration_of(&engine).await;
    let r = send(
        &engine,
        Some(("sign-in-with-x", sign(&decl, &stranger, |_| {}))),
    )
    .await;
    assert_eq!(error_of(&r), "invalid_siwx_not_paid");

    // Each broken proof, each with a fresh nonce.
    type Tweak = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Tweak)> = vec![
        (
            "invalid_siwx_domain_mismatch",
            Box::new(|v| v["domain"] = "evil.example".into()),
        ),
        (
            "invalid_siwx_uri_mismatch",
            Box::new(|v| v["uri"] = "https://evil.example/siwx/demo".into()),
        ),
        (
            "invalid_siwx_uri_mismatch",
            Box::new(|v| v["uri"] = "http://api.example.com/siwx/demo".into()),
        ),
        (
            "invalid_siwx_nonce",
            Box::new(|v| v["nonce"] = "0123456789abcdef0123".into()),
        ),
        (
            "invalid_siwx_unsupported_chain",
            Box::new(|v| v["chainId"] = "eip155:1".into()),
        ),
        (
            "invalid_siwx_issued_at_too_old",
            Box::new(|v| v["issuedAt"] = "2020-01-01T00:00:00.000Z".into()),
        ),
        (
            "invalid_siwx_issued_at_in_future",
            Box::new(|v| v["issuedAt"] = "2999-01-01T00:00:00.000Z".into()),
        ),
        // Still recent, but not the time the nonce was issued at.
        (
            "invalid_siwx_nonce",
            Box::new(|v| {
                let t = time::parse_millis(v["issuedAt"].as_str().unwrap()).unwrap();
                v["issuedAt"] = time::format_millis(t - 1000).into();
            }),
        ),
        (
            "invalid_siwx_expired",
            Box::new(|v| v["expirationTime"] = "2020-01-01T00:00:00.000Z".into()),
        ),
        (
            "invalid_siwx_not_yet_valid",
            Box::new(|v| v["notBefore"] = "2999-01-01T00:00:00.000Z".into()),
        ),
        (
            "invalid_siwx_issued_at",
            Box::new(|v| v["issuedAt"] = "yesterday".into()),
        ),
    ];
    for (reason, tweak) in cases {
        let decl = declaration_of(&engine).await;
        let r = send(&engine, Some(("sign-in-with-x", sign(&decl, &key, tweak)))).await;
        assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED, "{reason}");
        assert_eq!(error_of(&r), reason);
    }

    // Signed by someone else than the address it names.
    let decl = declaration_of(&engine).await;
    let address = key.address().to_checksum(None);
    let forged = sign(&decl, &stranger, |v| v["address"] = address.clone().into());
    assert_eq!(
        error_of(&send(&engine, Some(("sign-in-with-x", forged))).await),
        "invalid_siwx_signature"
    );

    // A nonce another key issued.
    let decl = declaration_of(&engine).await;
    let other = NonceKey::random().issue(ROUTE, decl["info"]["issuedAt"].as_str().unwrap());
    let r = send(
        &engine,
        Some((
            "sign-in-with-x",
            sign(&decl, &key, |v| v["nonce"] = other.into()),
        )),
    )
    .await;
    assert_eq!(error_of(&r), "invalid_siwx_nonce");

    // Garbage.
    let r = send(&engine, Some(("sign-in-with-x", "not base64!".into()))).await;
    assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&r), "invalid_siwx_header");

    // Still exactly one verify and one settle: nothing above paid.
    facilitator.assert_calls(1, 1);
}

/// A store that is down: 503, never the handler.
struct Down;

#[async_trait::async_trait]
impl SignInStore for Down {
    async fn record_access(&self, _: &str, _: &str, _: u64) -> Result<(), SignInStoreError> {
        Err(SignInStoreError::Backend("down".into()))
    }
    async fn has_access(&self, _: &str, _: &str, _: u64) -> Result<bool, SignInStoreError> {
        Err(SignInStoreError::Backend("down".into()))
    }
    async fn use_nonce(&self, _: &str, _: u64) -> Result<bool, SignInStoreError> {
        Err(SignInStoreError::Backend("down".into()))
    }
}

#[tokio::test]
async fn a_store_that_is_down_answers_503() {
    let engine = Engine::builder(StandIn::new())
        .public_origin(ORIGIN)
        .sign_in_with_x(SignInConfig::new().store(Down))
        .route(
            Route::get(ROUTE)
                .offer(Offer::exact("eip155:84532", "$0.001", testing::PAY_TO))
                .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600))),
        )
        .build()
        .unwrap();
    let decl = declaration_of(&engine).await;
    let r = send(
        &engine,
        Some(("sign-in-with-x", sign(&decl, &payer_key(), |_| {}))),
    )
    .await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(std::str::from_utf8(r.body())
        .unwrap()
        .contains("siwx_unavailable"));
    // A payment still goes through (the access is not recorded; logged).
    let challenge = testing::challenge(&engine, Request::get(ROUTE).body(()).unwrap()).await;
    let paid = send(
        &engine,
        Some(("payment-signature", testing::pay(&challenge))),
    )
    .await;
    assert_eq!(paid.status(), StatusCode::OK);
}

#[tokio::test]
async fn routes_without_sign_in_ignore_the_header() {
    let engine = Engine::builder(StandIn::new())
        .public_origin(ORIGIN)
        .route(Route::get(ROUTE).offer(Offer::exact("eip155:84532", "$0.001", testing::PAY_TO)))
        .build()
        .unwrap();
    let challenge = testing::challenge(&engine, Request::get(ROUTE).body(()).unwrap()).await;
    assert!(!challenge.extensions.contains_key(SIGN_IN_WITH_X));
    let r = send(&engine, Some(("sign-in-with-x", "eyJ9".into()))).await;
    assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(error_of(&r), "payment_required");
}

/// Smart wallets that answer as told.
struct Wallets(Result<bool, ()>);

#[async_trait::async_trait]
impl SmartWallets for Wallets {
    async fn is_valid_signature(
        &self,
        _: &str,
        _: alloy_primitives::Address,
        _: alloy_primitives::B256,
        _: &[u8],
    ) -> Result<bool, Box<dyn std::error::Error + Send + Sync>> {
        self.0.map_err(|()| "rpc down".into())
    }
}

#[tokio::test]
async fn smart_wallet_answers_decide_proofs_that_do_not_recover() {
    for (answer, status, reason) in [
        (Ok(true), StatusCode::OK, ""),
        (
            Ok(false),
            StatusCode::PAYMENT_REQUIRED,
            "invalid_siwx_signature",
        ),
        (Err(()), StatusCode::SERVICE_UNAVAILABLE, ""),
    ] {
        let facilitator = Arc::new(StandIn::new());
        let engine = Engine::builder_arc(facilitator)
            .public_origin(ORIGIN)
            .sign_in_with_x(SignInConfig::new().smart_wallets(Wallets(answer)))
            .route(
                Route::get(ROUTE)
                    .offer(Offer::exact("eip155:84532", "$0.001", testing::PAY_TO))
                    .sign_in_with_x(SignInWithX::new(Duration::from_secs(3600))),
            )
            .build()
            .unwrap();
        let challenge = testing::challenge(&engine, Request::get(ROUTE).body(()).unwrap()).await;
        let paid = send(
            &engine,
            Some(("payment-signature", testing::pay(&challenge))),
        )
        .await;
        assert_eq!(paid.status(), StatusCode::OK);
        // Signed by another key for the address that paid: not its own ECDSA
        // signature, so the wallet contract decides.
        let decl = declaration_of(&engine).await;
        let address = payer_key().address().to_checksum(None);
        let other = PrivateKeySigner::random();
        let r = send(
            &engine,
            Some((
                "sign-in-with-x",
                sign(&decl, &other, |v| v["address"] = address.into()),
            )),
        )
        .await;
        assert_eq!(r.status(), status, "{answer:?}");
        if status == StatusCode::PAYMENT_REQUIRED {
            assert_eq!(error_of(&r), reason);
        }
    }
    // EIP-6492 signatures are refused before any wallet is asked.
    let mut sig = vec![1u8; 65];
    sig.extend([0x64, 0x92].repeat(16));
    assert!(sig.ends_with(&super::EIP6492_SUFFIX));
}

#[test]
fn eip1271_call_data_and_magic() {
    let data = smart_wallet::call_data(alloy_primitives::B256::repeat_byte(0xaa), &[1, 2, 3]);
    assert_eq!(&data[..4], &[0x16, 0x26, 0xba, 0x7e]);
    assert_eq!(data.len(), 4 + 32 * 4);
    assert_eq!(data[4 + 32 + 31], 0x40, "offset of the bytes");
    assert_eq!(data[4 + 64 + 31], 3, "length of the bytes");
    let mut word = [0u8; 32];
    word[..4].copy_from_slice(&smart_wallet::EIP1271_MAGIC);
    assert!(smart_wallet::is_magic(&word));
    word[31] = 1;
    assert!(!smart_wallet::is_magic(&word));
    assert!(!smart_wallet::is_magic(&[]));
}
