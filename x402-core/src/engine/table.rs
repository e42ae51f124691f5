//! The compiled route table: each route's resolved offers and its ready-made challenges.

use super::*;
use crate::floor::PriceFloors;

/// Aligned to 128 bytes, as the engine's `Inner`: paid requests clone
/// the `Arc` it is kept in from every core, and its counts must not share
/// a cache line with the fields every request reads.
#[repr(align(128))]
pub(super) struct CompiledRoute {
    pub(super) route: Route,
    /// The route's pattern, shared with the payments made at it.
    pub(super) pattern: crate::payment::SharedStr,
    /// The static offers, resolved once (on first use, when they need the
    /// facilitator's `/supported`).
    pub(super) resolved: OnceCell<Arc<Resolved>>,
    /// The metrics series its 402s are counted in.
    pub(super) series: crate::metrics::RouteSeries,
    /// Set once a misplacement was logged for this route (a bound route
    /// served under another template, a request paid at another route).
    pub(super) mismatch_logged: std::sync::atomic::AtomicBool,
    /// Set once a per-request price under its network's floor was logged
    /// as a warning for this route (later ones are logged at debug level).
    pub(super) floor_logged: std::sync::atomic::AtomicBool,
    /// Whether the route declares payment-identifier, and if so whether
    /// an id is required: read from its extensions once.
    pub(super) payment_id: Option<bool>,
    /// Its place in its engine's route table; `None` for a bound route.
    pub(super) place: Option<usize>,
}

/// A compiled route, held by what outlives a borrow of its engine and
/// holds that engine too (a pending decision, a paid request, a
/// settlement): a route of the engine's table by its place there, a bound
/// route ([`Engine::bind`]) by its `Arc`. Holding a table route by place
/// writes no reference count; an `Arc`'s count is shared by every request
/// on every core.
#[derive(Clone)]
pub(super) enum RouteRef {
    Table(usize),
    Bound(Arc<CompiledRoute>),
}

impl RouteRef {
    /// `compiled`, found in the route table of the engine it will be used with.
    pub(super) fn of(compiled: &Arc<CompiledRoute>) -> Self {
        match compiled.place {
            Some(place) => Self::Table(place),
            None => Self::Bound(compiled.clone()),
        }
    }
}

impl Engine {
    /// The route `route` names in this engine.
    pub(super) fn route<'a>(&'a self, route: &'a RouteRef) -> &'a Arc<CompiledRoute> {
        match route {
            RouteRef::Table(place) => &self.inner.routes[*place],
            RouteRef::Bound(compiled) => compiled,
        }
    }
}

impl CompiledRoute {
    /// Checks a route and resolves what needs nothing from the facilitator.
    pub(super) fn compile(route: Route, floors: &PriceFloors) -> Result<Self, ConfigError> {
        if let Err(e) = &route.pattern {
            return Err(ConfigError::Pattern(e.clone()));
        }
        check_sessions(&route)?;
        check_floors(&route, floors)?;
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
                let r = resolve_route(&route, offers, None, true)?;
                let _ = resolved.set(Arc::new(r));
            }
        }
        let series = crate::metrics::RouteSeries::new(route.pattern());
        let payment_id = crate::payment_id::declared(&route.extensions);
        Ok(Self {
            pattern: crate::payment::SharedStr::kept(route.pattern()),
            route,
            resolved,
            series,
            mismatch_logged: std::sync::atomic::AtomicBool::new(false),
            floor_logged: std::sync::atomic::AtomicBool::new(false),
            payment_id,
            place: None,
        })
    }
}

/// A route's offers as requirements, with what can be encoded once.
///
/// Aligned to 128 bytes, as [`CompiledRoute`] and for the same reason.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Resolved {
    pub(super) accepts: Vec<ResolvedOffer>,
    /// The same requirements, as the challenge lists them.
    pub(super) rows: Vec<v2::PaymentRequirements>,
    pub(super) sessions: Vec<ResolvedSession>,
    /// The route's extension declarations, plus `session` when it sells any.
    pub(super) extensions: JsonObject,
    /// The whole `payment_required` challenge, when the resource URL is fixed.
    pub(super) fixed: Option<(Arc<v2::ResourceInfo>, EncodedChallenge)>,
    /// What was last built for a request URL, when the route's URL is not
    /// fixed: clients re-request the same URL, so payments share its
    /// resource and the 402 path mostly skips the JSON and base64 work.
    pub(super) last: std::sync::Mutex<Option<LastUrl>>,
}

/// The resource built for one request URL, and its challenge once one was
/// encoded.
#[derive(Debug)]
pub(super) struct LastUrl {
    resource: Arc<v2::ResourceInfo>,
    challenge: Option<EncodedChallenge>,
}

impl Resolved {
    /// The last URL's entry. A poisoned lock only means a panic elsewhere
    /// mid-update of an entry that is replaced whole or filled in one
    /// assignment; the cache is still sound to use.
    fn last(&self) -> std::sync::MutexGuard<'_, Option<LastUrl>> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The resource a request to `url` is for: the route's fixed one, or
    /// the last one built when `url` is the same (three strings fewer per
    /// payment; a payment only reads it should it be refused).
    pub(super) fn resource(&self, route: &Route, url: RequestUrl<'_>) -> Arc<v2::ResourceInfo> {
        if let Some((resource, _)) = &self.fixed {
            return resource.clone();
        }
        if let Some(last) = &*self.last() {
            if url.is(&last.resource.url) {
                return last.resource.clone();
            }
        }
        let resource = Arc::new(resource_for(route, url));
        *self.last() = Some(LastUrl {
            resource: resource.clone(),
            challenge: None,
        });
        resource
    }

    /// The `payment_required` challenge for `parts`, whose resource is
    /// `resource`, reusing the last one encoded for the same resource URL.
    pub(super) fn payment_required(
        &self,
        parts: &ChallengeParts<'_>,
        resource: &Arc<v2::ResourceInfo>,
    ) -> Option<EncodedChallenge> {
        if let Some(LastUrl {
            resource: cached,
            challenge: Some(encoded),
        }) = &*self.last()
        {
            if cached.url == resource.url {
                return Some(encoded.clone());
            }
        }
        let encoded = parts.encode(Refusal::PaymentRequired.reason(), None)?;
        *self.last() = Some(LastUrl {
            resource: resource.clone(),
            challenge: Some(encoded.clone()),
        });
        Some(encoded)
    }

    /// The 402 for a request to `url`, when the last challenge encoded was
    /// for that URL: the common case of a client re-requesting a route,
    /// answered without building the URL.
    pub(super) fn cached_challenge_response(&self, url: &RequestUrl<'_>) -> Option<EngineResponse> {
        match &*self.last() {
            Some(LastUrl {
                resource,
                challenge: Some(encoded),
            }) if url.is(&resource.url) => Some(response::challenge_response(encoded)),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(super) struct ResolvedSession {
    pub(super) id: String,
    pub(super) calls: u64,
    pub(super) ttl: Duration,
    /// Shared: each redemption hands it to a store call that outlives the
    /// borrow of the route table.
    pub(super) scope: SharedStr,
    pub(super) accepts: Vec<ResolvedOffer>,
}

impl Resolved {
    pub(super) fn scope(&self) -> Option<&SharedStr> {
        self.sessions.first().map(|s| &s.scope)
    }
}

pub(super) fn resolve_all(
    route: &Route,
    offers: &[Offer],
    supported: Option<&SupportedResponse>,
    lasting: bool,
) -> Result<Vec<ResolvedOffer>, ConfigError> {
    offers
        .iter()
        .map(|o| {
            resolve::resolve_offer(o, supported, lasting)
                .map(|r| resolve::announce_flow(r, route.timing))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ConfigError::Offer {
            route: route.pattern().to_owned(),
            source,
        })
}

/// `route`'s offers resolved; `lasting` when they are kept for the route's
/// life (a static price) rather than resolved for one request
/// ([`ResolvedOffer::lasting`]).
pub(super) fn resolve_route(
    route: &Route,
    offers: &[Offer],
    supported: Option<&SupportedResponse>,
    lasting: bool,
) -> Result<Resolved, ConfigError> {
    let accepts = resolve_all(route, offers, supported, lasting)?;
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
            // Every redemption clones it (twice, with its payment's copy):
            // kept, as a static offer's names are (see `SharedStr`).
            scope: SharedStr::kept_if(lasting, &s.scope),
            accepts: resolve_all(route, &s.offers, supported, lasting)?,
        });
    }
    let mut extensions = route.extensions.clone();
    if !sessions.is_empty() {
        extensions.insert("session".into(), session_extension(&sessions));
    }
    if let Some(siwx) = &route.sign_in_with_x {
        let networks = offers.iter().map(|o| o.network.as_str());
        extensions.insert(
            crate::siwx::SIGN_IN_WITH_X.into(),
            crate::siwx::declaration(siwx, networks),
        );
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
        Some((Arc::new(resource), encoded))
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
pub(super) fn session_extension(sessions: &[ResolvedSession]) -> Value {
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
pub(super) fn enrich_bazaar(
    route: &Route,
    request: &RequestView<'_>,
    extensions: &JsonObject,
) -> JsonObject {
    use crate::bazaar;
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

/// How a request's resource is described in challenges.
pub(super) fn resource_for(route: &Route, url: RequestUrl<'_>) -> v2::ResourceInfo {
    let url = match &route.resource_url {
        Some(url) => url.clone(),
        None => url.to_url(),
    };
    v2::ResourceInfo {
        url,
        description: route.description.clone(),
        mime_type: route.mime_type.clone(),
    }
}

/// The 402 for an unpaid request when it is ready-made: no payment header,
/// no session token for the route, no per-request bazaar or sign-in-with-x
/// declaration, not a
/// browser (which gets the paywall page), and a challenge encoded for the
/// request's URL (the route's fixed one, or the last one built). Counted.
pub(super) fn ready_challenge(
    compiled: &CompiledRoute,
    resolved: &Resolved,
    request: &RequestView<'_>,
    url: RequestUrl<'_>,
) -> Option<EngineResponse> {
    let headers = request.headers;
    let sent = Sent::of(headers);
    if sent.payment().is_some()
        || (resolved.scope().is_some() && sent.session.is_some())
        || resolved.extensions.contains_key(crate::bazaar::BAZAAR)
        || resolved
            .extensions
            .contains_key(crate::siwx::SIGN_IN_WITH_X)
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

/// The requirement a payment matched.
pub(super) struct Matched<'a> {
    pub(super) offer: &'a ResolvedOffer,
    /// The session offer it buys, if any.
    pub(super) session: Option<usize>,
}

/// The offer a payment refers to: the route's own offers first, then the
/// ways to buy its sessions (v2 only: sessions are not offered in v1).
pub(super) fn find_match<'a>(
    resolved: &'a Resolved,
    payload: &PaymentPayload,
) -> Option<Matched<'a>> {
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

pub(super) fn check_sessions(route: &Route) -> Result<(), ConfigError> {
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

/// Refuses static offers and session offers priced under their network's
/// floor. A route priced per request has its offers checked per request
/// ([`above_floors`]); its session offers are static, and checked here.
pub(super) fn check_floors(route: &Route, floors: &PriceFloors) -> Result<(), ConfigError> {
    let statics = match &route.pricing {
        Pricing::Static(offers) => offers.as_slice(),
        Pricing::Dynamic(_) => &[],
    };
    let sessions = route.sessions.iter().flat_map(|s| &s.offers);
    for offer in statics.iter().chain(sessions) {
        if let Err(below) = floors.check(offer) {
            return Err(ConfigError::PriceBelowFloor {
                route: route.pattern().to_owned(),
                network: below.network,
                price: below.price.to_string(),
                floor: below.floor.to_string(),
            });
        }
    }
    Ok(())
}

/// A dynamic price's offers without those under their network's floor, each
/// logged (a warning the first time on a route, then at debug level: a
/// client can ask as often as it likes). When none is left the request is
/// refused, 500 `price_below_floor`, as a route whose offers cannot be built.
pub(super) fn above_floors(
    compiled: &CompiledRoute,
    floors: &PriceFloors,
    offers: Vec<Offer>,
) -> Result<Vec<Offer>, Refusal> {
    let route = compiled.route.pattern();
    let mut kept = Vec::with_capacity(offers.len());
    for offer in offers {
        let Err(below) = floors.check(&offer) else {
            kept.push(offer);
            continue;
        };
        let (network, price, floor) = (below.network.as_str(), below.price, below.floor);
        if compiled
            .floor_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::debug!(
                route,
                network,
                price = %price,
                floor = %floor,
                reason = PRICE_BELOW_FLOOR,
                "x402: a dynamic price is below its network's floor; the offer is left out"
            );
        } else {
            tracing::warn!(
                route,
                network,
                price = %price,
                floor = %floor,
                reason = PRICE_BELOW_FLOOR,
                "x402: a dynamic price is below its network's floor; the offer is left out \
                 (later ones on this route are logged at debug level)"
            );
        }
    }
    if kept.is_empty() {
        return Err(Refusal::Forbidden {
            status: http::StatusCode::INTERNAL_SERVER_ERROR,
            reason: PRICE_BELOW_FLOOR.to_owned(),
        });
    }
    Ok(kept)
}

/// The reason code of a request whose every dynamic offer is under its
/// network's floor.
const PRICE_BELOW_FLOOR: &str = "price_below_floor";
