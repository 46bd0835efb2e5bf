//! Mutual TLS between a cluster's members: every member holds a certificate
//! signed by the cluster's own CA and trusts only that CA, so a front talks only
//! to nodes of its cluster and a node serves only its cluster's fronts.
//!
//! Members are named by the CA, not by DNS: every certificate carries the one
//! name [`MEMBER_NAME`], which clients verify; the addresses come from the
//! coordinator. The CA's key signs member certificates at `init` and is kept
//! with the operator, not on the members.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::NodeError;

/// The name in every member certificate, which peers verify.
pub const MEMBER_NAME: &str = "oram-cluster-member";

/// Days a minted certificate is valid.
pub const MEMBER_DAYS: i64 = 825;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn tls_err(what: &str) -> impl Fn(rustls::Error) -> NodeError + '_ {
    move |e| NodeError::Tls(format!("{what}: {e}"))
}

/// A member's TLS configurations: as a server (a node) and as a client (a
/// front), both requiring the peer's certificate from the cluster's CA.
#[derive(Clone)]
pub struct ClusterTls {
    /// Accepts fronts (a node's listener).
    pub acceptor: tokio_rustls::TlsAcceptor,
    /// Dials nodes (a front).
    pub connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ClusterTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterTls").finish_non_exhaustive()
    }
}

impl ClusterTls {
    /// From PEM text: the cluster CA's certificate, this member's certificate
    /// chain and its private key.
    pub fn from_pem(ca: &[u8], chain: &[u8], key: &[u8]) -> Result<Self, NodeError> {
        let pem =
            |what: &str, e: rustls::pki_types::pem::Error| NodeError::Tls(format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(ca) {
            roots
                .add(c.map_err(|e| pem("the cluster CA", e))?)
                .map_err(tls_err("the cluster CA"))?;
        }
        if roots.is_empty() {
            return Err(NodeError::Tls(
                "the cluster CA file holds no certificate".into(),
            ));
        }
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<_, _>>()
            .map_err(|e| pem("the member certificate", e))?;
        if chain.is_empty() {
            return Err(NodeError::Tls(
                "the member certificate file holds no certificate".into(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| pem("the member key", e))?;
        let roots = Arc::new(roots);
        let verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider())
            .build()
            .map_err(|e| NodeError::Tls(format!("the cluster CA: {e}")))?;
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_err("TLS"))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(tls_err("the member certificate"))?;
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(tls_err("TLS"))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(tls_err("the member certificate"))?;
        Ok(Self {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(server)),
            connector: tokio_rustls::TlsConnector::from(Arc::new(client)),
        })
    }

    /// From the files `ca.pem`, `member.pem` and `member.key` in `dir` (what
    /// [`mint_member`] writes).
    pub fn from_dir(dir: &Path) -> Result<Self, NodeError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| NodeError::Tls(format!("{}: {e}", path.display())))
        };
        Self::from_pem(&read("ca.pem")?, &read("member.pem")?, &read("member.key")?)
    }

    /// The name a client verifies.
    pub fn server_name() -> ServerName<'static> {
        ServerName::try_from(MEMBER_NAME).expect("a valid DNS name")
    }
}

/// A cluster CA: its name, its certificate (PEM) and its key (PEM, secret).
pub struct ClusterCa {
    /// The cluster's name (the CA's subject is made from it).
    pub name: String,
    /// The CA certificate, PEM.
    pub cert_pem: String,
    /// The CA's private key, PEM: signs member certificates; keep it offline.
    pub key_pem: zeroize::Zeroizing<String>,
}

impl std::fmt::Debug for ClusterCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterCa")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn gen_err(e: rcgen::Error) -> NodeError {
    NodeError::Tls(format!("certificate generation: {e}"))
}

/// The CA's parameters for cluster `name` (its subject: what member
/// certificates name as their issuer).
fn ca_params(name: &str) -> Result<CertificateParams, NodeError> {
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen_err)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name.push(
        DnType::CommonName,
        format!("oram-proxy cluster CA ({name})"),
    );
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(MEMBER_DAYS);
    Ok(ca)
}

/// A new cluster CA for cluster `name`.
pub fn mint_ca(name: &str) -> Result<ClusterCa, NodeError> {
    let key = KeyPair::generate().map_err(gen_err)?;
    let cert = ca_params(name)?.self_signed(&key).map_err(gen_err)?;
    Ok(ClusterCa {
        name: name.to_string(),
        cert_pem: cert.pem(),
        key_pem: zeroize::Zeroizing::new(key.serialize_pem()),
    })
}

/// A member certificate and key signed by `ca`, as PEM: (chain, key). `member`
/// names it in the subject (for logs); peers verify [`MEMBER_NAME`].
pub fn mint_member(
    ca: &ClusterCa,
    member: &str,
) -> Result<(String, zeroize::Zeroizing<String>), NodeError> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).map_err(gen_err)?;
    let issuer = Issuer::new(ca_params(&ca.name)?, ca_key);
    let now = time::OffsetDateTime::now_utc();
    let mut leaf = CertificateParams::new(vec![MEMBER_NAME.to_string()]).map_err(gen_err)?;
    leaf.distinguished_name = rcgen::DistinguishedName::new();
    leaf.distinguished_name.push(DnType::CommonName, member);
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    leaf.use_authority_key_identifier_extension = true;
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + time::Duration::days(MEMBER_DAYS);
    let key = KeyPair::generate().map_err(gen_err)?;
    let cert = leaf.signed_by(&key, &issuer).map_err(gen_err)?;
    Ok((
        format!("{}{}", cert.pem(), ca.cert_pem),
        zeroize::Zeroizing::new(key.serialize_pem()),
    ))
}

/// Writes `ca.pem`, `member.pem` and `member.key` (0600) for `member` into
/// `dir` (created 0700), refusing to overwrite.
pub fn write_member(dir: &Path, ca: &ClusterCa, member: &str) -> Result<(), NodeError> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |path: &Path, e: std::io::Error| NodeError::Tls(format!("{}: {e}", path.display()));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io(dir, e))?;
    let (chain, key) = mint_member(ca, member)?;
    for (name, text, mode) in [
        ("ca.pem", ca.cert_pem.as_str(), 0o644),
        ("member.pem", chain.as_str(), 0o644),
        ("member.key", key.as_str(), 0o600),
    ] {
        let path = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        f.write_all(text.as_bytes()).map_err(|e| io(&path, e))?;
        f.sync_all().map_err(|e| io(&path, e))?;
    }
    Ok(())
}
