//! Two rounds in flight ([`Subject::rounds_in_flight`]): a round plans and
//! reads while the round before it — of reads or of writes — is still writing
//! and committing. The checks: a read of the later round is not answered
//! before the earlier round is durable; when the earlier round's commit fails
//! the later one fails with it, and the next access repeats both, the earlier
//! request for request and the later with at least every request it sent, in
//! order; a crash with both in flight leaves both intent records, and a
//! restart repeats both the same way. Nothing acknowledged is lost.

use std::sync::Arc;

use oram_blockstore::{BlockStore, Recording, TraceEvent};

use super::*;

/// Waits (bounded: 10 s) until `trace()` has fetches and their number has not
/// changed for 50 ms; returns them.
async fn settled_fetches(trace: impl Fn() -> Vec<TraceEvent>) -> Vec<TraceEvent> {
    let mut seen = usize::MAX;
    let mut stable = 0;
    for _ in 0..2000 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let now = fetch_events(&trace()).len();
        stable = if now == seen && now > 0 {
            stable + 1
        } else {
            0
        };
        seen = now;
        if stable == 10 {
            break;
        }
    }
    fetch_events(&trace())
}

/// What the provider saw of two rounds in flight.
struct InFlight {
    /// The earlier round's fetches (a write, its PUTs held), sorted.
    first: Vec<Seen>,
    /// The later round's fetches (a read), sorted: those of its partitions
    /// the earlier round does not access (the others wait for its commit).
    second: Vec<Seen>,
    write: tokio::task::JoinHandle<crate::Result<Vec<Bytes>>>,
    read: tokio::task::JoinHandle<crate::Result<Vec<Bytes>>>,
}

/// With PUTs held, a write of block 1 (version 2) whose round lands, then a
/// read of block 9 that reads while it does. Neither is answered.
async fn two_in_flight<S: BlockStore + 'static>(
    e: &Arc<dyn Oram>,
    faults: &HoldStore<S>,
    rec: &Recording<Arc<HoldStore<S>>>,
    block_size: usize,
) -> InFlight {
    e.flush().await.unwrap();
    faults.set_puts_open(false);
    rec.take_trace();
    let e1 = e.clone();
    let data = block_data(1, 2, block_size);
    let write = tokio::spawn(async move { e1.access(vec![Op::Write(1, data)]).await });
    let first = fetches_of(&settled_fetches(|| rec.trace()).await);
    assert!(faults.puts_waiting() > 0, "the write's round wrote nothing");
    rec.take_trace();
    let e2 = e.clone();
    let read = tokio::spawn(async move { e2.access(vec![Op::Read(9)]).await });
    let second = fetches_of(&settled_fetches(|| rec.trace()).await);
    assert!(
        !second.is_empty(),
        "the later round read nothing while the earlier one landed"
    );
    for _ in 0..200 {
        tokio::task::yield_now().await;
    }
    assert!(
        !write.is_finished(),
        "a write answered before its PUTs landed"
    );
    assert!(
        !read.is_finished(),
        "a read answered before the round before it was durable"
    );
    InFlight {
        first,
        second,
        write,
        read,
    }
}

/// `fetches` (in the order they went out) begin with the earlier round's
/// `first` exactly, then a repeat of the later round holding every request
/// of `second`; the repeats counted are two more than `repeated_before`.
fn assert_both_repeated(fetches: &[TraceEvent], f: &InFlightSeen, e: &dyn Oram) {
    let a = f.first.len();
    assert!(fetches.len() > a, "nothing was repeated");
    assert_eq!(
        fetches_of(&fetches[..a]),
        f.first,
        "the earlier round, again"
    );
    assert!(
        contains_all(&fetches_of(&fetches[a..]), &f.second),
        "the later round's repeat lacks requests it sent"
    );
    assert_eq!(
        e.stats().extra("rounds_repeated_total"),
        Some(f.repeated_before + 2)
    );
}

/// What a repeat is checked against.
struct InFlightSeen {
    first: Vec<Seen>,
    second: Vec<Seen>,
    repeated_before: u64,
}

/// The earlier of two rounds in flight fails at its commit (its PUTs fail):
/// the later one, which read while it landed, fails too, and the next access
/// repeats both, in order, before its own. Nothing acknowledged is lost.
pub fn a_failed_round_fails_the_round_in_flight_after_it(s: Arc<dyn Subject>) {
    if !s.rounds_in_flight() {
        return;
    }
    runtime().block_on(async {
        let p = Params::default();
        let (faults, rec, e) = recorded_engine(s.as_ref(), &p);
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..16, 1).await;
        let repeated_before = e.stats().extra("rounds_repeated_total").unwrap_or(0);
        let f = two_in_flight(&e, &faults, &rec, p.block_size).await;
        faults.set_puts_down(true);
        faults.set_puts_open(true);
        assert!(f.write.await.unwrap().is_err(), "a failed write succeeded");
        assert!(
            f.read.await.unwrap().is_err(),
            "a read planned on a failed round was answered"
        );
        faults.set_puts_down(false);
        rec.take_trace();
        assert_eq!(e.access(vec![Op::Read(5)]).await.unwrap()[0], model[&5]);
        let seen = InFlightSeen {
            first: f.first,
            second: f.second,
            repeated_before,
        };
        assert_both_repeated(&fetch_events(&rec.take_trace()), &seen, e.as_ref());
        e.flush().await.unwrap();
        read_back(e.as_ref(), &model, 16, p.max_batch).await;
    });
}

/// The process dies with two rounds in flight (the earlier one's PUTs held,
/// the later one read): both intent records are durable, and the restart
/// repeats both, in order, before anything new. The unacknowledged write is
/// not there; everything acknowledged is.
pub fn a_crash_with_two_rounds_in_flight_repeats_both(s: Arc<dyn Subject>) {
    if !s.rounds_in_flight() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = Params {
        block_size: 256,
        ..Params::default()
    };
    const VOL: [u8; 16] = [5; 16];
    let mut model = Model::new();
    let rt = runtime();
    let (first, second) = rt.block_on(async {
        let rig = DurableRig::open(dir.path(), VOL);
        let e = rig.engine(s.as_ref(), &p);
        fill(e.as_ref(), &mut model, 0..16, 1).await;
        let f = two_in_flight(&e, &rig.store, &rig.rec, p.block_size).await;
        (f.first, f.second)
    });
    crash(rt);
    let seen = InFlightSeen {
        first,
        second,
        repeated_before: 0,
    };
    restart_repeats_both(
        s.as_ref(),
        &p,
        dir.path(),
        VOL,
        (&model, 16),
        5,
        |fetches, e| assert_both_repeated(fetches, &seen, e),
    );
}
