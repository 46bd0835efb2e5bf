//! A budget of level slots shared by every partition of an engine (the shuffle
//! buffer, the levels waiting for their commit), which grows with the
//! partitions' top level.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Permits in slots, sized for partitions of top level `top` and doubled for
/// each level a growth adds above it: a partition grown by a level shuffles
/// twice the slots at its top ([`crate::Hierarchy`]'s growth).
pub struct SlotBudget {
    slots: Arc<Semaphore>,
    /// The top level the budget was made for, its permits then, and the
    /// permits added since (guards the total, so that two partitions growing
    /// to the same top add it once).
    sized: Mutex<Sized>,
}

struct Sized {
    top: u32,
    base: u64,
    total: u64,
}

impl SlotBudget {
    /// A budget of `slots` permits for partitions whose top level is `top`.
    pub fn new(slots: u64, top: u32) -> Arc<Self> {
        let slots = slots.min(Semaphore::MAX_PERMITS as u64);
        Arc::new(Self {
            slots: Arc::new(Semaphore::new(slots as usize)),
            sized: Mutex::new(Sized {
                top,
                base: slots,
                total: slots,
            }),
        })
    }

    /// Adds permits, if needed, so that the budget holds at least its first
    /// size times `2^(top − the top it was made for)`.
    pub fn for_top(&self, top: u32) {
        let mut s = self.sized.lock().unwrap_or_else(|e| e.into_inner());
        let want = s
            .base
            .checked_shl(top.saturating_sub(s.top))
            .unwrap_or(u64::MAX)
            .min(Semaphore::MAX_PERMITS as u64);
        if want > s.total {
            self.slots.add_permits((want - s.total) as usize);
            s.total = want;
        }
    }

    /// Waits for `n` slots.
    pub(crate) async fn acquire(&self, n: u32) -> Option<OwnedSemaphorePermit> {
        self.slots.clone().acquire_many_owned(n).await.ok()
    }

    /// Takes `n` slots if free now.
    pub(crate) fn try_acquire(&self, n: u32) -> Result<OwnedSemaphorePermit, TryAcquireError> {
        self.slots.clone().try_acquire_many_owned(n)
    }
}
