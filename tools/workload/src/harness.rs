//! The processes of a comparison: MinIO, the link-shaping relay in front of it,
//! and one oram-proxy per configuration. Everything binds 127.0.0.1 on free ports
//! and is stopped by PID (on drop too).
//!
//! A proxy of a comparison runs on the S3 back-end through the relay, with its
//! operator endpoint on and checkpoints at shutdown only (with `--format`,
//! `oram-proxy format` runs between `init` and `serve`). In the private cloud
//! model the proxy's back-end is MinIO's own port and [`ProxyRun::shape_front`]
//! puts a relay of the lab's link in front of each of its listeners (the Swift
//! storage URL follows the Host header, so it names the relay). The runner reads
//! the proxy's `/metrics` before and after a workload (after write-backs have
//! drained), `/proc/<pid>/stat` (CPU) and `/proc/<pid>/status` (peak and final
//! RSS), and once the proxy stopped `oram-proxy describe` of its volume (the
//! cached levels) and `oram-proxy stats` (offline: the live bytes of
//! `state.redb`'s tables). Once measured, a
//! configuration's backend bucket and data directory are deleted (a full run
//! writes tens of GB).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::api::Endpoint;

/// A child process killed (and reaped) on drop.
pub struct Proc {
    name: String,
    child: Option<Child>,
    /// Where its stdout and stderr go.
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` with its output going to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Self, String> {
        let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        Ok(Self {
            name: name.to_string(),
            child: Some(child),
            log: log.to_path_buf(),
        })
    }

    /// The last `n` lines of its log (what it said before exiting).
    fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Sends SIGTERM and waits up to `grace` for it to exit (then SIGKILL).
    pub fn stop(&mut self, grace: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                return if st.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{} exited with {st}; the end of its log:\n{}",
                        self.name,
                        self.log_tail(15)
                    ))
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!(
            "{} did not stop within {grace:?}; killed",
            self.name
        ))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Waits until 127.0.0.1:`port` accepts connections.
pub fn wait_port(port: u16, timeout: Duration, proc: &mut Proc) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if proc.exited() {
            return Err(format!(
                "{} exited before listening on {port}:\n{}",
                proc.name,
                proc.log_tail(15)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("{} never listened on {port}", proc.name))
}

/// A plain HTTP/1.0 GET of `path` on 127.0.0.1:`port` with a bearer token
/// (the operator endpoint's); the body.
pub fn http_get(port: u16, path: &str, token: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).map_err(|e| e.to_string())?;
    let (head, body) = buf
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        return Err(format!("GET {path}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(body.to_string())
}

/// Prometheus samples (`name{labels}` → value) of a text exposition.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// The shared parts: MinIO and the relay shaping the link to it.
pub struct Lab {
    /// Working directory (MinIO data, proxy data dirs, logs).
    pub dir: PathBuf,
    minio: Proc,
    _relay: Option<Proc>,
    /// The relay binary and the link it shapes (none for an unshaped lab): the
    /// private cloud model puts a relay of its own in front of each proxy.
    shaper: Option<(PathBuf, Link)>,
    /// MinIO's own port (unshaped: used only to measure stored bytes).
    pub minio_port: u16,
    /// MinIO's root credentials, at the relay: every measured request goes
    /// through it (an unshaped lab has no relay: MinIO's own port).
    pub root: Endpoint,
}

/// The link model.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// Round-trip time added, ms.
    pub rtt_ms: f64,
    /// Bandwidth per direction, Mbit/s (0: unlimited).
    pub mbit: f64,
}

impl Lab {
    /// Starts MinIO in `dir/minio` and a relay in front of it.
    pub fn start(dir: &Path, minio: &Path, linkshape: &Path, link: Link) -> Result<Self, String> {
        let mut lab = Self::start_unshaped(dir, minio)?;
        let relay_port = free_port()?;
        let mut cmd = Command::new(linkshape);
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{relay_port}"))
            .arg("--target")
            .arg(format!("127.0.0.1:{}", lab.minio_port))
            .arg("--rtt-ms")
            .arg(link.rtt_ms.to_string())
            .arg("--mbit")
            .arg(link.mbit.to_string());
        let log = dir.join("relay.log");
        let mut r = Proc::spawn("oram-linkshape", cmd, &log)?;
        wait_port(relay_port, Duration::from_secs(30), &mut r)?;
        lab._relay = Some(r);
        lab.shaper = Some((linkshape.to_path_buf(), link));
        lab.root.url = format!("http://127.0.0.1:{relay_port}");
        Ok(lab)
    }

    /// Starts MinIO in `dir/minio` with no relay: every request goes to MinIO's
    /// own port on the loopback (the link model "same machine, unshaped").
    pub fn start_unshaped(dir: &Path, minio: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir.join("minio")).map_err(|e| e.to_string())?;
        let minio_port = free_port()?;
        let console = free_port()?;
        let user = "workload-root".to_string();
        let pass = format!(
            "wl-{:016x}",
            crate::dist::stable_hash(&[dir.to_string_lossy().as_bytes()])
        );
        let mut cmd = Command::new(minio);
        cmd.args(["server", "--quiet", "--address"])
            .arg(format!("127.0.0.1:{minio_port}"))
            .arg("--console-address")
            .arg(format!("127.0.0.1:{console}"))
            .arg(dir.join("minio"))
            .env("MINIO_ROOT_USER", &user)
            .env("MINIO_ROOT_PASSWORD", &pass)
            .env("MINIO_BROWSER", "off");
        let log = dir.join("minio.log");
        let mut m = Proc::spawn("minio", cmd, &log)?;
        wait_port(minio_port, Duration::from_secs(60), &mut m)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            minio: m,
            _relay: None,
            shaper: None,
            minio_port,
            root: Endpoint {
                url: format!("http://127.0.0.1:{minio_port}"),
                access_key: user,
                secret_key: pass,
            },
        })
    }

    /// MinIO's PID (for its CPU time and memory).
    pub fn minio_pid(&self) -> u32 {
        self.minio.pid()
    }

    /// Starts a relay shaping the lab's link in front of 127.0.0.1:`port`; its
    /// port. `name` names its log.
    pub fn relay_to(&self, port: u16, name: &str) -> Result<(Proc, u16), String> {
        let (linkshape, link) = self
            .shaper
            .as_ref()
            .ok_or("an unshaped lab has no link to shape")?;
        let relay_port = free_port()?;
        let mut cmd = Command::new(linkshape);
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{relay_port}"))
            .arg("--target")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--rtt-ms")
            .arg(link.rtt_ms.to_string())
            .arg("--mbit")
            .arg(link.mbit.to_string());
        let log = self.dir.join(format!("relay-{name}.log"));
        let mut r = Proc::spawn("oram-linkshape", cmd, &log)?;
        wait_port(relay_port, Duration::from_secs(30), &mut r)?;
        Ok((r, relay_port))
    }

    /// MinIO's credentials at its own (unshaped) port.
    pub fn direct(&self) -> Endpoint {
        Endpoint {
            url: format!("http://127.0.0.1:{}", self.minio_port),
            ..self.root.clone()
        }
    }
}

/// The engine parameters of one proxy configuration.
#[derive(Clone, Debug)]
pub struct EngineParams {
    /// `engine.kind`.
    pub kind: String,
    /// Bytes per block.
    pub block_size: u64,
    /// Logical blocks.
    pub capacity_blocks: u64,
    /// Tree-top levels cached locally (ORAM engines); `None`: as many as
    /// `tree_cache_mib` holds, the engine's own computation.
    pub cached_levels: Option<u32>,
    /// MiB for the tree-top cache (Path and Ring ORAM), when `cached_levels` is
    /// `None`.
    pub tree_cache_mib: Option<u64>,
    /// Blocks per round.
    pub max_batch: u64,
    /// Write-back rounds in flight.
    pub max_inflight_writebacks: u64,
    /// More `[engine]` lines (TOML), e.g. CURIOUS's `curious_sub`.
    pub extra: String,
    /// Run `oram-proxy format` after `init`, before serving (outside the
    /// measurement): every bucket the engine may read is written once, so reads
    /// find full objects as on a volume in steady use rather than the 404s of
    /// never-written buckets.
    pub format: bool,
}

/// Where a proxy keeps its volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyBackend {
    /// The lab's MinIO (through the relay, if any), with the runner's generous
    /// limits for a shaped link (64 requests in flight, 300 s per attempt).
    LabS3,
    /// The lab's MinIO at the proxy's default request limits.
    LabS3Defaults,
    /// The lab's MinIO at its own port, past the relay (the private cloud
    /// model), with the runner's limits.
    LabS3Local,
    /// The embedded default: `[backend] kind = "fs"`, the store under the data
    /// directory (`<data_dir>/store`), fsync on.
    Fs,
}

/// A running proxy over the lab's relay (or on its own directory).
pub struct ProxyRun {
    proc: Proc,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its S3 endpoint and user.
    pub endpoint: Endpoint,
    /// Its Swift auth URL and user, when started with the Swift API.
    pub swift: Option<Endpoint>,
    /// Its metrics port.
    pub metrics_port: u16,
    /// The MinIO bucket holding its volume.
    pub bucket: String,
    /// Its configuration file.
    pub config: PathBuf,
    /// Relays in front of its listeners (the private cloud model).
    fronts: Vec<Proc>,
}

impl ProxyRun {
    /// Initialises a volume in a new MinIO bucket and starts serving it. The
    /// public cloud model (`private` false): the proxy beside the client, the
    /// shaped link between it and MinIO. The private model: the shaped link
    /// between the client and the proxy (a relay in front of each of its
    /// listeners), the proxy on MinIO's own port (a fast local hop, as on a
    /// trusted VM in the provider's region).
    pub fn start(
        lab: &Lab,
        proxy: &Path,
        name: &str,
        e: &EngineParams,
        swift: bool,
        private: bool,
    ) -> Result<Self, String> {
        let cache = match (e.kind.as_str(), e.cached_levels, e.tree_cache_mib) {
            ("direct", _, _) => String::new(),
            (_, Some(cl), _) => format!("cached_levels = {cl}\n"),
            (_, None, Some(mib)) => format!("tree_cache_mib = {mib}\n"),
            (_, None, None) => String::new(),
        };
        let engine = format!(
            "kind = {kind:?}\nblock_size = {bs}\ncapacity_blocks = {cap}\n\
             insecure_direct = {direct}\n\
             {cache}max_batch = {mb}\nmax_inflight_writebacks = {mi}\n{extra}",
            kind = e.kind,
            direct = e.kind == "direct",
            bs = e.block_size,
            cap = e.capacity_blocks,
            mb = e.max_batch,
            mi = e.max_inflight_writebacks,
            extra = e.extra,
        );
        let backend = if private {
            ProxyBackend::LabS3Local
        } else {
            ProxyBackend::LabS3
        };
        let mut p = Self::start_with(lab, proxy, name, &engine, backend, swift, e.format)?;
        if private {
            p.shape_front(lab)?;
        }
        Ok(p)
    }

    /// Initialises a volume (formats it with `format`) and starts serving it:
    /// `engine` is the body of the `[engine]` section (fields left out take the
    /// proxy's defaults), `backend` where the volume lives.
    pub fn start_with(
        lab: &Lab,
        proxy: &Path,
        name: &str,
        engine: &str,
        backend: ProxyBackend,
        swift: bool,
        format: bool,
    ) -> Result<Self, String> {
        let bucket = bucket_of(name);
        let backend_section = match backend {
            ProxyBackend::Fs => "[backend]\nkind = \"fs\"\n".to_string(),
            ProxyBackend::LabS3 | ProxyBackend::LabS3Defaults | ProxyBackend::LabS3Local => {
                format!(
                    "[backend]\nkind = \"s3\"\nbucket = {bucket:?}\nendpoint = \"{ep}\"\n\
                 access_key = {ak:?}\nsecret_key = {sk:?}\n{limits}",
                    ep = if backend == ProxyBackend::LabS3Local {
                        lab.direct().url
                    } else {
                        lab.root.url.clone()
                    },
                    ak = lab.root.access_key,
                    sk = lab.root.secret_key,
                    limits = if backend != ProxyBackend::LabS3Defaults {
                        "max_in_flight = 64\nattempt_timeout_secs = 300\n"
                    } else {
                        ""
                    },
                )
            }
        };
        Self::start_in(
            &lab.dir,
            proxy,
            name,
            engine,
            &backend_section,
            swift,
            format,
        )
    }

    /// Initialises a volume on the fs back-end under `dir` (`<dir>/proxy-<name>`,
    /// the store in its data directory, without fsync: the figures it is used
    /// for are counts and sizes, not durability) and starts serving it; no MinIO
    /// needed. `engine` is the body of the `[engine]` section.
    pub fn start_fs(
        dir: &Path,
        proxy: &Path,
        name: &str,
        engine: &str,
        format: bool,
    ) -> Result<Self, String> {
        let backend = "[backend]\nkind = \"fs\"\nfsync = false\n";
        Self::start_in(dir, proxy, name, engine, backend, false, format)
    }

    /// [`Self::start_with`] in `dir` with the `[backend]` section `backend_section`.
    fn start_in(
        dir: &Path,
        proxy: &Path,
        name: &str,
        engine: &str,
        backend_section: &str,
        swift: bool,
        format: bool,
    ) -> Result<Self, String> {
        let data_dir = dir.join(format!("proxy-{name}"));
        let _ = std::fs::remove_dir_all(&data_dir);
        std::fs::create_dir_all(&data_dir).map_err(|e| e.to_string())?;
        let (s3_port, metrics_port, swift_port) = (free_port()?, free_port()?, free_port()?);
        let bucket = bucket_of(name);
        let secret = format!(
            "{:032x}",
            crate::dist::stable_hash(&[name.as_bytes(), b"secret"])
        );
        let swift_section = if swift {
            format!("[swift]\nlisten = \"127.0.0.1:{swift_port}\"\n")
        } else {
            String::new()
        };
        let cfg = format!(
            "data_dir = {data:?}\n\
             [s3]\nlisten = \"127.0.0.1:{s3_port}\"\n\
             [metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n\
             {swift_section}\
             [engine]\n{engine}\
             {backend_section}\
             [state]\ncheckpoint_interval_secs = 0\n\
             [[users]]\naccess_key = \"workload\"\nsecret_key = {secret:?}\n",
            data = data_dir.join("data").display().to_string(),
        );
        let cfg_path = data_dir.join("proxy.toml");
        std::fs::write(&cfg_path, cfg).map_err(|e| e.to_string())?;
        // It holds secret keys: the proxy refuses it readable by others.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&cfg_path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
        }
        let key = format!(
            "{:016x}{:016x}{:016x}{:016x}",
            crate::dist::stable_hash(&[name.as_bytes(), b"k1"]),
            crate::dist::stable_hash(&[name.as_bytes(), b"k2"]),
            crate::dist::stable_hash(&[name.as_bytes(), b"k3"]),
            crate::dist::stable_hash(&[name.as_bytes(), b"k4"]),
        );
        // `init`, then with `format` every bucket written once: to completion.
        let verbs: &[&str] = if format {
            &["init", "format"]
        } else {
            &["init"]
        };
        for verb in verbs {
            let out = Command::new(proxy)
                .arg(verb)
                .arg("--config")
                .arg(&cfg_path)
                .env("ORAM_PROXY_MASTER_KEY", &key)
                .env_remove("ORAM_PROXY_PASSPHRASE")
                .output()
                .map_err(|e| format!("oram-proxy {verb}: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "oram-proxy {verb} ({name}): {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
        let mut cmd = Command::new(proxy);
        cmd.arg("serve")
            .arg("--config")
            .arg(&cfg_path)
            .env("ORAM_PROXY_MASTER_KEY", &key)
            .env_remove("ORAM_PROXY_PASSPHRASE")
            .env("RUST_LOG", "warn");
        let log = data_dir.join("proxy.log");
        let mut p = Proc::spawn(&format!("oram-proxy ({name})"), cmd, &log)?;
        wait_port(s3_port, Duration::from_secs(120), &mut p)?;
        wait_port(metrics_port, Duration::from_secs(10), &mut p)?;
        // The endpoint's port is bound before the proxy writes its token (at
        // the first start): wait for the file too.
        let token_file = data_dir.join("data").join("metrics.token");
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&token_file).map_or(true, |t| t.trim().is_empty()) {
            if Instant::now() >= deadline {
                return Err(format!(
                    "oram-proxy ({name}) wrote no {}",
                    token_file.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if swift {
            wait_port(swift_port, Duration::from_secs(10), &mut p)?;
        }
        Ok(Self {
            proc: p,
            data_dir,
            endpoint: Endpoint {
                url: format!("http://127.0.0.1:{s3_port}"),
                access_key: "workload".into(),
                secret_key: secret.clone(),
            },
            swift: swift.then(|| Endpoint {
                url: format!("http://127.0.0.1:{swift_port}/auth/v1.0"),
                access_key: "workload:workload".into(),
                secret_key: secret.clone(),
            }),
            metrics_port,
            bucket,
            config: cfg_path,
            fronts: Vec::new(),
        })
    }

    /// Puts the lab's shaped link between the client and this proxy: a relay in
    /// front of its S3 listener (and its Swift listener), and its endpoints
    /// pointed at them. (The Swift storage URL follows the Host header, so it
    /// names the relay too.)
    pub fn shape_front(&mut self, lab: &Lab) -> Result<(), String> {
        let port_of = |url: &str| -> Result<u16, String> {
            url.trim_start_matches("http://")
                .split(['/', ':'])
                .nth(1)
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("no port in {url}"))
        };
        let (r, port) =
            lab.relay_to(port_of(&self.endpoint.url)?, &format!("{}-s3", self.bucket))?;
        self.fronts.push(r);
        self.endpoint.url = format!("http://127.0.0.1:{port}");
        if let Some(sw) = &mut self.swift {
            let (r, port) = lab.relay_to(port_of(&sw.url)?, &format!("{}-swift", self.bucket))?;
            self.fronts.push(r);
            sw.url = format!("http://127.0.0.1:{port}/auth/v1.0");
        }
        Ok(())
    }

    /// The proxy's metrics now.
    pub fn metrics(&self) -> Result<BTreeMap<String, f64>, String> {
        // The token the proxy generated into its data directory at start.
        let token_file = self.data_dir.join("data").join("metrics.token");
        let token = std::fs::read_to_string(&token_file)
            .map_err(|e| format!("{}: {e}", token_file.display()))?;
        Ok(parse_metrics(&http_get(
            self.metrics_port,
            "/metrics",
            token.trim(),
        )?))
    }

    /// Waits (at most `timeout`) until no write-back is pending, then returns the
    /// metrics.
    pub fn settle(&self, timeout: Duration) -> Result<BTreeMap<String, f64>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let m = self.metrics()?;
            if m.get("oram_engine_pending_writebacks")
                .copied()
                .unwrap_or(0.0)
                == 0.0
                || Instant::now() >= deadline
            {
                return Ok(m);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its PID.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// CPU seconds (user + system) the proxy has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        cpu_seconds_of(self.proc.pid())
    }

    /// Peak resident memory (VmHWM) in bytes.
    pub fn peak_rss(&self) -> u64 {
        peak_rss_of(self.proc.pid())
    }

    /// Stops the proxy (graceful: final write-back and checkpoint), then the
    /// relays in front of it.
    pub fn stop(&mut self) -> Result<(), String> {
        let r = self.proc.stop(Duration::from_secs(300));
        for f in &mut self.fronts {
            let _ = f.stop(Duration::from_secs(5));
        }
        r
    }

    /// Resident memory now (VmRSS), bytes.
    pub fn rss(&self) -> u64 {
        status_kb(self.proc.pid(), "VmRSS:") * 1024
    }

    /// The live bytes of the local state (keys, values and tree pages of every
    /// table of state.redb, not its free pages), from `oram-proxy stats` on the
    /// stopped proxy's data directory.
    pub fn state_live_bytes(&self, proxy: &Path) -> Result<u64, String> {
        let out = Command::new(proxy)
            .arg("stats")
            .arg("--config")
            .arg(&self.config)
            .env_remove("ORAM_PROXY_PASSPHRASE")
            .output()
            .map_err(|e| format!("oram-proxy stats: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        live_state_of(&text).ok_or_else(|| {
            format!(
                "oram-proxy stats printed no live state: {}{}",
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })
    }

    /// Size of the state database file (`<data>/state.redb`), bytes.
    pub fn state_file_bytes(&self) -> u64 {
        std::fs::metadata(self.data_dir.join("data").join("state.redb")).map_or(0, |m| m.len())
    }

    /// Deletes the proxy's data directory (after it stopped; logs are kept).
    pub fn remove_data(&self) {
        let _ = std::fs::remove_dir_all(self.data_dir.join("data"));
    }

    /// Bytes of the proxy's local state on disk: its data directory, without
    /// the fs back-end's store (`<data_dir>/store`) when the volume lives there.
    pub fn local_bytes(&self) -> u64 {
        dir_size(&self.data_dir.join("data")).saturating_sub(self.fs_store_bytes())
    }

    /// Bytes of the fs back-end's store under the data directory (0 on S3).
    pub fn fs_store_bytes(&self) -> u64 {
        dir_size(&self.data_dir.join("data").join("store"))
    }
}

/// The MinIO bucket of the proxy run `name`.
fn bucket_of(name: &str) -> String {
    format!("oram-{name}")
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// CPU seconds (user + system) process `pid` has used so far (0 if it is gone).
pub fn cpu_seconds_of(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after ')'.
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident memory (VmHWM) of process `pid`, bytes (0 if it is gone).
pub fn peak_rss_of(pid: u32) -> u64 {
    status_kb(pid, "VmHWM:") * 1024
}

/// A kB field of `/proc/<pid>/status` (0 if it or the process is gone).
fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// The bytes of the `live state:` line of `oram-proxy stats` (offline).
pub fn live_state_of(stats: &str) -> Option<u64> {
    stats
        .lines()
        .find_map(|l| l.trim().strip_prefix("live state:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Total size of the files under `p`, bytes.
pub fn dir_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
