//! The payment engine: route → 402 → verify → hooks → handler → settle →
//! receipt, framework-neutral.
//!
//! The engine takes a request's method, URI and headers and returns a
//! [`Decision`]; after the handler ran it takes the handler's status and
//! headers and returns what to send. Adapters (`x402-tower`, `x402-axum`,
//! `x402-actix`) only translate; an integrator can drive the engine from any
//! other stack the same way:
//!
//! ```
//! use std::sync::Arc;
//! use x402_core::engine::{Completion, Decision, Engine};
//! use x402_core::route::{Offer, RequestView, Route};
//! # use x402_core::facilitator::{Facilitator, FacilitatorError};
//! # use x402_core::proto::*;
//! # #[derive(Debug)] struct Nobody;
//! # #[async_trait::async_trait] impl Facilitator for Nobody {
//! #   async fn verify(&self, _: &FacilitatorRequest) -> Result<VerifyResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
//! #   async fn settle(&self, _: &FacilitatorRequest) -> Result<SettleResponse, FacilitatorError> { Err(FacilitatorError::Timeout) }
//! #   async fn supported(&self) -> Result<SupportedResponse, FacilitatorError> { Ok(Default::default()) }
//! # }
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(Nobody)
//!     .route(Route::get("/report").offer(Offer::exact(
//!         "eip155:84532",
//!         "$0.01",
//!         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
//!     )))
//!     .build()?;
//!
//! let request = http::Request::get("/report").body(())?;
//! let (parts, ()) = request.into_parts();
//! match engine.process(RequestView::from_parts(&parts)).await {
//!     Decision::Pass => { /* not protected: run the handler */ }
//!     Decision::Respond(response) => assert_eq!(response.status(), 402),
//!     Decision::Paid(paid) => {
//!         // run the handler, then:
//!         let mut headers = http::HeaderMap::new();
//!         match paid.complete(http::StatusCode::OK, &mut headers).await {
//!             Completion::Deliver => { /* send the handler's response with `headers` */ }
//!             Completion::Replace(response) => { /* send this instead */ let _ = response; }
//!         }
//!     }
//! }
//! # Ok(()) }
//! ```

use std::{fmt, sync::Arc};

use http::{HeaderMap, HeaderValue, StatusCode};
use tokio::sync::OnceCell;

use crate::{
    codec,
    facilitator::{Facilitator, FacilitatorError},
    hooks::{
        AfterVerify, BeforeSettle, BeforeVerify, CancelReason, HookError, PaymentContext,
        PaymentHooks, ProtectedRequest, RequestContext,
    },
    money::AtomicAmount,
    paywall::{DefaultPaywall, Paywall},
    proto::{
        v2, FacilitatorRequest, PaymentPayload, PaymentRequirements, SettleResponse,
        SupportedResponse, VerifyResponse, X402Version,
    },
    route::{PatternError, Pricing, RequestView, Route, SettlementTiming},
};

mod matching;
mod resolve;
mod response;

pub use self::resolve::OfferError;
pub use self::response::{handler_failed_response, EngineResponse, Refusal, EXPOSE_HEADERS};
use self::response::{ChallengeParts, EncodedChallenge};

/// The payment engine. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<CompiledRoute>,
    hooks: Vec<Arc<dyn PaymentHooks>>,
    max_header_bytes: usize,
    paywall: Arc<dyn Paywall>,
    supported: OnceCell<Arc<SupportedResponse>>,
}

impl fmt::Debug for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Engine")
            .field("routes", &self.inner.routes.len())
            .field("hooks", &self.inner.hooks.len())
            .field("max_header_bytes", &self.inner.max_header_bytes)
            .finish_non_exhaustive()
    }
}

struct CompiledRoute {
    route: Route,
    /// The static offers, resolved once (on first use, when they need the
    /// facilitator's `/supported`).
    resolved: OnceCell<Arc<Resolved>>,
}

/// A route's offers as requirements, with what can be encoded once.
#[derive(Debug)]
struct Resolved {
    accepts: Vec<v2::PaymentRequirements>,
    /// The whole `payment_required` challenge, when the resource URL is fixed.
    fixed: Option<(v2::ResourceInfo, EncodedChallenge)>,
}

/// Builds an [`Engine`].
#[must_use]
pub struct EngineBuilder {
    facilitator: Arc<dyn Facilitator>,
    routes: Vec<Route>,
    hooks: Vec<Arc<dyn PaymentHooks>>,
    max_header_bytes: usize,
    paywall: Arc<dyn Paywall>,
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
    pub fn paywall(mut self, paywall: impl Paywall) -> Self {
        self.paywall = Arc::new(paywall);
        self
    }

    /// Checks every route and builds the engine. Offers that need nothing
    /// from the facilitator are resolved and their challenges encoded now.
    pub fn build(self) -> Result<Engine, ConfigError> {
        let mut routes = Vec::with_capacity(self.routes.len());
        for route in self.routes {
            if let Err(e) = &route.pattern {
                return Err(ConfigError::Pattern(e.clone()));
            }
            let resolved = OnceCell::new();
            if let Pricing::Static(offers) = &route.pricing {
                if offers.is_empty() {
                    return Err(ConfigError::NoOffers(route.pattern().to_owned()));
                }
                if !offers.iter().any(resolve::needs_supported) {
                    let r = resolve_route(&route, offers, None)?;
                    let _ = resolved.set(Arc::new(r));
                }
            }
            routes.push(CompiledRoute { route, resolved });
        }
        Ok(Engine {
            inner: Arc::new(Inner {
                facilitator: self.facilitator,
                routes,
                hooks: self.hooks,
                max_header_bytes: self.max_header_bytes,
                paywall: self.paywall,
                supported: OnceCell::new(),
            }),
        })
    }
}

fn resolve_route(
    route: &Route,
    offers: &[crate::route::Offer],
    supported: Option<&SupportedResponse>,
) -> Result<Resolved, ConfigError> {
    let accepts = offers
        .iter()
        .map(|o| resolve::resolve_offer(o, supported))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ConfigError::Offer {
            route: route.pattern().to_owned(),
            source,
        })?;
    let fixed = route.resource_url.as_ref().and_then(|url| {
        let resource = v2::ResourceInfo {
            url: url.clone(),
            description: route.description.clone(),
            mime_type: route.mime_type.clone(),
        };
        let encoded = ChallengeParts {
            resource: &resource,
            accepts: &accepts,
            extensions: &route.extensions,
            output_schema: route.output_schema.as_ref(),
        }
        .encode(Refusal::PaymentRequired.reason(), None)?;
        Some((resource, encoded))
    });
    Ok(Resolved { accepts, fixed })
}

/// What to do with a request.
#[derive(Debug)]
#[must_use]
pub enum Decision {
    /// Not protected (or access granted by a hook, or a free dynamic price):
    /// run the handler as if there were no paywall.
    Pass,
    /// Send this response; the handler does not run.
    Respond(EngineResponse),
    /// A verified payment: run the handler, then finish with the
    /// [`PaidRequest`].
    Paid(Box<PaidRequest>),
}

/// The verified payment, put in the request's extensions for the handler.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct VerifiedPayment {
    /// The payment's protocol version.
    pub version: X402Version,
    /// The scheme.
    pub scheme: String,
    /// The network as a CAIP-2 id.
    pub network: String,
    /// The payer's address, as the facilitator reported it.
    pub payer: Option<String>,
    /// The amount authorised (the price for `exact`, the ceiling for `upto`).
    pub amount: AtomicAmount,
    /// The asset.
    pub asset: String,
    /// The recipient.
    pub pay_to: String,
    /// The seller's requirement the payment matched.
    pub requirements: v2::PaymentRequirements,
    /// The matched route's pattern.
    pub route: String,
}

/// How a request's resource is described in challenges.
fn resource_for(route: &Route, request: &RequestView<'_>) -> v2::ResourceInfo {
    let url = match &route.resource_url {
        Some(url) => url.clone(),
        None => request_url(request),
    };
    v2::ResourceInfo {
        url,
        description: route.description.clone(),
        mime_type: route.mime_type.clone(),
    }
}

/// The request's absolute URL: the URI's own scheme and authority if it has
/// them, else `Host` (and `X-Forwarded-Proto`, else `http`).
fn request_url(request: &RequestView<'_>) -> String {
    let uri = request.uri;
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    if let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) {
        return format!("{scheme}://{authority}{path}");
    }
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_graphic()))
    };
    let host = header("host").unwrap_or("localhost");
    let scheme = match header("x-forwarded-proto") {
        Some("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}{path}")
}

/// The offers in force for one request.
enum Offers {
    Static(Arc<Resolved>),
    Dynamic(Vec<v2::PaymentRequirements>),
}

impl Offers {
    fn accepts(&self) -> &[v2::PaymentRequirements] {
        match self {
            Self::Static(r) => &r.accepts,
            Self::Dynamic(a) => a,
        }
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
            paywall: Arc::new(DefaultPaywall),
        }
    }

    /// The facilitator.
    pub fn facilitator(&self) -> &Arc<dyn Facilitator> {
        &self.inner.facilitator
    }

    /// Whether a request falls under a protected route (no I/O).
    pub fn is_protected(&self, request: RequestView<'_>) -> bool {
        self.find_route(&request).is_some()
    }

    fn find_route(&self, request: &RequestView<'_>) -> Option<&CompiledRoute> {
        let path = request.uri.path();
        self.inner
            .routes
            .iter()
            .find(|r| r.route.matches(request.method, path).is_some())
    }

    async fn supported(&self) -> Result<Arc<SupportedResponse>, FacilitatorError> {
        self.inner
            .supported
            .get_or_try_init(|| async { self.inner.facilitator.supported().await.map(Arc::new) })
            .await
            .cloned()
    }

    async fn offers(
        &self,
        compiled: &CompiledRoute,
        request: &RequestView<'_>,
    ) -> Result<Option<Offers>, Refusal> {
        match &compiled.route.pricing {
            Pricing::Static(offers) => {
                let resolved = compiled
                    .resolved
                    .get_or_try_init(|| async {
                        let supported = self.supported().await.map_err(|e| {
                            tracing::error!(error = %e, "x402: facilitator /supported failed");
                            Refusal::FacilitatorUnavailable
                        })?;
                        resolve_route(&compiled.route, offers, Some(&supported))
                            .map(Arc::new)
                            .map_err(|e| {
                                tracing::error!(error = %e, "x402: route offers cannot be built");
                                Refusal::Internal
                            })
                    })
                    .await?;
                Ok(Some(Offers::Static(resolved.clone())))
            }
            Pricing::Dynamic(pricing) => {
                let Some(offers) = pricing.offers(request.to_owned_info()).await else {
                    return Ok(None);
                };
                if offers.is_empty() {
                    return Ok(None);
                }
                let supported = if offers.iter().any(resolve::needs_supported) {
                    Some(self.supported().await.map_err(|e| {
                        tracing::error!(error = %e, "x402: facilitator /supported failed");
                        Refusal::FacilitatorUnavailable
                    })?)
                } else {
                    None
                };
                let accepts = offers
                    .iter()
                    .map(|o| resolve::resolve_offer(o, supported.as_deref()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| {
                        tracing::error!(error = %e, route = compiled.route.pattern(), "x402: dynamic offers cannot be built");
                        Refusal::Internal
                    })?;
                Ok(Some(Offers::Dynamic(accepts)))
            }
        }
    }

    /// Decides what to do with a request: pass it through, answer it (402,
    /// 502, 503, ...), or let the handler run for a verified payment.
    pub async fn process(&self, request: RequestView<'_>) -> Decision {
        let Some(compiled) = self.find_route(&request) else {
            return Decision::Pass;
        };
        let route = &compiled.route;

        let ctx = RequestContext {
            request,
            route: route.pattern(),
        };
        for hook in &self.inner.hooks {
            match hook.on_protected_request(&ctx).await {
                Ok(ProtectedRequest::Continue) => {}
                Ok(ProtectedRequest::GrantAccess) => return Decision::Pass,
                Ok(ProtectedRequest::Refuse { status, reason }) => {
                    return Decision::Respond(response::refusal_response(
                        &Refusal::Forbidden { status, reason },
                        None,
                        None,
                        None,
                    ))
                }
                Err(e) => return Decision::Respond(hook_error_response(&e)),
            }
        }

        let offers = match self.offers(compiled, &request).await {
            Ok(Some(offers)) => offers,
            Ok(None) => return Decision::Pass,
            Err(refusal) => {
                return Decision::Respond(response::refusal_response(&refusal, None, None, None))
            }
        };

        // Payment header: v2 wins when both are sent; the version inside decides.
        let header = request
            .headers
            .get(codec::PAYMENT_SIGNATURE)
            .or_else(|| request.headers.get(codec::X_PAYMENT));

        let resource = match &offers {
            Offers::Static(r) => match &r.fixed {
                Some((resource, encoded)) if header.is_none() => {
                    if response::is_browser(request.headers) {
                        let parts = self.parts(route, resource, offers.accepts());
                        return Decision::Respond(response::paywall_response(
                            &parts,
                            encoded,
                            &*self.inner.paywall,
                        ));
                    }
                    return Decision::Respond(response::challenge_response(encoded));
                }
                Some((resource, _)) => resource.clone(),
                None => resource_for(route, &request),
            },
            Offers::Dynamic(_) => resource_for(route, &request),
        };
        let parts = self.parts(route, &resource, offers.accepts());
        let refuse = |refusal: Refusal, version: Option<X402Version>, payer: Option<&str>| {
            Decision::Respond(response::refusal_response(
                &refusal,
                Some(&parts),
                version,
                payer,
            ))
        };

        let Some(header) = header else {
            let Some(encoded) = parts.encode(Refusal::PaymentRequired.reason(), None) else {
                return Decision::Respond(response::refusal_response(
                    &Refusal::Internal,
                    None,
                    None,
                    None,
                ));
            };
            if response::is_browser(request.headers) {
                return Decision::Respond(response::paywall_response(
                    &parts,
                    &encoded,
                    &*self.inner.paywall,
                ));
            }
            return Decision::Respond(response::challenge_response(&encoded));
        };

        let payload = match codec::decode_payment(header.as_bytes(), self.inner.max_header_bytes) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(error = %e, "x402: unreadable payment header");
                return refuse(Refusal::InvalidHeader(e.reason()), None, None);
            }
        };
        let version = payload.version();

        let matched = match &payload {
            PaymentPayload::V2(p) => matching::match_v2(offers.accepts(), &p.accepted),
            PaymentPayload::V1(p) => matching::match_v1(offers.accepts(), p),
        };
        let Some(matched) = matched.cloned() else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };

        // The facilitator always gets the server's own requirement.
        let requirements = match version {
            X402Version::V2 => PaymentRequirements::V2(matched.clone()),
            X402Version::V1 => {
                match crate::challenge::v1_row(&matched, &resource, route.output_schema.as_ref()) {
                    Some(row) => PaymentRequirements::V1(row),
                    None => return refuse(Refusal::NoMatchingRequirements, Some(version), None),
                }
            }
        };
        let Some(request_body) = FacilitatorRequest::new(payload, requirements) else {
            return refuse(Refusal::NoMatchingRequirements, Some(version), None);
        };

        let network = matched.network.clone();
        let pctx = PaymentContext {
            route: route.pattern(),
            payload: &request_body.payment_payload,
            requirements: &request_body.payment_requirements,
            network: &network,
        };

        let verdict = match self.verify(&pctx, &request_body).await {
            Ok(v) => v,
            Err(refusal) => return refuse(refusal, Some(version), None),
        };
        if !verdict.is_valid {
            let reason = verdict
                .invalid_reason
                .clone()
                .unwrap_or_else(|| "invalid_payment".to_owned());
            return refuse(
                Refusal::Invalid(reason),
                Some(version),
                verdict.payer.as_deref(),
            );
        }

        for (i, hook) in self.inner.hooks.iter().enumerate() {
            let outcome = hook.after_verify(&pctx, &verdict).await;
            let refusal = match outcome {
                Ok(AfterVerify::Continue) => continue,
                Ok(AfterVerify::Abort { reason }) => Refusal::Aborted(reason),
                Err(e) => {
                    log_hook_error(&e);
                    hook_error_refusal(&e)
                }
            };
            // Hooks that already accepted this payment (a claim, say) are told
            // it will not proceed.
            for earlier in &self.inner.hooks[..i] {
                earlier
                    .on_payment_canceled(&pctx, CancelReason::Refused)
                    .await;
            }
            return refuse(refusal, Some(version), verdict.payer.as_deref());
        }

        let payment = VerifiedPayment {
            version,
            scheme: matched.scheme.clone(),
            network: network.clone(),
            payer: verdict.payer.clone(),
            amount: matched.amount,
            asset: matched.asset.clone(),
            pay_to: matched.pay_to.clone(),
            requirements: matched.clone(),
            route: route.pattern().to_owned(),
        };
        Decision::Paid(Box::new(PaidRequest {
            engine: self.clone(),
            request: request_body,
            payment,
            network,
            timing: route.timing,
            resource,
            accepts: offers.accepts().to_vec(),
            route_index: self.route_index(compiled),
            finished: false,
        }))
    }

    fn route_index(&self, compiled: &CompiledRoute) -> usize {
        self.inner
            .routes
            .iter()
            .position(|r| std::ptr::eq(r, compiled))
            .unwrap_or_default()
    }

    fn parts<'a>(
        &self,
        route: &'a Route,
        resource: &'a v2::ResourceInfo,
        accepts: &'a [v2::PaymentRequirements],
    ) -> ChallengeParts<'a> {
        ChallengeParts {
            resource,
            accepts,
            extensions: &route.extensions,
            output_schema: route.output_schema.as_ref(),
        }
    }

    async fn verify(
        &self,
        ctx: &PaymentContext<'_>,
        request: &FacilitatorRequest,
    ) -> Result<VerifyResponse, Refusal> {
        for hook in &self.inner.hooks {
            match hook.before_verify(ctx).await {
                Ok(BeforeVerify::Continue) => {}
                Ok(BeforeVerify::Abort { reason }) => return Err(Refusal::Invalid(reason)),
                Ok(BeforeVerify::Skip(verdict)) => return Ok(verdict),
                Err(e) => {
                    log_hook_error(&e);
                    return Err(hook_error_refusal(&e));
                }
            }
        }
        match self.inner.facilitator.verify(request).await {
            Ok(v) => Ok(v),
            Err(error) => {
                for hook in &self.inner.hooks {
                    if let Some(v) = hook.on_verify_failure(ctx, &error).await {
                        return Ok(v);
                    }
                }
                tracing::error!(error = %error, network = ctx.network, "x402: facilitator /verify failed");
                Err(Refusal::FacilitatorUnavailable)
            }
        }
    }
}

fn log_hook_error(e: &HookError) {
    tracing::error!(error = %e, source = ?std::error::Error::source(e), "x402: hook failed");
}

fn hook_error_refusal(e: &HookError) -> Refusal {
    match e {
        HookError::Unavailable {
            reason,
            retry_after,
            ..
        } => Refusal::Unavailable {
            reason,
            retry_after: *retry_after,
        },
        HookError::Other(_) => Refusal::Internal,
    }
}

fn hook_error_response(e: &HookError) -> EngineResponse {
    log_hook_error(e);
    response::refusal_response(&hook_error_refusal(e), None, None, None)
}

/// A verified payment whose handler is about to run. Finish it with
/// [`complete`](Self::complete) (settlement after the handler) or
/// [`settle`](Self::settle) (settlement before it), or
/// [`abort`](Self::abort) if the handler could not produce a response.
///
/// Dropping it unfinished counts as an aborted handler: hooks are told, so a
/// replay claim is released.
pub struct PaidRequest {
    engine: Engine,
    request: FacilitatorRequest,
    payment: VerifiedPayment,
    network: String,
    timing: SettlementTiming,
    resource: v2::ResourceInfo,
    accepts: Vec<v2::PaymentRequirements>,
    route_index: usize,
    finished: bool,
}

impl fmt::Debug for PaidRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaidRequest")
            .field("payment", &self.payment)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// What to send after the handler ran.
#[derive(Debug)]
#[must_use]
pub enum Completion {
    /// Send the handler's response, with the headers as the engine left them
    /// (the receipt added).
    Deliver,
    /// Withhold the handler's response and send this instead.
    Replace(EngineResponse),
}

/// A payment settled before its handler ran. Add its headers to whatever the
/// handler answers with [`finish`](Self::finish).
#[derive(Debug)]
pub struct Settled {
    receipt: Option<(http::HeaderName, HeaderValue)>,
}

impl Settled {
    /// Adds the receipt and expose headers to the handler's response.
    pub fn finish(self, headers: &mut HeaderMap) {
        response::expose(headers);
        if let Some((name, value)) = self.receipt {
            headers.insert(name, value);
        }
    }
}

impl PaidRequest {
    /// The verified payment (put it in the request's extensions).
    pub fn payment(&self) -> &VerifiedPayment {
        &self.payment
    }

    /// When this route settles.
    pub fn timing(&self) -> SettlementTiming {
        self.timing
    }

    fn context(&self) -> PaymentContext<'_> {
        PaymentContext {
            route: self
                .engine
                .inner
                .routes
                .get(self.route_index)
                .map(|r| r.route.pattern())
                .unwrap_or_default(),
            payload: &self.request.payment_payload,
            requirements: &self.request.payment_requirements,
            network: &self.network,
        }
    }

    fn refusal(&self, refusal: &Refusal) -> EngineResponse {
        let route = self
            .engine
            .inner
            .routes
            .get(self.route_index)
            .map(|r| &r.route);
        let parts = route.map(|route| self.engine.parts(route, &self.resource, &self.accepts));
        response::refusal_response(
            refusal,
            parts.as_ref(),
            Some(self.payment.version),
            self.payment.payer.as_deref(),
        )
    }

    /// Finishes a payment after its handler answered with `status`; `headers`
    /// are the handler's response headers, to which the receipt is added.
    ///
    /// A status of 400 or more is never charged: the handler's response is
    /// delivered unchanged and the payment is released. Otherwise the payment
    /// is settled; if settlement is refused or its outcome is unknown, the
    /// handler's response is replaced.
    pub async fn complete(mut self, status: StatusCode, headers: &mut HeaderMap) -> Completion {
        if status.is_client_error() || status.is_server_error() {
            self.cancel(CancelReason::HandlerFailed(status)).await;
            return Completion::Deliver;
        }
        match self.settle_inner().await {
            Ok(receipt) => {
                response::expose(headers);
                if let Some((name, value)) = receipt {
                    headers.insert(name, value);
                }
                Completion::Deliver
            }
            Err(response) => Completion::Replace(response),
        }
    }

    /// Settles now, before the handler runs (routes with
    /// [`SettlementTiming::BeforeHandler`]). On `Err`, send that response and
    /// do not run the handler.
    pub async fn settle(mut self) -> Result<Settled, EngineResponse> {
        self.settle_inner().await.map(|receipt| Settled { receipt })
    }

    /// The handler failed without a response (its body errored, or the
    /// request was dropped). Nothing is settled and hooks are told.
    pub async fn abort(mut self) {
        self.cancel(CancelReason::HandlerAborted).await;
    }

    async fn cancel(&mut self, reason: CancelReason) {
        self.finished = true;
        let ctx = self.context();
        for hook in &self.engine.inner.hooks {
            hook.on_payment_canceled(&ctx, reason).await;
        }
    }

    async fn settle_inner(
        &mut self,
    ) -> Result<Option<(http::HeaderName, HeaderValue)>, EngineResponse> {
        // From here on the payment is never released: a settlement attempt
        // may have moved money.
        self.finished = true;
        let ctx = self.context();
        let hooks = &self.engine.inner.hooks;
        for hook in hooks {
            match hook.before_settle(&ctx).await {
                Ok(BeforeSettle::Continue) => {}
                Ok(BeforeSettle::Abort { reason }) => {
                    let receipt = SettleResponse {
                        payer: self.payment.payer.clone(),
                        ..SettleResponse::failure(
                            self.request.payment_requirements.network(),
                            reason,
                        )
                    };
                    return Err(self.refusal(&Refusal::SettlementFailed(Box::new(receipt))));
                }
                Err(e) => {
                    log_hook_error(&e);
                    let receipt = SettleResponse {
                        payer: self.payment.payer.clone(),
                        ..SettleResponse::failure(
                            self.request.payment_requirements.network(),
                            "before_settle_hook_error",
                        )
                    };
                    return Err(self.refusal(&Refusal::SettlementFailed(Box::new(receipt))));
                }
            }
        }
        let result = match self.engine.inner.facilitator.settle(&self.request).await {
            Ok(r) => Ok(r),
            Err(error) => {
                let mut recovered = None;
                for hook in hooks {
                    if let Some(r) = hook.on_settle_failure(&ctx, &error).await {
                        recovered = Some(r);
                        break;
                    }
                }
                recovered.ok_or(error)
            }
        };
        let mut receipt = match result {
            Ok(r) => r,
            Err(error) => {
                tracing::error!(
                    error = %error,
                    network = %self.network,
                    payer = ?self.payment.payer,
                    "x402: settlement outcome unknown; the response is withheld and the payment stays claimed"
                );
                return Err(self.refusal(&Refusal::SettlementUnknown));
            }
        };
        if receipt.payer.is_none() {
            receipt.payer = self.payment.payer.clone();
        }
        if receipt.network.is_empty() {
            receipt.network = self.request.payment_requirements.network().to_owned();
        }
        for hook in hooks {
            hook.after_settle(&ctx, &receipt).await;
        }
        if !receipt.success {
            if receipt.error_reason.is_none() {
                receipt.error_reason = Some("settlement_failed".to_owned());
            }
            tracing::warn!(reason = ?receipt.error_reason, network = %self.network, "x402: settlement refused");
            return Err(self.refusal(&Refusal::SettlementFailed(Box::new(receipt))));
        }
        Ok(response::receipt_header(&receipt, self.payment.version))
    }
}

impl Drop for PaidRequest {
    fn drop(&mut self) {
        if self.finished || self.engine.inner.hooks.is_empty() {
            return;
        }
        // Dropped before the handler finished (client went away, handler
        // panicked): tell the hooks, off this thread since Drop cannot wait.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("x402: paid request dropped outside a Tokio runtime; hooks not told");
            return;
        };
        let engine = self.engine.clone();
        let request = self.request.clone();
        let network = std::mem::take(&mut self.network);
        let route_index = self.route_index;
        handle.spawn(async move {
            let ctx = PaymentContext {
                route: engine
                    .inner
                    .routes
                    .get(route_index)
                    .map(|r| r.route.pattern())
                    .unwrap_or_default(),
                payload: &request.payment_payload,
                requirements: &request.payment_requirements,
                network: &network,
            };
            for hook in &engine.inner.hooks {
                hook.on_payment_canceled(&ctx, CancelReason::HandlerAborted)
                    .await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_and_its_futures_are_send_and_sync() {
        fn is_send_sync<T: Send + Sync>(_: &T) {}
        fn is_send<T: Send>(_: &T) {}
        fn check(engine: &Engine, view: RequestView<'static>) {
            is_send_sync(engine);
            is_send(&engine.process(view));
        }
        let _ = check;
    }
}
