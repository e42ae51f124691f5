//! The body of a response the engine had a hand in.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response to a request the engine handled: the
    /// handler's body streamed as it is, or a complete body (an engine
    /// response, or a paid handler's body held until its payment settled).
    /// Its data is [`Bytes`] whatever the handler's body's is.
    pub struct PaidBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Stream { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

impl<B> PaidBody<B> {
    /// The handler's body, streamed.
    pub fn stream(body: B) -> Self {
        Self {
            kind: Kind::Stream { body },
        }
    }

    /// A complete body.
    pub fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B> PaidBody<B> {
    /// The handler's body, if it is streamed (`Ok`), else the complete data
    /// (`Err`): for adapters whose framework has its own body type.
    pub fn into_inner(self) -> Result<B, Bytes> {
        match self.kind {
            Kind::Stream { body } => Ok(body),
            Kind::Full { data } => Err(data.unwrap_or_default()),
        }
    }
}

impl<B> std::fmt::Debug for PaidBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Stream { .. } => f.write_str("PaidBody::Stream"),
            Kind::Full { data } => f
                .debug_struct("PaidBody::Full")
                .field("len", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}

impl<B> Body for PaidBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            KindProj::Stream { body } => match body.poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let frame = frame.map_data(|mut d| d.copy_to_bytes(d.remaining()));
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Stream { body } => body.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Stream { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
