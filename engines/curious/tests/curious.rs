//! CURIOUS's own properties: which partitions the server sees accessed does not
//! depend on the workload (chi-square over partitions and over pairs of
//! consecutive rounds, and an exact request shape per access), a slow partition
//! delays every round alike (the TaoStore attack), the eviction cache stays
//! small, and the bandwidth per access is the analytical figure.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, Recording, SizeBound,
    TraceEvent, Verb,
};
use oram_curious::{Curious, CuriousConfig, CuriousSettings, SubSpec};
use oram_engine::conformance::{
    block_data, chi_square, chi_square_critical_001, fill, shape_of, test_sealer,
    trace_of_each_access, workloads, Model,
};
use oram_engine::{EngineSettings, Op, Oram, Parts, Shape};
use oram_path::{Geometry, PathConfig, PathOram, PathSettings, TreeConfig};
use oram_state::MemState;
use oram_store_memory::MemoryStore;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const BS: usize = 32;

fn config(capacity: u64, partitions: u32, rate: f64, seed: u8) -> CuriousConfig {
    CuriousConfig {
        name: "curious",
        letter: 'c',
        capacity,
        block_size: BS,
        partitions,
        max_batch: 16,
        eviction_rate: rate,
        cache_bound: 1 << 20,
        partition_limit: None,
        round_attempts: 1,
        rng_seed: Some([seed; 32]),
    }
}

/// The ternary Path ORAM tree (Z = 5) of every partition.
fn geometry(cfg: &CuriousConfig) -> Geometry {
    Geometry::for_capacity(3, cfg.sub_capacity(), 5, BS, None)
}

/// A CURIOUS engine over `store` with Path ORAM partitions (k = 3, Z = 5, the
/// root level kept locally).
fn curious(cfg: CuriousConfig, store: Arc<dyn BlockStore>) -> Curious {
    let seed = cfg.rng_seed.unwrap_or([0; 32]);
    let sub_shape = Shape {
        capacity: cfg.sub_capacity(),
        block_size: BS,
        max_batch: cfg.sub_batch(),
        prefix: "vol0".into(),
        id_limit: Some(cfg.capacity),
    };
    let build = move |p: u32, shape: &Shape, parts: Parts| -> oram_engine::Result<Arc<dyn Oram>> {
        let mut seed = seed;
        seed[0] ^= p as u8;
        seed[1] ^= (p >> 8) as u8;
        let cfg = PathConfig {
            tree: TreeConfig {
                capacity: shape.capacity,
                id_limit: shape.id_limit,
                block_size: shape.block_size,
                cached_levels: 1,
                max_batch: shape.max_batch,
                round_attempts: 1,
                prefix: shape.prefix.clone(),
                rng_seed: Some(seed),
                ..TreeConfig::default()
            },
            z: 5,
            arity: 3,
        };
        Ok(Arc::new(PathOram::new(
            cfg,
            parts.store,
            parts.sealer,
            parts.state,
        )?))
    };
    let parts = Parts {
        store,
        sealer: test_sealer(),
        state: Box::new(MemState::new()),
    };
    Curious::new(cfg, parts, &sub_shape, &build).unwrap()
}

/// The partition and node of a key `vol0/c/<partition>/n/<node>[.<slot>]`.
fn partition_node(key: &str) -> (u32, u64) {
    let mut it = key.rsplit('/');
    let node = it
        .next()
        .unwrap()
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    it.next();
    (it.next().unwrap().parse().unwrap(), node)
}

/// The partitions of the paths an access read (one leaf-level bucket each).
fn partitions_read(geo: &Geometry, access: &[TraceEvent]) -> Vec<u32> {
    let mut v: Vec<u32> = access
        .iter()
        .filter(|e| e.verb == Verb::Get)
        .map(|e| partition_node(&e.key))
        .filter(|&(_, n)| geo.level(n) == geo.leaf_level)
        .map(|(p, _)| p)
        .collect();
    v.sort_unstable();
    v
}

/// Every block written, then `n` single-op accesses of `w`, each recorded.
async fn record(cfg: CuriousConfig, w: &dyn Fn(usize) -> Op, n: usize) -> Vec<Vec<TraceEvent>> {
    let rec = Arc::new(Recording::new(MemoryStore::new()));
    let e = curious(cfg.clone(), rec.clone());
    // Every bucket stored: every GET finds an object of full size.
    e.format(&|_, _| {}).await.unwrap();
    fill(&e, &mut Model::new(), 0..cfg.capacity, 1).await;
    trace_of_each_access(&e, &rec, w, n).await
}

/// With ν = 1 every access is one path of one partition: its requests are the
/// same for every workload (verbs and sizes); the partitions are uniform, and so
/// are the pairs of partitions of consecutive accesses — a block read back
/// reveals the partition it was given when it was last accessed, never one the
/// server saw before (a dummy read of a cached block goes to its assignment, not
/// to a fresh draw that would leave the block to be read from where it was
/// evicted right after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_and_pairs_of_partitions_are_uniform_whatever_the_workload() {
    let (capacity, partitions, n) = (256u64, 8u32, 1500usize);
    let geo = geometry(&config(capacity, partitions, 1.0, 0));
    let p = partitions as usize;
    let mut shape = None;
    for (name, w) in workloads(capacity, BS, 20_000, 9) {
        let accesses = record(config(capacity, partitions, 1.0, 3), w.as_ref(), n).await;
        let mut single = vec![0u64; p];
        let mut pairs = vec![0u64; p * p];
        let mut last = None;
        for a in &accesses {
            let read = partitions_read(&geo, a);
            assert_eq!(read.len(), 1, "{name}: an access read {read:?}");
            single[read[0] as usize] += 1;
            if let Some(prev) = last {
                pairs[prev * p + read[0] as usize] += 1;
            }
            last = Some(read[0] as usize);
            let s = shape_of(a);
            match &shape {
                None => shape = Some(s),
                Some(first) => assert_eq!(&s, first, "{name}: an access of another shape"),
            }
        }
        let c1 = chi_square(&single);
        let c2 = chi_square(&pairs);
        eprintln!(
            "{name}: chi-square partitions {c1:.1} (critical {:.1}), pairs {c2:.1} (critical {:.1}), \
             repeats {}",
            chi_square_critical_001(p as u64 - 1),
            chi_square_critical_001((p * p) as u64 - 1),
            (0..p).map(|i| pairs[i * p + i]).sum::<u64>()
        );
        assert!(
            c1 < chi_square_critical_001(p as u64 - 1),
            "{name}: partitions not uniform ({c1:.1}): {single:?}"
        );
        assert!(
            c2 < chi_square_critical_001((p * p) as u64 - 1),
            "{name}: pairs of consecutive partitions not uniform ({c2:.1})"
        );
        // Same partition twice in a row: 1/P of the pairs, as for independent draws.
        let same: u64 = (0..p).map(|i| pairs[i * p + i]).sum();
        let expected = (n - 1) as f64 / p as f64;
        assert!(
            (same as f64 - expected).abs() < 4.0 * expected.sqrt() + 5.0,
            "{name}: {same} repeats of the previous partition, expected about {expected:.0}"
        );
    }
}

/// With ν = 1.25 a background eviction follows one access in four: the number of
/// paths read per access, and the partitions read, have the same distribution
/// whatever the workload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_evictions_do_not_depend_on_the_workload() {
    let (capacity, partitions, n) = (256u64, 8u32, 1200usize);
    let geo = geometry(&config(capacity, partitions, 1.25, 0));
    let mut counts = Vec::new();
    for (name, w) in workloads(capacity, BS, 20_000, 9) {
        let accesses = record(config(capacity, partitions, 1.25, 4), w.as_ref(), n).await;
        let mut per = vec![0u64; partitions as usize];
        let mut paths = 0usize;
        for a in &accesses {
            let read = partitions_read(&geo, a);
            assert!(
                (1..=2).contains(&read.len()),
                "{name}: an access read {read:?}"
            );
            paths += read.len();
            for q in read {
                per[q as usize] += 1;
            }
        }
        let c = chi_square(&per);
        eprintln!("{name} (ν = 1.25): {paths} paths for {n} accesses, chi-square {c:.1}");
        assert!(
            c < chi_square_critical_001(partitions as u64 - 1),
            "{name}: partitions not uniform ({c:.1}): {per:?}"
        );
        counts.push((name, paths));
    }
    // The same seed draws the same background evictions whatever the ops; a
    // background eviction into the partition an access reads shares its path
    // only where the two paths meet (the leaf bucket of each is still read).
    let first = counts[0].1;
    for (name, paths) in &counts {
        let rate = *paths as f64 / n as f64;
        assert!(
            (rate - 1.25).abs() < 0.06,
            "{name}: {rate:.3} paths per access, expected 1.25"
        );
        assert!(
            paths.abs_diff(first) <= n / 100,
            "{name}: {paths} paths, the first workload {first}"
        );
    }
}

/// A store that delays every GET of one partition's objects (and its PUTs,
/// with `writes`).
struct SlowPartition<S> {
    inner: S,
    prefix: String,
    delay: Duration,
    writes: bool,
}

impl<S> SlowPartition<S> {
    async fn pause(&self, keys: &[ObjKey]) {
        if keys.iter().any(|k| k.as_str().starts_with(&self.prefix)) {
            tokio::time::sleep(self.delay).await;
        }
    }
}

/// Every fetch (`get_opts`, `get_range`, `get_tagged`) of the slow partition
/// waits, and every write (`put_opts`, `put_if`) with `writes`; the rest
/// passes through as it came.
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for SlowPartition<S> {
    async fn get_opts(
        &self,
        keys: &[ObjKey],
        opts: GetOpts,
    ) -> oram_blockstore::Result<Vec<Option<Bytes>>> {
        self.pause(keys).await;
        self.inner.get_opts(keys, opts).await
    }
    async fn get_range(
        &self,
        key: &ObjKey,
        range: Range<u64>,
    ) -> oram_blockstore::Result<Option<Bytes>> {
        self.pause(std::slice::from_ref(key)).await;
        self.inner.get_range(key, range).await
    }
    async fn put_opts(
        &self,
        items: Vec<(ObjKey, Bytes)>,
        opts: PutOpts,
    ) -> oram_blockstore::Result<()> {
        if self.writes {
            let keys: Vec<ObjKey> = items.iter().map(|(k, _)| k.clone()).collect();
            self.pause(&keys).await;
        }
        self.inner.put_opts(items, opts).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> oram_blockstore::Result<()> {
        self.inner.delete_many(keys).await
    }
    async fn list_opts(
        &self,
        prefix: &str,
        opts: ListOpts,
    ) -> oram_blockstore::Result<Vec<ObjKey>> {
        self.inner.list_opts(prefix, opts).await
    }
    async fn get_tagged(
        &self,
        key: &ObjKey,
        bound: SizeBound,
    ) -> oram_blockstore::Result<Option<(Bytes, ObjTag)>> {
        self.pause(std::slice::from_ref(key)).await;
        self.inner.get_tagged(key, bound).await
    }
    async fn put_if(
        &self,
        key: &ObjKey,
        data: Bytes,
        cond: PutCondition,
    ) -> oram_blockstore::Result<ObjTag> {
        if self.writes {
            self.pause(std::slice::from_ref(key)).await;
        }
        self.inner.put_if(key, data, cond).await
    }
}

/// The TaoStore attack: with one partition's responses delayed and many
/// requests in flight at once, the order of the server's requests (verbs and
/// sizes, in time order) is the same whichever blocks are asked for. Requests
/// for other partitions do not overtake a round waiting on the slow one (the
/// published code let them, so that waiting showed which requests shared a
/// partition). With two rounds in flight a round's writes and commit go on
/// while the next round reads, so how reads and writes interleave is the
/// scheduler's: the reads in time order, and the writes in time order, are
/// compared. Run with the slow partition's reads delayed, and with its writes
/// delayed too (then the next round's reads of it wait for the slow commit,
/// and its reads of other partitions do not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_partition_delays_every_request_alike() {
    for writes in [false, true] {
        a_slow_partition_delays_every_request_alike_with(writes).await;
    }
}

async fn a_slow_partition_delays_every_request_alike_with(writes: bool) {
    let (capacity, partitions) = (128u64, 8u32);
    let mut sequences = Vec::new();
    for (name, w) in workloads(capacity, BS, 20_000, 9).into_iter().take(3) {
        let rec = Arc::new(Recording::new(SlowPartition {
            inner: MemoryStore::new(),
            prefix: "vol0/c/3/".into(),
            delay: Duration::from_millis(15),
            writes,
        }));
        let e = Arc::new(curious(config(capacity, partitions, 1.0, 5), rec.clone()));
        e.format(&|_, _| {}).await.unwrap();
        fill(e.as_ref(), &mut Model::new(), 0..capacity, 1).await;
        rec.take_trace();
        // 64 requests, 16 at a time.
        for wave in 0..4 {
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let e = e.clone();
                    let op = w(wave * 16 + i);
                    tokio::spawn(async move { e.access(vec![op]).await })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        }
        // A round of reads is answered before its writes land: the last one's
        // are still in flight here (taking the trace now raced with them).
        e.flush().await.unwrap();
        let trace = rec.take_trace();
        assert!(
            trace.iter().any(|e| e.key.starts_with("vol0/c/3/")),
            "{name}: the slow partition was never accessed"
        );
        let of = |verb: Verb| -> Vec<u64> {
            trace
                .iter()
                .filter(|e| e.verb == verb)
                .map(|e| e.size)
                .collect()
        };
        let seq = (of(Verb::Get), of(Verb::Put));
        assert!(!seq.0.is_empty() && !seq.1.is_empty(), "{name}");
        sequences.push((name, seq));
    }
    let (first_name, first) = &sequences[0];
    for (name, seq) in &sequences[1..] {
        assert!(
            seq == first,
            "{name} and {first_name} (slow writes: {writes}): the server saw requests in \
             another order"
        );
    }
}

/// Two rounds in flight: with every write of the backend slow, a round plans
/// and reads while the round before it still writes and commits (the engine
/// counts such rounds), and every write is read back as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_reads_while_the_round_before_it_commits() {
    let (capacity, partitions) = (128u64, 8u32);
    let store = Arc::new(SlowPartition {
        inner: MemoryStore::new(),
        prefix: "vol0/".into(),
        delay: Duration::from_millis(5),
        writes: true,
    });
    let e = Arc::new(curious(config(capacity, partitions, 1.25, 7), store));
    e.format(&|_, _| {}).await.unwrap();
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..capacity, 1).await;
    let overlapped = |e: &Curious| {
        e.stats()
            .extra
            .iter()
            .find(|s| s.name == "rounds_overlapped_total")
            .map(|s| s.value)
            .expect("the framework counts overlapped rounds")
    };
    let before = overlapped(&e);
    // 8 waves of 16 callers writing at once, each a block of its own.
    for wave in 0..8u64 {
        let tasks: Vec<_> = (0..16u64)
            .map(|i| {
                let e = e.clone();
                let b = (wave * 16 + i) % capacity;
                tokio::spawn(async move {
                    e.access(vec![Op::Write(b, block_data(b, 2 + wave, BS))])
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
    }
    e.flush().await.unwrap();
    assert!(
        overlapped(&e) > before,
        "no round read while the one before it committed"
    );
    for b in 0..capacity {
        let got = e.access(vec![Op::Read(b)]).await.unwrap();
        assert_eq!(got[0], block_data(b, 2 + b / 16, BS), "block {b}");
    }
}

/// 100 000 random accesses (reads and writes over the whole capacity, 16 per
/// round) keep the eviction cache and the partitions' stashes small: their
/// maxima stay within bounds far below what would hold a partition's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_eviction_cache_stays_small_over_100k_accesses() {
    let (capacity, partitions) = (4096u64, 64u32);
    let e = curious(
        config(capacity, partitions, 1.25, 6),
        Arc::new(MemoryStore::new()),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut model: BTreeMap<u64, Bytes> = BTreeMap::new();
    let zeros = Bytes::from(vec![0u8; BS]);
    // The partitions' stashes together, after every round (what a checkpoint
    // taken then would hold).
    let mut stashes_max = 0;
    for round in 0..100_000 / 16 {
        let ops: Vec<Op> = (0..16)
            .map(|i| {
                let b = rng.gen_range(0..capacity);
                if rng.gen_bool(0.5) {
                    Op::Read(b)
                } else {
                    Op::Write(b, block_data(b, (round * 16 + i) as u64, BS))
                }
            })
            .collect();
        let got = e.access(ops.clone()).await.unwrap();
        for (op, g) in ops.into_iter().zip(got) {
            match op {
                Op::Read(b) => assert_eq!(g, *model.get(&b).unwrap_or(&zeros), "block {b}"),
                Op::Write(b, d) => {
                    model.insert(b, d);
                }
                _ => unreachable!(),
            }
        }
        let now = e.stats().extra("partition_stash_blocks").unwrap();
        stashes_max = stashes_max.max(now);
    }
    let s = e.stats();
    let mean = s.stash_mean();
    let part_max = s.extra("partition_stash_max_blocks").unwrap();
    eprintln!(
        "eviction cache over {} rounds: max {} blocks, mean {mean:.1}; largest partition stash \
         {part_max}; all partitions' stashes together at most {stashes_max}",
        s.rounds, s.stash_max
    );
    // What a checkpoint is padded for (the state bound): one partition at its
    // stash bound (89) plus a little per partition.
    let allowance = oram_curious::sub_stash_allowance(89, partitions);
    assert!(
        stashes_max <= allowance - 89,
        "the partitions' stashes held {stashes_max} blocks together (padding allows {allowance})"
    );
    // A partition receives about 1/P of the blocks and is evicted into ν/P of the
    // accesses: its queue is that of a server busy 1/ν = 80 % of the time (mean
    // about 4 blocks, P of them).
    assert!(mean < 8.0 * f64::from(partitions), "mean cache {mean:.1}");
    assert!(
        s.stash_max < 16 * u64::from(partitions),
        "max cache {}",
        s.stash_max
    );
    assert!(part_max < 89, "a partition's stash reached {part_max}");
    let rep = e.check(&|_, _| {}).await.unwrap();
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.written_blocks.len(), model.len());
}

/// Bytes per access: ν partition accesses, each the uncached levels of one path
/// read and written (sealed buckets of Z = 5 blocks) — within 10 % of that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bandwidth_per_access_is_the_analytical_figure() {
    let (capacity, partitions, n) = (1024u64, 16u32, 2000usize);
    for rate in [1.0, 1.25, 1.5] {
        let cfg = config(capacity, partitions, rate, 8);
        let geo = geometry(&cfg);
        let accesses = record(cfg.clone(), &|i| Op::Read(i as u64 % capacity), n).await;
        let bytes: u64 = accesses
            .iter()
            .flatten()
            .filter(|e| matches!(e.verb, Verb::Get | Verb::Put))
            .map(|e| e.size)
            .sum();
        let object = accesses
            .iter()
            .flatten()
            .find(|e| e.verb == Verb::Put)
            .unwrap()
            .size;
        // One level (the root) is kept locally.
        let uncached = u64::from(geo.leaf_level);
        let analytical = rate * 2.0 * uncached as f64 * object as f64;
        let measured = bytes as f64 / n as f64;
        eprintln!("ν = {rate}: {measured:.0} bytes per access, analytical {analytical:.0}");
        // The engine's model (what `oram-proxy describe` reports) is that figure.
        let settings = CuriousSettings {
            curious_partitions: partitions,
            curious_eviction_rate: rate,
            cached_levels: Some(1),
            ..CuriousSettings::default()
        }
        .with_subs(Arc::new(|spec: &SubSpec| {
            let s = PathSettings {
                z: spec.z,
                arity: spec.arity,
                cached_levels: spec.cached_levels,
                ..PathSettings::default()
            };
            Ok(Box::new(s) as Box<dyn EngineSettings>)
        }));
        let shape = Shape {
            capacity,
            block_size: BS,
            max_batch: 16,
            prefix: "vol0".into(),
            id_limit: None,
        };
        assert_eq!(settings.sub_shape(&shape).capacity, cfg.sub_capacity());
        let model = settings.model(&shape);
        assert!((model.read_op.bytes() / analytical - 1.0).abs() < 1e-9);
        assert_eq!(model.object_bytes, object);
        assert!(
            (measured / analytical - 1.0).abs() < 0.10,
            "ν = {rate}: {measured:.0} bytes per access, analytical {analytical:.0}"
        );
    }
}
