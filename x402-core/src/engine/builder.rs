//! Building an engine: EngineBuilder and its ConfigError.

use super::*;

/// Builds an [`Engine`].
#[must_use]
pub struct EngineBuilder {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<Route>,
    hooks: Vec<Arc<dyn PaymentHooks>>,
    max_header_bytes: usize,
    paywall: Arc<dyn PaywallPage>,
    sessions: Arc<dyn SessionStore>,
    session_deadline: Duration,
    session_open_deadline: Duration,
    release_on_hang_up: bool,
    replay_guard: Option<ReplayGuard>,
    origin: Result<Origin, ConfigError>,
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
    pub fn paywall_page(mut self, paywall: impl PaywallPage) -> Self {
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
            paywall: Arc::new(DefaultPaywallPage),
            sessions: Arc::new(MemorySessionStore::new()),
            session_deadline: Duration::from_millis(250),
            session_open_deadline: Duration::from_secs(5),
            release_on_hang_up: false,
            replay_guard: Some(ReplayGuard::memory()),
            origin: Ok(Origin::Unset),
        }
    }
}
