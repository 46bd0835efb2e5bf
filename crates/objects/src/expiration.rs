//! Lifecycle expiration: S3's `Expiration` (`Days`, `Date`,
//! `ExpiredObjectDeleteMarker`) and `NoncurrentVersionExpiration`
//! (`NoncurrentDays`, `NewerNoncurrentVersions`), applied to the objects of
//! the buckets whose enabled rules have them, from the trusted index only.
//!
//! **What happens to a key** whose name starts with the prefix of an enabled
//! rule, at time `now` (any rule that is due and selects the version acts: a
//! rule with a tag or size filter acts only on the versions that carry its
//! tags and whose size is within its bounds, each version judged by its own
//! tags and size, see [`LifecycleRule::selects`]):
//! - its current version, written `Days` days ago (rounded up to the next
//!   midnight UTC, as AWS does) or on or after `Date`: in a bucket never
//!   versioned it is removed and its blocks freed; in a versioned bucket a
//!   delete marker becomes its newest version (the version stays, noncurrent),
//!   as a DELETE without a version id does;
//! - a noncurrent version (or noncurrent delete marker) that became noncurrent
//!   (when the next newer version was written) `NoncurrentDays` days ago,
//!   rounded up to midnight, and has at least `NewerNoncurrentVersions` newer
//!   noncurrent versions: removed, its blocks freed;
//! - a delete marker that is the newest and only version left, with
//!   `ExpiredObjectDeleteMarker`: removed.
//!
//! **Object lock.** A version under a legal hold or an unexpired retention
//! (of either mode: lifecycle never bypasses governance) is never removed; it
//! stays until a later sweep finds it unprotected. Adding a delete marker
//! removes nothing, so it happens to a locked current version too, as on AWS.
//!
//! **What the storage server observes.** Nothing: every change is to the
//! trusted index, and freed blocks go back to the allocator. No block is read
//! or written; later writes reuse the freed positions with ordinary ORAM
//! accesses. The tags and sizes a filter compares are those of the version
//! records in the trusted index: filtering reads no block either.

use crate::lock::check_deletable;
use crate::records::*;
use crate::{corrupt, random_id, Meta, ObjectLayer, Result};

const DAY_MS: i64 = 24 * 3600 * 1000;

/// Index entries read per hold of the metadata lock while looking for due keys.
const PAGE: usize = 256;

/// `ms` rounded up to a midnight UTC.
pub(crate) fn midnight_at_or_after(ms: i64) -> i64 {
    let days = ms.div_euclid(DAY_MS) + i64::from(ms.rem_euclid(DAY_MS) != 0);
    days.saturating_mul(DAY_MS)
}

/// Whether `days` (> 0) days after `since_ms`, rounded up to midnight, is at
/// or before `now_ms`.
fn due(since_ms: i64, days: u32, now_ms: i64) -> bool {
    days > 0
        && now_ms
            >= midnight_at_or_after(since_ms.saturating_add(i64::from(days).saturating_mul(DAY_MS)))
}

impl LifecycleRule {
    /// Whether the rule has an action on objects (expiration of current or
    /// noncurrent versions, or of lone delete markers), not only on uploads.
    pub fn acts_on_objects(&self) -> bool {
        self.expiration_days > 0
            || self.expiration_date_ms > 0
            || self.expired_object_delete_marker
            || self.noncurrent_days > 0
    }

    /// Whether the rule expires a current version written at `modified_ms`.
    fn expires_current(&self, modified_ms: i64, now_ms: i64) -> bool {
        due(modified_ms, self.expiration_days, now_ms)
            || (self.expiration_date_ms > 0 && now_ms >= self.expiration_date_ms)
    }
}

/// What the rules do to one key now.
#[derive(Debug, Default)]
struct Plan {
    /// Expire the current version: remove it (bucket never versioned) or put
    /// a delete marker in front of it.
    expire_current: bool,
    /// Index keys of the version entries to remove (noncurrent versions, a
    /// lone delete marker).
    remove: Vec<Vec<u8>>,
}

impl Plan {
    fn is_empty(&self) -> bool {
        !self.expire_current && self.remove.is_empty()
    }
}

impl Meta {
    /// What `rules` (the enabled rules of bucket `b` acting on objects) do to
    /// `key` at `now_ms`.
    fn plan_expiry(
        &self,
        b: &BucketRecord,
        rules: &[LifecycleRule],
        key: &str,
        now_ms: i64,
    ) -> Result<Plan> {
        let rules: Vec<&LifecycleRule> = rules
            .iter()
            .filter(|r| key.starts_with(&r.prefix))
            .collect();
        let mut plan = Plan::default();
        if rules.is_empty() {
            return Ok(plan);
        }
        let (owner, bucket) = (b.owner.as_str(), b.name.as_str());
        let current = self.stored_object(owner, bucket, key)?;
        let mut entries: Vec<(Vec<u8>, ObjectRecord)> = Vec::new();
        scan_prefix(
            self.kv.as_ref(),
            &versions_base(owner, bucket, key),
            |k, v| {
                let rec = decode(v).map_err(|e| corrupt("object record", e))?;
                entries.push((k.to_vec(), rec));
                Ok(())
            },
        )?;
        if let Some(cur) = &current {
            // An object past its Swift expiry goes with the expiry purge.
            if !cur.expired(now_ms.div_euclid(1000))
                && rules
                    .iter()
                    .any(|r| r.selects(key, cur) && r.expires_current(cur.modified_ms, now_ms))
            {
                // Removing (never versioned) or replacing the null version
                // (suspended) removes a version: never a locked one.
                let removed = match b.versioning {
                    Versioning::Off => vec![cur],
                    Versioning::Suspended => std::iter::once(cur)
                        .filter(|c| c.version_id.is_empty())
                        .chain(entries.iter().map(|(_, r)| r))
                        .filter(|r| r.version_id.is_empty())
                        .collect(),
                    Versioning::Enabled => Vec::new(),
                };
                plan.expire_current = removed
                    .iter()
                    .all(|r| check_deletable(r, now_ms, false).is_ok());
            }
        }
        // Without a current record the newest entry (a delete marker) is the
        // current version; every other entry is noncurrent, newest first, and
        // became noncurrent when the entry before it was written.
        let skip = usize::from(current.is_none());
        let mut newer_ms = current.as_ref().map(|c| c.modified_ms);
        for (i, (at, rec)) in entries.iter().enumerate() {
            let successor = newer_ms.replace(rec.modified_ms);
            let Some(since) = successor.filter(|_| i >= skip) else {
                continue;
            };
            let newer_noncurrent = (i - skip) as u64;
            let expires = rules.iter().any(|r| {
                r.selects(key, rec)
                    && due(since, r.noncurrent_days, now_ms)
                    && newer_noncurrent >= u64::from(r.newer_noncurrent_versions)
            });
            if expires && check_deletable(rec, now_ms, false).is_ok() {
                plan.remove.push(at.clone());
            }
        }
        if current.is_none() {
            if let Some((at, newest)) = entries.first() {
                if newest.delete_marker
                    && entries.len() - plan.remove.len() == 1
                    && rules
                        .iter()
                        .any(|r| r.expired_object_delete_marker && r.selects(key, newest))
                {
                    plan.remove.push(at.clone());
                }
            }
        }
        Ok(plan)
    }

    /// Applies `plan` to `key` of bucket `b` at `now_ms`; returns the records
    /// removed, whose blocks are to be released once the change is durable.
    fn apply_expiry(
        &mut self,
        b: &BucketRecord,
        key: &str,
        plan: Plan,
        now_ms: i64,
    ) -> Result<Vec<ObjectRecord>> {
        let name = (b.owner.as_str(), b.name.as_str(), key);
        let mut gone = Vec::new();
        for at in &plan.remove {
            if let Some(v) = self.kv.get(at) {
                let rec: ObjectRecord = decode(&v).map_err(|e| corrupt("object record", e))?;
                self.kv.delete(at);
                gone.push(rec);
            }
        }
        if plan.expire_current {
            if let Some(old) = self.stored_object(name.0, name.1, key)? {
                if b.versioning.is_off() {
                    self.delete_object_record(name, &old);
                    gone.push(old);
                } else {
                    let mut marker = ObjectRecord {
                        id: random_id(),
                        modified_ms: now_ms,
                        delete_marker: true,
                        ..Default::default()
                    };
                    gone.extend(self.install(name.0, b, key, &mut marker, Some(old))?);
                }
            }
        }
        Ok(gone)
    }
}

/// The buckets with an enabled rule acting on objects, with those rules.
fn expiring_buckets(m: &Meta) -> Result<Vec<(BucketRecord, Vec<LifecycleRule>)>> {
    let mut out = Vec::new();
    scan_prefix(m.kv.as_ref(), crate::BUCKET_RECORDS, |_, v| {
        let b: BucketRecord = decode(v).map_err(|e| corrupt("bucket record", e))?;
        let rules: Vec<LifecycleRule> = b
            .lifecycle
            .iter()
            .filter(|r| r.enabled && r.acts_on_objects())
            .cloned()
            .collect();
        if !rules.is_empty() {
            out.push((b, rules));
        }
        Ok(())
    })?;
    Ok(out)
}

impl ObjectLayer {
    /// Applies the buckets' lifecycle expiration rules at `now_ms`
    /// (milliseconds since the epoch) to up to `limit` keys (see the
    /// `expiration` module documentation: current versions expire, noncurrent
    /// versions and lone delete markers go, locked versions stay) and frees
    /// the blocks of the versions removed; returns how many keys changed.
    ///
    /// The storage server observes nothing: it is a change of the local index
    /// and allocator only. Looks through every key of the buckets with such
    /// rules, a page at a time under the metadata lock.
    pub async fn expire_by_lifecycle(&self, now_ms: i64, limit: usize) -> Result<usize> {
        let buckets = expiring_buckets(&self.shared.lock())?;
        let mut due: Vec<(usize, String)> = Vec::new();
        'buckets: for (i, (b, rules)) in buckets.iter().enumerate() {
            let base = objects_base(&b.owner, &b.name);
            let end = prefix_end(&base);
            let mut cursor = base.clone();
            let mut inclusive = true;
            let mut last: Option<String> = None;
            loop {
                let m = self.shared.lock();
                let page = m.kv.range(&cursor, inclusive, end.as_deref(), PAGE);
                let Some((next, _)) = page.last() else {
                    break;
                };
                cursor = next.clone();
                inclusive = false;
                for (k, _) in &page {
                    let tail = &k[base.len()..];
                    let name = tail.split(|c| *c == 0).next().unwrap_or(tail);
                    let Ok(key) = std::str::from_utf8(name) else {
                        continue;
                    };
                    if last.as_deref() == Some(key) {
                        continue;
                    }
                    last = Some(key.to_string());
                    if !m.plan_expiry(b, rules, key, now_ms)?.is_empty() {
                        due.push((i, key.to_string()));
                        if due.len() >= limit {
                            break 'buckets;
                        }
                    }
                }
            }
        }
        if due.is_empty() {
            return Ok(0);
        }
        let (n, gone) = self
            .shared
            .commit(|m| {
                // Planned again under this lock: a key written, deleted or
                // locked meanwhile, or a rule changed meanwhile, holds. All
                // plans are made before anything changes.
                let mut plans = Vec::new();
                for (i, key) in &due {
                    let (b, _) = &buckets[*i];
                    let Some(b) = m.bucket(&b.owner, &b.name)? else {
                        continue;
                    };
                    let rules: Vec<LifecycleRule> = b
                        .lifecycle
                        .iter()
                        .filter(|r| r.enabled && r.acts_on_objects())
                        .cloned()
                        .collect();
                    let plan = m.plan_expiry(&b, &rules, key, now_ms)?;
                    if !plan.is_empty() {
                        plans.push((b, key, plan));
                    }
                }
                let n = plans.len();
                let mut gone = Vec::new();
                for (b, key, plan) in plans {
                    gone.extend(m.apply_expiry(&b, key, plan, now_ms)?);
                }
                Ok((n, gone))
            })
            .await?;
        let mut m = self.shared.lock();
        for rec in gone {
            m.release(rec.id, &rec.segments);
        }
        Ok(n)
    }
}
