//! Bucket lifecycle configurations and the sweep that applies them.
//!
//! A bucket's configuration is a list of [`LifecycleRule`]s kept in its
//! [`BucketRecord`] (so the S3 and Swift front-ends share it). This module
//! aborts multipart uploads a number of days after they started; the actions
//! on objects (expiring current versions, noncurrent versions and lone delete
//! markers) are in `expiration.rs`. Front-ends refuse rules with actions the
//! layer cannot apply (transitions).
//!
//! **Which objects a rule selects** ([`LifecycleRule::selects`]): those whose
//! key starts with its prefix and, version by version, that carry every tag of
//! its filter (exact key and value; more tags on the version do not matter)
//! and whose size is strictly above `size_greater_than` and strictly below
//! `size_less_than`, as S3's `Filter` (`Prefix`, `Tag`,
//! `ObjectSizeGreaterThan`, `ObjectSizeLessThan`, all of them in `And`). A
//! delete marker has no tags and size 0. Uploads have neither tags nor a size
//! yet: as on S3, a rule with a tag or size filter cannot abort them, nor
//! remove lone delete markers (refused as [`ObjectError::InvalidRequest`]).
//!
//! **Which days apply.** An upload is aborted once the smallest
//! `abort_incomplete_days` of the bucket's enabled rules whose prefix its key
//! starts with has passed since it started. A bucket none of whose enabled
//! rules has that action uses the operator's default instead (the `default_days`
//! of [`ObjectLayer::abort_stale_uploads`]; 0: never).
//!
//! Aborting frees the parts' blocks in the allocator: a change of trusted local
//! state only. No block is read or written and the storage server sees no
//! request for it.

use std::collections::{HashMap, HashSet};

use crate::alloc::Run;
use crate::listing;
use crate::records::*;
use crate::{corrupt, Meta, ObjectError, ObjectLayer, Result};
use crate::{MAX_OBJECT_TAGS, MAX_TAG_KEY, MAX_TAG_VALUE};

/// Most rules in one configuration (S3's limit).
pub const MAX_LIFECYCLE_RULES: usize = 1000;
/// Longest rule id, in bytes (S3's limit).
pub const MAX_RULE_ID: usize = 255;
/// Most noncurrent versions a rule may keep (S3's `NewerNoncurrentVersions` limit).
pub const MAX_NEWER_NONCURRENT: u32 = 100;

const DAY_MS: i64 = 24 * 3600 * 1000;

impl LifecycleRule {
    /// Whether the rule's filter names tags or a size bound, which only
    /// versions of objects have (not uploads).
    pub fn filters_versions(&self) -> bool {
        !self.tags.is_empty() || self.size_greater_than.is_some() || self.size_less_than.is_some()
    }

    /// Whether the rule applies to version `rec` of `key`: the key starts
    /// with the prefix, the version carries every tag of the filter with its
    /// value, and its size is above `size_greater_than` and below
    /// `size_less_than` (both strictly). A delete marker has size 0 and no
    /// tags.
    pub fn selects(&self, key: &str, rec: &ObjectRecord) -> bool {
        key.starts_with(&self.prefix)
            && self.tags.iter().all(|(k, v)| rec.tags.get(k) == Some(v))
            && self.size_greater_than.is_none_or(|n| rec.size > n)
            && self.size_less_than.is_none_or(|n| rec.size < n)
    }
}

/// Checks a rule's tag and size filter, and the actions it cannot have: at
/// most [`MAX_OBJECT_TAGS`] tags (no version carries more), keys of 1 to
/// [`MAX_TAG_KEY`] and values of up to [`MAX_TAG_VALUE`] characters, no key
/// twice, `size_less_than` at least 1 and above `size_greater_than`, and no
/// upload abort or lone-marker removal with either filter (S3's answers and,
/// where S3 has one, its message).
fn check_filter(r: &LifecycleRule) -> Result<()> {
    if r.tags.len() > MAX_OBJECT_TAGS {
        return Err(ObjectError::InvalidArgument(format!(
            "a lifecycle filter names at most {MAX_OBJECT_TAGS} tags (an object has no more)"
        )));
    }
    let mut keys = HashSet::new();
    for (k, v) in &r.tags {
        let klen = k.chars().count();
        if klen == 0 || klen > MAX_TAG_KEY {
            return Err(ObjectError::InvalidArgument(format!(
                "a tag key in a lifecycle filter must be 1 to {MAX_TAG_KEY} characters"
            )));
        }
        if v.chars().count() > MAX_TAG_VALUE {
            return Err(ObjectError::InvalidArgument(format!(
                "a tag value in a lifecycle filter must be at most {MAX_TAG_VALUE} characters"
            )));
        }
        if !keys.insert(k.as_str()) {
            return Err(ObjectError::InvalidRequest(
                "Duplicate Tag Keys are not allowed.".into(),
            ));
        }
    }
    if r.size_less_than == Some(0) {
        return Err(ObjectError::InvalidRequest(
            "'ObjectSizeLessThan' must be at least 1".into(),
        ));
    }
    if let (Some(above), Some(below)) = (r.size_greater_than, r.size_less_than) {
        if below <= above {
            return Err(ObjectError::InvalidRequest(
                "'ObjectSizeLessThan' has to be a value greater than 'ObjectSizeGreaterThan'."
                    .into(),
            ));
        }
    }
    let sizes = r.size_greater_than.is_some() || r.size_less_than.is_some();
    for (action, given) in [
        (
            "AbortIncompleteMultipartUpload",
            r.abort_incomplete_days > 0,
        ),
        ("ExpiredObjectDeleteMarker", r.expired_object_delete_marker),
    ] {
        if given && !r.tags.is_empty() {
            return Err(ObjectError::InvalidRequest(format!(
                "{action} cannot be specified with Tags."
            )));
        }
        if given && sizes {
            return Err(ObjectError::InvalidRequest(format!(
                "{action} cannot be specified with Object Size."
            )));
        }
    }
    Ok(())
}

/// The days after which an upload of `key` is aborted under `rules`, with
/// `default_days` for a configuration without any enabled abort rule; `None`:
/// never. Rules with a tag or size filter never abort uploads.
pub fn abort_days(rules: &[LifecycleRule], key: &str, default_days: u32) -> Option<u32> {
    let mut own = rules
        .iter()
        .filter(|r| r.enabled && r.abort_incomplete_days > 0 && !r.filters_versions())
        .peekable();
    if own.peek().is_none() {
        return (default_days > 0).then_some(default_days);
    }
    own.filter(|r| key.starts_with(&r.prefix))
        .map(|r| r.abort_incomplete_days)
        .min()
}

/// Checks a configuration: at most [`MAX_LIFECYCLE_RULES`] rules, ids of at
/// most [`MAX_RULE_ID`] bytes and distinct, an action in every rule, and the
/// combinations S3 refuses (see [`LifecycleRule`] and `check_filter`).
fn check_rules(rules: &[LifecycleRule]) -> Result<()> {
    if rules.len() > MAX_LIFECYCLE_RULES {
        return Err(ObjectError::InvalidArgument(format!(
            "at most {MAX_LIFECYCLE_RULES} lifecycle rules"
        )));
    }
    let mut ids = HashSet::new();
    for r in rules {
        if r.id.len() > MAX_RULE_ID {
            return Err(ObjectError::InvalidArgument(format!(
                "a rule ID is at most {MAX_RULE_ID} bytes"
            )));
        }
        if !r.id.is_empty() && !ids.insert(r.id.as_str()) {
            return Err(ObjectError::InvalidArgument(format!(
                "rule ID {:?} used twice",
                r.id
            )));
        }
        if r.abort_incomplete_days == 0 && !r.acts_on_objects() {
            return Err(ObjectError::InvalidArgument(
                "every rule needs an action, and its days must be positive".into(),
            ));
        }
        if r.expired_object_delete_marker && (r.expiration_days > 0 || r.expiration_date_ms > 0) {
            return Err(ObjectError::InvalidArgument(
                "ExpiredObjectDeleteMarker cannot be specified with Days or Date".into(),
            ));
        }
        if r.expiration_days > 0 && r.expiration_date_ms > 0 {
            return Err(ObjectError::InvalidArgument(
                "an Expiration has either Days or Date, not both".into(),
            ));
        }
        if r.expiration_date_ms < 0 || r.expiration_date_ms % DAY_MS != 0 {
            return Err(ObjectError::InvalidArgument(
                "'Date' must be at midnight GMT".into(),
            ));
        }
        if r.newer_noncurrent_versions > 0 && r.noncurrent_days == 0 {
            return Err(ObjectError::InvalidArgument(
                "NewerNoncurrentVersions needs a positive NoncurrentDays".into(),
            ));
        }
        if r.newer_noncurrent_versions > MAX_NEWER_NONCURRENT {
            return Err(ObjectError::InvalidArgument(format!(
                "NewerNoncurrentVersions is at most {MAX_NEWER_NONCURRENT}"
            )));
        }
        check_filter(r)?;
    }
    Ok(())
}

impl Meta {
    /// Whether upload `u` is due at `now_ms` (`rules`: its bucket's, cached per
    /// bucket in `cache`).
    fn upload_due(
        &self,
        u: &UploadRecord,
        now_ms: i64,
        default_days: u32,
        cache: &mut HashMap<(String, String), Vec<LifecycleRule>>,
    ) -> Result<bool> {
        let k = (u.owner.clone(), u.bucket.clone());
        let rules = match cache.get(&k) {
            Some(r) => r,
            None => {
                let r = self
                    .bucket(&u.owner, &u.bucket)?
                    .map(|b| b.lifecycle)
                    .unwrap_or_default();
                cache.entry(k).or_insert(r)
            }
        };
        Ok(abort_days(rules, &u.key, default_days).is_some_and(|d| {
            now_ms
                >= u.initiated_ms
                    .saturating_add(i64::from(d).saturating_mul(DAY_MS))
        }))
    }
}

impl ObjectLayer {
    /// The lifecycle rules of bucket `name` (empty: none), if `owner` owns it.
    pub fn bucket_lifecycle(&self, owner: &str, name: &str) -> Result<Vec<LifecycleRule>> {
        Ok(self.shared.lock().owned_bucket(owner, name)?.lifecycle)
    }

    /// Replaces the lifecycle rules of bucket `name` (empty: removes them).
    /// Refuses ([`ObjectError::InvalidArgument`]) more than
    /// [`MAX_LIFECYCLE_RULES`] rules, an id used twice or longer than
    /// [`MAX_RULE_ID`], a rule without an action, an expiration with both days
    /// and a date or either with `expired_object_delete_marker`, a date not at
    /// midnight UTC, `newer_noncurrent_versions` without `noncurrent_days`
    /// or above [`MAX_NEWER_NONCURRENT`], and a tag filter of more than
    /// [`MAX_OBJECT_TAGS`] tags or with a tag key or value S3 does not allow.
    /// Refuses ([`ObjectError::InvalidRequest`], S3's message) a tag key given
    /// twice, a `size_less_than` of 0 or not above `size_greater_than`, and
    /// `abort_incomplete_days` or `expired_object_delete_marker` in a rule
    /// with a tag or size filter. A change of the local index only.
    pub async fn set_bucket_lifecycle(
        &self,
        owner: &str,
        name: &str,
        rules: Vec<LifecycleRule>,
    ) -> Result<()> {
        check_rules(&rules)?;
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                b.lifecycle = rules;
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(())
            })
            .await
    }

    /// Aborts up to `limit` multipart uploads due at `now_ms` (milliseconds since
    /// the epoch) under their buckets' lifecycle rules, or after `default_days`
    /// for a bucket without an enabled abort rule (0: never; see the module
    /// documentation), and frees their parts' blocks; returns how many went.
    ///
    /// The storage server observes nothing: freeing blocks changes the local
    /// index and allocator only. Scans every upload record under the metadata
    /// lock (as listing uploads does).
    pub async fn abort_stale_uploads(
        &self,
        now_ms: i64,
        default_days: u32,
        limit: usize,
    ) -> Result<usize> {
        let due: Vec<String> = {
            let m = self.shared.lock();
            let mut cache = HashMap::new();
            let mut due = Vec::new();
            for (id, u) in listing::all_uploads(m.kv.as_ref())? {
                if due.len() >= limit {
                    break;
                }
                if m.upload_due(&u, now_ms, default_days, &mut cache)? {
                    due.push(id);
                }
            }
            due
        };
        if due.is_empty() {
            return Ok(0);
        }
        let (n, runs) = self
            .shared
            .commit(|m| {
                // Checked again under this lock: an upload completed or aborted
                // meanwhile is gone, a rule changed meanwhile holds.
                let mut cache = HashMap::new();
                let mut runs: Vec<Run> = Vec::new();
                let mut n = 0;
                for id in &due {
                    let Some(v) = m.kv.get(&upload_key(id)) else {
                        continue;
                    };
                    let u: UploadRecord = decode(&v).map_err(|e| corrupt("upload record", e))?;
                    if !m.upload_due(&u, now_ms, default_days, &mut cache)? {
                        continue;
                    }
                    m.kv.delete(&upload_key(id));
                    runs.extend(u.parts.values().flat_map(|p| p.segment.runs.clone()));
                    n += 1;
                }
                Ok((n, runs))
            })
            .await?;
        // A part upload racing this finds its upload gone and frees its own blocks.
        self.shared.lock().alloc.free(&runs);
        Ok(n)
    }
}
