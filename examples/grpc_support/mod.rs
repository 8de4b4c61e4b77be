//! A tiny gRPC service without protoc: a hand-written codec for UTF-8 strings and a
//! hand-written `echo.Echo` service on tonic's server machinery. Shared by the `grpc` example
//! and the gRPC tests.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder, Streaming};
use tonic::server::{ClientStreamingService, NamedService, UnaryService};
use tonic::{Request, Response, Status};

/// Encodes and decodes `String` messages as their UTF-8 bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct StringCodec;

impl Codec for StringCodec {
    type Encode = String;
    type Decode = String;
    type Encoder = StringCodec;
    type Decoder = StringCodec;

    fn encoder(&mut self) -> Self::Encoder {
        StringCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        StringCodec
    }
}

impl Encoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for StringCodec {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| Status::invalid_argument("not UTF-8"))
    }
}

/// The unary method: answers the message it gets.
pub const SAY: &str = "/echo.Echo/Say";
/// The client-streaming method: answers the messages it got, joined.
pub const COLLECT: &str = "/echo.Echo/Collect";

/// A call that reached the service.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Instant,
    pub method: &'static str,
    /// The `x-sent-us` metadata, if the client stamped the call.
    pub sent_us: Option<u64>,
    /// The first message of the call.
    pub message: String,
    /// `grpc-previous-rpc-attempts`: set on retries.
    pub previous_attempts: Option<u32>,
}

/// Decides the answer to a call from its arrival (numbered from 0): `Ok` echoes.
pub type Answer = dyn Fn(usize, &Arrival) -> Result<(), Status> + Send + Sync;

/// The `echo.Echo` service: records every arrival and answers as `answer` says.
#[derive(Clone)]
pub struct Echo {
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    answer: Arc<Answer>,
}

impl Echo {
    /// A service that always echoes.
    pub fn new() -> Self {
        Self::answering(|_, _| Ok(()))
    }

    /// A service that answers as `answer` says.
    pub fn answering(
        answer: impl Fn(usize, &Arrival) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        Echo {
            arrivals: Arc::default(),
            answer: Arc::new(answer),
        }
    }

    /// The calls that reached the service so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    fn arrive(
        &self,
        method: &'static str,
        meta: &tonic::metadata::MetadataMap,
        message: String,
    ) -> Result<(), Status> {
        let arrival = Arrival {
            at: Instant::now(),
            method,
            sent_us: meta
                .get("x-sent-us")
                .and_then(|v| v.to_str().ok()?.parse().ok()),
            previous_attempts: meta
                .get("grpc-previous-rpc-attempts")
                .and_then(|v| v.to_str().ok()?.parse().ok()),
            message,
        };
        let n = {
            let mut all = self.arrivals.lock().unwrap();
            all.push(arrival.clone());
            all.len() - 1
        };
        (self.answer)(n, &arrival)
    }
}

impl NamedService for Echo {
    const NAME: &'static str = "echo.Echo";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl UnaryService<String> for Echo {
    type Response = String;
    type Future = BoxFuture<Result<Response<String>, Status>>;

    fn call(&mut self, req: Request<String>) -> Self::Future {
        let result = self.arrive(SAY, req.metadata(), req.get_ref().clone());
        let reply = req.into_inner();
        Box::pin(async move { result.map(|()| Response::new(reply)) })
    }
}

impl ClientStreamingService<String> for Echo {
    type Response = String;
    type Future = BoxFuture<Result<Response<String>, Status>>;

    fn call(&mut self, req: Request<Streaming<String>>) -> Self::Future {
        let echo = self.clone();
        Box::pin(async move {
            let meta = req.metadata().clone();
            let mut stream = req.into_inner();
            // Answer once the first message is in: the rest may never come.
            let first = stream.message().await?.unwrap_or_default();
            echo.arrive(COLLECT, &meta, first.clone())?;
            let mut all = vec![first];
            while let Some(m) = stream.message().await? {
                all.push(m);
            }
            Ok(Response::new(all.join(",")))
        })
    }
}

impl tower::Service<http::Request<Body>> for Echo {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let echo = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(StringCodec);
            Ok(match req.uri().path() {
                SAY => grpc.unary(echo, req).await,
                COLLECT => grpc.client_streaming(echo, req).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// Calls `Say` with `message` and the given metadata.
pub async fn say<T>(
    client: &mut tonic::client::Grpc<T>,
    message: &str,
    metadata: &[(&'static str, &str)],
) -> Result<Response<String>, Status>
where
    T: tonic::client::GrpcService<Body>,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <T::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut req = Request::new(message.to_string());
    for (k, v) in metadata {
        req.metadata_mut().insert(*k, v.parse().unwrap());
    }
    client
        .ready()
        .await
        .map_err(|e| Status::unavailable(e.into().to_string()))?;
    client
        .unary(req, PathAndQuery::from_static(SAY), StringCodec)
        .await
}
