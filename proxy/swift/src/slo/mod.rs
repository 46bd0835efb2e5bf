//! Static large objects (`?multipart-manifest=put|get|delete`): a manifest
//! object listing segments (`/container/object`, optionally a byte range) of
//! the same account, checked against the segments' sizes and ETags when it is
//! put, and read as the segments joined.
//!
//! The manifest is stored as an object whose body is Swift's JSON manifest
//! (`name`, `bytes`, `hash`, `content_type`, `last_modified`, `range`,
//! `sub_slo`), so it travels through the ORAM like any object; the large
//! object's size and ETag live in its index record (`extra`), so HEAD and
//! listings read nothing from the back-end. Checking segments reads only the
//! local index.
//!
//! A manifest's expansion is bounded ([`crate::limits`]): at most
//! [`MAX_MANIFEST_NESTING`] manifests deep, [`MAX_SLO_SEGMENTS_PER_REQUEST`]
//! segments and [`MAX_SLO_MANIFEST_BYTES_PER_REQUEST`] bytes of manifests in
//! all. A PUT records its manifest's expansion (segments, manifest bytes,
//! depth) in its index record and refuses a manifest whose nested manifests
//! would take it beyond a bound (400); reads ([`walk`]) expand nested
//! manifests lazily within a per-request budget, and
//! `multipart-manifest=delete` ([`delete`]) collects its targets within the
//! same budget before deleting anything.

mod delete;
mod walk;

pub(crate) use delete::bulk_body;
pub(crate) use walk::{SloPlan, SloStats};

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use futures::StreamExt;
use http::Method;
use md5::{Digest, Md5};
use oram_objects::{ObjectRecord, PutOptions};
use serde::{Deserialize, Serialize};

use crate::acl::Access;
use crate::error::{err, err_msg, obj_err, Res};
use crate::limits::*;
use crate::listing::{listing_format, Format};
use crate::meta::{request_delete_at, request_meta};
use crate::plumbing::{body_stream, Answer, Ctx};
use crate::util::*;
use crate::{Caller, SwiftApi};

/// The header (and `extra` name) marking a static large object's manifest.
pub(crate) const SLO: &str = "x-static-large-object";
/// The `extra` name of a static large object's ETag (hex).
pub(crate) const SLO_ETAG: &str = "x-object-sysmeta-slo-etag";
/// The `extra` name of a static large object's size in bytes.
pub(crate) const SLO_SIZE: &str = "x-object-sysmeta-slo-size";
/// Prefix of `extra` names that are never sent to clients.
pub(crate) const SYSMETA: &str = "x-object-sysmeta-";
/// The `extra` name of a manifest's expansion: segments in all, nested ones
/// counted with theirs.
pub(crate) const SLO_SEGMENTS: &str = "x-object-sysmeta-slo-segments";
/// The `extra` name of a manifest's expansion: bytes of stored manifests, its
/// own and nested ones' (each time it is referenced).
pub(crate) const SLO_MANIFEST_BYTES: &str = "x-object-sysmeta-slo-manifest-bytes";
/// The `extra` name of a manifest's expansion: manifests deep (1: no nested one).
pub(crate) const SLO_DEPTH: &str = "x-object-sysmeta-slo-depth";

/// One entry of a stored manifest (Swift's format).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Stored {
    name: String,
    bytes: u64,
    hash: String,
    #[serde(default)]
    content_type: String,
    #[serde(default)]
    last_modified: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    range: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    sub_slo: bool,
}

/// One entry of a manifest as a client puts it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    path: String,
    #[serde(default)]
    etag: Option<String>,
    #[serde(default)]
    size_bytes: Option<u64>,
    #[serde(default)]
    range: Option<String>,
}

/// Whether a record is a static large object's manifest.
pub(crate) fn is_slo(rec: &ObjectRecord) -> bool {
    rec.meta.extra.contains_key(SLO)
}

/// A static large object's size and ETag (hex) from its record.
pub(crate) fn slo_size_etag(rec: &ObjectRecord) -> Option<(u64, String)> {
    let size = rec.meta.extra.get(SLO_SIZE)?.parse().ok()?;
    Some((size, rec.meta.extra.get(SLO_ETAG)?.clone()))
}

/// What reading a manifest expands to: segments, manifest bytes, depth.
#[derive(Clone, Copy, Debug)]
struct Expansion {
    segments: u64,
    manifest_bytes: u64,
    depth: usize,
}

impl Expansion {
    /// A manifest's recorded expansion. One put before it was recorded counts
    /// as one level of [`MAX_MANIFEST_SEGMENTS`] segments and its own bytes
    /// (reading it stays bounded by the request's budget).
    fn of(rec: &ObjectRecord) -> Self {
        let get = |k: &str| rec.meta.extra.get(k).and_then(|v| v.parse::<u64>().ok());
        Self {
            segments: get(SLO_SEGMENTS).unwrap_or(MAX_MANIFEST_SEGMENTS as u64),
            manifest_bytes: get(SLO_MANIFEST_BYTES).unwrap_or(rec.size),
            depth: get(SLO_DEPTH)
                .and_then(|d| usize::try_from(d).ok())
                .unwrap_or(1),
        }
    }

    /// The answer to a manifest whose expansion is beyond a bound: 400.
    fn check(&self) -> Res<()> {
        let msg = if self.segments > MAX_SLO_SEGMENTS_PER_REQUEST {
            format!(
                "Manifest would expand to more than {MAX_SLO_SEGMENTS_PER_REQUEST} segments, nested manifests' included.\n"
            )
        } else if self.manifest_bytes > MAX_SLO_MANIFEST_BYTES_PER_REQUEST {
            format!(
                "Manifest would read more than {MAX_SLO_MANIFEST_BYTES_PER_REQUEST} bytes of manifests, nested ones' included.\n"
            )
        } else if self.depth > MAX_MANIFEST_NESTING {
            format!("Manifests may be nested at most {MAX_MANIFEST_NESTING} deep.\n")
        } else {
            return Ok(());
        };
        Err(err_msg(400, msg))
    }
}

/// The part of its object a stored entry names (empty if its range is not
/// satisfiable).
fn entry_range(s: &Stored) -> std::ops::Range<u64> {
    match s.range.as_deref().and_then(parse_one_range) {
        Some(spec) => satisfiable(&[spec], s.bytes)
            .first()
            .filter(|r| r.start <= r.end)
            .cloned()
            .unwrap_or(0..0),
        None => 0..s.bytes,
    }
}

/// A segment's `range` as the manifest gives it (`a-b`, `a-`, `-n`, with or
/// without `bytes=`): exactly one range.
fn parse_one_range(r: &str) -> Option<RangeSpec> {
    let r = r.trim();
    let full = if r.to_ascii_lowercase().starts_with("bytes=") {
        r.to_string()
    } else {
        format!("bytes={r}")
    };
    let specs = parse_range(&full)?;
    (specs.len() == 1).then(|| specs[0].clone())
}

impl SwiftApi {
    /// `PUT ?multipart-manifest=put`: validates the manifest against the
    /// segments (same account, by the caller's read rights) and stores it.
    pub(crate) async fn slo_put<B>(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        (owner, c, o): (&str, &str, &str),
        body: B,
    ) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        if ctx.header("x-copy-from").is_some() {
            return Err(err_msg(
                405,
                "Multipart Manifest PUTs cannot be COPY requests",
            ));
        }
        let chunked = ctx
            .header("transfer-encoding")
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"));
        match ctx
            .header("content-length")
            .map(|l| l.trim().parse::<u64>())
        {
            None if !chunked => return Err(err(411)),
            Some(Err(_)) => return Err(err_msg(400, "Invalid Content-Length")),
            Some(Ok(l)) if l > MAX_MANIFEST_SIZE => {
                return Err(err_msg(
                    413,
                    format!("Manifest File > {MAX_MANIFEST_SIZE} bytes"),
                ));
            }
            _ => {}
        }
        // The caller was authorized (write) already; the body is bounded.
        let mut s = body_stream(body);
        let mut raw = Vec::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|_| err(499))?;
            if raw.len() + chunk.len() > MAX_MANIFEST_SIZE as usize {
                return Err(err_msg(
                    413,
                    format!("Manifest File > {MAX_MANIFEST_SIZE} bytes"),
                ));
            }
            raw.extend_from_slice(&chunk);
        }
        let inputs: Vec<Input> = serde_json::from_slice(&raw).map_err(|e| {
            err_msg(
                400,
                if e.is_data() && std::str::from_utf8(&raw).is_ok() {
                    format!(
                        "Manifest entries must be objects with path, etag, size_bytes, range: {e}"
                    )
                } else {
                    "Manifest must be valid JSON.\n".to_string()
                },
            )
        })?;
        if inputs.is_empty() {
            return Err(err_msg(400, "Manifest must have at least one segment.\n"));
        }
        if inputs.len() > MAX_MANIFEST_SEGMENTS {
            return Err(err_msg(
                413,
                format!("Number of object-backed segments must be <= {MAX_MANIFEST_SEGMENTS}"),
            ));
        }
        let layer = &self.inner.layer;
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut stored = Vec::with_capacity(inputs.len());
        let mut total = 0u64;
        // The expansion so far (nested manifests' included); its own bytes come last.
        let mut exp = Expansion {
            segments: 0,
            manifest_bytes: 0,
            depth: 1,
        };
        let too_big = || err_msg(400, "Manifest size out of range\n");
        let last = inputs.len() - 1;
        for (i, inp) in inputs.into_iter().enumerate() {
            let quoted = percent_encode_path(&inp.path);
            let Some((sc, so)) = split_object_path(&inp.path) else {
                return Err(err_msg(
                    400,
                    format!("Index {i}: path does not refer to an object. Path must be of the form /container/object.\n"),
                ));
            };
            let range = match &inp.range {
                None => None,
                Some(r) => Some(
                    parse_one_range(r)
                        .ok_or_else(|| err_msg(400, format!("Index {i}: invalid range\n")))?,
                ),
            };
            let seg = match self.authorize(caller, owner, &sc, Access::Read) {
                Err(e) => {
                    problems.push((quoted, status_line(e.status.as_u16())));
                    continue;
                }
                Ok(()) => layer.head_object(owner, &sc, &so),
            };
            let seg = match seg {
                Ok(r) => r,
                Err(e) => {
                    problems.push((quoted, status_line(obj_err(e).status.as_u16())));
                    continue;
                }
            };
            // A nested manifest counts with its joined size and ETag.
            let (seg_size, seg_etag, sub) = match slo_size_etag(&seg) {
                Some((size, etag)) if is_slo(&seg) => (size, etag, true),
                _ => (seg.size, seg.etag.clone(), false),
            };
            let inner = if sub {
                Expansion::of(&seg)
            } else {
                Expansion {
                    segments: 1,
                    manifest_bytes: 0,
                    depth: 0,
                }
            };
            exp = Expansion {
                segments: exp
                    .segments
                    .checked_add(inner.segments)
                    .ok_or_else(too_big)?,
                manifest_bytes: exp
                    .manifest_bytes
                    .checked_add(inner.manifest_bytes)
                    .ok_or_else(too_big)?,
                depth: exp.depth.max(inner.depth.saturating_add(1)),
            };
            let mut len = seg_size;
            let mut range_text = None;
            if let Some(spec) = range {
                let sat = satisfiable(&[spec], seg_size);
                match sat.first() {
                    None => problems.push((quoted.clone(), "Unsatisfiable Range".into())),
                    Some(r) if *r == (0..seg_size) => {}
                    Some(r) => {
                        len = r.end - r.start;
                        range_text = Some(format!("{}-{}", r.start, r.end - 1));
                    }
                }
            }
            if len < 1 && i != last {
                problems.push((
                    quoted.clone(),
                    "Too small; each segment must be at least 1 byte.".into(),
                ));
            }
            if inp.size_bytes.is_some_and(|s| s != seg_size) {
                problems.push((quoted.clone(), "Size Mismatch".into()));
            }
            if inp
                .etag
                .as_deref()
                .is_some_and(|e| e.trim().trim_matches('"') != seg_etag)
            {
                problems.push((quoted.clone(), "Etag Mismatch".into()));
            }
            total = total.checked_add(len).ok_or_else(too_big)?;
            stored.push(Stored {
                name: format!("/{}", inp.path.trim_start_matches('/')),
                bytes: seg_size,
                hash: seg_etag,
                content_type: seg
                    .meta
                    .content_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".into()),
                last_modified: iso_date(seg.modified_ms),
                range: range_text,
                sub_slo: sub,
            });
        }
        if !problems.is_empty() {
            let (ct, body) = problem_body(ctx, &problems);
            return Ok(Answer::new(400).text(ct, body));
        }
        let mut md5 = Md5::new();
        for s in &stored {
            match &s.range {
                Some(r) => md5.update(format!("{}:{r};", s.hash).as_bytes()),
                None => md5.update(s.hash.as_bytes()),
            }
        }
        let slo_etag = hex::encode(md5.finalize());
        if let Some(e) = ctx.header("etag") {
            if e.trim().trim_matches('"') != slo_etag {
                return Err(err(422));
            }
        }
        let json = serde_json::to_vec(&stored).map_err(|_| err(500))?;
        exp.manifest_bytes = exp
            .manifest_bytes
            .checked_add(json.len() as u64)
            .ok_or_else(too_big)?;
        exp.check()?;
        let mut meta = request_meta(ctx, o, true)?;
        meta.extra.remove(crate::meta::MANIFEST);
        meta.extra.insert(SLO.into(), "True".into());
        meta.extra.insert(SLO_ETAG.into(), slo_etag.clone());
        meta.extra.insert(SLO_SIZE.into(), total.to_string());
        meta.extra
            .insert(SLO_SEGMENTS.into(), exp.segments.to_string());
        meta.extra
            .insert(SLO_MANIFEST_BYTES.into(), exp.manifest_bytes.to_string());
        meta.extra.insert(SLO_DEPTH.into(), exp.depth.to_string());
        let opts = PutOptions {
            meta,
            expected_len: Some(json.len() as u64),
            delete_at: request_delete_at(ctx, unix_now_secs())?.unwrap_or(0),
            ..PutOptions::default()
        };
        let one: oram_objects::ByteStream =
            Box::pin(futures::stream::once(async move { Ok(Bytes::from(json)) }));
        let rec = layer
            .put_object(owner, c, o, one, opts)
            .await
            .map_err(obj_err)?;
        Ok(Answer::new(201)
            .header("etag", format!("\"{slo_etag}\""))
            .header(
                "last-modified",
                http_date_secs(modified_secs(rec.modified_ms)),
            )
            .text("text/html; charset=UTF-8", ""))
    }

    /// `GET ?multipart-manifest=get` of a static large object: the stored
    /// manifest (`format=raw`: in the form a PUT takes).
    pub(crate) async fn slo_get_manifest(
        &self,
        ctx: &Ctx,
        owner: &str,
        (c, o): (&str, &str),
        rec: &ObjectRecord,
        head: Answer,
    ) -> Res<Answer> {
        let entries = self.read_manifest(owner, c, o, rec).await?;
        let body = if ctx.param("format") == Some("raw") {
            let raw: Vec<serde_json::Value> = entries
                .iter()
                .map(|s| {
                    let mut v = serde_json::json!({
                        "path": s.name, "etag": s.hash, "size_bytes": s.bytes,
                    });
                    if let Some(r) = &s.range {
                        v["range"] = r.clone().into();
                    }
                    v
                })
                .collect();
            serde_json::to_vec(&raw)
        } else {
            serde_json::to_vec(&entries)
        }
        .map_err(|_| err(500))?;
        let mut a = head;
        a.headers.retain(|(n, _)| n != http::header::CONTENT_TYPE);
        let ct = "application/json; charset=utf-8";
        if ctx.method == Method::HEAD {
            return Ok(a.header("content-type", ct).with_len(body.len() as u64));
        }
        Ok(a.text(ct, body))
    }
}

/// `404 Not Found` and the like.
fn status_line(status: u16) -> String {
    let s = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    format!("{} {}", s.as_u16(), s.canonical_reason().unwrap_or(""))
}

/// The body listing a manifest's problem segments, in the format the client
/// accepts (Swift's `Errors:` form).
fn problem_body(ctx: &Ctx, problems: &[(String, String)]) -> (&'static str, String) {
    match listing_format(ctx) {
        Format::Json => (
            "application/json",
            serde_json::json!({"Errors": problems.iter().map(|(n, s)| [n, s]).collect::<Vec<_>>()})
                .to_string(),
        ),
        Format::Xml => {
            let mut s =
                String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<upload><errors>");
            for (n, st) in problems {
                let _ = write!(
                    s,
                    "<object><name>{}</name><status>{}</status></object>",
                    xml_escape(n),
                    xml_escape(st)
                );
            }
            s.push_str("</errors></upload>");
            ("application/xml", s)
        }
        Format::Plain => {
            let mut s = String::from("Errors:\n");
            for (n, st) in problems {
                let _ = writeln!(s, "{n}, {st}");
            }
            ("text/plain", s)
        }
    }
}

/// The extra attributes of a manifest that survive a metadata POST.
pub(crate) fn kept_on_post(extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    extra
        .iter()
        .filter(|(k, _)| *k == SLO || k.starts_with(SYSMETA))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
