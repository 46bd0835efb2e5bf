//! Files that hold secrets (owner-only modes), and hex of secret bytes in
//! zeroized memory — the small helpers the data directory, the keys, the lease
//! and the server's TLS and token files share.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use zeroize::Zeroizing;

use crate::VolumeError;

/// Maps an I/O error on `path` to [`VolumeError::Io`].
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Hex of secret bytes, zeroized when dropped.
pub fn hex_secret(b: &[u8]) -> Zeroizing<String> {
    let mut buf = Zeroizing::new(vec![0u8; 2 * b.len()]);
    hex::encode_to_slice(b, &mut buf).expect("the buffer is twice the input");
    Zeroizing::new(String::from_utf8(buf.to_vec()).expect("hex digits are ASCII"))
}

/// Bytes from hex (surrounding whitespace ignored), zeroized when dropped (some
/// of them are keys).
pub fn unhex_vec(s: &str) -> Option<Zeroizing<Vec<u8>>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let mut out = Zeroizing::new(vec![0u8; s.len() / 2]);
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// Exactly `N` bytes from hex, zeroized when dropped.
pub fn unhex<const N: usize>(s: &str) -> Option<Zeroizing<[u8; N]>> {
    let mut out = Zeroizing::new([0u8; N]);
    hex::decode_to_slice(s.trim(), out.as_mut()).ok()?;
    Some(out)
}

/// Runs `f` (file work that may fsync) on the blocking pool, so that it never
/// holds a tokio worker; `what` names it if the task is lost.
pub async fn blocking<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> Result<T, VolumeError> + Send + 'static,
) -> Result<T, VolumeError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| VolumeError::Config(format!("{what}: {e}")))?
}

/// Writes a new file readable by its owner only; fails if it exists.
pub fn write_private(path: &Path, contents: &str) -> Result<(), VolumeError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(contents.as_bytes()).map_err(io(path))?;
    f.sync_all().map_err(io(path))
}

/// Refuses a secret file that group or others may read.
pub fn check_private(path: &Path) -> Result<(), VolumeError> {
    let mode = fs::metadata(path).map_err(io(path))?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(VolumeError::Key(format!(
            "{} has mode {:o}: group and others must have no access (chmod 600 {})",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_junk() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(*hex_secret(&b), "0001abff");
        assert_eq!(&*unhex_vec(" 0001ABff\n").unwrap(), &b);
        assert_eq!(*unhex::<4>("0001abff").unwrap(), b);
        assert!(unhex::<4>("0001ab").is_none(), "too short");
        assert!(unhex::<2>("0001ab").is_none(), "too long");
        assert!(unhex_vec("abc").is_none(), "odd length");
        assert!(unhex_vec("zz").is_none(), "not hex");
    }
}
