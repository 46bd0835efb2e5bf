//! Index records and how they are laid out in the key-value state.
//!
//! Keys (layout 2: every account has its own bucket namespace):
//! - `b/<account>\0<bucket>` → [`BucketRecord`];
//! - `n/<bucket>\0<account>` → empty: which accounts have a bucket of that name
//!   (S3's global bucket names are checked against it);
//! - `o/<account>\0<bucket>\0<key>` → [`ObjectRecord`]: the current version;
//! - `o/<account>\0<bucket>\0<key>\0<!seq, 16 hex digits>` → [`ObjectRecord`]:
//!   a noncurrent version or a delete marker of a versioned bucket (S3
//!   versioning), newest first right after the current version. An index of a
//!   bucket never versioned has none, so the layout of such a bucket is what it
//!   was before versioning. The newest version of a key, if it is not a delete
//!   marker, is always the current one (no such entry is newer than it);
//! - `x/<delete-at, 16 hex digits>\0<account>\0<bucket>\0<key>` → empty: the
//!   expiry queue, in time order;
//! - `u/<upload id>` → [`UploadRecord`]; `a/<account>` → [`AccountRecord`].
//!
//! A bucket's lifecycle rules ([`LifecycleRule`]) and object lock configuration
//! ([`ObjectLockConfig`]), its public access block and its policy live in its
//! [`BucketRecord`]; a version's retention
//! and legal hold in its [`ObjectRecord`].
//!
//! Values are JSON. Account names, bucket names and keys never contain `\0`, so
//! the buckets of an account and the objects of a bucket are contiguous key
//! ranges. Layout 1 (before per-account namespaces: `b/<bucket>`,
//! `o/<bucket>\0<key>`) is rewritten to layout 2 when the layer opens it
//! ([`migrate`]).
//!
//! Fields added after the first release carry `#[serde(default)]` and are left out
//! when empty, so records written before them still decode and records that do not
//! use them are byte-for-byte what they were.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::alloc::Run;

/// Client-supplied metadata of an object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// `Content-Type`.
    pub content_type: Option<String>,
    /// `Content-Encoding`.
    pub content_encoding: Option<String>,
    /// `Content-Disposition`.
    pub content_disposition: Option<String>,
    /// `Content-Language`.
    pub content_language: Option<String>,
    /// `Cache-Control`.
    pub cache_control: Option<String>,
    /// User metadata (`x-amz-meta-*`, `x-object-meta-*`), names in lower case.
    pub user: BTreeMap<String, String>,
    /// Other per-object attributes a front-end keeps (the Swift front-end: the
    /// dynamic large object manifest `x-object-manifest`), names in lower case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, String>,
}

/// A stretch of object data: `len` bytes in the blocks of `runs`, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The blocks holding the data.
    pub runs: Vec<Run>,
    /// Bytes of data (the last block may be partly used).
    pub len: u64,
}

/// A bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    /// Its name.
    pub name: String,
    /// The account that created it and alone may use it.
    pub owner: String,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Container metadata (the Swift front-end's `x-container-meta-*`), names in
    /// lower case.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub meta: BTreeMap<String, String>,
    /// Time of the last metadata change (0: never changed since creation),
    /// milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub meta_modified_ms: i64,
    /// Front-end attributes that are not client metadata (the Swift front-end's
    /// container ACLs: `read`, `write`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sysmeta: BTreeMap<String, String>,
    /// The bucket's lifecycle configuration (S3's `PutBucketLifecycleConfiguration`),
    /// in the order given; empty: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lifecycle: Vec<LifecycleRule>,
    /// Whether the bucket keeps old versions (S3's `PutBucketVersioning`).
    #[serde(default, skip_serializing_if = "Versioning::is_off")]
    pub versioning: Versioning,
    /// The bucket's tags (S3's `PutBucketTagging`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// S3 object lock: `None` unless enabled (at creation or by
    /// `PutObjectLockConfiguration`; once enabled it stays, and versioning
    /// stays enabled); the default retention of new versions, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<ObjectLockConfig>,
    /// The bucket's public access block (S3's `PutPublicAccessBlock`); `None`:
    /// none set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<PublicAccessBlock>,
    /// The bucket's policy (S3's `PutBucketPolicy`): the JSON document as the
    /// client sent it, checked by the S3 front-end before it is stored; `None`:
    /// none set. Kept in the trusted index only, never sent to the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
}

/// A bucket's public access block (S3's `PublicAccessBlockConfiguration`):
/// four switches, kept as given. Front-ends honour them: with
/// `block_public_acls` a request setting a public ACL is refused, with
/// `block_public_policy` a public bucket policy, and with
/// `restrict_public_buckets` a public policy grants nothing to other accounts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    /// Refuse requests that set a public ACL.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block_public_acls: bool,
    /// Ignore public ACLs (none exist here: they are never accepted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_public_acls: bool,
    /// Refuse a bucket policy that is public (the S3 front-end decides which
    /// policies are).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block_public_policy: bool,
    /// A public bucket policy grants nothing to anyone but the bucket's owner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restrict_public_buckets: bool,
}

/// A bucket's object lock configuration (S3's `ObjectLockConfiguration` with
/// `ObjectLockEnabled` set).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectLockConfig {
    /// The retention every new version gets unless its write names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_retention: Option<DefaultRetention>,
}

/// A retention mode (S3's `ObjectLockRetentionMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RetentionMode {
    /// The version cannot be deleted, nor its retention shortened or removed,
    /// unless the request bypasses governance retention.
    Governance,
    /// The version cannot be deleted, nor its retention shortened or its mode
    /// changed, by anyone, until the date passes.
    Compliance,
}

/// The retention of new versions of a bucket: a mode and a period of `days`
/// or `years` (one of them, positive; a year is 365 days).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DefaultRetention {
    /// The mode.
    pub mode: RetentionMode,
    /// Days of retention (0: the period is in years).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub days: u32,
    /// Years of retention (0: the period is in days).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub years: u32,
}

/// The retention of one object version (S3's `ObjectLockRetention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// The mode.
    pub mode: RetentionMode,
    /// Until when the version is retained, milliseconds since the Unix epoch.
    pub until_ms: i64,
}

/// A bucket's versioning state (S3's `VersioningConfiguration/Status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Versioning {
    /// Never versioned: a write replaces the object, a delete removes it.
    #[default]
    Off,
    /// Every write makes a new version with its own id; a delete without a
    /// version id makes a delete marker.
    Enabled,
    /// Writes make the `null` version (replacing the earlier `null` version);
    /// versions made while it was enabled are kept.
    Suspended,
}

impl Versioning {
    /// Whether the bucket was never versioned.
    pub fn is_off(&self) -> bool {
        *self == Versioning::Off
    }
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// One rule of a bucket's lifecycle configuration: what happens, by itself, to
/// the uploads and objects whose key starts with `prefix` (and, for objects,
/// whose version carries `tags` and has a size within the size bounds; see
/// [`LifecycleRule::selects`]). Every rule has at
/// least one action: aborting uploads (`abort_incomplete_days`), expiring
/// current versions (`expiration_days` or `expiration_date_ms`), removing
/// noncurrent versions (`noncurrent_days`) or removing a lone delete marker
/// (`expired_object_delete_marker`); see [`crate::ObjectLayer::expire_by_lifecycle`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecycleRule {
    /// Its name, unique within the configuration (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Whether it applies (S3's `Status`: `Enabled` or `Disabled`).
    pub enabled: bool,
    /// The keys it applies to: those starting with this (empty: every key).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prefix: String,
    /// Only versions carrying every one of these tags, key and value exactly
    /// (S3's `Filter/Tag` or `Filter/And/Tag`), in the order given; empty: any
    /// version. Keys are distinct; a rule with tags has no
    /// `abort_incomplete_days` nor `expired_object_delete_marker`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<(String, String)>,
    /// Only versions of more than this many bytes (S3's
    /// `ObjectSizeGreaterThan`); `None`: no lower bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_greater_than: Option<u64>,
    /// Only versions of fewer than this many bytes (S3's
    /// `ObjectSizeLessThan`, at least 1 and above `size_greater_than`);
    /// `None`: no upper bound. A rule with either bound has no
    /// `abort_incomplete_days` nor `expired_object_delete_marker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_less_than: Option<u64>,
    /// Abort a multipart upload this many days (of 24 hours) after it started
    /// (S3's `AbortIncompleteMultipartUpload/DaysAfterInitiation`); 0: the rule
    /// has no such action.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub abort_incomplete_days: u32,
    /// Expire the current version this many days (rounded up to the next
    /// midnight UTC) after it was written (S3's `Expiration/Days`); 0: none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub expiration_days: u32,
    /// Expire current versions from this midnight UTC on, milliseconds since
    /// the Unix epoch (S3's `Expiration/Date`); 0: none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expiration_date_ms: i64,
    /// Remove a delete marker that is the only version of its key left (S3's
    /// `Expiration/ExpiredObjectDeleteMarker`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expired_object_delete_marker: bool,
    /// Remove a noncurrent version this many days (rounded up to the next
    /// midnight UTC) after it became noncurrent (S3's
    /// `NoncurrentVersionExpiration/NoncurrentDays`); 0: none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub noncurrent_days: u32,
    /// With `noncurrent_days`: keep this many newest noncurrent versions
    /// whatever their age (S3's `NewerNoncurrentVersions`); 0: keep none.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub newer_noncurrent_versions: u32,
}

/// Per-account attributes (the Swift front-end's `x-account-meta-*`). An account
/// without any has no record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRecord {
    /// Account metadata, names in lower case.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// A stored object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRecord {
    /// Unique id of this version of the object (readers pin it).
    pub id: u64,
    /// Size in bytes.
    pub size: u64,
    /// ETag without quotes: hex MD5, or `<hex>-<parts>` after a multipart upload.
    pub etag: String,
    /// Last-modified time, milliseconds since the Unix epoch.
    pub modified_ms: i64,
    /// Client metadata.
    pub meta: ObjectMeta,
    /// Where the bytes are, in order.
    pub segments: Vec<Segment>,
    /// When the object expires (Swift `X-Delete-At`), seconds since the Unix
    /// epoch; 0: never. From then on it reads as absent; the index entry goes at
    /// the next purge.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub delete_at: i64,
    /// The S3 version id; empty: the `null` version (every object of a bucket
    /// never versioned, and those written while versioning was suspended).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version_id: String,
    /// The order of the versions of a key (larger: newer; about microseconds
    /// since the epoch); 0 for objects written while the bucket was never
    /// versioned.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub seq: u64,
    /// Whether this version is a delete marker (no data; a GET of the key
    /// answers "not found" while it is the newest version).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
    /// The object's tags (S3's object tagging), at most 10.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The version's retention (S3 object lock); it protects the version from
    /// deletion until its date (see [`crate::ObjectLayer::set_object_retention`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// Whether the version is under a legal hold (S3 object lock): it cannot
    /// be deleted until the hold is removed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

impl ObjectRecord {
    /// Whether the object has expired at `now` (seconds since the epoch).
    pub fn expired(&self, now: i64) -> bool {
        self.delete_at > 0 && self.delete_at <= now
    }

    /// The version id as S3 names it: the id, or `null`.
    pub fn version_label(&self) -> &str {
        if self.version_id.is_empty() {
            "null"
        } else {
            &self.version_id
        }
    }
}

/// One uploaded part of a multipart upload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRecord {
    /// Hex MD5 of the part.
    pub etag: String,
    /// Size in bytes.
    pub size: u64,
    /// Upload time, ms since the epoch.
    pub modified_ms: i64,
    /// Where its bytes are.
    pub segment: Segment,
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadRecord {
    /// Bucket of the future object.
    pub bucket: String,
    /// Key of the future object.
    pub key: String,
    /// Account that started it.
    pub owner: String,
    /// Start time, ms since the epoch.
    pub initiated_ms: i64,
    /// Metadata the object will get.
    pub meta: ObjectMeta,
    /// Parts uploaded so far, by part number.
    pub parts: BTreeMap<u32, PartRecord>,
    /// Tags the object will get (S3's `x-amz-tagging`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The object lock the object will get (S3's `x-amz-object-lock-*`).
    #[serde(default, skip_serializing_if = "LockRequest::is_empty")]
    pub lock: LockRequest,
}

/// The object lock a write asks for (S3's `x-amz-object-lock-mode`,
/// `-retain-until-date` and `-legal-hold` headers): allowed only in a bucket
/// with object lock enabled; without a retention the bucket's default applies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockRequest {
    /// The retention asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<Retention>,
    /// The legal hold asked for (`Some(false)`: explicitly off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legal_hold: Option<bool>,
}

impl LockRequest {
    /// Whether the write names no object lock at all.
    pub fn is_empty(&self) -> bool {
        self.retention.is_none() && self.legal_hold.is_none()
    }
}

fn joined(parts: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum());
    for (i, p) in parts.iter().enumerate() {
        if i > 1 {
            v.push(0);
        }
        v.extend_from_slice(p);
    }
    v
}

pub(crate) fn buckets_base(account: &str) -> Vec<u8> {
    joined(&[crate::BUCKET_RECORDS, account.as_bytes(), b""])
}

pub(crate) fn bucket_key(account: &str, bucket: &str) -> Vec<u8> {
    joined(&[b"b/", account.as_bytes(), bucket.as_bytes()])
}

pub(crate) fn name_base(bucket: &str) -> Vec<u8> {
    joined(&[b"n/", bucket.as_bytes(), b""])
}

pub(crate) fn name_key(bucket: &str, account: &str) -> Vec<u8> {
    joined(&[b"n/", bucket.as_bytes(), account.as_bytes()])
}

pub(crate) fn objects_base(account: &str, bucket: &str) -> Vec<u8> {
    joined(&[b"o/", account.as_bytes(), bucket.as_bytes(), b""])
}

pub(crate) fn object_key(account: &str, bucket: &str, key: &str) -> Vec<u8> {
    joined(&[b"o/", account.as_bytes(), bucket.as_bytes(), key.as_bytes()])
}

/// Where the version entries of `bucket/key` start (see the module docs).
pub(crate) fn versions_base(account: &str, bucket: &str, key: &str) -> Vec<u8> {
    let mut k = object_key(account, bucket, key);
    k.push(0);
    k
}

/// The index key of the version of `bucket/key` with order `seq` (newest first).
pub(crate) fn version_key(account: &str, bucket: &str, key: &str, seq: u64) -> Vec<u8> {
    let mut k = versions_base(account, bucket, key);
    k.extend_from_slice(format!("{:016x}", u64::MAX - seq).as_bytes());
    k
}

pub(crate) fn expiry_key(at: i64, account: &str, bucket: &str, key: &str) -> Vec<u8> {
    let at = format!("{:016x}", at.max(0));
    joined(&[
        b"x/",
        at.as_bytes(),
        account.as_bytes(),
        bucket.as_bytes(),
        key.as_bytes(),
    ])
}

/// The `(account, bucket, key)` of an object or expiry key's tail.
pub(crate) fn split_name(tail: &[u8]) -> Option<(String, String, String)> {
    let mut it = tail.splitn(3, |b| *b == 0);
    let a = std::str::from_utf8(it.next()?).ok()?;
    let b = std::str::from_utf8(it.next()?).ok()?;
    let k = std::str::from_utf8(it.next()?).ok()?;
    Some((a.into(), b.into(), k.into()))
}

pub(crate) fn account_key(account: &str) -> Vec<u8> {
    [b"a/".as_slice(), account.as_bytes()].concat()
}

pub(crate) fn upload_key(upload_id: &str) -> Vec<u8> {
    [b"u/".as_slice(), upload_id.as_bytes()].concat()
}

/// The smallest byte string greater than every string starting with `prefix`
/// (`None` if there is none).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut v = prefix.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xFF {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

/// Calls `f(key, value)` for every entry whose key starts with `prefix`, in key
/// order, reading the map in pages.
pub(crate) fn scan_prefix(
    kv: &dyn oram_state::KvState,
    prefix: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> crate::Result<()>,
) -> crate::Result<()> {
    let end = prefix_end(prefix);
    let mut cursor = prefix.to_vec();
    let mut inclusive = true;
    loop {
        let batch = kv.range(&cursor, inclusive, end.as_deref(), 1024);
        let Some((last, _)) = batch.last() else {
            return Ok(());
        };
        cursor = last.clone();
        inclusive = false;
        for (k, v) in &batch {
            f(k, v)?;
        }
    }
}

/// Rewrites an index of layout 1 (global bucket names: `b/<bucket>`,
/// `o/<bucket>\0<key>`) into layout 2 (see the module documentation): each bucket
/// moves into its owner's namespace, with its objects and a name-index entry.
/// Returns the number of buckets moved (0 for an index already in layout 2). The
/// changes are made in `kv` without a commit: they become durable with the next
/// commit, in the same transaction, so a crash before it leaves layout 1 (which
/// the next start rewrites again) and never a mixture.
pub fn migrate(kv: &mut dyn oram_state::KvState) -> crate::Result<usize> {
    let mut old_buckets: Vec<(Vec<u8>, BucketRecord)> = Vec::new();
    scan_prefix(kv, b"b/", |k, v| {
        if !k.contains(&0) {
            let rec: BucketRecord = decode(v).map_err(|e| crate::corrupt("bucket record", e))?;
            old_buckets.push((k.to_vec(), rec));
        }
        Ok(())
    })?;
    if old_buckets.is_empty() {
        return Ok(0);
    }
    let mut old_objects: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    scan_prefix(kv, b"o/", |k, v| {
        if k.iter().filter(|b| **b == 0).count() == 1 {
            old_objects.push((k.to_vec(), v.to_vec()));
        }
        Ok(())
    })?;
    let owners: std::collections::HashMap<String, String> = old_buckets
        .iter()
        .map(|(_, b)| (b.name.clone(), b.owner.clone()))
        .collect();
    for (k, v) in old_objects {
        let tail = &k[2..];
        let i = tail.iter().position(|b| *b == 0).expect("one NUL");
        let bucket = String::from_utf8_lossy(&tail[..i]).into_owned();
        let key = String::from_utf8_lossy(&tail[i + 1..]).into_owned();
        let owner = owners.get(&bucket).ok_or_else(|| {
            crate::corrupt("index", format!("object {bucket}/{key} without its bucket"))
        })?;
        kv.delete(&k);
        kv.put(&object_key(owner, &bucket, &key), v);
    }
    for (k, b) in &old_buckets {
        kv.delete(k);
        kv.put(&bucket_key(&b.owner, &b.name), encode(b));
        kv.put(&name_key(&b.name, &b.owner), Vec::new());
    }
    Ok(old_buckets.len())
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialise")
}

pub(crate) fn decode<T: for<'a> Deserialize<'a>>(v: &[u8]) -> Result<T, String> {
    serde_json::from_slice(v).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_before_the_metadata_fields_still_decode() {
        let old = br#"{"name":"bkt","owner":"alice","created_ms":5}"#;
        let b: BucketRecord = decode(old).unwrap();
        assert!(b.meta.is_empty());
        // Unused new fields are not written: the record is what it was.
        assert_eq!(encode(&b), old.to_vec());
        let old_meta = br#"{"content_type":"text/plain","content_encoding":null,"content_disposition":null,"content_language":null,"cache_control":null,"user":{"a":"b"}}"#;
        let m: ObjectMeta = decode(old_meta).unwrap();
        assert!(m.extra.is_empty());
        assert_eq!(m.user["a"], "b");
        assert_eq!(encode(&m), old_meta.to_vec());
    }

    /// A bucket record with a prefix rule as the release before tag and size
    /// filters writes it (these bytes are its `encode` of that record).
    const PREFIX_RULE_RECORD: &[u8] = br#"{"name":"bkt","owner":"alice","created_ms":5,"lifecycle":[{"id":"logs","enabled":true,"prefix":"logs/","abort_incomplete_days":3,"expiration_days":30,"noncurrent_days":7,"newer_noncurrent_versions":2},{"enabled":false,"expiration_date_ms":86400000,"expired_object_delete_marker":true}]}"#;

    #[test]
    fn lifecycle_rules_of_the_prefix_only_encoding_load_unchanged() {
        let b: BucketRecord = decode(PREFIX_RULE_RECORD).unwrap();
        let logs = LifecycleRule {
            id: "logs".into(),
            enabled: true,
            prefix: "logs/".into(),
            abort_incomplete_days: 3,
            expiration_days: 30,
            noncurrent_days: 7,
            newer_noncurrent_versions: 2,
            ..Default::default()
        };
        let dated = LifecycleRule {
            expiration_date_ms: 86_400_000,
            expired_object_delete_marker: true,
            ..Default::default()
        };
        assert_eq!(b.lifecycle, vec![logs, dated]);
        // Written again, the record is byte for byte what it was.
        assert_eq!(encode(&b), PREFIX_RULE_RECORD.to_vec());
    }

    #[test]
    fn prefix_end_bounds_the_range() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert!(object_key("a", "b", "zzz") < prefix_end(&objects_base("a", "b")).unwrap());
        assert!(object_key("a", "b", "\u{10ffff}") < prefix_end(&objects_base("a", "b")).unwrap());
        // Another account's bucket of the same name is another range.
        assert!(object_key("a2", "b", "k") > prefix_end(&objects_base("a", "b")).unwrap());
        assert_eq!(
            split_name(&object_key("acct", "bkt", "d/k")[2..]),
            Some(("acct".into(), "bkt".into(), "d/k".into()))
        );
        // The expiry queue sorts by time.
        assert!(expiry_key(9, "z", "z", "z") < expiry_key(10, "a", "a", "a"));
    }

    #[test]
    fn layout_1_indexes_move_into_their_owners_namespaces() {
        use oram_state::KvState;
        let mut kv = oram_state::MemKv::new();
        let bucket = br#"{"name":"photos","owner":"alice","created_ms":5}"#;
        kv.put(b"b/photos", bucket.to_vec());
        kv.put(b"o/photos\0cat.jpg", b"{}".to_vec());
        kv.put(b"o/photos\0dir/dog.jpg", b"{}".to_vec());
        kv.put(b"u/0123", b"{}".to_vec());
        assert_eq!(migrate(&mut kv).unwrap(), 1);
        assert_eq!(kv.get(b"b/photos"), None);
        assert_eq!(
            kv.get(&bucket_key("alice", "photos")),
            Some(bucket.to_vec())
        );
        assert!(kv.get(&name_key("photos", "alice")).is_some());
        assert!(kv.get(&object_key("alice", "photos", "cat.jpg")).is_some());
        assert!(kv
            .get(&object_key("alice", "photos", "dir/dog.jpg"))
            .is_some());
        assert_eq!(kv.get(b"o/photos\0cat.jpg"), None);
        assert!(kv.get(b"u/0123").is_some());
        // Layout 2 is left alone.
        assert_eq!(migrate(&mut kv).unwrap(), 0);
    }
}
