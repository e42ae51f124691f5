//! The `payment-identifier` extension end to end: both example servers
//! (`examples/paid-api` on axum, `examples/paid-api-actix` on actix-web; one
//! suite, run against each) settle on a local anvil chain with the
//! in-process facilitator, and the official v2 client (`@x402/fetch` with
//! `@x402/extensions`' `appendPaymentIdentifierToExtensions`, driven by
//! `tests/js/payment-id.mjs`) pays `/exact/evm/eip3009`, which advertises
//! the extension (not required), with an id.
//!
//! - The response is lost and the same `PAYMENT-SIGNATURE` is sent again:
//!   the same body, byte for byte, the same `PAYMENT-RESPONSE`, one
//!   transfer on chain, and the handler's run counter moved once.
//! - Another payment with the same id: 409, nothing moves.
//! - 20 copies of one payment at once: one handler run, one transfer, and
//!   every copy gets the same response.
//!
//! Needs `tests/js/node_modules` and node >= 20, as `interop.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{process::Stdio, time::Duration};

use alloy_primitives::U256;
use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use x402_tests::{
    anvil::accounts,
    example_chain::{actix, axum, ExampleChain as Chain, Setup, Start, FUNDING},
    require,
};

const PRICE: u64 = 1_000;
const PATH: &str = "/exact/evm/eip3009";

/// Exactly `payments` payments of [`PRICE`] moved from the payer to the payee.
async fn assert_paid(chain: &Chain, payments: u64) {
    assert_eq!(
        chain.balances().await,
        (
            U256::from(FUNDING - payments * PRICE),
            U256::from(payments * PRICE)
        ),
        "{payments} payment(s) of {PRICE} must have moved on chain"
    );
}

/// `payment-id.mjs` in `mode` (`pay` or `create`) with `id`.
async fn client(chain: &Chain, mode: &str, id: &str) -> Value {
    let url = format!("{}{PATH}", chain.base);
    let child = require::node_async("payment-id.mjs")
        .args([
            "--url",
            &url,
            "--key",
            accounts::KEY_1,
            "--rpc",
            &chain.anvil.url,
        ])
        .args(["--id", id, "--mode", mode, "--timeout-ms", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run node (node >= 20 is needed)");
    let output = tokio::time::timeout(Duration::from_secs(90), child.wait_with_output())
        .await
        .expect("payment-id.mjs did not finish within 90 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "payment-id.mjs: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("payment-id.mjs printed no JSON: {stdout} {stderr}"))
}

/// Sends `header` as `PAYMENT-SIGNATURE` to the server at `base`.
async fn resend_to(base: &str, http: &reqwest::Client, header: &str) -> Resent {
    let response = http
        .get(format!("{base}{PATH}"))
        .header("PAYMENT-SIGNATURE", header)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let (receipt, content_type) = (header("payment-response"), header("content-type"));
    let body = response.text().await.unwrap();
    Resent {
        status,
        receipt,
        content_type,
        body,
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Resent {
    status: u16,
    receipt: Option<String>,
    content_type: Option<String>,
    body: String,
}

fn decode(header: &str) -> Value {
    serde_json::from_slice(&STANDARD.decode(header).unwrap()).unwrap()
}

fn run_of(body: &str) -> u64 {
    let body: Value = serde_json::from_str(body).unwrap();
    body["run"]
        .as_u64()
        .unwrap_or_else(|| panic!("no run: {body}"))
}

fn new_id() -> String {
    format!("pay_{:032x}", rand::random::<u128>())
}

/// The official client pays with an id; its response is lost and the same
/// header comes again: the stored response, the handler not run again, one
/// transfer. Another payment with the id: 409.
async fn a_resend_gets_the_stored_response(server: Start) {
    let chain = Chain::start(server).await;
    let http = reqwest::Client::new();

    // The 402 declares the extension as upstream's helper does.
    let challenge = http
        .get(format!("{}{PATH}", chain.base))
        .send()
        .await
        .unwrap();
    assert_eq!(challenge.status(), 402);
    let required = decode(challenge.headers()["payment-required"].to_str().unwrap());
    let declared = &required["extensions"]["payment-identifier"];
    assert_eq!(declared["info"], json!({"required": false}), "{required}");
    assert_eq!(declared["schema"]["required"], json!(["required"]));

    let id = new_id();
    let paid = client(&chain, "pay", &id).await;
    assert_eq!(paid["status"], 200, "{paid}");
    assert_eq!(&paid["declared"], declared);
    let header = paid["paymentSignature"].as_str().unwrap().to_owned();
    // The official client put the id in the payment.
    let payload = decode(&header);
    assert_eq!(
        payload["extensions"]["payment-identifier"]["info"]["id"], id,
        "{payload}"
    );
    let receipt = paid["paymentResponseRaw"].as_str().unwrap().to_owned();
    assert_eq!(paid["paymentResponse"]["success"], true, "{paid}");
    let body = paid["body"].as_str().unwrap().to_owned();
    assert_eq!(run_of(&body), 1);
    assert_paid(&chain, 1).await;

    // Lost; sent again, twice: the same bytes, the same receipt.
    for _ in 0..2 {
        let again = resend_to(&chain.base, &http, &header).await;
        assert_eq!(again.status, 200, "{again:?}");
        assert_eq!(again.body, body);
        assert_eq!(again.receipt.as_deref(), Some(receipt.as_str()));
        assert_eq!(
            decode(again.receipt.as_deref().unwrap()),
            paid["paymentResponse"]
        );
    }
    assert_paid(&chain, 1).await;

    // Another payment with the same id: 409, nothing moves, nothing runs.
    let other = client(&chain, "pay", &id).await;
    assert_eq!(other["status"], 409, "{other}");
    let error: Value = serde_json::from_str(other["body"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"], "payment_identifier_conflict");
    assert_ne!(other["paymentSignature"], paid["paymentSignature"]);
    assert_paid(&chain, 1).await;

    // The handler's counter moved once: the next paid call is its second run.
    let next = client(&chain, "pay", &new_id()).await;
    assert_eq!(next["status"], 200, "{next}");
    assert_eq!(run_of(next["body"].as_str().unwrap()), 2);
    assert_paid(&chain, 2).await;
}

/// 20 copies of one payment (made by the official client, sent by the test)
/// at once: one handler run, one transfer, one response for all.
async fn twenty_concurrent_copies_run_once(server: Start) {
    let chain = Chain::start(server).await;
    let created = client(&chain, "create", &new_id()).await;
    let header = created["paymentSignature"].as_str().unwrap().to_owned();
    let http = reqwest::Client::new();
    let copies = (0..20).map(|_| resend_to(&chain.base, &http, &header));
    let answers = futures_util::future::join_all(copies).await;
    for answer in &answers {
        assert_eq!(answer.status, 200, "{answer:?}");
        assert_eq!(answer, &answers[0]);
    }
    assert_eq!(run_of(&answers[0].body), 1);
    assert!(answers[0].receipt.is_some());
    assert_paid(&chain, 1).await;

    let next = client(&chain, "pay", &new_id()).await;
    assert_eq!(run_of(next["body"].as_str().unwrap()), 2, "{next}");
}

/// Two instances sharing Redis, one on axum and one on actix-web: a
/// payment made on the first and resent to the second gets the first's
/// response, byte for byte, and runs no handler there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_sharing_redis_replay_each_others_responses() {
    let redis = require::redis_url().await;
    let chain = Chain::start_with(
        axum,
        Setup {
            redis_url: Some(redis),
            ..Setup::default()
        },
    )
    .await;
    let (other, other_server) = actix(chain.config.clone()).await;
    let _stop = AbortOnDrop(other_server);
    let paid = client(&chain, "pay", &new_id()).await;
    assert_eq!(paid["status"], 200, "{paid}");
    let header = paid["paymentSignature"].as_str().unwrap();
    let http = reqwest::Client::new();
    let again = resend_to(&other, &http, header).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.content_type.as_deref(), Some("application/json"));
    assert_eq!(again.body, paid["body"].as_str().unwrap());
    assert_eq!(
        again.receipt.as_deref(),
        paid["paymentResponseRaw"].as_str()
    );
    assert_paid(&chain, 1).await;
    // The actix instance's handler never ran: its first paid call is run 1.
    let created = client(&chain, "create", &new_id()).await;
    let fresh = resend_to(&other, &http, created["paymentSignature"].as_str().unwrap()).await;
    assert_eq!(fresh.status, 200, "{fresh:?}");
    assert_eq!(run_of(&fresh.body), 1);
    assert_paid(&chain, 2).await;
}

struct AbortOnDrop(JoinHandle<Result<(), paid_api::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

macro_rules! payment_identifier_suite {
    ($framework:ident) => {
        mod $framework {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn official_client_resend_gets_the_stored_response_and_another_payload_409() {
                a_resend_gets_the_stored_response(super::$framework).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn twenty_concurrent_copies_run_the_handler_once() {
                twenty_concurrent_copies_run_once(super::$framework).await;
            }
        }
    };
}

payment_identifier_suite!(axum);
payment_identifier_suite!(actix);
