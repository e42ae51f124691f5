use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::Response;
use pin_project_lite::pin_project;

use crate::PaywallBody;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

pin_project! {
    /// The response future of [`Paywall`](crate::Paywall): a request that
    /// passes polls the inner service's future as it is, with no allocation;
    /// a ready-made answer (a 402) is returned at once; anything the engine
    /// waits on (verification, the handler, settlement) runs boxed.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        Ready { response: Option<Response<PaywallBody<B>>> },
        Pass { #[pin] future: F },
        Engine { future: BoxFuture<Result<Response<PaywallBody<B>>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(crate) fn ready(response: Response<PaywallBody<B>>) -> Self {
        Self {
            kind: Kind::Ready {
                response: Some(response),
            },
        }
    }

    pub(crate) fn pass(future: F) -> Self {
        Self {
            kind: Kind::Pass { future },
        }
    }

    /// The future `make` returns, built in its box (x402-core's
    /// [`boxed`](x402_core::boxed::boxed): about 1 KiB not copied).
    #[inline(always)]
    pub(crate) fn engine<G, Fut>(make: G) -> Self
    where
        G: FnOnce() -> Fut,
        Fut: Future<Output = Result<Response<PaywallBody<B>>, E>> + Send + 'static,
    {
        Self {
            kind: Kind::Engine {
                future: x402_core::boxed::boxed(make),
            },
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Ready { .. } => "ready",
            Kind::Pass { .. } => "pass",
            Kind::Engine { .. } => "engine",
        };
        f.debug_struct("ResponseFuture")
            .field("kind", &kind)
            .finish()
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<PaywallBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            // Polled again after it completed: it stays pending, as the
            // `Future` contract allows.
            KindProj::Ready { response } => response
                .take()
                .map_or(Poll::Pending, |r| Poll::Ready(Ok(r))),
            KindProj::Pass { future } => future
                .poll(cx)
                .map(|result| result.map(|response| response.map(PaywallBody::stream))),
            KindProj::Engine { future } => future.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
impl<F, B, E> ResponseFuture<F, B, E> {
    /// The size of the boxed future, for one that the engine drives.
    pub(crate) fn boxed_size(&self) -> Option<usize> {
        match &self.kind {
            Kind::Engine { future } => Some(std::mem::size_of_val(&**future)),
            Kind::Ready { .. } | Kind::Pass { .. } => None,
        }
    }
}
