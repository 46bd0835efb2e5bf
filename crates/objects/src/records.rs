//! Index records and how they are laid out in the key-value state.
//!
//! Keys: `b/<bucket>` → [`BucketRecord`]; `o/<bucket>\0<key>` → [`ObjectRecord`];
//! `u/<upload id>` → [`UploadRecord`]; `a/<account>` → [`AccountRecord`]. Values
//! are JSON. Bucket names never contain `\0`, so the objects of a bucket are one
//! contiguous key range.
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
}

fn is_zero(v: &i64) -> bool {
    *v == 0
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
}

pub(crate) fn bucket_key(bucket: &str) -> Vec<u8> {
    [b"b/".as_slice(), bucket.as_bytes()].concat()
}

pub(crate) fn objects_base(bucket: &str) -> Vec<u8> {
    [b"o/".as_slice(), bucket.as_bytes(), b"\0"].concat()
}

pub(crate) fn object_key(bucket: &str, key: &str) -> Vec<u8> {
    [objects_base(bucket).as_slice(), key.as_bytes()].concat()
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

    #[test]
    fn prefix_end_bounds_the_range() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert!(object_key("b", "zzz") < prefix_end(&objects_base("b")).unwrap());
        assert!(object_key("b", "\u{10ffff}") < prefix_end(&objects_base("b")).unwrap());
    }
}
