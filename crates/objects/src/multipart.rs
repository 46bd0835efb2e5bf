//! Multipart uploads: parts are written like objects and kept in the upload's
//! record; completion makes them the segments of one object without moving data.

use std::collections::BTreeMap;

use md5::{Digest, Md5};
use rand::RngCore;

use crate::alloc::Run;
use crate::listing::{self, UploadInfo};
use crate::records::*;
use crate::{
    check_key, now_ms, random_id, ByteStream, ObjectError, ObjectLayer, OpenObject, PartOptions,
    PutMode, Result, MAX_PARTS,
};

/// Completed uploads remembered for a repeated CompleteMultipartUpload (S3 answers
/// it again with the same result); the oldest is forgotten beyond this many.
pub(crate) const COMPLETED_REMEMBERED: usize = 1024;

/// What a completion produced, to answer a repeated completion of the same upload.
#[derive(Clone, Debug)]
pub(crate) struct Completed {
    owner: String,
    bucket: String,
    key: String,
    parts: Vec<(u32, String)>,
    object_id: u64,
    etag: String,
}

/// What a completion did.
enum Done {
    /// Made a new object: it, the versions it dropped, and the unused parts' blocks.
    New(Box<(ObjectRecord, Vec<ObjectRecord>, Vec<Run>)>),
    /// Repeated an earlier completion: the object it made.
    Again(Box<ObjectRecord>),
}

/// The parts listed for completion, in order, with a run of equal part numbers
/// reduced to its last entry (a part uploaded twice whose first upload finished
/// last is listed twice by some clients); refuses descending numbers.
fn listed_parts(parts: &[(u32, String)]) -> Result<Vec<(u32, String)>> {
    if parts.is_empty() {
        return Err(ObjectError::InvalidPart("no parts listed".into()));
    }
    if parts.windows(2).any(|w| w[0].0 > w[1].0) {
        return Err(ObjectError::InvalidPartOrder);
    }
    let mut out: Vec<(u32, String)> = Vec::with_capacity(parts.len());
    for (n, etag) in parts {
        let etag = etag.trim().trim_matches('"').to_string();
        match out.last_mut() {
            Some(last) if last.0 == *n => last.1 = etag,
            _ => out.push((*n, etag)),
        }
    }
    Ok(out)
}

impl ObjectLayer {
    /// Starts a multipart upload; returns its id.
    pub async fn create_multipart(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
    ) -> Result<String> {
        self.create_multipart_tagged(owner, bucket, key, meta, crate::Tags::new())
            .await
    }

    /// [`ObjectLayer::create_multipart`] of an object that gets `tags`.
    pub async fn create_multipart_tagged(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        tags: crate::Tags,
    ) -> Result<String> {
        self.create_multipart_locked(owner, (bucket, key), meta, tags, LockRequest::default())
            .await
    }

    /// [`ObjectLayer::create_multipart_tagged`] of an object that gets the
    /// object lock `lock` (see [`crate::lock`]; checked now and again at
    /// completion, where the bucket's default applies without one).
    pub async fn create_multipart_locked(
        &self,
        owner: &str,
        (bucket, key): (&str, &str),
        meta: ObjectMeta,
        tags: crate::Tags,
        lock: LockRequest,
    ) -> Result<String> {
        check_key(key)?;
        let mut id = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut id);
        let id = hex::encode(id);
        let rec = UploadRecord {
            bucket: bucket.into(),
            key: key.into(),
            owner: owner.into(),
            initiated_ms: now_ms(),
            meta,
            parts: BTreeMap::new(),
            tags,
            lock,
        };
        self.shared
            .commit(|m| {
                let b = m.owned_bucket(owner, bucket)?;
                crate::lock::lock_new_version(&b, &mut ObjectRecord::default(), &lock)?;
                m.kv.put(&upload_key(&id), encode(&rec));
                Ok(())
            })
            .await?;
        Ok(id)
    }

    /// The upload `upload_id`, checked to belong to `bucket/key` and `owner`.
    pub fn get_upload(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<UploadRecord> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let u = m.upload(owner, upload_id)?;
        if u.bucket != bucket || u.key != key {
            return Err(ObjectError::NoSuchUpload(upload_id.into()));
        }
        Ok(u)
    }

    /// Stores part `number` of an upload, replacing an earlier part of that number
    /// (of two uploads of one part number, the one that finishes last stays).
    pub async fn upload_part(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        number: u32,
        body: ByteStream,
        opts: PartOptions,
    ) -> Result<PartRecord> {
        let (bucket, key, upload_id) = target;
        if !(1..=MAX_PARTS).contains(&number) {
            return Err(ObjectError::InvalidPartNumber(number));
        }
        self.shared.writable()?;
        self.get_upload(owner, bucket, key, upload_id)?;
        let (segment, md5) = self
            .write_body(body, opts.expected_len, opts.expected_md5)
            .await?;
        let part = PartRecord {
            etag: hex::encode(md5),
            size: segment.len,
            modified_ms: now_ms(),
            segment,
        };
        let old = self
            .shared
            .commit(|m| {
                let mut u = match m.upload(owner, upload_id) {
                    Ok(u) => u,
                    Err(e) => {
                        // Aborted meanwhile: the part's blocks were never indexed.
                        m.alloc.free(&part.segment.runs);
                        return Err(e);
                    }
                };
                let old = u.parts.insert(number, part.clone());
                m.kv.put(&upload_key(upload_id), encode(&u));
                Ok(old)
            })
            .await?;
        if let Some(old) = old {
            self.shared.lock().alloc.free(&old.segment.runs);
        }
        Ok(part)
    }

    /// Stores part `number` as a copy of `range` of an opened object.
    pub async fn upload_part_copy(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        number: u32,
        src: OpenObject,
        range: Option<std::ops::Range<u64>>,
    ) -> Result<PartRecord> {
        let len = range.as_ref().map_or(src.rec.size, |r| r.end - r.start);
        let body = self.read(src, range)?;
        let opts = PartOptions {
            expected_len: Some(len),
            expected_md5: None,
        };
        self.upload_part(owner, target, number, body, opts).await
    }

    /// Completes an upload from the listed `(part number, ETag)` pairs; the object
    /// replaces any earlier one atomically (as `mode` allows). Parts not listed
    /// are freed. Completing an upload that this process completed before, with
    /// the same parts and while that object is still current, answers the same
    /// object again (as S3 does).
    pub async fn complete_multipart(
        &self,
        owner: &str,
        target: (&str, &str, &str),
        parts: &[(u32, String)],
        mode: &PutMode,
    ) -> Result<ObjectRecord> {
        let (bucket, key, upload_id) = target;
        let parts = listed_parts(parts)?;
        let min_part_size = self.shared.cfg.min_part_size;
        let done = self
            .shared
            .commit(|m| {
                let b = m.owned_bucket(owner, bucket)?;
                let mut u = match m.upload(owner, upload_id) {
                    Err(ObjectError::NoSuchUpload(_)) => {
                        let again = m.completed_again(owner, (bucket, key, upload_id), &parts)?;
                        return Ok(Done::Again(Box::new(again)));
                    }
                    r => r?,
                };
                if u.bucket != bucket || u.key != key {
                    return Err(ObjectError::NoSuchUpload(upload_id.into()));
                }
                let mut segments = Vec::with_capacity(parts.len());
                let mut md5s = Vec::with_capacity(parts.len() * 16);
                for (i, (n, etag)) in parts.iter().enumerate() {
                    let p = u.parts.get(n).ok_or_else(|| {
                        ObjectError::InvalidPart(format!("part {n} not uploaded"))
                    })?;
                    if *etag != p.etag {
                        return Err(ObjectError::InvalidPart(format!(
                            "part {n}: ETag does not match"
                        )));
                    }
                    if i + 1 < parts.len() && p.size < min_part_size {
                        return Err(ObjectError::PartTooSmall {
                            part: *n,
                            size: p.size,
                            min: min_part_size,
                        });
                    }
                    let raw: Vec<u8> = (0..16)
                        .map(|j| u8::from_str_radix(&p.etag[2 * j..2 * j + 2], 16).unwrap_or(0))
                        .collect();
                    md5s.extend_from_slice(&raw);
                    segments.push(p.segment.clone());
                }
                let old = m.stored_object(owner, bucket, key)?;
                let live = old.as_ref().filter(|r| !r.expired(crate::now_secs()));
                super::write::check_mode(mode, key, live)?;
                for (n, _) in &parts {
                    u.parts.remove(n);
                }
                let mut rec = ObjectRecord {
                    id: random_id(),
                    size: segments.iter().map(|s| s.len).sum(),
                    etag: format!("{}-{}", hex::encode(Md5::digest(&md5s)), parts.len()),
                    modified_ms: now_ms(),
                    meta: u.meta.clone(),
                    segments,
                    tags: u.tags.clone(),
                    ..Default::default()
                };
                crate::lock::lock_new_version(&b, &mut rec, &u.lock)?;
                let gone = m.install(owner, &b, key, &mut rec, old)?;
                m.kv.delete(&upload_key(upload_id));
                m.remember_completed(
                    upload_id,
                    Completed {
                        owner: owner.into(),
                        bucket: bucket.into(),
                        key: key.into(),
                        parts: parts.clone(),
                        object_id: rec.id,
                        etag: rec.etag.clone(),
                    },
                );
                let unused: Vec<Run> = u
                    .parts
                    .values()
                    .flat_map(|p| p.segment.runs.clone())
                    .collect();
                Ok(Done::New(Box::new((rec, gone, unused))))
            })
            .await?;
        let (rec, gone, unused) = match done {
            Done::New(new) => *new,
            Done::Again(rec) => return Ok(*rec),
        };
        let mut m = self.shared.lock();
        m.alloc.free(&unused);
        for old in gone {
            m.release(old.id, &old.segments);
        }
        Ok(rec)
    }

    /// Aborts an upload and frees its parts (all under one lock, so a part upload
    /// racing the abort either lands before and is freed here, or finds the upload
    /// gone and frees its own blocks).
    pub async fn abort_multipart(&self, owner: &str, target: (&str, &str, &str)) -> Result<()> {
        let (bucket, key, upload_id) = target;
        let runs = self
            .shared
            .commit(|m| {
                m.owned_bucket(owner, bucket)?;
                let u = m.upload(owner, upload_id)?;
                if u.bucket != bucket || u.key != key {
                    return Err(ObjectError::NoSuchUpload(upload_id.into()));
                }
                m.kv.delete(&upload_key(upload_id));
                Ok(u.parts
                    .values()
                    .flat_map(|p| p.segment.runs.clone())
                    .collect::<Vec<Run>>())
            })
            .await?;
        self.shared.lock().alloc.free(&runs);
        Ok(())
    }

    /// Unfinished uploads in `bucket` whose key starts with `prefix`, by key then id.
    pub fn list_uploads(&self, owner: &str, bucket: &str, prefix: &str) -> Result<Vec<UploadInfo>> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let mut out: Vec<UploadInfo> = listing::all_uploads(m.kv.as_ref())?
            .into_iter()
            .filter(|(_, u)| u.bucket == bucket && u.key.starts_with(prefix))
            .map(|(id, u)| UploadInfo {
                upload_id: id,
                key: u.key,
                initiated_ms: u.initiated_ms,
                owner: u.owner,
            })
            .collect();
        out.sort_by(|a, b| (&a.key, &a.upload_id).cmp(&(&b.key, &b.upload_id)));
        Ok(out)
    }
}

impl crate::Meta {
    /// Remembers a completion (in memory only, the oldest forgotten first).
    fn remember_completed(&mut self, upload_id: &str, c: Completed) {
        if self.completed.len() >= COMPLETED_REMEMBERED {
            if let Some(oldest) = self.completed_order.pop_front() {
                self.completed.remove(&oldest);
            }
        }
        if self.completed.insert(upload_id.to_string(), c).is_none() {
            self.completed_order.push_back(upload_id.to_string());
        }
    }

    /// A repeated completion of an upload this process completed: if it lists the
    /// same parts and the object is still the one it made, that object; otherwise
    /// [`ObjectError::NoSuchUpload`].
    fn completed_again(
        &self,
        owner: &str,
        (bucket, key, upload_id): (&str, &str, &str),
        parts: &[(u32, String)],
    ) -> Result<ObjectRecord> {
        let gone = || ObjectError::NoSuchUpload(upload_id.into());
        let c = self.completed.get(upload_id).ok_or_else(gone)?;
        let same = c.owner == owner && c.bucket == bucket && c.key == key && c.parts == parts;
        match self.object(owner, bucket, key)? {
            Some(r) if same && r.id == c.object_id && r.etag == c.etag => Ok(r),
            _ => Err(gone()),
        }
    }
}
