//! The conformance scenarios beyond the outcomes table, each generic over an
//! [`Adapter`](crate::Adapter) and run through the adapter's real server on
//! 127.0.0.1: `upto` metering (DESIGN §5), prepaid sessions (§6), the replay
//! race (§4), every lifecycle hook, a signed webhook per outcome (§7),
//! discovery, and clients that hang up mid-request. [`conformance_tests!`](crate::conformance_tests) instantiates
//! them beside [`suite`](crate::suite)'s.

use std::time::{Duration, Instant};

use x402_core::{session::SessionOffer, EngineBuilder, Facilitator, Offer, Route};

use crate::{client::standard_builder, PAY_TO};

pub mod cancellation;
pub mod discovery;
pub mod hooks;
pub mod replay;
pub mod sessions;
pub mod upto;
pub mod webhooks;

pub use self::{
    cancellation::{
        s29_hang_up_before_verify_answers, s30_hang_up_during_handler,
        s31_hang_up_during_settlement,
    },
    discovery::s28_discovery,
    hooks::{
        s22_hooks_settled, s23_hooks_handler_failure, s24_hooks_settlement_refused,
        s25_hooks_settlement_unknown, s26_hooks_abort,
    },
    replay::{s20_replay_race_memory, s21_replay_race_redis},
    sessions::s19_session_lifecycle,
    upto::{s17_upto_meter_handle, s18_upto_settlement_overrides},
    webhooks::s27_webhook_event_per_outcome,
};

/// Every capability scenario, in order.
pub const CAPABILITIES: &[&str] = &[
    "s17_upto_meter_handle",
    "s18_upto_settlement_overrides",
    "s19_session_lifecycle",
    "s20_replay_race_memory",
    "s21_replay_race_redis",
    "s22_hooks_settled",
    "s23_hooks_handler_failure",
    "s24_hooks_settlement_refused",
    "s25_hooks_settlement_unknown",
    "s26_hooks_abort",
    "s27_webhook_event_per_outcome",
    "s28_discovery",
    "s29_hang_up_before_verify_answers",
    "s30_hang_up_during_handler",
    "s31_hang_up_during_settlement",
];

/// The metered route: `upto`, ceiling [`CEILING`] atomic units of USDC.
pub const METERED: &str = "/metered";
/// The ceiling of [`METERED`], in atomic units.
pub const CEILING: &str = "2000";
/// The route selling sessions: $0.001 a call, or [`SESSION_CALLS`] calls
/// for $0.05 (offer [`SESSION_OFFER`]).
pub const SESSION_PATH: &str = "/session";
/// The session offer's id.
pub const SESSION_OFFER: &str = "pack-3";
/// Calls a session sells.
pub const SESSION_CALLS: u64 = 3;
/// The session offer's scope.
pub const SESSION_SCOPE: &str = "conformance";
/// The session offer's lifetime.
pub const SESSION_TTL: Duration = Duration::from_secs(60);

/// [`standard_builder`] plus [`METERED`] and [`SESSION_PATH`].
pub fn capability_builder(facilitator: impl Facilitator) -> EngineBuilder {
    standard_builder(facilitator)
        .route(Route::get(METERED).offer(Offer::upto("eip155:84532", CEILING, PAY_TO)))
        .route(
            Route::get(SESSION_PATH)
                .offer(Offer::exact("eip155:84532", "$0.001", PAY_TO))
                .session(
                    SessionOffer::new(SESSION_OFFER, SESSION_CALLS, SESSION_TTL, SESSION_SCOPE)
                        .offer(Offer::exact("eip155:84532", "$0.05", PAY_TO)),
                ),
        )
}

/// Waits (up to a second) until `read` returns `expected`, then asserts it:
/// for what the server may finish a moment after its response left.
pub async fn eventually_eq<T: PartialEq + std::fmt::Debug>(
    mut read: impl FnMut() -> T,
    expected: T,
    what: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let value = read();
        if value == expected || Instant::now() > deadline {
            assert_eq!(value, expected, "{what}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
