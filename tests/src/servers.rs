//! Real S3 servers for the tests, started on free 127.0.0.1 ports and stopped by
//! PID: MinIO (built by `scripts/test.sh` with `go install`) and moto's server
//! (installed into the test venv). Each test owns its server; nothing is shared.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oram_store_s3::{S3Store, S3StoreConfig};

/// MinIO's root user in the tests.
pub const MINIO_USER: &str = "oram-test-admin";
/// MinIO's root password in the tests.
pub const MINIO_PASSWORD: &str = "oram-test-secret-0123";

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn find(env: &str, candidates: &[PathBuf], what: &str) -> PathBuf {
    if let Ok(p) = std::env::var(env) {
        return PathBuf::from(p);
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!("{what} not found: run ./scripts/test.sh (it installs it) or set {env}")
        })
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Polls an HTTP GET on 127.0.0.1:`port` until it answers `200` (bounded).
fn wait_http_ok(port: u16, path: &str, timeout: Duration) -> bool {
    wait_http(port, path, timeout, |status| status == b"200")
}

/// Polls an HTTP GET on 127.0.0.1:`port` until `accept` takes its status code (the
/// three digits), bounded by `timeout`.
fn wait_http(port: u16, path: &str, timeout: Duration, accept: fn(&[u8]) -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
            );
            if s.write_all(req.as_bytes()).is_ok() {
                let mut buf = [0u8; 16];
                if s.read(&mut buf).is_ok() && buf.starts_with(b"HTTP/1.1 ") && accept(&buf[9..12])
                {
                    return true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A MinIO server process.
pub struct Minio {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Its S3 port.
    pub port: u16,
}

impl Minio {
    /// Starts MinIO on a free port with a fresh data directory.
    pub fn start() -> Self {
        let mut m = Self {
            child: None,
            dir: tempfile::tempdir().expect("tempdir"),
            port: free_port(),
        };
        m.launch();
        m
    }

    fn launch(&mut self) {
        let home = std::env::var("HOME").unwrap_or_default();
        let bin = find(
            "ORAM_TEST_MINIO",
            &[
                PathBuf::from(home).join("go/bin/minio"),
                PathBuf::from("/usr/local/bin/minio"),
            ],
            "MinIO",
        );
        let console = free_port();
        let child = Command::new(bin)
            .args(["server", "--quiet", "--address"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg(self.dir.path().join("data"))
            .env("MINIO_ROOT_USER", MINIO_USER)
            .env("MINIO_ROOT_PASSWORD", MINIO_PASSWORD)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_UPDATE", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("MinIO starts");
        self.child = Some(child);
        assert!(
            wait_http_ok(self.port, "/minio/health/ready", Duration::from_secs(60)),
            "MinIO did not become ready on port {}",
            self.port
        );
        // Ready is not yet serving: until its object layer is up, MinIO answers every
        // S3 request (before authenticating it) with 503 XMinioServerNotInitialized;
        // after, an anonymous ListBuckets gets 403.
        assert!(
            wait_http(self.port, "/", Duration::from_secs(60), |status| status
                != b"503"),
            "MinIO did not initialise on port {}",
            self.port
        );
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Stops the process (SIGKILL by PID) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port with the same data.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Back-end settings for `bucket` under `prefix`.
    pub fn store_config(&self, bucket: &str, prefix: &str) -> S3StoreConfig {
        S3StoreConfig {
            endpoint: Some(self.endpoint()),
            region: "us-east-1".into(),
            bucket: bucket.into(),
            prefix: prefix.into(),
            path_style: true,
            credentials: Some((MINIO_USER.into(), MINIO_PASSWORD.into())),
            max_attempts: 2,
            attempt_timeout: Duration::from_secs(10),
            ..S3StoreConfig::default()
        }
    }

    /// A store on a new bucket `bucket`.
    pub async fn store(&self, bucket: &str, prefix: &str) -> S3Store {
        let s = S3Store::new(&self.store_config(bucket, prefix)).await;
        // A loaded machine: MinIO can answer its readiness probe before its object
        // layer is up ("XMinioServerNotInitialized"); retry for at most 60 s.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match s.create_bucket().await {
                Ok(()) => return s,
                Err(oram_blockstore::StoreError::Unavailable(e))
                    if std::time::Instant::now() < deadline =>
                {
                    eprintln!("MinIO not ready yet ({e}); retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => panic!("create bucket: {e:?}"),
            }
        }
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A moto S3 server process (no signature checks; a second, independent
/// implementation of the S3 API).
pub struct Moto {
    child: Child,
    /// Its port.
    pub port: u16,
}

impl Moto {
    /// Starts `moto_server` on a free port.
    pub fn start() -> Self {
        let bin = find(
            "ORAM_TEST_MOTO",
            &[repo_root().join("target/e2e-venv/bin/moto_server")],
            "moto_server",
        );
        let port = free_port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto starts");
        let m = Self { child, port };
        assert!(
            wait_http_ok(port, "/", Duration::from_secs(60)),
            "moto did not come up on port {port}"
        );
        m
    }

    /// A store on a new bucket.
    pub async fn store(&self, bucket: &str, prefix: &str) -> S3Store {
        let s = S3Store::new(&S3StoreConfig {
            endpoint: Some(format!("http://127.0.0.1:{}", self.port)),
            bucket: bucket.into(),
            prefix: prefix.into(),
            path_style: true,
            credentials: Some(("moto".into(), "moto-secret".into())),
            ..S3StoreConfig::default()
        })
        .await;
        s.create_bucket().await.expect("create bucket");
        s
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
