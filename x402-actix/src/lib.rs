//! The x402 payment engine as [actix-web](https://actix.rs) middleware.
//!
//! [`PaywallLayer`] wraps an `App`, a `Scope` or a `Resource`. Requests to
//! routes the [`Engine`] protects are answered with a 402 challenge until they
//! carry a valid payment; a paid request reaches the handler with the
//! [`VerifiedPayment`] in its extensions (the [`Payment`] extractor reads it),
//! and its response gets the settlement receipt.
//!
//! Every payment decision is the engine's (`x402_core::engine`), the same one
//! `x402-tower` and `x402-axum` drive; this crate only translates between
//! actix-web's types and the engine's.
//!
//! ```
//! use actix_web::{test, web, App, HttpResponse};
//! use x402_actix::{Engine, Offer, Payment, Route, PaywallLayer};
//! # use x402_core::testing::StandIn;
//! # #[actix_web::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(StandIn::new())
//!     .route(Route::get("/paid").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.001",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//!
//! async fn paid(Payment(payment): Payment) -> HttpResponse {
//!     HttpResponse::Ok().body(format!("the goods, for {:?}", payment.payer))
//! }
//!
//! let app = test::init_service(
//!     App::new()
//!         .wrap(PaywallLayer::new(engine))
//!         .route("/paid", web::get().to(paid))
//!         .route("/free", web::get().to(HttpResponse::Ok)),
//! )
//! .await;
//!
//! let response = test::call_service(&app, test::TestRequest::get().uri("/paid").to_request()).await;
//! assert_eq!(response.status(), 402);
//! assert!(response.headers().contains_key("payment-required"));
//!
//! let response = test::call_service(&app, test::TestRequest::get().uri("/free").to_request()).await;
//! assert_eq!(response.status(), 200);
//! # Ok(()) }
//! ```
//!
//! [`Discovery`] serves the engine's discovery document
//! (`GET /.well-known/x402`) and an OpenAPI document of the paid routes, the
//! same ones `x402-axum` serves.
//!
//! Every extractor rejection ([`MissingPaywall`], `WebhookRejection`) is
//! defined in `x402_core::rejection` and only rendered here, so actix-web and
//! axum answer it with the same status and body.
//!
//! # Bodies
//!
//! Routes that settle after the handler (the default) hold the handler's body
//! until the money moved: a failed settlement must not leak a paid body, and
//! a body that fails midway must not be charged. Routes that settle before
//! the handler stream the body untouched. Everything else passes through as
//! it is.
//!
//! # Handler errors
//!
//! actix-web turns a handler's `Err` into a response before the middleware
//! sees it, so a failing handler looks like any response of status 400 or
//! more: it is delivered unchanged and nothing is charged. An `Err` from an
//! inner *middleware* releases the payment and is passed on.
//!
//! # `http` versions
//!
//! actix-web 4 uses `http` 0.2 and `x402-core` uses `http` 1.x. The method,
//! URI and headers are copied across for the engine, and the engine's
//! responses copied back, losslessly; see the crate's `convert` module.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod convert;
pub mod discovery;
mod extract;
mod middleware;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
mod webhook;

pub use self::discovery::Discovery;
pub use self::extract::{MissingPaywall, Payment, UsageMeter};
pub use self::middleware::{Paywall, PaywallLayer};
#[cfg(feature = "webhooks")]
pub use self::webhook::{VerifiedWebhook, WebhookRejection};
pub use x402_core::{self as core, Engine, Offer, Route, VerifiedPayment};

#[cfg(test)]
mod tests;
