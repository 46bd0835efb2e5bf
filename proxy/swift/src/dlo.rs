//! Large objects: dynamic ones (`X-Object-Manifest`, segments listed at
//! request time) here, static ones in [`crate::slo`]; both are streamed as a
//! [`Joined`] plan, one segment after the other.

use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use oram_objects::{ByteStream, ListParams, ObjectError, ObjectRecord};

use crate::acl::Access;
use crate::error::{err, obj_err, Res, SwiftError};
use crate::limits::*;
use crate::slo::{slo_size_etag, SloPlan};
use crate::util::percent_decode;
use crate::{Caller, SwiftApi};

impl SwiftApi {
    /// [`SwiftApi::slo_plan`] as a large object's [`Joined`] segments.
    pub(crate) async fn slo_joined(
        &self,
        caller: &Caller,
        owner: &str,
        (c, o): (&str, &str),
        rec: &ObjectRecord,
    ) -> Res<Joined> {
        let (size, etag) = slo_size_etag(rec).ok_or_else(|| err(500))?;
        let plan = self.slo_plan(caller, owner, (c, o), rec).await?;
        Ok(Joined {
            segs: Segments::Slo(plan),
            size,
            etag,
        })
    }

    /// The segments of a manifest `container/prefix`: every object of the
    /// container whose name starts with the prefix, in name order. A caller who
    /// does not own the account needs the right to list that container.
    pub(crate) fn dlo_segments(&self, caller: &Caller, owner: &str, manifest: &str) -> Res<Joined> {
        let (c, prefix) = split_manifest(manifest).ok_or_else(|| err(400))?;
        self.authorize(caller, owner, &c, Access::List)?;
        let layer = &self.inner.layer;
        let mut segs = Vec::new();
        let mut start_after = None;
        loop {
            let r = layer
                .list_objects(
                    owner,
                    &c,
                    &ListParams {
                        prefix: prefix.clone(),
                        delimiter: None,
                        start_after: start_after.take(),
                        max_keys: LISTING_LIMIT,
                    },
                )
                .map_err(|e| match e {
                    ObjectError::NoSuchBucket(_) => err(404),
                    e => obj_err(e),
                })?;
            for (k, rec) in r.objects {
                segs.push((k, rec.size, rec.etag));
            }
            if !r.truncated {
                break;
            }
            start_after = r.next_start_after;
        }
        let mut md5 = Md5::new();
        for (_, _, e) in &segs {
            md5.update(e.as_bytes());
        }
        let mut size = 0u64;
        for (_, s, _) in &segs {
            size = size.checked_add(*s).ok_or_else(|| err(500))?;
        }
        Ok(Joined {
            size,
            etag: hex::encode(md5.finalize()),
            segs: Segments::Listed(
                segs.into_iter()
                    .map(|(k, s, _)| Piece {
                        container: c.clone(),
                        name: k,
                        range: 0..s,
                        etag: None,
                    })
                    .collect(),
            ),
        })
    }

    /// Streams `range` of the joined segments, opening each segment when reached
    /// (a static large object's nested manifests too: [`crate::slo::SloPlan`]).
    /// A segment whose ETag is no longer the one the manifest recorded ends the
    /// stream with an error (before the first byte: 409, see [`Joined::error`]).
    pub(crate) fn dlo_stream(
        &self,
        owner: &str,
        d: &Joined,
        range: std::ops::Range<u64>,
    ) -> ByteStream {
        let segs = match &d.segs {
            Segments::Slo(plan) => return plan.stream(range),
            Segments::Listed(segs) => segs,
        };
        let mut pieces = Vec::new();
        let mut off = 0u64;
        for p in segs {
            let len = p.range.end.saturating_sub(p.range.start);
            let (s, e) = (off, off.saturating_add(len));
            off = e;
            let from = range.start.max(s);
            let to = range.end.min(e);
            if from < to {
                let base = p.range.start;
                pieces.push((
                    p.container.clone(),
                    p.name.clone(),
                    base + from - s..base + to - s,
                    p.etag.clone(),
                ));
            }
        }
        let layer = self.inner.layer.clone();
        let owner = owner.to_string();
        Box::pin(
            futures::stream::iter(pieces)
                .then(move |(container, name, r, etag)| {
                    let layer = layer.clone();
                    let owner = owner.clone();
                    async move {
                        let obj = layer.open_object(&owner, &container, &name)?;
                        if etag.is_some_and(|e| e != obj.record().etag) {
                            return Err(ObjectError::Conflict(format!(
                                "segment {container}/{name} changed since the manifest was written"
                            )));
                        }
                        layer.read(obj, Some(r))
                    }
                })
                .try_flatten(),
        )
    }
}

/// A large object's segments at the time of the request.
pub(crate) struct Joined {
    /// The pieces, in order.
    pub(crate) segs: Segments,
    /// Their total length.
    pub(crate) size: u64,
    /// The large object's ETag (hex, no quotes): for a DLO the MD5 of the
    /// segments' ETags, for an SLO the one computed when its manifest was put.
    pub(crate) etag: String,
}

impl Joined {
    /// The answer to `e`, an error of one of this object's streams.
    pub(crate) fn error(&self, e: ObjectError) -> SwiftError {
        match &self.segs {
            Segments::Slo(plan) => plan.error(e),
            Segments::Listed(_) => obj_err(e),
        }
    }
}

/// The segments of a large object.
pub(crate) enum Segments {
    /// Listed in full (a dynamic large object's, at most a listing's worth of
    /// names per page of the container).
    Listed(Vec<Piece>),
    /// Found as the body streams (a static large object).
    Slo(SloPlan),
}

/// One piece of a large object: `range` of object `container/name` (of the
/// large object's account), expected to have ETag `etag` when given.
pub(crate) struct Piece {
    pub(crate) container: String,
    pub(crate) name: String,
    pub(crate) range: std::ops::Range<u64>,
    pub(crate) etag: Option<String>,
}

pub(crate) use crate::meta::MANIFEST;

/// Splits a manifest value `container/prefix` (both parts may be percent-encoded).
pub(crate) fn split_manifest(m: &str) -> Option<(String, String)> {
    let m = m.strip_prefix('/').unwrap_or(m);
    let (c, p) = m.split_once('/')?;
    let c = String::from_utf8(percent_decode(c, false)).ok()?;
    let p = String::from_utf8(percent_decode(p, false)).ok()?;
    (!c.is_empty()).then_some((c, p))
}
