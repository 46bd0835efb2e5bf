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
            let key = std::str::from_utf8(&k[base.len()..])
                .map_err(|e| corrupt("object key", e.to_string()))?;
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

pub(crate) fn all_uploads(kv: &dyn KvState) -> Result<Vec<(String, UploadRecord)>> {
    let mut out = Vec::new();
    scan_prefix(kv, b"u/", |k, v| {
        let id = String::from_utf8_lossy(&k[2..]).into_owned();
        out.push((id, decode(v).map_err(|e| corrupt("upload record", e))?));
        Ok(())
    })?;
    Ok(out)
}
