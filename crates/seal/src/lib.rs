//! Sealing: authenticated encryption of every object the untrusted store holds.
//!
//! # Scheme
//!
//! * One 256-bit [`MasterKey`]. `PRK = HKDF-Extract(salt = "oram-proxy/v1/prk", master)`.
//! * A [`Sealer`] serves one ORAM volume. At construction it draws a fresh random
//!   128-bit **session id** from the OS CSPRNG and derives the session key
//!   `K = HKDF-Expand(PRK, "oram-proxy/v1/session" ‖ volume id ‖ session id, 32)`.
//! * Every seal uses `K` with the 96-bit nonce `0⁴ ‖ counter₆₄`, where `counter` is an
//!   in-memory atomic that starts at 0 and is never reused within the session.
//! * Associated data: `"oram-proxy/v1" ‖ format ‖ volume id ‖ kind ‖ space ‖ position ‖
//!   version ‖ generation` ([`ObjectIdentity`]), so an object moved to another
//!   position, another space (partition), another volume, put back at an older
//!   version, or written by a lost timeline (another generation) fails to open.
//!
//! Sealed layout: `format (1) ‖ session id (16) ‖ nonce (12) ‖ ciphertext ‖ tag (16)`,
//! [`OVERHEAD`] = 45 bytes. Format 2 (this one) added space and generation to the
//! associated data; objects of format 1 are refused ([`SealError::UnknownFormat`]).
//!
//! # Why a (key, nonce) pair never repeats, also across restarts
//!
//! Within a session the counter is strictly increasing. Across sessions — a restart,
//! a crash, a restore of the state directory from a backup — the key itself is new:
//! the session id is fresh randomness, so two sessions share a key only if two random
//! 128-bit ids collide (probability ≈ s²/2¹²⁹ for s sessions). No nonce state has to
//! survive a crash, so a rolled-back state directory cannot cause reuse. A session
//! refuses to seal after 2⁶⁴ − 1 objects ([`SealError::NonceExhausted`]).
//!
//! Openers derive the key of whichever session wrote an object from the session id in
//! its header (cached), so objects written before a restart stay readable.
//!
//! # Master-key rotation: a keyring
//!
//! A [`Sealer`] holds a keyring ([`Sealer::with_keyring`]): the *current* master key,
//! which every seal uses, and earlier keys, which only open. Which key sealed an
//! object is not written into it: the first time an opener meets a session id it
//! derives that session's key under each master key of the ring in turn, newest
//! first, and keeps the one under which the object authenticates (cached per
//! session id like any session key; a failed trial is not cached). Every object of
//! one session is under the same master key, so this costs one trial per session,
//! not per object.
//!
//! Why not a key id in the object: the sealed format, its size ([`OVERHEAD`]) and
//! everything sized by it (buckets, slots, checkpoints) stay as they are, objects of
//! earlier releases open unchanged, and the storage server cannot tell which key
//! an object is under — to it, a rotation looks like a restart (a new session id).
//! Why not a key id inside the session id: it would give up random session bits and
//! still need the trial for every object sealed before. The cost of the trial is
//! bounded: at most one derivation and open per master key for a session id never
//! seen, and an object that opens under no key of the ring fails with
//! [`SealError::Integrity`] as before. AES-GCM under independent random keys: an
//! object forged without any key of the ring opens under none of them.
//!
//! # Key wrapping
//!
//! [`wrap_secret`] / [`unwrap_secret`] seal a short secret (a master key, a keyring)
//! under a 256-bit key-encryption key with AES-256-GCM, a random 96-bit nonce and a
//! caller-chosen context as associated data: `nonce (12) ‖ ciphertext ‖ tag (16)`.
//! A passphrase wraps the master key this way (so a passphrase can change without
//! re-sealing anything), and the current master key wraps the earlier keys of the
//! ring. Each key-encryption key wraps a handful of secrets in its life, so random
//! nonces are safe.
//!
//! Key material ([`MasterKey`], the PRK, the derived session key) is zeroized on
//! drop and has no `Debug` output beyond `<redacted>`. The AES key schedule and the
//! GHASH key live in AWS-LC's AEAD context (`aws-lc-rs`), allocated by AWS-LC, whose
//! `OPENSSL_free` zeroes an allocation before releasing it.
//!
//! The cipher is AWS-LC's AES-256-GCM (the library rustls already uses here): with
//! AES-NI and carry-less multiplication it seals several times faster than the
//! portable RustCrypto implementation used before, whose one-block-at-a-time GHASH
//! was the proxy's largest CPU cost. The format is standard AES-256-GCM, unchanged:
//! objects sealed by either open with the other (a test checks it).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use bytes::Bytes;
use hkdf::Hkdf;
use rand::rngs::OsRng;
use rand::RngCore;
use sha2::Sha256;
use zeroize::Zeroizing;

/// Length of a master key in bytes.
pub const MASTER_KEY_LEN: usize = 32;
/// Bytes a sealed object has beyond its plaintext.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// The sealed-object format: 2 (space and generation in the associated data).
const FORMAT: u8 = 2;
const SESSION_LEN: usize = 16;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = 1 + SESSION_LEN + NONCE_LEN;
const PRK_SALT: &[u8] = b"oram-proxy/v1/prk";
const AD_LABEL: &[u8] = b"oram-proxy/v1";
/// Bytes of associated data: label, format, volume, kind, space, position,
/// version, generation.
const AD_LEN: usize = 13 + 1 + 16 + 1 + 4 + 8 + 8 + 8;
/// Session keys cached for opening; beyond this the cache is emptied and refilled.
const SESSION_CACHE_MAX: usize = 256;

/// Errors of sealing and opening.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The object is shorter than a sealed object can be.
    #[error("sealed object truncated ({len} bytes)")]
    Truncated {
        /// Its length.
        len: usize,
    },
    /// The object has a format byte this version does not know.
    #[error("unknown sealed-object format {0}")]
    UnknownFormat(u8),
    /// Authentication failed: the object was modified, belongs elsewhere (another
    /// position, volume or version) or was sealed under another key.
    #[error("authentication failed: object modified, misplaced, replayed or under another key")]
    Integrity,
    /// This session has sealed 2⁶⁴ − 1 objects; create a new [`Sealer`].
    #[error("nonce space of this session exhausted")]
    NonceExhausted,
    /// Plaintext too large for AES-GCM.
    #[error("plaintext too large to seal")]
    TooLarge,
    /// A wrapped secret did not unwrap: another key-encryption key (a wrong
    /// passphrase), another context, or a modified wrapping.
    #[error("the wrapped key does not unwrap: wrong key or passphrase, or modified")]
    Unwrap,
}

/// The 256-bit master key every other key is derived from. Zeroized on drop.
pub struct MasterKey(Zeroizing<[u8; MASTER_KEY_LEN]>);

impl MasterKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> Self {
        let mut k = Zeroizing::new([0u8; MASTER_KEY_LEN]);
        OsRng.fill_bytes(k.as_mut());
        Self(k)
    }

    /// Wraps existing key bytes (from a key file, say).
    pub fn from_bytes(bytes: [u8; MASTER_KEY_LEN]) -> Self {
        Self(Zeroizing::new(bytes))
    }

    /// The raw key, for writing it to a key file. Handle with care.
    pub fn expose_bytes(&self) -> &[u8; MASTER_KEY_LEN] {
        &self.0
    }

    fn prk(&self) -> Zeroizing<[u8; 32]> {
        let (prk, _) = Hkdf::<Sha256>::extract(Some(PRK_SALT), self.0.as_ref());
        let mut out = Zeroizing::new([0u8; 32]);
        out.copy_from_slice(&prk);
        out
    }

    /// Derives an independent 256-bit subkey for `purpose` (e.g. `"state-checkpoint"`).
    pub fn subkey(&self, purpose: &str) -> Zeroizing<[u8; 32]> {
        let prk = self.prk();
        let hk = Hkdf::<Sha256>::from_prk(prk.as_ref()).expect("PRK has hash length");
        let mut out = Zeroizing::new([0u8; 32]);
        hk.expand_multi_info(
            &[b"oram-proxy/v1/subkey/", purpose.as_bytes()],
            out.as_mut(),
        )
        .expect("32 bytes is a valid HKDF output length");
        out
    }
}

impl fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MasterKey(<redacted>)")
    }
}

/// Identifies one ORAM instance (volume); bound into every key and every object.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct VolumeId(pub [u8; 16]);

impl VolumeId {
    /// A random volume id.
    pub fn random() -> Self {
        let mut v = [0u8; 16];
        OsRng.fill_bytes(&mut v);
        Self(v)
    }
}

/// What kind of object a sealed object is; part of its identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum ObjectKind {
    /// A bucket of a tree ORAM (position = node index).
    TreeBucket = 1,
    /// A block of the `direct` engine (position = block index).
    DirectBlock = 2,
    /// A slot of a Ring ORAM bucket (position = node × slots + slot).
    RingSlot = 3,
    /// A control record (position = record number).
    Meta = 4,
    /// A record of the shipped state log (position = record number).
    Log = 5,
    /// A slot of a level of an ObliviStore partition (position = level × 2^32
    /// + offset).
    LevelSlot = 6,
}

/// What an object *is*: bound into its seal as associated data, so that an object
/// opened as anything else — another position, space, version or generation —
/// fails.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ObjectIdentity {
    /// The kind of object.
    pub kind: ObjectKind,
    /// The namespace (partition, sub-ORAM) the object belongs to; 0 for an engine
    /// with one space. Bucket 5 of one partition never opens as bucket 5 of another.
    pub space: u32,
    /// Its physical position (node, slot or block index).
    pub position: u64,
    /// Its version: how many times this position has been written. The trusted state
    /// remembers the current version, so a replayed older copy fails to open.
    pub version: u64,
    /// The generation of the trusted state that wrote it (random, new at every
    /// restore from a checkpoint), so that an authentic object of a lost timeline
    /// with the same version never opens as current.
    pub generation: u64,
}

impl ObjectIdentity {
    /// An identity in space 0, generation 0 (checkpoints, tests).
    pub fn plain(kind: ObjectKind, position: u64, version: u64) -> Self {
        Self {
            kind,
            space: 0,
            position,
            version,
            generation: 0,
        }
    }
}

/// Seals and opens the objects of one volume.
///
/// **What the storage server observes:** sealed objects of `plaintext + OVERHEAD`
/// bytes whose header shows the format, the session that wrote the object and the
/// per-session counter (the order of writes within the session, which the server
/// sees anyway). Nothing else about the plaintext or the identity.
pub struct Sealer {
    prk: Zeroizing<[u8; 32]>,
    /// The PRKs of earlier master keys, newest first: they open, never seal.
    earlier: Vec<Zeroizing<[u8; 32]>>,
    volume: VolumeId,
    session: [u8; SESSION_LEN],
    cipher: Arc<LessSafeKey>,
    counter: AtomicU64,
    cache: Mutex<HashMap<[u8; SESSION_LEN], Arc<LessSafeKey>>>,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer")
            .field("volume", &self.volume)
            .field("sealed", &self.counter.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Sealer {
    /// A sealer for `volume` with a fresh random session.
    pub fn new(master: &MasterKey, volume: VolumeId) -> Self {
        Self::with_keyring(master, &[], volume)
    }

    /// A sealer for `volume` with a fresh random session that seals under
    /// `current` and also opens objects sealed under any of `earlier` (newest
    /// first; see the crate documentation, "Master-key rotation").
    pub fn with_keyring(current: &MasterKey, earlier: &[MasterKey], volume: VolumeId) -> Self {
        let prk = current.prk();
        let earlier = earlier.iter().map(MasterKey::prk).collect();
        let mut session = [0u8; SESSION_LEN];
        OsRng.fill_bytes(&mut session);
        let cipher = Arc::new(session_cipher(&prk, &volume, &session));
        let mut cache = HashMap::new();
        cache.insert(session, cipher.clone());
        Self {
            prk,
            earlier,
            volume,
            session,
            cipher,
            counter: AtomicU64::new(0),
            cache: Mutex::new(cache),
        }
    }

    /// The volume this sealer serves.
    pub fn volume(&self) -> VolumeId {
        self.volume
    }

    /// Size of the sealed form of `plaintext_len` bytes.
    pub const fn sealed_len(plaintext_len: usize) -> usize {
        plaintext_len + OVERHEAD
    }

    /// Seals `plaintext` as the object `id`.
    pub fn seal(&self, id: &ObjectIdentity, plaintext: &[u8]) -> Result<Bytes, SealError> {
        if plaintext.len() as u64 > (1u64 << 36) - 32 {
            return Err(SealError::TooLarge);
        }
        let n = self
            .counter
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_add(1))
            .map_err(|_| SealError::NonceExhausted)?;
        let mut nonce = [0u8; NONCE_LEN];
        nonce[4..].copy_from_slice(&n.to_be_bytes());
        let mut out = Vec::with_capacity(Self::sealed_len(plaintext.len()));
        out.push(FORMAT);
        out.extend_from_slice(&self.session);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let ad = self.associated_data(id);
        // The counter never repeats within the session's key (see the crate docs).
        let tag = self
            .cipher
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(&ad[..]),
                &mut out[HEADER_LEN..],
            )
            .map_err(|_| SealError::TooLarge)?;
        out.extend_from_slice(tag.as_ref());
        Ok(out.into())
    }

    /// Opens `sealed`, which must be the object `id`; returns the plaintext.
    pub fn open(&self, id: &ObjectIdentity, sealed: &[u8]) -> Result<Vec<u8>, SealError> {
        if sealed.len() < OVERHEAD {
            return Err(SealError::Truncated { len: sealed.len() });
        }
        if sealed[0] != FORMAT {
            return Err(SealError::UnknownFormat(sealed[0]));
        }
        let session: [u8; SESSION_LEN] = sealed[1..1 + SESSION_LEN].try_into().expect("len");
        let nonce: [u8; NONCE_LEN] = sealed[1 + SESSION_LEN..HEADER_LEN].try_into().expect("len");
        let ad = self.associated_data(id);
        let body = &sealed[HEADER_LEN..];
        if let Some(cipher) = self.known_cipher(&session) {
            return open_with(&cipher, nonce, &ad, body);
        }
        // A session never seen: the first master key of the ring under which
        // the object authenticates is the session's (crate docs, "Master-key
        // rotation"); only a success is remembered.
        for prk in std::iter::once(&self.prk).chain(&self.earlier) {
            let cipher = session_cipher(prk, &self.volume, &session);
            if let Ok(plain) = open_with(&cipher, nonce, &ad, body) {
                self.remember(session, Arc::new(cipher));
                return Ok(plain);
            }
        }
        Err(SealError::Integrity)
    }

    /// How many master keys this sealer opens with (the current one included).
    pub fn keyring_len(&self) -> usize {
        1 + self.earlier.len()
    }

    fn known_cipher(&self, session: &[u8; SESSION_LEN]) -> Option<Arc<LessSafeKey>> {
        if *session == self.session {
            return Some(self.cipher.clone());
        }
        // The cache holds only derived keys; a poisoned lock cannot hold a wrong one.
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(session).cloned()
    }

    fn remember(&self, session: [u8; SESSION_LEN], cipher: Arc<LessSafeKey>) {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= SESSION_CACHE_MAX {
            cache.clear();
        }
        cache.insert(session, cipher);
    }

    fn associated_data(&self, id: &ObjectIdentity) -> [u8; AD_LEN] {
        let mut ad = [0u8; AD_LEN];
        ad[..13].copy_from_slice(AD_LABEL);
        ad[13] = FORMAT;
        ad[14..30].copy_from_slice(&self.volume.0);
        ad[30] = id.kind as u8;
        ad[31..35].copy_from_slice(&id.space.to_le_bytes());
        ad[35..43].copy_from_slice(&id.position.to_le_bytes());
        ad[43..51].copy_from_slice(&id.version.to_le_bytes());
        ad[51..59].copy_from_slice(&id.generation.to_le_bytes());
        ad
    }
}

/// Opens `body` (ciphertext ‖ tag) under `cipher`.
fn open_with(
    cipher: &LessSafeKey,
    nonce: [u8; NONCE_LEN],
    ad: &[u8],
    body: &[u8],
) -> Result<Vec<u8>, SealError> {
    // Ciphertext and tag, opened in place; the tag is cut off afterwards.
    let mut plain = body.to_vec();
    let len = cipher
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(ad),
            &mut plain,
        )
        .map_err(|_| SealError::Integrity)?
        .len();
    plain.truncate(len);
    Ok(plain)
}

/// Bytes [`wrap_secret`] adds to a secret: nonce and tag.
pub const WRAP_OVERHEAD: usize = NONCE_LEN + TAG_LEN;

/// Wraps `secret` under the key-encryption key `kek` (AES-256-GCM, a random
/// nonce, `context` as associated data): `nonce ‖ ciphertext ‖ tag`. Only
/// [`unwrap_secret`] with the same `kek` and `context` recovers it.
pub fn wrap_secret(kek: &[u8; 32], secret: &[u8], context: &[u8]) -> Vec<u8> {
    let cipher = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, kek).expect("32-byte key"));
    let mut nonce = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut nonce);
    let mut out = Vec::with_capacity(secret.len() + WRAP_OVERHEAD);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(secret);
    // A random 96-bit nonce: each key-encryption key wraps a handful of secrets.
    let tag = cipher
        .seal_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context),
            &mut out[NONCE_LEN..],
        )
        .expect("a short secret seals");
    out.extend_from_slice(tag.as_ref());
    out
}

/// The secret [`wrap_secret`] wrapped under `kek` with `context`; fails
/// ([`SealError::Unwrap`]) under another key or context, or if modified.
pub fn unwrap_secret(
    kek: &[u8; 32],
    wrapped: &[u8],
    context: &[u8],
) -> Result<Zeroizing<Vec<u8>>, SealError> {
    if wrapped.len() < WRAP_OVERHEAD {
        return Err(SealError::Unwrap);
    }
    let cipher = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, kek).expect("32-byte key"));
    let nonce: [u8; NONCE_LEN] = wrapped[..NONCE_LEN].try_into().expect("len");
    let mut plain = Zeroizing::new(wrapped[NONCE_LEN..].to_vec());
    let len = cipher
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(context),
            &mut plain,
        )
        .map_err(|_| SealError::Unwrap)?
        .len();
    plain.truncate(len);
    Ok(plain)
}

fn session_cipher(prk: &[u8; 32], volume: &VolumeId, session: &[u8; SESSION_LEN]) -> LessSafeKey {
    let hk = Hkdf::<Sha256>::from_prk(prk).expect("PRK has hash length");
    let mut key = Zeroizing::new([0u8; 32]);
    hk.expand_multi_info(
        &[b"oram-proxy/v1/session", &volume.0, session],
        key.as_mut(),
    )
    .expect("32 bytes is a valid HKDF output length");
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key.as_ref()).expect("32-byte key"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(position: u64, version: u64) -> ObjectIdentity {
        ObjectIdentity::plain(ObjectKind::TreeBucket, position, version)
    }

    fn setup() -> (MasterKey, VolumeId, Sealer) {
        let mk = MasterKey::from_bytes([7u8; 32]);
        let vol = VolumeId([1u8; 16]);
        let s = Sealer::new(&mk, vol);
        (mk, vol, s)
    }

    #[test]
    fn round_trip_and_length() {
        let (_, _, s) = setup();
        for len in [0usize, 1, 15, 16, 4096, 65536] {
            let pt: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let sealed = s.seal(&id(3, 9), &pt).unwrap();
            assert_eq!(sealed.len(), Sealer::sealed_len(len));
            assert_eq!(s.open(&id(3, 9), &sealed).unwrap(), pt);
        }
    }

    #[test]
    fn identical_plaintexts_seal_differently() {
        let (_, _, s) = setup();
        let a = s.seal(&id(1, 1), &[0u8; 64]).unwrap();
        let b = s.seal(&id(1, 1), &[0u8; 64]).unwrap();
        assert_ne!(a, b);
        // Not just the nonce: the ciphertexts differ too (no shared keystream).
        assert_ne!(a[HEADER_LEN..], b[HEADER_LEN..]);
    }

    #[test]
    fn every_bit_flip_is_detected() {
        let (_, _, s) = setup();
        let sealed = s.seal(&id(5, 2), b"hello oram").unwrap();
        for i in 0..sealed.len() {
            for bit in [0x01u8, 0x80] {
                let mut t = sealed.to_vec();
                t[i] ^= bit;
                assert!(s.open(&id(5, 2), &t).is_err(), "flip at {i} accepted");
            }
        }
        assert_eq!(
            s.open(&id(5, 2), &sealed[..sealed.len() - 1]),
            Err(SealError::Integrity)
        );
        assert!(matches!(
            s.open(&id(5, 2), &sealed[..10]),
            Err(SealError::Truncated { .. })
        ));
    }

    #[test]
    fn identity_is_bound() {
        let (mk, _, s) = setup();
        let sealed = s.seal(&id(5, 2), b"data").unwrap();
        assert_eq!(s.open(&id(6, 2), &sealed), Err(SealError::Integrity));
        assert_eq!(s.open(&id(5, 1), &sealed), Err(SealError::Integrity));
        assert_eq!(s.open(&id(5, 3), &sealed), Err(SealError::Integrity));
        let other_kind = ObjectIdentity {
            kind: ObjectKind::DirectBlock,
            ..id(5, 2)
        };
        assert_eq!(s.open(&other_kind, &sealed), Err(SealError::Integrity));
        let other_space = ObjectIdentity {
            space: 1,
            ..id(5, 2)
        };
        assert_eq!(s.open(&other_space, &sealed), Err(SealError::Integrity));
        let other_generation = ObjectIdentity {
            generation: 77,
            ..id(5, 2)
        };
        assert_eq!(
            s.open(&other_generation, &sealed),
            Err(SealError::Integrity)
        );
        let mut older_format = sealed.to_vec();
        older_format[0] = 1;
        assert_eq!(
            s.open(&id(5, 2), &older_format),
            Err(SealError::UnknownFormat(1))
        );
        let other_volume = Sealer::new(&mk, VolumeId([2u8; 16]));
        assert_eq!(
            other_volume.open(&id(5, 2), &sealed),
            Err(SealError::Integrity)
        );
        let other_key = Sealer::new(&MasterKey::from_bytes([8u8; 32]), VolumeId([1u8; 16]));
        assert_eq!(
            other_key.open(&id(5, 2), &sealed),
            Err(SealError::Integrity)
        );
    }

    #[test]
    fn a_new_session_uses_a_new_key_and_reads_old_objects() {
        let (mk, vol, s1) = setup();
        let old = s1.seal(&id(1, 1), b"before restart").unwrap();
        drop(s1);
        // "Restart": a new sealer starts its counter at 0 again, but under a new key.
        let s2 = Sealer::new(&mk, vol);
        let new = s2.seal(&id(1, 1), b"before restart").unwrap();
        assert_eq!(
            old[1 + SESSION_LEN..HEADER_LEN],
            new[1 + SESSION_LEN..HEADER_LEN]
        );
        assert_ne!(old[1..1 + SESSION_LEN], new[1..1 + SESSION_LEN]);
        assert_ne!(old[HEADER_LEN..], new[HEADER_LEN..]);
        assert_eq!(s2.open(&id(1, 1), &old).unwrap(), b"before restart");
    }

    #[test]
    fn nonces_count_up_within_a_session() {
        let (_, _, s) = setup();
        let nonces: Vec<u64> = (0..5)
            .map(|_| {
                let sealed = s.seal(&id(0, 0), b"x").unwrap();
                u64::from_be_bytes(sealed[1 + SESSION_LEN + 4..HEADER_LEN].try_into().unwrap())
            })
            .collect();
        assert_eq!(nonces, vec![0, 1, 2, 3, 4]);
        s.counter.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(s.seal(&id(0, 0), b"x"), Err(SealError::NonceExhausted));
    }

    /// Sealed objects are standard AES-256-GCM under the session key: an
    /// independent implementation (RustCrypto's, which sealed objects before)
    /// opens what this one seals, and this one opens what that one sealed.
    #[test]
    fn objects_are_standard_aes_256_gcm() {
        use aes_gcm::aead::AeadInPlace;
        use aes_gcm::{Aes256Gcm, KeyInit};
        let (_, _, s) = setup();
        let key = {
            let hk = Hkdf::<Sha256>::from_prk(s.prk.as_ref()).unwrap();
            let mut k = [0u8; 32];
            hk.expand_multi_info(&[b"oram-proxy/v1/session", &s.volume.0, &s.session], &mut k)
                .unwrap();
            k
        };
        let other = Aes256Gcm::new_from_slice(&key).unwrap();
        let the_id = id(7, 3);
        let ad = s.associated_data(&the_id);
        for len in [0usize, 1, 15, 16, 17, 4096, 65_536 + 3] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            // This one seals, the other opens.
            let sealed = s.seal(&the_id, &plain).unwrap();
            let nonce = aes_gcm::Nonce::from_slice(&sealed[1 + SESSION_LEN..HEADER_LEN]);
            let (body, tag) = sealed[HEADER_LEN..].split_at(len);
            let mut buf = body.to_vec();
            other
                .decrypt_in_place_detached(nonce, &ad, &mut buf, aes_gcm::Tag::from_slice(tag))
                .unwrap();
            assert_eq!(buf, plain, "{len}");
            // The other seals (an object of an earlier release), this one opens.
            let mut n = [0u8; NONCE_LEN];
            n[4..].copy_from_slice(&(1u64 << 40).to_be_bytes());
            let mut body = plain.clone();
            let tag = other
                .encrypt_in_place_detached(aes_gcm::Nonce::from_slice(&n), &ad, &mut body)
                .unwrap();
            let mut old = vec![FORMAT];
            old.extend_from_slice(&s.session);
            old.extend_from_slice(&n);
            old.extend_from_slice(&body);
            old.extend_from_slice(&tag);
            assert_eq!(s.open(&the_id, &old).unwrap(), plain, "{len}");
            // A flipped bit anywhere after the header fails to open.
            let mut bad = old.clone();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            assert_eq!(s.open(&the_id, &bad), Err(SealError::Integrity));
        }
    }

    /// After a rotation from key 1 to key 2, the sealer seals under key 2 and
    /// still opens what key 1 sealed (identity still bound); an object under a
    /// key outside the ring fails, and what key 2 sealed does not open under
    /// key 1 alone.
    #[test]
    fn a_keyring_opens_objects_of_earlier_keys_and_seals_under_the_current_one() {
        let (k1, vol, s1) = setup();
        let old = s1.seal(&id(4, 1), b"under key one").unwrap();
        let k2 = MasterKey::from_bytes([11u8; 32]);
        let rotated = Sealer::with_keyring(&k2, &[MasterKey::from_bytes(*k1.expose_bytes())], vol);
        assert_eq!(rotated.keyring_len(), 2);
        assert_eq!(rotated.open(&id(4, 1), &old).unwrap(), b"under key one");
        // Again, from the cache of session keys.
        assert_eq!(rotated.open(&id(4, 1), &old).unwrap(), b"under key one");
        // The identity is still bound, for an earlier key's object too (before
        // and after its session is cached).
        let fresh = Sealer::with_keyring(&k2, &[MasterKey::from_bytes(*k1.expose_bytes())], vol);
        assert_eq!(fresh.open(&id(4, 2), &old), Err(SealError::Integrity));
        assert_eq!(fresh.open(&id(5, 1), &old), Err(SealError::Integrity));
        assert_eq!(rotated.open(&id(4, 2), &old), Err(SealError::Integrity));
        let new = rotated.seal(&id(4, 2), b"under key two").unwrap();
        assert_eq!(rotated.open(&id(4, 2), &new).unwrap(), b"under key two");
        assert_eq!(
            Sealer::new(&k1, vol).open(&id(4, 2), &new),
            Err(SealError::Integrity),
            "sealed under the current key, not the earlier one"
        );
        assert_eq!(
            Sealer::new(&k2, vol).open(&id(4, 2), &new).unwrap(),
            b"under key two"
        );
        // A key outside the ring: key 1's object no longer opens once key 1 is
        // dropped.
        let k3 = MasterKey::from_bytes([12u8; 32]);
        let dropped = Sealer::with_keyring(&k3, &[MasterKey::from_bytes([11u8; 32])], vol);
        assert_eq!(dropped.open(&id(4, 1), &old), Err(SealError::Integrity));
        assert_eq!(dropped.open(&id(4, 2), &new).unwrap(), b"under key two");
        // A tampered object of an earlier key fails under every key.
        let mut bad = old.to_vec();
        bad[HEADER_LEN] ^= 1;
        let fresh = Sealer::with_keyring(&k2, &[MasterKey::from_bytes(*k1.expose_bytes())], vol);
        assert_eq!(fresh.open(&id(4, 1), &bad), Err(SealError::Integrity));
        assert_eq!(fresh.open(&id(4, 1), &old).unwrap(), b"under key one");
    }

    #[test]
    fn wrapped_secrets_unwrap_only_under_their_key_and_context() {
        let kek = [5u8; 32];
        let w = wrap_secret(&kek, b"a master key", b"ctx");
        assert_eq!(w.len(), 12 + WRAP_OVERHEAD);
        assert_eq!(&*unwrap_secret(&kek, &w, b"ctx").unwrap(), b"a master key");
        assert_ne!(
            w,
            wrap_secret(&kek, b"a master key", b"ctx"),
            "random nonce"
        );
        assert_eq!(
            unwrap_secret(&[6u8; 32], &w, b"ctx").unwrap_err(),
            SealError::Unwrap
        );
        assert_eq!(
            unwrap_secret(&kek, &w, b"other").unwrap_err(),
            SealError::Unwrap
        );
        let mut bad = w.clone();
        bad[20] ^= 1;
        assert_eq!(
            unwrap_secret(&kek, &bad, b"ctx").unwrap_err(),
            SealError::Unwrap
        );
        assert_eq!(
            unwrap_secret(&kek, &w[..27], b"ctx").unwrap_err(),
            SealError::Unwrap
        );
    }

    #[test]
    fn subkeys_differ_by_purpose_and_debug_is_redacted() {
        let mk = MasterKey::from_bytes([9u8; 32]);
        assert_ne!(*mk.subkey("a"), *mk.subkey("b"));
        assert_eq!(*mk.subkey("a"), *mk.subkey("a"));
        assert_ne!(*mk.subkey("a"), *mk.expose_bytes());
        let dbg = format!("{mk:?} {:?}", Sealer::new(&mk, VolumeId([0; 16])));
        assert!(!dbg.contains("9, 9"), "{dbg}");
        assert!(dbg.contains("redacted"));
    }
}
