//! Reads: opening an object pins its version, and its blocks stream from the
//! engine `batch_blocks` at a time.

use std::ops::Range;
use std::sync::Arc;

use bytes::BytesMut;
use oram_engine::Op;

use crate::alloc::nth_block;
use crate::listing::{self, ListParams, ListResult, VersionList, VersionParams};
use crate::records::{ObjectRecord, Segment};
use crate::{corrupt, ByteStream, Meta, ObjectError, ObjectLayer, Result, Shared};

/// Keeps an object version's blocks from being freed while it is read.
pub(crate) struct ReadPin {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for ReadPin {
    fn drop(&mut self) {
        let mut m = self.shared.lock();
        let n = m.pins.get_mut(&self.id).expect("pinned");
        *n -= 1;
        if *n == 0 {
            m.pins.remove(&self.id);
            if let Some(runs) = m.deferred.remove(&self.id) {
                m.alloc.free(&runs);
            }
        }
    }
}

impl Shared {
    /// Pins version `id` (the caller holds the lock as `m`).
    pub(crate) fn pin(self: &Arc<Self>, m: &mut Meta, id: u64) -> ReadPin {
        *m.pins.entry(id).or_insert(0) += 1;
        ReadPin {
            shared: self.clone(),
            id,
        }
    }
}

/// An object opened for reading: its record, with its blocks pinned.
pub struct OpenObject {
    pub(crate) rec: ObjectRecord,
    pub(crate) pin: ReadPin,
    /// The account whose namespace it was opened in.
    pub(crate) owner: String,
}

impl OpenObject {
    /// The record of the version opened.
    pub fn record(&self) -> &ObjectRecord {
        &self.rec
    }
}

/// Where byte `offset` of an object is: segment index and offset within it.
fn locate(segments: &[Segment], mut offset: u64) -> Option<(usize, u64)> {
    for (i, s) in segments.iter().enumerate() {
        if offset < s.len {
            return Some((i, offset));
        }
        offset -= s.len;
    }
    None
}

impl ObjectLayer {
    /// The record of `bucket/key` (its current version); a key whose newest
    /// version is a delete marker is [`ObjectError::DeleteMarker`].
    pub fn head_object(&self, owner: &str, bucket: &str, key: &str) -> Result<ObjectRecord> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        match m.object(owner, bucket, key)? {
            Some(rec) => Ok(rec),
            None => Err(m.missing((owner, bucket, key))?),
        }
    }

    /// Opens `bucket/key`: its record, pinned so that its blocks stay intact until
    /// the returned handle (or the stream made from it) is dropped, even if the
    /// object is replaced meanwhile. Check conditions against
    /// [`OpenObject::record`] (see [`crate::Preconditions`]), then read with
    /// [`ObjectLayer::read`]: the bytes are those of the record checked.
    pub fn open_object(&self, owner: &str, bucket: &str, key: &str) -> Result<OpenObject> {
        let mut m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        let rec = match m.object(owner, bucket, key)? {
            Some(rec) => rec,
            None => return Err(m.missing((owner, bucket, key))?),
        };
        let pin = self.shared.pin(&mut m, rec.id);
        Ok(OpenObject {
            rec,
            pin,
            owner: owner.to_string(),
        })
    }

    /// Streams `range` (the whole object if `None`) of an opened object. The stream
    /// reads only the blocks of the range.
    ///
    /// # Errors
    /// [`ObjectError::InvalidRange`] if the range is empty or reaches past the end.
    pub fn read(&self, obj: OpenObject, range: Option<Range<u64>>) -> Result<ByteStream> {
        let size = obj.rec.size;
        let range = range.unwrap_or(0..size);
        if range.end > size || (range.start >= range.end && size > 0) {
            return Err(ObjectError::InvalidRange { size });
        }
        Ok(self.read_stream(obj.rec.segments, range, obj.pin))
    }

    /// Lists the versions and delete markers of a bucket's objects (S3's
    /// `ListObjectVersions`; see [`VersionParams`]): by key, newest first.
    pub fn list_object_versions(
        &self,
        owner: &str,
        bucket: &str,
        params: &VersionParams,
    ) -> Result<VersionList> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        listing::list_versions(m.kv.as_ref(), owner, bucket, params)
    }

    /// Lists the objects of a bucket (see [`ListParams`]).
    pub fn list_objects(
        &self,
        owner: &str,
        bucket: &str,
        params: &ListParams,
    ) -> Result<ListResult> {
        let m = self.shared.lock();
        m.owned_bucket(owner, bucket)?;
        listing::list(m.kv.as_ref(), owner, bucket, params)
    }

    /// [`ObjectLayer::open_object`] and [`ObjectLayer::read`] in one.
    pub fn get_object(
        &self,
        owner: &str,
        bucket: &str,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<(ObjectRecord, ByteStream)> {
        let obj = self.open_object(owner, bucket, key)?;
        let rec = obj.rec.clone();
        Ok((rec, self.read(obj, range)?))
    }

    pub(crate) fn read_stream(
        &self,
        segments: Vec<Segment>,
        range: Range<u64>,
        pin: ReadPin,
    ) -> ByteStream {
        struct St {
            shared: Arc<Shared>,
            segments: Vec<Segment>,
            pos: u64,
            end: u64,
            _pin: ReadPin,
        }
        let st = St {
            shared: self.shared.clone(),
            segments,
            pos: range.start,
            end: range.end,
            _pin: pin,
        };
        Box::pin(futures::stream::try_unfold(st, |mut st| async move {
            if st.pos >= st.end {
                return Ok(None);
            }
            let bs = st.shared.oram.block_size() as u64;
            // Up to batch_blocks blocks from pos: (block, from, to) within the block.
            let mut pieces = Vec::new();
            let mut pos = st.pos;
            while pos < st.end && pieces.len() < st.shared.cfg.batch_blocks {
                let (si, off) = locate(&st.segments, pos)
                    .ok_or_else(|| corrupt("object", "range beyond segments".into()))?;
                let seg = &st.segments[si];
                let block = nth_block(&seg.runs, off / bs)
                    .ok_or_else(|| corrupt("object", "segment shorter than its length".into()))?;
                let from = off % bs;
                let to = (bs.min(seg.len - (off - from))).min(from + (st.end - pos));
                pieces.push((block, from as usize, to as usize));
                pos += to - from;
            }
            let data = st
                .shared
                .oram
                .access(pieces.iter().map(|p| Op::Read(p.0)).collect())
                .await?;
            let mut out = BytesMut::with_capacity((pos - st.pos) as usize);
            for ((_, from, to), d) in pieces.iter().zip(data) {
                out.extend_from_slice(&d[*from..*to]);
            }
            st.pos = pos;
            Ok(Some((out.freeze(), st)))
        }))
    }
}
