//! What the layer costs the inner service: unprotected requests and
//! ready-made 402s reach `call` with no clone of the inner service; requests
//! that need the engine's async path clone it once (tower's readiness rule).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    convert::Infallible,
    future::{ready, Ready},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
};

use tower::{Service, ServiceExt};
use x402_core::{testing::StandIn, Engine, Offer, Route};
use x402_tower::Paywall;

/// An inner service that counts its clones and its calls.
#[derive(Debug, Default)]
struct Counting {
    clones: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Clone for Counting {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            clones: Arc::clone(&self.clones),
            calls: Arc::clone(&self.calls),
        }
    }
}

impl Service<http::Request<String>> for Counting {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        ready(Ok(http::Response::new("the goods".into())))
    }
}

async fn send(
    paywall: &mut Paywall<Counting>,
    uri: &str,
    header: Option<(&str, &str)>,
) -> http::Response<x402_tower::PaywallBody<String>> {
    let mut request = http::Request::get(uri);
    if let Some((k, v)) = header {
        request = request.header(k, v);
    }
    let request = request.body(String::new()).unwrap();
    paywall.ready().await.unwrap().call(request).await.unwrap()
}

#[tokio::test]
async fn pass_through_and_ready_402s_never_clone_the_inner_service() {
    let facilitator = Arc::new(StandIn::new());
    let engine = Engine::builder_arc(facilitator.clone())
        .route(
            Route::get("/paid")
                .offer(Offer::exact(
                    "eip155:84532",
                    "$0.001",
                    "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                ))
                .resource_url("https://api.example.test/paid"),
        )
        .build()
        .unwrap();
    let inner = Counting::default();
    let (clones, calls) = (Arc::clone(&inner.clones), Arc::clone(&inner.calls));
    let mut paywall = Paywall::new(inner, engine);
    for _ in 0..3 {
        assert_eq!(send(&mut paywall, "/free", None).await.status(), 200);
        assert_eq!(send(&mut paywall, "/paid", None).await.status(), 402);
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the free route ran 3 times"
    );
    assert_eq!(clones.load(Ordering::SeqCst), 0);

    // A payment needs the engine's async path: one clone, and the handler
    // does not run for an unreadable payment.
    let response = send(
        &mut paywall,
        "/paid",
        Some(("payment-signature", "not base64!")),
    )
    .await;
    assert_eq!(response.status(), 402);
    assert_eq!(clones.load(Ordering::SeqCst), 1);
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    facilitator.assert_calls(0, 0);
}
