//! The S3 front-end: implements [`s3s::S3`] over the [`ObjectLayer`].
//!
//! s3s does the protocol work (routing, XML, SigV4 including streaming chunked
//! payloads, UNSIGNED-PAYLOAD and presigned URLs); this crate maps each operation
//! onto the object layer and object-layer errors onto S3 error codes. No s3s type
//! leaves this crate except the service built by [`build_service`].
//!
//! The authenticated access key is the account: a bucket belongs to the access key
//! that created it. Anonymous requests are refused.

mod convert;
mod front;

use std::collections::HashMap;
use std::ops::Range;

use futures::StreamExt;
use oram_objects::{
    ByteStream, Dialect, ListParams, ObjectError, ObjectLayer, ObjectMeta, ObjectRecord,
    PartOptions, Preconditions, PutMode, PutOptions, Validators,
};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};

use convert::*;
pub use front::{legacy_region, S3Front};

/// A user of the S3 API: access key and secret key.
#[derive(Clone)]
pub struct S3User {
    /// The access key (the account name).
    pub access_key: String,
    /// The secret key.
    pub secret_key: String,
}

impl std::fmt::Debug for S3User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3User")
            .field("access_key", &self.access_key)
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// The S3 implementation over an object layer.
#[derive(Clone)]
pub struct OramS3 {
    layer: ObjectLayer,
    region: String,
}

impl OramS3 {
    /// Serves `layer`; `region` is what GetBucketLocation reports.
    pub fn new(layer: ObjectLayer, region: impl Into<String>) -> Self {
        Self {
            layer,
            region: region.into(),
        }
    }
}

/// The configured users, answering an unknown access key as S3 does.
struct Users(HashMap<String, SecretKey>);

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0.get(access_key).cloned().ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )
        })
    }
}

/// Builds the HTTP service: S3 over `layer`, SigV4 with `users`, anonymous
/// refused, request ids on every answer and legacy region names accepted (see
/// [`S3Front`]).
pub fn build_service(layer: ObjectLayer, users: &[S3User], region: &str) -> S3Front {
    let keys: HashMap<String, SecretKey> = users
        .iter()
        .map(|u| (u.access_key.clone(), SecretKey::from(u.secret_key.clone())))
        .collect();
    let secrets = users
        .iter()
        .map(|u| (u.access_key.clone(), u.secret_key.clone()))
        .collect();
    let mut b = S3ServiceBuilder::new(OramS3::new(layer, region));
    b.set_auth(Users(keys));
    // POST Object (browser forms) is not implemented, and s3s would buffer a form
    // before its access check: nothing of a form is accepted (the binary also
    // refuses form POSTs before s3s sees them).
    let mut config = s3s::config::S3Config::default();
    config.post_object_max_file_size = 0;
    config.form_max_field_size = 0;
    config.form_max_fields_size = 0;
    config.form_max_parts = 0;
    b.set_config(std::sync::Arc::new(s3s::config::StaticConfigProvider::new(
        std::sync::Arc::new(config),
    )));
    S3Front::new(b.build(), secrets)
}

/// The client metadata of a PutObject, CopyObject (REPLACE) or
/// CreateMultipartUpload input (the same fields in three types).
/// `Content-Encoding` loses `aws-chunked` (the transfer framing of a streaming
/// upload, not the object's encoding) as S3 does; `Expires` is kept as an HTTP
/// date (the same attribute Swift's `Expires` sets).
macro_rules! object_meta {
    ($input:expr) => {
        ObjectMeta {
            content_type: $input.content_type,
            content_encoding: $input.content_encoding.and_then(|e| content_encoding(&e)),
            content_disposition: $input.content_disposition,
            content_language: $input.content_language,
            cache_control: $input.cache_control,
            user: $input
                .metadata
                .map(|m| m.into_iter().collect())
                .unwrap_or_default(),
            extra: $input
                .expires
                .as_ref()
                .and_then(http_date)
                .map(|d| (EXPIRES.to_string(), d))
                .into_iter()
                .collect(),
        }
    };
}

/// The name of the `Expires` attribute in `ObjectMeta::extra`.
const EXPIRES: &str = "expires";

/// A `Content-Encoding` value without `aws-chunked` (`None` if nothing is left).
fn content_encoding(v: &str) -> Option<String> {
    let kept: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty() && !c.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// ACLs: every bucket and object is its owner's alone (S3's default since 2023,
/// buckets with "bucket owner enforced" object ownership). A canned ACL or grant
/// that says just that is accepted; anything wider is refused as S3 refuses it
/// for such buckets (400 AccessControlListNotSupported). There is no anonymous or
/// cross-account access through S3.
fn check_canned(acl: Option<&str>) -> S3Result<()> {
    match acl {
        None | Some("private" | "bucket-owner-full-control" | "bucket-owner-read") => Ok(()),
        Some(other) => Err(acl_not_supported(&format!("the canned ACL {other:?}"))),
    }
}

fn acl_not_supported(what: &str) -> S3Error {
    let mut e = S3Error::with_message(
        S3ErrorCode::Custom("AccessControlListNotSupported".into()),
        format!("The bucket does not allow ACLs: {what} would grant access beyond the owner's; only the owner's full control (canned ACL private) is supported."),
    );
    e.set_status_code(http::StatusCode::BAD_REQUEST);
    e
}

/// `x-amz-grant-*` headers: only `x-amz-grant-full-control: id="<owner>"`.
fn check_grant_headers(
    owner: &str,
    full_control: Option<&str>,
    others: &[Option<&String>],
) -> S3Result<()> {
    if others.iter().any(Option::is_some) {
        return Err(acl_not_supported(
            "a grant other than the owner's full control",
        ));
    }
    if let Some(g) = full_control {
        let only_owner = g.split(',').all(|e| {
            let e = e.trim();
            e.strip_prefix("id=")
                .is_some_and(|id| id.trim().trim_matches('"') == owner)
        });
        if !only_owner {
            return Err(acl_not_supported("a full-control grant to someone else"));
        }
    }
    Ok(())
}

/// An access control policy sent as XML: only the owner's full control.
fn check_policy(owner: &str, p: &AccessControlPolicy) -> S3Result<()> {
    let ok = p.grants.as_deref().unwrap_or_default().iter().all(|g| {
        g.permission
            .as_ref()
            .is_some_and(|p| p.as_str() == Permission::FULL_CONTROL)
            && g.grantee
                .as_ref()
                .is_some_and(|ge| ge.id.as_deref() == Some(owner) && ge.uri.is_none())
    });
    if ok {
        Ok(())
    } else {
        Err(acl_not_supported("the access control policy"))
    }
}

/// The account of a request: its access key. Anonymous requests never get here
/// (s3s refuses them when auth is set), but refuse them again to be sure.
fn owner<T>(req: &S3Request<T>) -> S3Result<String> {
    req.credentials
        .as_ref()
        .map(|c| c.access_key.clone())
        .ok_or_else(|| s3_error!(AccessDenied, "anonymous access is not allowed"))
}

fn body_stream(blob: Option<StreamingBlob>) -> ByteStream {
    match blob {
        None => Box::pin(futures::stream::empty()),
        Some(b) => Box::pin(b.map(|r| r.map_err(|e| ObjectError::Body(e.to_string())))),
    }
}

fn check_len(len: Option<i64>) -> S3Result<Option<u64>> {
    match len {
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "negative Content-Length")),
        Some(n) if n as u64 > oram_objects::MAX_PUT_SIZE => Err(s3_error!(
            EntityTooLarge,
            "Your proposed upload exceeds the maximum allowed object size of 5 GiB."
        )),
        Some(n) => Ok(Some(n as u64)),
        None => Ok(None),
    }
}

/// Applies the request's conditions to `rec` (RFC 7232, S3's reading).
/// `reading`: GET/HEAD answer 304 where the precondition is "not modified".
/// A 304 or 412 carries the object's ETag and Last-Modified, as S3 sends them.
fn check_conditions(rec: &ObjectRecord, conditions: &Preconditions, reading: bool) -> S3Result<()> {
    conditions
        .evaluate(Some(Validators::of(rec)), reading, Dialect::S3)
        .map_err(|e| {
            let mut err = map_err(e);
            let mut h = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", rec.etag)) {
                h.insert(http::header::ETAG, v);
            }
            if let Some(v) = http_date(&timestamp(rec.modified_ms))
                .and_then(|d| http::HeaderValue::from_str(&d).ok())
            {
                h.insert(http::header::LAST_MODIFIED, v);
            }
            err.set_headers(h);
            err
        })
}

/// What a GET or HEAD reads: its `Range` or `partNumber` (not both) as a byte
/// range (`None`: the whole object), and the object's part count when a part was
/// asked for.
fn selection(
    rec: &ObjectRecord,
    range: Option<&s3s::dto::Range>,
    part_number: Option<i32>,
) -> S3Result<(Option<Range<u64>>, Option<i32>)> {
    match (range, part_number) {
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "Cannot specify both Range header and partNumber query parameter"
        )),
        (Some(r), None) => Ok((Some(parse_range_header(r, rec.size)?), None)),
        (None, None) => Ok((None, None)),
        (None, Some(n)) => {
            let bad = || {
                let mut e = S3Error::with_message(
                    S3ErrorCode::Custom("InvalidPartNumber".into()),
                    "The requested partnumber is not satisfiable",
                );
                e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
                e
            };
            let parts = multipart_parts(rec);
            if n < 1 || n as usize > parts.max(1) {
                return Err(bad());
            }
            if parts == 0 {
                // Not a multipart object: part 1 is all of it.
                return Ok((None, None));
            }
            let start: u64 = rec.segments[..n as usize - 1].iter().map(|s| s.len).sum();
            let len = rec.segments[n as usize - 1].len;
            Ok((Some(start..start + len), Some(parts as i32)))
        }
    }
}

/// The number of parts of a completed multipart upload (its ETag ends in `-N`
/// and it has one segment per part); 0 for any other object.
fn multipart_parts(rec: &ObjectRecord) -> usize {
    match rec
        .etag
        .rsplit_once('-')
        .and_then(|(_, n)| n.parse::<usize>().ok())
    {
        Some(n) if n == rec.segments.len() => n,
        _ => 0,
    }
}

/// The byte range a Range header asks for; an empty result (any range of an empty
/// object) is unsatisfiable too.
fn parse_range_header(r: &s3s::dto::Range, size: u64) -> S3Result<Range<u64>> {
    match r.check(size) {
        Ok(range) if range.start < range.end => Ok(range),
        _ => Err(s3_error!(
            InvalidRange,
            "The requested range is not satisfiable (object size {size})"
        )),
    }
}

/// Parses `bytes=first-last` of x-amz-copy-source-range.
fn parse_copy_range(s: &str, size: u64) -> S3Result<Range<u64>> {
    let bad = || s3_error!(InvalidArgument, "invalid x-amz-copy-source-range {s:?}");
    let r = s.strip_prefix("bytes=").ok_or_else(bad)?;
    let (a, b) = r.split_once('-').ok_or_else(bad)?;
    let first: u64 = a.parse().map_err(|_| bad())?;
    let last: u64 = b.parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(s3_error!(
            InvalidRange,
            "copy range {s} outside the source of {size} bytes"
        ));
    }
    Ok(first..last + 1)
}

fn copy_source(src: &CopySource) -> S3Result<(String, String)> {
    match src {
        CopySource::Bucket { bucket, key, .. } => Ok((bucket.to_string(), key.to_string())),
        _ => Err(s3_error!(
            NotImplemented,
            "only bucket/key copy sources are supported"
        )),
    }
}

impl OramS3 {
    /// [`map_err`], with S3's global bucket names: a bucket the caller does not
    /// have but another account does is `AccessDenied`, not `NoSuchBucket`.
    fn map_err(&self, e: ObjectError) -> S3Error {
        match e {
            ObjectError::NoSuchBucket(b) if self.layer.bucket_name_in_use(&b) => {
                s3_error!(AccessDenied, "Access Denied")
            }
            e => map_err(e),
        }
    }

    /// The ACL every bucket and object has: its owner with FULL_CONTROL.
    fn owner_acl(owner: &str) -> (Owner, Vec<Grant>) {
        let o = Owner {
            display_name: Some(owner.to_string()),
            id: Some(owner.to_string()),
        };
        let grant = Grant {
            grantee: Some(Grantee {
                display_name: Some(owner.to_string()),
                email_address: None,
                id: Some(owner.to_string()),
                type_: Type::from_static(Type::CANONICAL_USER),
                uri: None,
            }),
            permission: Some(Permission::from_static(Permission::FULL_CONTROL)),
        };
        (o, vec![grant])
    }

    /// One page of a listing, from the parameters all List* operations share.
    fn list_page(
        &self,
        owner: &str,
        bucket: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        start_after: Option<String>,
        max: Option<i32>,
    ) -> S3Result<(ListParams, oram_objects::ListResult)> {
        let params = ListParams {
            prefix: prefix.unwrap_or_default().to_string(),
            delimiter: delimiter.map(str::to_string),
            start_after,
            max_keys: max_keys(max)?,
        };
        let r = self
            .layer
            .list_objects(owner, bucket, &params)
            .map_err(|e| self.map_err(e))?;
        Ok((params, r))
    }
}

#[async_trait::async_trait]
impl S3 for OramS3 {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let max = match input.max_buckets {
            None => usize::MAX,
            Some(n) if (1..=10_000).contains(&n) => n as usize,
            Some(_) => {
                return Err(s3_error!(
                    InvalidArgument,
                    "max-buckets must be between 1 and 10000"
                ))
            }
        };
        let after = input
            .continuation_token
            .as_deref()
            .map(decode_token)
            .transpose()?;
        let prefix = input.prefix.clone().unwrap_or_default();
        // Swift containers whose names S3 cannot address are not listed.
        let all: Vec<_> = self
            .layer
            .list_buckets(&owner)
            .map_err(|e| self.map_err(e))?
            .into_iter()
            .filter(|b| oram_objects::valid_bucket_name(&b.name))
            .filter(|b| b.name.starts_with(&prefix))
            .filter(|b| after.as_ref().is_none_or(|a| b.name > *a))
            .collect();
        let truncated = all.len() > max;
        let page = &all[..all.len().min(max)];
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(
                page.iter()
                    .map(|b| Bucket {
                        name: Some(b.name.clone()),
                        creation_date: Some(timestamp(b.created_ms)),
                        bucket_region: Some(self.region.clone()),
                    })
                    .collect(),
            ),
            owner: Some(Owner {
                display_name: Some(owner.clone()),
                id: Some(owner),
            }),
            continuation_token: page
                .last()
                .filter(|_| truncated)
                .map(|b| encode_token(&b.name)),
            prefix: input.prefix,
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        match self.layer.create_bucket(&owner, &input.bucket).await {
            Ok(_) => {}
            // us-east-1 answers 200 to re-creating your own bucket (and changes
            // nothing); every other region answers BucketAlreadyOwnedByYou.
            Err(ObjectError::BucketAlreadyOwnedByYou(_)) if self.region == "us-east-1" => {}
            Err(e) => return Err(self.map_err(e)),
        }
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{}", input.bucket)),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let owner = owner(&req)?;
        self.layer
            .delete_bucket(&owner, &req.input.bucket)
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let owner = owner(&req)?;
        self.layer
            .head_bucket(&owner, &req.input.bucket)
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(HeadBucketOutput {
            bucket_region: Some(self.region.clone()),
            ..Default::default()
        }))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let owner = owner(&req)?;
        self.layer
            .head_bucket(&owner, &req.input.bucket)
            .map_err(|e| self.map_err(e))?;
        // The region by name, us-east-1 too (AWS sends an empty constraint for
        // us-east-1, which several clients read as "no region").
        Ok(S3Response::new(GetBucketLocationOutput {
            location_constraint: Some(BucketLocationConstraint::from(self.region.clone())),
        }))
    }

    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        let owner = owner(&req)?;
        self.layer
            .head_bucket(&owner, &req.input.bucket)
            .map_err(|e| self.map_err(e))?;
        let (o, grants) = Self::owner_acl(&owner);
        Ok(S3Response::new(GetBucketAclOutput {
            owner: Some(o),
            grants: Some(grants),
        }))
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        self.layer
            .head_bucket(&owner, &input.bucket)
            .map_err(|e| self.map_err(e))?;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        check_grant_headers(
            &owner,
            input.grant_full_control.as_deref(),
            &[
                input.grant_read.as_ref(),
                input.grant_read_acp.as_ref(),
                input.grant_write.as_ref(),
                input.grant_write_acp.as_ref(),
            ],
        )?;
        if let Some(p) = &input.access_control_policy {
            check_policy(&owner, p)?;
        }
        Ok(S3Response::new(PutBucketAclOutput::default()))
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        let owner = owner(&req)?;
        self.layer
            .head_object(&owner, &req.input.bucket, &req.input.key)
            .map_err(|e| self.map_err(e))?;
        let (o, grants) = Self::owner_acl(&owner);
        Ok(S3Response::new(GetObjectAclOutput {
            owner: Some(o),
            grants: Some(grants),
            ..Default::default()
        }))
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        self.layer
            .head_object(&owner, &input.bucket, &input.key)
            .map_err(|e| self.map_err(e))?;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        check_grant_headers(
            &owner,
            input.grant_full_control.as_deref(),
            &[
                input.grant_read.as_ref(),
                input.grant_read_acp.as_ref(),
                input.grant_write.as_ref(),
                input.grant_write_acp.as_ref(),
            ],
        )?;
        if let Some(p) = &input.access_control_policy {
            check_policy(&owner, p)?;
        }
        Ok(S3Response::new(PutObjectAclOutput::default()))
    }

    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        let owner = owner(&req)?;
        self.layer
            .head_bucket(&owner, &req.input.bucket)
            .map_err(|e| self.map_err(e))?;
        // Never versioned: no Status element at all.
        Ok(S3Response::new(GetBucketVersioningOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let len = check_len(input.content_length)?;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        check_grant_headers(
            &owner,
            input.grant_full_control.as_deref(),
            &[
                input.grant_read.as_ref(),
                input.grant_read_acp.as_ref(),
                input.grant_write_acp.as_ref(),
            ],
        )?;
        // If-None-Match: * makes the PUT create-only, If-Match replace-only; both
        // are checked again atomically when the upload commits.
        let mode = match (&input.if_match, &input.if_none_match) {
            (Some(_), Some(_)) => {
                return Err(s3_error!(
                    NotImplemented,
                    "If-Match and If-None-Match together are not supported on PUT"
                ))
            }
            (Some(c), None) => PutMode::IfMatch(etag_list(c)),
            (None, Some(c)) if c.is_any() => PutMode::Create,
            (None, Some(_)) => {
                return Err(s3_error!(
                    NotImplemented,
                    "If-None-Match on PUT supports only *"
                ))
            }
            (None, None) => PutMode::Overwrite,
        };
        let expected_md5 = input.content_md5.as_deref().map(decode_md5).transpose()?;
        let opts = PutOptions {
            meta: object_meta!(input),
            expected_len: len,
            expected_md5,
            mode,
            delete_at: 0,
        };
        let body = body_stream(input.body);
        let rec = self
            .layer
            .put_object(&owner, &input.bucket, &input.key, body, opts)
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(rec.etag)),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        // One version throughout: conditions and range are checked against the record
        // whose (pinned) blocks are then read.
        let obj = self
            .layer
            .open_object(&owner, &input.bucket, &input.key)
            .map_err(|e| self.map_err(e))?;
        let rec = obj.record().clone();
        check_conditions(
            &rec,
            &preconditions(
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                input.if_modified_since.as_ref(),
                input.if_unmodified_since.as_ref(),
            ),
            true,
        )?;
        let (range, parts_count) = selection(&rec, input.range.as_ref(), input.part_number)?;
        let stream = self
            .layer
            .read(obj, range.clone())
            .map_err(|e| self.map_err(e))?;
        let stream = prefetch(stream).await.map_err(|e| self.map_err(e))?;
        let (len, content_range) = match &range {
            Some(r) => (
                r.end - r.start,
                Some(format!("bytes {}-{}/{}", r.start, r.end - 1, rec.size)),
            ),
            None => (rec.size, None),
        };
        let mut out = object_output(&rec);
        out.body = Some(streaming_blob(stream, len));
        out.content_length = Some(len as i64);
        out.content_range = content_range;
        out.parts_count = parts_count;
        Ok(S3Response::new(out))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let rec = self
            .layer
            .head_object(&owner, &input.bucket, &input.key)
            .map_err(|e| self.map_err(e))?;
        check_conditions(
            &rec,
            &preconditions(
                input.if_match.as_ref(),
                input.if_none_match.as_ref(),
                input.if_modified_since.as_ref(),
                input.if_unmodified_since.as_ref(),
            ),
            true,
        )?;
        let (range, parts_count) = selection(&rec, input.range.as_ref(), input.part_number)?;
        let (len, content_range) = match range {
            Some(r) => (
                r.end - r.start,
                Some(format!("bytes {}-{}/{}", r.start, r.end - 1, rec.size)),
            ),
            None => (rec.size, None),
        };
        let g = object_output(&rec);
        Ok(S3Response::new(HeadObjectOutput {
            accept_ranges: g.accept_ranges,
            cache_control: g.cache_control,
            content_disposition: g.content_disposition,
            content_encoding: g.content_encoding,
            content_language: g.content_language,
            content_length: Some(len as i64),
            content_range,
            content_type: g.content_type,
            e_tag: g.e_tag,
            last_modified: g.last_modified,
            metadata: g.metadata,
            expires: g.expires,
            parts_count,
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let if_match = input.if_match.as_ref().map(etag_list);
        self.layer
            .delete_object(&owner, &input.bucket, &input.key, if_match.as_ref())
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        self.layer
            .head_bucket(&owner, &input.bucket)
            .map_err(|e| self.map_err(e))?;
        if input.delete.objects.len() > 1000 {
            return Err(s3_error!(
                MalformedXML,
                "at most 1000 keys per DeleteObjects"
            ));
        }
        let quiet = input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for o in input.delete.objects {
            match self
                .layer
                .delete_object(&owner, &input.bucket, &o.key, None)
                .await
            {
                Ok(_) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(o.key),
                            ..Default::default()
                        });
                    }
                }
                Err(e) => {
                    let e = map_err(e);
                    errors.push(Error {
                        code: Some(e.code().as_str().to_string()),
                        key: Some(o.key),
                        message: e.message().map(str::to_string),
                        version_id: None,
                    });
                }
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        let (sb, sk) = copy_source(&input.copy_source)?;
        let src = self
            .layer
            .open_object(&owner, &sb, &sk)
            .map_err(|e| self.map_err(e))?;
        check_conditions(
            src.record(),
            &preconditions(
                input.copy_source_if_match.as_ref(),
                input.copy_source_if_none_match.as_ref(),
                input.copy_source_if_modified_since.as_ref(),
                input.copy_source_if_unmodified_since.as_ref(),
            ),
            false,
        )?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        if sb == input.bucket && sk == input.key && !replace {
            return Err(s3_error!(
                InvalidRequest,
                "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
            ));
        }
        let meta = replace.then(|| object_meta!(input));
        let rec = self
            .layer
            .copy_object(
                &owner,
                src,
                (&sb, &sk),
                (&input.bucket, &input.key),
                meta,
                0,
            )
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(rec.etag)),
                last_modified: Some(timestamp(rec.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let url = is_url(input.encoding_type.as_ref());
        let (params, r) = self.list_page(
            &owner,
            &input.bucket,
            input.prefix.as_deref(),
            input.delimiter.as_deref(),
            input.marker.clone().filter(|m| !m.is_empty()),
            input.max_keys,
        )?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(params.prefix.clone())),
            marker: Some(enc(input.marker.unwrap_or_default())),
            max_keys: Some(params.max_keys as i32),
            is_truncated: Some(r.truncated),
            next_marker: r.next_start_after.map(enc),
            contents: Some(
                r.objects
                    .iter()
                    .map(|(k, o)| list_entry(enc(k.clone()), o, Some(&owner)))
                    .collect(),
            ),
            common_prefixes: common_prefixes(r.common_prefixes, enc),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let owner = owner(&req)?;
        let input = req.input;
        let url = is_url(input.encoding_type.as_ref());
        let token_after = input
            .continuation_token
            .as_deref()
            .map(decode_token)
            .transpose()?;
        let start_after =
            token_after.or_else(|| input.start_after.clone().filter(|s| !s.is_empty()));
        let (params, r) = self.list_page(
            &owner,
            &input.bucket,
            input.prefix.as_deref(),
            input.delimiter.as_deref(),
            start_after,
            input.max_keys,
        )?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let key_count = (r.objects.len() + r.common_prefixes.len()) as i32;
        // v2 listings name the owner only when asked to.
        let fetch_owner = input.fetch_owner.unwrap_or(false);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(enc(params.prefix.clone())),
            max_keys: Some(params.max_keys as i32),
            key_count: Some(key_count),
            continuation_token: input.continuation_token,
            is_truncated: Some(r.truncated),
            next_continuation_token: r.next_start_after.as_deref().map(encode_token),
            contents: Some(
                r.objects
                    .iter()
                    .map(|(k, o)| list_entry(enc(k.clone()), o, fetch_owner.then_some(&*owner)))
                    .collect(),
            ),
            common_prefixes: common_prefixes(r.common_prefixes, enc),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
            encoding_type: input.encoding_type,
            start_after: input.start_after.map(enc),
            ..Default::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let url = is_url(input.encoding_type.as_ref());
        let (params, r) = self.list_page(
            &owner,
            &input.bucket,
            input.prefix.as_deref(),
            input.delimiter.as_deref(),
            input.key_marker.clone().filter(|m| !m.is_empty()),
            input.max_keys,
        )?;
        let enc = |s: String| if url { url_encode(&s) } else { s };
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(enc(params.prefix.clone())),
            key_marker: input.key_marker.map(enc),
            version_id_marker: input.version_id_marker,
            max_keys: Some(params.max_keys as i32),
            is_truncated: Some(r.truncated),
            next_key_marker: r.next_start_after.clone().map(enc),
            next_version_id_marker: r.next_start_after.as_ref().map(|_| "null".to_string()),
            versions: Some(
                r.objects
                    .iter()
                    .map(|(k, o)| ObjectVersion {
                        e_tag: Some(ETag::Strong(o.etag.clone())),
                        is_latest: Some(true),
                        key: Some(enc(k.clone())),
                        last_modified: Some(timestamp(o.modified_ms)),
                        size: Some(o.size as i64),
                        storage_class: Some(ObjectVersionStorageClass::from_static(
                            ObjectVersionStorageClass::STANDARD,
                        )),
                        version_id: Some("null".into()),
                        owner: Some(Owner {
                            display_name: Some(owner.clone()),
                            id: Some(owner.clone()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            common_prefixes: common_prefixes(r.common_prefixes, enc),
            delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
        let meta = object_meta!(input);
        let id = self
            .layer
            .create_multipart(&owner, &input.bucket, &input.key, meta)
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let len = check_len(input.content_length)?;
        let number = part_number(input.part_number)?;
        let opts = PartOptions {
            expected_len: len,
            expected_md5: input.content_md5.as_deref().map(decode_md5).transpose()?,
        };
        let part = self
            .layer
            .upload_part(
                &owner,
                (&input.bucket, &input.key, &input.upload_id),
                number,
                body_stream(input.body),
                opts,
            )
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(part.etag)),
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let number = part_number(input.part_number)?;
        let (sb, sk) = copy_source(&input.copy_source)?;
        let src = self
            .layer
            .open_object(&owner, &sb, &sk)
            .map_err(|e| self.map_err(e))?;
        check_conditions(
            src.record(),
            &preconditions(
                input.copy_source_if_match.as_ref(),
                input.copy_source_if_none_match.as_ref(),
                input.copy_source_if_modified_since.as_ref(),
                input.copy_source_if_unmodified_since.as_ref(),
            ),
            false,
        )?;
        let range = input
            .copy_source_range
            .as_deref()
            .map(|r| parse_copy_range(r, src.record().size))
            .transpose()?;
        let part = self
            .layer
            .upload_part_copy(
                &owner,
                (&input.bucket, &input.key, &input.upload_id),
                number,
                src,
                range,
            )
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(part.etag)),
                last_modified: Some(timestamp(part.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let parts: Vec<(u32, String)> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                let n = part_number(p.part_number.unwrap_or(0))?;
                let etag = p.e_tag.map(|e| e.value().to_string()).unwrap_or_default();
                Ok((n, etag))
            })
            .collect::<S3Result<_>>()?;
        let mode = match (&input.if_match, &input.if_none_match) {
            (Some(c), None) => PutMode::IfMatch(etag_list(c)),
            (None, Some(c)) if c.is_any() => PutMode::Create,
            (None, None) => PutMode::Overwrite,
            _ => {
                return Err(s3_error!(
                    NotImplemented,
                    "CompleteMultipartUpload supports If-Match or If-None-Match: *"
                ))
            }
        };
        let rec = self
            .layer
            .complete_multipart(
                &owner,
                (&input.bucket, &input.key, &input.upload_id),
                &parts,
                &mode,
            )
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(ETag::Strong(rec.etag)),
            location: Some(format!("/{}/{}", input.bucket, input.key)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        self.layer
            .abort_multipart(&owner, (&input.bucket, &input.key, &input.upload_id))
            .await
            .map_err(|e| self.map_err(e))?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let u = self
            .layer
            .get_upload(&owner, &input.bucket, &input.key, &input.upload_id)
            .map_err(|e| self.map_err(e))?;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let after = input.part_number_marker.unwrap_or(0).max(0) as u32;
        let all: Vec<_> = u.parts.range(after + 1..).collect();
        let page = &all[..all.len().min(max)];
        let truncated = all.len() > page.len();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            max_parts: Some(max as i32),
            is_truncated: Some(truncated),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: page.last().filter(|_| truncated).map(|(n, _)| **n as i32),
            parts: Some(
                page.iter()
                    .map(|(n, p)| Part {
                        e_tag: Some(ETag::Strong(p.etag.clone())),
                        last_modified: Some(timestamp(p.modified_ms)),
                        part_number: Some(**n as i32),
                        size: Some(p.size as i64),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let owner = owner(&req)?;
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        let all: Vec<_> = self
            .layer
            .list_uploads(&owner, &input.bucket, &prefix)
            .map_err(|e| self.map_err(e))?
            .into_iter()
            .filter(|u| {
                key_marker.is_empty()
                    || u.key > key_marker
                    || (u.key == key_marker && !id_marker.is_empty() && u.upload_id > id_marker)
            })
            .collect();
        let truncated = all.len() > max;
        let page = &all[..all.len().min(max)];
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            is_truncated: Some(truncated),
            next_key_marker: page.last().filter(|_| truncated).map(|u| u.key.clone()),
            next_upload_id_marker: page
                .last()
                .filter(|_| truncated)
                .map(|u| u.upload_id.clone()),
            uploads: Some(
                page.iter()
                    .map(|u| MultipartUpload {
                        key: Some(u.key.clone()),
                        upload_id: Some(u.upload_id.clone()),
                        initiated: Some(timestamp(u.initiated_ms)),
                        owner: Some(Owner {
                            display_name: Some(u.owner.clone()),
                            id: Some(u.owner.clone()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }
}

/// Common metadata of GET and HEAD responses.
fn object_output(rec: &ObjectRecord) -> GetObjectOutput {
    GetObjectOutput {
        accept_ranges: Some("bytes".into()),
        cache_control: rec.meta.cache_control.clone(),
        content_disposition: rec.meta.content_disposition.clone(),
        content_encoding: rec.meta.content_encoding.clone(),
        content_language: rec.meta.content_language.clone(),
        content_type: rec.meta.content_type.clone(),
        e_tag: Some(ETag::Strong(rec.etag.clone())),
        last_modified: Some(timestamp(rec.modified_ms)),
        expires: rec
            .meta
            .extra
            .get(EXPIRES)
            .and_then(|d| Timestamp::parse(TimestampFormat::HttpDate, d.trim()).ok()),
        metadata: (!rec.meta.user.is_empty()).then(|| {
            rec.meta
                .user
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<HashMap<_, _>>()
        }),
        ..Default::default()
    }
}

fn list_entry(key: String, o: &ObjectRecord, owner: Option<&str>) -> Object {
    Object {
        e_tag: Some(ETag::Strong(o.etag.clone())),
        key: Some(key),
        last_modified: Some(timestamp(o.modified_ms)),
        size: Some(o.size as i64),
        storage_class: Some(ObjectStorageClass::from_static(
            ObjectStorageClass::STANDARD,
        )),
        owner: owner.map(|owner| Owner {
            display_name: Some(owner.to_string()),
            id: Some(owner.to_string()),
        }),
        ..Default::default()
    }
}

fn common_prefixes(
    prefixes: Vec<String>,
    enc: impl Fn(String) -> String,
) -> Option<Vec<CommonPrefix>> {
    Some(
        prefixes
            .into_iter()
            .map(|p| CommonPrefix {
                prefix: Some(enc(p)),
            })
            .collect(),
    )
}

fn max_keys(v: Option<i32>) -> S3Result<usize> {
    match v {
        None => Ok(1000),
        Some(n) if n < 0 => Err(s3_error!(InvalidArgument, "max-keys must not be negative")),
        Some(n) => Ok((n as usize).min(1000)),
    }
}

fn part_number(n: i32) -> S3Result<u32> {
    if (1..=10_000).contains(&n) {
        Ok(n as u32)
    } else {
        Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        ))
    }
}

fn is_url(e: Option<&EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == EncodingType::URL)
}
