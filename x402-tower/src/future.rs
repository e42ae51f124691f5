use std::{
    fmt,
    future::{Future, Ready},
    pin::Pin,
    task::{Context, Poll},
};

use http::Response;

use crate::PaywallBody;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The response future of [`Paywall`](crate::Paywall).
pub struct ResponseFuture<B, E> {
    kind: Kind<B, E>,
}

enum Kind<B, E> {
    /// Decided at once: the 402 of an unpaid request.
    Ready(Ready<Result<Response<PaywallBody<B>>, E>>),
    /// Anything that waits: the engine, the inner service, settlement.
    Boxed(BoxFuture<Result<Response<PaywallBody<B>>, E>>),
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn ready(response: Response<PaywallBody<B>>) -> Self {
        Self {
            kind: Kind::Ready(std::future::ready(Ok(response))),
        }
    }

    pub(crate) fn boxed(
        future: impl Future<Output = Result<Response<PaywallBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            kind: Kind::Boxed(Box::pin(future)),
        }
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<PaywallBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // Both kinds are `Unpin`.
        match &mut self.get_mut().kind {
            Kind::Ready(ready) => Pin::new(ready).poll(cx),
            Kind::Boxed(future) => future.as_mut().poll(cx),
        }
    }
}
