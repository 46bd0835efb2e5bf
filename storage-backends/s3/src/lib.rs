//! A [`BlockStore`] on an S3-compatible object store: AWS S3, IBM Cloud Object
//! Storage (HMAC keys), MinIO, or anything else speaking the S3 API.
//!
//! Key `k` is the object `<prefix>/k` in one bucket. Requests run concurrently up to
//! a bound (`max_in_flight`, 32 by default: enough to hide a cloud round trip
//! behind a path's worth of buckets), over pooled connections, each attempt with a
//! timeout, retried by the SDK's standard strategy (exponential back-off with
//! jitter on throttling, 5xx and timeouts). A missing object is a 404 read as
//! `None`: there is never a HEAD before a GET.
//! Conditional writes of control objects ([`BlockStore::put_if`]: the backend
//! lease, checkpoints) have a pool of their own ([`CONTROL_IN_FLIGHT`]), so a
//! lease renewal never waits for a data request's slot (it still shares the
//! link with them).
//!
//! The provider is not trusted with the proxy's memory: a GET whose
//! `Content-Length` is outside the caller's bound is refused before its body is
//! read, a body is never read past that bound (nor past its announced length: a
//! short body is a transport error), every response body the SDK buffers
//! (listings, errors) is capped by an interceptor, and a listing stops at its key
//! bound.
//!
//! Writes are conditional (see [`S3StoreConfig::conditional_writes`]): each PUT
//! carries `If-Match` with the ETag this store last saw for the key (or
//! `If-None-Match: *` when it saw the key absent), so a PUT that timed out at the
//! client but lands on the server later cannot replace a newer version. A GET
//! updates the remembered ETag only if no write of the key was recorded after
//! the GET was sent (see `etags`), so a read overlapping a write of the same key
//! cannot leave the write's tag replaced by an older one.
//!
//! Every request of a batch (`get_opts`, `put_opts`) is sent even when another
//! fails; the first error is reported once all have answered, so what the
//! provider sees of a failed batch does not depend on which request failed.
//!
//! A write is bounded by `attempt_timeout` × `max_attempts` (with back-off);
//! a leased volume abandons its writes sooner, when the lease lapses. A PUT's
//! attempt is given one second more per [`SLOWEST_UPLOAD`] bytes of its body,
//! so that a large object (a checkpoint, a shuffled level) can be uploaded over
//! a slow link at all: with the bare `attempt_timeout` every attempt of a
//! 40 MiB checkpoint over 8 Mbit/s timed out, and it never landed.

mod abandoned;
mod etags;
mod limit;

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketLocationConstraint, CreateBucketConfiguration, Delete, ObjectIdentifier,
};
use aws_sdk_s3::Client;
use bytes::Bytes;
use futures::future::join_all;
use oram_blockstore::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Result, SizeBound,
    StoreError,
};
use tokio::sync::Semaphore;

use abandoned::Abandoned;
use etags::{Etags, Known};

/// Conditional writes of control objects ([`BlockStore::put_if`]) in flight at
/// most, beside the `max_in_flight` data requests: the backend lease's renewal
/// and a checkpoint's write, a few a minute.
pub const CONTROL_IN_FLIGHT: usize = 4;

/// The slowest upload rate, in bytes a second, a PUT's attempt is given time
/// for on top of `attempt_timeout` (1 Mbit/s): an attempt of a PUT of `n`
/// bytes may take `attempt_timeout + n / SLOWEST_UPLOAD` seconds.
pub const SLOWEST_UPLOAD: u64 = 128 * 1024;

/// The connect timeout of every request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of an S3 back-end.
#[derive(Clone)]
pub struct S3StoreConfig {
    /// Endpoint URL (`http://127.0.0.1:9000`, `https://s3.eu-de.cloud-object-storage.appdomain.cloud`);
    /// `None` for AWS's own endpoint of the region.
    pub endpoint: Option<String>,
    /// Region (`us-east-1`; IBM COS: the region of the endpoint, e.g. `eu-de`).
    pub region: String,
    /// Bucket holding the volume.
    pub bucket: String,
    /// Key prefix inside the bucket (may be empty).
    pub prefix: String,
    /// Path-style addressing (`endpoint/bucket/key`), needed by MinIO and most
    /// S3-compatible services on custom endpoints.
    pub path_style: bool,
    /// Static credentials `(access key, secret key)`; `None`: the standard AWS
    /// chain (environment, profile files, web identity, ECS, instance metadata).
    pub credentials: Option<(String, String)>,
    /// Requests in flight at most.
    pub max_in_flight: usize,
    /// Timeout of one attempt of one request.
    pub attempt_timeout: Duration,
    /// Attempts per request (first try included).
    pub max_attempts: u32,
    /// Largest object a plain (unbounded) `get_many` accepts, and the cap on any
    /// response body the SDK buffers (at least 16 MiB).
    pub max_object_bytes: u64,
    /// Most keys a listing collects.
    pub max_list_keys: usize,
    /// Send `If-Match` / `If-None-Match: *` with every PUT (AWS S3 and MinIO
    /// support both); off only for services that reject them.
    pub conditional_writes: bool,
    /// ETags remembered for conditional writes (about 50 bytes each).
    pub etag_cache: usize,
}

impl std::fmt::Debug for S3StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3StoreConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("path_style", &self.path_style)
            .field(
                "credentials",
                &self.credentials.as_ref().map(|(a, _)| (a, "<redacted>")),
            )
            .field("max_in_flight", &self.max_in_flight)
            .field("max_object_bytes", &self.max_object_bytes)
            .field("conditional_writes", &self.conditional_writes)
            .finish_non_exhaustive()
    }
}

impl Default for S3StoreConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: "us-east-1".into(),
            bucket: String::new(),
            prefix: String::new(),
            path_style: false,
            credentials: None,
            max_in_flight: 32,
            attempt_timeout: Duration::from_secs(30),
            max_attempts: 4,
            max_object_bytes: 256 << 20,
            max_list_keys: 1 << 24,
            conditional_writes: true,
            etag_cache: 1 << 20,
        }
    }
}

/// A block store in an S3 bucket.
///
/// **What the storage server observes:** one GET (with a `Range` header for
/// `get_range`), PUT or batched DeleteObjects per item, with the key, size and time;
/// ListObjectsV2 for maintenance listings.
#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    /// Data requests in flight (`max_in_flight`).
    limit: Arc<Semaphore>,
    /// Conditional writes of control objects ([`BlockStore::put_if`]: the
    /// backend lease, checkpoints) in flight: a pool of their own, so that a
    /// lease renewal never waits for a data request's slot behind a saturated
    /// link's queue of them (it would lapse, and the proxy fence itself).
    control: Arc<Semaphore>,
    /// AWS outside us-east-1 needs the region named when creating a bucket.
    location_constraint: Option<String>,
    max_object_bytes: u64,
    max_list_keys: usize,
    conditional: bool,
    /// The last ETag seen per key, for conditional writes.
    etags: Arc<Etags>,
    /// `attempt_timeout`: a PUT's attempt gets more for its body's size
    /// ([`SLOWEST_UPLOAD`]).
    attempt_timeout: Duration,
    /// Bodies of data PUTs this store gave up on (see [`Abandoned`]).
    abandoned: Arc<Abandoned>,
}

type HttpResponse = aws_sdk_s3::config::http::HttpResponse;

/// The HTTP status of a service error's response.
fn status<E>(e: &SdkError<E, HttpResponse>) -> Option<u16> {
    match e {
        SdkError::ServiceError(se) => Some(se.raw().status().as_u16()),
        _ => None,
    }
}

/// Maps an SDK error: throttling, 5xx, timeouts and connection failures are
/// `Unavailable` (retry later); other refusals are `Rejected`.
fn map_err<E>(op: &'static str, key: &str, e: SdkError<E, HttpResponse>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let st = status(&e);
    match &e {
        SdkError::ServiceError(se) => {
            let code = se.err().code().unwrap_or("unknown").to_string();
            let msg = se.err().message().unwrap_or("").to_string();
            let transient = st.is_some_and(|s| s >= 500 || s == 429 || s == 408)
                || matches!(
                    code.as_str(),
                    "SlowDown" | "RequestTimeout" | "ServiceUnavailable"
                );
            if transient {
                StoreError::Unavailable(format!("{op} {key}: {code} {msg}"))
            } else {
                StoreError::Rejected {
                    op,
                    key: key.to_string(),
                    message: format!("{code} (HTTP {}) {msg}", st.unwrap_or(0)),
                }
            }
        }
        SdkError::ConstructionFailure(_) => StoreError::Rejected {
            op,
            key: key.to_string(),
            message: DisplayErrorContext(&e).to_string(),
        },
        _ => StoreError::Unavailable(format!("{op} {key}: {}", DisplayErrorContext(&e))),
    }
}

impl S3Store {
    /// Connects (lazily: no request is sent here) with `cfg`.
    pub async fn new(cfg: &S3StoreConfig) -> Self {
        let mut loader =
            aws_config::defaults(BehaviorVersion::latest()).region(Region::new(cfg.region.clone()));
        if let Some((ak, sk)) = &cfg.credentials {
            loader = loader.credentials_provider(Credentials::new(
                ak,
                sk,
                None,
                None,
                "oram-proxy config",
            ));
        }
        let shared = loader.load().await;
        let mut b = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(cfg.path_style)
            // Objects are sealed with AES-GCM already: extra CRC checksums cost CPU
            // and add headers some S3-compatible services reject.
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(cfg.max_attempts.max(1))
                    .with_initial_backoff(Duration::from_millis(50))
                    .with_max_backoff(Duration::from_secs(5)),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_attempt_timeout(cfg.attempt_timeout)
                    .build(),
            )
            // No response body the SDK buffers (listings, error documents) may
            // exceed this: a hostile provider cannot exhaust memory.
            .interceptor(limit::BodyCap(cfg.max_object_bytes.max(16 << 20)));
        if let Some(ep) = &cfg.endpoint {
            b = b.endpoint_url(ep);
        }
        Self {
            client: Client::from_conf(b.build()),
            bucket: cfg.bucket.clone(),
            prefix: cfg.prefix.trim_matches('/').to_string(),
            limit: Arc::new(Semaphore::new(cfg.max_in_flight.max(1))),
            control: Arc::new(Semaphore::new(CONTROL_IN_FLIGHT)),
            location_constraint: (cfg.endpoint.is_none() && cfg.region != "us-east-1")
                .then(|| cfg.region.clone()),
            max_object_bytes: cfg.max_object_bytes,
            max_list_keys: cfg.max_list_keys,
            conditional: cfg.conditional_writes,
            etags: Arc::new(Etags::new(cfg.etag_cache)),
            attempt_timeout: cfg.attempt_timeout,
            abandoned: Arc::new(Abandoned::new()),
        }
    }

    /// The attempt timeout of a PUT of `bytes`, if longer than the store's
    /// (by a second or more: see [`SLOWEST_UPLOAD`]).
    fn put_attempt_timeout(&self, bytes: u64) -> Option<Duration> {
        let extra = bytes / SLOWEST_UPLOAD;
        (extra > 0).then(|| self.attempt_timeout + Duration::from_secs(extra))
    }

    fn full_key(&self, key: &str) -> String {
        if self.prefix.is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        }
    }

    /// Checks that the bucket exists and the credentials may use it.
    pub async fn check(&self) -> Result<()> {
        let _p = self.limit.acquire().await.expect("semaphore open");
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| map_err("head bucket", &self.bucket, e))
    }

    /// Creates the bucket (for `oram-proxy init`); an existing bucket of the same
    /// owner is fine.
    pub async fn create_bucket(&self) -> Result<()> {
        if self.check().await.is_ok() {
            return Ok(());
        }
        let mut req = self.client.create_bucket().bucket(&self.bucket);
        if let Some(lc) = &self.location_constraint {
            req = req.create_bucket_configuration(
                CreateBucketConfiguration::builder()
                    .location_constraint(BucketLocationConstraint::from(lc.as_str()))
                    .build(),
            );
        }
        let r = req.send().await;
        match r {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(se)) if se.err().is_bucket_already_owned_by_you() => Ok(()),
            Err(e) => Err(map_err("create bucket", &self.bucket, e)),
        }
    }

    /// GETs one object (or a range of it) within `bound`; returns it with its ETag.
    async fn get_one(
        &self,
        key: &ObjKey,
        range: Option<&Range<u64>>,
        bound: SizeBound,
    ) -> Result<Option<(Bytes, Option<String>)>> {
        let _p = self.limit.acquire().await.expect("semaphore open");
        let full = self.full_key(key.as_str());
        // Before the GET is sent: a write of the key recorded after this point
        // wins over whatever the GET answers.
        let ticket = self.etags.ticket();
        let mut req = self.client.get_object().bucket(&self.bucket).key(&full);
        if let Some(r) = range {
            req = req.range(format!("bytes={}-{}", r.start, r.end - 1));
        }
        match req.send().await {
            Ok(mut out) => {
                let announced = out.content_length().and_then(|n| u64::try_from(n).ok());
                // Refused before a byte of the body is read.
                if let Some(n) = announced {
                    if !bound.admits(n) {
                        return Err(bound.violation(&full, format!("Content-Length {n}")));
                    }
                }
                let cap = bound.max();
                let mut buf = Vec::with_capacity(announced.unwrap_or(0).min(cap) as usize);
                loop {
                    match out.body.try_next().await {
                        Ok(Some(chunk)) => {
                            if buf.len() as u64 + chunk.len() as u64 > cap {
                                return Err(
                                    bound.violation(&full, format!("more than {cap} bytes"))
                                );
                            }
                            buf.extend_from_slice(&chunk);
                        }
                        Ok(None) => break,
                        Err(e) => {
                            return Err(StoreError::Unavailable(format!("get {full}: body: {e}")))
                        }
                    }
                }
                let got = buf.len() as u64;
                if announced.is_some_and(|n| n != got) {
                    return Err(StoreError::Unavailable(format!(
                        "get {full}: body truncated: {got} of {} bytes",
                        announced.unwrap_or(0)
                    )));
                }
                bound.check(key, got)?;
                let etag = out.e_tag().map(str::to_string);
                if let Some(e) = &etag {
                    self.etags.read(key, Known::Tag(e.clone()), ticket);
                }
                Ok(Some((Bytes::from(buf), etag)))
            }
            Err(SdkError::ServiceError(se)) if se.err().is_no_such_key() => {
                self.etags.read(key, Known::Absent, ticket);
                Ok(None)
            }
            // A 404 is a missing object only if it names no other cause
            // (NoSuchBucket must not look like a deleted node).
            Err(e) if status(&e) == Some(404) && matches!(e.code(), None | Some("NoSuchKey")) => {
                self.etags.read(key, Known::Absent, ticket);
                Ok(None)
            }
            // Range starting at or past the end of an existing object.
            Err(e) if status(&e) == Some(416) && range.is_some() => Ok(Some((Bytes::new(), None))),
            Err(e) => Err(map_err("get", &full, e)),
        }
    }

    /// One PUT with an optional condition; returns the new ETag.
    async fn put_one(&self, key: &ObjKey, v: Bytes, cond: Option<&PutCondition>) -> Result<ObjTag> {
        let full = self.full_key(key.as_str());
        let _p = self.limit.acquire().await.expect("semaphore open");
        self.put_one_inner(key, &full, v, cond).await
    }

    /// [`S3Store::put_one`] with the full key computed, the caller holding a
    /// permit of the pool the PUT counts against.
    async fn put_one_inner(
        &self,
        key: &ObjKey,
        full: &str,
        v: Bytes,
        cond: Option<&PutCondition>,
    ) -> Result<ObjTag> {
        let longer = self.put_attempt_timeout(v.len() as u64);
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(full)
            .content_length(v.len() as i64)
            .body(ByteStream::from(v));
        match cond {
            Some(PutCondition::IfAbsent) => req = req.if_none_match("*"),
            Some(PutCondition::IfMatch(t)) => req = req.if_match(&t.0),
            None => {}
        }
        let sent = match longer {
            Some(t) => {
                let timeouts = TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_attempt_timeout(t)
                    .build();
                req.customize()
                    .config_override(
                        aws_sdk_s3::config::Builder::default().timeout_config(timeouts),
                    )
                    .send()
                    .await
            }
            None => req.send().await,
        };
        match sent {
            Ok(out) => {
                let tag = out.e_tag().unwrap_or_default().to_string();
                self.etags.wrote(key, Known::Tag(tag.clone()));
                Ok(ObjTag(tag))
            }
            Err(e) if status(&e) == Some(412) => Err(StoreError::PreconditionFailed {
                key: full.to_string(),
            }),
            Err(e) => Err(map_err("put", full, e)),
        }
    }

    /// One DeleteObjects request of at most 1000 keys.
    async fn delete_chunk(&self, chunk: &[ObjKey]) -> Result<()> {
        let _p = self.limit.acquire().await.expect("semaphore open");
        let objects = chunk
            .iter()
            .map(|k| {
                ObjectIdentifier::builder()
                    .key(self.full_key(k.as_str()))
                    .build()
                    .map_err(|e| StoreError::Rejected {
                        op: "delete",
                        key: k.to_string(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let delete = Delete::builder()
            .set_objects(Some(objects))
            .quiet(true)
            .build()
            .map_err(|e| StoreError::Rejected {
                op: "delete",
                key: String::new(),
                message: e.to_string(),
            })?;
        let out = self
            .client
            .delete_objects()
            .bucket(&self.bucket)
            .delete(delete)
            .send()
            .await
            .map_err(|e| map_err("delete", &self.bucket, e))?;
        if let Some(err) = out.errors().first() {
            let what = format!(
                "{} {}",
                err.code().unwrap_or(""),
                err.message().unwrap_or("")
            );
            let key = err.key().unwrap_or("").to_string();
            return Err(match err.code() {
                Some("InternalError" | "SlowDown" | "ServiceUnavailable" | "RequestTimeout") => {
                    StoreError::Unavailable(format!("delete {key}: {what}"))
                }
                _ => StoreError::Rejected {
                    op: "delete",
                    key,
                    message: what,
                },
            });
        }
        for k in chunk {
            self.etags.wrote(k, Known::Absent);
        }
        Ok(())
    }

    /// A data PUT, conditional on what this store last saw of the key. A failed
    /// condition is resolved by reading the object: if it holds exactly `v`, an
    /// earlier attempt of this very write landed (success); if it holds a body
    /// of a PUT of this store's that was given up on and landed late
    /// ([`Abandoned`]), `v` replaces it, conditional on the tag just read;
    /// otherwise another writer changed it (`PreconditionFailed`).
    async fn put_tracked(&self, key: &ObjKey, v: Bytes) -> Result<()> {
        let cond = match (self.conditional, self.etags.get(key)) {
            (false, _) | (true, None) => None,
            (true, Some(Known::Absent)) => Some(PutCondition::IfAbsent),
            (true, Some(Known::Tag(t))) => Some(PutCondition::IfMatch(ObjTag(t))),
        };
        let put = self.put_one(key, v.clone(), cond.as_ref()).await;
        match &put {
            Ok(_) => self.abandoned.forget(key),
            Err(StoreError::Unavailable(_)) if self.conditional => self.abandoned.note(key, &v),
            Err(_) => {}
        }
        match put {
            Ok(_) => Ok(()),
            Err(StoreError::PreconditionFailed { key: full }) => {
                let now = self
                    .get_one(key, None, SizeBound::Exact(v.len() as u64))
                    .await;
                match now {
                    Ok(Some((b, _))) if b == v => Ok(()),
                    Ok(Some((b, Some(tag)))) if self.abandoned.was_ours(key, &b) => {
                        tracing::info!(
                            key = %full,
                            "a PUT this proxy had given up on landed late: replacing it"
                        );
                        let cond = PutCondition::IfMatch(ObjTag(tag));
                        self.put_one(key, v, Some(&cond)).await?;
                        self.abandoned.forget(key);
                        Ok(())
                    }
                    Ok(_) | Err(StoreError::WrongSize { .. }) => {
                        tracing::error!(
                            key = %full,
                            "a conditional PUT found the object changed by another writer \
                             (a second proxy on this prefix?): refusing to overwrite it"
                        );
                        Err(StoreError::PreconditionFailed { key: full })
                    }
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BlockStore for S3Store {
    /// No bound from the caller: the store's own, `max_object_bytes`.
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
        let bound = opts
            .bound
            .unwrap_or(SizeBound::AtMost(self.max_object_bytes));
        // Every GET is sent even when another fails (`join_all`, not
        // `try_join_all`, which would drop those still waiting for a slot).
        let got = join_all(keys.iter().map(|k| self.get_one(k, None, bound))).await;
        got.into_iter()
            .map(|r| r.map(|o| o.map(|(b, _)| b)))
            .collect()
    }

    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> Result<Option<Bytes>> {
        oram_blockstore::clip_range(&range, u64::MAX)?;
        let len = range.end - range.start;
        Ok(self
            .get_one(key, Some(&range), SizeBound::AtMost(len))
            .await?
            .map(|(b, _)| b))
    }

    /// Every item is one PUT (conditional, see `put_tracked`) in either mode: S3
    /// has no in-place write, so a redoable write is an ordinary one. Every PUT
    /// is sent even when another fails; the first error is reported after.
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, _: PutOpts) -> Result<()> {
        join_all(
            items
                .into_iter()
                .map(|(k, v)| async move { self.put_tracked(&k, v).await }),
        )
        .await
        .into_iter()
        .collect()
    }

    async fn get_tagged(&self, key: &ObjKey, bound: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
        Ok(self
            .get_one(key, None, bound)
            .await?
            .map(|(b, t)| (b, ObjTag(t.unwrap_or_default()))))
    }

    /// Through the control pool, not behind the data requests waiting for
    /// `max_in_flight` (see [`CONTROL_IN_FLIGHT`]).
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> Result<ObjTag> {
        let full = self.full_key(key.as_str());
        let _p = self.control.acquire().await.expect("semaphore open");
        self.put_one_inner(key, &full, data, Some(&cond)).await
    }

    /// One DeleteObjects request per 1000 keys, one after the other.
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<()> {
        for chunk in keys.chunks(1000) {
            self.delete_chunk(chunk).await?;
        }
        Ok(())
    }

    /// No bound from the caller: the store's own, `max_list_keys`.
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
        let max_keys = opts.max_keys.unwrap_or(self.max_list_keys);
        let full_prefix = self.full_key(prefix);
        let strip = if self.prefix.is_empty() {
            0
        } else {
            self.prefix.len() + 1
        };
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let _p = self.limit.acquire().await.expect("semaphore open");
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| map_err("list", &full_prefix, e))?;
            for o in page.contents() {
                if let Some(k) = o.key() {
                    if let Ok(k) = ObjKey::new(&k[strip.min(k.len())..]) {
                        out.push(k);
                        if out.len() > max_keys {
                            return Err(StoreError::WrongSize {
                                key: full_prefix,
                                got: format!("more than {max_keys} keys"),
                                expected: format!("at most {max_keys} keys"),
                            });
                        }
                    }
                }
            }
            match page.next_continuation_token() {
                Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_string()),
                _ => break,
            }
        }
        out.sort();
        Ok(out)
    }
}
