//! The framework-neutral half of the example paid API: everything
//! `examples/paid-api` (axum) and `examples/paid-api-actix` (actix-web)
//! share, so that the two servers sell the same routes from one route table
//! and answer with the same bytes. It depends on no web framework; copy it
//! with the app crate of your framework.
//!
//! - [`Config`]: the configuration, from the environment
//!   ([`Config::from_env`]); its `Debug` shows no secret;
//! - [`engine`]: the payment engine (facilitator, route table, replay and
//!   session stores, webhooks) and the [`AppState`] handles (dev ledger,
//!   shutdown switch, webhook worker);
//! - [`openapi_info`], [`metrics_handle`]: what the discovery and
//!   `/metrics` routes serve;
//! - [`exact_body`], [`upto_body`], [`session_body`], [`siwx_body`], [`health_body`],
//!   [`close_body`]: the handlers' JSON, one function per route;
//! - [`shutdown_signal`]: ctrl-c or SIGTERM.
//!
//! Routes (the upstream e2e server contract, `DESIGN.md` §9), served alike
//! by both apps:
//!
//! | Route | Price |
//! |---|---|
//! | `GET /exact/evm/eip3009` | $0.001, `exact` (EIP-3009); advertises `payment-identifier` (not required): a resend of a settled payment with its id gets the stored response; its body's `"run"` counts the handler's runs |
//! | `GET /upto/evm/permit2` | `upto`, ceiling 2000 atomic units; the handler charges 1000 |
//! | `GET /session/demo` | $0.001 per call, or a prepaid session: 100 calls for $0.05 |
//! | `GET /siwx/demo` | $0.001 once, then sign-in-with-x (no payment) for an hour |
//! | `GET /batch/evm` | `batch-settlement`: one deposit, then a signed voucher per call; ceiling 1000 atomic units per call, charges `BATCH_CHARGE` (default 1000); served when the hosted facilitator lists `batch-settlement` |
//! | `GET /health` | free |
//! | `GET /.well-known/x402`, `GET /.well-known/x402/openapi.json` | free; discovery and OpenAPI documents of the paid routes |
//! | `GET /metrics` | free; Prometheus counters (keep it off the public internet) |
//! | `POST /close` | free; answers, then the server shuts down (loopback only, see below) |
//!
//! To change what is sold and for how much, edit the route table in
//! `src/payments.rs`: both servers pick it up.
//!
//! `POST /close` stops the server only when it is bound to a loopback
//! address (`HOST` 127.0.0.1, the default, or `::1`). Bound to any other
//! address (`HOST=0.0.0.0`, say), anyone who can reach the port could stop
//! it, so `POST /close` answers 404 with an empty body, as for a path that
//! does not exist, and changes nothing; stop such a server with SIGTERM or
//! ctrl-c. The decision is made from the address the listener is bound to
//! ([`Config::bound_to`], [`AppState::close_enabled`]), never from a
//! request's `Host`.
//!
//! Configuration comes from the environment ([`Config::from_env`] lists the
//! variables): `PORT` (default 4021), `HOST` (default 127.0.0.1),
//! `PUBLIC_URL`, `EVM_*`, `FACILITATOR_URL` (or `FACILITATOR_URLS`), `EVM_RPC_URL` +
//! `FACILITATOR_EVM_PRIVATE_KEY`, `DEV_FUND`, `REDIS_URL` (or
//! `REDIS_CLUSTER_URLS`), `WEBHOOK_URL` +
//! `WEBHOOK_SECRET`, `SIWX_NONCE_KEY`. With nothing set, the server runs offline on an
//! in-memory **dev ledger** (fake balances on a testnet, never a mainnet).
//!
//! ```no_run
//! # async fn run() -> Result<(), paid_api_common::Error> {
//! let config = paid_api_common::Config::from_env()?;
//! let listener = std::net::TcpListener::bind(config.addr())?;
//! // Bound: `POST /close` is allowed only if this address is loopback.
//! let config = config.bound_to(listener.local_addr()?);
//! let (engine, state) = paid_api_common::engine(&config).await?;
//! // Put your framework's paywall, built from `engine`, in front of
//! // handlers that answer `paid_api_common::exact_body(&payment)`...
//! # let _ = (engine, state);
//! # Ok(()) }
//! ```

use std::{sync::OnceLock, time::Duration};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

mod batch;
mod body;
mod config;
mod payments;
mod runs;
mod state;

pub use self::batch::{BatchConfig, BATCH_CEILING};
pub use self::body::{
    batch_body, close_body, exact_body, exact_call_body, health_body, message_body, session_body,
    session_call_body, siwx_body, timestamp, upto_body,
};
pub(crate) use self::config::config_error;
pub use self::config::{
    AssetConfig, Config, FacilitatorConfig, DEFAULT_NETWORK, DEFAULT_PAYEE, DEFAULT_PORT,
};
pub use self::payments::{engine, openapi_info, SIWX_ACCESS, UPTO_CEILING, UPTO_CHARGE};
pub use self::runs::{PaidRoute, Runs};
pub use self::state::{is_loopback, AppState, SharedState};

/// Why the server could not be configured or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An environment variable (or config field) is missing or malformed.
    #[error("configuration: {0}")]
    Config(String),
    /// The facilitator could not be set up.
    #[error("facilitator: {0}")]
    Facilitator(String),
    /// Redis could not be reached.
    #[error("redis: {0}")]
    Redis(String),
    /// The engine refused the route table.
    #[error(transparent)]
    Engine(#[from] x402_core::engine::ConfigError),
    /// Binding or serving failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// The buckets of the latency histograms `/metrics` shows (seconds): from
/// a millisecond to ten seconds, the span of facilitator and store calls.
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The process's Prometheus recorder, installed (with x402-core's metric
/// descriptions and an upkeep thread) on first use; both example servers
/// render `GET /metrics` from it. If another recorder was installed first,
/// `/metrics` shows only what this one records.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Latencies as Prometheus histograms (fixed buckets: a few
            // hundred bytes per series, and they add up across instances)
            // rather than the exporter's default summaries (a quantile
            // sketch per series, which reached 200 KB each under load).
            // (`set_buckets` refuses only an empty list.)
            let builder = PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS)
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics stays empty");
            } else {
                x402_core::metrics::describe();
                // Histogram samples pile up until rendered or upkept: without
                // this, the process would grow with every paid request while
                // nobody scrapes /metrics. Two samples per paid request,
                // about 8 bytes each: at 20 000 payments a second, a 1 s
                // period held a third of a megabyte of samples at its peak,
                // and a 5 s period more than a megabyte and a half.
                let upkeep = handle.clone();
                let spawned = std::thread::Builder::new()
                    .name("metrics-upkeep".into())
                    .spawn(move || loop {
                        std::thread::sleep(Duration::from_millis(250));
                        upkeep.run_upkeep();
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "metrics upkeep thread not started");
                }
            }
            handle
        })
        .clone()
}

/// Resolves on ctrl-c or (on unix) SIGTERM: the process signals that stop
/// the server gracefully.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
