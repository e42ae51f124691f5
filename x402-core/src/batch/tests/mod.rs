//! Batch-settlement through the engine, against an in-process model of the
//! escrow contract behind a facilitator (the on-chain run with the official
//! client and facilitator is `tests/tests/batch_settlement.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use alloy_primitives::{address, Address, Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use alloy_sol_types::Eip712Domain;
use bytes::Bytes as Body;
use http::{Request, Response, StatusCode};
use serde_json::{json, Value};

use super::{eip712, reason, BatchPayload, BatchSettlement, ChannelConfig, Claimer};
use crate::{
    codec,
    money::AtomicAmount,
    proto::v2::{PaymentRequired, PaymentRequirements},
    route::{Offer, Route},
    testing, Engine, VerifiedPayment,
};

const NETWORK: &str = "eip155:84532";
const PAY_TO: Address = address!("209693Bc6afc0C5328bA36FaF03C514EF312287C");
const TOKEN: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
const PRICE: u64 = 1000;

fn authorizer() -> PrivateKeySigner {
    PrivateKeySigner::from_bytes(&alloy_primitives::keccak256(b"batch authorizer")).unwrap()
}

fn domain() -> Eip712Domain {
    eip712::domain(84532, super::BATCH_SETTLEMENT_ADDRESS)
}

mod sim;
use sim::SimChain;

/// A buyer with one channel to the seller.
struct Buyer {
    key: PrivateKeySigner,
    config: ChannelConfig,
    accepted: PaymentRequirements,
}

impl Buyer {
    fn new(seed: &[u8], accepted: &PaymentRequirements) -> Self {
        let key = PrivateKeySigner::from_bytes(&alloy_primitives::keccak256(seed)).unwrap();
        let config = ChannelConfig {
            payer: key.address(),
            payer_authorizer: key.address(),
            receiver: PAY_TO,
            receiver_authorizer: authorizer().address(),
            token: TOKEN,
            withdraw_delay: 900,
            salt: B256::ZERO,
        };
        Self {
            key,
            config,
            accepted: accepted.clone(),
        }
    }

    fn id(&self) -> B256 {
        eip712::channel_id(&self.config, &domain())
    }

    fn sign(&self, id: B256, max: u64) -> Bytes {
        let digest = eip712::voucher_digest(id, u128::from(max), &domain());
        Bytes::from(
            self.key
                .sign_hash_sync(&digest)
                .unwrap()
                .as_bytes()
                .to_vec(),
        )
    }

    fn header(&self, payload: Value) -> String {
        codec::encode(&json!({
            "x402Version": 2,
            "accepted": self.accepted,
            "payload": payload,
        }))
        .unwrap()
    }

    fn voucher_with(&self, config: &ChannelConfig, id: B256, max: u64, sig: Bytes) -> String {
        self.header(json!({
            "type": "voucher",
            "channelConfig": config,
            "voucher": { "channelId": id, "maxClaimableAmount": max.to_string(), "signature": sig },
        }))
    }

    fn voucher(&self, max: u64) -> String {
        self.voucher_with(&self.config, self.id(), max, self.sign(self.id(), max))
    }

    fn deposit(&self, amount: u64, max: u64) -> String {
        let id = self.id();
        self.header(json!({
            "type": "deposit",
            "channelConfig": self.config,
            "voucher": { "channelId": id, "maxClaimableAmount": max.to_string(), "signature": self.sign(id, max) },
            "deposit": { "amount": amount.to_string(), "authorization": { "erc3009Authorization": { "validAfter": "0", "validBefore": "99999999999", "salt": B256::ZERO, "signature": "0x00" } } },
        }))
    }

    fn refund(&self, max: u64, amount: Option<u64>) -> String {
        let id = self.id();
        let mut payload = json!({
            "type": "refund",
            "channelConfig": self.config,
            "voucher": { "channelId": id, "maxClaimableAmount": max.to_string(), "signature": self.sign(id, max) },
        });
        if let Some(a) = amount {
            payload["amount"] = json!(a.to_string());
        }
        self.header(payload)
    }
}

struct Seller {
    engine: Engine,
    chain: Arc<SimChain>,
    runs: Arc<AtomicUsize>,
    /// The handler reports this charge through the meter (`None`: nothing).
    charge: Arc<Mutex<Option<u64>>>,
    delay: Duration,
    inside: Arc<AtomicUsize>,
    most_inside: Arc<AtomicUsize>,
}

fn seller_with(chain: Arc<SimChain>, batch: BatchSettlement) -> Seller {
    let engine = Engine::builder_arc(chain.clone())
        .batch_settlement(batch)
        .route(
            Route::get("/batch").offer(
                Offer::batch_settlement(
                    NETWORK,
                    PRICE.to_string(),
                    PAY_TO.to_checksum(None),
                    Some(authorizer().address()),
                )
                .asset(crate::route::Asset::new(TOKEN.to_checksum(None), 6).eip712("USDC", "2")),
            ),
        )
        .build()
        .unwrap();
    Seller {
        engine,
        chain,
        runs: Arc::default(),
        charge: Arc::default(),
        delay: Duration::ZERO,
        inside: Arc::default(),
        most_inside: Arc::default(),
    }
}

fn seller() -> Seller {
    seller_with(
        Arc::new(SimChain::default()),
        BatchSettlement::in_memory().authorizer(authorizer()),
    )
}

impl Seller {
    async fn accepted(&self) -> PaymentRequirements {
        let challenge: PaymentRequired =
            testing::challenge(&self.engine, Request::get("/batch").body(()).unwrap()).await;
        challenge.accepts[0].clone()
    }

    async fn call_status(&self, header: &str, status: StatusCode) -> Response<Body> {
        let request = Request::get("/batch")
            .header("PAYMENT-SIGNATURE", header)
            .body(())
            .unwrap();
        let (runs, charge, delay) = (self.runs.clone(), *self.charge.lock().unwrap(), self.delay);
        let (inside, most) = (self.inside.clone(), self.most_inside.clone());
        testing::serve(&self.engine, request, move |req: Request<()>| async move {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            if let (Some(c), Some(meter)) = (
                charge,
                req.extensions()
                    .get::<VerifiedPayment>()
                    .and_then(|p| p.meter.clone()),
            ) {
                meter.set(c);
            }
            tokio::time::sleep(delay).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            let mut r = Response::new(json!({ "run": run }).to_string());
            *r.status_mut() = status;
            r
        })
        .await
    }

    async fn call(&self, header: &str) -> Response<Body> {
        self.call_status(header, StatusCode::OK).await
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

fn receipt(response: &Response<Body>) -> Value {
    let header = response
        .headers()
        .get("payment-response")
        .expect("a receipt");
    codec::decode(header.as_bytes(), 1 << 16).unwrap()
}

fn challenge_of(response: &Response<Body>) -> PaymentRequired {
    let header = response
        .headers()
        .get("payment-required")
        .expect("a challenge");
    codec::decode(header.as_bytes(), 1 << 16).unwrap()
}

fn refused_with(response: &Response<Body>, reason: &str) {
    assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED);
    assert_eq!(challenge_of(response).error.as_deref(), Some(reason));
}

#[test]
fn the_challenge_offers_the_channel_terms() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let s = seller();
        let a = s.accepted().await;
        assert_eq!(a.scheme, "batch-settlement");
        assert_eq!(a.amount, AtomicAmount::from(PRICE));
        assert_eq!(
            a.extra["receiverAuthorizer"],
            json!(authorizer().address().to_checksum(None))
        );
        assert_eq!(a.extra["withdrawDelay"], json!(900));
        assert_eq!(a.extra["name"], json!("USDC"));
        assert_eq!(a.extra["version"], json!("2"));
    });
}

#[tokio::test]
async fn one_deposit_then_vouchers_checked_in_process() {
    let s = seller();
    let b = Buyer::new(b"buyer", &s.accepted().await);
    let r = s.call(&b.deposit(10_000, PRICE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let d = receipt(&r);
    assert_eq!(d["transaction"], "0xdeposit");
    assert_eq!(d["amount"], "10000");
    assert_eq!(d["extra"]["chargedAmount"], "1000");
    assert_eq!(
        d["extra"]["channelState"]["chargedCumulativeAmount"],
        "1000"
    );
    assert_eq!(d["extra"]["channelState"]["balance"], "10000");
    for i in 2..=5u64 {
        let r = s.call(&b.voucher(i * PRICE)).await;
        assert_eq!(r.status(), StatusCode::OK, "call {i}");
        let v = receipt(&r);
        assert_eq!(v["success"], true);
        assert_eq!(v["transaction"], "");
        assert_eq!(v["amount"], "");
        assert_eq!(v["extra"]["chargedAmount"], "1000");
        assert_eq!(
            v["extra"]["channelState"]["chargedCumulativeAmount"],
            (i * PRICE).to_string()
        );
    }
    assert_eq!(s.runs(), 5);
    // The deposit went through the facilitator; the vouchers did not.
    assert_eq!(s.chain.verify_calls.load(Ordering::SeqCst), 1);
    assert_eq!(s.chain.settle_calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn vouchers_on_stale_state_go_to_the_facilitator() {
    let s = seller_with(
        Arc::new(SimChain::default()),
        BatchSettlement::in_memory().onchain_ttl(Duration::ZERO),
    );
    let b = Buyer::new(b"stale", &s.accepted().await);
    assert_eq!(
        s.call(&b.deposit(10_000, PRICE)).await.status(),
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(s.call(&b.voucher(2 * PRICE)).await.status(), StatusCode::OK);
    assert_eq!(s.chain.verify_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn refusals_carry_the_spec_reason_and_run_no_handler() {
    let s = seller();
    let accepted = s.accepted().await;
    let b = Buyer::new(b"refusals", &accepted);
    assert_eq!(
        s.call(&b.deposit(3_000, PRICE)).await.status(),
        StatusCode::OK
    );
    let second = b.voucher(2 * PRICE);
    assert_eq!(s.call(&second).await.status(), StatusCode::OK);
    assert_eq!(s.runs(), 2);

    // Replayed: the same voucher again.
    let r = s.call(&second).await;
    refused_with(&r, reason::CUMULATIVE_AMOUNT_MISMATCH);
    // The corrective 402 carries the channel's state and latest voucher.
    let row = &challenge_of(&r).accepts[0];
    assert_eq!(row.extra["channelState"]["chargedCumulativeAmount"], "2000");
    assert_eq!(row.extra["voucherState"]["signedMaxClaimable"], "2000");
    // Below and above the expected cumulative (3000).
    refused_with(
        &s.call(&b.voucher(2_500)).await,
        reason::CUMULATIVE_AMOUNT_MISMATCH,
    );
    refused_with(
        &s.call(&b.voucher(4_000)).await,
        reason::CUMULATIVE_AMOUNT_MISMATCH,
    );
    // Right count, then over the deposit (3000).
    assert_eq!(s.call(&b.voucher(3 * PRICE)).await.status(), StatusCode::OK);
    assert_eq!(s.runs(), 3);
    refused_with(
        &s.call(&b.voucher(4 * PRICE)).await,
        reason::CUMULATIVE_EXCEEDS_BALANCE,
    );

    // Another channel's voucher on this channel's config.
    let other = Buyer::new(b"other", &accepted);
    let foreign = b.voucher_with(&b.config, other.id(), 4_000, other.sign(other.id(), 4_000));
    refused_with(&s.call(&foreign).await, reason::CHANNEL_ID_MISMATCH);
    // This channel's id, signed by another key.
    let forged = b.voucher_with(&b.config, b.id(), 4_000, other.sign(b.id(), 4_000));
    refused_with(&s.call(&forged).await, reason::VOUCHER_SIGNATURE);
    // A channel to another receiver.
    let mut elsewhere = b.config.clone();
    elsewhere.receiver = address!("00000000000000000000000000000000000b0b00");
    let id = eip712::channel_id(&elsewhere, &domain());
    let wrong = b.voucher_with(&elsewhere, id, 1_000, b.sign(id, 1_000));
    refused_with(&s.call(&wrong).await, reason::RECEIVER_MISMATCH);

    assert_eq!(s.runs(), 3, "no refused payment ran the handler");
}

#[tokio::test]
async fn the_meter_charges_the_actual_cost_and_failures_charge_nothing() {
    let s = seller();
    let b = Buyer::new(b"meter", &s.accepted().await);
    *s.charge.lock().unwrap() = Some(300);
    let r = s.call(&b.deposit(10_000, PRICE)).await;
    assert_eq!(receipt(&r)["extra"]["chargedAmount"], "300");
    // Next ceiling: 300 + 1000. A failing handler charges nothing...
    let next = b.voucher(1_300);
    let r = s
        .call_status(&next, StatusCode::INTERNAL_SERVER_ERROR)
        .await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(r.headers().get("payment-response").is_none());
    // ...and the same voucher works again.
    *s.charge.lock().unwrap() = Some(5_000);
    let r = s.call(&next).await;
    // A report above the ceiling is capped.
    assert_eq!(receipt(&r)["extra"]["chargedAmount"], "1000");
    assert_eq!(
        receipt(&r)["extra"]["channelState"]["chargedCumulativeAmount"],
        "1300"
    );
}

async fn concurrent_calls_are_serialised(s: Seller, seed: &[u8]) {
    let s = Arc::new(Seller {
        delay: Duration::from_millis(40),
        ..s
    });
    let b = Buyer::new(seed, &s.accepted().await);
    assert_eq!(
        s.call(&b.deposit(100_000, PRICE)).await.status(),
        StatusCode::OK
    );
    // Eight calls at once, all with the next voucher.
    let next = b.voucher(2 * PRICE);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let (s, h) = (s.clone(), next.clone());
            tokio::spawn(async move { s.call(&h).await })
        })
        .collect();
    let mut ok = 0;
    for c in calls {
        let r = c.await.unwrap();
        if r.status() == StatusCode::OK {
            ok += 1;
        } else {
            refused_with(&r, reason::CUMULATIVE_AMOUNT_MISMATCH);
        }
    }
    assert_eq!(ok, 1, "one handler charged the cumulative 2000");
    assert_eq!(
        s.most_inside.load(Ordering::SeqCst),
        1,
        "no two handlers at once"
    );
    assert_eq!(s.runs(), 2);
    // Calls with the right successive vouchers, concurrently: each waits
    // for the one before it; all run, none at the same time.
    let calls: Vec<_> = (3..=6u64)
        .map(|i| {
            let (s, h) = (s.clone(), b.voucher(i * PRICE));
            tokio::spawn(async move { s.call(&h).await.status() })
        })
        .collect();
    let mut statuses = Vec::new();
    for c in calls {
        statuses.push(c.await.unwrap());
    }
    assert_eq!(s.most_inside.load(Ordering::SeqCst), 1);
    let record = s
        .engine
        .batch_settlement()
        .store()
        .load(&b.id())
        .await
        .unwrap()
        .unwrap();
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count() as u64;
    assert_eq!(
        record.charged_cumulative_amount,
        U256::from((2 + ok) * PRICE)
    );
    assert_eq!(s.runs() as u64, 2 + ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_one_channel_are_serialised_in_memory() {
    concurrent_calls_are_serialised(seller(), b"concurrent-memory").await;
}

#[tokio::test]
async fn a_seller_without_state_counts_from_the_chains_claimed_total() {
    let chain = Arc::new(SimChain::default());
    let first = seller_with(
        chain.clone(),
        BatchSettlement::in_memory().authorizer(authorizer()),
    );
    let b = Buyer::new(b"lost", &first.accepted().await);
    assert_eq!(
        first.call(&b.deposit(10_000, PRICE)).await.status(),
        StatusCode::OK
    );
    for i in 2..=3u64 {
        assert_eq!(
            first.call(&b.voucher(i * PRICE)).await.status(),
            StatusCode::OK
        );
    }
    let claimer = Claimer::new(
        chain.clone(),
        first.engine.batch_settlement(),
        NETWORK,
        PAY_TO,
        TOKEN,
    );
    claimer.claim().await.unwrap();
    assert_eq!(
        first.call(&b.voucher(4 * PRICE)).await.status(),
        StatusCode::OK
    );
    // State lost (memory store, new process): claimed 3000 on chain, the
    // 4th call's 1000 forfeited.
    let second = seller_with(chain.clone(), BatchSettlement::in_memory());
    let r = second.call(&b.voucher(5 * PRICE)).await;
    refused_with(&r, reason::CUMULATIVE_AMOUNT_MISMATCH);
    let row = &challenge_of(&r).accepts[0];
    assert_eq!(row.extra["channelState"]["chargedCumulativeAmount"], "3000");
    assert!(row.extra.get("voucherState").is_none());
    assert_eq!(second.runs(), 0);
    let r = second.call(&b.voucher(4 * PRICE)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        receipt(&r)["extra"]["channelState"]["chargedCumulativeAmount"],
        "4000"
    );
}

#[tokio::test]
async fn the_claimer_claims_each_voucher_once_and_settles() {
    let s = seller();
    let accepted = s.accepted().await;
    let buyers: Vec<Buyer> = (0..3u8)
        .map(|i| Buyer::new(&[b'c', i], &accepted))
        .collect();
    for b in &buyers {
        assert_eq!(
            s.call(&b.deposit(10_000, PRICE)).await.status(),
            StatusCode::OK
        );
        for i in 2..=4u64 {
            assert_eq!(s.call(&b.voucher(i * PRICE)).await.status(), StatusCode::OK);
        }
    }
    let claimer = Claimer::new(
        s.chain.clone(),
        s.engine.batch_settlement(),
        NETWORK,
        PAY_TO,
        TOKEN,
    )
    .max_per_batch(2);
    assert_eq!(claimer.unclaimed().await.unwrap(), U256::from(12_000));
    let report = claimer.claim_and_settle().await.unwrap();
    assert_eq!(report.vouchers, 3);
    assert_eq!(report.transactions.len(), 2, "batches of two");
    assert_eq!(report.claimed, U256::from(12_000));
    assert_eq!(
        *s.chain.receiver_balance.lock().unwrap(),
        U256::from(12_000)
    );
    for b in &buyers {
        assert_eq!(s.chain.chan(&b.id()).claimed, U256::from(4_000));
    }
    // Nothing new: nothing claimed again.
    let again = claimer.claim_and_settle().await.unwrap();
    assert_eq!(again.vouchers, 0);
    assert_eq!(s.chain.double_claims.load(Ordering::SeqCst), 0);
    // More calls, then only the increase is claimed.
    assert_eq!(
        s.call(&buyers[0].voucher(5 * PRICE)).await.status(),
        StatusCode::OK
    );
    let more = claimer.claim_and_settle().await.unwrap();
    assert_eq!((more.vouchers, more.claimed), (1, U256::from(1_000)));
    assert_eq!(
        *s.chain.receiver_balance.lock().unwrap(),
        U256::from(13_000)
    );
    // The mirrored claimed total lets in-process checks refuse a voucher
    // at or below it.
    assert_eq!(s.chain.double_claims.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_refund_request_settles_without_the_handler() {
    let s = seller();
    let b = Buyer::new(b"refund", &s.accepted().await);
    assert_eq!(
        s.call(&b.deposit(10_000, PRICE)).await.status(),
        StatusCode::OK
    );
    assert_eq!(s.call(&b.voucher(2 * PRICE)).await.status(), StatusCode::OK);
    // A refund's voucher is zero-charge: the count, not the count + price.
    refused_with(
        &s.call(&b.refund(3 * PRICE, None)).await,
        reason::CUMULATIVE_AMOUNT_MISMATCH,
    );
    let r = s.call(&b.refund(2 * PRICE, None)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(s.runs(), 2, "the refund ran no handler");
    let receipt = receipt(&r);
    assert_eq!(receipt["transaction"], "0xrefund");
    assert_eq!(receipt["amount"], "8000");
    let chan = s.chain.chan(&b.id());
    assert_eq!(
        (chan.balance, chan.claimed),
        (U256::from(2_000), U256::from(2_000))
    );
    // The channel is closed on the seller's side.
    assert!(s
        .engine
        .batch_settlement()
        .store()
        .load(&b.id())
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn the_seller_refunds_idle_channels() {
    let s = seller();
    let b = Buyer::new(b"seller refund", &s.accepted().await);
    assert_eq!(
        s.call(&b.deposit(10_000, PRICE)).await.status(),
        StatusCode::OK
    );
    let claimer = Claimer::new(
        s.chain.clone(),
        s.engine.batch_settlement(),
        NETWORK,
        PAY_TO,
        TOKEN,
    );
    let refunds = claimer.refund(&[b.id()]).await.unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0].amount, Some(AtomicAmount::from(9_000)));
    assert_eq!(s.chain.chan(&b.id()).claimed, U256::from(1_000));
}

#[cfg(feature = "redis")]
mod redis;

#[test]
fn eip712_digests_match_viem() {
    // Expected values computed with viem's `hashTypedData` (what the official
    // `@x402/evm` client, server and facilitator use) for these messages.
    let config = ChannelConfig {
        payer: address!("f39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
        payer_authorizer: address!("f39Fd6e51aad88F6F4ce6aB8827279cffFb92266"),
        receiver: address!("70997970C51812dc3A010C7d01b50e0d17dc79C8"),
        receiver_authorizer: address!("3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"),
        token: TOKEN,
        withdraw_delay: 900,
        salt: B256::ZERO,
    };
    let d = domain();
    let id = eip712::channel_id(&config, &d);
    let hex = |b: B256| format!("{b:#x}");
    assert_eq!(
        hex(id),
        "0x29ccd7626a1289e60f2284c95763b20cf4a944f591a4f613133e6cf22eb9196d"
    );
    assert_eq!(
        hex(eip712::voucher_digest(id, 5000, &d)),
        "0x13a53a592689cfe97daf1169e2fb957a9694c5ecb9c648f1797b724c72786a28"
    );
    assert_eq!(
        hex(eip712::refund_digest(id, U256::from(1), 1500, &d)),
        "0xfce9670db11aa5ca0c52589c8f28c862ce1913df147c6744cbc5d94da906495e"
    );
    let rows = [
        eip712::ClaimRow {
            channel_id: id,
            max_claimable: 5000,
            total_claimed: 4200,
        },
        eip712::ClaimRow {
            channel_id: B256::repeat_byte(0x11),
            max_claimable: 7,
            total_claimed: 6,
        },
    ];
    assert_eq!(
        hex(eip712::claim_batch_digest(&rows, &d)),
        "0x079e6a3be44b1ebf41519f524c9a4f0fd3b4c930ca0670777d5b7cd4abe7ce5f"
    );
}
