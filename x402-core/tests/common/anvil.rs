//! The anvil harness: the same file the integration-test crate uses
//! (`tests/src/anvil.rs`), with the names these tests give its accounts.

#[path = "../../../tests/src/anvil.rs"]
mod shared;

pub use shared::*;

/// Anvil account 0: deploys and mints.
pub const DEPLOYER_KEY: &str = accounts::KEY_0;
/// Anvil account 1: the facilitator, which pays the gas of settlements.
pub const FACILITATOR_KEY: &str = accounts::KEY_1;
