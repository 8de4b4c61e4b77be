//! Helpers of the Redis integration tests: the server's URL, unique key prefixes, raw
//! inspection of the stored state, and a private `redis-server` to stop and restart.
//!
//! # Which server the tests use
//! 1. `TOWER_THROTTLE_REDIS_URL` (default `redis://127.0.0.1:6379`), when a server answers
//!    there.
//! 2. Otherwise — or with `TOWER_THROTTLE_REDIS_PRIVATE=1` — a private `redis-server` on a
//!    free port, shared by every test binary of the run: the first one to need it starts it
//!    and writes its port to `<target>/tmp/tower-throttle-redis/port`; the others reuse it.
//!    Each test process leaves its pid in `leases/`; a small `sh` watchdog next to the server
//!    shuts it down once no leaseholder has been alive for a few seconds, so it outlives the
//!    gap between two test binaries and no longer.
//! 3. Where `redis-server` is not installed, the tests fail with the command that installs it.
#![allow(dead_code, unreachable_pub)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;

#[cfg(feature = "redis-cluster")]
pub mod cluster;
pub mod workers;

const URL_ENV: &str = "TOWER_THROTTLE_REDIS_URL";
const PRIVATE_ENV: &str = "TOWER_THROTTLE_REDIS_PRIVATE";
const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// The Redis the tests use (see the module docs): the configured one when it answers, else
/// the run's private `redis-server`. Resolved once per process.
pub fn redis_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        if std::env::var(PRIVATE_ENV).is_ok_and(|v| v == "1") {
            return shared_private_url();
        }
        let configured = std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.into());
        if answers(&configured) {
            return configured;
        }
        let url = shared_private_url();
        eprintln!(
            "redis tests: nothing answers at {configured}; using a private redis-server at {url}"
        );
        url
    })
    .clone()
}

/// Whether a Redis server answers `PING` at `url` within half a second.
fn answers(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut conn).is_ok()
}

/// The command that installs `redis-server` on this machine.
fn install_hint() -> &'static str {
    let has = |tool: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has("apt-get") {
        "sudo apt-get install -y redis-server"
    } else if has("brew") {
        "brew install redis"
    } else if has("dnf") {
        "sudo dnf install -y redis"
    } else {
        "install Redis (https://redis.io/docs/latest/operate/oss_and_stack/install/)"
    }
}

/// Panic, unless `redis-server` can be run.
fn require_redis_server() {
    let found = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        found,
        "the Redis tests need a Redis server: nothing answers at {} and `redis-server` is not \
         on PATH. Install it: {}",
        std::env::var(URL_ENV).unwrap_or_else(|_| DEFAULT_URL.into()),
        install_hint()
    );
}

/// Where the run's private server keeps its port, log and leases.
fn shared_dir() -> PathBuf {
    // Integration tests get the target's `tmp` directory from cargo; the library's own tests
    // (which include this module) find it from their binary, `<target>/<profile>/deps/…`.
    let tmp = option_env!("CARGO_TARGET_TMPDIR")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.join("tmp"))
        })
        .unwrap_or_else(std::env::temp_dir);
    tmp.join("tower-throttle-redis")
}

/// The run's private server: reused when running, else started (under a lock, so that
/// concurrent test binaries start one between them).
fn shared_private_url() -> String {
    require_redis_server();
    let dir = shared_dir();
    std::fs::create_dir_all(dir.join("leases")).expect("create the private Redis directory");
    // The lease first, then the port: the watchdog removes the port before its last look at
    // the leases, so a process that finds the port is always seen (see WATCHDOG).
    std::fs::write(dir.join("leases").join(std::process::id().to_string()), b"")
        .expect("write a lease");
    let _lock = DirLock::take(&dir.join("lock"));
    let port_file = dir.join("port");
    if let Some(port) = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
    {
        if ping(port) {
            return format!("redis://127.0.0.1:{port}");
        }
    }
    let port = free_port();
    // Not waited for: the watchdog outlives this process, to serve the next test binaries.
    #[allow(clippy::zombie_processes)]
    Command::new("sh")
        .args(["-c", WATCHDOG, "watchdog"])
        .arg(&dir)
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run sh");
    wait_until_answers(port, || {
        format!(
            "the private redis-server on port {port} did not start; its log: {}",
            std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default()
        )
    });
    std::fs::write(&port_file, port.to_string()).expect("write the port");
    format!("redis://127.0.0.1:{port}")
}

/// Runs the private server and stops it once no test process holding a lease is alive
/// (`$1`: the shared directory, `$2`: the port). Before it stops, it removes the port file
/// and looks at the leases once more, putting the port back if a process came meanwhile.
const WATCHDOG: &str = r#"
dir=$1 port=$2
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$dir" >"$dir/redis.log" 2>&1 &
srv=$!
alive() {
  found=1
  for f in "$dir"/leases/*; do
    [ -e "$f" ] || continue
    if kill -0 "${f##*/}" 2>/dev/null; then found=0; else rm -f "$f"; fi
  done
  return $found
}
idle=0
while kill -0 "$srv" 2>/dev/null; do
  sleep 1
  if alive; then idle=0; continue; fi
  idle=$((idle + 1))
  [ "$idle" -lt 5 ] && continue
  if [ "$(cat "$dir/port" 2>/dev/null)" = "$port" ]; then rm -f "$dir/port"; fi
  if alive; then echo "$port" >"$dir/port"; idle=0; continue; fi
  break
done
kill "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
"#;

/// A lock between processes: a directory only one of them can create. A lock older than
/// 30 s was left by a crashed process and is broken.
struct DirLock(PathBuf);

impl DirLock {
    fn take(path: &Path) -> Self {
        loop {
            match std::fs::create_dir(path) {
                Ok(()) => return DirLock(path.to_path_buf()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let stale = std::fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > Duration::from_secs(30));
                    if stale {
                        let _ = std::fs::remove_dir(path);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("cannot lock {}: {e}", path.display()),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Whether a server on 127.0.0.1:`port` answers a raw `PING`.
fn ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    c.set_read_timeout(Some(Duration::from_millis(500))).ok();
    let mut buf = [0u8; 7];
    c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Wait up to 10 s for a server on `port`; panic with `why()` if none answers.
fn wait_until_answers(port: u16, why: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ping(port) {
        assert!(std::time::Instant::now() < deadline, "{}", why());
        std::thread::sleep(Duration::from_millis(20));
    }
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
            "Redis at {url} is unreachable ({e}). The Redis tests need a real server: point \
             TOWER_THROTTLE_REDIS_URL at one, or let them start their own (`redis-server` on PATH)."
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
    // EVAL, not EVALSHA: another test may flush the script cache at any moment.
    redis::cmd("EVAL")
        .arg(LUA)
        .arg(1)
        .arg(key)
        .query_async(conn)
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

/// Redis's clock around a call: `(µs before it was sent, its output, µs after its reply)`.
/// Whatever the machine's load, a script run by the call reads a `TIME` within these
/// two: waits and instants it returns can be checked against them exactly, with no margin
/// for how long the call took.
pub async fn on_redis_clock<T>(
    conn: &mut MultiplexedConnection,
    call: impl std::future::Future<Output = T>,
) -> (u64, T, u64) {
    let before = redis_now_us(conn).await;
    let out = call.await;
    let after = redis_now_us(conn).await;
    (before, out, after)
}

/// The wait (µs) Redis answers, to an instant `later` µs after one it decided within
/// `from` (Redis clock), to a call made within `asked`: whatever the machine's load, it
/// lies in this range.
pub fn wait_range(
    from: (u64, u64),
    later: u64,
    asked: (u64, u64),
) -> std::ops::RangeInclusive<u64> {
    (from.0 + later).saturating_sub(asked.1)..=(from.1 + later).saturating_sub(asked.0)
}

/// A duration in whole µs.
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).expect("a duration of a test")
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
        require_redis_server();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `redis-server`: {e}"));
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
        while !ping(self.port) {
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
