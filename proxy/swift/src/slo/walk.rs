//! Reading a static large object: its segments are found lazily, one at a
//! time as the body streams, by walking the manifest and each nested
//! manifest it reaches (a stack of at most [`MAX_MANIFEST_NESTING`]
//! manifests). Nested manifests outside the requested range are not read.
//!
//! A request's walk is bounded by a [`Budget`]: at most
//! [`MAX_SLO_SEGMENTS_PER_REQUEST`] segments read and
//! [`MAX_SLO_MANIFEST_BYTES_PER_REQUEST`] bytes of stored manifests, so memory
//! and back-end reads per request are bounded whatever the manifests say
//! (manifests put by this version are checked against the same bounds when
//! put; older ones are cut off here).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use oram_objects::{ByteStream, ObjectError, ObjectRecord};

use super::{entry_range, slo_size_etag, Stored};
use crate::acl::Access;
use crate::error::{err, err_msg, obj_err, Res, SwiftError};
use crate::limits::*;
use crate::util::split_object_path;
use crate::{Caller, SwiftApi};

/// A bound of [`crate::limits`] that a static large object exceeds.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SloLimit {
    /// More segments than [`MAX_SLO_SEGMENTS_PER_REQUEST`].
    #[error("Too many segments: a request reads at most {MAX_SLO_SEGMENTS_PER_REQUEST} segments of a large object")]
    Segments,
    /// More manifest bytes than [`MAX_SLO_MANIFEST_BYTES_PER_REQUEST`].
    #[error("Manifests too large: a request reads at most {MAX_SLO_MANIFEST_BYTES_PER_REQUEST} bytes of manifests")]
    ManifestBytes,
    /// Manifests nested deeper than [`MAX_MANIFEST_NESTING`].
    #[error("Max recursion depth exceeded")]
    Nesting,
    /// A size or range beyond `u64`.
    #[error("Large object size out of range")]
    Size,
}

impl From<SloLimit> for SwiftError {
    /// Swift's answer to a large object beyond a bound as it is read: 409 with
    /// a plain text body.
    fn from(e: SloLimit) -> Self {
        err_msg(409, e.to_string())
    }
}

/// What one request may still expand: counters of segments and manifest bytes.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    segments: AtomicU64,
    manifest_bytes: AtomicU64,
}

impl Budget {
    /// Counts one more segment.
    pub(crate) fn segment(&self) -> Result<(), SloLimit> {
        charge(&self.segments, 1, MAX_SLO_SEGMENTS_PER_REQUEST).ok_or(SloLimit::Segments)
    }

    /// Counts a manifest of `bytes` about to be read.
    pub(crate) fn manifest(&self, bytes: u64) -> Result<(), SloLimit> {
        charge(
            &self.manifest_bytes,
            bytes,
            MAX_SLO_MANIFEST_BYTES_PER_REQUEST,
        )
        .ok_or(SloLimit::ManifestBytes)
    }
}

/// Adds `n` to `counter` unless that takes it beyond `max`.
fn charge(counter: &AtomicU64, n: u64, max: u64) -> Option<()> {
    counter
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            v.checked_add(n).filter(|t| *t <= max)
        })
        .ok()
        .map(drop)
}

/// Totals over the service's life, for tests: manifest bytes read and
/// segments opened by large-object reads.
#[derive(Debug, Default)]
pub(crate) struct SloStats {
    pub(crate) manifest_bytes: AtomicU64,
    pub(crate) segments: AtomicU64,
}

/// A static large object being read: its top manifest, the caller and the
/// request's budget. Cheap to clone; every stream of one plan shares its budget.
#[derive(Clone)]
pub(crate) struct SloPlan {
    inner: Arc<PlanInner>,
}

struct PlanInner {
    api: SwiftApi,
    caller: Caller,
    owner: String,
    top: Arc<Vec<Stored>>,
    budget: Budget,
    /// The Swift answer to the first failure of a walk, for the request to
    /// give if no byte was sent yet. A std mutex, held only to set or take it.
    failure: Mutex<Option<SwiftError>>,
}

/// One manifest being walked: its entries, the next one, the offset of that
/// entry in the manifest's joined bytes, and the part of them wanted.
struct Frame {
    entries: Arc<Vec<Stored>>,
    next: usize,
    pos: u64,
    window: Range<u64>,
}

impl SloPlan {
    /// The plan of the large object whose top manifest is `top` (already
    /// charged to `budget`).
    fn new(api: SwiftApi, caller: Caller, owner: &str, top: Vec<Stored>, budget: Budget) -> Self {
        Self {
            inner: Arc::new(PlanInner {
                api,
                caller,
                owner: owner.to_string(),
                top: Arc::new(top),
                budget,
                failure: Mutex::new(None),
            }),
        }
    }

    /// The Swift answer to `e`, an error of one of this plan's streams: the
    /// walk's own when it failed, else the object layer's.
    pub(crate) fn error(&self, e: ObjectError) -> SwiftError {
        let f = self
            .inner
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        f.unwrap_or_else(|| obj_err(e))
    }

    /// Bytes `range` of the joined segments, each segment opened when reached
    /// and each nested manifest read when reached.
    pub(crate) fn stream(&self, range: Range<u64>) -> ByteStream {
        let walk = Walk {
            plan: self.inner.clone(),
            stack: vec![Frame {
                entries: self.inner.top.clone(),
                next: 0,
                pos: 0,
                window: range,
            }],
        };
        let pieces = futures::stream::try_unfold(walk, |mut w| async move {
            match w.next().await {
                Ok(p) => Ok(p.map(|p| (p, w))),
                Err(e) => Err(w.plan.fail(e)),
            }
        });
        let plan = self.inner.clone();
        Box::pin(
            pieces
                .and_then(move |p| {
                    let plan = plan.clone();
                    async move {
                        let layer = &plan.api.inner.layer;
                        let obj = layer.open_object(&plan.owner, &p.container, &p.name);
                        let obj = match obj {
                            Ok(o) if p.etag.as_deref().is_none_or(|e| e == o.record().etag) => o,
                            _ => {
                                return Err(plan.fail(err_msg(
                                    409,
                                    format!(
                                        "Object segment no longer valid: /{}/{}",
                                        p.container, p.name
                                    ),
                                )))
                            }
                        };
                        plan.api
                            .inner
                            .slo_stats
                            .segments
                            .fetch_add(1, Ordering::Relaxed);
                        layer.read(obj, Some(p.range))
                    }
                })
                .try_flatten(),
        )
    }
}

impl PlanInner {
    /// Records `e` as the walk's failure; the stream's error.
    fn fail(&self, e: SwiftError) -> ObjectError {
        let msg = e.body.clone();
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(e);
        ObjectError::Conflict(msg)
    }
}

/// One segment piece found by a walk: `range` of `container/name`, which
/// must still have ETag `etag`.
struct Part {
    container: String,
    name: String,
    range: Range<u64>,
    etag: Option<String>,
}

/// A walk over a plan's manifests.
struct Walk {
    plan: Arc<PlanInner>,
    stack: Vec<Frame>,
}

impl Walk {
    /// The next segment piece in the window, reading nested manifests as
    /// they are reached; `None` at the end.
    async fn next(&mut self) -> Res<Option<Part>> {
        loop {
            let nested = self.stack.len();
            let Some(f) = self.stack.last_mut() else {
                return Ok(None);
            };
            let Some(s) = f.entries.get(f.next).filter(|_| f.pos < f.window.end) else {
                self.stack.pop();
                continue;
            };
            f.next += 1;
            let r = entry_range(s);
            let start = f.pos;
            let end = start.checked_add(r.end - r.start).ok_or(SloLimit::Size)?;
            f.pos = end;
            let (from, to) = (f.window.start.max(start), f.window.end.min(end));
            if from >= to {
                continue;
            }
            // Within the entry's object: r.start + (from - start) .. ≤ r.end.
            let part = r.start + (from - start)..r.start + (to - start);
            let (sub_slo, hash, name) = (s.sub_slo, s.hash.clone(), s.name.clone());
            let (sc, so) = split_object_path(&name).ok_or_else(|| err(500))?;
            let p = &self.plan;
            p.api.authorize(&p.caller, &p.owner, &sc, Access::Read)?;
            if !sub_slo {
                p.budget.segment()?;
                return Ok(Some(Part {
                    container: sc,
                    name: so,
                    range: part,
                    etag: Some(hash),
                }));
            }
            if nested >= MAX_MANIFEST_NESTING {
                return Err(SloLimit::Nesting.into());
            }
            // The nested manifest must still be the one that was checked.
            let rec = p.api.inner.layer.head_object(&p.owner, &sc, &so).ok();
            let Some(rec) = rec.filter(|r| slo_size_etag(r).is_some_and(|x| x.1 == hash)) else {
                return Err(err_msg(
                    409,
                    format!("Object segment no longer valid: {name}"),
                ));
            };
            p.budget.manifest(rec.size)?;
            let entries = p.api.read_manifest(&p.owner, &sc, &so, &rec).await?;
            self.stack.push(Frame {
                entries: Arc::new(entries),
                next: 0,
                pos: 0,
                window: part,
            });
        }
    }
}

impl SwiftApi {
    /// Reads the stored manifest of the opened object `c/o` (which must still
    /// be version `rec`); the caller has charged its size to its budget.
    pub(super) async fn read_manifest(
        &self,
        owner: &str,
        c: &str,
        o: &str,
        rec: &ObjectRecord,
    ) -> Res<Vec<Stored>> {
        let layer = &self.inner.layer;
        let obj = layer.open_object(owner, c, o).map_err(obj_err)?;
        if obj.record().id != rec.id {
            return Err(err(409));
        }
        let mut s = layer.read(obj, None).map_err(obj_err)?;
        let mut raw = Vec::with_capacity(usize::try_from(rec.size).unwrap_or(0));
        while let Some(chunk) = s.next().await {
            raw.extend_from_slice(&chunk.map_err(obj_err)?);
        }
        self.inner
            .slo_stats
            .manifest_bytes
            .fetch_add(raw.len() as u64, Ordering::Relaxed);
        serde_json::from_slice(&raw).map_err(|e| {
            tracing::warn!("swift: unreadable SLO manifest: {e}");
            err(500)
        })
    }

    /// The plan of the static large object `c/o` (version `rec`): its top
    /// manifest read, and each segment it names directly checked (read access
    /// to its container; for a plain segment, its ETag) so that those fail
    /// before the first byte. Nested manifests are read as the body streams.
    pub(crate) async fn slo_plan(
        &self,
        caller: &Caller,
        owner: &str,
        (c, o): (&str, &str),
        rec: &ObjectRecord,
    ) -> Res<SloPlan> {
        let budget = Budget::default();
        budget.manifest(rec.size)?;
        let top = self.read_manifest(owner, c, o, rec).await?;
        for s in &top {
            let (sc, so) = split_object_path(&s.name).ok_or_else(|| err(500))?;
            self.authorize(caller, owner, &sc, Access::Read)?;
            if s.sub_slo {
                continue;
            }
            let now = self.inner.layer.head_object(owner, &sc, &so).ok();
            if now.is_none_or(|r| r.etag != s.hash) {
                return Err(err_msg(
                    409,
                    format!("Object segment no longer valid: {}", s.name),
                ));
            }
        }
        Ok(SloPlan::new(
            self.clone(),
            caller.clone(),
            owner,
            top,
            budget,
        ))
    }
}
