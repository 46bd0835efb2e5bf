//! Buckets (S3), containers (Swift) and account metadata.

use std::collections::BTreeMap;

use oram_state::KvState;

use crate::alloc::Run;
use crate::records::*;
use crate::{
    corrupt, listing, now_ms, now_secs, valid_bucket_name, valid_container_name, ObjectError,
    ObjectLayer, Result,
};

/// Sets each `(name, value)` of `updates` in `meta`; an empty value removes it.
pub(crate) fn merge_meta(meta: &mut BTreeMap<String, String>, updates: BTreeMap<String, String>) {
    for (k, v) in updates {
        if v.is_empty() {
            meta.remove(&k);
        } else {
            meta.insert(k, v);
        }
    }
}

fn bucket_usage(kv: &dyn KvState, owner: &str, bucket: &str) -> Result<(u64, u64)> {
    let (mut n, mut bytes) = (0u64, 0u64);
    let now = now_secs();
    let base = objects_base(owner, bucket);
    scan_prefix(kv, &base, |k, v| {
        if k[base.len()..].contains(&0) {
            // A noncurrent version or a delete marker.
            return Ok(());
        }
        let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
        if !rec.expired(now) {
            n += 1;
            bytes += rec.size;
        }
        Ok(())
    })?;
    Ok((n, bytes))
}

fn new_bucket(owner: &str, name: &str) -> BucketRecord {
    BucketRecord {
        name: name.into(),
        owner: owner.into(),
        created_ms: now_ms(),
        meta: BTreeMap::new(),
        meta_modified_ms: 0,
        sysmeta: BTreeMap::new(),
        lifecycle: Vec::new(),
        versioning: Versioning::Off,
        tags: BTreeMap::new(),
        object_lock: None,
        public_access_block: None,
        policy: None,
    }
}

impl ObjectLayer {
    /// Creates bucket `name` owned by `owner`. Bucket names are global here, as in
    /// S3: a name another account uses is [`ObjectError::BucketAlreadyExists`].
    pub async fn create_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.create_bucket_as(owner, name, |_| {}).await
    }

    /// [`ObjectLayer::create_bucket`], with `setup` applied to the new record.
    pub(crate) async fn create_bucket_as(
        &self,
        owner: &str,
        name: &str,
        setup: impl FnOnce(&mut BucketRecord),
    ) -> Result<BucketRecord> {
        if !valid_bucket_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .commit(|m| {
                if m.bucket(owner, name)?.is_some() {
                    return Err(ObjectError::BucketAlreadyOwnedByYou(name.into()));
                }
                if m.name_taken(name) {
                    return Err(ObjectError::BucketAlreadyExists(name.into()));
                }
                let mut rec = new_bucket(owner, name);
                setup(&mut rec);
                m.kv.put(&bucket_key(owner, name), encode(&rec));
                m.kv.put(&name_key(name, owner), Vec::new());
                Ok(rec)
            })
            .await
    }

    /// The bucket, if `owner` owns it.
    pub fn head_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.shared.lock().owned_bucket(owner, name)
    }

    /// The buckets of every account whose names S3 cannot address (Swift
    /// containers; see [`crate::bucket_name_problem`]), with the reason, by
    /// account and name. Only the local index is read.
    pub fn buckets_invisible_to_s3(&self) -> Result<Vec<(BucketRecord, &'static str)>> {
        let m = self.shared.lock();
        let mut values = Vec::new();
        scan_prefix(m.kv.as_ref(), crate::BUCKET_RECORDS, |_, v| {
            values.push(v.to_vec());
            Ok(())
        })?;
        drop(m);
        crate::invisible_to_s3(values.iter().map(Vec::as_slice))
    }

    /// The buckets `owner` owns, by name.
    pub fn list_buckets(&self, owner: &str) -> Result<Vec<BucketRecord>> {
        let m = self.shared.lock();
        let mut out = Vec::new();
        scan_prefix(m.kv.as_ref(), &buckets_base(owner), |_, v| {
            out.push(decode(v).map_err(|e| corrupt("bucket", e))?);
            Ok(())
        })?;
        Ok(out)
    }

    /// Deletes an empty bucket (expired objects do not count; they go with it);
    /// its unfinished multipart uploads are aborted.
    pub async fn delete_bucket(&self, owner: &str, name: &str) -> Result<()> {
        let runs = self
            .shared
            .commit(|m| {
                m.owned_bucket(owner, name)?;
                let now = now_secs();
                let mut expired: Vec<(String, ObjectRecord)> = Vec::new();
                let mut live = false;
                let base = objects_base(owner, name);
                scan_prefix(m.kv.as_ref(), &base, |k, v| {
                    let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
                    if rec.expired(now) {
                        let key = String::from_utf8_lossy(&k[base.len()..]).into_owned();
                        expired.push((key, rec));
                        Ok(())
                    } else {
                        live = true;
                        // Stop the scan: one live object is enough.
                        Err(ObjectError::BucketNotEmpty(name.into()))
                    }
                })
                .or_else(|e| if live { Err(e) } else { Ok(()) })?;
                for (key, rec) in &expired {
                    m.delete_object_record((owner, name, key), rec);
                }
                let mut runs: Vec<Run> = Vec::new();
                let uploads = listing::all_uploads(m.kv.as_ref())?;
                for (id, u) in uploads
                    .into_iter()
                    .filter(|(_, u)| u.bucket == name && u.owner == owner)
                {
                    m.kv.delete(&upload_key(&id));
                    runs.extend(u.parts.values().flat_map(|p| p.segment.runs.clone()));
                }
                m.kv.delete(&bucket_key(owner, name));
                m.kv.delete(&name_key(name, owner));
                Ok((runs, expired))
            })
            .await?;
        // Blocks are freed only once the index no longer refers to them durably
        // (an expired object still being read keeps its blocks until it is done).
        let (runs, expired) = runs;
        let mut m = self.shared.lock();
        m.alloc.free(&runs);
        for (_, rec) in expired {
            m.release(rec.id, &rec.segments);
        }
        Ok(())
    }

    /// Creates container `name` (Swift naming rules, see [`valid_container_name`])
    /// in `owner`'s namespace with metadata `meta` and front-end attributes
    /// `sysmeta`; if `owner` already has it, merges both into it instead (an empty
    /// value removes a name). Returns whether it was created.
    pub async fn create_container(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
        sysmeta: BTreeMap<String, String>,
    ) -> Result<bool> {
        if !valid_container_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .commit(|m| {
                let (mut rec, created) = match m.bucket(owner, name)? {
                    Some(mut b) => {
                        b.meta_modified_ms = now_ms();
                        (b, false)
                    }
                    None => (new_bucket(owner, name), true),
                };
                merge_meta(&mut rec.meta, meta);
                merge_meta(&mut rec.sysmeta, sysmeta);
                m.kv.put(&bucket_key(owner, name), encode(&rec));
                if created {
                    m.kv.put(&name_key(name, owner), Vec::new());
                }
                Ok(created)
            })
            .await
    }

    /// Merges `meta` and `sysmeta` into those of bucket `name` (an empty value
    /// removes a name); returns the updated record.
    pub async fn update_bucket_meta(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
        sysmeta: BTreeMap<String, String>,
    ) -> Result<BucketRecord> {
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                merge_meta(&mut b.meta, meta);
                merge_meta(&mut b.sysmeta, sysmeta);
                b.meta_modified_ms = now_ms();
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(b)
            })
            .await
    }

    /// Sets (or, with `None`, removes) the public access block of bucket
    /// `name` (S3's Put/DeletePublicAccessBlock). A change of the local index
    /// only.
    pub async fn set_public_access_block(
        &self,
        owner: &str,
        name: &str,
        block: Option<PublicAccessBlock>,
    ) -> Result<()> {
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                b.public_access_block = block;
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(())
            })
            .await
    }

    /// Sets (or, with `None`, removes) the policy of bucket `name` (S3's
    /// Put/DeleteBucketPolicy): a document the front-end has checked. A change
    /// of the local index only.
    pub async fn set_bucket_policy(
        &self,
        owner: &str,
        name: &str,
        policy: Option<String>,
    ) -> Result<()> {
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                b.policy = policy;
                m.kv.put(&bucket_key(owner, name), encode(&b));
                Ok(())
            })
            .await
    }

    /// The bucket S3 addresses as `name` for account `caller`: the caller's own
    /// if it has one, otherwise the bucket of the one account that has that
    /// name (`None` if no account has it, or several: Swift containers of
    /// different accounts may share a name, and S3 cannot address them). Lets
    /// a front-end find the owner and policy of a bucket it is asked to use on
    /// someone else's behalf. Only the local index is read.
    pub fn bucket_addressed(&self, caller: &str, name: &str) -> Result<Option<BucketRecord>> {
        let m = self.shared.lock();
        if let Some(b) = m.bucket(caller, name)? {
            return Ok(Some(b));
        }
        let base = name_base(name);
        let owners = m.kv.range(&base, true, prefix_end(&base).as_deref(), 2);
        let [(key, _)] = owners.as_slice() else {
            return Ok(None);
        };
        let owner = String::from_utf8_lossy(&key[base.len()..]).into_owned();
        m.bucket(&owner, name)
    }

    /// Objects in bucket `name` and their total size in bytes (a scan of the
    /// bucket's index entries).
    pub fn bucket_usage(&self, owner: &str, name: &str) -> Result<(u64, u64)> {
        let m = self.shared.lock();
        m.owned_bucket(owner, name)?;
        bucket_usage(m.kv.as_ref(), owner, name)
    }

    /// The metadata of account `owner` (empty if none was ever set).
    pub fn account_meta(&self, owner: &str) -> Result<BTreeMap<String, String>> {
        let m = self.shared.lock();
        let rec: Option<AccountRecord> =
            m.kv.get(&account_key(owner))
                .map(|v| decode(&v).map_err(|e| corrupt("account record", e)))
                .transpose()?;
        Ok(rec.unwrap_or_default().meta)
    }

    /// Merges `meta` into the metadata of account `owner` (an empty value removes
    /// a name).
    pub async fn update_account_meta(
        &self,
        owner: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<()> {
        self.shared
            .commit(|m| {
                let mut rec: AccountRecord =
                    m.kv.get(&account_key(owner))
                        .map(|v| decode(&v).map_err(|e| corrupt("account record", e)))
                        .transpose()?
                        .unwrap_or_default();
                merge_meta(&mut rec.meta, meta);
                if rec.meta.is_empty() {
                    m.kv.delete(&account_key(owner));
                } else {
                    m.kv.put(&account_key(owner), encode(&rec));
                }
                Ok(())
            })
            .await
    }
}
