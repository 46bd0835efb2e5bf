//! [`HoldStore`]: a store wrapper that holds or fails chosen requests.
//!
//! It is a stand-in for failures a real store cannot produce on demand: a
//! backend answering one chosen GET with an error (as a provider probing the
//! engine would), PUTs or GETs that hang until released (a crash at a chosen
//! instant of a round), a backend that is down. Everything it passes through
//! goes to the real store it wraps, with its options as they came (a bounded
//! read stays bounded, a redoable write redoable). (Not to be confused with
//! `oram_blockstore::faults::FaultStore`, which injects random transport faults
//! for the fault battery.)

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, SizeBound, StoreError,
    Verb,
};
use tokio::sync::watch;

/// A fetch request as the provider sees it (without its answer).
pub type Seen = (Verb, String, Option<Range<u64>>);

/// Wraps a store; every fault is off until switched on.
pub struct HoldStore<S> {
    inner: S,
    puts_open: watch::Sender<bool>,
    gets_open: watch::Sender<bool>,
    down: AtomicBool,
    puts_down: AtomicBool,
    fail_fetches: AtomicU64,
    puts_waiting: AtomicU64,
    put_answers_lost: AtomicBool,
    /// Fetch requests that arrived while GETs were held (the lock guards only
    /// this list).
    held: Mutex<Vec<Seen>>,
    /// Keys of the PUTs that arrived while PUTs were closed (the lock guards
    /// only this list).
    puts_held: Mutex<Vec<String>>,
}

impl<S> HoldStore<S> {
    /// `inner` with no fault.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            puts_open: watch::channel(true).0,
            gets_open: watch::channel(true).0,
            down: AtomicBool::new(false),
            puts_down: AtomicBool::new(false),
            fail_fetches: AtomicU64::new(0),
            puts_waiting: AtomicU64::new(0),
            put_answers_lost: AtomicBool::new(false),
            held: Mutex::new(Vec::new()),
            puts_held: Mutex::new(Vec::new()),
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// PUTs wait while closed (they hang until reopened).
    pub fn set_puts_open(&self, open: bool) {
        self.puts_open.send_replace(open);
    }

    /// While set, PUTs land but are answered with an error, as when the answer
    /// is lost in transit.
    pub fn set_put_answers_lost(&self, lost: bool) {
        self.put_answers_lost.store(lost, Ordering::SeqCst);
    }

    /// PUT calls waiting now (PUTs closed).
    pub fn puts_waiting(&self) -> u64 {
        self.puts_waiting.load(Ordering::SeqCst)
    }

    /// GETs wait while closed; the requests that arrive meanwhile are logged
    /// ([`HoldStore::held`]).
    pub fn set_gets_open(&self, open: bool) {
        self.gets_open.send_replace(open);
    }

    /// The fetch requests that arrived while GETs were held.
    pub fn held(&self) -> Vec<Seen> {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The keys of the PUTs that arrived while PUTs were closed (held, then
    /// passed on when reopened).
    pub fn puts_held(&self) -> Vec<String> {
        self.puts_held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Empties the logs of held requests ([`HoldStore::held`],
    /// [`HoldStore::puts_held`]).
    pub fn clear_held(&self) {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.puts_held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Every request fails with [`StoreError::Unavailable`] while down.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Only PUTs fail while set.
    pub fn set_puts_down(&self, down: bool) {
        self.puts_down.store(down, Ordering::SeqCst);
    }

    /// The next `n` fetch calls (a `get_opts`, `get_range` or `get_tagged`) fail, as a
    /// provider answering 5xx would.
    pub fn fail_next_fetches(&self, n: u64) {
        self.fail_fetches.store(n, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("test: backend down".into()));
        }
        Ok(())
    }

    async fn fetch_gate(&self, seen: impl FnOnce() -> Vec<Seen>) -> Result<(), StoreError> {
        self.check()?;
        if !*self.gets_open.borrow() {
            self.held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(seen());
            let mut rx = self.gets_open.subscribe();
            let _ = rx.wait_for(|o| *o).await;
        }
        let failing = self
            .fail_fetches
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(StoreError::Unavailable("test: one request failed".into()));
        }
        Ok(())
    }

    /// What a PUT of `keys` meets before it reaches the store: down, held (and
    /// logged) while PUTs are closed, then failing while PUTs are down.
    async fn put_gate(&self, keys: impl FnOnce() -> Vec<String>) -> Result<(), StoreError> {
        self.check()?;
        let mut rx = self.puts_open.subscribe();
        if !*rx.borrow() {
            self.puts_held
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(keys());
        }
        self.puts_waiting.fetch_add(1, Ordering::SeqCst);
        let _ = rx.wait_for(|o| *o).await;
        self.puts_waiting.fetch_sub(1, Ordering::SeqCst);
        if self.puts_down.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("test: PUTs failing".into()));
        }
        Ok(())
    }

    /// The answer of a PUT that landed: lost while answers are lost.
    fn put_answer(&self) -> Result<(), StoreError> {
        if self.put_answers_lost.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable(
                "test: the PUT's answer was lost".into(),
            ));
        }
        Ok(())
    }
}

/// Reads (`get_opts`, `get_range`, `get_tagged`) pass the fetch gate; writes
/// (`put_opts`, `put_if`) the PUT gate; deletes and listings fail only while the
/// store is down.
#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<S: BlockStore> BlockStore for HoldStore<S> {
    async fn get_opts(
        &self,
        keys: &[ObjKey],
        opts: GetOpts,
    ) -> Result<Vec<Option<Bytes>>, StoreError> {
        self.fetch_gate(|| {
            keys.iter()
                .map(|k| (Verb::Get, k.to_string(), None))
                .collect()
        })
        .await?;
        self.inner.get_opts(keys, opts).await
    }
    async fn get_range(&self, key: &ObjKey, r: Range<u64>) -> Result<Option<Bytes>, StoreError> {
        self.fetch_gate(|| vec![(Verb::GetRange, key.to_string(), Some(r.clone()))])
            .await?;
        self.inner.get_range(key, r).await
    }
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<(), StoreError> {
        self.put_gate(|| items.iter().map(|(k, _)| k.to_string()).collect())
            .await?;
        self.inner.put_opts(items, opts).await?;
        self.put_answer()
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_many(keys).await
    }
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>, StoreError> {
        self.check()?;
        self.inner.list_opts(prefix, opts).await
    }
    async fn get_tagged(
        &self,
        key: &ObjKey,
        bound: SizeBound,
    ) -> Result<Option<(Bytes, ObjTag)>, StoreError> {
        self.fetch_gate(|| vec![(Verb::Get, key.to_string(), None)])
            .await?;
        self.inner.get_tagged(key, bound).await
    }
    async fn put_if(
        &self,
        key: &ObjKey,
        data: Bytes,
        cond: PutCondition,
    ) -> Result<ObjTag, StoreError> {
        self.put_gate(|| vec![key.to_string()]).await?;
        let tag = self.inner.put_if(key, data, cond).await?;
        self.put_answer()?;
        Ok(tag)
    }
}
