//! The peer server of `bench/run.sh`: x402-rs's axum middleware guarding one
//! route the way its own axum example guards `/static-price-v2` (a v2 `exact`
//! price tag on Base Sepolia USDC, settled through the facilitator at
//! `FACILITATOR_URL` after the handler).
//!
//! It listens on `127.0.0.1:$PORT` (`0`: any free port) and prints
//! `listening on http://ADDR` like the project's bench server, so the harness
//! starts both the same way. The handler answers a JSON body like the
//! project's paid route.
//!
//! It counts its heap allocations with the bench server's own counting
//! allocator (the same source file) and answers them at
//! `GET /__bench/allocations`, unguarded, as the bench server does: every
//! server the harness compares carries the same instrument.

use alloy_primitives::address;
use axum::{Router, http::header, response::IntoResponse, routing::get};
use x402_axum::X402Middleware;
use x402_chain_eip155::{KnownNetworkEip155, V2Eip155Exact};
use x402_types::networks::USDC;

#[path = "../../loadgen/src/counting.rs"]
mod counting;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

/// The paid body, the size and shape of the project's `/exact/evm/eip3009`
/// answer (which also formats the time per request; this one is static, which
/// only flatters the peer).
const BODY: &str = r#"{"message":"paid content: exact, EIP-3009 (transferWithAuthorization)","timestamp":"2026-01-01T00:00:00Z"}"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let facilitator = std::env::var("FACILITATOR_URL")?;
    let port = std::env::var("PORT").unwrap_or_else(|_| "0".to_owned());
    let x402 = X402Middleware::try_from(facilitator)?;
    let price = V2Eip155Exact::price_tag(
        address!("0xBAc675C310721717Cd4A37F6cbeA1F081b1C2a07"),
        USDC::base_sepolia().amount(10u64),
    );
    let app = Router::new()
        .route(
            "/exact/evm/eip3009",
            get(paid).layer(x402.with_price_tag(price)),
        )
        .route("/__bench/allocations", get(allocations));
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

async fn paid() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], BODY)
}

/// `GET /__bench/allocations`: `{"allocations": N, "bytes": N}` so far.
async fn allocations() -> impl IntoResponse {
    let counts = ALLOCATOR.counts();
    (
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            r#"{{"allocations":{},"bytes":{}}}"#,
            counts.allocations, counts.bytes
        ),
    )
}
