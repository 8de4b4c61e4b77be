//! The settings both builders share.

use std::time::Duration;

use super::failure::FailurePolicy;
use super::key::DEFAULT_PREFIX;
use crate::Algorithm;

/// Settings shared by both builders.
#[derive(Clone)]
pub(crate) struct Options {
    pub(crate) url: Option<String>,
    /// A Redis Cluster's nodes, instead of `url`.
    pub(crate) cluster: Option<Vec<String>>,
    pub(crate) prefix: String,
    /// The prefix was set (a keyed limit must name its own).
    pub(crate) prefix_named: bool,
    pub(crate) policy: FailurePolicy,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) probe_interval: Duration,
    pub(crate) max_pause: Duration,
    pub(crate) lazy: bool,
    pub(crate) algorithm: Algorithm,
    /// Leases (bucket only): the most tokens one lease takes, and how long it lasts.
    pub(crate) lease: Option<(u32, Duration)>,
    /// The share kept for critical requests (bucket only; 0: none).
    pub(crate) reserve: f64,
    /// The priority classes' weights, when they rank waiters across processes (bucket only).
    pub(crate) weights: Option<[u32; 3]>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            url: None,
            cluster: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            prefix_named: false,
            policy: FailurePolicy::default(),
            timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(1),
            probe_interval: Duration::from_millis(500),
            max_pause: Duration::from_secs(3600),
            lazy: false,
            algorithm: Algorithm::TokenBucket,
            lease: None,
            reserve: 0.0,
            weights: None,
        }
    }
}

impl std::fmt::Debug for Options {
    // The URL may carry a password: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("cluster", &self.cluster.as_ref().map(Vec::len))
            .field("prefix", &self.prefix)
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("probe_interval", &self.probe_interval)
            .field("max_pause", &self.max_pause)
            .field("lazy", &self.lazy)
            .field("algorithm", &self.algorithm)
            .field("lease", &self.lease)
            .field("reserve", &self.reserve)
            .field("weights", &self.weights)
            .finish_non_exhaustive()
    }
}
