//! Clients that hang up (DESIGN §4): before `/verify` answers, while the
//! handler works, while the facilitator settles. Each request goes over a
//! raw socket that is closed mid-request, as a client that gives up does.
//!
//! What every adapter must guarantee afterwards: the handler ran at most
//! once for the payment, nothing was settled that its handler did not
//! finish, a settlement that started ran to completion with its webhook
//! event and session, and a resend of the same payment after a hang-up
//! mid-handler is refused (the claim is kept). hyper drops a request whose
//! client went away; actix-web finishes it
//! ([`Adapter::FINISHES_ABANDONED_REQUESTS`]), so the two are held to what
//! each then promises.

use std::time::Duration;

use tokio::{io::AsyncWriteExt, net::TcpStream};
use x402_core::webhook::EventType;

use super::{
    capability_builder, eventually_eq, hooks::Recorder, sessions::session_row, webhooks::Receiver,
};
use crate::{
    client::standard_builder,
    handler::{HandlerMode, SLOW_BODY},
    payment,
    standin::{SettleMode, VerifyMode, SLOW_DELAY},
    Adapter, Fixture, TX_HASH,
};

/// The facilitator's deadline here: longer than the stand-in's slow modes,
/// so that a slow answer is an answer.
const PATIENT: Duration = Duration::from_secs(10);

/// Sends `GET path` with `payment` over a new connection, and closes it
/// after `after` without reading a byte of the response.
async fn hang_up_after(f: &Fixture, path: &str, payment: &str, after: Duration) {
    let authority = f.base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).await.unwrap();
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nPAYMENT-SIGNATURE: {payment}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    tokio::time::sleep(after).await;
    drop(stream);
}

/// Asserts that `payment` is refused as a replay and runs nothing.
async fn assert_replay_refused(f: &Fixture, path: &str, payment: &str) {
    let (handler, settles) = (f.handler.calls(), f.standin.settle_calls());
    let reply = f.get(path, &[("PAYMENT-SIGNATURE", payment)]).await;
    reply.assert_status(402);
    assert_eq!(reply.challenge_error(), "payment_replayed");
    assert!(!reply.leaks_secret());
    f.handler.assert_calls(handler);
    assert_eq!(f.standin.settle_calls(), settles);
}

/// Scenario 29. The client hangs up while `/verify` is still out. hyper:
/// the request is dropped before anything was claimed, so nothing runs and
/// the same payment, sent again, is served and settled once. actix-web:
/// the request runs to its end (served once, settled once), and the resend
/// is a replay.
pub async fn s29_hang_up_before_verify_answers<A: Adapter>() {
    let f =
        Fixture::with_engine::<A>(|s| standard_builder(s.facilitator_with_timeout(PATIENT))).await;
    let row = f.first_row("/paid").await;
    let payment = payment::v2_header(&row);
    f.standin.set_verify(VerifyMode::Slow);

    hang_up_after(&f, "/paid", &payment, Duration::from_millis(300)).await;
    tokio::time::sleep(SLOW_DELAY + Duration::from_millis(300)).await;
    f.standin.set_verify(VerifyMode::Valid);
    assert_eq!(f.standin.verify_calls(), 1);

    if A::FINISHES_ABANDONED_REQUESTS {
        eventually_eq(
            || f.standin.settle_calls(),
            1,
            "the finished request settled",
        )
        .await;
        f.handler.assert_calls(1);
        assert_replay_refused(&f, "/paid", &payment).await;
        return;
    }
    f.handler.assert_calls(0);
    assert_eq!(f.standin.settle_calls(), 0);
    let reply = f.get("/paid", &[("PAYMENT-SIGNATURE", &payment)]).await;
    reply.assert_status(200);
    assert!(reply.decoded("payment-response").is_some());
    f.handler.assert_calls(1);
    f.standin.assert_calls(2, 1);
}

/// Scenario 30. The client hangs up while the handler works. Nothing is
/// settled for a handler whose response was abandoned (hyper), and the
/// claim is kept: the same payment cannot start the handler again by
/// hanging up each time.
pub async fn s30_hang_up_during_handler<A: Adapter>() {
    let f = Fixture::with_engine_and_log::<A>(|s, log| {
        standard_builder(s.facilitator()).hooks(Recorder(log.clone()))
    })
    .await;
    let row = f.first_row("/paid").await;
    let payment = payment::v2_header(&row);
    f.handler.set_mode(HandlerMode::Slow);

    hang_up_after(&f, "/paid", &payment, SLOW_BODY / 3).await;
    f.handler.assert_calls(1);
    tokio::time::sleep(SLOW_BODY).await;
    let settled = usize::from(A::FINISHES_ABANDONED_REQUESTS);
    eventually_eq(|| f.standin.settle_calls(), settled, "/settle calls").await;
    f.standin.assert_calls(1, settled);
    // Hooks are told how it ended: unsettled with the claim kept, or (the
    // request finished) settled.
    let ending = if A::FINISHES_ABANDONED_REQUESTS {
        "hook:after_settle ok"
    } else {
        "hook:on_payment_canceled ClientGone { keep_claim: true }"
    };
    eventually_eq(
        || f.events.events().iter().any(|e| e == ending),
        true,
        ending,
    )
    .await;

    f.handler.set_mode(HandlerMode::Json);
    assert_replay_refused(&f, "/paid", &payment).await;
    f.handler.assert_calls(1);
}

/// Scenario 31. The client hangs up while the facilitator settles a
/// session purchase: the settlement runs to completion without it, with
/// its `payment.settled` and `session.opened` events, and the payment
/// stays claimed.
pub async fn s31_hang_up_during_settlement<A: Adapter>() {
    let (receiver, webhooks) = Receiver::with_webhooks().await;
    let _worker = webhooks.start();
    let hooks = webhooks.hooks();
    let f = Fixture::with_engine_and_log::<A>(|s, log| {
        capability_builder(s.facilitator_with_timeout(PATIENT))
            .hooks(hooks)
            .hooks(Recorder(log.clone()))
    })
    .await;
    let row = session_row(&f).await;
    let payment = payment::v2_header(&row);
    f.standin.set_settle(SettleMode::Slow);

    // Verified and served well within this; then settling for SLOW_DELAY.
    hang_up_after(
        &f,
        super::SESSION_PATH,
        &payment,
        Duration::from_millis(700),
    )
    .await;
    f.handler.assert_calls(1);
    assert_eq!(f.standin.settle_calls(), 1, "the settlement was under way");

    // Nobody waits for it any more; it finishes all the same.
    tokio::time::sleep(SLOW_DELAY - Duration::from_millis(700)).await;
    // Delivered in any order.
    let mut events = receiver.wait_for(0, 2).await;
    events.sort_by(|a, b| a.event_type.as_str().cmp(b.event_type.as_str()));
    let types: Vec<_> = events.iter().map(|e| e.event_type.clone()).collect();
    assert_eq!(
        types,
        [EventType::PaymentSettled, EventType::SessionOpened],
        "{events:?}"
    );
    assert_eq!(events[0].data.transaction, TX_HASH);
    assert_eq!(events[1].data.extra["sessionOffer"], super::SESSION_OFFER);
    f.standin.assert_calls(1, 1);
    // The webhook receiver may hear of the session before the hook that
    // logs it has run: the hooks are told in turn.
    let told = |log: &[String]| {
        (
            log.iter().any(|e| e == "hook:after_settle ok"),
            log.iter()
                .any(|e| e.starts_with("hook:on_session_opened") && e.contains(TX_HASH)),
        )
    };
    eventually_eq(
        || told(&f.events.events()),
        (true, true),
        "after_settle and on_session_opened told",
    )
    .await;

    f.standin.set_settle(SettleMode::Success);
    assert_replay_refused(&f, super::SESSION_PATH, &payment).await;
    f.handler.assert_calls(1);
}
