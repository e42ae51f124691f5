//! A facilitator stand-in: a real HTTP server whose answers are switched at
//! run time, recording every `/verify` and `/settle` request body.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{
    body::Bytes,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Extension, Json, Router,
};
use hyper_util::{rt::TokioIo, service::TowerToHyperService};
use serde_json::{json, Value};
use tokio::{
    net::{TcpListener, TcpSocket},
    sync::Notify,
};
use x402_core::facilitator::HttpFacilitator;

use crate::{EventLog, PAYER, TX_HASH};

/// The deadline of the [`HttpFacilitator`] built by [`StandIn::facilitator`].
pub const CLIENT_TIMEOUT: Duration = Duration::from_millis(600);
/// How long the `Slow` modes sleep: well past [`CLIENT_TIMEOUT`].
pub const SLOW_DELAY: Duration = Duration::from_secs(3);

/// What `/verify` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyMode {
    /// 200 `{"isValid":true,"payer":PAYER}`.
    Valid,
    /// 200 `{"isValid":false,"invalidReason":<reason>,"payer":PAYER}`.
    Invalid(String),
    /// 500 `{"error":"boom"}`.
    Error500,
    /// 500 `{"isValid":true,"payer":PAYER}`: an error status, whatever the
    /// body says.
    ValidUnder500,
    /// 200 with a body that is not JSON.
    Malformed,
    /// Sleeps [`SLOW_DELAY`] before answering valid.
    Slow,
    /// Closes the connection without answering (transport failure).
    Hangup,
}

/// What `/settle` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleMode {
    /// 200 `{"success":true,"transaction":TX_HASH,"network":<echo>,"payer":PAYER}`.
    Success,
    /// 200 `{"success":false,"errorReason":<reason>,"transaction":"","network":<echo>}`.
    Refuse(String),
    /// 500 `{"error":"boom"}`.
    Error500,
    /// 500 `{"success":true,...}`: an error status, whatever the body says.
    SuccessUnder500,
    /// Closes the connection without answering.
    Hangup,
    /// Sleeps [`SLOW_DELAY`] before answering success.
    Slow,
}

/// What `/supported` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupportedMode {
    /// 200 [`supported_json`].
    Normal,
    /// 500 `{"error":"boom"}`.
    Error500,
    /// Closes the connection without answering (transport failure).
    Hangup,
    /// 200 [`supported_json`] without the kinds of this scheme.
    Without(String),
}

#[derive(Debug)]
struct Inner {
    verify_mode: Mutex<VerifyMode>,
    settle_mode: Mutex<SettleMode>,
    supported_mode: Mutex<SupportedMode>,
    verify_bodies: Mutex<Vec<Value>>,
    settle_bodies: Mutex<Vec<Value>>,
    verify_calls: AtomicUsize,
    settle_calls: AtomicUsize,
    supported_calls: AtomicUsize,
    events: EventLog,
}

/// The running stand-in. Dropping it does not stop the server (the runtime
/// of the test does).
#[derive(Debug, Clone)]
pub struct StandIn {
    addr: SocketAddr,
    inner: Arc<Inner>,
}

type Kill = Arc<Notify>;

impl StandIn {
    /// Starts a stand-in answering `Valid` / `Success`, logging into `events`.
    pub async fn start(events: EventLog) -> Self {
        let inner = Arc::new(Inner {
            verify_mode: Mutex::new(VerifyMode::Valid),
            settle_mode: Mutex::new(SettleMode::Success),
            supported_mode: Mutex::new(SupportedMode::Normal),
            verify_bodies: Mutex::default(),
            settle_bodies: Mutex::default(),
            verify_calls: AtomicUsize::new(0),
            settle_calls: AtomicUsize::new(0),
            supported_calls: AtomicUsize::new(0),
            events,
        });
        let router = Router::new()
            .route("/verify", post(verify))
            .route("/settle", post(settle))
            .route("/supported", get(supported))
            .with_state(inner.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let kill: Kill = Arc::new(Notify::new());
                let service =
                    TowerToHyperService::new(router.clone().layer(Extension(kill.clone())));
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    // `Hangup` modes drop the connection mid-request.
                    tokio::select! {
                        _ = conn => {}
                        () = kill.notified() => {}
                    }
                });
            }
        });
        Self { addr, inner }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An [`HttpFacilitator`] for this stand-in, with a [`CLIENT_TIMEOUT`]
    /// deadline and no proxy.
    pub fn facilitator(&self) -> HttpFacilitator {
        facilitator_at(&self.url())
    }

    /// An [`HttpFacilitator`] for this stand-in with its own deadline (a
    /// generous one where many requests share two cores).
    pub fn facilitator_with_timeout(&self, timeout: Duration) -> HttpFacilitator {
        HttpFacilitator::builder(self.url())
            .timeout(timeout)
            .client(
                reqwest::Client::builder()
                    .no_proxy()
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap(),
            )
            .build()
            .unwrap()
    }

    pub fn set_verify(&self, mode: VerifyMode) {
        *self.inner.verify_mode.lock().unwrap() = mode;
    }

    pub fn set_settle(&self, mode: SettleMode) {
        *self.inner.settle_mode.lock().unwrap() = mode;
    }

    pub fn set_supported(&self, mode: SupportedMode) {
        *self.inner.supported_mode.lock().unwrap() = mode;
    }

    pub fn verify_calls(&self) -> usize {
        self.inner.verify_calls.load(Ordering::SeqCst)
    }

    pub fn settle_calls(&self) -> usize {
        self.inner.settle_calls.load(Ordering::SeqCst)
    }

    pub fn supported_calls(&self) -> usize {
        self.inner.supported_calls.load(Ordering::SeqCst)
    }

    /// Every `/verify` request body, in order.
    pub fn verify_requests(&self) -> Vec<Value> {
        self.inner.verify_bodies.lock().unwrap().clone()
    }

    /// Every `/settle` request body, in order.
    pub fn settle_requests(&self) -> Vec<Value> {
        self.inner.settle_bodies.lock().unwrap().clone()
    }

    /// Asserts the `/verify` and `/settle` call counts.
    #[track_caller]
    pub fn assert_calls(&self, verify: usize, settle: usize) {
        assert_eq!(
            (self.verify_calls(), self.settle_calls()),
            (verify, settle),
            "(/verify, /settle) call counts"
        );
    }
}

/// An [`HttpFacilitator`] for any URL, with a [`CLIENT_TIMEOUT`] deadline and
/// no proxy (the environment's proxy settings must not capture 127.0.0.1).
pub fn facilitator_at(url: &str) -> HttpFacilitator {
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    HttpFacilitator::builder(url)
        .timeout(CLIENT_TIMEOUT)
        .client(client)
        .build()
        .unwrap()
}

/// A loopback port where nothing listens, kept so while this value lives.
///
/// The port is held by a socket that is bound and never listens: a
/// connection to it is refused, and no other listener can take the port
/// meanwhile (the socket does not set `SO_REUSEADDR`, so a listener's own
/// `SO_REUSEADDR` does not get past it). A port bound and then released
/// would not do: tests run in parallel, and the kernel may hand the freed
/// port to another test's server, which would then answer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let closed = x402_tests::standin::ClosedPort::new();
/// // Refused, and no listener can take the port while `closed` lives.
/// assert!(tokio::net::TcpStream::connect(closed.addr()).await.is_err());
/// assert!(tokio::net::TcpListener::bind(closed.addr()).await.is_err());
/// # }
/// ```
#[derive(Debug)]
pub struct ClosedPort {
    _socket: TcpSocket,
    addr: SocketAddr,
}

impl ClosedPort {
    /// Takes a free loopback port and keeps it closed.
    pub fn new() -> Self {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let addr = socket.local_addr().unwrap();
        Self {
            _socket: socket,
            addr,
        }
    }

    /// The port's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://` and the port's address.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}

fn boom() -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Json(json!({"error": "boom"})),
    )
        .into_response()
}

async fn hang(kill: &Kill) -> Response {
    kill.notify_one();
    std::future::pending::<Infallible>().await;
    unreachable!()
}

fn record(bodies: &Mutex<Vec<Value>>, body: &Bytes) -> Value {
    let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    bodies.lock().unwrap().push(value.clone());
    value
}

async fn verify(
    State(s): State<Arc<Inner>>,
    Extension(kill): Extension<Kill>,
    body: Bytes,
) -> Response {
    s.verify_calls.fetch_add(1, Ordering::SeqCst);
    s.events.push("verify");
    record(&s.verify_bodies, &body);
    let mode = s.verify_mode.lock().unwrap().clone();
    match mode {
        VerifyMode::Valid => Json(json!({"isValid": true, "payer": PAYER})).into_response(),
        VerifyMode::Invalid(reason) => {
            Json(json!({"isValid": false, "invalidReason": reason, "payer": PAYER})).into_response()
        }
        VerifyMode::Error500 => boom(),
        VerifyMode::ValidUnder500 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"isValid": true, "payer": PAYER})),
        )
            .into_response(),
        VerifyMode::Malformed => (
            StatusCode::OK,
            [("content-type", "application/json")],
            "{\"isValid\": tru <html>stack trace: internal detail",
        )
            .into_response(),
        VerifyMode::Slow => {
            tokio::time::sleep(SLOW_DELAY).await;
            Json(json!({"isValid": true, "payer": PAYER})).into_response()
        }
        VerifyMode::Hangup => hang(&kill).await,
    }
}

async fn settle(
    State(s): State<Arc<Inner>>,
    Extension(kill): Extension<Kill>,
    body: Bytes,
) -> Response {
    s.settle_calls.fetch_add(1, Ordering::SeqCst);
    s.events.push("settle");
    let request = record(&s.settle_bodies, &body);
    let network = request
        .pointer("/paymentRequirements/network")
        .cloned()
        .unwrap_or(Value::Null);
    let mode = s.settle_mode.lock().unwrap().clone();
    match mode {
        SettleMode::Success => Json(json!({
            "success": true, "transaction": TX_HASH, "network": network, "payer": PAYER
        }))
        .into_response(),
        SettleMode::Refuse(reason) => Json(json!({
            "success": false, "errorReason": reason, "transaction": "", "network": network, "payer": PAYER
        }))
        .into_response(),
        SettleMode::Error500 => boom(),
        SettleMode::SuccessUnder500 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"success": true, "transaction": TX_HASH, "network": network})),
        )
            .into_response(),
        SettleMode::Hangup => hang(&kill).await,
        SettleMode::Slow => {
            tokio::time::sleep(SLOW_DELAY).await;
            Json(json!({"success": true, "transaction": TX_HASH, "network": network})).into_response()
        }
    }
}

/// The facilitator address the stand-in advertises for `upto`.
pub const UPTO_FACILITATOR: &str = "0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002";

/// The `/supported` answer: exact v1 + v2 on Base Sepolia, exact SVM devnet
/// with a `feePayer`.
pub fn supported_json() -> Value {
    json!({
        "kinds": [
            {"x402Version": 1, "scheme": "exact", "network": "base-sepolia"},
            {"x402Version": 2, "scheme": "exact", "network": "eip155:84532"},
            {"x402Version": 2, "scheme": "upto", "network": "eip155:84532",
             "extra": {"facilitatorAddress": UPTO_FACILITATOR}},
            {"x402Version": 2, "scheme": "exact", "network": "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1",
             "extra": {"feePayer": "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"}}
        ],
        "extensions": [],
        "signers": {"eip155:*": [PAYER], "solana:*": ["2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"]}
    })
}

async fn supported(State(s): State<Arc<Inner>>, Extension(kill): Extension<Kill>) -> Response {
    s.supported_calls.fetch_add(1, Ordering::SeqCst);
    let mode = s.supported_mode.lock().unwrap().clone();
    match mode {
        SupportedMode::Normal => Json(supported_json()).into_response(),
        SupportedMode::Error500 => boom(),
        SupportedMode::Hangup => hang(&kill).await,
        SupportedMode::Without(scheme) => {
            let mut json = supported_json();
            if let Some(kinds) = json["kinds"].as_array_mut() {
                kinds.retain(|kind| kind["scheme"] != scheme.as_str());
            }
            Json(json).into_response()
        }
    }
}
