//! How the retry policy reads a gRPC response (gRFC A6).
//!
//! Only a **trailers-only** response (the status in the headers) can be retried: once a
//! server has sent response headers the call is committed, and its status comes in the
//! trailers, after messages the caller may already be reading.

use http::{HeaderMap, StatusCode};
use tonic::Code;

use super::wire::{header_code, is_grpc, pushback, Pushback};
use crate::retry_after::{Action, Attempt, Policy, RetryBudget, Verdict};

/// The gRPC part of the retry policy.
#[derive(Debug, Clone)]
pub(crate) struct GrpcPolicy {
    /// The codes retried (A6 `retryableStatusCodes`).
    pub(crate) retryable: Vec<Code>,
    /// A6 retry throttling: successes deposit, failures take.
    pub(crate) throttle: Option<RetryBudget>,
}

impl Default for GrpcPolicy {
    fn default() -> Self {
        GrpcPolicy {
            retryable: vec![Code::ResourceExhausted, Code::Unavailable],
            throttle: None,
        }
    }
}

/// The verdict on a gRPC response, or `None` when the response is not one (or is committed,
/// and so left to the HTTP rules, which read its quota headers and return it).
pub(crate) fn on_response(
    policy: &Policy,
    status: StatusCode,
    headers: &HeaderMap,
    a: &Attempt<'_>,
) -> Option<Verdict> {
    if status != StatusCode::OK || !is_grpc(headers) {
        return None;
    }
    let grpc = &policy.grpc;
    let throttle = grpc.throttle.as_ref();
    let Some(code) = header_code(headers) else {
        // Response headers: committed. Counted as a success, the status being in trailers
        // the layer does not wait for.
        throttle.map(RetryBudget::deposit);
        return None;
    };
    let give_up = Verdict {
        action: Action::Return,
        cooldown: None,
    };
    if code == Code::Ok {
        throttle.map(RetryBudget::deposit);
        return Some(give_up);
    }
    if !grpc.retryable.contains(&code) {
        return Some(give_up); // final; not a failure for the throttle (A6)
    }
    throttle.map(RetryBudget::take);
    let throttled = throttle.is_some_and(|t| !t.allows_retry());
    if throttled {
        trace_event!(warn, ?code, "retries throttled; returning the failure");
    }
    match pushback(headers) {
        Pushback::Stop => {
            trace_event!(debug, ?code, "server push-back: do not retry");
            Some(give_up)
        }
        Pushback::After(cooldown) => {
            // A code in the retryable set is resent for any RPC, as A6 has it (gRPC has no
            // idempotency marker; the set is the service owner's promise): the push-back is
            // handled as a refusal, which pauses the shared bucket like a 429.
            let mut verdict = policy.on_push_back(
                StatusCode::TOO_MANY_REQUESTS,
                Ok(Some(cooldown)),
                None,
                None,
                false,
                a,
            );
            if throttled {
                verdict.action = Action::Return;
            }
            Some(verdict)
        }
        Pushback::Absent => {
            let action = if !throttled && policy.may_retry(a) {
                policy.backoff(a, None)
            } else {
                Action::Return
            };
            Some(Verdict {
                action,
                cooldown: None,
            })
        }
    }
}
