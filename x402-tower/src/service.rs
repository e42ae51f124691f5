use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use http_body_util::BodyExt;
use tower_service::Service;
use x402_core::{
    engine::{handler_failed_response, Completion, Decision, Guard, Immediate, PaidRequest},
    route::{RequestView, SettlementTiming},
    Engine, VerifiedPayment,
};

use crate::{dispatch::ReadDispatch, PaywallBody, ResponseFuture};

/// The paywall middleware built by [`PaywallLayer`](crate::PaywallLayer).
#[derive(Debug, Clone)]
pub struct Paywall<S> {
    inner: S,
    guard: Guard,
    read_dispatch: ReadDispatch,
}

impl<S> Paywall<S> {
    /// Wraps `inner` with the paywall driven by `engine`'s route table.
    pub fn new(inner: S, engine: Engine) -> Self {
        Self::with_parts(inner, Guard::Table(engine), crate::dispatch::nothing)
    }

    pub(crate) fn with_parts(inner: S, guard: Guard, read_dispatch: ReadDispatch) -> Self {
        Self {
            inner,
            guard,
            read_dispatch,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the paywall, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        self.guard.engine()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Paywall<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Body + Send + 'static,
    ResBody::Data: Send,
    ResBody::Error: std::fmt::Display + Send,
{
    type Response = Response<PaywallBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // Unprotected requests and ready-made 402s are decided here, with no
        // clone of the inner service and no boxed engine future.
        match self.guard.process_now(view(&request, self.read_dispatch)) {
            Some(Immediate::Pass) => {
                passed(&self.guard, &request, self.read_dispatch);
                let future = self.inner.call(request);
                return ResponseFuture::boxed(async move {
                    future.await.map(|r| r.map(PaywallBody::stream))
                });
            }
            Some(Immediate::Respond(response)) => {
                return ResponseFuture::ready(response.map(PaywallBody::full));
            }
            _ => {}
        }

        // The instance that reported ready goes into the future; this one keeps
        // a fresh clone (see "Be careful when cloning inner services" in
        // tower-service's docs).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (guard, read) = (self.guard.clone(), self.read_dispatch);

        ResponseFuture::boxed(async move {
            let decision = guard.process(view(&request, read)).await;
            let paid = match decision {
                Decision::Pass => {
                    passed(&guard, &request, read);
                    return inner
                        .call(request)
                        .await
                        .map(|r| r.map(PaywallBody::stream));
                }
                Decision::Respond(response) => return Ok(response.map(PaywallBody::full)),
                Decision::Paid(paid) => paid,
            };
            // Boxed apart: the paid flow's state is large, and the 402
            // and pass-through paths should not allocate room for it.
            Box::pin(serve_paid(paid, inner, request)).await
        })
    }
}

/// For a request that passes, when its router rewrote the URI: the guard
/// checks the request as the inner service sees it.
fn passed<B>(guard: &Guard, request: &Request<B>, read: ReadDispatch) {
    let dispatch = read(request.extensions());
    if dispatch
        .original_uri
        .is_some_and(|uri| uri != request.uri())
    {
        guard.passed(RequestView::new(
            request.method(),
            request.uri(),
            request.headers(),
        ));
    }
}

/// The engine's view of a request: the URI the client sent and the
/// template the router matched, where the router says.
fn view<B>(request: &Request<B>, read: ReadDispatch) -> RequestView<'_> {
    let dispatch = read(request.extensions());
    let uri = dispatch.original_uri.unwrap_or(request.uri());
    RequestView::new(request.method(), uri, request.headers())
        .route_template(dispatch.route_template)
        .paid_upstream(request.extensions().get::<VerifiedPayment>())
}

/// The handler and settlement for a verified payment or redeemed session
/// call: settle first (per route) or hold the body until settled.
async fn serve_paid<S, ReqBody, ResBody>(
    paid: Box<PaidRequest>,
    mut inner: S,
    mut request: Request<ReqBody>,
) -> Result<Response<PaywallBody<ResBody>>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: Body,
    ResBody::Error: std::fmt::Display,
{
    request.extensions_mut().insert(paid.payment().clone());

    if paid.timing() == SettlementTiming::BeforeHandler {
        let settled = match paid.settle().await {
            Ok(settled) => settled,
            Err(response) => return Ok(response.map(PaywallBody::full)),
        };
        let mut response = inner.call(request).await?;
        settled.finish(response.headers_mut());
        return Ok(response.map(PaywallBody::stream));
    }

    let response = match inner.call(request).await {
        Ok(response) => response,
        Err(e) => {
            paid.abort().await;
            return Err(e);
        }
    };
    let (mut parts, body) = response.into_parts();
    // Held until settled: a refused settlement must not leak it,
    // and a body that fails midway must not be charged.
    let data = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => {
            tracing::error!(error = %e, "x402: paid handler's body failed; not settling");
            paid.abort().await;
            return Ok(handler_failed_response().map(PaywallBody::full));
        }
    };
    match paid.complete(parts.status, &mut parts.headers).await {
        Completion::Deliver => {
            // The body's length is known now.
            parts.headers.remove(http::header::TRANSFER_ENCODING);
            Ok(Response::from_parts(parts, PaywallBody::full(data)))
        }
        Completion::Replace(response) => Ok(response.map(PaywallBody::full)),
    }
}
