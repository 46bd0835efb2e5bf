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

use std::collections::BTreeMap;
use std::fmt::Write as _;

use bytes::Bytes;
use futures::StreamExt;
use http::Method;
use md5::{Digest, Md5};
use oram_objects::{ObjectRecord, PutOptions};
use serde::{Deserialize, Serialize};

use crate::acl::Access;
use crate::dlo::{Joined, Piece};
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
/// Nesting depth of manifests within manifests (Swift's limit).
const MAX_NESTING: usize = 10;

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
            total += len;
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
        let mut meta = request_meta(ctx, o, true)?;
        meta.extra.remove(crate::dlo::MANIFEST);
        meta.extra.insert(SLO.into(), "True".into());
        meta.extra.insert(SLO_ETAG.into(), slo_etag.clone());
        meta.extra.insert(SLO_SIZE.into(), total.to_string());
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

    /// Reads the stored manifest of the opened object `c/o` (which must still be
    /// version `rec`).
    async fn read_manifest(
        &self,
        owner: &str,
        c: &str,
        o: &str,
        rec: &ObjectRecord,
    ) -> Res<Vec<Stored>> {
        let layer = &self.inner.layer;
        let obj = layer.open_object(owner, c, o).map_err(obj_err)?;
        if obj.record().id != rec.id {
            return Err(err(409));
        }
        let mut s = layer.read(obj, None).map_err(obj_err)?;
        let mut raw = Vec::with_capacity(rec.size as usize);
        while let Some(chunk) = s.next().await {
            raw.extend_from_slice(&chunk.map_err(obj_err)?);
        }
        serde_json::from_slice(&raw).map_err(|e| {
            tracing::warn!("swift: unreadable SLO manifest: {e}");
            err(500)
        })
    }

    /// The joined plan of the static large object `c/o` (version `rec`):
    /// nested manifests are expanded (at most [`MAX_NESTING`] deep); a caller
    /// who does not own the account needs read access to each segment's
    /// container.
    pub(crate) async fn slo_plan(
        &self,
        caller: &Caller,
        owner: &str,
        (c, o): (&str, &str),
        rec: &ObjectRecord,
    ) -> Res<Joined> {
        let (size, etag) = slo_size_etag(rec).ok_or_else(|| err(500))?;
        let top = self.read_manifest(owner, c, o, rec).await?;
        let segs = self.pieces(caller, owner, top, 0).await?;
        Ok(Joined { segs, size, etag })
    }

    /// The flat pieces of a manifest's entries (`depth`: of nesting).
    fn pieces<'a>(
        &'a self,
        caller: &'a Caller,
        owner: &'a str,
        entries: Vec<Stored>,
        depth: usize,
    ) -> futures::future::BoxFuture<'a, Res<Vec<Piece>>> {
        Box::pin(self.pieces_inner(caller, owner, entries, depth))
    }

    async fn pieces_inner(
        &self,
        caller: &Caller,
        owner: &str,
        entries: Vec<Stored>,
        depth: usize,
    ) -> Res<Vec<Piece>> {
        let mut out = Vec::new();
        for s in entries {
            let (sc, so) = split_object_path(&s.name).ok_or_else(|| err(500))?;
            self.authorize(caller, owner, &sc, Access::Read)?;
            let r = match s.range.as_deref().and_then(parse_one_range) {
                Some(spec) => satisfiable(&[spec], s.bytes)
                    .first()
                    .cloned()
                    .unwrap_or(0..0),
                None => 0..s.bytes,
            };
            if !s.sub_slo {
                // A segment changed since the manifest was put fails the read
                // before its first byte (the stream checks again when it gets
                // there).
                let now = self.inner.layer.head_object(owner, &sc, &so).ok();
                if now.is_none_or(|r| r.etag != s.hash) {
                    return Err(err_msg(
                        409,
                        format!("Object segment no longer valid: {}", s.name),
                    ));
                }
                out.push(Piece {
                    container: sc,
                    name: so,
                    range: r,
                    etag: Some(s.hash),
                });
                continue;
            }
            if depth + 1 >= MAX_NESTING {
                return Err(err_msg(409, "Max recursion depth exceeded"));
            }
            // The nested manifest must still be the one that was checked.
            let sub = self
                .inner
                .layer
                .head_object(owner, &sc, &so)
                .map_err(|_| err(409))?;
            if slo_size_etag(&sub).map(|x| x.1).as_deref() != Some(s.hash.as_str()) {
                return Err(err(409));
            }
            let entries = self.read_manifest(owner, &sc, &so, &sub).await?;
            let inner = self.pieces(caller, owner, entries, depth + 1).await?;
            out.extend(cut(inner, r));
        }
        Ok(out)
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

    /// `DELETE ?multipart-manifest=delete`: the manifest and every segment it
    /// (and each nested manifest) names; a plain object is deleted alone. The
    /// answer has bulk delete's form.
    pub(crate) async fn slo_delete(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        owner: &str,
        (c, o): (&str, &str),
    ) -> Res<Answer> {
        let layer = &self.inner.layer;
        let rec = layer.head_object(owner, c, o).map_err(obj_err)?;
        let mut targets: Vec<(String, String)> = Vec::new();
        if is_slo(&rec) {
            let mut pending = vec![(c.to_string(), o.to_string(), rec, 0usize)];
            while let Some((pc, po, prec, depth)) = pending.pop() {
                for s in self.read_manifest(owner, &pc, &po, &prec).await? {
                    let Some((sc, so)) = split_object_path(&s.name) else {
                        continue;
                    };
                    if s.sub_slo && depth + 1 < MAX_NESTING {
                        if let Ok(sub) = layer.head_object(owner, &sc, &so) {
                            if is_slo(&sub) {
                                pending.push((sc.clone(), so.clone(), sub, depth + 1));
                            }
                        }
                    }
                    targets.push((sc, so));
                }
            }
        }
        targets.push((c.to_string(), o.to_string()));
        let (mut deleted, mut not_found) = (0u64, 0u64);
        let mut errors: Vec<(String, String)> = Vec::new();
        for (sc, so) in targets {
            let name = percent_encode_path(&format!("/{sc}/{so}"));
            if let Err(e) = self.authorize(caller, owner, &sc, Access::Write) {
                errors.push((name, status_line(e.status.as_u16())));
                continue;
            }
            match layer.delete_object(owner, &sc, &so, None).await {
                Ok(true) => deleted += 1,
                Ok(false) | Err(oram_objects::ObjectError::NoSuchBucket(_)) => not_found += 1,
                Err(e) => errors.push((name, status_line(obj_err(e).status.as_u16()))),
            }
        }
        let status = if errors.is_empty() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        let (ct, text) = bulk_body(ctx, deleted, not_found, status, &errors);
        Ok(Answer::new(200).text(ct, text))
    }
}

/// The pieces of `inner` (a nested large object) that fall into `range` of it.
fn cut(inner: Vec<Piece>, range: std::ops::Range<u64>) -> Vec<Piece> {
    let mut out = Vec::new();
    let mut off = 0u64;
    for p in inner {
        let len = p.range.end - p.range.start;
        let (s, e) = (off, off + len);
        off = e;
        let from = range.start.max(s);
        let to = range.end.min(e);
        if from < to {
            let base = p.range.start;
            out.push(Piece {
                range: base + from - s..base + to - s,
                ..p
            });
        }
    }
    out
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

/// A bulk-delete style answer body.
pub(crate) fn bulk_body(
    ctx: &Ctx,
    deleted: u64,
    not_found: u64,
    status: &str,
    errors: &[(String, String)],
) -> (&'static str, String) {
    match listing_format(ctx) {
        Format::Json => (
            "application/json",
            serde_json::json!({
                "Number Deleted": deleted,
                "Number Not Found": not_found,
                "Response Body": "",
                "Response Status": status,
                "Errors": errors.iter().map(|(n, s)| [n, s]).collect::<Vec<_>>(),
            })
            .to_string(),
        ),
        Format::Xml => {
            let mut s = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<delete><number_deleted>{deleted}</number_deleted><number_not_found>{not_found}</number_not_found><response_body></response_body><response_status>{status}</response_status><errors>"
            );
            for (n, st) in errors {
                let _ = write!(
                    s,
                    "<object><name>{}</name><status>{st}</status></object>",
                    xml_escape(n)
                );
            }
            s.push_str("</errors></delete>");
            ("application/xml", s)
        }
        Format::Plain => {
            let mut s = format!(
                "Number Deleted: {deleted}\nNumber Not Found: {not_found}\nResponse Body: \nResponse Status: {status}\nErrors: \n"
            );
            for (n, st) in errors {
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
