//! The engine's pre-check (`EngineBuilder::local_precheck`): EVM payments
//! that cannot be valid are refused before any facilitator call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use alloy_primitives::{Address, Bytes, B256, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use http::{Request, Response, StatusCode};
use serde_json::Value;
use x402_core::{
    codec,
    evm::{eip3009_domain, reason, Eip3009Authorization, ExactEvmPayload},
    proto::v2,
    testing::{self, StandIn, VerifyAnswer},
    Engine, Offer, Route,
};

/// A change to an authorization before it is signed.
type Edit = dyn FnOnce(&mut Eip3009Authorization);

const NETWORK: &str = "eip155:84532";
const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";

/// `/report`, paid with a Permit2 transfer.
fn permit2_report() -> Route {
    Route::get("/report").offer(
        Offer::exact(NETWORK, "$0.001", testing::PAY_TO).extra("assetTransferMethod", "permit2"),
    )
}

fn engine(facilitator: &Arc<StandIn>, precheck: bool) -> Engine {
    Engine::builder_arc(facilitator.clone())
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", testing::PAY_TO)))
        .local_precheck(precheck)
        .build()
        .unwrap()
}

async fn offer(engine: &Engine) -> v2::PaymentRequirements {
    testing::challenge(engine, Request::get("/report").body(()).unwrap())
        .await
        .accepts
        .remove(0)
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An EIP-3009 payment for `row` signed by `signer`, changed by `edit`
/// before signing.
fn signed(
    row: &v2::PaymentRequirements,
    signer: &PrivateKeySigner,
    edit: impl FnOnce(&mut Eip3009Authorization),
) -> String {
    let mut authorization = Eip3009Authorization {
        from: signer.address(),
        to: row.pay_to.parse().unwrap(),
        value: row.amount,
        valid_after: U256::ZERO,
        valid_before: U256::from(now() + 300),
        nonce: B256::from(rand::random::<[u8; 32]>()),
    };
    edit(&mut authorization);
    let domain = eip3009_domain("USDC", "2", 84532, USDC.parse().unwrap());
    let signature = signer
        .sign_hash_sync(&authorization.signing_hash(&domain))
        .unwrap();
    header(row, signature.as_bytes().to_vec(), authorization)
}

fn header(
    row: &v2::PaymentRequirements,
    signature: Vec<u8>,
    authorization: Eip3009Authorization,
) -> String {
    let payload = ExactEvmPayload {
        signature: Bytes::from(signature),
        authorization,
    };
    codec::encode(&serde_json::json!({
        "x402Version": 2,
        "accepted": row,
        "payload": payload,
    }))
    .unwrap()
}

/// One request with `payment`; the status, the refusal's reason (if a 402)
/// and whether the handler ran.
async fn send(engine: &Engine, payment: &str) -> (StatusCode, Option<String>, bool) {
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let request = Request::get("/report")
        .header("payment-signature", payment)
        .body(String::new())
        .unwrap();
    let response = testing::serve(engine, request, move |_| async move {
        counter.fetch_add(1, Ordering::SeqCst);
        Response::new(String::from("the report"))
    })
    .await;
    let reason = response.headers().get("payment-required").map(|h| {
        let v: Value = codec::decode(h.as_bytes(), 1 << 16).unwrap();
        v["error"].as_str().unwrap_or_default().to_owned()
    });
    (response.status(), reason, ran.load(Ordering::SeqCst) == 1)
}

#[tokio::test]
async fn ten_thousand_forged_signatures_cost_the_facilitator_nothing() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    let signed = testing::payment(&row);
    let mut handler_runs = 0;
    for _ in 0..10_000 {
        // A well-formed payment for the offer, its signature random bytes.
        let (status, reason, ran) = send(&engine, &testing::forge(&signed)).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED);
        assert_eq!(reason.as_deref(), Some(reason::SIGNATURE));
        handler_runs += usize::from(ran);
    }
    assert_eq!(handler_runs, 0);
    facilitator.assert_calls(0, 0);
}

#[tokio::test]
async fn the_test_payments_pass_it() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    let (status, _, ran) = send(&engine, &testing::payment(&row)).await;
    assert_eq!((status, ran), (StatusCode::OK, true));
    facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn a_signed_payment_reaches_the_facilitator_and_is_served() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    let payer = PrivateKeySigner::random();
    let (status, _, ran) = send(&engine, &signed(&row, &payer, |_| {})).await;
    assert_eq!((status, ran), (StatusCode::OK, true));
    facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn what_a_payment_signs_must_be_what_is_asked() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    let payer = PrivateKeySigner::random();
    let other = Address::repeat_byte(0x42);
    let cases: [(&str, Box<Edit>); 5] = [
        (reason::RECIPIENT_MISMATCH, Box::new(move |a| a.to = other)),
        (reason::VALUE, Box::new(|a| a.value = 999u64.into())),
        (
            reason::VALID_BEFORE,
            Box::new(|a| a.valid_before = U256::from(now() - 1)),
        ),
        // Inside the facilitators' 6 s margin.
        (
            reason::VALID_BEFORE,
            Box::new(|a| a.valid_before = U256::from(now() + 3)),
        ),
        (
            reason::VALID_AFTER,
            Box::new(|a| a.valid_after = U256::from(now() + 600)),
        ),
    ];
    for (expected, edit) in cases {
        let (status, reason, ran) = send(&engine, &signed(&row, &payer, edit)).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{expected}");
        assert_eq!(reason.as_deref(), Some(expected));
        assert!(!ran);
    }
    // Signed by someone else than `from`.
    let thief = PrivateKeySigner::random();
    let forged = signed(&row, &thief, |a| a.from = payer.address());
    assert_eq!(
        send(&engine, &forged).await.1.as_deref(),
        Some(reason::SIGNATURE)
    );
    facilitator.assert_calls(0, 0);
}

#[tokio::test]
async fn a_smart_wallet_signature_is_left_to_the_facilitator() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    let authorization = Eip3009Authorization {
        from: Address::repeat_byte(0x11),
        to: row.pay_to.parse().unwrap(),
        value: row.amount,
        valid_after: U256::ZERO,
        valid_before: U256::from(now() + 300),
        nonce: B256::from(rand::random::<[u8; 32]>()),
    };
    // An ERC-1271 / ERC-6492 signature: only the chain can check it.
    let payment = header(&row, vec![0xab; 200], authorization);
    let (status, _, ran) = send(&engine, &payment).await;
    assert_eq!((status, ran), (StatusCode::OK, true));
    facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn without_the_precheck_the_facilitator_judges() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, false);
    let row = offer(&engine).await;
    let (status, _, ran) = send(&engine, &testing::forge(&testing::payment(&row))).await;
    // The stand-in says valid to anything.
    assert_eq!((status, ran), (StatusCode::OK, true));
    facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn permit2_and_upto_payloads_are_checked_too() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
    let engine = Engine::builder_arc(facilitator.clone())
        .route(permit2_report())
        .route(Route::get("/metered").offer(Offer::upto(NETWORK, "2000", testing::PAY_TO)))
        .local_precheck(true)
        .build()
        .unwrap();
    for path in ["/report", "/metered"] {
        let row = testing::challenge(&engine, Request::get(path).body(()).unwrap())
            .await
            .accepts
            .remove(0);
        let request = Request::get(path)
            .header("payment-signature", testing::forge(&testing::payment(&row)))
            .body(String::new())
            .unwrap();
        let response = testing::serve(&engine, request, |_| async {
            Response::new(String::from("served"))
        })
        .await;
        assert_eq!(response.status(), StatusCode::PAYMENT_REQUIRED, "{path}");
        let v: Value =
            codec::decode(response.headers()["payment-required"].as_bytes(), 1 << 16).unwrap();
        assert_eq!(v["error"], reason::PERMIT2_SIGNATURE, "{path}");
    }
    facilitator.assert_calls(0, 0);
}

/// A facilitator that checks signatures says this of a forged one.
fn refuse_forgeries(facilitator: &StandIn) {
    facilitator.set_verify(VerifyAnswer::Invalid(reason::SIGNATURE.to_owned()));
}

/// A fresh payment for `row` from the test payer, its signature forged.
fn forged(row: &v2::PaymentRequirements) -> String {
    testing::forge(&testing::payment(row))
}

/// Pays `row` once as the test payer, which makes it a known payer.
async fn pay_once(engine: &Engine, row: &v2::PaymentRequirements) {
    let (status, _, ran) = send(engine, &testing::payment(row)).await;
    assert_eq!((status, ran), (StatusCode::OK, true));
}

/// `payment` is refused with `expected`, and its handler does not run.
async fn assert_refused(engine: &Engine, payment: &str, expected: &str) {
    let (status, reason, ran) = send(engine, payment).await;
    assert_eq!(
        (status, reason.as_deref(), ran),
        (StatusCode::PAYMENT_REQUIRED, Some(expected), false)
    );
}

#[tokio::test]
async fn a_known_payers_signature_is_the_facilitators_to_judge() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    // Unknown: a forgery is refused here.
    assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    facilitator.assert_calls(0, 0);
    pay_once(&engine, &row).await;
    // Its next payment's signer is not recovered here: this stand-in
    // accepts any signature, so even a forged one is served.
    let (status, _, ran) = send(&engine, &forged(&row)).await;
    assert_eq!((status, ran), (StatusCode::OK, true));
    facilitator.assert_calls(2, 2);
    // Every other check still runs.
    let payment = testing::payment(&row);
    let mut header: Value = codec::decode(payment.as_bytes(), 1 << 16).unwrap();
    header["payload"]["authorization"]["value"] = Value::from("999");
    assert_refused(&engine, &codec::encode(&header).unwrap(), reason::VALUE).await;
    facilitator.assert_calls(2, 2);
}

#[tokio::test]
async fn forgeries_naming_a_known_payer_cost_the_facilitator_one_call() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    pay_once(&engine, &row).await;
    refuse_forgeries(&facilitator);
    for _ in 0..1_000 {
        assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    }
    // The first reached the facilitator; its refusal distrusted the payer.
    facilitator.assert_calls(2, 1);
    // The payer's own payments are recovered here and served.
    facilitator.set_verify(VerifyAnswer::Valid);
    pay_once(&engine, &row).await;
    facilitator.assert_calls(3, 2);
    // Accepted again, it is still distrusted: a forgery is refused here.
    assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    facilitator.assert_calls(3, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_forgeries_naming_a_known_payer_reaches_the_facilitator_once() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    pay_once(&engine, &row).await;
    refuse_forgeries(&facilitator);
    // Slow answers: the burst is all in flight before the first is judged.
    facilitator.set_delays(Duration::from_millis(200), Duration::ZERO);
    let start = Arc::new(tokio::sync::Barrier::new(200));
    let burst: Vec<_> = (0..200)
        .map(|_| {
            let (engine, start, payment) = (engine.clone(), start.clone(), forged(&row));
            tokio::spawn(async move {
                start.wait().await;
                assert_refused(&engine, &payment, reason::SIGNATURE).await;
            })
        })
        .collect();
    for task in burst {
        task.await.unwrap();
    }
    facilitator.assert_calls(2, 1);
}

/// The payments after which a known payer may have more than one
/// unchecked payment at the facilitator, and how many it may then have
/// (`EngineBuilder::precheck_known_payers`).
const RECORD: usize = 16;
const MAX_UNCHECKED: usize = 4;

/// Sends `n` copies of `payment()` at once, the facilitator answering each
/// after 200 ms; the statuses and refusal reasons, and the handler runs.
async fn burst(
    engine: &Engine,
    facilitator: &StandIn,
    n: usize,
    payment: impl Fn() -> String,
) -> (Vec<(StatusCode, Option<String>)>, usize) {
    facilitator.set_delays(Duration::from_millis(200), Duration::ZERO);
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (engine, start, payment) = (engine.clone(), start.clone(), payment());
            tokio::spawn(async move {
                start.wait().await;
                send(&engine, &payment).await
            })
        })
        .collect();
    let (mut answers, mut runs) = (Vec::new(), 0);
    for task in tasks {
        let (status, reason, ran) = task.await.unwrap();
        answers.push((status, reason));
        runs += usize::from(ran);
    }
    facilitator.set_delays(Duration::ZERO, Duration::ZERO);
    (answers, runs)
}

/// An engine whose test payer has paid `RECORD` times, its stand-in and
/// its offer.
async fn with_a_record() -> (Arc<StandIn>, Engine, v2::PaymentRequirements) {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    for _ in 0..RECORD {
        pay_once(&engine, &row).await;
    }
    (facilitator, engine, row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payer_with_a_record_has_a_few_unchecked_payments_at_a_time() {
    let (facilitator, engine, row) = with_a_record().await;
    // The stand-in accepts any signature: the unchecked ones are served,
    // the others are recovered here and refused.
    let (answers, runs) = burst(&engine, &facilitator, 10, || forged(&row)).await;
    let served = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let refused = answers
        .iter()
        .filter(|a| {
            **a == (
                StatusCode::PAYMENT_REQUIRED,
                Some(reason::SIGNATURE.to_owned()),
            )
        })
        .count();
    assert_eq!(
        (served, refused, runs),
        (MAX_UNCHECKED, 10 - MAX_UNCHECKED, MAX_UNCHECKED)
    );
    facilitator.assert_calls(RECORD + MAX_UNCHECKED, RECORD + MAX_UNCHECKED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_forgeries_naming_a_payer_with_a_record_reaches_the_facilitator_a_few_times() {
    let (facilitator, engine, row) = with_a_record().await;
    refuse_forgeries(&facilitator);
    let (answers, runs) = burst(&engine, &facilitator, 200, || forged(&row)).await;
    assert_eq!(runs, 0);
    assert!(answers.iter().all(|a| *a
        == (
            StatusCode::PAYMENT_REQUIRED,
            Some(reason::SIGNATURE.to_owned())
        )));
    facilitator.assert_calls(RECORD + MAX_UNCHECKED, RECORD);
    // The refusals distrusted the payer and wiped its record: its own
    // payments are recovered and served, forgeries refused here.
    facilitator.set_verify(VerifyAnswer::Valid);
    pay_once(&engine, &row).await;
    assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    facilitator.assert_calls(RECORD + MAX_UNCHECKED + 1, RECORD + 1);
}

#[tokio::test]
async fn a_client_hanging_up_on_an_unchecked_payment_distrusts_its_payer() {
    let facilitator = Arc::new(StandIn::new());
    let engine = engine(&facilitator, true);
    let row = offer(&engine).await;
    pay_once(&engine, &row).await;
    facilitator.set_delays(Duration::from_secs(5), Duration::ZERO);
    // The client goes away while the facilitator judges.
    let payment = forged(&row);
    let gone = tokio::time::timeout(Duration::from_millis(100), send(&engine, &payment)).await;
    assert!(gone.is_err());
    // The stand-in would accept the next one: it is refused here instead.
    facilitator.set_delays(Duration::ZERO, Duration::ZERO);
    assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    facilitator.assert_calls(2, 1);
}

#[tokio::test]
async fn without_known_payers_every_signer_is_recovered() {
    let facilitator = Arc::new(StandIn::new());
    let engine = Engine::builder_arc(facilitator.clone())
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", testing::PAY_TO)))
        .precheck_known_payers(false)
        .build()
        .unwrap();
    let row = offer(&engine).await;
    for _ in 0..3 {
        pay_once(&engine, &row).await;
    }
    assert_refused(&engine, &forged(&row), reason::SIGNATURE).await;
    facilitator.assert_calls(3, 3);
}

#[tokio::test]
async fn a_known_payers_permit2_signature_is_left_to_the_facilitator_too() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
    let engine = Engine::builder_arc(facilitator.clone())
        .route(permit2_report())
        .build()
        .unwrap();
    let row = offer(&engine).await;
    assert_refused(&engine, &forged(&row), reason::PERMIT2_SIGNATURE).await;
    pay_once(&engine, &row).await;
    // Known now: the stand-in, which accepts any signature, judges it.
    assert_eq!(send(&engine, &forged(&row)).await.0, StatusCode::OK);
    facilitator.assert_calls(2, 2);
}
