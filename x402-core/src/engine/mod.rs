//! The payment engine: route → 402 → verify → hooks → handler → settle →
//! receipt, framework-neutral.
//!
//! The engine takes a request's method, URI and headers and returns a
//! [`Decision`]; for a paid request it then takes the handler's result and
//! returns what to send ([`PaidRequest::finish`]): the handler's response
//! with its receipt, or the engine's answer instead. Everything in between
//! (settling before or after the handler, holding the body, releasing a
//! failed call, surviving a client that hangs up) is decided here. Adapters
//! (`x402-tower`, `x402-axum`, `x402-actix`) only translate; an integrator
//! can drive the engine from any other stack the same way:
//!
//! ```
//! use x402_core::engine::{Decision, Engine, Reply};
//! use x402_core::route::{Offer, RequestView, Route};
//! # use x402_core::facilitator::{Facilitator, FacilitatorError};
//! # use x402_core::proto::*;
//! # #[derive(Debug)] struct Nobody;
//! # #[async_trait::async_trait] impl Facilitator for Nobody {
//! #   async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
//! #   async fn settle(&self, _: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
//! #   async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> { Ok(Default::default()) }
//! # }
//! # async fn handler(_: &x402_core::VerifiedPayment) -> Result<http::Response<String>, std::convert::Infallible> { Ok(http::Response::new(String::new())) }
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(Nobody)
//!     .route(Route::get("/report").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.01",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//!
//! let request = http::Request::get("/report").body(())?;
//! let (parts, ()) = request.into_parts();
//! match engine.process(RequestView::from_parts(&parts)).await {
//!     Decision::Pass => { /* not protected: run the handler */ }
//!     Decision::Respond(response) => assert_eq!(response.status(), 402),
//!     Decision::Paid(paid) => {
//!         // Run the handler with the payment, then let the engine finish.
//!         let result = handler(paid.payment()).await;
//!         match paid.finish(result).await? {
//!             Reply::Handler(response) => { /* send it: the receipt is in its headers */ let _ = response; }
//!             Reply::Engine(response) => { /* send this instead */ let _ = response; }
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Once a settlement starts it runs to completion on a task of its own (see
//! [`Engine::drain`] for shutdown). A client that hangs up while its handler
//! runs is not charged, and keeps its claim
//! ([`EngineBuilder::release_claims_on_hang_up`]).

use std::{fmt, sync::Arc, time::Duration};

use http::{HeaderMap, HeaderValue};
use serde_json::{json, Value};
use tokio::sync::OnceCell;
use tracing::Instrument;

use crate::unix::now as unix_now;
use crate::{
    boundary::Lookup,
    claim::ReplayGuard,
    codec,
    facilitator::{Facilitator, FacilitatorError},
    hooks::{
        AfterVerify, BeforeVerify, CancelReason, HookError, PaymentContext, PaymentHooks,
        ProtectedRequest, RequestContext,
    },
    late::Late,
    meter::Meter,
    money::AtomicAmount,
    paywall::{DefaultPaywall, Paywall},
    proto::{
        v2, FacilitatorRequest, JsonObject, PaymentPayload, PaymentRequirements, SupportedResponse,
        VerifyResponse, X402Version,
    },
    route::{Offer, PatternError, Pricing, RequestView, Route, SettlementTiming, UPTO},
    session::{MemorySessionStore, Redemption, SessionStore, SessionToken, X_PAYMENT_SESSION},
};

mod body;
mod drive;
mod matching;
mod paid;
mod resolve;
mod response;

pub use self::body::PaidBody;
pub use self::drive::{Now, Pending, Processing};
pub use self::paid::{Completion, PaidRequest, Reply};
pub use self::resolve::OfferError;
use self::resolve::ResolvedOffer;
pub use self::response::{handler_failed_response, EngineResponse, Refusal, EXPOSE_HEADERS};
use self::response::{ChallengeParts, EncodedChallenge};

/// The payment engine. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<Arc<CompiledRoute>>,
    /// Routes bound to one handler each ([`Engine::bind`]): not matched
    /// against paths, listed by discovery.
    bound: std::sync::Mutex<Vec<Arc<CompiledRoute>>>,
    origin: Origin,
    hooks: Vec<Arc<dyn PaymentHooks>>,
    /// Whether any hook implements `on_protected_request`.
    inspects_requests: bool,
    max_header_bytes: usize,
    paywall: Arc<dyn Paywall>,
    supported: OnceCell<Arc<SupportedResponse>>,
    sessions: Arc<dyn SessionStore>,
    session_deadline: Duration,
    session_open_deadline: Duration,
    release_on_hang_up: bool,
    in_flight: drive::InFlight,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("routes", &self.inner.routes.len())
            .field("hooks", &self.inner.hooks.len())
            .field("max_header_bytes", &self.inner.max_header_bytes)
            .finish_non_exhaustive()
    }
}

struct CompiledRoute {
    route: Route,
    /// The static offers, resolved once (on first use, when they need the
    /// facilitator's `/supported`).
    resolved: OnceCell<Arc<Resolved>>,
    /// The metrics series its 402s are counted in.
    series: crate::metrics::RouteSeries,
    /// Set once a misplacement was logged for this route (a bound route
    /// served under another template, a request paid at another route).
    mismatch_logged: std::sync::atomic::AtomicBool,
}

impl CompiledRoute {
    /// Checks a route and resolves what needs nothing from the facilitator.
    fn compile(route: Route) -> Result<Self, ConfigError> {
        if let Err(e) = &route.pattern {
            return Err(ConfigError::Pattern(e.clone()));
        }
        check_sessions(&route)?;
        let resolved = OnceCell::new();
        if let Pricing::Static(offers) = &route.pricing {
            if offers.is_empty() {
                return Err(ConfigError::NoOffers(route.pattern().to_owned()));
            }
            if route.timing == SettlementTiming::BeforeHandler
                && offers.iter().any(|o| o.scheme == UPTO)
            {
                return Err(ConfigError::UptoBeforeHandler(route.pattern().to_owned()));
            }
            let needs = offers
                .iter()
                .chain(route.sessions.iter().flat_map(|s| &s.offers))
                .any(resolve::needs_supported);
            if !needs {
                let r = resolve_route(&route, offers, None)?;
                let _ = resolved.set(Arc::new(r));
            }
        }
        let series = crate::metrics::RouteSeries::new(route.pattern());
        Ok(Self {
            route,
            resolved,
            series,
            mismatch_logged: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

/// A route's offers as requirements, with what can be encoded once.
#[derive(Debug)]
struct Resolved {
    accepts: Vec<ResolvedOffer>,
    /// The same requirements, as the challenge lists them.
    rows: Vec<v2::PaymentRequirements>,
    sessions: Vec<ResolvedSession>,
    /// The route's extension declarations, plus `session` when it sells any.
    extensions: JsonObject,
    /// The whole `payment_required` challenge, when the resource URL is fixed.
    fixed: Option<(v2::ResourceInfo, EncodedChallenge)>,
    /// The last `payment_required` challenge encoded for a request URL:
    /// clients re-request the same URL, so the 402 path mostly skips the
    /// JSON and base64 work.
    last: std::sync::Mutex<Option<(String, EncodedChallenge)>>,
}

impl Resolved {
    /// The `payment_required` challenge for `parts`, reusing the last one
    /// encoded for the same resource URL.
    fn payment_required(&self, parts: &ChallengeParts<'_>) -> Option<EncodedChallenge> {
        let url = &parts.resource.url;
        // A poisoned lock only means a panic elsewhere mid-update of a cache
        // entry that is replaced whole; the cache is still sound to use.
        let lock = || {
            self.last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        if let Some((cached_url, encoded)) = &*lock() {
            if cached_url == url {
                return Some(encoded.clone());
            }
        }
        let encoded = parts.encode(Refusal::PaymentRequired.reason(), None)?;
        *lock() = Some((url.clone(), encoded.clone()));
        Some(encoded)
    }

    /// The 402 for a request to `url`, when the last challenge encoded was
    /// for that URL: the common case of a client re-requesting a route,
    /// answered without building the URL.
    fn cached_challenge_response(&self, url: &RequestUrl<'_>) -> Option<EngineResponse> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match &*last {
            Some((cached_url, encoded)) if url.is(cached_url) => {
                Some(response::challenge_response(encoded))
            }
            _ => None,
        }
    }
}

#[derive(Debug)]
struct ResolvedSession {
    id: String,
    calls: u64,
    ttl: Duration,
    scope: String,
    accepts: Vec<ResolvedOffer>,
}

impl Resolved {
    fn scope(&self) -> Option<&str> {
        self.sessions.first().map(|s| s.scope.as_str())
    }
}

/// Builds an [`Engine`].
#[must_use]
pub struct EngineBuilder {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<Route>,
    hooks: Vec<Arc<dyn PaymentHooks>>,
    max_header_bytes: usize,
    paywall: Arc<dyn Paywall>,
    sessions: Arc<dyn SessionStore>,
    session_deadline: Duration,
    session_open_deadline: Duration,
    release_on_hang_up: bool,
    replay_guard: Option<ReplayGuard>,
    origin: Result<Origin, ConfigError>,
}

/// Where the engine's absolute URLs (the challenge's `resource.url`,
/// discovery) take their scheme and authority from.
#[derive(Debug, Clone)]
enum Origin {
    /// Not configured: `http://localhost`, logged once.
    Unset,
    /// [`EngineBuilder::public_origin`]: `scheme://authority`.
    Fixed { scheme: String, authority: String },
    /// [`EngineBuilder::trust_proxy_headers`].
    FromProxy,
}

impl Origin {
    fn parse(origin: &str) -> Result<Self, ConfigError> {
        let err = |reason| ConfigError::PublicOrigin {
            origin: origin.to_owned(),
            reason,
        };
        let uri: http::Uri = origin.parse().map_err(|_| err("not an absolute URL"))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            _ => return Err(err("the scheme must be http or https")),
        };
        let authority = uri.authority().ok_or_else(|| err("no host"))?;
        if authority.host().is_empty() || authority.as_str().contains('@') {
            return Err(err("the authority must be a host and optional port"));
        }
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(err("an origin has no path or query"));
        }
        Ok(Self::Fixed {
            scheme,
            authority: authority.as_str().to_ascii_lowercase(),
        })
    }
}

impl fmt::Debug for EngineBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("routes", &self.routes)
            .field("hooks", &self.hooks.len())
            .finish_non_exhaustive()
    }
}

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A route's pattern is invalid.
    #[error(transparent)]
    Pattern(#[from] PatternError),
    /// A route's offer cannot be turned into a requirement.
    #[error("route {route}: {source}")]
    Offer {
        /// The route's pattern.
        route: String,
        /// Why.
        #[source]
        source: OfferError,
    },
    /// A route with static pricing has no offers.
    #[error("route {0} has no offers")]
    NoOffers(String),
    /// An `upto` route cannot settle before its handler: the charge is only
    /// known after it.
    #[error("route {0}: an upto offer cannot settle before the handler")]
    UptoBeforeHandler(String),
    /// A route's session offers are invalid (no way to pay, duplicate ids,
    /// several scopes).
    #[error("route {route}: {reason}")]
    Session {
        /// The route's pattern.
        route: String,
        /// Why.
        reason: &'static str,
    },
    /// The configured public origin is not `scheme://host[:port]`.
    #[error("public origin {origin:?}: {reason}")]
    PublicOrigin {
        /// The origin as given.
        origin: String,
        /// Why.
        reason: &'static str,
    },
}

impl EngineBuilder {
    /// Adds a protected route. Routes match in the order they are added.
    pub fn route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// Adds protected routes.
    pub fn routes(mut self, routes: impl IntoIterator<Item = Route>) -> Self {
        self.routes.extend(routes);
        self
    }

    /// Registers lifecycle hooks; they run in registration order.
    pub fn hooks(mut self, hooks: impl PaymentHooks) -> Self {
        self.hooks.push(Arc::new(hooks));
        self
    }

    /// Registers shared lifecycle hooks.
    pub fn hooks_arc(mut self, hooks: Arc<dyn PaymentHooks>) -> Self {
        self.hooks.push(hooks);
        self
    }

    /// The largest payment header read, in bytes (default 16 KiB). Larger
    /// headers get a 402 before any decoding.
    pub fn max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_header_bytes = bytes;
        self
    }

    /// Replaces the browser paywall page.
    pub fn paywall(mut self, paywall: impl Paywall) -> Self {
        self.paywall = Arc::new(paywall);
        self
    }

    /// Where prepaid sessions live (default: [`MemorySessionStore`], one
    /// process). Share a Redis store between instances.
    pub fn session_store(mut self, store: impl SessionStore) -> Self {
        self.sessions = Arc::new(store);
        self
    }

    /// Replaces the default replay guard (claims in this process's memory)
    /// with another, typically one over a [`RedisClaimStore`](crate::claim)
    /// shared by every instance. The guard runs before every other
    /// after-verify hook.
    pub fn replay_guard(mut self, guard: ReplayGuard) -> Self {
        self.replay_guard = Some(guard);
        self
    }

    /// Removes the replay guard: one signed payment may then run a paid
    /// handler once per copy sent before it settles. Only for engines whose
    /// facilitator or hooks already make verification consume the payment.
    pub fn dangerous_disable_replay_guard(mut self) -> Self {
        self.replay_guard = None;
        self
    }

    /// How long a session store call may take before the request is refused
    /// with 503 `session_unavailable` (default 250 ms).
    pub fn session_deadline(mut self, deadline: Duration) -> Self {
        self.session_deadline = deadline;
        self
    }

    /// How long storing a paid session is retried before the buyer is told
    /// it was not opened (default 5 s; each attempt is bounded by the
    /// [`session_deadline`](Self::session_deadline), at least 250 ms). The
    /// buyer waits for it: it is part of the settlement.
    pub fn session_open_deadline(mut self, deadline: Duration) -> Self {
        self.session_open_deadline = deadline;
        self
    }

    /// Releases a payment's claim (and gives a session call back) when the
    /// client hangs up while its handler runs (default `false`: kept).
    ///
    /// A client that goes away mid-handler is not charged, but the handler
    /// may have done its work (an LLM call, a job). If that released the
    /// claim, one funded authorization could start the handler again and
    /// again by disconnecting each time, which is what the replay guard
    /// exists to stop; so by default the claim is kept until the
    /// authorization expires, and the buyer signs a new one. Release only
    /// for handlers whose work is worthless unless its response is
    /// delivered. A request abandoned before its handler started always
    /// releases its claim.
    pub fn release_claims_on_hang_up(mut self, release: bool) -> Self {
        self.release_on_hang_up = release;
        self
    }

    /// The public origin of the API, `scheme://host[:port]`
    /// (`https://api.example.com`): the challenge's `resource.url`, what the
    /// facilitator is sent and the discovery documents are built from it
    /// and the request's path. Without it (and without
    /// [`trust_proxy_headers`](Self::trust_proxy_headers)) they name
    /// `http://localhost`, and the engine says so once in its log: the
    /// request's `Host` comes from the client, and an engine that believed
    /// it would list `Host: evil.example` as its own URL.
    pub fn public_origin(mut self, origin: impl AsRef<str>) -> Self {
        self.origin = Origin::parse(origin.as_ref());
        self
    }

    /// Builds URLs from each request's `X-Forwarded-Proto`,
    /// `X-Forwarded-Host` and `Host` headers instead of a fixed
    /// [`public_origin`](Self::public_origin) (replacing it).
    ///
    /// **Only behind a proxy that sets those headers itself**, overwriting
    /// whatever the client sent: otherwise any client chooses the resource
    /// URL written into its challenge, sent to the facilitator and listed by
    /// discovery.
    pub fn trust_proxy_headers(mut self) -> Self {
        self.origin = Ok(Origin::FromProxy);
        self
    }

    /// Checks every route and builds the engine. Offers that need nothing
    /// from the facilitator are resolved and their challenges encoded now.
    pub fn build(self) -> Result<Engine, ConfigError> {
        let origin = self.origin?;
        let mut routes = Vec::with_capacity(self.routes.len());
        for route in self.routes {
            routes.push(Arc::new(CompiledRoute::compile(route)?));
        }
        let mut hooks: Vec<Arc<dyn PaymentHooks>> = Vec::with_capacity(self.hooks.len() + 1);
        if let Some(guard) = self.replay_guard {
            hooks.push(Arc::new(guard));
        }
        hooks.extend(self.hooks);
        let inspects_requests = hooks.iter().any(|h| h.inspects_requests());
        Ok(Engine {
            inner: Arc::new(Inner {
                facilitator: self.facilitator,
                routes,
                bound: std::sync::Mutex::new(Vec::new()),
                origin,
                hooks,
                inspects_requests,
                max_header_bytes: self.max_header_bytes,
                paywall: self.paywall,
                supported: OnceCell::new(),
                sessions: self.sessions,
                session_deadline: self.session_deadline,
                session_open_deadline: self.session_open_deadline,
                release_on_hang_up: self.release_on_hang_up,
                in_flight: drive::InFlight::default(),
            }),
        })
    }
}

fn check_sessions(route: &Route) -> Result<(), ConfigError> {
    let err = |reason| ConfigError::Session {
        route: route.pattern().to_owned(),
        reason,
    };
    for (i, s) in route.sessions.iter().enumerate() {
        if s.offers.is_empty() {
            return Err(err("a session offer has no way to pay"));
        }
        if s.offers.iter().any(|o| o.scheme == UPTO) {
            return Err(err("a session is sold with exact payments, not upto"));
        }
        if route.sessions[..i].iter().any(|o| o.id == s.id) {
            return Err(err("two session offers share an id"));
        }
        if s.scope != route.sessions[0].scope {
            return Err(err("the session offers of one route must share a scope"));
        }
    }
    Ok(())
}

fn resolve_all(
    route: &Route,
    offers: &[Offer],
    supported: Option<&SupportedResponse>,
) -> Result<Vec<ResolvedOffer>, ConfigError> {
    offers
        .iter()
        .map(|o| resolve::resolve_offer(o, supported))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ConfigError::Offer {
            route: route.pattern().to_owned(),
            source,
        })
}

fn resolve_route(
    route: &Route,
    offers: &[Offer],
    supported: Option<&SupportedResponse>,
) -> Result<Resolved, ConfigError> {
    let accepts = resolve_all(route, offers, supported)?;
    let rows = accepts
        .iter()
        .map(|a| (*a.requirements).clone())
        .collect::<Vec<_>>();
    let mut sessions = Vec::with_capacity(route.sessions.len());
    for s in &route.sessions {
        sessions.push(ResolvedSession {
            id: s.id.clone(),
            calls: s.calls,
            ttl: s.ttl,
            scope: s.scope.clone(),
            accepts: resolve_all(route, &s.offers, supported)?,
        });
    }
    let mut extensions = route.extensions.clone();
    if !sessions.is_empty() {
        extensions.insert("session".into(), session_extension(&sessions));
    }
    let fixed = route.resource_url.as_ref().and_then(|url| {
        let resource = v2::ResourceInfo {
            url: url.clone(),
            description: route.description.clone(),
            mime_type: route.mime_type.clone(),
        };
        let encoded = ChallengeParts {
            resource: &resource,
            accepts: &rows,
            extensions: &extensions,
            output_schema: route.output_schema.as_ref(),
        }
        .encode(Refusal::PaymentRequired.reason(), None)?;
        Some((resource, encoded))
    });
    Ok(Resolved {
        accepts,
        rows,
        sessions,
        extensions,
        fixed,
        last: std::sync::Mutex::new(None),
    })
}

/// The `extensions["session"]` declaration of the v2 challenge.
fn session_extension(sessions: &[ResolvedSession]) -> Value {
    let offers: Vec<Value> = sessions
        .iter()
        .map(|s| {
            json!({
                "id": s.id,
                "calls": s.calls,
                "ttlSeconds": s.ttl.as_secs(),
                "scope": s.scope,
                "accepts": s.accepts.iter().map(|a| &*a.requirements).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "info": { "offers": offers },
        "schema": {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "required": ["offers"],
            "properties": {
                "offers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["id", "calls", "ttlSeconds", "scope", "accepts"],
                        "properties": {
                            "id": { "type": "string" },
                            "calls": { "type": "integer", "minimum": 1 },
                            "ttlSeconds": { "type": "integer", "minimum": 0 },
                            "scope": { "type": "string" },
                            "accepts": { "type": "array", "items": { "type": "object" } }
                        }
                    }
                }
            }
        }
    })
}

/// The route's extensions with its `bazaar` declaration enriched for this
/// request (spec §8.1): the verb, and on parameterised routes
/// `routeTemplate` and `pathParams`.
fn enrich_bazaar(route: &Route, request: &RequestView<'_>, extensions: &JsonObject) -> JsonObject {
    use crate::discovery::bazaar;
    let mut out = extensions.clone();
    if let Some(declaration) = out.get_mut(bazaar::BAZAAR) {
        let params = route
            .matches(request.method, request.uri.path())
            .unwrap_or_default();
        let template = route
            .pattern
            .as_ref()
            .ok()
            .map(crate::route::PathPattern::template);
        *declaration = bazaar::enrich(declaration, request.method, template.as_deref(), &params);
    }
    out
}

/// A request an outer paywall already took a payment for reached a route
/// of another one: it passes (one request pays once), logged once per route
/// when the outer route was another.
fn paid_upstream(compiled: &CompiledRoute, payment: &VerifiedPayment) {
    if payment.route != compiled.route.pattern()
        && !compiled
            .mismatch_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::warn!(
            route = compiled.route.pattern(),
            paid_at = payment.route.as_str(),
            "x402: a request paid at an outer paywall's route reached this one; it passes unpaid here"
        );
    }
}

/// The 400 for a path whose meaning depends on the decoder (see
/// [`boundary`](crate::boundary)).
fn ambiguous(compiled: &CompiledRoute) -> EngineResponse {
    tracing::debug!(
        route = compiled.route.pattern(),
        "x402: path depends on how it is decoded; refused"
    );
    crate::metrics::refusal(compiled.route.pattern(), &Refusal::AmbiguousPath);
    response::refusal_response(&Refusal::AmbiguousPath, None, None, None)
}

/// A route bound to one handler by [`Engine::bind`]: every request it is
/// asked about is this route's (for its method), whatever the request's
/// path. A per-route layer (`x402_axum::PaywallLayer::route`, actix-web's
/// `Resource::wrap`) holds one, so the price sits next to its handler and
/// no second table can drift from the router's.
///
/// ```
/// use http::{HeaderMap, Method, Uri};
/// use x402_core::{engine::Decision, facilitator::HttpFacilitator, route::RequestView, Engine, Offer, Route};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
///
/// let engine = Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?).build()?;
/// let weather = engine.bind(Route::get("/weather/{city}").offer(Offer::exact(
///     "eip155:84532",
///     "$0.001",
///     "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
/// )))?;
/// let (get, headers) = (Method::GET, HeaderMap::new());
/// // Whatever path reached the handler, it is this route's.
/// let odd: Uri = "/weather/%2e%2e".parse()?;
/// let Decision::Respond(response) = weather.process(RequestView::new(&get, &odd, &headers)).await
/// else {
///     panic!("expected a challenge");
/// };
/// assert_eq!(response.status(), 402);
/// // The engine's own table does not hold it.
/// assert!(!engine.is_protected(RequestView::new(&get, &odd, &headers)));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BoundRoute {
    engine: Engine,
    compiled: Arc<CompiledRoute>,
}

impl fmt::Debug for BoundRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BoundRoute")
            .field("route", &self.compiled.route.pattern())
            .finish_non_exhaustive()
    }
}

impl BoundRoute {
    /// The route.
    pub fn route(&self) -> &Route {
        &self.compiled.route
    }

    /// The engine it belongs to.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// As [`Engine::process`], for this route.
    pub fn process<'a>(&self, request: RequestView<'a>) -> Processing<'a> {
        if !self.admits(&request) {
            return Processing::decided(Decision::Pass);
        }
        self.engine.process_protected(&self.compiled, request)
    }

    /// Whether the route applies to the request's method. A router template
    /// that the route's pattern does not cover is logged once: discovery
    /// lists the pattern, not where the handler is served.
    fn admits(&self, request: &RequestView<'_>) -> bool {
        let route = &self.compiled.route;
        if let Some(payment) = request.paid_upstream {
            paid_upstream(&self.compiled, payment);
            return false;
        }
        if let (Some(template), Ok(pattern)) = (request.route_template, &route.pattern) {
            if !crate::boundary::covers_template(pattern, template)
                && !self
                    .compiled
                    .mismatch_logged
                    .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    route = route.pattern(),
                    served_at = template,
                    "x402: a bound route is served under another path; discovery lists its own"
                );
            }
        }
        route.allows(request.method)
    }
}

/// What one paywall layer protects: the engine's route table, or one
/// [`BoundRoute`]. Adapters hold one and ask it about every request, so the
/// choice between the two is made here, once.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Guard {
    /// Every route of the engine's table (see [`Engine::process`]).
    Table(Engine),
    /// One route, for the handler it wraps (see [`BoundRoute::process`]).
    Route(BoundRoute),
}

impl Guard {
    /// The engine.
    pub fn engine(&self) -> &Engine {
        match self {
            Self::Table(engine) => engine,
            Self::Route(route) => route.engine(),
        }
    }

    /// As [`Engine::process`].
    #[inline]
    pub fn process<'a>(&self, request: RequestView<'a>) -> Processing<'a> {
        match self {
            Self::Table(engine) => engine.process(request),
            Self::Route(route) => route.process(request),
        }
    }

    /// For a request that passed: `stripped` is the same request as a nested
    /// router left it. A table route matching it was declared by the wrong
    /// path and is logged once ([`Engine::warn_if_declared_relative`]); a
    /// bound route needs no path.
    pub fn passed(&self, stripped: RequestView<'_>) {
        if let Self::Table(engine) = self {
            engine.warn_if_declared_relative(stripped);
        }
    }
}

/// What to do with a request.
#[derive(Debug)]
#[must_use]
pub enum Decision {
    /// Not protected (or access granted by a hook, or a free dynamic price):
    /// run the handler as if there were no paywall.
    Pass,
    /// Send this response; the handler does not run.
    Respond(EngineResponse),
    /// A verified payment (or a redeemed session call): run the handler, then
    /// give its response to [`PaidRequest::finish`]. Routes that settle
    /// before their handler have settled.
    Paid(Box<PaidRequest>),
}

/// The verified payment, put in the request's extensions for the handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's protocol version.
    pub version: X402Version,
    /// The scheme.
    pub scheme: String,
    /// The network as a CAIP-2 id.
    pub network: String,
    /// The payer's address, as the facilitator reported it.
    pub payer: Option<String>,
    /// The amount authorised (the price for `exact`, the ceiling for `upto`,
    /// zero for a call redeemed from a prepaid session).
    pub amount: AtomicAmount,
    /// The asset.
    pub asset: String,
    /// The recipient.
    pub pay_to: String,
    /// The seller's requirement the payment matched (for a session call, the
    /// first way the session was sold). Shared with the engine's route table.
    pub requirements: Arc<v2::PaymentRequirements>,
    /// The matched route's pattern.
    pub route: String,
    /// On `upto` routes, where the handler reports what the call cost.
    pub meter: Option<Meter>,
    /// Set when the call was redeemed from a prepaid session.
    pub session: Option<SessionCall>,
}

/// A call redeemed from a prepaid session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SessionCall {
    /// Calls left after this one.
    pub remaining: u64,
    /// The session's scope.
    pub scope: String,
}

/// How a request's resource is described in challenges.
fn resource_for(route: &Route, url: RequestUrl<'_>) -> v2::ResourceInfo {
    let url = match &route.resource_url {
        Some(url) => url.clone(),
        None => url.to_string(),
    };
    v2::ResourceInfo {
        url,
        description: route.description.clone(),
        mime_type: route.mime_type.clone(),
    }
}

/// The 402 for an unpaid request when it is ready-made: no payment header,
/// no session token for the route, no per-request bazaar declaration, not a
/// browser (which gets the paywall page), and a challenge encoded for the
/// request's URL (the route's fixed one, or the last one built). Counted.
fn ready_challenge(
    compiled: &CompiledRoute,
    resolved: &Resolved,
    request: &RequestView<'_>,
    url: RequestUrl<'_>,
) -> Option<EngineResponse> {
    let headers = request.headers;
    if headers.contains_key(codec::PAYMENT_SIGNATURE)
        || headers.contains_key(codec::X_PAYMENT)
        || (resolved.scope().is_some() && headers.contains_key(X_PAYMENT_SESSION))
        || resolved
            .extensions
            .contains_key(crate::discovery::bazaar::BAZAAR)
        || response::is_browser(headers)
    {
        return None;
    }
    let response = match &resolved.fixed {
        Some((_, encoded)) => response::challenge_response(encoded),
        None => resolved.cached_challenge_response(&url)?,
    };
    compiled.series.payment_required();
    Some(response)
}

/// The request's absolute URL, in pieces: the engine's public origin (see
/// [`EngineBuilder::public_origin`]) and the request's path and query.
#[derive(Debug, Clone, Copy)]
struct RequestUrl<'a> {
    scheme: &'a str,
    authority: &'a str,
    path: &'a str,
}

impl<'a> RequestUrl<'a> {
    fn of(origin: &'a Origin, request: &RequestView<'a>) -> Self {
        let uri = request.uri;
        let path = uri.path_and_query().map_or("/", |p| p.as_str());
        let (scheme, authority) = origin.parts(request.headers);
        Self {
            scheme,
            authority,
            path,
        }
    }

    /// Whether `url` is this URL, compared without building it.
    fn is(&self, url: &str) -> bool {
        url.strip_prefix(self.scheme)
            .and_then(|rest| rest.strip_prefix("://"))
            .and_then(|rest| rest.strip_prefix(self.authority))
            == Some(self.path)
    }
}

impl Origin {
    /// The scheme and authority of URLs written for a request with these
    /// headers.
    fn parts<'a>(&'a self, headers: &'a HeaderMap) -> (&'a str, &'a str) {
        match self {
            Self::Fixed { scheme, authority } => (scheme, authority),
            Self::FromProxy => {
                static X_FORWARDED_PROTO: http::HeaderName =
                    http::HeaderName::from_static("x-forwarded-proto");
                static X_FORWARDED_HOST: http::HeaderName =
                    http::HeaderName::from_static("x-forwarded-host");
                // The first value of a list: the one the outermost proxy set.
                let header = |name: &http::HeaderName| {
                    headers
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.split(',').next())
                        .map(str::trim)
                        .filter(|v| is_authority(v))
                };
                let scheme = match header(&X_FORWARDED_PROTO) {
                    Some(p) if p.eq_ignore_ascii_case("https") => "https",
                    _ => "http",
                };
                let authority = header(&X_FORWARDED_HOST)
                    .or_else(|| header(&http::header::HOST))
                    .unwrap_or("localhost");
                (scheme, authority)
            }
            Self::Unset => {
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        "x402: no public origin configured; resource URLs name http://localhost \
                         (set EngineBuilder::public_origin)"
                    );
                });
                ("http", "localhost")
            }
        }
    }
}

/// Whether a header value can stand as a URL's authority: a host name or
/// address and an optional port, nothing that would change the URL's shape.
fn is_authority(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 255
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
}

impl fmt::Display for RequestUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}{}", self.scheme, self.authority, self.path)
    }
}

/// The requirement a payment matched.
struct Matched<'a> {
    offer: &'a ResolvedOffer,
    /// The session offer it buys, if any.
    session: Option<usize>,
}

impl Engine {
    /// Starts building an engine that uses `facilitator`.
    pub fn builder(facilitator: impl Facilitator) -> EngineBuilder {
        Self::builder_arc(Arc::new(facilitator))
    }

    /// Starts building an engine with a shared facilitator.
    pub fn builder_arc(facilitator: Arc<dyn Facilitator>) -> EngineBuilder {
        EngineBuilder {
            facilitator,
            routes: Vec::new(),
            hooks: Vec::new(),
            max_header_bytes: codec::DEFAULT_MAX_HEADER_BYTES,
            paywall: Arc::new(DefaultPaywall),
            sessions: Arc::new(MemorySessionStore::new()),
            session_deadline: Duration::from_millis(250),
            session_open_deadline: Duration::from_secs(5),
            release_on_hang_up: false,
            replay_guard: Some(ReplayGuard::memory()),
            origin: Ok(Origin::Unset),
        }
    }

    /// The facilitator.
    pub fn facilitator(&self) -> &Arc<dyn Facilitator> {
        &self.inner.facilitator
    }

    /// A read-only description of every protected route, in matching order,
    /// for [discovery](crate::discovery). Static offers are resolved as the
    /// first paid request would resolve them (asking the facilitator's
    /// `/supported` once if they need it); routes priced per request are
    /// listed without offers.
    pub async fn describe(&self) -> Vec<crate::discovery::RouteDescription> {
        use crate::discovery::{PricingKind, RouteDescription, SessionDescription};
        let (method, uri, headers) = (
            http::Method::GET,
            http::Uri::from_static("/"),
            HeaderMap::new(),
        );
        let bound = self
            .inner
            .bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut out = Vec::with_capacity(self.inner.routes.len() + bound.len());
        for compiled in self.inner.routes.iter().chain(&bound) {
            let route = &compiled.route;
            let description = match &route.pricing {
                Pricing::Dynamic(_) => {
                    RouteDescription::new(route, PricingKind::Dynamic, Vec::new(), Vec::new())
                }
                // Static offers do not depend on the request.
                Pricing::Static(_) => match self
                    .offers(compiled, &RequestView::new(&method, &uri, &headers))
                    .await
                {
                    Ok(Some(resolved)) => {
                        let sessions = resolved
                            .sessions
                            .iter()
                            .map(|s| SessionDescription {
                                id: s.id.clone(),
                                calls: s.calls,
                                ttl_seconds: s.ttl.as_secs(),
                                scope: s.scope.clone(),
                                accepts: s
                                    .accepts
                                    .iter()
                                    .map(|a| (*a.requirements).clone())
                                    .collect(),
                            })
                            .collect();
                        RouteDescription::new(
                            route,
                            PricingKind::Static,
                            resolved.rows.clone(),
                            sessions,
                        )
                    }
                    _ => RouteDescription::new(
                        route,
                        PricingKind::Unavailable,
                        Vec::new(),
                        Vec::new(),
                    ),
                },
            };
            out.push(description);
        }
        out
    }

    /// Whether a request falls under a protected route (no I/O). A request
    /// whose path is [ambiguous](crate::boundary) counts as protected.
    pub fn is_protected(&self, request: RequestView<'_>) -> bool {
        !matches!(self.lookup(&request), Lookup::Free)
    }

    fn lookup(&self, request: &RequestView<'_>) -> Lookup<&Arc<CompiledRoute>> {
        if let Some(payment) = request.paid_upstream {
            let found = self.lookup(&request.paid_upstream(None));
            if let Lookup::Protected(c) | Lookup::Ambiguous(c) = found {
                paid_upstream(c, payment);
            }
            return Lookup::Free;
        }
        crate::boundary::lookup(
            &self.inner.routes,
            |r| &r.route,
            request.method,
            request.uri.path(),
            request.route_template,
        )
    }

    /// Binds `route` to one handler: the returned [`BoundRoute`] protects
    /// every request it is asked about, whatever its path, so the price sits
    /// where the handler is declared and no path matching can miss it. The
    /// route is checked as [`EngineBuilder::build`] checks routes, and
    /// listed by [discovery](crate::discovery) after the engine's own.
    ///
    /// Bound routes are not part of the engine's route table: a request is
    /// priced by a bound route only where its adapter (a per-route layer)
    /// asks it. Binding a route of the same method and pattern again
    /// replaces the earlier one in discovery; both keep protecting their
    /// handlers.
    pub fn bind(&self, route: Route) -> Result<BoundRoute, ConfigError> {
        let compiled = Arc::new(CompiledRoute::compile(route)?);
        let mut bound = self
            .inner
            .bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Binding the same route again (actix-web builds its app once per
        // worker) replaces it in discovery rather than listing it twice.
        bound.retain(|r| {
            r.route.method != compiled.route.method || r.route.pattern() != compiled.route.pattern()
        });
        bound.push(compiled.clone());
        drop(bound);
        Ok(BoundRoute {
            engine: self.clone(),
            compiled,
        })
    }

    /// Logs once, naming the route, when a request found free on the path
    /// the client sent would be protected on `stripped`, the same request as
    /// a nested router left it: a route declared relative to a nest, which
    /// protects nothing there. Adapters call it for requests that pass
    /// (`x402-tower` does when its router rewrote the URI).
    pub fn warn_if_declared_relative(&self, stripped: RequestView<'_>) {
        if let Lookup::Protected(c) | Lookup::Ambiguous(c) = self.lookup(&stripped) {
            if !c
                .mismatch_logged
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            {
                tracing::warn!(
                    route = c.route.pattern(),
                    stripped_path = stripped.uri.path(),
                    "x402: a route matches the path a nested router left, not the one clients \
                     send, so it protects nothing here; declare it with the full path"
                );
            }
        }
    }

    /// The origin (`scheme://authority`) of the URLs the engine writes for a
    /// request with these headers: the configured
    /// [`public_origin`](EngineBuilder::public_origin), the proxy's headers
    /// when [trusted](EngineBuilder::trust_proxy_headers), else
    /// `http://localhost`.
    pub fn origin(&self, headers: &HeaderMap) -> String {
        let (scheme, authority) = self.inner.origin.parts(headers);
        format!("{scheme}://{authority}")
    }

    /// Whether the origin depends on the request's headers.
    pub fn origin_from_headers(&self) -> bool {
        matches!(self.inner.origin, Origin::FromProxy)
    }

    async fn supported(&self) -> Result<Arc<SupportedResponse>, FacilitatorError> {
        self.inner
            .supported
            .get_or_try_init(|| async {
                let timer = crate::metrics::FacilitatorTimer::start();
                let r = self.inner.facilitator.supported().await.map(Arc::new);
                timer.done("supported");
                r
            })
            .await
            .cloned()
    }

    async fn supported_for(
        &self,
        offers: &[&Offer],
    ) -> Result<Option<Arc<SupportedResponse>>, Refusal> {
        if !offers.iter().any(|o| resolve::needs_supported(o)) {
            return Ok(None);
        }
        self.supported().await.map(Some).map_err(|e| {
            tracing::error!(error = %e, "x402: facilitator /supported failed");
            Refusal::FacilitatorUnavailable
        })
    }

    async fn offers(
        &self,
        compiled: &CompiledRoute,
        request: &RequestView<'_>,
    ) -> Result<Option<Arc<Resolved>>, Refusal> {
        let route = &compiled.route;
        let built = |r: Result<Resolved, ConfigError>| {
            r.map(Arc::new).map_err(|e| {
                tracing::error!(error = %e, "x402: route offers cannot be built");
                Refusal::Internal
            })
        };
        let session_offers = route.sessions.iter().flat_map(|s| &s.offers);
        match &route.pricing {
            Pricing::Static(offers) => {
                let resolved = compiled
                    .resolved
                    .get_or_try_init(|| async {
                        let all: Vec<&Offer> = offers.iter().chain(session_offers).collect();
                        let supported = self.supported_for(&all).await?;
                        built(resolve_route(route, offers, supported.as_deref()))
                    })
                    .await?;
                Ok(Some(resolved.clone()))
            }
            Pricing::Dynamic(pricing) => {
                let Some(offers) = pricing.offers(request.to_owned_info()).await else {
                    return Ok(None);
                };
                if offers.is_empty() {
                    return Ok(None);
                }
                if route.timing == SettlementTiming::BeforeHandler
                    && offers.iter().any(|o| o.scheme == UPTO)
                {
                    tracing::error!(
                        route = route.pattern(),
                        "x402: an upto offer cannot settle before the handler"
                    );
                    return Err(Refusal::Internal);
                }
                let all: Vec<&Offer> = offers.iter().chain(session_offers).collect();
                let supported = self.supported_for(&all).await?;
                built(resolve_route(route, &offers, supported.as_deref())).map(Some)
            }
        }
    }

    /// The ready-made 402 for `request`, when no hook needs to see it first
    /// and the route's static offers are resolved.
    fn challenge_now(
        &self,
        compiled: &CompiledRoute,
        request: &RequestView<'_>,
    ) -> Option<EngineResponse> {
        if self.inner.inspects_requests {
            return None;
        }
        let Pricing::Static(_) = &compiled.route.pricing else {
            return None;
        };
        let url = RequestUrl::of(&self.inner.origin, request);
        ready_challenge(compiled, compiled.resolved.get()?, request, url)
    }

    /// Decides what to do with a request: pass it through, answer it (402,
    /// 400 for an [ambiguous path](crate::boundary), 502, 503, ...), or let
    /// the handler run for a verified payment or a redeemed session call.
    ///
    /// The route is matched here, once. Await the [`Processing`] for the
    /// [`Decision`], or ask it [`now`](Processing::now): a request no route
    /// protects, and an unpaid request to a route whose challenge is
    /// encoded already (when no hook
    /// [inspects requests](PaymentHooks::inspects_requests)), are decided
    /// without a future.
    ///
    /// ```
    /// use http::{HeaderMap, Method, Uri};
    /// use x402_core::{
    ///     engine::{Decision, Now}, facilitator::HttpFacilitator, route::RequestView, Engine,
    ///     Offer, Route,
    /// };
    ///
    /// let engine = Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?)
    ///     .route(Route::get("/paid").offer(Offer::exact(
    ///         "eip155:84532",
    ///         "$0.01",
    ///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    ///     )))
    ///     .build()?;
    /// let (get, headers) = (Method::GET, HeaderMap::new());
    /// let free: Uri = "/free".parse()?;
    /// assert!(matches!(
    ///     engine.process(RequestView::new(&get, &free, &headers)).now(),
    ///     Now::Decided(Decision::Pass)
    /// ));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn process<'a>(&self, request: RequestView<'a>) -> Processing<'a> {
        match self.lookup(&request) {
            Lookup::Free => Processing::decided(Decision::Pass),
            Lookup::Ambiguous(compiled) => {
                Processing::decided(Decision::Respond(ambiguous(compiled)))
            }
            Lookup::Protected(compiled) => self.process_protected(compiled, request),
        }
    }

    /// [`process`](Self::process) for a request known to fall under
    /// `compiled`.
    fn process_protected<'a>(
        &self,
        compiled: &Arc<CompiledRoute>,
        request: RequestView<'a>,
    ) -> Processing<'a> {
        match self.challenge_now(compiled, &request) {
            Some(response) => Processing::decided(Decision::Respond(response)),
            None => Processing::pending(self, compiled, request),
        }
    }

    /// The waiting part of [`process`](Self::process), for a request to
    /// `compiled` that [`challenge_now`](Self::challenge_now) could not
    /// answer.
    async fn process_route(
        &self,
        compiled: &Arc<CompiledRoute>,
        request: RequestView<'_>,
    ) -> Decision {
        let route = &compiled.route;

        let ctx = RequestContext {
            request,
            route: route.pattern(),
        };
        for hook in &self.inner.hooks {
            match hook.on_protected_request(&ctx).await {
                Ok(ProtectedRequest::Continue) => {}
                Ok(ProtectedRequest::GrantAccess) => return Decision::Pass,
                Ok(ProtectedRequest::Refuse { status, reason }) => {
                    return Decision::Respond(response::refusal_response(
                        &Refusal::Forbidden { status, reason },
                        None,
                        None,
                        None,
                    ))
                }
                Err(e) => return Decision::Respond(hook_error_response(&e)),
            }
        }

        // The engine's future is allocated for every protected request: the
        // rarer, larger steps (first resolution, dynamic pricing, session
        // redemption, verification) are boxed so that it stays small.
        let ready = match &route.pricing {
            Pricing::Static(_) => compiled.resolved.get().cloned().map(Some),
            Pricing::Dynamic(_) => None,
        };
        let offers = match ready {
            Some(resolved) => Ok(resolved),
            None => Box::pin(self.offers(compiled, &request)).await,
        };
        let resolved = match offers {
            Ok(Some(resolved)) => resolved,
            Ok(None) => return Decision::Pass,
            Err(refusal) => {
                crate::metrics::refusal(route.pattern(), &refusal);
                return Decision::Respond(response::refusal_response(&refusal, None, None, None));
            }
        };

        // Payment header: v2 wins when both are sent; the version inside decides.
        let header = request
            .headers
            .get(codec::PAYMENT_SIGNATURE)
            .or_else(|| request.headers.get(codec::X_PAYMENT));

        // A prepaid session call needs no payment.
        let mut session_refusal = None;
        if let (Some(scope), Some(token)) =
            (resolved.scope(), request.headers.get(X_PAYMENT_SESSION))
        {
            match Box::pin(self.redeem(compiled, &resolved, scope, token)).await {
                Ok(paid) => return Decision::Paid(paid),
                Err(Refusal::Unavailable {
                    reason,
                    retry_after,
                }) => {
                    let refusal = Refusal::Unavailable {
                        reason,
                        retry_after,
                    };
                    crate::metrics::refusal(route.pattern(), &refusal);
                    return Decision::Respond(response::refusal_response(
                        &refusal, None, None, None,
                    ));
                }
                // A buyer that also sent a payment pays instead.
                Err(refusal) => session_refusal = Some(refusal),
            }
        }

        // A bazaar declaration is enriched per request, so it skips the
        // pre-encoded challenge.
        let bazaar = resolved
            .extensions
            .contains_key(crate::discovery::bazaar::BAZAAR);
        if header.is_none() && session_refusal.is_none() {
            let url = RequestUrl::of(&self.inner.origin, &request);
            if let Some(response) = ready_challenge(compiled, &resolved, &request, url) {
                return Decision::Respond(response);
            }
        }
        let resource = match &resolved.fixed {
            Some((resource, _)) => resource.clone(),
            None => resource_for(route, RequestUrl::of(&self.inner.origin, &request)),
        };
        let enriched = bazaar.then(|| enrich_bazaar(route, &request, &resolved.extensions));
        let Some(header) = header else {
            let mut parts = self.parts(route, &resource, &resolved);
            if let Some(extensions) = &enriched {
                parts.extensions = extensions;
            }
            if let Some(refusal) = session_refusal {
                crate::metrics::refusal(route.pattern(), &refusal);
                return Decision::Respond(response::refusal_response(
                    &refusal,
                    Some(&parts),
                    None,
                    None,
                ));
            }
            compiled.series.payment_required();
            let encoded = if enriched.is_some() {
                // Enriched per request: nothing to reuse.
                parts.encode(Refusal::PaymentRequired.reason(), None)
            } else if let Some((_, encoded)) = &resolved.fixed {
                Some(encoded.clone())
            } else {
                resolved.payment_required(&parts)
            };
            let Some(encoded) = encoded else {
                return Decision::Respond(response::refusal_response(
                    &Refusal::Internal,
                    None,
                    None,
                    None,
                ));
            };
            if response::is_browser(request.headers) {
                return Decision::Respond(response::paywall_response(
                    &parts,
                    &encoded,
                    &*self.inner.paywall,
                ));
            }
            return Decision::Respond(response::challenge_response(&encoded));
        };
        Box::pin(self.pay(compiled, resolved, resource, enriched, header)).await
    }

    /// The payment half of [`process`](Self::process), boxed there to keep
    /// the 402 path's future small: decode, match, verify, after-verify
    /// hooks (claims).
    async fn pay(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: Arc<Resolved>,
        resource: v2::ResourceInfo,
        enriched: Option<JsonObject>,
        header: &HeaderValue,
    ) -> Decision {
        let route = &compiled.route;
        let mut parts = self.parts(route, &resource, &resolved);
        if let Some(extensions) = &enriched {
            parts.extensions = extensions;
        }
        let refuse = |refusal: Refusal, version: Option<X402Version>, payer: Option<&str>| {
            crate::metrics::refusal(route.pattern(), &refusal);
            Decision::Respond(response::refusal_response(
                &refusal,
                Some(&parts),
                version,
                payer,
            ))
        };

        let payload = match codec::decode_payment(header.as_bytes(), self.inner.max_header_bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "x402: unreadable payment header");
                return refuse(Refusal::InvalidHeader(e.reason()), None, None);
            }
        };
        let version = payload.version();

        let Some(matched) = find_match(&resolved, &payload) else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };
        let offer = matched.offer;
        if !matching::transfer_method_matches(&offer.requirements, payload.payload()) {
            tracing::debug!("x402: payment's transfer method is not the one offered");
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        }

        // The facilitator always gets the server's own requirement.
        let requirements = match version {
            X402Version::V2 => PaymentRequirements::V2((*offer.requirements).clone()),
            X402Version::V1 => match crate::challenge::v1_row(
                &offer.requirements,
                &resource,
                route.output_schema.as_ref(),
            ) {
                Some(row) => PaymentRequirements::V1(row),
                None => return refuse(Refusal::NoMatchingRequirements, Some(version), None),
            },
        };
        let Some(request_body) = FacilitatorRequest::new(payload, requirements) else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };

        let network = offer.requirements.network.clone();
        let pctx = PaymentContext {
            route: route.pattern(),
            payload: &request_body.payment_payload,
            requirements: &request_body.payment_requirements,
            network: &network,
        };

        let scheme = offer.requirements.scheme.as_str();
        let span = tracing::info_span!("x402.verify", network = %network, scheme, payer = tracing::field::Empty);
        let verdict = match Box::pin(self.verify(&pctx, &request_body))
            .instrument(span.clone())
            .await
        {
            Ok(v) => v,
            Err(refusal) => {
                crate::metrics::verification(Err(&refusal));
                return refuse(refusal, Some(version), None);
            }
        };
        span.record("payer", verdict.payer.as_deref());
        crate::metrics::verification(Ok((!verdict.is_valid).then(|| {
            verdict
                .invalid_reason
                .as_deref()
                .unwrap_or("invalid_payment")
        })));
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .clone()
                .unwrap_or_else(|| "invalid_payment".to_owned());
            return refuse(
                Refusal::Invalid(reason),
                Some(version),
                verdict.payer.as_deref(),
            );
        }

        let claim_span = tracing::info_span!("x402.claim", network = %network, scheme, payer = verdict.payer.as_deref());
        // Hooks that accepted the payment (a claim) are told if the client
        // goes away before the handler can start.
        let mut accepted = Accepted {
            engine: self,
            ctx: &pctx,
            count: 0,
        };
        for (i, hook) in self.inner.hooks.iter().enumerate() {
            let outcome = hook
                .after_verify(&pctx, &verdict)
                .instrument(claim_span.clone())
                .await;
            let refusal = match outcome {
                Ok(AfterVerify::Continue) => {
                    accepted.count = i + 1;
                    continue;
                }
                Ok(AfterVerify::Abort { reason }) => Refusal::Aborted(reason),
                Err(e) => {
                    log_hook_error(&e);
                    hook_error_refusal(&e)
                }
            };
            // Hooks that already accepted this payment (a claim, say) are told
            // it will not proceed.
            for earlier in &self.inner.hooks[..i] {
                earlier
                    .on_payment_canceled(&pctx, CancelReason::Refused)
                    .await;
            }
            accepted.count = 0;
            return refuse(refusal, Some(version), verdict.payer.as_deref());
        }

        accepted.count = 0;
        drop(accepted);
        let upto = offer.requirements.scheme == UPTO;
        let meter = upto.then(|| Meter::new(offer.requirements.amount));
        let payment = VerifiedPayment {
            version,
            scheme: offer.requirements.scheme.clone(),
            network: network.clone(),
            payer: verdict.payer.clone(),
            amount: offer.requirements.amount,
            asset: offer.requirements.asset.clone(),
            pay_to: offer.requirements.pay_to.clone(),
            requirements: offer.requirements.clone(),
            route: route.pattern().to_owned(),
            meter: meter.clone(),
            session: None,
        };
        let timing = if upto {
            SettlementTiming::AfterHandler
        } else {
            route.timing
        };
        let decimals = offer.decimals;
        let session = matched.session;
        Decision::Paid(Box::new(PaidRequest {
            engine: self.clone(),
            route: compiled.clone(),
            payment,
            finished: false,
            kind: paid::Kind::Payment(Box::new(paid::PaymentState {
                request: request_body,
                network,
                timing,
                resource,
                resolved: resolved.clone(),
                extensions: enriched,
                decimals,
                meter,
                session,
            })),
        }))
    }

    async fn redeem(
        &self,
        compiled: &Arc<CompiledRoute>,
        resolved: &Arc<Resolved>,
        scope: &str,
        token: &HeaderValue,
    ) -> Result<Box<PaidRequest>, Refusal> {
        let Some(token) = token.to_str().ok().and_then(SessionToken::parse) else {
            return Err(Refusal::Invalid("session_invalid".into()));
        };
        let hash = token.hash();
        let store = self.inner.sessions.clone();
        let (scope_owned, now) = (scope.to_owned(), unix_now());
        // A redemption is a write: if this request stops waiting for it (the
        // deadline passed, or the client hung up), one that lands late is
        // given back, since its request was refused.
        let give_back = {
            let store = self.inner.sessions.clone();
            move |answer| async move {
                if let Ok(Redemption::Redeemed { .. }) = answer {
                    if let Err(e) = store.give_back(&hash).await {
                        tracing::error!(error = %e, "x402: could not give back a late session redemption");
                    }
                }
            }
        };
        let mut call = Late::new(
            "session redemption",
            async move { store.redeem(&hash, &scope_owned, now).await },
            give_back,
        );
        let answer = call.answer(self.inner.session_deadline).await;
        drop(call);
        let remaining = match answer {
            Some(Ok(Redemption::Redeemed { remaining })) => {
                crate::metrics::session_redeemed();
                remaining
            }
            Some(Ok(Redemption::Unknown)) => {
                return Err(Refusal::Invalid("session_unknown".into()))
            }
            Some(Ok(Redemption::Expired)) => {
                return Err(Refusal::Invalid("session_expired".into()))
            }
            Some(Ok(Redemption::Exhausted)) => {
                return Err(Refusal::Invalid("session_exhausted".into()))
            }
            Some(Ok(Redemption::OutOfScope)) => {
                return Err(Refusal::Invalid("session_out_of_scope".into()))
            }
            Some(Err(e)) => {
                tracing::error!(error = %e, "x402: session store failed");
                return Err(session_unavailable());
            }
            None => {
                tracing::error!("x402: session store missed its deadline");
                return Err(session_unavailable());
            }
        };
        let first = resolved
            .sessions
            .first()
            .and_then(|s| s.accepts.first())
            .map(|a| a.requirements.clone())
            .ok_or(Refusal::Internal)?;
        let payment = VerifiedPayment {
            version: X402Version::V2,
            scheme: first.scheme.clone(),
            network: first.network.clone(),
            payer: None,
            amount: AtomicAmount::ZERO,
            asset: first.asset.clone(),
            pay_to: first.pay_to.clone(),
            requirements: first,
            route: compiled.route.pattern().to_owned(),
            meter: None,
            session: Some(SessionCall {
                remaining,
                scope: scope.to_owned(),
            }),
        };
        Ok(Box::new(PaidRequest {
            engine: self.clone(),
            route: compiled.clone(),
            payment,
            finished: false,
            kind: paid::Kind::Session {
                token: hash,
                remaining,
            },
        }))
    }

    fn parts<'a>(
        &self,
        route: &'a Route,
        resource: &'a v2::ResourceInfo,
        resolved: &'a Resolved,
    ) -> ChallengeParts<'a> {
        ChallengeParts {
            resource,
            accepts: &resolved.rows,
            extensions: &resolved.extensions,
            output_schema: route.output_schema.as_ref(),
        }
    }

    async fn verify(
        &self,
        ctx: &PaymentContext<'_>,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, Refusal> {
        for hook in &self.inner.hooks {
            match hook.before_verify(ctx).await {
                Ok(BeforeVerify::Continue) => {}
                Ok(BeforeVerify::Abort { reason }) => return Err(Refusal::Invalid(reason)),
                Ok(BeforeVerify::Skip(verdict)) => return Ok(verdict),
                Err(e) => {
                    log_hook_error(&e);
                    return Err(hook_error_refusal(&e));
                }
            }
        }
        let timer = crate::metrics::FacilitatorTimer::start();
        let answer = self.inner.facilitator.verify(request).await;
        timer.done("verify");
        match answer {
            Ok(v) => Ok(v),
            Err(error) => {
                for hook in &self.inner.hooks {
                    if let Some(v) = hook.on_verify_failure(ctx, &error).await {
                        return Ok(v);
                    }
                }
                tracing::error!(error = %error, network = ctx.network, "x402: facilitator /verify failed");
                Err(Refusal::FacilitatorUnavailable)
            }
        }
    }
}

/// The after-verify hooks that accepted a payment (the first `count`), told
/// [`CancelReason::ClientGone`] if the request is dropped before its
/// handler could start: a claim made for a client that went away is
/// released.
struct Accepted<'a> {
    engine: &'a Engine,
    ctx: &'a PaymentContext<'a>,
    count: usize,
}

impl Drop for Accepted<'_> {
    fn drop(&mut self) {
        let Some(hooks) = self.engine.inner.hooks.get(..self.count) else {
            return;
        };
        if hooks.is_empty() {
            return;
        }
        let hooks = hooks.to_vec();
        let (route, payload, requirements, network) = (
            self.ctx.route.to_owned(),
            self.ctx.payload.clone(),
            self.ctx.requirements.clone(),
            self.ctx.network.to_owned(),
        );
        self.engine.spawn_tracked(async move {
            let ctx = PaymentContext {
                route: &route,
                payload: &payload,
                requirements: &requirements,
                network: &network,
            };
            for hook in hooks {
                hook.on_payment_canceled(&ctx, CancelReason::ClientGone { keep_claim: false })
                    .await;
            }
        });
    }
}

fn session_unavailable() -> Refusal {
    Refusal::Unavailable {
        reason: "session_unavailable",
        retry_after: Duration::from_secs(1),
    }
}

/// The offer a payment refers to: the route's own offers first, then the
/// ways to buy its sessions (v2 only: sessions are not offered in v1).
fn find_match<'a>(resolved: &'a Resolved, payload: &PaymentPayload) -> Option<Matched<'a>> {
    match payload {
        PaymentPayload::V2(p) => {
            if let Some(i) = matching::match_v2(&resolved.rows, &p.accepted) {
                return resolved.accepts.get(i).map(|offer| Matched {
                    offer,
                    session: None,
                });
            }
            resolved.sessions.iter().enumerate().find_map(|(si, s)| {
                let rows = s.accepts.iter().map(|a| &*a.requirements);
                let i = matching::match_v2(rows, &p.accepted)?;
                s.accepts.get(i).map(|offer| Matched {
                    offer,
                    session: Some(si),
                })
            })
        }
        PaymentPayload::V1(p) => {
            let i = matching::match_v1(&resolved.rows, p)?;
            resolved.accepts.get(i).map(|offer| Matched {
                offer,
                session: None,
            })
        }
    }
}

fn log_hook_error(e: &HookError) {
    tracing::error!(error = %e, source = ?std::error::Error::source(e), "x402: hook failed");
}

fn hook_error_refusal(e: &HookError) -> Refusal {
    match e {
        HookError::Unavailable {
            reason,
            retry_after,
            ..
        } => Refusal::Unavailable {
            reason,
            retry_after: *retry_after,
        },
        HookError::Other(_) => Refusal::Internal,
    }
}

fn hook_error_response(e: &HookError) -> EngineResponse {
    log_hook_error(e);
    response::refusal_response(&hook_error_refusal(e), None, None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_and_its_futures_are_send_and_sync() {
        fn is_send_sync<T: Send + Sync>(_: &T) {}
        fn is_send<T: Send>(_: &T) {}
        fn check(engine: &Engine, view: RequestView<'static>) {
            is_send_sync(engine);
            is_send(&engine.process(view));
        }
        let _ = check;
    }
}
