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

use std::{fmt, future::Future, pin::Pin, sync::Arc};

use http::Method;
use serde_json::Value;

use crate::proto::JsonObject;

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
    pub(crate) sign_in_with_x: Option<crate::siwx::SignInWithX>,
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
            sign_in_with_x: None,
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

    /// Offers sign-in-with-x on this route (v2 only; see
    /// [`siwx`](crate::siwx)): a buyer that paid signs in instead of paying
    /// again, for `offer`'s access lifetime.
    #[must_use]
    pub fn sign_in_with_x(mut self, offer: crate::siwx::SignInWithX) -> Self {
        self.sign_in_with_x = Some(offer);
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
            Ok(p) => p.as_str(),
            Err(e) => e.pattern(),
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

mod offer;
mod pattern;
mod session_offer;
mod view;

pub use self::offer::{Asset, IntoPrice, Offer, DEFAULT_MAX_TIMEOUT_SECONDS, EXACT, UPTO};
pub(crate) use self::pattern::{percent_decode, Segment};
pub use self::pattern::{PathPattern, PatternError};
pub use self::session_offer::SessionOffer;
pub(crate) use self::view::Sent;
pub use self::view::{RequestInfo, RequestView};

#[cfg(test)]
mod tests;
