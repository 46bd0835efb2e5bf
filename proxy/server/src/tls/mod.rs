//! TLS on the S3 and Swift listeners (and on the operator endpoint when it listens
//! beyond loopback): rustls with the aws-lc-rs provider, a certificate chain and a
//! private key from PEM files, reloaded on SIGHUP without dropping connections.
//!
//! Established connections keep the certificate they were handshaken with; a reload
//! swaps the certificate that *new* handshakes get. A reload that fails (missing
//! file, a key that does not match the certificate, a key readable by others)
//! keeps the old certificate and reports the error. TLS 1.2 and 1.3, ALPN
//! `http/1.1`. The handshake runs inside the connection's own task on its first
//! read, bounded by [`HANDSHAKE_TIMEOUT`], so a slow handshake never holds up
//! accepting. Certificates come from `[tls]`, `--tls-cert`/`--tls-key`, the
//! systemd credentials `tls-cert`/`tls-key`, or the pair `init --tls-self-signed`
//! wrote to `<data_dir>/tls/`; plain HTTP on a non-loopback listener is refused
//! unless `tls.allow_plain_http` says otherwise (then a warning is logged).
//!
//! `oram-proxy init --tls-self-signed` makes a private CA and a server certificate
//! signed by it ([`generate_self_signed`]): clients verify the server against the
//! CA file (`AWS_CA_BUNDLE`, boto3's `verify=`, `swift --os-cacert`). The CA's key
//! is never written anywhere: it signs the one certificate and is dropped, so the
//! CA file can vouch for nothing else. It writes `ca.pem` (for clients),
//! `cert.pem` (the server certificate with the CA appended) and `key.pem` (0600).

mod cert;
mod self_signed;
mod stream;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use oram_volume::fsutil::io;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use tokio::net::TcpStream;

pub use cert::{fingerprint, not_after, unix_now};
pub use self_signed::{default_names, generate_self_signed, SelfSigned, SELF_SIGNED_DAYS};
pub use stream::{Handshake, Stream};

use crate::ServeError;

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `[tls]`
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain (server certificate first).
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1), mode 0600.
    pub key_file: Option<PathBuf>,
    /// Allow plain HTTP on a non-loopback address (with a warning).
    pub allow_plain_http: bool,
}

/// Where `init --tls-self-signed` writes, and where an unconfigured `[tls]` looks.
pub fn default_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("tls")
}

/// The certificate and key files TLS uses, if any: `[tls]`, else the pair that
/// `init --tls-self-signed` wrote into the data directory `data_dir`.
pub fn files(cfg: &TlsConfig, data_dir: &Path) -> Result<Option<(PathBuf, PathBuf)>, ServeError> {
    match (&cfg.cert_file, &cfg.key_file) {
        (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
        (None, None) => {
            let dir = default_dir(data_dir);
            let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
            Ok((c.exists() && k.exists()).then_some((c, k)))
        }
        _ => Err(ServeError::Config(
            "tls.cert_file and tls.key_file go together".into(),
        )),
    }
}

/// Whether `addr` only accepts connections from this machine.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Refuses plain HTTP on a non-loopback listener unless `tls.allow_plain_http`;
/// warns when it is allowed. `what` names the listener for the messages.
pub fn check_plain_listener(cfg: &TlsConfig, what: &str, addr: &str) -> Result<(), ServeError> {
    let Ok(a) = addr.parse::<SocketAddr>() else {
        return Ok(()); // validate() reports unparsable addresses
    };
    if is_loopback(&a) {
        return Ok(());
    }
    if !cfg.allow_plain_http {
        return Err(ServeError::Config(format!(
            "{what} {addr} is not a loopback address and TLS is off: clients' signatures, \
             tokens and data would cross the network in the clear. Configure [tls] \
             cert_file and key_file (or run `oram-proxy init --tls-self-signed`), or accept \
             plain HTTP with --allow-plain-http (tls.allow_plain_http = true)"
        )));
    }
    tracing::warn!(
        "{what} {addr}: plain HTTP on a non-loopback address (tls.allow_plain_http): requests, \
         tokens and data cross the network unencrypted"
    );
    Ok(())
}

/// What the served certificate is, for the banner and `/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// The certificate file.
    pub cert_file: PathBuf,
    /// Its `notAfter`, seconds since the Unix epoch (0 if it could not be read).
    pub not_after: u64,
    /// SHA-256 of the server certificate's DER, hex with colons.
    pub fingerprint: String,
}

/// A TLS server configuration whose certificate can be replaced while it serves.
pub struct Tls {
    cert_file: PathBuf,
    key_file: PathBuf,
    resolver: Arc<Reloadable>,
    acceptor: tokio_rustls::TlsAcceptor,
    /// The certificate served now; lock order: none (held only to copy or replace).
    info: RwLock<CertInfo>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .finish_non_exhaustive()
    }
}

/// The certificate new handshakes get.
#[derive(Debug)]
struct Reloadable {
    /// The current certificate and key; held only to clone or replace the `Arc`.
    current: RwLock<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for Reloadable {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Refuses a private key file that group or others may read.
fn check_key_mode(path: &Path) -> Result<(), ServeError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(io(path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ServeError::Config(format!(
            "TLS key {} has mode {:o}: group and others must have no access (chmod 600 {})",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

/// Reads and checks a certificate chain and its key.
fn load_pair(cert_file: &Path, key_file: &Path) -> Result<(CertifiedKey, CertInfo), ServeError> {
    let bad =
        |path: &Path, what: String| ServeError::Config(format!("TLS {}: {what}", path.display()));
    check_key_mode(key_file)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| bad(cert_file, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(cert_file, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(cert_file, "no CERTIFICATE in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| bad(key_file, e.to_string()))?;
    let info = CertInfo {
        cert_file: cert_file.to_path_buf(),
        not_after: not_after(&certs[0]).unwrap_or(0),
        fingerprint: fingerprint(&certs[0]),
    };
    let ck = CertifiedKey::from_der(certs, key, &provider()).map_err(|e| {
        bad(
            key_file,
            format!("unusable with {}: {e}", cert_file.display()),
        )
    })?;
    Ok((ck, info))
}

impl Tls {
    /// Loads `cert_file` and `key_file` (the key must be mode 0600 or stricter).
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, ServeError> {
        let (ck, info) = load_pair(cert_file, key_file)?;
        let resolver = Arc::new(Reloadable {
            current: RwLock::new(Arc::new(ck)),
        });
        let mut sc = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ServeError::Config(format!("TLS: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        // HTTP/1.1 only: every S3 and Swift client speaks it.
        sc.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            resolver,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(sc)),
            info: RwLock::new(info),
        })
    }

    /// Re-reads the files; on success new handshakes get the new certificate, on
    /// failure the old one stays and the error is returned.
    pub fn reload(&self) -> Result<CertInfo, ServeError> {
        let (ck, info) = load_pair(&self.cert_file, &self.key_file)?;
        *self
            .resolver
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(ck);
        *self.info.write().unwrap_or_else(|e| e.into_inner()) = info.clone();
        Ok(info)
    }

    /// The certificate served now.
    pub fn info(&self) -> CertInfo {
        self.info.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// A connection that speaks TLS (handshake on first use, bounded by
    /// [`HANDSHAKE_TIMEOUT`]).
    pub fn stream(&self, socket: TcpStream) -> Stream {
        Stream::Handshaking(Box::new(Handshake {
            accept: self.acceptor.accept(socket),
            deadline: Box::pin(tokio::time::sleep(HANDSHAKE_TIMEOUT)),
        }))
    }
}

/// Loads the configured TLS pair, if TLS is on (see [`files`]).
pub fn from_config(cfg: &TlsConfig, data_dir: &Path) -> Result<Option<Arc<Tls>>, ServeError> {
    match files(cfg, data_dir)? {
        None => Ok(None),
        Some((c, k)) => Ok(Some(Arc::new(Tls::load(&c, &k)?))),
    }
}
