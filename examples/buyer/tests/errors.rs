//! The buyer's errors from what a server sends, against a tiny x402 seller
//! on 127.0.0.1: an unreadable 402, a 402 without an acceptable offer, a
//! refused payment, an unreadable receipt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod seller;

use axum::http::StatusCode;
use seller::*;
use x402_buyer::{AtomicAmount, BuyerError, ChallengeError, Refusal};
use x402_core::{challenge, codec, proto::JsonObject};

#[tokio::test]
async fn a_402_without_a_challenge_is_challenge_missing() {
    let mut config = both(&[]);
    config.header = None;
    config.body = serde_json::json!({"error": "nope"});
    let seller = start(config).await;
    let buyer = builder(&seller).build().unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            result,
            Err(BuyerError::ChallengeMissing {
                body_over_limit: false
            })
        ),
        "{result:?}"
    );
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn a_malformed_402_header_is_a_malformed_challenge() {
    for header in ["not base64!", "bm90IGpzb24=", "e30="] {
        let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
        config.header = Some(header.into());
        let seller = start(config).await;
        let buyer = builder(&seller).build().unwrap();
        let result = buyer.get(&seller.url("/paid")).await;
        assert!(
            matches!(
                result,
                Err(BuyerError::MalformedChallenge(ChallengeError::Header(_)))
            ),
            "{header}: {result:?}"
        );
        assert_nothing_signed(&buyer, &seller);
    }
}

#[tokio::test]
async fn a_malformed_v1_body_is_a_malformed_challenge() {
    let mut config = v1_only(&[]);
    config.body = serde_json::json!({"x402Version": 1, "accepts": [{"scheme": "exact"}]});
    let seller = start(config).await;
    let buyer = builder(&seller).build().unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            result,
            Err(BuyerError::MalformedChallenge(ChallengeError::V1Body(_)))
        ),
        "{result:?}"
    );
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn a_402_without_offers_has_no_acceptable_offer() {
    for config in [v2_only(&[]), v1_only(&[])] {
        let seller = start(config).await;
        let buyer = builder(&seller).build().unwrap();
        let refused = refusal(buyer.get(&seller.url("/paid")).await);
        assert_eq!(refused, Refusal::NoAcceptableOffer { declined: vec![] });
        assert_nothing_signed(&buyer, &seller);
    }
}

#[tokio::test]
async fn a_402_answering_the_payment_is_payment_refused_with_its_reason() {
    // No receipt: the reason is the new challenge's `error`.
    let mut config = v2_only(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.paid_status = StatusCode::PAYMENT_REQUIRED;
    config.receipt = ReceiptHeader::Absent;
    let refusal = challenge::payment_required(
        &resource(),
        &[row(PRICE, USDC, PAY_TO, NETWORK)],
        &JsonObject::new(),
        "invalid_exact_evm_payload_signature",
    );
    config.paid_challenge = Some(codec::encode(&refusal).unwrap());
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            &result,
            Err(BuyerError::PaymentRefused { status: 402, reason: Some(reason), receipt: None })
                if reason == "invalid_exact_evm_payload_signature"
        ),
        "{result:?}"
    );
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);

    // Neither a receipt nor a challenge: refused, no reason; budget released.
    seller.config.lock().unwrap().paid_challenge = None;
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            result,
            Err(BuyerError::PaymentRefused {
                status: 402,
                reason: None,
                receipt: None
            })
        ),
        "{result:?}"
    );
    assert_eq!(buyer.signatures_made(), 2);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
}

#[tokio::test]
async fn a_failed_receipt_on_a_success_is_payment_refused() {
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.settle = false;
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            &result,
            Err(BuyerError::PaymentRefused { status: 200, reason: Some(reason), receipt: Some(r) })
                if reason == "insufficient_funds" && !r.success
        ),
        "{result:?}"
    );
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
    // Released: the budget still covers a call.
    seller.config.lock().unwrap().settle = true;
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.paid, Some(AtomicAmount::from(PRICE)));
}

#[tokio::test]
async fn a_malformed_receipt_is_bad_receipt_and_stays_reserved() {
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.receipt = ReceiptHeader::Raw("not base64!");
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let result = buyer.get(&seller.url("/paid")).await;
    assert!(
        matches!(
            result,
            Err(BuyerError::BadReceipt(codec::DecodeError::NotBase64))
        ),
        "{result:?}"
    );
    assert_eq!(buyer.signatures_made(), 1);
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
    // The seller may have settled: the amount is still reserved.
    seller.config.lock().unwrap().receipt = ReceiptHeader::Encoded;
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(
        refused,
        Refusal::OverBudget {
            amount: AtomicAmount::from(PRICE),
            remaining: AtomicAmount::ZERO,
        }
    );
    assert_eq!(buyer.signatures_made(), 1);
}

#[tokio::test]
async fn a_paid_call_answered_without_a_receipt_is_not_charged() {
    let mut config = both(&[row(PRICE, USDC, PAY_TO, NETWORK)]);
    config.paid_status = StatusCode::INTERNAL_SERVER_ERROR;
    config.receipt = ReceiptHeader::Absent;
    let seller = start(config).await;
    let buyer = builder(&seller)
        .max_total(AtomicAmount::from(PRICE))
        .build()
        .unwrap();
    let purchase = buyer.get(&seller.url("/paid")).await.unwrap();
    assert_eq!(purchase.status, 500);
    assert_eq!(purchase.paid, None);
    assert!(purchase.receipt.is_none() && purchase.payment.is_some());
    assert_eq!(buyer.spent(), AtomicAmount::ZERO);
}
