//! The buyer's limits, against a tiny x402 seller on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use alloy_primitives::U256;
use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use x402_buyer::{
    Address, AtomicAmount, Buyer, BuyerBuilder, BuyerError, Challenge, PaymentPayload,
    PrivateKeySigner, Refusal, SettleResponse,
};
use x402_core::{
    challenge, codec,
    evm::{eip3009_domain, EvmPayload},
    network,
    proto::{v2, JsonObject, X402Version},
};

const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const OTHER_ASSET: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const OTHER_PAY_TO: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
const NETWORK: &str = "eip155:84532";
const PRICE: u64 = 10_000;

/// What the seller answers.
#[derive(Clone)]
struct Config {
    /// The `PAYMENT-REQUIRED` header of the 402, if any.
    header: Option<String>,
    /// The JSON body of the 402.
    body: serde_json::Value,
    /// The status of a paid request.
    paid_status: StatusCode,
    /// Whether a paid request gets a successful receipt.
    settle: bool,
    /// Whether a paid request is answered with a redirect.
    paid_redirect: bool,
    /// How long "settling" takes.
    settle_delay: Duration,
}

#[derive(Default)]
struct Seen {
    payments: Mutex<Vec<(String, PaymentPayload)>>,
    payment_headers: AtomicUsize,
    requests: AtomicUsize,
    target_hits: AtomicUsize,
}

#[derive(Clone)]
struct Seller {
    config: Arc<Mutex<Config>>,
    seen: Arc<Seen>,
    base: String,
}

impl Seller {
    fn payments(&self) -> Vec<(String, PaymentPayload)> {
        self.seen.payments.lock().unwrap().clone()
    }

    fn payment_headers(&self) -> usize {
        self.seen.payment_headers.load(Ordering::SeqCst)
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

fn row(amount: u64, asset: &str, pay_to: &str, network: &str) -> v2::PaymentRequirements {
    let mut extra = JsonObject::new();
    extra.insert("name".into(), "USDC".into());
    extra.insert("version".into(), "2".into());
    v2::PaymentRequirements {
        scheme: "exact".into(),
        network: network.into(),
        amount: AtomicAmount::from(amount),
        asset: asset.into(),
        pay_to: pay_to.into(),
        max_timeout_seconds: 300,
        extra,
        other: JsonObject::new(),
    }
}

fn resource() -> v2::ResourceInfo {
    v2::ResourceInfo {
        url: "http://127.0.0.1/paid".into(),
        description: "a test resource".into(),
        mime_type: "text/plain".into(),
    }
}

/// A 402 with the v2 header and the v1 body, as the seller crates send it.
fn both(accepts: &[v2::PaymentRequirements]) -> Config {
    let required =
        challenge::payment_required(&resource(), accepts, &JsonObject::new(), "payment_required");
    let body = challenge::v1_body(&resource(), accepts, None, "payment_required");
    Config {
        header: Some(codec::encode(&required).unwrap()),
        body: serde_json::to_value(body).unwrap(),
        paid_status: StatusCode::OK,
        settle: true,
        paid_redirect: false,
        settle_delay: Duration::ZERO,
    }
}

/// A v2-only 402 (`{}` body).
fn v2_only(accepts: &[v2::PaymentRequirements]) -> Config {
    Config {
        body: serde_json::json!({}),
        ..both(accepts)
    }
}

/// A v1-only 402 (no header).
fn v1_only(accepts: &[v2::PaymentRequirements]) -> Config {
    Config {
        header: None,
        ..both(accepts)
    }
}

async fn paid(State(seller): State<Seller>, headers: HeaderMap) -> Response {
    seller.seen.requests.fetch_add(1, Ordering::SeqCst);
    let config = seller.config.lock().unwrap().clone();
    let payment = [codec::PAYMENT_SIGNATURE, codec::X_PAYMENT]
        .into_iter()
        .find_map(|name| headers.get(&name).map(|v| (name, v.clone())));
    let Some((name, value)) = payment else {
        let mut response = (
            StatusCode::PAYMENT_REQUIRED,
            [(header::CONTENT_TYPE, "application/json")],
            config.body.to_string(),
        )
            .into_response();
        if let Some(h) = &config.header {
            response
                .headers_mut()
                .insert(codec::PAYMENT_REQUIRED, HeaderValue::from_str(h).unwrap());
        }
        return response;
    };
    seller.seen.payment_headers.fetch_add(1, Ordering::SeqCst);
    let payment = codec::decode_payment(value.as_bytes(), codec::DEFAULT_MAX_HEADER_BYTES)
        .expect("the buyer sent a decodable payment");
    let version = payment.version();
    let network = payment.network().to_owned();
    seller
        .seen
        .payments
        .lock()
        .unwrap()
        .push((name.as_str().to_owned(), payment));
    tokio::time::sleep(config.settle_delay).await;
    if config.paid_redirect {
        return (StatusCode::FOUND, [(header::LOCATION, "/target")]).into_response();
    }
    let receipt = SettleResponse {
        success: config.settle,
        error_reason: (!config.settle).then(|| "insufficient_funds".into()),
        error_message: None,
        payer: None,
        transaction: if config.settle {
            format!("0x{}", "ab".repeat(32))
        } else {
            String::new()
        },
        network,
        amount: None,
        extensions: None,
        extra: None,
    };
    let receipt_header = match version {
        X402Version::V1 => codec::X_PAYMENT_RESPONSE,
        X402Version::V2 => codec::PAYMENT_RESPONSE,
    };
    (
        config.paid_status,
        [(
            receipt_header,
            HeaderValue::from_str(&codec::encode(&receipt).unwrap()).unwrap(),
        )],
        "the paid content",
    )
        .into_response()
}

async fn target(State(seller): State<Seller>) -> &'static str {
    seller.seen.target_hits.fetch_add(1, Ordering::SeqCst);
    "redirect target"
}

async fn start(config: Config) -> Seller {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let seller = Seller {
        config: Arc::new(Mutex::new(config)),
        seen: Arc::default(),
        base: format!("http://{}", listener.local_addr().unwrap()),
    };
    let app = Router::new()
        .route("/paid", any(paid))
        .route("/target", any(target))
        .route(
            "/redirect",
            any(|| async { (StatusCode::FOUND, [(header::LOCATION, "/target")]) }),
        )
        .route("/free", any(|| async { "free content" }))
        .with_state(seller.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    seller
}

fn addr(s: &str) -> Address {
    s.parse().unwrap()
}

/// A buyer allowed exactly the test seller's terms.
fn builder(seller: &Seller) -> BuyerBuilder {
    Buyer::builder(PrivateKeySigner::random())
        .allow_network(NETWORK)
        .allow_asset(addr(USDC))
        .allow_recipient(addr(PAY_TO))
        .allow_origin(seller.base.clone())
        .max_per_call(AtomicAmount::from(PRICE))
}

fn refusal(result: Result<x402_buyer::Purchase, BuyerError>) -> Refusal {
    match result {
        Err(BuyerError::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Asserts the buyer refused without signing and the seller saw no payment.
fn assert_nothing_signed(buyer: &Buyer, seller: &Seller) {
    assert_eq!(buyer.signatures_made(), 0);
    assert_eq!(seller.payment_headers(), 0);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
}

#[tokio::test]
async fn refuses_over_per_call_cap_without_signing() {
    let seller = start(both(&[row(PRICE + 1, USDC, PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(
        refused,
        Refusal::OverPerCallCap {
            amount: AtomicAmount::from(PRICE + 1),
            cap: AtomicAmount::from(PRICE),
        }
    );
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_other_asset_without_signing() {
    let seller = start(both(&[row(PRICE, OTHER_ASSET, PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(refused, Refusal::AssetNotAllowed(OTHER_ASSET.into()));
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_other_recipient_without_signing() {
    let seller = start(both(&[row(PRICE, USDC, OTHER_PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(refused, Refusal::RecipientNotAllowed(OTHER_PAY_TO.into()));
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_other_network_without_signing() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, "eip155:8453")])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(refused, Refusal::NetworkNotAllowed("eip155:8453".into()));
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_other_origin_without_signing() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    let buyer = Buyer::builder(PrivateKeySigner::random())
        .allow_network(NETWORK)
        .allow_asset(addr(USDC))
        .allow_recipient(addr(PAY_TO))
        .allow_origin("http://127.0.0.1:1")
        .max_per_call(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(refused, Refusal::OriginNotAllowed(seller.base.clone()));
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_redirect_without_following_or_signing() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/redirect")).await);
    assert_eq!(
        refused,
        Refusal::Redirect {
            location: "/target".into()
        }
    );
    assert_eq!(seller.seen.target_hits.load(Ordering::SeqCst), 0);
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn empty_allow_lists_allow_nothing() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    let buyer = Buyer::builder(PrivateKeySigner::random())
        .max_per_call(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert!(
        matches!(refused, Refusal::OriginNotAllowed(_)),
        "{refused:?}"
    );
    let buyer = Buyer::builder(PrivateKeySigner::random())
        .allow_origin(seller.base.clone())
        .max_per_call(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert!(
        matches!(refused, Refusal::NetworkNotAllowed(_)),
        "{refused:?}"
    );
    assert_nothing_signed(&buyer, &seller);
    // And a per-call cap is required.
    assert!(matches!(
        Buyer::builder(PrivateKeySigner::random()).build(),
        Err(BuyerError::Config(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_cannot_overrun_the_budget() {
    // Settling is slow, so every call reads its 402 while the first payments
    // are still in flight: only reservations made before signing hold them.
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.settle_delay = Duration::from_millis(200);
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(3 * PRICE))
        .build()
        .unwrap();
    let url = seller.url("/paid");
    let calls = (0..10).map(|_| {
        let buyer = buyer.clone();
        let url = url.clone();
        tokio::spawn(async move { buyer.get(&url).await })
    });
    let mut paid = 0;
    let mut over_budget = 0;
    for call in calls.collect::<Vec<_>>() {
        match call.await.unwrap() {
            Ok(purchase) => {
                assert_eq!(purchase.status, 200);
                assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
                paid += 1;
            }
            Err(BuyerError::Refused(Refusal::OverBudget { .. })) => over_budget += 1,
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!((paid, over_budget), (3, 7));
    assert_eq!(buyer.signatures_made(), 3);
    assert_eq!(seller.payment_headers(), 3);
    assert_eq!(buyer.spent(), AtomicAmount::from(3 * PRICE));
}

#[tokio::test]
async fn pays_a_good_v2_challenge() {
    let offered = row(PRICE, USDC, PAY_TO, NETWORK);
    let seller = start(v2_only(std::slice::from_ref(&offered))).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();

    assert_eq!(purchase.status, 200);
    assert_eq!(&purchase.body[..], b"the paid content");
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
    let receipt = purchase.receipt.as_ref().expect("a receipt");
    assert!(receipt.success);
    assert_eq!(receipt.network, NETWORK);
    assert!(matches!(purchase.challenge, Some(Challenge::V2(_))));
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::from(PRICE));

    let payments = seller.payments();
    assert_eq!(payments.len(), 1);
    let (header_name, PaymentPayload::V2(payment)) = &payments[0] else {
        panic!("expected a v2 payment, got {:?}", payments[0]);
    };
    assert_eq!(header_name, "payment-signature");
    assert_eq!(payment.accepted, offered);
    assert_eq!(payment.resource.as_ref(), Some(&resource()));
    assert_eq!(purchase.payment, Some(PaymentPayload::V2(payment.clone())));

    let EvmPayload::Eip3009(exact) = EvmPayload::from_value(&payment.payload).unwrap() else {
        panic!("expected an EIP-3009 payload");
    };
    let domain = eip3009_domain("USDC", "2", 84532, addr(USDC));
    assert_eq!(exact.recover_signer(&domain).unwrap(), buyer.address());
    let auth = &exact.authorization;
    assert_eq!(auth.from, buyer.address());
    assert_eq!(auth.to, addr(PAY_TO));
    assert_eq!(auth.value, AtomicAmount::from(PRICE));
    assert!(auth.valid_after < auth.valid_before);
    assert_eq!(auth.valid_before - auth.valid_after, U256::from(300 + 600));

    // The budget is spent: the next call is refused before signing.
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert!(matches!(refused, Refusal::OverBudget { .. }), "{refused:?}");
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(seller.payment_headers(), 1);
}

#[tokio::test]
async fn pays_a_v1_only_challenge_with_x_payment() {
    let seller = start(v1_only(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    // v1 networks are matched through their CAIP-2 id.
    let buyer = builder(&seller).build().unwrap();
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.status, 200);
    assert!(matches!(purchase.challenge, Some(Challenge::V1(_))));
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
    let receipt = purchase.receipt.expect("an X-PAYMENT-RESPONSE receipt");
    assert_eq!(receipt.network, "base-sepolia");

    let payments = seller.payments();
    let (header_name, PaymentPayload::V1(payment)) = &payments[0] else {
        panic!("expected a v1 payment, got {:?}", payments[0]);
    };
    assert_eq!(header_name, "x-payment");
    assert_eq!(payment.scheme, "exact");
    assert_eq!(payment.network, "base-sepolia");
    let EvmPayload::Eip3009(exact) = EvmPayload::from_value(&payment.payload).unwrap() else {
        panic!("expected an EIP-3009 payload");
    };
    let chain_id = network::evm_chain_id("base-sepolia").unwrap();
    let domain = eip3009_domain("USDC", "2", chain_id, addr(USDC));
    assert_eq!(exact.recover_signer(&domain).unwrap(), buyer.address());
}

#[tokio::test]
async fn v2_is_preferred_unless_prefer_v1() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    let v2_buyer = builder(&seller).build().unwrap();
    let v1_buyer = builder(&seller).prefer_v1(true).build().unwrap();
    v2_buyer.get(&seller.url("/paid")).await.unwrap();
    v1_buyer.get(&seller.url("/paid")).await.unwrap();
    let versions: Vec<_> = seller.payments().iter().map(|(_, p)| p.version()).collect();
    assert_eq!(versions, [X402Version::V2, X402Version::V1]);
}

#[tokio::test]
async fn pays_the_first_acceptable_offer() {
    let good = row(PRICE, USDC, PAY_TO, NETWORK);
    let seller = start(v2_only(&[
        row(PRICE, USDC, PAY_TO, "eip155:8453"),
        row(PRICE * 100, USDC, PAY_TO, NETWORK),
        {
            let mut permit2 = good.clone();
            permit2
                .extra
                .insert("assetTransferMethod".into(), "permit2".into());
            permit2
        },
        good.clone(),
        row(PRICE - 1, USDC, PAY_TO, NETWORK),
    ]))
    .await;
    let buyer = builder(&seller).build().unwrap();
    buyer.get(&seller.url("/paid")).await.unwrap();
    let payments = seller.payments();
    let PaymentPayload::V2(payment) = &payments[0].1 else {
        panic!("expected v2");
    };
    assert_eq!(payment.accepted, good);
}

#[tokio::test]
async fn mixed_refusals_are_listed() {
    let seller = start(v2_only(&[
        row(PRICE, USDC, PAY_TO, "eip155:8453"),
        row(PRICE * 100, USDC, PAY_TO, NETWORK),
    ]))
    .await;
    let buyer = builder(&seller).build().unwrap();
    let Refusal::NoAcceptableOffer { reasons } = refusal(buyer.get(&seller.url("/paid")).await)
    else {
        panic!("expected NoAcceptableOffer");
    };
    assert_eq!(reasons.len(), 2);
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn free_resources_are_not_paid() {
    let seller = start(both(&[row(PRICE, USDC, PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let purchase = buyer.get(&seller.url("/free")).await.unwrap();
    assert_eq!(purchase.status, 200);
    assert_eq!(&purchase.body[..], b"free content");
    assert!(purchase.challenge.is_none() && purchase.payment.is_none());
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn redirect_after_paying_is_refused_and_the_budget_released() {
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.paid_redirect = true;
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert!(matches!(refused, Refusal::Redirect { .. }), "{refused:?}");
    assert_eq!(seller.seen.target_hits.load(Ordering::SeqCst), 0);
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);

    // The reservation was released: the budget still covers one call.
    seller.config.lock().unwrap().paid_redirect = false;
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
}

#[tokio::test]
async fn failed_settlement_releases_the_budget() {
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.paid_status = StatusCode::PAYMENT_REQUIRED;
    config.settle = false;
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.status, 402);
    assert_eq!(purchase.paid, None);
    assert!(!purchase.receipt.unwrap().success);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);

    {
        let mut config = seller.config.lock().unwrap();
        config.paid_status = StatusCode::OK;
        config.settle = true;
    }
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
    assert_eq!(buyer.spent(), AtomicAmount::from(PRICE));
    assert_eq!(buyer.signatures_made(), 2);
}

#[tokio::test]
async fn a_402_without_a_challenge_is_a_protocol_error() {
    let mut config = both(&[]);
    config.header = None;
    config.body = serde_json::json!({"error": "nope"});
    let seller = start(config).await;
    let buyer = builder(&seller).build().unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(matches!(result, Err(BuyerError::Protocol(_))), "{result:?}");
    assert_nothing_signed(&buyer, &seller);
}

#[test]
fn debug_never_shows_the_key() {
    let signer = PrivateKeySigner::random();
    let key = alloy_hex(&signer);
    let builder = Buyer::builder(signer)
        .allow_origin("http://127.0.0.1:4021")
        .max_per_call(AtomicAmount::from(PRICE));
    let builder_debug = format!("{builder:?}");
    let buyer = builder.build().unwrap();
    let buyer_debug = format!("{buyer:?}");
    for debug in [builder_debug, buyer_debug] {
        assert!(!debug.to_lowercase().contains(&key), "{debug}");
        assert!(debug.contains(&format!("{:?}", buyer.address())), "{debug}");
    }
}

fn alloy_hex(signer: &PrivateKeySigner) -> String {
    format!("{:x}", signer.to_bytes())
}

#[test]
fn bad_configuration_is_refused() {
    for origin in ["127.0.0.1:4021", "http://h/path", "ftp://h"] {
        let built = Buyer::builder(PrivateKeySigner::random())
            .allow_origin(origin)
            .max_per_call(AtomicAmount::from(PRICE))
            .build();
        assert!(matches!(built, Err(BuyerError::Config(_))), "{origin}");
    }
    let built = Buyer::builder(PrivateKeySigner::random())
        .allow_network("no-such-chain")
        .max_per_call(AtomicAmount::from(PRICE))
        .build();
    assert!(matches!(built, Err(BuyerError::Config(_))));
}
