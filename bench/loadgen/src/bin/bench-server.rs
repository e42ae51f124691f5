//! The server under load: `bench-server baseline` or `bench-server paid-api`.
//!
//! - `paid-api`: exactly the example app (`paid_api::app(Config::from_env())`,
//!   so `REDIS_URL` etc. apply as documented there), on the dev ledger, with
//!   `BENCH_PAYERS` payers (default 64) derived from `BENCH_SEED` funded
//!   before it listens.
//! - `baseline`: the same routes' handler body (the JSON `paid-api` answers a
//!   paid call with) on a bare axum router: no paywall layer at all.
//!
//! Binds `HOST`:`PORT` (default 127.0.0.1:0) and prints
//! `listening on http://ADDR` once bound. Stops on SIGTERM or ctrl-c.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::{io::Write as _, net::SocketAddr};

use axum::{routing::get, Json, Router};
use serde_json::{json, Value};
use x402_loadgen::{env_or, payer, LISTENING};

async fn paid_body() -> Json<Value> {
    Json(json!({
        "message": "Paid content: exact (EIP-3009)",
        "timestamp": paid_api::timestamp(),
    }))
}

async fn health() -> Json<Value> {
    Json(json!({ "status": "ok", "timestamp": paid_api::timestamp() }))
}

async fn stop() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
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
            announce(addr)?;
            axum::serve(listener, router)
                .with_graceful_shutdown(stop())
                .await?;
        }
        "paid-api" => {
            // paid-api reads PORT/HOST too; the listener is already bound.
            let config = paid_api::Config::from_env()?;
            let (router, state) = paid_api::app(config).await?;
            let payers: u64 = env_or("BENCH_PAYERS", 64);
            let seed: u64 = env_or("BENCH_SEED", 402);
            for i in 0..payers {
                state.fund(payer(seed, i).address(), u64::MAX)?;
            }
            eprintln!(
                "bench-server: paid-api on {addr}, {payers} payers funded, redis: {}",
                std::env::var("REDIS_URL").is_ok()
            );
            announce(addr)?;
            // paid_api::serve stops on SIGTERM / ctrl-c as well.
            paid_api::serve(listener, router, state).await?;
        }
        other => {
            return Err(format!("usage: bench-server baseline|paid-api (got {other:?})").into());
        }
    }
    Ok(())
}
