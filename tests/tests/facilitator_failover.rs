//! `FailoverFacilitator` in front of real HTTP stand-ins on 127.0.0.1: the
//! primary down (stopped, answering 500, timing out, hanging up), the
//! engine serving through the second member; settlements whose outcome is
//! unknown never sent elsewhere; the breaker opening, half-opening and
//! closing; and fifty concurrent payments meeting a dead primary.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use http::{Request, Response};
use serde_json::{json, Value};
use tokio::{
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use x402_core::{
    claim::ReplayGuard,
    codec,
    facilitator::{
        BreakerState, Facilitator, FacilitatorErrorKind, FailoverFacilitator, HttpFacilitator,
    },
    testing,
};
use x402_tests::{
    client::{send, standard_builder},
    payment,
    standin::{facilitator_at, ClosedPort, SettleMode, VerifyMode},
    AxumAdapter, EventLog, Fixture, Reply, StandIn, TX_HASH,
};

/// The facilitator deadline where many requests share two cores.
const PATIENT: Duration = Duration::from_secs(10);

/// A failover of `primary` then `secondary`, with a breaker threshold.
fn failover(
    primary: HttpFacilitator,
    secondary: HttpFacilitator,
    threshold: u32,
) -> FailoverFacilitator {
    FailoverFacilitator::builder()
        .member("primary", primary)
        .member("secondary", secondary)
        .failure_threshold(threshold)
        .build()
        .unwrap()
}

/// An axum server over the standard engine with `facilitator` and an
/// in-memory replay guard (its own stand-in stays unused).
async fn serve(facilitator: FailoverFacilitator) -> Fixture {
    Fixture::with_engine::<AxumAdapter>(move |_unused| {
        standard_builder(facilitator).replay_guard(ReplayGuard::memory())
    })
    .await
}

/// A 200 with the paid body and a successful receipt.
#[track_caller]
fn assert_paid(reply: &Reply) {
    reply.assert_status(200);
    assert!(reply.leaks_secret(), "the paid body");
    let receipt = reply.decoded("payment-response").expect("receipt");
    assert_eq!(receipt["success"], true);
    assert_eq!(receipt["transaction"], TX_HASH);
}

/// A 5xx with exactly `{"error": reason}`.
#[track_caller]
fn assert_opaque(reply: &Reply, status: u16, reason: &str) {
    reply.assert_status(status);
    assert_eq!(reply.json(), json!({"error": reason}));
    assert!(!reply.text().contains("127.0.0.1"));
    assert!(!reply.leaks_secret());
    assert!(reply.header("payment-response").is_none());
}

/// A TCP forwarder to a stand-in that can be stopped: afterwards its port
/// refuses connections, as a facilitator whose server went down.
struct Forwarder {
    url: String,
    task: JoinHandle<()>,
}

impl Forwarder {
    async fn start(target: &StandIn) -> Self {
        let target: SocketAddr = target.url().trim_start_matches("http://").parse().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            // Dropped with the task: every forwarded connection ends too.
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                connections.spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self { url, task }
    }

    /// A client of the forwarder that opens a connection per request (so
    /// that after [`stop`](Self::stop) every request meets a refusal).
    fn facilitator(&self) -> HttpFacilitator {
        let client = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        HttpFacilitator::builder(&self.url)
            .timeout(PATIENT)
            .client(client)
            .build()
            .unwrap()
    }

    /// Closes the port and every connection, and waits until they are.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

/// The primary down in four ways: each time, the payment is verified and
/// settled by the second member, and the engine serves it.
#[tokio::test]
async fn payments_go_through_the_second_member_when_the_primary_is_down() {
    for down in ["stopped", "500", "timeout", "hangup"] {
        let primary = StandIn::start(EventLog::default()).await;
        let secondary = StandIn::start(EventLog::default()).await;
        let closed = ClosedPort::new();
        let primary_facilitator = match down {
            "stopped" => facilitator_at(&closed.url()),
            "500" => {
                primary.set_verify(VerifyMode::Error500);
                primary.facilitator()
            }
            "timeout" => {
                primary.set_verify(VerifyMode::Slow);
                primary.facilitator()
            }
            _ => {
                primary.set_verify(VerifyMode::Hangup);
                primary.facilitator()
            }
        };
        let failover = failover(primary_facilitator, secondary.facilitator(), 5);
        let f = serve(failover.clone()).await;

        let reply = f.pay_v2("/paid").await;
        assert_paid(&reply);
        f.handler.assert_calls(1);
        secondary.assert_calls(1, 1);
        let expected_primary_verifies = usize::from(down != "stopped");
        primary.assert_calls(expected_primary_verifies, 0);

        let status = &failover.members()[0];
        assert_eq!(status.state, BreakerState::Closed, "{down}");
        assert_eq!(status.consecutive_failures, 1, "{down}");
        let kind = match down {
            "stopped" | "hangup" => FacilitatorErrorKind::Transport,
            "500" => FacilitatorErrorKind::Status,
            _ => FacilitatorErrorKind::Timeout,
        };
        assert_eq!(status.last_error, Some(kind), "{down}");
        assert_eq!(failover.members()[1].consecutive_failures, 0);

        // v1 payments too.
        let reply = f.pay_v1("/paid").await;
        reply.assert_status(200);
        secondary.assert_calls(2, 2);
        primary.assert_calls(2 * expected_primary_verifies, 0);
    }
}

/// The primary verified the payment and its server stopped before the
/// settlement: the connection is refused, so nothing reached it, and the
/// settlement moves to the second member.
#[tokio::test]
async fn a_refused_settlement_moves_to_the_next_member() {
    let primary = StandIn::start(EventLog::default()).await;
    let secondary = StandIn::start(EventLog::default()).await;
    let forwarder = Forwarder::start(&primary).await;
    let failover = failover(forwarder.facilitator(), secondary.facilitator(), 5);
    let engine = standard_builder(failover.clone())
        .replay_guard(ReplayGuard::memory())
        .build()
        .unwrap();

    let challenge = testing::challenge(&engine, Request::get("/paid").body(()).unwrap()).await;
    let request = Request::get("/paid")
        .header("payment-signature", testing::payment(&challenge.accepts[0]))
        .body(String::new())
        .unwrap();
    // The handler runs between verify and settle: it stops the primary.
    let response = testing::serve(&engine, request, |_| async move {
        forwarder.stop().await;
        Response::new("paid".to_owned())
    })
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.body().as_ref(), b"paid");
    let receipt: Value = codec::decode(
        response.headers()["payment-response"].as_bytes(),
        usize::MAX,
    )
    .unwrap();
    assert_eq!(receipt["success"], true);
    primary.assert_calls(1, 0);
    secondary.assert_calls(0, 1);
    assert_eq!(
        failover.members()[0].last_error,
        Some(FacilitatorErrorKind::Transport)
    );

    // What made it safe: the client's error proves nothing was sent.
    let body = json!({
        "x402Version": 2,
        "paymentPayload": payment::v2_payment(&x402_tests::suite::expected_row(), None),
        "paymentRequirements": x402_tests::suite::expected_row(),
    });
    let request = serde_json::from_value(body).unwrap();
    let closed = ClosedPort::new();
    let refused = facilitator_at(&closed.url())
        .settle(&request)
        .await
        .unwrap_err();
    assert!(refused.never_sent(), "{refused:?}");
}

/// The primary received the settlement and then failed (500, a success
/// under 500, hung up, timed out): the outcome is unknown, so the second
/// member never sees it; the engine answers 502 `settlement_unknown` and
/// keeps the claim (the same payment again is a replay).
#[tokio::test]
async fn an_unknown_settlement_is_never_sent_to_another_member() {
    let primary = StandIn::start(EventLog::default()).await;
    let secondary = StandIn::start(EventLog::default()).await;
    let failover = failover(primary.facilitator(), secondary.facilitator(), 5);
    let f = serve(failover.clone()).await;
    let row = f.first_row("/paid").await;

    let modes = [
        SettleMode::Error500,
        SettleMode::SuccessUnder500,
        SettleMode::Hangup,
        SettleMode::Slow,
    ];
    for (i, mode) in modes.iter().enumerate() {
        primary.set_settle(mode.clone());
        let header = payment::v2_header(&row);
        let reply = f
            .get("/paid", &[("PAYMENT-SIGNATURE", header.as_str())])
            .await;
        assert_opaque(&reply, 502, "settlement_unknown");
        primary.assert_calls(2 * i + 1, i + 1);
        secondary.assert_calls(0, 0);

        // The claim is kept: the same authorization is refused as a replay.
        let again = f
            .get("/paid", &[("PAYMENT-SIGNATURE", header.as_str())])
            .await;
        again.assert_status(402);
        assert_eq!(again.challenge_error(), "payment_replayed", "{mode:?}");
        primary.assert_calls(2 * i + 2, i + 1);
        secondary.assert_calls(0, 0);
    }
    f.handler.assert_calls(modes.len());

    // A definite refusal is final too.
    primary.set_settle(SettleMode::Refuse("insufficient_funds".into()));
    let reply = f.pay_row("/paid", &row).await;
    reply.assert_status(402);
    assert_eq!(reply.challenge_error(), "insufficient_funds");
    secondary.assert_calls(0, 0);
}

/// A clock moved by hand.
#[derive(Clone, Default)]
struct Hand(Arc<AtomicU64>);

impl Hand {
    fn clock(&self) -> impl Fn() -> Instant + Send + Sync + 'static {
        let (start, offset) = (Instant::now(), self.0.clone());
        move || start + Duration::from_secs(offset.load(Ordering::SeqCst))
    }

    fn advance(&self, seconds: u64) {
        self.0.fetch_add(seconds, Ordering::SeqCst);
    }
}

/// Three failures open the primary's breaker: it is not called until the
/// cool-down has passed; then one probe (failing: open again), and once it
/// answers, the breaker closes and the primary serves again.
#[tokio::test]
async fn the_breaker_opens_half_opens_and_closes() {
    let primary = StandIn::start(EventLog::default()).await;
    let secondary = StandIn::start(EventLog::default()).await;
    let hand = Hand::default();
    let failover = FailoverFacilitator::builder()
        .member("primary", primary.facilitator())
        .member("secondary", secondary.facilitator())
        .failure_threshold(3)
        .cool_down(Duration::from_secs(30))
        .clock(hand.clock())
        .build()
        .unwrap();
    let f = serve(failover.clone()).await;
    let row = f.first_row("/paid").await;
    let state = || failover.members()[0].state;

    primary.set_verify(VerifyMode::Error500);
    for _ in 0..6 {
        assert_paid(&f.pay_row("/paid", &row).await);
    }
    primary.assert_calls(3, 0);
    secondary.assert_calls(6, 6);
    assert_eq!(state(), BreakerState::Open);

    // Not yet: still open.
    hand.advance(29);
    assert_paid(&f.pay_row("/paid", &row).await);
    primary.assert_calls(3, 0);

    // The cool-down passed: one probe, which fails.
    hand.advance(1);
    assert_eq!(state(), BreakerState::HalfOpen);
    assert_paid(&f.pay_row("/paid", &row).await);
    primary.assert_calls(4, 0);
    assert_eq!(state(), BreakerState::Open);
    secondary.assert_calls(8, 8);

    // Recovered, but the breaker is open for another cool-down.
    primary.set_verify(VerifyMode::Valid);
    assert_paid(&f.pay_row("/paid", &row).await);
    primary.assert_calls(4, 0);
    secondary.assert_calls(9, 9);

    // The probe answers: closed, and the primary serves (and settles what
    // it verified) again.
    hand.advance(30);
    for _ in 0..3 {
        assert_paid(&f.pay_row("/paid", &row).await);
    }
    assert_eq!(state(), BreakerState::Closed);
    assert_eq!(failover.members()[0].consecutive_failures, 0);
    primary.assert_calls(7, 3);
    secondary.assert_calls(9, 9);
}

/// Fifty paid requests at once while the primary is down: every one is
/// served through the second member, and the primary sees at most the
/// breaker's threshold of calls (one at a time once it failed).
#[tokio::test]
async fn fifty_concurrent_payments_with_the_primary_down() {
    const REQUESTS: usize = 50;
    const THRESHOLD: u32 = 5;
    for down in ["500", "stopped"] {
        let primary = StandIn::start(EventLog::default()).await;
        let secondary = StandIn::start(EventLog::default()).await;
        let closed = ClosedPort::new();
        let primary_facilitator = if down == "500" {
            primary.set_verify(VerifyMode::Error500);
            primary.facilitator_with_timeout(PATIENT)
        } else {
            HttpFacilitator::builder(closed.url())
                .timeout(PATIENT)
                .client(reqwest::Client::builder().no_proxy().build().unwrap())
                .build()
                .unwrap()
        };
        let failover = failover(
            primary_facilitator,
            secondary.facilitator_with_timeout(PATIENT),
            THRESHOLD,
        );
        let f = serve(failover.clone()).await;
        let row = f.first_row("/paid").await;

        let barrier = Arc::new(tokio::sync::Barrier::new(REQUESTS));
        let tasks: Vec<_> = (0..REQUESTS)
            .map(|_| {
                let request = f
                    .client
                    .get(f.url("/paid"))
                    .header("PAYMENT-SIGNATURE", payment::v2_header(&row));
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    send(request).await
                })
            })
            .collect();
        for task in tasks {
            assert_paid(&task.await.unwrap());
        }
        f.handler.assert_calls(REQUESTS);
        secondary.assert_calls(REQUESTS, REQUESTS);
        assert_eq!(primary.settle_calls(), 0);
        let primary_calls = primary.verify_calls();
        assert!(
            primary_calls <= THRESHOLD as usize,
            "{down}: the primary was called {primary_calls} times"
        );
        assert!(failover.members()[0].consecutive_failures >= 1, "{down}");
        println!("{down}: the primary got {primary_calls} of {REQUESTS} concurrent payments");

        // However the burst fell, the breaker is open by the threshold and
        // the primary is called no more.
        for _ in 0..THRESHOLD {
            assert_paid(&f.pay_row("/paid", &row).await);
        }
        assert_eq!(failover.members()[0].state, BreakerState::Open, "{down}");
        assert_eq!(failover.members()[1].state, BreakerState::Closed);
        if down == "500" {
            assert_eq!(primary.verify_calls(), THRESHOLD as usize);
        }
        secondary.assert_calls(REQUESTS + THRESHOLD as usize, REQUESTS + THRESHOLD as usize);
    }
}

/// Readiness through the failover: the members' `/supported` merged, so
/// the engine is ready while the second member answers.
#[tokio::test]
async fn readiness_sees_the_healthy_member() {
    let secondary = StandIn::start(EventLog::default()).await;
    let closed = ClosedPort::new();
    let failover = failover(facilitator_at(&closed.url()), secondary.facilitator(), 5);
    let engine = standard_builder(failover.clone()).build().unwrap();
    let readiness = engine.readiness().await;
    assert!(readiness.ready, "{readiness:?}");
    let members = failover.member_health().await;
    assert_eq!(members.len(), 2);
    assert_eq!(
        members[0].health.supported.as_ref().unwrap_err().kind(),
        FacilitatorErrorKind::Transport
    );
    assert!(members[1].health.supported.is_ok());
}

/// The example server's `FACILITATOR_URLS`: the first URL refuses
/// connections, the second is a stand-in; a paid call is served.
#[tokio::test]
async fn the_example_takes_several_facilitator_urls() {
    let secondary = StandIn::start(EventLog::default()).await;
    let config = paid_api_common::Config::from_lookup(|name| {
        (name == "FACILITATOR_URLS")
            .then(|| format!("{},{}", "http://127.0.0.1:1", secondary.url()))
    })
    .unwrap();
    assert!(matches!(
        &config.facilitator,
        paid_api_common::FacilitatorConfig::Failover { urls } if urls.len() == 2
    ));
    let (engine, _state) = paid_api_common::engine(&config).await.unwrap();
    let path = "/exact/evm/eip3009";
    let challenge = testing::challenge(&engine, Request::get(path).body(()).unwrap()).await;
    let request = Request::get(path)
        .header("payment-signature", testing::payment(&challenge.accepts[0]))
        .body(String::new())
        .unwrap();
    let response = testing::serve(&engine, request, |_| async {
        Response::new("paid".to_owned())
    })
    .await;
    assert_eq!(response.status(), 200);
    secondary.assert_calls(1, 1);
}
