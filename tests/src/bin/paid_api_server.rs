//! The example server `examples/paid-api`, as a binary of this crate so that
//! tests can run it as processes (`CARGO_BIN_EXE_paid_api_server`): the
//! example's own `main` (configuration from the environment, the example's
//! app and `serve`) plus what the tests read.
//!
//! - It prints `LISTENING http://<addr>` on stdout once bound.
//! - `GET /test/handler-runs` (outside the paywall) answers how many times
//!   the paid `exact` handler ran: it counts the `paid call` event the
//!   example's handler logs.
//! - With `X402_TEST_LOG` set, warnings and errors are written to stderr.
//! - The process exits when its stdin closes, so a test that dies never
//!   leaves it behind.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::{
    fmt::Write as _,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use axum::routing::get;
use tokio::io::AsyncReadExt;
use tracing::{
    field::{Field, Visit},
    span, Event, Level, Metadata, Subscriber,
};

/// Counts the example handler's `paid call` events; prints warnings and
/// errors when asked to.
struct Counter {
    handler_runs: Arc<AtomicUsize>,
    log: bool,
}

/// Collects an event's fields as `name=value` pairs.
#[derive(Default)]
struct Fields {
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }
}

impl Subscriber for Counter {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event()
            && (metadata.target().starts_with("paid_api_common")
                || (self.log && *metadata.level() <= Level::WARN))
    }

    fn new_span(&self, _span: &span::Attributes<'_>) -> span::Id {
        span::Id::from_u64(1)
    }

    fn record(&self, _span: &span::Id, _values: &span::Record<'_>) {}

    fn record_follows_from(&self, _span: &span::Id, _follows: &span::Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        if metadata.target().starts_with("paid_api_common") && fields.message == "paid call" {
            self.handler_runs.fetch_add(1, Ordering::SeqCst);
        }
        if self.log && *metadata.level() <= Level::WARN {
            eprintln!(
                "paid_api_server {} {}: {}{}",
                metadata.level(),
                metadata.target(),
                fields.message,
                fields.rest
            );
        }
    }

    fn enter(&self, _span: &span::Id) {}

    fn exit(&self, _span: &span::Id) {}
}

#[tokio::main]
async fn main() {
    let handler_runs = Arc::new(AtomicUsize::new(0));
    tracing::subscriber::set_global_default(Counter {
        handler_runs: Arc::clone(&handler_runs),
        log: std::env::var_os("X402_TEST_LOG").is_some(),
    })
    .unwrap();

    // The example's `main`.
    let config = match paid_api::Config::from_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("paid_api_server: {e}");
            std::process::exit(1);
        }
    };
    let listener = tokio::net::TcpListener::bind(config.addr()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (router, engine, state) = match paid_api::router(&config.bound_to(addr)).await {
        Ok(parts) => parts,
        Err(e) => {
            eprintln!("paid_api_server: {e}");
            std::process::exit(1);
        }
    };
    // The example's app, with one more free route behind its paywall.
    let app = paid_api::paywalled(
        router.route(
            "/test/handler-runs",
            get(move || {
                let runs = handler_runs.load(Ordering::SeqCst);
                async move { runs.to_string() }
            }),
        ),
        engine,
    );
    println!("LISTENING http://{addr}");

    // Exit when the test closes our stdin (or dies).
    tokio::spawn(async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0_u8; 64];
        loop {
            match stdin.read(&mut buf).await {
                Ok(0) | Err(_) => std::process::exit(0),
                Ok(_) => {}
            }
        }
    });

    paid_api::serve(listener, app, state).await.unwrap();
}
