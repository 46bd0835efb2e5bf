//! What the operator endpoint serves from ([`Endpoint`]), and the bearer token
//! that guards `/metrics`, the dashboard's data and `/users`.
//!
//! Access: a token is always required for `/metrics` and the dashboard's data —
//! the configured one (`metrics.token_file`, or the systemd credential
//! `metrics-token`), else `<data_dir>/metrics.token`, generated on first use. On
//! loopback too: the dashboard's data is the access pattern the ORAM hides (per
//! object digests, sizes, times), and any local user can reach a loopback port.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use oram_volume::fsutil::{check_private, io, write_private};
use oram_volume::{Volume, VolumeConfig};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::config::MetricsConfig;
use crate::tap::TapShared;
use crate::telemetry::Telemetry;
use crate::ServeError;

/// What `/metrics` states about the configuration (fixed while serving).
#[derive(Debug, Clone)]
pub struct EngineInfo {
    /// Engine name.
    pub engine: String,
    /// Whether the engine hides which blocks are read and written.
    pub oblivious: bool,
    /// The stash bound (0: the engine has no stash).
    pub stash_bound: u64,
    /// Seconds between checkpoints (0: at shutdown only).
    pub checkpoint_interval_secs: u64,
    /// The most bytes the engine's objects can take on the backend
    /// ([`oram_engine::EngineModel::backend_bytes_bound`]).
    pub backend_bytes_bound: u64,
    /// The operator's budget for the backend in bytes (`backend.budget_gib`; 0: none).
    pub backend_budget_bytes: u64,
    /// The backend's settings and the data directory, for the fs back-end's
    /// free space ([`oram_volume::disk_space`]).
    pub backend: (oram_volume::BackendConfig, PathBuf),
}

impl EngineInfo {
    /// From the volume's configuration.
    pub fn new(cfg: &VolumeConfig) -> Self {
        let e = &cfg.engine;
        Self {
            engine: e.kind.name().to_string(),
            oblivious: e.kind.settings().oblivious(),
            stash_bound: e.kind.settings().stash_bound(&e.shape(&cfg.backend.prefix)),
            checkpoint_interval_secs: cfg.state.checkpoint_interval_secs,
            // At the capacity in effect when the proxy started (a grown
            // volume's; a growth while serving shows from the next start).
            backend_bytes_bound: {
                let mut grown = e.clone();
                grown.capacity_blocks = e.capacity_in_effect();
                grown.model(&cfg.backend.prefix).backend_bytes_bound()
            },
            backend_budget_bytes: cfg.backend.budget_bytes(),
            backend: (cfg.backend.clone(), cfg.data_dir.clone()),
        }
    }
}

/// The bearer token that guards `/metrics` and the dashboard's data.
pub struct Token(Zeroizing<String>);

impl Token {
    /// Reads a token file (mode 0600; surrounding whitespace ignored).
    pub fn read(path: &Path) -> Result<Self, ServeError> {
        check_private(path).map_err(|e| ServeError::Config(format!("metrics token: {e}")))?;
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(io(path))?);
        let t = text.trim();
        if t.len() < 16 {
            return Err(ServeError::Config(format!(
                "metrics token {}: shorter than 16 characters",
                path.display()
            )));
        }
        Ok(Self(Zeroizing::new(t.to_string())))
    }

    /// Whether `given` is the token (compared in constant time, via digests).
    pub fn matches(&self, given: &str) -> bool {
        let a = Sha256::digest(self.0.as_bytes());
        let b = Sha256::digest(given.as_bytes());
        a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
    }
}

/// Where the token comes from: the configured file, else
/// `<data_dir>/metrics.token`, generated (mode 0600) on first use. Returns the
/// token and its file.
pub fn token(cfg: &MetricsConfig, data_dir: &Path) -> Result<(Token, PathBuf), ServeError> {
    if let Some(p) = &cfg.token_file {
        return Ok((Token::read(p)?, p.clone()));
    }
    let p = data_dir.join("metrics.token");
    if !p.exists() {
        use rand::RngCore;
        let mut b = [0u8; 24];
        rand::thread_rng().fill_bytes(&mut b);
        write_private(&p, &format!("{}\n", hex::encode(b)))?;
    }
    Ok((Token::read(&p)?, p))
}

/// Everything the endpoint serves from.
pub struct Endpoint {
    /// The volume (backend counters, engine, index, state database).
    pub vol: Arc<Volume>,
    /// The recent backend requests, errors and latencies (the tap).
    pub tap: Arc<TapShared>,
    /// Client-side measurements.
    pub tel: Arc<Telemetry>,
    /// Configuration facts.
    pub info: EngineInfo,
    /// The token `/metrics` and the dashboard's data require.
    pub token: Token,
    /// Whether the dashboard is served.
    pub dashboard: bool,
    /// The S3 users, changed through `/users`.
    pub users: Arc<super::LiveUsers>,
    /// The volume's growths (`/grow`).
    pub growth: Arc<crate::grow::Growth>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_exactly() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t");
        write_private(&p, "  0123456789abcdef0123\n").unwrap();
        let t = Token::read(&p).unwrap();
        assert!(t.matches("0123456789abcdef0123"));
        assert!(!t.matches("0123456789abcdef012"));
        assert!(!t.matches(""));
        let short = d.path().join("s");
        write_private(&short, "abc").unwrap();
        assert!(Token::read(&short).is_err());
    }

    #[test]
    fn a_token_is_generated_when_none_is_configured_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = MetricsConfig::default();
        let (t1, p) = token(&cfg, d.path()).unwrap();
        assert_eq!(p, d.path().join("metrics.token"));
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(t1.matches(text.trim()));
        assert!(text.trim().len() >= 32, "{text}");
        // Private, and kept across starts.
        check_private(&p).unwrap();
        let (t2, _) = token(&cfg, d.path()).unwrap();
        assert!(t2.matches(text.trim()));
        // A configured token wins.
        let own = d.path().join("own");
        write_private(&own, "fedcba9876543210fedcba\n").unwrap();
        cfg.token_file = Some(own.clone());
        let (t3, p3) = token(&cfg, d.path()).unwrap();
        assert_eq!(p3, own);
        assert!(t3.matches("fedcba9876543210fedcba"));
        assert!(!t3.matches(text.trim()));
    }
}
