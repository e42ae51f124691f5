//! `x402-buyer <url>`: fetch a URL, paying for it with x402 if asked.
//!
//! Configuration comes from the environment (lists are comma-separated):
//!
//! | Variable | Meaning | Default |
//! |---|---|---|
//! | `BUYER_PRIVATE_KEY` | hex private key of the paying account | required |
//! | `BUYER_ALLOW_NETWORK` | CAIP-2 networks (or v1 names) | `eip155:84532` |
//! | `BUYER_ALLOW_ASSET` | token addresses | each network's default stablecoin |
//! | `BUYER_ALLOW_RECIPIENT` | `payTo` addresses | required |
//! | `BUYER_ALLOW_ORIGIN` | origins that may be paid | the URL's own origin |
//! | `BUYER_MAX_PER_CALL` | cap per call, atomic units | `10000` (0.01 USDC) |
//! | `BUYER_MAX_TOTAL` | total budget, atomic units | `BUYER_MAX_PER_CALL` |
//!
//! It prints the status, the decoded receipt and the body. One call per run:
//! it plans one call, so it buys a prepaid session only when a session costs
//! less than a single call.

use std::{io::Write as _, process::ExitCode};

use x402_buyer::{Address, AtomicAmount, Buyer, PrivateKeySigner};
use x402_core::network;

type BoxError = Box<dyn std::error::Error>;

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn amount(name: &str, default: AtomicAmount) -> Result<AtomicAmount, BoxError> {
    match env(name) {
        Some(v) => AtomicAmount::parse_decimal(v.trim()).map_err(|e| format!("{name}: {e}").into()),
        None => Ok(default),
    }
}

fn addresses(name: &str, value: &str) -> Result<Vec<Address>, BoxError> {
    list(value)
        .map(|a| a.parse().map_err(|e| format!("{name}: `{a}`: {e}").into()))
        .collect()
}

fn buyer(url: &reqwest::Url) -> Result<Buyer, BoxError> {
    // The key is parsed and dropped from the environment string at once; it is
    // never printed, not even in errors.
    let signer: PrivateKeySigner = env("BUYER_PRIVATE_KEY")
        .ok_or("BUYER_PRIVATE_KEY is not set")?
        .trim()
        .parse()
        .map_err(|_| "BUYER_PRIVATE_KEY is not a valid hex private key")?;
    let networks = env("BUYER_ALLOW_NETWORK").unwrap_or_else(|| "eip155:84532".into());
    let recipients = env("BUYER_ALLOW_RECIPIENT")
        .ok_or("BUYER_ALLOW_RECIPIENT is not set (the addresses you agree to pay)")?;
    let max_per_call = amount("BUYER_MAX_PER_CALL", AtomicAmount::from(10_000u64))?;
    let max_total = amount("BUYER_MAX_TOTAL", max_per_call)?;

    let mut builder = Buyer::builder(signer)
        .max_per_call(max_per_call)
        .max_total(max_total);
    for n in list(&networks) {
        builder = builder.allow_network(n);
    }
    match env("BUYER_ALLOW_ASSET") {
        Some(assets) => {
            for a in addresses("BUYER_ALLOW_ASSET", &assets)? {
                builder = builder.allow_asset(a);
            }
        }
        None => {
            for n in list(&networks) {
                let coin = network::default_stablecoin(n)
                    .ok_or_else(|| format!("no default asset on {n}: set BUYER_ALLOW_ASSET"))?;
                builder = builder.allow_asset(coin.address.parse()?);
            }
        }
    }
    for r in addresses("BUYER_ALLOW_RECIPIENT", &recipients)? {
        builder = builder.allow_recipient(r);
    }
    match env("BUYER_ALLOW_ORIGIN") {
        Some(origins) => {
            for o in list(&origins) {
                builder = builder.allow_origin(o);
            }
        }
        None => builder = builder.allow_origin(url.origin().ascii_serialization()),
    }
    Ok(builder.build()?)
}

async fn run() -> Result<(), BoxError> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: x402-buyer <url>  (see the crate docs for the BUYER_* variables)")?;
    let url: reqwest::Url = url.parse()?;
    let buyer = buyer(&url)?;
    let purchase = buyer.get(url.as_str()).await?;

    let mut out = std::io::stdout().lock();
    writeln!(out, "status: {}", purchase.status)?;
    if let Some(paid) = purchase.paid {
        writeln!(out, "paid: {paid} (atomic units) from {}", buyer.address())?;
    }
    match &purchase.session {
        Some(x402_buyer::SessionUse::Opened {
            offer, remaining, ..
        }) => writeln!(out, "session: bought `{offer}`, {remaining} calls left")?,
        Some(x402_buyer::SessionUse::Redeemed { remaining, .. }) => {
            writeln!(out, "session: redeemed, {remaining} calls left")?;
        }
        Some(_) | None => {}
    }
    match &purchase.receipt {
        Some(receipt) => writeln!(out, "receipt: {}", serde_json::to_string_pretty(receipt)?)?,
        None => writeln!(out, "receipt: none")?,
    }
    writeln!(out)?;
    out.write_all(&purchase.body)?;
    writeln!(out)?;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error, then each cause: `x402-buyer: http request failed:
            // error sending request ...`.
            let mut stderr = std::io::stderr().lock();
            let _ = write!(stderr, "x402-buyer: {e}");
            let mut cause = e.source();
            while let Some(e) = cause {
                let _ = write!(stderr, ": {e}");
                cause = e.source();
            }
            let _ = writeln!(stderr);
            ExitCode::FAILURE
        }
    }
}
