//! The OpenStack Swift front-end: a hand-written router over the object layer.
//!
//! - **Auth**: tempauth-style v1. `GET /auth/v1.0` (also `/auth/v1`, `/v1.0`) with
//!   `X-Auth-User: <account>:<user>` and `X-Auth-Key` answers `X-Auth-Token` and
//!   `X-Storage-Url: http://<host>/v1/AUTH_<account>`. Tokens expire; a token only
//!   opens its own account (403 elsewhere); a missing, unknown or expired token is
//!   401.
//! - **Mapping**: a Swift account is an object-layer owner (the same string as the S3
//!   access key), a container is a bucket, an object is an object. Container names
//!   share the buckets' global namespace; metadata lives in the object layer, so an
//!   object written through S3 reads through Swift and back.
//! - **Operations**: account GET/HEAD/POST, container PUT/GET/HEAD/POST/DELETE,
//!   object PUT/GET/HEAD/POST/DELETE/COPY (and PUT with `X-Copy-From`), listings in
//!   plain text, JSON and XML, Range (single and multipart/byteranges), conditional
//!   requests, dynamic large objects (`X-Object-Manifest`), bulk delete and
//!   `GET /info`.

mod auth;
mod util;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, BodyStream, Full, StreamBody};
use hyper::body::Frame;
use md5::{Digest, Md5};
use oram_objects::{ByteStream, ListParams, ObjectError, ObjectLayer, ObjectMeta, ObjectRecord};
use rand::RngCore;

pub use auth::SwiftUser;
use util::*;

/// The response body type of the Swift service.
pub type SwiftBody = UnsyncBoxBody<Bytes, std::io::Error>;

/// Swift's constraints, as `/info` reports them.
pub mod limits {
    /// Largest object of one PUT (the object layer's limit).
    pub const MAX_FILE_SIZE: u64 = oram_objects::MAX_PUT_SIZE;
    /// Longest metadata name (after the prefix).
    pub const MAX_META_NAME_LENGTH: usize = 128;
    /// Longest metadata value.
    pub const MAX_META_VALUE_LENGTH: usize = 256;
    /// Most metadata items per request.
    pub const MAX_META_COUNT: usize = 90;
    /// Largest total of metadata names and values per request.
    pub const MAX_META_OVERALL_SIZE: usize = 4096;
    /// Longest header value.
    pub const MAX_HEADER_SIZE: usize = 8192;
    /// Longest object name in bytes.
    pub const MAX_OBJECT_NAME_LENGTH: usize = 1024;
    /// Longest container name in bytes.
    pub const MAX_CONTAINER_NAME_LENGTH: usize = 256;
    /// Longest account name in bytes.
    pub const MAX_ACCOUNT_NAME_LENGTH: usize = 256;
    /// Most entries per listing.
    pub const LISTING_LIMIT: usize = 10_000;
    /// Most names per bulk delete.
    pub const MAX_DELETES_PER_REQUEST: usize = 10_000;
}
use limits::*;

/// Tuning of the Swift front-end.
#[derive(Clone, Debug)]
pub struct SwiftConfig {
    /// Lifetime of a token.
    pub token_ttl: Duration,
    /// Whether the listener speaks TLS: the storage URL handed out at login is then
    /// `https://`.
    pub https: bool,
}

impl Default for SwiftConfig {
    fn default() -> Self {
        Self {
            token_ttl: Duration::from_secs(86_400),
            https: false,
        }
    }
}

/// The Swift service. Cheap to clone.
#[derive(Clone)]
pub struct SwiftApi {
    inner: Arc<Inner>,
}

struct Inner {
    layer: ObjectLayer,
    auth: auth::Auth,
    https: bool,
}

/// An error answer: status and body text.
#[derive(Debug)]
struct SwiftError {
    status: StatusCode,
    body: String,
    headers: Vec<(HeaderName, String)>,
}

type Res<T> = Result<T, SwiftError>;

/// Swift's default HTML body for a status.
fn default_body(status: StatusCode) -> String {
    let (title, text) = match status.as_u16() {
        400 => ("Bad Request", "The server could not comply with the request since it is either malformed or otherwise incorrect."),
        401 => ("Unauthorized", "This server could not verify that you are authorized to access the document you requested."),
        403 => ("Forbidden", "Access was denied to this resource."),
        404 => ("Not Found", "The resource could not be found."),
        405 => ("Method Not Allowed", "The method is not allowed for this resource."),
        409 => ("Conflict", "There was a conflict when trying to complete your request."),
        411 => ("Length Required", "Length Required"),
        412 => ("Precondition Failed", "A precondition for this request was not met."),
        413 => ("Request Entity Too Large", "The body of your request was too large for this server."),
        416 => ("Requested Range Not Satisfiable", "The Range requested is not available."),
        422 => ("Unprocessable Entity", "Unable to process the contained instructions"),
        499 => ("Client Disconnect", "The client was disconnected during request."),
        503 => ("Service Unavailable", "The server is currently unavailable. Please try again at a later time."),
        507 => ("Insufficient Storage", "There was not enough space to save the resource."),
        _ => ("Internal Error", "The server has either erred or is incapable of performing the requested operation."),
    };
    format!("<html><h1>{title}</h1><p>{text}</p></html>")
}

fn err(status: u16) -> SwiftError {
    let status = StatusCode::from_u16(status).expect("valid status");
    SwiftError {
        status,
        body: default_body(status),
        headers: Vec::new(),
    }
}

fn err_msg(status: u16, msg: impl Into<String>) -> SwiftError {
    SwiftError {
        status: StatusCode::from_u16(status).expect("valid status"),
        body: msg.into(),
        headers: Vec::new(),
    }
}

fn obj_err(e: ObjectError) -> SwiftError {
    use ObjectError::*;
    match e {
        NoSuchBucket(_) | NoSuchKey(_) | NoSuchUpload(_) => err(404),
        AccessDenied => err(403),
        BucketAlreadyExists(_) => err_msg(409, "Container name is in use by another account"),
        BucketAlreadyOwnedByYou(_) | Conflict(_) | BucketNotEmpty(_) => err(409),
        InvalidBucketName(n) => err_msg(400, format!("Invalid container name {n:?}")),
        InvalidKey(m) => err_msg(400, format!("Invalid object name: {m}")),
        TooLarge { .. } => err(413),
        Full { .. } => err(507),
        Body(_) | IncompleteBody { .. } => err(499),
        InvalidRange { .. } => err(416),
        AlreadyExists(_) => err(412),
        BadDigest => err(422),
        PartTooSmall { .. } | InvalidPart(_) | InvalidPartOrder | InvalidPartNumber(_) => err(400),
        Engine(e) => {
            tracing::warn!("swift: engine error: {e}");
            err(503)
        }
        State(e) => {
            tracing::error!("swift: state error: {e}");
            err(500)
        }
    }
}

fn full(b: impl Into<Bytes>) -> SwiftBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn stream_body(s: ByteStream) -> SwiftBody {
    StreamBody::new(s.map(|r| {
        r.map(Frame::data)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }))
    .boxed_unsync()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Turns a request body into the object layer's stream.
fn body_stream<B>(body: B) -> ByteStream
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: std::fmt::Display,
{
    Box::pin(
        BodyStream::new(body)
            .map(|f| match f {
                Ok(frame) => frame.into_data().ok().map(Ok),
                Err(e) => Some(Err(ObjectError::Body(e.to_string()))),
            })
            .filter_map(futures::future::ready),
    )
}

/// Passes `body` through and fails it at the end if its MD5 is not `expected`.
fn verify_md5(body: ByteStream, expected: String) -> ByteStream {
    Box::pin(futures::stream::unfold(
        Some((body, Md5::new(), expected)),
        |state| async move {
            let (mut body, mut md5, expected) = state?;
            match body.next().await {
                Some(Ok(chunk)) => {
                    md5.update(&chunk);
                    Some((Ok(chunk), Some((body, md5, expected))))
                }
                Some(Err(e)) => Some((Err(e), None)),
                None if hex(&md5.finalize()) == expected => None,
                None => Some((Err(ObjectError::BadDigest), None)),
            }
        },
    ))
}

/// Reads the first chunk, so that an error before any byte becomes an error answer.
async fn prime(mut s: ByteStream) -> Result<ByteStream, ObjectError> {
    match s.next().await {
        None => Ok(Box::pin(futures::stream::empty())),
        Some(Err(e)) => Err(e),
        Some(Ok(first)) => Ok(Box::pin(
            futures::stream::once(async { Ok(first) }).chain(s),
        )),
    }
}

/// The request as the handlers see it.
struct Ctx {
    method: Method,
    headers: HeaderMap,
    query: Vec<(String, String)>,
}

impl Ctx {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header's value as UTF-8 (raw bytes, as Swift reads them).
    fn header_utf8(&self, name: &str) -> Res<Option<String>> {
        self.headers
            .get(name)
            .map(|v| {
                String::from_utf8(v.as_bytes().to_vec())
                    .map_err(|_| err_msg(400, format!("{name} must be valid UTF-8")))
            })
            .transpose()
    }

    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn has_param(&self, name: &str) -> bool {
        self.query.iter().any(|(k, _)| k == name)
    }

    fn bool_header(&self, name: &str) -> bool {
        self.header(name).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "t" | "y"
            )
        })
    }
}

/// A response under construction.
struct Answer {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: SwiftBody,
    len: Option<u64>,
}

impl Answer {
    fn new(status: u16) -> Self {
        Self {
            status: StatusCode::from_u16(status).expect("valid status"),
            headers: Vec::new(),
            body: full(Bytes::new()),
            len: Some(0),
        }
    }

    fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_ref()),
        ) {
            self.headers.push((n, v));
        }
        self
    }

    fn text(mut self, content_type: &str, body: impl Into<Bytes>) -> Self {
        let b: Bytes = body.into();
        self.len = Some(b.len() as u64);
        self.body = full(b);
        self.header("content-type", content_type)
    }

    fn stream(mut self, s: ByteStream, len: u64) -> Self {
        self.len = Some(len);
        self.body = stream_body(s);
        self
    }
}

fn error_answer(e: SwiftError) -> Answer {
    let mut a = Answer::new(e.status.as_u16());
    for (n, v) in e.headers {
        a = a.header(n.as_str(), v);
    }
    if e.body.is_empty() {
        a
    } else {
        a.text("text/html; charset=UTF-8", e.body)
    }
}

/// The metadata updates of a request: names after `prefix` (lower case) with their
/// values; `remove_prefix` headers give empty values (removal). Checks Swift's
/// limits.
fn meta_updates(
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
fn check_merged(
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

fn check_container_name(name: &str) -> Res<()> {
    if name.len() > MAX_CONTAINER_NAME_LENGTH {
        return Err(err_msg(
            400,
            format!(
                "Container name length of {} longer than {MAX_CONTAINER_NAME_LENGTH}",
                name.len()
            ),
        ));
    }
    Ok(())
}

fn check_object_name(name: &str) -> Res<()> {
    if name.len() > MAX_OBJECT_NAME_LENGTH {
        return Err(err_msg(
            400,
            format!(
                "Object name length of {} longer than {MAX_OBJECT_NAME_LENGTH}",
                name.len()
            ),
        ));
    }
    Ok(())
}

/// Listing formats.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Plain,
    Json,
    Xml,
}

fn listing_format(ctx: &Ctx) -> Format {
    match ctx.param("format").map(str::to_ascii_lowercase).as_deref() {
        Some("json") => return Format::Json,
        Some("xml") => return Format::Xml,
        Some("plain") => return Format::Plain,
        _ => {}
    }
    let accept = ctx.header("accept").unwrap_or("").to_ascii_lowercase();
    let pos = |t: &str| accept.find(t);
    match (
        pos("application/json"),
        pos("application/xml").or(pos("text/xml")),
        pos("text/plain"),
    ) {
        (Some(j), x, p) if x.is_none_or(|x| j < x) && p.is_none_or(|p| j < p) => Format::Json,
        (_, Some(x), p) if p.is_none_or(|p| x < p) => Format::Xml,
        _ => Format::Plain,
    }
}

fn content_type_of(f: Format) -> &'static str {
    match f {
        Format::Plain => "text/plain; charset=utf-8",
        Format::Json => "application/json; charset=utf-8",
        Format::Xml => "application/xml; charset=utf-8",
    }
}

/// Listing parameters shared by accounts and containers.
struct ListQuery {
    limit: usize,
    marker: Option<String>,
    end_marker: Option<String>,
    prefix: String,
    delimiter: Option<String>,
    reverse: bool,
    /// `path`: only entries directly under it, no subdirectories.
    path: bool,
}

fn list_query(ctx: &Ctx) -> Res<ListQuery> {
    let mut limit = LISTING_LIMIT;
    if let Some(l) = ctx.param("limit") {
        if !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()) {
            limit = l.parse().unwrap_or(usize::MAX);
            if limit > LISTING_LIMIT {
                return Err(err_msg(412, format!("Maximum limit is {LISTING_LIMIT}")));
            }
        }
    }
    let delimiter = ctx
        .param("delimiter")
        .filter(|d| !d.is_empty())
        .map(str::to_string);
    let non_empty = |n: &str| ctx.param(n).filter(|v| !v.is_empty()).map(str::to_string);
    let mut q = ListQuery {
        limit,
        marker: non_empty("marker"),
        end_marker: non_empty("end_marker"),
        prefix: ctx.param("prefix").unwrap_or("").to_string(),
        delimiter,
        reverse: ctx.param("reverse").is_some_and(|v| {
            matches!(
                v.to_ascii_lowercase().as_str(),
                "true" | "1" | "yes" | "on" | "t" | "y"
            )
        }),
        path: false,
    };
    if let Some(p) = ctx.param("path") {
        // Swift: a non-empty path lists the names directly under `path/`.
        q.prefix = if p.is_empty() {
            String::new()
        } else {
            format!("{}/", p.trim_end_matches('/'))
        };
        q.delimiter = None;
        q.path = true;
    }
    Ok(q)
}

/// One listing entry.
enum Entry<T> {
    Item(String, T),
    Subdir(String),
}

impl<T> Entry<T> {
    fn name(&self) -> &str {
        match self {
            Entry::Item(n, _) | Entry::Subdir(n) => n,
        }
    }
}

/// A plain-text listing: one name per line.
fn plain_listing<T>(entries: &[Entry<T>]) -> String {
    let mut s = String::new();
    for e in entries {
        s.push_str(e.name());
        s.push('\n');
    }
    s
}

/// Applies prefix, delimiter, markers, reverse and limit to a sorted list of names.
fn filter_names<T>(items: Vec<(String, T)>, q: &ListQuery) -> Vec<Entry<T>> {
    let mut out: Vec<Entry<T>> = Vec::new();
    for (name, v) in items {
        if !name.starts_with(&q.prefix) {
            continue;
        }
        if let Some(d) = &q.delimiter {
            if let Some(i) = name[q.prefix.len()..].find(d.as_str()) {
                let sub = &name[..q.prefix.len() + i + d.len()];
                if !matches!(out.last(), Some(Entry::Subdir(s)) if s == sub) {
                    out.push(Entry::Subdir(sub.to_string()));
                }
                continue;
            }
        }
        out.push(Entry::Item(name, v));
    }
    let (lo, hi) = if q.reverse {
        (q.end_marker.as_deref(), q.marker.as_deref())
    } else {
        (q.marker.as_deref(), q.end_marker.as_deref())
    };
    out.retain(|e| lo.is_none_or(|m| e.name() > m) && hi.is_none_or(|m| e.name() < m));
    if q.reverse {
        out.reverse();
    }
    out.truncate(q.limit);
    out
}

impl SwiftApi {
    /// Serves `layer` to `users`.
    pub fn new(layer: ObjectLayer, users: Vec<SwiftUser>, cfg: SwiftConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                layer,
                auth: auth::Auth::new(users, cfg.token_ttl),
                https: cfg.https,
            }),
        }
    }

    /// The answer to a request that exceeds the concurrency limit: 503.
    pub fn overloaded() -> Response<SwiftBody> {
        finish(&Method::GET, error_answer(err(503)))
    }

    /// Serves one request.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<SwiftBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let method = req.method().clone();
        let answer = match self.route(req).await {
            Ok(a) => a,
            Err(e) => {
                if e.status.is_server_error() {
                    tracing::warn!(status = e.status.as_u16(), %method, "swift request failed");
                }
                error_answer(e)
            }
        };
        finish(&method, answer)
    }

    async fn route<B>(&self, req: Request<B>) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        let raw_path = parts.uri.path().to_string();
        let query = parse_query(parts.uri.query())
            .map_err(|_| err_msg(412, "Invalid UTF8 or contains NULL"))?;
        let ctx = Ctx {
            method: parts.method,
            headers: parts.headers,
            query,
        };
        match raw_path.as_str() {
            "/info" => return self.info(&ctx),
            "/healthcheck" => return Ok(Answer::new(200).text("text/plain", "OK")),
            "/auth/v1.0" | "/auth/v1.0/" | "/auth/v1" | "/auth/v1/" | "/v1.0" | "/v1.0/" => {
                return self.login(&ctx)
            }
            _ => {}
        }
        let path = String::from_utf8(percent_decode(&raw_path, false))
            .ok()
            .filter(|p| !p.contains('\0'))
            .ok_or_else(|| err_msg(412, "Invalid UTF8 or contains NULL"))?;
        let mut segs = path.splitn(5, '/');
        segs.next(); // leading "/"
        let version = segs.next().unwrap_or("");
        if version != "v1" && version != "v1.0" {
            return Err(err(404));
        }
        let account = segs
            .next()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| err_msg(412, "Bad URL"))?;
        let container = segs.next().filter(|c| !c.is_empty());
        let object = segs.next().filter(|o| !o.is_empty());
        // Everything under /v1 needs a token of this very account.
        let unauthorized = || SwiftError {
            headers: vec![(
                header::WWW_AUTHENTICATE,
                format!("Swift realm=\"{}\"", percent_encode_path(account)),
            )],
            ..err(401)
        };
        let token = ctx
            .header("x-auth-token")
            .or_else(|| ctx.header("x-storage-token"))
            .ok_or_else(unauthorized)?;
        let owner = self.inner.auth.check(token).ok_or_else(unauthorized)?;
        if account.strip_prefix("AUTH_") != Some(owner.as_str()) {
            return Err(err(403));
        }
        match (container, object) {
            (None, _) => self.account(&ctx, account, &owner, body).await,
            (Some(c), None) => {
                check_container_name(c)?;
                self.container(&ctx, &owner, c).await
            }
            (Some(c), Some(o)) => {
                check_container_name(c)?;
                check_object_name(o)?;
                self.object(&ctx, &owner, c, o, body).await
            }
        }
    }

    // ---- auth and info ----

    fn login(&self, ctx: &Ctx) -> Res<Answer> {
        if ctx.method != Method::GET && ctx.method != Method::HEAD {
            return Err(err(405));
        }
        let user = ctx
            .header("x-auth-user")
            .or_else(|| ctx.header("x-storage-user"))
            .ok_or_else(|| err(401))?;
        let key = ctx
            .header("x-auth-key")
            .or_else(|| ctx.header("x-storage-pass"))
            .ok_or_else(|| err(401))?;
        let (account, token) = self.inner.auth.login(user, key).ok_or_else(|| SwiftError {
            headers: vec![(header::WWW_AUTHENTICATE, "Swift realm=\"unknown\"".into())],
            ..err(401)
        })?;
        let host = ctx.header("host").unwrap_or("127.0.0.1");
        let scheme = if self.inner.https { "https" } else { "http" };
        let url = format!(
            "{scheme}://{host}/v1/AUTH_{}",
            percent_encode_path(&account)
        );
        let body = serde_json::json!({"storage": {"default": "local", "local": url}});
        Ok(Answer::new(200)
            .header("x-auth-token", &token)
            .header("x-storage-token", &token)
            .header(
                "x-auth-token-expires",
                self.inner.auth.ttl().as_secs().to_string(),
            )
            .header("x-storage-url", &url)
            .text("application/json; charset=utf-8", body.to_string()))
    }

    fn info(&self, ctx: &Ctx) -> Res<Answer> {
        if ctx.method != Method::GET && ctx.method != Method::HEAD {
            return Err(err(405));
        }
        // Served without a token: nothing about this volume (its capacity) is in it.
        let info = serde_json::json!({
            "swift": {
                "version": "2.30.1-oram",
                "max_file_size": MAX_FILE_SIZE,
                "max_meta_name_length": MAX_META_NAME_LENGTH,
                "max_meta_value_length": MAX_META_VALUE_LENGTH,
                "max_meta_count": MAX_META_COUNT,
                "max_meta_overall_size": MAX_META_OVERALL_SIZE,
                "max_header_size": MAX_HEADER_SIZE,
                "max_object_name_length": MAX_OBJECT_NAME_LENGTH,
                "container_listing_limit": LISTING_LIMIT,
                "account_listing_limit": LISTING_LIMIT,
                "max_account_name_length": MAX_ACCOUNT_NAME_LENGTH,
                "max_container_name_length": MAX_CONTAINER_NAME_LENGTH,
                "extra_header_count": 0,
                "valid_api_versions": ["v1", "v1.0"],
                "allow_account_management": false,
                "account_autocreate": true,
                "strict_cors_mode": true,
                "policies": [{"name": "oram", "default": true}],
            },
            "tempauth": {"account_acls": false},
            "dlo": {"max_get_time": 86400},
            "bulk_delete": {
                "max_deletes_per_request": MAX_DELETES_PER_REQUEST,
                "max_failed_deletes": 1000,
            },
        });
        Ok(Answer::new(200).text("application/json; charset=utf-8", info.to_string()))
    }

    // ---- account ----

    async fn account<B>(&self, ctx: &Ctx, account: &str, owner: &str, body: B) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let layer = &self.inner.layer;
        match ctx.method {
            Method::GET | Method::HEAD => {
                let buckets = layer.list_buckets(owner).map_err(obj_err)?;
                let mut items = Vec::with_capacity(buckets.len());
                let (mut objects, mut bytes) = (0u64, 0u64);
                for b in &buckets {
                    let (n, sz) = layer.bucket_usage(owner, &b.name).map_err(obj_err)?;
                    objects += n;
                    bytes += sz;
                    items.push((b.name.clone(), (n, sz, b.created_ms)));
                }
                let created = buckets.iter().map(|b| b.created_ms).min().unwrap_or(0);
                let mut a = Answer::new(204)
                    .header("x-account-container-count", buckets.len().to_string())
                    .header("x-account-object-count", objects.to_string())
                    .header("x-account-bytes-used", bytes.to_string())
                    .header("x-timestamp", x_timestamp(created))
                    .header("x-put-timestamp", x_timestamp(created))
                    .header(
                        "x-account-storage-policy-oram-container-count",
                        buckets.len().to_string(),
                    )
                    .header(
                        "x-account-storage-policy-oram-object-count",
                        objects.to_string(),
                    )
                    .header(
                        "x-account-storage-policy-oram-bytes-used",
                        bytes.to_string(),
                    );
                for (k, v) in layer.account_meta(owner).map_err(obj_err)? {
                    a = a.header(&format!("x-account-meta-{k}"), v);
                }
                let q = list_query(ctx)?;
                let fmt = listing_format(ctx);
                let entries = filter_names(items, &q);
                let text = match fmt {
                    Format::Plain => plain_listing(&entries),
                    Format::Json => {
                        let v: Vec<serde_json::Value> = entries
                            .iter()
                            .map(|e| match e {
                                Entry::Item(n, (c, b, t)) => serde_json::json!({
                                    "name": n, "count": c, "bytes": b,
                                    "last_modified": iso_date(*t),
                                }),
                                Entry::Subdir(s) => serde_json::json!({"subdir": s}),
                            })
                            .collect();
                        serde_json::Value::Array(v).to_string()
                    }
                    Format::Xml => {
                        let mut s = format!(
                            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<account name=\"{}\">",
                            xml_escape(account)
                        );
                        for e in &entries {
                            match e {
                                Entry::Item(n, (c, b, t)) => {
                                    let _ = write!(
                                        s,
                                        "<container><name>{}</name><count>{c}</count><bytes>{b}</bytes><last_modified>{}</last_modified></container>",
                                        xml_escape(n),
                                        iso_date(*t)
                                    );
                                }
                                Entry::Subdir(d) => {
                                    let d = xml_escape(d);
                                    let _ =
                                        write!(s, "<subdir name=\"{d}\"><name>{d}</name></subdir>");
                                }
                            }
                        }
                        s.push_str("</account>");
                        s
                    }
                };
                if ctx.method == Method::HEAD || (entries.is_empty() && fmt == Format::Plain) {
                    return Ok(a.header("content-type", content_type_of(fmt)));
                }
                a.status = StatusCode::OK;
                Ok(a.text(content_type_of(fmt), text))
            }
            Method::POST if ctx.has_param("bulk-delete") => {
                self.bulk_delete(ctx, owner, body).await
            }
            Method::POST => {
                let meta = meta_updates(ctx, "x-account-meta-", Some("x-remove-account-meta-"))?;
                check_merged(layer.account_meta(owner).map_err(obj_err)?, &meta)?;
                layer.update_account_meta(owner, meta).map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::DELETE if ctx.has_param("bulk-delete") => {
                self.bulk_delete(ctx, owner, body).await
            }
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, POST".into())],
                ..err(405)
            }),
        }
    }

    async fn bulk_delete<B>(&self, ctx: &Ctx, owner: &str, body: B) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let limit = MAX_DELETES_PER_REQUEST * (MAX_OBJECT_NAME_LENGTH * 3 + 260);
        let mut s = body_stream(body);
        let mut text = Vec::new();
        while let Some(chunk) = s.next().await {
            let chunk = chunk.map_err(|_| err(499))?;
            if text.len() + chunk.len() > limit {
                return Err(err(413));
            }
            text.extend_from_slice(&chunk);
        }
        let text = String::from_utf8(text).map_err(|_| err_msg(400, "Invalid UTF8"))?;
        let names: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if names.len() > MAX_DELETES_PER_REQUEST {
            return Err(err_msg(
                413,
                format!("Maximum Bulk Deletes: {MAX_DELETES_PER_REQUEST} per request"),
            ));
        }
        let layer = &self.inner.layer;
        let (mut deleted, mut not_found) = (0u64, 0u64);
        let mut errors: Vec<(String, String)> = Vec::new();
        for raw in names {
            let Ok(name) = String::from_utf8(percent_decode(raw, false)) else {
                errors.push((raw.to_string(), "412 Precondition Failed".into()));
                continue;
            };
            let trimmed = name.trim_start_matches('/');
            let (c, o) = match trimmed.split_once('/') {
                Some((c, o)) if !o.is_empty() => (c, Some(o)),
                Some((c, _)) => (c, None),
                None => (trimmed, None),
            };
            let r = match o {
                Some(o) => layer.delete_object(owner, c, o).map(|found| found as u8),
                None => layer.delete_bucket(owner, c).map(|()| 1),
            };
            match r {
                Ok(1) => deleted += 1,
                Ok(_) | Err(ObjectError::NoSuchBucket(_)) => not_found += 1,
                Err(e) => {
                    let e = obj_err(e);
                    errors.push((
                        name.clone(),
                        format!(
                            "{} {}",
                            e.status.as_u16(),
                            e.status.canonical_reason().unwrap_or("")
                        ),
                    ));
                }
            }
        }
        let status = if errors.is_empty() {
            "200 OK"
        } else {
            "400 Bad Request"
        };
        let fmt = listing_format(ctx);
        let (ct, text) = match fmt {
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
                for (n, st) in &errors {
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
                for (n, st) in &errors {
                    let _ = writeln!(s, "{n}, {st}");
                }
                ("text/plain", s)
            }
        };
        Ok(Answer::new(200).text(ct, text))
    }

    // ---- container ----

    async fn container(&self, ctx: &Ctx, owner: &str, c: &str) -> Res<Answer> {
        let layer = &self.inner.layer;
        match ctx.method {
            Method::PUT => {
                // One storage policy: the ORAM.
                if let Some(p) = ctx.header_utf8("x-storage-policy")? {
                    if !p.trim().is_empty() && !p.trim().eq_ignore_ascii_case("oram") {
                        return Err(err_msg(400, format!("Invalid X-Storage-Policy {p:?}")));
                    }
                }
                let meta =
                    meta_updates(ctx, "x-container-meta-", Some("x-remove-container-meta-"))?;
                let created = layer.create_container(owner, c, meta).map_err(obj_err)?;
                Ok(Answer::new(if created { 201 } else { 202 }))
            }
            Method::POST => {
                let meta =
                    meta_updates(ctx, "x-container-meta-", Some("x-remove-container-meta-"))?;
                check_merged(layer.head_bucket(owner, c).map_err(obj_err)?.meta, &meta)?;
                layer.update_bucket_meta(owner, c, meta).map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::DELETE => {
                layer.delete_bucket(owner, c).map_err(obj_err)?;
                Ok(Answer::new(204))
            }
            Method::GET | Method::HEAD => self.container_get(ctx, owner, c),
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, PUT, POST, DELETE".into())],
                ..err(405)
            }),
        }
    }

    fn container_get(&self, ctx: &Ctx, owner: &str, c: &str) -> Res<Answer> {
        let layer = &self.inner.layer;
        let b = layer.head_bucket(owner, c).map_err(obj_err)?;
        let (count, bytes) = layer.bucket_usage(owner, c).map_err(obj_err)?;
        let mut a = Answer::new(204)
            .header("x-container-object-count", count.to_string())
            .header("x-container-bytes-used", bytes.to_string())
            .header("x-timestamp", x_timestamp(b.created_ms))
            .header("x-put-timestamp", x_timestamp(b.created_ms))
            .header("x-storage-policy", "oram")
            .header(
                "last-modified",
                http_date_secs(modified_secs(b.created_ms.max(b.meta_modified_ms))),
            );
        for (k, v) in &b.meta {
            a = a.header(&format!("x-container-meta-{k}"), v);
        }
        let q = list_query(ctx)?;
        let fmt = listing_format(ctx);
        let entries = if ctx.method == Method::HEAD {
            Vec::new()
        } else {
            self.list_container(owner, c, &q)?
        };
        let text = match fmt {
            Format::Plain => plain_listing(&entries),
            Format::Json => {
                let v: Vec<serde_json::Value> = entries
                    .iter()
                    .map(|e| match e {
                        Entry::Item(n, r) => serde_json::json!({
                            "name": n,
                            "hash": r.etag,
                            "bytes": r.size,
                            "content_type": r.meta.content_type.as_deref().unwrap_or("application/octet-stream"),
                            "last_modified": iso_date(r.modified_ms),
                        }),
                        Entry::Subdir(s) => serde_json::json!({"subdir": s}),
                    })
                    .collect();
                serde_json::Value::Array(v).to_string()
            }
            Format::Xml => {
                let mut s = format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<container name=\"{}\">",
                    xml_escape(c)
                );
                for e in &entries {
                    match e {
                        Entry::Item(n, r) => {
                            let _ = write!(
                                s,
                                "<object><name>{}</name><hash>{}</hash><bytes>{}</bytes><content_type>{}</content_type><last_modified>{}</last_modified></object>",
                                xml_escape(n),
                                r.etag,
                                r.size,
                                xml_escape(r.meta.content_type.as_deref().unwrap_or("application/octet-stream")),
                                iso_date(r.modified_ms)
                            );
                        }
                        Entry::Subdir(d) => {
                            let d = xml_escape(d);
                            let _ = write!(s, "<subdir name=\"{d}\"><name>{d}</name></subdir>");
                        }
                    }
                }
                s.push_str("</container>");
                s
            }
        };
        if ctx.method == Method::HEAD || (entries.is_empty() && fmt == Format::Plain) {
            return Ok(a.header("content-type", content_type_of(fmt)));
        }
        a.status = StatusCode::OK;
        Ok(a.text(content_type_of(fmt), text))
    }

    /// A container listing page.
    fn list_container(&self, owner: &str, c: &str, q: &ListQuery) -> Res<Vec<Entry<ObjectRecord>>> {
        let layer = &self.inner.layer;
        let mut params = ListParams {
            prefix: q.prefix.clone(),
            delimiter: q.delimiter.clone(),
            start_after: None,
            max_keys: usize::MAX,
        };
        let mut entries: Vec<Entry<ObjectRecord>> = Vec::new();
        if q.reverse {
            // Everything after end_marker, then reversed in memory.
            params.start_after = q.end_marker.clone();
        } else {
            params.start_after = q.marker.clone();
            params.max_keys = q.limit + 1;
        }
        if params.max_keys == 0 {
            return Ok(entries);
        }
        let r = layer.list_objects(owner, c, &params).map_err(obj_err)?;
        let mut objs = r.objects.into_iter().peekable();
        let mut cps = r.common_prefixes.into_iter().peekable();
        loop {
            let take_obj = match (objs.peek(), cps.peek()) {
                (Some((k, _)), Some(p)) => k < p,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take_obj {
                let (k, v) = objs.next().expect("peeked");
                entries.push(Entry::Item(k, v));
            } else {
                entries.push(Entry::Subdir(cps.next().expect("peeked")));
            }
        }
        if q.path {
            // Names directly under the path: no `/` after it except a last one
            // (directory markers).
            let plen = q.prefix.len();
            entries.retain(|e| {
                let rest = &e.name()[plen..];
                !rest.is_empty() && !rest.strip_suffix('/').unwrap_or(rest).contains('/')
            });
        }
        let (lo, hi) = if q.reverse {
            (q.end_marker.as_deref(), q.marker.as_deref())
        } else {
            (q.marker.as_deref(), q.end_marker.as_deref())
        };
        entries.retain(|e| lo.is_none_or(|m| e.name() > m) && hi.is_none_or(|m| e.name() < m));
        if q.reverse {
            entries.reverse();
        }
        entries.truncate(q.limit);
        Ok(entries)
    }

    // ---- object ----

    async fn object<B>(&self, ctx: &Ctx, owner: &str, c: &str, o: &str, body: B) -> Res<Answer>
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
                    return self.copy(ctx, owner, (&sc, &so), (c, o)).await;
                }
                self.put(ctx, owner, c, o, body).await
            }
            ref m if m.as_str() == "COPY" => {
                let dest = ctx
                    .header_utf8("destination")?
                    .ok_or_else(|| err_msg(412, "Destination header required"))?;
                if let Some(acct) = ctx.header_utf8("destination-account")? {
                    let acct = String::from_utf8(percent_decode(&acct, false)).unwrap_or_default();
                    if acct.strip_prefix("AUTH_") != Some(owner) {
                        return Err(err(403));
                    }
                }
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
                self.copy(ctx, owner, (c, o), (&dc, &d_o)).await
            }
            Method::GET | Method::HEAD => self.get(ctx, owner, c, o).await,
            Method::POST => {
                let layer = &self.inner.layer;
                let rec = layer.head_object(owner, c, o).map_err(obj_err)?;
                let mut meta = request_meta(ctx, o, false)?;
                if meta.content_type.is_none() {
                    meta.content_type = rec.meta.content_type.clone();
                }
                layer.set_object_meta(owner, c, o, meta).map_err(obj_err)?;
                Ok(Answer::new(202).text("text/html; charset=UTF-8", ""))
            }
            Method::DELETE => {
                let found = self
                    .inner
                    .layer
                    .delete_object(owner, c, o)
                    .map_err(obj_err)?;
                if !found {
                    return Err(err(404));
                }
                Ok(Answer::new(204))
            }
            _ => Err(SwiftError {
                headers: vec![(header::ALLOW, "GET, HEAD, PUT, POST, DELETE, COPY".into())],
                ..err(405)
            }),
        }
    }

    async fn put<B>(&self, ctx: &Ctx, owner: &str, c: &str, o: &str, body: B) -> Res<Answer>
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
        let u = self.inner.layer.usage();
        if len.is_some_and(|l| l > MAX_FILE_SIZE.min(u.capacity_blocks * u.block_size as u64)) {
            return Err(err(413));
        }
        let create_only = match ctx.header("if-none-match") {
            None => false,
            Some(v) if v.trim() == "*" => true,
            Some(_) => return Err(err_msg(400, "If-None-Match only supports *")),
        };
        let meta = request_meta(ctx, o, true)?;
        if let Some(m) = meta.extra.get(MANIFEST) {
            split_object_path(m).ok_or_else(|| {
                err_msg(
                    400,
                    "X-Object-Manifest must be in the format container/prefix",
                )
            })?;
        }
        let mut stream = body_stream(body);
        if let Some(etag) = ctx.header("etag") {
            stream = verify_md5(stream, etag.trim().trim_matches('"').to_ascii_lowercase());
        }
        let layer = &self.inner.layer;
        let rec = if create_only {
            layer
                .put_object_if_absent(owner, c, o, meta, stream, len)
                .await
        } else {
            layer.put_object(owner, c, o, meta, stream, len).await
        }
        .map_err(obj_err)?;
        Ok(Answer::new(201)
            .header("etag", &rec.etag)
            .header(
                "last-modified",
                http_date_secs(modified_secs(rec.modified_ms)),
            )
            .text("text/html; charset=UTF-8", ""))
    }

    async fn copy(
        &self,
        ctx: &Ctx,
        owner: &str,
        (sc, so): (&str, &str),
        (dc, d_o): (&str, &str),
    ) -> Res<Answer> {
        check_container_name(sc)?;
        check_object_name(so)?;
        let layer = &self.inner.layer;
        let src = layer.open_object(owner, sc, so).map_err(obj_err)?;
        let rec = src.record().clone();
        let manifest = rec.meta.extra.get(MANIFEST).cloned();
        let want_manifest = ctx.param("multipart-manifest") == Some("get");
        // Conditions on the source: for a large object, against its joined ETag.
        let dlo = match &manifest {
            Some(m) if !want_manifest => Some(self.dlo_segments(owner, m)?),
            _ => None,
        };
        let etag = dlo.as_ref().map_or(rec.etag.clone(), |d| d.etag.clone());
        if let Some(status) = conditions(ctx, &etag, rec.modified_ms) {
            return Err(err(if status == 304 { 412 } else { status }));
        }
        let req = request_meta(ctx, d_o, false)?;
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
                meta.extra.remove(MANIFEST);
                let len = r.end - r.start;
                let stream = match &dlo {
                    Some(d) => {
                        drop(src);
                        self.dlo_stream(owner, d, r)
                    }
                    None => layer.read(src, Some(r)).map_err(obj_err)?,
                };
                layer
                    .put_object(owner, dc, d_o, meta, stream, Some(len))
                    .await
                    .map_err(obj_err)?
            }
            (Some(d), None) => {
                // A large object is copied as its joined content: a plain object.
                drop(src);
                meta.extra.remove(MANIFEST);
                let stream = self.dlo_stream(owner, &d, 0..d.size);
                layer
                    .put_object(owner, dc, d_o, meta, stream, Some(d.size))
                    .await
                    .map_err(obj_err)?
            }
            (None, None) => layer
                .copy_object(owner, src, (sc, so), (dc, d_o), Some(meta))
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
                format!("AUTH_{}", percent_encode_path(owner)),
            )
            .header(
                "x-copied-from-last-modified",
                http_date_secs(modified_secs(rec.modified_ms)),
            )
            .text("text/html; charset=UTF-8", ""))
    }

    async fn get(&self, ctx: &Ctx, owner: &str, c: &str, o: &str) -> Res<Answer> {
        let layer = &self.inner.layer;
        let obj = layer.open_object(owner, c, o).map_err(obj_err)?;
        let rec = obj.record().clone();
        let manifest = rec.meta.extra.get(MANIFEST).cloned();
        let dlo = match &manifest {
            Some(m) if ctx.param("multipart-manifest") != Some("get") => {
                Some(self.dlo_segments(owner, m)?)
            }
            _ => None,
        };
        let (size, etag) = match &dlo {
            Some(d) => (d.size, format!("\"{}\"", d.etag)),
            None => (rec.size, rec.etag.clone()),
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
            let stream = prime(stream).await.map_err(obj_err)?;
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
                .map_err(obj_err)?;
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
            let stream = prime(stream).await.map_err(obj_err)?;
            return Ok(a.stream(stream, len));
        }
        // Several ranges: multipart/byteranges.
        let mut boundary = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut boundary);
        let boundary = hex(&boundary);
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

    // ---- dynamic large objects ----

    /// The segments of a manifest `container/prefix`: every object of the
    /// container whose name starts with the prefix, in name order.
    fn dlo_segments(&self, owner: &str, manifest: &str) -> Res<Dlo> {
        let (c, prefix) = split_manifest(manifest).ok_or_else(|| err(400))?;
        let layer = &self.inner.layer;
        let mut segs = Vec::new();
        let mut start_after = None;
        loop {
            let r = layer
                .list_objects(
                    owner,
                    &c,
                    &ListParams {
                        prefix: prefix.clone(),
                        delimiter: None,
                        start_after: start_after.take(),
                        max_keys: LISTING_LIMIT,
                    },
                )
                .map_err(|e| match e {
                    ObjectError::NoSuchBucket(_) => err(404),
                    e => obj_err(e),
                })?;
            for (k, rec) in r.objects {
                segs.push((k, rec.size, rec.etag));
            }
            if !r.truncated {
                break;
            }
            start_after = r.next_start_after;
        }
        let mut md5 = Md5::new();
        for (_, _, e) in &segs {
            md5.update(e.as_bytes());
        }
        Ok(Dlo {
            container: c,
            size: segs.iter().map(|s| s.1).sum(),
            etag: hex(&md5.finalize()),
            segs: segs.into_iter().map(|(k, s, _)| (k, s)).collect(),
        })
    }

    /// Streams `range` of the joined segments, opening each segment when reached.
    fn dlo_stream(&self, owner: &str, d: &Dlo, range: std::ops::Range<u64>) -> ByteStream {
        let mut pieces = Vec::new();
        let mut off = 0u64;
        for (name, len) in &d.segs {
            let (s, e) = (off, off + len);
            off = e;
            let from = range.start.max(s);
            let to = range.end.min(e);
            if from < to {
                pieces.push((name.clone(), from - s..to - s));
            }
        }
        let layer = self.inner.layer.clone();
        let owner = owner.to_string();
        let container = d.container.clone();
        Box::pin(
            futures::stream::iter(pieces)
                .then(move |(name, r)| {
                    let layer = layer.clone();
                    let owner = owner.clone();
                    let container = container.clone();
                    async move {
                        layer
                            .get_object(&owner, &container, &name, Some(r))
                            .map(|(_, s)| s)
                    }
                })
                .try_flatten(),
        )
    }
}

/// A dynamic large object's segments at the time of the request.
struct Dlo {
    container: String,
    segs: Vec<(String, u64)>,
    size: u64,
    /// MD5 of the segments' ETags, hex.
    etag: String,
}

/// The `extra` name of the large-object manifest.
const MANIFEST: &str = "x-object-manifest";

/// Splits `container/object` (an optional leading `/`).
fn split_object_path(p: &str) -> Option<(String, String)> {
    let p = p.strip_prefix('/').unwrap_or(p);
    let (c, o) = p.split_once('/')?;
    (!c.is_empty() && !o.is_empty()).then(|| (c.to_string(), o.to_string()))
}

/// Splits a manifest value `container/prefix` (both parts may be percent-encoded).
fn split_manifest(m: &str) -> Option<(String, String)> {
    let m = m.strip_prefix('/').unwrap_or(m);
    let (c, p) = m.split_once('/')?;
    let c = String::from_utf8(percent_decode(c, false)).ok()?;
    let p = String::from_utf8(percent_decode(p, false)).ok()?;
    (!c.is_empty()).then_some((c, p))
}

/// The object metadata a PUT, POST or COPY sends.
fn request_meta(ctx: &Ctx, name: &str, put: bool) -> Res<ObjectMeta> {
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

/// The validators of an object (on 412 and 416 answers).
fn validators(a: Answer, rec: &ObjectRecord, etag: &str) -> Answer {
    a.header("etag", etag)
        .header(
            "last-modified",
            http_date_secs(modified_secs(rec.modified_ms)),
        )
        .header("x-timestamp", x_timestamp(rec.modified_ms))
        .header("accept-ranges", "bytes")
}

/// The headers describing an object.
fn object_headers(mut a: Answer, rec: &ObjectRecord, etag: &str) -> Answer {
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
    for (k, v) in &m.extra {
        a = a.header(k, v);
    }
    a
}

impl Answer {
    /// A HEAD answer: no body, the length of the body a GET would have.
    fn with_len(mut self, len: u64) -> Self {
        self.len = Some(len);
        self.body = full(Bytes::new());
        self
    }
}

/// Evaluates If-Match / If-None-Match / If-Modified-Since / If-Unmodified-Since;
/// `Some(304 or 412)` when the request must not proceed.
fn conditions(ctx: &Ctx, etag: &str, modified_ms: i64) -> Option<u16> {
    let modified = modified_secs(modified_ms);
    if let Some(m) = ctx.header("if-match") {
        if !etag_matches(m, etag) {
            return Some(412);
        }
    }
    let read = ctx.method == Method::GET || ctx.method == Method::HEAD;
    if let Some(m) = ctx.header("if-none-match") {
        if etag_matches(m, etag) {
            return Some(if read { 304 } else { 412 });
        }
    } else if let Some(t) = ctx.header("if-modified-since").and_then(parse_http_date) {
        if modified <= t {
            return Some(if read { 304 } else { 412 });
        }
    }
    // Swift checks If-Unmodified-Since even when If-Match matched.
    if let Some(t) = ctx.header("if-unmodified-since").and_then(parse_http_date) {
        if modified > t {
            return Some(412);
        }
    }
    None
}

/// Adds the common headers and builds the response.
fn finish(method: &Method, a: Answer) -> Response<SwiftBody> {
    let mut trans = [0u8; 10];
    rand::thread_rng().fill_bytes(&mut trans);
    let trans = format!("tx{}", hex(&trans));
    let mut resp = Response::new(if *method == Method::HEAD {
        full(Bytes::new())
    } else {
        a.body
    });
    *resp.status_mut() = a.status;
    let h = resp.headers_mut();
    for (n, v) in a.headers {
        h.append(n, v);
    }
    if let Some(len) = a.len {
        if a.status != StatusCode::NO_CONTENT && a.status != StatusCode::NOT_MODIFIED {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
    }
    if let Ok(v) = HeaderValue::from_str(&trans) {
        h.insert("x-trans-id", v.clone());
        h.insert("x-openstack-request-id", v);
    }
    if let Ok(v) = HeaderValue::from_str(&http_now()) {
        h.insert(header::DATE, v);
    }
    resp
}

#[cfg(test)]
mod tests;
