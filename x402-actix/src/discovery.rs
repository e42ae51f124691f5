//! Discovery routes: `GET /.well-known/x402`, the engine's discovery
//! document (format in [`x402_core::discovery`]), optionally
//! `GET /.well-known/x402/openapi.json`, an OpenAPI 3.1 document of the paid
//! routes, and `GET /.well-known/x402/health`, the engine's
//! [readiness](x402_core::readiness) (200 or 503; leave it out with
//! [`Discovery::health`]). The actix-web twin of
//! `x402_axum::discovery::Discovery`.

use std::time::Duration;

use actix_web::{
    body::BoxBody,
    dev::{AppService, HttpServiceFactory},
    guard, web, HttpRequest, HttpResponse,
};
use x402_core::{
    discovery::{DiscoveryDocument, DiscoveryEndpoints, OpenApiInfo},
    Engine,
};

use crate::convert::{headers_to_http1, response};

/// Serves an engine's discovery document at `GET /.well-known/x402`, with
/// [`openapi`](Self::openapi) an OpenAPI 3.1 document at
/// `GET /.well-known/x402/openapi.json`, and unless [left out](Self::health)
/// its [readiness](x402_core::readiness) at `GET /.well-known/x402/health`
/// (200 when ready, 503 when not, `Cache-Control: no-store`). Register it
/// with `App::service`
/// (or `Scope::service`); the routes are free, and need not be outside
/// [`PaywallLayer`](crate::PaywallLayer), since the engine's route table
/// does not list them.
///
/// What each path answers (the base URL, the caching and CORS headers, the
/// JSON) is x402-core's [`DiscoveryEndpoints`], so `x402_axum::Discovery`
/// serves the same documents; this type only registers them with actix-web.
///
/// ```
/// # use x402_core::testing::StandIn;
/// # #[actix_web::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use actix_web::{test, web, App, HttpResponse};
/// use x402_actix::{core::discovery::OpenApiInfo, Discovery, Engine, Offer, Route, PaywallLayer};
///
/// let engine = Engine::builder(StandIn::new())
///     .route(Route::get("/report").offer(Offer::exact(
///         "eip155:84532",
///         "$0.01",
///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///     )))
///     .build()?;
/// let app = test::init_service(
///     App::new()
///         .wrap(PaywallLayer::new(engine.clone()))
///         .service(
///             Discovery::new(engine)
///                 .base_url("https://api.example.com")
///                 .openapi(OpenApiInfo::new("Reports", "1.0.0")),
///         )
///         .route("/report", web::get().to(|| async { HttpResponse::Ok().body("paid") })),
/// )
/// .await;
///
/// let request = test::TestRequest::get().uri("/.well-known/x402").to_request();
/// let document: serde_json::Value = test::call_and_read_body_json(&app, request).await;
/// assert_eq!(document["resources"][0]["resource"], "https://api.example.com/report");
///
/// let request = test::TestRequest::get().uri("/.well-known/x402/openapi.json").to_request();
/// let api: serde_json::Value = test::call_and_read_body_json(&app, request).await;
/// assert_eq!(api["openapi"], "3.1.0");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Discovery(DiscoveryEndpoints);

impl Discovery {
    /// Discovery for `engine`'s routes.
    pub fn new(engine: Engine) -> Self {
        Self(DiscoveryEndpoints::new(engine))
    }

    /// The public base URL of the API (`https://api.example.com`). Without
    /// it, the engine's
    /// [`public_origin`](x402_core::EngineBuilder::public_origin) is used (a
    /// client's `Host` only when the engine
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

    /// How long a readiness report is reused before the facilitator is
    /// asked again (default 5 s; see
    /// [`DiscoveryEndpoints::health_interval`]). Reports are shared by every
    /// worker's copy, through the engine.
    pub fn health_interval(self, interval: Duration) -> Self {
        Self(self.0.health_interval(interval))
    }
}

impl HttpServiceFactory for Discovery {
    fn register(self, config: &mut AppService) {
        for (path, document) in self.0.paths() {
            let endpoints = self.0.clone();
            let handler = move |request: HttpRequest| {
                let endpoints = endpoints.clone();
                async move { serve(&endpoints, document, &request).await }
            };
            // `GET` and `HEAD`, as axum's `get` routes.
            let get_or_head = guard::Any(guard::Get()).or(guard::Head());
            web::resource(path)
                .route(web::route().guard(get_or_head).to(handler))
                .register(config);
        }
    }
}

async fn serve(
    endpoints: &DiscoveryEndpoints,
    document: DiscoveryDocument,
    request: &HttpRequest,
) -> HttpResponse<BoxBody> {
    let headers = headers_to_http1(request.headers());
    response(endpoints.respond(document, &headers).await)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use actix_web::{body::to_bytes, test, App};
    use x402_core::{
        discovery::{DiscoveryEndpoints, OpenApiInfo, HEALTH_PATH, OPENAPI_PATH, WELL_KNOWN_PATH},
        testing::StandIn,
        Engine, EngineBuilder, Offer, Route,
    };

    use super::Discovery;

    fn engine(origin: impl FnOnce(EngineBuilder) -> EngineBuilder) -> Engine {
        let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
        origin(Engine::builder(StandIn::new().supported_down()))
            .route(Route::get("/weather/:city").offer(Offer::exact(
                "eip155:84532",
                "$0.001",
                pay_to,
            )))
            .route(Route::get("/metered").offer(Offer::upto("eip155:84532", "2000", pay_to)))
            .build()
            .unwrap()
    }

    /// Status, headers and body of `GET path` with `Host: host`.
    async fn get(
        discovery: Discovery,
        path: &str,
        host: &str,
    ) -> (u16, http::HeaderMap, actix_web::web::Bytes) {
        let app = test::init_service(App::new().service(discovery)).await;
        let request = test::TestRequest::get()
            .uri(path)
            .insert_header(("host", host))
            .to_request();
        let response = test::call_service(&app, request).await;
        let status = response.status().as_u16();
        let headers = crate::convert::headers_to_http1(response.headers());
        (
            status,
            headers,
            to_bytes(response.into_body()).await.unwrap(),
        )
    }

    /// actix answers exactly what x402-core's endpoints answer.
    #[actix_web::test]
    async fn serves_the_core_responses_unchanged() {
        let info = OpenApiInfo::new("Weather", "1");
        for engine in [
            engine(|b| b.public_origin("https://api.example.com")),
            engine(EngineBuilder::trust_proxy_headers),
        ] {
            let core = DiscoveryEndpoints::new(engine.clone()).openapi(info.clone());
            for path in [WELL_KNOWN_PATH, OPENAPI_PATH, HEALTH_PATH] {
                let (status, headers, body) = get(
                    Discovery::new(engine.clone()).openapi(info.clone()),
                    path,
                    "api.example.com",
                )
                .await;
                let mut request = http::HeaderMap::new();
                request.insert("host", "api.example.com".parse().unwrap());
                let expected = core
                    .respond_to(&http::Method::GET, path, &request)
                    .await
                    .unwrap();
                assert_eq!(status, expected.status().as_u16(), "{path}");
                for name in [
                    "content-type",
                    "cache-control",
                    "access-control-allow-origin",
                    "vary",
                ] {
                    assert_eq!(
                        headers.get(name),
                        expected.headers().get(name),
                        "{path} {name}"
                    );
                }
                assert_eq!(&body, expected.body(), "{path}");
            }
        }
    }

    #[actix_web::test]
    async fn openapi_is_opt_in_and_a_fixed_base_url_wins() {
        let discovery = Discovery::new(engine(|b| b)).base_url("https://pay.example.com/");
        let (status, headers, body) = get(discovery.clone(), WELL_KNOWN_PATH, "evil.example").await;
        assert_eq!(status, 200);
        assert!(headers.get("vary").is_none());
        let document: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(document["baseUrl"], "https://pay.example.com");
        assert_eq!(document["resources"][1]["pricing"], "unavailable");
        let (status, _, _) = get(discovery.clone(), OPENAPI_PATH, "evil.example").await;
        assert_eq!(status, 404);

        let app = test::init_service(App::new().service(discovery)).await;
        let head = test::TestRequest::default()
            .method(actix_web::http::Method::HEAD)
            .uri(WELL_KNOWN_PATH)
            .to_request();
        assert_eq!(test::call_service(&app, head).await.status(), 200);
        let post = test::TestRequest::post().uri(WELL_KNOWN_PATH).to_request();
        assert_eq!(test::call_service(&app, post).await.status(), 405);
    }

    #[actix_web::test]
    async fn readiness_is_served_unless_left_out() {
        let discovery = Discovery::new(engine(|b| b));
        let (status, headers, body) = get(discovery.clone(), HEALTH_PATH, "x").await;
        // `/supported` is down: not ready.
        assert_eq!(status, 503);
        assert_eq!(headers["cache-control"], "no-store");
        let report: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(report["facilitator"]["reachable"], false);
        let (status, _, _) = get(discovery.health(false), HEALTH_PATH, "x").await;
        assert_eq!(status, 404);
    }
}
