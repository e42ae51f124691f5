//! The paid API of `examples/paid-api`, served by actix-web: a template to
//! copy.
//!
//! One route table, two frameworks: the routes, prices, configuration
//! (environment variables) and the `POST /close` loopback rule are those of
//! [`paid_api_common`], which holds everything that does not depend on the
//! web framework: the [`Config`], the payment engine
//! ([`paid_api_common::engine`]: facilitator, route table, stores,
//! webhooks), the [`AppState`] handles and the JSON each handler answers.
//! The axum app, `examples/paid-api`, is built on the same crate. This one
//! only adds the actix-web side: the handlers, [`x402_actix::PaywallLayer`]
//! in front of them, the discovery ([`x402_actix::Discovery`]) and
//! `/metrics` routes, and an [`HttpServer`] that follows the same server
//! contract (`DESIGN.md` §9).
//!
//! To change what is sold and for how much, edit the route table in
//! `examples/paid-api-common/src/payments.rs`: both servers pick it up.
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
use paid_api_common::{
    batch_body, close_body, exact_body, health_body, metrics_handle, openapi_info, session_body,
    shutdown_signal, siwx_body, upto_body, PaidRoute,
};
use x402_actix::{Discovery, Payment, PaywallLayer, UsageMeter};

pub use paid_api_common::{
    AppState, AssetConfig, Config, Error, FacilitatorConfig, DEFAULT_NETWORK, DEFAULT_PAYEE,
    DEFAULT_PORT, UPTO_CEILING, UPTO_CHARGE,
};

/// How long requests in flight (and pending webhooks) get once the server
/// is asked to stop.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Registers the handlers on an actix-web `App` (or `Scope`).
///
/// The paywall is not here: wrap the `App` in
/// [`PaywallLayer`] built from [`paid_api_common::engine`], whose route table
/// decides what is paid. `/health` and `/close` are not in it, so they pass
/// through for free. `POST /close` needs the [`AppState`] as
/// `web::Data<AppState>`.
pub fn routes(config: &mut web::ServiceConfig) {
    config
        .route("/exact/evm/eip3009", web::get().to(exact))
        .route("/upto/evm/permit2", web::get().to(upto))
        .route("/session/demo", web::get().to(session))
        .route("/siwx/demo", web::get().to(siwx))
        .route("/batch/evm", web::get().to(batch))
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
    let (engine, state) = paid_api_common::engine(&config).await?;
    // Installs the process's Prometheus recorder before the first request.
    let _ = metrics_handle();
    let data = web::Data::new(state.clone());
    let stop = state.clone();
    let http = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .wrap(PaywallLayer::new(engine.clone()))
            .configure(routes)
            // What agents and catalogues read, the same documents as
            // paid-api's: every paid route with its offers, from the engine.
            .service(Discovery::new(engine.clone()).openapi(openapi_info()))
            // Prometheus counters of challenges, payments, settlements and
            // sessions. Keep /metrics off the public internet.
            .route("/metrics", web::get().to(metrics))
    })
    // Replaces actix-web's own signal handling, so that `POST /close`,
    // ctrl-c and SIGTERM all take the same path.
    .shutdown_signal(async move {
        tokio::select! {
            () = stop.wait_for_shutdown() => {}
            () = shutdown_signal() => {}
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
        self.state.stop_claimer();
        self.state.stop_webhooks(SHUTDOWN_GRACE).await;
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Handlers. The paid ones only run for paid requests (the middleware answers
// 402 before they are called); what they answer (your business logic) is in
// `paid_api_common`, shared with the axum app.

/// `GET /exact/evm/eip3009`: paid $0.001.
async fn exact(state: web::Data<AppState>, Payment(payment): Payment) -> HttpResponse {
    HttpResponse::Ok().json(exact_body(&payment, state.count_run(PaidRoute::Exact)))
}

/// `GET /upto/evm/permit2`: reports what the call cost through the meter
/// ([`UPTO_CHARGE`]).
async fn upto(state: web::Data<AppState>, UsageMeter(meter): UsageMeter) -> HttpResponse {
    HttpResponse::Ok().json(upto_body(&meter, state.count_run(PaidRoute::Upto)))
}

/// `GET /batch/evm`: batch-settlement; reports the call's cost through the
/// meter and counts the run.
/// Not sold (the facilitator does not list batch-settlement): 404.
async fn batch(state: web::Data<AppState>, meter: Option<UsageMeter>) -> HttpResponse {
    match meter {
        Some(UsageMeter(meter)) if state.batch_enabled() => {
            HttpResponse::Ok().json(batch_body(&state, &meter))
        }
        _ => HttpResponse::NotFound().finish(),
    }
}

/// `GET /session/demo`: paid per call, or redeemed from a prepaid session.
async fn session(state: web::Data<AppState>, Payment(payment): Payment) -> HttpResponse {
    HttpResponse::Ok().json(session_body(&payment, state.count_run(PaidRoute::Session)))
}

/// `GET /siwx/demo`: paid $0.001 once, then sign-in-with-x for an hour.
async fn siwx(state: web::Data<AppState>, Payment(payment): Payment) -> HttpResponse {
    HttpResponse::Ok().json(siwx_body(&payment, state.count_run(PaidRoute::SignIn)))
}

/// `GET /health`: free.
async fn health() -> HttpResponse {
    HttpResponse::Ok().json(health_body())
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
    HttpResponse::Ok().json(close_body())
}

/// `GET /metrics`: the Prometheus text exposition of the process's recorder
/// ([`paid_api_common::metrics_handle`]), with the engine's x402 series.
async fn metrics() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(metrics_handle().render())
}
