//! Object operations: PutObject, GetObject, HeadObject, DeleteObject,
//! DeleteObjects and CopyObject, with what GET and HEAD share (the part or range
//! read, the response metadata).

use std::collections::HashMap;
use std::ops::Range;

use oram_objects::{CopyOptions, ObjectRecord, PutMode, PutOptions};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result};

use crate::acl::{check_canned, SetsAcl};
use crate::convert::{
    decode_md5, etag_list, map_err, preconditions, prefetch, streaming_blob, timestamp,
};
use crate::objectlock::{lock_headers, lock_request};
use crate::request::{
    body_stream, check_conditions, check_len, copy_source, object_meta, owner, source_owner,
    EXPIRES,
};
use crate::tagging::header_tags;
use crate::versioning::version_of;
use crate::OramS3;

pub(crate) async fn put_object(
    s3: &OramS3,
    req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let len = check_len(input.content_length)?;
    s3.check_public_acl(&owner, &input.bucket, input.requested().is_public())?;
    input.check_acl(&owner)?;
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
        tags: header_tags(input.tagging.as_deref())?,
        lock: lock_request(
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
        )?,
    };
    let body = body_stream(input.body);
    let rec = s3
        .layer
        .put_object(&owner, &input.bucket, &input.key, body, opts)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutObjectOutput {
        version_id: version_of(&rec),
        e_tag: Some(ETag::Strong(rec.etag)),
        ..Default::default()
    }))
}

pub(crate) async fn get_object(
    s3: &OramS3,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    // One version throughout: conditions and range are checked against the record
    // whose (pinned) blocks are then read.
    let obj = s3.open(
        &owner,
        &input.bucket,
        &input.key,
        input.version_id.as_deref(),
    )?;
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
    let stream = s3
        .layer
        .read(obj, range.clone())
        .map_err(|e| s3.map_err(e))?;
    let stream = prefetch(stream).await.map_err(|e| s3.map_err(e))?;
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
    out.tag_count = (!rec.tags.is_empty()).then_some(rec.tags.len() as i32);
    Ok(S3Response::new(out))
}

pub(crate) async fn head_object(
    s3: &OramS3,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let rec = match input.version_id.as_deref() {
        Some(v) => s3
            .layer
            .head_object_version(&owner, &input.bucket, &input.key, v),
        None => s3.layer.head_object(&owner, &input.bucket, &input.key),
    }
    .map_err(|e| s3.map_err(e))?;
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
    let mut resp = S3Response::new(HeadObjectOutput {
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
        version_id: g.version_id,
        parts_count,
        object_lock_mode: g.object_lock_mode,
        object_lock_retain_until_date: g.object_lock_retain_until_date,
        object_lock_legal_hold_status: g.object_lock_legal_hold_status,
        ..Default::default()
    });
    // s3s's HeadObjectOutput has no field for it; GetObject's tag_count is
    // the same header.
    if !rec.tags.is_empty() {
        resp.headers
            .insert("x-amz-tagging-count", rec.tags.len().into());
    }
    Ok(resp)
}

pub(crate) async fn delete_object(
    s3: &OramS3,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let if_match = input.if_match.as_ref().map(etag_list);
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let d = match input.version_id.as_deref() {
        Some(v) => {
            s3.layer
                .delete_object_version(&owner, (&input.bucket, &input.key), v, bypass)
                .await
        }
        None => {
            s3.layer
                .delete_object_versioned(&owner, &input.bucket, &input.key, if_match.as_ref())
                .await
        }
    }
    .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: d.delete_marker.then_some(true),
        version_id: d.version_id,
        ..Default::default()
    }))
}

pub(crate) async fn delete_objects(
    s3: &OramS3,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    s3.layer
        .head_bucket(&owner, &input.bucket)
        .map_err(|e| s3.map_err(e))?;
    if input.delete.objects.len() > 1000 {
        return Err(s3_error!(
            MalformedXML,
            "at most 1000 keys per DeleteObjects"
        ));
    }
    let quiet = input.delete.quiet.unwrap_or(false);
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for o in input.delete.objects {
        let done = match o.version_id.as_deref() {
            Some(v) => {
                s3.layer
                    .delete_object_version(&owner, (&input.bucket, &o.key), v, bypass)
                    .await
            }
            None => {
                s3.layer
                    .delete_object_versioned(&owner, &input.bucket, &o.key, None)
                    .await
            }
        };
        match done {
            Ok(d) => {
                if !quiet {
                    // A delete marker made, or one removed by its id, is named
                    // as DeleteMarkerVersionId (as AWS answers).
                    deleted.push(DeletedObject {
                        key: Some(o.key),
                        delete_marker: d.delete_marker.then_some(true),
                        delete_marker_version_id: d.version_id.filter(|_| d.delete_marker),
                        version_id: o.version_id,
                    });
                }
            }
            Err(e) => {
                let e = map_err(e);
                errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(o.key),
                    message: e.message().map(str::to_string),
                    version_id: o.version_id,
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

pub(crate) async fn copy_object(
    s3: &OramS3,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    let owner = owner(&req)?;
    let src_owner = source_owner(&req)?;
    let input = req.input;
    let public = crate::publicaccess::is_public(
        input.acl.as_ref().map(|a| a.as_str()),
        &[
            input.grant_full_control.as_deref(),
            input.grant_read.as_deref(),
            input.grant_read_acp.as_deref(),
            input.grant_write_acp.as_deref(),
        ],
    );
    s3.check_public_acl(&owner, &input.bucket, public)?;
    check_canned(input.acl.as_ref().map(|a| a.as_str()))?;
    let (sb, sk, sv) = copy_source(&input.copy_source)?;
    let src = s3.open(&src_owner, &sb, &sk, sv.as_deref())?;
    let src_version = version_of(src.record());
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
    if sb == input.bucket && sk == input.key && !replace && sv.is_none() {
        return Err(s3_error!(
            InvalidRequest,
            "This copy request is illegal because it is trying to copy an object to itself without changing the object's metadata, storage class, website redirect location or encryption attributes."
        ));
    }
    // x-amz-tagging-directive: COPY (the default) keeps the source's tags.
    let tags = match &input.tagging_directive {
        Some(d) if d.as_str() == TaggingDirective::REPLACE => {
            Some(header_tags(input.tagging.as_deref())?)
        }
        _ => None,
    };
    let opts = CopyOptions {
        meta: replace.then(|| object_meta!(input)),
        delete_at: 0,
        tags,
        lock: lock_request(
            input.object_lock_mode.as_ref(),
            input.object_lock_retain_until_date.as_ref(),
            input.object_lock_legal_hold_status.as_ref(),
        )?,
    };
    let rec = s3
        .layer
        .copy_object_with(&owner, src, ((&sb, &sk), (&input.bucket, &input.key)), opts)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(CopyObjectOutput {
        copy_object_result: Some(CopyObjectResult {
            e_tag: Some(ETag::Strong(rec.etag.clone())),
            last_modified: Some(timestamp(rec.modified_ms)),
            ..Default::default()
        }),
        copy_source_version_id: src_version,
        version_id: version_of(&rec),
        ..Default::default()
    }))
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

/// Common metadata of GET and HEAD responses.
fn object_output(rec: &ObjectRecord) -> GetObjectOutput {
    let (object_lock_mode, object_lock_retain_until_date, object_lock_legal_hold_status) =
        lock_headers(rec);
    GetObjectOutput {
        object_lock_mode,
        object_lock_retain_until_date,
        object_lock_legal_hold_status,
        accept_ranges: Some("bytes".into()),
        cache_control: rec.meta.cache_control.clone(),
        content_disposition: rec.meta.content_disposition.clone(),
        content_encoding: rec.meta.content_encoding.clone(),
        content_language: rec.meta.content_language.clone(),
        content_type: rec.meta.content_type.clone(),
        e_tag: Some(ETag::Strong(rec.etag.clone())),
        last_modified: Some(timestamp(rec.modified_ms)),
        version_id: version_of(rec),
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
