//! The consistency check behind `oram-proxy fsck`.

use futures::StreamExt;
use md5::{Digest, Md5};
use oram_engine::CheckReport;

use crate::records::{decode, scan_prefix, BucketRecord, ObjectRecord, Segment, UploadRecord};
use crate::{corrupt, ObjectLayer, OpenObject, Result};

/// Which part of the check a progress report is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckPhase {
    /// The engine's invariants (units: tree nodes or blocks).
    Engine,
    /// Re-reading every object (units: bytes).
    Objects,
}

/// What [`ObjectLayer::check`] found.
#[derive(Clone, Debug, Default)]
pub struct LayerCheck {
    /// The engine's own report.
    pub engine: CheckReport,
    /// Buckets in the index.
    pub buckets: u64,
    /// Objects in the index, all re-read.
    pub objects: u64,
    /// Unfinished multipart uploads.
    pub uploads: u64,
    /// Bytes re-read and checked against the ETags.
    pub bytes_verified: u64,
    /// Blocks the index refers to.
    pub blocks_used: u64,
    /// Everything wrong above the engine (the first 1000).
    pub problems: Vec<String>,
    /// How many problems above the engine there were in all.
    pub problems_total: u64,
}

impl LayerCheck {
    /// True when neither the engine nor the index has a problem.
    pub fn is_clean(&self) -> bool {
        self.engine.problems_total == 0 && self.problems_total == 0
    }

    fn problem(&mut self, p: impl Into<String>) {
        self.problems_total += 1;
        if self.problems.len() < 1000 {
            self.problems.push(p.into());
        }
    }
}

/// One bit per block.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: u64) -> Self {
        Self(vec![0; n.div_ceil(64) as usize])
    }
    /// Sets bit `i`; returns whether it was already set.
    fn set(&mut self, i: u64) -> bool {
        let (w, b) = ((i / 64) as usize, i % 64);
        let was = self.0[w] & (1 << b) != 0;
        self.0[w] |= 1 << b;
        was
    }
    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] & (1 << (i % 64)) != 0
    }
}

/// The ETag a record's segments must produce, from each segment's MD5.
fn expected_etag(segment_md5s: &[[u8; 16]], multipart: bool) -> String {
    if !multipart {
        return segment_md5s.first().map(hex::encode).unwrap_or_default();
    }
    let mut all = Md5::new();
    for m in segment_md5s {
        all.update(m);
    }
    format!("{}-{}", hex::encode(all.finalize()), segment_md5s.len())
}

impl ObjectLayer {
    /// Checks everything: the engine's invariants ([`oram_engine::Oram::check`]),
    /// that the index refers to every block at most once and only to blocks the
    /// engine holds, that the allocator agrees with the index, and that every object
    /// reads back completely with the ETag it was stored with. Run it on an idle
    /// proxy (`oram-proxy fsck` holds the data directory's lock).
    ///
    /// Observed by the storage server: the engine's check, then ordinary reads of
    /// every object's blocks.
    pub async fn check(
        &self,
        progress: &(dyn Fn(CheckPhase, u64, u64) + Send + Sync),
    ) -> Result<LayerCheck> {
        let oram = self.shared.oram.clone();
        let engine = oram
            .check(&|d, t| progress(CheckPhase::Engine, d, t))
            .await?;
        let mut rep = LayerCheck {
            engine,
            ..LayerCheck::default()
        };
        let capacity = oram.capacity();
        let bs = oram.block_size() as u64;
        let mut written = Bits::new(capacity);
        for &b in &rep.engine.written_blocks {
            if b < capacity {
                written.set(b);
            }
        }

        // The index, copied under the lock.
        let mut buckets = Vec::new();
        let mut objects: Vec<(String, ObjectRecord)> = Vec::new();
        let mut uploads: Vec<(String, UploadRecord)> = Vec::new();
        let free_blocks = {
            let m = self.shared.lock();
            scan_prefix(m.kv.as_ref(), b"b/", |_, v| {
                let b: BucketRecord = decode(v).map_err(|e| corrupt("bucket record", e))?;
                buckets.push(format!("{}/{}", b.owner, b.name));
                Ok(())
            })?;
            scan_prefix(m.kv.as_ref(), b"o/", |k, v| {
                let name = String::from_utf8_lossy(&k[2..]).replace('\0', "/");
                objects.push((name, decode(v).map_err(|e| corrupt("object record", e))?));
                Ok(())
            })?;
            scan_prefix(m.kv.as_ref(), b"u/", |k, v| {
                let id = String::from_utf8_lossy(&k[2..]).into_owned();
                uploads.push((id, decode(v).map_err(|e| corrupt("upload record", e))?));
                Ok(())
            })?;
            m.alloc.free_blocks()
        };
        rep.buckets = buckets.len() as u64;
        rep.objects = objects.len() as u64;
        rep.uploads = uploads.len() as u64;

        // Every block referred to once, within the capacity, and held by the engine.
        let mut used = Bits::new(capacity);
        let mut claim = |rep: &mut LayerCheck, what: &str, segments: &[Segment]| {
            for s in segments {
                let blocks: u64 = s.runs.iter().map(|r| r.len).sum();
                if blocks != s.len.div_ceil(bs) {
                    rep.problem(format!(
                        "{what}: a segment of {} bytes has {blocks} blocks",
                        s.len
                    ));
                }
                for r in &s.runs {
                    for b in r.start..r.start.saturating_add(r.len) {
                        if b >= capacity {
                            rep.problem(format!("{what}: block {b} beyond the capacity"));
                            break;
                        }
                        rep.blocks_used += 1;
                        if used.set(b) {
                            rep.problem(format!("{what}: block {b} is also used elsewhere"));
                        }
                        if !written.get(b) {
                            rep.problem(format!("{what}: block {b} was never written"));
                        }
                    }
                }
            }
        };
        for (name, rec) in &objects {
            if !buckets.iter().any(|b| name.starts_with(&format!("{b}/"))) {
                rep.problem(format!("object {name}: its bucket does not exist"));
            }
            if rec.size != rec.segments.iter().map(|s| s.len).sum::<u64>() {
                rep.problem(format!("object {name}: size differs from its segments"));
            }
            claim(&mut rep, &format!("object {name}"), &rec.segments);
        }
        for (id, u) in &uploads {
            let segments: Vec<Segment> = u.parts.values().map(|p| p.segment.clone()).collect();
            claim(&mut rep, &format!("upload {id}"), &segments);
        }
        if capacity - rep.blocks_used != free_blocks {
            rep.problem(format!(
                "allocator has {free_blocks} free blocks, the index leaves {}",
                capacity - rep.blocks_used
            ));
        }

        // Every object, byte by byte, against its ETag.
        let total: u64 = objects.iter().map(|(_, r)| r.size).sum();
        let mut done = 0;
        progress(CheckPhase::Objects, 0, total);
        for (name, rec) in objects {
            if rec.delete_marker {
                // No data: nothing to read.
                continue;
            }
            let multipart = rec.etag.contains('-');
            if multipart && !rec.etag.ends_with(&format!("-{}", rec.segments.len())) {
                rep.problem(format!(
                    "object {name}: ETag {} does not match its {} segments",
                    rec.etag,
                    rec.segments.len()
                ));
                continue;
            }
            let lens: Vec<u64> = rec.segments.iter().map(|s| s.len).collect();
            let etag = rec.etag.clone();
            let open = OpenObject {
                pin: self.shared.pin(&mut self.shared.lock(), rec.id),
                rec,
                owner: String::new(),
            };
            let mut body = self.read(open, None)?;
            let mut md5s = Vec::with_capacity(lens.len());
            let (mut seg, mut left, mut h) = (0, lens.first().copied().unwrap_or(0), Md5::new());
            let mut failed = None;
            while let Some(chunk) = body.next().await {
                let mut chunk = match chunk {
                    Ok(c) => c,
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                };
                done += chunk.len() as u64;
                rep.bytes_verified += chunk.len() as u64;
                while !chunk.is_empty() {
                    while left == 0 && seg + 1 < lens.len() {
                        md5s.push(std::mem::take(&mut h).finalize().into());
                        seg += 1;
                        left = lens[seg];
                    }
                    let take = (left as usize).min(chunk.len());
                    h.update(chunk.split_to(take));
                    left -= take as u64;
                    if take == 0 {
                        break;
                    }
                }
                progress(CheckPhase::Objects, done, total);
            }
            if let Some(e) = failed {
                rep.problem(format!("object {name}: unreadable: {e}"));
                continue;
            }
            md5s.push(h.finalize().into());
            while md5s.len() < lens.len() {
                md5s.push(Md5::new().finalize().into());
            }
            let got = expected_etag(&md5s, multipart);
            if got != etag {
                rep.problem(format!(
                    "object {name}: content has ETag {got}, stored ETag {etag}"
                ));
            }
        }
        Ok(rep)
    }
}
