use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;
use x402_core::{
    engine::{Decision, Guard, Now, Reply},
    route::RequestView,
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
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        // Unprotected requests and ready-made 402s are decided here, with no
        // clone of the inner service and no boxed future.
        let read = self.read_dispatch;
        let seen = view(&request, read);
        // The router rewrote the URI (a nested router stripped its prefix):
        // a request that passes is checked as the inner service sees it.
        let rewritten = !std::ptr::eq(seen.uri, request.uri()) && seen.uri != request.uri();
        let step = match self.guard.process(seen).now() {
            Now::Decided(Decision::Pass) => {
                if rewritten {
                    passed(&self.guard, &request);
                }
                return ResponseFuture::pass(self.inner.call(request));
            }
            Now::Decided(Decision::Respond(response)) => {
                return ResponseFuture::ready(response.map(PaywallBody::full));
            }
            Now::Decided(Decision::Paid(paid)) => Ok(paid),
            Now::Pending(pending) => Err(pending),
        };

        // The instance that reported ready goes into the future; this one keeps
        // a fresh clone (see "Be careful when cloning inner services" in
        // tower-service's docs).
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        // The guard only for that check: its count is shared by every
        // request on every core.
        let guard = (rewritten && step.is_err()).then(|| self.guard.clone());

        // Boxed, within 1 032 bytes (x402-core's `BoxedDecision` says
        // why): the decision ends with its statement, and the request is
        // not rebound.
        ResponseFuture::engine(async move {
            let paid = match step {
                Ok(paid) => Some(paid),
                Err(pending) => match pending.decide(view(&request, read)).await {
                    Decision::Pass => None,
                    Decision::Respond(response) => return Ok(response.map(PaywallBody::full)),
                    Decision::Paid(paid) => Some(paid),
                },
            };
            let Some(paid) = paid else {
                if let Some(guard) = &guard {
                    passed(guard, &request);
                }
                let response = inner.call(request).await?;
                return Ok(response.map(PaywallBody::stream));
            };
            // The handler runs with the payment in its extensions; the
            // engine then settles and finishes the response, boxed apart:
            // its state is large, and the paths that decide without a
            // payment should not carry room for it.
            request.extensions_mut().insert(paid.payment().clone());
            let response = inner.call(request).await;
            Box::pin(paid.finish(response))
                .await
                .map(Reply::into_response)
        })
    }
}

/// For a request that passes after its router rewrote the URI: the guard
/// checks the request as the inner service sees it.
fn passed<B>(guard: &Guard, request: &Request<B>) {
    guard.passed(RequestView::new(
        request.method(),
        request.uri(),
        request.headers(),
    ));
}

/// The engine's view of a request: the URI the client sent, the template
/// the router matched and the peer's address, where the router says.
fn view<B>(request: &Request<B>, read: ReadDispatch) -> RequestView<'_> {
    let dispatch = read(request.extensions());
    let uri = dispatch.original_uri.unwrap_or(request.uri());
    RequestView::new(request.method(), uri, request.headers())
        .route_template(dispatch.route_template)
        .paid_upstream(request.extensions().get::<VerifiedPayment>())
        .peer(dispatch.peer)
}
