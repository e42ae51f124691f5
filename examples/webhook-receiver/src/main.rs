//! `WEBHOOK_SECRET=whsec_... PORT=4022 cargo run -p webhook-receiver`

use std::{io::Write as _, net::SocketAddr};

use x402_core::webhook::WebhookVerifier;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secrets = std::env::var("WEBHOOK_SECRET").map_err(|_| "set WEBHOOK_SECRET=whsec_...")?;
    let verifier = WebhookVerifier::from_whsec(secrets.split(','))?;
    let port: u16 = std::env::var("PORT").map_or(Ok(4022), |p| p.parse())?;
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    writeln!(
        std::io::stdout(),
        "listening on http://{}/webhooks/x402",
        listener.local_addr()?
    )?;
    axum::serve(listener, webhook_receiver::app(verifier))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
