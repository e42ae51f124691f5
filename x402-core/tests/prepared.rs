//! The engine writes a facilitator request's body once: `/verify` and
//! `/settle` are sent the same bytes (`PreparedRequest`); and the payments
//! of one offer share its requirement instead of copying it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use x402_core::{
    facilitator::{FacilitatorError, FacilitatorRouter, FailoverFacilitator},
    proto::{
        v2::PaymentRequired, FacilitatorRequest, PaymentRequirements, PreparedRequest,
        SettleResponse, SupportedResponse, VerifyResponse,
    },
    testing::{self, StandIn},
    Engine, Facilitator, Offer, Route,
};

const NETWORK: &str = "eip155:84532";

/// A stand-in that keeps the bodies the engine hands it.
struct Bodies {
    stand_in: StandIn,
    verify: Mutex<Vec<Bytes>>,
    settle: Mutex<Vec<Bytes>>,
    unprepared: Mutex<usize>,
    /// The requirement of every call, verify and settle, in order.
    requirements: Mutex<Vec<Arc<PaymentRequirements>>>,
}

impl Default for Bodies {
    fn default() -> Self {
        Self {
            // Listed, for a failover's members.
            stand_in: StandIn::new().supporting(NETWORK),
            verify: Mutex::default(),
            settle: Mutex::default(),
            unprepared: Mutex::default(),
            requirements: Mutex::default(),
        }
    }
}

impl Bodies {
    /// Keeps a prepared call's body in `bodies`, and its requirement.
    fn record(&self, bodies: &Mutex<Vec<Bytes>>, request: &PreparedRequest) {
        bodies.lock().unwrap().push(request.body().unwrap());
        self.requirements
            .lock()
            .unwrap()
            .push(request.payment_requirements.clone());
    }
}

#[async_trait]
impl Facilitator for Bodies {
    async fn verify(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        *self.unprepared.lock().unwrap() += 1;
        self.stand_in.verify(request).await
    }

    async fn settle(
        &self,
        request: &FacilitatorRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        *self.unprepared.lock().unwrap() += 1;
        self.stand_in.settle(request).await
    }

    async fn verify_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<VerifyResponse, FacilitatorError> {
        self.record(&self.verify, request);
        self.stand_in.verify(request).await
    }

    async fn settle_prepared(
        &self,
        request: &PreparedRequest,
    ) -> Result<SettleResponse, FacilitatorError> {
        self.record(&self.settle, request);
        self.stand_in.settle(request).await
    }

    async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> {
        self.stand_in.supported().await
    }
}

/// `GET /report`, paid `exact` on [`NETWORK`].
fn report() -> Route {
    Route::get("/report").offer(Offer::exact(NETWORK, "$0.001", testing::PAY_TO))
}

/// An engine with `route` through `facilitator`, and the challenge of its
/// `GET /report`.
async fn engine_and_challenge(
    facilitator: impl Facilitator,
    route: Route,
) -> (Engine, PaymentRequired) {
    let engine = Engine::builder(facilitator).route(route).build().unwrap();
    let challenge = testing::challenge(&engine, Request::get("/report").body(()).unwrap()).await;
    (engine, challenge)
}

/// One new payment of `challenge`'s first requirement, served.
async fn pay_once(engine: &Engine, challenge: &PaymentRequired) {
    let request = Request::get("/report")
        .header("payment-signature", testing::payment(&challenge.accepts[0]))
        .body(String::new())
        .unwrap();
    let response = testing::serve(engine, request, |_| async {
        Response::new(String::from("the report"))
    })
    .await;
    assert_eq!(response.status(), StatusCode::OK);
}

/// One paid request through an engine whose facilitator is `facilitator`,
/// and what `bodies` (inside it) was handed.
async fn pay_through(facilitator: impl Facilitator, bodies: &Bodies) {
    let (engine, challenge) = engine_and_challenge(facilitator, report()).await;
    pay_once(&engine, &challenge).await;

    let verify = bodies.verify.lock().unwrap().clone();
    let settle = bodies.settle.lock().unwrap().clone();
    assert_eq!((verify.len(), settle.len()), (1, 1));
    // The same bytes, written once: the settle call shares the verify
    // call's buffer.
    assert_eq!(verify[0], settle[0]);
    assert_eq!(verify[0].as_ptr(), settle[0].as_ptr());
    // And they are the request's JSON.
    let body: serde_json::Value = serde_json::from_slice(&verify[0]).unwrap();
    assert_eq!(body["x402Version"], 2);
    assert_eq!(
        body["paymentRequirements"],
        serde_json::to_value(&challenge.accepts[0]).unwrap()
    );
    // The engine did not fall back to the unprepared calls.
    assert_eq!(*bodies.unprepared.lock().unwrap(), 0);
}

#[tokio::test]
async fn verify_and_settle_are_sent_one_body() {
    let bodies = Arc::new(Bodies::default());
    pay_through(bodies.clone(), &bodies).await;
}

#[tokio::test]
async fn a_failover_and_a_router_hand_their_members_the_prepared_body() {
    let bodies = Arc::new(Bodies::default());
    let failover = FailoverFacilitator::builder()
        .member("only", bodies.clone())
        .build()
        .unwrap();
    pay_through(failover, &bodies).await;

    let bodies = Arc::new(Bodies::default());
    pay_through(FacilitatorRouter::new().fallback(bodies.clone()), &bodies).await;
}

#[tokio::test]
async fn the_payments_of_one_offer_share_its_requirement() {
    let bodies = Arc::new(Bodies::default());
    let (engine, challenge) = engine_and_challenge(bodies.clone(), report()).await;
    for _ in 0..3 {
        pay_once(&engine, &challenge).await;
    }
    let requirements = bodies.requirements.lock().unwrap().clone();
    // Three verify and three settle calls, all handed the one requirement.
    assert_eq!(requirements.len(), 6);
    assert!(
        requirements
            .iter()
            .all(|r| Arc::ptr_eq(r, &requirements[0])),
        "a requirement was copied"
    );
    // The offer's own, as the challenge advertised it.
    let PaymentRequirements::V2(shared) = &*requirements[0] else {
        panic!("a version 2 requirement")
    };
    assert_eq!(shared, &challenge.accepts[0]);
}

#[tokio::test]
async fn a_settle_first_route_hands_the_facilitator_its_upfront_requirement() {
    let bodies = Arc::new(Bodies::default());
    let (engine, challenge) =
        engine_and_challenge(bodies.clone(), report().settle_before_handler()).await;
    assert_eq!(challenge.accepts[0].extra["paymentFlow"], "upfront");
    pay_once(&engine, &challenge).await;
    let requirements = bodies.requirements.lock().unwrap().clone();
    assert_eq!(requirements.len(), 2);
    for sent in &requirements {
        let PaymentRequirements::V2(sent) = &**sent else {
            panic!("a version 2 requirement")
        };
        // The requirement the challenge advertised, flow included.
        assert_eq!(sent, &challenge.accepts[0]);
    }
}
