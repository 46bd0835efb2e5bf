//! Object requests: PUT (and copy by `X-Copy-From`), COPY, GET/HEAD with ranges
//! and conditions, POST, DELETE.

use bytes::Bytes;
use futures::StreamExt;
use http::header;
use http::{Method, StatusCode};
use oram_objects::{
    ByteStream, Dialect, EtagList, ObjectError, ObjectMeta, ObjectRecord, Preconditions, PutMode,
    PutOptions, Validators,
};
use rand::RngCore;

use crate::acl::Access;
use crate::dlo::{Joined, Segments, MANIFEST};
use crate::error::{default_body, err, err_msg, obj_err, Res, SwiftError};
use crate::limits::*;
use crate::meta::{request_delete_at, request_meta};
use crate::plumbing::*;
use crate::slo;
use crate::util::*;
use crate::{Caller, SwiftApi};

impl SwiftApi {
    /// An object request of `caller` in account `owner` (authorized here, per
    /// method: reads by the container's read ACL, writes by its write ACL).
    pub(crate) async fn object<B>(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        owner: &str,
        c: &str,
        o: &str,
        body: B,
    ) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        match ctx.method {
            Method::PUT => {
                if let Some(from) = ctx.header_utf8("x-copy-from")? {
                    if ctx
                        .header("content-length")
                        .is_some_and(|l| l.trim() != "0")
                    {
                        return Err(err_msg(400, "Copy requests require a zero byte body"));
                    }
                    let from = String::from_utf8(percent_decode(&from, false))
                        .map_err(|_| err_msg(412, "Invalid UTF8 or contains NULL"))?;
                    let (sc, so) = split_object_path(&from).ok_or_else(|| {
                        err_msg(
                            412,
                            "X-Copy-From header must be of the form <container name>/<object name>",
                        )
                    })?;
                    let src_acct = match ctx.header_utf8("x-copy-from-account")? {
                        Some(a) => account_of(caller, &a)?,
                        None => owner.to_string(),
                    };
                    return self
                        .copy(ctx, caller, (&src_acct, &sc, &so), (owner, c, o))
                        .await;
                }
                self.authorize(caller, owner, c, Access::Write)?;
                if ctx.param("multipart-manifest") == Some("put") {
                    return self.slo_put(ctx, caller, (owner, c, o), body).await;
                }
                if ctx.headers.contains_key(slo::SLO) {
                    return Err(err_msg(
                        400,
                        "X-Static-Large-Object is a reserved header. To create a static large object add query param multipart-manifest=put.",
                    ));
                }
                self.put(ctx, owner, c, o, body).await
            }
            ref m if m.as_str() == "COPY" => {
                let dest = ctx
                    .header_utf8("destination")?
                    .ok_or_else(|| err_msg(412, "Destination header required"))?;
                let dest_acct = match ctx.header_utf8("destination-account")? {
                    Some(a) => account_of(caller, &a)?,
                    None => owner.to_string(),
                };
                let dest = String::from_utf8(percent_decode(&dest, false))
                    .map_err(|_| err_msg(412, "Invalid UTF8 or contains NULL"))?;
                let (dc, d_o) = split_object_path(&dest).ok_or_else(|| {
                    err_msg(
                        412,
                        "Destination header must be of the form <container name>/<object name>",
                    )
                })?;
                check_container_name(&dc)?;
                check_object_name(&d_o)?;
                self.copy(ctx, caller, (owner, c, o), (&dest_acct, &dc, &d_o))
                    .await
            }
            Method::GET | Method::HEAD => {
                self.authorize(caller, owner, c, Access::Read)?;
                self.get(ctx, caller, owner, c, o).await
            }
            Method::POST => {
                self.authorize(caller, owner, c, Access::Write)?;
                let layer = &self.inner.layer;
                let rec = layer.head_object(owner, c, o).map_err(obj_err)?;
                let mut meta = request_meta(ctx, o, false)?;
                // A POST replaces the expiry too: without X-Delete-At (or -After)
                // the object no longer expires, as in Swift.
                let delete_at = request_delete_at(ctx, unix_now_secs())?.unwrap_or(0);
                if meta.content_type.is_none() {
                    meta.content_type = rec.meta.content_type.clone();
                }
                // A manifest stays a manifest.
                meta.extra.extend(slo::kept_on_post(&rec.meta.extra));
                layer
                    .set_object_meta(owner, c, o, meta, delete_at)
                    .await
                    .map_err(obj_err)?;
                Ok(Answer::new(202).text("text/html; charset=UTF-8", ""))
            }
            Method::DELETE => {
                self.authorize(caller, owner, c, Access::Write)?;
                if ctx.param("multipart-manifest") == Some("delete") {
                    return self.slo_delete(ctx, caller, owner, (c, o)).await;
                }
                if let Some(v) = ctx.header("x-if-delete-at") {
                    let want = v
                        .trim()
                        .parse::<i64>()
                        .map_err(|_| err_msg(400, "Bad X-If-Delete-At header value"))?;
                    let rec = self.inner.layer.head_object(owner, c, o).map_err(obj_err)?;
                    if rec.delete_at != want {
                        return Err(err(412));
                    }
                }
                let found = self
                    .inner
                    .layer
                    .delete_object(owner, c, o, None)
                    .await
                    .map_err(obj_err)?;
                if !found {
                    return Err(err(404));
                }
                Ok(Answer::new(204).text("text/html; charset=UTF-8", ""))
            }
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, PUT, POST, DELETE, COPY".into())],
                ..err(405)
            }),
        }
    }

    pub(crate) async fn put<B>(
        &self,
        ctx: &Ctx,
        owner: &str,
        c: &str,
        o: &str,
        body: B,
    ) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let te = ctx.header("transfer-encoding").map(str::to_ascii_lowercase);
        if te.as_deref().is_some_and(|t| t.trim() != "chunked") {
            return Err(err(501));
        }
        let chunked = te.is_some();
        let len = match ctx.header("content-length") {
            Some(l) => Some(
                l.trim()
                    .parse::<u64>()
                    .map_err(|_| err_msg(400, "Invalid Content-Length"))?,
            ),
            None if chunked => None,
            None => return Err(err(411)),
        };
        // Swift's order: longer than `max_file_size` (in /info) is 413 before
        // anything else; a length within it that cannot fit in the free space is
        // the layer's 507, also before the body is read (as a Swift object server
        // whose fallocate fails).
        if len.is_some_and(|l| l > MAX_FILE_SIZE) {
            return Err(err_msg(413, "Your request is too large."));
        }
        let mode = match ctx.header("if-none-match") {
            None => PutMode::Overwrite,
            Some(v) if v.trim() == "*" => PutMode::Create,
            Some(_) => return Err(err_msg(400, "If-None-Match only supports *")),
        };
        let meta = request_meta(ctx, o, true)?;
        let delete_at = request_delete_at(ctx, unix_now_secs())?.unwrap_or(0);
        if let Some(m) = meta.extra.get(MANIFEST) {
            split_object_path(m).ok_or_else(|| {
                err_msg(
                    400,
                    "X-Object-Manifest must be in the format container/prefix",
                )
            })?;
        }
        // The layer hashes the body once and refuses it (422) on a mismatch; an
        // ETag that is no MD5 at all can never match.
        let expected_md5 = match ctx.header("etag") {
            None => None,
            Some(e) => Some(parse_md5_hex(e).ok_or_else(|| err(422))?),
        };
        let opts = PutOptions {
            meta,
            expected_len: len,
            expected_md5,
            mode,
            delete_at,
            ..PutOptions::default()
        };
        let rec = self
            .inner
            .layer
            .put_object(owner, c, o, body_stream(body), opts)
            .await
            .map_err(obj_err)?;
        Ok(Answer::new(201)
            .header("etag", &rec.etag)
            .header(
                "last-modified",
                http_date_secs(modified_secs(rec.modified_ms)),
            )
            .text("text/html; charset=UTF-8", ""))
    }

    /// Copies `sa/sc/so` to `da/dc/d_o` for `caller`: as in Swift, the source is
    /// read (by its read ACL; 404 if absent) before the destination is
    /// authorized (by its write ACL).
    pub(crate) async fn copy(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        (sa, sc, so): (&str, &str, &str),
        (da, dc, d_o): (&str, &str, &str),
    ) -> Res<Answer> {
        check_container_name(sc)?;
        check_object_name(so)?;
        self.authorize(caller, sa, sc, Access::Read)?;
        let layer = &self.inner.layer;
        let src = layer.open_object(sa, sc, so).map_err(obj_err)?;
        let rec = src.record().clone();
        let manifest = rec.meta.extra.get(MANIFEST).cloned();
        let want_manifest = ctx.param("multipart-manifest") == Some("get");
        // Conditions on the source: for a large object, against its joined ETag.
        let dlo = match &manifest {
            _ if want_manifest => None,
            _ if slo::is_slo(&rec) => Some(self.slo_joined(caller, sa, (sc, so), &rec).await?),
            Some(m) => Some(self.dlo_segments(caller, sa, m)?),
            None => None,
        };
        self.authorize(caller, da, dc, Access::Write)?;
        let etag = dlo.as_ref().map_or(rec.etag.clone(), |d| d.etag.clone());
        if let Some(status) = conditions(ctx, &etag, rec.modified_ms) {
            return Err(err(if status == 304 { 412 } else { status }));
        }
        let req = request_meta(ctx, d_o, false)?;
        // The copy expires only when the request says so.
        let delete_at = request_delete_at(ctx, unix_now_secs())?.unwrap_or(0);
        let mut meta = if ctx.bool_header("x-fresh-metadata") {
            ObjectMeta::default()
        } else {
            rec.meta.clone()
        };
        meta.user.extend(req.user);
        if ctx.header("content-type").is_some() {
            meta.content_type = req.content_type;
        }
        for (field, value) in [
            (&mut meta.content_disposition, req.content_disposition),
            (&mut meta.content_encoding, req.content_encoding),
            (&mut meta.content_language, req.content_language),
            (&mut meta.cache_control, req.cache_control),
        ] {
            if value.is_some() {
                *field = value;
            }
        }
        meta.extra.extend(req.extra);
        let range = ctx
            .header("range")
            .and_then(parse_range)
            .map(|specs| satisfiable(&specs, dlo.as_ref().map_or(rec.size, |d| d.size)));
        let new = match (dlo, range) {
            (_, Some(r)) if r.len() != 1 => return Err(err(416)),
            (dlo, Some(r)) => {
                // A ranged copy stores just that range, as a new plain object.
                let r = r[0].clone();
                if dlo.is_some() {
                    strip_large(&mut meta);
                }
                let len = r.end - r.start;
                let stream = match &dlo {
                    Some(d) => {
                        drop(src);
                        self.dlo_stream(sa, d, r)
                    }
                    None => layer.read(src, Some(r)).map_err(obj_err)?,
                };
                layer
                    .put_object(da, dc, d_o, stream, put_opts(meta, len, delete_at))
                    .await
                    .map_err(|e| large_err(&dlo, e))?
            }
            (Some(d), None) => {
                // A large object is copied as its joined content: a plain object.
                drop(src);
                strip_large(&mut meta);
                let stream = self.dlo_stream(sa, &d, 0..d.size);
                layer
                    .put_object(da, dc, d_o, stream, put_opts(meta, d.size, delete_at))
                    .await
                    .map_err(|e| d.error(e))?
            }
            (None, None) => layer
                .copy_object(da, src, (sc, so), (dc, d_o), Some(meta), delete_at)
                .await
                .map_err(obj_err)?,
        };
        Ok(Answer::new(201)
            .header("etag", &new.etag)
            .header(
                "last-modified",
                http_date_secs(modified_secs(new.modified_ms)),
            )
            .header("x-copied-from", percent_encode_path(&format!("{sc}/{so}")))
            .header(
                "x-copied-from-account",
                format!("AUTH_{}", percent_encode_path(sa)),
            )
            .header(
                "x-copied-from-last-modified",
                http_date_secs(modified_secs(rec.modified_ms)),
            )
            .text("text/html; charset=UTF-8", ""))
    }

    pub(crate) async fn get(
        &self,
        ctx: &Ctx,
        caller: &Caller,
        owner: &str,
        c: &str,
        o: &str,
    ) -> Res<Answer> {
        let layer = &self.inner.layer;
        let obj = layer.open_object(owner, c, o).map_err(obj_err)?;
        let rec = obj.record().clone();
        let manifest = rec.meta.extra.get(MANIFEST).cloned();
        let want_manifest = ctx.param("multipart-manifest") == Some("get");
        let slo = slo::is_slo(&rec);
        let mut dlo = match &manifest {
            Some(m) if !want_manifest && !slo => Some(self.dlo_segments(caller, owner, m)?),
            _ => None,
        };
        let (size, etag) = match (&dlo, slo && !want_manifest) {
            (Some(d), _) => (d.size, format!("\"{}\"", d.etag)),
            (None, true) => {
                let (size, etag) = slo::slo_size_etag(&rec).ok_or_else(|| err(500))?;
                (size, format!("\"{etag}\""))
            }
            (None, false) => (rec.size, rec.etag.clone()),
        };
        let mut a = Answer::new(200);
        a = object_headers(a, &rec, &etag);
        if let Some(status) = conditions(ctx, &etag, rec.modified_ms) {
            let e = Answer::new(status);
            if status == 304 {
                return Ok(object_headers(e, &rec, &etag));
            }
            let body = default_body(e.status);
            return Ok(validators(e, &rec, &etag).text("text/html; charset=UTF-8", body));
        }
        if slo && want_manifest {
            drop(obj);
            return self.slo_get_manifest(ctx, owner, (c, o), &rec, a).await;
        }
        if slo {
            // A HEAD needs only the size and ETag kept in the index.
            dlo = Some(if ctx.method == Method::HEAD {
                Joined {
                    segs: Segments::Listed(Vec::new()),
                    size,
                    etag: etag.trim_matches('"').to_string(),
                }
            } else {
                self.slo_joined(caller, owner, (c, o), &rec).await?
            });
        }
        let ranges = ctx
            .header("range")
            .and_then(parse_range)
            .filter(|r| r.len() <= 50);
        let Some(specs) = ranges else {
            // The whole object.
            let stream = match &dlo {
                Some(d) => {
                    drop(obj);
                    self.dlo_stream(owner, d, 0..size)
                }
                None => layer.read(obj, None).map_err(obj_err)?,
            };
            if ctx.method == Method::HEAD {
                return Ok(a.with_len(size));
            }
            let stream = prime(stream).await.map_err(|e| large_err(&dlo, e))?;
            return Ok(a.stream(stream, size));
        };
        let sat = satisfiable(&specs, size);
        if let (Some(d), true) = (&dlo, sat.len() > 1) {
            // Swift serves a large object whole when asked for several ranges.
            drop(obj);
            if ctx.method == Method::HEAD {
                return Ok(a.with_len(size));
            }
            let stream = prime(self.dlo_stream(owner, d, 0..size))
                .await
                .map_err(|e| d.error(e))?;
            return Ok(a.stream(stream, size));
        }
        if sat.is_empty() {
            return Ok(validators(Answer::new(416), &rec, &etag)
                .header("content-range", format!("bytes */{size}"))
                .text(
                    "text/html; charset=UTF-8",
                    default_body(StatusCode::RANGE_NOT_SATISFIABLE),
                ));
        }
        a.status = StatusCode::PARTIAL_CONTENT;
        if sat.len() == 1 {
            let r = sat[0].clone();
            a = a.header(
                "content-range",
                format!("bytes {}-{}/{size}", r.start, r.end - 1),
            );
            let len = r.end - r.start;
            if ctx.method == Method::HEAD {
                return Ok(a.with_len(len));
            }
            let stream = match &dlo {
                Some(d) => self.dlo_stream(owner, d, r),
                None => layer.read(obj, Some(r)).map_err(obj_err)?,
            };
            let stream = prime(stream).await.map_err(|e| large_err(&dlo, e))?;
            return Ok(a.stream(stream, len));
        }
        // Several ranges: multipart/byteranges.
        let mut boundary = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut boundary);
        let boundary = hex::encode(boundary);
        let ct = rec
            .meta
            .content_type
            .clone()
            .unwrap_or_else(|| "application/octet-stream".into());
        let mut pieces: Vec<ByteStream> = Vec::new();
        let mut total = 0u64;
        for r in &sat {
            let head = format!(
                "--{boundary}\r\nContent-Type: {ct}\r\nContent-Range: bytes {}-{}/{size}\r\n\r\n",
                r.start,
                r.end - 1
            );
            total += head.len() as u64 + (r.end - r.start) + 2;
            pieces.push(Box::pin(futures::stream::once(async move {
                Ok(Bytes::from(head))
            })));
            let data = match &dlo {
                Some(d) => self.dlo_stream(owner, d, r.clone()),
                None => {
                    let again = layer.open_object(owner, c, o).map_err(obj_err)?;
                    if again.record().id != rec.id {
                        return Err(err(409));
                    }
                    layer.read(again, Some(r.clone())).map_err(obj_err)?
                }
            };
            pieces.push(data);
            pieces.push(Box::pin(futures::stream::once(async {
                Ok(Bytes::from_static(b"\r\n"))
            })));
        }
        let tail = format!("--{boundary}--");
        total += tail.len() as u64;
        pieces.push(Box::pin(futures::stream::once(async move {
            Ok(Bytes::from(tail))
        })));
        drop(obj);
        a.headers.retain(|(n, _)| n != header::CONTENT_TYPE);
        a = a.header(
            "content-type",
            format!("multipart/byteranges;boundary={boundary}"),
        );
        if ctx.method == Method::HEAD {
            return Ok(a.with_len(total));
        }
        let stream: ByteStream = Box::pin(futures::stream::iter(pieces).flatten());
        Ok(a.stream(stream, total))
    }
}

/// The answer to `e`, an error of a stream of `dlo` (or of the plain object).
fn large_err(dlo: &Option<Joined>, e: oram_objects::ObjectError) -> crate::error::SwiftError {
    match dlo {
        Some(d) => d.error(e),
        None => obj_err(e),
    }
}

/// The account named by an `X-Copy-From-Account` or `Destination-Account`
/// value (`AUTH_<account>`, percent-encoding allowed); another form names no
/// account of this cluster (the caller's denial).
fn account_of(caller: &Caller, value: &str) -> Res<String> {
    String::from_utf8(percent_decode(value.trim(), false))
        .ok()
        .and_then(|a| a.strip_prefix("AUTH_").map(str::to_string))
        .filter(|a| !a.is_empty())
        .ok_or_else(|| caller.denied())
}

/// Drops what makes an object a large object (a copy of its joined content is
/// a plain object).
fn strip_large(meta: &mut ObjectMeta) {
    meta.extra.remove(MANIFEST);
    meta.extra.remove(slo::SLO);
    meta.extra.retain(|k, _| !k.starts_with(slo::SYSMETA));
}

/// The validators of an object (on 412 and 416 answers).
pub(crate) fn validators(a: Answer, rec: &ObjectRecord, etag: &str) -> Answer {
    a.header("etag", etag)
        .header(
            "last-modified",
            http_date_secs(modified_secs(rec.modified_ms)),
        )
        .header("x-timestamp", x_timestamp(rec.modified_ms))
        .header("accept-ranges", "bytes")
}

/// The headers describing an object.
pub(crate) fn object_headers(mut a: Answer, rec: &ObjectRecord, etag: &str) -> Answer {
    let m = &rec.meta;
    a = a
        .header(
            "content-type",
            m.content_type
                .as_deref()
                .unwrap_or("application/octet-stream"),
        )
        .header("etag", etag)
        .header(
            "last-modified",
            http_date_secs(modified_secs(rec.modified_ms)),
        )
        .header("x-timestamp", x_timestamp(rec.modified_ms))
        .header("accept-ranges", "bytes");
    for (name, v) in [
        ("content-encoding", &m.content_encoding),
        ("content-disposition", &m.content_disposition),
        ("content-language", &m.content_language),
        ("cache-control", &m.cache_control),
    ] {
        if let Some(v) = v {
            a = a.header(name, v);
        }
    }
    for (k, v) in &m.user {
        a = a.header(&format!("x-object-meta-{k}"), v);
    }
    for (k, v) in m.extra.iter().filter(|(k, _)| !k.starts_with(slo::SYSMETA)) {
        a = a.header(k, v);
    }
    if rec.delete_at > 0 {
        a = a.header("x-delete-at", rec.delete_at.to_string());
    }
    a
}

/// Evaluates If-Match / If-None-Match / If-Modified-Since / If-Unmodified-Since
/// (the object layer's RFC 7232 check, Swift's reading); `Some(304 or 412)` when
/// the request must not proceed.
pub(crate) fn conditions(ctx: &Ctx, etag: &str, modified_ms: i64) -> Option<u16> {
    let p = Preconditions {
        if_match: ctx.header("if-match").map(EtagList::parse),
        if_none_match: ctx.header("if-none-match").map(EtagList::parse),
        if_modified_since: ctx.header("if-modified-since").and_then(parse_http_date),
        if_unmodified_since: ctx.header("if-unmodified-since").and_then(parse_http_date),
    };
    let read = ctx.method == Method::GET || ctx.method == Method::HEAD;
    match p.evaluate(Some(Validators { etag, modified_ms }), read, Dialect::Swift) {
        Ok(()) => None,
        Err(ObjectError::NotModified) => Some(304),
        Err(_) => Some(412),
    }
}

/// The options of a PUT of `len` bytes that replaces whatever is there and
/// expires at `delete_at` (0: never).
fn put_opts(meta: ObjectMeta, len: u64, delete_at: i64) -> PutOptions {
    PutOptions {
        meta,
        expected_len: Some(len),
        delete_at,
        ..PutOptions::default()
    }
}

/// An MD5 in hex (Swift's `ETag` of a PUT; quotes allowed).
fn parse_md5_hex(s: &str) -> Option<[u8; 16]> {
    let s = s.trim().trim_matches('"');
    if s.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}
