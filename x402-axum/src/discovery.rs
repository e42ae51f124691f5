//! Discovery and observability routes.
//!
//! - [`Discovery`] (feature `discovery`): `GET /.well-known/x402`, the
//!   engine's discovery document (format in [`x402_core::discovery`]),
//!   optionally `GET /.well-known/x402/openapi.json`, an OpenAPI 3.1 document
//!   of the paid routes, and `GET /.well-known/x402/health`, the engine's
//!   [readiness](x402_core::readiness) (200 or 503; leave it out with
//!   [`Discovery::health`]).
//! - [`prometheus_router`] (feature `prometheus`): the Prometheus text
//!   exposition of a `metrics-exporter-prometheus` recorder, with the engine's
//!   series (feature `metrics` of x402-core, enabled by this one).

#[cfg(feature = "prometheus")]
pub use self::prometheus::prometheus_router;
#[cfg(feature = "discovery")]
pub use self::well_known::Discovery;

#[cfg(feature = "discovery")]
mod well_known {
    use std::{sync::Arc, time::Duration};

    use axum::{
        extract::State,
        http::HeaderMap,
        response::{IntoResponse, Response},
        routing::get,
        Router,
    };
    use x402_core::{
        discovery::{DiscoveryDocument, DiscoveryEndpoints, OpenApiInfo},
        Engine,
    };

    /// Serves an engine's discovery document at `GET /.well-known/x402`,
    /// with [`openapi`](Self::openapi) an OpenAPI 3.1 document at
    /// `GET /.well-known/x402/openapi.json`, and unless
    /// [left out](Self::health) its [readiness](x402_core::readiness) at
    /// `GET /.well-known/x402/health` (200 when ready, 503 when not,
    /// `Cache-Control: no-store`). Merge it into the app's router, outside
    /// the paywall layer's protected routes (the routes are free).
    ///
    /// What each path answers (the base URL, the caching and CORS headers,
    /// the JSON) is x402-core's [`DiscoveryEndpoints`], so
    /// `x402_actix::Discovery` serves the same documents; this type only
    /// puts them in an axum `Router`.
    ///
    /// ```
    /// # use x402_core::testing::StandIn;
    /// use x402_axum::{core::discovery::OpenApiInfo, discovery::Discovery, Engine, Offer, PaywallLayer, Route};
    ///
    /// let engine = Engine::builder(StandIn::new())
    ///     .route(Route::get("/report").offer(Offer::exact(
    ///         "eip155:84532",
    ///         "$0.01",
    ///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    ///     )))
    ///     .build()
    ///     .unwrap();
    /// let app: axum::Router = axum::Router::new()
    ///     .route("/report", axum::routing::get(|| async { "paid" }))
    ///     .layer(PaywallLayer::new(engine.clone()))
    ///     .merge(
    ///         Discovery::new(engine)
    ///             .base_url("https://api.example.com")
    ///             .openapi(OpenApiInfo::new("Reports", "1.0.0"))
    ///             .into_router(),
    ///     );
    /// # let _ = app;
    /// ```
    #[derive(Debug, Clone)]
    #[must_use]
    pub struct Discovery(DiscoveryEndpoints);

    impl Discovery {
        /// Discovery for `engine`'s routes.
        pub fn new(engine: Engine) -> Self {
            Self(DiscoveryEndpoints::new(engine))
        }

        /// The public base URL of the API (`https://api.example.com`).
        /// Without it, the engine's
        /// [`public_origin`](x402_core::EngineBuilder::public_origin) is used
        /// (a client's `Host` only when the engine
        /// [trusts a proxy](x402_core::EngineBuilder::trust_proxy_headers)).
        pub fn base_url(self, url: impl Into<String>) -> Self {
            Self(self.0.base_url(url))
        }

        /// Also serves an OpenAPI 3.1 document with this `info`.
        pub fn openapi(self, info: OpenApiInfo) -> Self {
            Self(self.0.openapi(info))
        }

        /// Whether to serve the readiness report at
        /// `GET /.well-known/x402/health` (default: yes; it tells the public
        /// which offered networks cannot be paid now, see
        /// [`DiscoveryEndpoints::health`]). `health(false)` leaves it out.
        pub fn health(self, serve: bool) -> Self {
            Self(self.0.health(serve))
        }

        /// How long a readiness report is reused before the facilitator
        /// is asked again (default 5 s; see
        /// [`DiscoveryEndpoints::health_interval`]).
        pub fn health_interval(self, interval: Duration) -> Self {
            Self(self.0.health_interval(interval))
        }

        /// The routes, for [`Router::merge`].
        pub fn into_router<S>(self) -> Router<S>
        where
            S: Clone + Send + Sync + 'static,
        {
            let endpoints = Arc::new(self.0);
            let mut router = Router::new();
            for (path, document) in endpoints.paths() {
                router = router.route(
                    path,
                    get(
                        move |State(endpoints): State<Arc<DiscoveryEndpoints>>,
                              headers: HeaderMap| {
                            serve(endpoints, document, headers)
                        },
                    ),
                );
            }
            router.with_state(endpoints)
        }
    }

    async fn serve(
        endpoints: Arc<DiscoveryEndpoints>,
        document: DiscoveryDocument,
        headers: HeaderMap,
    ) -> Response {
        endpoints
            .respond(document, &headers)
            .await
            .map(axum::body::Body::from)
            .into_response()
    }
}

#[cfg(feature = "prometheus")]
mod prometheus {
    use axum::{
        extract::State,
        http::{header, HeaderValue},
        response::{IntoResponse, Response},
        routing::get,
        Router,
    };
    use metrics_exporter_prometheus::PrometheusHandle;

    /// `GET path` answering the Prometheus text exposition of `handle`
    /// (`text/plain; version=0.0.4`).
    ///
    /// ```
    /// use metrics_exporter_prometheus::PrometheusBuilder;
    ///
    /// let recorder = PrometheusBuilder::new().build_recorder();
    /// let handle = recorder.handle();
    /// // In an application: metrics::set_global_recorder(recorder).unwrap();
    /// let app: axum::Router = x402_axum::discovery::prometheus_router("/metrics", handle);
    /// # let _ = (app, recorder);
    /// ```
    ///
    /// Keep it off the public internet (bind it on another listener, or
    /// guard it with your own layer): route names and payment volumes are
    /// business data.
    ///
    /// A recorder made with `build_recorder` keeps every histogram sample
    /// until it is rendered or upkept: run `handle.run_upkeep()` every few
    /// seconds (as `PrometheusBuilder::install` does), or the process grows
    /// with each paid request while nobody scrapes.
    pub fn prometheus_router<S>(path: &str, handle: PrometheusHandle) -> Router<S>
    where
        S: Clone + Send + Sync + 'static,
    {
        Router::new().route(path, get(render)).with_state(handle)
    }

    async fn render(State(handle): State<PrometheusHandle>) -> Response {
        let mut response = handle.render().into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        response
    }
}

#[cfg(all(test, feature = "discovery"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use axum::{body::Body, http::Request, Router};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    use x402_core::{
        discovery::{Bazaar, OpenApiInfo},
        testing::StandIn,
        Engine, EngineBuilder, Offer, Route,
    };

    use super::Discovery;

    fn engine() -> Engine {
        engine_with(|b| b.public_origin("https://api.example.com"))
    }

    fn engine_with(origin: impl FnOnce(EngineBuilder) -> EngineBuilder) -> Engine {
        let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
        origin(Engine::builder(StandIn::new().supported_down()))
            .route(
                Route::get("/weather/:city")
                    .offer(Offer::exact("eip155:84532", "$0.001", pay_to))
                    .bazaar(Bazaar::http().query_param("units", "metric")),
            )
            // Needs `/supported`, which is down: listed as unavailable.
            .route(Route::get("/metered").offer(Offer::upto("eip155:84532", "2000", pay_to)))
            .build()
            .unwrap()
    }

    async fn get(
        app: Router,
        uri: &str,
        host: &str,
    ) -> (u16, axum::http::HeaderMap, serde_json::Value) {
        let response = app
            .oneshot(
                Request::get(uri)
                    .header("host", host)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            headers,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    #[tokio::test]
    async fn serves_the_document_and_openapi() {
        let app: Router = Discovery::new(engine())
            .openapi(OpenApiInfo::new("Weather", "1"))
            .into_router();
        let (status, headers, doc) = get(app.clone(), "/.well-known/x402", "evil.example").await;
        assert_eq!(status, 200);
        assert_eq!(headers["content-type"], "application/json");
        assert!(headers.get("vary").is_none());
        // The engine's public origin, whatever the client's Host.
        assert_eq!(doc["baseUrl"], "https://api.example.com");
        assert_eq!(
            doc["resources"][0]["resource"],
            "https://api.example.com/weather/:city"
        );
        assert_eq!(doc["resources"][0]["accepts"][0]["amount"], "1000");
        assert_eq!(doc["resources"][1]["pricing"], "unavailable");
        let (status, _, api) = get(app, "/.well-known/x402/openapi.json", "api.example.com").await;
        assert_eq!(status, 200);
        assert_eq!(api["openapi"], "3.1.0");
        assert!(api["paths"]["/weather/{city}"]["get"]["x-payment-info"].is_object());
    }

    #[tokio::test]
    async fn behind_a_trusted_proxy_the_host_names_the_base() {
        let app: Router =
            Discovery::new(engine_with(EngineBuilder::trust_proxy_headers)).into_router();
        let (_, headers, doc) = get(app.clone(), "/.well-known/x402", "api.example.com").await;
        assert_eq!(doc["baseUrl"], "http://api.example.com");
        assert!(headers["vary"].to_str().unwrap().contains("host"));
        // Nothing that would change the URL's shape is taken.
        let (_, _, doc) = get(app.clone(), "/.well-known/x402", "evil\"<x>").await;
        assert_eq!(doc["baseUrl"], "http://localhost");
        // Without either, localhost, never the client's Host.
        let app: Router = Discovery::new(engine_with(|b| b)).into_router();
        let (_, _, doc) = get(app, "/.well-known/x402", "evil.example").await;
        assert_eq!(doc["baseUrl"], "http://localhost");
    }

    #[tokio::test]
    async fn serves_readiness_unless_left_out() {
        let app: Router = Discovery::new(engine()).into_router();
        let response = app
            .clone()
            .oneshot(
                Request::get("/.well-known/x402/health")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        // `/supported` is down: not ready.
        assert_eq!(response.status(), 503);
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert_eq!(response.headers()["content-type"], "application/json");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let report: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(report["ready"], false);
        assert_eq!(report["facilitator"]["probeError"], "timeout");

        let app: Router = Discovery::new(engine()).health(false).into_router();
        let (status, _, _) = get(app, "/.well-known/x402/health", "x").await;
        assert_eq!(status, 404);
    }

    #[tokio::test]
    async fn a_fixed_base_url_wins_and_openapi_is_opt_in() {
        let app: Router = Discovery::new(engine())
            .base_url("https://pay.example.com/")
            .into_router();
        let (_, headers, doc) = get(app.clone(), "/.well-known/x402", "other.example.com").await;
        assert_eq!(doc["baseUrl"], "https://pay.example.com");
        assert!(headers.get("vary").is_none());
        let (status, _, _) = get(app, "/.well-known/x402/openapi.json", "x").await;
        assert_eq!(status, 404);
    }
}
