//! `upto` routes (DESIGN §5) through every adapter: the handler reports the
//! call's cost through the meter its framework hands it, or through the
//! `Settlement-Overrides` response header; the settle request carries the
//! charge, capped at the ceiling; a zero charge settles nothing.

use serde_json::{json, Value};

use super::{capability_builder, CEILING, METERED};
use crate::{
    handler::Usage,
    standin::UPTO_FACILITATOR,
    suite::{assert_challenge, assert_exposes},
    Adapter, Fixture, Reply, PAYER, PAY_TO, SECRET, TX_HASH, USDC_BASE_SEPOLIA,
};

async fn fixture<A: Adapter>() -> Fixture {
    Fixture::with_engine::<A>(|standin| capability_builder(standin.facilitator())).await
}

/// The requirement [`METERED`] offers, checked: `upto` with the ceiling as
/// its amount, in v2 only.
async fn upto_row(f: &Fixture) -> Value {
    let reply = f.get(METERED, &[]).await;
    assert_challenge(&reply, "payment_required");
    let v2 = reply.payment_required();
    assert_eq!(
        v2["accepts"],
        json!([{
            "scheme": "upto",
            "network": "eip155:84532",
            "amount": CEILING,
            "asset": USDC_BASE_SEPOLIA,
            "payTo": PAY_TO,
            "maxTimeoutSeconds": 300,
            "extra": v2["accepts"][0]["extra"],
        }])
    );
    let row = v2["accepts"][0].clone();
    assert_eq!(row["extra"]["facilitatorAddress"], UPTO_FACILITATOR);
    assert_eq!(row["extra"]["assetTransferMethod"], "permit2");
    let v1 = reply.json();
    assert!(
        v1["accepts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["scheme"] != "upto"),
        "upto rows are v2 only: {v1}"
    );
    row
}

/// Pays [`METERED`] for `row` with the handler reporting `usage`.
async fn pay(f: &Fixture, row: &Value, usage: Usage) -> Reply {
    f.handler.set_usage(usage);
    f.pay_row(METERED, row).await
}

/// A served metered call charged `amount`: the handler's body, a receipt
/// naming the amount, no `Settlement-Overrides` left in the response.
#[track_caller]
fn assert_charged(reply: &Reply, amount: &str) {
    reply.assert_status(200);
    assert_eq!(reply.json()["secret"], SECRET);
    assert_eq!(reply.json()["payer"], PAYER);
    assert!(
        reply.header("settlement-overrides").is_none(),
        "Settlement-Overrides leaked to the client"
    );
    let receipt = reply.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["network"], "eip155:84532");
    assert_eq!(receipt["amount"], amount, "receipt amount");
    let transaction = if amount == "0" { "" } else { TX_HASH };
    assert_eq!(receipt["transaction"], transaction);
    assert_exposes(reply);
}

/// The `paymentRequirements` of every `/settle` request: `row` with the
/// charge as its amount, and nothing else changed.
#[track_caller]
fn assert_settled(f: &Fixture, row: &Value, amounts: &[&str]) {
    let requests = f.standin.settle_requests();
    let sent: Vec<&Value> = requests.iter().map(|r| &r["paymentRequirements"]).collect();
    let expected: Vec<Value> = amounts
        .iter()
        .map(|amount| {
            let mut requirement = row.clone();
            requirement["amount"] = json!(amount);
            requirement
        })
        .collect();
    assert_eq!(
        sent,
        expected.iter().collect::<Vec<_>>(),
        "settle requests' requirements"
    );
}

/// Scenario 17. The handler reports usage through the `Meter` its framework
/// hands it: charged what it reports, capped at the ceiling; zero settles
/// nothing and still gets a receipt of `"0"`.
pub async fn s17_upto_meter_handle<A: Adapter>() {
    let f = fixture::<A>().await;
    let row = upto_row(&f).await;

    let reply = pay(&f, &row, Usage::Meter(740)).await;
    assert_charged(&reply, "740");
    assert_eq!(
        reply.json()["ceiling"],
        CEILING,
        "the meter reached the handler with the ceiling"
    );
    // Verified against the ceiling the buyer authorised, settled for the use.
    assert_eq!(
        f.standin.verify_requests()[0]["paymentRequirements"],
        row,
        "verify got the ceiling"
    );
    assert_settled(&f, &row, &["740"]);
    f.standin.assert_calls(1, 1);

    // More than the ceiling: charged the ceiling.
    let reply = pay(&f, &row, Usage::Meter(1_000_000)).await;
    assert_charged(&reply, CEILING);
    assert_settled(&f, &row, &["740", CEILING]);
    f.standin.assert_calls(2, 2);

    // Nothing used: no /settle, a receipt of zero with no transaction.
    let reply = pay(&f, &row, Usage::Meter(0)).await;
    assert_charged(&reply, "0");
    f.standin.assert_calls(3, 2);

    // Reporting nothing at all is charged the ceiling.
    let reply = pay(&f, &row, Usage::Nothing).await;
    assert_charged(&reply, CEILING);
    assert_settled(&f, &row, &["740", CEILING, CEILING]);
    f.handler.assert_calls(4);
    f.standin.assert_calls(4, 3);

    // An exact route hands the handler no meter.
    f.handler.set_usage(Usage::Nothing);
    let exact = f.pay_v2("/paid").await;
    exact.assert_status(200);
    assert_eq!(exact.json()["ceiling"], Value::Null);
    assert_eq!(exact.decoded("payment-response").unwrap()["success"], true);
    f.handler.assert_calls(5);
    f.standin.assert_calls(5, 4);
}

/// Scenario 18. The handler reports usage through the `Settlement-Overrides`
/// response header in each form (atomic units, `N%` of the ceiling, `$x.yz`);
/// the header never reaches the client; a malformed one charges nothing.
pub async fn s18_upto_settlement_overrides<A: Adapter>() {
    let f = fixture::<A>().await;
    let row = upto_row(&f).await;
    let cases = [
        ("1000", "1000"),
        ("37%", "740"),
        ("$0.0015", "1500"),
        ("5000", CEILING),
        ("0", "0"),
    ];
    for (header, charged) in cases {
        let reply = pay(&f, &row, Usage::Override(header.into())).await;
        assert_charged(&reply, charged);
    }
    assert_settled(&f, &row, &["1000", "740", "1500", CEILING]);
    f.handler.assert_calls(5);
    f.standin.assert_calls(5, 4);

    // A value that is no amount: 500, nothing charged, nothing leaked.
    let reply = pay(&f, &row, Usage::Override("lots".into())).await;
    reply.assert_status(500);
    assert_eq!(
        reply.json(),
        json!({"error": "invalid_settlement_override"})
    );
    assert!(reply.header("settlement-overrides").is_none());
    assert!(reply.header("payment-response").is_none());
    assert!(!reply.leaks_secret());
    f.handler.assert_calls(6);
    f.standin.assert_calls(6, 4);
}
