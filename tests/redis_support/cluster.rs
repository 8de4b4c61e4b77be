//! A private 3-primary Redis Cluster on 127.0.0.1, started and stopped by the tests:
//! `redis-server --cluster-enabled yes` on three free ports (each with its cluster bus on
//! port + 10000), joined by `redis-cli --cluster create … --cluster-replicas 0`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use std::net::TcpListener;

/// Three primaries, no replicas; killed (and their directory removed) on drop.
pub struct Cluster {
    pub ports: Vec<u16>,
    dir: PathBuf,
    nodes: Vec<Option<Child>>,
}

/// A free port whose cluster bus port (+ 10000) is free too.
fn free_cluster_port(taken: &[u16]) -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port < 55_000
            && !taken.contains(&port)
            && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
        {
            return port;
        }
    }
}

fn sync_conn(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("cluster node on {port} does not answer: {e}"))
}

impl Cluster {
    /// Start three nodes, create the cluster and wait until every node says it is ok.
    pub fn start() -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("tt-cluster-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut ports = Vec::new();
        for _ in 0..3 {
            let p = free_cluster_port(&ports);
            ports.push(p);
        }
        let mut cluster = Cluster {
            ports,
            dir,
            nodes: Vec::new(),
        };
        for i in 0..3 {
            let child = cluster.spawn(i);
            cluster.nodes.push(Some(child));
        }
        for &p in &cluster.ports {
            wait_for_ping(p);
        }
        let addrs: Vec<String> = cluster
            .ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        cluster.wait_ok();
        cluster
    }

    fn spawn(&self, i: usize) -> Child {
        let port = self.ports[i].to_string();
        Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "1000"])
            .args(["--cluster-require-full-coverage", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `redis-server` ({e}): it must be on PATH"))
    }

    /// The node URLs, for `cluster(...)`.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect()
    }

    /// Wait until every running node reports `cluster_state:ok` and knows all slots.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        for (i, &p) in self.ports.iter().enumerate() {
            if self.nodes.get(i).is_some_and(Option::is_none) {
                continue;
            }
            loop {
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut sync_conn(p))
                    .unwrap();
                if info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster not ok on {p}: {info}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// The index (into `ports`) of the primary owning `key`'s slot.
    pub fn node_of(&self, key: &str) -> usize {
        let mut c = sync_conn(self.ports[0]);
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut c)
            .unwrap();
        // Each range: [start, end, [host, port, id, …], …replicas]; the first node is the
        // primary.
        let raw: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut c).unwrap();
        let int = |v: &redis::Value| match v {
            redis::Value::Int(i) => *i,
            v => panic!("{v:?}"),
        };
        let slots: Vec<(i64, i64, i64)> = raw
            .into_iter()
            .map(|r| {
                let node: Vec<redis::Value> = redis::from_redis_value(r[2].clone()).unwrap();
                (int(&r[0]), int(&r[1]), int(&node[1]))
            })
            .collect();
        let port = slots
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .map(|(_, _, port)| *port)
            .expect("slot owned");
        self.ports
            .iter()
            .position(|&p| i64::from(p) == port)
            .expect("a node of this cluster")
    }

    /// Kill node `i` (SIGKILL: no goodbye).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start node `i` again, with its cluster configuration (same id, same slots), and
    /// wait until the cluster is ok.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none(), "node {i} is running");
        let child = self.spawn(i);
        self.nodes[i] = Some(child);
        wait_for_ping(self.ports[i]);
        self.wait_ok();
    }
}

fn wait_for_ping(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut c) = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_millis(200))
        {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "redis-server on {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
