//! How the retry policy reads a gRPC response (gRFC A6).
//!
//! Only a **trailers-only** response (the status in the headers) can be retried: once a
//! server has sent response headers the call is committed, and its status comes in the
//! trailers, after messages the caller may already be reading.

use http::{HeaderMap, StatusCode};
use tonic::Code;

use super::wire::{header_code, pushback, Pushback};
use crate::budget::RetryBudget;
use crate::headers::grpc::is_grpc;
use crate::retry_after::classify::{Classify, Kind, Reading};

/// gRPC's words for "slow down", and A6's retry throttling.
#[derive(Debug, Clone)]
pub(crate) struct Grpc {
    /// The codes retried (A6 `retryableStatusCodes`).
    pub(crate) retryable: Vec<Code>,
    /// A6 retry throttling: successes deposit, failures take.
    pub(crate) throttle: Option<RetryBudget>,
}

impl Default for Grpc {
    fn default() -> Self {
        Grpc {
            retryable: vec![Code::ResourceExhausted, Code::Unavailable],
            throttle: None,
        }
    }
}

impl Classify for Grpc {
    /// A trailers-only gRPC response; `None` for any other (a committed one is left to the
    /// HTTP rules, which read its quota fields).
    fn classify(&self, status: StatusCode, headers: &HeaderMap) -> Option<Reading> {
        if status != StatusCode::OK || !is_grpc(headers) {
            return None;
        }
        let throttle = self.throttle.as_ref();
        let Some(code) = header_code(headers) else {
            // Response headers: committed. Counted as a success, the status being in trailers
            // the layer does not wait for.
            throttle.map(RetryBudget::deposit);
            return None;
        };
        let kind = if code == Code::Ok {
            throttle.map(RetryBudget::deposit);
            Kind::Final
        } else if !self.retryable.contains(&code) {
            Kind::Final // not a failure for the throttle (A6)
        } else {
            throttle.map(RetryBudget::take);
            let retry = throttle.is_none_or(RetryBudget::allows_retry);
            if !retry {
                trace_event!(warn, ?code, "retries throttled; returning the failure");
            }
            match pushback(headers) {
                Pushback::Stop => {
                    trace_event!(debug, ?code, "server push-back: do not retry");
                    Kind::Final
                }
                // A code in the retryable set is resent for any RPC, as A6 has it (gRPC has
                // no idempotency marker; the set is the service owner's promise): the
                // push-back is a refusal, which pauses the shared bucket like a 429.
                Pushback::After(cooldown) => Kind::PushBack {
                    cooldown,
                    unprocessed: true,
                    retry,
                },
                Pushback::Absent if retry => Kind::Failed {
                    floor: None,
                    any_method: true,
                },
                Pushback::Absent => Kind::Final,
            }
        };
        Some(Reading {
            kind,
            stated: None,
            spent_for: None,
            spent: None,
            provider: Vec::new(),
        })
    }
}
