//! A real etcd cluster for the tests: members on 127.0.0.1 free ports in a temp
//! dir, started from `etcd` on PATH (or `$ORAM_TEST_ETCD`), every process killed by
//! its PID when the guard drops (a panicking test included).

#![allow(dead_code)] // Each test binary uses part of the harness.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use oram_cluster::EtcdClient;
use tokio::process::{Child, Command};
use tokio::time::{sleep, Instant};

/// The etcd binary, or `None` (with the reason printed) when it is absent and
/// `ORAM_TEST_ETCD_OPTIONAL=1` allows skipping. Panics when absent otherwise.
pub fn etcd_binary() -> Option<PathBuf> {
    let found = match std::env::var_os("ORAM_TEST_ETCD") {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.is_file()),
        None => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join("etcd"))
                .find(|p| p.is_file())
        }),
    };
    if found.is_none() {
        let reason = "etcd not found ($ORAM_TEST_ETCD or `etcd` on PATH; Debian: apt-get install etcd-server)";
        if std::env::var("ORAM_TEST_ETCD_OPTIONAL").as_deref() == Ok("1") {
            eprintln!("SKIPPED: {reason}; ORAM_TEST_ETCD_OPTIONAL=1 allows skipping");
            return None;
        }
        panic!("{reason}; set ORAM_TEST_ETCD_OPTIONAL=1 to skip these tests instead");
    }
    found
}

/// A member of the cluster.
struct Member {
    client_url: String,
    child: Option<Child>,
}

/// A running etcd cluster; dropping it kills every member.
pub struct EtcdCluster {
    members: Vec<Member>,
    dir: tempfile::TempDir,
}

fn free_ports(n: usize) -> Vec<u16> {
    // Bound together, so the ports are distinct; released just before etcd binds them.
    let listeners: Vec<_> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().expect("local addr").port())
        .collect()
}

impl EtcdCluster {
    /// Starts an `n`-member cluster and waits until it serves linearizable reads.
    /// `None` when etcd is absent and skipping is allowed.
    pub async fn start(n: usize) -> Option<EtcdCluster> {
        let bin = etcd_binary()?;
        // A port taken between our probe and etcd's bind fails the start: try again
        // on other ports, a bounded number of times.
        for attempt in 0..3 {
            let cluster = Self::spawn(&bin, n, attempt);
            if cluster.wait_ready(Duration::from_secs(20)).await {
                return Some(cluster);
            }
            eprintln!(
                "etcd cluster attempt {attempt} did not become ready:\n{}",
                cluster.logs()
            );
        }
        panic!("a {n}-member etcd cluster did not start in 3 attempts");
    }

    fn spawn(bin: &PathBuf, n: usize, attempt: usize) -> EtcdCluster {
        let dir = tempfile::tempdir().expect("temp dir");
        let ports = free_ports(2 * n);
        let peer = |i: usize| format!("http://127.0.0.1:{}", ports[2 * i + 1]);
        let initial: Vec<String> = (0..n).map(|i| format!("m{i}={}", peer(i))).collect();
        let token = format!("oram-test-{}-{attempt}-{}", std::process::id(), ports[0]);
        let mut members = Vec::new();
        for i in 0..n {
            let client_url = format!("http://127.0.0.1:{}", ports[2 * i]);
            let log =
                std::fs::File::create(dir.path().join(format!("m{i}.log"))).expect("log file");
            let err = log.try_clone().expect("log file");
            let child = Command::new(bin)
                .args(["--name", &format!("m{i}")])
                .arg("--data-dir")
                .arg(dir.path().join(format!("m{i}")))
                .args([
                    "--listen-client-urls",
                    &client_url,
                    "--advertise-client-urls",
                    &client_url,
                ])
                .args([
                    "--listen-peer-urls",
                    &peer(i),
                    "--initial-advertise-peer-urls",
                    &peer(i),
                ])
                .args(["--initial-cluster", &initial.join(",")])
                .args([
                    "--initial-cluster-state",
                    "new",
                    "--initial-cluster-token",
                    &token,
                ])
                .args(["--logger", "zap", "--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                .kill_on_drop(true)
                .spawn()
                .expect("start etcd");
            members.push(Member {
                client_url,
                child: Some(child),
            });
        }
        EtcdCluster { members, dir }
    }

    async fn wait_ready(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        for m in &self.members {
            let client = EtcdClient::new([&m.client_url], Duration::from_secs(2)).expect("client");
            // A linearizable read succeeds once the member sees a leader with quorum.
            for _ in 0..200 {
                if client.range(b"/ready-probe", &[]).await.is_ok() {
                    break;
                }
                if Instant::now() >= deadline {
                    return false;
                }
                sleep(Duration::from_millis(100)).await;
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
        true
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A client of every member, with a 2 s request timeout.
    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(self.endpoints(), Duration::from_secs(2)).expect("client")
    }

    /// Kills member `i` with SIGKILL (by its PID) and reaps it.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            child.start_kill().expect("SIGKILL an etcd member");
            let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
        }
    }

    /// The members' logs (for a failure message).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..self.members.len() {
            let log = std::fs::read_to_string(self.dir.path().join(format!("m{i}.log")))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            out += &format!(
                "--- m{i}\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        out
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(child) = m.child.as_mut() {
                // SIGKILL by PID; `kill_on_drop` and tokio's reaper collect it.
                let _ = child.start_kill();
            }
        }
    }
}

/// Waits, polling every 100 ms up to `within`, until `cond` holds; false if it never did.
pub async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    for _ in 0..1000 {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(Duration::from_millis(100)).await;
    }
    false
}
