//! The S3 front-end: implements [`s3s::S3`] over the [`ObjectLayer`].
//!
//! s3s does the protocol work (routing, XML, SigV4 including streaming chunked
//! payloads, UNSIGNED-PAYLOAD and presigned URLs); this crate maps each operation
//! onto the object layer and object-layer errors onto S3 error codes. No s3s type
//! leaves this crate except the service built by [`build_service`].
//!
//! The authenticated access key is the account: a bucket belongs to the access key
//! that created it. Anonymous requests are refused. Another account reaches a
//! bucket only where the bucket's policy allows it (`access`).
//!
//! **Layout.** s3s's [`S3`] trait is one impl block with one method per
//! operation. It stays in this file as the table of the operations served
//! (every other one answers s3s's default, NotImplemented): each method hands its
//! request to a free function of the same name, `(s3: &OramS3, req) ->
//! S3Result<…>`, in the module of its concern, next to the helpers only that
//! concern uses. One table keeps the trait's signatures in one place and shows at
//! a glance what is implemented; free functions, unlike inherent methods of the
//! same names, cannot be mistaken for the trait's.
//! - `buckets`: ListBuckets, CreateBucket, DeleteBucket, HeadBucket,
//!   GetBucketLocation;
//! - `versioning`: Put/GetBucketVersioning, version ids in answers, reads by
//!   version;
//! - `objects`: PutObject, GetObject, HeadObject, DeleteObject(s), CopyObject
//!   (each with a `versionId` where S3 has one);
//! - `tagging`: Put/Get/DeleteObjectTagging, Put/Get/DeleteBucketTagging, the
//!   `x-amz-tagging` header;
//! - `objectlock`: Put/GetObjectLockConfiguration, Put/GetObjectRetention,
//!   Put/GetObjectLegalHold, the `x-amz-object-lock-*` headers;
//! - `lifecycle`: Put/GetBucketLifecycleConfiguration, DeleteBucketLifecycle
//!   (AbortIncompleteMultipartUpload rules only);
//! - `publicaccess`: Put/Get/DeletePublicAccessBlock, and public ACLs refused
//!   where the bucket blocks them;
//! - `bucketpolicy`: Put/Get/DeleteBucketPolicy, GetBucketPolicyStatus;
//!   `policy`: the policy language (parsing, evaluation, the table of
//!   operations to actions); `access`: policies applied to every request
//!   (s3s's access hook);
//! - `listing`: ListObjects, ListObjectsV2, ListObjectVersions;
//! - `multipart`: the seven multipart-upload operations;
//! - `acl`: the ACL policy (the owner's full control only), its four
//!   operations, and the ACL checks of uploads;
//! - `request`: what handlers read from a request (the account, the body and
//!   its length, conditions, the copy source, the client metadata);
//! - `convert`: object-layer errors to S3 errors, times, ETags, bodies, listing
//!   encodings;
//! - `front`: request ids and legacy region names, around s3s;
//! - `vhost`: virtual-hosted–style addressing under a configured domain.

mod access;
mod acl;
mod bucketpolicy;
mod buckets;
mod convert;
mod front;
mod lifecycle;
mod listing;
mod messages;
mod multipart;
mod objectlock;
mod objects;
mod policy;
mod publicaccess;
mod request;
mod tagging;
mod versioning;
mod vhost;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use oram_objects::{ObjectError, ObjectLayer};
use s3s::auth::{S3Auth, SecretKey};
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result, S3};

pub use buckets::{CAPACITY_HEADER, FREE_HEADER};
use convert::map_err;
pub use front::{legacy_region, S3Front};
pub use request::ClientConn;
pub use vhost::{domain_problem, virtual_host_bucket};

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

/// The users the S3 API serves, replaceable while it serves ([`UserMap::replace`]):
/// the SigV4 check and the legacy-region re-signing ([`S3Front`]) both read it.
/// Cheap to clone (clones share the map).
///
/// A request looks its access key up once, when its signature is checked: a
/// request authenticated before a replacement finishes with the secret it was
/// checked with (a streamed upload's chunk signatures included); the next
/// request of a removed user is refused with `InvalidAccessKeyId`, and a rotated
/// user's old secret no longer verifies.
#[derive(Clone, Default)]
pub struct UserMap {
    /// Access key → secret key. The lock guards the pointer to the current map
    /// only: it is held to clone the `Arc` or to swap in a new map, never
    /// across an await or while a signature is computed.
    current: Arc<RwLock<Arc<HashMap<String, String>>>>,
}

impl UserMap {
    /// A map serving `users`.
    pub fn new(users: &[S3User]) -> Self {
        let m = Self::default();
        m.replace(users);
        m
    }

    /// Serves `users` from now on, in place of the users served so far.
    pub fn replace(&self, users: &[S3User]) {
        let map: HashMap<String, String> = users
            .iter()
            .map(|u| (u.access_key.clone(), u.secret_key.clone()))
            .collect();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(map);
    }

    /// The secret key of `access_key`, if it is served.
    pub fn secret(&self, access_key: &str) -> Option<String> {
        let map = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        map.get(access_key).cloned()
    }

    /// The access keys served, sorted.
    pub fn access_keys(&self) -> Vec<String> {
        let map = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut keys: Vec<String> = map.keys().cloned().collect();
        keys.sort();
        keys
    }
}

/// SigV4's secret lookup over the [`UserMap`], answering an unknown access key as
/// S3 does.
struct Users(UserMap);

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        self.0
            .secret(access_key)
            .map(SecretKey::from)
            .ok_or_else(|| {
                s3_error!(
                    InvalidAccessKeyId,
                    "The AWS Access Key Id you provided does not exist in our records."
                )
            })
    }
}

/// Builds the HTTP service: S3 over `layer`, SigV4 with the users of `users`
/// (as they are when each request is checked), anonymous refused, request ids
/// on every answer and legacy region names accepted (see [`S3Front`]). With a
/// `domain` (not empty; see [`domain_problem`]), a request for host
/// `<bucket>.<domain>` addresses that bucket (virtual-hosted–style
/// addressing); path-style requests are served either way. Bucket policies
/// are applied to every request; a request's [`ClientConn`] extension gives
/// them its peer address and TLS-ness.
pub fn build_service(layer: ObjectLayer, users: UserMap, region: &str, domain: &str) -> S3Front {
    let mut b = S3ServiceBuilder::new(OramS3::new(layer.clone(), region));
    b.set_auth(Users(users.clone()));
    b.set_access(access::PolicyCheck::new(layer.clone()));
    if !domain.is_empty() {
        b.set_host(vhost::VirtualHosts::new(domain));
    }
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
    S3Front::new(b.build(), users)
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
}

#[async_trait::async_trait]
impl S3 for OramS3 {
    // Buckets (`buckets`).
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        buckets::list_buckets(self, req).await
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        buckets::create_bucket(self, req).await
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        buckets::delete_bucket(self, req).await
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        buckets::head_bucket(self, req).await
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        buckets::get_bucket_location(self, req).await
    }

    // Versioning (`versioning`).
    async fn get_bucket_versioning(
        &self,
        req: S3Request<GetBucketVersioningInput>,
    ) -> S3Result<S3Response<GetBucketVersioningOutput>> {
        versioning::get_bucket_versioning(self, req).await
    }

    async fn put_bucket_versioning(
        &self,
        req: S3Request<PutBucketVersioningInput>,
    ) -> S3Result<S3Response<PutBucketVersioningOutput>> {
        versioning::put_bucket_versioning(self, req).await
    }

    // Tagging (`tagging`).
    async fn put_object_tagging(
        &self,
        req: S3Request<PutObjectTaggingInput>,
    ) -> S3Result<S3Response<PutObjectTaggingOutput>> {
        tagging::put_object_tagging(self, req).await
    }

    async fn get_object_tagging(
        &self,
        req: S3Request<GetObjectTaggingInput>,
    ) -> S3Result<S3Response<GetObjectTaggingOutput>> {
        tagging::get_object_tagging(self, req).await
    }

    async fn delete_object_tagging(
        &self,
        req: S3Request<DeleteObjectTaggingInput>,
    ) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
        tagging::delete_object_tagging(self, req).await
    }

    async fn put_bucket_tagging(
        &self,
        req: S3Request<PutBucketTaggingInput>,
    ) -> S3Result<S3Response<PutBucketTaggingOutput>> {
        tagging::put_bucket_tagging(self, req).await
    }

    async fn get_bucket_tagging(
        &self,
        req: S3Request<GetBucketTaggingInput>,
    ) -> S3Result<S3Response<GetBucketTaggingOutput>> {
        tagging::get_bucket_tagging(self, req).await
    }

    async fn delete_bucket_tagging(
        &self,
        req: S3Request<DeleteBucketTaggingInput>,
    ) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
        tagging::delete_bucket_tagging(self, req).await
    }

    // Object lock (`objectlock`).
    async fn put_object_lock_configuration(
        &self,
        req: S3Request<PutObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
        objectlock::put_object_lock_configuration(self, req).await
    }

    async fn get_object_lock_configuration(
        &self,
        req: S3Request<GetObjectLockConfigurationInput>,
    ) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
        objectlock::get_object_lock_configuration(self, req).await
    }

    async fn put_object_retention(
        &self,
        req: S3Request<PutObjectRetentionInput>,
    ) -> S3Result<S3Response<PutObjectRetentionOutput>> {
        objectlock::put_object_retention(self, req).await
    }

    async fn get_object_retention(
        &self,
        req: S3Request<GetObjectRetentionInput>,
    ) -> S3Result<S3Response<GetObjectRetentionOutput>> {
        objectlock::get_object_retention(self, req).await
    }

    async fn put_object_legal_hold(
        &self,
        req: S3Request<PutObjectLegalHoldInput>,
    ) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
        objectlock::put_object_legal_hold(self, req).await
    }

    async fn get_object_legal_hold(
        &self,
        req: S3Request<GetObjectLegalHoldInput>,
    ) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
        objectlock::get_object_legal_hold(self, req).await
    }

    // Public access block (`publicaccess`).
    async fn put_public_access_block(
        &self,
        req: S3Request<PutPublicAccessBlockInput>,
    ) -> S3Result<S3Response<PutPublicAccessBlockOutput>> {
        publicaccess::put_public_access_block(self, req).await
    }

    async fn get_public_access_block(
        &self,
        req: S3Request<GetPublicAccessBlockInput>,
    ) -> S3Result<S3Response<GetPublicAccessBlockOutput>> {
        publicaccess::get_public_access_block(self, req).await
    }

    async fn delete_public_access_block(
        &self,
        req: S3Request<DeletePublicAccessBlockInput>,
    ) -> S3Result<S3Response<DeletePublicAccessBlockOutput>> {
        publicaccess::delete_public_access_block(self, req).await
    }

    // Bucket policies (`bucketpolicy`).
    async fn put_bucket_policy(
        &self,
        req: S3Request<PutBucketPolicyInput>,
    ) -> S3Result<S3Response<PutBucketPolicyOutput>> {
        bucketpolicy::put_bucket_policy(self, req).await
    }

    async fn get_bucket_policy(
        &self,
        req: S3Request<GetBucketPolicyInput>,
    ) -> S3Result<S3Response<GetBucketPolicyOutput>> {
        bucketpolicy::get_bucket_policy(self, req).await
    }

    async fn delete_bucket_policy(
        &self,
        req: S3Request<DeleteBucketPolicyInput>,
    ) -> S3Result<S3Response<DeleteBucketPolicyOutput>> {
        bucketpolicy::delete_bucket_policy(self, req).await
    }

    async fn get_bucket_policy_status(
        &self,
        req: S3Request<GetBucketPolicyStatusInput>,
    ) -> S3Result<S3Response<GetBucketPolicyStatusOutput>> {
        bucketpolicy::get_bucket_policy_status(self, req).await
    }

    // Lifecycle (`lifecycle`).
    async fn put_bucket_lifecycle_configuration(
        &self,
        req: S3Request<PutBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
        lifecycle::put_bucket_lifecycle_configuration(self, req).await
    }

    async fn get_bucket_lifecycle_configuration(
        &self,
        req: S3Request<GetBucketLifecycleConfigurationInput>,
    ) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
        lifecycle::get_bucket_lifecycle_configuration(self, req).await
    }

    async fn delete_bucket_lifecycle(
        &self,
        req: S3Request<DeleteBucketLifecycleInput>,
    ) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
        lifecycle::delete_bucket_lifecycle(self, req).await
    }

    // ACLs (`acl`).
    async fn get_bucket_acl(
        &self,
        req: S3Request<GetBucketAclInput>,
    ) -> S3Result<S3Response<GetBucketAclOutput>> {
        acl::get_bucket_acl(self, req).await
    }

    async fn put_bucket_acl(
        &self,
        req: S3Request<PutBucketAclInput>,
    ) -> S3Result<S3Response<PutBucketAclOutput>> {
        acl::put_bucket_acl(self, req).await
    }

    async fn get_object_acl(
        &self,
        req: S3Request<GetObjectAclInput>,
    ) -> S3Result<S3Response<GetObjectAclOutput>> {
        acl::get_object_acl(self, req).await
    }

    async fn put_object_acl(
        &self,
        req: S3Request<PutObjectAclInput>,
    ) -> S3Result<S3Response<PutObjectAclOutput>> {
        acl::put_object_acl(self, req).await
    }

    // Objects (`objects`).
    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        objects::put_object(self, req).await
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        objects::get_object(self, req).await
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        objects::head_object(self, req).await
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        objects::delete_object(self, req).await
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        objects::delete_objects(self, req).await
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        objects::copy_object(self, req).await
    }

    // Listings (`listing`).
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        listing::list_objects(self, req).await
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        listing::list_objects_v2(self, req).await
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        listing::list_object_versions(self, req).await
    }

    // Multipart uploads (`multipart`).
    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        multipart::create_multipart_upload(self, req).await
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        multipart::upload_part(self, req).await
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        multipart::upload_part_copy(self, req).await
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        multipart::complete_multipart_upload(self, req).await
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        multipart::abort_multipart_upload(self, req).await
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        multipart::list_parts(self, req).await
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        multipart::list_multipart_uploads(self, req).await
    }
}
