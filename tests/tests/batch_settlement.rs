//! The example's `GET /batch/evm` (x402-core's batch-settlement seller) paid
//! by the official `@x402/evm` batch-settlement client on anvil, settled by
//! the official facilitator against the escrow contract: one deposit, fifty
//! vouchers, claimed and settled on chain exactly; a restart in the middle
//! of a run (channel state in Redis) loses no charged amount.
//!
//! Needs node, anvil and the test contracts (`tests/js`, see
//! `tests/js/batch/README.md`); the restart test needs Redis (`REDIS_URL`,
//! default `redis://127.0.0.1:6379`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use alloy_primitives::{B256, U256};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use paid_api_common::{AppState, AssetConfig, BatchConfig, Config, FacilitatorConfig};
use serde_json::Value;
use x402_tests::batch_chain::{BatchChain, SELLER_AUTHORIZER_KEY};

struct Seller {
    base: String,
    state: AppState,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Seller {
    fn drop(&mut self) {
        self.state.stop_claimer();
        self.task.abort();
    }
}

fn config(chain: &BatchChain, batch: BatchConfig, redis: Option<String>) -> Config {
    Config {
        port: 0,
        network: chain.network.to_owned(),
        pay_to: chain.seller,
        asset: AssetConfig {
            address: chain.token,
            name: chain.token_name.to_owned(),
            version: chain.token_version.to_owned(),
            decimals: 6,
        },
        facilitator: FacilitatorConfig::Http {
            url: chain.facilitator_url.clone(),
        },
        redis_url: redis,
        batch,
        ..Config::dev()
    }
}

/// `examples/paid-api` (axum).
async fn start(config: Config) -> Seller {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = config.bound_to(listener.local_addr().unwrap());
    let (app, state) = paid_api::app(config).await.unwrap();
    assert!(
        state.batch_enabled(),
        "the facilitator lists batch-settlement"
    );
    let base = format!("http://{}", listener.local_addr().unwrap());
    let serve = paid_api::serve(listener, app, state.clone());
    let task = tokio::spawn(async move {
        let _ = serve.await;
    });
    Seller { base, state, task }
}

/// `examples/paid-api-actix`, from the same configuration.
async fn start_actix(config: Config) -> Seller {
    let server = paid_api_actix::server(config).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let state = server.state().clone();
    let task = tokio::spawn(async move {
        let _ = server.run().await;
    });
    Seller { base, state, task }
}

/// Waits until the seller's claimed and settled totals on chain reach
/// `amount` (the example's claimer runs every second).
async fn wait_settled(chain: &BatchChain, amount: u128) -> (u128, u128) {
    let mut totals = (0, 0);
    for _ in 0..120 {
        totals = chain.receiver_totals(chain.seller).await;
        if totals.1 >= amount {
            return totals;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the claimer did not claim and settle {amount} in 30 s: {totals:?}");
}

fn every_call_paid(pay: &x402_tests::batch_chain::BatchPay, calls: usize) {
    let statuses = pay.statuses();
    assert_eq!(statuses.len(), calls, "{}", pay.json);
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{statuses:?}: {}",
        pay.stderr
    );
}

fn runs_in_bodies(pay: &x402_tests::batch_chain::BatchPay) -> Vec<u64> {
    pay.calls()
        .iter()
        .map(|c| {
            let body = match &c["body"] {
                Value::String(s) => serde_json::from_str(s).unwrap_or(Value::Null),
                other => other.clone(),
            };
            body["run"].as_u64().unwrap_or(0)
        })
        .collect()
}

async fn fifty_calls(batch: BatchConfig, actix: bool) {
    let chain = BatchChain::start().await;
    let config = config(&chain, batch, None);
    let seller = if actix {
        start_actix(config).await
    } else {
        start(config).await
    };
    let before = chain.balance_of(chain.seller).await;

    let pay = chain
        .pay(
            &format!("{}/batch/evm", seller.base),
            50,
            &["--deposit", "50000", "--record-headers"],
        )
        .await;
    pay.assert_ran();
    every_call_paid(&pay, 50);
    assert_eq!(pay.deposits(), 1, "one deposit: {:?}", pay.sent_types());
    assert_eq!(seller.state.batch_runs(), 50, "the handler ran 50 times");
    assert_eq!(runs_in_bodies(&pay), (1..=50).collect::<Vec<u64>>());
    let charged = pay.charged_total();
    assert_eq!(charged, 50_000);
    // Voucher receipts: no transaction, no amount, the charge in extra.
    let last = &pay.calls()[49]["paymentResponse"];
    assert_eq!(last["transaction"], "");
    assert_eq!(last["amount"], "");
    assert_eq!(last["extra"]["chargedAmount"], "1000");
    assert_eq!(
        last["extra"]["channelState"]["chargedCumulativeAmount"],
        "50000"
    );
    // Only the deposit went to the facilitator: the vouchers were checked
    // in process.
    assert_eq!(
        chain.facilitator_calls("verify batch-settlement/deposit"),
        1
    );
    assert_eq!(
        chain.facilitator_calls("settle batch-settlement/deposit"),
        1
    );
    assert_eq!(
        chain.facilitator_calls("verify batch-settlement/voucher"),
        0
    );

    // The claimer (every second) claims the 50 vouchers' charges and settles.
    let (claimed, settled) = wait_settled(&chain, charged).await;
    assert_eq!((claimed, settled), (charged, charged));
    let channel = chain.channel(pay.channel_id()).await;
    assert_eq!(channel.total_claimed, charged);
    assert_eq!(channel.balance, 50_000);
    let after = chain.balance_of(chain.seller).await;
    assert_eq!(
        after - before,
        U256::from(charged),
        "the seller got exactly what was charged"
    );
    // Claimed once: more ticks change nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        chain.receiver_totals(chain.seller).await,
        (charged, charged)
    );
    assert_eq!(chain.balance_of(chain.seller).await, after);

    // A replayed voucher: the corrective 402, and no handler run.
    let replay = &pay.sent_headers()[10];
    let response = reqwest::Client::new()
        .get(format!("{}/batch/evm", seller.base))
        .header("PAYMENT-SIGNATURE", replay)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 402);
    let challenge: Value = serde_json::from_slice(
        &STANDARD
            .decode(response.headers()["payment-required"].as_bytes())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        challenge["error"],
        "invalid_batch_settlement_evm_cumulative_amount_mismatch"
    );
    assert_eq!(
        challenge["accepts"][0]["extra"]["channelState"]["chargedCumulativeAmount"],
        "50000"
    );
    assert_eq!(seller.state.batch_runs(), 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_calls_one_deposit_seller_signed_claims() {
    fifty_calls(
        BatchConfig {
            authorizer_key: Some(SELLER_AUTHORIZER_KEY.to_owned()),
            claim_interval: Some(Duration::from_secs(1)),
            ..BatchConfig::default()
        },
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_calls_one_deposit_through_the_actix_example() {
    fifty_calls(
        BatchConfig {
            authorizer_key: Some(SELLER_AUTHORIZER_KEY.to_owned()),
            claim_interval: Some(Duration::from_secs(1)),
            ..BatchConfig::default()
        },
        true,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_calls_one_deposit_facilitator_signed_claims() {
    // No key: the route names the facilitator's receiverAuthorizer (from its
    // /supported), and the facilitator signs the claims.
    fifty_calls(
        BatchConfig {
            authorizer_key: None,
            claim_interval: Some(Duration::from_secs(1)),
            ..BatchConfig::default()
        },
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_run_loses_no_charged_amount() {
    let redis = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let chain = BatchChain::start().await;
    // A fresh channel (the chain's addresses are the same every run, and the
    // channel state outlives the test in Redis).
    let salt = format!("{:#x}", B256::from(rand::random::<[u8; 32]>()));
    let before = chain.balance_of(chain.seller).await;
    let batch = |interval: Option<Duration>| BatchConfig {
        authorizer_key: Some(SELLER_AUTHORIZER_KEY.to_owned()),
        claim_interval: interval,
        ..BatchConfig::default()
    };

    // The first instance takes 20 calls and claims nothing.
    let first = start(config(&chain, batch(None), Some(redis.clone()))).await;
    let url = format!("{}/batch/evm", first.base);
    let pay = chain
        .pay(&url, 20, &["--deposit", "50000", "--salt", &salt])
        .await;
    pay.assert_ran();
    every_call_paid(&pay, 20);
    assert_eq!(pay.charged_total(), 20_000);
    assert_eq!(first.state.batch_runs(), 20);
    drop(first);

    // A new instance over the same Redis, and a new client process (which
    // knows only the chain, where nothing is claimed yet): the seller's
    // corrective 402 tells it the count, and the run goes on from 20 000.
    let second = start(config(
        &chain,
        batch(Some(Duration::from_secs(1))),
        Some(redis),
    ))
    .await;
    let url = format!("{}/batch/evm", second.base);
    let pay2 = chain.pay(&url, 30, &["--salt", &salt]).await;
    pay2.assert_ran();
    assert_eq!(pay2.channel_id(), pay.channel_id());
    let paid = pay2.statuses().iter().filter(|s| **s == 200).count();
    assert_eq!(paid, 30, "{:?}: {}", pay2.statuses(), pay2.stderr);
    assert_eq!(
        pay2.deposits(),
        0,
        "no second deposit: {:?}",
        pay2.sent_types()
    );
    assert_eq!(second.state.batch_runs(), 30);
    let last = &pay2.calls()[29]["paymentResponse"];
    assert_eq!(
        last["extra"]["channelState"]["chargedCumulativeAmount"],
        "50000"
    );

    // Everything charged, before and after the restart, is claimed.
    let (claimed, settled) = wait_settled(&chain, 50_000).await;
    assert_eq!((claimed, settled), (50_000, 50_000));
    assert_eq!(chain.channel(pay.channel_id()).await.total_claimed, 50_000);
    assert_eq!(
        chain.balance_of(chain.seller).await - before,
        U256::from(50_000u64)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_clients_refund_closes_the_channel() {
    let chain = BatchChain::start().await;
    let seller = start(config(
        &chain,
        BatchConfig {
            authorizer_key: Some(SELLER_AUTHORIZER_KEY.to_owned()),
            claim_interval: None,
            ..BatchConfig::default()
        },
        None,
    ))
    .await;
    let buyer_before = chain.balance_of(chain.buyer).await;
    let url = format!("{}/batch/evm", seller.base);
    let pay = chain
        .pay(&url, 5, &["--deposit", "20000", "--refund", "all"])
        .await;
    pay.assert_ran();
    every_call_paid(&pay, 5);
    assert_eq!(seller.state.batch_runs(), 5, "the refund ran no handler");
    let refund = &pay.json["refund"];
    assert_eq!(refund["success"], true, "{refund}: {}", pay.stderr);
    assert_eq!(refund["amount"], "15000");
    // The refund claimed the 5 calls' charges and returned the rest.
    let channel = chain.channel(pay.channel_id()).await;
    assert_eq!((channel.balance, channel.total_claimed), (5_000, 5_000));
    assert_eq!(
        buyer_before - chain.balance_of(chain.buyer).await,
        U256::from(5_000u64),
        "the buyer paid the five calls and got the rest back"
    );
    assert_eq!(chain.refund_nonce(pay.channel_id()).await, U256::from(1u64));
}
