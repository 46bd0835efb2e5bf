//! `KeptLease`: an etcd lease renewed by a background task that reports its loss.
//!
//! The task renews every third of the TTL. It declares the lease lost when etcd
//! says it no longer exists (a keepalive answering TTL 0) or when the local
//! deadline — the last renewal's send time plus the TTL granted — passes without a
//! renewal (etcd may have let it lapse: a process paused past its TTL learns it on
//! its first step after resuming, before it sends anything else). etcd sees one
//! `/v3/lease/keepalive` with the lease id per renewal.
//!
//! Choosing the TTL: renewals need an etcd leader. When the leader dies, the others
//! elect a new one within one to three election timeouts (1 s by default) and
//! extend every lease, but a lease whose local deadline passes meanwhile is
//! reported lost here. A TTL of at least a few election timeouts (5 s with etcd's
//! defaults) rides through a leader's death; etcd's minimum TTL (2 s by default)
//! does not always.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at, Instant};

use crate::{ClusterError, EtcdClient};

/// Whether a lease is still held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Renewed within its TTL.
    Alive,
    /// Lapsed, revoked, or not renewed before the local deadline: every key
    /// attached to it is (or is about to be) gone.
    Lost,
}

/// A kept lease's local deadline: the last renewal's send time plus the TTL
/// granted (etcd's own expiry is no earlier), moved to the past when etcd says
/// the lease is gone. A holder that checks it before each step it must only
/// take while holding the lease needs no running keepalive task to learn that
/// it paused past it.
#[derive(Clone, Debug)]
pub struct LeaseDeadline(Arc<Mutex<Instant>>);

impl LeaseDeadline {
    /// The deadline now.
    pub fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the deadline has not passed.
    pub fn holds(&self) -> bool {
        Instant::now() < self.get()
    }

    fn set(&self, at: Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = at;
    }
}

/// A lease with a keepalive task. Dropping it stops the task without revoking the
/// lease (it lapses after its TTL); [`KeptLease::revoke`] ends it at once.
#[derive(Debug)]
pub struct KeptLease {
    client: EtcdClient,
    id: i64,
    ttl: Duration,
    state: watch::Receiver<LeaseState>,
    deadline: LeaseDeadline,
    /// Cleared by [`KeptLease::stop_renewing`]: the task sends no more renewals.
    renewing: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl KeptLease {
    /// Grants a lease of `ttl_secs` (raised to etcd's minimum) and starts renewing
    /// it. etcd sees `/v3/lease/grant`, then the renewals.
    pub async fn grant(client: &EtcdClient, ttl_secs: i64) -> Result<Self, ClusterError> {
        let sent = Instant::now();
        let grant = client.lease_grant(ttl_secs).await?;
        if grant.id == 0 || grant.ttl <= 0 {
            return Err(ClusterError::Protocol {
                path: "/v3/lease/grant",
                detail: format!("{grant:?}"),
            });
        }
        let ttl = Duration::from_secs(grant.ttl as u64);
        let (tx, rx) = watch::channel(LeaseState::Alive);
        let renewing = Arc::new(AtomicBool::new(true));
        let deadline = LeaseDeadline(Arc::new(Mutex::new(sent + ttl)));
        let kept = Kept {
            client: client.clone(),
            id: grant.id,
            ttl,
            renewing: renewing.clone(),
            deadline: deadline.clone(),
        };
        let task = tokio::spawn(kept.run(tx));
        Ok(KeptLease {
            client: client.clone(),
            id: grant.id,
            ttl,
            state: rx,
            deadline,
            renewing,
            task,
        })
    }

    /// The lease id (what keys are attached to).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// A receiver of the lease's state: it changes once, to [`LeaseState::Lost`].
    pub fn state(&self) -> watch::Receiver<LeaseState> {
        self.state.clone()
    }

    /// The lease's local deadline, moved at every renewal.
    pub fn deadline(&self) -> LeaseDeadline {
        self.deadline.clone()
    }

    /// Whether the lease is still held, as far as this process knows.
    pub fn is_alive(&self) -> bool {
        *self.state.borrow() == LeaseState::Alive
    }

    /// Waits until the lease is lost.
    pub async fn lost(&self) {
        let mut rx = self.state.clone();
        // An error means the task ended, which it does only after reporting loss
        // or being stopped: either way the lease is no longer kept.
        let _ = rx.wait_for(|s| *s == LeaseState::Lost).await;
    }

    /// Stops renewing without revoking, as a paused or cut-off process would: etcd
    /// sees no more renewals, the lease lapses after its TTL, and the state turns
    /// [`LeaseState::Lost`] at the local deadline.
    pub fn stop_renewing(&self) {
        self.renewing.store(false, Ordering::Relaxed);
    }

    /// Stops renewing and revokes the lease: its keys are deleted now. etcd sees
    /// `/v3/lease/revoke` with the id.
    pub async fn revoke(self) -> Result<(), ClusterError> {
        self.task.abort();
        self.client.lease_revoke(self.id).await
    }
}

impl Drop for KeptLease {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The keepalive task's state.
struct Kept {
    client: EtcdClient,
    id: i64,
    ttl: Duration,
    renewing: Arc<AtomicBool>,
    deadline: LeaseDeadline,
}

impl Kept {
    /// Renews until the lease is lost; the deadline it keeps is the one
    /// record of the lease's validity ([`LeaseDeadline`]).
    async fn run(self, tx: watch::Sender<LeaseState>) {
        let id = self.id;
        let period = self.ttl / 3;
        let retry = Duration::from_millis(100).min(period);
        let mut next = Instant::now() + period;
        loop {
            if !self.renewing.load(Ordering::Relaxed) {
                next = next.max(self.deadline.get());
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = tx.closed() => return,
            }
            if !self.deadline.holds() {
                tracing::warn!(lease = id, "lease not renewed within its TTL: lost");
                let _ = tx.send(LeaseState::Lost);
                return;
            }
            if !self.renewing.load(Ordering::Relaxed) {
                continue;
            }
            let sent = Instant::now();
            match timeout_at(self.deadline.get(), self.client.lease_keepalive(id)).await {
                Ok(Ok(granted)) if granted > 0 => {
                    self.deadline
                        .set(sent + Duration::from_secs(granted as u64));
                    next = sent + period;
                }
                Ok(Ok(_)) => {
                    tracing::warn!(lease = id, "etcd says the lease is gone: lost");
                    self.deadline.set(Instant::now());
                    let _ = tx.send(LeaseState::Lost);
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(lease = id, error = %e, "lease renewal failed; retrying");
                    sleep(retry).await;
                    next = Instant::now();
                }
                Err(_) => next = Instant::now(),
            }
        }
    }
}
