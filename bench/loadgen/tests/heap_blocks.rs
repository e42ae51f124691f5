//! A paid request through the layer in front of an axum router allocates no
//! heap block over 1 032 bytes of its own, with a payment id (the
//! `payment-identifier` extension) and without: what grows with the stores
//! (a few blocks over a run) is allowed, one block a request is not.
//!
//! That is the largest block glibc's allocator serves from its per-thread
//! cache. A larger one takes the arena's lock, and from 1 024 bytes on it
//! first merges the arena's small free blocks (`malloc_consolidate`): under
//! load, a few of them per request cost the paid path more CPU than the
//! instructions around them. The engine's futures were shrunk under that
//! size once and grew back over it unnoticed (the layer's future by 8
//! bytes, the settlement's by 40, and by 840 with a payment id); this test
//! says so when one does.
//!
//! Its own binary: the global allocator below watches one thread at a time.
//! Here rather than beside `x402-axum`, whose crate forbids `unsafe` (a
//! `GlobalAlloc` needs it).

#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::Mutex,
};

use axum::{body::Body, routing::get, Router};
use http::{Request, StatusCode};
use tower::ServiceExt;
use x402_axum::PaywallLayer;
use x402_core::{
    testing::{self, StandIn},
    Engine, Offer, Route,
};

/// The largest block glibc's per-thread cache serves.
const CACHED_MAX: usize = 1032;

/// Records the blocks over [`CACHED_MAX`] bytes that the watching thread
/// allocates.
struct Watching;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
}

/// The sizes seen; filled with room reserved up front, so that recording
/// does not allocate.
static LARGE: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn note(size: usize) {
    if size > CACHED_MAX && WATCHING.try_with(Cell::get).unwrap_or(false) {
        if let Ok(mut large) = LARGE.try_lock() {
            if large.len() < large.capacity() {
                large.push(size);
            }
        }
    }
}

// SAFETY: every call is passed on to `System` unchanged.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Watching = Watching;

async fn paid(router: &Router, path: &str, header: String) -> StatusCode {
    let request = Request::get(path)
        .header("host", "api.example.test")
        .header("payment-signature", header)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    // The body is read as a server would write it.
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    status
}

#[test]
fn a_paid_request_allocates_no_block_over_the_thread_cache() {
    // One thread: everything the request allocates, the watched thread does.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let facilitator = StandIn::new().without_records();
        let offer = || Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder(facilitator)
            .route(Route::get("/paid").offer(offer()))
            .route(
                Route::get("/with-id")
                    .offer(offer())
                    .payment_identifier(false),
            )
            .build()
            .unwrap();
        let offer = testing::challenge(&engine, Request::get("/paid").body(()).unwrap())
            .await
            .accepts
            .remove(0);
        let handler = || async { "the goods" };
        let router = Router::new()
            .route("/paid", get(handler))
            .route("/with-id", get(handler))
            .layer(PaywallLayer::new(engine));
        let requests = |first: usize| {
            (first..first + 20).flat_map(|n| {
                let plain = testing::payment(&offer);
                let id = format!("pay_heap_blocks_{n:016}");
                let identified = testing::with_payment_id(&testing::payment(&offer), &id, false);
                [("/paid", plain), ("/with-id", identified)]
            })
        };

        // First calls fill what is filled once (caches, lazy statics).
        for (path, header) in requests(0).take(6) {
            assert_eq!(paid(&router, path, header).await, StatusCode::OK, "{path}");
        }
        let requests: Vec<(&str, String)> = requests(100).collect();
        LARGE.lock().unwrap().reserve(256);

        WATCHING.with(|w| w.set(true));
        let mut statuses = Vec::with_capacity(requests.len());
        for (path, header) in requests {
            statuses.push((path, paid(&router, path, header).await));
        }
        WATCHING.with(|w| w.set(false));

        assert!(
            statuses.iter().all(|(_, s)| *s == StatusCode::OK),
            "{statuses:?}"
        );
        // The in-memory payment-id store's tables grow as ids are stored,
        // doubling: a few blocks over the whole run, not one a request.
        let large = LARGE.lock().unwrap().clone();
        assert!(
            large.len() <= statuses.len() / 10,
            "{} paid requests allocated {} blocks over {CACHED_MAX} bytes: {large:?}",
            statuses.len(),
            large.len()
        );
    });
}
