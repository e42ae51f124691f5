//! Lifecycle hooks through the engine: each step's effect, registration
//! order, and failing closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use x402_core::{
    codec,
    facilitator::FacilitatorError,
    hooks::{
        AfterVerify, BeforeSettle, BeforeVerify, CancelReason, HookError, HookSteps,
        PaymentContext, PaymentHooks, ProtectedRequest, RequestContext,
    },
    proto::{SettleResponse, VerifyResponse},
    route::RequestView,
    testing::{self, SettleAnswer, StandIn, VerifyAnswer, PAYER},
    Completion, Decision, Engine, EngineBuilder, Offer, Route,
};

const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";

/// A facilitator that gives no answer to `verify`.
fn verify_down() -> StandIn {
    let facilitator = StandIn::new();
    facilitator.set_verify(VerifyAnswer::Unavailable);
    facilitator
}

/// A facilitator that gives no answer to `settle`.
fn settle_down() -> StandIn {
    let facilitator = StandIn::new();
    facilitator.set_settle(SettleAnswer::Unavailable);
    facilitator
}

/// What a scripted hook does at each step.
#[derive(Debug, Clone, Default)]
struct Script {
    protected: Option<ProtectedRequest>,
    before_verify: Option<BeforeVerify>,
    after_verify_abort: Option<String>,
    after_verify_error: Option<bool>,
    recover_verify: bool,
    before_settle_abort: Option<String>,
    recover_settle: bool,
    /// The steps the hook names (`None`: every step, the default).
    steps: Option<HookSteps>,
}

/// A hook that follows its script and logs every call as `name:step`.
#[derive(Debug)]
struct Scripted {
    name: &'static str,
    script: Script,
    log: Arc<Mutex<Vec<String>>>,
}

impl Scripted {
    fn log(&self, step: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}:{step}", self.name));
    }
}

#[derive(Debug, thiserror::Error)]
#[error("hook backend failed")]
struct Broken;

#[async_trait]
impl PaymentHooks for Scripted {
    fn steps(&self) -> HookSteps {
        self.script.steps.unwrap_or(HookSteps::ALL)
    }

    async fn on_protected_request(
        &self,
        _: &RequestContext<'_>,
    ) -> Result<ProtectedRequest, HookError> {
        self.log("protected");
        Ok(self
            .script
            .protected
            .clone()
            .unwrap_or(ProtectedRequest::Continue))
    }
    async fn before_verify(&self, _: &PaymentContext<'_>) -> Result<BeforeVerify, HookError> {
        self.log("before_verify");
        Ok(self
            .script
            .before_verify
            .clone()
            .unwrap_or(BeforeVerify::Continue))
    }
    async fn after_verify(
        &self,
        _: &PaymentContext<'_>,
        v: &VerifyResponse,
    ) -> Result<AfterVerify, HookError> {
        assert!(v.is_valid, "after_verify runs only after a valid verdict");
        self.log("after_verify");
        match self.script.after_verify_error {
            Some(true) => {
                return Err(HookError::Unavailable {
                    reason: "quota_unavailable",
                    retry_after: Duration::from_secs(7),
                    source: Some(Box::new(Broken)),
                })
            }
            Some(false) => return Err(HookError::Other(Box::new(Broken))),
            None => {}
        }
        Ok(match &self.script.after_verify_abort {
            Some(reason) => AfterVerify::Abort {
                reason: reason.clone(),
            },
            None => AfterVerify::Continue,
        })
    }
    async fn on_verify_failure(
        &self,
        _: &PaymentContext<'_>,
        _: &FacilitatorError,
    ) -> Option<VerifyResponse> {
        self.log("on_verify_failure");
        self.script
            .recover_verify
            .then(|| VerifyResponse::valid(PAYER))
    }
    async fn before_settle(&self, _: &PaymentContext<'_>) -> Result<BeforeSettle, HookError> {
        self.log("before_settle");
        Ok(match &self.script.before_settle_abort {
            Some(reason) => BeforeSettle::Abort {
                reason: reason.clone(),
            },
            None => BeforeSettle::Continue,
        })
    }
    async fn after_settle(&self, _: &PaymentContext<'_>, _: &SettleResponse) {
        self.log("after_settle");
    }
    async fn on_settle_failure(
        &self,
        ctx: &PaymentContext<'_>,
        _: &FacilitatorError,
    ) -> Option<SettleResponse> {
        self.log("on_settle_failure");
        self.script.recover_settle.then(|| SettleResponse {
            success: true,
            transaction: "0xrecovered".into(),
            network: ctx.network.into(),
            ..SettleResponse::default()
        })
    }
    async fn on_payment_canceled(&self, _: &PaymentContext<'_>, reason: CancelReason) {
        self.log(&format!("canceled({reason:?})"));
    }
}

struct Setup {
    engine: Engine,
    facilitator: Arc<StandIn>,
    log: Arc<Mutex<Vec<String>>>,
}

fn setup(facilitator: StandIn, scripts: Vec<(&'static str, Script)>) -> Setup {
    setup_with(facilitator, scripts, |b| b)
}

fn setup_with(
    facilitator: StandIn,
    scripts: Vec<(&'static str, Script)>,
    configure: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> Setup {
    let facilitator = Arc::new(facilitator);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut builder = configure(
        Engine::builder(facilitator.clone()).route(Route::get("/paid").offer(Offer::exact(
            "eip155:84532",
            "$0.01",
            PAY_TO,
        ))),
    );
    for (name, script) in scripts {
        builder = builder.hooks(Scripted {
            name,
            script,
            log: log.clone(),
        });
    }
    Setup {
        engine: builder.build().unwrap(),
        facilitator,
        log,
    }
}

/// A fresh v2 payment header for `/paid`'s offer.
async fn payment(engine: &Engine) -> String {
    let challenge = testing::challenge(engine, http::Request::get("/paid").body(()).unwrap()).await;
    testing::payment(&challenge.accepts[0])
}

async fn decide(engine: &Engine, header: Option<&str>) -> Decision {
    let mut builder = http::Request::get("/paid");
    if let Some(h) = header {
        builder = builder.header(codec::PAYMENT_SIGNATURE, h);
    }
    let (parts, ()) = builder.body(()).unwrap().into_parts();
    engine.process(RequestView::from_parts(&parts)).await
}

fn error_of(response: &x402_core::engine::EngineResponse) -> String {
    if let Some(h) = response.headers().get(codec::PAYMENT_REQUIRED) {
        let v: Value = codec::decode(h.as_bytes(), 1 << 16).unwrap();
        return v["error"].as_str().unwrap().to_owned();
    }
    let v: Value = serde_json::from_slice(response.body()).unwrap();
    v["error"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_protected_request_hook_grants_or_refuses_before_payment() {
    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                protected: Some(ProtectedRequest::GrantAccess),
                ..Script::default()
            },
        )],
    );
    assert!(matches!(decide(&s.engine, None).await, Decision::Pass));
    s.facilitator.assert_calls(0, 0);

    let refuse = ProtectedRequest::Refuse {
        status: StatusCode::FORBIDDEN,
        reason: "region_blocked".into(),
    };
    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                protected: Some(refuse),
                ..Script::default()
            },
        )],
    );
    let Decision::Respond(r) = decide(&s.engine, None).await else {
        panic!()
    };
    assert_eq!(r.status(), 403);
    assert_eq!(error_of(&r), "region_blocked");
    s.facilitator.assert_calls(0, 0);
}

#[tokio::test]
async fn before_verify_aborts_or_skips_the_facilitator() {
    let abort = BeforeVerify::Abort {
        reason: "payer_blocked".into(),
    };
    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                before_verify: Some(abort),
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(
        (r.status().as_u16(), error_of(&r)),
        (402, "payer_blocked".into())
    );
    s.facilitator.assert_calls(0, 0);

    let skip = BeforeVerify::Skip(VerifyResponse::valid(PAYER));
    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                before_verify: Some(skip),
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(s.facilitator.verify_calls(), 0, "skipped");
    assert!(matches!(
        paid.complete(StatusCode::OK, &mut HeaderMap::new()).await,
        Completion::Deliver
    ));
    s.facilitator.assert_calls(0, 1);
}

#[tokio::test]
async fn after_verify_refuses_by_its_own_rule_and_fails_closed() {
    let s = setup(
        StandIn::new(),
        vec![
            ("first", Script::default()),
            (
                "second",
                Script {
                    after_verify_abort: Some("daily_limit".into()),
                    ..Script::default()
                },
            ),
        ],
    );
    let header = payment(&s.engine).await;
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(
        (r.status().as_u16(), error_of(&r)),
        (402, "daily_limit".into())
    );
    let log = s.log.lock().unwrap().clone();
    // The hook that had accepted is told the payment will not proceed.
    assert!(
        log.contains(&"first:canceled(Refused)".to_owned()),
        "{log:?}"
    );

    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                after_verify_error: Some(true),
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "7");
    assert_eq!(error_of(&r), "quota_unavailable");

    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                after_verify_error: Some(false),
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(r.status(), 500);
    assert_eq!(error_of(&r), "internal_error");
    assert!(
        !String::from_utf8_lossy(r.body()).contains("backend"),
        "opaque 5xx"
    );
}

#[tokio::test]
async fn verify_failure_can_be_recovered() {
    let down = verify_down();
    let s = setup(
        down,
        vec![(
            "h",
            Script {
                recover_verify: true,
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    assert!(matches!(
        decide(&s.engine, Some(&header)).await,
        Decision::Paid(_)
    ));
    s.facilitator.assert_calls(1, 0);

    let down = verify_down();
    let s = setup(down, vec![("h", Script::default())]);
    let header = payment(&s.engine).await;
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(
        (r.status().as_u16(), error_of(&r)),
        (502, "facilitator_unavailable".into())
    );
    s.facilitator.assert_calls(1, 0);
}

#[tokio::test]
async fn before_settle_aborts_and_settle_failure_can_be_recovered() {
    let s = setup(
        StandIn::new(),
        vec![(
            "h",
            Script {
                before_settle_abort: Some("kill_switch".into()),
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    let Completion::Replace(r) = paid.complete(StatusCode::OK, &mut HeaderMap::new()).await else {
        panic!()
    };
    assert_eq!(r.status(), 402);
    let receipt: Value =
        codec::decode(r.headers()[codec::PAYMENT_RESPONSE].as_bytes(), 1 << 16).unwrap();
    assert_eq!(
        (receipt["success"].clone(), receipt["errorReason"].clone()),
        (json!(false), json!("kill_switch"))
    );
    s.facilitator.assert_calls(1, 0);

    let down = settle_down();
    let s = setup(
        down,
        vec![(
            "h",
            Script {
                recover_settle: true,
                ..Script::default()
            },
        )],
    );
    let header = payment(&s.engine).await;
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    let mut headers = HeaderMap::new();
    assert!(matches!(
        paid.complete(StatusCode::OK, &mut headers).await,
        Completion::Deliver
    ));
    let receipt: Value =
        codec::decode(headers[codec::PAYMENT_RESPONSE].as_bytes(), 1 << 16).unwrap();
    assert_eq!(receipt["transaction"], "0xrecovered");
    s.facilitator.assert_calls(1, 1);
}

#[tokio::test]
async fn a_hook_is_called_only_at_the_steps_it_names() {
    let s = setup(
        StandIn::new(),
        vec![
            (
                "a",
                Script {
                    steps: Some(HookSteps::AFTER_VERIFY | HookSteps::PAYMENT_CANCELED),
                    ..Script::default()
                },
            ),
            (
                "b",
                Script {
                    steps: Some(HookSteps::BEFORE_VERIFY | HookSteps::AFTER_SETTLE),
                    ..Script::default()
                },
            ),
        ],
    );
    let header = payment(&s.engine).await;
    s.log.lock().unwrap().clear();
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert!(matches!(
        paid.complete(StatusCode::OK, &mut HeaderMap::new()).await,
        Completion::Deliver
    ));
    assert_eq!(
        *s.log.lock().unwrap(),
        ["b:before_verify", "a:after_verify", "b:after_settle"]
    );

    // A failed handler: the hook that accepted the payment is told; the one
    // that does not name the step is not.
    let header = payment(&s.engine).await;
    s.log.lock().unwrap().clear();
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert!(matches!(
        paid.complete(StatusCode::INTERNAL_SERVER_ERROR, &mut HeaderMap::new())
            .await,
        Completion::Deliver
    ));
    assert_eq!(
        *s.log.lock().unwrap(),
        [
            "b:before_verify",
            "a:after_verify",
            "a:canceled(HandlerFailed(500))"
        ]
    );
    s.facilitator.assert_calls(2, 1);
}

#[tokio::test]
async fn hooks_run_in_registration_order_and_hear_about_failed_handlers() {
    let s = setup(
        StandIn::new(),
        vec![("a", Script::default()), ("b", Script::default())],
    );
    let header = payment(&s.engine).await;
    s.log.lock().unwrap().clear();
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert!(matches!(
        paid.complete(StatusCode::OK, &mut HeaderMap::new()).await,
        Completion::Deliver
    ));
    let log = s.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "a:protected",
            "b:protected",
            "a:before_verify",
            "b:before_verify",
            "a:after_verify",
            "b:after_verify",
            "a:before_settle",
            "b:before_settle",
            "a:after_settle",
            "b:after_settle",
        ]
    );

    let header = payment(&s.engine).await;
    s.log.lock().unwrap().clear();
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert!(matches!(
        paid.complete(StatusCode::INTERNAL_SERVER_ERROR, &mut HeaderMap::new())
            .await,
        Completion::Deliver
    ));
    let log = s.log.lock().unwrap().clone();
    assert!(
        log.contains(&"a:canceled(HandlerFailed(500))".to_owned()),
        "{log:?}"
    );
    assert!(!log.iter().any(|l| l.contains("settle")), "{log:?}");
    assert_eq!(
        s.facilitator.settle_calls(),
        1,
        "only the first payment settled"
    );
    s.facilitator.assert_calls(2, 1);
}

#[tokio::test]
async fn a_client_that_hangs_up_mid_handler_keeps_the_claim_by_default() {
    let s = setup(StandIn::new(), vec![("h", Script::default())]);
    let header = payment(&s.engine).await;
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    // The client went away while the handler ran.
    drop(paid);
    assert!(s.engine.drain(Duration::from_secs(1)).await);
    let log = s.log.lock().unwrap().clone();
    assert!(
        log.contains(&"h:canceled(ClientGone { keep_claim: true })".to_owned()),
        "{log:?}"
    );
    // The claim is kept: the same authorization cannot start the handler
    // again by hanging up each time.
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!("a resend after a hang-up ran the handler again")
    };
    assert_eq!(error_of(&r), "payment_replayed");
    assert_eq!(s.facilitator.settle_calls(), 0);
}

#[tokio::test]
async fn release_claims_on_hang_up_lets_the_same_payment_be_retried() {
    let s = setup_with(StandIn::new(), vec![("h", Script::default())], |b| {
        b.release_claims_on_hang_up(true)
    });
    let header = payment(&s.engine).await;
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    drop(paid);
    assert!(s.engine.drain(Duration::from_secs(1)).await);
    let log = s.log.lock().unwrap().clone();
    assert!(
        log.contains(&"h:canceled(ClientGone { keep_claim: false })".to_owned()),
        "{log:?}"
    );
    // The replay claim was released, so an honest retry goes through.
    let Decision::Paid(paid) = decide(&s.engine, Some(&header)).await else {
        panic!("the retry was refused");
    };
    assert!(matches!(
        paid.complete(StatusCode::OK, &mut HeaderMap::new()).await,
        Completion::Deliver
    ));
    // And a third copy is a replay.
    let Decision::Respond(r) = decide(&s.engine, Some(&header)).await else {
        panic!()
    };
    assert_eq!(error_of(&r), "payment_replayed");
}
