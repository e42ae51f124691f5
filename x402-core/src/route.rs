//! Routes and offers: what is sold where, and for how much.
//!
//! A [`Route`] pairs a method and a path pattern with one or more [`Offer`]s
//! (ways to pay: scheme, network, price, asset, recipient). Routes are matched
//! in declaration order; the first match wins.
//!
//! ```
//! use x402_core::route::{Offer, Route};
//!
//! let pay_to = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C";
//! let route = Route::get("/weather/:city")
//!     .offer(Offer::exact("eip155:84532", "$0.001", pay_to))
//!     .description("Today's weather")
//!     .mime_type("application/json");
//! assert!(route.matches(&http::Method::GET, "/weather/paris").is_some());
//! assert!(route.matches(&http::Method::HEAD, "/Weather/Paris/").is_some());
//! assert!(route.matches(&http::Method::POST, "/weather/paris").is_none());
//! ```
//!
//! [`Route::matches`] compares a path the way a careful paywall reads it:
//! case-insensitively, percent-decoded, with `\` read as `/`, repeated and
//! trailing slashes dropped and dot segments resolved. Whether a request is
//! protected is decided more broadly than by any one reading: see
//! [`boundary`](crate::boundary) for the rule. `HEAD` requests match `GET`
//! routes, as routers serve them with the `GET` handler.
//!
//! Pattern syntax: literal segments, `:name` / `{name}` / `[name]` for one
//! segment, `*` for one segment in the middle or the rest of the path at the
//! end, `{*name}` for the rest of the path.

use std::{borrow::Cow, fmt, future::Future, pin::Pin, sync::Arc, time::Duration};

use http::{HeaderMap, Method, Uri};
use serde_json::Value;

use crate::{
    money::{Price, PriceError},
    network::TransferMethod,
    proto::JsonObject,
};

/// When a route's payment is settled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SettlementTiming {
    /// After the handler succeeded (the default): failed calls are never
    /// charged, and the response body is held until the money moved.
    #[default]
    AfterHandler,
    /// Before the handler runs: for streaming bodies and handlers whose side
    /// effects cannot wait. The body streams; a handler that fails after
    /// settlement has still been paid for.
    BeforeHandler,
}

/// A token to be paid in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asset {
    /// Contract address or mint.
    pub address: String,
    /// Decimals, used to convert whole-unit prices.
    pub decimals: u8,
    /// EIP-712 domain `(name, version)` of the token (EVM).
    pub eip712: Option<(String, String)>,
    /// How the token is transferred; EIP-3009 on EVM when unset.
    pub transfer_method: Option<TransferMethod>,
}

impl Asset {
    /// An asset with its address and decimals.
    pub fn new(address: impl Into<String>, decimals: u8) -> Self {
        Self {
            address: address.into(),
            decimals,
            eip712: None,
            transfer_method: None,
        }
    }

    /// Sets the token's EIP-712 domain name and version (they must be the
    /// token's own: a wrong name makes every signature fail).
    #[must_use]
    pub fn eip712(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.eip712 = Some((name.into(), version.into()));
        self
    }

    /// Sets how the token is transferred.
    #[must_use]
    pub fn transfer_method(mut self, method: TransferMethod) -> Self {
        self.transfer_method = Some(method);
        self
    }
}

/// The `upto` scheme's name.
pub const UPTO: &str = "upto";
/// The `exact` scheme's name.
pub const EXACT: &str = "exact";

/// One way to pay for a route.
#[derive(Debug, Clone)]
pub struct Offer {
    pub(crate) scheme: String,
    pub(crate) network: String,
    pub(crate) price: Result<Price, PriceError>,
    pub(crate) asset: Option<Asset>,
    pub(crate) pay_to: String,
    pub(crate) max_timeout_seconds: u64,
    pub(crate) extra: JsonObject,
}

/// The default `maxTimeoutSeconds` (as the TypeScript and Python SDKs).
pub const DEFAULT_MAX_TIMEOUT_SECONDS: u64 = 300;

impl Offer {
    /// An `exact` payment of `price` on `network` (CAIP-2) to `pay_to`.
    ///
    /// `price` is `"$0.01"` / `"0.01"` (whole units of the asset) or
    /// `"10000"` (atomic units), or a [`Price`]. The asset defaults to the
    /// network's stablecoin. A price that cannot be parsed is reported by the
    /// engine builder.
    pub fn exact(
        network: impl Into<String>,
        price: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self::new(EXACT, network, price, pay_to)
    }

    /// An `upto` (metered) payment: the buyer authorises `ceiling`, the
    /// handler's reported usage is charged.
    pub fn upto(
        network: impl Into<String>,
        ceiling: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self::new(UPTO, network, ceiling, pay_to)
    }

    /// An offer of any scheme.
    pub fn new(
        scheme: impl Into<String>,
        network: impl Into<String>,
        price: impl IntoPrice,
        pay_to: impl Into<String>,
    ) -> Self {
        Self {
            scheme: scheme.into(),
            network: network.into(),
            price: price.into_price(),
            asset: None,
            pay_to: pay_to.into(),
            max_timeout_seconds: DEFAULT_MAX_TIMEOUT_SECONDS,
            extra: JsonObject::new(),
        }
    }

    /// Pays in `asset` instead of the network's default stablecoin.
    #[must_use]
    pub fn asset(mut self, asset: Asset) -> Self {
        self.asset = Some(asset);
        self
    }

    /// How long the seller waits for settlement (default 300 s).
    #[must_use]
    pub fn max_timeout(mut self, timeout: Duration) -> Self {
        self.max_timeout_seconds = timeout.as_secs().max(1);
        self
    }

    /// Adds a key to the requirement's `extra` object.
    #[must_use]
    pub fn extra(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.extra.insert(key.into(), value.into());
        self
    }

    /// The scheme.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The network.
    pub fn network(&self) -> &str {
        &self.network
    }
}

/// Something a price can be read from: `&str`, `String`, [`Price`] or an
/// [`AtomicAmount`](crate::money::AtomicAmount).
pub trait IntoPrice {
    /// The price, or why it is not one.
    fn into_price(self) -> Result<Price, PriceError>;
}

impl IntoPrice for &str {
    fn into_price(self) -> Result<Price, PriceError> {
        self.parse()
    }
}

impl IntoPrice for String {
    fn into_price(self) -> Result<Price, PriceError> {
        self.parse()
    }
}

impl IntoPrice for Price {
    fn into_price(self) -> Result<Price, PriceError> {
        Ok(self)
    }
}

impl IntoPrice for crate::money::AtomicAmount {
    fn into_price(self) -> Result<Price, PriceError> {
        Ok(Price::Atomic(self))
    }
}

/// The parts of a request the engine reads. Built by adapters; cheap to
/// create from borrowed parts.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The method.
    pub method: &'a Method,
    /// The URI as the client sent it: the whole path, before any router
    /// stripped a prefix (axum's `OriginalUri` inside `nest`), with the
    /// query.
    pub uri: &'a Uri,
    /// The headers.
    pub headers: &'a HeaderMap,
    /// The route template the router dispatched the request on, when the
    /// framework says (axum's `MatchedPath`, actix-web's `match_pattern()`),
    /// in the router's own syntax (`/weather/{city}`). A protected route
    /// whose pattern covers it protects the request, whatever its path
    /// reads as; see [`boundary`](crate::boundary).
    pub route_template: Option<&'a str>,
    /// The payment an outer paywall already verified for this request
    /// (found in its extensions): the request passes, since one request
    /// pays once, however many paywalls it crosses.
    pub paid_upstream: Option<&'a crate::VerifiedPayment>,
}

impl<'a> RequestView<'a> {
    /// A view of a request's parts.
    pub fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        Self {
            method,
            uri,
            headers,
            route_template: None,
            paid_upstream: None,
        }
    }

    /// Sets the route template the router dispatched the request on.
    #[must_use]
    pub fn route_template(mut self, template: Option<&'a str>) -> Self {
        self.route_template = template;
        self
    }

    /// Sets the payment an outer paywall verified for this request.
    #[must_use]
    pub fn paid_upstream(mut self, payment: Option<&'a crate::VerifiedPayment>) -> Self {
        self.paid_upstream = payment;
        self
    }

    /// A view of `http::request::Parts`.
    pub fn from_parts(parts: &'a http::request::Parts) -> Self {
        Self::new(&parts.method, &parts.uri, &parts.headers)
    }

    pub(crate) fn to_owned_info(self) -> RequestInfo {
        RequestInfo {
            method: self.method.clone(),
            uri: self.uri.clone(),
            headers: self.headers.clone(),
        }
    }
}

/// An owned copy of a request's method, URI and headers, given to dynamic
/// pricing functions.
#[derive(Debug, Clone)]
pub struct RequestInfo {
    /// The method.
    pub method: Method,
    /// The URI.
    pub uri: Uri,
    /// The headers.
    pub headers: HeaderMap,
}

/// A boxed, `Send` future, as returned by dynamic pricing.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Prices a request at run time.
pub trait DynamicPricing: Send + Sync + 'static {
    /// The offers for this request, or `None` to let it through for free.
    fn offers(&self, request: RequestInfo) -> BoxFuture<'static, Option<Vec<Offer>>>;
}

impl<F, Fut> DynamicPricing for F
where
    F: Fn(RequestInfo) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<Vec<Offer>>> + Send + 'static,
{
    fn offers(&self, request: RequestInfo) -> BoxFuture<'static, Option<Vec<Offer>>> {
        Box::pin(self(request))
    }
}

#[derive(Clone)]
pub(crate) enum Pricing {
    Static(Vec<Offer>),
    Dynamic(Arc<dyn DynamicPricing>),
}

impl fmt::Debug for Pricing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Static(offers) => f.debug_tuple("Static").field(offers).finish(),
            Self::Dynamic(_) => f.write_str("Dynamic(..)"),
        }
    }
}

/// A protected route: a method and path pattern with its offers.
#[derive(Debug, Clone)]
pub struct Route {
    pub(crate) method: Option<Method>,
    pub(crate) pattern: Result<PathPattern, PatternError>,
    pub(crate) pricing: Pricing,
    pub(crate) description: String,
    pub(crate) mime_type: String,
    pub(crate) resource_url: Option<String>,
    pub(crate) timing: SettlementTiming,
    pub(crate) extensions: JsonObject,
    pub(crate) output_schema: Option<JsonObject>,
    pub(crate) sessions: Vec<SessionOffer>,
}

impl Route {
    /// A route for `method` (or any method, with `None`) on a path pattern.
    pub fn new(method: Option<Method>, pattern: &str) -> Self {
        Self {
            method,
            pattern: PathPattern::parse(pattern),
            pricing: Pricing::Static(Vec::new()),
            description: String::new(),
            mime_type: String::new(),
            resource_url: None,
            timing: SettlementTiming::default(),
            extensions: JsonObject::new(),
            output_schema: None,
            sessions: Vec::new(),
        }
    }

    /// A `GET` route (also matches `HEAD`).
    pub fn get(pattern: &str) -> Self {
        Self::new(Some(Method::GET), pattern)
    }

    /// A `POST` route.
    pub fn post(pattern: &str) -> Self {
        Self::new(Some(Method::POST), pattern)
    }

    /// A `PUT` route.
    pub fn put(pattern: &str) -> Self {
        Self::new(Some(Method::PUT), pattern)
    }

    /// A `DELETE` route.
    pub fn delete(pattern: &str) -> Self {
        Self::new(Some(Method::DELETE), pattern)
    }

    /// A route for every method.
    pub fn any(pattern: &str) -> Self {
        Self::new(None, pattern)
    }

    /// Adds a way to pay.
    #[must_use]
    pub fn offer(mut self, offer: Offer) -> Self {
        match &mut self.pricing {
            Pricing::Static(offers) => offers.push(offer),
            Pricing::Dynamic(_) => self.pricing = Pricing::Static(vec![offer]),
        }
        self
    }

    /// Prices each request with a function (replacing static offers). It
    /// returns the offers, or `None` to let the request through for free.
    #[must_use]
    pub fn dynamic_pricing(mut self, pricing: impl DynamicPricing) -> Self {
        self.pricing = Pricing::Dynamic(Arc::new(pricing));
        self
    }

    /// What the buyer gets, shown in challenges.
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The media type of the paid response.
    #[must_use]
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = mime_type.into();
        self
    }

    /// A fixed resource URL for challenges, instead of the request's URL.
    /// Fixing it lets the whole challenge be encoded once.
    #[must_use]
    pub fn resource_url(mut self, url: impl Into<String>) -> Self {
        self.resource_url = Some(url.into());
        self
    }

    /// When to settle (default: after the handler succeeded).
    #[must_use]
    pub fn settlement(mut self, timing: SettlementTiming) -> Self {
        self.timing = timing;
        self
    }

    /// Settles before the handler runs, so the body can stream.
    #[must_use]
    pub fn settle_before_handler(self) -> Self {
        self.settlement(SettlementTiming::BeforeHandler)
    }

    /// Declares an extension in the v2 challenge (`extensions[key]`).
    #[must_use]
    pub fn extension(mut self, key: impl Into<String>, declaration: Value) -> Self {
        self.extensions.insert(key.into(), declaration);
        self
    }

    /// Sells prepaid sessions on this route (v2 only; see
    /// [`session`](crate::session)). All session offers of a route share one
    /// scope, and this route redeems sessions of that scope.
    #[must_use]
    pub fn session(mut self, offer: SessionOffer) -> Self {
        self.sessions.push(offer);
        self
    }

    /// The v1 `outputSchema` object.
    #[must_use]
    pub fn v1_output_schema(mut self, schema: JsonObject) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        match &self.pattern {
            Ok(p) => &p.raw,
            Err(e) => &e.pattern,
        }
    }

    /// The method, if the route is limited to one.
    pub fn method(&self) -> Option<&Method> {
        self.method.as_ref()
    }

    /// Whether the route covers a request, with the path parameters it binds
    /// (the path read normalised; see the [module docs](self)).
    pub fn matches(&self, method: &Method, path: &str) -> Option<Vec<(String, String)>> {
        if !self.allows(method) {
            return None;
        }
        self.pattern.as_ref().ok()?.matches(path)
    }

    /// Whether the route applies to requests of `method` (`HEAD` to `GET`
    /// routes too).
    pub(crate) fn allows(&self, method: &Method) -> bool {
        match &self.method {
            Some(m) => m == method || (*m == Method::GET && *method == Method::HEAD),
            None => true,
        }
    }
}

/// A parsed path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    raw: String,
    segments: Vec<Segment>,
}

/// One segment of a [`PathPattern`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// Percent-decoded and ASCII-lowercased.
    Literal(String),
    /// One segment.
    Param(String),
    /// The rest of the path, possibly nothing.
    Rest(String),
}

/// A path pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid route pattern {pattern:?}: {reason}")]
pub struct PatternError {
    pattern: String,
    reason: &'static str,
}

impl PathPattern {
    /// Parses a pattern such as `/users/:id/*`.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let err = |reason| PatternError {
            pattern: pattern.to_owned(),
            reason,
        };
        if !pattern.starts_with('/') {
            return Err(err("must start with '/'"));
        }
        let parts: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
        let mut segments = Vec::with_capacity(parts.len());
        let mut wildcards = 0;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let seg = if *part == "*" {
                wildcards += 1;
                if last {
                    Segment::Rest(format!("var{wildcards}"))
                } else {
                    Segment::Param(format!("var{wildcards}"))
                }
            } else if let Some(name) = part.strip_prefix("{*").and_then(|p| p.strip_suffix('}')) {
                if !last {
                    return Err(err("a rest segment must come last"));
                }
                Segment::Rest(name.to_owned())
            } else if let Some(name) = part
                .strip_prefix(':')
                .or_else(|| part.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
                .or_else(|| part.strip_prefix('[').and_then(|p| p.strip_suffix(']')))
            {
                if name.is_empty() {
                    return Err(err("a parameter needs a name"));
                }
                Segment::Param(name.to_owned())
            } else {
                Segment::Literal(normalize_segment(part))
            };
            segments.push(seg);
        }
        Ok(Self {
            raw: pattern.to_owned(),
            segments,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The pattern in `:param` syntax (`*` segments become `:var1`, ...), as
    /// the bazaar extension's `routeTemplate`.
    pub fn template(&self) -> String {
        let mut out = String::new();
        for seg in &self.segments {
            out.push('/');
            match seg {
                Segment::Literal(l) => out.push_str(l),
                Segment::Param(n) | Segment::Rest(n) => {
                    out.push(':');
                    out.push_str(n);
                }
            }
        }
        if out.is_empty() {
            out.push('/');
        }
        out
    }

    pub(crate) fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether a parameter or wildcard could take part of a path.
    pub(crate) fn has_variables(&self) -> bool {
        self.segments
            .iter()
            .any(|s| !matches!(s, Segment::Literal(_)))
    }

    /// Whether segments (decoded and ASCII-lowercased) match, without
    /// binding parameters. A parameter takes any one segment, even an empty
    /// one.
    pub(crate) fn covers(&self, segs: &[Cow<'_, str>]) -> bool {
        let mut i = 0;
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => match segs.get(i) {
                    Some(s) if s.as_ref() == l.as_str() => i += 1,
                    _ => return false,
                },
                Segment::Param(_) => {
                    if i >= segs.len() {
                        return false;
                    }
                    i += 1;
                }
                Segment::Rest(_) => return true,
            }
        }
        i == segs.len()
    }

    /// Matches a request path, returning the bound parameters.
    pub fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let segs = normalize_path(path);
        let mut params = Vec::new();
        let mut i = 0;
        for seg in &self.segments {
            match seg {
                Segment::Literal(l) => {
                    if segs.get(i)?.as_ref() != l.as_str() {
                        return None;
                    }
                    i += 1;
                }
                Segment::Param(n) => {
                    params.push((n.clone(), segs.get(i)?.to_string()));
                    i += 1;
                }
                Segment::Rest(n) => {
                    let rest = segs.get(i..).unwrap_or_default().join("/");
                    params.push((n.clone(), rest));
                    return Some(params);
                }
            }
        }
        (i == segs.len()).then_some(params)
    }
}

fn normalize_segment(s: &str) -> String {
    percent_decode(s).to_ascii_lowercase()
}

/// Splits a request path into normalised segments: percent-decoded,
/// ASCII-lowercased, `\` read as `/`, empty and `.` segments dropped, `..`
/// resolved. A path that needs none of that (the common case) is split
/// without copying.
fn normalize_path(path: &str) -> Vec<Cow<'_, str>> {
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let clean = path
        .bytes()
        .all(|b| b.is_ascii() && b != b'%' && b != b'\\' && !b.is_ascii_uppercase());
    let mut out = Vec::new();
    if clean {
        for seg in path.split('/') {
            push_segment(&mut out, Cow::Borrowed(seg));
        }
    } else {
        let decoded = percent_decode(path).replace('\\', "/");
        for seg in decoded.split('/') {
            push_segment(&mut out, Cow::Owned(seg.to_ascii_lowercase()));
        }
    }
    out
}

fn push_segment<'a>(out: &mut Vec<Cow<'a, str>>, seg: Cow<'a, str>) {
    match seg.as_ref() {
        "" | "." => {}
        ".." => {
            out.pop();
        }
        _ => out.push(seg),
    }
}

/// Decodes `%XX` escapes (invalid ones are kept as they are; invalid UTF-8
/// becomes U+FFFD).
pub(crate) fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                // Both digits are < 16, so the value fits in a byte.
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

mod session_offer;

pub use self::session_offer::SessionOffer;

#[cfg(test)]
mod tests;
