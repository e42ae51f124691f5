//! The x402 payment engine as a [`tower::Layer`](tower_layer::Layer).
//!
//! [`PaywallLayer`] wraps any `tower::Service<http::Request<_>>` whose
//! response is an `http::Response` with any body. Requests to routes the
//! [`Engine`] protects are answered with a 402 challenge until they carry a
//! valid payment; a paid request reaches the inner service with the
//! [`VerifiedPayment`] in its extensions, and its response gets the settlement
//! receipt.
//!
//! ```
//! use std::convert::Infallible;
//! use tower::{ServiceBuilder, ServiceExt};
//! use x402_core::{Engine, Offer, Route};
//! use x402_tower::PaywallLayer;
//! # use x402_core::testing::StandIn;
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(StandIn::new())
//!     .route(Route::get("/paid").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.001",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//!
//! let service = ServiceBuilder::new()
//!     .layer(PaywallLayer::new(engine))
//!     .service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, Infallible>(http::Response::new(String::from("the goods")))
//!     });
//!
//! let response = service.oneshot(http::Request::get("/paid").body(String::new())?).await?;
//! assert_eq!(response.status(), 402);
//! assert!(response.headers().contains_key("payment-required"));
//! # Ok(()) }
//! ```
//!
//! # What is protected
//!
//! [`PaywallLayer::new`] protects what the engine's route table covers, by
//! the rule of [`x402_core::boundary`]: every reading of the request's path
//! a router could make is checked, and paths whose meaning depends on the
//! decoder are refused with 400 where a parameter could take them. Put it
//! in front of the router, where the request's URI is the one the client
//! sent, or tell it what the router decided with
//! [`read_dispatch`](PaywallLayer::read_dispatch) (inside axum, use
//! `x402_axum::PaywallLayer`, which does). [`PaywallLayer::route`] binds one
//! route to the one handler it wraps.
//!
//! # Bodies
//!
//! Routes that settle after the handler (the default) hold the handler's body
//! until the money moved: a failed settlement must not leak a paid body, and
//! a body that fails midway must not be charged. Routes that settle before
//! the handler stream the body untouched. Everything else passes through as
//! it is.

#![cfg_attr(docsrs, feature(doc_auto_cfg))]

mod dispatch;
mod future;
mod layer;
mod service;

pub use self::dispatch::{Dispatch, ReadDispatch};
pub use self::future::ResponseFuture;
pub use self::layer::PaywallLayer;
pub use self::service::Paywall;
pub use x402_core::{Engine, VerifiedPayment};

/// The response body of [`Paywall`]: the inner service's body streamed as it
/// is, or a complete body (an engine response, or a paid handler's body held
/// until its payment settled).
pub type PaywallBody<B> = x402_core::engine::PaidBody<B>;
