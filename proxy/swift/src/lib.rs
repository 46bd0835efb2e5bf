//! The OpenStack Swift front-end: a hand-written router over the object layer.
//!
//! - **Auth**: tempauth-style v1. `GET /auth/v1.0` (also `/auth/v1`, `/v1.0`) with
//!   `X-Auth-User: <account>:<user>` and `X-Auth-Key` answers `X-Auth-Token` and
//!   `X-Storage-Url: http://<host>/v1/AUTH_<account>`. Tokens expire; a missing
//!   token makes a request anonymous, an unknown or expired one is 401.
//! - **Authorization** (tempauth's rules, module `acl`): an account's admin users own
//!   it; anyone else (another account, a non-admin user, an anonymous caller)
//!   reaches a container only by its ACLs: `X-Container-Read` for listings and
//!   object reads (`account`, `account:user`, `.r:<referrer>`, `.rlistings`),
//!   `X-Container-Write` for object writes. Denied: 403, or 401 without a token.
//! - **Mapping**: a Swift account is an object-layer owner (the same string as the S3
//!   access key), a container is a bucket in that account's own namespace, an
//!   object is an object. Metadata lives in the object layer, so an object written
//!   through S3 reads through Swift and back.
//! - **Operations**: account GET/HEAD/POST, container PUT/GET/HEAD/POST/DELETE,
//!   object PUT/GET/HEAD/POST/DELETE/COPY (and PUT with `X-Copy-From`, also across
//!   accounts), listings in plain text, JSON and XML, Range (single and
//!   multipart/byteranges), conditional requests, dynamic large objects
//!   (`X-Object-Manifest`), static large objects (`multipart-manifest=put`,
//!   module `slo`), bulk delete, `GET /info`, and CORS (`OPTIONS` preflights
//!   and the `Access-Control-*` answers of containers that allow an origin,
//!   module `cors`). Header names go out in Title-Case, as Swift sends them.
//!
//! # Mapping onto the object layer
//!
//! | Swift | object layer |
//! |---|---|
//! | account `AUTH_<a>` | owner `<a>` = the S3 access key (user `<a>:<a>`, key = the secret) |
//! | container | bucket in the account's own namespace (two accounts may each have `photos`; S3's CreateBucket still refuses a name another account uses; Swift names may be any UTF-8 of 1–256 bytes without `/`, so S3 cannot address every Swift container) |
//! | `X-Container-Meta-*` | `BucketRecord.meta` |
//! | `X-Container-Read` / `X-Container-Write` (cleaned as Swift's `clean_acl`) | `BucketRecord.sysmeta` `read` / `write` |
//! | `X-Account-Meta-*` | `AccountRecord` under `a/<account>` |
//! | object, `X-Object-Meta-*` | object, `ObjectMeta.user` (the same map as `x-amz-meta-*`) |
//! | Content-Type / -Encoding / -Disposition / -Language, Cache-Control | the `ObjectMeta` fields S3 uses |
//! | `X-Object-Manifest`, Expires, X-Robots-Tag | `ObjectMeta.extra` |
//! | static large object: manifest, `X-Static-Large-Object`, joined size and ETag | the object's data (the JSON manifest); `ObjectMeta.extra` `x-static-large-object`, `x-object-sysmeta-slo-size` / `-etag` (never sent to clients) |
//! | `X-Delete-At` / `X-Delete-After` | `ObjectRecord.delete_at` and the expiry queue: an expired object reads as absent at once; the volume's expiry task frees its blocks (local state only, no backend request) |
//!
//! Counts and bytes of a container (HEAD, account listings) are a scan of its
//! index entries: linear in its objects, in memory under the layer's lock.
//!
//! # Requests
//!
//! The path is percent-decoded and must be UTF-8 without NUL (412 otherwise).
//! Account requests and container changes are the owner's; a COPY or
//! `X-Copy-From` needs read at the source (checked first, so a missing source is
//! 404) and write at the destination, possibly in another account
//! (`Destination-Account`, `X-Copy-From-Account`). `X-Account-Access-Control` is
//! validated as tempauth does (a JSON object of `admin` / `read-write` /
//! `read-only` string lists, at most 8 KiB; else 400) and then refused with 400:
//! account ACLs are not implemented (`/info` says `tempauth.account_acls:
//! false`). Listings page through the layer's listing (`limit + 1` keys,
//! `end_marker` cut in memory); `reverse` lists the range in full and reverses
//! it. A PUT streams its body into the layer; with an `ETag` header the layer
//! compares it with the MD5 it computes anyway and on a mismatch frees the blocks
//! and commits nothing (422). GET reads the first chunk before answering, so an
//! engine error is a 503 rather than a cut body. Several ranges open the object
//! once per range, each pinned, and go out as multipart/byteranges with an exact
//! Content-Length. A dynamic large object lists its segments at request time
//! (`container/prefix`, in name order) and its ETag is the quoted MD5 of their
//! ETags. A static large object is checked against the index when put (every
//! mismatch listed in one 400, at most 1000 segments and 8 MiB of manifest,
//! segments but the last at least 1 byte, nested manifests counted at their
//! joined size, the expansion within the bounds of [`limits`]); GET streams the
//! segments (nested manifests read lazily, at most 10 deep, within a budget per
//! request) and refuses a segment whose ETag changed (409 before the first
//! byte for one the top manifest names, a cut body after). Failed logins are
//! throttled per client network and per user (module `throttle`). COPY and `X-Copy-From` use the layer's copy (metadata merged
//! unless `X-Fresh-Metadata`); a large object or a `Range` is copied as new plain
//! data. Errors are Swift's status codes with swob-style HTML bodies; object-layer
//! errors map by their class.

mod account;
mod acl;
mod auth;
mod container;
mod cors;
mod dlo;
mod error;
mod listing;
mod meta;
mod object;
mod plumbing;
mod slo;
mod throttle;
mod util;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header;
use http::{Method, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use oram_objects::ObjectLayer;

use acl::{denied, Access, Identity};
pub use auth::SwiftUser;
use error::{err, err_msg, Res, SwiftError};
use plumbing::{check_container_name, check_object_name, error_answer, finish, Answer, Ctx};
pub use throttle::ClientAddr;

/// Who sent a request, for the server's access log (an extension of every
/// answer of [`SwiftApi::handle`] that names a user): `<account>:<user>` of a
/// valid token, or the `X-Auth-User` a login claims. Never the key or token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestUser(pub String);
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
    /// Most segments of a static large object's manifest.
    pub const MAX_MANIFEST_SEGMENTS: usize = 1000;
    /// Largest manifest of a static large object, in bytes (as the client sends it).
    pub const MAX_MANIFEST_SIZE: u64 = 8 << 20;
    /// Most manifests in a chain of nested manifests (Swift's
    /// `max_slo_recursion_depth`): a manifest nested deeper is refused when put
    /// (400) and when read (409).
    pub const MAX_MANIFEST_NESTING: usize = 10;
    /// Most segments one request expands a static large object into, nested
    /// manifests' included (ten manifests of [`MAX_MANIFEST_SEGMENTS`]; Swift
    /// buffers as many for `multipart-manifest=delete`). A manifest whose
    /// expansion is larger is refused when put (400); reading one put before
    /// this was checked stops there, deleting it is refused (400).
    pub const MAX_SLO_SEGMENTS_PER_REQUEST: u64 = 10_000;
    /// Most bytes of stored manifests one request reads (twice
    /// [`MAX_MANIFEST_SIZE`]: a largest manifest and its nested ones), which
    /// bounds the memory a large object's request holds. Checked as for
    /// [`MAX_SLO_SEGMENTS_PER_REQUEST`].
    pub const MAX_SLO_MANIFEST_BYTES_PER_REQUEST: u64 = 16 << 20;
    /// Failed logins a client network (an IPv4 address, an IPv6 /64) may make
    /// at once before it gets 429; then [`LOGIN_REFILL_PER_SEC`].
    pub const LOGIN_FAILURES_PER_CLIENT: usize = 20;
    /// Failed logins one user name may take, from any address, at once before
    /// it gets 429; then [`LOGIN_REFILL_PER_SEC`].
    pub const LOGIN_FAILURES_PER_USER: usize = 60;
    /// Failed logins a client or user regains per second.
    pub const LOGIN_REFILL_PER_SEC: f64 = 2.0;
    /// Client networks whose failed logins are remembered; when all of them are
    /// in debt, a login from another network is refused (429).
    pub const LOGIN_CLIENTS_TRACKED: usize = 100_000;
    /// Live tokens kept at most per user; beyond, that user's oldest is dropped.
    pub const MAX_TOKENS_PER_USER: usize = 1_000;
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

/// Who sent a request, as authorization needs it.
#[derive(Clone)]
pub(crate) struct Caller {
    /// The token's identity; `None` without a token.
    pub(crate) who: Option<Identity>,
    /// The `Referer` header (for `.r:` grants).
    pub(crate) referer: Option<String>,
    /// The realm of a 401's `WWW-Authenticate` (the account in the path).
    pub(crate) realm: String,
}

impl Caller {
    /// Whether the caller owns account `acct`.
    pub(crate) fn owns(&self, acct: &str) -> bool {
        self.who.as_ref().is_some_and(|w| w.owns(acct))
    }

    /// The answer to a request the caller may not make (401 without token,
    /// else 403).
    pub(crate) fn denied(&self) -> SwiftError {
        denied(self.who.as_ref(), &self.realm)
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
    throttle: throttle::LoginThrottle,
    https: bool,
    slo_stats: slo::SloStats,
}

impl SwiftApi {
    /// Serves `layer` to `users`.
    pub fn new(layer: ObjectLayer, users: Vec<SwiftUser>, cfg: SwiftConfig) -> Self {
        let names = users.iter().map(|u| format!("{}:{}", u.account, u.user));
        let throttle = throttle::LoginThrottle::new(names, LOGIN_CLIENTS_TRACKED);
        Self {
            inner: Arc::new(Inner {
                layer,
                auth: auth::Auth::new(users, cfg.token_ttl),
                throttle,
                https: cfg.https,
                slo_stats: slo::SloStats::default(),
            }),
        }
    }

    /// Serves `users` from now on (a user added is throttled at login as an
    /// unknown name until the next start); the tokens of users removed or given
    /// another key are revoked.
    pub fn set_users(&self, users: Vec<SwiftUser>) {
        self.inner.auth.set_users(users);
    }

    /// Bytes of static large objects' manifests read so far.
    #[cfg(test)]
    fn slo_manifest_bytes_read(&self) -> u64 {
        let s = &self.inner.slo_stats.manifest_bytes;
        s.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Segments of static large objects opened so far.
    #[cfg(test)]
    fn slo_segments_read(&self) -> u64 {
        let s = &self.inner.slo_stats.segments;
        s.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The answer to a request that exceeds the concurrency limit: 503.
    pub fn overloaded() -> Response<SwiftBody> {
        finish(&Method::GET, error_answer(err(503)))
    }

    /// Serves one request. Its client address, for the login throttle, is the
    /// request's [`ClientAddr`] extension; the answer's [`RequestUser`] extension
    /// names the user it came from, when it names one.
    pub async fn handle<B>(&self, req: Request<B>) -> Response<SwiftBody>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let method = req.method().clone();
        // Swift (eventlet) answers an explicit `Connection: keep-alive` with the
        // same header; hyper keeps HTTP/1.1 connections alive without saying so.
        let keep_alive = req
            .headers()
            .get(header::CONNECTION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("keep-alive"));
        let user = self.user_of(req.headers());
        let (parts, body) = req.into_parts();
        let routed = match plumbing::read_small_body(&parts.headers, body).await {
            Ok(body) => self.route(Request::from_parts(parts, body)).await,
            Err(e) => Err(e),
        };
        let answer = match routed {
            Ok(a) => a,
            Err(e) => {
                if e.status.is_server_error() {
                    tracing::warn!(status = e.status.as_u16(), %method, "swift request failed");
                }
                error_answer(e)
            }
        };
        let mut resp = finish(&method, answer);
        if keep_alive && !resp.headers().contains_key(header::CONNECTION) {
            resp.headers_mut().insert(
                header::CONNECTION,
                http::HeaderValue::from_static("keep-alive"),
            );
        }
        if let Some(u) = user {
            resp.extensions_mut().insert(u);
        }
        resp
    }

    /// The user a request names ([`RequestUser`]): a valid token's, else the one
    /// a login claims (`X-Auth-User` / `X-Storage-User`).
    fn user_of(&self, headers: &http::HeaderMap) -> Option<RequestUser> {
        let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
        if let Some(token) = header("x-auth-token").or_else(|| header("x-storage-token")) {
            return self
                .inner
                .auth
                .check(token)
                .map(|w| RequestUser(format!("{}:{}", w.account, w.user)));
        }
        header("x-auth-user")
            .or_else(|| header("x-storage-user"))
            .map(|u| RequestUser(u.to_string()))
    }

    async fn route<B>(&self, req: Request<B>) -> Res<Answer>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: std::fmt::Display,
    {
        let (parts, body) = req.into_parts();
        let client = parts
            .extensions
            .get::<ClientAddr>()
            .copied()
            .unwrap_or(ClientAddr(std::net::Ipv6Addr::UNSPECIFIED.into()));
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
                return self.login(&ctx, client)
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
        if ctx.method == Method::OPTIONS {
            // CORS preflights carry no token (Swift's tempauth admits them).
            let acct = account.strip_prefix("AUTH_").unwrap_or(account);
            return Ok(self.options(&ctx, acct, container, object));
        }
        // A token that is not (or no longer) valid is 401 at once; a request
        // without one is anonymous, and only `.r:` grants can admit it.
        let realm = percent_encode_path(account);
        let who = match ctx
            .header("x-auth-token")
            .or_else(|| ctx.header("x-storage-token"))
        {
            None => None,
            Some(token) => Some(
                self.inner
                    .auth
                    .check(token)
                    .ok_or_else(|| denied(None, &realm))?,
            ),
        };
        let caller = Caller {
            who,
            referer: ctx.header("referer").map(str::to_string),
            realm,
        };
        let Some(acct) = account.strip_prefix("AUTH_") else {
            return Err(caller.denied());
        };
        let owner = caller.owns(acct);
        let answer = match (container, object) {
            // Only the account's admins use the account itself.
            (None, _) if owner => self.account(&ctx, account, acct, body).await,
            (None, _) => Err(caller.denied()),
            (Some(c), None) => {
                check_container_name(c)?;
                if !owner {
                    // Others may only list, by the read ACL.
                    if ctx.method != Method::GET && ctx.method != Method::HEAD {
                        return Err(caller.denied());
                    }
                    self.authorize(&caller, acct, c, Access::List)?;
                }
                self.container(&ctx, &caller, acct, c).await
            }
            (Some(c), Some(o)) => {
                check_container_name(c)?;
                check_object_name(o)?;
                self.object(&ctx, &caller, acct, c, o, body).await
            }
        };
        // CORS headers for a container that allows the request's origin.
        match (container, ctx.header("origin").is_some()) {
            (Some(c), true) => Ok(match answer {
                Ok(mut a) => {
                    let cors = self.cors_headers(&ctx, (acct, c), a.headers.iter().map(|h| &h.0));
                    a.headers.extend(cors);
                    a
                }
                Err(mut e) => {
                    let cors = self.cors_headers(&ctx, (acct, c), e.headers.iter().map(|h| &h.0));
                    e.headers.extend(
                        cors.into_iter()
                            .filter_map(|(n, v)| Some((n, v.to_str().ok()?.to_string()))),
                    );
                    return Err(e);
                }
            }),
            _ => answer,
        }
    }

    /// Admits `caller` to an `access` of container `c` of account `acct`: its
    /// owner always, anyone else by the container's ACLs (a container that does
    /// not exist grants nothing). Only the local index is read.
    pub(crate) fn authorize(
        &self,
        caller: &Caller,
        acct: &str,
        c: &str,
        access: Access,
    ) -> Res<()> {
        if caller.owns(acct) {
            return Ok(());
        }
        let b = self.inner.layer.head_bucket(acct, c).ok();
        let get = |k: &str| {
            b.as_ref()
                .and_then(|b| b.sysmeta.get(k))
                .map(String::as_str)
        };
        if acl::allowed(
            caller.who.as_ref(),
            caller.referer.as_deref(),
            access,
            get(acl::READ),
            get(acl::WRITE),
        ) {
            Ok(())
        } else {
            Err(caller.denied())
        }
    }

    // ---- auth and info ----

    /// A login: a failure is reserved from the client's and the user's
    /// throttle first (429 when none is left) and given back on success.
    fn login(&self, ctx: &Ctx, client: ClientAddr) -> Res<Answer> {
        if ctx.method != Method::GET && ctx.method != Method::HEAD {
            return Err(err(405));
        }
        let user = ctx
            .header("x-auth-user")
            .or_else(|| ctx.header("x-storage-user"));
        let reserved = self
            .inner
            .throttle
            .reserve(client, user)
            .map_err(|wait| SwiftError {
                headers: vec![(header::RETRY_AFTER, wait.to_string())],
                ..err(429)
            })?;
        let user = user.ok_or_else(|| err(401))?;
        let key = ctx
            .header("x-auth-key")
            .or_else(|| ctx.header("x-storage-pass"))
            .ok_or_else(|| err(401))?;
        let (account, token) = self.inner.auth.login(user, key).ok_or_else(|| SwiftError {
            headers: vec![(header::WWW_AUTHENTICATE, "Swift realm=\"unknown\"".into())],
            ..err(401)
        })?;
        self.inner.throttle.refund(reserved);
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
            "slo": {
                "max_manifest_segments": MAX_MANIFEST_SEGMENTS,
                "max_manifest_size": MAX_MANIFEST_SIZE,
                "min_segment_size": 1,
                "yield_frequency": 10,
                "allow_async_delete": false,
            },
            "bulk_delete": {
                "max_deletes_per_request": MAX_DELETES_PER_REQUEST,
                "max_failed_deletes": 1000,
            },
        });
        Ok(Answer::new(200).text("application/json; charset=utf-8", info.to_string()))
    }
}

#[cfg(test)]
mod tests;
