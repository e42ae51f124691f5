//! The paid API server on actix-web. Configuration: see
//! `paid_api_common::Config::from_env` (the same variables as `paid-api`).
//!
//! `cargo run -p paid-api-actix` (offline, on the dev ledger), then
//! `curl -i http://127.0.0.1:4021/exact/evm/eip3009` for the 402 challenge.

use std::io::Write as _;

#[tokio::main]
async fn main() -> Result<(), paid_api_actix::Error> {
    let config = paid_api_actix::Config::from_env()?;
    let server = paid_api_actix::server(config).await?;
    // The upstream e2e harness waits for this line.
    writeln!(
        std::io::stdout(),
        "Server listening on http://{}",
        server.local_addr()
    )?;
    server.run().await
}
