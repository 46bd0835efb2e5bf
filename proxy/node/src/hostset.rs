//! `HostSet`: every slot a node process serves, behind one listener, with
//! slots joining and leaving while it serves (a cluster rebalancing).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tokio::net::TcpListener;

use crate::host::{not_served, NodeHost};
use crate::tls::ClusterTls;
use crate::wire::{Envelope, Reply};

/// The slots a node process serves: each partition's requests go to the host
/// of the slot holding it. Cheap to clone.
#[derive(Clone, Debug)]
pub struct HostSet {
    inner: Arc<SetInner>,
}

#[derive(Debug)]
struct SetInner {
    block_size: usize,
    /// Guards which host answers each partition: written when a slot joins or
    /// leaves, read (and released before any await) for every request.
    hosts: RwLock<HashMap<u32, NodeHost>>,
}

impl HostSet {
    /// An empty set of hosts whose partitions take blocks of `block_size`
    /// bytes.
    pub fn new(block_size: usize) -> Self {
        Self {
            inner: Arc::new(SetInner {
                block_size,
                hosts: RwLock::new(HashMap::new()),
            }),
        }
    }

    /// Answers `host`'s partitions from now on. Refused if one of them is
    /// served already (two slots never share a partition).
    pub fn add(&self, host: &NodeHost) -> Result<(), String> {
        let mut hosts = self.inner.hosts.write().unwrap_or_else(|e| e.into_inner());
        let ps = host.partitions();
        if let Some(p) = ps.iter().find(|p| hosts.contains_key(p)) {
            return Err(format!("partition {p} is served here already"));
        }
        for p in ps {
            hosts.insert(p, host.clone());
        }
        Ok(())
    }

    /// Stops answering `partitions`: a request for one is refused as not
    /// served (the front repeats its round at the partition's next owner). A
    /// request under way finishes on the host.
    pub fn remove(&self, partitions: &[u32]) {
        let mut hosts = self.inner.hosts.write().unwrap_or_else(|e| e.into_inner());
        for p in partitions {
            hosts.remove(p);
        }
    }

    /// The partitions served, ascending.
    pub fn partitions(&self) -> Vec<u32> {
        let hosts = self.inner.hosts.read().unwrap_or_else(|e| e.into_inner());
        let mut ps: Vec<u32> = hosts.keys().copied().collect();
        ps.sort_unstable();
        ps
    }

    /// Each served partition and its engine statistics now, ascending.
    pub fn stats(&self) -> Vec<(u32, oram_engine::EngineStats)> {
        let hosts: Vec<NodeHost> = {
            let map = self.inner.hosts.read().unwrap_or_else(|e| e.into_inner());
            let mut seen: Vec<NodeHost> = Vec::new();
            for h in map.values() {
                if !seen.iter().any(|s| s.same(h)) {
                    seen.push(h.clone());
                }
            }
            seen
        };
        let mut out: Vec<(u32, oram_engine::EngineStats)> = hosts
            .iter()
            .flat_map(|h| h.partitions().into_iter().zip(h.stats()))
            .collect();
        out.sort_unstable_by_key(|(p, _)| *p);
        out
    }

    /// Serves fronts on `listener` until `shutdown` resolves, as
    /// [`NodeHost::serve`] does, for whichever slots are in the set.
    ///
    /// Observed by the storage server: the partitions' own requests, as their
    /// engines make them.
    pub async fn serve(
        &self,
        listener: TcpListener,
        tls: ClusterTls,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        crate::serve::serve(self, listener, tls, shutdown).await;
    }
}

impl crate::serve::Answers for HostSet {
    fn block_size(&self) -> usize {
        self.inner.block_size
    }
    async fn answer(&self, env: Envelope) -> Reply {
        let host = {
            let hosts = self.inner.hosts.read().unwrap_or_else(|e| e.into_inner());
            hosts.get(&env.partition).cloned()
        };
        match host {
            Some(h) => h.handle(env).await,
            None => not_served(env.partition),
        }
    }
}
