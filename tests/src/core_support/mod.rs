//! Helpers of the `core_*` tests: x402-core's integration tests that need
//! something from outside that crate (axum, Node, anvil, Redis), moved here
//! so that `cargo test -p x402-core` needs none of them.
//!
//! - [`local`]: EIP-3009 signing and facilitator requests for the in-process
//!   EVM facilitator, and a seller (engine + axum) on 127.0.0.1.
//! - [`redis_server`]: a `redis-server` a test owns (to stop, pause or
//!   restart it).
//! - [`receiver`]: a webhook receiver keeping the raw requests.

pub mod local;
pub mod receiver;
pub mod redis_server;
