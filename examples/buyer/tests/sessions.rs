//! Prepaid sessions, buyer side, against a real seller: an axum app behind
//! `x402_axum::PaywallLayer` over an `x402_core::Engine`, with the facilitator
//! stand-in of `x402_core::testing`, which says valid and settled and counts
//! settlements.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use axum::{routing::get, Router};
use x402_axum::PaywallLayer;
use x402_buyer::{
    Address, AtomicAmount, Buyer, BuyerBuilder, PaymentPayload, PrivateKeySigner, Purchase,
    SessionUse,
};
use x402_core::{session::SessionOffer, testing::StandIn, Engine, Offer, Route};

const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const OTHER_PAY_TO: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const NETWORK: &str = "eip155:84532";
/// $0.001 per call.
const PER_CALL: u64 = 1_000;
/// $0.005 for ten calls.
const SESSION: u64 = 5_000;
const CALLS: u64 = 10;

struct Seller {
    base: String,
    facilitator: Arc<StandIn>,
}

impl Seller {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn settles(&self) -> usize {
        self.facilitator.settle_calls()
    }
}

/// A seller of `/api` at $0.001 per call, or a session of ten calls for
/// `session_price` paid to `session_pay_to`.
async fn start(session_price: &str, session_pay_to: &str) -> Seller {
    let facilitator = Arc::new(StandIn::new());
    let engine = Engine::builder(facilitator.clone())
        .route(
            Route::get("/api")
                .offer(Offer::exact(NETWORK, "$0.001", PAY_TO))
                .session(
                    SessionOffer::new("ten", CALLS, Duration::from_secs(600), "api")
                        .offer(Offer::exact(NETWORK, session_price, session_pay_to)),
                ),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/api", get(|| async { "the paid content" }))
        .layer(PaywallLayer::new(engine));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Seller { base, facilitator }
}

fn addr(s: &str) -> Address {
    s.parse().unwrap()
}

/// A buyer allowed exactly the seller's terms, with a per-call cap of $0.01.
fn builder(seller: &Seller) -> BuyerBuilder {
    Buyer::builder(PrivateKeySigner::random())
        .allow_network(NETWORK)
        .allow_asset(addr(USDC))
        .allow_recipient(addr(PAY_TO))
        .allow_origin(seller.base.clone())
        .max_per_call(AtomicAmount::from(10_000u64))
}

/// The amount and recipient of the payment a purchase sent.
fn paid_row(purchase: &Purchase) -> (AtomicAmount, String) {
    match purchase.payment.as_ref().expect("a payment was sent") {
        PaymentPayload::V2(p) => (p.accepted.amount, p.accepted.pay_to.clone()),
        PaymentPayload::V1(_) => panic!("sessions are v2"),
    }
}

fn remaining_header(purchase: &Purchase) -> u64 {
    purchase.headers["x-payment-session-remaining"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Asserts a per-call purchase: paid $0.001, no session.
fn assert_per_call(purchase: &Purchase) {
    assert_eq!(purchase.status, 200);
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PER_CALL)));
    assert_eq!(purchase.session, None);
    assert_eq!(paid_row(purchase).0, AtomicAmount::from(PER_CALL));
    assert!(!purchase.headers.contains_key("x-payment-session"));
}

#[tokio::test]
async fn buys_a_session_for_ten_calls_redeems_it_then_buys_again() {
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller).planned_calls(CALLS).build().unwrap();
    let url = seller.url("/api");

    // 1: the session is bought (one signature, one settlement).
    let first = buyer.get(&url).await.unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(&first.body[..], b"the paid content");
    assert_eq!(first.paid, Some(AtomicAmount::from(SESSION)));
    assert_eq!(
        paid_row(&first),
        (AtomicAmount::from(SESSION), PAY_TO.into())
    );
    assert_eq!(
        first.session,
        Some(SessionUse::Opened {
            offer: "ten".into(),
            scope: "api".into(),
            remaining: CALLS - 1,
            ttl: Duration::from_secs(600),
        })
    );
    assert_eq!(remaining_header(&first), CALLS - 1);
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(seller.settles(), 1);
    assert_eq!(buyer.sessions_held(), 1);

    // The token is never shown by Debug.
    let token = first.headers["x-payment-session"].to_str().unwrap();
    assert_eq!(token.len(), 64);
    assert!(!format!("{first:?}").contains(token));
    assert!(!format!("{buyer:?}").contains(token));

    // 2..=10: redeemed, nothing signed, nothing settled, nothing charged.
    for expected in (0..CALLS - 1).rev() {
        let purchase = buyer.get(&url).await.unwrap();
        assert_eq!(purchase.status, 200);
        assert_eq!(&purchase.body[..], b"the paid content");
        assert_eq!(purchase.paid, None);
        assert!(purchase.payment.is_none());
        assert!(purchase.challenge.is_none());
        assert_eq!(
            purchase.session,
            Some(SessionUse::Redeemed {
                scope: "api".into(),
                remaining: expected,
            })
        );
        assert_eq!(remaining_header(&purchase), expected);
    }
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(seller.settles(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::from(SESSION));

    // 11: the seller answers `session_exhausted`; the buyer drops the token
    // and buys a new session.
    let eleventh = buyer.get(&url).await.unwrap();
    assert_eq!(eleventh.status, 200);
    assert_eq!(
        eleventh.challenge.as_ref().and_then(|c| c.error()),
        Some("session_exhausted")
    );
    assert!(matches!(
        eleventh.session,
        Some(SessionUse::Opened { remaining, .. }) if remaining == CALLS - 1
    ));
    assert_eq!(buyer.signatures_made(), 2);
    assert_eq!(seller.settles(), 2);
    assert_eq!(buyer.spent(), AtomicAmount::from(2 * SESSION));
    assert_eq!(buyer.sessions_held(), 1);
}

#[tokio::test]
async fn pays_per_call_when_the_session_costs_more() {
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller).planned_calls(2).build().unwrap();
    for calls in 1..=2 {
        let purchase = buyer.get(&seller.url("/api")).await.unwrap();
        assert_per_call(&purchase);
        assert_eq!(buyer.signatures_made(), calls);
        assert_eq!(seller.settles(), calls as usize);
    }
    assert_eq!(buyer.sessions_held(), 0);
    assert_eq!(buyer.spent(), AtomicAmount::from(2 * PER_CALL));
}

#[tokio::test]
async fn a_tie_pays_per_call() {
    // Five calls at $0.001 cost exactly the $0.005 session.
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller).build().unwrap();
    let purchase = buyer.get_planned(&seller.url("/api"), 5).await.unwrap();
    assert_per_call(&purchase);
    assert_eq!(buyer.sessions_held(), 0);
}

#[tokio::test]
async fn get_planned_overrides_the_default_plan() {
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller).build().unwrap();
    let url = seller.url("/api");
    // Default (one planned call): per call.
    assert_per_call(&buyer.get(&url).await.unwrap());
    // Ten planned calls: the session; then the default `get` redeems it.
    let opened = buyer.get_planned(&url, CALLS).await.unwrap();
    assert!(matches!(opened.session, Some(SessionUse::Opened { .. })));
    let redeemed = buyer.get(&url).await.unwrap();
    assert!(matches!(
        redeemed.session,
        Some(SessionUse::Redeemed { remaining, .. }) if remaining == CALLS - 2
    ));
    assert_eq!(buyer.signatures_made(), 2);
    assert_eq!(seller.settles(), 2);
}

#[tokio::test]
async fn a_session_over_the_per_call_cap_is_not_bought() {
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller)
        .max_per_call(AtomicAmount::from(SESSION - 1))
        .planned_calls(CALLS)
        .build()
        .unwrap();
    for _ in 0..2 {
        assert_per_call(&buyer.get(&seller.url("/api")).await.unwrap());
    }
    assert_eq!(buyer.signatures_made(), 2);
    assert_eq!(seller.settles(), 2);
    assert_eq!(buyer.sessions_held(), 0);
}

#[tokio::test]
async fn an_out_of_policy_session_row_is_ignored() {
    // The session would be cheaper, but it pays a recipient not allowed.
    let seller = start("$0.002", OTHER_PAY_TO).await;
    let buyer = builder(&seller).planned_calls(CALLS).build().unwrap();
    let purchase = buyer.get(&seller.url("/api")).await.unwrap();
    assert_per_call(&purchase);
    assert_eq!(paid_row(&purchase).1, PAY_TO);
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(buyer.sessions_held(), 0);
}

#[tokio::test]
async fn a_session_over_the_remaining_budget_falls_back_to_per_call() {
    let seller = start("$0.005", PAY_TO).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(SESSION - 1))
        .planned_calls(CALLS)
        .build()
        .unwrap();
    assert_per_call(&buyer.get(&seller.url("/api")).await.unwrap());
    assert_eq!(buyer.spent(), AtomicAmount::from(PER_CALL));
    assert_eq!(buyer.sessions_held(), 0);
}

#[tokio::test]
async fn concurrent_calls_buy_one_session() {
    let seller = start("$0.005", PAY_TO).await;
    // The budget holds one session and nothing more.
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(SESSION))
        .planned_calls(CALLS)
        .build()
        .unwrap();
    let url = seller.url("/api");
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let buyer = buyer.clone();
            let url = url.clone();
            tokio::spawn(async move { buyer.get(&url).await })
        })
        .collect();
    let mut opened = 0;
    let mut remaining = Vec::new();
    for call in calls {
        let purchase = call.await.unwrap().unwrap();
        assert_eq!(purchase.status, 200);
        match purchase.session {
            Some(SessionUse::Opened { remaining: r, .. }) => {
                opened += 1;
                remaining.push(r);
            }
            Some(SessionUse::Redeemed { remaining: r, .. }) => remaining.push(r),
            other => panic!("every call used the session, got {other:?}"),
        }
    }
    assert_eq!(opened, 1);
    remaining.sort_unstable();
    assert_eq!(remaining, vec![5, 6, 7, 8, 9]);
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(seller.settles(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::from(SESSION));
}
