//! Prepaid sessions (DESIGN §6) through every adapter: open, redeem, give
//! back, exhaust.

use serde_json::{json, Value};

use super::{
    capability_builder, SESSION_CALLS, SESSION_OFFER, SESSION_PATH, SESSION_SCOPE, SESSION_TTL,
};
use crate::{
    handler::{HandlerMode, HANDLER_ERROR_BODY},
    payment,
    suite::{assert_challenge, assert_exposes},
    Adapter, Fixture, Reply, PAYER, PAY_TO, SECRET, TX_HASH, USDC_BASE_SEPOLIA,
};

/// The session offer [`SESSION_PATH`]'s challenge advertises, checked (v2
/// only, never in `accepts`); returns the requirement that buys it.
pub(crate) async fn session_row(f: &Fixture) -> Value {
    let reply = f.get(SESSION_PATH, &[]).await;
    assert_challenge(&reply, "payment_required");
    let v2 = reply.payment_required();
    let per_call = v2["accepts"].as_array().unwrap();
    assert_eq!(per_call.len(), 1, "session offers are never in accepts");
    assert_eq!(per_call[0]["amount"], "1000");
    let offers = &v2["extensions"]["session"]["info"]["offers"];
    assert_eq!(offers.as_array().map(Vec::len), Some(1), "{offers}");
    let offer = &offers[0];
    assert_eq!(offer["id"], SESSION_OFFER);
    assert_eq!(offer["calls"], SESSION_CALLS);
    assert_eq!(offer["ttlSeconds"], SESSION_TTL.as_secs());
    assert_eq!(offer["scope"], SESSION_SCOPE);
    let row = offer["accepts"][0].clone();
    assert_eq!(
        row,
        json!({
            "scheme": "exact",
            "network": "eip155:84532",
            "amount": "50000",
            "asset": USDC_BASE_SEPOLIA,
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": {"name": "USDC", "version": "2"}
        })
    );
    assert!(
        !reply.text().contains(SESSION_OFFER),
        "session offers are v2 only: {}",
        reply.text()
    );
    row
}

/// A call redeemed from a session: `GET SESSION_PATH` with the token.
async fn redeem(f: &Fixture, token: &str) -> Reply {
    f.get(SESSION_PATH, &[("X-PAYMENT-SESSION", token)]).await
}

/// A served session call: the handler's body, the remaining count, and no
/// settlement.
#[track_caller]
fn assert_redeemed(reply: &Reply, remaining: u64) {
    reply.assert_status(200);
    assert_eq!(reply.json()["secret"], SECRET);
    assert_eq!(reply.json()["sessionRemaining"], remaining);
    assert_eq!(
        reply.header("x-payment-session-remaining"),
        Some(remaining.to_string().as_str())
    );
    assert!(
        reply.header("x-payment-session").is_none(),
        "the token is shown once"
    );
    assert!(reply.header("payment-response").is_none(), "no settlement");
    assert_exposes(reply);
    assert_eq!(reply.header("cache-control"), Some("private"));
}

/// Scenario 19. A session bought with one payment (the opening call is the
/// first of the calls sold), redeemed with no facilitator call, a failed call
/// given back, then exhausted: the 402 challenge.
pub async fn s19_session_lifecycle<A: Adapter>() {
    let f = Fixture::with_engine::<A>(|standin| capability_builder(standin.facilitator())).await;
    let row = session_row(&f).await;

    // Open.
    let opened = f.pay_row(SESSION_PATH, &row).await;
    opened.assert_status(200);
    assert_eq!(opened.json()["secret"], SECRET);
    assert_eq!(opened.json()["payer"], PAYER);
    let receipt = opened.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["transaction"], TX_HASH);
    let token = opened
        .header("x-payment-session")
        .expect("X-PAYMENT-SESSION")
        .to_owned();
    assert_eq!(token.len(), 64, "{token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert_eq!(
        opened.header("x-payment-session-remaining"),
        Some((SESSION_CALLS - 1).to_string().as_str())
    );
    assert_exposes(&opened);
    assert_eq!(opened.header("cache-control"), Some("private"));
    assert_eq!(
        f.standin.settle_requests()[0]["paymentRequirements"],
        row,
        "settled the session's price"
    );
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    // Redeem: no payment, no facilitator.
    assert_redeemed(&redeem(&f, &token).await, 1);
    f.handler.assert_calls(2);
    f.standin.assert_calls(1, 1);

    // A failed call is given back: the handler's response, then the same
    // count left.
    f.handler.set_mode(HandlerMode::Error500);
    let failed = redeem(&f, &token).await;
    failed.assert_status(500);
    assert_eq!(failed.text(), HANDLER_ERROR_BODY);
    assert!(failed.header("payment-response").is_none());
    f.handler.set_mode(HandlerMode::Json);
    f.handler.assert_calls(3);
    assert_redeemed(&redeem(&f, &token).await, 0);
    f.handler.assert_calls(4);

    // Exhausted: the challenge, the handler does not run.
    let exhausted = redeem(&f, &token).await;
    assert_challenge(&exhausted, "session_exhausted");
    assert_eq!(
        exhausted.payment_required()["extensions"]["session"]["info"]["offers"][0]["id"],
        SESSION_OFFER,
        "the refusal offers a new session"
    );
    // An unknown token: the challenge too.
    let unknown = redeem(&f, &payment::random_hex(32)[2..]).await;
    assert_challenge(&unknown, "session_unknown");
    f.handler.assert_calls(4);
    f.standin.assert_calls(1, 1);
}
