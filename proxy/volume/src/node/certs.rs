//! `oram-proxy cluster certs`: the cluster's own CA and a TLS identity for each
//! member (the front and every node authenticate each other with them).

use std::path::{Path, PathBuf};

use crate::fsutil::write_private;
use crate::VolumeError;

/// Makes a CA named `name` in `out` (`ca.pem`, and `ca.key`, mode 0600: keep
/// it offline, it signs new members) and, for each of `members`, a directory
/// `out/<member>` holding `ca.pem`, `member.pem` and `member.key` (0600): what
/// `[cluster] tls_dir` names. Refuses to overwrite anything. Returns the
/// members' directories.
pub fn make_certs(out: &Path, name: &str, members: &[String]) -> Result<Vec<PathBuf>, VolumeError> {
    let tls = |e: oram_node::NodeError| VolumeError::Config(e.to_string());
    if members.is_empty() {
        return Err(VolumeError::Config(
            "name the cluster's members (--members front,node0,node1,...)".into(),
        ));
    }
    for (i, m) in members.iter().enumerate() {
        let plain = !m.is_empty()
            && m.len() <= 64
            && m.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !plain {
            return Err(VolumeError::Config(format!(
                "member name {m:?}: use letters, digits, '-' and '_' (at most 64)"
            )));
        }
        if members[..i].contains(m) {
            return Err(VolumeError::Config(format!("member {m:?} is named twice")));
        }
        if out.join(m).exists() {
            return Err(VolumeError::Config(format!(
                "{} exists: refusing to overwrite a member's identity",
                out.join(m).display()
            )));
        }
    }
    let ca_key = out.join("ca.key");
    if ca_key.exists() {
        return Err(VolumeError::Config(format!(
            "{} exists: refusing to replace the cluster's CA (its members would no longer \
             trust each other)",
            ca_key.display()
        )));
    }
    crate::datadir::ensure_dir(out)?;
    let ca = oram_node::mint_ca(name).map_err(tls)?;
    write_private(&ca_key, &ca.key_pem)?;
    write_private(&out.join("ca.pem"), &ca.cert_pem)?;
    members
        .iter()
        .map(|m| {
            let dir = out.join(m);
            oram_node::tls::write_member(&dir, &ca, m).map_err(tls)?;
            Ok(dir)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_of_one_ca_trust_each_other_and_nothing_is_overwritten() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("certs");
        let members = vec!["front".to_string(), "node0".to_string()];
        let dirs = make_certs(&out, "test", &members).unwrap();
        assert_eq!(dirs, vec![out.join("front"), out.join("node0")]);
        for dir in &dirs {
            oram_node::ClusterTls::from_dir(dir).unwrap();
        }
        let e = make_certs(&out, "test", &["node1".to_string()]).unwrap_err();
        assert!(e.to_string().contains("refusing to replace"), "{e}");
        let e = make_certs(&d.path().join("b"), "t", &["a/b".to_string()]).unwrap_err();
        assert!(e.to_string().contains("letters, digits"), "{e}");
    }
}
