//! The two example servers (`examples/paid-api` on axum,
//! `examples/paid-api-actix` on actix-web) serve the same discovery and
//! OpenAPI documents for the same configuration, byte for byte, and both
//! expose the engine's x402 counters at `/metrics`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use paid_api_common::{AppState, Config};
use serde_json::Value;
use x402_core::discovery::{OPENAPI_PATH, WELL_KNOWN_PATH};

/// A running example server; stopped on drop.
struct Server {
    base: String,
    _state: AppState,
    task: tokio::task::JoinHandle<Result<(), paid_api::Error>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Both servers share this public origin, so their documents can be equal.
const PUBLIC_URL: &str = "https://api.example.com";

fn config() -> Config {
    Config {
        port: 0,
        public_url: Some(PUBLIC_URL.into()),
        ..Config::dev()
    }
}

async fn axum() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = config().bound_to(listener.local_addr().unwrap());
    let (app, state) = paid_api::app(config).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(paid_api::serve(listener, app, state.clone()));
    Server {
        base,
        _state: state,
        task,
    }
}

async fn actix() -> Server {
    let server = paid_api_actix::server(config()).await.unwrap();
    let base = format!("http://{}", server.local_addr());
    let state = server.state().clone();
    Server {
        base,
        _state: state,
        task: tokio::spawn(server.run()),
    }
}

/// Status, the headers a document is served with, and the body.
async fn fetch(server: &Server, path: &str) -> (u16, [Option<String>; 3], Vec<u8>) {
    let response = reqwest::get(format!("{}{path}", server.base))
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let headers = [
        header("content-type"),
        header("cache-control"),
        header("access-control-allow-origin"),
    ];
    let status = response.status().as_u16();
    (status, headers, response.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn both_servers_serve_the_same_discovery_and_openapi_documents() {
    let (axum, actix) = (axum().await, actix().await);
    for path in [WELL_KNOWN_PATH, OPENAPI_PATH] {
        let from_axum = fetch(&axum, path).await;
        let from_actix = fetch(&actix, path).await;
        assert_eq!(from_axum.0, 200, "{path}");
        assert_eq!(
            from_axum.1,
            [
                Some("application/json".to_owned()),
                Some("public, max-age=60".to_owned()),
                Some("*".to_owned()),
            ],
            "{path}"
        );
        assert_eq!(from_axum.0, from_actix.0, "{path}: status");
        assert_eq!(from_axum.1, from_actix.1, "{path}: headers");
        let (document, twin): (Value, Value) = (
            serde_json::from_slice(&from_axum.2).unwrap(),
            serde_json::from_slice(&from_actix.2).unwrap(),
        );
        assert_eq!(document, twin, "{path}: documents differ");
        assert_eq!(from_axum.2, from_actix.2, "{path}: bytes differ");
    }

    // The documents describe the four paid routes under the public URL.
    let (_, _, body) = fetch(&actix, WELL_KNOWN_PATH).await;
    let document: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(document["baseUrl"], PUBLIC_URL);
    let resources: Vec<&str> = document["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    assert_eq!(
        resources,
        [
            "https://api.example.com/exact/evm/eip3009",
            "https://api.example.com/upto/evm/permit2",
            "https://api.example.com/session/demo",
            "https://api.example.com/siwx/demo",
        ]
    );
    let (_, _, body) = fetch(&actix, OPENAPI_PATH).await;
    let api: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(api["info"]["title"], "paid-api");
    assert!(api["paths"]["/exact/evm/eip3009"]["get"]["x-payment-info"].is_object());
}

/// The sum of every `x402_challenges_total` sample in a Prometheus text
/// exposition.
fn challenges(exposition: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| line.starts_with("x402_challenges_total"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn both_servers_count_a_402_in_their_metrics() {
    // One process, one recorder: each server's 402 must raise the count
    // its own /metrics shows (other tests may only raise it further).
    for server in [axum().await, actix().await] {
        let (status, headers, before) = fetch(&server, "/metrics").await;
        assert_eq!(status, 200, "{}", server.base);
        assert_eq!(
            headers[0].as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let before = challenges(&String::from_utf8(before).unwrap());

        let challenge = reqwest::get(format!("{}/exact/evm/eip3009", server.base))
            .await
            .unwrap();
        assert_eq!(challenge.status(), 402);

        let (_, _, after) = fetch(&server, "/metrics").await;
        let after = String::from_utf8(after).unwrap();
        assert!(
            after.contains("x402_challenges_total{"),
            "{}: no x402 counter in\n{after}",
            server.base
        );
        assert!(
            challenges(&after) >= before + 1.0,
            "{}: the 402 was not counted (before {before}):\n{after}",
            server.base
        );
    }
}
