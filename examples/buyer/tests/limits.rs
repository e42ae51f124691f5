//! The buyer's limits, against a tiny x402 seller on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod seller;

use std::{sync::atomic::Ordering, time::Duration};

use alloy_primitives::U256;
use axum::http::StatusCode;
use seller::*;
use x402_buyer::{
    AtomicAmount, Buyer, BuyerError, Challenge, ConfigError, DeclinedOffer, PaymentPayload,
    PrivateKeySigner, Refusal,
};
use x402_core::{
    evm::{eip3009_domain, EvmPayload},
    network,
    proto::X402Version,
};

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
    assert_eq!(refused, Refusal::AssetNotAllowed(addr(OTHER_ASSET)));
    assert_nothing_signed(&buyer, &seller);
}

#[tokio::test]
async fn refuses_other_recipient_without_signing() {
    let seller = start(both(&[row(PRICE, USDC, OTHER_PAY_TO, NETWORK)])).await;
    let buyer = builder(&seller).build().unwrap();
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(refused, Refusal::RecipientNotAllowed(addr(OTHER_PAY_TO)));
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
        Err(BuyerError::Config(ConfigError::MissingMaxPerCall))
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
    let refused = refusal(buyer.get(&seller.url("/paid")).await);
    assert_eq!(
        refused,
        Refusal::NoAcceptableOffer {
            declined: vec![
                DeclinedOffer {
                    index: 0,
                    refusal: Refusal::NetworkNotAllowed("eip155:8453".into()),
                },
                DeclinedOffer {
                    index: 1,
                    refusal: Refusal::OverPerCallCap {
                        amount: AtomicAmount::from(PRICE * 100),
                        cap: AtomicAmount::from(PRICE),
                    },
                },
            ],
        }
    );
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
    let refused = buyer.get(&seller.url("/paid")).await;
    let Err(BuyerError::PaymentRefused {
        status,
        reason,
        receipt,
    }) = refused
    else {
        panic!("expected PaymentRefused, got {refused:?}");
    };
    assert_eq!(status, 402);
    assert_eq!(reason.as_deref(), Some("insufficient_funds"));
    assert!(!receipt.unwrap().success);
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
        assert!(
            matches!(&built, Err(BuyerError::Config(ConfigError::InvalidOrigin(o))) if o == origin),
            "{origin}"
        );
    }
    let built = Buyer::builder(PrivateKeySigner::random())
        .allow_network("no-such-chain")
        .max_per_call(AtomicAmount::from(PRICE))
        .build();
    assert!(matches!(
        built,
        Err(BuyerError::Config(ConfigError::UnknownNetwork(n))) if n == "no-such-chain"
    ));
}
