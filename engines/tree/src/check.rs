//! The fsck skeleton shared by tree engines: every block must be stored exactly
//! once — in the stash, a local bucket, or a backend bucket on the path to its
//! leaf — and every backend object the state refers to must open at its version.

use std::collections::HashMap;

use bytes::Bytes;
use oram_blockstore::{BlockStore, BlockStoreExt, ObjKey, SizeBound};
use oram_engine::{CheckReport, Result};
use oram_state::{Bucket, NodeVersion, TrustedState};

use crate::scheme::{Sealing, TreeScheme};

/// Where a block was found: the stash (`0`) or a node.
type Found = HashMap<u64, u64>;

/// Notes every block of a bucket (or the stash, `node` 0) in `found`, with any
/// problem: wrong size, stored twice, no position, off its path.
fn note(
    rep: &mut CheckReport,
    found: &mut Found,
    positions: &HashMap<u64, u64>,
    geo: &crate::Geometry,
    at: (u64, String),
    bucket: &[(u64, Bytes)],
) {
    let (node, name) = at;
    for (b, data) in bucket {
        if data.len() != geo.block_size {
            rep.problem(format!("block {b} in {name} has {} bytes", data.len()));
        }
        if let Some(prev) = found.insert(*b, node) {
            let other = if prev == 0 {
                "the stash".to_string()
            } else {
                format!("node {prev}")
            };
            rep.problem(format!("block {b} stored twice: in {name} and in {other}"));
        }
        match positions.get(b).copied() {
            None => rep.problem(format!("block {b} in {name} has no position")),
            Some(leaf) if node != 0 && !geo.on_path(node, leaf) => rep.problem(format!(
                "block {b} in {name} is not on the path to its leaf {leaf}"
            )),
            _ => {}
        }
    }
}

/// Runs the check of a quiesced engine: `state` is read first (it is not `Sync`,
/// so nothing of it is held across the backend reads).
pub(crate) async fn run<S: TreeScheme>(
    scheme: &S,
    sealing: &Sealing,
    store: &dyn BlockStore,
    state: &mut dyn TrustedState,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<CheckReport> {
    let geo = *scheme.geometry();
    let positions: HashMap<u64, u64> = state.positions().into_iter().collect();
    let stash: Vec<(u64, Bytes)> = state
        .stash_blocks()
        .into_iter()
        .filter_map(|b| state.stash_get(b).map(|d| (b, d.clone())))
        .collect();
    let total = geo.node_count();
    let first_remote = geo.nodes_above(scheme.cached_levels()) + 1;
    let local: Vec<(u64, Bucket)> = (1..first_remote)
        .filter_map(|n| state.local_bucket(n).map(|b| (n, b.clone())))
        .collect();
    let journaled = state.pending().len();
    let cx = scheme.check_prepare(state);

    let mut rep = CheckReport::default();
    let mut found = Found::new();
    rep.stash_len = stash.len() as u64;
    note(
        &mut rep,
        &mut found,
        &positions,
        &geo,
        (0, "the stash".into()),
        &stash,
    );
    for (node, b) in &local {
        let at = (*node, format!("local bucket {node}"));
        note(&mut rep, &mut found, &positions, &geo, at, b);
    }
    progress(first_remote - 1, total);
    let mut node = first_remote;
    while node <= total {
        let end = (node + 256).min(total + 1);
        let batch: Vec<(u64, NodeVersion)> = (node..end).map(|n| (n, state.node(n))).collect();
        let keys: Vec<ObjKey> = batch
            .iter()
            .map(|(n, nv)| sealing.key(*n, nv.slot))
            .collect();
        let got = store
            .get_many_bounded(&keys, SizeBound::Exact(scheme.object_len()))
            .await?;
        for ((n, nv), obj) in batch.into_iter().zip(got) {
            if nv.version > 0 || obj.is_some() {
                rep.objects_read += 1;
            }
            match scheme.check_bucket(sealing, &cx, n, &nv, obj, &mut rep) {
                Ok(blocks) => {
                    let at = (n, format!("bucket {}", sealing.key(n, nv.slot)));
                    note(&mut rep, &mut found, &positions, &geo, at, &blocks);
                }
                Err(e) => {
                    rep.objects_bad += 1;
                    rep.problem(e.to_string());
                }
            }
        }
        progress(end - 1, total);
        node = end;
    }
    rep.finish(positions.keys(), found, journaled);
    Ok(rep)
}
