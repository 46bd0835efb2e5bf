//! The volume's own backend objects besides the engine's: the volume header
//! (written, read and checked here) and the authentication of it and of the head
//! of each checkpoint. Both are read from the untrusted backend, the header by
//! `recover` before anything else is known.
//!
//! * **Volume header** `<prefix>/meta/volume`: TOML of the public parameters plus
//!   `mac`, HMAC-SHA256 under the HKDF subkey `"oram-proxy volume header v1"` of the
//!   master key over the TOML of the parameters without it. `recover` bounds the
//!   Argon2id costs before deriving anything ([`crate::key::Kdf::check_bounds`]),
//!   derives the key, and refuses a header whose MAC does not verify — so the
//!   provider can neither change the parameters nor the prefix and volume id it
//!   names (a header moved from another volume's prefix names that prefix). A
//!   start rewrites a header that is missing its MAC or does not match the local
//!   parameters.
//! * **Checkpoint** `<prefix>/meta/checkpoint`: `ORAMCKP2 ‖ epoch (u64 BE) ‖
//!   sealed head ‖ sealed snapshot`. The head is sealed as (`Meta`, position 1,
//!   version = epoch) and holds the epoch and the lengths, so the start-up roll-back
//!   check reads and *authenticates* the first [`HEAD_LEN`] bytes instead of trusting
//!   a plaintext prefix, and `recover` learns the exact size to download. The
//!   snapshot is sealed as (`Meta`, position 0, version = epoch), as before.
//!   Checkpoints of the previous format (`ORAMCKP1`, no head) are still read: the
//!   start-up check then downloads and opens the whole object.
//! * **A cluster node's checkpoint** `<prefix>/node/<i>/meta/checkpoint`: the same
//!   format, sealed in the node's own space ([`Owner::Node`]: space `i + 1`, the
//!   volume's is 0), so that no checkpoint opens as another owner's: a node's
//!   moved to the volume's key, or to another node's, fails to authenticate.

use hmac::{Hmac, Mac};
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey};
use oram_seal::{MasterKey, ObjectIdentity, ObjectKind, Sealer};
use sha2::Sha256;

use crate::fsutil::unhex_vec;
use crate::lease::without_lease;
use crate::params::VolumeParams;
use crate::VolumeError;

/// Magic of the checkpoint format with an authenticated head.
pub const MAGIC_V2: &[u8; 8] = b"ORAMCKP2";
/// Magic of the earlier format (plaintext epoch only).
pub const MAGIC_V1: &[u8; 8] = b"ORAMCKP1";
/// Plaintext of the head: epoch, whole object length, snapshot plaintext length.
const HEAD_PLAIN: usize = 24;
/// Bytes at the start of a checkpoint object that authenticate it.
pub const HEAD_LEN: usize = 16 + Sealer::sealed_len(HEAD_PLAIN);

/// The key of the header's MAC (kept by an open volume, which re-signs its
/// header when it grows without holding the master key).
pub(crate) fn mac_key(key: &MasterKey) -> zeroize::Zeroizing<[u8; 32]> {
    key.subkey("oram-proxy volume header v1")
}

fn mac_of(mac_key: &[u8; 32], p: &VolumeParams) -> Vec<u8> {
    let mut unsigned = p.clone();
    unsigned.mac = None;
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(mac_key).expect("HMAC takes any key length");
    m.update(unsigned.to_toml().as_bytes());
    m.finalize().into_bytes().to_vec()
}

/// `p` with its MAC under `key`.
pub fn sign_header(key: &MasterKey, p: &VolumeParams) -> VolumeParams {
    sign_header_with(&mac_key(key), p)
}

/// `p` with its MAC under the header's MAC key ([`mac_key`]).
pub(crate) fn sign_header_with(mac_key: &[u8; 32], p: &VolumeParams) -> VolumeParams {
    let mut signed = p.clone();
    signed.mac = Some(hex::encode(mac_of(mac_key, p)));
    signed
}

/// Whether `p` carries a valid MAC under `key` (compared in constant time).
pub fn header_is_authentic(key: &MasterKey, p: &VolumeParams) -> bool {
    let Some(mac) = p.mac.as_deref().and_then(unhex_vec) else {
        return false;
    };
    let mut unsigned = p.clone();
    unsigned.mac = None;
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(mac_key(key).as_ref())
        .expect("HMAC takes any key length");
    m.update(unsigned.to_toml().as_bytes());
    m.verify_slice(&mac).is_ok()
}

/// Whose state a checkpoint holds: bound into its sealed identities (the head's
/// and the snapshot's space), so that the provider cannot pass one owner's
/// checkpoint off as another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The volume's (a single proxy's, or a cluster front's): space 0.
    Volume,
    /// Cluster node `i`'s: space `i + 1`.
    Node(u32),
}

impl Owner {
    /// The sealed identities' space.
    fn space(self) -> u32 {
        match self {
            Owner::Volume => 0,
            Owner::Node(i) => i.saturating_add(1),
        }
    }

    /// The snapshot's identity at `epoch`.
    pub fn snapshot_identity(self, epoch: u64) -> ObjectIdentity {
        ObjectIdentity {
            space: self.space(),
            ..ObjectIdentity::plain(ObjectKind::Meta, 0, epoch)
        }
    }

    fn head_identity(self, epoch: u64) -> ObjectIdentity {
        ObjectIdentity {
            space: self.space(),
            ..ObjectIdentity::plain(ObjectKind::Meta, 1, epoch)
        }
    }
}

/// A checkpoint object of `owner`: magic, epoch, sealed head, `sealed` (the
/// snapshot sealed as [`Owner::snapshot_identity`]).
pub fn checkpoint_object(
    sealer: &Sealer,
    owner: Owner,
    epoch: u64,
    plain_len: u64,
    sealed: &[u8],
) -> Result<Vec<u8>, VolumeError> {
    let total = (HEAD_LEN + sealed.len()) as u64;
    let mut head = [0u8; HEAD_PLAIN];
    head[..8].copy_from_slice(&epoch.to_be_bytes());
    head[8..16].copy_from_slice(&total.to_be_bytes());
    head[16..].copy_from_slice(&plain_len.to_be_bytes());
    let sealed_head = sealer
        .seal(&owner.head_identity(epoch), &head)
        .map_err(|e| VolumeError::Integrity(format!("sealing the checkpoint head: {e}")))?;
    let mut obj = Vec::with_capacity(total as usize);
    obj.extend_from_slice(MAGIC_V2);
    obj.extend_from_slice(&epoch.to_be_bytes());
    obj.extend_from_slice(&sealed_head);
    obj.extend_from_slice(sealed);
    debug_assert_eq!(obj.len() as u64, total);
    Ok(obj)
}

/// What an authenticated checkpoint head says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The checkpoint's epoch.
    pub epoch: u64,
    /// Bytes of the whole checkpoint object.
    pub total: u64,
}

/// What the first bytes of a checkpoint object are.
#[derive(Debug, PartialEq, Eq)]
pub enum Prefix {
    /// A checkpoint with an authenticated head.
    V2(Head),
    /// A checkpoint of the earlier format: its (unauthenticated) epoch.
    V1(u64),
}

/// Parses and, for the current format, authenticates as `owner`'s the first
/// [`HEAD_LEN`] bytes (or fewer, for the earlier format, which only the volume
/// wrote) of a checkpoint object.
pub fn parse_prefix(sealer: &Sealer, owner: Owner, b: &[u8]) -> Result<Prefix, VolumeError> {
    let malformed = || VolumeError::Integrity("the backend checkpoint object is malformed".into());
    if b.len() < 16 {
        return Err(malformed());
    }
    let epoch = u64::from_be_bytes(b[8..16].try_into().expect("8 bytes"));
    if &b[..8] == MAGIC_V1 && owner == Owner::Volume {
        return Ok(Prefix::V1(epoch));
    }
    if &b[..8] != MAGIC_V2 || b.len() < HEAD_LEN {
        return Err(malformed());
    }
    let head = sealer
        .open(&owner.head_identity(epoch), &b[16..HEAD_LEN])
        .map_err(|e| {
            VolumeError::Integrity(format!(
                "the backend checkpoint's head does not authenticate ({e}): it was tampered with"
            ))
        })?;
    let total = u64::from_be_bytes(head[8..16].try_into().expect("8 bytes"));
    if head.len() != HEAD_PLAIN
        || u64::from_be_bytes(head[..8].try_into().expect("8 bytes")) != epoch
        || total < HEAD_LEN as u64
    {
        return Err(malformed());
    }
    Ok(Prefix::V2(Head { epoch, total }))
}

/// Opens a whole checkpoint object of `owner` (either format): returns its
/// epoch and the snapshot's plaintext.
pub fn open_checkpoint(
    sealer: &Sealer,
    owner: Owner,
    obj: &[u8],
) -> Result<(u64, Vec<u8>), VolumeError> {
    let (epoch, body) = match parse_prefix(sealer, owner, obj)? {
        Prefix::V1(e) => (e, &obj[16..]),
        Prefix::V2(h) => {
            if obj.len() as u64 != h.total {
                return Err(VolumeError::Integrity(format!(
                    "the checkpoint object has {} bytes, its head says {}",
                    obj.len(),
                    h.total
                )));
            }
            (h.epoch, &obj[HEAD_LEN..])
        }
    };
    let snap = sealer
        .open(&owner.snapshot_identity(epoch), body)
        .map_err(|e| VolumeError::Integrity(format!("the checkpoint does not open: {e}")))?;
    Ok((epoch, snap))
}

// ---- the header object on the backend ----

pub(crate) fn header_key(prefix: &str) -> ObjKey {
    ObjKey::new(format!("{prefix}/meta/volume")).expect("prefix validated")
}

/// The largest volume header accepted (it is a few hundred bytes of TOML).
const MAX_HEADER_BYTES: u64 = 64 * 1024;

pub(crate) async fn read_header(
    store: &dyn BlockStore,
    prefix: &str,
) -> Result<Option<VolumeParams>, VolumeError> {
    let got = store
        .get_many_bounded(
            &[header_key(prefix)],
            oram_blockstore::SizeBound::AtMost(MAX_HEADER_BYTES),
        )
        .await?;
    match got.into_iter().next().flatten() {
        None => Ok(None),
        Some(b) => {
            let text = String::from_utf8(b.to_vec()).map_err(|_| {
                VolumeError::Params(format!("backend {prefix}/meta/volume is not text"))
            })?;
            VolumeParams::from_toml(&text, &format!("backend object {prefix}/meta/volume"))
                .map(Some)
        }
    }
}

pub(crate) async fn write_header(
    store: &dyn BlockStore,
    p: &VolumeParams,
) -> Result<(), VolumeError> {
    store
        .put_many(vec![(
            header_key(&p.prefix),
            p.to_toml().into_bytes().into(),
        )])
        .await?;
    Ok(())
}

/// Checks the backend's volume header against the local volume; writes it if the
/// volume's backend area is still empty (first start, or a start that crashed
/// before writing it), and rewrites it, authenticated, if it lacks its MAC or does
/// not match the local parameters (`p` is already signed).
pub(crate) async fn ensure_header(
    store: &dyn BlockStore,
    p: &VolumeParams,
) -> Result<(), VolumeError> {
    match read_header(store, &p.prefix).await? {
        Some(h) if h == *p => Ok(()),
        Some(h) if h.volume_id == p.volume_id => {
            tracing::warn!(
                "the backend's volume header differs from this data directory's (or has no \
                 MAC): rewriting it"
            );
            write_header(store, p).await
        }
        Some(h) => Err(VolumeError::Params(format!(
            "the backend prefix {:?} holds another volume ({}), not this data directory's ({})",
            p.prefix, h.volume_id, p.volume_id
        ))),
        None => {
            if !without_lease(store.list(&format!("{}/", p.prefix)).await?).is_empty() {
                return Err(VolumeError::Integrity(format!(
                    "the backend prefix {:?} holds objects but no volume header: it was \
                     tampered with or is not this volume's",
                    p.prefix
                )));
            }
            write_header(store, p).await
        }
    }
}

#[cfg(test)]
mod tests {
    use oram_seal::VolumeId;

    use super::*;
    use crate::config::VolumeConfig;

    #[test]
    fn header_mac_covers_every_field() {
        let key = MasterKey::generate();
        let p = VolumeParams::new(
            &VolumeConfig::default(),
            &VolumeId::random(),
            "file",
            "ab".repeat(16),
            None,
        );
        let signed = sign_header(&key, &p);
        assert!(header_is_authentic(&key, &signed));
        assert!(!header_is_authentic(&key, &p), "no MAC");
        assert!(
            !header_is_authentic(&MasterKey::generate(), &signed),
            "other key"
        );
        let mut moved = signed.clone();
        moved.prefix = "vol1".into();
        assert!(!header_is_authentic(&key, &moved), "prefix changed");
        let mut other = signed.clone();
        other.volume_id = "00".repeat(16);
        assert!(!header_is_authentic(&key, &other), "volume id changed");
        let mut grown = signed.clone();
        grown.grown_blocks = Some(p.capacity_blocks * 4);
        assert!(
            !header_is_authentic(&key, &grown),
            "capacity in effect changed"
        );
        let resigned = sign_header(&key, &grown);
        assert!(header_is_authentic(&key, &resigned));
        let back = VolumeParams::from_toml(&resigned.to_toml(), "x").unwrap();
        assert_eq!(back.grown_blocks, Some(p.capacity_blocks * 4));
        // Survives a TOML round trip (as stored on the backend).
        let back = VolumeParams::from_toml(&signed.to_toml(), "x").unwrap();
        assert!(header_is_authentic(&key, &back));
    }

    #[test]
    fn checkpoint_head_authenticates_epoch_and_length() {
        let key = MasterKey::generate();
        let sealer = Sealer::new(&key, VolumeId::random());
        let snap = vec![7u8; 1000];
        let v = Owner::Volume;
        let sealed = sealer.seal(&v.snapshot_identity(5), &snap).unwrap();
        let obj = checkpoint_object(&sealer, v, 5, 1000, &sealed).unwrap();
        let head = parse_prefix(&sealer, v, &obj[..HEAD_LEN]).unwrap();
        assert_eq!(
            head,
            Prefix::V2(Head {
                epoch: 5,
                total: obj.len() as u64
            })
        );
        assert_eq!(open_checkpoint(&sealer, v, &obj).unwrap(), (5, snap));
        // A patched plaintext epoch no longer authenticates.
        let mut patched = obj.clone();
        patched[15] ^= 1;
        assert!(parse_prefix(&sealer, v, &patched[..HEAD_LEN]).is_err());
        assert!(open_checkpoint(&sealer, v, &patched).is_err());
        // Truncation and extension are refused.
        assert!(open_checkpoint(&sealer, v, &obj[..obj.len() - 1]).is_err());
        let mut longer = obj.clone();
        longer.push(0);
        assert!(open_checkpoint(&sealer, v, &longer).is_err());
        assert!(parse_prefix(&sealer, v, b"short").is_err());
    }

    /// A cluster node's checkpoint opens only as that node's: not as the
    /// volume's, nor as another node's (the provider moving objects between
    /// keys gains nothing).
    #[test]
    fn a_checkpoint_opens_only_as_its_owner_s() {
        let key = MasterKey::generate();
        let sealer = Sealer::new(&key, VolumeId::random());
        let snap = vec![3u8; 64];
        let owners = [Owner::Volume, Owner::Node(0), Owner::Node(1)];
        for of in owners {
            let sealed = sealer.seal(&of.snapshot_identity(9), &snap).unwrap();
            let obj = checkpoint_object(&sealer, of, 9, 64, &sealed).unwrap();
            for as_ in owners {
                let opened = open_checkpoint(&sealer, as_, &obj);
                if as_ == of {
                    assert_eq!(opened.unwrap(), (9, snap.clone()));
                } else {
                    assert!(opened.is_err(), "{of:?}'s checkpoint opened as {as_:?}'s");
                    assert!(parse_prefix(&sealer, as_, &obj[..HEAD_LEN]).is_err());
                }
            }
        }
    }
}
