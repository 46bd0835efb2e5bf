//! Tests of the certificates, their reload and the plain-HTTP guard.

use std::path::Path;

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
    assert_eq!(cert::unix_seconds(1970, 1, 1, 0, 0, 0), Some(0));
    assert_eq!(
        cert::unix_seconds(2000, 3, 1, 0, 0, 0),
        Some(11_017 * 86_400)
    );
    assert_eq!(
        cert::unix_seconds(2024, 2, 29, 23, 59, 59),
        Some(1_709_251_199)
    );
    assert_eq!(cert::unix_seconds(2023, 2, 29, 0, 0, 0), None);
    assert_eq!(not_after(b"\x30\x00"), None);
    assert_eq!(not_after(b""), None);
}

#[test]
fn plain_http_beyond_loopback_needs_consent() {
    let mut cfg = TlsConfig::default();
    assert!(check_plain_listener(&cfg, "s3.listen", "127.0.0.1:8480").is_ok());
    assert!(check_plain_listener(&cfg, "s3.listen", "[::1]:8480").is_ok());
    let err = check_plain_listener(&cfg, "s3.listen", "0.0.0.0:8480")
        .unwrap_err()
        .to_string();
    assert!(err.contains("--allow-plain-http"), "{err}");
    assert!(check_plain_listener(&cfg, "s3.listen", "10.1.2.3:8480").is_err());
    cfg.allow_plain_http = true;
    assert!(check_plain_listener(&cfg, "s3.listen", "0.0.0.0:8480").is_ok());
}
