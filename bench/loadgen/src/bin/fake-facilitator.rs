//! The HTTP facilitator of the harness's facilitator paths: a real server on
//! loopback that accepts every payment, so that what is measured is the
//! seller's side of the two calls, not a chain.
//!
//! - `POST /verify`: `{"isValid":true,"payer":FROM}`;
//! - `POST /settle`: `{"success":true,"transaction":"0x…","network":NETWORK,"payer":FROM}`,
//!   a fresh transaction hash per call;
//! - `GET /supported`: `exact` and `upto`, versions 1 and 2, and
//!   `batch-settlement` (version 2), on every network
//!   in `FAKE_NETWORKS` (comma-separated CAIP-2 ids; by default Base Sepolia,
//!   Base and anvil's 31337), plus the v1 names of those networks;
//! - `GET /counts`: `{"verify":N,"settle":N,"supported":N}`, the calls so far;
//! - `batch-settlement` payloads (a deposit: the bench's batch path opens
//!   its channels with one each): valid, settled, and the channel snapshot
//!   the seller mirrors (`extra`, `extra.channelState`) with a balance of
//!   [`x402_loadgen::batch::DEPOSIT`].
//!
//! `FROM` and `NETWORK` are read from the request body by a substring scan
//! (the first `"from":"…"` and `"network":"…"`), not a JSON parse: the
//! stand-in should cost as little as possible, and the same for every server
//! it is measured behind. Binds `HOST`:`PORT` (default 127.0.0.1:0), prints
//! `listening on http://ADDR`, and prints its counts on exit.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    io::Write as _,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use axum::{
    extract::State,
    http::header::CONTENT_TYPE,
    response::IntoResponse,
    routing::{get, post},
    Router,
};
use bytes::Bytes;
use serde_json::{json, Value};
use x402_core::network;
use x402_loadgen::{env_or, LISTENING};

#[derive(Default)]
struct Counts {
    verify: AtomicU64,
    settle: AtomicU64,
    supported: AtomicU64,
}

impl Counts {
    fn json(&self) -> Value {
        json!({
            "verify": self.verify.load(Ordering::Relaxed),
            "settle": self.settle.load(Ordering::Relaxed),
            "supported": self.supported.load(Ordering::Relaxed),
        })
    }
}

struct Fake {
    counts: Counts,
    supported: Bytes,
}

/// The string value after the first `"field":"` in `body`, if any.
fn field<'a>(body: &'a [u8], field: &str) -> &'a str {
    let needle = format!("\"{field}\":\"");
    let Some(at) = body
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
    else {
        return "";
    };
    let rest = &body[at + needle.len()..];
    let end = rest.iter().position(|&b| b == b'"').unwrap_or(0);
    std::str::from_utf8(&rest[..end]).unwrap_or("")
}

fn json_bytes(value: &Value) -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], value.to_string())
}

/// Whether `body` is a batch-settlement request.
fn is_batch(body: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"\"batch-settlement\"";
    body.windows(NEEDLE.len()).any(|w| w == NEEDLE)
}

/// A batch-settlement channel snapshot: deposited, nothing claimed.
fn channel_state(body: &[u8]) -> Value {
    json!({
        "channelId": field(body, "channelId"),
        "balance": x402_loadgen::batch::DEPOSIT.to_string(),
        "totalClaimed": "0",
        "withdrawRequestedAt": 0,
        "refundNonce": "0",
    })
}

async fn verify(State(fake): State<Arc<Fake>>, body: Bytes) -> impl IntoResponse {
    fake.counts.verify.fetch_add(1, Ordering::Relaxed);
    if is_batch(&body) {
        return json_bytes(&json!({
            "isValid": true,
            "payer": field(&body, "payer"),
            "extra": channel_state(&body),
        }));
    }
    json_bytes(&json!({ "isValid": true, "payer": field(&body, "from") }))
}

async fn settle(State(fake): State<Arc<Fake>>, body: Bytes) -> impl IntoResponse {
    let n = fake.counts.settle.fetch_add(1, Ordering::Relaxed) + 1;
    if is_batch(&body) {
        return json_bytes(&json!({
            "success": true,
            "transaction": format!("0x{n:064x}"),
            "network": field(&body, "network"),
            "payer": field(&body, "payer"),
            "amount": x402_loadgen::batch::DEPOSIT.to_string(),
            "extra": { "channelState": channel_state(&body) },
        }));
    }
    json_bytes(&json!({
        "success": true,
        "transaction": format!("0x{n:064x}"),
        "network": field(&body, "network"),
        "payer": field(&body, "from"),
    }))
}

async fn supported(State(fake): State<Arc<Fake>>) -> impl IntoResponse {
    fake.counts.supported.fetch_add(1, Ordering::Relaxed);
    ([(CONTENT_TYPE, "application/json")], fake.supported.clone())
}

async fn counts(State(fake): State<Arc<Fake>>) -> impl IntoResponse {
    json_bytes(&fake.counts.json())
}

fn supported_body(networks: &str) -> Bytes {
    let mut kinds = Vec::new();
    for caip2 in networks.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        for scheme in ["exact", "upto"] {
            kinds.push(json!({ "x402Version": 2, "scheme": scheme, "network": caip2 }));
            if let Some(v1) = network::v1_name(caip2) {
                kinds.push(json!({ "x402Version": 1, "scheme": scheme, "network": v1 }));
            }
        }
        kinds.push(json!({ "x402Version": 2, "scheme": "batch-settlement", "network": caip2 }));
    }
    Bytes::from(json!({ "kinds": kinds, "extensions": [], "signers": {} }).to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let host = std::env::var("HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port: u16 = env_or("PORT", 0);
    let networks = std::env::var("FAKE_NETWORKS")
        .unwrap_or_else(|_| "eip155:84532,eip155:8453,eip155:31337".into());
    let fake = Arc::new(Fake {
        counts: Counts::default(),
        supported: supported_body(&networks),
    });
    let router = Router::new()
        .route("/verify", post(verify))
        .route("/settle", post(settle))
        .route("/supported", get(supported))
        .route("/counts", get(counts))
        .with_state(Arc::clone(&fake));
    let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
    {
        let mut out = std::io::stdout();
        writeln!(out, "{LISTENING}{}", listener.local_addr()?)?;
        out.flush()?;
    }
    axum::serve(listener, router)
        .with_graceful_shutdown(x402_loadgen::stop_signal())
        .await?;
    eprintln!("fake-facilitator: {}", fake.counts.json());
    Ok(())
}
