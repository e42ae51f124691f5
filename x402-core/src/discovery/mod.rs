//! Discovery: what an engine sells, for machines.
//!
//! - [`bazaar`]: the typed `bazaar` extension (spec §8.1), declared with
//!   [`Route::bazaar`](crate::Route::bazaar) and enriched per request.
//! - [`Engine::describe`]: a read-only description of the route table
//!   ([`RouteDescription`]).
//! - [`Engine::discovery_document`] / [`document`]: the discovery document,
//!   served at `GET /.well-known/x402` ([`DiscoveryEndpoints`]).
//! - [`Engine::openapi`] / [`openapi()`]: a minimal OpenAPI 3.1 document of
//!   the paid routes, each operation marked with `x-payment-info`.
//! - [`DiscoveryEndpoints`]: both documents served over HTTP (paths, base
//!   URL, caching and CORS headers), the part of `x402_axum::Discovery` and
//!   `x402_actix::Discovery` that is not framework glue.
//!
//! # The discovery document
//!
//! A JSON object (its JSON Schema is `x402-core/tests/data/discovery.schema.json`
//! in the repository):
//!
//! ```text
//! {
//!   "x402Version": 2,
//!   "discoveryVersion": 1,
//!   "baseUrl": "https://api.example.com",
//!   "resources": [
//!     {
//!       "resource": "https://api.example.com/weather/:city",  // baseUrl + routeTemplate, or the route's fixed resource URL
//!       "type": "http",
//!       "x402Version": 2,
//!       "method": "GET",                 // "*": any method
//!       "path": "/weather/:city",        // the pattern as written
//!       "routeTemplate": "/weather/:city", // `:param` syntax, `*` → `:var1`, ...
//!       "pathParams": ["city"],
//!       "description": "...", "mimeType": "application/json",
//!       "pricing": "static",             // "dynamic": priced per request (no accepts listed);
//!                                        // "unavailable": the offers could not be built now
//!       "settlement": "afterHandler",    // or "beforeHandler"
//!       "accepts": [ <v2 PaymentRequirements> ],   // the per-call offers
//!       "sessions": [ { "id", "calls", "ttlSeconds", "scope", "accepts": [ <v2 PaymentRequirements> ] } ],
//!       "extensions": { "bazaar": { "info": {...}, "schema": {...} } }  // the route's declarations
//!     }
//!   ]
//! }
//! ```
//!
//! Items follow the facilitators' catalogue items (spec §4.6: `resource`,
//! `type`, `x402Version`, `accepts`) so a crawler can feed them to one. The
//! document has no timestamp: it is the same for the same routes, and can be
//! cached.

pub mod bazaar;
mod openapi;
mod serve;

use serde::Serialize;
use serde_json::{json, Value};

pub use self::bazaar::{Bazaar, BazaarInput, BazaarOutput, BodyType, Param};
pub use self::openapi::{openapi, OpenApiInfo};
pub use self::serve::{DiscoveryDocument, DiscoveryEndpoints, OPENAPI_PATH};
use crate::{
    proto::{v2, JsonObject},
    route::{Route, SettlementTiming},
    Engine,
};

/// The well-known path of the discovery document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/x402";

/// How a route is priced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum PricingKind {
    /// Fixed offers, listed.
    Static,
    /// Priced per request by a function; no offers can be listed.
    Dynamic,
    /// Fixed offers that could not be built now (the facilitator's
    /// `/supported` did not answer).
    Unavailable,
}

/// When a route settles, as written in the discovery document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum Settlement {
    /// After the handler succeeded.
    AfterHandler,
    /// Before the handler runs.
    BeforeHandler,
}

/// A prepaid session offer of a route.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionDescription {
    /// The offer's id.
    pub id: String,
    /// Calls sold.
    pub calls: u64,
    /// Lifetime in seconds.
    pub ttl_seconds: u64,
    /// The scope.
    pub scope: String,
    /// The ways to buy it.
    pub accepts: Vec<v2::PaymentRequirements>,
}

/// One protected route, as [`Engine::describe`] sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct RouteDescription {
    /// The method, or `None` for every method.
    pub method: Option<String>,
    /// The pattern as written.
    pub path: String,
    /// The pattern in `:param` syntax.
    pub route_template: String,
    /// The path parameters' names, in order.
    pub path_params: Vec<String>,
    /// What the buyer gets.
    pub description: String,
    /// The paid response's media type.
    pub mime_type: String,
    /// The fixed resource URL, if the route has one.
    pub resource_url: Option<String>,
    /// How it is priced.
    pub pricing: PricingKind,
    /// When it settles.
    pub settlement: Settlement,
    /// The per-call offers, as v2 requirements.
    pub accepts: Vec<v2::PaymentRequirements>,
    /// The session offers.
    pub sessions: Vec<SessionDescription>,
    /// The route's extension declarations (`bazaar`, ...; sessions are in
    /// [`sessions`](Self::sessions)). A `bazaar` declaration has its method
    /// narrowed to the route's.
    pub extensions: JsonObject,
}

impl RouteDescription {
    /// A route's description, with its resolved offers (`None`: dynamic or
    /// unavailable, per `pricing`).
    pub(crate) fn new(
        route: &Route,
        pricing: PricingKind,
        accepts: Vec<v2::PaymentRequirements>,
        sessions: Vec<SessionDescription>,
    ) -> Self {
        let route_template = match &route.pattern {
            Ok(p) => p.template(),
            Err(_) => route.pattern().to_owned(),
        };
        let path_params = route_template
            .split('/')
            .filter_map(|s| s.strip_prefix(':'))
            .map(str::to_owned)
            .collect();
        let mut extensions = route.extensions.clone();
        extensions.remove("session");
        if let (Some(decl), Some(method)) = (extensions.get_mut(bazaar::BAZAAR), route.method()) {
            *decl = bazaar::enrich(decl, method, None, &[]);
        }
        Self {
            method: route.method().map(|m| m.as_str().to_owned()),
            path: route.pattern().to_owned(),
            route_template,
            path_params,
            description: route.description.clone(),
            mime_type: route.mime_type.clone(),
            resource_url: route.resource_url.clone(),
            pricing,
            settlement: match route.timing {
                SettlementTiming::BeforeHandler => Settlement::BeforeHandler,
                _ => Settlement::AfterHandler,
            },
            accepts,
            sessions,
            extensions,
        }
    }

    /// The route's `bazaar` declaration, if it has one.
    pub fn bazaar(&self) -> Option<&Value> {
        self.extensions.get(bazaar::BAZAAR)
    }
}

/// `base_url` without its trailing slashes.
fn trim_base(base_url: &str) -> &str {
    base_url.trim_end_matches('/')
}

/// The discovery document (see the [module docs](self)) of `routes`, with
/// resource URLs under `base_url` (`https://api.example.com`).
pub fn document(base_url: &str, routes: &[RouteDescription]) -> Value {
    let base = trim_base(base_url);
    let resources: Vec<Value> = routes
        .iter()
        .map(|r| {
            let resource = r
                .resource_url
                .clone()
                .unwrap_or_else(|| format!("{base}{}", r.route_template));
            json!({
                "resource": resource,
                "type": "http",
                "x402Version": 2,
                "method": r.method.as_deref().unwrap_or("*"),
                "path": r.path,
                "routeTemplate": r.route_template,
                "pathParams": r.path_params,
                "description": r.description,
                "mimeType": r.mime_type,
                "pricing": r.pricing,
                "settlement": r.settlement,
                "accepts": r.accepts,
                "sessions": r.sessions,
                "extensions": r.extensions,
            })
        })
        .collect();
    json!({
        "x402Version": 2,
        "discoveryVersion": 1,
        "baseUrl": base,
        "resources": resources,
    })
}

impl Engine {
    /// The discovery document of every protected route (see the [module
    /// docs](crate::discovery)), with resource URLs under `base_url`.
    ///
    /// Resolving offers may ask the facilitator's `/supported` once (as the
    /// first paid request would); routes whose offers cannot be built are
    /// listed with `pricing: "unavailable"`.
    pub async fn discovery_document(&self, base_url: &str) -> Value {
        document(base_url, &self.describe().await)
    }

    /// A minimal OpenAPI 3.1 document of every protected route (see
    /// [`openapi()`]).
    pub async fn openapi(&self, info: &OpenApiInfo, base_url: Option<&str>) -> Value {
        openapi(&self.describe().await, info, base_url)
    }
}
