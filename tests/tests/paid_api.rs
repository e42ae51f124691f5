//! The example server (`examples/paid-api`), driven in process on the dev
//! ledger: its routes, its challenges, and paid calls signed with a local key.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{SystemTime, UNIX_EPOCH};

use alloy_primitives::{keccak256, Address, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::{engine::general_purpose::STANDARD, Engine as _};
use paid_api::{AppState, Config};
use serde_json::{json, Value};
use x402_core::{
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    money::AtomicAmount,
};

/// A running paid-api on 127.0.0.1:0.
struct Server {
    base: String,
    state: AppState,
    task: tokio::task::JoinHandle<Result<(), paid_api::Error>>,
    client: reqwest::Client,
}

async fn start() -> Server {
    let config = Config {
        port: 0,
        ..Config::dev()
    };
    let (router, state) = paid_api::app(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(paid_api::serve(listener, router, state.clone()));
    Server {
        base,
        state,
        task,
        client: reqwest::Client::new(),
    }
}

impl Server {
    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> reqwest::Response {
        let mut request = self.client.get(format!("{}{path}", self.base));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }
}

fn decode_header(response: &reqwest::Response, name: &str) -> Value {
    let raw = response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"));
    serde_json::from_slice(&STANDARD.decode(raw.as_bytes()).unwrap()).unwrap()
}

/// The v2 challenge (`PAYMENT-REQUIRED`) and the v1 body of a 402.
async fn challenge(server: &Server, path: &str) -> (Value, Value) {
    let response = server.get(path, &[]).await;
    assert_eq!(response.status(), 402, "{path}");
    let v2 = decode_header(&response, "payment-required");
    let v1: Value = response.json().await.unwrap();
    (v2, v1)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Signs an EIP-3009 authorization for the v2 requirement `accepted`.
fn sign(key: &PrivateKeySigner, accepted: &Value) -> Value {
    let token: Address = accepted["asset"].as_str().unwrap().parse().unwrap();
    let authorization = Eip3009Authorization {
        from: key.address(),
        to: accepted["payTo"].as_str().unwrap().parse().unwrap(),
        value: AtomicAmount::parse_decimal(accepted["amount"].as_str().unwrap()).unwrap(),
        valid_after: U256::from(now() - 600),
        valid_before: U256::from(now() + 300),
        nonce: keccak256(PrivateKeySigner::random().address()),
    };
    let domain = eip3009_domain(
        accepted["extra"]["name"].as_str().unwrap(),
        accepted["extra"]["version"].as_str().unwrap(),
        84532,
        token,
    );
    let signature = key
        .sign_hash_sync(&authorization.signing_hash(&domain))
        .unwrap();
    serde_json::to_value(ExactEvmPayload {
        signature: signature.as_bytes().to_vec().into(),
        authorization,
    })
    .unwrap()
}

/// A `PAYMENT-SIGNATURE` header value paying `accepted`.
fn v2_payment(key: &PrivateKeySigner, accepted: &Value) -> String {
    let payment = json!({
        "x402Version": 2,
        "accepted": accepted,
        "payload": sign(key, accepted),
    });
    STANDARD.encode(serde_json::to_vec(&payment).unwrap())
}

/// A funded payer on the server's dev ledger.
fn funded(server: &Server, amount: u64) -> PrivateKeySigner {
    let key = PrivateKeySigner::random();
    server.state.fund(key.address(), amount).unwrap();
    key
}

fn balance(server: &Server, who: Address) -> U256 {
    server.state.dev_balance(who).unwrap()
}

#[tokio::test]
async fn health_is_free_json() {
    let server = start().await;
    let response = server.get("/health", &[]).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ok");
}

#[tokio::test]
async fn exact_route_offers_one_thousandth_of_a_dollar_in_both_versions() {
    let server = start().await;
    let (v2, v1) = challenge(&server, "/exact/evm/eip3009").await;
    assert_eq!(v2["x402Version"], 2);
    let accepts = v2["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1);
    let offer = &accepts[0];
    assert_eq!(offer["scheme"], "exact");
    assert_eq!(offer["network"], "eip155:84532");
    assert_eq!(offer["amount"], "1000");
    assert_eq!(offer["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    assert_eq!(offer["payTo"], paid_api::DEFAULT_PAYEE);
    assert_eq!(offer["extra"]["name"], "USDC");
    assert_eq!(offer["extra"]["version"], "2");

    assert_eq!(v1["x402Version"], 1);
    let row = &v1["accepts"][0];
    assert_eq!(row["scheme"], "exact");
    assert_eq!(row["network"], "base-sepolia");
    assert_eq!(row["maxAmountRequired"], "1000");
    assert!(row["resource"]
        .as_str()
        .unwrap()
        .ends_with("/exact/evm/eip3009"));
}

#[tokio::test]
async fn upto_route_offers_its_ceiling_in_v2_only() {
    let server = start().await;
    let (v2, v1) = challenge(&server, "/upto/evm/permit2").await;
    let offer = &v2["accepts"][0];
    assert_eq!(offer["scheme"], "upto");
    assert_eq!(offer["network"], "eip155:84532");
    assert_eq!(offer["amount"], "2000");
    assert_eq!(offer["extra"]["assetTransferMethod"], "permit2");
    let v1_rows = v1["accepts"].as_array().unwrap();
    assert!(
        v1_rows.iter().all(|r| r["scheme"] != "upto"),
        "upto leaked into the v1 body: {v1}"
    );
}

#[tokio::test]
async fn session_route_advertises_a_prepaid_session() {
    let server = start().await;
    let (v2, _) = challenge(&server, "/session/demo").await;
    assert_eq!(v2["accepts"][0]["amount"], "1000");
    let offers = v2["extensions"]["session"]["info"]["offers"]
        .as_array()
        .unwrap_or_else(|| panic!("no session offer: {v2}"));
    assert_eq!(offers.len(), 1);
    assert_eq!(offers[0]["calls"], 100);
    assert_eq!(offers[0]["ttlSeconds"], 3600);
    assert_eq!(offers[0]["scope"], "demo");
    assert_eq!(offers[0]["accepts"][0]["amount"], "50000");
}

#[tokio::test]
async fn a_signed_v2_payment_gets_the_content_and_moves_exactly_the_price() {
    let server = start().await;
    let payer = funded(&server, 10_000);
    let payee = server.state.pay_to();
    let (v2, _) = challenge(&server, "/exact/evm/eip3009").await;
    let header = v2_payment(&payer, &v2["accepts"][0]);

    let response = server
        .get("/exact/evm/eip3009", &[("PAYMENT-SIGNATURE", &header)])
        .await;
    assert_eq!(response.status(), 200);
    let receipt = decode_header(&response, "payment-response");
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(receipt["payer"], payer.address().to_checksum(None));
    assert_eq!(receipt["transaction"].as_str().unwrap().len(), 66);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["message"].is_string() && body["timestamp"].is_string(),
        "{body}"
    );

    assert_eq!(balance(&server, payer.address()), U256::from(9_000));
    assert_eq!(balance(&server, payee), U256::from(1_000));

    // The same payment again is refused and moves nothing.
    let again = server
        .get("/exact/evm/eip3009", &[("PAYMENT-SIGNATURE", &header)])
        .await;
    assert_eq!(again.status(), 402);
    assert_eq!(balance(&server, payer.address()), U256::from(9_000));
    assert_eq!(balance(&server, payee), U256::from(1_000));
}

#[tokio::test]
async fn a_signed_v1_payment_gets_an_x_payment_response() {
    let server = start().await;
    let payer = funded(&server, 1_000);
    let (v2, _) = challenge(&server, "/exact/evm/eip3009").await;
    let payment = json!({
        "x402Version": 1,
        "scheme": "exact",
        "network": "base-sepolia",
        "payload": sign(&payer, &v2["accepts"][0]),
    });
    let header = STANDARD.encode(serde_json::to_vec(&payment).unwrap());
    let response = server
        .get("/exact/evm/eip3009", &[("X-PAYMENT", &header)])
        .await;
    assert_eq!(response.status(), 200);
    let receipt = decode_header(&response, "x-payment-response");
    assert_eq!(receipt["success"], true, "{receipt}");
    assert_eq!(receipt["network"], "base-sepolia");
    assert_eq!(balance(&server, payer.address()), U256::ZERO);
    assert_eq!(balance(&server, server.state.pay_to()), U256::from(1_000));
}

#[tokio::test]
async fn a_session_is_bought_once_and_redeemed_without_payment() {
    let server = start().await;
    let payer = funded(&server, 50_000);
    let (v2, _) = challenge(&server, "/session/demo").await;
    let accepted = &v2["extensions"]["session"]["info"]["offers"][0]["accepts"][0];
    let response = server
        .get(
            "/session/demo",
            &[("PAYMENT-SIGNATURE", &v2_payment(&payer, accepted))],
        )
        .await;
    assert_eq!(response.status(), 200);
    let token = response.headers()["x-payment-session"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(response.headers()["x-payment-session-remaining"], "99");
    assert_eq!(balance(&server, server.state.pay_to()), U256::from(50_000));

    let call = server
        .get("/session/demo", &[("X-PAYMENT-SESSION", &token)])
        .await;
    assert_eq!(call.status(), 200);
    assert_eq!(call.headers()["x-payment-session-remaining"], "98");
    let body: Value = call.json().await.unwrap();
    assert_eq!(body["sessionCallsRemaining"], 98);
    // No further money moved.
    assert_eq!(balance(&server, payer.address()), U256::ZERO);
    assert_eq!(balance(&server, server.state.pay_to()), U256::from(50_000));
}

#[tokio::test]
async fn post_close_answers_then_stops_the_server() {
    let server = start().await;
    let response = server
        .client
        .post(format!("{}/close", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["message"].is_string());
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), server.task)
        .await
        .expect("the server did not stop after POST /close");
    stopped.unwrap().unwrap();
}

#[tokio::test]
async fn the_dev_ledger_refuses_mainnets() {
    let config = Config {
        network: "eip155:8453".into(),
        asset: paid_api::AssetConfig::default_for("eip155:8453").unwrap(),
        ..Config::dev()
    };
    let error = paid_api::app(config).await.expect_err("mainnet accepted");
    assert!(error.to_string().contains("mainnet"), "{error}");
}

#[test]
fn config_from_env_reads_the_contract_variables() {
    let vars = [
        ("PORT", "4555"),
        ("EVM_NETWORK", "eip155:84532"),
        (
            "EVM_PAYEE_ADDRESS",
            "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
        ),
        ("EVM_ASSET", "0x5FbDB2315678afecb367f032d93F642f64180aa3"),
        ("EVM_ASSET_NAME", "USDC"),
        ("EVM_ASSET_VERSION", "2"),
        ("EVM_ASSET_DECIMALS", "6"),
        ("EVM_RPC_URL", "http://127.0.0.1:8545"),
        ("FACILITATOR_EVM_PRIVATE_KEY", "0x01"),
    ];
    let config = Config::from_lookup(|k| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| (*v).to_owned())
    })
    .unwrap();
    assert_eq!(config.port, 4555);
    assert_eq!(
        config.pay_to,
        "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"
            .parse::<Address>()
            .unwrap()
    );
    assert_eq!(config.asset.name, "USDC");
    assert!(matches!(
        config.facilitator,
        paid_api::FacilitatorConfig::Chain { .. }
    ));
    // The key never reaches a log.
    assert!(!format!("{config:?}").contains("0x01"));
}

#[tokio::test]
async fn webhook_url_gets_a_signed_payment_settled_event() {
    use axum::{body::Bytes, http::HeaderMap, routing::post, Router};
    use std::sync::{Arc, Mutex};
    use x402_core::webhook::{WebhookSecret, WebhookVerifier};

    // A receiver that records what it gets.
    let received: Arc<Mutex<Vec<(HeaderMap, Bytes)>>> = Arc::default();
    let sink = received.clone();
    let receiver = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap, body: Bytes| {
            let sink = sink.clone();
            async move { sink.lock().unwrap().push((headers, body)) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, receiver).await });

    let secret = WebhookSecret::generate().to_whsec();
    let config = Config {
        webhook: Some((hook_url, secret.clone())),
        ..Config::dev()
    };
    let (router, state) = paid_api::app(config).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(paid_api::serve(listener, router, state.clone()));
    let server = Server {
        base,
        state,
        task: tokio::spawn(async { Ok(()) }),
        client: reqwest::Client::new(),
    };

    let payer = funded(&server, 1_000);
    let (v2, _) = challenge(&server, "/exact/evm/eip3009").await;
    let header = v2_payment(&payer, &v2["accepts"][0]);
    let response = server
        .get("/exact/evm/eip3009", &[("PAYMENT-SIGNATURE", &header)])
        .await;
    assert_eq!(response.status(), 200);

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (headers, body) = loop {
        if let Some(first) = received.lock().unwrap().first().cloned() {
            break first;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no webhook within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let verifier = WebhookVerifier::from_whsec([secret.as_str()]).unwrap();
    verifier.verify(&headers, &body).unwrap();
    let event: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["type"], "payment.settled", "{event}");
    assert_eq!(event["data"]["amount"], "1000", "{event}");
    assert_eq!(
        event["data"]["payer"],
        payer.address().to_checksum(None),
        "{event}"
    );
}
