//! Hardening of the example servers (`examples/paid-api` on axum,
//! `examples/paid-api-actix` on actix-web):
//!
//! - with every secret of the configuration set (the facilitator key, tokens
//!   in the userinfo, path and query of `FACILITATOR_URL`, `EVM_RPC_URL` and
//!   `WEBHOOK_URL`, `WEBHOOK_SECRET`, a Redis password), a run through
//!   start-up, a 402, a paid call, a failing facilitator and webhook delivery
//!   attempts writes none of them, nor their obvious encodings, to any log
//!   line or `Debug` output;
//! - `POST /close` stops a server only when it is bound to loopback.
//!
//! The servers run in process, under a `tracing` subscriber that records
//! every event and span field of every crate at TRACE level. (The example
//! binaries install no subscriber, so their own output would show nothing;
//! in process, this test sees what a user's `RUST_LOG=trace` would. Records
//! of crates logging through the `log` facade instead of `tracing` are not
//! seen.) Each scenario has its own secrets, and checks only those, so that
//! scenarios can run in parallel under the one global subscriber.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    collections::HashMap,
    fmt,
    future::Future,
    net::{Ipv4Addr, SocketAddr},
    pin::Pin,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        Arc, Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use alloy_primitives::keccak256;
use axum::{http::StatusCode, response::IntoResponse, Json, Router};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use paid_api_common::{AppState, Config};
use serde_json::{json, Value};
use x402_core::webhook::WebhookSecret;
use x402_tests::{EventLog, StandIn, VerifyMode};

// ---------------------------------------------------------------------------
// Log capture

/// Every event and span of the process, as text: `LEVEL target: field=value
/// ...`.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next_span: Arc<AtomicU64>,
}

/// The process-wide capture, installed as the global subscriber on first use.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing::subscriber::set_global_default(capture.clone())
            .expect("no other global subscriber in this test binary");
        capture
    })
}

impl Capture {
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn contains(&self, needle: &str) -> bool {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(needle))
    }

    fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
    }
}

/// Writes every field as `name=value ` (values by `Debug`, as formatters
/// that print fields do).
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        // Unquoted too: a formatter may print strings as they are.
        self.0.push_str(&format!("{}={value} ", field.name()));
    }

    fn record_error(
        &mut self,
        field: &tracing::field::Field,
        value: &(dyn std::error::Error + 'static),
    ) {
        // The error and its sources, as `%error` and error reporters show it.
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(e) = source {
            text.push_str(": ");
            text.push_str(&e.to_string());
            source = e.source();
        }
        self.0
            .push_str(&format!("{}={text} ({value:?}) ", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let meta = span.metadata();
        let mut fields = Fields(format!(
            "span {} {} {}: ",
            meta.level(),
            meta.target(),
            meta.name()
        ));
        span.record(&mut fields);
        self.push(fields.0);
        tracing::span::Id::from_u64(self.next_span.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut fields = Fields("span record: ".to_owned());
        values.record(&mut fields);
        self.push(fields.0);
    }

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let meta = event.metadata();
        let mut fields = Fields(format!("{} {}: ", meta.level(), meta.target()));
        event.record(&mut fields);
        self.push(fields.0);
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

// ---------------------------------------------------------------------------
// Secrets

/// One scenario's secrets: unique to it (`tag`), so that a leak is pinned on
/// the scenario that caused it.
struct Secrets {
    /// The facilitator key, 64 hex digits without `0x`.
    key_hex: String,
    fac_user: String,
    fac_pass: String,
    fac_query: String,
    rpc_pass: String,
    rpc_path: String,
    rpc_query: String,
    hook_pass: String,
    hook_query: String,
    redis_pass: String,
    webhook: WebhookSecret,
    webhook_key: Vec<u8>,
}

impl Secrets {
    fn new(tag: &str) -> Self {
        let token = |what: &str| {
            let digest = keccak256(format!("{tag}/{what}"));
            format!("{what}{}", &hex(&digest[..6]))
        };
        let webhook_key = keccak256(format!("{tag}/webhook")).to_vec();
        Self {
            key_hex: hex(keccak256(format!("{tag}/key")).as_slice()),
            fac_user: token("facuser"),
            fac_pass: token("FacPass"),
            fac_query: token("FacKey"),
            rpc_pass: token("RpcPass"),
            rpc_path: token("RpcPath"),
            rpc_query: token("RpcKey"),
            hook_pass: token("HookPass"),
            hook_query: token("HookToken"),
            redis_pass: token("RedisPass"),
            webhook: WebhookSecret::from_bytes(webhook_key.clone()).unwrap(),
            webhook_key,
        }
    }

    fn private_key(&self) -> String {
        format!("0x{}", self.key_hex)
    }

    fn facilitator_url(&self, addr: SocketAddr) -> String {
        format!(
            "http://{}:{}@{addr}/?apiKey={}",
            self.fac_user, self.fac_pass, self.fac_query
        )
    }

    fn rpc_url(&self, addr: SocketAddr) -> String {
        format!(
            "http://rpcuser:{}@{addr}/v2/{}?key={}",
            self.rpc_pass, self.rpc_path, self.rpc_query
        )
    }

    fn webhook_url(&self, addr: SocketAddr) -> String {
        format!(
            "http://hookuser:{}@{addr}/hook?token={}",
            self.hook_pass, self.hook_query
        )
    }

    fn redis_url(&self, addr: SocketAddr) -> String {
        format!("redis://:{}@{addr}/0", self.redis_pass)
    }

    /// Every string that must not be shown, in the forms a leak would take:
    /// the key with and without `0x`, in either case (the search ignores
    /// case) and in base64; each token; the `user:password` pairs as Basic
    /// credentials; the webhook secret as `whsec_...`, its base64 and hex.
    fn forbidden(&self) -> Vec<String> {
        let whsec = self.webhook.to_whsec();
        let whsec_b64 = whsec.trim_start_matches("whsec_").to_owned();
        let key_bytes: Vec<u8> = (0..self.key_hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&self.key_hex[i..i + 2], 16).unwrap())
            .collect();
        vec![
            self.key_hex.clone(),
            STANDARD.encode(&key_bytes),
            self.fac_pass.clone(),
            self.fac_query.clone(),
            STANDARD.encode(format!("{}:{}", self.fac_user, self.fac_pass)),
            self.rpc_pass.clone(),
            self.rpc_path.clone(),
            self.rpc_query.clone(),
            STANDARD.encode(format!("rpcuser:{}", self.rpc_pass)),
            self.hook_pass.clone(),
            self.hook_query.clone(),
            STANDARD.encode(format!("hookuser:{}", self.hook_pass)),
            self.redis_pass.clone(),
            whsec,
            whsec_b64,
            hex(&self.webhook_key),
        ]
    }

    /// Panics, naming the secret and the line, if any secret is in `texts`.
    #[track_caller]
    fn assert_absent<'a>(&self, what: &str, texts: impl IntoIterator<Item = &'a String>) {
        let forbidden: Vec<String> = self.forbidden().iter().map(|s| s.to_lowercase()).collect();
        let mut checked = 0;
        for text in texts {
            checked += 1;
            let lower = text.to_lowercase();
            for secret in &forbidden {
                assert!(
                    !lower.contains(secret.as_str()),
                    "{what}: secret {secret:?} shown in: {text}"
                );
            }
        }
        assert!(checked > 0, "{what}: nothing to check");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A configuration read from `vars` as `Config::from_env` reads the
/// environment, on port 0.
fn config_from(vars: &[(&str, String)]) -> Config {
    let vars: HashMap<&str, String> = vars.iter().cloned().collect();
    Config::from_lookup(|name| vars.get(name).cloned()).unwrap()
}

/// The `Debug` renderings a log line could contain.
fn debug_of(config: &Config) -> Vec<String> {
    vec![
        format!("{config:?}"),
        format!("{config:#?}"),
        format!("{:?}", config.facilitator),
    ]
}

// ---------------------------------------------------------------------------
// Servers

/// A running example server; stopped on drop if the test did not stop it.
struct Server {
    addr: SocketAddr,
    state: AppState,
    debug: String,
    task: Option<tokio::task::JoinHandle<Result<(), paid_api::Error>>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

type Start = fn(Config) -> Pin<Box<dyn Future<Output = Server> + Send>>;

fn axum(config: Config) -> Pin<Box<dyn Future<Output = Server> + Send>> {
    Box::pin(async move {
        let listener = tokio::net::TcpListener::bind(config.addr()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (app, state) = paid_api::app(config.bound_to(addr)).await.unwrap();
        let task = tokio::spawn(paid_api::serve(listener, app, state.clone()));
        Server {
            addr,
            debug: format!("{state:?}"),
            state,
            task: Some(task),
        }
    })
}

fn actix(config: Config) -> Pin<Box<dyn Future<Output = Server> + Send>> {
    Box::pin(async move {
        let server = paid_api_actix::server(config).await.unwrap();
        let addr = server.local_addr();
        let state = server.state().clone();
        Server {
            addr,
            debug: format!("{server:?}"),
            state,
            task: Some(tokio::spawn(server.run())),
        }
    })
}

impl Server {
    /// `http://127.0.0.1:<port>`, whatever the address bound.
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.addr.port())
    }

    /// Stops the server through its state and waits for it to end.
    async fn stop(mut self) {
        self.state.shutdown();
        self.join().await;
    }

    /// Waits for the server task to end (after a shutdown).
    async fn join(&mut self) {
        let task = self.task.take().unwrap();
        tokio::time::timeout(Duration::from_secs(15), task)
            .await
            .expect("the server did not stop")
            .unwrap()
            .unwrap();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// A webhook endpoint that answers 500 to everything, counting requests.
async fn failing_webhook_endpoint() -> (SocketAddr, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = Router::new().fallback(move || {
        counted.fetch_add(1, Ordering::SeqCst);
        async { StatusCode::INTERNAL_SERVER_ERROR }
    });
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, hits)
}

/// A JSON-RPC node stand-in for Base Sepolia: answers `eth_chainId` and
/// `eth_getCode` (no code anywhere), and an error to everything else.
async fn rpc_stand_in() -> SocketAddr {
    async fn answer(Json(request): Json<Value>) -> impl IntoResponse {
        let id = request["id"].clone();
        let reply = match request["method"].as_str() {
            Some("eth_chainId") => json!({"jsonrpc": "2.0", "id": id, "result": "0x14a34"}),
            Some("eth_getCode") => json!({"jsonrpc": "2.0", "id": id, "result": "0x"}),
            _ => json!({"jsonrpc": "2.0", "id": id,
                        "error": {"code": -32000, "message": "not served by this stand-in"}}),
        };
        Json(reply)
    }
    let app = Router::new().fallback(axum::routing::post(answer));
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// An address nothing listens on.
fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    listener.local_addr().unwrap()
}

/// The first v2 requirement of `path`'s 402.
async fn requirement(client: &reqwest::Client, base: &str, path: &str) -> Value {
    let response = client.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(response.status(), 402, "{path}");
    let header = response.headers()["payment-required"].as_bytes().to_vec();
    let challenge: Value = serde_json::from_slice(&STANDARD.decode(header).unwrap()).unwrap();
    challenge["accepts"][0].clone()
}

async fn pay(client: &reqwest::Client, base: &str, path: &str, accepted: &Value) -> u16 {
    client
        .get(format!("{base}{path}"))
        .header(
            "PAYMENT-SIGNATURE",
            x402_tests::payment::v2_header(accepted),
        )
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// Scenarios

/// A hosted facilitator (`FACILITATOR_URL` with credentials and an API key),
/// webhooks to an endpoint that fails, the facilitator key set too: start,
/// 402, paid call, failing facilitator, webhook attempts, `POST /close`.
async fn hosted_facilitator_run_shows_no_secret(framework: Start, tag: &str) {
    let logs = capture();
    let secrets = Secrets::new(tag);
    let standin = StandIn::start(EventLog::default()).await;
    let (hook_addr, hook_hits) = failing_webhook_endpoint().await;
    let standin_addr: SocketAddr = standin.url().trim_start_matches("http://").parse().unwrap();
    let config = config_from(&[
        ("HOST", "127.0.0.1".into()),
        ("PORT", "0".into()),
        ("FACILITATOR_URL", secrets.facilitator_url(standin_addr)),
        // Read only without FACILITATOR_URL; set to show they are ignored
        // quietly.
        ("EVM_RPC_URL", secrets.rpc_url(closed_port())),
        ("FACILITATOR_EVM_PRIVATE_KEY", secrets.private_key()),
        ("WEBHOOK_URL", secrets.webhook_url(hook_addr)),
        ("WEBHOOK_SECRET", secrets.webhook.to_whsec()),
    ]);
    let mut shown = debug_of(&config);
    assert!(
        shown[0].contains(&format!("http://{standin_addr}")),
        "{}",
        shown[0]
    );
    assert!(
        shown[0].contains(&format!("http://{hook_addr}")),
        "{}",
        shown[0]
    );

    // Start-up.
    let mut server = framework(config).await;
    shown.push(server.debug.clone());
    let base = server.base();
    let client = client();
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);

    // A 402, then a paid call through the facilitator.
    let path = "/exact/evm/eip3009";
    let accepted = requirement(&client, &base, path).await;
    assert_eq!(pay(&client, &base, path, &accepted).await, 200);
    assert_eq!(standin.settle_calls(), 1);

    // The settlement's webhook is attempted (and fails: a retry is logged).
    wait_for("a failed webhook attempt", || {
        hook_hits.load(Ordering::SeqCst) > 0 && logs.contains("x402 webhooks: attempt failed")
    })
    .await;

    // A failing facilitator: an error status, then a dropped connection.
    standin.set_verify(VerifyMode::Error500);
    assert_eq!(pay(&client, &base, path, &accepted).await, 502);
    standin.set_verify(VerifyMode::Hangup);
    assert_eq!(pay(&client, &base, path, &accepted).await, 502);
    assert!(logs.contains("x402: facilitator /verify failed"));

    // POST /close (bound to loopback): answers, then the server stops.
    let close = client.post(format!("{base}/close")).send().await.unwrap();
    assert_eq!(close.status(), 200);
    server.join().await;

    secrets.assert_absent("Debug output", &shown);
    secrets.assert_absent("log lines", &logs.lines());
}

#[tokio::test]
async fn axum_hosted_facilitator_run_shows_no_secret() {
    hosted_facilitator_run_shows_no_secret(axum, "axum-hosted").await;
}

#[tokio::test]
async fn actix_hosted_facilitator_run_shows_no_secret() {
    hosted_facilitator_run_shows_no_secret(actix, "actix-hosted").await;
}

/// Start-up failures whose errors (printed by the binaries' `main` with
/// `Debug`) could carry a URL: Redis unreachable, the chain node unreachable,
/// a plain-http facilitator refused.
#[tokio::test]
async fn start_up_errors_show_no_secret() {
    let logs = capture();
    let secrets = Secrets::new("start-up");
    let chain_secrets = Secrets::new("start-up-chain");
    let mut shown = Vec::new();
    let mut chain_shown = Vec::new();

    let redis = config_from(&[
        ("PORT", "0".into()),
        // Nothing listens: the Redis client retries for some seconds first.
        ("REDIS_URL", secrets.redis_url(closed_port())),
        ("WEBHOOK_URL", secrets.webhook_url(closed_port())),
        ("WEBHOOK_SECRET", secrets.webhook.to_whsec()),
    ]);
    shown.extend(debug_of(&redis));
    let error = paid_api_common::engine(&redis).await.unwrap_err();
    assert!(matches!(error, paid_api::Error::Redis(_)), "{error:?}");
    shown.extend([error.to_string(), format!("{error:?}")]);

    let chain = config_from(&[
        ("PORT", "0".into()),
        ("EVM_RPC_URL", chain_secrets.rpc_url(closed_port())),
        ("FACILITATOR_EVM_PRIVATE_KEY", chain_secrets.private_key()),
    ]);
    chain_shown.extend(debug_of(&chain));
    let error = paid_api_common::engine(&chain).await.unwrap_err();
    assert!(
        matches!(error, paid_api::Error::Facilitator(_)),
        "{error:?}"
    );
    chain_shown.extend([error.to_string(), format!("{error:?}")]);

    // Plain http:// to a remote facilitator is refused, with the fix named.
    let remote = Config {
        facilitator: paid_api_common::FacilitatorConfig::Http {
            url: format!(
                "http://{}:{}@facilitator.example/?apiKey={}",
                secrets.fac_user, secrets.fac_pass, secrets.fac_query
            ),
        },
        ..Config::dev()
    };
    shown.extend(debug_of(&remote));
    let error = paid_api_common::engine(&remote).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("FACILITATOR_URL") && text.contains("https://"),
        "{text}"
    );
    shown.extend([text, format!("{error:?}")]);

    secrets.assert_absent("errors and Debug output", &shown);
    chain_secrets.assert_absent("the chain error and Debug output", &chain_shown);
    secrets.assert_absent("log lines", &logs.lines());
    chain_secrets.assert_absent("log lines", &logs.lines());
}

/// The in-process facilitator on a chain (`EVM_RPC_URL` with credentials, a
/// key in the path and the query, `FACILITATOR_EVM_PRIVATE_KEY`): start, 402,
/// a paid call the node cannot serve.
///
/// alloy's HTTP transport (`alloy-transport-http`) records the full node URL
/// in a DEBUG span on every request; `x402_core::local::ChainLedger` talks to
/// http(s) nodes over its own transport, which names the node by scheme and
/// host only.
#[tokio::test]
async fn chain_rpc_url_stays_out_of_logs() {
    let logs = capture();
    let secrets = Secrets::new("chain");
    let node = rpc_stand_in().await;
    let config = config_from(&[
        ("PORT", "0".into()),
        ("EVM_RPC_URL", secrets.rpc_url(node)),
        ("FACILITATOR_EVM_PRIVATE_KEY", secrets.private_key()),
    ]);
    let mut shown = debug_of(&config);
    let server = axum(config).await;
    shown.push(server.debug.clone());
    let base = server.base();
    let client = client();
    let path = "/exact/evm/eip3009";
    let accepted = requirement(&client, &base, path).await;
    let status = pay(&client, &base, path, &accepted).await;
    assert_ne!(status, 200, "the stand-in node serves no balance");
    server.stop().await;
    secrets.assert_absent("Debug output", &shown);
    secrets.assert_absent("log lines", &logs.lines());
}

/// `POST /close` on a server bound to every interface: 404 with an empty
/// body, like a path that does not exist, and the server keeps serving.
async fn close_is_refused_off_loopback(framework: Start) {
    let config = Config {
        host: Ipv4Addr::UNSPECIFIED.into(),
        port: 0,
        ..Config::dev()
    };
    let server = framework(config).await;
    assert!(!server.state.close_enabled());
    let base = server.base();
    let client = client();

    let missing = client
        .post(format!("{base}/no-such-route"))
        .send()
        .await
        .unwrap();
    let close = client
        .post(format!("{base}/close"))
        // The Host header plays no part.
        .header("host", "127.0.0.1")
        .send()
        .await
        .unwrap();
    assert_eq!(close.status(), 404);
    assert_eq!(close.status(), missing.status());
    assert_eq!(close.bytes().await.unwrap(), missing.bytes().await.unwrap());

    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(
        health.status(),
        200,
        "the server stopped after a refused /close"
    );
    server.stop().await;
}

#[tokio::test]
async fn axum_close_is_refused_off_loopback() {
    close_is_refused_off_loopback(axum).await;
}

#[tokio::test]
async fn actix_close_is_refused_off_loopback() {
    close_is_refused_off_loopback(actix).await;
}
