//! [`RedisError`]: the Redis backend failed. A decision returns the crate-wide
//! [`Denied`], whose [`Backend`](Denied::Backend) case carries it.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::{BackendError, Denied};

/// What went wrong with Redis, as told by [`RedisError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RedisErrorKind {
    /// The configuration cannot work: a bad URL, key prefix, key name, fraction or quota.
    /// Returned by the builders, never by a decision.
    Config,
    /// Redis could not be reached: connection refused or dropped, or a recent failure is
    /// still fresh (decisions skip Redis for a short while after one; see
    /// [`RedisBucketBuilder::probe_interval`](super::RedisBucketBuilder::probe_interval)).
    Unavailable,
    /// Redis did not answer within the configured timeout.
    Timeout,
    /// The bucket's key holds a value of another type (a list, a hash, …): something else
    /// writes under this key prefix.
    WrongType,
    /// Redis answered something the script never returns.
    Garbage,
    /// Redis refused the command (`READONLY` replica, `NOPERM`, out of memory, scripting
    /// disabled, …).
    Server,
}

/// The Redis backend failed: unreachable, slow, a key of the wrong type, a reply that makes
/// no sense, or a configuration that cannot work.
///
/// The `redis` client's own error, when there is one, is the [`source`](StdError::source).
/// Cloning is cheap (the source is shared).
#[derive(Clone)]
pub struct RedisError {
    kind: RedisErrorKind,
    message: &'static str,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl RedisError {
    pub(crate) fn new(kind: RedisErrorKind, message: &'static str) -> Self {
        RedisError {
            kind,
            message,
            source: None,
        }
    }

    pub(crate) fn with_source(
        kind: RedisErrorKind,
        message: &'static str,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        RedisError {
            kind,
            message,
            source: Some(Arc::new(source)),
        }
    }

    pub(crate) fn config(message: &'static str) -> Self {
        Self::new(RedisErrorKind::Config, message)
    }

    /// Classify an error of the `redis` client.
    pub(crate) fn from_client(e: ::redis::RedisError) -> Self {
        let (kind, message) = if e.code() == Some("WRONGTYPE") {
            (
                RedisErrorKind::WrongType,
                "redis key holds a value of the wrong type",
            )
        } else if e.is_timeout() {
            (RedisErrorKind::Timeout, "redis timed out")
        } else if e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_unrecoverable_error()
        {
            (RedisErrorKind::Unavailable, "redis unavailable")
        } else {
            match e.kind() {
                ::redis::ErrorKind::Parse | ::redis::ErrorKind::UnexpectedReturnType => {
                    (RedisErrorKind::Garbage, "redis sent an unexpected reply")
                }
                ::redis::ErrorKind::InvalidClientConfig => {
                    (RedisErrorKind::Config, "invalid redis configuration")
                }
                ::redis::ErrorKind::AuthenticationFailed => {
                    (RedisErrorKind::Server, "redis authentication failed")
                }
                ::redis::ErrorKind::Server(_) => {
                    (RedisErrorKind::Server, "redis refused the command")
                }
                _ => (RedisErrorKind::Unavailable, "redis unavailable"),
            }
        };
        Self::with_source(kind, message, e)
    }

    /// What went wrong.
    pub fn kind(&self) -> RedisErrorKind {
        self.kind
    }

    /// Whether this failure concerns one key only (Redis itself is healthy).
    pub(crate) fn is_key_specific(&self) -> bool {
        self.kind == RedisErrorKind::WrongType
    }
}

impl fmt::Debug for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.message)
    }
}

impl StdError for RedisError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

impl From<RedisError> for Denied {
    fn from(e: RedisError) -> Self {
        Denied::Backend(BackendError::new(e))
    }
}

impl BackendError {
    /// The Redis backend's error, when the Redis backend failed.
    pub fn redis(&self) -> Option<&RedisError> {
        (self.get_ref() as &(dyn StdError + 'static)).downcast_ref()
    }
}
