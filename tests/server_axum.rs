//! End to end over real sockets: the axum example on 127.0.0.1:0, and peer-IP keys from
//! axum's `ConnectInfo`.

#[path = "../examples/axum_server.rs"]
#[allow(dead_code)]
mod example;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower_throttle::headers::read_quota_hint;
use tower_throttle::Quota;

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>;

struct Reply {
    status: StatusCode,
    headers: http::HeaderMap,
    body: String,
}

impl Reply {
    fn field(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no {name} field"))
            .to_str()
            .unwrap()
    }

    fn fields(&self, name: &str) -> Vec<&str> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    }
}

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

async fn get(client: &HttpClient, addr: SocketAddr, key: Option<&str>) -> Reply {
    let mut req = Request::get(format!("http://{addr}/"));
    if let Some(key) = key {
        req = req.header("x-api-key", key);
    }
    let res = client
        .request(req.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = res.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

#[tokio::test]
async fn the_axum_example_end_to_end() {
    // 3 per minute per key, 5 per minute in all: the test runs in well under a second.
    let addr = serve(example::app(Quota::per_minute(3), Quota::per_minute(5))).await;
    let client = client();

    for left in (0..3).rev() {
        let reply = get(&client, addr, Some("alice")).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.body, "hello\n");
        assert_eq!(
            reply.fields("ratelimit-policy"),
            ["\"per-key\";q=3;w=60", "\"global\";q=5;w=60"]
        );
        assert_eq!(
            reply.fields("ratelimit")[0],
            format!("\"per-key\";r={left};t=20")
        );
        let hint = read_quota_hint(&reply.headers, SystemTime::now()).unwrap();
        assert_eq!(hint.remaining, left);
        assert_eq!(reply.field("x-ratelimit-remaining"), left.to_string());
    }

    let refused = get(&client, addr, Some("alice")).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.body, "Too Many Requests\n");
    assert_eq!(refused.field("retry-after"), "20");
    assert_eq!(refused.field("ratelimit"), "\"per-key\";r=0;t=20");
    assert_eq!(refused.field("x-ratelimit-limit"), "3");
    let hint = read_quota_hint(&refused.headers, SystemTime::now()).unwrap();
    assert_eq!(
        (hint.remaining, hint.reset),
        (0, Some(Duration::from_secs(20)))
    );

    // Other keys have their own buckets, under the global ceiling of 5.
    assert_eq!(get(&client, addr, Some("bob")).await.status, StatusCode::OK);
    assert_eq!(
        get(&client, addr, Some("carol")).await.status,
        StatusCode::OK
    );
    let ceiling = get(&client, addr, Some("dave")).await;
    assert_eq!(ceiling.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(ceiling.field("retry-after"), "12");
    assert_eq!(ceiling.field("ratelimit"), "\"global\";r=0;t=12");
    // Dave's refusal by the ceiling cost his key nothing, nor did alice's refusal cost the
    // ceiling anything: both are visible in the next answers.
    let anonymous = get(&client, addr, None).await;
    assert_eq!(anonymous.status, StatusCode::TOO_MANY_REQUESTS);
}

#[cfg(feature = "axum")]
#[tokio::test]
async fn peer_ip_from_axum_connect_info() {
    use axum::routing::get as route;
    use tower_throttle::extract::PeerIp;
    use tower_throttle::keyed::KeyedBucket;
    use tower_throttle::RejectLayer;

    let app = || {
        axum::Router::new()
            .route("/", route(|| async { "hello\n" }))
            .layer(RejectLayer::keyed(
                KeyedBucket::new(Quota::per_minute(2)),
                PeerIp::new(),
            ))
    };
    let client = client();

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let with_info = app().into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, with_info).await.unwrap() });
    // Every connection from 127.0.0.1 shares one bucket, whatever its port: a new client is
    // a new connection.
    for _ in 0..2 {
        assert_eq!(
            get(&self::client(), addr, None).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(
        get(&self::client(), addr, None).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Served without connect info there is no peer address: a wiring mistake, answered 500
    // every time (not one bucket shared by every client, not let through).
    let addr = serve(app()).await;
    for _ in 0..3 {
        let reply = get(&client, addr, None).await;
        assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(reply.body, "Internal Server Error\n");
    }
}
