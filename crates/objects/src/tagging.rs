//! Object and bucket tags (S3's object tagging and bucket tagging), with
//! AWS's limits. Tags live in the records of the trusted index: setting them
//! sends no backend request. A version's tags change in place: tagging makes
//! no new version and keeps Last-Modified, as in S3.

use std::collections::BTreeMap;

use crate::records::*;
use crate::{ObjectError, ObjectLayer, Result};

/// Tags of an object or a bucket: key → value.
pub type Tags = BTreeMap<String, String>;

/// Most tags an object may have (S3's limit).
pub const MAX_OBJECT_TAGS: usize = 10;
/// Most tags a bucket may have (S3's limit).
pub const MAX_BUCKET_TAGS: usize = 50;
/// Longest tag key, in Unicode characters.
pub const MAX_TAG_KEY: usize = 128;
/// Longest tag value, in Unicode characters.
pub const MAX_TAG_VALUE: usize = 256;

/// Checks a tag set as given by a client against S3's rules — at most `max`
/// tags, keys of 1 to 128 and values of up to 256 characters, no key twice,
/// none starting with the reserved `aws:` — and returns it as a map. A
/// violation is [`ObjectError::InvalidTag`].
pub fn tag_set(tags: Vec<(String, String)>, max: usize) -> Result<Tags> {
    if tags.len() > max {
        return Err(ObjectError::InvalidTag(format!(
            "at most {max} tags are allowed"
        )));
    }
    let mut out = Tags::new();
    for (k, v) in tags {
        let klen = k.chars().count();
        if klen == 0 || klen > MAX_TAG_KEY {
            return Err(ObjectError::InvalidTag(format!(
                "a tag key must be 1 to {MAX_TAG_KEY} characters"
            )));
        }
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(ObjectError::InvalidTag(format!(
                "a tag value must be at most {MAX_TAG_VALUE} characters"
            )));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(ObjectError::InvalidTag(
                "tag keys starting with aws: are reserved".into(),
            ));
        }
        if out.insert(k, v).is_some() {
            return Err(ObjectError::InvalidTag(
                "cannot provide multiple tags with the same key".into(),
            ));
        }
    }
    Ok(out)
}

impl ObjectLayer {
    /// Replaces the tags of `bucket/key` — its current version, or version
    /// `vid` — (empty: removes them); returns the record tagged. A delete
    /// marker cannot be tagged ([`ObjectError::DeleteMarker`]).
    pub async fn set_object_tags(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        vid: Option<&str>,
        tags: Tags,
    ) -> Result<ObjectRecord> {
        self.shared
            .commit(|m| {
                m.owned_bucket(owner, bucket)?;
                let (at, mut rec) = m.addressed_version((owner, bucket, key), vid)?;
                rec.tags = tags;
                m.kv.put(&at, encode(&rec));
                Ok(rec)
            })
            .await
    }

    /// Replaces the tags of bucket `name` (empty: removes them).
    pub async fn set_bucket_tags(&self, owner: &str, name: &str, tags: Tags) -> Result<()> {
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                b.tags = tags;
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(())
            })
            .await
    }
}
