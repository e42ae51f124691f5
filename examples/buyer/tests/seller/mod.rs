//! A tiny x402 seller on 127.0.0.1 for the buyer's tests: it answers a
//! configurable 402, records the payments it receives and answers them with
//! a configurable status, receipt and redirect.

// Each test binary uses a different part of the harness.
#![allow(dead_code)]

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};

use axum::{
    extract::State,
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    routing::any,
    Router,
};
use x402_buyer::{
    Address, AtomicAmount, Buyer, BuyerBuilder, BuyerError, PaymentPayload, PrivateKeySigner,
    Refusal, SettleResponse,
};
use x402_core::{
    challenge, codec,
    proto::{v2, JsonObject, X402Version},
};

pub(crate) const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
pub(crate) const OTHER_ASSET: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
pub(crate) const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
pub(crate) const OTHER_PAY_TO: &str = "0x857b06519E91e3A54538791bDbb0E22373e36b66";
pub(crate) const NETWORK: &str = "eip155:84532";
pub(crate) const PRICE: u64 = 10_000;

/// What the seller answers.
#[derive(Clone)]
pub(crate) struct Config {
    /// The `PAYMENT-REQUIRED` header of the 402, if any.
    pub(crate) header: Option<String>,
    /// The JSON body of the 402.
    pub(crate) body: serde_json::Value,
    /// The status of a paid request.
    pub(crate) paid_status: StatusCode,
    /// Whether a paid request gets a successful receipt.
    pub(crate) settle: bool,
    /// Whether a paid request is answered with a redirect.
    pub(crate) paid_redirect: bool,
    /// How long "settling" takes.
    pub(crate) settle_delay: Duration,
    /// What a paid request's receipt header says.
    pub(crate) receipt: ReceiptHeader,
    /// A `PAYMENT-REQUIRED` header on the answer to a paid request.
    pub(crate) paid_challenge: Option<String>,
}

/// The receipt header of a paid request's answer.
#[derive(Clone)]
pub(crate) enum ReceiptHeader {
    /// The encoded receipt.
    Encoded,
    /// This value, whatever it is.
    Raw(&'static str),
    /// No receipt header.
    Absent,
}

#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) payments: Mutex<Vec<(String, PaymentPayload)>>,
    pub(crate) payment_headers: AtomicUsize,
    pub(crate) requests: AtomicUsize,
    pub(crate) target_hits: AtomicUsize,
}

#[derive(Clone)]
pub(crate) struct Seller {
    pub(crate) config: Arc<Mutex<Config>>,
    pub(crate) seen: Arc<Seen>,
    pub(crate) base: String,
}

impl Seller {
    pub(crate) fn payments(&self) -> Vec<(String, PaymentPayload)> {
        self.seen.payments.lock().unwrap().clone()
    }

    pub(crate) fn payment_headers(&self) -> usize {
        self.seen.payment_headers.load(Ordering::SeqCst)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

pub(crate) fn row(
    amount: u64,
    asset: &str,
    pay_to: &str,
    network: &str,
) -> v2::PaymentRequirements {
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

pub(crate) fn resource() -> v2::ResourceInfo {
    v2::ResourceInfo {
        url: "http://127.0.0.1/paid".into(),
        description: "a test resource".into(),
        mime_type: "text/plain".into(),
    }
}

/// A 402 with the v2 header and the v1 body, as the seller crates send it.
pub(crate) fn both(accepts: &[v2::PaymentRequirements]) -> Config {
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
        receipt: ReceiptHeader::Encoded,
        paid_challenge: None,
    }
}

/// A v2-only 402 (`{}` body).
pub(crate) fn v2_only(accepts: &[v2::PaymentRequirements]) -> Config {
    Config {
        body: serde_json::json!({}),
        ..both(accepts)
    }
}

/// A v1-only 402 (no header).
pub(crate) fn v1_only(accepts: &[v2::PaymentRequirements]) -> Config {
    Config {
        header: None,
        ..both(accepts)
    }
}

pub(crate) async fn paid(State(seller): State<Seller>, headers: HeaderMap) -> Response {
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
        extension_responses: None,
    };
    let receipt_header = match version {
        X402Version::V1 => codec::X_PAYMENT_RESPONSE,
        X402Version::V2 => codec::PAYMENT_RESPONSE,
    };
    let mut response = (config.paid_status, "the paid content").into_response();
    let headers = response.headers_mut();
    match config.receipt {
        ReceiptHeader::Encoded => {
            let value = HeaderValue::from_str(&codec::encode(&receipt).unwrap()).unwrap();
            headers.insert(receipt_header, value);
        }
        ReceiptHeader::Raw(value) => {
            headers.insert(receipt_header, HeaderValue::from_static(value));
        }
        ReceiptHeader::Absent => {}
    }
    if let Some(challenge) = &config.paid_challenge {
        headers.insert(
            codec::PAYMENT_REQUIRED,
            HeaderValue::from_str(challenge).unwrap(),
        );
    }
    response
}

pub(crate) async fn target(State(seller): State<Seller>) -> &'static str {
    seller.seen.target_hits.fetch_add(1, Ordering::SeqCst);
    "redirect target"
}

pub(crate) async fn start(config: Config) -> Seller {
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

pub(crate) fn addr(s: &str) -> Address {
    s.parse().unwrap()
}

/// A buyer allowed exactly the test seller's terms.
pub(crate) fn builder(seller: &Seller) -> BuyerBuilder {
    Buyer::builder(PrivateKeySigner::random())
        .allow_network(NETWORK)
        .allow_asset(addr(USDC))
        .allow_recipient(addr(PAY_TO))
        .allow_origin(seller.base.clone())
        .max_per_call(AtomicAmount::from(PRICE))
}

pub(crate) fn refusal(result: Result<x402_buyer::Purchase, BuyerError>) -> Refusal {
    match result {
        Err(BuyerError::Refused(refusal)) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Asserts the buyer refused without signing and the seller saw no payment.
pub(crate) fn assert_nothing_signed(buyer: &Buyer, seller: &Seller) {
    assert_eq!(buyer.signatures_made(), 0);
    assert_eq!(seller.payment_headers(), 0);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
}
