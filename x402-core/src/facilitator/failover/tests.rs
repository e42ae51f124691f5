//! The failover's choices with in-process members (the HTTP cases, with
//! real servers, are in the tests crate's `facilitator_failover.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use super::*;
use crate::testing::{SettleAnswer, StandIn, VerifyAnswer};

const NETWORK: &str = "eip155:84532";

fn request(extra: Value, nonce: u8) -> FacilitatorRequest {
    let mut accepted = json!({
        "scheme": "exact", "network": NETWORK, "amount": "10000",
        "asset": "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
        "payTo": crate::testing::PAY_TO, "maxTimeoutSeconds": 300,
    });
    accepted["extra"] = extra;
    serde_json::from_value(json!({
        "x402Version": 2,
        "paymentPayload": {
            "x402Version": 2, "accepted": accepted,
            "payload": {"signature": "0x01", "authorization": {"nonce": format!("0x{nonce:02x}")}},
        },
        "paymentRequirements": accepted,
    }))
    .unwrap()
}

fn member() -> Arc<StandIn> {
    Arc::new(StandIn::new().supporting(NETWORK))
}

/// A clock moved by hand.
#[derive(Clone, Default)]
struct Hand(Arc<AtomicU64>);

impl Hand {
    fn clock(&self, start: Instant) -> impl Fn() -> Instant + Send + Sync + 'static {
        let offset = self.0.clone();
        move || start + Duration::from_millis(offset.load(Ordering::SeqCst))
    }

    fn advance(&self, by: Duration) {
        self.0
            .fetch_add(u64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
    }
}

#[test]
fn what_proves_nothing_was_sent() {
    let unrouted = FacilitatorError::Unrouted {
        scheme: "exact".into(),
        network: NETWORK.into(),
    };
    assert!(unrouted.never_sent());
    assert!(other(FailoverError::AllOpen).never_sent());
    assert!(other(FailoverError::NotSent(FacilitatorError::Timeout)).never_sent());
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert!(FacilitatorError::Transport(Box::new(refused)).never_sent());

    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    assert!(!FacilitatorError::Transport(Box::new(reset)).never_sent());
    assert!(!FacilitatorError::Timeout.never_sent());
    assert!(!FacilitatorError::Malformed("x".into()).never_sent());
    let status = FacilitatorError::Status {
        status: 500,
        message: None,
    };
    assert!(!status.never_sent());
    let custom = std::io::Error::other("refused, says the text");
    assert!(
        !FacilitatorError::Other(crate::facilitator::OtherError(Arc::new(custom))).never_sent()
    );
}

#[test]
fn build_checks_the_settings() {
    let err = |b: FailoverFacilitatorBuilder| b.build().unwrap_err();
    assert_eq!(
        err(FailoverFacilitator::builder()),
        FailoverConfigError::NoMembers
    );
    assert_eq!(
        err(FailoverFacilitator::builder()
            .member("a", member())
            .member("a", member())),
        FailoverConfigError::DuplicateName("a".into())
    );
    assert_eq!(
        err(FailoverFacilitator::builder().member(" ", member())),
        FailoverConfigError::EmptyName
    );
    assert_eq!(
        err(FailoverFacilitator::builder()
            .member("a", member())
            .failure_threshold(0)),
        FailoverConfigError::ZeroThreshold
    );
    assert!(matches!(
        err(FailoverFacilitator::builder()
            .member("a", member())
            .failure_rate(0, 20)),
        FailoverConfigError::InvalidFailureRate { .. }
    ));
    assert!(matches!(
        err(FailoverFacilitator::builder()
            .member("a", member())
            .failure_rate(50, 0)),
        FailoverConfigError::InvalidFailureRate { .. }
    ));
}

#[test]
fn a_named_signer_must_be_the_members() {
    let supported: SupportedResponse = serde_json::from_value(json!({
        "kinds": [{"x402Version": 2, "scheme": "exact", "network": "eip155:*",
                   "extra": {"feePayer": "0xAbC"}}],
        "signers": {"eip155:*": ["0xdef"]},
    }))
    .unwrap();
    assert!(lists(&supported, &request(json!({}), 1)));
    assert!(lists(&supported, &request(json!({"feePayer": "0xabc"}), 1)));
    assert!(lists(&supported, &request(json!({"feePayer": "0xDEF"}), 1)));
    assert!(!lists(
        &supported,
        &request(json!({"feePayer": "0x999"}), 1)
    ));
    assert!(!lists(
        &supported,
        &request(json!({"facilitatorAddress": 7}), 1)
    ));
    assert!(!lists(
        &SupportedResponse::default(),
        &request(json!({}), 1)
    ));
}

#[tokio::test]
async fn verify_moves_on_and_settle_follows_the_verifier() {
    let (first, second) = (member(), member());
    let failover = FailoverFacilitator::builder()
        .member("first", first.clone())
        .member("second", second.clone())
        .build()
        .unwrap();
    first.set_verify(VerifyAnswer::Unavailable);
    let req = request(json!({}), 1);
    assert!(failover.verify(&req).await.unwrap().is_valid);
    first.assert_calls(1, 0);
    second.assert_calls(1, 0);

    // The first member answers again, but the payment was verified by the
    // second: it settles there.
    first.set_verify(VerifyAnswer::Valid);
    assert!(failover.settle(&req).await.unwrap().success);
    first.assert_calls(1, 0);
    second.assert_calls(1, 1);

    // An invalid verdict is final.
    first.set_verify(VerifyAnswer::Invalid("insufficient_funds".into()));
    let verdict = failover.verify(&request(json!({}), 2)).await.unwrap();
    assert_eq!(
        verdict.invalid_reason.as_deref(),
        Some("insufficient_funds")
    );
    first.assert_calls(2, 0);
    second.assert_calls(1, 1);
}

#[tokio::test]
async fn an_unknown_settlement_is_not_sent_elsewhere() {
    let (first, second) = (member(), member());
    let failover = FailoverFacilitator::builder()
        .member("first", first.clone())
        .member("second", second.clone())
        .build()
        .unwrap();
    let req = request(json!({}), 1);
    assert!(failover.verify(&req).await.unwrap().is_valid);
    first.set_settle(SettleAnswer::Unavailable);
    let error = failover.settle(&req).await.unwrap_err();
    assert!(matches!(error, FacilitatorError::Timeout), "{error:?}");
    assert!(!error.never_sent());
    first.assert_calls(1, 1);
    second.assert_calls(0, 0);

    // A refusal is an answer: final too.
    first.set_settle(SettleAnswer::Refused("insufficient_funds".into()));
    let answer = failover.settle(&request(json!({}), 2)).await.unwrap();
    assert!(!answer.success);
    first.assert_calls(1, 2);
    second.assert_calls(0, 0);
}

#[tokio::test]
async fn members_that_do_not_list_the_kind_are_skipped() {
    let lists_nothing = Arc::new(StandIn::new());
    let lists_it = member();
    let failover = FailoverFacilitator::builder()
        .member("nothing", lists_nothing.clone())
        .member("it", lists_it.clone())
        .failure_threshold(1)
        .build()
        .unwrap();
    for nonce in 0..3 {
        let req = request(json!({}), nonce);
        assert!(failover.verify(&req).await.unwrap().is_valid);
        assert!(failover.settle(&req).await.unwrap().success);
    }
    lists_nothing.assert_calls(0, 0);
    lists_it.assert_calls(3, 3);
    // Not listing a kind is no failure.
    assert_eq!(failover.members()[0].state, BreakerState::Closed);

    let only_nothing = FailoverFacilitator::builder()
        .member("nothing", lists_nothing)
        .build()
        .unwrap();
    let error = only_nothing
        .verify(&request(json!({}), 9))
        .await
        .unwrap_err();
    assert!(
        matches!(error, FacilitatorError::Unrouted { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_breaker_opens_half_opens_and_closes() {
    let (first, second) = (member(), member());
    let hand = Hand::default();
    let failover = FailoverFacilitator::builder()
        .member("first", first.clone())
        .member("second", second.clone())
        .failure_threshold(2)
        .cool_down(Duration::from_secs(10))
        .clock(hand.clock(Instant::now()))
        .build()
        .unwrap();
    first.set_verify(VerifyAnswer::Unavailable);
    for nonce in 0..5 {
        assert!(
            failover
                .verify(&request(json!({}), nonce))
                .await
                .unwrap()
                .is_valid
        );
    }
    first.assert_calls(2, 0);
    second.assert_calls(5, 0);
    let status = &failover.members()[0];
    assert_eq!(status.state, BreakerState::Open);
    assert_eq!(status.consecutive_failures, 2);
    assert_eq!(status.last_error, Some(FacilitatorErrorKind::Timeout));

    // Open: not asked, not even for /supported.
    let supported_calls = first.supported_calls();
    assert_eq!(failover.supported().await.unwrap().kinds.len(), 2);
    assert_eq!(first.supported_calls(), supported_calls);

    // After the cool-down, one probe; it fails: open again.
    hand.advance(Duration::from_secs(10));
    assert_eq!(failover.members()[0].state, BreakerState::HalfOpen);
    assert!(
        failover
            .verify(&request(json!({}), 10))
            .await
            .unwrap()
            .is_valid
    );
    first.assert_calls(3, 0);
    assert!(
        failover
            .verify(&request(json!({}), 11))
            .await
            .unwrap()
            .is_valid
    );
    first.assert_calls(3, 0);
    assert_eq!(failover.members()[0].state, BreakerState::Open);

    // Recovered: the next probe closes it, and it is the primary again.
    first.set_verify(VerifyAnswer::Valid);
    hand.advance(Duration::from_secs(10));
    for nonce in 20..23 {
        assert!(
            failover
                .verify(&request(json!({}), nonce))
                .await
                .unwrap()
                .is_valid
        );
    }
    first.assert_calls(6, 0);
    second.assert_calls(7, 0);
    assert_eq!(failover.members()[0].state, BreakerState::Closed);
    assert_eq!(failover.members()[0].consecutive_failures, 0);
}

#[tokio::test]
async fn all_open_fails_without_a_call() {
    let only = member();
    let failover = FailoverFacilitator::builder()
        .member("only", only.clone())
        .failure_threshold(1)
        .build()
        .unwrap();
    only.set_verify(VerifyAnswer::Unavailable);
    let req = request(json!({}), 1);
    assert!(matches!(
        failover.verify(&req).await.unwrap_err(),
        FacilitatorError::Timeout
    ));
    let error = failover.verify(&req).await.unwrap_err();
    assert!(error.never_sent(), "{error:?}");
    assert!(
        error.to_string().contains("open circuit breaker"),
        "{error}"
    );
    let error = failover.settle(&req).await.unwrap_err();
    assert!(error.never_sent(), "{error:?}");
    only.assert_calls(1, 0);
    assert!(failover.supported().await.unwrap_err().never_sent());
}

#[tokio::test]
async fn supported_and_health_merge_in_member_order() {
    let first = Arc::new(
        StandIn::new().with_supported(
            serde_json::from_value(json!({
                "kinds": [{"x402Version": 2, "scheme": "upto", "network": NETWORK,
                           "extra": {"facilitatorAddress": "0x01"}}],
                "signers": {"eip155:*": ["0x01"]},
            }))
            .unwrap(),
        ),
    );
    let second = member();
    let down = Arc::new(StandIn::new().supported_down());
    let failover = FailoverFacilitator::builder()
        .member("first", first)
        .member("down", down)
        .member("second", second)
        .build()
        .unwrap();
    let merged = failover.supported().await.unwrap();
    let kinds: Vec<_> = merged
        .kinds
        .iter()
        .map(|k| {
            (
                k.scheme.as_str(),
                k.extra.as_ref().map(|e| e["facilitatorAddress"].clone()),
            )
        })
        .collect();
    assert_eq!(kinds, [("upto", Some(json!("0x01"))), ("exact", None),]);
    assert_eq!(merged.signers["eip155:*"], ["0x01"]);

    let health = failover.health().await;
    assert_eq!(health.supported.unwrap().kinds.len(), 2);
    let members = failover.member_health().await;
    let names: Vec<_> = members
        .iter()
        .map(|m| (m.status.name.as_str(), m.health.supported.is_ok()))
        .collect();
    assert_eq!(names, [("first", true), ("down", false), ("second", true)]);
}
