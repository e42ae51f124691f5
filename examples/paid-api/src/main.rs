//! The paid API server. Configuration: see `paid_api_common::Config::from_env`.
//!
//! `cargo run -p paid-api` (offline, on the dev ledger), then
//! `curl -i http://127.0.0.1:4021/exact/evm/eip3009` for the 402 challenge.

use std::io::Write as _;

#[tokio::main]
async fn main() -> Result<(), paid_api::Error> {
    let config = paid_api::Config::from_env()?;
    let listener = tokio::net::TcpListener::bind(config.addr()).await?;
    let config = config.bound_to(listener.local_addr()?);
    let (app, state) = paid_api::app(config).await?;
    // The upstream e2e harness waits for this line.
    writeln!(
        std::io::stdout(),
        "Server listening on http://{}",
        listener.local_addr()?
    )?;
    paid_api::serve(listener, app, state).await
}
