//! Object listings with prefix, delimiter and start-after, and upload listings.

use oram_state::KvState;

use crate::records::{decode, objects_base, prefix_end, scan_prefix, ObjectRecord, UploadRecord};
use crate::{corrupt, Result};

/// What to list.
#[derive(Clone, Debug, Default)]
pub struct ListParams {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up to the first occurrence of this after the prefix into common
    /// prefixes.
    pub delimiter: Option<String>,
    /// Only keys (and common prefixes) strictly after this (marker, start-after,
    /// continuation).
    pub start_after: Option<String>,
    /// At most this many keys and common prefixes together.
    pub max_keys: usize,
}

/// One page of a listing.
#[derive(Clone, Debug, Default)]
pub struct ListResult {
    /// Objects, by key: `(key, record)`.
    pub objects: Vec<(String, ObjectRecord)>,
    /// Common prefixes, sorted.
    pub common_prefixes: Vec<String>,
    /// Whether more entries follow.
    pub truncated: bool,
    /// The last key or common prefix returned (where the next page starts after).
    pub next_start_after: Option<String>,
}

/// An unfinished multipart upload.
#[derive(Clone, Debug)]
pub struct UploadInfo {
    /// Its id.
    pub upload_id: String,
    /// Key of the future object.
    pub key: String,
    /// Start time, ms since the epoch.
    pub initiated_ms: i64,
    /// Account that started it.
    pub owner: String,
}

pub(crate) fn list(
    kv: &dyn KvState,
    owner: &str,
    bucket: &str,
    p: &ListParams,
) -> Result<ListResult> {
    let base = objects_base(owner, bucket);
    let now = crate::now_secs();
    let full_prefix = [base.as_slice(), p.prefix.as_bytes()].concat();
    let end = prefix_end(&full_prefix);
    let mut out = ListResult::default();
    if p.max_keys == 0 {
        return Ok(out);
    }
    let (mut cursor, mut inclusive) = match &p.start_after {
        Some(s) if s.as_bytes() >= p.prefix.as_bytes() => {
            ([base.as_slice(), s.as_bytes()].concat(), false)
        }
        _ => (full_prefix.clone(), true),
    };
    if end.as_ref().is_some_and(|e| cursor >= *e) {
        // start-after lies beyond every key with the prefix.
        return Ok(out);
    }
    let delim = p.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut count = 0usize;
    'outer: loop {
        let batch = kv.range(&cursor, inclusive, end.as_deref(), 256);
        if batch.is_empty() {
            break;
        }
        for (k, v) in batch {
            let tail = &k[base.len()..];
            if let Some(i) = tail.iter().position(|b| *b == 0) {
                // Noncurrent versions and delete markers: skip every one of this key.
                cursor = [&k[..base.len() + i], &[1u8][..]].concat();
                inclusive = true;
                continue 'outer;
            }
            let key =
                std::str::from_utf8(tail).map_err(|e| corrupt("object key", e.to_string()))?;
            if let Some(d) = delim {
                if let Some(i) = key[p.prefix.len()..].find(d) {
                    let cp = &key[..p.prefix.len() + i + d.len()];
                    let skip = p.start_after.as_deref().is_some_and(|s| cp <= s);
                    if !skip {
                        if count == p.max_keys {
                            out.truncated = true;
                            break 'outer;
                        }
                        out.common_prefixes.push(cp.to_string());
                        out.next_start_after = Some(cp.to_string());
                        count += 1;
                    }
                    // Continue after every key under this common prefix.
                    match prefix_end(&[base.as_slice(), cp.as_bytes()].concat()) {
                        Some(next) => {
                            cursor = next;
                            inclusive = true;
                            continue 'outer;
                        }
                        None => break 'outer,
                    }
                }
            }
            if count == p.max_keys {
                out.truncated = true;
                break 'outer;
            }
            let rec: ObjectRecord = decode(&v).map_err(|e| corrupt("object record", e))?;
            if rec.expired(now) {
                cursor = k;
                inclusive = false;
                continue;
            }
            out.objects.push((key.to_string(), rec));
            out.next_start_after = Some(key.to_string());
            count += 1;
            cursor = k;
            inclusive = false;
        }
    }
    if !out.truncated {
        out.next_start_after = None;
    }
    Ok(out)
}

/// What to list of a bucket's versions (S3's `ListObjectVersions`).
#[derive(Clone, Debug, Default)]
pub struct VersionParams {
    /// Only keys starting with this.
    pub prefix: String,
    /// Roll keys up to the first occurrence of this after the prefix into
    /// common prefixes.
    pub delimiter: Option<String>,
    /// Start after this key (every version of it, unless `version_id_marker`
    /// names one: then after that version).
    pub key_marker: Option<String>,
    /// Start after this version of `key_marker`.
    pub version_id_marker: Option<String>,
    /// At most this many versions, delete markers and common prefixes together.
    pub max_keys: usize,
}

/// One version or delete marker in a listing.
#[derive(Clone, Debug)]
pub struct VersionEntry {
    /// Its key.
    pub key: String,
    /// Its record (`rec.delete_marker` says whether it is a delete marker).
    pub rec: ObjectRecord,
    /// Whether it is the newest version of its key.
    pub is_latest: bool,
}

/// One page of a version listing.
#[derive(Clone, Debug, Default)]
pub struct VersionList {
    /// Versions and delete markers, by key, newest first.
    pub versions: Vec<VersionEntry>,
    /// Common prefixes, sorted.
    pub common_prefixes: Vec<String>,
    /// Whether more entries follow.
    pub truncated: bool,
    /// Where the next page starts (when truncated): after this key…
    pub next_key_marker: Option<String>,
    /// …and this version of it (`None`: after the common prefix).
    pub next_version_id_marker: Option<String>,
}

pub(crate) fn list_versions(
    kv: &dyn KvState,
    owner: &str,
    bucket: &str,
    p: &VersionParams,
) -> Result<VersionList> {
    let base = objects_base(owner, bucket);
    let now = crate::now_secs();
    let full_prefix = [base.as_slice(), p.prefix.as_bytes()].concat();
    let end = prefix_end(&full_prefix);
    let mut out = VersionList::default();
    if p.max_keys == 0 || p.prefix.contains('\0') {
        return Ok(out);
    }
    let marker = p.key_marker.as_deref().filter(|m| !m.is_empty());
    let (mut cursor, mut inclusive) = match (marker, p.version_id_marker.as_deref()) {
        (Some(k), Some(v)) if !v.is_empty() => {
            match crate::versions::find_version(kv, (owner, bucket, k), v)? {
                Some(found) => (found.at, false),
                None => ([base.as_slice(), k.as_bytes(), &[1u8]].concat(), true),
            }
        }
        (Some(k), _) => ([base.as_slice(), k.as_bytes(), &[1u8]].concat(), true),
        _ => (full_prefix.clone(), true),
    };
    if cursor < full_prefix {
        (cursor, inclusive) = (full_prefix.clone(), true);
    }
    if end.as_ref().is_some_and(|e| cursor >= *e) {
        return Ok(out);
    }
    let delim = p.delimiter.as_deref().filter(|d| !d.is_empty());
    let mut count = 0usize;
    // The key of the last entry seen, so that only a key's first entry on this
    // page is checked for being the newest.
    let mut last_key: Option<String> = None;
    'outer: loop {
        let batch = kv.range(&cursor, inclusive, end.as_deref(), 256);
        if batch.is_empty() {
            break;
        }
        for (k, v) in batch {
            let tail = &k[base.len()..];
            let (key_bytes, is_version) = match tail.iter().position(|b| *b == 0) {
                Some(i) => (&tail[..i], true),
                None => (tail, false),
            };
            let key =
                std::str::from_utf8(key_bytes).map_err(|e| corrupt("object key", e.to_string()))?;
            if let Some(d) = delim {
                if let Some(i) = key[p.prefix.len()..].find(d) {
                    let cp = &key[..p.prefix.len() + i + d.len()];
                    if marker.is_none_or(|m| cp > m) {
                        if count == p.max_keys {
                            out.truncated = true;
                            break 'outer;
                        }
                        out.common_prefixes.push(cp.to_string());
                        out.next_key_marker = Some(cp.to_string());
                        out.next_version_id_marker = None;
                        count += 1;
                    }
                    match prefix_end(&[base.as_slice(), cp.as_bytes()].concat()) {
                        Some(next) => {
                            (cursor, inclusive) = (next, true);
                            continue 'outer;
                        }
                        None => break 'outer,
                    }
                }
            }
            let rec: ObjectRecord = decode(&v).map_err(|e| corrupt("object record", e))?;
            (cursor, inclusive) = (k.clone(), false);
            if !is_version && rec.expired(now) {
                continue;
            }
            if count == p.max_keys {
                out.truncated = true;
                break 'outer;
            }
            let first_seen = last_key.as_deref() != Some(key);
            let is_latest = first_seen
                && (!is_version
                    || (kv
                        .get(&crate::records::object_key(owner, bucket, key))
                        .is_none()
                        && crate::versions::newest_entry(kv, (owner, bucket, key))?
                            .is_some_and(|(at, _)| at == k)));
            last_key = Some(key.to_string());
            out.next_key_marker = Some(key.to_string());
            out.next_version_id_marker = Some(rec.version_label().to_string());
            out.versions.push(VersionEntry {
                key: key.to_string(),
                rec,
                is_latest,
            });
            count += 1;
        }
    }
    if !out.truncated {
        out.next_key_marker = None;
        out.next_version_id_marker = None;
    }
    Ok(out)
}

pub(crate) fn all_uploads(kv: &dyn KvState) -> Result<Vec<(String, UploadRecord)>> {
    let mut out = Vec::new();
    scan_prefix(kv, b"u/", |k, v| {
        let id = String::from_utf8_lossy(&k[2..]).into_owned();
        out.push((id, decode(v).map_err(|e| corrupt("upload record", e))?));
        Ok(())
    })?;
    Ok(out)
}
