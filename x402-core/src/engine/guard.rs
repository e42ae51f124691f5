//! What one paywall layer protects: the route table, or one bound route.

use super::*;

/// A request an outer paywall already took a payment for reached a route
/// of another one: it passes (one request pays once), logged once per route
/// when the outer route was another.
pub(super) fn paid_upstream(compiled: &CompiledRoute, payment: &VerifiedPayment) {
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
pub(super) fn ambiguous(compiled: &CompiledRoute) -> EngineResponse {
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
    pub(super) engine: Engine,
    pub(super) compiled: Arc<CompiledRoute>,
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

    /// As [`Engine::protects`]: for a bound route, whether it allows
    /// `method` (it protects every path it is asked about).
    pub fn protects(
        &self,
        method: &http::Method,
        path: &str,
        route_template: Option<&str>,
    ) -> bool {
        match self {
            Self::Table(engine) => engine.protects(method, path, route_template),
            Self::Route(route) => route.route().allows(method),
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
