//! The [`PaywallLayer`] transform and the service it creates.

use std::{
    fmt,
    future::{ready, Future, Ready},
    pin::Pin,
    rc::Rc,
    task::{Context, Poll},
};

use actix_web::{
    body::{BoxBody, EitherBody, MessageBody},
    dev::{forward_ready, Service, ServiceRequest, ServiceResponse, Transform},
    HttpMessage, HttpRequest, HttpResponse,
};
use x402_core::{
    boxed::boxed,
    engine::{ConfigError, Decision, EngineResponse, Guard, Now, Reply},
    Engine, Route,
};

use crate::convert::{self, HandlerBody, RequestHead, Routing};

/// The x402 paywall as actix-web middleware.
///
/// Wrap an [`App`](actix_web::App), a [`Scope`](actix_web::Scope) or a
/// [`Resource`](actix_web::Resource) with it. Requests the [`Engine`]
/// protects are answered with a 402 challenge until they carry a valid
/// payment; a paid request reaches the handler with the
/// [`VerifiedPayment`](x402_core::VerifiedPayment) in its extensions (read it
/// with the [`Payment`](crate::Payment) extractor), and its response gets the
/// settlement receipt. Everything else passes through untouched.
///
/// The engine matches routes on the request's full path, whatever scope the
/// middleware wraps, and also on the resource pattern actix-web matched
/// (`match_pattern()`, scope prefixes included): declare routes in the
/// engine with the path a client sends. A request is free only when no
/// reading of its path a router could make is protected (see
/// [`x402_core::boundary`]). [`route`](Self::route) prices one resource
/// where it is declared.
///
/// ```
/// use actix_web::{web, App, HttpResponse};
/// use x402_actix::{Payment, PaywallLayer};
/// use x402_core::{Engine, Offer, Route};
/// # use x402_core::testing::StandIn;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder(StandIn::new())
///     .route(Route::get("/api/report").offer(Offer::exact(
///         "eip155:84532",
///         "$0.01",
///         "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
///     )))
///     .build()?;
///
/// async fn report(Payment(payment): Payment) -> HttpResponse {
///     HttpResponse::Ok().body(format!("paid by {:?}", payment.payer))
/// }
///
/// // Only the `/api` scope goes through the paywall.
/// let app = App::new()
///     .service(
///         web::scope("/api")
///             .wrap(PaywallLayer::new(engine))
///             .route("/report", web::get().to(report)),
///     )
///     .route("/health", web::get().to(HttpResponse::Ok));
/// # let _ = app;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct PaywallLayer {
    guard: Guard,
}

impl PaywallLayer {
    /// The paywall driven by `engine`'s route table.
    pub fn new(engine: Engine) -> Self {
        Self {
            guard: Guard::Table(engine),
        }
    }

    /// A paywall for the one resource it wraps (`Resource::wrap`), priced
    /// by `route`: every request that reaches it is `route`'s (for its
    /// method), whatever its path (see [`Engine::bind`]). Declare `route`
    /// with the resource's full path: discovery lists it.
    ///
    /// ```
    /// use actix_web::{web, App, HttpResponse};
    /// use x402_actix::PaywallLayer;
    /// use x402_core::{Engine, Offer, Route};
    /// # use x402_core::facilitator::HttpFacilitator;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let paywall = PaywallLayer::new(Engine::builder(HttpFacilitator::new("http://127.0.0.1:4022")?).build()?);
    /// let app = App::new().service(
    ///     web::resource("/weather/{city}")
    ///         .wrap(paywall.route(Route::get("/weather/{city}").offer(Offer::exact(
    ///             "eip155:84532",
    ///             "$0.001",
    ///             "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
    ///         )))?)
    ///         .route(web::get().to(HttpResponse::Ok)),
    /// );
    /// # let _ = app; Ok(()) }
    /// ```
    pub fn route(&self, route: Route) -> Result<Self, ConfigError> {
        Ok(Self {
            guard: Guard::Route(self.engine().bind(route)?),
        })
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.guard.engine()
    }
}

impl From<Engine> for PaywallLayer {
    fn from(engine: Engine) -> Self {
        Self::new(engine)
    }
}

impl<S, B> Transform<S, ServiceRequest> for PaywallLayer
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Transform = Paywall<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        ready(Ok(Paywall {
            service: Rc::new(service),
            guard: self.guard.clone(),
        }))
    }
}

/// The service [`PaywallLayer`] wraps around the next one. Not named by
/// users; public only because actix-web's `Transform` needs it to be.
#[doc(hidden)]
pub struct Paywall<S> {
    // `Rc`: the inner service is called from the response future, after the
    // engine decided, and actix-web runs each worker on one thread.
    service: Rc<S>,
    guard: Guard,
}

impl<S> fmt::Debug for Paywall<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paywall")
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

type LocalBoxFuture<T> = Pin<Box<dyn Future<Output = T> + 'static>>;

impl<S, B> Service<ServiceRequest> for Paywall<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error> + 'static,
    B: MessageBody + 'static,
{
    type Response = ServiceResponse<EitherBody<B>>;
    type Error = actix_web::Error;
    type Future = PaywallFuture<S::Future, B>;

    forward_ready!(service);

    fn call(&self, request: ServiceRequest) -> Self::Future {
        // A request no route protects goes on as it is: not translated for
        // the engine (its headers copied into another `http`'s map), and no
        // future boxed.
        let routing = Routing::of(&request);
        if !self.protects(&request, &routing) {
            return PaywallFuture::Pass {
                future: self.service.call(request),
            };
        }
        // The inner service is called later, from the future, once the engine
        // decided. actix-web's `Service::call` takes `&self` and a worker
        // runs on one thread, so the service is shared through an `Rc`
        // rather than cloned and swapped as tower requires (the pattern of
        // actix-session's `SessionMiddleware`).
        // Built in its box (896 bytes not copied).
        PaywallFuture::Engine {
            future: boxed(|| {
                handle(
                    Rc::clone(&self.service),
                    self.guard.clone(),
                    request,
                    routing,
                )
            }),
        }
    }
}

impl<S> Paywall<S> {
    /// Whether the engine could do anything with `request` but pass it
    /// ([`Guard::protects`]): its method, path and the pattern actix-web
    /// matched, no headers. A method `http` 1.x cannot represent is left
    /// to the engine's path, which refuses it.
    fn protects(&self, request: &ServiceRequest, routing: &Routing) -> bool {
        routing.method.as_ref().is_none_or(|method| {
            self.guard
                .protects(method, request.path(), routing.pattern.as_deref())
        })
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Paywall`]: a request no route protects
    /// polls the inner service's future as it is, unboxed; one
    /// the engine decides runs boxed. Not named by users; public only
    /// because actix-web's `Service` needs it to be.
    #[doc(hidden)]
    #[project = PaywallFutureProj]
    pub enum PaywallFuture<F, B> {
        /// Not protected: the inner service's future.
        Pass { #[pin] future: F },
        /// Decided and finished by the engine.
        Engine { future: LocalBoxFuture<Result<ServiceResponse<EitherBody<B>>, actix_web::Error>> },
    }
}

impl<F, B> PaywallFuture<F, B> {
    /// The size of the boxed future, for one the engine decides.
    #[cfg(test)]
    pub(crate) fn boxed_size(&self) -> Option<usize> {
        match self {
            Self::Pass { .. } => None,
            Self::Engine { future } => Some(std::mem::size_of_val(&**future)),
        }
    }
}

impl<F, B> Future for PaywallFuture<F, B>
where
    F: Future<Output = Result<ServiceResponse<B>, actix_web::Error>>,
{
    type Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            PaywallFutureProj::Pass { future } => future
                .poll(cx)
                .map(|result| result.map(ServiceResponse::map_into_left_body)),
            PaywallFutureProj::Engine { future } => future.as_mut().poll(cx),
        }
    }
}

/// One request through the engine: translated in, decided and finished by
/// the engine, translated out.
///
/// Not an `async fn`, which would keep its arguments twice (as arguments,
/// and moved into its body): the block uses them where it captured them.
/// The future is boxed per request, and stays within 1 032 bytes, the
/// largest block glibc's allocator serves from its per-thread cache
/// (x402-core's `BoxedDecision` says why that matters).
#[allow(clippy::manual_async_fn)] // see above
fn handle<S, B>(
    service: Rc<S>,
    guard: Guard,
    request: ServiceRequest,
    routing: Routing,
) -> impl Future<Output = Result<ServiceResponse<EitherBody<B>>, actix_web::Error>>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    async move {
        let peer = request.peer_addr().map(|address| address.ip());
        // Decided in a block of its own: the translated head (488 bytes) and
        // the engine's first step are not kept while the handler runs.
        let decision = 'decided: {
            let head = match RequestHead::from_request(&request, routing) {
                Ok(head) => head,
                Err(reason) => {
                    // Unreachable for anything actix-web parsed (see
                    // `convert`), and refused rather than let past the
                    // paywall unexamined.
                    tracing::warn!(
                        ?reason,
                        "x402: request not translatable for the engine; refused"
                    );
                    let response = HttpResponse::BadRequest().finish();
                    return Ok(request.into_response(response).map_into_right_body());
                }
            };
            let pending = match guard.process(head.view().peer(peer)).now() {
                Now::Decided(decision) => break 'decided decision,
                Now::Pending(pending) => pending,
            };
            // Boxed: the paths decided at once (free routes, ready 402s)
            // should not carry room for it.
            boxed(|| pending.decide(head.view().peer(peer))).await
        };
        let paid = match decision {
            Decision::Pass => {
                return service
                    .call(request)
                    .await
                    .map(ServiceResponse::map_into_left_body)
            }
            Decision::Respond(response) => {
                let (request, _) = request.into_parts();
                return Ok(engine_response(request, response));
            }
            Decision::Paid(paid) => paid,
        };
        request.extensions_mut().insert(paid.payment().clone());

        // Handler errors are mostly responses here already (status >= 400,
        // with `response.error()` set), which the engine releases unsettled.
        let mut kept = None;
        let result = service.call(request).await.map(|response| {
            let (request, response) = response.into_parts();
            let (head, body) = response.into_parts();
            let before = convert::headers_to_http1(head.headers());
            let mut translated = http::Response::new(HandlerBody::new(body));
            *translated.status_mut() = convert::status_to_http1(head.status());
            *translated.headers_mut() = before.clone();
            kept = Some((request, head, before));
            translated
        });
        let reply = paid.finish(result).await?;
        let Some((request, head, before)) = kept else {
            // `finish` answers `Ok` only for a handler that answered.
            return Err(actix_web::error::ErrorInternalServerError(""));
        };
        Ok(match reply {
            Reply::Handler(response) => {
                let (parts, body) = response.into_parts();
                let mut head = head;
                convert::write_back(head.headers_mut(), &before, &parts.headers);
                let body = match body.into_inner() {
                    Ok(streamed) => EitherBody::left(streamed.into_inner()),
                    Err(held) => EitherBody::right(BoxBody::new(held)),
                };
                ServiceResponse::new(request, head.set_body(body))
            }
            Reply::Engine(response) => engine_response(request, response),
        })
    }
}

fn engine_response<B>(
    request: HttpRequest,
    response: EngineResponse,
) -> ServiceResponse<EitherBody<B>> {
    ServiceResponse::new(request, convert::response(response)).map_into_right_body()
}
