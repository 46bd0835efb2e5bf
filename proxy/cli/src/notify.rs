//! systemd's service notification protocol (`sd_notify(3)`), without libsystemd:
//! one datagram of `KEY=VALUE` lines to the Unix socket named by `$NOTIFY_SOCKET`
//! (a path, or an abstract socket when it starts with `@`).
//!
//! The unit file (`deploy/oram-proxy.service`) runs the proxy with `Type=notify`
//! and `WatchdogSec=`: the proxy sends `READY=1` once it serves, `WATCHDOG=1` every
//! half watchdog interval from the async runtime (a wedged runtime stops the pings
//! and systemd restarts the service), `STATUS=` lines for `systemctl status`, and
//! `STOPPING=1` when a stop begins. Without `$NOTIFY_SOCKET` every call is a no-op.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::time::Duration;

/// Where notifications go (`None`: not started by systemd, nothing is sent).
#[derive(Debug, Clone)]
pub struct Notifier {
    target: Option<Target>,
    watchdog: Option<Duration>,
}

#[derive(Debug, Clone)]
enum Target {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

impl Notifier {
    /// Reads `$NOTIFY_SOCKET`, `$WATCHDOG_USEC` and `$WATCHDOG_PID` (the watchdog
    /// applies only when that names this process, or is unset).
    pub fn from_env() -> Self {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|s| {
            use std::os::unix::ffi::OsStringExt;
            let s = s.into_vec();
            match s.first() {
                Some(b'@') => Some(Target::Abstract(s[1..].to_vec())),
                Some(b'/') => Some(Target::Path(PathBuf::from(std::ffi::OsString::from_vec(s)))),
                // Anything else (e.g. vsock addresses) is not supported: ignore it.
                _ => None,
            }
        });
        let pid_ok = std::env::var("WATCHDOG_PID")
            .ok()
            .is_none_or(|p| p.trim() == std::process::id().to_string());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|&u| u > 0 && pid_ok)
            .map(Duration::from_micros);
        Self { target, watchdog }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Self {
        Self {
            target: None,
            watchdog: None,
        }
    }

    /// Whether a notification socket is configured.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog interval systemd asked for, if any.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.target.as_ref().and(self.watchdog)
    }

    /// Sends `state` (newline-separated `KEY=VALUE` assignments) in one datagram.
    /// A no-op without a socket; errors are returned, never panics. Never blocks:
    /// when the receiver's queue is full (a manager that does not read; Linux queues
    /// `net.unix.max_dgram_qlen` datagrams, 10 by default) the datagram is refused
    /// with `WouldBlock` instead of stalling the async worker thread that sends it.
    pub fn notify(&self, state: &str) -> io::Result<()> {
        let Some(target) = &self.target else {
            return Ok(());
        };
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        match target {
            Target::Path(p) => sock.send_to(state.as_bytes(), p)?,
            Target::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sock.send_to_addr(state.as_bytes(), &addr)?
            }
        };
        Ok(())
    }

    /// Logs a failed notification instead of failing the caller: a lost
    /// notification must not stop the proxy (systemd then times the start out).
    fn send(&self, state: &str) {
        match self.notify(state) {
            Ok(()) => {}
            // The manager is behind: a watchdog ping is dropped quietly (the next
            // one follows in half an interval), anything else is worth a warning.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && state == "WATCHDOG=1" => {
                tracing::debug!("sd_notify: the manager's queue is full, ping dropped")
            }
            Err(e) => tracing::warn!("sd_notify failed: {e}"),
        }
    }

    /// `READY=1` with a status line: the proxy serves.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// `STATUS=...`: shown by `systemctl status`.
    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={}", one_line(status)));
    }

    /// `STOPPING=1`: a stop has begun.
    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    /// `RELOADING=1` and, after `done`, `READY=1` (a configuration reload).
    pub fn reloading(&self) {
        self.send("RELOADING=1");
    }

    /// `WATCHDOG=1`: the service is alive.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// `EXTEND_TIMEOUT_USEC=...`: asks systemd for more time for the current start
    /// or stop phase (a long recovery or final checkpoint).
    pub fn extend_timeout(&self, by: Duration) {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", by.as_micros()));
    }

    /// Spawns the watchdog task (when systemd asked for one): `WATCHDOG=1` every half
    /// interval, sent from the async runtime so that a wedged runtime stops the
    /// pings. Runs until the runtime ends.
    pub fn spawn_watchdog(&self) -> Option<tokio::task::JoinHandle<()>> {
        let every = self.watchdog_interval()? / 2;
        let me = self.clone();
        Some(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.watchdog();
            }
        }))
    }
}

/// A status must be one line: newlines would start new assignments.
fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real datagram listener standing in for systemd's notification socket.
    #[test]
    fn datagrams_reach_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let n = Notifier {
            target: Some(Target::Path(path.clone())),
            watchdog: Some(Duration::from_millis(100)),
        };
        assert!(n.enabled());
        assert_eq!(n.watchdog_interval(), Some(Duration::from_millis(100)));
        n.ready("serving\non 127.0.0.1");
        n.watchdog();
        n.stopping("bye");
        let mut buf = [0u8; 512];
        let mut got = Vec::new();
        for _ in 0..3 {
            let len = listener.recv(&mut buf).unwrap();
            got.push(String::from_utf8(buf[..len].to_vec()).unwrap());
        }
        assert_eq!(
            got,
            [
                "READY=1\nSTATUS=serving on 127.0.0.1",
                "WATCHDOG=1",
                "STOPPING=1\nSTATUS=bye"
            ]
        );
    }

    #[test]
    fn datagrams_reach_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("oram-proxy-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let listener = UnixDatagram::bind_addr(&addr).unwrap();
        listener
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let n = Notifier {
            target: Some(Target::Abstract(name.into_bytes())),
            watchdog: None,
        };
        n.watchdog();
        let mut buf = [0u8; 64];
        let len = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..len], b"WATCHDOG=1");
    }

    /// A manager that stops reading (as the end-to-end test's socket does once it
    /// has seen STOPPING=1) fills its queue; further sends must fail at once, not
    /// block the thread (a blocked tokio worker hung the process at exit).
    #[test]
    fn a_full_queue_refuses_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: Some(Target::Path(path)),
            watchdog: None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        // On a thread, so that a regression fails the test instead of hanging it.
        std::thread::spawn(move || {
            let results: Vec<io::Result<()>> = (0..1000).map(|_| n.notify("WATCHDOG=1")).collect();
            n.watchdog(); // the logging path, too
            let _ = tx.send(results);
        });
        let results = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("sending to a full notification socket blocked");
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock))
            .count();
        assert!(results[0].is_ok(), "the first datagram fits the queue");
        assert!(refused > 0, "1000 unread datagrams never filled the queue");
        assert_eq!(refused + results.iter().filter(|r| r.is_ok()).count(), 1000);
        drop(listener);
    }

    #[test]
    fn without_a_socket_nothing_is_sent() {
        let n = Notifier::disabled();
        assert!(!n.enabled());
        assert_eq!(n.watchdog_interval(), None);
        n.notify("READY=1").unwrap();
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let n = Notifier {
            target: Some(Target::Path(dir.path().join("absent.sock"))),
            watchdog: None,
        };
        assert!(n.notify("READY=1").is_err());
        n.ready("still running");
    }
}
