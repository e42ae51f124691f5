//! Every lifecycle hook through every adapter: a [`Recorder`] registered on
//! the engine logs each call into the fixture's [`EventLog`], between the
//! stand-in's `verify` / `settle` and the handler's `handler`, so each
//! scenario asserts the order and count of every step at once. An
//! [`Aborter`] registered after it refuses at the step it is switched to.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use serde_json::json;
use x402_core::{
    facilitator::FacilitatorError,
    hooks::{
        AfterVerify, BeforeSettle, BeforeVerify, CancelReason, HookError, PaymentContext,
        PaymentHooks, ProtectedRequest, RequestContext, SessionOpened,
    },
    proto::{SettleResponse, VerifyResponse},
};

use super::{capability_builder, eventually_eq, sessions::session_row, SESSION_PATH};
use crate::{
    handler::{HandlerMode, HANDLER_ERROR_BODY},
    payment,
    standin::{SettleMode, VerifyMode},
    suite::{assert_challenge, assert_opaque},
    Adapter, EventLog, Fixture, SECRET,
};

/// Logs every hook call into an [`EventLog`] as `hook:<step>`.
#[derive(Debug, Clone)]
pub struct Recorder(pub EventLog);

#[async_trait]
impl PaymentHooks for Recorder {
    async fn on_protected_request(
        &self,
        ctx: &RequestContext<'_>,
    ) -> Result<ProtectedRequest, HookError> {
        self.0
            .push(format!("hook:on_protected_request {}", ctx.route));
        Ok(ProtectedRequest::Continue)
    }

    async fn before_verify(&self, _: &PaymentContext<'_>) -> Result<BeforeVerify, HookError> {
        self.0.push("hook:before_verify");
        Ok(BeforeVerify::Continue)
    }

    async fn after_verify(
        &self,
        _: &PaymentContext<'_>,
        _: &VerifyResponse,
    ) -> Result<AfterVerify, HookError> {
        self.0.push("hook:after_verify");
        Ok(AfterVerify::Continue)
    }

    async fn on_verify_failure(
        &self,
        _: &PaymentContext<'_>,
        _: &FacilitatorError,
    ) -> Option<VerifyResponse> {
        self.0.push("hook:on_verify_failure");
        None
    }

    async fn before_settle(&self, ctx: &PaymentContext<'_>) -> Result<BeforeSettle, HookError> {
        self.0
            .push(format!("hook:before_settle {}", ctx.requirements.amount()));
        Ok(BeforeSettle::Continue)
    }

    async fn after_settle(&self, _: &PaymentContext<'_>, receipt: &SettleResponse) {
        let outcome = if receipt.success {
            "ok".to_owned()
        } else {
            format!(
                "refused {}",
                receipt.error_reason.as_deref().unwrap_or_default()
            )
        };
        self.0.push(format!("hook:after_settle {outcome}"));
    }

    async fn on_settle_failure(
        &self,
        _: &PaymentContext<'_>,
        _: &FacilitatorError,
    ) -> Option<SettleResponse> {
        self.0.push("hook:on_settle_failure");
        None
    }

    async fn on_payment_canceled(&self, _: &PaymentContext<'_>, reason: CancelReason) {
        let reason = match reason {
            CancelReason::HandlerFailed(status) => format!("handler_failed {}", status.as_u16()),
            CancelReason::HandlerAborted => "handler_aborted".to_owned(),
            CancelReason::Refused => "refused".to_owned(),
            other => format!("{other:?}"),
        };
        self.0.push(format!("hook:on_payment_canceled {reason}"));
    }

    async fn on_session_opened(
        &self,
        _: &PaymentContext<'_>,
        receipt: &SettleResponse,
        session: &SessionOpened,
    ) {
        self.0.push(format!(
            "hook:on_session_opened {} calls={} remaining={} scope={} tx={}",
            session.offer_id, session.calls, session.remaining, session.scope, receipt.transaction
        ));
    }
}

/// Where the [`Aborter`] refuses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AbortAt {
    /// Nowhere: every step continues.
    #[default]
    Nowhere,
    /// `on_protected_request` refuses with 403 `conformance_refused`.
    ProtectedRequestRefuse,
    /// `on_protected_request` grants access without payment.
    ProtectedRequestGrant,
    /// `before_verify` aborts with `conformance_before_verify`.
    BeforeVerify,
    /// `after_verify` aborts with `conformance_after_verify`.
    AfterVerify,
    /// `after_verify` fails: its backend is unavailable (503, Retry-After 2).
    AfterVerifyUnavailable,
    /// `before_settle` aborts with `conformance_before_settle`.
    BeforeSettle,
}

/// A hook that refuses at the step it is switched to.
#[derive(Debug, Clone, Default)]
pub struct Aborter(Arc<Mutex<AbortAt>>);

impl Aborter {
    pub fn set(&self, at: AbortAt) {
        *self.0.lock().unwrap() = at;
    }

    fn at(&self) -> AbortAt {
        *self.0.lock().unwrap()
    }
}

#[async_trait]
impl PaymentHooks for Aborter {
    async fn on_protected_request(
        &self,
        _: &RequestContext<'_>,
    ) -> Result<ProtectedRequest, HookError> {
        Ok(match self.at() {
            AbortAt::ProtectedRequestRefuse => ProtectedRequest::Refuse {
                status: http::StatusCode::FORBIDDEN,
                reason: "conformance_refused".into(),
            },
            AbortAt::ProtectedRequestGrant => ProtectedRequest::GrantAccess,
            _ => ProtectedRequest::Continue,
        })
    }

    async fn before_verify(&self, _: &PaymentContext<'_>) -> Result<BeforeVerify, HookError> {
        Ok(match self.at() {
            AbortAt::BeforeVerify => BeforeVerify::Abort {
                reason: "conformance_before_verify".into(),
            },
            _ => BeforeVerify::Continue,
        })
    }

    async fn after_verify(
        &self,
        _: &PaymentContext<'_>,
        _: &VerifyResponse,
    ) -> Result<AfterVerify, HookError> {
        match self.at() {
            AbortAt::AfterVerify => Ok(AfterVerify::Abort {
                reason: "conformance_after_verify".into(),
            }),
            AbortAt::AfterVerifyUnavailable => Err(HookError::Unavailable {
                reason: "conformance_backend_down",
                retry_after: Duration::from_secs(2),
                source: Some("the conformance backend is down".into()),
            }),
            _ => Ok(AfterVerify::Continue),
        }
    }

    async fn before_settle(&self, _: &PaymentContext<'_>) -> Result<BeforeSettle, HookError> {
        Ok(match self.at() {
            AbortAt::BeforeSettle => BeforeSettle::Abort {
                reason: "conformance_before_settle".into(),
            },
            _ => BeforeSettle::Continue,
        })
    }
}

/// The adapter serving [`capability_builder`]'s engine with a [`Recorder`]
/// then an [`Aborter`] (after the default replay guard).
async fn fixture<A: Adapter>() -> (Fixture, Aborter) {
    let aborter = Aborter::default();
    let hook = aborter.clone();
    let f = Fixture::with_engine_and_log::<A>(|standin, log| {
        capability_builder(standin.facilitator())
            .hooks(Recorder(log.clone()))
            .hooks(hook)
    })
    .await;
    (f, aborter)
}

/// The log of a paid `path` up to its verdict, as the recorder writes it.
fn verified(path: &str) -> Vec<String> {
    [
        &format!("hook:on_protected_request {path}"),
        "hook:before_verify",
        "verify",
        "hook:after_verify",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `verified(path)` followed by `rest`.
fn log(path: &str, rest: &[&str]) -> Vec<String> {
    let mut log = verified(path);
    log.extend(rest.iter().map(|s| (*s).to_owned()));
    log
}

/// Asserts the fixture's log is `expected`, then clears it.
async fn assert_log(f: &Fixture, expected: Vec<String>, what: &str) {
    eventually_eq(|| f.events.events(), expected, what).await;
    f.events.clear();
}

/// The first requirement `path` offers, with the log of its challenge
/// checked and cleared.
async fn row(f: &Fixture, path: &str) -> serde_json::Value {
    let row = f.first_row(path).await;
    assert_log(
        f,
        vec![format!("hook:on_protected_request {path}")],
        "a challenge runs on_protected_request only",
    )
    .await;
    row
}

/// `GET /paid` with `header` as its `PAYMENT-SIGNATURE`.
async fn send_header(f: &Fixture, header: &str) -> crate::Reply {
    f.get("/paid", &[("PAYMENT-SIGNATURE", header)]).await
}

/// Scenario 22. Hooks of a settled payment, of a settled payment that opened
/// a session, of a call redeemed from it, and of a free route (none).
pub async fn s22_hooks_settled<A: Adapter>() {
    let (f, _) = fixture::<A>().await;

    let row = row(&f, "/paid").await;
    f.pay_row("/paid", &row).await.assert_status(200);
    let expected = log(
        "/paid",
        &[
            "handler",
            "hook:before_settle 10000",
            "settle",
            "hook:after_settle ok",
        ],
    );
    assert_log(&f, expected, "settled payment").await;

    let session = session_row(&f).await;
    f.events.clear();
    let opened = f.pay_row(SESSION_PATH, &session).await;
    opened.assert_status(200);
    let token = opened.header("x-payment-session").unwrap().to_owned();
    let expected = log(
        SESSION_PATH,
        &[
            "handler",
            "hook:before_settle 50000",
            "settle",
            "hook:after_settle ok",
            &format!(
                "hook:on_session_opened {} calls=3 remaining=2 scope={} tx={}",
                super::SESSION_OFFER,
                super::SESSION_SCOPE,
                crate::TX_HASH
            ),
        ],
    );
    assert_log(&f, expected, "session opened").await;

    // A redeemed call is no payment: no verify or settle hooks.
    let used = f
        .get(SESSION_PATH, &[("X-PAYMENT-SESSION", token.as_str())])
        .await;
    used.assert_status(200);
    let expected = vec![
        format!("hook:on_protected_request {SESSION_PATH}"),
        "handler".to_owned(),
    ];
    assert_log(&f, expected, "session call").await;

    // A free route: no hook at all.
    f.get("/free", &[]).await.assert_status(200);
    assert_log(&f, vec!["handler".to_owned()], "free route").await;
    f.handler.assert_calls(4);
    f.standin.assert_calls(2, 2);
}

/// Scenario 23. The handler fails (≥ 400): `on_payment_canceled` with
/// `HandlerFailed(500)`, nothing settled, and the claim released (the same
/// payment then succeeds).
pub async fn s23_hooks_handler_failure<A: Adapter>() {
    let (f, _) = fixture::<A>().await;
    let row = row(&f, "/paid").await;
    let header = payment::v2_header(&row);

    f.handler.set_mode(HandlerMode::Error500);
    let failed = send_header(&f, &header).await;
    failed.assert_status(500);
    assert_eq!(failed.text(), HANDLER_ERROR_BODY);
    let expected = log(
        "/paid",
        &["handler", "hook:on_payment_canceled handler_failed 500"],
    );
    assert_log(&f, expected, "handler failure").await;
    f.standin.assert_calls(1, 0);

    f.handler.set_mode(HandlerMode::Json);
    send_header(&f, &header).await.assert_status(200);
    let expected = log(
        "/paid",
        &[
            "handler",
            "hook:before_settle 10000",
            "settle",
            "hook:after_settle ok",
        ],
    );
    assert_log(&f, expected, "retry after the release").await;
    f.handler.assert_calls(2);
    f.standin.assert_calls(2, 1);
}

/// Scenario 24. The facilitator refuses settlement: `after_settle` sees the
/// refusal; no cancel.
pub async fn s24_hooks_settlement_refused<A: Adapter>() {
    let (f, _) = fixture::<A>().await;
    f.standin
        .set_settle(SettleMode::Refuse("insufficient_funds".into()));
    let row = row(&f, "/paid").await;
    let reply = f.pay_row("/paid", &row).await;
    assert_challenge(&reply, "insufficient_funds");
    assert_eq!(reply.decoded("payment-response").unwrap()["success"], false);
    let expected = log(
        "/paid",
        &[
            "handler",
            "hook:before_settle 10000",
            "settle",
            "hook:after_settle refused insufficient_funds",
        ],
    );
    assert_log(&f, expected, "refused settlement").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);
}

/// Scenario 25. `/settle` gives no answer: `on_settle_failure`, no
/// `after_settle`, no cancel. And `/verify` giving none: `on_verify_failure`
/// and nothing after it.
pub async fn s25_hooks_settlement_unknown<A: Adapter>() {
    let (f, _) = fixture::<A>().await;
    f.standin.set_settle(SettleMode::Error500);
    let row = row(&f, "/paid").await;
    let reply = f.pay_row("/paid", &row).await;
    assert_opaque(&reply, 502, "settlement_unknown");
    let expected = log(
        "/paid",
        &[
            "handler",
            "hook:before_settle 10000",
            "settle",
            "hook:on_settle_failure",
        ],
    );
    assert_log(&f, expected, "unknown settlement").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 1);

    f.standin.set_verify(VerifyMode::Error500);
    let reply = f.pay_row("/paid", &row).await;
    assert_opaque(&reply, 502, "facilitator_unavailable");
    let expected = vec![
        "hook:on_protected_request /paid".to_owned(),
        "hook:before_verify".to_owned(),
        "verify".to_owned(),
        "hook:on_verify_failure".to_owned(),
    ];
    assert_log(&f, expected, "no verdict").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(2, 1);
}

/// Scenario 26. A hook that refuses, at each step it may: the response it
/// asks for, the handler and the facilitator not reached past it, and the
/// hooks that had accepted told the payment will not proceed.
pub async fn s26_hooks_abort<A: Adapter>() {
    let (f, aborter) = fixture::<A>().await;
    let row = row(&f, "/paid").await;

    // on_protected_request refuses: its status and reason, nothing else runs.
    aborter.set(AbortAt::ProtectedRequestRefuse);
    let reply = f.pay_row("/paid", &row).await;
    reply.assert_status(403);
    assert_eq!(reply.json(), json!({"error": "conformance_refused"}));
    assert!(!reply.leaks_secret());
    let expected = vec!["hook:on_protected_request /paid".to_owned()];
    assert_log(&f, expected, "refused request").await;
    f.handler.assert_calls(0);
    f.standin.assert_calls(0, 0);

    // on_protected_request grants access: the handler, unpaid, no receipt.
    aborter.set(AbortAt::ProtectedRequestGrant);
    let reply = f.get("/paid", &[]).await;
    reply.assert_status(200);
    assert_eq!(reply.json()["secret"], SECRET);
    assert_eq!(reply.json()["paid"], false);
    assert!(reply.header("payment-response").is_none());
    let expected = vec![
        "hook:on_protected_request /paid".to_owned(),
        "handler".to_owned(),
    ];
    assert_log(&f, expected, "granted request").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(0, 0);

    // before_verify aborts: the challenge with its reason, no /verify.
    aborter.set(AbortAt::BeforeVerify);
    let reply = f.pay_row("/paid", &row).await;
    assert_challenge(&reply, "conformance_before_verify");
    let expected = vec![
        "hook:on_protected_request /paid".to_owned(),
        "hook:before_verify".to_owned(),
    ];
    assert_log(&f, expected, "before_verify abort").await;
    f.standin.assert_calls(0, 0);

    // after_verify aborts: the challenge; the hooks that accepted (the
    // recorder, the replay guard) are told, so the claim is released and the
    // same payment then goes through.
    let header = payment::v2_header(&row);
    aborter.set(AbortAt::AfterVerify);
    let reply = send_header(&f, &header).await;
    assert_challenge(&reply, "conformance_after_verify");
    let expected = log("/paid", &["hook:on_payment_canceled refused"]);
    assert_log(&f, expected, "after_verify abort").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(1, 0);

    // after_verify fails with its backend down: 503 with Retry-After.
    aborter.set(AbortAt::AfterVerifyUnavailable);
    let reply = send_header(&f, &header).await;
    assert_opaque(&reply, 503, "conformance_backend_down");
    assert_eq!(reply.header("retry-after"), Some("2"));
    let expected = log("/paid", &["hook:on_payment_canceled refused"]);
    assert_log(&f, expected, "after_verify failure").await;
    f.handler.assert_calls(1);
    f.standin.assert_calls(2, 0);

    aborter.set(AbortAt::Nowhere);
    send_header(&f, &header).await.assert_status(200);
    f.events.clear();
    f.handler.assert_calls(2);
    f.standin.assert_calls(3, 1);

    // before_settle aborts: the handler ran, its response is withheld, a
    // failure receipt with the reason, no /settle.
    aborter.set(AbortAt::BeforeSettle);
    let reply = f.pay_row("/paid", &row).await;
    assert_challenge(&reply, "conformance_before_settle");
    let receipt = reply.decoded("payment-response").expect("failure receipt");
    assert_eq!(receipt["success"], false);
    assert_eq!(receipt["errorReason"], "conformance_before_settle");
    assert!(
        reply.header("x-handler").is_none(),
        "handler headers withheld"
    );
    let expected = log("/paid", &["handler", "hook:before_settle 10000"]);
    assert_log(&f, expected, "before_settle abort").await;
    f.handler.assert_calls(3);
    f.standin.assert_calls(4, 1);
}
