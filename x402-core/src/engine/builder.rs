//! Building an engine: EngineBuilder and its ConfigError.

use super::*;
use crate::{floor::PriceFloors, money::PriceError};

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
    precheck: bool,
    known_payers: bool,
    replay_guard: Option<ReplayGuard>,
    origin: Result<Origin, ConfigError>,
    price_floors: PriceFloors,
    rate_limit: Option<crate::limit::RateLimit>,
    payment_ids: crate::payment_id::PaymentIdentifiers,
    sign_in: crate::siwx::SignInConfig,
    pending_retry: PendingRetry,
    batch: crate::batch::BatchSettlement,
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
    /// A static offer (or a session's) is priced under its network's floor
    /// ([`EngineBuilder::price_floors`]): a call would not pay for its own
    /// settlement.
    #[error(
        "route {route}: price {price} on {network} is below that network's floor of {floor}, \
         under which a call does not pay for its settlement (see EngineBuilder::price_floors)"
    )]
    PriceBelowFloor {
        /// The route's pattern.
        route: String,
        /// The offer's network.
        network: String,
        /// The offer's price (an `upto` offer's ceiling) in dollars, as
        /// `$0.001`.
        price: String,
        /// The network's floor in dollars, as `$0.01`.
        floor: String,
    },
    /// A price floor is not a dollar amount.
    #[error("price floor for {network}: {source}")]
    PriceFloor {
        /// The network.
        network: String,
        /// Why.
        #[source]
        source: PriceError,
    },
    /// A [`RateLimit`](crate::limit::RateLimit) budget allows nothing (a
    /// count of 0, or a zero period).
    #[error("rate limit: {0}")]
    RateLimit(&'static str),
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

    /// The [`batch-settlement`](crate::batch) scheme's channel state and
    /// receiver-authorizer signer (default: channels in memory, no signer).
    pub fn batch_settlement(mut self, batch: crate::batch::BatchSettlement) -> Self {
        self.batch = batch;
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

    /// How a facilitator's `settlement_pending` answer is retried (default
    /// upstream's: once, at once; see [`PendingRetry`]). A settlement still
    /// pending after that is answered `502 settlement_unknown`, the payment
    /// kept claimed.
    pub fn settlement_pending_retry(mut self, retry: PendingRetry) -> Self {
        self.pending_retry = retry;
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

    /// Whether EVM payments are checked here before any facilitator call
    /// (default `true`): the EIP-712 signature of an EIP-3009 or Permit2
    /// payload must recover its `from`, its window must hold (with the
    /// facilitators' 6 s margin), and its amount, recipient and token must
    /// be the requirement's. A payment that fails gets a 402 with the
    /// reason a facilitator would give (`invalid_exact_evm_signature`, ...;
    /// see [`evm::reason`](crate::evm::reason)) and costs the facilitator
    /// no call, so a client sending thousands of forged payloads cannot
    /// spend a hosted facilitator's quota. What the check cannot judge
    /// (smart-wallet signatures, other networks) goes to the facilitator
    /// as before.
    ///
    /// It costs one signature recovery per payment (tens of microseconds),
    /// which an in-process facilitator then reuses; a payer the facilitator
    /// already accepted has its signature left to the facilitator (see
    /// [`precheck_known_payers`](Self::precheck_known_payers)). Turn it off
    /// for a facilitator that accepts payloads this check would refuse.
    ///
    /// ```
    /// # use x402_core::{testing::StandIn, Engine};
    /// let engine = Engine::builder(StandIn::new()).local_precheck(false).build()?;
    /// # Ok::<(), x402_core::engine::ConfigError>(())
    /// ```
    pub fn local_precheck(mut self, enabled: bool) -> Self {
        self.precheck = enabled;
        self
    }

    /// Whether the [local pre-check](Self::local_precheck) leaves the
    /// signature of a known payer to the facilitator (default `true`): a
    /// payer is known once the facilitator accepted a payment whose signer
    /// was recovered here. Its payments still get every other check (window,
    /// amount, recipient, token); only the signer recovery, most of the
    /// check's cost, is skipped. The facilitator verifies every signature
    /// whatever this says, so no unpaid request is ever served.
    ///
    /// What a forger can draw from it is bounded. One unchecked payment per
    /// known payer is at the facilitator at a time, and up to four once the
    /// facilitator has accepted sixteen of its payments (a buyer that pays
    /// often also pays in parallel); the others are recovered here. One the
    /// facilitator does not accept (refused, failed, or abandoned by a
    /// client that hung up) makes that payer's payments recovered here
    /// again for ten minutes, and its record starts over. So forged
    /// payloads naming an address that paid before cost the facilitator at
    /// most four calls per such address per ten minutes (one if it paid
    /// fewer than sixteen times), and those naming any other address none.
    /// The engine remembers up to 1 024 payers (about 56 KB, in sets of
    /// four where the least recently accepted gives way); one it forgets is
    /// checked in full again.
    ///
    /// Turn it off to recover every payment's signer here, so that no
    /// forged payload ever reaches the facilitator:
    ///
    /// ```
    /// # use x402_core::{testing::StandIn, Engine};
    /// let engine = Engine::builder(StandIn::new())
    ///     .precheck_known_payers(false)
    ///     .build()?;
    /// # Ok::<(), x402_core::engine::ConfigError>(())
    /// ```
    pub fn precheck_known_payers(mut self, enabled: bool) -> Self {
        self.known_payers = enabled;
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

    /// Replaces the per-network minimum prices (default:
    /// [`PriceFloors::default()`]: $0.01 on Base, $0.02 on Arbitrum One,
    /// $0.05 on Ethereum; none on testnets and other networks).
    ///
    /// [`build`](Self::build) fails with [`ConfigError::PriceBelowFloor`]
    /// when a static offer, or a session offer, is priced under its
    /// network's floor (for `upto`, the ceiling). A route priced per request
    /// ([`Route::dynamic_pricing`](crate::Route::dynamic_pricing)) has its
    /// offers under the floor left out of each challenge, with a warning in
    /// the log; when none is left the request is refused with 500
    /// `price_below_floor` and its handler does not run. Only prices in the
    /// network's default stablecoin have a dollar value: see
    /// [`PriceFloors`] for what is compared.
    ///
    /// ```
    /// use x402_core::{floor::PriceFloors, testing::StandIn, Engine, Offer, Route};
    ///
    /// let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
    /// let cheap = || Route::get("/cheap").offer(Offer::exact("eip155:8453", "$0.001", pay_to));
    ///
    /// // Under Base's default floor of $0.01: refused.
    /// let error = Engine::builder(StandIn::new()).route(cheap()).build().unwrap_err();
    /// assert!(error.to_string().contains("$0.01"), "{error}");
    ///
    /// // A lower floor for Base (or `PriceFloors::none()`): built.
    /// let engine = Engine::builder(StandIn::new())
    ///     .price_floors(PriceFloors::default().set("eip155:8453", "$0.0005"))
    ///     .route(cheap())
    ///     .build();
    /// assert!(engine.is_ok());
    /// ```
    pub fn price_floors(mut self, floors: PriceFloors) -> Self {
        self.price_floors = floors;
        self
    }

    /// Limits, per client, the failed payment attempts and the unpaid
    /// challenges the engine answers (default: none). A client over a
    /// limit gets 429 `rate_limited` with `Retry-After`, before any hook
    /// runs or the facilitator is asked; a client that pays is never
    /// limited by its failures budget. See [`limit`](crate::limit) for what
    /// is counted, how clients are told apart (the peer's address by
    /// default; requests with no address known are not limited) and
    /// proxies.
    ///
    /// ```
    /// use std::time::Duration;
    /// use x402_core::{limit::RateLimit, testing::StandIn, Engine, Offer, Route};
    ///
    /// let engine = Engine::builder(StandIn::new())
    ///     .route(Route::get("/report").offer(Offer::exact(
    ///         "eip155:84532",
    ///         "$0.01",
    ///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    ///     )))
    ///     .rate_limit(
    ///         RateLimit::per_client()
    ///             .failed_payments(10, Duration::from_secs(60))
    ///             .challenges(120, Duration::from_secs(60)),
    ///     )
    ///     .build()?;
    /// # let _ = engine;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn rate_limit(mut self, limit: crate::limit::RateLimit) -> Self {
        self.rate_limit = Some(limit);
        self
    }

    /// Where the ids of the [`payment-identifier`](crate::payment_id)
    /// extension are kept, and how long a resend waits for its original
    /// (default: [`PaymentIdentifiers::memory`](crate::payment_id::PaymentIdentifiers::memory),
    /// one process). Share a Redis store between instances, as for claims.
    pub fn payment_identifiers(mut self, ids: crate::payment_id::PaymentIdentifiers) -> Self {
        self.payment_ids = ids;
        self
    }

    /// Where routes offering [sign-in-with-x](crate::siwx) keep paid
    /// accesses and used nonces, and the key their nonces are signed with
    /// (default: [`SignInConfig::new`](crate::siwx::SignInConfig::new), in
    /// memory with a random key: one process). Instances behind one load
    /// balancer share a [`RedisSignInStore`](crate::siwx) and one
    /// [`NonceKey`](crate::siwx::NonceKey).
    pub fn sign_in_with_x(mut self, config: crate::siwx::SignInConfig) -> Self {
        self.sign_in = config;
        self
    }

    /// Checks every route and builds the engine. Offers that need nothing
    /// from the facilitator are resolved and their challenges encoded now.
    pub fn build(self) -> Result<Engine, ConfigError> {
        let origin = self.origin?;
        if let Some((network, source)) = self.price_floors.invalid() {
            return Err(ConfigError::PriceFloor {
                network: network.to_owned(),
                source: source.clone(),
            });
        }
        let limits = match self.rate_limit {
            Some(limit) => crate::limit::Limits::new(limit).map_err(ConfigError::RateLimit)?,
            None => None,
        };
        let mut routes = Vec::with_capacity(self.routes.len());
        for route in self.routes {
            let mut compiled = CompiledRoute::compile(route, &self.price_floors)?;
            compiled.place = Some(routes.len());
            routes.push(Arc::new(compiled));
        }
        let mut hooks: Vec<Arc<dyn PaymentHooks>> = Vec::with_capacity(self.hooks.len() + 1);
        if let Some(guard) = self.replay_guard {
            hooks.push(Arc::new(guard));
        }
        hooks.extend(self.hooks);
        let inspects_requests = hooks
            .iter()
            .any(|h| h.inspects_requests() && h.steps().contains(HookSteps::PROTECTED_REQUEST));
        let hooks = hook_list::HookList::new(hooks);
        Ok(Engine {
            inner: Arc::new(Inner {
                facilitator: self.facilitator,
                routes,
                templates: crate::boundary::TemplateMemo::new(),
                bound: std::sync::Mutex::new(Vec::new()),
                origin,
                hooks,
                series: crate::metrics::HotSeries::default(),
                inspects_requests,
                max_header_bytes: self.max_header_bytes,
                paywall: self.paywall,
                supported: OnceCell::new(),
                sessions: self.sessions,
                session_deadline: self.session_deadline,
                session_open_deadline: self.session_open_deadline,
                release_on_hang_up: self.release_on_hang_up,
                precheck: self.precheck,
                known_payers: (self.precheck && self.known_payers)
                    .then(super::known_payers::KnownPayers::default),
                in_flight: drive::InFlight::default(),
                observed: Default::default(),
                limits,
                price_floors: self.price_floors,
                payment_ids: self.payment_ids,
                sign_in: self.sign_in,
                pending_retry: self.pending_retry,
                batch: self.batch,
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
            precheck: true,
            known_payers: true,
            replay_guard: Some(ReplayGuard::memory()),
            origin: Ok(Origin::Unset),
            price_floors: PriceFloors::default(),
            rate_limit: None,
            payment_ids: crate::payment_id::PaymentIdentifiers::memory(),
            sign_in: crate::siwx::SignInConfig::new(),
            pending_retry: PendingRetry::default(),
            batch: crate::batch::BatchSettlement::default(),
        }
    }
}
