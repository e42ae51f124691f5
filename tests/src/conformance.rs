//! [`conformance_tests!`](crate::conformance_tests): every scenario of
//! [`suite`](crate::suite) and [`capabilities`](crate::capabilities) as
//! `#[tokio::test]`s for one adapter.

/// Instantiates every scenario of [`SCENARIOS`](crate::suite::SCENARIOS) and
/// [`CAPABILITIES`](crate::capabilities::CAPABILITIES) for an adapter, plus a
/// `scenario_count` test printing `conformance[<name>]: N scenarios (...)`.
#[macro_export]
macro_rules! conformance_tests {
    ($adapter:ty) => {
        $crate::conformance_tests!(@gen $adapter;
            suite: [
                s01_unprotected_route,
                s02_challenge,
                s03_unreadable_headers,
                s04_no_matching_requirements,
                s05_facilitator_says_invalid,
                s06_facilitator_unavailable_at_verify,
                s07_handler_error_not_settled,
                s08_settlement_refused,
                s09_settlement_unknown,
                s10_settled_with_server_requirement,
                s11_v1_and_v2_on_one_route,
                s12_browser_paywall,
                s13_settle_before_handler,
                s14_dynamic_pricing,
                s15_path_spellings_and_head,
                s16_public_origin_whatever_the_host,
                s32_no_shared_cache_keeps_a_paid_response
            ];
            capabilities: [
                s17_upto_meter_handle,
                s18_upto_settlement_overrides,
                s19_session_lifecycle,
                s20_replay_race_memory,
                s21_replay_race_redis,
                s22_hooks_settled,
                s23_hooks_handler_failure,
                s24_hooks_settlement_refused,
                s25_hooks_settlement_unknown,
                s26_hooks_abort,
                s27_webhook_event_per_outcome,
                s28_discovery,
                s29_hang_up_before_verify_answers,
                s30_hang_up_during_handler,
                s31_hang_up_during_settlement
            ]
        );
    };
    (@gen $adapter:ty;
        suite: [$($scenario:ident),* $(,)?];
        capabilities: [$($capability:ident),* $(,)?]
    ) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                $crate::suite::$scenario::<$adapter>().await;
            }
        )*

        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $capability() {
                $crate::capabilities::$capability::<$adapter>().await;
            }
        )*

        #[test]
        fn scenario_count() {
            let names: &[&str] = &[$(stringify!($scenario)),*];
            assert_eq!(names, $crate::suite::SCENARIOS);
            let capabilities: &[&str] = &[$(stringify!($capability)),*];
            assert_eq!(capabilities, $crate::capabilities::CAPABILITIES);
            println!(
                "conformance[{}]: {} scenarios ({} outcomes, {} capabilities)",
                <$adapter as $crate::Adapter>::NAME,
                names.len() + capabilities.len(),
                names.len(),
                capabilities.len(),
            );
        }
    };
}
