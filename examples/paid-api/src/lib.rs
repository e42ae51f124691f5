//! An axum API that sells its endpoints with x402: a template to copy.
//!
//! The routes, prices, configuration (environment variables) and the
//! `POST /close` loopback rule are those of [`paid_api_common`], which
//! holds everything that does not depend on the web framework: the
//! [`Config`], the payment engine ([`paid_api_common::engine`]: facilitator,
//! route table, stores, webhooks), the [`AppState`] handles and the JSON
//! each handler answers. This crate only adds the axum side: the handlers,
//! the discovery and `/metrics` routes, [`x402_axum::PaywallLayer`] around
//! them all ([`paywalled`]), and [`serve`], which follows the server contract
//! (`DESIGN.md` §9). The actix-web twin, `examples/paid-api-actix`, wraps the
//! same engine: one route table, two frameworks.
//!
//! The configuration types are re-exported here ([`Config`], [`Error`],
//! [`AppState`], ...), so that this crate's API reads on its own.
//!
//! ```no_run
//! # async fn run() -> Result<(), paid_api::Error> {
//! let config = paid_api::Config::from_env()?;
//! let listener = tokio::net::TcpListener::bind(config.addr()).await?;
//! let config = config.bound_to(listener.local_addr()?);
//! let (app, state) = paid_api::app(config).await?;
//! paid_api::serve(listener, app, state).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use axum::{
    body::Body,
    extract::{Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
    Json, Router,
};
use paid_api_common::{
    batch_body, close_body, engine, exact_body, health_body, is_loopback, metrics_handle,
    openapi_info, session_body, shutdown_signal, siwx_body, upto_body, PaidRoute,
};
use serde_json::Value;
use tower::{util::MapResponse, Layer as _, ServiceExt};
use x402_axum::{
    discovery::{prometheus_router, Discovery},
    Engine, Payment, Paywall, PaywallBody, PaywallLayer, UsageMeter,
};

pub use paid_api_common::{
    AppState, AssetConfig, Config, Error, FacilitatorConfig, DEFAULT_NETWORK, DEFAULT_PAYEE,
    DEFAULT_PORT, UPTO_CEILING, UPTO_CHARGE,
};

/// How long pending webhooks get once the server has stopped.
const WEBHOOK_GRACE: Duration = Duration::from_secs(5);

/// The app [`serve`] runs: the example's router with the paywall around
/// it ([`paywalled`]).
pub type App = MapResponse<Paywall<Router>, fn(http::Response<PaywallBody<Body>>) -> Response>;

/// Builds the app (the router with the paywall around it) and the state
/// handles: [`paid_api_common::engine`] in front of the axum handlers.
pub async fn app(config: Config) -> Result<(App, AppState), Error> {
    let (router, engine, state) = router(&config).await?;
    Ok((paywalled(router, engine), state))
}

/// The example's router, its handlers, discovery and `/metrics`, without
/// the paywall, and the engine and state handles it was built with: what
/// [`app`] puts the paywall around. Routes added to it before
/// [`paywalled`] are behind the paywall too (free unless the engine's
/// table prices them). Its paid handlers read the payment with
/// [`Payment`], which answers 500 when no paywall verified one, so served
/// without the paywall they refuse rather than run unpaid.
pub async fn router(config: &Config) -> Result<(Router, Engine, AppState), Error> {
    let (engine, state) = engine(config).await?;

    // The engine's route table decides what is paid: `/health`, `/close`,
    // discovery and `/metrics` are not in it, so they pass through the
    // paywall for free.
    let mut paid = Router::new()
        .route("/exact/evm/eip3009", get(exact))
        .route("/upto/evm/permit2", get(upto))
        .route("/session/demo", get(session))
        .route("/siwx/demo", get(siwx));
    if state.batch_enabled() {
        paid = paid.route("/batch/evm", get(batch));
    }
    let router = paid
        .route("/health", get(health))
        .route("/close", post(close))
        .with_state(state.clone())
        // What agents and catalogues read: every paid route with its offers
        // and session offers, generated from the same route table.
        .merge(
            Discovery::new(engine.clone())
                .openapi(openapi_info())
                .into_router(),
        )
        // Prometheus counters of challenges, payments, settlements and
        // sessions. This server binds 127.0.0.1 by default; keep /metrics off
        // the public internet if you change that.
        .merge(prometheus_router("/metrics", metrics_handle()));
    Ok((router, engine, state))
}

/// The paywall around `router`, as one service: the engine sees each
/// request before the router does and matches it on the path the client
/// sent, every reading of it (`x402_core::boundary`).
///
/// Around the router rather than inside it (`Router::layer`, which wraps
/// each route once more): axum then clones and boxes no layered route
/// service for each call, a clone that allocates when the handlers hold
/// state. A session call costs this example four allocations and about
/// 1 000 instructions fewer this way and ran 4 % faster, a paid request
/// 6 % (BENCHMARKS.md, "The paywall around the router"). A path the
/// router does not serve but some reading of which a route prices (a
/// capital letter, an escape) is challenged rather than left to the
/// router's 404; paid, the handler's 404 is not charged.
pub fn paywalled(router: Router, engine: Engine) -> App {
    let paywall = PaywallLayer::new(engine).layer(router);
    ServiceExt::<Request>::map_response(paywall, into_axum as fn(_) -> _)
}

/// The paywall's response as axum's.
fn into_axum(response: http::Response<PaywallBody<Body>>) -> Response {
    response.map(Body::new)
}

/// Serves `app` on `listener` until `POST /close`, ctrl-c or SIGTERM, then
/// lets requests in flight finish (and pending webhooks, up to 5 s).
///
/// Refuses to start when `state` allows `POST /close` but `listener` is not
/// bound to loopback (the configuration given to [`app`] was not
/// [bound to](Config::bound_to) this listener).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    state: AppState,
) -> Result<(), Error> {
    let bound = listener.local_addr()?;
    if state.close_enabled() && !is_loopback(bound.ip()) {
        return Err(Error::Config(format!(
            "the listener is bound to {bound}, but the app was built for a loopback address: \
             build it from config.bound_to(listener.local_addr()?)"
        )));
    }
    let stop = state.clone();
    axum::serve(
        listener,
        axum::ServiceExt::<Request>::into_make_service(app),
    )
    .with_graceful_shutdown(async move {
        tokio::select! {
            () = stop.wait_for_shutdown() => {}
            () = shutdown_signal() => {}
        }
    })
    .await?;
    state.stop_claimer();
    state.stop_webhooks(WEBHOOK_GRACE).await;
    Ok(())
}

// ---------------------------------------------------------------------------
// Handlers. The paid ones only run for paid requests; what they answer (your
// business logic) is in `paid_api_common`, shared with the actix-web app.

/// `GET /exact/evm/eip3009`: paid $0.001.
async fn exact(State(state): State<AppState>, Payment(payment): Payment) -> Json<Value> {
    Json(exact_body(&payment, state.count_run(PaidRoute::Exact)))
}

/// `GET /upto/evm/permit2`: reports what the call cost through the meter
/// ([`UPTO_CHARGE`]).
async fn upto(State(state): State<AppState>, UsageMeter(meter): UsageMeter) -> Json<Value> {
    Json(upto_body(&meter, state.count_run(PaidRoute::Upto)))
}

/// `GET /session/demo`: paid per call, or redeemed from a prepaid session.
async fn session(State(state): State<AppState>, Payment(payment): Payment) -> Json<Value> {
    Json(session_body(&payment, state.count_run(PaidRoute::Session)))
}

/// `GET /siwx/demo`: paid $0.001 once, then sign-in-with-x for an hour.
async fn siwx(State(state): State<AppState>, Payment(payment): Payment) -> Json<Value> {
    Json(siwx_body(&payment, state.count_run(PaidRoute::SignIn)))
}

/// `GET /batch/evm`: batch-settlement; reports the call's cost through the
/// meter and counts the run.
async fn batch(State(state): State<AppState>, UsageMeter(meter): UsageMeter) -> Json<Value> {
    Json(batch_body(&state, &meter))
}

/// `GET /health`: free.
async fn health() -> Json<Value> {
    Json(health_body())
}

/// `POST /close`: answers, then shuts the server down (the e2e harness's way
/// to stop a server). Only when bound to loopback: otherwise 404 with an
/// empty body, as for a path that does not exist, and the server keeps
/// running.
async fn close(State(state): State<AppState>) -> Response {
    if !state.close_enabled() {
        tracing::debug!("POST /close ignored: the server is not bound to loopback");
        return StatusCode::NOT_FOUND.into_response();
    }
    state.shutdown();
    Json(close_body()).into_response()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    #[tokio::test]
    async fn close_answers_404_unless_bound_to_loopback() {
        let public = Config {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            ..Config::dev()
        };
        let (_, state) = engine(&public).await.unwrap();
        assert!(!state.close_enabled());
        let response = close(State(state.clone())).await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(!state.shutdown_requested(), "a 404 /close shut down");

        let (_, state) = engine(&Config::dev()).await.unwrap();
        assert!(state.close_enabled());
        let response = close(State(state.clone())).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(state.shutdown_requested());
    }

    #[tokio::test]
    async fn serve_refuses_a_loopback_app_on_a_public_listener() {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::UNSPECIFIED, 0))
            .await
            .unwrap();
        let (app, state) = app(Config::dev()).await.unwrap();
        let error = serve(listener, app, state).await.unwrap_err();
        assert!(error.to_string().contains("bound_to"), "{error}");
    }
}
