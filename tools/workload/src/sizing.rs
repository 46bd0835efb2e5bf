//! Engine parameters for a workload: the ORAM's size and the local budget are
//! the runner's terms; everything that follows from them for an engine — the
//! levels its tree-top cache holds, its trusted state, the backend bytes of one
//! op, the ops of a round — is the engine's, asked through `oram-proxy describe`
//! ([`crate::describe`]).

use crate::describe::EngineModel;
use crate::harness::EngineParams;
use crate::{report, Args, OramSize};

/// The default local budget for an ORAM of `oram_bytes`: ÷ 64, at least 1 MiB
/// (the benchmark's terms: an outsource ratio of at least 50 with room to spare).
pub fn default_local_mib(oram_bytes: u64) -> u64 {
    ((oram_bytes / 64) >> 20).max(1)
}

/// Blocks of the local budget the runner leaves for blocks held outside the
/// trusted state's bound (a round's stash in flight), besides
/// [`INDEX_RESERVE`].
const STASH_RESERVE_BLOCKS: u64 = 16;

/// Bytes of the local budget the runner leaves for the object index and the
/// rest of the proxy's own state.
const INDEX_RESERVE: u64 = 1 << 20;

/// Asks the engine for its model of an `[engine]` section (TOML lines).
pub type Describe<'a> = &'a dyn Fn(&str) -> Result<EngineModel, String>;

/// Engine parameters for a workload. `kind` is an engine, or `curious:<sub>`
/// (CURIOUS with that sub-ORAM). A fixed ORAM size: that capacity, and the
/// tree-top cache (CURIOUS's: of all its partitions together) from what the
/// local budget leaves after the engine's trusted state (its
/// [`EngineModel::state_base_bytes`]), a stash of 16 blocks and 1 MiB for the
/// index (CURIOUS: written as the levels the engine fits into it); an error if
/// the workload may write more than the ORAM holds. `auto`:
/// capacity for everything the workload may write (×1.3), the tree-top cache
/// within --cache-mib, the leaf level on the back-end. The ops per round are the
/// engine's within --round-mib either way. ObliviStore and `direct` have no
/// tree-top cache.
pub fn size_engine(
    kind: &str,
    bs: u64,
    objects: &[u64],
    args: &Args,
    describe: Describe<'_>,
) -> Result<EngineParams, String> {
    let blocks: u64 = objects.iter().map(|s| s.div_ceil(bs).max(1)).sum();
    let capacity = match args.oram_size {
        OramSize::Auto => (blocks * 13).div_ceil(10) + 16,
        OramSize::Fixed(size) => {
            let capacity = size / bs;
            if capacity < blocks + 16 {
                return Err(format!(
                    "an ORAM of {} holds {capacity} blocks of {}; the workload may write {blocks} \
                     (raise --oram-size)",
                    report::human(size),
                    report::human(bs)
                ));
            }
            capacity
        }
    };
    let (engine, sub) = match kind.split_once(':') {
        Some((e, s)) => (e, Some(s)),
        None => (kind, None),
    };
    let extra = sub.map_or(String::new(), |s| format!("curious_sub = {s:?}\n"));
    let toml = |cache: &str| {
        format!(
            "kind = {engine:?}\nblock_size = {bs}\ncapacity_blocks = {capacity}\n\
             insecure_direct = {}\nround_mib = {}\n{cache}{extra}",
            engine == "direct",
            args.round_mib
        )
    };
    let bare = describe(&toml(""))?;
    let (mut cached_levels, mut tree_cache_mib) = (None, None);
    if bare.tree().is_some() {
        let mib = match args.oram_size {
            OramSize::Auto => args.cache_mib,
            OramSize::Fixed(size) => {
                let local = args.local_mib.unwrap_or(default_local_mib(size)) << 20;
                let held = bare.state_base_bytes + STASH_RESERVE_BLOCKS * bs + INDEX_RESERVE;
                local.saturating_sub(held) >> 20
            }
        };
        let given = describe(&toml(&format!("tree_cache_mib = {mib}\n")))?;
        let t = given.tree().expect("a tree");
        if args.oram_size == OramSize::Auto {
            // The leaf level stays on the back-end, as at a fixed size.
            cached_levels = Some(t.cached_levels.min(t.levels - 1));
        } else if given.partitions().is_some() {
            // CURIOUS: the levels the engine fits into the budget, written as
            // levels (its Ring sub-ORAMs size their rounds by `cached_levels`,
            // not by a partition's share of the budget).
            cached_levels = Some(t.cached_levels);
        } else {
            tree_cache_mib = Some(mib);
        }
    }
    let cache = match (cached_levels, tree_cache_mib) {
        (Some(c), _) => format!("cached_levels = {c}\n"),
        (None, Some(mib)) => format!("tree_cache_mib = {mib}\n"),
        (None, None) => String::new(),
    };
    let m = describe(&toml(&cache))?;
    let max_batch = m.ops_per_round.max(1);
    Ok(EngineParams {
        kind: engine.to_string(),
        block_size: bs,
        capacity_blocks: capacity,
        cached_levels,
        tree_cache_mib,
        extra,
        format: args.format,
        max_batch,
        max_inflight_writebacks: if m.round_bytes_per_op * max_batch >= 64 << 20 {
            2
        } else {
            4
        },
    })
}

/// The engine sizing of a run, in words.
pub fn sizing_text(args: &Args) -> String {
    let volumes = if args.format {
        "volumes formatted after init (`--format`: every bucket written once, reads find full objects)"
    } else {
        "volumes fresh (lazily initialised: a read of a bucket never written is a 404, cheaper than \
         in steady use; `--format` writes them all first)"
    };
    let sizing = match args.oram_size {
        OramSize::Auto => format!(
            "`--oram-size auto` (the sensitivity study, not the thesis's terms): capacity for everything \
             the workload may write (×1.3), tree-top cache ≤ {} MiB",
            args.cache_mib
        ),
        OramSize::Fixed(size) => {
            let local = args.local_mib.unwrap_or(default_local_mib(size));
            format!(
                "every ORAM {} (`--oram-size`), local budget {local} MiB (`--local-mib`; the tree-top \
                 cache gets what the position map, node versions, stash and index leave of it)",
                report::human(size)
            )
        }
    };
    format!("{sizing}; {volumes}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use oram_engine::{Layout, PartitionLayout, Traffic, TreeLayout};

    /// A stand-in for the engine: a tree of 10 levels caching one level per
    /// MiB given, 100 bytes of state per block, 3 MiB per op read.
    fn fake(toml: &str) -> Result<EngineModel, String> {
        let num = |k: &str| {
            toml.lines()
                .find_map(|l| l.strip_prefix(&format!("{k} = ")))
                .map(|v| v.parse::<u64>().unwrap())
        };
        let kind = toml.lines().next().unwrap()[8..]
            .trim_matches('"')
            .to_string();
        let capacity = num("capacity_blocks").unwrap();
        let cached = num("cached_levels").unwrap_or(num("tree_cache_mib").unwrap_or(0).min(10));
        let tree = TreeLayout {
            arity: 2,
            levels: 10,
            cached_levels: cached as u32,
            leaves: 512,
            z: 4,
            s: 0,
            a: 0,
            bucket_bytes: 1,
        };
        let layout = match kind.as_str() {
            "direct" | "oblivistore" => Layout::Blocks,
            "curious" => Layout::Partitions(PartitionLayout {
                partitions: 4,
                eviction_rate: 1.25,
                sub_capacity: capacity / 2,
                sub_kind: "path".into(),
                sub: Box::new(Layout::Tree(tree)),
            }),
            _ => Layout::Tree(tree),
        };
        let round = num("round_mib").unwrap() << 20;
        Ok(EngineModel {
            kind,
            oblivious: true,
            capacity,
            block_size: num("block_size").unwrap(),
            layout,
            object_bytes: 1,
            read_op: Traffic::default(),
            write_op: Traffic::default(),
            overhead: 1.0,
            assumes: String::new(),
            state_bound: 0,
            state_base_bytes: 100 * capacity,
            cache_bytes: 0,
            stash_bound: 0,
            round_bytes_per_op: 3 << 20,
            ops_per_round: (round / (3 << 20)).clamp(1, 64),
            round_requests_per_op: 1.0,
        })
    }

    #[test]
    fn engines_are_sized_for_the_workload() {
        let args = Args::parse_from(["x", "--oram-size", "auto"]);
        let p = size_engine("path", 64 << 10, &[100, 200_000, 1 << 20], &args, &fake).unwrap();
        // 1 + 4 + 16 blocks, ×1.3, +16.
        assert_eq!(p.capacity_blocks, 44);
        // Within --cache-mib (128): the whole tree, less its leaf level.
        assert_eq!((p.cached_levels, p.tree_cache_mib), (Some(9), None));
        // The round is the engine's: 256 MiB ÷ 3 MiB per op.
        assert_eq!((p.max_batch, p.max_inflight_writebacks), (64, 2));
        let c = size_engine("curious:ring", 64 << 10, &[100], &args, &fake).unwrap();
        assert_eq!(c.kind, "curious");
        assert!(c.extra.contains("curious_sub = \"ring\""));
        // ObliviStore: no tree-top cache.
        let o = size_engine("oblivistore", 64 << 10, &[100], &args, &fake).unwrap();
        assert!(o.cached_levels.is_none() && o.tree_cache_mib.is_none());
        assert!(o.extra.is_empty());
        // The default: a 5 GiB ORAM whatever the workload, an 80 MiB budget, the
        // tree-top cache what the engine's state, a stash of 16 blocks and 1 MiB
        // leave.
        let args = Args::parse_from(["x"]);
        assert_eq!(args.oram_size, OramSize::Fixed(5 << 30));
        let p = size_engine("path", 64 << 10, &[100, 200_000, 1 << 20], &args, &fake).unwrap();
        assert_eq!(p.capacity_blocks, 81920);
        let held = 100 * 81920 + 16 * (64 << 10) + (1 << 20);
        assert_eq!(p.tree_cache_mib, Some(((80u64 << 20) - held) >> 20));
        assert!(p.cached_levels.is_none());
        // CURIOUS: the levels the engine fits into that budget (one per MiB
        // here, at most the tree's 10).
        let c = size_engine("curious", 64 << 10, &[100], &args, &fake).unwrap();
        assert_eq!((c.cached_levels, c.tree_cache_mib), (Some(10), None));
        assert_eq!(default_local_mib(5 << 30), 80);
        // A workload that does not fit is refused, not resized.
        let args = Args::parse_from(["x", "--oram-size", "1M"]);
        assert!(size_engine("path", 64 << 10, &[4 << 20], &args, &fake).is_err());
    }
}
