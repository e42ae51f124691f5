//! The costs that make up a request through the engine, one by one.
//!
//! `cargo bench -p x402-core --features local-facilitator --bench core`
//! (without the feature the `facilitator` group, which needs the in-process
//! facilitator, is left out). Groups:
//!
//! - `codec`: decoding and encoding the three headers (`X-PAYMENT` v1,
//!   `PAYMENT-SIGNATURE` v2, `PAYMENT-REQUIRED`);
//! - `challenge`: `Engine::process` with no payment header, for a static
//!   route with a fixed resource URL (challenge encoded once, at build), a
//!   static route whose resource URL comes from each request, and a route
//!   priced per request (dynamic pricing);
//! - `paid`: a paid request through `Engine::process` and
//!   `PaidRequest::complete` with a facilitator stand-in that answers at once,
//!   with the replay guard (in-memory claims) disabled and enabled, and with
//!   the local pre-check off (the difference is the pre-check's cost per
//!   payment); and a forged payment refused by the pre-check;
//! - `eip712`: the EIP-712 digest, secp256k1 recovery of a digest, and
//!   `ExactEvmPayload::recover_signer` (both);
//! - `claim`: `claim::claim_key`;
//! - `facilitator`: the in-process facilitator on the dev ledger, `verify`
//!   and `settle` of a real signed payment (what the load harness's paid
//!   path pays for on top of `paid`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use alloy_primitives::{address, keccak256, Address, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde_json::{json, Map};
use x402_core::{
    claim, codec,
    evm::{self, eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    money::AtomicAmount,
    proto::{v1, v2, PaymentPayload, PaymentRequirements, Version},
    route::{Offer, RequestView, Route},
    testing::StandIn,
    Completion, Decision, Engine,
};

const NETWORK: &str = "eip155:84532";
const CHAIN_ID: u64 = 84532;
const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
const PAY_TO: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
const PRICE: u64 = 1_000;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn random_nonce() -> B256 {
    B256::from(rand::random::<[u8; 32]>())
}

/// A real EIP-3009 authorization of [`PRICE`] signed by `key`.
fn sign(key: &PrivateKeySigner, nonce: B256) -> ExactEvmPayload {
    let now = now();
    let authorization = Eip3009Authorization {
        from: key.address(),
        to: PAY_TO,
        value: AtomicAmount::from(PRICE),
        valid_after: U256::from(now - 600),
        valid_before: U256::from(now + 300),
        nonce,
    };
    let domain = eip3009_domain("USDC", "2", CHAIN_ID, TOKEN);
    let signature = key
        .sign_hash_sync(&authorization.signing_hash(&domain))
        .unwrap();
    ExactEvmPayload {
        signature: signature.as_bytes().to_vec().into(),
        authorization,
    }
}

/// The requirement `Offer::exact(NETWORK, "$0.001", PAY_TO)` resolves to.
fn requirements_v2() -> v2::PaymentRequirements {
    let mut extra = Map::new();
    extra.insert("name".into(), json!("USDC"));
    extra.insert("version".into(), json!("2"));
    v2::PaymentRequirements {
        scheme: "exact".into(),
        network: NETWORK.into(),
        amount: AtomicAmount::from(PRICE),
        asset: TOKEN.to_checksum(None),
        pay_to: PAY_TO.to_checksum(None),
        max_timeout_seconds: 300,
        extra,
        other: Map::new(),
    }
}

fn payment_v2(payload: &ExactEvmPayload) -> v2::PaymentPayload {
    v2::PaymentPayload {
        x402_version: Version::<2>,
        resource: Some(v2::ResourceInfo {
            url: "http://localhost/paid".into(),
            description: String::new(),
            mime_type: String::new(),
        }),
        accepted: requirements_v2(),
        payload: serde_json::to_value(payload).unwrap(),
        extensions: None,
        other: Map::new(),
    }
}

fn payment_v1(payload: &ExactEvmPayload) -> v1::PaymentPayload {
    v1::PaymentPayload {
        x402_version: Version::<1>,
        scheme: "exact".into(),
        network: "base-sepolia".into(),
        payload: serde_json::to_value(payload).unwrap(),
        other: Map::new(),
    }
}

/// A facilitator that accepts everything at once: what is left is the engine.
fn instant() -> StandIn {
    StandIn::new().without_records()
}

fn offer() -> Offer {
    Offer::exact(NETWORK, "$0.001", PAY_TO.to_checksum(None))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn short<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut group = c.benchmark_group(name);
    group
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(40);
    group
}

fn codec_benches(c: &mut Criterion) {
    let key = PrivateKeySigner::random();
    let payload = sign(&key, random_nonce());
    let v2_payment = payment_v2(&payload);
    let v1_payment = payment_v1(&payload);
    let required = v2::PaymentRequired {
        x402_version: Version::<2>,
        error: Some("payment_required".into()),
        resource: v2::ResourceInfo {
            url: "http://localhost/paid".into(),
            description: "A paid endpoint: $0.001 per call".into(),
            mime_type: "application/json".into(),
        },
        accepts: vec![requirements_v2()],
        extensions: Map::new(),
    };
    let v2_header = codec::encode(&v2_payment).unwrap();
    let v1_header = codec::encode(&v1_payment).unwrap();
    let required_header = codec::encode(&required).unwrap();
    let max = codec::DEFAULT_MAX_HEADER_BYTES;

    let mut group = short(c, "codec");
    group.bench_function("decode_x_payment_v1", |b| {
        b.iter(|| codec::decode_payment(v1_header.as_bytes(), max).unwrap());
    });
    group.bench_function("decode_payment_signature_v2", |b| {
        b.iter(|| codec::decode_payment(v2_header.as_bytes(), max).unwrap());
    });
    group.bench_function("decode_payment_required", |b| {
        b.iter(|| codec::decode::<v2::PaymentRequired>(required_header.as_bytes(), max).unwrap());
    });
    group.bench_function("encode_x_payment_v1", |b| {
        b.iter(|| codec::encode(&v1_payment).unwrap());
    });
    group.bench_function("encode_payment_signature_v2", |b| {
        b.iter(|| codec::encode(&v2_payment).unwrap());
    });
    group.bench_function("encode_payment_required", |b| {
        b.iter(|| codec::encode(&required).unwrap());
    });
    group.finish();
}

fn challenge_benches(c: &mut Criterion) {
    let rt = rt();
    let engine = Engine::builder(instant())
        .route(
            Route::get("/fixed")
                .offer(offer())
                .resource_url("https://api.example.com/fixed")
                .description("A paid endpoint")
                .mime_type("application/json"),
        )
        .route(
            Route::get("/per-request")
                .offer(offer())
                .description("A paid endpoint")
                .mime_type("application/json"),
        )
        .route(
            Route::get("/dynamic")
                .dynamic_pricing(|_| async { Some(vec![offer()]) })
                .description("A paid endpoint")
                .mime_type("application/json"),
        )
        .build()
        .unwrap();
    let mut headers = HeaderMap::new();
    headers.insert("host", HeaderValue::from_static("localhost"));
    headers.insert("accept", HeaderValue::from_static("application/json"));

    let mut group = short(c, "challenge");
    for (name, path) in [
        ("static_fixed_resource", "/fixed"),
        ("static_per_request_resource", "/per-request"),
        ("dynamic_pricing", "/dynamic"),
    ] {
        let uri: Uri = path.parse().unwrap();
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                match engine
                    .process(RequestView::new(&Method::GET, &uri, &headers))
                    .await
                {
                    Decision::Respond(r) => {
                        assert_eq!(r.status(), StatusCode::PAYMENT_REQUIRED);
                        r
                    }
                    other => panic!("expected a 402, got {other:?}"),
                }
            });
        });
    }
    group.finish();
}

fn paid_benches(c: &mut Criterion) {
    let rt = rt();
    let route = || Route::get("/paid").offer(offer());
    let unguarded = Engine::builder(instant())
        .route(route())
        .dangerous_disable_replay_guard()
        .build()
        .unwrap();
    let guarded = Engine::builder(instant()).route(route()).build().unwrap();
    let unchecked = Engine::builder(instant())
        .route(route())
        .local_precheck(false)
        .build()
        .unwrap();
    let uri: Uri = "/paid".parse().unwrap();
    // A fresh payment each time (signed outside the measurement: the
    // pre-check recovers its signer, the stand-in accepts it).
    let key = PrivateKeySigner::random();
    let headers_for = |payload: &ExactEvmPayload| {
        let header = codec::encode(&payment_v2(payload)).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("localhost"));
        headers.insert(
            codec::PAYMENT_SIGNATURE,
            HeaderValue::try_from(header).unwrap(),
        );
        headers
    };
    let fresh_headers = || headers_for(&sign(&key, random_nonce()));
    // The same, its signature made by another key: refused by the
    // pre-check before the facilitator.
    let thief = PrivateKeySigner::random();
    let forged_headers = || {
        let mut payload = sign(&thief, random_nonce());
        payload.authorization.from = key.address();
        headers_for(&payload)
    };

    let mut group = short(c, "paid");
    for (name, engine) in [
        ("replay_guard_disabled", &unguarded),
        ("replay_guard_memory", &guarded),
        ("replay_guard_memory_no_precheck", &unchecked),
    ] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter_batched(
                fresh_headers,
                |headers| {
                    let uri = &uri;
                    async move {
                        let decision = engine
                            .process(RequestView::new(&Method::GET, uri, &headers))
                            .await;
                        let Decision::Paid(paid) = decision else {
                            panic!("expected a verified payment, got {decision:?}");
                        };
                        let mut out = HeaderMap::new();
                        match paid.complete(StatusCode::OK, &mut out).await {
                            Completion::Deliver => out,
                            Completion::Replace(r) => panic!("settlement refused: {r:?}"),
                        }
                    }
                },
                BatchSize::SmallInput,
            );
        });
    }
    // What a forged payment costs the seller: decoding, matching and the
    // local check, then a 402 (no facilitator call).
    group.bench_function("forged_refused_by_precheck", |b| {
        b.to_async(&rt).iter_batched(
            forged_headers,
            |headers| {
                let uri = &uri;
                let engine = &guarded;
                async move {
                    let decision = engine
                        .process(RequestView::new(&Method::GET, uri, &headers))
                        .await;
                    let Decision::Respond(response) = decision else {
                        panic!("expected a refusal, got {decision:?}");
                    };
                    assert_eq!(response.status(), 402);
                    response
                }
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

fn eip712_benches(c: &mut Criterion) {
    let key = PrivateKeySigner::random();
    let payload = sign(&key, random_nonce());
    let domain = eip3009_domain("USDC", "2", CHAIN_ID, TOKEN);
    let digest = payload.authorization.signing_hash(&domain);
    assert_eq!(payload.recover_signer(&domain).unwrap(), key.address());

    let mut group = short(c, "eip712");
    group.bench_function("signing_hash", |b| {
        b.iter(|| payload.authorization.signing_hash(&domain));
    });
    group.bench_function("recover_digest", |b| {
        b.iter(|| evm::recover_signer(digest, &payload.signature).unwrap());
    });
    group.bench_function("recover_signer", |b| {
        b.iter(|| payload.recover_signer(&domain).unwrap());
    });
    group.finish();
}

fn claim_benches(c: &mut Criterion) {
    let key = PrivateKeySigner::random();
    let payload = sign(&key, random_nonce());
    let payment = PaymentPayload::V2(payment_v2(&payload));
    let requirements = PaymentRequirements::V2(requirements_v2());

    let mut group = short(c, "claim");
    group.bench_function("claim_key", |b| {
        b.iter(|| claim::claim_key(&payment, &requirements, NETWORK).unwrap());
    });
    group.bench_function("keccak256_64B", |b| {
        let data = [7u8; 64];
        b.iter(|| keccak256(data));
    });
    group.finish();
}

#[cfg(feature = "local-facilitator")]
fn facilitator_benches(c: &mut Criterion) {
    use std::sync::Arc;

    use x402_core::{
        facilitator::Facilitator,
        local::{DevLedger, LocalFacilitator},
        proto::FacilitatorRequest,
    };

    let rt = rt();
    let ledger = Arc::new(DevLedger::new());
    let facilitator = LocalFacilitator::builder(Arc::clone(&ledger))
        .network(NETWORK)
        .build()
        .unwrap();
    let key = PrivateKeySigner::random();
    ledger
        .fund(NETWORK, TOKEN, key.address(), u64::MAX)
        .unwrap();
    let request = |payload: &ExactEvmPayload| {
        FacilitatorRequest::new(
            PaymentPayload::V2(payment_v2(payload)),
            PaymentRequirements::V2(requirements_v2()),
        )
        .unwrap()
    };
    let mut group = short(c, "facilitator");
    // Each iteration gets a freshly signed payment (set-up, untimed): the
    // facilitator remembers signers it recovered, so a repeated payment
    // would measure that memory instead.
    group.bench_function("dev_ledger_verify", |b| {
        b.to_async(&rt).iter_batched(
            || request(&sign(&key, random_nonce())),
            |r| {
                let facilitator = &facilitator;
                async move {
                    let v = facilitator.verify(&r).await.unwrap();
                    assert!(v.is_valid);
                    v
                }
            },
            BatchSize::SmallInput,
        );
    });
    // Settlement of a payment nobody verified: the signer is recovered here.
    group.bench_function("dev_ledger_settle", |b| {
        b.to_async(&rt).iter_batched(
            || request(&sign(&key, random_nonce())),
            |r| {
                let facilitator = &facilitator;
                async move {
                    let s = facilitator.settle(&r).await.unwrap();
                    assert!(s.success, "{s:?}");
                    s
                }
            },
            BatchSize::SmallInput,
        );
    });
    // Settlement after verification, as the engine does it: every check runs
    // again, but the signer recovered at verify is remembered.
    group.bench_function("dev_ledger_settle_verified", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (facilitator, key, request) = (&facilitator, &key, &request);
            async move {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let r = request(&sign(key, random_nonce()));
                    assert!(facilitator.verify(&r).await.unwrap().is_valid);
                    let start = std::time::Instant::now();
                    let s = facilitator.settle(&r).await.unwrap();
                    timed += start.elapsed();
                    assert!(s.success, "{s:?}");
                }
                timed
            }
        });
    });
    group.finish();
}

#[cfg(not(feature = "local-facilitator"))]
fn facilitator_benches(_: &mut Criterion) {}

criterion_group!(
    benches,
    codec_benches,
    challenge_benches,
    paid_benches,
    eip712_benches,
    claim_benches,
    facilitator_benches
);
criterion_main!(benches);
