//! The server under load: `bench-server baseline` or `bench-server paid-api`.
//!
//! - `paid-api`: exactly the example app (`paid_api::app(Config::from_env())`,
//!   so `REDIS_URL` etc. apply as documented there), on the dev ledger, with
//!   `BENCH_PAYERS` payers (default 64) derived from `BENCH_SEED` funded
//!   before it listens.
//! - `baseline`: the same routes' handler body (the JSON `paid-api` answers a
//!   paid call with, its run counted as paid-api counts it) on a bare axum
//!   router: no paywall layer at all.
//! - `challenge-floor`: paid-api's 402 for `GET /exact/evm/eip3009` (status,
//!   headers and body, asked of the app in-process once, for this server's
//!   address), answered by a bare handler as a pre-built response: what any
//!   402 of those bytes costs to serve, with no engine behind it.
//! - `session-floor`: `GET /session/demo` with an `X-PAYMENT-SESSION` token
//!   answers paid-api's session body (`paid_api_common::session_call_body`:
//!   its run counted, the calls left) after one session redemption in Redis
//!   (the token parsed and hashed, then `RedisSessionStore::redeem`, at
//!   `REDIS_URL`), with the remaining count in `X-PAYMENT-SESSION-REMAINING`:
//!   what every redeemed call needs, with no engine behind it. It opens
//!   `BENCH_SESSIONS` sessions (default 1 000) of `BENCH_SESSION_CALLS`
//!   calls (default 99, what a bought session has left) at start and lists
//!   their tokens at `GET /__bench/sessions`, for `loadgen --tokens-from`.
//!
//! - `paid-http-floor`: `GET /exact/evm/eip3009` with a `PAYMENT-SIGNATURE`
//!   makes the two calls any seller makes through an HTTP facilitator
//!   (`POST /verify`, then `POST /settle`, at `FACILITATOR_URL`) with the
//!   same client as the example (`HttpFacilitator`, no engine), and answers
//!   the paid handler's body with the settlement in `PAYMENT-RESPONSE`: the
//!   header decoded, the two calls, the receipt encoded, and nothing else (no
//!   matching, no claim, no checks). Without a payment it answers the
//!   example's 402, so that the load generator can read the offer.
//!
//! - `paid-http-engine`: the engine alone: `GET /exact/evm/eip3009` (the
//!   example's offer without its payment-identifier declaration, verified
//!   and settled at `FACILITATOR_URL`) behind `x402_axum::PaywallLayer`
//!   in front of the bare handler, with the engine's defaults and nothing
//!   of the example around it (no metrics recorder, no discovery, no other
//!   routes); `BENCH_LOCAL_PRECHECK=0` as below.
//!
//! - `session-engine`: the engine alone on the session path: the example's
//!   engine (`paid_api_common::engine`, its route table and stores, with
//!   `REDIS_URL`) behind `x402_axum::PaywallLayer` in front of one bare
//!   handler for `GET /session/demo` (the payment read with
//!   `x402_axum::Payment`, the session body answered), with nothing else of
//!   the example around it: no metrics recorder, no discovery, no state,
//!   no other routes. It opens and lists its sessions as `session-floor`
//!   does, so that the two redeem the same sessions the same way; between
//!   the floor and `paid-api`, it shows what the engine costs and what the
//!   example around it does.
//! - `session-layer`: the least a paywall layer inside axum's router does
//!   for a session call, as a measure of what any such layer costs: a
//!   hand-written tower layer (`Router::layer`, as the example's paywall)
//!   that reads and hashes the token, makes the floor's one Redis
//!   redemption, puts the calls left in the request's extensions for the
//!   handler (`axum::Extension`) and in the response's
//!   `X-PAYMENT-SESSION-REMAINING`. No route table, no hooks, no body held
//!   until the call is kept. It opens and lists its sessions as
//!   `session-floor` does.
//!
//! `paid-api` with `FACILITATOR_URL` set runs the example against that
//! facilitator (and funds no dev-ledger payers: there is no dev ledger).
//! `BENCH_LOCAL_PRECHECK=0` turns the engine's local pre-check off
//! (`EngineBuilder::local_precheck(false)`), to measure its cost, and
//! `BENCH_KNOWN_PAYERS=0` keeps it recovering every payment's signer
//! (`EngineBuilder::precheck_known_payers(false)`), as for a server whose
//! every payer is new. `BENCH_NOOP_METRICS=1` installs the `metrics`
//! crate's no-op recorder before the example installs its Prometheus one
//! (which then stays out, and `/metrics` empty), to measure what the
//! metrics every paid request records cost.
//!
//! Every mode also serves `GET /__bench/allocations`: the heap allocations
//! (and bytes) the process has made so far, counted by a wrapping global
//! allocator, which the load generator reads before and after its timed
//! phase to report allocations per request.
//!
//! Binds `HOST`:`PORT` (default 127.0.0.1:0) and prints
//! `listening on http://ADDR` once bound. Stops on SIGTERM or ctrl-c.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{
    io::Write as _,
    net::SocketAddr,
    sync::{Arc, LazyLock},
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    body::Body,
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use bytes::Bytes;
use http::{header::HOST, HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use paid_api_common::{PaidRoute, Runs};
use serde_json::Value;
use tower::ServiceExt;
use x402_core::session::{
    Redemption, RedisSessionStore, SessionRecord, SessionStore, SessionToken, TokenHash,
    X_PAYMENT_SESSION, X_PAYMENT_SESSION_REMAINING,
};
use x402_loadgen::{
    counting::Counting, env_or, payer, stop_signal, ALLOCATIONS_PATH, LISTENING, SESSIONS_PATH,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// `GET /__bench/allocations`: `{"allocations": N, "bytes": N}` so far.
async fn allocations() -> Json<Value> {
    let counts = ALLOCATOR.counts();
    Json(serde_json::json!({
        "allocations": counts.allocations,
        "bytes": counts.bytes,
    }))
}

/// Serves `router` (plus the allocation counter) until SIGTERM or ctrl-c.
async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
) -> Result<(), Box<dyn std::error::Error>> {
    let router = router.route(ALLOCATIONS_PATH, get(allocations));
    announce(listener.local_addr()?)?;
    axum::serve(listener, router)
        .with_graceful_shutdown(stop_signal())
        .await?;
    Ok(())
}

/// How many paid calls this server answered, by route: paid-api's handlers
/// count their runs into their bodies, and so do the bare ones here.
static RUNS: LazyLock<Runs> = LazyLock::new(Runs::default);

/// The body paid-api's `exact` handler answers (`paid_api_common::exact_body`
/// without its log line), its run counted.
async fn paid_body() -> Json<Value> {
    Json(paid_api_common::exact_call_body(
        RUNS.count(PaidRoute::Exact),
    ))
}

async fn health() -> Json<Value> {
    Json(paid_api_common::health_body())
}

/// Whether the engine's local pre-check is on: unless `BENCH_LOCAL_PRECHECK=0`.
fn local_precheck() -> bool {
    std::env::var("BENCH_LOCAL_PRECHECK").as_deref() != Ok("0")
}

/// Whether the pre-check leaves known payers' signatures to the
/// facilitator: unless `BENCH_KNOWN_PAYERS=0`.
fn known_payers() -> bool {
    std::env::var("BENCH_KNOWN_PAYERS").as_deref() != Ok("0")
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A response of `status`, `headers` and `body`, as given.
fn canned(status: StatusCode, headers: HeaderMap, body: Bytes) -> Response {
    let mut response = Body::from(body).into_response();
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// paid-api's 402 for an unpaid `GET path`, asked of the app in-process for
/// a server at `addr`: its status, headers and body.
async fn example_challenge(
    addr: SocketAddr,
    path: &str,
) -> Result<(StatusCode, HeaderMap, Bytes), Box<dyn std::error::Error>> {
    let config = paid_api::Config::from_env()?.bound_to(addr);
    let (router, _state) = paid_api::app(config).await?;
    let request = Request::get(path)
        .header(HOST, addr.to_string())
        .body(Body::empty())?;
    let (parts, body) = router.oneshot(request).await?.into_parts();
    let body = body.collect().await?.to_bytes();
    if parts.status != StatusCode::PAYMENT_REQUIRED {
        return Err(format!("paid-api answered {} to an unpaid GET", parts.status).into());
    }
    Ok((parts.status, parts.headers, body))
}

fn announce(addr: SocketAddr) -> std::io::Result<()> {
    let mut out = std::io::stdout();
    writeln!(out, "{LISTENING}{addr}")?;
    out.flush()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let port: u16 = env_or("PORT", 0);
    let listener = tokio::net::TcpListener::bind((host.as_str(), port)).await?;
    let addr = listener.local_addr()?;
    match mode.as_str() {
        "baseline" => {
            let router = Router::new()
                .route("/exact/evm/eip3009", get(paid_body))
                .route("/session/demo", get(paid_body))
                .route("/health", get(health));
            serve(listener, router).await?;
        }
        "challenge-floor" => {
            let path = "/exact/evm/eip3009";
            let (status, headers, body) = example_challenge(addr, path).await?;
            let router = Router::new().route(
                path,
                get(move || {
                    let response = canned(status, headers.clone(), body.clone());
                    async move { response }
                }),
            );
            serve(listener, router).await?;
        }
        "session-floor" => {
            let url = std::env::var("REDIS_URL").map_err(|_| "session-floor needs REDIS_URL")?;
            let store = Arc::new(RedisSessionStore::connect(&url).await?);
            let (listed, calls) = open_sessions(&store).await?;
            let router = Router::new()
                .route(
                    "/session/demo",
                    get(move |headers: HeaderMap| {
                        // The request is let go before the store call, as
                        // a bare handler's.
                        let token = sent_token(&headers);
                        drop(headers);
                        let store = Arc::clone(&store);
                        async move {
                            let Some(token) = token else {
                                return StatusCode::PAYMENT_REQUIRED.into_response();
                            };
                            match store.redeem(&token, "demo", unix_now()).await {
                                Ok(Redemption::Redeemed { remaining }) => (
                                    [(X_PAYMENT_SESSION_REMAINING, remaining.to_string())],
                                    // paid-api's session body, run counted.
                                    Json(paid_api_common::session_call_body(
                                        Some(remaining),
                                        RUNS.count(PaidRoute::Session),
                                    )),
                                )
                                    .into_response(),
                                _ => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                            }
                        }
                    }),
                )
                .route(SESSIONS_PATH, sessions_route(listed, calls));
            serve(listener, router).await?;
        }
        "session-engine" => {
            let url = std::env::var("REDIS_URL").map_err(|_| "session-engine needs REDIS_URL")?;
            let config = paid_api::Config::from_env()?.bound_to(addr);
            let (engine, _state) = paid_api_common::engine(&config).await?;
            let (listed, calls) = open_sessions(&RedisSessionStore::connect(&url).await?).await?;
            let router = Router::new()
                .route(
                    "/session/demo",
                    get(
                        |x402_axum::Payment(payment): x402_axum::Payment| async move {
                            Json(paid_api_common::session_body(
                                &payment,
                                RUNS.count(PaidRoute::Session),
                            ))
                        },
                    ),
                )
                .layer(x402_axum::PaywallLayer::new(engine))
                .route(SESSIONS_PATH, sessions_route(listed, calls));
            serve(listener, router).await?;
        }
        "session-layer" => {
            let url = std::env::var("REDIS_URL").map_err(|_| "session-layer needs REDIS_URL")?;
            let store = Arc::new(RedisSessionStore::connect(&url).await?);
            let (listed, calls) = open_sessions(&store).await?;
            let router = Router::new()
                .route("/session/demo", get(layer_session_body))
                .layer(SessionLayer(store))
                .route(SESSIONS_PATH, sessions_route(listed, calls));
            serve(listener, router).await?;
        }
        "paid-http-floor" => {
            let url = std::env::var("FACILITATOR_URL")
                .map_err(|_| "paid-http-floor needs FACILITATOR_URL")?;
            let challenge = example_challenge(addr, "/exact/evm/eip3009").await?;
            let floor = Arc::new(HttpFloor::new(&url, challenge)?);
            let router = Router::new().route(
                "/exact/evm/eip3009",
                get(move |headers: HeaderMap| {
                    let floor = Arc::clone(&floor);
                    async move { floor.serve(&headers).await }
                }),
            );
            serve(listener, router).await?;
        }
        "paid-http-engine" => {
            let url = std::env::var("FACILITATOR_URL")
                .map_err(|_| "paid-http-engine needs FACILITATOR_URL")?;
            let config = paid_api::Config::from_env()?.bound_to(addr);
            let offer = x402_core::route::Offer::exact(
                &config.network,
                "$0.001",
                config.pay_to.to_checksum(None),
            )
            .asset(config.asset.asset());
            let engine =
                x402_core::Engine::builder(x402_core::facilitator::HttpFacilitator::new(&url)?)
                    .local_precheck(local_precheck())
                    .precheck_known_payers(known_payers())
                    .public_origin(config.public_origin())
                    .route(
                        x402_core::route::Route::get("/exact/evm/eip3009")
                            .offer(offer)
                            .description("A paid endpoint: $0.001 per call")
                            .mime_type("application/json"),
                    )
                    .build()?;
            let router = Router::new()
                .route("/exact/evm/eip3009", get(paid_body))
                .layer(x402_axum::PaywallLayer::new(engine));
            serve(listener, router).await?;
        }
        "paid-api" => {
            if std::env::var_os("BENCH_NOOP_METRICS").is_some() {
                // The first recorder installed stays: the example's is refused.
                let _ = metrics::set_global_recorder(metrics::NoopRecorder);
            }
            // paid-api reads PORT/HOST too; the listener is already bound.
            let mut config = paid_api::Config::from_env()?.bound_to(addr);
            // BENCH_LOCAL_PRECHECK=0: the example without the engine's own
            // signature check, to measure what the check costs.
            config.local_precheck = local_precheck();
            // BENCH_KNOWN_PAYERS=0: every payment's signer recovered, as for
            // a server whose every payer is new.
            config.precheck_known_payers = known_payers();
            let (router, engine, state) = paid_api::router(&config).await?;
            let payers: u64 = env_or("BENCH_PAYERS", 64);
            let seed: u64 = env_or("BENCH_SEED", 402);
            let remote = std::env::var_os("FACILITATOR_URL").is_some();
            if !remote {
                for i in 0..payers {
                    state.fund(payer(seed, i).address(), u64::MAX)?;
                }
            }
            eprintln!(
                "bench-server: paid-api on {addr}, {}, redis: {}, local pre-check: {}, known payers: {}",
                if remote {
                    "facilitator over HTTP".to_owned()
                } else {
                    format!("{payers} payers funded on the dev ledger")
                },
                std::env::var("REDIS_URL").is_ok(),
                local_precheck(),
                known_payers()
            );
            // The counter goes behind the paywall with the example's own
            // free routes, so the app is served as paid_api::app builds it.
            let app = paid_api::paywalled(router.route(ALLOCATIONS_PATH, get(allocations)), engine);
            announce(addr)?;
            // paid_api::serve stops on SIGTERM / ctrl-c as well.
            paid_api::serve(listener, app, state).await?;
        }
        other => {
            return Err(format!(
                "usage: bench-server baseline|challenge-floor|session-floor|session-layer|session-engine|paid-http-floor|paid-http-engine|paid-api (got {other:?})"
            )
            .into());
        }
    }
    Ok(())
}

/// Opens `BENCH_SESSIONS` sessions (default 1 000) of `BENCH_SESSION_CALLS`
/// calls (default 99, what a bought session has left) for scope `demo` in
/// `store`: their tokens, one a line, and the calls each has.
async fn open_sessions(
    store: &RedisSessionStore,
) -> Result<(String, u64), Box<dyn std::error::Error>> {
    let sessions: usize = env_or("BENCH_SESSIONS", 1000);
    let calls: u64 = env_or("BENCH_SESSION_CALLS", 99);
    let now = unix_now();
    let mut listed = String::new();
    for _ in 0..sessions.max(1) {
        let token = SessionToken::generate();
        let record = SessionRecord {
            scope: "demo".into(),
            remaining: calls,
            expires_at: now + 3600,
        };
        store.open(&token.hash(), record).await?;
        listed.push_str(token.expose());
        listed.push('\n');
    }
    Ok((listed, calls))
}

/// What any redemption does first, as `session-floor` and `session-layer`
/// do it: the buyer's token read from its header and hashed.
fn sent_token(headers: &HeaderMap) -> Option<TokenHash> {
    headers
        .get(X_PAYMENT_SESSION)
        .and_then(|v| v.to_str().ok())
        .and_then(SessionToken::hash_sent)
}

/// `GET /__bench/sessions`: the tokens [`open_sessions`] listed, with the
/// calls each has in `X-PAYMENT-SESSION-REMAINING`.
fn sessions_route(listed: String, calls: u64) -> axum::routing::MethodRouter {
    get(move || {
        let listed = listed.clone();
        async move { ([(X_PAYMENT_SESSION_REMAINING, calls.to_string())], listed) }
    })
}

/// The least a paywall layer inside axum's router does for a session call:
/// the token read and hashed, one Redis redemption, the calls left put in
/// the request's extensions for the handler and in the response's headers.
/// No route table, no hooks, no body held.
#[derive(Clone)]
struct SessionLayer(Arc<RedisSessionStore>);

/// What [`SessionLayer`] tells the handler: the calls left.
#[derive(Clone, Copy)]
struct SessionPaid(u64);

/// `session-layer`'s handler: paid-api's session body, run counted.
async fn layer_session_body(
    axum::Extension(SessionPaid(remaining)): axum::Extension<SessionPaid>,
) -> Json<Value> {
    Json(paid_api_common::session_call_body(
        Some(remaining),
        RUNS.count(PaidRoute::Session),
    ))
}

/// The service [`SessionLayer`] wraps a route in.
#[derive(Clone)]
struct SessionService<S> {
    inner: S,
    store: Arc<RedisSessionStore>,
}

impl<S> tower::Layer<S> for SessionLayer {
    type Service = SessionService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        SessionService {
            inner,
            store: Arc::clone(&self.0),
        }
    }
}

impl<S> tower::Service<axum::extract::Request> for SessionService<S>
where
    S: tower::Service<axum::extract::Request, Response = Response> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Response, S::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: axum::extract::Request) -> Self::Future {
        let token = sent_token(request.headers());
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let store = Arc::clone(&self.store);
        Box::pin(async move {
            let Some(token) = token else {
                return Ok(StatusCode::PAYMENT_REQUIRED.into_response());
            };
            let remaining = match store.redeem(&token, "demo", unix_now()).await {
                Ok(Redemption::Redeemed { remaining }) => remaining,
                _ => return Ok(StatusCode::INTERNAL_SERVER_ERROR.into_response()),
            };
            request.extensions_mut().insert(SessionPaid(remaining));
            let mut response = inner.call(request).await?;
            response
                .headers_mut()
                .insert(X_PAYMENT_SESSION_REMAINING, remaining.into());
            Ok(response)
        })
    }
}

/// The facilitator path's floor: the two calls and nothing else.
struct HttpFloor {
    /// The example's 402, answered to a request without a payment.
    challenge: (StatusCode, HeaderMap, Bytes),
    facilitator: x402_core::facilitator::HttpFacilitator,
}

impl HttpFloor {
    fn new(
        base: &str,
        challenge: (StatusCode, HeaderMap, Bytes),
    ) -> Result<Self, Box<dyn std::error::Error>> {
        Ok(Self {
            challenge,
            facilitator: x402_core::facilitator::HttpFacilitator::new(base)?,
        })
    }

    async fn serve(&self, headers: &HeaderMap) -> Response {
        let Some(header) = headers.get(x402_core::codec::PAYMENT_SIGNATURE) else {
            let (status, headers, body) = &self.challenge;
            return canned(*status, headers.clone(), body.clone());
        };
        match self.pay(header).await {
            Ok(receipt) => (
                [(x402_core::codec::PAYMENT_RESPONSE, receipt)],
                paid_body().await,
            )
                .into_response(),
            Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
        }
    }

    /// Decode, verify, settle, encode the receipt: what any seller must do
    /// through an HTTP facilitator, with this crate's client and wire types.
    async fn pay(
        &self,
        header: &http::HeaderValue,
    ) -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
        use x402_core::{codec, facilitator::Facilitator as _};
        let request = x402_loadgen::floor_request(header.as_bytes())?;
        let verdict = self.facilitator.verify(&request).await?;
        if !verdict.is_valid {
            return Err("invalid".into());
        }
        let receipt = self.facilitator.settle(&request).await?;
        if !receipt.success {
            return Err("not settled".into());
        }
        Ok(codec::encode(&receipt)?)
    }
}
