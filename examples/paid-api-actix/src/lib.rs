//! The paid API of `examples/paid-api`, served by actix-web: a template to
//! copy.
//!
//! One route table, two frameworks: the configuration ([`Config`]), the
//! payment engine (facilitator, prices, replay and session stores, webhooks:
//! [`paid_api::engine`]) and the state handles ([`AppState`]) are the axum
//! example's, reused as they are. This crate only adds the actix-web side:
//! the handlers, [`x402_actix::PaywallLayer`] in front of them, and an
//! [`HttpServer`] that follows the same server contract (`DESIGN.md` §9).
//!
//! | Route | Price |
//! |---|---|
//! | `GET /exact/evm/eip3009` | $0.001, `exact` (EIP-3009) |
//! | `GET /upto/evm/permit2` | `upto`, ceiling 2000 atomic units; the handler charges 1000 |
//! | `GET /session/demo` | $0.001 per call, or a prepaid session: 100 calls for $0.05 |
//! | `GET /health` | free |
//! | `GET /.well-known/x402`, `GET /.well-known/x402/openapi.json` | free; discovery and OpenAPI documents ([`x402_actix::Discovery`]) |
//! | `GET /metrics` | free; Prometheus counters (keep it off the public internet) |
//! | `POST /close` | free; answers, then the server shuts down (loopback only) |
//!
//! As in paid-api, `POST /close` stops the server only when it is bound to a
//! loopback address; bound to any other (`HOST=0.0.0.0`), it answers 404 with
//! an empty body, as for a path that does not exist, and the server keeps
//! running ([`AppState::close_enabled`], decided from the bound address).
//!
//! The environment is the same as paid-api's ([`Config::from_env`]): `PORT`
//! (default 4021), `HOST` (default 127.0.0.1), `EVM_*`, `FACILITATOR_URL`,
//! `EVM_RPC_URL` + `FACILITATOR_EVM_PRIVATE_KEY`, `REDIS_URL`,
//! `WEBHOOK_URL` + `WEBHOOK_SECRET`; with nothing set, the server runs
//! offline on an in-memory dev ledger. To change what is sold and for how
//! much, edit the route table in `examples/paid-api/src/lib.rs` (or copy
//! [`paid_api::engine`] into your own crate): both servers pick it up.
//!
//! ```no_run
//! # async fn run() -> Result<(), paid_api_actix::Error> {
//! let config = paid_api_actix::Config::from_env()?;
//! let server = paid_api_actix::server(config).await?;
//! println!("Server listening on http://{}", server.local_addr());
//! server.run().await?; // until POST /close, ctrl-c or SIGTERM
//! # Ok(()) }
//! ```

use std::{net::SocketAddr, time::Duration};

use actix_web::{dev::ServerHandle, web, App, HttpResponse, HttpServer};
use serde_json::{json, Value};
use x402_actix::{Discovery, Payment, PaywallLayer, UsageMeter};

pub use paid_api::{
    timestamp, AppState, AssetConfig, Config, Error, FacilitatorConfig, DEFAULT_NETWORK,
    DEFAULT_PAYEE, DEFAULT_PORT, UPTO_CEILING, UPTO_CHARGE,
};

/// How long requests in flight (and pending webhooks) get once the server
/// is asked to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Registers the handlers on an actix-web `App` (or `Scope`).
///
/// The paywall is not here: wrap the `App` in
/// [`PaywallLayer`] built from [`paid_api::engine`], whose route table
/// decides what is paid. `/health` and `/close` are not in it, so they pass
/// through for free. `POST /close` needs the [`AppState`] as
/// `web::Data<AppState>`.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/exact/evm/eip3009", web::get().to(exact))
        .route("/upto/evm/permit2", web::get().to(upto))
        .route("/session/demo", web::get().to(session))
        .route("/health", web::get().to(health))
        .route("/close", web::post().to(close));
}

/// A bound, not yet running, server: [`local_addr`](Self::local_addr) is
/// final (useful with port 0), and [`run`](Self::run) serves.
pub struct Server {
    server: actix_web::dev::Server,
    addr: SocketAddr,
    state: AppState,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

/// Builds the engine from `config` and binds an actix-web [`HttpServer`] to
/// `config.addr()` (port 0 picks a free one), with the paywall in front of
/// [`routes`].
///
/// The server stops gracefully on `POST /close` ([`AppState::shutdown`]),
/// ctrl-c or SIGTERM: it stops accepting, gives requests in flight up to
/// [`SHUTDOWN_GRACE`], then [`Server::run`] returns.
pub async fn server(config: Config) -> Result<Server, Error> {
    let listener = std::net::TcpListener::bind(config.addr())?;
    let config = config.bound_to(listener.local_addr()?);
    let (engine, state) = paid_api::engine(&config).await?;
    // Installs the process's Prometheus recorder before the first request.
    let _ = paid_api::metrics_handle();
    let data = web::Data::new(state.clone());
    let stop = state.clone();
    let http = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .wrap(PaywallLayer::new(engine.clone()))
            .configure(routes)
            // What agents and catalogues read, the same documents as
            // paid-api's: every paid route with its offers, from the engine.
            .service(Discovery::new(engine.clone()).openapi(paid_api::openapi_info()))
            // Prometheus counters of challenges, payments, settlements and
            // sessions. Keep /metrics off the public internet.
            .route("/metrics", web::get().to(metrics))
    })
    // Replaces actix-web's own signal handling, so that `POST /close`,
    // ctrl-c and SIGTERM all take the same path.
    .shutdown_signal(async move {
        tokio::select! {
            () = stop.wait_for_shutdown() => {}
            () = paid_api::shutdown_signal() => {}
        }
    })
    .shutdown_timeout(SHUTDOWN_GRACE.as_secs())
    .listen(listener)?;
    let addr = http.addrs().first().copied().ok_or_else(|| {
        Error::Io(std::io::Error::other(format!(
            "binding {} gave no address",
            config.addr()
        )))
    })?;
    Ok(Server {
        server: http.run(),
        addr,
        state,
    })
}

impl Server {
    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The state handles: the dev ledger, the asset, the shutdown switch.
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// actix-web's handle on the running server (to pause, resume or stop it
    /// without going through [`AppState::shutdown`]).
    pub fn handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until `POST /close`, ctrl-c or SIGTERM, then lets pending
    /// webhooks go out (up to [`SHUTDOWN_GRACE`]).
    pub async fn run(self) -> Result<(), Error> {
        self.server.await?;
        self.state.stop_webhooks(SHUTDOWN_GRACE).await;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Handlers: your business logic goes here. The paid ones only run for paid
// requests (the middleware answers 402 before they are called).

/// `GET /exact/evm/eip3009`: paid $0.001.
async fn exact(Payment(payment): Payment) -> HttpResponse {
    tracing::info!(payer = ?payment.payer, amount = %payment.amount, "paid call");
    success("Paid content: exact (EIP-3009)")
}

/// `GET /upto/evm/permit2`: report what the call cost through the meter
/// (here a fixed [`UPTO_CHARGE`]; in a real API, tokens used, bytes sent...).
async fn upto(UsageMeter(meter): UsageMeter) -> HttpResponse {
    meter.set(UPTO_CHARGE);
    success("Paid content: upto (metered)")
}

/// `GET /session/demo`: paid per call, or redeemed from a prepaid session.
async fn session(Payment(payment): Payment) -> HttpResponse {
    let mut body = message("Paid content: session demo");
    if let (Some(call), Value::Object(map)) = (&payment.session, &mut body) {
        map.insert("sessionCallsRemaining".into(), json!(call.remaining));
    }
    HttpResponse::Ok().json(body)
}

/// `GET /health`: free.
async fn health() -> HttpResponse {
    HttpResponse::Ok().json(json!({ "status": "ok", "timestamp": timestamp() }))
}

/// `POST /close`: answers, then shuts the server down (the e2e harness's way
/// to stop a server). The response goes out before the server stops: the
/// shutdown is graceful. Only when bound to loopback: otherwise 404 with an
/// empty body, as for a path that does not exist, and the server keeps
/// running.
async fn close(state: web::Data<AppState>) -> HttpResponse {
    if !state.close_enabled() {
        tracing::debug!("POST /close ignored: the server is not bound to loopback");
        return HttpResponse::NotFound().finish();
    }
    state.shutdown();
    HttpResponse::Ok().json(json!({ "message": "closing", "timestamp": timestamp() }))
}

fn message(message: &str) -> Value {
    json!({ "message": message, "timestamp": timestamp() })
}

/// `GET /metrics`: the Prometheus text exposition of the process's recorder
/// ([`paid_api::metrics_handle`]), with the engine's x402 series.
async fn metrics() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(paid_api::metrics_handle().render())
}

fn success(text: &str) -> HttpResponse {
    HttpResponse::Ok().json(message(text))
}
