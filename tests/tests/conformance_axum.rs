//! The conformance suite against `x402_axum::PaywallLayer` over a whole router.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

x402_tests::conformance_tests!(x402_tests::AxumAdapter);
