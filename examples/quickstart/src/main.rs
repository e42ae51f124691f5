//! Quickstart: `cargo run -p quickstart`.
//!
//! Runs the example paid API (`examples/paid-api`) offline on the in-memory
//! dev ledger, gives a demo buyer some fake testnet USDC, buys one call from
//! the API with the careful buyer (`examples/buyer`) and shows every step:
//! the 402 challenge, the signed payment, the receipt and the balances. Then
//! it keeps serving so you can try it with curl (ctrl-c to stop).
//!
//! `QUICKSTART_EXIT_AFTER_DEMO=1` exits after the demo purchase (tests).
//! Nothing here touches a real chain or real money.

use std::{
    error::Error,
    io::{self, Write},
    net::{Ipv4Addr, SocketAddr},
};

use paid_api::{AppState, Config};
use serde_json::Value;
use x402_buyer::{AtomicAmount, Buyer, Challenge, PrivateKeySigner, Purchase};

/// The port to try first; the next free one is used if it is taken.
const FIRST_PORT: u16 = paid_api::DEFAULT_PORT;
/// What the demo buyer starts with on the dev ledger: 1 USDC (6 decimals).
const DEMO_FUNDS: u64 = 1_000_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut out = io::stdout();

    // 1. The seller: paid-api on the dev ledger (offline, fake balances).
    let listener = bind_first_free(FIRST_PORT).await?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    let config = Config::dev().bound_to(addr);
    let (app, state) = paid_api::app(config).await?;
    let server = tokio::spawn(paid_api::serve(listener, app, state.clone()));
    writeln!(
        out,
        "Server listening on {base} (dev ledger: offline, fake testnet USDC)"
    )?;

    // 2. The buyer: a throwaway key, funded on the dev ledger.
    let signer = PrivateKeySigner::random();
    let buyer_address = signer.address();
    state.fund(buyer_address, DEMO_FUNDS)?;
    // A careful buyer pays only this network, asset, recipient and origin,
    // and at most 0.01 USDC per call, 0.10 in total.
    let buyer = Buyer::builder(signer)
        .allow_network(state.network())
        .allow_asset(state.asset().address)
        .allow_recipient(state.pay_to())
        .allow_origin(&base)
        .max_per_call(AtomicAmount::from(10_000u64))
        .max_total(AtomicAmount::from(100_000u64))
        .build()?;

    // 3. The purchase.
    let url = format!("{base}/exact/evm/eip3009");
    section(&mut out, "Balances before")?;
    balances(&mut out, &state, buyer_address)?;
    writeln!(out, "\nBuying GET {url} ...")?;
    let purchase = buyer
        .get(&url)
        .await
        .map_err(|e| format!("the demo purchase failed: {}", causes(&e)))?;
    report(&mut out, &purchase)?;
    section(&mut out, "Balances after")?;
    balances(&mut out, &state, buyer_address)?;
    if purchase.paid.is_none() {
        return Err(format!("the demo purchase failed (HTTP {})", purchase.status).into());
    }

    if std::env::var_os("QUICKSTART_EXIT_AFTER_DEMO").is_some_and(|v| v == "1") {
        state.shutdown();
        server.await??;
        return Ok(());
    }

    // 4. Keep serving.
    section(&mut out, "Try it yourself")?;
    writeln!(out, "  curl -i {base}/health")?;
    writeln!(
        out,
        "  curl -i {base}/exact/evm/eip3009      # 402: pay $0.001 (exact)"
    )?;
    writeln!(
        out,
        "  curl -i {base}/upto/evm/permit2       # 402: pay up to 2000 atomic units (upto)"
    )?;
    writeln!(
        out,
        "  curl -i {base}/session/demo           # 402: $0.001, or 100 calls for $0.05"
    )?;
    writeln!(
        out,
        "  curl -s -D - -o /dev/null {base}/exact/evm/eip3009 | grep -i payment-required"
    )?;
    writeln!(
        out,
        "  curl -X POST {base}/close              # stop the server"
    )?;
    writeln!(out, "\nServing until ctrl-c or POST /close.")?;
    server.await??;
    Ok(())
}

/// Binds 127.0.0.1 on `first` or the next free port.
async fn bind_first_free(first: u16) -> io::Result<tokio::net::TcpListener> {
    let mut last = None;
    for port in first..first.saturating_add(20) {
        match tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, port))).await {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free port")))
}

fn section(out: &mut impl Write, title: &str) -> io::Result<()> {
    writeln!(out, "\n== {title} ==")
}

fn balances(out: &mut impl Write, state: &AppState, buyer: x402_buyer::Address) -> io::Result<()> {
    for (who, address) in [("buyer ", buyer), ("seller", state.pay_to())] {
        let balance = state.dev_balance(address).unwrap_or_default();
        writeln!(out, "  {who} {address}: {balance} atomic units")?;
    }
    Ok(())
}

/// An error and its causes, `: `-separated (the buyer's errors keep their
/// causes in `source()`).
fn causes(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// Prints the challenge, the payment, the receipt and the body.
fn report(out: &mut impl Write, purchase: &Purchase) -> Result<(), Box<dyn Error>> {
    if let Some(challenge) = &purchase.challenge {
        let (title, json) = match challenge {
            Challenge::V2(c) => (
                "402 challenge (PAYMENT-REQUIRED header, decoded)",
                serde_json::to_value(c)?,
            ),
            Challenge::V1(c) => ("402 challenge (v1 body)", serde_json::to_value(c)?),
        };
        section(out, title)?;
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
    }
    if let Some(payment) = &purchase.payment {
        let mut json = serde_json::to_value(payment)?;
        abbreviate_signature(&mut json);
        section(out, "Payment (PAYMENT-SIGNATURE header, decoded)")?;
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
    }
    if let Some(receipt) = &purchase.receipt {
        section(out, "Receipt (PAYMENT-RESPONSE header, decoded)")?;
        writeln!(out, "{}", serde_json::to_string_pretty(receipt)?)?;
    }
    section(out, &format!("Response: HTTP {}", purchase.status))?;
    writeln!(out, "{}", String::from_utf8_lossy(&purchase.body))?;
    Ok(())
}

/// Shortens `payload.signature` for display (`0x1234abcd…ef01`).
fn abbreviate_signature(payment: &mut Value) {
    if let Some(Value::String(signature)) = payment.pointer_mut("/payload/signature") {
        if signature.len() > 16 {
            let short = format!("{}…{}", &signature[..10], &signature[signature.len() - 4..]);
            *signature = short;
        }
    }
}
