//! A backend that fails or hangs: accesses fail cleanly and lose nothing; write-backs
//! are bounded and answers wait only for what they must.

use super::*;
use crate::OramError;

/// A backend that is down fails accesses without changing anything; PUTs that
/// fail are kept and resent; nothing acknowledged is lost.
pub fn a_failing_backend_fails_cleanly_and_loses_nothing(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..32, 1).await;
        store.set_down(true);
        let err = e
            .access(vec![Op::Write(3, block_data(3, 9, p.block_size))])
            .await
            .unwrap_err();
        assert!(matches!(err, OramError::Store(_)), "{err}");
        store.set_down(false);
        read_back(e.as_ref(), &model, 32, p.max_batch).await;
        // PUTs failing: the write is answered (write-back engines) or not, but it
        // is never lost once answered, and accesses fail until the backend takes it.
        store.set_puts_down(true);
        let d = block_data(4, 2, p.block_size);
        let answered = e.access(vec![Op::Write(4, d.clone())]).await.is_ok();
        if answered {
            model.insert(4, d);
            if s.every_write_puts() {
                assert!(
                    e.flush().await.is_err(),
                    "a flush succeeded with PUTs failing"
                );
            }
        }
        store.set_puts_down(false);
        e.flush().await.unwrap();
        read_back(e.as_ref(), &model, 32, p.max_batch).await;
        let rep = e.check(&|_, _| {}).await.unwrap();
        assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    });
}

/// Engines that write back after answering ([`Subject::writes_back`]): answers
/// do not wait for write-backs; at most `max_inflight_writebacks` rounds are
/// pending, the next one waits. The others: a read is answered while the PUTs
/// of its round (if any) hang, a write only once its PUTs landed, and nothing
/// overtakes a round whose PUTs hang.
pub fn write_backs_are_bounded_and_answers_do_not_wait_for_them(s: Arc<dyn Subject>) {
    if !s.writes_back() {
        return writes_are_answered_after_their_puts(s);
    }
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..8, 1).await;
        store.set_puts_open(false);
        let d = block_data(2, 2, p.block_size);
        e.access(vec![Op::Write(2, d.clone())]).await.unwrap();
        model.insert(2, d);
        // Reads are answered from memory while the write-backs hang, until every
        // write-back slot is taken (a round need not write anything).
        for i in 0..100u64 {
            if e.stats().pending_writebacks == p.max_inflight_writebacks as u64 {
                break;
            }
            let b = i % 8;
            let got = e.access(vec![Op::Read(b)]).await.unwrap();
            assert_eq!(got[0], model[&b], "block {b}");
        }
        assert_eq!(
            e.stats().pending_writebacks,
            p.max_inflight_writebacks as u64
        );
        let e2 = e.clone();
        let fifth = tokio::spawn(async move { e2.access(vec![Op::Read(2)]).await });
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        assert!(
            !fifth.is_finished(),
            "a round ran with every write-back slot taken"
        );
        store.set_puts_open(true);
        assert_eq!(fifth.await.unwrap().unwrap()[0], model[&2]);
        e.flush().await.unwrap();
        assert_eq!(e.stats().pending_writebacks, 0);
    });
}

fn writes_are_answered_after_their_puts(s: Arc<dyn Subject>) {
    runtime().block_on(async {
        let p = Params::default();
        let store = Arc::new(HoldStore::new(MemoryStore::new()));
        let e = mem_engine(s.as_ref(), &p, store.clone());
        let mut model = Model::new();
        fill(e.as_ref(), &mut model, 0..8, 1).await;
        let pause = || async {
            for _ in 0..50 {
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            }
        };
        // A write waits for its PUTs.
        store.set_puts_open(false);
        let d = block_data(2, 2, p.block_size);
        let (e2, d2) = (e.clone(), d.clone());
        let write = tokio::spawn(async move { e2.access(vec![Op::Write(2, d2)]).await });
        pause().await;
        if store.puts_waiting() > 0 || s.every_write_puts() {
            assert!(store.puts_waiting() > 0, "the write sent no PUT");
            assert!(!write.is_finished(), "a write was answered before its PUTs");
        }
        store.set_puts_open(true);
        write.await.unwrap().unwrap();
        model.insert(2, d);
        // A read does not (its round's PUTs, if any, hang), and the next access
        // is served once they land.
        store.set_puts_open(false);
        if s.answers_reads_early() {
            let got = e.access(vec![Op::Read(3)]).await.unwrap();
            assert_eq!(got[0], model[&3], "block 3");
        } else {
            let e3 = e.clone();
            let read = tokio::spawn(async move { e3.access(vec![Op::Read(3)]).await });
            pause().await;
            if store.puts_waiting() > 0 {
                assert!(
                    !read.is_finished(),
                    "a read was answered before its round's PUTs"
                );
            }
            store.set_puts_open(true);
            assert_eq!(read.await.unwrap().unwrap()[0], model[&3], "block 3");
            store.set_puts_open(false);
        }
        let e3 = e.clone();
        let read = tokio::spawn(async move { e3.access(vec![Op::Read(5)]).await });
        pause().await;
        store.set_puts_open(true);
        assert_eq!(read.await.unwrap().unwrap()[0], model[&5]);
        e.flush().await.unwrap();
        assert_eq!(e.stats().pending_writebacks, 0);
        read_back(e.as_ref(), &model, 8, p.max_batch).await;
    });
}
