//! Listings: ListObjects, ListObjectsV2 and ListObjectVersions, over one page of
//! the object layer's listing (of current objects, or of every version).

use oram_objects::{ListParams, ObjectRecord, VersionParams};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::convert::{decode_token, encode_token, owner_element, timestamp, url_encode};
use crate::request::owner;
use crate::OramS3;

impl OramS3 {
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

pub(crate) async fn list_objects(
    s3: &OramS3,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let url = is_url(input.encoding_type.as_ref());
    let (params, r) = s3.list_page(
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

pub(crate) async fn list_objects_v2(
    s3: &OramS3,
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
    let start_after = token_after.or_else(|| input.start_after.clone().filter(|s| !s.is_empty()));
    let (params, r) = s3.list_page(
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

pub(crate) async fn list_object_versions(
    s3: &OramS3,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let url = is_url(input.encoding_type.as_ref());
    let key_marker = input.key_marker.clone().filter(|m| !m.is_empty());
    let version_id_marker = input.version_id_marker.clone().filter(|m| !m.is_empty());
    if version_id_marker.is_some() && key_marker.is_none() {
        return Err(s3_error!(
            InvalidArgument,
            "A version-id marker cannot be specified without a key marker."
        ));
    }
    let params = VersionParams {
        prefix: input.prefix.clone().unwrap_or_default(),
        delimiter: input.delimiter.clone(),
        key_marker,
        version_id_marker,
        max_keys: max_keys(input.max_keys)?,
    };
    let r = s3
        .layer
        .list_object_versions(&owner, &input.bucket, &params)
        .map_err(|e| s3.map_err(e))?;
    let enc = |s: String| if url { url_encode(&s) } else { s };
    let (markers, versions): (Vec<_>, Vec<_>) =
        r.versions.into_iter().partition(|e| e.rec.delete_marker);
    Ok(S3Response::new(ListObjectVersionsOutput {
        name: Some(input.bucket),
        prefix: Some(enc(params.prefix.clone())),
        key_marker: input.key_marker.map(enc),
        version_id_marker: input.version_id_marker,
        max_keys: Some(params.max_keys as i32),
        is_truncated: Some(r.truncated),
        next_key_marker: r.next_key_marker.map(enc),
        next_version_id_marker: r.next_version_id_marker,
        versions: Some(
            versions
                .into_iter()
                .map(|e| ObjectVersion {
                    e_tag: Some(ETag::Strong(e.rec.etag.clone())),
                    is_latest: Some(e.is_latest),
                    key: Some(enc(e.key)),
                    last_modified: Some(timestamp(e.rec.modified_ms)),
                    size: Some(e.rec.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some(e.rec.version_label().to_string()),
                    owner: Some(owner_element(&owner)),
                    ..Default::default()
                })
                .collect(),
        ),
        delete_markers: (!markers.is_empty()).then(|| {
            markers
                .into_iter()
                .map(|e| DeleteMarkerEntry {
                    is_latest: Some(e.is_latest),
                    key: Some(enc(e.key)),
                    last_modified: Some(timestamp(e.rec.modified_ms)),
                    owner: Some(owner_element(&owner)),
                    version_id: Some(e.rec.version_label().to_string()),
                })
                .collect()
        }),
        common_prefixes: common_prefixes(r.common_prefixes, enc),
        delimiter: input.delimiter.filter(|d| !d.is_empty()).map(enc),
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
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
        owner: owner.map(owner_element),
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

fn is_url(e: Option<&EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == EncodingType::URL)
}
