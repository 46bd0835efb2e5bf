//! [`BlockStoreExt`]: the named conveniences over the [`BlockStore`] core.

use bytes::Bytes;
use futures::future::BoxFuture;

use crate::{BlockStore, GetOpts, ListOpts, ObjKey, PutOpts, Result, SizeBound};

/// The named calls most callers use, each one core call of [`BlockStore`] with
/// its option struct filled in.
///
/// Implemented for every `BlockStore` (`dyn BlockStore` and `Arc<dyn BlockStore>`
/// included) and for nothing else, so a store cannot override a convenience:
/// what a store does is decided by its core methods alone, and a wrapper has
/// nothing here to forward. Each method hands back the core call's future as it
/// is (no second allocation). Callers bring it into scope with
/// `use oram_blockstore::BlockStoreExt;`.
pub trait BlockStoreExt: BlockStore {
    /// Fetches several objects concurrently; `None` where an object does not
    /// exist. The result has one entry per key, in the order of `keys`. No bound
    /// from the caller (the back-end applies its own cap, if any: see
    /// [`GetOpts::bound`]).
    ///
    /// [`BlockStore::get_opts`] with `GetOpts::default()`.
    ///
    /// Observed: one GET per key, issued together.
    fn get_many<'a>(&'a self, keys: &'a [ObjKey]) -> BoxFuture<'a, Result<Vec<Option<Bytes>>>> {
        self.get_opts(keys, GetOpts::default())
    }

    /// As [`BlockStoreExt::get_many`], with every present object within `bound`:
    /// an answer of another size is [`StoreError::WrongSize`](crate::StoreError::WrongSize),
    /// and a back-end that streams its answers (S3, fs) stops reading at the
    /// bound, so a hostile provider cannot make the proxy buffer more than the
    /// caller expects.
    ///
    /// [`BlockStore::get_opts`] with [`GetOpts::bounded`].
    ///
    /// Observed: as `get_many` — one GET per key, issued together.
    fn get_many_bounded<'a>(
        &'a self,
        keys: &'a [ObjKey],
        bound: SizeBound,
    ) -> BoxFuture<'a, Result<Vec<Option<Bytes>>>> {
        self.get_opts(keys, GetOpts::bounded(bound))
    }

    /// Stores several objects, replacing existing ones, concurrently. Each object
    /// is replaced atomically; when the call fails, some items may have been
    /// stored and others not, so callers must not rely on all-or-nothing batches.
    ///
    /// [`BlockStore::put_opts`] with `PutOpts::default()` ([`PutMode::Atomic`](crate::PutMode::Atomic)).
    ///
    /// Observed: one PUT per item with its key and size, issued together.
    fn put_many<'a>(&'a self, items: Vec<(ObjKey, Bytes)>) -> BoxFuture<'a, Result<()>> {
        self.put_opts(items, PutOpts::default())
    }

    /// Stores objects that the caller can write again after a crash (it keeps
    /// what it needs to redo them, and nothing reads them before it has) and that
    /// nothing reads while the call runs. A back-end may write such an object in
    /// place instead of replacing it atomically: while the call runs, or after a
    /// crash or failure during it, the object may be torn (part old, part new) or
    /// partial until the caller writes it again. When the call returns `Ok`,
    /// every item is whole and durable as after [`BlockStoreExt::put_many`].
    ///
    /// [`BlockStore::put_opts`] with [`PutOpts::redoable`] ([`PutMode::Redoable`](crate::PutMode::Redoable)).
    ///
    /// Observed: as `put_many` — one PUT per item with its key and size.
    fn put_many_redoable<'a>(&'a self, items: Vec<(ObjKey, Bytes)>) -> BoxFuture<'a, Result<()>> {
        self.put_opts(items, PutOpts::redoable())
    }

    /// Lists the keys that start with `prefix`, sorted. For maintenance (fsck,
    /// recovery) only, never on the access path. No bound from the caller (the
    /// back-end applies its own cap, if any: see [`ListOpts::max_keys`]).
    ///
    /// [`BlockStore::list_opts`] with `ListOpts::default()`.
    ///
    /// Observed: a listing request for the prefix.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<ObjKey>>> {
        self.list_opts(prefix, ListOpts::default())
    }

    /// As [`BlockStoreExt::list`], failing with
    /// [`StoreError::WrongSize`](crate::StoreError::WrongSize) instead of
    /// collecting more than `max_keys` keys.
    ///
    /// [`BlockStore::list_opts`] with [`ListOpts::at_most`].
    ///
    /// Observed: as `list` — a listing request for the prefix.
    fn list_bounded<'a>(
        &'a self,
        prefix: &'a str,
        max_keys: usize,
    ) -> BoxFuture<'a, Result<Vec<ObjKey>>> {
        self.list_opts(prefix, ListOpts::at_most(max_keys))
    }
}

impl<S: BlockStore + ?Sized> BlockStoreExt for S {}

#[cfg(test)]
mod tests {
    use std::ops::Range;
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;

    use super::*;
    use crate::{ObjTag, PutCondition, StoreError};

    /// What a [`Probe`] was called with.
    #[derive(Debug, PartialEq)]
    enum Call {
        Get(usize, GetOpts),
        Put(usize, PutOpts),
        List(String, ListOpts),
    }

    /// A store that only notes which core call each convenience became.
    #[derive(Default)]
    struct Probe(Mutex<Vec<Call>>);

    #[async_trait]
    #[deny(clippy::missing_trait_methods)]
    impl BlockStore for Probe {
        async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> Result<Vec<Option<Bytes>>> {
            self.0.lock().unwrap().push(Call::Get(keys.len(), opts));
            Ok(vec![None; keys.len()])
        }
        async fn get_range(&self, _: &ObjKey, _: Range<u64>) -> Result<Option<Bytes>> {
            Ok(None)
        }
        async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> Result<()> {
            self.0.lock().unwrap().push(Call::Put(items.len(), opts));
            Ok(())
        }
        async fn delete_many(&self, _: &[ObjKey]) -> Result<()> {
            Ok(())
        }
        async fn list_opts(&self, prefix: &str, opts: ListOpts) -> Result<Vec<ObjKey>> {
            self.0
                .lock()
                .unwrap()
                .push(Call::List(prefix.to_string(), opts));
            Ok(Vec::new())
        }
        async fn get_tagged(&self, _: &ObjKey, _: SizeBound) -> Result<Option<(Bytes, ObjTag)>> {
            Err(StoreError::Unsupported("probe"))
        }
        async fn put_if(&self, _: &ObjKey, _: Bytes, _: PutCondition) -> Result<ObjTag> {
            Err(StoreError::Unsupported("probe"))
        }
    }

    /// Every convenience is one core call with its options, also through
    /// `Arc<dyn BlockStore>` and `&dyn BlockStore`.
    #[tokio::test]
    async fn each_convenience_is_one_core_call_with_its_options() {
        let probe = Arc::new(Probe::default());
        let store: Arc<dyn BlockStore> = probe.clone();
        let k = vec![ObjKey::new("a/b").unwrap()];
        let item = || vec![(k[0].clone(), Bytes::from_static(b"x"))];
        store.get_many(&k).await.unwrap();
        store
            .get_many_bounded(&k, SizeBound::Exact(7))
            .await
            .unwrap();
        store.put_many(item()).await.unwrap();
        store.put_many_redoable(item()).await.unwrap();
        let by_ref: &dyn BlockStore = store.as_ref();
        by_ref.list("a/").await.unwrap();
        by_ref.list_bounded("a/", 3).await.unwrap();
        assert_eq!(
            *probe.0.lock().unwrap(),
            vec![
                Call::Get(1, GetOpts::default()),
                Call::Get(1, GetOpts::bounded(SizeBound::Exact(7))),
                Call::Put(1, PutOpts::default()),
                Call::Put(1, PutOpts::redoable()),
                Call::List("a/".into(), ListOpts::default()),
                Call::List("a/".into(), ListOpts::at_most(3)),
            ]
        );
    }
}
