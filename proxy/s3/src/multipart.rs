//! Multipart uploads: CreateMultipartUpload, UploadPart, UploadPartCopy,
//! CompleteMultipartUpload, AbortMultipartUpload, ListParts and
//! ListMultipartUploads.

use std::ops::Range;

use oram_objects::{PartOptions, PutMode};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::acl::check_canned;
use crate::convert::{decode_md5, etag_list, owner_element, preconditions, timestamp};
use crate::request::{
    body_stream, check_conditions, check_len, copy_source, object_meta, owner, source_owner,
};
use crate::OramS3;

pub(crate) async fn create_multipart_upload(
    s3: &OramS3,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let owner = owner(&req)?;
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
    let tags = crate::tagging::header_tags(input.tagging.as_deref())?;
    let meta = object_meta!(input);
    let lock = crate::objectlock::lock_request(
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let id = s3
        .layer
        .create_multipart_locked(&owner, (&input.bucket, &input.key), meta, tags, lock)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(CreateMultipartUploadOutput {
        bucket: Some(input.bucket),
        key: Some(input.key),
        upload_id: Some(id),
        ..Default::default()
    }))
}

pub(crate) async fn upload_part(
    s3: &OramS3,
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
    let part = s3
        .layer
        .upload_part(
            &owner,
            (&input.bucket, &input.key, &input.upload_id),
            number,
            body_stream(input.body),
            opts,
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(UploadPartOutput {
        e_tag: Some(ETag::Strong(part.etag)),
        ..Default::default()
    }))
}

pub(crate) async fn upload_part_copy(
    s3: &OramS3,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let owner = owner(&req)?;
    let src_owner = source_owner(&req)?;
    let input = req.input;
    let number = part_number(input.part_number)?;
    let (sb, sk, sv) = copy_source(&input.copy_source)?;
    let src = s3.open(&src_owner, &sb, &sk, sv.as_deref())?;
    let src_version = crate::versioning::version_of(src.record());
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
    let part = s3
        .layer
        .upload_part_copy(
            &owner,
            (&input.bucket, &input.key, &input.upload_id),
            number,
            src,
            range,
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(ETag::Strong(part.etag)),
            last_modified: Some(timestamp(part.modified_ms)),
            ..Default::default()
        }),
        copy_source_version_id: src_version,
        ..Default::default()
    }))
}

pub(crate) async fn complete_multipart_upload(
    s3: &OramS3,
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
    let rec = s3
        .layer
        .complete_multipart(
            &owner,
            (&input.bucket, &input.key, &input.upload_id),
            &parts,
            &mode,
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(CompleteMultipartUploadOutput {
        bucket: Some(input.bucket.clone()),
        key: Some(input.key.clone()),
        version_id: crate::versioning::version_of(&rec),
        e_tag: Some(ETag::Strong(rec.etag)),
        location: Some(format!("/{}/{}", input.bucket, input.key)),
        ..Default::default()
    }))
}

pub(crate) async fn abort_multipart_upload(
    s3: &OramS3,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    s3.layer
        .abort_multipart(&owner, (&input.bucket, &input.key, &input.upload_id))
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

pub(crate) async fn list_parts(
    s3: &OramS3,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let u = s3
        .layer
        .get_upload(&owner, &input.bucket, &input.key, &input.upload_id)
        .map_err(|e| s3.map_err(e))?;
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

pub(crate) async fn list_multipart_uploads(
    s3: &OramS3,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let prefix = input.prefix.clone().unwrap_or_default();
    let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let id_marker = input.upload_id_marker.clone().unwrap_or_default();
    let all: Vec<_> = s3
        .layer
        .list_uploads(&owner, &input.bucket, &prefix)
        .map_err(|e| s3.map_err(e))?
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
                    owner: Some(owner_element(&u.owner)),
                    ..Default::default()
                })
                .collect(),
        ),
        ..Default::default()
    }))
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
