//! The steps of a round that every tree scheme takes alike: drawing the leaves
//! to read and the new leaves, serving the ops from the stash, and evicting
//! the stash into the paths.

use std::collections::{BTreeSet, HashMap};

use bytes::Bytes;
use oram_engine::{Op, Result};
use oram_state::{Bucket, StateError, TrustedState};

use crate::{plan_eviction, Geometry, PlanCx, Sealing};

/// The leaves a round reads and the leaves its blocks move to.
#[derive(Clone, Debug, Default)]
pub struct LeafDraws {
    /// Per op, the leaf whose path is read: its block's current leaf, or a fresh
    /// random one (a block not stored, a dummy, a block named twice keeps the
    /// leaf it was given by its first op).
    pub read_leaves: Vec<u64>,
    /// Each named block's new leaf.
    pub remap: HashMap<u64, u64>,
    /// Blocks the ops name that are stored, with their leaf: each must be found
    /// where the state says (never read as zeros).
    pub stored: Vec<(u64, u64)>,
}

/// Draws a round's leaves among `leaves`: two draws per op whatever the op (the
/// leaf to read if the block has none, and the block's new leaf), so the random
/// stream does not depend on the ops.
pub fn draw_leaves(
    cx: &mut PlanCx<'_, '_>,
    blocks: &[Option<u64>],
    leaves: u64,
) -> Result<LeafDraws> {
    let mut d = LeafDraws {
        read_leaves: Vec::with_capacity(blocks.len()),
        ..LeafDraws::default()
    };
    for block in blocks {
        let fresh = cx.draws.below(leaves)?;
        let new_leaf = cx.draws.below(leaves)?;
        let Some(b) = *block else {
            d.read_leaves.push(fresh);
            continue;
        };
        let current = match d.remap.get(&b) {
            Some(&l) => Some(l),
            None => {
                let p = cx.state.position(b);
                if let Some(leaf) = p {
                    d.stored.push((b, leaf));
                }
                p
            }
        };
        d.read_leaves.push(current.unwrap_or(fresh));
        d.remap.insert(b, new_leaf);
    }
    Ok(d)
}

/// Checks that every block of `stored` (a block the state gives a leaf, with
/// that leaf) was found on the paths read (`seen`) or is in the stash: a stored
/// block is never read as zeros. Otherwise an integrity error naming the block
/// and the leaf bucket of its path. Runs in trusted memory; the provider sees
/// nothing of it.
pub fn check_stored(
    s: &Sealing,
    geo: &Geometry,
    state: &dyn TrustedState,
    stored: &[(u64, u64)],
    seen: &BTreeSet<u64>,
) -> Result<()> {
    for &(b, leaf) in stored {
        if !seen.contains(&b) && state.stash_get(b).is_none() {
            let node = geo.node_on_path(leaf, geo.leaf_level);
            return Err(s.integrity(
                node,
                &state.node(node),
                format!("block {b} is neither on the path to its leaf {leaf} nor in the stash"),
            ));
        }
    }
    Ok(())
}

/// Serves `ops` from the stash once the blocks `found` on the read paths are in
/// it, then moves every named block still stored to its new leaf (`remap`); an
/// inserted block no access of the round named gets a leaf from `fresh_leaf`.
/// A block only ever read and never written gets no position (it still reads as
/// zeros). Returns one answer per op: the data of a read or take (zeros for a
/// block never written), empty for a write, insert or dummy.
pub fn serve_ops(
    state: &mut dyn TrustedState,
    found: Vec<(u64, Bytes)>,
    ops: Vec<Op>,
    remap: &HashMap<u64, u64>,
    block_size: usize,
    fresh_leaf: &mut dyn FnMut() -> u64,
) -> Vec<Bytes> {
    for (b, d) in found {
        state.stash_insert(b, d);
    }
    let zeros = Bytes::from(vec![0u8; block_size]);
    let mut answers = Vec::with_capacity(ops.len());
    let mut inserted = Vec::new();
    for op in ops {
        answers.push(match op {
            Op::Read(b) => state.stash_get(b).cloned().unwrap_or_else(|| zeros.clone()),
            Op::Write(b, d) => {
                state.stash_insert(b, d);
                Bytes::new()
            }
            Op::Insert(b, d) => {
                state.stash_insert(b, d);
                inserted.push(b);
                Bytes::new()
            }
            Op::Take(b) => {
                state.remove_position(b);
                state.stash_remove(b).unwrap_or_else(|| zeros.clone())
            }
            Op::Dummy => Bytes::new(),
        });
    }
    for (&b, &leaf) in remap {
        if state.stash_get(b).is_some() {
            state.set_position(b, leaf);
        }
    }
    for b in inserted {
        if !remap.contains_key(&b) && state.stash_get(b).is_some() {
            state.set_position(b, fresh_leaf());
        }
    }
    answers
}

/// Evicts the stash greedily into `nodes`, a union of root-to-leaf paths (see
/// [`plan_eviction`]): the placed blocks leave the stash; the new buckets of the
/// nodes `cached` says are kept locally are stored in the trusted state, and
/// the other nodes' new buckets (empty ones too) are returned in node order, to
/// be written to the backend.
pub fn evict_stash(
    geo: &Geometry,
    state: &mut dyn TrustedState,
    nodes: &BTreeSet<u64>,
    cached: impl Fn(u64) -> bool,
) -> Result<Vec<(u64, Bucket)>> {
    let mut stash_list = Vec::with_capacity(state.stash_len());
    for b in state.stash_blocks() {
        let leaf = state
            .position(b)
            .ok_or_else(|| StateError::Corrupt(format!("stashed block {b} has no position")))?;
        stash_list.push((b, leaf));
    }
    let mut placed = plan_eviction(geo, &stash_list, nodes);
    let mut remote = Vec::new();
    for &node in nodes {
        let bucket: Bucket = placed
            .remove(&node)
            .unwrap_or_default()
            .into_iter()
            .map(|b| (b, state.stash_remove(b).expect("planned from the stash")))
            .collect();
        if cached(node) {
            state.set_local_bucket(node, bucket);
        } else {
            remote.push((node, bucket));
        }
    }
    Ok(remote)
}
