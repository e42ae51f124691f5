//! The browser paywall, paid by a person in a real browser: headless
//! Chromium (Debian's `chromium`, driven by `playwright-core` from npm)
//! opens `/exact/evm/eip3009` of both example servers (axum and actix-web)
//! settling on a local anvil chain, with a test wallet (an EIP-1193 provider
//! backed by a test key) injected before the page loads, and goes through
//! the states the page must explain: paid (the JSON and the transaction
//! shown, exactly the price moved on chain), signature refused, wrong
//! network then insufficient balance, no wallet, a replayed payment. The
//! page passes `html-validate`, runs under its strict Content-Security-Policy
//! with no violation, loads nothing from another origin, and signs the typed
//! data the official x402 client signs.
//!
//! Screenshots of every state are written to
//! `target/tmp/browser-paywall/<framework>/` (printed by the test).
//!
//! Needs `tests/js/node_modules` and Debian's `chromium` (`bash
//! scripts/test-all.sh` installs both); fails with that instruction when
//! either is missing. `CHROMIUM` names another Chromium binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use alloy_primitives::{Address, B256, U256};
use paid_api_common::{AssetConfig, Config, FacilitatorConfig};
use serde_json::Value;
use x402_tests::{
    anvil::{self, accounts, Anvil},
    example_chain::{actix, axum, Start, FUNDING},
    require,
};

/// The price of `/exact/evm/eip3009` ($0.001 at 6 decimals).
const PRICE: u64 = 1_000;

/// Debian's `chromium` (or `CHROMIUM`), found on the `PATH`.
///
/// # Panics
///
/// With one line naming the fix when there is none.
fn chromium() -> PathBuf {
    if let Some(path) = std::env::var_os("CHROMIUM").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        if path.is_file() {
            return path;
        }
        panic!(
            "CHROMIUM={} is not a file: run `{}` (it installs Debian's chromium) or unset it",
            path.display(),
            require::SETUP
        );
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium not found on the PATH: run `{}` (it installs Debian's chromium)",
                require::SETUP
            )
        })
}

/// Runs `tests/js/browser/paywall.mjs` against `url`; its JSON report.
async fn drive_browser(url: &str, chromium: &Path, out: &Path) -> Value {
    let child = require::node_async("browser/paywall.mjs")
        .args(["--url", url, "--out"])
        .arg(out)
        .arg("--chromium")
        .arg(chromium)
        .args([
            "--payer-key",
            accounts::KEY_1,
            "--poor-key",
            accounts::KEY_3,
        ])
        .args(["--timeout-ms", "60000"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run node");
    let output = tokio::time::timeout(Duration::from_secs(240), child.wait_with_output())
        .await
        .expect("browser/paywall.mjs did not finish within 240 s")
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser/paywall.mjs failed ({}): {stderr}",
        output.status
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON report from browser/paywall.mjs: {stderr}"))
}

/// The final state of a scenario's `n`-th outcome (0-based).
fn state(scenario: &Value, n: usize) -> (&str, String) {
    let s = &scenario["states"][n];
    let text = format!(
        "{} {}",
        s["title"].as_str().unwrap_or_default(),
        s["detail"].as_str().unwrap_or_default()
    );
    (s["state"].as_str().unwrap_or_default(), text)
}

/// What every scenario must show: the strict policy held, nothing came
/// from elsewhere, no script error, and a screenshot of each state.
fn assert_clean(name: &str, scenario: &Value) {
    assert_eq!(
        scenario["cspViolations"],
        serde_json::json!([]),
        "{name}: {scenario}"
    );
    assert_eq!(
        scenario["foreign"],
        serde_json::json!([]),
        "{name}: {scenario}"
    );
    assert_eq!(
        scenario["consoleErrors"],
        serde_json::json!([]),
        "{name}: {scenario}"
    );
    for (state, path) in scenario["screenshots"].as_object().unwrap() {
        let path = Path::new(path.as_str().unwrap());
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{name}/{state}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{name}/{state} is no PNG");
    }
}

async fn browser_pays(server: Start, framework: &str) {
    // What is missing is named before anything starts.
    require::node_tooling();
    let chromium = chromium();
    let anvil = Anvil::start();
    let provider = anvil.provider(accounts::KEY_0).await;
    let token = anvil::deploy_test_usdc(&provider, "USDC", "2").await;
    let payer = anvil::address_of(accounts::KEY_1);
    let poor = anvil::address_of(accounts::KEY_3);
    let payee = anvil::address_of(accounts::KEY_2);
    anvil::mint(&provider, token, payer, FUNDING).await;
    // So the upto route's page (validated below) has its offer.
    anvil::install_permit2(&provider).await;
    let config = Config {
        port: 0,
        pay_to: payee,
        asset: AssetConfig {
            address: token,
            name: "USDC".into(),
            version: "2".into(),
            decimals: 6,
        },
        facilitator: FacilitatorConfig::Chain {
            rpc_url: anvil.url.clone(),
            private_key: accounts::KEY_0.into(),
        },
        ..Config::dev()
    };
    let (base, server) = server(config).await;
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("browser-paywall")
        .join(framework);
    let _ = std::fs::remove_dir_all(&out);
    eprintln!("browser paywall screenshots: {}", out.display());

    let report = drive_browser(&format!("{base}/exact/evm/eip3009"), &chromium, &out).await;
    server.abort();

    // The page itself.
    assert_eq!(report["status"], 402, "{report}");
    assert_eq!(
        report["validation"]["valid"], true,
        "html-validate: {}",
        report["validation"]["messages"]
    );
    assert_eq!(
        report["validation"]["pages"],
        serde_json::json!(["/exact/evm/eip3009", "/upto/evm/permit2", "/session/demo"])
    );
    let csp = report["csp"].as_str().expect("a Content-Security-Policy");
    assert!(
        csp.starts_with("default-src 'none'; script-src 'nonce-"),
        "{csp}"
    );
    assert!(!csp.contains("unsafe"), "{csp}");
    let offers = report["offers"].to_string();
    assert!(offers.contains("Base Sepolia"), "{offers}");
    assert!(offers.contains("per request"), "{offers}");

    let upto = report["otherPages"]["/upto/evm/permit2"].to_string();
    assert!(upto.contains("up to $0.002"), "{upto}");
    assert!(upto.contains("charged what the request uses"), "{upto}");
    let session = report["otherPages"]["/session/demo"].to_string();
    assert!(
        session.contains("for 100 requests within 1 hour"),
        "{session}"
    );

    let scenarios = &report["scenarios"];
    for (name, scenario) in scenarios.as_object().unwrap() {
        assert_clean(name, scenario);
    }

    // Paid: the JSON body, the transaction, exactly the price moved.
    let paid = &scenarios["paid"];
    assert_eq!(state(paid, 0).0, "ready", "{paid}");
    assert_eq!(state(paid, 1).0, "paid", "{paid}");
    assert_eq!(paid["paymentRequests"], 1, "{paid}");
    let body: Value = serde_json::from_str(paid["body"].as_str().unwrap()).unwrap();
    assert!(body["message"].is_string(), "{body}");
    assert!(
        paid["body"].as_str().unwrap().contains("\n  \""),
        "pretty-printed: {}",
        paid["body"]
    );
    let transaction = paid["transaction"].as_str().unwrap();
    assert!(paid["receipt"].as_str().unwrap().contains(transaction));
    let hash: B256 = transaction.parse().expect("a transaction hash");
    assert!(
        anvil::receipt(&provider, hash).await.status(),
        "the shown transaction succeeded on chain"
    );
    // The typed data is the official client's, and the payload is v2's.
    let same = &paid["matchesOfficial"];
    for check in [
        "domain",
        "types",
        "primaryType",
        "message",
        "authorizationIsMessage",
        "signatureRecovers",
    ] {
        assert_eq!(same[check], true, "{check}: {paid}");
    }
    assert!(
        same["validBeforeSkewSeconds"].as_u64().unwrap() <= 30,
        "{same}"
    );
    assert_eq!(same["nonceBytes"], 32);
    let signed = &paid["typedData"][0];
    assert_eq!(signed["domain"]["name"], "USDC");
    assert_eq!(signed["domain"]["version"], "2");
    assert_eq!(signed["domain"]["chainId"], 84532);
    let verifying: Address = signed["domain"]["verifyingContract"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(verifying, token);
    let payment = &paid["payment"];
    assert_eq!(payment["x402Version"], 2);
    assert_eq!(payment["accepted"]["scheme"], "exact");
    assert_eq!(payment["accepted"]["amount"], PRICE.to_string());
    assert!(payment["resource"]["url"]
        .as_str()
        .unwrap()
        .ends_with("/exact/evm/eip3009"));
    let from: Address = payment["payload"]["authorization"]["from"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let to: Address = payment["payload"]["authorization"]["to"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!((from, to), (payer, payee));

    // Refused: an error a person understands, no payment sent.
    let refused = &scenarios["refused"];
    let (name, text) = state(refused, 1);
    assert_eq!(name, "signature-refused", "{refused}");
    assert!(
        text.contains("declined") && text.contains("nothing was charged"),
        "{text}"
    );
    assert_eq!(refused["paymentRequests"], 0, "{refused}");

    // Wrong network: refused switch, nothing signed or sent; once the wallet
    // is switched, the page pays and the facilitator's reason (balance) shows.
    let wrong = &scenarios["wrongNetwork"];
    let (name, text) = state(wrong, 1);
    assert_eq!(name, "wrong-network", "{wrong}");
    assert!(
        text.contains("Base Sepolia") && text.contains("84532"),
        "{text}"
    );
    assert_eq!(wrong["paymentRequestsBeforeSwitch"], 0, "{wrong}");
    assert_eq!(state(wrong, 2).0, "ready", "{wrong}");
    let (name, text) = state(wrong, 3);
    assert_eq!(name, "insufficient-balance", "{wrong}");
    assert!(
        text.contains("Not enough funds") && text.contains("Nothing was charged"),
        "{text}"
    );
    assert_eq!(wrong["paymentRequests"], 1, "{wrong}");
    let calls = wrong["walletCalls"].to_string();
    assert!(calls.contains("wallet_switchEthereumChain"), "{calls}");

    // No wallet.
    let none = &scenarios["noWallet"];
    assert_eq!(state(none, 0).0, "no-wallet", "{none}");
    let (name, text) = state(none, 1);
    assert_eq!(name, "no-wallet", "{none}");
    assert!(text.contains("No wallet found"), "{text}");
    assert_eq!(none["paymentRequests"], 0, "{none}");

    // Replayed: the seller has seen that payment.
    let replayed = &scenarios["replayed"];
    let (name, text) = state(replayed, 1);
    assert_eq!(name, "replayed", "{replayed}");
    assert!(text.contains("already"), "{text}");

    // On chain: the one payment, exactly the price; nothing else moved.
    assert_eq!(
        (
            anvil::balance_of(&provider, token, payer).await,
            anvil::balance_of(&provider, token, payee).await,
            anvil::balance_of(&provider, token, poor).await,
        ),
        (U256::from(FUNDING - PRICE), U256::from(PRICE), U256::ZERO),
        "the browser payment must move exactly the price, once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_pays_the_axum_example_in_chromium() {
    browser_pays(axum, "axum").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_pays_the_actix_example_in_chromium() {
    browser_pays(actix, "actix").await;
}
