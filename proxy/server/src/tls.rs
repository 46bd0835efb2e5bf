//! TLS on the S3 and Swift listeners (and on the operator endpoint when it listens
//! beyond loopback): rustls with the aws-lc-rs provider, a certificate chain and a
//! private key from PEM files, reloaded on SIGHUP without dropping connections.
//!
//! Established connections keep the certificate they were handshaken with; a reload
//! swaps the certificate that *new* handshakes get. A reload that fails (missing
//! file, a key that does not match the certificate) keeps the old certificate and
//! reports the error.
//!
//! `oram-proxy init --tls-self-signed` makes a private CA and a server certificate
//! signed by it ([`generate_self_signed`]): clients verify the server against the
//! CA file (`AWS_CA_BUNDLE`, boto3's `verify=`, `swift --os-cacert`). The CA's key
//! is never written anywhere: it signs the one certificate and is dropped, so the
//! CA file can vouch for nothing else.

use std::future::Future as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::Config;
use crate::ProxyError;

/// How long a client may take to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Validity of a certificate made by `init --tls-self-signed`.
pub const SELF_SIGNED_DAYS: i64 = 397;

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
/// `init --tls-self-signed` wrote into the data directory.
pub fn files(cfg: &Config) -> Result<Option<(PathBuf, PathBuf)>, ProxyError> {
    match (&cfg.tls.cert_file, &cfg.tls.key_file) {
        (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
        (None, None) => {
            let dir = default_dir(&cfg.data_dir);
            let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
            Ok((c.exists() && k.exists()).then_some((c, k)))
        }
        _ => Err(ProxyError::Config(
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
pub fn check_plain_listener(cfg: &Config, what: &str, addr: &str) -> Result<(), ProxyError> {
    let Ok(a) = addr.parse::<SocketAddr>() else {
        return Ok(()); // validate() reports unparsable addresses
    };
    if is_loopback(&a) {
        return Ok(());
    }
    if !cfg.tls.allow_plain_http {
        return Err(ProxyError::Config(format!(
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
fn check_key_mode(path: &Path) -> Result<(), ProxyError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(crate::keys::io(path))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(ProxyError::Config(format!(
            "TLS key {} has mode {:o}: group and others must have no access (chmod 600 {})",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

/// Reads and checks a certificate chain and its key.
fn load_pair(cert_file: &Path, key_file: &Path) -> Result<(CertifiedKey, CertInfo), ProxyError> {
    let bad =
        |path: &Path, what: String| ProxyError::Config(format!("TLS {}: {what}", path.display()));
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
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Self, ProxyError> {
        let (ck, info) = load_pair(cert_file, key_file)?;
        let resolver = Arc::new(Reloadable {
            current: RwLock::new(Arc::new(ck)),
        });
        let mut sc = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| ProxyError::Config(format!("TLS: {e}")))?
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
    pub fn reload(&self) -> Result<CertInfo, ProxyError> {
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
pub fn from_config(cfg: &Config) -> Result<Option<Arc<Tls>>, ProxyError> {
    match files(cfg)? {
        None => Ok(None),
        Some((c, k)) => Ok(Some(Arc::new(Tls::load(&c, &k)?))),
    }
}

/// A connection: plain TCP, or TLS (handshaking, then established). The
/// handshake runs inside the connection's own task, on its first read or write,
/// so a slow client never holds up the accept loop.
pub enum Stream {
    /// Plain HTTP.
    Plain(TcpStream),
    /// TLS handshake in progress.
    Handshaking(Box<Handshake>),
    /// TLS established.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// The handshake failed; every call fails.
    Failed,
}

/// A TLS handshake with its deadline.
pub struct Handshake {
    accept: tokio_rustls::Accept<TcpStream>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

impl Stream {
    /// Plain TCP, or TLS when `tls` is given.
    pub fn new(socket: TcpStream, tls: Option<&Tls>) -> Self {
        match tls {
            Some(t) => t.stream(socket),
            None => Stream::Plain(socket),
        }
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Stream::Handshaking(h) = self else {
            return Poll::Ready(match self {
                Stream::Failed => Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "TLS handshake failed",
                )),
                _ => Ok(()),
            });
        };
        if h.deadline.as_mut().poll(cx).is_ready() {
            *self = Stream::Failed;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "TLS handshake timed out",
            )));
        }
        match Pin::new(&mut h.accept).poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(s)) => {
                *self = Stream::Tls(Box::new(s));
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                *self = Stream::Failed;
                Poll::Ready(Err(e))
            }
        }
    }
}

macro_rules! ready {
    ($e:expr) => {
        match $e {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        ready!(me.poll_handshake(cx));
        match me {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match me.poll_handshake(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match me {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        match me.poll_handshake(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => return Poll::Pending,
        }
        match me {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            _ => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            _ => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            _ => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            _ => Poll::Ready(Ok(())),
        }
    }
}

/// SHA-256 of a certificate, as `AB:CD:...`.
pub fn fingerprint(cert: &[u8]) -> String {
    Sha256::digest(cert)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One DER element: (tag, contents, rest).
fn der(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (len0 as usize, rest)
    } else {
        let n = (len0 & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The `notAfter` of an X.509 certificate, seconds since the Unix epoch.
pub fn not_after(cert: &[u8]) -> Option<u64> {
    let (0x30, c, _) = der(cert)? else {
        return None;
    };
    let (0x30, tbs, _) = der(c)? else { return None };
    let (tag, _, mut rest) = der(tbs)?;
    if tag == 0xa0 {
        // [0] version, then the serial number.
        rest = der(rest)?.2;
    }
    let rest = der(rest)?.2; // signature algorithm
    let rest = der(rest)?.2; // issuer
    let (0x30, validity, _) = der(rest)? else {
        return None;
    };
    let (_, _, r) = der(validity)?; // notBefore
    let (tag, t, _) = der(r)?;
    let t = std::str::from_utf8(t).ok()?;
    let (year, rest) = match tag {
        0x17 => {
            let yy: i64 = t.get(0..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, t.get(2..)?)
        }
        0x18 => (t.get(0..4)?.parse().ok()?, t.get(4..)?),
        _ => return None,
    };
    let num = |r: std::ops::Range<usize>| -> Option<i64> { rest.get(r)?.parse().ok() };
    let (mo, d, h, mi, s) = (num(0..2)?, num(2..4)?, num(4..6)?, num(6..8)?, num(8..10)?);
    if rest.get(10..) != Some("Z") {
        return None;
    }
    let days = days_from_civil(year, mo, d);
    u64::try_from(days * 86_400 + h * 3600 + mi * 60 + s).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Files written by [`generate_self_signed`].
#[derive(Debug, Clone)]
pub struct SelfSigned {
    /// The CA certificate to give to clients.
    pub ca_file: PathBuf,
    /// The server certificate (followed by the CA certificate).
    pub cert_file: PathBuf,
    /// The server's private key (0600).
    pub key_file: PathBuf,
    /// The names and addresses the certificate is valid for.
    pub names: Vec<String>,
    /// The server certificate's details.
    pub info: CertInfo,
}

/// The names a self-signed certificate covers by default: `localhost`, the
/// loopback addresses, this machine's host name, and the non-wildcard IP
/// addresses the listeners bind.
pub fn default_names(cfg: &Config) -> Vec<String> {
    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() && h != "localhost" {
            names.push(h.to_string());
        }
    }
    for l in [&cfg.s3.listen, &cfg.swift.listen] {
        if let Ok(a) = l.parse::<SocketAddr>() {
            let ip = a.ip();
            if !ip.is_unspecified() && !ip.is_loopback() {
                names.push(ip.to_string());
            }
        }
    }
    names
}

/// Makes a private CA and a server certificate for `names` (DNS names or IP
/// addresses) valid for [`SELF_SIGNED_DAYS`], and writes `ca.pem`, `cert.pem` and
/// `key.pem` (0600) into `dir` (created 0700). Refuses to overwrite existing files.
pub fn generate_self_signed(dir: &Path, names: &[String]) -> Result<SelfSigned, ProxyError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let (ca_file, cert_file, key_file) = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    for f in [&ca_file, &cert_file, &key_file] {
        if f.exists() {
            return Err(ProxyError::Config(format!(
                "{} exists: remove the old certificate files first to make new ones",
                f.display()
            )));
        }
    }
    if names.is_empty() {
        return Err(ProxyError::Config(
            "a certificate needs at least one name".into(),
        ));
    }
    let tls_err = |e: rcgen::Error| ProxyError::Config(format!("certificate generation: {e}"));
    let now = time::OffsetDateTime::now_utc();
    let not_before = now - time::Duration::hours(1);
    let expires = now + time::Duration::days(SELF_SIGNED_DAYS);
    let host = names
        .iter()
        .find(|n| n.parse::<IpAddr>().is_err())
        .cloned()
        .unwrap_or_else(|| names[0].clone());

    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(tls_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, format!("oram-proxy local CA ({host})"));
    ca.distinguished_name
        .push(DnType::OrganizationName, "oram-proxy");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = not_before;
    ca.not_after = expires;
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(tls_err)?;
    let issuer = Issuer::new(ca, ca_key);

    let mut leaf = CertificateParams::new(names.to_vec()).map_err(tls_err)?;
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name.push(DnType::CommonName, host);
    leaf.distinguished_name
        .push(DnType::OrganizationName, "oram-proxy");
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.use_authority_key_identifier_extension = true;
    leaf.not_before = not_before;
    leaf.not_after = expires;
    let key = KeyPair::generate().map_err(tls_err)?;
    let cert = leaf.signed_by(&key, &issuer).map_err(tls_err)?;
    drop(issuer); // the CA key: never stored

    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(crate::keys::io(dir))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(crate::keys::io(dir))?;
    }
    let key_pem = zeroize::Zeroizing::new(key.serialize_pem());
    crate::keys::write_private(&key_file, &key_pem)?;
    write_public(&ca_file, &ca_cert.pem())?;
    write_public(&cert_file, &format!("{}{}", cert.pem(), ca_cert.pem()))?;
    let info = CertInfo {
        cert_file: cert_file.clone(),
        not_after: not_after(cert.der()).unwrap_or(0),
        fingerprint: fingerprint(cert.der()),
    };
    Ok(SelfSigned {
        ca_file,
        cert_file,
        key_file,
        names: names.to_vec(),
        info,
    })
}

/// Writes a public file (a certificate) with mode 0644, refusing to replace one.
fn write_public(path: &Path, text: &str) -> Result<(), ProxyError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(crate::keys::io(path))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(crate::keys::io(path))
}

/// Seconds since the Unix epoch now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_pair_loads_and_reports_its_expiry() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("tls");
        let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
        let made = generate_self_signed(&dir, &names).unwrap();
        let now = unix_now();
        let days = (made.info.not_after - now) as f64 / 86_400.0;
        assert!(
            (SELF_SIGNED_DAYS as f64 - 1.0..=SELF_SIGNED_DAYS as f64 + 1.0).contains(&days),
            "{days}"
        );
        let tls = Tls::load(&made.cert_file, &made.key_file).unwrap();
        assert_eq!(tls.info(), made.info);
        // The key is private, the directory too.
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&made.key_file), 0o600);
        assert_eq!(mode(&dir), 0o700);
        // No second run over existing files.
        let err = generate_self_signed(&dir, &names).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
    }

    #[test]
    fn reload_swaps_the_certificate_and_a_bad_reload_keeps_the_old() {
        let d = tempfile::tempdir().unwrap();
        let a = generate_self_signed(&d.path().join("a"), &["localhost".into()]).unwrap();
        let b = generate_self_signed(&d.path().join("b"), &["localhost".into()]).unwrap();
        let live = d.path().join("live");
        std::fs::create_dir(&live).unwrap();
        let (cert, key) = (live.join("cert.pem"), live.join("key.pem"));
        let put = |from: &SelfSigned| {
            std::fs::copy(&from.cert_file, &cert).unwrap();
            std::fs::copy(&from.key_file, &key).unwrap();
        };
        put(&a);
        let tls = Tls::load(&cert, &key).unwrap();
        assert_eq!(tls.info().fingerprint, a.info.fingerprint);
        put(&b);
        assert_eq!(tls.reload().unwrap().fingerprint, b.info.fingerprint);
        assert_eq!(tls.info().fingerprint, b.info.fingerprint);
        // A key that does not belong to the certificate: refused, old one kept.
        std::fs::copy(&a.key_file, &key).unwrap();
        let err = tls.reload().unwrap_err().to_string();
        assert!(err.contains("unusable"), "{err}");
        assert_eq!(tls.info().fingerprint, b.info.fingerprint);
        // A key readable by others: refused like the master key.
        put(&b);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(tls.reload().is_err());
        std::fs::remove_file(&cert).unwrap();
        assert!(tls.reload().is_err());
        assert_eq!(tls.info().fingerprint, b.info.fingerprint);
    }

    #[test]
    fn der_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(not_after(b"\x30\x00"), None);
        assert_eq!(not_after(b""), None);
    }

    #[test]
    fn plain_http_beyond_loopback_needs_consent() {
        let mut cfg = Config::default();
        assert!(check_plain_listener(&cfg, "s3.listen", "127.0.0.1:8480").is_ok());
        assert!(check_plain_listener(&cfg, "s3.listen", "[::1]:8480").is_ok());
        let err = check_plain_listener(&cfg, "s3.listen", "0.0.0.0:8480")
            .unwrap_err()
            .to_string();
        assert!(err.contains("--allow-plain-http"), "{err}");
        assert!(check_plain_listener(&cfg, "s3.listen", "10.1.2.3:8480").is_err());
        cfg.tls.allow_plain_http = true;
        assert!(check_plain_listener(&cfg, "s3.listen", "0.0.0.0:8480").is_ok());
    }
}
