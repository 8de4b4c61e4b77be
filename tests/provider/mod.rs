//! A chat endpoint that meters the way the big language-model APIs do: requests and tokens
//! per rolling minute, a `429` with OpenAI's rate-limit fields, and the usage in the body.
//!
//! `POST /v1/chat/completions` takes `{"messages": [{"content": "..."}], "max_tokens": N}`,
//! and `"stream": true` for an answer in server-sent events whose last event before
//! `[DONE]` carries the usage.
//! A prompt costs one token per four bytes of content; the answer's length is a function of
//! the prompt, at most `max_tokens`. Admission counts the prompt and `max_tokens` against
//! what the last minute used, as the providers do; what is recorded is the real usage.
#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tokio::time::Instant;

const MINUTE: Duration = Duration::from_secs(60);

/// The limits, and what the server saw.
#[derive(Clone)]
pub struct Provider {
    pub rpm: u64,
    pub tpm: u64,
    /// Time to answer, per output token.
    pub per_token: Duration,
    state: Arc<Mutex<Seen>>,
}

/// What the server saw.
#[derive(Debug, Default)]
pub struct Seen {
    /// The requests answered in the last minute: when, and the tokens they used.
    window: VecDeque<(Instant, u64)>,
    /// Every answered request: when, and its tokens.
    pub answered: Vec<(Instant, u64)>,
    /// The refusals: when, and the resource that ran out.
    pub refused: Vec<(Instant, &'static str)>,
}

/// The prompt's tokens and `max_tokens` of a request body, or `None`.
pub fn read_request(body: &[u8]) -> Option<(u64, u64)> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    read_json(&json)
}

fn read_json(json: &serde_json::Value) -> Option<(u64, u64)> {
    let prompt: usize = json["messages"]
        .as_array()?
        .iter()
        .filter_map(|m| m["content"].as_str())
        .map(str::len)
        .sum();
    Some((prompt as u64 / 4, json["max_tokens"].as_u64()?))
}

/// What a request asks for, as a client estimates it before it goes: its prompt's tokens
/// and its `max_tokens`.
pub fn estimate(request: &reqwest::Request) -> tower_throttle::Cost {
    let body = request
        .body()
        .and_then(|b| b.as_bytes())
        .unwrap_or_default();
    let (prompt, max_tokens) = read_request(body).unwrap_or((0, 0));
    let tokens = u32::try_from(prompt + max_tokens).unwrap_or(u32::MAX);
    tower_throttle::Cost::new().and(tower_throttle::Resource::TOKENS, tokens)
}

/// A request body with a prompt of `prompt` tokens asking for up to `max_tokens`.
pub fn request_body(prompt: u64, max_tokens: u64) -> String {
    serde_json::json!({
        "model": "test",
        "messages": [{"role": "user", "content": "word".repeat(prompt as usize)}],
        "max_tokens": max_tokens,
    })
    .to_string()
}

/// A streamed request's body: as [`request_body`], with `"stream": true`.
pub fn streamed_body(prompt: u64, max_tokens: u64) -> String {
    let mut json: serde_json::Value =
        serde_json::from_str(&request_body(prompt, max_tokens)).unwrap();
    json["stream"] = true.into();
    json.to_string()
}

/// The `usage.total_tokens` of a response body, or of one event of a streamed one
/// (`data: {...}`).
pub fn total_tokens(body: &[u8]) -> Option<u32> {
    let body = body.strip_prefix(b"data: ").unwrap_or(body);
    let json: serde_json::Value = serde_json::from_slice(body.trim_ascii()).ok()?;
    u32::try_from(json["usage"]["total_tokens"].as_u64()?).ok()
}

/// A Go-style duration, as OpenAI writes its resets: `1.5s`, `20ms`, `6m0s`.
fn go_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 1.0 {
        format!("{}ms", d.as_millis())
    } else if secs < 60.0 {
        format!("{secs:.3}s")
    } else {
        format!("{}m{:.3}s", d.as_secs() / 60, secs % 60.0)
    }
}

impl Provider {
    pub fn new(rpm: u64, tpm: u64) -> Self {
        Provider {
            rpm,
            tpm,
            per_token: Duration::from_millis(1),
            state: Arc::default(),
        }
    }

    /// Serve on a free port of the loopback interface.
    pub async fn serve(&self) -> SocketAddr {
        let app = Router::new()
            .route("/v1/chat/completions", post(Self::complete))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    /// What the server saw.
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.state.lock().unwrap()
    }

    async fn complete(State(this): State<Provider>, body: Bytes) -> Response {
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(&body) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let Some((prompt, max_tokens)) = read_json(&json) else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        // The answer's length: a function of the prompt, at most `max_tokens`.
        let output = (prompt * 7919 % (max_tokens + 1)).max(1).min(max_tokens);
        let used = prompt + output;
        let decided = {
            let mut seen = this.seen();
            let now = Instant::now();
            while seen.window.front().is_some_and(|(t, _)| now - *t >= MINUTE) {
                seen.window.pop_front();
            }
            let requests = seen.window.len() as u64;
            let tokens: u64 = seen.window.iter().map(|(_, n)| n).sum();
            // When the oldest use that keeps `need` from fitting leaves the window.
            let reset = |need: u64, taken: &dyn Fn(&(Instant, u64)) -> u64, limit: u64| {
                let sum: u64 = seen.window.iter().map(taken).sum();
                let mut left = (sum + need).saturating_sub(limit);
                if left == 0 {
                    return Duration::ZERO;
                }
                for entry in &seen.window {
                    left = left.saturating_sub(taken(entry));
                    if left == 0 {
                        return entry.0 + MINUTE - now;
                    }
                }
                Duration::ZERO
            };
            let reset_requests = reset(1, &|_| 1, this.rpm);
            let reset_tokens = reset(prompt + max_tokens, &|e| e.1, this.tpm);
            let refused = if requests + 1 > this.rpm {
                Some(("requests", reset_requests))
            } else if tokens + prompt + max_tokens > this.tpm {
                Some(("tokens", reset_tokens))
            } else {
                None
            };
            if let Some((what, _)) = refused {
                seen.refused.push((now, what));
            } else {
                seen.window.push_back((now, used));
                seen.answered.push((now, used));
            }
            let mut headers = HeaderMap::new();
            let mut put = |name: &'static str, value: String| {
                headers.insert(name, HeaderValue::from_str(&value).unwrap());
            };
            let (requests, tokens) = match refused {
                Some(_) => (requests, tokens),
                None => (requests + 1, tokens + used),
            };
            put("x-ratelimit-limit-requests", this.rpm.to_string());
            put("x-ratelimit-limit-tokens", this.tpm.to_string());
            put(
                "x-ratelimit-remaining-requests",
                this.rpm.saturating_sub(requests).to_string(),
            );
            put(
                "x-ratelimit-remaining-tokens",
                this.tpm.saturating_sub(tokens).to_string(),
            );
            put("x-ratelimit-reset-requests", go_duration(reset_requests));
            put("x-ratelimit-reset-tokens", go_duration(reset_tokens));
            if let Some((_, wait)) = refused {
                put("retry-after-ms", wait.as_millis().to_string());
                put("retry-after", wait.as_secs().max(1).to_string());
            }
            (refused.is_some(), headers)
        };
        let (refused, headers) = decided;
        if refused {
            let body = r#"{"error":{"type":"rate_limit_exceeded"}}"#;
            return (StatusCode::TOO_MANY_REQUESTS, headers, body).into_response();
        }
        let usage = serde_json::json!({
            "prompt_tokens": prompt, "completion_tokens": output, "total_tokens": used,
        });
        if json["stream"] == true {
            // Ten events of the answer, a tenth of its time apart, then the usage.
            let step = this.per_token * output as u32 / 10;
            let events = futures::stream::unfold(0, move |i| {
                let usage = usage.clone();
                async move {
                    let event = match i {
                        0..10 => {
                            tokio::time::sleep(step).await;
                            r#"{"choices":[{"delta":{"content":"…"}}]}"#.to_owned()
                        }
                        10 => serde_json::json!({"choices": [], "usage": usage}).to_string(),
                        11 => "[DONE]".to_owned(),
                        _ => return None,
                    };
                    let event = Bytes::from(format!("data: {event}\n\n"));
                    Some((Ok::<_, std::convert::Infallible>(event), i + 1))
                }
            });
            let body = axum::body::Body::from_stream(events);
            return (StatusCode::OK, headers, body).into_response();
        }
        tokio::time::sleep(this.per_token * output as u32).await;
        let body = serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": "…"}}],
            "usage": usage,
        });
        (StatusCode::OK, headers, body.to_string()).into_response()
    }
}
