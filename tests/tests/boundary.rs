//! The protection boundary, differentially, on tower, axum and actix-web:
//! every raw request target of the corpus (and random ones) is written over
//! TCP to a bare twin and a guarded server of each placement. Whatever the
//! bare twin dispatches to a paid handler, the guarded server answers 402
//! with that handler's price, or 400; no paid handler ever runs unpaid; and
//! plain free paths stay free.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

use futures_util::{stream, StreamExt};
use x402_tests::{
    boundary::{amount_of, corpus, send_raw, Shape, Twins, FREE, PAID},
    payment,
};

/// Checks one target on both twins; returns a description of what went
/// wrong, if anything.
async fn check(twins: &Twins, method: &str, target: &str) -> Option<String> {
    let bare = send_raw(&twins.bare, method, target, &[]).await?;
    let guarded = send_raw(&twins.guarded, method, target, &[]).await;
    let dispatched = bare.handler().filter(|h| amount_of(h).is_some())?;
    let Some(guarded) = guarded else {
        return Some(format!(
            "{method} {target}: guarded server closed without answering"
        ));
    };
    match guarded.status {
        400 => None,
        402 => {
            let challenge = guarded.challenge();
            let amount = challenge
                .as_ref()
                .and_then(|c| c["accepts"][0]["amount"].as_str().map(str::to_owned));
            (amount.as_deref() != amount_of(dispatched)).then(|| {
                format!("{method} {target}: dispatched to {dispatched}, challenged for {amount:?}")
            })
        }
        status => Some(format!(
            "{method} {target}: dispatched to {dispatched}, guarded answered {status} from {:?}",
            guarded.handler()
        )),
    }
}

async fn run_corpus(shape: Shape) {
    let twins = Twins::start(shape).await;
    let targets = corpus();
    let cases: Vec<(&str, &String)> = ["GET", "HEAD"]
        .into_iter()
        .flat_map(|m| targets.iter().map(move |t| (m, t)))
        .collect();
    let dispatched_to_paid = stream::iter(&cases)
        .map(|(m, t)| async {
            let bare = send_raw(&twins.bare, m, t, &[]).await;
            bare.and_then(|b| b.handler().map(str::to_owned))
                .filter(|h| amount_of(h).is_some())
                .is_some()
        })
        .buffer_unordered(16)
        .filter(|paid| std::future::ready(*paid))
        .count()
        .await;
    let failures: Vec<String> = stream::iter(&cases)
        .map(|(m, t)| check(&twins, m, t))
        .buffer_unordered(16)
        .filter_map(std::future::ready)
        .collect()
        .await;
    assert!(
        failures.is_empty(),
        "{shape:?}: {} of {} targets walked around the paywall:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert_eq!(
        twins.runs.unpaid(),
        0,
        "{shape:?}: a paid handler ran unpaid"
    );
    twins.standin.assert_calls(0, 0);
    // The plain free paths are untouched.
    for path in FREE {
        let reply = send_raw(&twins.guarded, "GET", path, &[]).await.unwrap();
        assert_eq!(reply.status, 200, "{shape:?} {path}");
        assert!(reply.handler().is_some(), "{shape:?} {path}");
    }
    println!(
        "boundary[{shape:?}]: {} requests, {dispatched_to_paid} dispatched to a paid handler by the bare twin, all refused",
        cases.len()
    );
}

/// Every paid handler can still be paid for, through every placement: the
/// challenge of its example path, paid, reaches the right handler once.
async fn pays_through(shape: Shape) {
    let twins = Twins::start(shape).await;
    for paid in PAID {
        let reply = send_raw(&twins.guarded, "GET", paid.example, &[])
            .await
            .unwrap();
        assert_eq!(reply.status, 402, "{shape:?} {}", paid.example);
        let challenge = reply.challenge().unwrap();
        let row = &challenge["accepts"][0];
        assert_eq!(row["amount"], paid.amount, "{shape:?} {}", paid.example);
        assert_eq!(
            challenge["resource"]["url"],
            format!("{}{}", twins.guarded, paid.example),
            "{shape:?}"
        );
        let header = payment::v2_header(row);
        let reply = send_raw(
            &twins.guarded,
            "GET",
            paid.example,
            &[("PAYMENT-SIGNATURE", &header)],
        )
        .await
        .unwrap();
        assert_eq!(reply.status, 200, "{shape:?} {}", paid.example);
        assert_eq!(reply.handler(), Some(paid.name), "{shape:?}");
        assert!(reply.header("payment-response").is_some(), "{shape:?}");
        assert_eq!(twins.runs.paid(paid.name), 1, "{shape:?} {}", paid.name);
    }
    assert_eq!(twins.runs.unpaid(), 0);
    twins.standin.assert_calls(PAID.len(), PAID.len());
}

macro_rules! shapes {
    ($($name:ident => $shape:expr),* $(,)?) => {
        mod corpus {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    run_corpus($shape).await;
                }
            )*
        }
        mod paying {
            use super::*;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    pays_through($shape).await;
                }
            )*
        }
    };
}

shapes! {
    axum_router_layer => Shape::AxumRouterLayer,
    axum_route_layer => Shape::AxumRouteLayer,
    axum_per_route => Shape::AxumPerRoute,
    axum_nest_service => Shape::AxumNestService,
    tower_over_axum => Shape::TowerOverAxum,
    tower_over_cleaning_router => Shape::TowerOverCleaningRouter,
    actix_app => Shape::ActixApp,
    actix_scopes => Shape::ActixScopes,
}

/// Random raw paths: words of the routes, dots, escapes (of separators and
/// of anything), backslashes and `;`, through the same check on a shape of
/// each adapter.
#[test]
fn random_paths_never_reach_a_paid_handler_unpaid() {
    use proptest::{prelude::*, test_runner::TestRunner};

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let all = runtime.block_on(async {
        let mut all = Vec::new();
        for shape in [
            Shape::AxumRouterLayer,
            Shape::AxumNestService,
            Shape::TowerOverAxum,
            Shape::TowerOverCleaningRouter,
            Shape::ActixApp,
        ] {
            all.push(Twins::start(shape).await);
        }
        all
    });
    let word = prop::sample::select(vec![
        "report", "weather", "users", "profile", "files", "api", "bound", "health", "free", "x",
        "42", ".", "..", "", "%2e", "%2E%2e", "%2f", "%2F", "%5c", "%5C", "\\", ";a=1",
    ])
    .prop_map(str::to_owned);
    let escape = any::<u8>()
        .prop_filter("not a control byte", |b| *b > 0x20)
        .prop_map(|b| format!("%{b:02x}"));
    let noise = "[a-zA-Z0-9.%;~_\\\\-]{1,6}";
    let segment = prop_oneof![4 => word, 1 => escape, 1 => noise];
    let path = prop::collection::vec(segment, 0..6).prop_map(|s| format!("/{}", s.join("/")));
    let mut runner = TestRunner::new(ProptestConfig::with_cases(512));
    runner
        .run(&path, |path| {
            for twins in &all {
                for method in ["GET", "HEAD"] {
                    if let Some(failure) = runtime.block_on(check(twins, method, &path)) {
                        return Err(TestCaseError::fail(format!("{:?}: {failure}", twins.shape)));
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    for twins in &all {
        assert_eq!(twins.runs.unpaid(), 0, "{:?}", twins.shape);
        twins.standin.assert_calls(0, 0);
    }
    drop(all);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
}

/// `x402_tower::PaywallLayer::route` protects the one service it wraps,
/// whatever path reaches it.
#[tokio::test]
async fn a_bound_tower_route_protects_every_path_that_reaches_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::{Layer, ServiceExt};

    let standin = x402_tests::StandIn::start(x402_tests::EventLog::default()).await;
    let engine = x402_core::Engine::builder(standin.facilitator())
        .public_origin("https://api.example.com")
        .build()
        .unwrap();
    let layer = x402_tower::PaywallLayer::new(engine)
        .route(x402_tests::boundary::bound_route())
        .unwrap();
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = layer.layer(tower::service_fn(move |_: http::Request<String>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, std::convert::Infallible>(http::Response::new(String::from("goods"))) }
    }));
    let mut checked = 0;
    for target in corpus() {
        let Ok(uri) = target.parse::<http::Uri>() else {
            continue;
        };
        let response = service
            .clone()
            .oneshot(http::Request::get(uri).body(String::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 402, "{target}");
        checked += 1;
    }
    assert!(checked > 800, "{checked}");
    // Another method than the bound route's passes: it is not this price's.
    let post = service
        .oneshot(http::Request::post("/bound/7").body(String::new()).unwrap())
        .await
        .unwrap();
    assert_eq!(post.status(), 200);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    standin.assert_calls(0, 0);
}

/// Collects the `warn!` events of the current thread, with their fields.
#[derive(Clone, Default)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Warnings {
    fn matching(&self, needle: &str) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|w| w.contains(needle))
            .count()
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Placements that cannot protect what their author meant are named in the
/// log, once: a table route declared by the path a nested router leaves,
/// and a bound route served under another template.
#[tokio::test]
async fn misplacements_are_logged_once_with_the_route_named() {
    use axum::{routing::get, Router};
    use x402_core::{Engine, Offer, Route};

    let warnings = Warnings::default();
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let standin = x402_tests::StandIn::start(x402_tests::EventLog::default()).await;
    let offer = || Offer::exact("eip155:84532", "$0.001", x402_tests::PAY_TO);
    let engine = Engine::builder(standin.facilitator())
        // Wrong: clients send /api/report.
        .route(Route::get("/report").offer(offer()))
        .public_origin("http://127.0.0.1")
        .build()
        .unwrap();
    let paywall = x402_axum::PaywallLayer::new(engine);
    let app: Router = Router::new()
        .nest(
            "/api",
            Router::new()
                .route("/report", get(|| async { "report" }))
                .layer(paywall.clone()),
        )
        .route(
            "/weather/{city}",
            get(|| async { "weather" }).layer(
                paywall
                    .route(Route::get("/forecast/:city").offer(offer()))
                    .unwrap(),
            ),
        );
    let (listener, base) = x402_tests::adapters::bind().await;
    tokio::spawn(async move { axum::serve(listener, app).await });

    for _ in 0..3 {
        let free = send_raw(&base, "GET", "/api/report", &[]).await.unwrap();
        assert_eq!(free.status, 200, "the misdeclared route is not protected");
        let paid = send_raw(&base, "GET", "/weather/paris", &[]).await.unwrap();
        assert_eq!(paid.status, 402, "a bound route protects what it wraps");
    }
    assert_eq!(
        warnings.matching("route=\"/report\" stripped_path=\"/report\""),
        1
    );
    assert_eq!(
        warnings.matching("route=\"/forecast/:city\" served_at=\"/weather/{city}\""),
        1
    );
    standin.assert_calls(0, 0);
}
