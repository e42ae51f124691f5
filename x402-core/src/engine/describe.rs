//! [`Engine::describe`]: the route table as plain data, what the
//! [discovery](crate::discovery) documents are made of.

use http::HeaderMap;
use serde::Serialize;
use serde_json::Value;

use super::Engine;
use crate::{
    bazaar,
    proto::{v2, JsonObject},
    route::{Pricing, RequestView, Route, SettlementTiming},
};

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

impl Engine {
    /// A read-only description of every protected route, in matching order,
    /// for [discovery](crate::discovery). Static offers are resolved as the
    /// first paid request would resolve them (asking the facilitator's
    /// `/supported` once if they need it); routes priced per request are
    /// listed without offers.
    pub async fn describe(&self) -> Vec<RouteDescription> {
        let (method, uri, headers) = (
            http::Method::GET,
            http::Uri::from_static("/"),
            HeaderMap::new(),
        );
        let routes = self.compiled_routes();
        let mut out = Vec::with_capacity(routes.len());
        for compiled in &routes {
            let route = &compiled.route;
            let description = match &route.pricing {
                Pricing::Dynamic(_) => {
                    RouteDescription::new(route, PricingKind::Dynamic, Vec::new(), Vec::new())
                }
                // Static offers do not depend on the request.
                Pricing::Static(_) => match self
                    .offers(compiled, &RequestView::new(&method, &uri, &headers))
                    .await
                {
                    Ok(Some(resolved)) => {
                        let sessions = resolved
                            .sessions
                            .iter()
                            .map(|s| SessionDescription {
                                id: s.id.clone(),
                                calls: s.calls,
                                ttl_seconds: s.ttl.as_secs(),
                                scope: s.scope.to_string(),
                                accepts: s
                                    .accepts
                                    .iter()
                                    .map(|a| (*a.requirements).clone())
                                    .collect(),
                            })
                            .collect();
                        RouteDescription::new(
                            route,
                            PricingKind::Static,
                            resolved.rows.clone(),
                            sessions,
                        )
                    }
                    _ => RouteDescription::new(
                        route,
                        PricingKind::Unavailable,
                        Vec::new(),
                        Vec::new(),
                    ),
                },
            };
            out.push(description);
        }
        out
    }
}
