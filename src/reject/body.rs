//! [`ResponseBody`]: the body of a response of a [`Reject`](super::Reject) service.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::slot::Slot;

pin_project! {
    /// The body of a response of a [`Reject`](super::Reject) service: the inner service's
    /// body (or the rejection's), holding the request's place in the in-flight quotas of
    /// its limits ([`Plan::in_flight`](crate::Plan::in_flight)) until it ends, fails or is
    /// dropped. It reads as the inner body (`Deref`, `PartialEq`), and
    /// [`into_inner`](Self::into_inner) gives the place back.
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        slot: Slot,
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn new(inner: B, slot: Slot) -> Self {
        ResponseBody { inner, slot }
    }

    /// The inner body; the request's place in the in-flight quotas is given back.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        if matches!(frame, None | Some(Err(_))) || this.inner.is_end_stream() {
            drop(std::mem::take(this.slot));
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Deref for ResponseBody<B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.inner
    }
}

impl<B> DerefMut for ResponseBody<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.inner
    }
}

impl<B: PartialEq<T>, T: ?Sized> PartialEq<T> for ResponseBody<B> {
    fn eq(&self, other: &T) -> bool {
        self.inner == *other
    }
}

impl<B: fmt::Debug> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}
