//! Helpers of the Redis integration tests: the server's URL, unique key prefixes, raw
//! inspection of the stored state, and a private `redis-server` to stop and restart.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;

pub mod workers;

/// The Redis the tests use: `TOWER_THROTTLE_REDIS_URL`, default `redis://127.0.0.1:6379`.
pub fn redis_url() -> String {
    std::env::var("TOWER_THROTTLE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A key prefix no other test (or run) uses.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "tt-test-{}-{nanos}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A plain connection to the test Redis. Panics, loudly, when it does not answer: these
/// tests never skip.
pub async fn raw(url: &str) -> MultiplexedConnection {
    let fail = |e: &dyn std::fmt::Display| -> ! {
        panic!(
            "Redis at {url} is unreachable ({e}). The Redis tests need a real server: start one \
             (`redis-server`), or point TOWER_THROTTLE_REDIS_URL at one (.ci/redis.sh does this)."
        )
    };
    let client = redis::Client::open(url).unwrap_or_else(|e| fail(&e));
    let connect = client.get_multiplexed_async_connection();
    let mut conn = match tokio::time::timeout(Duration::from_secs(3), connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => fail(&e),
        Err(_) => fail(&"timed out"),
    };
    let pong: String = redis::cmd("PING")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| fail(&e));
    assert_eq!(pong, "PONG");
    conn
}

/// The state of a bucket's key, read atomically: `(pttl ms, µs until the stored state ends)`,
/// the second being `max(tat, pause) − now` on the Redis clock.
pub async fn inspect(conn: &mut MultiplexedConnection, key: &str) -> (i64, i64) {
    const LUA: &str = r"
local v = redis.call('GET', KEYS[1])
if not v then return {redis.call('PTTL', KEYS[1]), -1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(string.match(v, '^(%d+)'))
local p = tonumber(string.match(v, ':(%d+)$')) or 0
return {redis.call('PTTL', KEYS[1]), math.max(tat, p) - now}
";
    redis::Script::new(LUA)
        .key(key)
        .invoke_async(conn)
        .await
        .expect("inspect")
}

/// Assert the invariant of every write: the key has a TTL, > 0 and ≤ the time until the
/// stored state ends (rounded up to ms; 1 ms of slack for the two clocks' rounding).
pub async fn assert_ttl_ok(conn: &mut MultiplexedConnection, key: &str, when: &str) {
    let (pttl, left_us) = inspect(conn, key).await;
    assert!(
        left_us > 0,
        "{when}: key {key} holds no future state ({left_us} µs)"
    );
    let left_ms = (left_us + 999) / 1000;
    assert!(
        pttl > 0 && pttl <= left_ms + 1,
        "{when}: key {key} has PTTL {pttl} ms, state ends in {left_us} µs"
    );
}

/// Redis's clock, µs.
pub async fn redis_now_us(conn: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    s * 1_000_000 + us
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A private `redis-server` on its own port, killed on drop. The shared server is never
/// stopped by the tests.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Start `redis-server` on `port` and wait until it answers.
    pub fn start(port: u16) -> Self {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start `redis-server` ({e}): this test needs the binary on PATH \
                     (Debian: apt-get install redis-server; .ci/redis.sh installs it)"
                )
            });
        let mut server = PrivateRedis {
            port,
            child: Some(child),
        };
        server.wait_ready();
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&mut self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::{Read, Write};
                c.set_read_timeout(Some(Duration::from_millis(500))).ok();
                let mut buf = [0u8; 7];
                if c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut buf).is_ok() {
                    assert_eq!(&buf, b"+PONG\r\n");
                    return;
                }
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("redis-server on port {} exited: {status}", self.port);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send a signal to the server (`STOP` freezes it: connections stay open, nothing
    /// answers; `CONT` thaws it).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("server running").id();
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Kill the server (and wait for it to be gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // A frozen server does not die of SIGKILL until thawed on some systems.
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.stop();
    }
}
