//! [`RejectLayer`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use tower_layer::Layer;

use super::cost::PerResource;
use super::fields::Spec;
use super::limits::{Keyed, Limits, Single};
use super::missing::{FailOnce, MissingKey};
use super::rejected::Rejected;
use super::respond::{Fallback, RespondWith, TooManyRequests};
use super::service::{Config, Reject};
use crate::limit::{KeyedLimit, Limit};
use crate::observe::Observer;
use crate::rate_limit::UnitCost;

/// Rejects requests over the limit with `429 Too Many Requests` instead of waiting: the
/// server side.
///
/// Made by [`RejectLayer::new`] (one bucket for everything) or [`RejectLayer::keyed`] (a
/// bucket per key, and optionally a [`global`](RejectLayer::global) ceiling). Cloning this
/// layer does not create a new bucket: every service it wraps, and every clone of those,
/// draws from the same buckets.
///
/// A rejection carries `Retry-After` (whole seconds, rounded up, never 0), the IETF draft
/// fields `RateLimit-Policy` and `RateLimit`, and the [`Rejected`] in the response
/// extensions. Options:
///
/// - [`x_ratelimit_headers`](Self::x_ratelimit_headers): also `X-RateLimit-Limit`,
///   `-Remaining` and `-Reset`.
/// - [`admitted_headers`](Self::admitted_headers): the rate-limit fields on every response.
/// - [`cost`](Self::cost): charge expensive requests more than one token.
/// - [`max_wait`](Self::max_wait): let a request that would fit soon wait, rather than refuse it.
/// - [`on_reject`](Self::on_reject): build the rejection response yourself.
/// - [`fallback`](Self::fallback): send over-limit requests to another service.
///
/// ```
/// use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
/// use tower_throttle::{Bucket, Quota, RejectLayer};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), std::convert::Infallible> {
/// let mut svc = ServiceBuilder::new()
///     .layer(RejectLayer::new(Bucket::new(Quota::per_minute(1))))
///     .service(service_fn(|_: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("hello")))
///     }));
///
/// let ok = svc.ready().await?.call(http::Request::new(String::new())).await?;
/// assert_eq!(ok.status(), 200);
/// let no = svc.ready().await?.call(http::Request::new(String::new())).await?;
/// assert_eq!(no.status(), 429);
/// assert_eq!(no.headers()["retry-after"], "60");
/// assert_eq!(no.headers()["ratelimit-policy"], "\"default\";q=1;w=60");
/// assert_eq!(no.headers()["ratelimit"], "\"default\";r=0;t=60");
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct RejectLayer<K = (), E = Single, O = TooManyRequests, C = UnitCost> {
    limits: Limits<K, E>,
    on_reject: O,
    cost: C,
    max_wait: Duration,
    x_ratelimit: bool,
    admitted: bool,
    dry_run: bool,
    observer: Option<Arc<dyn Observer>>,
}

impl RejectLayer {
    /// One limit for every request: a [`Bucket`](crate::Bucket), or a limit kept in Redis.
    pub fn new(limit: impl Into<Limit>) -> Self {
        RejectLayer::with_limits(Limits::single(limit.into()))
    }
}

impl<K, E> RejectLayer<K, E> {
    /// One limit per key: `extractor` finds a request's key (see
    /// [`KeyExtractor`](crate::extract::KeyExtractor)), `limit` holds a limit per key (a
    /// [`KeyedBucket`](crate::KeyedBucket), or a limit kept in Redis). Add a ceiling on all
    /// keys together with [`global`](Self::global).
    ///
    /// ```
    /// use axum::{routing::get, Router};
    /// use tower_throttle::extract::PeerIp;
    /// use tower_throttle::keyed::KeyedBucket;
    /// use tower_throttle::{Bucket, Quota, RejectLayer};
    ///
    /// let layer = RejectLayer::keyed(KeyedBucket::new(Quota::per_second(10)), PeerIp::new())
    ///     .global(Bucket::new(Quota::per_second(1000)));
    /// let app: Router = Router::new().route("/", get(|| async { "hello" })).layer(layer);
    /// // Serve with `app.into_make_service_with_connect_info::<SocketAddr>()` so that `PeerIp`
    /// // sees the client address: without it, every request is answered 500.
    /// ```
    pub fn keyed(limit: impl Into<KeyedLimit<K>>, extractor: E) -> Self {
        let keyed = Keyed {
            limit: limit.into(),
            extractor,
            missing: None,
            fail_once: FailOnce::default(),
        };
        RejectLayer::with_limits(Limits::keyed(keyed, None))
    }

    fn with_limits(limits: Limits<K, E>) -> Self {
        RejectLayer {
            limits,
            on_reject: TooManyRequests,
            cost: UnitCost,
            max_wait: Duration::ZERO,
            x_ratelimit: false,
            admitted: false,
            dry_run: false,
            observer: None,
        }
    }
}

impl<K, E, O, C> RejectLayer<K, E, O, C> {
    /// Add a ceiling on all keys together, to a layer made by [`keyed`](RejectLayer::keyed)
    /// (on a layer made by [`new`](RejectLayer::new), `global` takes the place of its bucket).
    ///
    /// A request must fit both its key's bucket and `global`. One refused by its key costs the
    /// global bucket nothing, and one refused by the global bucket costs its key nothing.
    pub fn global(mut self, global: impl Into<Limit>) -> Self {
        self.limits.set_limit(global.into());
        self
    }

    /// What to do with requests that have no key. The default depends on the extractor: see
    /// [`MissingKey`].
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.limits.set_missing(outcome);
        self
    }

    /// Charge each request `cost(&request)` tokens instead of one, so expensive routes weigh
    /// more.
    ///
    /// The cost is charged to the key's bucket and to the global ceiling (or to the single
    /// bucket), and shows in the response fields: `Retry-After` is the wait until that many
    /// tokens are there, `RateLimit` the tokens left after it. A cost above what the limit can
    /// ever hold is refused with no `Retry-After` ([`Denied::ExceedsBurst`](crate::Denied)).
    /// A cost of zero passes without touching the limits.
    ///
    /// ```
    /// use tower_throttle::{Bucket, Quota, RejectLayer};
    ///
    /// let layer = RejectLayer::new(Bucket::new(Quota::per_second(100)))
    ///     .cost(|req: &http::Request<String>| if req.uri().path() == "/search" { 10 } else { 1 });
    /// ```
    pub fn cost<F>(self, cost: F) -> RejectLayer<K, E, O, F> {
        RejectLayer {
            limits: self.limits,
            on_reject: self.on_reject,
            cost,
            max_wait: self.max_wait,
            x_ratelimit: self.x_ratelimit,
            admitted: self.admitted,
            dry_run: self.dry_run,
            observer: self.observer,
        }
    }

    /// Price each request per [`Resource`](crate::Resource): `cost(&request)` names its
    /// requests and, say, its tokens, each charged to the quotas that count it, in the key's
    /// plan and in the global ceiling alike: admitted when every quota has room, charged to
    /// all of them; refused by one, charged to none, with the longest wait. Each quota's
    /// `RateLimit-Policy` member names the resource it counts (`qu`). With
    /// [`max_wait`](Self::max_wait), a request waits for every resource it costs.
    ///
    /// ```
    /// use tower_throttle::extract::{HeaderKey, KeyDigest};
    /// use tower_throttle::keyed::KeyedBucket;
    /// use tower_throttle::{Cost, Plan, Quota, RejectLayer, Resource};
    ///
    /// // Per API key: 60 requests and 100,000 tokens per minute.
    /// let plan = Plan::new(Quota::per_minute(60).burst(60))
    ///     .and(Quota::per_minute(100_000).burst(100_000))
    ///     .counting(Resource::TOKENS);
    /// let keys = HeaderKey::x_api_key();
    /// let layer = RejectLayer::keyed(KeyedBucket::<KeyDigest>::new(plan), keys).cost_per_resource(
    ///     |req: &http::Request<String>| {
    ///         let tokens = req.body().len() as u32 / 4 + 1_000;
    ///         Cost::new().and(Resource::TOKENS, tokens)
    ///     },
    /// );
    /// # drop(layer);
    /// ```
    pub fn cost_per_resource<F>(self, cost: F) -> RejectLayer<K, E, O, PerResource<F>> {
        self.cost(PerResource(cost))
    }

    /// Let a request over the limit wait up to `max_wait` for its turn before it is refused.
    ///
    /// A request that would fit within `max_wait` reserves its turn and waits for it in the
    /// response future (a request that would not is refused at once, without waiting). The
    /// wait applies to the per-key bucket, or to the bucket of a single-bucket layer; the
    /// global ceiling of a keyed layer is checked when the key's turn comes and never queues.
    /// The inner service must be `Clone` (it is, for axum and hyper services). Zero, the
    /// default, never waits.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Also send `X-RateLimit-Limit` (the count per window of the most restrictive limit),
    /// `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds until one more request is
    /// allowed, as a delay). Off by default.
    pub fn x_ratelimit_headers(mut self, on: bool) -> Self {
        self.x_ratelimit = on;
        self
    }

    /// Add `RateLimit-Policy` and `RateLimit` to admitted responses too, so clients can slow
    /// down before they are refused. Off by default (it reads the global bucket's state, which
    /// takes a lock).
    pub fn admitted_headers(mut self, on: bool) -> Self {
        self.admitted = on;
        self
    }

    /// Dry run (shadow mode): decide and record as usual, but let every request through — to
    /// roll out a new limit safely. A request that would have been refused reaches the inner
    /// service with the [`Rejected`] in its request extensions, is reported to the
    /// [`observer`](Self::observer) as a dry-run refusal, and spends no tokens (as a refused
    /// request would not). A dry run never waits: [`max_wait`](Self::max_wait) is ignored.
    pub fn dry_run(mut self, on: bool) -> Self {
        self.dry_run = on;
        self
    }

    /// Report every refusal (and dry-run refusal) to `observer`; see [`observe`](crate::observe).
    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Build the rejection response with `f` (status, body, headers of your choice).
    ///
    /// The rate-limit fields the response does not set are still added, and the [`Rejected`]
    /// is put in its extensions.
    ///
    /// ```
    /// use tower_throttle::{Bucket, Quota, RejectLayer};
    ///
    /// let layer = RejectLayer::new(Bucket::new(Quota::per_second(10)))
    ///     .on_reject(|rejected| {
    ///         let wait = rejected.wait().unwrap_or_default().as_secs_f64();
    ///         let body = format!("{{\"error\":\"slow down\",\"retry_after\":{wait}}}");
    ///         http::Response::builder()
    ///             .status(rejected.status_code())
    ///             .header("content-type", "application/json")
    ///             .body(body)
    ///             .unwrap()
    ///     });
    /// ```
    pub fn on_reject<F, B>(self, f: F) -> RejectLayer<K, E, RespondWith<F>, C>
    where
        F: Fn(&Rejected) -> Response<B>,
    {
        self.with(RespondWith::new(f))
    }

    /// Hand requests over the limit to `service` instead of refusing them: a cached page, a
    /// cheaper answer, a queue.
    ///
    /// The request carries the [`Rejected`] in its extensions; the response gets the
    /// `RateLimit` fields (not `Retry-After`) and the [`Rejected`] too. `service` is cloned for
    /// each such request and driven to readiness before it is called.
    pub fn fallback<F>(self, service: F) -> RejectLayer<K, E, Fallback<F>, C> {
        self.with(Fallback::new(service))
    }

    pub(crate) fn with<P>(self, on_reject: P) -> RejectLayer<K, E, P, C> {
        RejectLayer {
            limits: self.limits,
            on_reject,
            cost: self.cost,
            max_wait: self.max_wait,
            x_ratelimit: self.x_ratelimit,
            admitted: self.admitted,
            dry_run: self.dry_run,
            observer: self.observer,
        }
    }
}

impl<S, K, E, O, C> Layer<S> for RejectLayer<K, E, O, C>
where
    K: Clone,
    E: Clone,
    O: Clone,
    C: Clone,
{
    type Service = Reject<S, K, E, O, C>;

    fn layer(&self, inner: S) -> Self::Service {
        let spec = Spec {
            x_ratelimit: self.x_ratelimit,
            admitted: self.admitted,
        };
        let config = Config {
            limits: self.limits.clone(),
            on_reject: self.on_reject.clone(),
            cost: self.cost.clone(),
            max_wait: if self.dry_run {
                0
            } else {
                u64::try_from(self.max_wait.as_nanos()).unwrap_or(u64::MAX)
            },
            spec,
            dry_run: self.dry_run,
            observer: self.observer.clone(),
        };
        Reject::new(inner, Arc::new(config))
    }
}

impl<K: Clone, E: Clone, O: Clone, C: Clone> Clone for RejectLayer<K, E, O, C> {
    fn clone(&self) -> Self {
        RejectLayer {
            limits: self.limits.clone(),
            on_reject: self.on_reject.clone(),
            cost: self.cost.clone(),
            max_wait: self.max_wait,
            x_ratelimit: self.x_ratelimit,
            admitted: self.admitted,
            dry_run: self.dry_run,
            observer: self.observer.clone(),
        }
    }
}

impl<K, E, O, C> fmt::Debug for RejectLayer<K, E, O, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RejectLayer")
            .field("keyed", &self.limits.keyed_limit().map(|k| k.quota()))
            .field("limit", &self.limits.limit().map(|l| l.quota()))
            .field("max_wait", &self.max_wait)
            .field("x_ratelimit", &self.x_ratelimit)
            .field("admitted_headers", &self.admitted)
            .field("dry_run", &self.dry_run)
            .field("observer", &self.observer)
            .finish_non_exhaustive()
    }
}
