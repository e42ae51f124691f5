//! The example servers (`examples/paid-api` on axum, `examples/paid-api-actix`
//! on actix-web; one suite, run against each), driven in process on the dev
//! ledger: their routes and challenges, paid calls signed with a local key,
//! prepaid sessions, `POST /close`, and settlement webhooks received by an
//! actix-web receiver through `x402_actix::VerifiedWebhook`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    future::Future,
    pin::Pin,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use alloy_primitives::{keccak256, Address, U256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use base64::{engine::general_purpose::STANDARD, Engine as _};
use paid_api_common::{AppState, Config};
use serde_json::{json, Value};
use x402_core::{
    evm::{eip3009_domain, Eip3009Authorization, ExactEvmPayload},
    money::AtomicAmount,
};

/// The four paid routes of the server contract.
const PAID_ROUTES: [&str; 4] = [
    "/exact/evm/eip3009",
    "/upto/evm/permit2",
    "/session/demo",
    "/siwx/demo",
];

/// A running example server on 127.0.0.1:0; stopped on drop.
struct Server {
    base: String,
    state: AppState,
    task: Option<tokio::task::JoinHandle<Result<(), paid_api::Error>>>,
    client: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        // Dropping a server's future stops its listener (and actix's workers).
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Starts one of the two example servers for a configuration.
type Start = fn(Config) -> Pin<Box<dyn Future<Output = Server> + Send>>;

/// `examples/paid-api` (axum).
fn axum(config: Config) -> Pin<Box<dyn Future<Output = Server> + Send>> {
    Box::pin(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config = config.bound_to(listener.local_addr().unwrap());
        let (router, state) = paid_api::app(config).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(paid_api::serve(listener, router, state.clone()));
        Server {
            base,
            state,
            task: Some(task),
            client: reqwest::Client::new(),
        }
    })
}

/// `examples/paid-api-actix`, from the same configuration and route table.
fn actix(config: Config) -> Pin<Box<dyn Future<Output = Server> + Send>> {
    Box::pin(async move {
        let server = paid_api_actix::server(config).await.unwrap();
        let base = format!("http://{}", server.local_addr());
        let state = server.state().clone();
        Server {
            base,
            state,
            task: Some(tokio::spawn(server.run())),
            client: reqwest::Client::new(),
        }
    })
}

async fn start(framework: Start) -> Server {
    start_with(framework, Config::dev()).await
}

async fn start_with(framework: Start, config: Config) -> Server {
    framework(Config { port: 0, ..config }).await
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
async fn challenge(base: &str, path: &str) -> (Value, Value) {
    let response = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(response.status(), 402, "{path}");
    let v2 = decode_header(&response, "payment-required");
    let v1: Value = response.json().await.unwrap();
    (v2, v1)
}

/// `value` with the server's base URL (it differs between two servers)
/// replaced by a placeholder.
fn without_base(value: &Value, base: &str) -> Value {
    serde_json::from_str(&value.to_string().replace(base, "http://SERVER")).unwrap()
}

/// A v2 challenge with its per-request sign-in-with-x fields (the server's
/// host, the fresh nonce, the time window) replaced by placeholders, once
/// checked present.
fn without_sign_in_challenge(v2: &Value) -> Value {
    let mut v2 = v2.clone();
    if let Some(info) = v2
        .pointer_mut("/extensions/sign-in-with-x/info")
        .and_then(Value::as_object_mut)
    {
        for field in ["domain", "nonce", "issuedAt", "expirationTime"] {
            assert!(info[field].is_string(), "{field}: {info:?}");
            info.insert(field.into(), Value::String(format!("<{field}>")));
        }
    }
    v2
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

async fn health_is_free_json(framework: Start) {
    let server = start(framework).await;
    let response = server.get("/health", &[]).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ok");
    assert!(body["timestamp"].is_string(), "{body}");
}

async fn exact_route_offers_one_thousandth_of_a_dollar_in_both_versions(framework: Start) {
    let server = start(framework).await;
    let (v2, v1) = challenge(&server.base, "/exact/evm/eip3009").await;
    assert_eq!(v2["x402Version"], 2);
    let accepts = v2["accepts"].as_array().unwrap();
    assert_eq!(accepts.len(), 1);
    let offer = &accepts[0];
    assert_eq!(offer["scheme"], "exact");
    assert_eq!(offer["network"], "eip155:84532");
    assert_eq!(offer["amount"], "1000");
    assert_eq!(offer["asset"], "0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    assert_eq!(offer["payTo"], paid_api_actix::DEFAULT_PAYEE);
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

async fn upto_route_offers_its_ceiling_in_v2_only(framework: Start) {
    let server = start(framework).await;
    let (v2, v1) = challenge(&server.base, "/upto/evm/permit2").await;
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

async fn session_route_advertises_a_prepaid_session(framework: Start) {
    let server = start(framework).await;
    let (v2, _) = challenge(&server.base, "/session/demo").await;
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

async fn a_signed_v2_payment_gets_the_content_and_moves_exactly_the_price(framework: Start) {
    let server = start(framework).await;
    let payer = funded(&server, 10_000);
    let payee = server.state.pay_to();
    let (v2, _) = challenge(&server.base, "/exact/evm/eip3009").await;
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

async fn a_signed_v1_payment_gets_an_x_payment_response(framework: Start) {
    let server = start(framework).await;
    let payer = funded(&server, 1_000);
    let (v2, _) = challenge(&server.base, "/exact/evm/eip3009").await;
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

async fn a_session_is_bought_once_and_redeemed_without_payment(framework: Start) {
    let server = start(framework).await;
    let payer = funded(&server, 50_000);
    let (v2, _) = challenge(&server.base, "/session/demo").await;
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

async fn post_close_answers_then_stops_the_server(framework: Start) {
    let mut server = start(framework).await;
    // A kept-alive connection must not hold the shutdown up.
    assert_eq!(server.get("/health", &[]).await.status(), 200);
    let response = server
        .client
        .post(format!("{}/close", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert!(body["message"].is_string());
    let task = server.task.take().unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the server did not stop after POST /close");
    stopped.unwrap().unwrap();
    // And it no longer listens.
    assert!(reqwest::get(format!("{}/health", server.base))
        .await
        .is_err());
}

#[tokio::test]
async fn the_dev_ledger_refuses_mainnets() {
    // Both servers build their engine with `paid_api_common::engine`.
    let config = Config {
        network: "eip155:8453".into(),
        asset: paid_api_common::AssetConfig::default_for("eip155:8453").unwrap(),
        ..Config::dev()
    };
    let Err(error) = paid_api_common::engine(&config).await else {
        panic!("mainnet accepted");
    };
    assert!(error.to_string().contains("mainnet"), "{error}");
}

/// `WEBHOOK_URL` on the actix server, and an actix-web receiver that takes
/// the event through `x402_actix::VerifiedWebhook`.
async fn webhook_url_gets_a_payment_settled_event_verified_by_the_actix_extractor(
    framework: Start,
) {
    use actix_web::{web, App, HttpResponse, HttpServer};
    use std::sync::Mutex;
    use x402_actix::VerifiedWebhook;
    use x402_core::webhook::{WebhookEvent, WebhookSecret, WebhookVerifier};

    type Inbox = web::Data<Mutex<Vec<WebhookEvent>>>;

    async fn receive(VerifiedWebhook(event): VerifiedWebhook, inbox: Inbox) -> HttpResponse {
        inbox.lock().unwrap().push(event);
        HttpResponse::NoContent().finish()
    }

    let secret = WebhookSecret::generate();
    let verifier = web::Data::new(WebhookVerifier::new([secret.clone()]));
    let inbox: Inbox = web::Data::new(Mutex::new(Vec::new()));
    let app_inbox = inbox.clone();
    let receiver = HttpServer::new(move || {
        App::new()
            .app_data(verifier.clone())
            .app_data(app_inbox.clone())
            .route("/hook", web::post().to(receive))
    })
    .workers(1)
    .disable_signals()
    .bind("127.0.0.1:0")
    .unwrap();
    let hook_url = format!("http://{}/hook", receiver.addrs()[0]);
    let receiver = tokio::spawn(receiver.run());

    let server = start_with(
        framework,
        Config {
            webhook: Some((hook_url, secret.to_whsec())),
            ..Config::dev()
        },
    )
    .await;
    let payer = funded(&server, 1_000);
    let (v2, _) = challenge(&server.base, "/exact/evm/eip3009").await;
    let header = v2_payment(&payer, &v2["accepts"][0]);
    let response = server
        .get("/exact/evm/eip3009", &[("PAYMENT-SIGNATURE", &header)])
        .await;
    assert_eq!(response.status(), 200);

    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let event = loop {
        if let Some(first) = inbox.lock().unwrap().first().cloned() {
            break first;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no webhook within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(event.event_type.as_str(), "payment.settled", "{event:?}");
    assert_eq!(event.data.amount, "1000", "{event:?}");
    assert_eq!(
        event.data.payer,
        Some(payer.address().to_checksum(None)),
        "{event:?}"
    );
    assert!(event.id.starts_with("msg_"), "{event:?}");
    receiver.abort();
}

/// One route table, two frameworks: every paid route's v2 challenge and v1
/// body are the same on both servers, byte for byte but the server's address.
#[tokio::test]
async fn the_paid_routes_challenge_exactly_alike_on_both_frameworks() {
    let actix = start(actix).await;
    let axum = start(axum).await;
    for path in PAID_ROUTES {
        let (actix_v2, actix_v1) = challenge(&actix.base, path).await;
        let (axum_v2, axum_v1) = challenge(&axum.base, path).await;
        assert_eq!(
            without_sign_in_challenge(&without_base(&actix_v2, &actix.base)),
            without_sign_in_challenge(&without_base(&axum_v2, &axum.base)),
            "{path}: v2 challenges differ"
        );
        assert_eq!(
            without_base(&actix_v1, &actix.base),
            without_base(&axum_v1, &axum.base),
            "{path}: v1 bodies differ"
        );
    }
}

#[test]
fn config_from_env_reads_the_contract_variables() {
    let vars = [
        ("PORT", "4555"),
        ("PUBLIC_URL", "https://api.example.com"),
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
    assert_eq!(config.public_origin(), "https://api.example.com");
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

/// The axum example's discovery document and OpenAPI document, generated
/// from its route table, validate with real validators (ajv against the
/// committed schema, swagger-parser for OpenAPI 3.1), and its `/metrics`
/// counts what it served.
#[tokio::test]
async fn paid_api_discovery_and_openapi_validate_and_metrics_count() {
    let server = start(axum).await;
    let response = server.get("/.well-known/x402", &[]).await;
    assert_eq!(response.status(), 200);
    let document: Value = response.json().await.unwrap();
    let paths: Vec<&str> = document["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, PAID_ROUTES, "{document}");
    let response = server.get("/.well-known/x402/openapi.json", &[]).await;
    assert_eq!(response.status(), 200);
    let openapi: Value = response.json().await.unwrap();
    assert!(
        openapi["paths"]["/session/demo"]["get"]["x-payment-info"]["sessions"].is_array(),
        "{openapi}"
    );

    let dir = std::env::temp_dir().join(format!("x402-paid-api-discovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("d.json"), document.to_string()).unwrap();
    std::fs::write(dir.join("o.json"), openapi.to_string()).unwrap();
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../x402-core/tests/data/discovery.schema.json");
    let out = x402_tests::require::node("validate-discovery.mjs")
        .arg(schema)
        .arg(dir.join("d.json"))
        .arg(dir.join("o.json"))
        .output()
        .expect("node must be installed");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "validation failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // One 402 served, then /metrics says so.
    assert_eq!(server.get("/exact/evm/eip3009", &[]).await.status(), 402);
    let metrics = server.get("/metrics", &[]).await.text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("x402_challenges_total{") && l.contains("/exact/evm/eip3009")),
        "{metrics}"
    );
}

/// `PUBLIC_URL` is what the challenges name (and, by default, the server's
/// own address), never a client's `Host`.
async fn public_url_names_the_resources_whatever_the_host(framework: Start) {
    let hostile = [
        ("host", "evil.example"),
        ("x-forwarded-host", "evil.example"),
    ];
    let server = start(framework).await;
    let response = server.get("/exact/evm/eip3009", &hostile).await;
    assert_eq!(response.status(), 402);
    let v2 = decode_header(&response, "payment-required");
    assert_eq!(
        v2["resource"]["url"],
        format!("{}/exact/evm/eip3009", server.base)
    );

    let config = Config {
        public_url: Some("https://api.example.com".into()),
        ..Config::dev()
    };
    let server = start_with(framework, config).await;
    let response = server.get("/exact/evm/eip3009", &hostile).await;
    let v2 = decode_header(&response, "payment-required");
    assert_eq!(
        v2["resource"]["url"],
        "https://api.example.com/exact/evm/eip3009"
    );
    let v1: Value = response.json().await.unwrap();
    assert_eq!(
        v1["accepts"][0]["resource"],
        "https://api.example.com/exact/evm/eip3009"
    );
}

/// The example-server suite, against one framework.
macro_rules! example_server_suite {
    ($framework:ident) => {
        mod $framework {
            #[tokio::test]
            async fn health_is_free_json() {
                super::health_is_free_json(super::$framework).await;
            }

            #[tokio::test]
            async fn exact_route_offers_one_thousandth_of_a_dollar_in_both_versions() {
                super::exact_route_offers_one_thousandth_of_a_dollar_in_both_versions(
                    super::$framework,
                )
                .await;
            }

            #[tokio::test]
            async fn upto_route_offers_its_ceiling_in_v2_only() {
                super::upto_route_offers_its_ceiling_in_v2_only(super::$framework).await;
            }

            #[tokio::test]
            async fn session_route_advertises_a_prepaid_session() {
                super::session_route_advertises_a_prepaid_session(super::$framework).await;
            }

            #[tokio::test]
            async fn a_signed_v2_payment_gets_the_content_and_moves_exactly_the_price() {
                super::a_signed_v2_payment_gets_the_content_and_moves_exactly_the_price(
                    super::$framework,
                )
                .await;
            }

            #[tokio::test]
            async fn a_signed_v1_payment_gets_an_x_payment_response() {
                super::a_signed_v1_payment_gets_an_x_payment_response(super::$framework).await;
            }

            #[tokio::test]
            async fn a_session_is_bought_once_and_redeemed_without_payment() {
                super::a_session_is_bought_once_and_redeemed_without_payment(super::$framework)
                    .await;
            }

            #[tokio::test]
            async fn public_url_names_the_resources_whatever_the_host() {
                super::public_url_names_the_resources_whatever_the_host(super::$framework).await;
            }

            #[tokio::test]
            async fn post_close_answers_then_stops_the_server() {
                super::post_close_answers_then_stops_the_server(super::$framework).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn webhook_url_gets_a_payment_settled_event_verified_by_the_actix_extractor() {
                super::webhook_url_gets_a_payment_settled_event_verified_by_the_actix_extractor(
                    super::$framework,
                )
                .await;
            }
        }
    };
}

example_server_suite!(axum);
example_server_suite!(actix);
