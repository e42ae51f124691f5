//! The body of a response the engine had a hand in.

use std::{
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Buf, Bytes, BytesMut};
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

/// The whole of `body`'s data, its trailers dropped. A body of one data
/// frame (a handler's usual `Json`, `String` or `Bytes`) is handed on as it
/// is, neither copied nor listed; the frames of a longer one are joined.
pub(crate) async fn read_whole<B: Body>(body: B) -> Result<Bytes, B::Error> {
    let mut body = std::pin::pin!(body);
    let mut first = Bytes::new();
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(mut data) = frame?.into_data() else {
            continue;
        };
        let data = data.copy_to_bytes(data.remaining());
        if data.is_empty() {
            continue;
        }
        match &mut joined {
            Some(joined) => joined.extend_from_slice(&data),
            None if first.is_empty() => first = data,
            None => {
                let mut both = BytesMut::with_capacity(first.len() + data.len());
                both.extend_from_slice(&first);
                both.extend_from_slice(&data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map_or(first, BytesMut::freeze))
}

#[cfg(test)]
mod tests {
    use std::{convert::Infallible, pin::Pin};

    use super::*;

    /// A body of the given frames (or errors), each ready at once.
    struct Frames<E>(std::collections::VecDeque<Result<Frame<Bytes>, E>>);

    impl<E: Unpin> Body for Frames<E> {
        type Data = Bytes;
        type Error = E;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, E>>> {
            Poll::Ready(self.0.pop_front())
        }
    }

    /// `parts` as data frames, then trailers.
    fn frames(parts: &[&'static str]) -> Frames<Infallible> {
        let mut frames: std::collections::VecDeque<_> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        frames.push_back(Ok(Frame::trailers(http::HeaderMap::new())));
        Frames(frames)
    }

    #[tokio::test]
    async fn a_body_is_read_whole_whatever_its_frames() {
        for parts in [
            &[][..],
            &[""],
            &["one frame"],
            &["", "one frame", ""],
            &["two ", "frames"],
            &["th", "", "r", "ee frames"],
        ] {
            let whole = read_whole(frames(parts)).await.unwrap();
            assert_eq!(whole, parts.concat(), "{parts:?}");
        }
    }

    #[tokio::test]
    async fn one_frame_is_handed_on_uncopied() {
        let data = Bytes::from(b"the goods".to_vec());
        let at = data.as_ptr();
        let whole = read_whole(http_body_util::Full::new(data)).await.unwrap();
        assert_eq!(whole.as_ptr(), at);
    }

    #[tokio::test]
    async fn a_failing_body_fails() {
        let body = Frames(
            [Ok(Frame::data(Bytes::from_static(b"part"))), Err("cut")]
                .into_iter()
                .collect(),
        );
        assert_eq!(read_whole(body).await, Err("cut"));
    }
}
