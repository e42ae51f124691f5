//! The cost of a batch-settlement voucher, seller side.
//!
//! `cargo bench -p x402-core --bench batch`. Groups:
//!
//! - `batch`: the voucher's EIP-712 digest, the channel id, the in-process
//!   check of a voucher (`verify::verify_voucher`: signature recovery, then
//!   balance and claimed total), and a whole voucher call through
//!   `Engine::process` and `PaidRequest::complete` on a channel in the
//!   in-memory store (hold, check, commit, receipt: no facilitator call).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unreachable_pub
)]

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{address, Address, Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use serde_json::json;
use x402_core::{
    batch::{
        eip712, verify, BatchSettlement, ChannelConfig, ChannelRecord, Voucher,
        BATCH_SETTLEMENT_ADDRESS,
    },
    codec,
    money::AtomicAmount,
    route::{Asset, Offer, RequestView, Route},
    testing::StandIn,
    Completion, Decision, Engine,
};

const NETWORK: &str = "eip155:84532";
const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
const PAY_TO: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
const AUTHORIZER: Address = address!("00000000000000000000000000000000000a11ce");
const PRICE: u64 = 1_000;

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

fn config(payer: &PrivateKeySigner) -> ChannelConfig {
    ChannelConfig {
        payer: payer.address(),
        payer_authorizer: payer.address(),
        receiver: PAY_TO,
        receiver_authorizer: AUTHORIZER,
        token: TOKEN,
        withdraw_delay: 900,
        salt: B256::ZERO,
    }
}

fn sign(key: &PrivateKeySigner, id: B256, max: u64) -> Bytes {
    let domain = eip712::domain(84532, BATCH_SETTLEMENT_ADDRESS);
    let digest = eip712::voucher_digest(id, u128::from(max), &domain);
    Bytes::from(key.sign_hash_sync(&digest).unwrap().as_bytes().to_vec())
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn record(config: &ChannelConfig, id: B256) -> ChannelRecord {
    ChannelRecord {
        channel_id: id,
        channel_config: config.clone(),
        charged_cumulative_amount: U256::ZERO,
        signed_max_claimable: U256::ZERO,
        signature: Bytes::new(),
        balance: U256::from(u64::MAX),
        total_claimed: U256::ZERO,
        withdraw_requested_at: 0,
        refund_nonce: U256::ZERO,
        onchain_synced_at: Some(now_ms()),
        last_request_timestamp: 0,
        pending: None,
        claim_in_flight: None,
        revision: 0,
    }
}

fn batch_benches(c: &mut Criterion) {
    let key = PrivateKeySigner::random();
    let config = config(&key);
    let domain = eip712::domain(84532, BATCH_SETTLEMENT_ADDRESS);
    let id = eip712::channel_id(&config, &domain);
    let voucher = Voucher {
        channel_id: id,
        max_claimable_amount: AtomicAmount::from(5 * PRICE),
        signature: sign(&key, id, 5 * PRICE),
    };
    let mirrored = ChannelRecord {
        total_claimed: U256::from(PRICE),
        ..record(&config, id)
    };

    let mut group = short(c, "batch");
    group.bench_function("voucher_digest", |b| {
        b.iter(|| eip712::voucher_digest(id, u128::from(5 * PRICE), &domain));
    });
    group.bench_function("channel_id", |b| {
        b.iter(|| eip712::channel_id(&config, &domain));
    });
    group.bench_function("verify_voucher", |b| {
        b.iter(|| verify::verify_voucher(&mirrored, &config, &voucher, &domain).unwrap());
    });

    // A whole voucher call: the channel is in the store with fresh
    // mirrored state, so the voucher is checked in process.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let batch = BatchSettlement::in_memory().onchain_ttl(Duration::from_secs(3600));
    rt.block_on(batch.store().swap(
        &id,
        None,
        Some(&ChannelRecord {
            revision: 1,
            ..record(&config, id)
        }),
    ))
    .unwrap();
    let engine = Engine::builder(StandIn::new())
        .batch_settlement(batch)
        .route(
            Route::get("/batch").offer(
                Offer::batch_settlement(
                    NETWORK,
                    PRICE.to_string(),
                    PAY_TO.to_checksum(None),
                    Some(AUTHORIZER),
                )
                .asset(Asset::new(TOKEN.to_checksum(None), 6).eip712("USDC", "2")),
            ),
        )
        .build()
        .unwrap();
    let accepted = rt.block_on(x402_core::testing::challenge(
        &engine,
        http::Request::get("/batch").body(()).unwrap(),
    ));
    let accepted = accepted.accepts[0].clone();
    let uri: Uri = "/batch".parse().unwrap();
    // Each call's voucher is the next cumulative amount, signed outside the
    // measurement, in the order the calls run.
    let calls = Arc::new(AtomicU64::new(0));
    let next_headers = || {
        let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
        let max = n * PRICE;
        let header = codec::encode(&json!({
            "x402Version": 2,
            "accepted": accepted,
            "payload": {
                "type": "voucher",
                "channelConfig": config,
                "voucher": { "channelId": id, "maxClaimableAmount": max.to_string(), "signature": sign(&key, id, max) },
            },
        }))
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert(
            codec::PAYMENT_SIGNATURE,
            HeaderValue::try_from(header).unwrap(),
        );
        headers
    };
    group.bench_function("voucher_call_in_memory", |b| {
        b.to_async(&rt).iter_batched(
            next_headers,
            |headers| {
                let (uri, engine) = (&uri, &engine);
                async move {
                    let decision = engine
                        .process(RequestView::new(&Method::GET, uri, &headers))
                        .await;
                    let Decision::Paid(paid) = decision else {
                        panic!("expected a verified voucher, got {decision:?}");
                    };
                    let mut out = HeaderMap::new();
                    match paid.complete(StatusCode::OK, &mut out).await {
                        Completion::Deliver => out,
                        Completion::Replace(r) => panic!("voucher refused: {r:?}"),
                    }
                }
            },
            BatchSize::SmallInput,
        );
    });
    group.finish();
}

criterion_group!(benches, batch_benches);
criterion_main!(benches);
