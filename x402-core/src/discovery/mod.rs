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
//!   URL, caching and CORS headers), and the [readiness](crate::readiness)
//!   report at `GET /.well-known/x402/health` ([`HEALTH_PATH`]), the part of
//!   `x402_axum::Discovery` and `x402_actix::Discovery` that is not
//!   framework glue.
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

pub use crate::bazaar;
mod openapi;
mod serve;

use serde_json::{json, Value};

pub use self::bazaar::{Bazaar, BazaarInput, BazaarOutput, BodyType, Param};
pub use self::openapi::{openapi, OpenApiInfo};
pub use self::serve::{
    DiscoveryDocument, DiscoveryEndpoints, DEFAULT_HEALTH_INTERVAL, HEALTH_PATH, OPENAPI_PATH,
};
pub use crate::engine::{PricingKind, RouteDescription, SessionDescription, Settlement};
use crate::Engine;

/// The well-known path of the discovery document.
pub const WELL_KNOWN_PATH: &str = "/.well-known/x402";

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
