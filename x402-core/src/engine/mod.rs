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
//! # use x402_core::testing::StandIn;
//! # async fn handler(_: &x402_core::VerifiedPayment) -> Result<http::Response<String>, std::convert::Infallible> { Ok(http::Response::new(String::new())) }
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(StandIn::new())
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
        AfterVerify, BeforeVerify, CancelReason, HookError, HookSteps, PaymentContext,
        PaymentHooks, ProtectedRequest, RequestContext,
    },
    late::Late,
    meter::Meter,
    money::AtomicAmount,
    paywall::{DefaultPaywallPage, PaywallPage},
    proto::{
        v2, FacilitatorRequest, JsonObject, PaymentPayload, PaymentRequirements, PreparedRequest,
        SupportedResponse, VerifyResponse, X402Version,
    },
    route::{Offer, PatternError, Pricing, RequestView, Route, Sent, SettlementTiming, UPTO},
    session::{MemorySessionStore, Redemption, SessionStore, SessionToken},
};

mod batch;
mod body;
mod builder;
mod charge;
mod decide;
mod describe;
mod drive;
mod guard;
mod hook_list;
mod known_payers;
mod matching;
mod origin;
mod paid;
mod pending;
mod precheck;
mod readiness;
mod resolve;
mod response;
mod siwx;
mod table;

pub use self::describe::{PricingKind, RouteDescription, SessionDescription, Settlement};
pub use crate::payment::{SessionCall, SharedStr, VerifiedPayment};

pub use self::body::PaidBody;
pub use self::builder::{ConfigError, EngineBuilder};
pub use self::drive::{Now, Pending, Processing};
pub use self::guard::{BoundRoute, Guard};
pub(crate) use self::paid::SettledHeaders;
pub use self::paid::{Completion, PaidRequest, Reply};
pub use self::pending::{PendingRetry, SETTLEMENT_PENDING};
pub use self::resolve::OfferError;
use self::resolve::ResolvedOffer;
pub(crate) use self::response::expose as expose_headers;
pub use self::response::{handler_failed_response, EngineResponse, Refusal, EXPOSE_HEADERS};
use self::response::{ChallengeParts, EncodedChallenge};
use self::{decide::*, guard::*, origin::*, table::*};

/// The payment engine. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Aligned to 128 bytes, so that the reference counts that `Arc` keeps in
/// front of it, which every request's clones and drops write from every
/// worker thread, never share a cache line (nor its prefetched neighbour)
/// with the fields every request reads.
#[repr(align(128))]
struct Inner {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<Arc<CompiledRoute>>,
    /// The route each router template falls to, for `routes` (which do not
    /// change once built).
    templates: crate::boundary::TemplateMemo,
    /// Routes bound to one handler each ([`Engine::bind`]): not matched
    /// against paths, listed by discovery.
    bound: std::sync::Mutex<Vec<Arc<CompiledRoute>>>,
    origin: Origin,
    hooks: hook_list::HookList,
    /// The series every paid request records.
    series: crate::metrics::HotSeries,
    /// Whether any hook implements `on_protected_request`.
    inspects_requests: bool,
    max_header_bytes: usize,
    paywall: Arc<dyn PaywallPage>,
    supported: OnceCell<Arc<SupportedResponse>>,
    sessions: Arc<dyn SessionStore>,
    session_deadline: Duration,
    session_open_deadline: Duration,
    release_on_hang_up: bool,
    /// [`EngineBuilder::local_precheck`].
    precheck: bool,
    /// [`EngineBuilder::precheck_known_payers`], when the pre-check is on.
    known_payers: Option<known_payers::KnownPayers>,
    in_flight: drive::InFlight,
    /// What payments' facilitator calls answered, for readiness.
    observed: crate::readiness::Observed,
    /// The per-client abuse limits ([`EngineBuilder::rate_limit`]).
    limits: Option<crate::limit::Limits>,
    /// The per-network minimum prices ([`EngineBuilder::price_floors`]).
    price_floors: crate::floor::PriceFloors,
    /// [`EngineBuilder::payment_identifiers`].
    payment_ids: crate::payment_id::PaymentIdentifiers,
    /// Sign-in-with-x's store and nonce key ([`EngineBuilder::sign_in_with_x`]).
    sign_in: crate::siwx::SignInConfig,
    /// [`EngineBuilder::settlement_pending_retry`].
    pending_retry: PendingRetry,
    /// The batch-settlement channels ([`EngineBuilder::batch_settlement`]).
    batch: crate::batch::BatchSettlement,
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

/// A [`Decision`] with its response boxed (16 bytes, not 144): what the
/// engine's waiting steps hand each other, since a future keeps room for
/// the value it awaits while it awaits. Only refusals, rare on the paid
/// path, pay for the box.
///
/// The futures the paid path boxes per request (the adapter's, the payment
/// half of `process_route`, the settlement, the facilitator's exchange) are
/// kept at most 1 032 bytes: the largest block glibc's allocator serves from
/// the thread's own cache. Larger blocks come from the arena's shared bins,
/// under its lock, which the runtime's worker threads then contend for
/// (BENCHMARKS.md, "Paid-path futures under 1 KiB"). Hence the boxes and
/// the borrowed, not owned, arguments along that path.
pub(crate) enum BoxedDecision {
    Pass,
    Respond(Box<EngineResponse>),
    Paid(Box<PaidRequest>),
}

impl From<Decision> for BoxedDecision {
    fn from(decision: Decision) -> Self {
        match decision {
            Decision::Pass => Self::Pass,
            Decision::Respond(response) => Self::Respond(Box::new(response)),
            Decision::Paid(paid) => Self::Paid(paid),
        }
    }
}

impl From<BoxedDecision> for Decision {
    fn from(decided: BoxedDecision) -> Self {
        match decided {
            BoxedDecision::Pass => Self::Pass,
            BoxedDecision::Respond(response) => Self::Respond(*response),
            BoxedDecision::Paid(paid) => Self::Paid(paid),
        }
    }
}

impl Engine {
    /// The facilitator.
    pub fn facilitator(&self) -> &Arc<dyn Facilitator> {
        &self.inner.facilitator
    }

    /// The [`batch-settlement`](crate::batch) state (for a
    /// [`Claimer`](crate::batch::Claimer)).
    pub fn batch_settlement(&self) -> &crate::batch::BatchSettlement {
        &self.inner.batch
    }

    /// Every offer with a fixed price, as declared (no I/O): those of the
    /// route table's routes, then of [bound](Engine::bind) routes, each
    /// route's own offers before its sessions'. Routes priced per request
    /// ([`Route::dynamic_pricing`]) contribute only their sessions'. For
    /// checks at start-up, such as the [Solana receiving
    /// accounts](crate::svm#receiving-accounts) check.
    pub fn static_offers(&self) -> Vec<Offer> {
        let mut out = Vec::new();
        for route in self.protected_routes() {
            if let Pricing::Static(offers) = &route.pricing {
                out.extend(offers.iter().cloned());
            }
            out.extend(route.sessions.iter().flat_map(|s| s.offers.iter().cloned()));
        }
        out
    }

    /// Every protected route (the table's, then the bound ones), for
    /// [readiness](crate::readiness).
    pub(crate) fn protected_routes(&self) -> Vec<Route> {
        let compiled = self.compiled_routes();
        compiled.iter().map(|c| c.route.clone()).collect()
    }

    /// The route table's compiled routes, then the bound ones.
    fn compiled_routes(&self) -> Vec<Arc<CompiledRoute>> {
        let bound = self
            .inner
            .bound
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.inner
            .routes
            .iter()
            .chain(bound.iter())
            .cloned()
            .collect()
    }

    /// What payments' facilitator calls answered, for readiness.
    pub(crate) fn observed(&self) -> &crate::readiness::Observed {
        &self.inner.observed
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
        self.lookup_path(request.method, request.uri.path(), request.route_template)
    }

    /// The route table's answer for a method, path and router template.
    fn lookup_path(
        &self,
        method: &http::Method,
        path: &str,
        route_template: Option<&str>,
    ) -> Lookup<&Arc<CompiledRoute>> {
        crate::boundary::lookup(
            &self.inner.routes,
            |r| &r.route,
            method,
            path,
            route_template,
            Some(&self.inner.templates),
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
        let compiled = Arc::new(CompiledRoute::compile(route, &self.inner.price_floors)?);
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
                self.inner.observed.record(&r);
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
                        built(resolve_route(route, offers, supported.as_deref(), true))
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
                let offers = above_floors(compiled, &self.inner.price_floors, offers)?;
                let all: Vec<&Offer> = offers.iter().chain(session_offers).collect();
                let supported = self.supported_for(&all).await?;
                built(resolve_route(route, &offers, supported.as_deref(), false)).map(Some)
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

    /// Whether [`process`](Self::process) could do anything with a request
    /// of this method and path (and the router template it matched, if the
    /// router says) but pass it: whether one of the routes protects it or
    /// refuses it as [ambiguous](crate::boundary). Headers play no part in
    /// that, and nothing is counted or logged. An adapter that has to
    /// translate a request before the engine can see it (actix-web's speaks
    /// another version of `http`) asks this first, and passes a request no
    /// route protects untranslated. A request that carries a payment from
    /// an outer paywall ([`RequestView::paid_upstream`]) passes
    /// [`process`](Self::process) whatever this says.
    ///
    /// ```
    /// use http::Method;
    /// use x402_core::{facilitator::HttpFacilitator, Engine, Offer, Route};
    ///
    /// let engine = Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?)
    ///     .route(Route::get("/weather/{city}").offer(Offer::exact(
    ///         "eip155:84532",
    ///         "$0.01",
    ///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    ///     )))
    ///     .build()?;
    /// assert!(engine.protects(&Method::GET, "/weather/paris", None));
    /// assert!(!engine.protects(&Method::GET, "/health", None));
    /// assert!(!engine.protects(&Method::POST, "/weather/paris", None));
    /// // A path a router may read as the protected one is not free.
    /// assert!(engine.protects(&Method::GET, "/weather/..%2Fparis", None));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn protects(
        &self,
        method: &http::Method,
        path: &str,
        route_template: Option<&str>,
    ) -> bool {
        !matches!(self.lookup_path(method, path, route_template), Lookup::Free)
    }

    /// [`process`](Self::process) for a request known to fall under
    /// `compiled`.
    fn process_protected<'a>(
        &self,
        compiled: &Arc<CompiledRoute>,
        request: RequestView<'a>,
    ) -> Processing<'a> {
        let held = match self.admit(&request) {
            Ok(held) => held,
            Err(wait) => {
                let limited = drive::rate_limited(compiled, wait);
                return Processing::decided(Decision::Respond(limited));
            }
        };
        match self.challenge_now(compiled, &request) {
            // A 402: a unit held for it stays taken.
            Some(response) => Processing::decided(Decision::Respond(response)),
            None => Processing::pending(self, compiled, request, held),
        }
    }
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

    /// `protects` is `process` without the request's headers: for every
    /// method, path and router template, it says "not protected" exactly
    /// when `process` passes the request, ambiguous and odd paths included.
    #[test]
    fn protects_agrees_with_process() {
        use crate::testing;

        let offer = || Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder(testing::StandIn::new())
            .route(Route::get("/weather/:city").offer(offer()))
            .route(Route::post("/report").offer(offer()))
            .route(Route::get("/files/*").offer(offer()))
            .route(Route::get("/exact").offer(offer()))
            .build()
            .unwrap();
        let paths = [
            "/",
            "/health",
            "/exact",
            "/exact/",
            "/EXACT",
            "/report",
            "/weather",
            "/weather/",
            "/weather/paris",
            "/weather/paris/",
            "/weather/..",
            "/weather/%2e%2e",
            "/weather/.",
            "/weather/a%2Fb",
            "/weather/a%5Cb",
            "/w%65ather/paris",
            "/Weather/Paris",
            "/weather/paris;x=1",
            "//weather//paris",
            "/weather/paris%5C..%5C..%5Creport",
            "/a%2F..%2Freport",
            "/a/%2e%2e%2freport",
            "/files",
            "/files/a/b",
            "/api/x",
            "/weather/paris?q=1",
            "/%",
            "/%zz",
        ];
        let templates = [
            None,
            Some("/weather/{city}"),
            Some("/files/{*path}"),
            Some("/health"),
            Some("/{*rest}"),
        ];
        let headers = HeaderMap::new();
        for method in [http::Method::GET, http::Method::POST, http::Method::HEAD] {
            for path in paths {
                let uri: http::Uri = path.parse().unwrap();
                for template in templates {
                    let view = RequestView::new(&method, &uri, &headers).route_template(template);
                    let passes = matches!(engine.process(view).now(), Now::Decided(Decision::Pass));
                    assert_eq!(
                        engine.protects(&method, uri.path(), template),
                        !passes,
                        "{method} {path} (template {template:?})"
                    );
                }
            }
        }
    }

    /// A static price's offer lasts as long as its route, and a payment
    /// shares its names and requirement without a count; a price made for
    /// one request does not, and its names are counted, not kept for the
    /// life of the process (nor looked up under the process-wide lock that
    /// keeps them).
    #[tokio::test]
    async fn only_offers_that_last_keep_their_names() {
        use crate::{route::RequestInfo, testing};

        let offer = || Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder(testing::StandIn::new())
            .route(Route::get("/static").offer(offer()))
            .route(
                Route::get("/dynamic")
                    .dynamic_pricing(move |_: RequestInfo| async move { Some(vec![offer()]) }),
            )
            .build()
            .unwrap();
        for (path, kept) in [("/static", true), ("/dynamic", false)] {
            let challenge =
                testing::challenge(&engine, http::Request::get(path).body(()).unwrap()).await;
            let mut headers = HeaderMap::new();
            headers.insert(
                crate::codec::PAYMENT_SIGNATURE,
                HeaderValue::from_str(&testing::payment(&challenge.accepts[0])).unwrap(),
            );
            let (method, uri) = (http::Method::GET, http::Uri::from_static(path));
            let Decision::Paid(paid) = engine
                .process(RequestView::new(&method, &uri, &headers))
                .await
            else {
                panic!("{path}: expected a paid request");
            };
            let payment = paid.payment();
            for name in [
                &payment.scheme,
                &payment.network,
                &payment.asset,
                &payment.pay_to,
            ] {
                assert_eq!(name.is_kept(), kept, "{path}: {name}");
            }
            // So is the requirement it matched, and the clones the handler's
            // extractors make share it.
            assert_eq!(payment.requirements.is_kept(), kept, "{path}");
            assert_eq!(payment.requirements.amount, challenge.accepts[0].amount);
        }
    }

    /// What outlives a borrow of the engine holds a table route by its
    /// place, and finds it again there; a bound route, outside the table,
    /// by its `Arc`. A paid request at each route names its own route.
    #[tokio::test]
    async fn routes_are_found_again_by_their_place() {
        use crate::testing;

        let offer = || Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder(testing::StandIn::new())
            .route(Route::get("/a").offer(offer()))
            .route(Route::get("/b").offer(offer()))
            .route(Route::post("/a").offer(offer()))
            .build()
            .unwrap();
        for (place, compiled) in engine.inner.routes.iter().enumerate() {
            let held = RouteRef::of(compiled);
            assert!(matches!(held, RouteRef::Table(p) if p == place));
            assert!(Arc::ptr_eq(engine.route(&held), compiled));
        }
        let bound = engine.bind(Route::get("/c").offer(offer())).unwrap();
        let held = RouteRef::of(&bound.compiled);
        assert!(matches!(held, RouteRef::Bound(_)));
        assert!(Arc::ptr_eq(engine.route(&held), &bound.compiled));

        for (method, path) in [(http::Method::GET, "/b"), (http::Method::POST, "/a")] {
            let request = || http::Request::builder().method(method.clone()).uri(path);
            let challenge = testing::challenge(&engine, request().body(()).unwrap()).await;
            let mut headers = HeaderMap::new();
            headers.insert(
                crate::codec::PAYMENT_SIGNATURE,
                HeaderValue::from_str(&testing::payment(&challenge.accepts[0])).unwrap(),
            );
            let uri = http::Uri::from_static(path);
            let Decision::Paid(paid) = engine
                .process(RequestView::new(&method, &uri, &headers))
                .await
            else {
                panic!("{method} {path}: expected a paid request");
            };
            let route = &engine.route(&paid.route).route;
            assert_eq!((route.method(), route.pattern()), (Some(&method), path));
            assert_eq!(&*paid.payment().route, path);
        }
    }
}
