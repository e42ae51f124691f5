//! Redis Cluster for the tests: the shared one that `scripts/redis-cluster.sh`
//! starts for `bash scripts/test-all.sh` (its node URLs in
//! `REDIS_CLUSTER_URLS`), and [`OwnCluster`], six `redis-server` processes a
//! test owns (to kill a primary), stopped when dropped.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use crate::require::{self, SETUP};

/// The shared cluster's node URLs (`REDIS_CLUSTER_URLS`, comma-separated),
/// once its first node answers `cluster_state:ok`.
///
/// # Panics
///
/// With one line naming [`SETUP`] when the variable is unset or the cluster
/// does not answer.
#[track_caller]
pub fn shared_urls() -> Vec<String> {
    let urls: Vec<String> = std::env::var("REDIS_CLUSTER_URLS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    if urls.is_empty() {
        panic!("no Redis Cluster (REDIS_CLUSTER_URLS is not set): run `{SETUP}` (it starts one)");
    }
    match cluster_info(&urls[0]) {
        Some(info) if info.contains("cluster_state:ok") => urls,
        Some(_) => panic!(
            "the Redis Cluster at {} is not ok (cluster_state): run `{SETUP}` (it starts one)",
            urls[0]
        ),
        None => panic!(
            "no Redis Cluster answers at {} (REDIS_CLUSTER_URLS): run `{SETUP}` (it starts one)",
            urls[0]
        ),
    }
}

/// `CLUSTER INFO` of the node at `url`, if it answers.
fn cluster_info(url: &str) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-u", url, "cluster", "info"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && text.contains("cluster_state")).then_some(text)
}

/// `redis-cli -p port args...` on 127.0.0.1: its stdout, or `None` when it
/// fails.
pub fn cli(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

/// Waits (at most `limit`) until every replica of the primary at `port`
/// has acknowledged all of its writes so far: their `INFO replication`
/// offsets reach the primary's. (`WAIT` from another connection would not
/// do: it waits only for that connection's own writes.)
pub fn replicas_caught_up(port: u16, limit: std::time::Duration) -> bool {
    let field = |info: &str, name: &str| -> Option<u64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let started = std::time::Instant::now();
    while started.elapsed() < limit {
        if let Some(info) = cli(port, &["info", "replication"]) {
            let master = field(&info, "master_repl_offset:");
            // `slaveN:ip=…,port=…,state=online,offset=N,lag=…`
            let offsets: Vec<u64> = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .filter_map(|l| {
                    l.split(',')
                        .find_map(|kv| kv.strip_prefix("offset="))
                        .and_then(|v| v.trim().parse().ok())
                })
                .collect();
            if let Some(master) = master {
                if !offsets.is_empty() && offsets.iter().all(|&o| o >= master) {
                    return true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

/// The port of a `redis://127.0.0.1:PORT` URL.
pub fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of the node at `port`).
pub fn keyslot(port: u16, key: &str) -> u16 {
    cli(port, &["cluster", "keyslot", key])
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("CLUSTER KEYSLOT {key} on port {port}"))
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node's port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a primary (and not failed).
    pub primary: bool,
    /// Whether the cluster flags it failed.
    pub failed: bool,
    /// The slot ranges it serves (inclusive), for a primary.
    pub slots: Vec<(u16, u16)>,
}

impl NodeInfo {
    /// Whether this node serves `slot`.
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
    }
}

/// `CLUSTER NODES` as the node at `port` sees it.
pub fn nodes(port: u16) -> Option<Vec<NodeInfo>> {
    let text = cli(port, &["cluster", "nodes"])?;
    Some(
        text.lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let address = fields.get(1)?;
                let port = address.split(['@', ',']).next()?.rsplit(':').next()?;
                let flags = fields.get(2)?;
                let slots = fields
                    .iter()
                    .skip(8)
                    .filter(|s| !s.starts_with('['))
                    .filter_map(|s| match s.split_once('-') {
                        Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                        None => s.parse().ok().map(|a| (a, a)),
                    })
                    .collect();
                Some(NodeInfo {
                    port: port.parse().ok()?,
                    primary: flags.contains("master") && !flags.contains("fail"),
                    failed: flags.contains("fail"),
                    slots,
                })
            })
            .collect(),
    )
}

/// Six `redis-server` processes on free loopback ports, joined into a
/// cluster of three primaries with a replica each; every process is killed
/// (and the directory removed) when this is dropped, even on panic.
///
/// Nodes run with a 1 s `cluster-node-timeout` (a killed primary's replica
/// takes over within a few seconds) and `cluster-require-full-coverage no`
/// (the other primaries keep serving meanwhile).
#[derive(Debug)]
pub struct OwnCluster {
    nodes: Vec<(u16, Option<Child>)>,
    dir: PathBuf,
}

impl OwnCluster {
    /// Starts the six nodes and creates the cluster; returns once every node
    /// reports `cluster_state:ok` and sees three replicas in sync.
    ///
    /// # Panics
    ///
    /// When `redis-server` is missing (one line naming [`SETUP`]) or the
    /// cluster does not form within 30 s.
    #[track_caller]
    pub fn start() -> Self {
        require::redis_server();
        let dir =
            std::env::temp_dir().join(format!("x402-own-cluster-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        // One cluster forms at a time in this process: two picking ports at
        // once could pick the same ones.
        static STARTING: Mutex<()> = Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(PoisonError::into_inner);
        for port in free_ports(6) {
            let child = spawn_node(port, &cluster.dir);
            cluster.nodes.push((port, Some(child)));
        }
        // A port can be taken between the check and the bind (by another
        // process's connection): a node that exited is started again on
        // another port.
        for i in 0..cluster.nodes.len() {
            let mut attempts = 0;
            loop {
                let port = cluster.nodes[i].0;
                let answers = || cli(port, &["ping"]).is_some_and(|s| s.trim() == "PONG");
                let started = Instant::now();
                let mut exited = false;
                while !answers() && started.elapsed() < Duration::from_secs(10) {
                    if let Some(child) = cluster.nodes[i].1.as_mut() {
                        if matches!(child.try_wait(), Ok(Some(_))) {
                            exited = true;
                            break;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if answers() {
                    break;
                }
                attempts += 1;
                assert!(
                    exited && attempts < 5,
                    "node {port} did not answer within 10 s"
                );
                let taken: Vec<u16> = cluster.nodes.iter().map(|(p, _)| *p).collect();
                let port = loop {
                    let candidate = free_ports(1)[0];
                    if !taken.contains(&candidate) {
                        break candidate;
                    }
                };
                cluster.nodes[i] = (port, Some(spawn_node(port, &cluster.dir)));
            }
        }
        let hosts: Vec<String> = cluster
            .nodes
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&hosts)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap();
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        cluster.wait_healthy(Duration::from_secs(30));
        cluster
    }

    /// Waits until every live node reports `cluster_state:ok`, knows three
    /// primaries serving all 16384 slots, and every live replica is in sync.
    #[track_caller]
    pub fn wait_healthy(&self, within: Duration) {
        for port in self.live_ports() {
            wait_until(
                within,
                &format!("node {port} sees a healthy cluster"),
                || {
                    let ok = cli(port, &["cluster", "info"])
                        .is_some_and(|info| info.contains("cluster_state:ok"));
                    let covered = nodes(port).is_some_and(|nodes| {
                        let primaries: Vec<_> = nodes.iter().filter(|n| n.primary).collect();
                        let slots: u32 = primaries
                            .iter()
                            .flat_map(|n| &n.slots)
                            .map(|&(a, b)| u32::from(b - a) + 1)
                            .sum();
                        primaries.len() == 3 && slots == 16384
                    });
                    let synced = cli(port, &["info", "replication"]).is_some_and(|info| {
                        !info.contains("role:slave") || info.contains("master_link_status:up")
                    });
                    ok && covered && synced
                },
            );
        }
    }

    /// Every node's URL (`redis://127.0.0.1:PORT`), killed ones included.
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|(port, _)| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// [`urls`](Self::urls), comma-separated (`REDIS_CLUSTER_URLS`).
    pub fn urls_env(&self) -> String {
        self.urls().join(",")
    }

    /// The ports of the nodes not killed.
    pub fn live_ports(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|(_, child)| child.is_some())
            .map(|(port, _)| *port)
            .collect()
    }

    /// The cluster as a live node sees it.
    #[track_caller]
    pub fn nodes(&self) -> Vec<NodeInfo> {
        let port = self.live_ports()[0];
        nodes(port).unwrap_or_else(|| panic!("CLUSTER NODES on port {port}"))
    }

    /// The primary serving `slot`, as a live node sees it.
    pub fn primary_of(&self, slot: u16) -> Option<NodeInfo> {
        self.nodes()
            .into_iter()
            .find(|n| n.primary && n.serves(slot))
    }

    /// The hash slot of `key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        keyslot(self.live_ports()[0], key)
    }

    /// SIGKILLs the node on `port` and reaps it.
    #[track_caller]
    pub fn kill(&mut self, port: u16) {
        let (_, child) = self
            .nodes
            .iter_mut()
            .find(|(p, _)| *p == port)
            .unwrap_or_else(|| panic!("no node on port {port}"));
        let mut child = child
            .take()
            .unwrap_or_else(|| panic!("node {port} already killed"));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        for (_, child) in &mut self.nodes {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `n` distinct loopback ports, each free along with its cluster bus port
/// (+10000).
/// One cluster-enabled `redis-server` on `port` (and `port + 10000` for
/// the cluster bus), its files in `dir`.
fn spawn_node(port: u16, dir: &std::path::Path) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
        .args(["--cluster-node-timeout", "1000"])
        .args(["--cluster-require-full-coverage", "no"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("redis-server: {e}: run `{SETUP}`"))
}

/// `n` ports free now on 127.0.0.1, each with its cluster-bus port (+10000)
/// free too, all below Linux's ephemeral range (32768 and up), where
/// outgoing connections could take them before the server binds.
fn free_ports(n: usize) -> Vec<u16> {
    let mut ports = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ports.len() < n {
        assert!(Instant::now() < deadline, "no {n} free port pairs");
        let port: u16 = rand::random::<u16>() % 10_000 + 10_000;
        if ports.contains(&port)
            || ports.contains(&(port + 10_000))
            || ports.contains(&(port - 10_000))
        {
            continue;
        }
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10_000) {
            ports.push(port);
        }
    }
    ports
}

/// Polls `done` every 50 ms until it holds; panics naming `what` after
/// `within`.
#[track_caller]
pub fn wait_until(within: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
