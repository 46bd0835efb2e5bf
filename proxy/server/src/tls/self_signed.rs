//! `oram-proxy init --tls-self-signed`: a private CA and a server certificate
//! signed by it. The CA's key signs the one certificate and is dropped, never
//! written anywhere.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use oram_volume::fsutil::{io, write_private};

use super::cert::{fingerprint, not_after};
use super::CertInfo;
use crate::ServeError;

/// Validity of a certificate made by `init --tls-self-signed`.
pub const SELF_SIGNED_DAYS: i64 = 397;

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
/// addresses of `listens` (the listeners' addresses).
pub fn default_names(listens: &[&str]) -> Vec<String> {
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
    for l in listens {
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
pub fn generate_self_signed(dir: &Path, names: &[String]) -> Result<SelfSigned, ServeError> {
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
            return Err(ServeError::Config(format!(
                "{} exists: remove the old certificate files first to make new ones",
                f.display()
            )));
        }
    }
    if names.is_empty() {
        return Err(ServeError::Config(
            "a certificate needs at least one name".into(),
        ));
    }
    let tls_err = |e: rcgen::Error| ServeError::Config(format!("certificate generation: {e}"));
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
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    let key_pem = zeroize::Zeroizing::new(key.serialize_pem());
    write_private(&key_file, &key_pem)?;
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
fn write_public(path: &Path, text: &str) -> Result<(), ServeError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(io(path))?;
    f.write_all(text.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(io(path))?;
    Ok(())
}
