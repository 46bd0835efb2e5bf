//! Tagging: Put/Get/DeleteObjectTagging (of the current version or one named),
//! Put/Get/DeleteBucketTagging, and the `x-amz-tagging` header of uploads.

use oram_objects::{tag_set, Tags, MAX_BUCKET_TAGS, MAX_OBJECT_TAGS};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

use crate::request::owner;
use crate::versioning::version_of;
use crate::OramS3;

/// The tags of an `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded),
/// checked against S3's limits for objects.
pub(crate) fn header_tags(h: Option<&str>) -> S3Result<Tags> {
    let Some(h) = h.filter(|h| !h.is_empty()) else {
        return Ok(Tags::new());
    };
    let decode = |s: &str| -> S3Result<String> {
        percent_encoding::percent_decode_str(&s.replace('+', " "))
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not valid UTF-8"))
    };
    let mut pairs = Vec::new();
    for pair in h.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        pairs.push((decode(k)?, decode(v)?));
    }
    tag_set(pairs, MAX_OBJECT_TAGS).map_err(crate::convert::map_err)
}

/// The tags of a `Tagging` body, checked against S3's limits (`max` tags).
fn body_tags(t: Tagging, max: usize) -> S3Result<Tags> {
    let pairs = t
        .tag_set
        .into_iter()
        .map(|t| match (t.key, t.value) {
            (Some(k), v) => Ok((k, v.unwrap_or_default())),
            (None, _) => Err(s3_error!(MalformedXML, "a Tag without a Key")),
        })
        .collect::<S3Result<Vec<_>>>()?;
    tag_set(pairs, max).map_err(crate::convert::map_err)
}

/// A tag set as S3 answers it.
fn tag_list(tags: &Tags) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

pub(crate) async fn put_object_tagging(
    s3: &OramS3,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let tags = body_tags(input.tagging, MAX_OBJECT_TAGS)?;
    let rec = s3
        .layer
        .set_object_tags(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
            tags,
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: version_of(&rec),
    }))
}

pub(crate) async fn get_object_tagging(
    s3: &OramS3,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let rec = match input.version_id.as_deref() {
        Some(v) => s3
            .layer
            .head_object_version(&owner, &input.bucket, &input.key, v),
        None => s3.layer.head_object(&owner, &input.bucket, &input.key),
    }
    .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_list(&rec.tags),
        version_id: version_of(&rec),
    }))
}

pub(crate) async fn delete_object_tagging(
    s3: &OramS3,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let rec = s3
        .layer
        .set_object_tags(
            &owner,
            (&input.bucket, &input.key),
            input.version_id.as_deref(),
            Tags::new(),
        )
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: version_of(&rec),
    }))
}

pub(crate) async fn put_bucket_tagging(
    s3: &OramS3,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let owner = owner(&req)?;
    let input = req.input;
    let tags = body_tags(input.tagging, MAX_BUCKET_TAGS)?;
    s3.layer
        .set_bucket_tags(&owner, &input.bucket, tags)
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(PutBucketTaggingOutput::default()))
}

pub(crate) async fn get_bucket_tagging(
    s3: &OramS3,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let owner = owner(&req)?;
    let b = s3
        .layer
        .head_bucket(&owner, &req.input.bucket)
        .map_err(|e| s3.map_err(e))?;
    if b.tags.is_empty() {
        return Err(s3_error!(NoSuchTagSet, "The TagSet does not exist"));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_list(&b.tags),
    }))
}

pub(crate) async fn delete_bucket_tagging(
    s3: &OramS3,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let owner = owner(&req)?;
    s3.layer
        .set_bucket_tags(&owner, &req.input.bucket, Tags::new())
        .await
        .map_err(|e| s3.map_err(e))?;
    Ok(S3Response::new(DeleteBucketTaggingOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagging_headers_decode_and_keep_the_limits() {
        let t = header_tags(Some("a=1&b%20c=x%2By&empty=")).unwrap();
        assert_eq!(t["a"], "1");
        assert_eq!(t["b c"], "x+y");
        assert_eq!(t["empty"], "");
        assert!(header_tags(None).unwrap().is_empty());
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        let e = header_tags(Some(&eleven.join("&"))).unwrap_err();
        assert_eq!(e.code().as_str(), "InvalidTag");
        let long_key = format!("{}=v", "k".repeat(129));
        assert_eq!(
            header_tags(Some(&long_key)).unwrap_err().code().as_str(),
            "InvalidTag"
        );
        let long_value = format!("k={}", "v".repeat(257));
        assert_eq!(
            header_tags(Some(&long_value)).unwrap_err().code().as_str(),
            "InvalidTag"
        );
        assert!(header_tags(Some(&format!("k={}", "v".repeat(256)))).is_ok());
        assert_eq!(
            header_tags(Some("a=1&a=2")).unwrap_err().code().as_str(),
            "InvalidTag"
        );
    }
}
