//! The conformance suite against `x402_tower::PaywallLayer` over a
//! `tower::service_fn`, served by hyper (no axum routing).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

x402_tests::conformance_tests!(x402_tests::TowerAdapter);
