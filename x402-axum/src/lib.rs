//! x402 for axum: the paywall layer for a router or a single route, and an
//! extractor that hands the handler its verified payment.
//!
//! ```
//! use axum::{routing::get, Router};
//! use x402_axum::{Payment, PaywallLayer};
//! use x402_core::{Engine, Offer, Route};
//! # use x402_core::testing::StandIn;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(StandIn::new())
//!     .route(Route::get("/premium").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.01",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//!
//! async fn premium(Payment(payment): Payment) -> String {
//!     format!("thanks, {}", payment.payer.unwrap_or_default())
//! }
//!
//! let app: Router = Router::new()
//!     .route("/premium", get(premium))
//!     .route("/free", get(|| async { "free" }))
//!     .layer(PaywallLayer::new(engine));
//! # let _ = app; Ok(()) }
//! ```
//!
//! [`PaywallLayer`] reads what axum's router decided (the matched route and
//! the URI before `nest` stripped its prefix), so it protects what it wraps
//! wherever it sits: see its docs for every placement, and
//! [`PaywallLayer::route`] to price one route where it is declared.
//!
//! Every extractor rejection ([`MissingPaywall`], `WebhookRejection`) is
//! defined in `x402_core::rejection` and only rendered here, so axum and
//! actix-web answer it with the same status and body.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

#[cfg(any(feature = "discovery", feature = "prometheus"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "discovery", feature = "prometheus"))))]
pub mod discovery;
mod extract;
#[cfg(feature = "facilitator-server")]
#[cfg_attr(docsrs, doc(cfg(feature = "facilitator-server")))]
mod facilitator;
mod layer;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
mod webhook;

#[cfg(feature = "discovery")]
pub use self::discovery::Discovery;
pub use self::extract::{MissingPaywall, OptionalPayment, Payment, UsageMeter};
#[cfg(feature = "facilitator-server")]
pub use self::facilitator::facilitator_router;
pub use self::layer::PaywallLayer;
#[cfg(feature = "webhooks")]
pub use self::webhook::{VerifiedWebhook, WebhookRejection};
pub use x402_core::{self as core, Engine, Offer, Route, VerifiedPayment};
pub use x402_tower::{Paywall, PaywallBody};
