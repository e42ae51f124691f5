//! Serving the discovery documents over HTTP, framework-neutral: which paths,
//! which base URL, and the response (status, headers, JSON body). The
//! adapters' `Discovery` types register [`DiscoveryEndpoints::paths`] in
//! their router and hand each request to [`DiscoveryEndpoints::respond`].

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Method, Response, StatusCode};

use super::{OpenApiInfo, WELL_KNOWN_PATH};
use crate::Engine;

/// The path of the OpenAPI document, beside the discovery document.
pub const OPENAPI_PATH: &str = "/.well-known/x402/openapi.json";

/// The path of the [readiness](crate::readiness) report, beside the
/// discovery document.
pub const HEALTH_PATH: &str = "/.well-known/x402/health";

/// The default [`DiscoveryEndpoints::health_interval`]: the facilitator is
/// asked at most once per 5 seconds, whatever the health endpoint's traffic.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// `Cache-Control` of the readiness report: it is about now.
const HEALTH_CACHE_CONTROL: &str = "no-store";

/// `Cache-Control` of both documents: they change only with the route table
/// (and the facilitator's `/supported`), so a minute of caching is safe.
const CACHE_CONTROL: &str = "public, max-age=60";

/// `Vary` of both documents when the base URL comes from the request.
const VARY: &str = "host, x-forwarded-host, x-forwarded-proto";

/// Which document a discovery path serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryDocument {
    /// The discovery document, at [`WELL_KNOWN_PATH`].
    WellKnown,
    /// The OpenAPI 3.1 document, at [`OPENAPI_PATH`].
    OpenApi,
    /// The [readiness](crate::readiness) report, at [`HEALTH_PATH`].
    Health,
}

impl DiscoveryDocument {
    /// Where it is served.
    pub fn path(self) -> &'static str {
        match self {
            Self::WellKnown => WELL_KNOWN_PATH,
            Self::OpenApi => OPENAPI_PATH,
            Self::Health => HEALTH_PATH,
        }
    }
}

/// The discovery endpoints of an engine: `GET /.well-known/x402`, with
/// [`openapi`](Self::openapi) `GET /.well-known/x402/openapi.json`, and
/// unless [left out](Self::health) the readiness report at
/// `GET /.well-known/x402/health`.
///
/// Both documents answer `200 application/json` with `Cache-Control: public,
/// max-age=60` and `Access-Control-Allow-Origin: *` (the documents are
/// public, and read by browsers' agents too). Their URLs are under the
/// [`base_url`](Self::base_url), or else the engine's
/// [public origin](crate::EngineBuilder::public_origin) (from the request's
/// headers only when the engine
/// [trusts a proxy](crate::EngineBuilder::trust_proxy_headers), and then
/// with `Vary: host, x-forwarded-host, x-forwarded-proto`).
///
/// The readiness report ([`Engine::readiness`], JSON in
/// [`readiness`](crate::readiness)) answers `200` when ready and `503` when
/// not, `application/json` with `Cache-Control: no-store`; see
/// [`health`](Self::health) for why it is served by default.
///
/// This is what `x402_axum::Discovery` and `x402_actix::Discovery` serve;
/// any other server can answer with [`respond_to`](Self::respond_to).
///
/// ```
/// # use x402_core::testing::StandIn;
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use http::{HeaderMap, Method};
/// use x402_core::{
///     discovery::{DiscoveryEndpoints, OpenApiInfo, OPENAPI_PATH, WELL_KNOWN_PATH},
///     Engine, Offer, Route,
/// };
///
/// let engine = Engine::builder(StandIn::new())
///     .route(Route::get("/report").offer(Offer::exact(
///         "eip155:84532",
///         "$0.01",
///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///     )))
///     .public_origin("https://api.example.com")
///     .build()?;
/// let endpoints = DiscoveryEndpoints::new(engine).openapi(OpenApiInfo::new("Reports", "1.0.0"));
/// assert_eq!(endpoints.paths().count(), 3); // the document, OpenAPI, health
///
/// let response = endpoints
///     .respond_to(&Method::GET, WELL_KNOWN_PATH, &HeaderMap::new())
///     .await
///     .expect("a discovery path");
/// assert_eq!(response.status(), 200);
/// assert_eq!(response.headers()["content-type"], "application/json");
/// let document: serde_json::Value = serde_json::from_slice(response.body())?;
/// assert_eq!(document["resources"][0]["resource"], "https://api.example.com/report");
///
/// assert!(endpoints.respond_to(&Method::GET, OPENAPI_PATH, &HeaderMap::new()).await.is_some());
/// assert!(endpoints.respond_to(&Method::GET, "/report", &HeaderMap::new()).await.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct DiscoveryEndpoints {
    engine: Engine,
    base_url: Option<String>,
    openapi: Option<OpenApiInfo>,
    health: bool,
    health_interval: Duration,
}

impl DiscoveryEndpoints {
    /// The discovery endpoints of `engine`'s routes.
    pub fn new(engine: Engine) -> Self {
        Self {
            engine,
            base_url: None,
            openapi: None,
            health: true,
            health_interval: DEFAULT_HEALTH_INTERVAL,
        }
    }

    /// The public base URL of the API (`https://api.example.com`), instead
    /// of the engine's public origin.
    pub fn base_url(mut self, url: impl Into<String>) -> Self {
        self.base_url = Some(url.into());
        self
    }

    /// Also serves an OpenAPI 3.1 document with this `info`.
    pub fn openapi(mut self, info: OpenApiInfo) -> Self {
        self.openapi = Some(info);
        self
    }

    /// Whether to serve the [readiness](crate::readiness) report at
    /// [`HEALTH_PATH`] (default: yes).
    ///
    /// It tells anyone who asks whether the facilitator answers, which
    /// offered networks and schemes it no longer lists, and the settlement
    /// wallet's address and gas balance (all of which the discovery
    /// document, `/supported` and the chain tell already, but now at a
    /// glance). Serving it is recommended: buyers' agents can skip a seller
    /// that cannot settle, and load balancers can drain an instance whose
    /// facilitator is down. Its requests never reach the facilitator more
    /// than once per [interval](Self::health_interval), and it carries no
    /// facilitator text or URL. To keep it private, pass `false` here and
    /// serve [`Engine::readiness`] on an internal listener instead.
    pub fn health(mut self, serve: bool) -> Self {
        self.health = serve;
        self
    }

    /// How long a readiness report is reused before the facilitator is
    /// asked again (default [`DEFAULT_HEALTH_INTERVAL`], 5 s). Reports are
    /// shared by every endpoint of the same engine; concurrent requests wait
    /// for one probe. `Duration::ZERO` asks on every request: only where the
    /// endpoint is not public.
    pub fn health_interval(mut self, interval: Duration) -> Self {
        self.health_interval = interval;
        self
    }

    /// The engine whose routes are described.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The documents served and their paths, for a router to register
    /// (`GET`): the discovery document, the OpenAPI document when
    /// [configured](Self::openapi), and the readiness report unless
    /// [left out](Self::health).
    pub fn paths(&self) -> impl Iterator<Item = (&'static str, DiscoveryDocument)> {
        let openapi = self.openapi.is_some().then_some(DiscoveryDocument::OpenApi);
        let health = self.health.then_some(DiscoveryDocument::Health);
        std::iter::once(DiscoveryDocument::WellKnown)
            .chain(openapi)
            .chain(health)
            .map(|document| (document.path(), document))
    }

    /// The document a request for `path` gets, if any.
    pub fn document_at(&self, path: &str) -> Option<DiscoveryDocument> {
        self.paths()
            .find(|(served, _)| *served == path)
            .map(|(_, document)| document)
    }

    /// The answer to a request for `document` with these headers (`404`
    /// for the OpenAPI document when none is configured, and for the
    /// readiness report when [left out](Self::health)).
    pub async fn respond(
        &self,
        document: DiscoveryDocument,
        headers: &HeaderMap,
    ) -> Response<Bytes> {
        if document == DiscoveryDocument::Health {
            return self.respond_health().await;
        }
        let (base, from_request) = match &self.base_url {
            Some(url) => (url.clone(), false),
            None => (
                self.engine.origin(headers),
                self.engine.origin_from_headers(),
            ),
        };
        let value = match document {
            DiscoveryDocument::WellKnown => self.engine.discovery_document(&base).await,
            DiscoveryDocument::OpenApi => match &self.openapi {
                Some(info) => self.engine.openapi(info, Some(&base)).await,
                None => return status(StatusCode::NOT_FOUND),
            },
            DiscoveryDocument::Health => return status(StatusCode::NOT_FOUND),
        };
        let body = match serde_json::to_vec(&value) {
            Ok(body) => body,
            Err(error) => {
                // A `Value` always serialises; answer opaquely if not.
                tracing::error!(%error, "x402: discovery document not serialisable");
                return status(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        let mut response = json(body, CACHE_CONTROL);
        let headers = response.headers_mut();
        if from_request {
            headers.insert(header::VARY, HeaderValue::from_static(VARY));
        }
        response
    }

    /// The readiness report: 200 when ready, 503 when not.
    async fn respond_health(&self) -> Response<Bytes> {
        if !self.health {
            return status(StatusCode::NOT_FOUND);
        }
        let readiness = self
            .engine
            .readiness_at_most_every(
                self.health_interval,
                crate::readiness::DEFAULT_PROBE_DEADLINE,
            )
            .await;
        let body = match serde_json::to_vec(&*readiness) {
            Ok(body) => body,
            Err(error) => {
                // Plain data always serialises; answer opaquely if not.
                tracing::error!(%error, "x402: readiness report not serialisable");
                return status(StatusCode::INTERNAL_SERVER_ERROR);
            }
        };
        let mut response = json(body, HEALTH_CACHE_CONTROL);
        if !readiness.ready {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        response
    }

    /// The answer to a `GET` (or `HEAD`) of one of the [paths](Self::paths);
    /// `None` for any other request, which is not discovery's to answer.
    pub async fn respond_to(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
    ) -> Option<Response<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return None;
        }
        let document = self.document_at(path)?;
        Some(self.respond(document, headers).await)
    }
}

/// A 200 JSON answer any origin may read, cached as `cache_control` says.
fn json(body: Vec<u8>, cache_control: &'static str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(cache_control),
    );
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

fn status(status: StatusCode) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    *response.status_mut() = status;
    response
}
