//! Abuse limits: per-client limits on failed payment attempts and on unpaid
//! challenges, turned on with
//! [`EngineBuilder::rate_limit`](crate::EngineBuilder::rate_limit).
//!
//! Any client can send well-formed payment headers with garbage signatures,
//! each of which costs the facilitator a `/verify`, or ask paid routes for
//! 402 challenges as fast as it can. A [`RateLimit`] gives every client two
//! budgets, each a token bucket (GCRA, as `governor` keeps them): `count`
//! requests at once, refilled at `count` per `period`.
//!
//! - **Failed payments**: requests with a payment header (`PAYMENT-SIGNATURE`
//!   or `X-PAYMENT`) answered with a 402: a header that does not decode, a
//!   payment that matches nothing offered, one the facilitator or a local
//!   check finds invalid, a replay.
//! - **Challenges**: 402s to requests without a payment header.
//!
//! A client with nothing left in the budget a request would draw on gets
//! **429 Too Many Requests** with `Retry-After: <seconds>` (rounded up, at
//! least 1) and the body `{"error":"rate_limited"}`, before any hook runs or
//! the facilitator is asked: a limited client costs no `/verify`. The check
//! comes first, so it applies to every request to a protected route that
//! would draw on the empty budget, including one a hook would have let
//! through or a dynamic price would have found free. Unprotected routes are
//! never limited. Nothing is hashed, locked or allocated for a request when
//! no limit is configured.
//!
//! ```
//! use std::time::Duration;
//! use x402_core::{limit::RateLimit, testing::StandIn, Engine, Offer, Route};
//!
//! let engine = Engine::builder(StandIn::new())
//!     .route(Route::get("/report").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.01",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .rate_limit(
//!         RateLimit::per_client()
//!             .failed_payments(10, Duration::from_secs(60))
//!             .challenges(120, Duration::from_secs(60)),
//!     )
//!     .build()?;
//! # let _ = engine;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How requests are counted
//!
//! Each protected request with a payment header draws one unit from the
//! client's failed-payments budget as it arrives, and each one without a
//! header one unit from its challenges budget (a budget that is not
//! configured is not drawn on). The unit is given back when the request is
//! not answered with a 402: a payment that is accepted (verified and
//! claimed), a prepaid session call, a request a hook lets through or
//! refuses with another status, a 5xx (the facilitator or a store was
//! down, not the client's doing). So:
//!
//! - **Paid requests that succeed never use up the failed-payments budget**:
//!   a client that pays for every call is never limited by it.
//! - **A client over its failed-payments limit cannot pay until the budget
//!   refills**: its payment headers are answered 429 without a `/verify`,
//!   since a payment cannot be told good from garbage without verifying it,
//!   and the limit exists to spare the facilitator. Its unpaid requests still
//!   get challenges (within the challenges budget), and its session calls
//!   (`X-PAYMENT-SESSION` without a payment header) draw on the challenges
//!   budget, as unpaid requests.
//! - A unit is held while its payment is being verified, so a client has at
//!   most `count` payments in verification at once: a flood of concurrent
//!   garbage costs `count` `/verify` calls, not one per request. Give a
//!   buyer that pays in parallel a `count` above its concurrency.
//! - A request whose client hangs up before it is decided keeps its unit.
//! - A settlement the facilitator refuses after the payment was accepted
//!   is not counted: the payment passed verification.
//!
//! # Who a client is
//!
//! By default, the peer's IP address, as the adapter reports it
//! ([`RequestView::peer`]): `x402-actix` always does, `x402-axum` when the
//! app is served with
//! `into_make_service_with_connect_info::<SocketAddr>()`, `x402-tower`
//! when its `ReadDispatch` supplies it. IPv6 addresses are grouped by their
//! /64 prefix (what one subscriber is usually given, so a client cannot
//! pick a fresh address per request); IPv4-mapped IPv6 addresses count as
//! the IPv4 address.
//!
//! - [`key_by`](RateLimit::key_by): a function of the request instead (an
//!   API key, an account id).
//! - [`trusted_proxies`](RateLimit::trusted_proxies): behind reverse
//!   proxies, the address the nearest of them saw, read from
//!   `X-Forwarded-For` (or `Forwarded`, [`proxy_header`](RateLimit::proxy_header)).
//!   Never by default: those headers come from the client unless a proxy
//!   writes them, and a client that chose its own key could take another's
//!   bucket or escape its own.
//!
//! **A request with no key is not limited**: no peer address known (and
//! none from a trusted proxy), or a [`key_by`](RateLimit::key_by) function
//! that answered `None`. An adapter that cannot tell the peer (plain
//! `x402-tower` over hyper, whose server does not put it in the request)
//! therefore limits nothing until it is given the peer or a key function.
//!
//! # Memory
//!
//! A client's entry is dropped once its budget is full again (the map is
//! swept as it grows, like the in-memory claim store), and at most
//! [`max_clients`](RateLimit::max_clients) clients are tracked (default
//! 100 000) per budget: when that many have live entries, further clients
//! share one overflow bucket until entries expire. A flood from more
//! addresses than that is limited as one client, rather than let through
//! or allowed to grow memory.
//!
//! The budgets live in this process: instances behind a load balancer each
//! keep their own.

use std::{
    collections::hash_map::RandomState,
    fmt,
    hash::{BuildHasher, Hash},
    net::{IpAddr, Ipv6Addr, SocketAddr},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use http::{HeaderMap, HeaderName};

use crate::{
    route::{RequestView, Sent},
    swept::SweptMap,
};

/// The default of [`RateLimit::max_clients`].
pub const DEFAULT_MAX_CLIENTS: usize = 100_000;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Per-client limits on failed payment attempts and unpaid challenges (see
/// the [module docs](self)), given to
/// [`EngineBuilder::rate_limit`](crate::EngineBuilder::rate_limit).
///
/// ```
/// use std::time::Duration;
/// use x402_core::limit::RateLimit;
///
/// // By API key, for clients that send one; others are not limited.
/// let by_key = RateLimit::per_client()
///     .failed_payments(5, Duration::from_secs(60))
///     .key_by(|request| {
///         request.headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_owned)
///     });
///
/// // Behind one reverse proxy that appends to `X-Forwarded-For`.
/// let proxied = RateLimit::per_client()
///     .challenges(120, Duration::from_secs(60))
///     .trusted_proxies(1);
/// # let _ = (by_key, proxied);
/// ```
#[must_use]
#[derive(Clone)]
pub struct RateLimit {
    failed_payments: Option<Quota>,
    challenges: Option<Quota>,
    key: KeySource,
    max_clients: usize,
}

/// `count` per `period`, `count` at once.
#[derive(Debug, Clone, Copy)]
struct Quota {
    count: u32,
    period: Duration,
}

type KeyFn = dyn Fn(&RequestView<'_>, &RandomState) -> Option<u64> + Send + Sync;

#[derive(Clone)]
enum KeySource {
    /// The peer's address, or the one the `hops`-th proxy from the server
    /// saw (0: the peer).
    Address { hops: usize, header: ProxyHeader },
    /// A function of the request.
    Custom(Arc<KeyFn>),
}

/// The header reverse proxies write the client's address into
/// ([`RateLimit::proxy_header`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`: each proxy appends the
    /// address it received the request from.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1`: each proxy appends an
    /// element; its `for` parameter is read.
    Forwarded,
}

impl fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("RateLimit");
        s.field("failed_payments", &self.failed_payments)
            .field("challenges", &self.challenges);
        match &self.key {
            KeySource::Address { hops, header } => s
                .field("trusted_proxies", hops)
                .field("proxy_header", header),
            KeySource::Custom(_) => s.field("key_by", &"<fn>"),
        };
        s.field("max_clients", &self.max_clients).finish()
    }
}

impl RateLimit {
    /// Limits keyed by the peer's IP address, with no budget yet: add
    /// [`failed_payments`](Self::failed_payments) and/or
    /// [`challenges`](Self::challenges).
    pub fn per_client() -> Self {
        Self {
            failed_payments: None,
            challenges: None,
            key: KeySource::Address {
                hops: 0,
                header: ProxyHeader::XForwardedFor,
            },
            max_clients: DEFAULT_MAX_CLIENTS,
        }
    }

    /// At most `count` payment attempts answered with a 402 per `period`
    /// per client, `count` of them at once (a payment being verified holds
    /// one; an accepted payment gives it back). `count` must be at least 1
    /// and `period` not zero, or
    /// [`build`](crate::EngineBuilder::build) fails.
    pub fn failed_payments(mut self, count: u32, period: Duration) -> Self {
        self.failed_payments = Some(Quota { count, period });
        self
    }

    /// At most `count` challenges (402s to requests without a payment
    /// header) per `period` per client, `count` of them at once. `count`
    /// must be at least 1 and `period` not zero, or
    /// [`build`](crate::EngineBuilder::build) fails.
    pub fn challenges(mut self, count: u32, period: Duration) -> Self {
        self.challenges = Some(Quota { count, period });
        self
    }

    /// Keys clients by `key` instead of by address (replacing
    /// [`trusted_proxies`](Self::trusted_proxies)): requests it gives the
    /// same key share budgets, and a request it answers `None` for is not
    /// limited. Keys are hashed, not stored.
    ///
    /// A key the client chooses freely (an unchecked header) lets it pick
    /// a fresh bucket per request: key by something the server issued, or
    /// fall back to [`RequestView::peer`] for requests without one.
    pub fn key_by<K, F>(mut self, key: F) -> Self
    where
        K: Hash,
        F: Fn(&RequestView<'_>) -> Option<K> + Send + Sync + 'static,
    {
        self.key = KeySource::Custom(Arc::new(
            move |request: &RequestView<'_>, hasher: &RandomState| {
                key(request).map(|k| hasher.hash_one(k))
            },
        ));
        self
    }

    /// Keys clients by the address the `hops`-th reverse proxy in front of
    /// the server received the request from, read from `X-Forwarded-For`
    /// (or the [`proxy_header`](Self::proxy_header)): the `hops`-th address
    /// counted from the right, since each proxy appends the address it saw
    /// and whatever is further left came from the client. `0` (the default)
    /// reads no header: the peer's address. Replaces a
    /// [`key_by`](Self::key_by) function.
    ///
    /// **Only when every request reaches the server through those
    /// proxies**: a client that can connect directly writes the header
    /// itself and picks its own key. A request whose header holds fewer
    /// than `hops` addresses, or no address at that place, is keyed by its
    /// peer (the proxy: all such requests share a bucket, rather than
    /// escape the limit).
    pub fn trusted_proxies(mut self, hops: usize) -> Self {
        let header = match self.key {
            KeySource::Address { header, .. } => header,
            KeySource::Custom(_) => ProxyHeader::default(),
        };
        self.key = KeySource::Address { hops, header };
        self
    }

    /// Which header the [`trusted_proxies`](Self::trusted_proxies) write
    /// (default `X-Forwarded-For`).
    pub fn proxy_header(mut self, header: ProxyHeader) -> Self {
        let hops = match self.key {
            KeySource::Address { hops, .. } => hops,
            KeySource::Custom(_) => 0,
        };
        self.key = KeySource::Address { hops, header };
        self
    }

    /// How many clients each budget tracks at most (default
    /// [`DEFAULT_MAX_CLIENTS`]); beyond that, new clients share one bucket
    /// until entries expire. Each costs a few dozen bytes.
    pub fn max_clients(mut self, max: usize) -> Self {
        self.max_clients = max;
        self
    }
}

/// Which budget a request draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Budget {
    FailedPayments,
    Challenges,
}

/// A unit a request took from a budget, given back by
/// [`Limits::settle`] unless the request is answered with a 402.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub(crate) struct Held {
    budget: Budget,
    slot: Slot,
}

/// The engine's limits, built from a [`RateLimit`].
pub(crate) struct Limits {
    failed_payments: Option<Limiter>,
    challenges: Option<Limiter>,
    key: KeySource,
    hasher: RandomState,
    epoch: Instant,
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("failed_payments", &self.failed_payments)
            .field("challenges", &self.challenges)
            .finish_non_exhaustive()
    }
}

impl Limits {
    /// The limits of `config`; `None` when it sets no budget.
    pub(crate) fn new(config: RateLimit) -> Result<Option<Self>, &'static str> {
        let max_clients = config.max_clients;
        let limiter = |quota: Option<Quota>| quota.map(|q| Limiter::new(q, max_clients));
        let failed_payments = limiter(config.failed_payments).transpose()?;
        let challenges = limiter(config.challenges).transpose()?;
        if failed_payments.is_none() && challenges.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            failed_payments,
            challenges,
            key: config.key,
            hasher: RandomState::new(),
            epoch: Instant::now(),
        }))
    }

    /// Takes a unit from the budget `request` draws on: `Ok(None)` when it
    /// draws on none (no such budget, no key), `Err(retry_after)` when the
    /// client has nothing left.
    pub(crate) fn admit(&self, request: &RequestView<'_>) -> Result<Option<Held>, Duration> {
        let (budget, limiter) = if Sent::of(request.headers).payment().is_some() {
            (Budget::FailedPayments, &self.failed_payments)
        } else {
            (Budget::Challenges, &self.challenges)
        };
        let Some(limiter) = limiter else {
            return Ok(None);
        };
        let Some(key) = self.key(request) else {
            return Ok(None);
        };
        let slot = limiter.take(key, self.now())?;
        Ok(Some(Held { budget, slot }))
    }

    /// The request that took `held` is decided: the unit is given back
    /// unless it was `challenged` (answered with a 402).
    pub(crate) fn settle(&self, held: Held, challenged: bool) {
        if challenged {
            return;
        }
        let limiter = match held.budget {
            Budget::FailedPayments => &self.failed_payments,
            Budget::Challenges => &self.challenges,
        };
        if let Some(limiter) = limiter {
            limiter.give_back(held.slot, self.now());
        }
    }

    fn key(&self, request: &RequestView<'_>) -> Option<u64> {
        match &self.key {
            KeySource::Custom(key) => key(request, &self.hasher),
            KeySource::Address { hops, header } => {
                let forwarded = match hops {
                    0 => None,
                    hops => forwarded_client(request.headers, *hops, *header),
                };
                let address = forwarded.or(request.peer)?;
                Some(self.hasher.hash_one(client_address(address)))
            }
        }
    }

    fn now(&self) -> u64 {
        nanos(self.epoch.elapsed())
    }
}

/// The `Retry-After` of a wait, in seconds: rounded up, at least 1.
pub(crate) fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0))
        .max(1)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The address a client is known by: IPv4 as it is (IPv4-mapped IPv6
/// included), IPv6 by its /64 prefix.
fn client_address(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !u128::from(u64::MAX))),
        },
    }
}

/// The address the `hops`-th proxy from the right of `header` wrote, if
/// there is one there. Empty list elements are skipped; a line that is not
/// text, before the `hops`-th element is reached, ends the search.
fn forwarded_client(headers: &HeaderMap, hops: usize, header: ProxyHeader) -> Option<IpAddr> {
    let name = match header {
        ProxyHeader::XForwardedFor => X_FORWARDED_FOR,
        ProxyHeader::Forwarded => http::header::FORWARDED,
    };
    let mut seen = 0;
    for line in headers.get_all(name).iter().rev() {
        // Split on every comma, quoted or not: the elements proxies append
        // (addresses, `for=` parameters) hold none, and quotes the client
        // wrote further left cannot join them.
        for element in line.to_str().ok()?.rsplit(',') {
            let element = element.trim();
            if element.is_empty() {
                continue;
            }
            seen += 1;
            if seen == hops {
                return match header {
                    ProxyHeader::XForwardedFor => parse_node(element),
                    ProxyHeader::Forwarded => forwarded_for(element),
                };
            }
        }
    }
    None
}

/// The `for` parameter of one `Forwarded` element, as an address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        parse_node(value.trim().trim_matches('"'))
    })
}

/// `192.0.2.1`, `192.0.2.1:80`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:80`.
fn parse_node(node: &str) -> Option<IpAddr> {
    if let Ok(address) = node.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(address) = node.parse::<SocketAddr>() {
        return Some(address.ip());
    }
    node.strip_prefix('[')?
        .strip_suffix(']')?
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// Where a unit was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Client(u64),
    Overflow,
}

/// One budget: a GCRA bucket per client. A client's state is its
/// theoretical arrival time (`tat`, in nanoseconds of the limiter's clock):
/// a unit is available at `now` when `tat + interval - now <= tolerance`,
/// and taking it moves `tat` to `max(tat, now) + interval`. A `tat` at or
/// before `now` is a full bucket, the same as no entry.
struct Limiter {
    /// Nanoseconds per unit refilled: `period / count`.
    interval: u64,
    /// `count * interval`: how far ahead of `now` a client's `tat` may go.
    tolerance: u64,
    max_clients: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    clients: SweptMap<u64, u64>,
    /// The `tat` of the bucket clients share when `max_clients` are tracked.
    overflow: u64,
    /// When the map was last swept because it was full, in seconds.
    full_sweep_secs: Option<u64>,
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("interval", &Duration::from_nanos(self.interval))
            .field("tolerance", &Duration::from_nanos(self.tolerance))
            .field("max_clients", &self.max_clients)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    fn new(quota: Quota, max_clients: usize) -> Result<Self, &'static str> {
        if quota.count == 0 {
            return Err("a rate limit must allow at least one request per period");
        }
        if quota.period.is_zero() {
            return Err("a rate limit's period must not be zero");
        }
        let interval = (nanos(quota.period) / u64::from(quota.count)).max(1);
        Ok(Self {
            interval,
            tolerance: interval.saturating_mul(u64::from(quota.count)),
            max_clients,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere mid-update leaves at worst one bucket off by a
        // unit; the map itself is sound.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes a unit of `key`'s bucket at `now`, or says how long until one
    /// is available.
    fn take(&self, key: u64, now: u64) -> Result<Slot, Duration> {
        let mut state = self.lock();
        let state = &mut *state;
        if let Some(tat) = state.clients.get_mut(&key) {
            *tat = self.advance(*tat, now)?;
            return Ok(Slot::Client(key));
        }
        let now_secs = now / 1_000_000_000;
        state.clients.make_room(now_secs, |&tat| tat > now);
        if state.clients.len() >= self.max_clients && state.full_sweep_secs != Some(now_secs) {
            // Full: sweep now (at most once a second) rather than wait for
            // the map to double, which it may not.
            state.full_sweep_secs = Some(now_secs);
            state.clients.sweep(now_secs, |&tat| tat > now);
        }
        if state.clients.len() >= self.max_clients {
            state.overflow = self.advance(state.overflow, now)?;
            return Ok(Slot::Overflow);
        }
        // A new client's bucket is full: its first unit is always there.
        let tat = self.advance(now, now)?;
        state.clients.insert(key, tat);
        Ok(Slot::Client(key))
    }

    /// `tat` after taking a unit at `now`, or how long until one is there.
    fn advance(&self, tat: u64, now: u64) -> Result<u64, Duration> {
        let next = tat.max(now).saturating_add(self.interval);
        let ahead = next - now;
        if ahead > self.tolerance {
            return Err(Duration::from_nanos(ahead - self.tolerance));
        }
        Ok(next)
    }

    /// Gives back a unit taken from `slot`. A bucket swept since (full
    /// again) has nothing to give back to.
    fn give_back(&self, slot: Slot, now: u64) {
        let mut state = self.lock();
        let tat = match slot {
            Slot::Client(key) => match state.clients.get_mut(&key) {
                Some(tat) => tat,
                None => return,
            },
            Slot::Overflow => &mut state.overflow,
        };
        if *tat > now {
            *tat = tat.saturating_sub(self.interval).max(now);
        }
    }
}

#[cfg(test)]
mod tests;
