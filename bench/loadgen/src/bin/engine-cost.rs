//! What the engine costs a paid request in process, with no network:
//! `engine-cost [MODE]`, one line per mode, `MODE µs/req`.
//!
//! The load harness (`bench/run.sh`) measures whole servers, where the
//! kernel and the load generator share the two cores and a run varies by a
//! quarter from one minute to the next. This measures one thread doing the
//! work the paid path adds to a handler, with a facilitator stand-in that
//! answers at once, so that a change to the engine can be judged in
//! instructions (run it under `valgrind --tool=callgrind
//! --collect-atstart=no --toggle-collect='engine_cost::timed_loop*'` and
//! divide by `N`) rather than in noisy microseconds.
//!
//! Modes (all by default), each over `N` fresh payments (default 20 000,
//! signed before the clock starts):
//!
//! - `decode`: the payment header decoded (base64, JSON, typed);
//! - `key`: the replay claim key derived from a decoded payment;
//! - `claim`: that key claimed in a `MemoryClaimStore`;
//! - `bare`: the handler's response through a bare axum router;
//! - `floor`: what any seller does around a facilitator call without an
//!   engine: the header decoded, the facilitator request built, a receipt
//!   encoded, and the bare handler;
//! - `engine`: the same request through `x402_axum::PaywallLayer` (the
//!   engine's local pre-check off unless `PRECHECK=1`, as the facilitator's
//!   signature check is not the engine's own cost): routing, matching, the
//!   claim, verify and settle against the stand-in, the receipt. Every
//!   payment is the test payer's, which the pre-check knows after the first
//!   one and leaves to the stand-in; `KNOWN_PAYERS=0` has it recover every
//!   payment's signer.

// A measurement that goes wrong stops loudly: these are its asserts.
#![allow(clippy::print_stdout, clippy::print_stderr, clippy::expect_used)]

use std::time::Instant;

use axum::{body::Body, routing::get, Json, Router};
use http::Request;
use serde_json::Value;
use tower::{Service, ServiceExt};
use x402_core::{
    claim::{claim_key, ClaimStore, MemoryClaimStore},
    codec,
    proto::{PaymentRequirements, SettleResponse},
    testing::{self, StandIn},
    Engine, Offer, Route,
};

const NETWORK: &str = "eip155:84532";

type Error = Box<dyn std::error::Error>;

/// One measured mode: its name and the work done for payment `i`.
type Mode<'a> = (&'static str, Box<dyn FnMut(usize, &str) + 'a>);

async fn paid_body() -> Json<Value> {
    Json(paid_api_common::message_body(
        "Paid content: exact (EIP-3009)",
    ))
}

/// The measured loop: a function of its own, for callgrind's toggle.
#[inline(never)]
fn timed_loop(f: &mut dyn FnMut(usize, &str), headers: &[String]) {
    for (i, h) in headers.iter().enumerate() {
        f(i, h);
    }
}

fn request(header: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/paid").header("host", "localhost");
    if let Some(header) = header {
        request = request.header(codec::PAYMENT_SIGNATURE, header);
    }
    request
        .body(Body::empty())
        .unwrap_or_else(|_| Request::new(Body::empty()))
}

fn main() -> Result<(), Error> {
    let n: usize = x402_loadgen::env_or("N", 20_000);
    let which = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let engine = Engine::builder(StandIn::new().without_records())
        .local_precheck(std::env::var("PRECHECK").as_deref() == Ok("1"))
        .precheck_known_payers(std::env::var("KNOWN_PAYERS").as_deref() != Ok("0"))
        .route(Route::get("/paid").offer(Offer::exact(NETWORK, "$0.001", testing::PAY_TO)))
        .build()?;
    let challenge = rt.block_on(testing::challenge(&engine, Request::get("/paid").body(())?));
    let requirement = challenge.accepts.first().ok_or("no offer")?.clone();
    let headers: Vec<String> = (0..n).map(|_| testing::pay(&challenge)).collect();
    let decoded = headers
        .iter()
        .map(|h| codec::decode_payment(h.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES))
        .collect::<Result<Vec<_>, _>>()?;
    let requirements = PaymentRequirements::V2(requirement);
    let keys = decoded
        .iter()
        .map(|p| claim_key(p, &requirements, NETWORK).map(|k| k.key))
        .collect::<Result<Vec<_>, _>>()?;
    let receipt: SettleResponse = serde_json::from_value(serde_json::json!({
        "success": true, "transaction": "0x01", "network": NETWORK, "payer": testing::PAYER,
    }))?;
    let bare = Router::new().route("/paid", get(paid_body));
    let layered = Router::new()
        .route("/paid", get(paid_body))
        .layer(x402_axum::PaywallLayer::new(engine));
    let store = MemoryClaimStore::new();
    let until = std::time::SystemTime::now() + std::time::Duration::from_secs(900);

    let mut modes: Vec<Mode<'_>> = vec![
        (
            "decode",
            Box::new(|_, h: &str| {
                let p = codec::decode_payment(h.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES);
                assert!(p.is_ok());
                let _ = std::hint::black_box(p);
            }),
        ),
        (
            "key",
            Box::new(|i, _: &str| {
                let key = claim_key(&decoded[i], &requirements, NETWORK);
                assert!(key.is_ok());
                let _ = std::hint::black_box(key);
            }),
        ),
        (
            "claim",
            Box::new(|i, _: &str| {
                let claimed = store.claim_now(&keys[i], until);
                assert!(matches!(claimed, Some(Ok(_))));
            }),
        ),
        (
            "bare",
            Box::new(|_, _: &str| {
                rt.block_on(async {
                    let res = bare.clone().oneshot(request(None)).await;
                    let body = res.map(|r| axum::body::to_bytes(r.into_body(), usize::MAX));
                    assert!(body.expect("infallible").await.is_ok());
                });
            }),
        ),
        (
            "floor",
            Box::new(|_, h: &str| {
                rt.block_on(async {
                    let req = request(Some(h));
                    let header = req.headers().get(codec::PAYMENT_SIGNATURE);
                    let pair = header.map(|h| x402_loadgen::floor_request(h.as_bytes()));
                    assert!(matches!(pair, Some(Ok(_))), "undecodable payment");
                    let _ = std::hint::black_box(pair);
                    let encoded = codec::encode(&receipt);
                    let res = bare.clone().oneshot(req).await;
                    let _ = std::hint::black_box(encoded);
                    let body = res.map(|r| axum::body::to_bytes(r.into_body(), usize::MAX));
                    assert!(body.expect("infallible").await.is_ok());
                });
            }),
        ),
        (
            "engine",
            Box::new(|_, h: &str| {
                rt.block_on(async {
                    let mut service = layered.clone();
                    let ready = ServiceExt::<Request<Body>>::ready(&mut service).await;
                    let res = ready.expect("infallible").call(request(Some(h))).await;
                    let res = res.expect("infallible");
                    assert_eq!(res.status(), 200);
                    assert!(axum::body::to_bytes(res.into_body(), usize::MAX)
                        .await
                        .is_ok());
                });
            }),
        ),
    ];
    eprintln!("signed {n} payments");
    for (name, f) in &mut modes {
        if which != "all" && which != *name {
            continue;
        }
        let start = Instant::now();
        timed_loop(f.as_mut(), &headers);
        let per = start.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("{name:8} {per:8.2} µs/req");
    }
    Ok(())
}
