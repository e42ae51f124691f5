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
//! And a facilitator call through `HttpFacilitator`'s own transport reuses
//! its pooled connection's buffer: no block over that size, and a handful
//! of small ones a call. Over hyper's client connection, every answer took a
//! fresh 8 kB read buffer (hyper read ahead while the answer's body still
//! shared the last one), and a channel each for the answer and its body.
//!
//! Its own binary: the global allocator below counts what each test's
//! thread allocates while it watches. Here rather than beside `x402-axum`,
//! whose crate forbids `unsafe` (a `GlobalAlloc` needs it).

#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::{Cell, RefCell},
    io::{Read as _, Write as _},
    net::TcpListener,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use axum::{body::Body, routing::get, Router};
use http::{Request, StatusCode};
use tower::ServiceExt;
use x402_axum::PaywallLayer;
use x402_core::{
    facilitator::{Facilitator as _, HttpFacilitator},
    session::{MemorySessionStore, SessionOffer, SessionRecord, SessionStore as _, SessionToken},
    testing::{self, StandIn},
    Engine, Offer, Route,
};

/// The largest block glibc's per-thread cache serves.
const CACHED_MAX: usize = 1032;

/// Counts the blocks the watching thread allocates (or grows), and records
/// those over [`CACHED_MAX`] bytes.
struct Watching;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static BLOCKS: Cell<usize> = const { Cell::new(0) };
    /// The sizes seen over [`CACHED_MAX`]; given room before watching
    /// starts, so that recording does not allocate.
    static LARGE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

fn note(size: usize) {
    if !WATCHING.try_with(Cell::get).unwrap_or(false) {
        return;
    }
    let _ = BLOCKS.try_with(|b| b.set(b.get() + 1));
    if size > CACHED_MAX {
        let _ = LARGE.try_with(|large| {
            if let Ok(mut large) = large.try_borrow_mut() {
                if large.len() < large.capacity() {
                    large.push(size);
                }
            }
        });
    }
}

/// Runs `work` watched: the blocks this thread allocated meanwhile, and the
/// sizes of those over [`CACHED_MAX`].
async fn watched<F: std::future::Future>(work: F) -> (F::Output, usize, Vec<usize>) {
    LARGE.with(|large| {
        let mut large = large.borrow_mut();
        large.clear();
        large.reserve(256);
    });
    BLOCKS.with(|b| b.set(0));
    WATCHING.with(|w| w.set(true));
    let output = work.await;
    WATCHING.with(|w| w.set(false));
    let large = LARGE.with(|large| large.borrow().clone());
    (output, BLOCKS.with(Cell::get), large)
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

/// The first offer of `engine`'s 402 for `GET /paid`.
async fn first_offer(engine: &Engine) -> x402_core::proto::v2::PaymentRequirements {
    testing::challenge(engine, Request::get("/paid").body(()).unwrap())
        .await
        .accepts
        .remove(0)
}

async fn paid(router: &Router, path: &str, header: String) -> StatusCode {
    served(router, path, ("payment-signature", header)).await
}

/// `GET path` with one header besides `host`, served by `router`; its
/// status once the body is read. The header's value is moved into the
/// request, not copied (a payment's is over 1 032 bytes).
async fn served(router: &Router, path: &str, (name, value): (&str, String)) -> StatusCode {
    let request = Request::get(path)
        .header("host", "api.example.test")
        .header(name, value)
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
        let offer = first_offer(&engine).await;
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
        let (statuses, _, large) = watched(async {
            let mut statuses = Vec::with_capacity(requests.len());
            for (path, header) in requests {
                statuses.push((path, paid(&router, path, header).await));
            }
            statuses
        })
        .await;

        assert!(
            statuses.iter().all(|(_, s)| *s == StatusCode::OK),
            "{statuses:?}"
        );
        // The in-memory payment-id store's tables grow as ids are stored,
        // doubling: a few blocks over the whole run, not one a request.
        assert!(
            large.len() <= statuses.len() / 10,
            "{} paid requests allocated {} blocks over {CACHED_MAX} bytes: {large:?}",
            statuses.len(),
            large.len()
        );
    });
}

#[test]
fn a_session_call_through_the_layer_allocates_a_handful_of_blocks() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = MemorySessionStore::default();
        let token = SessionToken::generate();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let record = SessionRecord {
            scope: "demo".into(),
            remaining: 1_000,
            expires_at: now + 3_600,
        };
        store.open(&token.hash(), record).await.unwrap();
        let offer = || Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder(StandIn::new())
            .session_store(store)
            .route(
                Route::get("/session").offer(offer()).session(
                    SessionOffer::new("demo-1000", 1_000, Duration::from_secs(3_600), "demo")
                        .offer(offer()),
                ),
            )
            .build()
            .unwrap();
        let router = Router::new()
            .route("/session", get(|| async { "the goods" }))
            .layer(PaywallLayer::new(engine));
        let call = || {
            served(
                &router,
                "/session",
                ("x-payment-session", token.expose().to_owned()),
            )
        };
        for _ in 0..5 {
            assert_eq!(call().await, StatusCode::OK);
        }

        const CALLS: usize = 40;
        let (statuses, blocks, large) = watched(async {
            let mut statuses = Vec::with_capacity(CALLS);
            for _ in 0..CALLS {
                statuses.push(call().await);
            }
            statuses
        })
        .await;

        assert!(
            statuses.iter().all(|s| *s == StatusCode::OK),
            "{statuses:?}"
        );
        assert!(
            large.is_empty(),
            "{CALLS} session calls allocated blocks over {CACHED_MAX} bytes: {large:?}"
        );
        // The request and response as the test builds and reads them, the
        // router's and the layer's futures, the redemption's, the payment
        // in the handler's extensions: 36 a call when this was written, and
        // one more over the run. The redemption's late-answer handler and
        // the handler's body as a list of frames were two more a call.
        const BUDGET: usize = 36;
        assert!(
            blocks <= CALLS * BUDGET + 4,
            "{CALLS} session calls allocated {blocks} blocks ({} a call)",
            blocks / CALLS
        );
    });
}

/// A keep-alive facilitator on loopback that answers every request with a
/// valid verdict; the connections it accepted.
fn facilitator() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            count.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let body =
                    br#"{"isValid":true,"payer":"0x857b06519E91e3A54538791bDbb0E22373e36b66"}"#;
                let mut answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                )
                .into_bytes();
                answer.extend_from_slice(body);
                let mut seen = Vec::new();
                loop {
                    // One request: its head, then `content-length` bytes.
                    let wanted = seen.windows(4).position(|w| w == b"\r\n\r\n").map(|at| {
                        let head = String::from_utf8_lossy(&seen[..at]).to_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .map_or(0, |v| v.trim().parse().unwrap());
                        at + 4 + length
                    });
                    match wanted {
                        Some(end) if seen.len() >= end => {
                            seen.drain(..end);
                            if socket.write_all(&answer).is_err() {
                                return;
                            }
                        }
                        _ => {
                            let mut chunk = [0u8; 4096];
                            match socket.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&chunk[..n]),
                            }
                        }
                    }
                }
            });
        }
    });
    (url, accepted)
}

#[test]
fn a_facilitator_call_allocates_no_large_block_and_few_small_ones() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // A real payment for a real offer, as the engine would send it.
        let engine = Engine::builder(StandIn::new())
            .route(Route::get("/paid").offer(Offer::exact(
                "eip155:84532",
                "$0.001",
                testing::PAY_TO,
            )))
            .build()
            .unwrap();
        let offer = first_offer(&engine).await;
        let header = testing::payment(&offer);
        let request = x402_loadgen::floor_request(header.as_bytes()).unwrap();

        let (url, accepted) = facilitator();
        let client = HttpFacilitator::new(&url).unwrap();
        // The first calls open the connection and fill what is filled once.
        for _ in 0..5 {
            assert!(client.verify(&request).await.unwrap().is_valid);
        }

        const CALLS: usize = 40;
        let ((), blocks, large) = watched(async {
            for _ in 0..CALLS {
                let verdict = client.verify(&request).await;
                assert!(verdict.is_ok_and(|v| v.is_valid));
            }
        })
        .await;

        assert!(
            large.is_empty(),
            "{CALLS} calls allocated blocks over {CACHED_MAX} bytes: {large:?}"
        );
        // The call's futures, the answer's body and the verdict's strings:
        // five a call when this was written. Over hyper's connection the
        // transport alone took about seven, one of them 8 kB.
        assert!(
            blocks <= CALLS * 6,
            "{CALLS} calls allocated {blocks} blocks ({} a call)",
            blocks / CALLS
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "one kept connection");
    });
}
