//! Bucket policies applied to requests: s3s's access hook ([`S3Access`]),
//! run on every authenticated request after its signature is checked and
//! before its body is read.
//!
//! For a request to a bucket that has a policy, the operation's action
//! ([`crate::policy::actions`]) and resource are evaluated
//! ([`crate::policy::eval`]) for the caller:
//! - a matching `Deny` refuses the request (`403 AccessDenied`), the bucket's
//!   owner included — except Get/Put/DeleteBucketPolicy and
//!   GetBucketPolicyStatus, which the owner may always do, so that no policy
//!   locks its owner out;
//! - a caller who is not the owner, allowed by a matching `Allow`, acts as the
//!   owner on that bucket ([`ActAs`]: the handlers reach the object layer as
//!   the owner, so what the caller writes belongs to the bucket's owner, as
//!   with S3's "bucket owner enforced" ownership). Operations only an owner
//!   may do (the policy's and public access block's, CreateBucket) are never
//!   granted;
//! - otherwise nothing changes: the owner may, anyone else is refused by the
//!   handler as before (a bucket of another account is `AccessDenied`).
//!
//! DeleteObjects is evaluated for each key once its body is read (one denied
//! key refuses the whole request; a non-owner must be allowed every key);
//! CopyObject and UploadPartCopy also ask `s3:GetObject` of their source's
//! bucket ([`ActAsSource`]). With `RestrictPublicBuckets` in the bucket's
//! public access block, a public statement grants nothing to other accounts.
//!
//! PutBucketPolicy's body is refused here, before it is read, when it declares
//! more than 20 KiB or no length at all.

use oram_objects::ObjectLayer;
use s3s::access::{S3Access, S3AccessContext};
use s3s::dto::*;
use s3s::path::S3Path;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Result};

use crate::convert::map_err;
use crate::policy::actions::{self, Scope, BYPASS_GOVERNANCE};
use crate::policy::eval::{Decision, Request};
use crate::policy::{Policy, MAX_POLICY_BYTES};
use crate::request::{ActAs, ActAsSource, ClientConn};

/// The access hook: bucket policies over the object layer's buckets.
pub(crate) struct PolicyCheck {
    layer: ObjectLayer,
}

impl PolicyCheck {
    /// Checks requests to the buckets of `layer`.
    pub(crate) fn new(layer: ObjectLayer) -> Self {
        Self { layer }
    }
}

/// What a request asks of one bucket.
struct Asked<'a> {
    bucket: &'a str,
    /// The object, for an object-level action.
    key: Option<&'a str>,
    /// The actions it needs (all of them), with their scope.
    actions: Vec<(&'static str, Scope)>,
    prefix: Option<String>,
    acl: Option<String>,
}

/// The caller's access key and connection.
#[derive(Clone, Copy)]
struct Caller<'a> {
    user: &'a str,
    conn: Option<ClientConn>,
}

fn denied() -> S3Error {
    s3_error!(AccessDenied, "Access Denied")
}

impl PolicyCheck {
    /// What `policy` of bucket `asked.bucket` says for `caller`: `Ok(None)`:
    /// go on as the caller; `Ok(Some(owner))`: act as the bucket's owner;
    /// `Err`: refused.
    fn decide(&self, caller: Caller<'_>, asked: &Asked<'_>) -> S3Result<Option<String>> {
        let Some(rec) = self
            .layer
            .bucket_addressed(caller.user, asked.bucket)
            .map_err(map_err)?
        else {
            return Ok(None);
        };
        let Some(doc) = rec.policy.as_deref() else {
            return Ok(None);
        };
        let is_owner = rec.owner == caller.user;
        let lockout_safe = |a: &str| {
            matches!(
                a,
                "s3:GetBucketPolicy"
                    | "s3:PutBucketPolicy"
                    | "s3:DeleteBucketPolicy"
                    | "s3:GetBucketPolicyStatus"
            )
        };
        if is_owner && asked.actions.iter().all(|(a, _)| lockout_safe(a)) {
            return Ok(None);
        }
        let policy = match Policy::parse(doc, asked.bucket) {
            Ok(p) => p,
            Err(e) => {
                // Stored policies were checked; one that no longer parses
                // grants nothing and denies nothing.
                tracing::warn!(bucket = asked.bucket, "stored bucket policy ignored: {e}");
                return Ok(None);
            }
        };
        let restrict = !is_owner
            && rec
                .public_access_block
                .is_some_and(|p| p.restrict_public_buckets)
            && policy.is_public();
        let resource = match asked.key {
            Some(k) => format!("arn:aws:s3:::{}/{k}", asked.bucket),
            None => format!("arn:aws:s3:::{}", asked.bucket),
        };
        let mut all_allowed = true;
        for &(action, scope) in &asked.actions {
            let req = Request {
                user: caller.user,
                action,
                resource: &resource,
                secure: caller.conn.map(|c| c.tls),
                source_ip: caller.conn.map(|c| c.addr),
                prefix: asked.prefix.as_deref(),
                acl: asked.acl.as_deref(),
            };
            match policy.decide(&req, restrict) {
                Decision::Deny => return Err(denied()),
                Decision::Allow if scope != Scope::OwnerOnly => {}
                _ => all_allowed = false,
            }
        }
        Ok((!is_owner && all_allowed).then(|| rec.owner.clone()))
    }

    /// [`PolicyCheck::decide`] for a copy's source (`s3:GetObject`, or
    /// `s3:GetObjectVersion` of a named version), recorded as [`ActAsSource`].
    fn check_copy_source(
        &self,
        caller: Caller<'_>,
        source: &CopySource,
        ext: &mut http::Extensions,
    ) -> S3Result<()> {
        let CopySource::Bucket {
            bucket,
            key,
            version_id,
        } = source
        else {
            return Ok(());
        };
        let action = if version_id.is_some() {
            "s3:GetObjectVersion"
        } else {
            "s3:GetObject"
        };
        let asked = Asked {
            bucket,
            key: Some(key),
            actions: vec![(action, Scope::Object)],
            prefix: None,
            acl: None,
        };
        if let Some(owner) = self.decide(caller, &asked)? {
            ext.insert(ActAsSource(owner));
        }
        Ok(())
    }
}

fn caller_of<T>(req: &S3Request<T>) -> S3Result<Caller<'_>> {
    let user = req
        .credentials
        .as_ref()
        .map(|c| c.access_key.as_str())
        .ok_or_else(denied)?;
    Ok(Caller {
        user,
        conn: req.extensions.get::<ClientConn>().copied(),
    })
}

/// The decoded value of query parameter `name` (`application/x-www-form-urlencoded`).
fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        (decode(k) == name).then(|| decode(v))
    })
}

/// Refuses a PutBucketPolicy whose body would be larger than a policy may be,
/// or of undeclared length, before any of it is read.
fn check_policy_length(headers: &http::HeaderMap) -> S3Result<()> {
    let declared = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let len = declared("x-amz-decoded-content-length").or_else(|| declared("content-length"));
    match len {
        None => {
            let mut e = S3Error::with_message(
                S3ErrorCode::Custom("MissingContentLength".into()),
                "You must provide the Content-Length HTTP header.",
            );
            e.set_status_code(http::StatusCode::LENGTH_REQUIRED);
            Err(e)
        }
        Some(n) if n > MAX_POLICY_BYTES as u64 => Err(crate::bucketpolicy::malformed(
            "Policies must be no more than 20 KB",
        )),
        Some(_) => Ok(()),
    }
}

#[async_trait::async_trait]
impl S3Access for PolicyCheck {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(user) = cx.credentials().map(|c| c.access_key.clone()) else {
            return Err(s3_error!(AccessDenied, "Signature is required"));
        };
        let op = cx.s3_op().name();
        if op == "PutBucketPolicy" {
            check_policy_length(cx.headers())?;
        }
        let (bucket, key) = match cx.s3_path() {
            S3Path::Root => return Ok(()),
            S3Path::Bucket { bucket } => (bucket.to_string(), None),
            S3Path::Object { bucket, key } => (bucket.to_string(), Some(key.to_string())),
        };
        let versioned = query_param(cx.uri(), "versionId").is_some();
        let Some((action, scope)) = actions::of(op, versioned) else {
            // Not served (s3s answers NotImplemented), or DeleteObjects
            // (checked per key below).
            return Ok(());
        };
        let mut actions = vec![(action, scope)];
        let bypass = cx
            .headers()
            .get("x-amz-bypass-governance-retention")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if bypass && matches!(op, "DeleteObject" | "PutObjectRetention") {
            actions.push((BYPASS_GOVERNANCE, Scope::Object));
        }
        let listing = matches!(op, "ListObjects" | "ListObjectsV2" | "ListObjectVersions");
        let asked = Asked {
            bucket: &bucket,
            key: if scope == Scope::Object {
                key.as_deref()
            } else {
                None
            },
            actions,
            prefix: listing.then(|| query_param(cx.uri(), "prefix")).flatten(),
            acl: cx
                .headers()
                .get("x-amz-acl")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        };
        let caller = Caller {
            user: &user,
            conn: cx.extensions_mut().get::<ClientConn>().copied(),
        };
        if let Some(owner) = self.decide(caller, &asked)? {
            cx.extensions_mut().insert(ActAs(owner));
        }
        Ok(())
    }

    async fn delete_objects(&self, req: &mut S3Request<DeleteObjectsInput>) -> S3Result<()> {
        let caller = caller_of(req)?;
        let bypass = req.input.bypass_governance_retention == Some(true);
        let mut owner: Option<Option<String>> = None;
        for o in &req.input.delete.objects {
            let action = if o.version_id.is_some() {
                "s3:DeleteObjectVersion"
            } else {
                "s3:DeleteObject"
            };
            let mut actions = vec![(action, Scope::Object)];
            if bypass {
                actions.push((BYPASS_GOVERNANCE, Scope::Object));
            }
            let asked = Asked {
                bucket: &req.input.bucket,
                key: Some(&o.key),
                actions,
                prefix: None,
                acl: None,
            };
            let verdict = self.decide(caller, &asked)?;
            // Acting as the owner needs every key allowed.
            owner = Some(match owner {
                None => verdict,
                Some(prev) => prev.filter(|p| verdict.as_ref() == Some(p)),
            });
        }
        if let Some(Some(owner)) = owner {
            req.extensions.insert(ActAs(owner));
        }
        Ok(())
    }

    async fn copy_object(&self, req: &mut S3Request<CopyObjectInput>) -> S3Result<()> {
        let caller = caller_of(req)?;
        let mut ext = http::Extensions::new();
        self.check_copy_source(caller, &req.input.copy_source, &mut ext)?;
        req.extensions.extend(ext);
        Ok(())
    }

    async fn upload_part_copy(&self, req: &mut S3Request<UploadPartCopyInput>) -> S3Result<()> {
        let caller = caller_of(req)?;
        let mut ext = http::Extensions::new();
        self.check_copy_source(caller, &req.input.copy_source, &mut ext)?;
        req.extensions.extend(ext);
        Ok(())
    }
}
