//! A store whose writes need a lease ([`FencedStore`]): the one mechanism
//! behind the volume's backend lease ([`crate::lease::LeasedStore`]) and a
//! cluster node's etcd lease ([`crate::coord::etcd_fence`]).

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use oram_blockstore::{
    BlockStore, GetOpts, ListOpts, ObjKey, ObjTag, PutCondition, PutOpts, SizeBound, StoreError,
};

type StoreResult<T> = Result<T, StoreError>;

/// What a [`FencedStore`] asks before and while it writes.
#[async_trait]
pub trait WriteFence: Send + Sync {
    /// Admits a write about to start (it may renew the lease first); the
    /// error is the write's.
    async fn admit(&self) -> StoreResult<()>;
    /// When to look again ([`WriteFence::check`]) while a write runs.
    fn recheck_at(&self) -> Instant;
    /// Whether a write under way may go on.
    fn check(&self) -> StoreResult<()>;
}

/// A store whose PUTs and DELETEs run only while `F` admits them, and are
/// abandoned (dropped, the back-end's retries with them) as soon as a check
/// fails; reads pass.
pub struct FencedStore<F: ?Sized> {
    inner: Arc<dyn BlockStore>,
    fence: Arc<F>,
}

impl<F: WriteFence + ?Sized> FencedStore<F> {
    /// Fences `inner`'s writes with `fence`.
    pub fn new(inner: Arc<dyn BlockStore>, fence: Arc<F>) -> Self {
        Self { inner, fence }
    }

    /// Runs `write` while the fence admits it: it starts only once admitted,
    /// and is abandoned at the first failed check, made whenever
    /// [`WriteFence::recheck_at`] says.
    async fn while_held<T>(
        &self,
        write: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        self.fence.admit().await?;
        let mut write = std::pin::pin!(write);
        loop {
            let until = self.fence.recheck_at();
            tokio::select! {
                // The fence first: after a pause (a stopped process, a stalled
                // machine) no request of the write goes out before it is checked.
                biased;
                () = tokio::time::sleep_until(tokio::time::Instant::from_std(until)) => {
                    self.fence.check()?;
                }
                r = &mut write => return r,
            }
        }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<F: WriteFence + ?Sized + 'static> BlockStore for FencedStore<F> {
    async fn get_opts(&self, keys: &[ObjKey], opts: GetOpts) -> StoreResult<Vec<Option<Bytes>>> {
        self.inner.get_opts(keys, opts).await
    }
    async fn get_range(&self, key: &ObjKey, range: Range<u64>) -> StoreResult<Option<Bytes>> {
        self.inner.get_range(key, range).await
    }
    async fn put_opts(&self, items: Vec<(ObjKey, Bytes)>, opts: PutOpts) -> StoreResult<()> {
        self.while_held(self.inner.put_opts(items, opts)).await
    }
    async fn delete_many(&self, keys: &[ObjKey]) -> StoreResult<()> {
        self.while_held(self.inner.delete_many(keys)).await
    }
    async fn list_opts(&self, prefix: &str, opts: ListOpts) -> StoreResult<Vec<ObjKey>> {
        self.inner.list_opts(prefix, opts).await
    }
    async fn get_tagged(
        &self,
        key: &ObjKey,
        bound: SizeBound,
    ) -> StoreResult<Option<(Bytes, ObjTag)>> {
        self.inner.get_tagged(key, bound).await
    }
    async fn put_if(&self, key: &ObjKey, data: Bytes, cond: PutCondition) -> StoreResult<ObjTag> {
        self.while_held(self.inner.put_if(key, data, cond)).await
    }
}
