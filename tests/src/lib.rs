//! Behavioural conformance harness for the x402 seller crates.
//!
//! - [`standin`]: a real HTTP facilitator stand-in (axum on `127.0.0.1:0`)
//!   whose `/verify` and `/settle` behaviour is switched at run time and which
//!   records every request body.
//! - [`handler`]: the protected "business" handler, counting its calls.
//! - [`adapters`]: the [`Adapter`] trait and one implementation per framework
//!   adapter (axum router layer, plain tower over hyper).
//! - [`payment`]: v1/v2 payment header builders, signed by the test key of
//!   `x402_core::testing`.
//! - [`require`]: what tests need from outside the workspace (Node tooling,
//!   anvil, Redis), checked in one place; a missing piece fails the test
//!   with one line naming `bash scripts/test-all.sh`.
//! - [`core_support`]: helpers of x402-core's integration tests (`core_*.rs`):
//!   signing with anvil keys, a seller on axum, an own `redis-server`, a
//!   webhook receiver.
//! - [`redis_cluster`]: the shared Redis Cluster (`REDIS_CLUSTER_URLS`) and
//!   one a test owns (six `redis-server` processes, to kill a primary).
//! - [`client`]: a reqwest client and a [`Reply`] with decoding helpers.
//! - [`suite`]: every scenario of the outcomes table as a generic `async fn`
//!   over an [`Adapter`], instantiated per adapter with [`conformance_tests!`].
//! - [`capabilities`]: the scenarios of the other capabilities (upto,
//!   sessions, the replay race, hooks, webhooks, discovery), generic the same
//!   way and instantiated by the same macro.
//!
//! A new adapter (actix, say) implements [`Adapter`] and calls
//! `x402_tests::conformance_tests!(MyAdapter);` in a test file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    missing_docs
)]

pub mod actix;
pub mod adapters;
pub mod anvil;
pub mod batch_chain;
pub mod boundary;
pub mod capabilities;
pub mod client;
mod conformance;
pub mod core_support;
pub mod example_chain;
pub mod handler;
pub mod payment;
pub mod redis_cluster;
pub mod require;
pub mod standin;
pub mod suite;

use std::sync::{Arc, Mutex};

pub use adapters::{Adapter, AxumAdapter, TowerAdapter};
pub use client::{Fixture, Reply};
pub use handler::{HandlerMode, TestHandler, Usage};
pub use standin::{SettleMode, StandIn, VerifyMode};

/// The seller's address in every test route.
pub const PAY_TO: &str = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
/// The payer the stand-in reports, and whose test key signs the suite's
/// payments (`x402_core::testing::PAYER`).
pub const PAYER: &str = x402_core::testing::PAYER;
/// Base Sepolia USDC, the default asset of `eip155:84532`.
pub const USDC_BASE_SEPOLIA: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
/// The transaction hash the stand-in reports on success.
pub const TX_HASH: &str = "0xabc0000000000000000000000000000000000000000000000000000000000def";
/// Text only the paid handler's body contains: must never leak unpaid.
pub const SECRET: &str = "top-secret-paid-content-7f3a";
/// The route description (with markup that the paywall must escape).
pub const DESCRIPTION: &str = "Premium <script>alert(\"x\")</script> report";

/// An ordered log of what happened, shared by the stand-in (`verify`,
/// `settle`), the handler (`handler`) and any recording hooks
/// ([`capabilities::hooks`]), to assert ordering.
#[derive(Debug, Clone, Default)]
pub struct EventLog(Arc<Mutex<Vec<String>>>);

impl EventLog {
    pub fn push(&self, event: impl Into<String>) {
        self.0.lock().unwrap().push(event.into());
    }

    pub fn events(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Forgets everything logged so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}
