//! [`GrpcRequest`]: a gRPC call as the retry layer holds it, replayable when its whole
//! request was at hand before it was sent.
//!
//! tonic's request body is a stream, not `Clone`. Before the first attempt the body is
//! polled as far as it is *ready* (never waiting): a unary or server-streaming call has its
//! one message ready at once, and it is kept (up to a per-call limit, as A6's
//! `per_rpc_buffer_limit_in_bytes`) so that a retry sends the same bytes. A body that is not
//! whole by then (a client or bidirectional stream still producing), that holds more than one
//! message, or that outgrows the limit, is sent once and never resent: its messages may have
//! reached the server, and the stream cannot be replayed faithfully.
//!
//! A call's `grpc-timeout` sets its deadline, which covers every attempt (gRFC A6): a retry
//! carries the time left until it, not the caller's whole timeout again.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Method, Request};
use http_body::{Body as _, Frame, SizeHint};
use tokio::time::Instant;
use tonic::body::Body;

use super::wire::{timeout, timeout_value, GRPC_TIMEOUT};
use crate::retry_after::Replay;

/// A gRPC request inside [`GrpcRetry`](super::GrpcRetry): the head, and the body either kept
/// whole (replayable) or streaming (sent once).
pub struct GrpcRequest {
    head: Request<()>,
    payload: Payload,
    /// Attempts sent so far, shared by the request and its copies.
    sent: Arc<AtomicU32>,
    /// When the call's `grpc-timeout` runs out, counted from the call.
    deadline: Option<Instant>,
}

enum Payload {
    /// The whole body, at most one message: sent again as is.
    Whole {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// What was read ahead, then the rest of the stream.
    Streaming(Resumed),
}

impl GrpcRequest {
    /// Reads `req`'s body ahead as far as it is ready, keeping at most `limit` bytes.
    pub(crate) fn new(req: Request<Body>, limit: usize) -> Self {
        let (parts, mut body) = req.into_parts();
        let head = Request::from_parts(parts, ());
        let deadline = timeout(head.headers()).and_then(|t| Instant::now().checked_add(t));
        let mut chunks = VecDeque::new();
        let mut trailers = None;
        let mut size = 0usize;
        let waker = Waker::from(Arc::new(NoWake));
        let mut cx = Context::from_waker(&waker);
        let outcome = loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(None) => break ReadAhead::End,
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        size = size.saturating_add(data.len());
                        chunks.push_back(data);
                        if size > limit {
                            break ReadAhead::TooLarge;
                        }
                    }
                    Err(frame) => trailers = frame.into_trailers().ok(),
                },
                Poll::Ready(Some(Err(e))) => break ReadAhead::Failed(e),
                Poll::Pending => break ReadAhead::NotReady,
            }
        };
        if let ReadAhead::End = outcome {
            let data = concat(&chunks);
            if messages(&data).is_some_and(|n| n <= 1) {
                return GrpcRequest {
                    head,
                    payload: Payload::Whole { data, trailers },
                    sent: Arc::default(),
                    deadline,
                };
            }
        }
        let (rest, error) = match outcome {
            ReadAhead::End => (None, None),
            ReadAhead::Failed(e) => (None, Some(e)),
            _ => (Some(body), None),
        };
        GrpcRequest {
            head,
            payload: Payload::Streaming(Resumed {
                chunks,
                error,
                rest,
                trailers,
            }),
            sent: Arc::default(),
            deadline,
        }
    }

    /// Whether a retry can send this request again.
    pub fn is_replayable(&self) -> bool {
        matches!(self.payload, Payload::Whole { .. })
    }

    /// When the call's deadline (its `grpc-timeout`) passes; `None` without one, or with a
    /// malformed one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// The request to send. A retry carries A6's `grpc-previous-rpc-attempts` (the attempts
    /// sent before it) and, for a call with a deadline, the time left until it as its
    /// `grpc-timeout`.
    pub(crate) fn into_http(self) -> Request<Body> {
        let mut head = self.head;
        let previous = self.sent.fetch_add(1, Ordering::AcqRel);
        if previous > 0 {
            let headers = head.headers_mut();
            headers.insert(PREVIOUS_ATTEMPTS, HeaderValue::from(previous));
            if let Some(deadline) = self.deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                headers.insert(GRPC_TIMEOUT, timeout_value(left));
            }
        }
        let body = match self.payload {
            Payload::Whole { data, trailers } => Resumed {
                chunks: (!data.is_empty()).then_some(data).into_iter().collect(),
                error: None,
                rest: None,
                trailers,
            },
            Payload::Streaming(resumed) => resumed,
        };
        let (parts, ()) = head.into_parts();
        Request::from_parts(parts, Body::new(body))
    }
}

impl Replay for GrpcRequest {
    fn replay(&self) -> Option<Self> {
        match &self.payload {
            Payload::Whole { data, trailers } => Some(GrpcRequest {
                head: self.head.replay()?,
                payload: Payload::Whole {
                    data: data.clone(),
                    trailers: trailers.clone(),
                },
                sent: Arc::clone(&self.sent),
                deadline: self.deadline,
            }),
            Payload::Streaming(_) => None,
        }
    }

    fn method(&self) -> &Method {
        self.head.method()
    }
}

impl fmt::Debug for GrpcRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcRequest")
            .field("uri", self.head.uri())
            .field("replayable", &self.is_replayable())
            .finish_non_exhaustive()
    }
}

/// gRFC A6: how many attempts of this call were sent before this one.
const PREVIOUS_ATTEMPTS: &str = "grpc-previous-rpc-attempts";

/// How far reading ahead went.
enum ReadAhead {
    End,
    TooLarge,
    NotReady,
    Failed(tonic::Status),
}

/// The read-ahead chunks, then the rest of the body.
struct Resumed {
    chunks: VecDeque<Bytes>,
    error: Option<tonic::Status>,
    rest: Option<Body>,
    trailers: Option<HeaderMap>,
}

impl http_body::Body for Resumed {
    type Data = Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if let Some(data) = this.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if let Some(e) = this.error.take() {
            return Poll::Ready(Some(Err(e)));
        }
        if let Some(rest) = this.rest.as_mut() {
            match std::task::ready!(Pin::new(rest).poll_frame(cx)) {
                Some(frame) => return Poll::Ready(Some(frame)),
                None => this.rest = None,
            }
        }
        Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
            && self.error.is_none()
            && self.trailers.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let kept = self.chunks.iter().map(|c| c.len() as u64).sum::<u64>();
        let rest = self
            .rest
            .as_ref()
            .map_or(SizeHint::with_exact(0), |r| r.size_hint());
        let mut hint = SizeHint::new();
        hint.set_lower(kept.saturating_add(rest.lower()));
        if let Some(upper) = rest.upper() {
            hint.set_upper(kept.saturating_add(upper));
        }
        hint
    }
}

/// The chunks as one buffer (no copy for a single chunk, the usual case).
fn concat(chunks: &VecDeque<Bytes>) -> Bytes {
    match chunks.len() {
        0 => Bytes::new(),
        1 => chunks[0].clone(),
        _ => {
            let mut all = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
            chunks.iter().for_each(|c| all.extend_from_slice(c));
            all.freeze()
        }
    }
}

/// The number of length-prefixed gRPC messages in `data`, or `None` if it does not split
/// into whole messages.
fn messages(data: &[u8]) -> Option<usize> {
    let mut rest = data;
    let mut n = 0;
    while !rest.is_empty() {
        let header = rest.get(..5)?;
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        rest = rest.get(5usize.checked_add(usize::try_from(len).ok()?)?..)?;
        n += 1;
    }
    Some(n)
}

/// Reading ahead never waits: the body is polled with a waker that does nothing, and polled
/// again (with the connection's waker) when it is sent.
struct NoWake;

impl Wake for NoWake {
    fn wake(self: Arc<Self>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &[u8]) -> Vec<u8> {
        let mut m = vec![0];
        m.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        m.extend_from_slice(payload);
        m
    }

    #[test]
    fn message_count() {
        assert_eq!(messages(&[]), Some(0));
        assert_eq!(messages(&message(b"hello")), Some(1));
        assert_eq!(messages(&message(b"")), Some(1));
        let two = [message(b"a"), message(b"bc")].concat();
        assert_eq!(messages(&two), Some(2));
        assert_eq!(messages(&two[..two.len() - 1]), None, "cut short");
        assert_eq!(messages(&[0, 0, 0]), None, "short header");
        assert_eq!(
            messages(&[0, 255, 255, 255, 255, 1]),
            None,
            "length past the end"
        );
    }
}
