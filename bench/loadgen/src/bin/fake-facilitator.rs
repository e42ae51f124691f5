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
//! `FROM` and `NETWORK` are read from the request body by a substring search
//! (the first `"from":"…"` and `"network":"…"`, with `memchr`'s `memmem`),
//! not a JSON parse, and the answers of the exact path are written from a
//! typed struct, not built as a JSON tree: the stand-in should cost as
//! little as possible, and the same for every server it is measured behind.
//! Binds `HOST`:`PORT` (default 127.0.0.1:0), prints `listening on
//! http://ADDR`, and prints its counts on exit.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    io::Write as _,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, LazyLock,
    },
};

use axum::{
    extract::State,
    http::header::CONTENT_TYPE,
    response::{IntoResponse, Response},
    routing::{get, post},
    Router,
};
use bytes::Bytes;
use memchr::memmem::Finder;
use serde::Serialize;
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

/// A field's opening, `"name":"`, with its searcher built once.
struct Field(LazyLock<Finder<'static>>);

macro_rules! field {
    ($name:literal) => {
        Field(LazyLock::new(|| {
            Finder::new(concat!("\"", $name, "\":\"").as_bytes())
        }))
    };
}

static FROM: Field = field!("from");
static NETWORK: Field = field!("network");
static PAYER: Field = field!("payer");
static CHANNEL_ID: Field = field!("channelId");
static BATCH: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\"batch-settlement\""));

impl Field {
    /// The string value after the first `"name":"` in `body`, if any.
    fn in_body<'a>(&self, body: &'a [u8]) -> &'a str {
        let Some(at) = self.0.find(body) else {
            return "";
        };
        let rest = &body[at + self.0.needle().len()..];
        let end = memchr::memchr(b'"', rest).unwrap_or(0);
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }
}

fn json_bytes(value: &impl Serialize) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_default();
    ([(CONTENT_TYPE, "application/json")], body).into_response()
}

/// Whether `body` is a batch-settlement request.
fn is_batch(body: &[u8]) -> bool {
    BATCH.find(body).is_some()
}

/// `POST /verify`'s answer on the exact path.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Valid<'a> {
    is_valid: bool,
    payer: &'a str,
}

/// `POST /settle`'s answer on the exact path.
#[derive(Serialize)]
struct Settled<'a> {
    success: bool,
    transaction: &'a str,
    network: &'a str,
    payer: &'a str,
}

/// A batch-settlement channel snapshot: deposited, nothing claimed.
fn channel_state(body: &[u8]) -> Value {
    json!({
        "channelId": CHANNEL_ID.in_body(body),
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
            "payer": PAYER.in_body(&body),
            "extra": channel_state(&body),
        }));
    }
    json_bytes(&Valid {
        is_valid: true,
        payer: FROM.in_body(&body),
    })
}

async fn settle(State(fake): State<Arc<Fake>>, body: Bytes) -> impl IntoResponse {
    let n = fake.counts.settle.fetch_add(1, Ordering::Relaxed) + 1;
    let transaction = format!("0x{n:064x}");
    if is_batch(&body) {
        return json_bytes(&json!({
            "success": true,
            "transaction": transaction,
            "network": NETWORK.in_body(&body),
            "payer": PAYER.in_body(&body),
            "amount": x402_loadgen::batch::DEPOSIT.to_string(),
            "extra": { "channelState": channel_state(&body) },
        }));
    }
    json_bytes(&Settled {
        success: true,
        transaction: &transaction,
        network: NETWORK.in_body(&body),
        payer: FROM.in_body(&body),
    })
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
