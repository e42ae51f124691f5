#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

pub mod batch;
pub mod bazaar;
pub mod boundary;
pub mod boxed;
#[cfg(any(feature = "http-facilitator", feature = "svm-rpc"))]
mod capped;
pub mod challenge;
pub mod claim;
pub mod codec;
pub mod discovery;
pub mod engine;
pub mod evm;
pub mod facilitator;
pub mod floor;
pub mod hooks;
mod late;
pub mod limit;
#[cfg(feature = "local-facilitator")]
#[cfg_attr(docsrs, doc(cfg(feature = "local-facilitator")))]
pub mod local;
pub mod meter;
pub mod metrics;
pub mod money;
pub mod network;
pub mod payment;
pub mod payment_id;
pub mod paywall;
pub mod proto;
pub mod readiness;
#[cfg(any(feature = "chain", feature = "svm-rpc"))]
mod redact;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis_conn;
mod refusal;
pub mod rejection;
pub mod route;
pub mod session;
pub mod siwx;
pub mod svm;
mod swept;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;
mod unix;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhook;

pub use engine::{BoundRoute, Completion, Decision, Engine, EngineBuilder, Guard, PaidRequest};
pub use facilitator::Facilitator;
pub use payment::{SessionCall, SharedRequirements, SharedStr, VerifiedPayment};
pub use route::{Asset, Offer, Route};
