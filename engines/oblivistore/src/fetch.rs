//! How a partition access reads its level slots: a ranged GET of one slot, or
//! one GET of a whole level (`oblivistore_shuffle_read`; see the `hierarchy`
//! module documentation, "Reads").

use bytes::Bytes;
use oram_blockstore::{BlockStoreExt, ObjKey, SizeBound};
use oram_engine::{open_error, OramError, Result};
use oram_state::{NodeVersion, StateError};

use crate::hierarchy::{Inner, SlotRead};
use crate::levels::{ShuffleRead, SLOT_HEADER};

impl Inner {
    /// Reads `slots` of the levels at `versions` (all at once) and checks each
    /// holds what it must; returns `(block, data)` of each and the slots
    /// fetched from the backend. A level of which one slot is needed (a
    /// partition read's, from a level the eviction leaves alone) is read by a
    /// ranged GET of that slot; a level of which more are needed (a level the
    /// eviction empties: the partition read's slot and its shuffle's `2^ℓ`) by
    /// one GET of its whole object, which is the same size for every level of
    /// that number, whatever it holds.
    pub(crate) async fn fetch(
        &self,
        slots: &[SlotRead],
        versions: &[NodeVersion],
    ) -> Result<(Vec<(u64, Bytes)>, u64)> {
        let geo = self.geo();
        let len = geo.slot_len() as u64;
        // Each level's slots, in level order; the version of a level is one.
        let mut levels: std::collections::BTreeMap<u32, (NodeVersion, Vec<usize>)> =
            Default::default();
        for (i, (r, &nv)) in slots.iter().zip(versions).enumerate() {
            levels.entry(r.level).or_insert((nv, Vec::new())).1.push(i);
        }
        let whole = |idx: &[usize]| idx.len() > 1 && self.cfg.shuffle_read == ShuffleRead::Whole;
        // One request per level read whole, one per slot otherwise. Each
        // request: its level, version and the slots it serves (one slot by a
        // ranged GET, or every slot of the level asked for by a GET of the
        // whole level).
        let requests: Vec<(u32, NodeVersion, bool, Vec<usize>)> = levels
            .iter()
            .flat_map(|(&l, (nv, idx))| {
                if whole(idx) {
                    vec![(l, *nv, true, idx.clone())]
                } else {
                    idx.iter().map(|&i| (l, *nv, false, vec![i])).collect()
                }
            })
            .collect();
        let fetched: u64 = requests
            .iter()
            .map(|(l, _, all, _)| if *all { geo.slots(*l) } else { 1 })
            .sum();
        let gets = requests.iter().map(|(l, nv, all, idx)| {
            let (l, nv) = (*l, *nv);
            let key = self.key(l, nv.slot);
            let single = (!*all).then(|| u64::from(slots[idx[0]].offset) * len);
            let want = if single.is_some() {
                len
            } else {
                geo.level_bytes(l)
            };
            async move {
                let got = match single {
                    Some(start) => self.store.get_range(&key, start..start + len).await?,
                    // A back-end stops reading at the bound: a provider
                    // cannot make the proxy buffer more than the level.
                    None => self
                        .store
                        .get_many_bounded(std::slice::from_ref(&key), SizeBound::Exact(want))
                        .await?
                        .pop()
                        .flatten(),
                };
                let got = match got {
                    Some(b) if b.len() as u64 == want => b,
                    Some(b) => {
                        return Err(OramError::Integrity {
                            key: key.as_str().to_string(),
                            reason: format!("read {} bytes of the level, not {want}", b.len()),
                        })
                    }
                    None => {
                        return Err(OramError::Integrity {
                            key: key.as_str().to_string(),
                            reason: "the level object is missing".into(),
                        })
                    }
                };
                Ok::<_, OramError>((key, nv, single.is_some(), got))
            }
        });
        // Every request runs to its end even when one fails: what the server
        // sees of an access does not stop at a point that depends on which
        // request failed.
        let got = futures::future::join_all(gets)
            .await
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        // Each slot's sealed bytes, in the order asked.
        let mut sealed: Vec<Option<(ObjKey, NodeVersion, Bytes)>> = vec![None; slots.len()];
        for ((_, _, _, idx), (key, nv, single, bytes)) in requests.iter().zip(got) {
            for &i in idx {
                let bytes = if single {
                    bytes.clone()
                } else {
                    let start = u64::from(slots[i].offset) * len;
                    if start + len > bytes.len() as u64 {
                        return Err(OramError::State(StateError::Corrupt(format!(
                            "slot {} of level {} is past the level's {} slots",
                            slots[i].offset,
                            slots[i].level,
                            geo.slots(slots[i].level)
                        ))));
                    }
                    bytes.slice(start as usize..(start + len) as usize)
                };
                sealed[i] = Some((key.clone(), nv, bytes));
            }
        }
        let mut out = Vec::with_capacity(slots.len());
        for (r, got) in slots.iter().zip(sealed) {
            let (key, nv, bytes) = got.expect("every slot's level was read");
            let plain = self
                .sealer
                .open(&self.identity(r.level, r.offset, nv), &bytes)
                .map_err(|e| open_error(key.as_str(), e))?;
            let block = u64::from_be_bytes(plain[..SLOT_HEADER].try_into().expect("8 bytes"));
            if block != r.holds {
                return Err(OramError::Integrity {
                    key: key.as_str().to_string(),
                    reason: format!(
                        "slot {} holds block {block}, the state says {}",
                        r.offset, r.holds
                    ),
                });
            }
            out.push((block, Bytes::from(plain).slice(SLOT_HEADER..)));
        }
        Ok((out, fetched))
    }
}
