//! S3 versioning: a bucket's versioning state, how a write or a delete keeps
//! the version it replaces, and reading, deleting and finding versions by id.
//!
//! Every version is an object record in the index and holds its own blocks in
//! the ORAM (no block is shared between versions), so capacity and `stats`
//! count every version; a delete marker holds no block. The current version of
//! a key stays where an unversioned object is (`o/…<key>`); noncurrent versions
//! and delete markers follow it, newest first (see [`crate::records`]). A bucket
//! never versioned has neither, so it behaves and is stored as before.
//!
//! Version ids are 32 hex digits: the version's order (`seq`, about the
//! microseconds since the epoch, strictly increasing per key) and 64 random
//! bits. The `null` version (objects written while the bucket was never
//! versioned or versioning was suspended) has the id `null`.

use oram_state::KvState;

use crate::records::*;
use crate::{corrupt, now_ms, random_id, Meta, ObjectError, ObjectLayer, OpenObject, Result};

/// What a delete did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deleted {
    /// Whether an object (or the version named) was there.
    pub existed: bool,
    /// The version id made (a delete marker) or removed, when the bucket is
    /// versioned or a version was named (`null` for the null version).
    pub version_id: Option<String>,
    /// Whether the delete made a delete marker, or removed one.
    pub delete_marker: bool,
}

/// The order value of a new version: after `newest`, and otherwise the clock
/// in microseconds (so versions of different keys sort roughly by time too).
fn next_seq(newest: Option<u64>) -> u64 {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    match newest {
        Some(n) => now_us.max(n.saturating_add(1)),
        None => now_us.max(1),
    }
}

/// A new version id for order `seq`.
fn new_version_id(seq: u64) -> String {
    format!("{seq:016x}{:016x}", random_id())
}

/// The order of version id `vid` (`None` for `null`); a malformed id is
/// [`ObjectError::InvalidArgument`], as S3 answers it.
fn parse_version_id(vid: &str) -> Result<Option<u64>> {
    if vid == "null" {
        return Ok(None);
    }
    if vid.len() == 32 && vid.bytes().all(|b| b.is_ascii_hexdigit()) {
        if let Ok(seq) = u64::from_str_radix(&vid[..16], 16) {
            return Ok(Some(seq));
        }
    }
    Err(ObjectError::InvalidArgument(
        "Invalid version id specified".into(),
    ))
}

/// Where a version found by id is stored.
pub(crate) struct Found {
    /// Its index key.
    pub(crate) at: Vec<u8>,
    /// Its record.
    pub(crate) rec: ObjectRecord,
    /// Whether it is the current version (`o/…<key>`).
    pub(crate) current: bool,
}

/// The version `vid` of `bucket/key` in `kv` (`Ok(None)`: no such version).
pub(crate) fn find_version(
    kv: &dyn KvState,
    (owner, bucket, key): (&str, &str, &str),
    vid: &str,
) -> Result<Option<Found>> {
    let seq = parse_version_id(vid)?;
    let want = if vid == "null" { "" } else { vid };
    let cur_key = object_key(owner, bucket, key);
    if let Some(v) = kv.get(&cur_key) {
        let rec: ObjectRecord = decode(&v).map_err(|e| corrupt("object record", e))?;
        if rec.version_id == want {
            return Ok(Some(Found {
                at: cur_key,
                rec,
                current: true,
            }));
        }
    }
    match seq {
        Some(seq) => {
            let at = version_key(owner, bucket, key, seq);
            let Some(v) = kv.get(&at) else {
                return Ok(None);
            };
            let rec: ObjectRecord = decode(&v).map_err(|e| corrupt("object record", e))?;
            Ok((rec.version_id == want).then_some(Found {
                at,
                rec,
                current: false,
            }))
        }
        None => {
            let mut found = None;
            scan_prefix(kv, &versions_base(owner, bucket, key), |k, v| {
                let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
                if found.is_none() && rec.version_id.is_empty() {
                    found = Some(Found {
                        at: k.to_vec(),
                        rec,
                        current: false,
                    });
                }
                Ok(())
            })?;
            Ok(found)
        }
    }
}

/// The newest noncurrent version or delete marker of `bucket/key`.
pub(crate) fn newest_entry(
    kv: &dyn KvState,
    (owner, bucket, key): (&str, &str, &str),
) -> Result<Option<(Vec<u8>, ObjectRecord)>> {
    let base = versions_base(owner, bucket, key);
    let first = kv.range(&base, true, prefix_end(&base).as_deref(), 1);
    first
        .into_iter()
        .next()
        .map(|(k, v)| Ok((k, decode(&v).map_err(|e| corrupt("object record", e))?)))
        .transpose()
}

impl Meta {
    /// Makes `rec` the newest version of `bucket/key` (of bucket record `b`) in
    /// place of `old` (what `o/…<key>` holds now, expired or not), as the
    /// bucket's versioning says: never versioned, `old` is replaced; enabled,
    /// `old` is kept as a noncurrent version and `rec` gets a version id;
    /// suspended, `rec` becomes the null version and the earlier null version
    /// goes. A delete marker (`rec.delete_marker`) is stored among the
    /// versions. Returns the records dropped, whose blocks are to be released
    /// once the change is durable. Checks nothing: call it once every check
    /// passed.
    pub(crate) fn install(
        &mut self,
        owner: &str,
        b: &BucketRecord,
        key: &str,
        rec: &mut ObjectRecord,
        old: Option<ObjectRecord>,
    ) -> Result<Vec<ObjectRecord>> {
        let name = (owner, b.name.as_str(), key);
        if b.versioning.is_off() {
            self.put_object_record(name, rec, old.as_ref());
            return Ok(old.into_iter().collect());
        }
        let newest = match &old {
            Some(o) => Some(o.seq),
            None => newest_entry(self.kv.as_ref(), name)?.map(|(_, r)| r.seq),
        };
        rec.seq = next_seq(newest);
        let mut gone = Vec::new();
        if b.versioning == Versioning::Enabled {
            rec.version_id = new_version_id(rec.seq);
        } else {
            rec.version_id.clear();
            gone.extend(self.drop_null_entries(name)?);
        }
        if let Some(old) = old {
            if old.expired(crate::now_secs())
                || (b.versioning == Versioning::Suspended && old.version_id.is_empty())
            {
                self.delete_object_record(name, &old);
                gone.push(old);
            } else {
                self.demote(name, old);
            }
        }
        if rec.delete_marker {
            self.kv
                .put(&version_key(owner, &b.name, key, rec.seq), encode(rec));
        } else {
            self.put_object_record(name, rec, None);
        }
        Ok(gone)
    }

    /// Moves the current version `old` of `bucket/key` among the noncurrent
    /// versions (a noncurrent version does not expire).
    fn demote(&mut self, name: (&str, &str, &str), mut old: ObjectRecord) {
        self.delete_object_record(name, &old);
        old.delete_at = 0;
        self.kv
            .put(&version_key(name.0, name.1, name.2, old.seq), encode(&old));
    }

    /// Removes the noncurrent null versions (at most one) of `bucket/key`.
    fn drop_null_entries(&mut self, name: (&str, &str, &str)) -> Result<Vec<ObjectRecord>> {
        let mut nulls = Vec::new();
        scan_prefix(
            self.kv.as_ref(),
            &versions_base(name.0, name.1, name.2),
            |k, v| {
                let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
                if rec.version_id.is_empty() {
                    nulls.push((k.to_vec(), rec));
                }
                Ok(())
            },
        )?;
        Ok(nulls
            .into_iter()
            .map(|(k, rec)| {
                self.kv.delete(&k);
                rec
            })
            .collect())
    }

    /// Keeps the rule that the newest version, unless it is a delete marker,
    /// is the current one: with no current version, the newest noncurrent
    /// version becomes current if it is not a delete marker. It never fails
    /// (it runs after other changes, which have no undo): an unreadable entry
    /// is logged and left where it is.
    pub(crate) fn promote(&mut self, name: (&str, &str, &str)) {
        if self.kv.get(&object_key(name.0, name.1, name.2)).is_some() {
            return;
        }
        match newest_entry(self.kv.as_ref(), name) {
            Ok(Some((at, rec))) if !rec.delete_marker => {
                self.kv.delete(&at);
                self.put_object_record(name, &rec, None);
            }
            Ok(_) => {}
            Err(e) => tracing::error!("versions of {}/{}: {e}", name.1, name.2),
        }
    }

    /// Why `bucket/key` cannot be read: its newest version is a delete marker,
    /// or there is no such key.
    pub(crate) fn missing(&self, name: (&str, &str, &str)) -> Result<ObjectError> {
        Ok(match newest_entry(self.kv.as_ref(), name)? {
            Some((_, r)) if r.delete_marker => ObjectError::DeleteMarker {
                version_id: r.version_label().to_string(),
                modified_ms: r.modified_ms,
                by_version: false,
            },
            _ => ObjectError::NoSuchKey(name.2.into()),
        })
    }

    /// Where and what `bucket/key` is — its current version (unexpired), or
    /// version `vid` — for a change in place (tags, object lock). A delete
    /// marker is [`ObjectError::DeleteMarker`].
    pub(crate) fn addressed_version(
        &self,
        name: (&str, &str, &str),
        vid: Option<&str>,
    ) -> Result<(Vec<u8>, ObjectRecord)> {
        let (owner, bucket, key) = name;
        match vid {
            None => match self.object(owner, bucket, key)? {
                Some(rec) => Ok((object_key(owner, bucket, key), rec)),
                None => Err(self.missing(name)?),
            },
            Some(v) => {
                let f = find_version(self.kv.as_ref(), name, v)?
                    .ok_or_else(|| ObjectError::NoSuchVersion(v.into()))?;
                if f.rec.delete_marker {
                    return Err(ObjectError::DeleteMarker {
                        version_id: v.into(),
                        modified_ms: f.rec.modified_ms,
                        by_version: true,
                    });
                }
                Ok((f.at, f.rec))
            }
        }
    }

    /// The version `vid` of `bucket/key`, readable (not a delete marker).
    fn readable_version(&self, name: (&str, &str, &str), vid: &str) -> Result<ObjectRecord> {
        self.owned_bucket(name.0, name.1)?;
        let found = find_version(self.kv.as_ref(), name, vid)?
            .ok_or_else(|| ObjectError::NoSuchVersion(vid.into()))?;
        if found.rec.delete_marker {
            return Err(ObjectError::DeleteMarker {
                version_id: vid.into(),
                modified_ms: found.rec.modified_ms,
                by_version: true,
            });
        }
        Ok(found.rec)
    }
}

impl ObjectLayer {
    /// Sets the versioning of bucket `name` (S3's `PutBucketVersioning`):
    /// [`Versioning::Enabled`] or [`Versioning::Suspended`]; a bucket once
    /// versioned cannot become unversioned again, as in S3, and a bucket with
    /// object lock cannot be suspended ([`ObjectError::InvalidBucketState`]).
    pub async fn set_bucket_versioning(
        &self,
        owner: &str,
        name: &str,
        state: Versioning,
    ) -> Result<()> {
        if state.is_off() {
            return Err(ObjectError::InvalidArgument(
                "versioning can only be Enabled or Suspended".into(),
            ));
        }
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                if b.object_lock.is_some() && state != Versioning::Enabled {
                    return Err(ObjectError::InvalidBucketState(
                        "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed."
                            .into(),
                    ));
                }
                if b.versioning != state {
                    b.versioning = state;
                    m.kv.put(&bucket_key(owner, name), encode(&b));
                }
                Ok(())
            })
            .await
    }

    /// The record of version `vid` of `bucket/key` (`null`: the null version).
    pub fn head_object_version(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        vid: &str,
    ) -> Result<ObjectRecord> {
        self.shared
            .lock()
            .readable_version((owner, bucket, key), vid)
    }

    /// Opens version `vid` of `bucket/key` for reading (see
    /// [`ObjectLayer::open_object`]); a delete marker is
    /// [`ObjectError::DeleteMarker`], an unknown version
    /// [`ObjectError::NoSuchVersion`].
    pub fn open_object_version(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        vid: &str,
    ) -> Result<OpenObject> {
        let mut m = self.shared.lock();
        let rec = m.readable_version((owner, bucket, key), vid)?;
        let pin = self.shared.pin(&mut m, rec.id);
        Ok(OpenObject {
            rec,
            pin,
            owner: owner.to_string(),
        })
    }

    /// Removes version `vid` of `bucket/key` for good (S3's DELETE with a
    /// `versionId`) and frees its blocks; the next newest version becomes
    /// current unless it is a delete marker. An unknown version is not an
    /// error (`existed` is false). A version protected by object lock is
    /// refused ([`ObjectError::Locked`]; `bypass_governance` lifts a
    /// governance retention, see [`crate::lock`]).
    pub async fn delete_object_version(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        vid: &str,
        bypass_governance: bool,
    ) -> Result<Deleted> {
        parse_version_id(vid)?;
        let gone = self
            .shared
            .commit(|m| {
                m.owned_bucket(owner, bucket)?;
                let name = (owner, bucket, key);
                let Some(found) = find_version(m.kv.as_ref(), name, vid)? else {
                    return Ok(None);
                };
                crate::lock::check_deletable(&found.rec, now_ms(), bypass_governance)?;
                if found.current {
                    m.delete_object_record(name, &found.rec);
                } else {
                    m.kv.delete(&found.at);
                }
                m.promote(name);
                Ok(Some(found.rec))
            })
            .await?;
        let Some(rec) = gone else {
            return Ok(Deleted {
                existed: false,
                version_id: Some(vid.into()),
                delete_marker: false,
            });
        };
        self.shared.lock().release(rec.id, &rec.segments);
        Ok(Deleted {
            existed: true,
            version_id: Some(vid.into()),
            delete_marker: rec.delete_marker,
        })
    }

    /// Marks `bucket/key` deleted in a versioned bucket `b`: a new delete
    /// marker becomes its newest version (S3's DELETE without a version id).
    pub(crate) async fn delete_with_marker(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        if_match: Option<&crate::EtagList>,
    ) -> Result<Deleted> {
        let (marker, existed, gone) = self
            .shared
            .commit(|m| {
                let b = m.owned_bucket(owner, bucket)?;
                let old = m.stored_object(owner, bucket, key)?;
                let live = old.as_ref().filter(|r| !r.expired(crate::now_secs()));
                let existed = live.is_some();
                if let Some(list) = if_match {
                    crate::write::check_mode(&crate::PutMode::IfMatch(list.clone()), key, live)?;
                }
                let mut marker = ObjectRecord {
                    id: random_id(),
                    size: 0,
                    etag: String::new(),
                    modified_ms: now_ms(),
                    meta: ObjectMeta::default(),
                    segments: Vec::new(),
                    delete_at: 0,
                    version_id: String::new(),
                    seq: 0,
                    delete_marker: true,
                    ..Default::default()
                };
                let gone = m.install(owner, &b, key, &mut marker, old)?;
                Ok((marker, existed, gone))
            })
            .await?;
        let mut m = self.shared.lock();
        for rec in gone {
            m.release(rec.id, &rec.segments);
        }
        Ok(Deleted {
            existed,
            version_id: Some(marker.version_label().to_string()),
            delete_marker: true,
        })
    }
}
