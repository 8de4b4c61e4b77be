//! Pauses told to every process sharing a limit.
//!
//! A pause empties the limit's bucket in Redis, which voids the instants waiters booked
//! inside it; the process that pauses wakes its own such waiters at once, and publishes the
//! pause on the limit's channel (`{key}:paused`, Redis pub/sub) for the others, each of which
//! listens on a connection of its own and wakes theirs: they book again, after the pause.
//! Best effort: a process that misses a message (its listener reconnecting) lets waiters it
//! booked before the pause go at their instants, within the booking horizon (1 s).
//!
//! The listener connects and subscribes within the connect timeout, and after [`IDLE`]
//! without a message checks its connection with a `PING` answered within the timeout of a
//! decision; otherwise it connects again: a server that stops answering never holds it.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ::redis::aio::PubSub;
use futures_core::Stream;
use tokio::task::AbortHandle;

use super::config::Options;

/// The channel a limit stored at `key` tells its pauses on.
pub(crate) fn channel(key: &str) -> String {
    format!("{key}:paused")
}

/// The channel a keyed limit under `prefix` tells the pauses of its keys on.
pub(crate) fn keyed_channel(prefix: &str) -> String {
    format!("{prefix}:keyed:paused")
}

/// A pause of `remaining` (from when Redis applied it) made by the handle `from`, of the
/// key `key` of a keyed limit (its digest).
pub(crate) fn message(from: u64, remaining: Duration, key: Option<&str>) -> String {
    match key {
        Some(key) => format!("{from} {} {key}", remaining.as_micros()),
        None => format!("{from} {}", remaining.as_micros()),
    }
}

/// The handle a message comes from, the pause it tells and the key paused, if any; `None`
/// for anything else.
fn parse(payload: &str) -> Option<(u64, Duration, Option<&str>)> {
    let mut parts = payload.split(' ');
    let from = parts.next()?.parse().ok()?;
    let us = parts.next()?.parse().ok()?;
    let key = parts.next();
    parts
        .next()
        .is_none()
        .then_some((from, Duration::from_micros(us), key))
}

/// How long the listener waits before connecting again after losing its connection (or
/// failing to subscribe): doubling from the first to the last, back to the first once
/// subscribed (a Redis user without `SUBSCRIBE` costs an attempt every 30 s).
const RECONNECT: (Duration, Duration) = (Duration::from_millis(200), Duration::from_secs(30));

/// How long the listener hears nothing before it checks its connection.
const IDLE: Duration = Duration::from_secs(30);

/// How long the listener waits for its connection: to connect and subscribe, and for the
/// answer to a check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) answer: Duration,
}

/// Something paused elsewhere, by another handle than `me`.
pub(crate) trait Told: Send + Sync + 'static {
    /// Its listener.
    fn listener(&self) -> &Listener;

    /// Another process paused the limit (the key `key` of a keyed one) for `remaining`
    /// from now.
    fn paused_elsewhere(&self, remaining: Duration, key: Option<&str>);
}

/// Listen on `channel` at `url` for the pauses of other handles than `me`, until `target`
/// is gone. `tried` hears when the first attempt to subscribe is over, whatever its outcome.
pub(crate) async fn listen<T: Told>(
    url: String,
    channel: String,
    timeouts: Timeouts,
    me: u64,
    target: Weak<T>,
    tried: tokio::sync::oneshot::Sender<()>,
) {
    let Ok(client) = ::redis::Client::open(url) else {
        return;
    };
    let mut tried = Some(tried);
    let mut backoff = RECONNECT.0;
    while target.strong_count() > 0 {
        let subscribed = tokio::time::timeout(timeouts.connect, subscribe(&client, &channel)).await;
        if let Some(first) = tried.take() {
            let _ = first.send(());
        }
        if let Ok(Ok(mut pubsub)) = subscribed {
            backoff = RECONNECT.0;
            while let Some(msg) = next(&mut pubsub, timeouts.answer).await {
                let Some(target) = target.upgrade() else {
                    return;
                };
                let told = msg.get_payload::<String>().ok();
                if let Some((from, remaining, key)) = told.as_deref().and_then(parse) {
                    if from != me {
                        target.paused_elsewhere(remaining, key);
                    }
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(RECONNECT.1);
    }
}

/// Where a handle listens, and how long its build waits for the first attempt: one
/// server's URL (a cluster's pub/sub is left out: its waiters learn another process's
/// pause when they book again); the connect timeout, or nothing when connecting lazily.
pub(crate) struct Subscribe {
    url: String,
    wait: Duration,
    timeouts: Timeouts,
}

impl Subscribe {
    pub(crate) fn of(options: &Options) -> Option<Self> {
        let url = options.url.clone().filter(|_| options.cluster.is_none())?;
        let wait = if options.lazy {
            Duration::ZERO
        } else {
            options.connect_timeout
        };
        let timeouts = Timeouts {
            connect: options.connect_timeout,
            answer: options.timeout,
        };
        Some(Subscribe {
            url,
            wait,
            timeouts,
        })
    }
}

/// A handle's listener: its number in the messages, and the task, stopped with the handle.
#[derive(Debug)]
pub(crate) struct Listener {
    id: u64,
    task: OnceLock<AbortHandle>,
}

impl Listener {
    pub(crate) fn new() -> Self {
        Listener {
            id: handle_id(),
            task: OnceLock::new(),
        }
    }

    /// This handle, in the pauses it tells the other processes.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Some(task) = self.task.get() {
            task.abort();
        }
    }
}

/// Start listening on `channel` for `target` (in the background, while a runtime runs),
/// and wait until the first attempt to subscribe is over, at most as long as `subscribe`
/// says.
pub(crate) async fn start<T: Told>(subscribe: Option<Subscribe>, channel: String, target: &Arc<T>) {
    let (Some(sub), Ok(rt)) = (subscribe, tokio::runtime::Handle::try_current()) else {
        return;
    };
    let (tx, rx) = tokio::sync::oneshot::channel();
    let listener = target.listener();
    let task = rt.spawn(listen(
        sub.url,
        channel,
        sub.timeouts,
        listener.id,
        Arc::downgrade(target),
        tx,
    ));
    let _ = listener.task.set(task.abort_handle());
    if !sub.wait.is_zero() {
        // Built when the others' pauses can be heard (or the first attempt failed, or
        // took longer than `wait`: the listener keeps trying).
        let _ = tokio::time::timeout(sub.wait, rx).await;
    }
}

/// A number for a handle, apart from every other's (in this process and, almost surely, in
/// any other).
fn handle_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

async fn subscribe(client: &::redis::Client, channel: &str) -> ::redis::RedisResult<PubSub> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub)
}

/// The next message, or `None` once the connection is lost or, after [`IDLE`] without a
/// message, does not answer a `PING` within `answer`.
async fn next(pubsub: &mut PubSub, answer: Duration) -> Option<::redis::Msg> {
    loop {
        let heard = {
            let mut stream = std::pin::pin!(pubsub.on_message());
            let message = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx));
            tokio::time::timeout(IDLE, message).await
        };
        match heard {
            Ok(message) => return message,
            Err(_) => {
                let ping = pubsub.ping::<::redis::Value>();
                if !matches!(tokio::time::timeout(answer, ping).await, Ok(Ok(_))) {
                    return None;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    struct Deaf(Listener);

    impl Told for Deaf {
        fn listener(&self) -> &Listener {
            &self.0
        }

        fn paused_elsewhere(&self, _: Duration, _: Option<&str>) {}
    }

    const TIMEOUTS: Timeouts = Timeouts {
        connect: Duration::from_secs(1),
        answer: Duration::from_secs(1),
    };

    /// A server that accepts connections and never answers: the first attempt to
    /// subscribe ends with the connect timeout.
    #[tokio::test(start_paused = true)]
    async fn a_server_that_never_answers_does_not_hold_the_listener() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let target = Arc::new(Deaf(Listener::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(listen(
            url,
            "c".into(),
            TIMEOUTS,
            1,
            Arc::downgrade(&target),
            tx,
        ));
        let tried = tokio::time::timeout(Duration::from_secs(60), rx).await;
        assert!(tried.is_ok(), "still connecting");
        task.abort();
    }

    /// The RESP arrays in `buf` (consumed): each command's first word, upper case.
    fn commands(buf: &mut Vec<u8>) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let text = String::from_utf8_lossy(buf).into_owned();
            let mut lines = text.split("\r\n");
            let Some(n) = lines
                .next()
                .and_then(|l| l.strip_prefix('*')?.parse::<usize>().ok())
            else {
                return out;
            };
            let mut used = format!("*{n}\r\n").len();
            let mut first = None;
            for _ in 0..n {
                let (Some(len), Some(word)) = (lines.next(), lines.next()) else {
                    return out;
                };
                used += len.len() + word.len() + 4;
                first.get_or_insert(word.to_ascii_uppercase());
            }
            if used > buf.len() {
                return out;
            }
            buf.drain(..used);
            out.extend(first);
        }
    }

    /// A server that subscribes the listener, then answers nothing (a `PING` included):
    /// the listener connects again once the check goes unanswered.
    #[tokio::test(start_paused = true)]
    async fn a_connection_that_stops_answering_is_replaced() {
        let server = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", server.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        let fake = tokio::spawn(async move {
            loop {
                let (mut conn, _) = server.accept().await.unwrap();
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while let Ok(n) = conn.read(&mut chunk).await {
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&chunk[..n]);
                        for command in commands(&mut buf) {
                            let reply: &[u8] = match command.as_str() {
                                "SUBSCRIBE" => b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n",
                                "PING" => b"",
                                _ => b"+OK\r\n",
                            };
                            let _ = conn.write_all(reply).await;
                        }
                    }
                });
            }
        });
        let target = Arc::new(Deaf(Listener::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(listen(
            url,
            "c".into(),
            TIMEOUTS,
            1,
            Arc::downgrade(&target),
            tx,
        ));
        rx.await.unwrap();
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(
            accepted.load(Ordering::SeqCst) >= 2,
            "never connected again"
        );
        task.abort();
        fake.abort();
    }

    #[test]
    fn a_message_says_who_paused_and_for_how_long() {
        let m = message(42, Duration::from_millis(1_500), None);
        assert_eq!(parse(&m), Some((42, Duration::from_millis(1_500), None)));
        let m = message(7, Duration::from_micros(3), Some("ab12"));
        assert_eq!(parse(&m), Some((7, Duration::from_micros(3), Some("ab12"))));
        assert_eq!(parse("garbage"), None);
        assert_eq!(parse("1 -5"), None);
        assert_eq!(parse("1 2 k extra"), None);
        assert_eq!(parse(""), None);
        assert_eq!(channel("tt:{api}"), "tt:{api}:paused");
        assert_eq!(keyed_channel("tt"), "tt:keyed:paused");
    }
}
