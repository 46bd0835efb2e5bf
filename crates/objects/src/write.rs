//! Writes: streaming a body into fresh blocks ([`BlockWriter`]), PUT with its
//! options, copy, metadata updates and delete.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use md5::{Digest, Md5};
use oram_engine::Op;

use crate::alloc::{extend_runs, nth_block, Run};
use crate::records::*;
use crate::{
    check_key, corrupt, now_ms, random_id, ByteStream, Deleted, EtagList, Meta, ObjectError,
    ObjectLayer, OpenObject, Result, Shared, MAX_PUT_SIZE,
};

/// When a PUT may replace what is stored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PutMode {
    /// Create or replace (a plain PUT).
    #[default]
    Overwrite,
    /// Only if no object of that name exists when the upload commits
    /// (`If-None-Match: *`); of two racing creates exactly one succeeds.
    Create,
    /// Only if the object exists and its ETag matches (`If-Match`, strong
    /// comparison), checked before the body is read and again, atomically, when
    /// the upload commits. A missing object is [`ObjectError::NoSuchKey`] (as S3
    /// answers), a mismatch [`ObjectError::PreconditionFailed`].
    IfMatch(EtagList),
}

/// What a PUT stores besides its body, and what it checks.
#[derive(Clone, Debug, Default)]
pub struct PutOptions {
    /// The object's metadata.
    pub meta: ObjectMeta,
    /// The announced length: a longer or shorter body is refused, and a length
    /// that cannot fit is refused before any data moves.
    pub expected_len: Option<u64>,
    /// The body's MD5 as the client sent it (S3 `Content-MD5`, Swift `ETag`): a
    /// body with another MD5 is refused ([`ObjectError::BadDigest`]) before it
    /// commits. The layer hashes the body once, for this and for the ETag.
    pub expected_md5: Option<[u8; 16]>,
    /// Create, overwrite or replace-if-match.
    pub mode: PutMode,
    /// When the object expires (Swift `X-Delete-At`), seconds since the Unix
    /// epoch; 0: never.
    pub delete_at: i64,
    /// The object's tags (S3's `x-amz-tagging`; see [`crate::tag_set`]).
    pub tags: crate::Tags,
    /// The object lock the new version gets (see [`crate::lock`]).
    pub lock: LockRequest,
}

/// What a copy stores besides the source's data (see
/// [`ObjectLayer::copy_object_with`]).
#[derive(Clone, Debug, Default)]
pub struct CopyOptions {
    /// New metadata (`None`: the source's).
    pub meta: Option<ObjectMeta>,
    /// When the copy expires, seconds since the Unix epoch; 0: never.
    pub delete_at: i64,
    /// New tags (`None`: the source's).
    pub tags: Option<crate::Tags>,
    /// The object lock the copy gets (never the source's; see [`crate::lock`]).
    pub lock: LockRequest,
}

/// What an uploaded part is checked against.
#[derive(Clone, Debug, Default)]
pub struct PartOptions {
    /// The announced length (see [`PutOptions::expected_len`]).
    pub expected_len: Option<u64>,
    /// The body's MD5 (see [`PutOptions::expected_md5`]).
    pub expected_md5: Option<[u8; 16]>,
}

/// Writes a stream into freshly allocated blocks. Dropped before `finish`, it frees them.
pub(crate) struct BlockWriter {
    shared: Arc<Shared>,
    runs: Vec<Run>,
    buf: BytesMut,
    pub(crate) len: u64,
    max: u64,
    md5: Md5,
    finished: bool,
}

impl BlockWriter {
    pub(crate) fn new(shared: Arc<Shared>, max: u64) -> Self {
        Self {
            shared,
            runs: Vec::new(),
            buf: BytesMut::new(),
            len: 0,
            max,
            md5: Md5::new(),
            finished: false,
        }
    }

    fn batch_bytes(&self) -> usize {
        self.shared.cfg.batch_blocks * self.shared.oram.block_size()
    }

    pub(crate) async fn write(&mut self, data: Bytes) -> Result<()> {
        self.len += data.len() as u64;
        if self.len > self.max {
            return Err(ObjectError::TooLarge { max: self.max });
        }
        self.md5.update(&data);
        self.buf.extend_from_slice(&data);
        while self.buf.len() >= self.batch_bytes() {
            let chunk = self.buf.split_to(self.batch_bytes()).freeze();
            self.store(chunk).await?;
        }
        Ok(())
    }

    async fn store(&mut self, chunk: Bytes) -> Result<()> {
        let bs = self.shared.oram.block_size();
        let n = chunk.len().div_ceil(bs) as u64;
        let runs = {
            let mut m = self.shared.lock();
            let free = m.alloc.free_blocks();
            m.alloc
                .alloc(n)
                .ok_or(ObjectError::Full { needed: n, free })?
        };
        let first = self.runs.iter().map(|r| r.len).sum::<u64>();
        extend_runs(&mut self.runs, runs);
        let mut ops = Vec::with_capacity(n as usize);
        for i in 0..n {
            let block = nth_block(&self.runs, first + i).expect("just allocated");
            let piece = chunk.slice(i as usize * bs..((i as usize + 1) * bs).min(chunk.len()));
            let data = if piece.len() == bs {
                piece
            } else {
                let mut v = piece.to_vec();
                v.resize(bs, 0);
                Bytes::from(v)
            };
            ops.push(Op::Write(block, data));
        }
        self.shared.oram.access(ops).await?;
        Ok(())
    }

    async fn write_stream(&mut self, mut body: ByteStream) -> Result<()> {
        while let Some(chunk) = body.next().await {
            self.write(chunk?).await?;
        }
        Ok(())
    }

    /// Checks the MD5 of everything written against `want` (dropping the writer,
    /// so freeing its blocks, on a mismatch), stores the tail, and returns the
    /// segment and the MD5.
    pub(crate) async fn finish(mut self, want: Option<[u8; 16]>) -> Result<(Segment, [u8; 16])> {
        let md5: [u8; 16] = std::mem::take(&mut self.md5).finalize().into();
        if want.is_some_and(|w| w != md5) {
            return Err(ObjectError::BadDigest);
        }
        if !self.buf.is_empty() {
            let tail = std::mem::take(&mut self.buf).freeze();
            self.store(tail).await?;
        }
        self.finished = true;
        Ok((
            Segment {
                runs: std::mem::take(&mut self.runs),
                len: self.len,
            },
            md5,
        ))
    }
}

impl Drop for BlockWriter {
    fn drop(&mut self) {
        if !self.finished && !self.runs.is_empty() {
            self.shared.lock().alloc.free(&self.runs);
        }
    }
}

/// Checks a write's mode against what is stored now.
pub(crate) fn check_mode(mode: &PutMode, key: &str, current: Option<&ObjectRecord>) -> Result<()> {
    match (mode, current) {
        (PutMode::Overwrite, _) | (PutMode::Create, None) => Ok(()),
        (PutMode::Create, Some(_)) => Err(ObjectError::PreconditionFailed(format!(
            "object {key} already exists"
        ))),
        (PutMode::IfMatch(_), None) => Err(ObjectError::NoSuchKey(key.into())),
        (PutMode::IfMatch(list), Some(rec)) => crate::Preconditions {
            if_match: Some(list.clone()),
            ..Default::default()
        }
        .evaluate(Some(crate::Validators::of(rec)), false, crate::Dialect::S3),
    }
}

impl Meta {
    /// Makes `rec` the object `bucket/key` if `owner` still owns the bucket and
    /// `mode` allows it (as the bucket's versioning says: see
    /// [`Meta::install`]), with the object lock `lock` asks for or the bucket's
    /// default; returns the versions it drops. On error the index is unchanged
    /// and `rec`'s blocks are freed.
    fn replace_object(
        &mut self,
        owner: &str,
        (bucket, key): (&str, &str),
        rec: &mut ObjectRecord,
        (mode, lock): (&PutMode, &LockRequest),
    ) -> Result<Vec<ObjectRecord>> {
        let now = crate::now_secs();
        let checked = self.owned_bucket(owner, bucket).and_then(|b| {
            let old = self.stored_object(owner, bucket, key)?;
            let live = old.as_ref().filter(|r| !r.expired(now));
            check_mode(mode, key, live)?;
            crate::lock::lock_new_version(&b, rec, lock)?;
            Ok((b, old))
        });
        match checked {
            Ok((b, old)) => self.install(owner, &b, key, rec, old),
            Err(e) => {
                self.release(rec.id, &rec.segments);
                Err(e)
            }
        }
    }
}

impl ObjectLayer {
    /// Stores `body` as `bucket/key`, replacing any earlier object atomically (as
    /// `opts.mode` allows). Nothing changes if the body fails, is not as long as
    /// announced, has another MD5 than announced, or cannot fit.
    pub async fn put_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        body: ByteStream,
        opts: PutOptions,
    ) -> Result<ObjectRecord> {
        check_key(key)?;
        self.shared.writable()?;
        {
            // Fail fast, before reading the body; checked again at commit.
            let m = self.shared.lock();
            let b = m.owned_bucket(owner, bucket)?;
            check_mode(&opts.mode, key, m.object(owner, bucket, key)?.as_ref())?;
            let mut probe = ObjectRecord {
                delete_at: opts.delete_at,
                ..Default::default()
            };
            crate::lock::lock_new_version(&b, &mut probe, &opts.lock)?;
        }
        let (segment, md5) = self
            .write_body(body, opts.expected_len, opts.expected_md5)
            .await?;
        let rec = ObjectRecord {
            id: random_id(),
            size: segment.len,
            etag: hex::encode(md5),
            modified_ms: now_ms(),
            meta: opts.meta,
            segments: vec![segment],
            delete_at: opts.delete_at,
            tags: opts.tags,
            ..Default::default()
        };
        self.commit_object(owner, (bucket, key), rec, (&opts.mode, &opts.lock))
            .await
    }

    /// Writes a client body into fresh blocks: refused up front if `expected_len`
    /// is too large or cannot fit, and refused (blocks freed) if the body's length
    /// differs from it or its MD5 from `expected_md5`. Returns the segment and the
    /// body's MD5.
    pub(crate) async fn write_body(
        &self,
        body: ByteStream,
        expected_len: Option<u64>,
        expected_md5: Option<[u8; 16]>,
    ) -> Result<(Segment, [u8; 16])> {
        if let Some(n) = expected_len {
            if n > MAX_PUT_SIZE {
                return Err(ObjectError::TooLarge { max: MAX_PUT_SIZE });
            }
            self.check_room(n)?;
        }
        let mut w = BlockWriter::new(self.shared.clone(), MAX_PUT_SIZE);
        w.write_stream(body).await?;
        if let Some(n) = expected_len {
            if w.len != n {
                return Err(ObjectError::IncompleteBody {
                    got: w.len,
                    expected: n,
                });
            }
        }
        w.finish(expected_md5).await
    }

    /// Writes `body` as segments of the given lengths (the body must have exactly
    /// their sum). On error every block written is freed.
    async fn write_segments(&self, mut body: ByteStream, lens: &[u64]) -> Result<Vec<Segment>> {
        let mut done: Vec<Segment> = Vec::with_capacity(lens.len());
        let result: Result<()> = async {
            let mut carry = Bytes::new();
            for &len in lens {
                let mut w = BlockWriter::new(self.shared.clone(), len);
                while w.len < len {
                    if carry.is_empty() {
                        carry = match body.next().await {
                            Some(chunk) => chunk?,
                            None => {
                                return Err(ObjectError::IncompleteBody {
                                    got: w.len,
                                    expected: len,
                                })
                            }
                        };
                    }
                    let take = carry.len().min((len - w.len) as usize);
                    w.write(carry.split_to(take)).await?;
                }
                done.push(w.finish(None).await?.0);
            }
            if !carry.is_empty() || body.next().await.is_some() {
                return Err(corrupt("copy source", "longer than its record".into()));
            }
            Ok(())
        }
        .await;
        match result {
            Ok(()) => Ok(done),
            Err(e) => {
                let runs: Vec<Run> = done.iter().flat_map(|s| s.runs.clone()).collect();
                self.shared.lock().alloc.free(&runs);
                Err(e)
            }
        }
    }

    /// Refuses early a write of `bytes` that cannot fit.
    pub(crate) fn check_room(&self, bytes: u64) -> Result<()> {
        let needed = bytes.div_ceil(self.shared.oram.block_size() as u64);
        let free = self.shared.lock().alloc.free_blocks();
        if needed > free {
            return Err(ObjectError::Full { needed, free });
        }
        Ok(())
    }

    /// Makes `rec` the object `bucket/key` in one durable step and releases the
    /// version it replaces (in a versioned bucket that version is kept). If the
    /// bucket vanished meanwhile or `mode` no longer allows the write, frees
    /// `rec`'s blocks instead. Returns `rec` with its version id and order.
    async fn commit_object(
        &self,
        owner: &str,
        name: (&str, &str),
        mut rec: ObjectRecord,
        checks: (&PutMode, &LockRequest),
    ) -> Result<ObjectRecord> {
        let gone = self
            .shared
            .commit(|m| m.replace_object(owner, name, &mut rec, checks))
            .await?;
        let mut m = self.shared.lock();
        for old in gone {
            m.release(old.id, &old.segments);
        }
        Ok(rec)
    }

    /// Replaces the metadata and expiry time (0: none) of `bucket/key` without
    /// touching its data (a new last-modified time, same ETag and blocks). A
    /// bucket with object lock refuses an expiry time ([`crate::lock`]).
    pub async fn set_object_meta(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        delete_at: i64,
    ) -> Result<ObjectRecord> {
        self.shared
            .commit(|m| {
                let b = m.owned_bucket(owner, bucket)?;
                if delete_at > 0 && b.object_lock.is_some() {
                    return Err(ObjectError::InvalidArgument(
                        "objects in a bucket with object lock cannot expire".into(),
                    ));
                }
                let old = m
                    .object(owner, bucket, key)?
                    .ok_or_else(|| ObjectError::NoSuchKey(key.into()))?;
                let mut rec = old.clone();
                rec.meta = meta;
                rec.delete_at = delete_at;
                rec.modified_ms = now_ms();
                m.put_object_record((owner, bucket, key), &rec, Some(&old));
                Ok(rec)
            })
            .await
    }

    /// Deletes `bucket/key`; a missing key is not an error (as in S3). With
    /// `if_match`, deletes only an object whose ETag matches (else
    /// [`ObjectError::PreconditionFailed`]; a missing key then is
    /// [`ObjectError::NoSuchKey`]). Returns whether an object was deleted.
    /// In a versioned bucket this makes a delete marker (see
    /// [`ObjectLayer::delete_object_versioned`]).
    pub async fn delete_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        if_match: Option<&EtagList>,
    ) -> Result<bool> {
        Ok(self
            .delete_object_versioned(owner, bucket, key, if_match)
            .await?
            .existed)
    }

    /// [`ObjectLayer::delete_object`], saying what it did: in a bucket never
    /// versioned it removes the object and frees its blocks; in a versioned
    /// bucket it makes a delete marker the newest version (when versioning is
    /// enabled the current version is kept as a noncurrent one; when it is
    /// suspended the marker replaces the null version).
    pub async fn delete_object_versioned(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        if_match: Option<&EtagList>,
    ) -> Result<Deleted> {
        let versioned = {
            let m = self.shared.lock();
            let b = m.owned_bucket(owner, bucket)?;
            let old = m.object(owner, bucket, key)?;
            if let Some(list) = if_match {
                check_mode(&PutMode::IfMatch(list.clone()), key, old.as_ref())?;
            }
            if b.versioning.is_off() && old.is_none() {
                // Nothing to delete: answer without a commit.
                return Ok(Deleted::default());
            }
            !b.versioning.is_off()
        };
        if versioned {
            return self.delete_with_marker(owner, bucket, key, if_match).await;
        }
        let old = self
            .shared
            .commit(|m| {
                let b = m.owned_bucket(owner, bucket)?;
                if !b.versioning.is_off() {
                    // Versioning was enabled meanwhile.
                    return Ok(Err(()));
                }
                let old = m.object(owner, bucket, key)?;
                if let Some(list) = if_match {
                    check_mode(&PutMode::IfMatch(list.clone()), key, old.as_ref())?;
                }
                if let Some(old) = &old {
                    m.delete_object_record((owner, bucket, key), old);
                }
                Ok(Ok(old))
            })
            .await?;
        let old = match old {
            Ok(old) => old,
            Err(()) => return self.delete_with_marker(owner, bucket, key, if_match).await,
        };
        let Some(old) = old else {
            return Ok(Deleted::default());
        };
        self.shared.lock().release(old.id, &old.segments);
        Ok(Deleted {
            existed: true,
            ..Default::default()
        })
    }

    /// Copies the opened object `src` (found at `src_name`) to `dst` of `owner`;
    /// `meta` replaces the metadata (`None` keeps the source's); the copy expires
    /// at `delete_at` (0: never). Copying an object onto itself with
    /// new metadata changes only the metadata; if the object was replaced since it
    /// was opened, that fails with [`ObjectError::Conflict`]. In a versioned
    /// bucket every copy, onto itself too, is a new version with its own blocks
    /// (a copy of an old version onto its key restores it).
    pub async fn copy_object(
        &self,
        owner: &str,
        src: OpenObject,
        src_name: (&str, &str),
        dst: (&str, &str),
        meta: Option<ObjectMeta>,
        delete_at: i64,
    ) -> Result<ObjectRecord> {
        let opts = CopyOptions {
            meta,
            delete_at,
            ..Default::default()
        };
        self.copy_object_with(owner, src, (src_name, dst), opts)
            .await
    }

    /// [`ObjectLayer::copy_object`] with all its options: `opts.tags` replaces
    /// the tags (`None` keeps the source's), `opts.lock` sets the copy's
    /// object lock (the bucket's default without one; never the source's).
    pub async fn copy_object_with(
        &self,
        owner: &str,
        src: OpenObject,
        (src_name, dst): ((&str, &str), (&str, &str)),
        opts: CopyOptions,
    ) -> Result<ObjectRecord> {
        let CopyOptions {
            meta,
            delete_at,
            tags,
            lock,
        } = opts;
        check_key(dst.1)?;
        let in_place = src.owner == owner
            && src_name == dst
            && self
                .shared
                .lock()
                .owned_bucket(owner, dst.0)?
                .versioning
                .is_off();
        if in_place {
            return self
                .shared
                .commit(|m| {
                    let b = m.owned_bucket(owner, dst.0)?;
                    let old = m
                        .object(owner, dst.0, dst.1)?
                        .ok_or_else(|| ObjectError::NoSuchKey(dst.1.into()))?;
                    let mut probe = old.clone();
                    probe.delete_at = delete_at;
                    crate::lock::lock_new_version(&b, &mut probe, &lock)?;
                    if old.id != src.rec.id {
                        return Err(ObjectError::Conflict(dst.1.into()));
                    }
                    let mut rec = old.clone();
                    if let Some(meta) = meta {
                        rec.meta = meta;
                    }
                    if let Some(tags) = tags {
                        rec.tags = tags;
                    }
                    rec.delete_at = delete_at;
                    rec.modified_ms = now_ms();
                    m.put_object_record((owner, dst.0, dst.1), &rec, Some(&old));
                    Ok(rec)
                })
                .await;
        }
        self.shared.writable()?;
        {
            // Fail fast, before copying data; checked again at commit.
            let b = self.shared.lock().owned_bucket(owner, dst.0)?;
            let mut probe = ObjectRecord {
                delete_at,
                ..Default::default()
            };
            crate::lock::lock_new_version(&b, &mut probe, &lock)?;
        }
        let (etag, src_meta) = (src.rec.etag.clone(), src.rec.meta.clone());
        let tags = tags.unwrap_or_else(|| src.rec.tags.clone());
        // Segment by segment, so the copy has the source's part layout and its
        // multipart ETag can still be verified (fsck).
        let lens: Vec<u64> = src.rec.segments.iter().map(|s| s.len).collect();
        self.check_room(src.rec.size)?;
        let body = self.read(src, None)?;
        let segments = self.write_segments(body, &lens).await?;
        let rec = ObjectRecord {
            id: random_id(),
            size: segments.iter().map(|s| s.len).sum(),
            etag,
            modified_ms: now_ms(),
            meta: meta.unwrap_or(src_meta),
            segments,
            delete_at,
            tags,
            ..Default::default()
        };
        self.commit_object(owner, dst, rec, (&PutMode::Overwrite, &lock))
            .await
    }

    /// Removes the index entries of up to `limit` objects that expired at or
    /// before `now` (seconds since the epoch); returns how many went. Expired
    /// objects already read as absent; this only frees their blocks. It sends no
    /// backend request: freeing blocks is a change of the local index only.
    pub async fn purge_expired(&self, now: i64, limit: usize) -> Result<usize> {
        let due = {
            let m = self.shared.lock();
            let end = expiry_key(now.saturating_add(1), "", "", "");
            m.kv.range(b"x/", true, Some(&end[..2 + 16]), limit)
        };
        if due.is_empty() {
            return Ok(0);
        }
        let gone = self
            .shared
            .commit(|m| {
                let mut gone = Vec::new();
                for (k, _) in &due {
                    let Some((owner, bucket, key)) = split_name(&k[2 + 16 + 1..]) else {
                        m.kv.delete(k);
                        continue;
                    };
                    let at = std::str::from_utf8(&k[2..2 + 16])
                        .ok()
                        .and_then(|h| i64::from_str_radix(h, 16).ok())
                        .unwrap_or(0);
                    match m.stored_object(&owner, &bucket, &key)? {
                        Some(rec) if rec.delete_at == at && rec.expired(now) => {
                            m.delete_object_record((&owner, &bucket, &key), &rec);
                            m.promote((&owner, &bucket, &key));
                            gone.push(rec);
                        }
                        // Replaced meanwhile: a stale queue entry.
                        _ => {
                            m.kv.delete(k);
                        }
                    }
                }
                Ok(gone)
            })
            .await?;
        let n = gone.len();
        let mut m = self.shared.lock();
        for rec in gone {
            m.release(rec.id, &rec.segments);
        }
        Ok(n)
    }
}
