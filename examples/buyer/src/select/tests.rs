#![allow(clippy::unwrap_used, clippy::panic)]

use x402_core::proto::{v2, JsonObject, Version};

use super::*;

const USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
const NETWORK: &str = "eip155:84532";
const CAP: u64 = 10_000;

fn row(amount: u64) -> v2::PaymentRequirements {
    let mut extra = JsonObject::new();
    extra.insert("name".into(), "USDC".into());
    extra.insert("version".into(), "2".into());
    v2::PaymentRequirements {
        scheme: "exact".into(),
        network: NETWORK.into(),
        amount: AtomicAmount::from(amount),
        asset: USDC.into(),
        pay_to: PAY_TO.into(),
        max_timeout_seconds: 300,
        extra,
        other: JsonObject::new(),
    }
}

fn challenge(accepts: Vec<v2::PaymentRequirements>) -> Challenge {
    Challenge::V2(v2::PaymentRequired {
        x402_version: Version,
        error: Some("payment_required".into()),
        resource: v2::ResourceInfo {
            url: "http://127.0.0.1/paid".into(),
            description: String::new(),
            mime_type: String::new(),
        },
        accepts,
        extensions: JsonObject::new(),
    })
}

fn limits() -> Limits {
    Limits {
        networks: Some(vec![NETWORK.into()]),
        assets: Some(vec![USDC.parse().unwrap()]),
        recipients: Some(vec![PAY_TO.parse().unwrap()]),
        origins: Some(vec!["http://127.0.0.1".into()]),
        max_per_call: AtomicAmount::from(CAP),
    }
}

fn url() -> Url {
    "http://127.0.0.1/paid".parse().unwrap()
}

/// A change to an offer.
type Edit = Box<dyn FnOnce(&mut v2::PaymentRequirements)>;

/// The refusal of a one-offer challenge whose row is `edit`ed.
fn refusal_of(edit: impl FnOnce(&mut v2::PaymentRequirements)) -> Refusal {
    let mut offered = row(CAP);
    edit(&mut offered);
    let budget = Budget::new(None);
    let chosen = limits().choose(&budget, &challenge(vec![offered]), &url());
    match chosen {
        Err(refusal) => refusal,
        Ok((offer, _)) => panic!("expected a refusal, got {offer:?}"),
    }
}

#[test]
fn an_acceptable_offer_is_chosen_and_reserved() {
    let budget = Budget::new(Some(AtomicAmount::from(CAP)));
    let (offer, reservation) = limits()
        .choose(&budget, &challenge(vec![row(CAP)]), &url())
        .unwrap();
    assert_eq!(offer.amount, AtomicAmount::from(CAP));
    assert_eq!(offer.chain_id, 84532);
    assert_eq!((offer.name.as_str(), offer.version.as_str()), ("USDC", "2"));
    assert!(matches!(&offer.terms, Terms::V2 { accepted, .. } if *accepted == row(CAP)));
    // The reservation holds the whole budget until it is resolved.
    assert!(matches!(
        budget.reserve(AtomicAmount::from(1u64)),
        Err(Refusal::OverBudget { .. })
    ));
    reservation.commit();
    assert_eq!(budget.spent(), AtomicAmount::from(CAP));
}

#[test]
fn an_amount_over_the_per_call_cap_is_refused() {
    assert_eq!(
        refusal_of(|r| r.amount = AtomicAmount::from(CAP + 1)),
        Refusal::OverPerCallCap {
            amount: AtomicAmount::from(CAP + 1),
            cap: AtomicAmount::from(CAP),
        }
    );
}

#[test]
fn an_amount_over_the_budget_is_refused() {
    let budget = Budget::new(Some(AtomicAmount::from(CAP - 1)));
    let refused = limits()
        .choose(&budget, &challenge(vec![row(CAP)]), &url())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        refused,
        Refusal::OverBudget {
            amount: AtomicAmount::from(CAP),
            remaining: AtomicAmount::from(CAP - 1),
        }
    );
}

#[test]
fn offers_this_buyer_cannot_sign_are_unsupported() {
    let cases: Vec<(Edit, UnsupportedOffer)> = vec![
        (
            Box::new(|r| r.scheme = "upto".into()),
            UnsupportedOffer::Scheme("upto".into()),
        ),
        (
            Box::new(|r| r.network = "solana:mainnet".into()),
            UnsupportedOffer::Network("solana:mainnet".into()),
        ),
        (
            Box::new(|r| {
                r.extra
                    .insert("assetTransferMethod".into(), "permit2".into());
            }),
            UnsupportedOffer::TransferMethod("permit2".into()),
        ),
        (
            Box::new(|r| r.asset = "usdc".into()),
            UnsupportedOffer::InvalidAsset("usdc".into()),
        ),
        (
            Box::new(|r| r.pay_to = "0x12".into()),
            UnsupportedOffer::InvalidPayTo("0x12".into()),
        ),
        (
            Box::new(|r| {
                r.extra.remove("version");
            }),
            UnsupportedOffer::MissingDomain,
        ),
    ];
    for (edit, expected) in cases {
        assert_eq!(refusal_of(edit), Refusal::Unsupported(expected));
    }
    // `eip3009` said out loud is fine.
    let mut explicit = row(CAP);
    explicit
        .extra
        .insert("assetTransferMethod".into(), "eip3009".into());
    let challenge = challenge(vec![explicit]);
    assert!(limits().check(&challenge.rows()[0]).is_ok());
}

#[test]
fn offers_outside_the_allow_lists_are_refused() {
    let other: Address = "0x857b06519E91e3A54538791bDbb0E22373e36b66"
        .parse()
        .unwrap();
    assert_eq!(
        refusal_of(|r| r.network = "eip155:8453".into()),
        Refusal::NetworkNotAllowed("eip155:8453".into())
    );
    assert_eq!(
        refusal_of(|r| r.asset = other.to_string()),
        Refusal::AssetNotAllowed(other)
    );
    assert_eq!(
        refusal_of(|r| r.pay_to = other.to_string().to_lowercase()),
        Refusal::RecipientNotAllowed(other)
    );
    let budget = Budget::new(None);
    let elsewhere: Url = "https://example.com/paid".parse().unwrap();
    let refused = limits()
        .choose(&budget, &challenge(vec![row(CAP)]), &elsewhere)
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        refused,
        Refusal::OriginNotAllowed("https://example.com".into())
    );
}

#[test]
fn a_challenge_without_offers_has_no_acceptable_offer() {
    let budget = Budget::new(None);
    let refused = limits()
        .choose(&budget, &challenge(vec![]), &url())
        .map(|_| ())
        .unwrap_err();
    assert_eq!(refused, Refusal::NoAcceptableOffer { declined: vec![] });
}

#[test]
fn mixed_refusals_list_every_offer() {
    let mut elsewhere = row(CAP);
    elsewhere.network = "eip155:8453".into();
    let budget = Budget::new(None);
    let refused = limits()
        .choose(&budget, &challenge(vec![elsewhere, row(CAP * 2)]), &url())
        .map(|_| ())
        .unwrap_err();
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
                        amount: AtomicAmount::from(CAP * 2),
                        cap: AtomicAmount::from(CAP),
                    },
                },
            ],
        }
    );
    // The same kind of reason for every offer: the first offer's.
    let refused = limits()
        .choose(
            &budget,
            &challenge(vec![row(CAP * 3), row(CAP * 2)]),
            &url(),
        )
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(refused, Refusal::OverPerCallCap { amount, .. } if amount == AtomicAmount::from(CAP * 3)),
        "{refused:?}"
    );
}

#[test]
fn without_session_offers_the_plan_is_per_call() {
    let plan = limits()
        .plan(&challenge(vec![row(CAP)]), &url(), Vec::new(), 10)
        .unwrap();
    assert!(matches!(plan, Plan::PerCall));
}
