//! Reading ahead: a round that sends its reads while the round before it — a
//! round of reads, answered — is still writing its buckets and committing
//! ([`Subject::reads_ahead`]). The checks: it happens, and only behind a round
//! of reads; answers still wait for the round before; a failure or a crash of
//! the round before repeats both rounds, request for request, in order; and
//! what the provider sees still does not depend on the blocks read.

use std::sync::Arc;

use oram_blockstore::{BlockStore, Recording, TraceEvent};
use oram_store_memory::MemoryStore;

use super::*;

/// Fetch requests (GETs and ranged GETs) in `trace`.
fn gets(trace: &[TraceEvent]) -> usize {
    fetch_events(trace).len()
}

/// Yields (bounded: 20 000 times, then 2 s of sleeps) until `done` holds.
async fn until(mut done: impl FnMut() -> bool) -> bool {
    for i in 0..20_200u32 {
        if done() {
            return true;
        }
        if i < 20_000 {
            tokio::task::yield_now().await;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
    done()
}

/// Reads `b` (checking the answer) and waits until its round either leaves PUTs
/// hanging (`true`: the round is landing) or settles (`false`: it wrote nothing).
async fn read_landing<S: BlockStore>(
    e: &dyn Oram,
    faults: &HoldStore<S>,
    model: &Model,
    b: u64,
) -> bool {
    let rounds = e.stats().rounds;
    assert_eq!(e.access(vec![Op::Read(b)]).await.unwrap()[0], model[&b]);
    assert!(
        until(|| faults.puts_waiting() > 0 || e.stats().rounds > rounds).await,
        "a round neither wrote nor settled"
    );
    faults.puts_waiting() > 0
}

/// With PUTs held, reads blocks `from`, `from + 1`, … (checking each answer)
/// until one's round leaves PUTs hanging — every round of Path ORAM, a round
/// that evicts or reshuffles of Ring ORAM; at most 64 reads. Returns what the
/// provider saw of that last round (its reads).
async fn read_until_puts_hang<S: BlockStore>(
    e: &dyn Oram,
    faults: &HoldStore<S>,
    rec: &Recording<Arc<HoldStore<S>>>,
    model: &Model,
    from: u64,
) -> Vec<TraceEvent> {
    // A round still landing would hang on the closed PUTs, and every read after it.
    e.flush().await.unwrap();
    faults.set_puts_open(false);
    for b in (from..).take(64) {
        let b = b % model.len() as u64;
        rec.take_trace();
        if read_landing(e, faults, model, b).await {
            return rec.take_trace();
        }
    }
    panic!("64 rounds of reads wrote nothing");
}

/// The fetch requests of a round reading ahead while GETs are held: they arrive
/// in one poll of its fetch, but its task may be descheduled in between, so the
/// list is taken once it has been the same for 50 ms (bounded: 10 s).
async fn held_round<S: BlockStore>(faults: &HoldStore<S>) -> Vec<Seen> {
    assert!(until(|| !faults.held().is_empty()).await, "no read ahead");
    let mut seen = faults.held().len();
    let mut stable = 0;
    for _ in 0..2000 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let now = faults.held().len();
        stable = if now == seen { stable + 1 } else { 0 };
        seen = now;
        if stable == 10 {
            break;
        }
    }
    sorted_seen(faults.held())
}

/// A round of reads landing (its PUTs held) and a round reading ahead of it
/// (its GETs held) that reads a bucket the landing round is rewriting.
struct Overlap {
    /// What the provider saw of the landing round: its fetches, sorted.
    first: Vec<Seen>,
    /// The fetches of the round reading ahead, sorted (still held).
    second: Vec<Seen>,
    /// The access reading ahead.
    next: tokio::task::JoinHandle<crate::Result<Vec<Bytes>>>,
}

/// Pairs of rounds — a round of reads of `from`, `from + 1`, … answered with
/// its PUTs held, then an access of `ahead` reading ahead of it with its GETs
/// held — until the round reading ahead reads buckets the landing round is
/// rewriting (nodes of held PUTs) in a way that rests on what the landing
/// round's apply drew: two ranged reads there (Ring ORAM: which slot holds the
/// wanted block or which dummies are unread follows the new bucket's
/// permutation; two, as one slot might be the same under another permutation
/// by chance), or, for a scheme that reads only whole buckets (Path ORAM:
/// nothing it reads depends on a bucket's layout), one read there. A pair that
/// does not overlap so is let finish (answers checked). At most 128 pairs: a
/// fixed seed makes the search deterministic, and the bound makes a case that
/// never overlaps fail rather than pass by luck.
async fn overlapping_pair<S: BlockStore + 'static>(
    e: &Arc<dyn Oram>,
    faults: &HoldStore<S>,
    rec: &Recording<Arc<HoldStore<S>>>,
    model: &Model,
    from: u64,
    ahead: &[u64],
) -> Overlap {
    for _ in 0..128 {
        faults.clear_held();
        let landing = read_until_puts_hang(e.as_ref(), faults, rec, model, from).await;
        let rewritten: std::collections::BTreeSet<u64> = faults
            .puts_held()
            .iter()
            .filter_map(|k| key_position(k))
            .collect();
        faults.set_gets_open(false);
        let (e2, ops) = (e.clone(), ahead.iter().map(|&b| Op::Read(b)).collect());
        let next = tokio::spawn(async move { e2.access(ops).await });
        let second = held_round(faults).await;
        let rewrites = |(_, k, _): &&Seen| key_position(k).is_some_and(|n| rewritten.contains(&n));
        let ranged = |(v, _, _): &&Seen| *v == Verb::GetRange;
        let in_rewritten = second.iter().filter(rewrites).count();
        let ranged_in_rewritten = second.iter().filter(rewrites).filter(ranged).count();
        let reads_ranges = second.iter().any(|s| ranged(&s));
        if ranged_in_rewritten >= 2 || (!reads_ranges && in_rewritten >= 1) {
            return Overlap {
                first: fetches_of(&landing),
                second,
                next,
            };
        }
        faults.set_gets_open(true);
        faults.set_puts_open(true);
        let got = next.await.unwrap().unwrap();
        for (b, d) in ahead.iter().zip(got) {
            assert_eq!(d, model[b], "block {b}");
        }
    }
    panic!("in 128 pairs, no round read ahead in buckets the round before it rewrote");
}

/// An engine of the default parameters over a recording, fault-injecting memory
/// store, blocks 0..16 written; the trace emptied.
async fn rig(
    s: &dyn Subject,
) -> (
    Params,
    Arc<HoldStore<MemoryStore>>,
    Arc<Recorded>,
    Arc<dyn Oram>,
    Model,
) {
    let p = Params::default();
    let (faults, rec, e) = recorded_engine(s, &p);
    let mut model = Model::new();
    fill(e.as_ref(), &mut model, 0..16, 1).await;
    rec.take_trace();
    (p, faults, rec, e, model)
}

/// Behind a round of reads whose PUTs hang, the next access sends its reads and
/// is answered only once those PUTs land; behind a round with a write it sends
/// nothing until the write is durable.
pub fn a_round_reads_ahead_only_of_a_round_of_reads(s: Arc<dyn Subject>) {
    if !s.reads_ahead() {
        return;
    }
    runtime().block_on(async {
        let (p, faults, rec, e, mut model) = rig(s.as_ref()).await;

        let first = gets(&read_until_puts_hang(e.as_ref(), &faults, &rec, &model, 3).await);
        let e2 = e.clone();
        let next = tokio::spawn(async move { e2.access(vec![Op::Read(5)]).await });
        assert!(
            until(|| gets(&rec.trace()) > 0).await,
            "the next round did not read ahead"
        );
        assert!(faults.puts_waiting() > 0);
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        assert!(
            !next.is_finished(),
            "answered before the round ahead of it was durable"
        );
        faults.set_puts_open(true);
        assert_eq!(next.await.unwrap().unwrap()[0], model[&5], "block 5");
        e.flush().await.unwrap();
        assert!(first > 0);

        // Behind a write: nothing goes out until the write is durable (a write
        // whose round leaves PUTs hanging: every one of Path ORAM, one that
        // evicts of Ring ORAM).
        faults.set_puts_open(false);
        let mut hanging = None;
        for v in 2..66u64 {
            let d = block_data(2, v, p.block_size);
            let (e2, d2) = (e.clone(), d.clone());
            let write = tokio::spawn(async move { e2.access(vec![Op::Write(2, d2)]).await });
            assert!(until(|| faults.puts_waiting() > 0 || write.is_finished()).await);
            if faults.puts_waiting() > 0 {
                hanging = Some((write, d));
                break;
            }
            write.await.unwrap().unwrap();
            model.insert(2, d);
        }
        let (write, d) = hanging.expect("64 writes wrote nothing");
        rec.take_trace();
        let e3 = e.clone();
        let read = tokio::spawn(async move { e3.access(vec![Op::Read(2)]).await });
        for _ in 0..2000 {
            tokio::task::yield_now().await;
        }
        assert_eq!(gets(&rec.trace()), 0, "a round read ahead of a write");
        assert!(!write.is_finished() && !read.is_finished());
        faults.set_puts_open(true);
        write.await.unwrap().unwrap();
        model.insert(2, d);
        assert_eq!(read.await.unwrap().unwrap()[0], model[&2]);
        e.flush().await.unwrap();
        assert_eq!(e.stats().pending_writebacks, 0);
        read_back(e.as_ref(), &model, 16, p.max_batch).await;
    });
}

/// `fetches` (fetch requests in the order they went out) begin with the
/// landing round's `first` and then the round read ahead's `second` (each
/// sorted), followed by requests of the new access's own.
fn assert_both_repeated(fetches: &[TraceEvent], first: &[Seen], second: &[Seen]) {
    let (a, b) = (first.len(), second.len());
    assert!(
        fetches.len() > a + b,
        "the new access read nothing of its own"
    );
    assert_eq!(fetches_of(&fetches[..a]), first, "the landing round, again");
    assert_eq!(
        fetches_of(&fetches[a..a + b]),
        second,
        "the round read ahead, again"
    );
}

/// The round before fails (its PUTs fail) after the next one read ahead — and
/// read buckets the round before was rewriting, so that its plan rests on what
/// that round drew (`overlapping_pair`): that access fails too, and the next
/// access repeats both rounds, request for request and in order, before its
/// own. Three times (a slot read in a rewritten bucket may be the same under
/// another layout by chance; three times over, hardly). Nothing acknowledged is
/// lost.
pub fn a_failed_round_repeats_the_round_that_read_ahead_of_it(s: Arc<dyn Subject>) {
    if !s.reads_ahead() {
        return;
    }
    runtime().block_on(async {
        let (p, faults, rec, e, model) = rig(s.as_ref()).await;

        for time in 1..=3u64 {
            let Overlap {
                first,
                second,
                next,
            } = overlapping_pair(&e, &faults, &rec, &model, 3, &[5, 6]).await;
            faults.set_gets_open(true);
            faults.set_puts_down(true);
            faults.set_puts_open(true);
            assert!(
                next.await.unwrap().is_err(),
                "an access built on a failed round succeeded"
            );
            faults.set_puts_down(false);
            rec.take_trace();
            assert_eq!(e.access(vec![Op::Read(9)]).await.unwrap()[0], model[&9]);
            let again = fetch_events(&rec.take_trace());
            assert_both_repeated(&again, &first, &second);
            assert_eq!(
                e.stats().extra("rounds_repeated_total"),
                Some(2 * time),
                "failure {time}"
            );
        }
        e.flush().await.unwrap();
        read_back(e.as_ref(), &model, 16, p.max_batch).await;
    });
}

/// The process dies while a round of reads is landing (its PUTs hang) and the
/// next round has read ahead, in a bucket the landing round rewrites
/// (`overlapping_pair`): both intent records are durable, and the restart
/// repeats both rounds, request for request and in order, before anything new.
pub fn a_crash_while_reading_ahead_repeats_both_rounds(s: Arc<dyn Subject>) {
    if !s.reads_ahead() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        capacity: 512,
        block_size: 256,
        cached_levels: 3,
        ..Params::default()
    };
    const VOL: [u8; 16] = [4; 16];
    let mut model = Model::new();
    let rt = runtime();
    let (first, second) = rt.block_on(async {
        let rig = DurableRig::open(dir.path(), VOL);
        let e = rig.engine(s.as_ref(), &p);
        fill(e.as_ref(), &mut model, 0..64, 1).await;
        // A round of reads answered with its PUTs held, and the next round
        // reading ahead of it (its reads held too) in a bucket it rewrites;
        // then the crash.
        let pair = overlapping_pair(&e, &rig.store, &rig.rec, &model, 7, &[30, 31]).await;
        (pair.first, pair.second)
    });
    crash(rt);
    restart_repeats_both(
        s.as_ref(),
        &p,
        dir.path(),
        VOL,
        (&model, 64),
        40,
        |fetches, e| {
            assert_both_repeated(fetches, &first, &second);
            assert_eq!(e.stats().extra("rounds_repeated_total"), Some(2));
        },
    );
}

/// The block a workload reads at its `i`-th access.
type BlockOf = Box<dyn Fn(usize) -> u64>;

/// Workloads of reads only, one access each, run in pairs: the first access is
/// answered with its PUTs held and the second reads ahead of it. What the
/// provider sees of each pair — shapes and leaves — must not depend on the
/// blocks (chi-square, as in `traces_do_not_depend_on_the_workload`).
pub fn reading_ahead_does_not_depend_on_the_blocks(s: Arc<dyn Subject>) {
    if !s.reads_ahead() {
        return;
    }
    const PAIRS: usize = 600;
    let p = Params {
        capacity: 256,
        block_size: 32,
        max_batch: 1,
        seed: [78; 32],
        ..Params::default()
    };
    let cap = p.capacity;
    let random: Vec<u64> = {
        let mut rng = ChaCha8Rng::seed_from_u64(6);
        (0..2 * PAIRS).map(|_| rng.gen_range(0..cap)).collect()
    };
    let workloads: Vec<(&'static str, BlockOf)> = vec![
        ("same block", Box::new(|_| 5)),
        ("sequential scan", Box::new(move |i| i as u64 % cap)),
        ("uniform random", Box::new(move |i| random[i])),
    ];
    runtime().block_on(async {
        let mut traces = Vec::new();
        for (name, w) in &workloads {
            let (faults, rec, e) = recorded_engine(s.as_ref(), &p);
            e.format(&|_, _| {}).await.unwrap();
            let mut model = Model::new();
            fill(e.as_ref(), &mut model, 0..cap, 0).await;
            rec.take_trace();
            let mut pairs = Vec::with_capacity(PAIRS);
            let mut overlapped = 0;
            for i in 0..PAIRS {
                let (x, y) = (w(2 * i), w(2 * i + 1));
                faults.set_puts_open(false);
                overlapped += usize::from(read_landing(e.as_ref(), &faults, &model, x).await);
                let before = gets(&rec.trace());
                let e2 = e.clone();
                let next = tokio::spawn(async move { e2.access(vec![Op::Read(y)]).await });
                assert!(
                    until(|| gets(&rec.trace()) > before).await,
                    "{name}: pair {i} did not read ahead"
                );
                faults.set_puts_open(true);
                assert_eq!(next.await.unwrap().unwrap()[0], model[&y]);
                e.flush().await.unwrap();
                pairs.push(rec.take_trace());
            }
            // Path ORAM writes in every round; Ring ORAM in one of A or so.
            assert!(
                overlapped >= PAIRS / 10,
                "{name}: only {overlapped} pairs overlapped"
            );
            traces.push((*name, pairs));
        }
        let v = judge(s.as_ref(), &p, &traces);
        assert!(
            v.shapes.0 <= v.shapes.1,
            "pair shapes depend on the blocks: {:.1} > {:.1}",
            v.shapes.0,
            v.shapes.1
        );
        for (name, c) in &v.positions {
            assert!(*c < v.critical, "{name}: positions not uniform ({c:.1})");
        }
    });
}

/// `f`, or an error after 20 s.
fn bounded<F: std::future::Future>(f: F) -> tokio::time::Timeout<F> {
    tokio::time::timeout(std::time::Duration::from_secs(20), f)
}

/// Callers that go away mid-access (their futures dropped, as when a client
/// disconnects): a write whose PUTs hang and, where the engine reads ahead, a
/// round reading ahead whose GETs hang. The engine finishes both rounds, serves
/// the next accesses, flushes, and loses nothing.
pub fn a_caller_that_goes_away_leaves_no_round_half_done(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let (p, faults, rec, e, mut model) = rig(s.as_ref()).await;

        // A write, dropped while its PUTs hang (or after it was answered).
        faults.set_puts_open(false);
        let d = block_data(2, 2, p.block_size);
        let (e2, d2) = (e.clone(), d.clone());
        let write = tokio::spawn(async move { e2.access(vec![Op::Write(2, d2)]).await });
        assert!(until(|| faults.puts_waiting() > 0 || write.is_finished()).await);
        write.abort();
        faults.set_puts_open(true);
        bounded(e.flush()).await.expect("flush hangs").unwrap();
        let got = e.access(vec![Op::Read(2)]).await.unwrap();
        assert!(
            got[0] == d || got[0] == model[&2],
            "block 2 is neither version"
        );
        model.insert(2, got[0].clone());

        if s.reads_ahead() {
            // A round reading ahead, dropped while its GETs hang.
            read_until_puts_hang(e.as_ref(), &faults, &rec, &model, 3).await;
            faults.set_gets_open(false);
            let e3 = e.clone();
            let ahead = tokio::spawn(async move { e3.access(vec![Op::Read(5)]).await });
            assert!(until(|| !faults.held().is_empty()).await, "no read ahead");
            ahead.abort();
            faults.set_gets_open(true);
            faults.set_puts_open(true);
            bounded(e.flush()).await.expect("flush hangs").unwrap();
        }
        let again = bounded(e.access(vec![Op::Read(9)]))
            .await
            .expect("an access hangs")
            .unwrap();
        assert_eq!(again[0], model[&9]);
        bounded(e.flush()).await.expect("flush hangs").unwrap();
        read_back(e.as_ref(), &model, 16, p.max_batch).await;
    });
}
