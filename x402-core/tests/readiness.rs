//! `Engine::readiness`: the facilitator's `/supported` against the offered
//! (network, scheme) pairs, when the facilitator last answered a payment
//! call, and the in-process facilitator's gas.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{sync::Arc, time::Duration};

use http::{Request, Response, StatusCode};
use serde_json::json;
use x402_core::{
    facilitator::{FacilitatorErrorKind, FacilitatorRouter},
    readiness::Readiness,
    route::RequestInfo,
    session::SessionOffer,
    testing::{self, StandIn, VerifyAnswer, PAY_TO},
    Engine, Offer, Route,
};

const NETWORK: &str = "eip155:84532";

fn engine(facilitator: Arc<StandIn>) -> Engine {
    Engine::builder_arc(facilitator)
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.01", PAY_TO)))
        .route(
            Route::get("/metered")
                .offer(Offer::upto(NETWORK, "2000", PAY_TO))
                .session(
                    SessionOffer::new("ten", 10, Duration::from_secs(3600), "metered")
                        .offer(Offer::exact(NETWORK, "$0.05", PAY_TO)),
                ),
        )
        .route(Route::post("/quote").dynamic_pricing(|_: RequestInfo| async { None::<Vec<Offer>> }))
        .build()
        .unwrap()
}

/// The (network, scheme, listed) of every offered pair.
fn pairs(readiness: &Readiness) -> Vec<(&str, &str, bool)> {
    readiness
        .offers
        .iter()
        .map(|o| (o.network.as_str(), o.scheme.as_str(), o.listed))
        .collect()
}

#[tokio::test]
async fn ready_when_every_offered_kind_is_listed() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
    let readiness = engine(facilitator.clone()).readiness().await;
    assert!(readiness.ready, "{readiness:?}");
    assert!(readiness.facilitator.reachable);
    assert_eq!(readiness.facilitator.probe_error, None);
    assert_eq!(
        pairs(&readiness),
        [(NETWORK, "exact", true), (NETWORK, "upto", true)]
    );
    // A session offer counts as an offer of its route.
    assert_eq!(readiness.offers[0].routes, ["GET /report", "GET /metered"]);
    assert_eq!(readiness.offers[1].routes, ["GET /metered"]);
    // Priced per request: nothing to look up before a request.
    assert_eq!(readiness.unchecked_routes, ["POST /quote"]);
    assert!(readiness.wallets.is_empty());
    assert_eq!(facilitator.supported_calls(), 1);

    let json = serde_json::to_value(&readiness).unwrap();
    assert_eq!(
        json,
        json!({
            "ready": true,
            "facilitator": {
                "reachable": true,
                "probeError": null,
                "lastAnsweredAt": null,
                "lastError": null,
            },
            "offers": [
                {"network": NETWORK, "scheme": "exact", "listed": true,
                 "routes": ["GET /report", "GET /metered"]},
                {"network": NETWORK, "scheme": "upto", "listed": true,
                 "routes": ["GET /metered"]},
            ],
            "uncheckedRoutes": ["POST /quote"],
            "wallets": [],
        })
    );
}

#[tokio::test]
async fn a_scheme_missing_from_supported_is_named_and_not_ready() {
    let supported = serde_json::from_value(json!({
        "kinds": [{"x402Version": 2, "scheme": "exact", "network": NETWORK}],
    }))
    .unwrap();
    let facilitator = Arc::new(StandIn::new().with_supported(supported));
    let readiness = engine(facilitator).readiness().await;
    assert!(!readiness.ready);
    assert!(readiness.facilitator.reachable);
    assert_eq!(
        pairs(&readiness),
        [(NETWORK, "exact", true), (NETWORK, "upto", false)]
    );
    let json = serde_json::to_value(&readiness).unwrap();
    assert_eq!(json["offers"][1]["scheme"], "upto");
    assert_eq!(json["offers"][1]["listed"], false);
    assert_eq!(json["offers"][1]["routes"], json!(["GET /metered"]));
}

#[tokio::test]
async fn a_facilitator_that_does_not_answer_is_not_ready() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK).supported_down());
    let readiness = engine(facilitator).readiness().await;
    assert!(!readiness.ready);
    assert!(!readiness.facilitator.reachable);
    assert_eq!(
        readiness.facilitator.probe_error,
        Some(FacilitatorErrorKind::Timeout)
    );
    // Nothing is listed without an answer.
    assert!(readiness.offers.iter().all(|o| !o.listed));
}

#[tokio::test]
async fn last_answered_is_set_by_payments_and_the_last_error_kept() {
    let facilitator = Arc::new(StandIn::new().supporting(NETWORK));
    let engine = engine(facilitator.clone());
    // The probe itself is not a payment call.
    let before = engine.readiness().await;
    assert_eq!(before.facilitator.last_answered_at, None);
    assert_eq!(before.facilitator.last_error, None);

    let started = unix_now();
    let challenge = testing::challenge(&engine, Request::get("/report").body(()).unwrap()).await;
    let pay = || {
        Request::get("/report")
            .header("payment-signature", testing::payment(&challenge.accepts[0]))
            .body(String::new())
            .unwrap()
    };
    let handler = |_: Request<String>| async { Response::new(String::from("paid")) };
    let response = testing::serve(&engine, pay(), handler).await;
    assert_eq!(response.status(), StatusCode::OK);
    facilitator.assert_calls(1, 1);

    let after = engine.readiness().await;
    let answered = after.facilitator.last_answered_at.expect("set by /verify");
    assert!(answered >= started && answered <= unix_now(), "{answered}");
    assert_eq!(after.facilitator.last_error, None);
    assert!(after.ready);

    // A /verify that gets no answer is reported, and leaves the last answer.
    facilitator.set_verify(VerifyAnswer::Unavailable);
    let response = testing::serve(&engine, pay(), handler).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    let failed = engine.readiness().await;
    assert_eq!(
        failed.facilitator.last_error,
        Some(FacilitatorErrorKind::Timeout)
    );
    assert_eq!(failed.facilitator.last_answered_at, Some(answered));
    let json = serde_json::to_value(&failed).unwrap();
    assert_eq!(json["facilitator"]["lastError"], "timeout");
    assert_eq!(json["facilitator"]["lastAnsweredAt"], answered);
    // /supported answers: the probe says ready (a drained instance must be
    // able to come back without payments).
    assert!(failed.ready);

    facilitator.set_verify(VerifyAnswer::Valid);
    testing::serve(&engine, pay(), handler).await;
    assert_eq!(engine.readiness().await.facilitator.last_error, None);
}

#[tokio::test]
async fn a_router_merges_its_facilitators_answers() {
    let evm = StandIn::new().supporting(NETWORK);
    let router = FacilitatorRouter::new()
        .route("eip155:*", "exact", evm)
        .fallback(StandIn::new().supporting(NETWORK).supported_down());
    let engine = Engine::builder(router)
        .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.01", PAY_TO)))
        .route(Route::get("/metered").offer(Offer::upto(NETWORK, "2000", PAY_TO)))
        .build()
        .unwrap();
    let readiness = engine.readiness().await;
    // The fallback, which would settle `upto`, is down.
    assert!(readiness.facilitator.reachable);
    assert_eq!(
        pairs(&readiness),
        [(NETWORK, "exact", true), (NETWORK, "upto", false)]
    );
    assert!(!readiness.ready);
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[cfg(feature = "local-facilitator")]
mod local {
    use alloy_primitives::{Address, U256};
    use async_trait::async_trait;
    use x402_core::local::{
        DevLedger, Ledger, LedgerError, LedgerState, LocalFacilitator, Transfer, TransferOutcome,
    };

    use super::*;

    /// The dev ledger, with a gas balance.
    #[derive(Debug)]
    struct Gas {
        dev: DevLedger,
        balance: Option<U256>,
    }

    #[async_trait]
    impl Ledger for Gas {
        fn signer(&self) -> Address {
            self.dev.signer()
        }

        fn check_network(&self, network: &str) -> Result<(), LedgerError> {
            self.dev.check_network(network)
        }

        async fn state(&self, transfer: &Transfer<'_>) -> Result<LedgerState, LedgerError> {
            self.dev.state(transfer).await
        }

        async fn transfer(&self, transfer: &Transfer<'_>) -> Result<TransferOutcome, LedgerError> {
            self.dev.transfer(transfer).await
        }

        async fn gas_balance(&self) -> Result<Option<U256>, LedgerError> {
            match self.balance {
                Some(balance) => Ok(Some(balance)),
                None => Err(LedgerError::Backend("node down".into())),
            }
        }
    }

    async fn readiness(facilitator: LocalFacilitator) -> Readiness {
        Engine::builder(facilitator)
            .route(Route::get("/report").offer(Offer::exact(NETWORK, "$0.01", PAY_TO)))
            .build()
            .unwrap()
            .readiness()
            .await
    }

    #[tokio::test]
    async fn the_dev_ledger_reports_no_wallet() {
        let facilitator = LocalFacilitator::builder(DevLedger::new())
            .network(NETWORK)
            .build()
            .unwrap();
        let readiness = readiness(facilitator).await;
        assert!(readiness.ready, "{readiness:?}");
        assert!(readiness.wallets.is_empty());
    }

    #[tokio::test]
    async fn low_or_unreadable_gas_is_not_ready() {
        let with = |balance: Option<u64>| {
            let ledger = Gas {
                dev: DevLedger::new(),
                balance: balance.map(U256::from),
            };
            LocalFacilitator::builder(ledger)
                .network(NETWORK)
                .low_gas_threshold(U256::from(1_000u64))
                .build()
                .unwrap()
        };
        let low = readiness(with(Some(999))).await;
        assert!(!low.ready);
        let wallet = serde_json::to_value(&low.wallets).unwrap();
        assert_eq!(
            wallet,
            json!([{
                "network": NETWORK,
                "address": x402_core::local::DEV_LEDGER_SIGNER.to_checksum(None),
                "balanceWei": "999",
                "lowGasThresholdWei": "1000",
                "lowGas": true,
            }])
        );

        let funded = readiness(with(Some(1_000))).await;
        assert!(funded.ready, "{funded:?}");
        assert!(!funded.wallets[0].low_gas);

        let unreadable = readiness(with(None)).await;
        assert!(!unreadable.ready);
        assert_eq!(unreadable.wallets[0].balance_wei, None);
        assert!(!unreadable.wallets[0].low_gas);
        assert_eq!(
            serde_json::to_value(&unreadable).unwrap()["wallets"][0]["balanceWei"],
            serde_json::Value::Null
        );
    }
}
