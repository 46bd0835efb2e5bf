//! Callers sharing the engine's calls ([`crate::Combined`], which the proxy
//! wraps around every engine): each caller gets its own answers, a refused or
//! failed request fails alone, and what the provider sees of shared calls does
//! not depend on the blocks.

use std::time::{Duration, Instant};

use super::traces::judge;
use super::*;
use crate::{Combined, OramError};

/// `s`'s engine for `p` over `store`, shared by its callers.
fn shared_engine(s: &dyn Subject, p: &Params, store: Arc<dyn BlockStore>) -> Arc<Combined> {
    Arc::new(Combined::new(mem_engine(s, p, store), p.max_batch))
}

/// `s`'s shared engine of 64 blocks of 32 bytes over a [`HoldStore`], every
/// block written (version 1) and flushed.
async fn filled_over_hold_store(
    s: &dyn Subject,
) -> (Params, Arc<HoldStore<MemoryStore>>, Arc<Combined>) {
    let p = Params {
        capacity: 64,
        block_size: 32,
        ..Params::default()
    };
    let store = Arc::new(HoldStore::new(MemoryStore::new()));
    let e = shared_engine(s, &p, store.clone());
    fill(e.as_ref(), &mut Model::new(), 0..p.capacity, 1).await;
    e.flush().await.unwrap();
    (p, store, e)
}

/// Runs each of `requests` as a caller of its own, all of them waiting before
/// the first call begins (calls are held off until every one waits), and
/// returns their answers in the order given.
async fn waiting_at_once(
    e: &Arc<Combined>,
    requests: Vec<Vec<Op>>,
) -> Vec<crate::Result<Vec<Bytes>>> {
    let held = e.quiesce().await.unwrap();
    let n = requests.len() as u64;
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|ops| {
            let e = e.clone();
            tokio::spawn(async move { e.access(ops).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while e.stats().extra("shared_waiting_requests") != Some(n) {
        assert!(Instant::now() < deadline, "{n} requests never all waited");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    drop(held);
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

/// What `e` reports of its shared calls: (requests served, calls made).
fn served_and_calls(e: &Combined) -> (u64, u64) {
    let s = e.stats();
    (
        s.extra("shared_requests_total").unwrap(),
        s.extra("shared_calls_total").unwrap(),
    )
}

/// 12 callers of 2 ops (reads of some blocks, writes of others) and one of 40
/// (split into pieces of at most `max_batch` = 16, each waiting for the one
/// before), all waiting at once: 15 requests of 64 ops served in 4 to 7 calls
/// of the engine, each caller answered for its own ops, every write read back.
pub fn callers_waiting_at_once_share_calls_and_get_their_own_answers(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params {
            block_size: 32,
            ..Params::default()
        };
        let e = shared_engine(s.as_ref(), &p, Arc::new(MemoryStore::new()));
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..p.capacity, 1).await;
        let before = served_and_calls(&e);
        let accesses = e.stats().accesses;
        let mut requests = Vec::new();
        for i in 0..8u64 {
            requests.push(vec![Op::Read(2 * i), Op::Read(2 * i + 1)]);
        }
        for i in 0..4u64 {
            let (a, b) = (100 + 2 * i, 101 + 2 * i);
            requests.push(vec![
                Op::Write(a, block_data(a, 2, 32)),
                Op::Write(b, block_data(b, 2, 32)),
            ]);
        }
        requests.push((200..240).map(Op::Read).collect());
        let answers = waiting_at_once(&e, requests.clone()).await;
        for (ops, got) in requests.iter().zip(answers) {
            let got = got.unwrap();
            assert_eq!(got.len(), ops.len());
            for (op, g) in ops.iter().zip(got) {
                match op {
                    Op::Read(b) => assert_eq!(g, block_data(*b, 1, 32), "block {b}"),
                    _ => assert!(g.is_empty()),
                }
            }
        }
        let after = served_and_calls(&e);
        let (served, calls) = (after.0 - before.0, after.1 - before.1);
        assert_eq!(served, 15, "requests served");
        // At most 16 ops a call: at least 4; the long caller's later pieces
        // join the calls after its first.
        assert!((4..=7).contains(&calls), "{calls} calls for 15 requests");
        // A call of reads is answered before its round settles (and counts).
        e.flush().await.unwrap();
        if s.oblivious() {
            // Every op an access (the baseline counts only what it fetched).
            assert_eq!(e.stats().accesses - accesses, 64, "ops served");
        }
        for i in 100..108u64 {
            let got = e.access(vec![Op::Read(i)]).await.unwrap();
            assert_eq!(got[0], block_data(i, 2, 32), "block {i}");
        }
    });
}

/// A request the engine refuses (an insert of a block it holds) that shared a
/// call with others
/// fails alone: the others get their answers, and the refused insert changed
/// nothing.
pub fn a_refused_request_in_a_shared_call_fails_alone(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params {
            capacity: 64,
            block_size: 32,
            ..Params::default()
        };
        let e = shared_engine(s.as_ref(), &p, Arc::new(MemoryStore::new()));
        fill(e.as_ref(), &mut Model::new(), 0..p.capacity, 1).await;
        let requests = vec![
            vec![Op::Read(1)],
            vec![Op::Insert(5, block_data(5, 9, 32))],
            vec![Op::Read(2), Op::Write(3, block_data(3, 2, 32))],
            vec![Op::Read(4)],
        ];
        let answers = waiting_at_once(&e, requests).await;
        assert_eq!(answers[0].as_ref().unwrap()[0], block_data(1, 1, 32));
        assert!(
            matches!(answers[1], Err(OramError::Unsupported(_))),
            "the insert of a held block: {:?}",
            answers[1].as_ref().map(|_| ())
        );
        assert_eq!(answers[2].as_ref().unwrap()[0], block_data(2, 1, 32));
        assert_eq!(answers[3].as_ref().unwrap()[0], block_data(4, 1, 32));
        let got = e.access(vec![Op::Read(3), Op::Read(5)]).await.unwrap();
        assert_eq!(got[0], block_data(3, 2, 32));
        assert_eq!(
            got[1],
            block_data(5, 1, 32),
            "the refused insert changed block 5"
        );
    });
}

/// A shared call the backend fails: every request gets an error of its own
/// call (each is served alone after the shared one failed), nothing of them
/// is applied, and once the backend is back every block reads as before.
pub fn a_shared_call_the_backend_fails_fails_each_request_and_loses_nothing(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let (p, store, e) = filled_over_hold_store(s.as_ref()).await;
        store.set_down(true);
        let requests: Vec<Vec<Op>> = (0..6u64)
            .map(|i| vec![Op::Write(i, block_data(i, 2, 32)), Op::Read(10 + i)])
            .collect();
        let answers = waiting_at_once(&e, requests).await;
        for (i, a) in answers.iter().enumerate() {
            assert!(
                matches!(a, Err(OramError::Store(_))),
                "request {i}: {:?}",
                a.as_ref().map(|_| ())
            );
        }
        store.set_down(false);
        for b in 0..p.capacity {
            let got = e.access(vec![Op::Read(b)]).await.unwrap();
            assert_eq!(got[0], block_data(b, 1, 32), "block {b}");
        }
    });
}

/// Callers that arrive while a round reads (its GETs held) share the next
/// call, all of them: it is made once the engine is free for a new round, not
/// as soon as the round reading took its place (when only the first of them
/// was waiting). Each gets its own answer. For an engine with rounds in flight
/// ([`Subject::rounds_in_flight`]); every other engine admits the next call
/// only when a call returns, so its callers share calls so already.
pub fn callers_arriving_while_a_round_reads_share_the_next_call(s: Arc<dyn Subject>) {
    if !s.rounds_in_flight() {
        return;
    }
    const CALLERS: u64 = 6;
    runtime().block_on(async {
        let (_, store, e) = filled_over_hold_store(s.as_ref()).await;
        store.set_gets_open(false);
        let first = {
            let e = e.clone();
            tokio::spawn(async move { e.access(vec![Op::Read(0)]).await })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while store.held().is_empty() {
            assert!(Instant::now() < deadline, "the first round never read");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let (_, calls_before) = served_and_calls(&e);
        let callers: Vec<_> = (1..=CALLERS)
            .map(|i| {
                let e = e.clone();
                let ops = match i % 2 {
                    0 => vec![Op::Read(i)],
                    _ => vec![Op::Write(i, block_data(i, 2, 32)), Op::Read(i + 20)],
                };
                tokio::spawn(async move { e.access(ops).await })
            })
            .collect();
        // Every caller either waits or is in a call (as the old admission
        // put the first one in a call of its own at once).
        loop {
            let waiting = e.stats().extra("shared_waiting_requests").unwrap();
            let (_, calls) = served_and_calls(&e);
            if waiting + (calls - calls_before) == CALLERS {
                break;
            }
            assert!(Instant::now() < deadline, "the callers never all waited");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        store.set_gets_open(true);
        assert_eq!(first.await.unwrap().unwrap()[0], block_data(0, 1, 32));
        for (i, c) in (1..=CALLERS).zip(callers) {
            let got = c.await.unwrap().unwrap();
            match i % 2 {
                0 => assert_eq!(got[0], block_data(i, 1, 32), "block {i}"),
                _ => assert_eq!(got[1], block_data(i + 20, 1, 32), "block {}", i + 20),
            }
        }
        let (_, calls) = served_and_calls(&e);
        assert_eq!(
            calls - calls_before,
            1,
            "callers that arrived while a round read were split over calls"
        );
        for i in (1..=CALLERS).filter(|i| i % 2 == 1) {
            let got = e.access(vec![Op::Read(i)]).await.unwrap();
            assert_eq!(got[0], block_data(i, 2, 32), "block {i}");
        }
    });
}

/// Calls shared by 4 callers of one op each (waiting at once, so each call
/// has 4 ops), for five workloads of equal length: the shapes of the calls
/// (verbs, sizes, range lengths) are distributed alike and the positions
/// uniform, as for calls of one caller — an op naming a block another op of
/// the same call names looks like any other. An engine that is not oblivious
/// must fail.
pub fn shared_calls_do_not_depend_on_the_workload(s: Arc<dyn Subject>) {
    const CALLS: usize = 300;
    const CALLERS: usize = 4;
    let p = Params {
        capacity: 256,
        block_size: 32,
        max_batch: CALLERS,
        seed: [78; 32],
        ..Params::default()
    };
    runtime().block_on(async {
        let mut traces = Vec::new();
        for (name, w) in workloads(p.capacity, p.block_size, CALLS * CALLERS, 6) {
            let (_, rec, engine) = recorded_engine(s.as_ref(), &p);
            let e = Arc::new(Combined::new(engine, p.max_batch));
            e.format(&|_, _| {}).await.unwrap();
            fill(e.as_ref(), &mut Model::new(), 0..p.capacity, 0).await;
            rec.take_trace();
            let mut calls = Vec::with_capacity(CALLS);
            for c in 0..CALLS {
                let requests = (0..CALLERS).map(|i| vec![w(c * CALLERS + i)]).collect();
                for a in waiting_at_once(&e, requests).await {
                    a.unwrap();
                }
                e.flush().await.unwrap();
                calls.push(rec.take_trace());
            }
            traces.push((name, calls));
        }
        let v = judge(s.as_ref(), &p, &traces);
        println!(
            "shared calls' shapes: chi-square {:.1} (critical {:.1}); positions (critical {:.1}): {:?}",
            v.shapes.0, v.shapes.1, v.critical, v.positions
        );
        if s.oblivious() {
            assert!(v.shapes.0 <= v.shapes.1, "shapes of shared calls depend on the workload");
            for (name, c) in &v.positions {
                assert!(*c < v.critical, "{name}: positions not uniform ({c:.1})");
            }
        } else {
            assert!(
                v.shapes.0 > v.shapes.1 || v.positions.iter().any(|(_, c)| *c >= v.critical),
                "the negative control passed: the check cannot fail"
            );
        }
    });
}
