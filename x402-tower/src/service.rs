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
        ResponseFuture::engine(move || async move {
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
            // engine then settles and finishes the response (its future is
            // small, the settlement boxed within it).
            request.extensions_mut().insert(paid.payment().clone());
            let response = inner.call(request).await;
            paid.finish(response).await.map(Reply::into_response)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::{
        convert::Infallible,
        future::Future,
        pin::Pin,
        sync::Arc,
        task::{Context, Poll},
    };

    use tower::{service_fn, ServiceExt};
    use x402_core::{
        testing::{self, StandIn},
        Engine, Offer, Route,
    };

    use super::*;

    /// An inner service's future at least as large as axum's `RouteFuture`
    /// (320 bytes in axum 0.8), which the layer's boxed future holds while
    /// the handler runs.
    struct AsLargeAsAxums {
        response: Option<Response<String>>,
        _room: [u64; 26],
    }

    impl Future for AsLargeAsAxums {
        type Output = Result<Response<String>, Infallible>;

        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
            Poll::Ready(Ok(self.response.take().unwrap()))
        }
    }

    /// The future the layer boxes for a request the engine waits on stays
    /// within 1 032 bytes, the largest block glibc's allocator serves from
    /// a thread's own cache (x402-core's `BoxedDecision` says why that
    /// matters), with the engine's finishing step awaited inside it.
    #[tokio::test]
    async fn the_boxed_future_fits_the_allocators_thread_cache() {
        let stub = Arc::new(StandIn::new());
        let offer = Offer::exact("eip155:84532", "$0.001", testing::PAY_TO);
        let engine = Engine::builder_arc(stub.clone())
            .route(Route::get("/paid").offer(offer))
            .build()
            .unwrap();
        let inner = service_fn(|_: Request<String>| AsLargeAsAxums {
            response: Some(Response::new("the goods".to_owned())),
            _room: [0; 26],
        });
        assert!(std::mem::size_of::<AsLargeAsAxums>() >= 320);
        let mut paywall = Paywall::new(inner, engine.clone());
        let unpaid = Request::get("/paid").body(String::new()).unwrap();
        let challenge = testing::challenge(&engine, unpaid).await;
        let paid = Request::get("/paid")
            .header("payment-signature", testing::pay(&challenge))
            .body(String::new())
            .unwrap();
        let future = paywall.ready().await.unwrap().call(paid);
        let size = future.boxed_size().unwrap();
        assert!(size <= 1032, "{size} bytes");
        let response = future.await.unwrap();
        assert_eq!(response.status(), 200);
        stub.assert_calls(1, 1);
    }
}
