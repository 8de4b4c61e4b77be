//! The connection a limit's scripts run on: one server (a primary, or a cluster-aware
//! proxy) through a reconnecting connection manager, or a Redis Cluster through the
//! `redis` crate's cluster client (feature `redis-cluster`).
//!
//! Both multiplex every call over one connection per server, reconnect by themselves, and
//! are cheap to clone. The cluster client routes each script by the slot of its first key,
//! follows `MOVED` and `ASK` redirections, refreshes its slot map after a failover, and
//! loads scripts on every primary (`SCRIPT LOAD` goes to all of them; a restarted primary
//! that answers `NOSCRIPT` gets it again).

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

use super::config::Options;
use super::error::{RedisError, RedisErrorKind};

/// How the connection manager reconnects: quickly, and often.
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(20);
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);
const RECONNECT_RETRIES: usize = 4;

/// Where a limit lives.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster.
    #[cfg(feature = "redis-cluster")]
    Cluster(::redis::cluster_async::ClusterConnection),
}

impl Conn {
    /// The connection `options` name: a URL, or (feature `redis-cluster`) a cluster's nodes.
    pub(crate) async fn of(options: &Options) -> Result<Self, RedisError> {
        let (timeout, connect_timeout) = (options.timeout, options.connect_timeout);
        match (&options.url, &options.cluster) {
            (Some(url), None) => Conn::single(url, timeout, connect_timeout),
            (None, Some(nodes)) => {
                if nodes.is_empty() {
                    return Err(RedisError::config("redis cluster: no node given"));
                }
                if options.lazy {
                    return Err(RedisError::config(
                        "a redis cluster connects at build: connect_lazily is not supported with it",
                    ));
                }
                #[cfg(feature = "redis-cluster")]
                return Conn::cluster(nodes, timeout, connect_timeout).await;
                #[cfg(not(feature = "redis-cluster"))]
                return Err(RedisError::config(
                    "a redis cluster needs the `redis-cluster` feature",
                ));
            }
            (Some(_), Some(_)) => Err(RedisError::config(
                "set either a redis url or a cluster's nodes, not both",
            )),
            (None, None) => Err(RedisError::config("redis url not set")),
        }
    }

    /// A connection to the server at `url`, made on first use.
    fn single(url: &str, timeout: Duration, connect_timeout: Duration) -> Result<Self, RedisError> {
        let client = ::redis::Client::open(url)
            .map_err(|e| RedisError::with_source(RedisErrorKind::Config, "invalid redis url", e))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(timeout))
            .set_min_delay(RECONNECT_MIN_DELAY)
            .set_max_delay(RECONNECT_MAX_DELAY)
            .set_number_of_retries(RECONNECT_RETRIES);
        let conn = ConnectionManager::new_lazy_with_config(client, config).map_err(|e| {
            RedisError::with_source(RedisErrorKind::Config, "invalid redis configuration", e)
        })?;
        Ok(Conn::Single(conn))
    }

    /// A connection to the cluster that `nodes` belong to (any of them will do: the client
    /// learns the others), made now: the cluster client learns the slot map as it connects.
    #[cfg(feature = "redis-cluster")]
    async fn cluster(
        nodes: &[String],
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, RedisError> {
        let client = ::redis::cluster::ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .connection_timeout(connect_timeout)
            .response_timeout(timeout)
            // The caller bounds each call by the timeout and applies its failure policy;
            // the client retries redirections and reconnections within that.
            .retries(2)
            .min_retry_wait(5)
            .max_retry_wait(50)
            .build()
            .map_err(|e| {
                RedisError::with_source(RedisErrorKind::Config, "invalid redis cluster nodes", e)
            })?;
        match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
            Ok(Ok(conn)) => Ok(Conn::Cluster(conn)),
            Ok(Err(e)) => Err(RedisError::from_client(e)),
            Err(_) => Err(RedisError::new(
                RedisErrorKind::Timeout,
                "the redis cluster did not answer within the connect timeout",
            )),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "redis-cluster")]
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
