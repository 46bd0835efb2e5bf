//! Metadata headers: updates with Swift's limits, and an object's metadata from
//! a request.

use std::collections::BTreeMap;

use oram_objects::ObjectMeta;

use crate::error::{err_msg, Res};
use crate::limits::*;
use crate::plumbing::Ctx;
use crate::util::guess_content_type;

/// The `extra` name of the large-object manifest.
pub(crate) const MANIFEST: &str = "x-object-manifest";

/// The metadata updates of a request: names after `prefix` (lower case) with their
/// values; `remove_prefix` headers give empty values (removal). Checks Swift's
/// limits.
pub(crate) fn meta_updates(
    ctx: &Ctx,
    prefix: &str,
    remove_prefix: Option<&str>,
) -> Res<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let (mut count, mut size) = (0usize, 0usize);
    for (name, value) in &ctx.headers {
        let n = name.as_str();
        let (key, removal) = if let Some(k) = n.strip_prefix(prefix) {
            (k, false)
        } else if let Some(k) = remove_prefix.and_then(|p| n.strip_prefix(p)) {
            (k, true)
        } else {
            continue;
        };
        if key.is_empty() {
            return Err(err_msg(400, "Metadata name cannot be empty"));
        }
        // Swift keeps metadata values as raw bytes; the index keeps text, so bytes
        // that are not UTF-8 become U+FFFD (the limits apply to the bytes sent).
        let raw_len = value.len();
        let value = if removal {
            String::new()
        } else {
            String::from_utf8_lossy(value.as_bytes()).into_owned()
        };
        if key.len() > MAX_META_NAME_LENGTH {
            return Err(err_msg(400, format!("Metadata name too long: {n}")));
        }
        if raw_len > MAX_META_VALUE_LENGTH {
            return Err(err_msg(400, format!("Metadata value longer than 256: {n}")));
        }
        count += 1;
        size += key.len() + if removal { 0 } else { raw_len };
        if count > MAX_META_COUNT {
            return Err(err_msg(400, "Too many metadata items; max 90"));
        }
        if size > MAX_META_OVERALL_SIZE {
            return Err(err_msg(400, "Total metadata too large; max 4096"));
        }
        // A removal wins over a value for the same name.
        if removal || !out.contains_key(key) {
            out.insert(key.to_string(), value.trim().to_string());
        }
    }
    Ok(out)
}

/// Checks Swift's count and size limits on the metadata `stored` would have after
/// `updates` (an empty value removes a name).
pub(crate) fn check_merged(
    mut stored: BTreeMap<String, String>,
    updates: &BTreeMap<String, String>,
) -> Res<()> {
    for (k, v) in updates {
        if v.is_empty() {
            stored.remove(k);
        } else {
            stored.insert(k.clone(), v.clone());
        }
    }
    if stored.len() > MAX_META_COUNT {
        return Err(err_msg(400, "Too many metadata items; max 90"));
    }
    if stored.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_META_OVERALL_SIZE {
        return Err(err_msg(400, "Total metadata too large; max 4096"));
    }
    Ok(())
}

/// The object metadata a PUT, POST or COPY sends.
pub(crate) fn request_meta(ctx: &Ctx, name: &str, put: bool) -> Res<ObjectMeta> {
    let user = meta_updates(ctx, "x-object-meta-", None)?
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let mut content_type = ctx.header_utf8("content-type")?;
    if content_type.is_none() && put || ctx.bool_header("x-detect-content-type") {
        content_type = Some(guess_content_type(name).to_string());
    }
    let mut extra = BTreeMap::new();
    for h in [MANIFEST, "expires", "x-robots-tag"] {
        if let Some(v) = ctx.header_utf8(h)? {
            extra.insert(h.to_string(), v);
        }
    }
    Ok(ObjectMeta {
        content_type,
        content_encoding: ctx.header_utf8("content-encoding")?,
        content_disposition: ctx.header_utf8("content-disposition")?,
        content_language: ctx.header_utf8("content-language")?,
        cache_control: ctx.header_utf8("cache-control")?,
        user,
        extra,
    })
}

/// The latest expiry time (Swift's largest timestamp, in seconds).
const MAX_DELETE_AT: i64 = 9_999_999_999;

/// The expiry time a PUT, POST or COPY asks for (`X-Delete-After` seconds from
/// now wins over `X-Delete-At`, as in Swift), in seconds since the Unix epoch;
/// `None` when it asks for none. A value that is no integer, or not in the
/// future, is refused with Swift's `400` messages.
pub(crate) fn request_delete_at(ctx: &Ctx, now_secs: i64) -> Res<Option<i64>> {
    if let Some(v) = ctx.header("x-delete-after") {
        let after = v
            .trim()
            .parse::<i64>()
            .map_err(|_| err_msg(400, "Non-integer X-Delete-After"))?;
        let at = now_secs.saturating_add(after);
        if at <= now_secs {
            return Err(err_msg(400, "X-Delete-After in past"));
        }
        return Ok(Some(at));
    }
    let Some(v) = ctx.header("x-delete-at") else {
        return Ok(None);
    };
    // Swift clamps a time beyond its timestamp range to 9999999999.
    let v = v.trim();
    let at = match v.parse::<i64>() {
        Ok(at) => at.min(MAX_DELETE_AT),
        Err(_) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => MAX_DELETE_AT,
        Err(_) => return Err(err_msg(400, "Non-integer X-Delete-At")),
    };
    if at <= now_secs {
        return Err(err_msg(400, "X-Delete-At in past"));
    }
    Ok(Some(at))
}
