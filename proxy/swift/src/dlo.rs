//! Dynamic large objects (`X-Object-Manifest`): segments listed at request time
//! and streamed one after the other.

use futures::{StreamExt, TryStreamExt};
use md5::{Digest, Md5};
use oram_objects::{ByteStream, ListParams, ObjectError};

use crate::error::{err, obj_err, Res};
use crate::limits::*;
use crate::plumbing::hex;
use crate::util::percent_decode;
use crate::SwiftApi;

impl SwiftApi {
    /// The segments of a manifest `container/prefix`: every object of the
    /// container whose name starts with the prefix, in name order.
    pub(crate) fn dlo_segments(&self, owner: &str, manifest: &str) -> Res<Dlo> {
        let (c, prefix) = split_manifest(manifest).ok_or_else(|| err(400))?;
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
        Ok(Dlo {
            container: c,
            size: segs.iter().map(|s| s.1).sum(),
            etag: hex(&md5.finalize()),
            segs: segs.into_iter().map(|(k, s, _)| (k, s)).collect(),
        })
    }

    /// Streams `range` of the joined segments, opening each segment when reached.
    pub(crate) fn dlo_stream(
        &self,
        owner: &str,
        d: &Dlo,
        range: std::ops::Range<u64>,
    ) -> ByteStream {
        let mut pieces = Vec::new();
        let mut off = 0u64;
        for (name, len) in &d.segs {
            let (s, e) = (off, off + len);
            off = e;
            let from = range.start.max(s);
            let to = range.end.min(e);
            if from < to {
                pieces.push((name.clone(), from - s..to - s));
            }
        }
        let layer = self.inner.layer.clone();
        let owner = owner.to_string();
        let container = d.container.clone();
        Box::pin(
            futures::stream::iter(pieces)
                .then(move |(name, r)| {
                    let layer = layer.clone();
                    let owner = owner.clone();
                    let container = container.clone();
                    async move {
                        layer
                            .get_object(&owner, &container, &name, Some(r))
                            .map(|(_, s)| s)
                    }
                })
                .try_flatten(),
        )
    }
}

/// A dynamic large object's segments at the time of the request.
pub(crate) struct Dlo {
    pub(crate) container: String,
    pub(crate) segs: Vec<(String, u64)>,
    pub(crate) size: u64,
    /// MD5 of the segments' ETags, hex.
    pub(crate) etag: String,
}

/// The `extra` name of the large-object manifest.
pub(crate) const MANIFEST: &str = "x-object-manifest";

/// Splits a manifest value `container/prefix` (both parts may be percent-encoded).
pub(crate) fn split_manifest(m: &str) -> Option<(String, String)> {
    let m = m.strip_prefix('/').unwrap_or(m);
    let (c, p) = m.split_once('/')?;
    let c = String::from_utf8(percent_decode(c, false)).ok()?;
    let p = String::from_utf8(percent_decode(p, false)).ok()?;
    (!c.is_empty()).then_some((c, p))
}
