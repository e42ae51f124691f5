//! sign-in-with-x with the official clients, on anvil: both example servers
//! (`examples/paid-api` on axum, `examples/paid-api-actix`), in process with
//! the in-process facilitator settling TestUSDC on a local anvil chain.
//! `GET /siwx/demo` is paid once with the official v2 client (`@x402/fetch`,
//! `tests/js/pay.mjs`); then the official `@x402/extensions` sign-in-with-x
//! helpers (`wrapFetchWithSIWx`, `createSIWxPayload`, `tests/js/siwx.mjs`)
//! sign in: the handler runs with no payment and no token moves. The same
//! proof sent again, a wallet that never paid and a proof built for another
//! domain are refused, and their handler never runs.
//!
//! Needs `tests/js/node_modules` and node >= 20, as `interop.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{process::Stdio, time::Duration};

use alloy_primitives::U256;
use serde_json::Value;
use x402_tests::{
    anvil::{self, accounts},
    example_chain::{actix, axum, ExampleChain as Chain, Start, FUNDING},
    require,
};

const PATH: &str = "/siwx/demo";

/// What `siwx.mjs` reported.
#[derive(Debug)]
struct SignIn {
    status: u64,
    body: Value,
    proof: Option<String>,
    error: Option<String>,
    cache_control: Option<String>,
}

/// Runs `node tests/js/siwx.mjs --url URL --key KEY extra...`.
async fn siwx(url: &str, key: &str, extra: &[&str]) -> SignIn {
    let child = require::node_async("siwx.mjs")
        .args(["--url", url, "--key", key])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run node (node >= 20 is needed)");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("siwx.mjs did not finish within 60 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "siwx.mjs failed: {stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json: Value = stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON from siwx.mjs: {stdout} {stderr}"));
    SignIn {
        status: json["status"].as_u64().unwrap(),
        body: json["body"]
            .as_str()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null),
        proof: json["proof"].as_str().map(str::to_owned),
        error: json["error"].as_str().map(str::to_owned),
        cache_control: json["cacheControl"].as_str().map(str::to_owned),
    }
}

async fn pay_once_then_sign_in(server: Start) {
    let chain = Chain::start(server).await;
    let url = format!("{}{PATH}", chain.base);
    let paid_balances = (U256::from(FUNDING - 1_000), U256::from(1_000));

    // A wallet that never paid: refused, nothing moves.
    let never = siwx(&url, accounts::KEY_3, &[]).await;
    assert_eq!(never.status, 402, "{never:?}");
    assert_eq!(
        never.error.as_deref(),
        Some("invalid_siwx_not_paid"),
        "{never:?}"
    );
    assert!(never.proof.is_some(), "the client signed in: {never:?}");

    // Pay once with the official v2 client: the price moves.
    let outcome = anvil::pay("v2", &url, accounts::KEY_1, &chain.anvil.url, &[]).await;
    assert_eq!(
        outcome.exit_code,
        Some(0),
        "pay.mjs failed: {}",
        outcome.stderr
    );
    assert_eq!(
        outcome.json["status"], 200,
        "{} {}",
        outcome.json, outcome.stderr
    );
    assert_eq!(outcome.json["paymentResponse"]["success"], true);
    let body: Value = serde_json::from_str(outcome.json["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["run"], 1, "{body}");
    assert_eq!(body["signedIn"], false, "{body}");
    assert_eq!(chain.balances().await, paid_balances);

    // Signed in: the handler runs again, and no money moves.
    let signed = siwx(&url, accounts::KEY_1, &[]).await;
    assert_eq!(signed.status, 200, "{signed:?}");
    assert_eq!(signed.body["run"], 2, "{signed:?}");
    assert_eq!(signed.body["signedIn"], true, "{signed:?}");
    // The signed-in buyer's response is theirs: no shared cache keeps it.
    assert_eq!(signed.cache_control.as_deref(), Some("private"));
    assert_eq!(
        signed.body["payer"],
        chain.payer.to_checksum(None),
        "{signed:?}"
    );
    assert_eq!(
        chain.balances().await,
        paid_balances,
        "a sign-in moved money"
    );
    let proof = signed.proof.clone().unwrap();

    // The same proof again: refused (its nonce is spent).
    let replayed = siwx(
        &url,
        accounts::KEY_1,
        &["--mode", "replay", "--proof", &proof],
    )
    .await;
    assert_eq!(replayed.status, 402, "{replayed:?}");
    assert_eq!(replayed.error.as_deref(), Some("invalid_siwx_nonce"));

    // A proof built for another domain (signed by the wallet that paid).
    let foreign = siwx(
        &url,
        accounts::KEY_1,
        &[
            "--mode",
            "foreign",
            "--foreign-origin",
            "http://evil.example:8080",
        ],
    )
    .await;
    assert_eq!(foreign.status, 402, "{foreign:?}");
    assert_eq!(
        foreign.error.as_deref(),
        Some("invalid_siwx_domain_mismatch")
    );

    // The never-paid wallet, again after someone else paid.
    let never = siwx(&url, accounts::KEY_3, &[]).await;
    assert_eq!(
        never.error.as_deref(),
        Some("invalid_siwx_not_paid"),
        "{never:?}"
    );

    // A fresh sign-in still works, and its run count shows that none of
    // the refused proofs ran the handler.
    let again = siwx(&url, accounts::KEY_1, &[]).await;
    assert_eq!(again.status, 200, "{again:?}");
    assert_eq!(again.body["run"], 3, "{again:?}");
    assert_eq!(
        chain.balances().await,
        paid_balances,
        "a sign-in moved money"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axum_pay_once_then_sign_in_with_the_official_helpers() {
    pay_once_then_sign_in(axum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_pay_once_then_sign_in_with_the_official_helpers() {
    pay_once_then_sign_in(actix).await;
}
