//! Buckets (S3), containers (Swift) and account metadata.

use std::collections::BTreeMap;

use oram_state::KvState;

use crate::alloc::Run;
use crate::records::*;
use crate::{
    corrupt, listing, now_ms, valid_bucket_name, valid_container_name, ObjectError, ObjectLayer,
    Result,
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

fn bucket_usage(kv: &dyn KvState, bucket: &str) -> Result<(u64, u64)> {
    let (mut n, mut bytes) = (0u64, 0u64);
    scan_prefix(kv, &objects_base(bucket), |_, v| {
        let rec: ObjectRecord = decode(v).map_err(|e| corrupt("object record", e))?;
        n += 1;
        bytes += rec.size;
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
    }
}

impl ObjectLayer {
    /// Creates bucket `name` owned by `owner`.
    pub async fn create_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        if !valid_bucket_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .commit(|m| match m.bucket(name)? {
                Some(b) if b.owner == owner => {
                    Err(ObjectError::BucketAlreadyOwnedByYou(name.into()))
                }
                Some(_) => Err(ObjectError::BucketAlreadyExists(name.into())),
                None => {
                    let rec = new_bucket(owner, name);
                    m.kv.put(&bucket_key(name), encode(&rec));
                    Ok(rec)
                }
            })
            .await
    }

    /// The bucket, if `owner` owns it.
    pub fn head_bucket(&self, owner: &str, name: &str) -> Result<BucketRecord> {
        self.shared.lock().owned_bucket(owner, name)
    }

    /// The buckets `owner` owns, by name.
    pub fn list_buckets(&self, owner: &str) -> Result<Vec<BucketRecord>> {
        let m = self.shared.lock();
        let mut out = Vec::new();
        scan_prefix(m.kv.as_ref(), b"b/", |_, v| {
            let b: BucketRecord = decode(v).map_err(|e| corrupt("bucket", e))?;
            if b.owner == owner {
                out.push(b);
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Deletes an empty bucket; its unfinished multipart uploads are aborted.
    pub async fn delete_bucket(&self, owner: &str, name: &str) -> Result<()> {
        let runs = self
            .shared
            .commit(|m| {
                m.owned_bucket(owner, name)?;
                let base = objects_base(name);
                if !m
                    .kv
                    .range(&base, true, prefix_end(&base).as_deref(), 1)
                    .is_empty()
                {
                    return Err(ObjectError::BucketNotEmpty(name.into()));
                }
                let uploads = listing::all_uploads(m.kv.as_ref())?;
                let mut runs: Vec<Run> = Vec::new();
                for (id, u) in uploads.into_iter().filter(|(_, u)| u.bucket == name) {
                    m.kv.delete(&upload_key(&id));
                    runs.extend(u.parts.values().flat_map(|p| p.segment.runs.clone()));
                }
                m.kv.delete(&bucket_key(name));
                Ok(runs)
            })
            .await?;
        // Blocks are freed only once the index no longer refers to them durably.
        self.shared.lock().alloc.free(&runs);
        Ok(())
    }

    /// Creates container `name` (Swift naming rules, see [`valid_container_name`])
    /// owned by `owner` with metadata `meta`; if `owner` already has it, merges
    /// `meta` into its metadata instead (an empty value removes a name). Returns
    /// whether it was created.
    pub async fn create_container(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<bool> {
        if !valid_container_name(name) {
            return Err(ObjectError::InvalidBucketName(name.into()));
        }
        self.shared
            .commit(|m| {
                let (mut rec, created) = match m.bucket(name)? {
                    Some(b) if b.owner != owner => {
                        return Err(ObjectError::BucketAlreadyExists(name.into()))
                    }
                    Some(mut b) => {
                        b.meta_modified_ms = now_ms();
                        (b, false)
                    }
                    None => (new_bucket(owner, name), true),
                };
                merge_meta(&mut rec.meta, meta);
                m.kv.put(&bucket_key(name), encode(&rec));
                Ok(created)
            })
            .await
    }

    /// Merges `meta` into the metadata of bucket `name` (an empty value removes a
    /// name); returns the updated record.
    pub async fn update_bucket_meta(
        &self,
        owner: &str,
        name: &str,
        meta: BTreeMap<String, String>,
    ) -> Result<BucketRecord> {
        self.shared
            .commit(|m| {
                let mut b = m.owned_bucket(owner, name)?;
                merge_meta(&mut b.meta, meta);
                b.meta_modified_ms = now_ms();
                m.kv.put(&bucket_key(name), encode(&b));
                Ok(b)
            })
            .await
    }

    /// Objects in bucket `name` and their total size in bytes (a scan of the
    /// bucket's index entries).
    pub fn bucket_usage(&self, owner: &str, name: &str) -> Result<(u64, u64)> {
        let m = self.shared.lock();
        m.owned_bucket(owner, name)?;
        bucket_usage(m.kv.as_ref(), name)
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
