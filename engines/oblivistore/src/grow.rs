//! Growing one hierarchical partition: a new, empty top level.
//!
//! A partition's levels are `0..=top`, each filled or empty as a function of
//! the partition's eviction counter; the top level holds the partition's
//! capacity (`2^top` real blocks). Growing it to a larger capacity raises
//! `top` in one commit of its trusted state ([`TOP_KEY`]), read back at every
//! open: the new levels start empty, so nothing is written and nothing moves.
//! The next eviction that finds every old level filled builds the first new
//! level from all of them (where it rebuilt the old top before), and from then
//! on the levels fill as a partition created with the new top level would.
//! The shuffle buffer and the landing budget, shared by the engine's
//! partitions, double for each level added ([`SlotBudget::for_top`]): a shuffle
//! into the new top reads and writes twice the slots.
//!
//! Observed by the storage server: nothing at the growth; afterwards, the
//! eviction that builds the new top level, one PUT of twice the size of the
//! old top's. Which levels are filled stays a function of the public eviction
//! counter and of the public growth.
//!
//! [`SlotBudget::for_top`]: crate::SlotBudget::for_top

use std::sync::atomic::Ordering;

use bytes::Bytes;
use oram_engine::{Grown, OramError, Result};
use oram_state::{StateError, TrustedState};

use crate::hierarchy::Inner;
use crate::levels::{Geometry, TOP_KEY};

/// The highest top level a partition opens with or grows to.
const MAX_TOP: u32 = 30;

/// The top level in effect for a partition created with `base`: the last
/// growth's (recorded in `state`), or `base`.
pub(crate) fn open_top(state: &dyn TrustedState, base: u32) -> Result<u32> {
    match state.meta(TOP_KEY) {
        None => Ok(base),
        Some(b) => match <[u8; 4]>::try_from(b.as_ref()).map(u32::from_le_bytes) {
            Ok(top) if (base..=MAX_TOP).contains(&top) => Ok(top),
            _ => Err(StateError::Corrupt(format!(
                "the partition's grown top level is malformed or not in {base}..={MAX_TOP}"
            ))
            .into()),
        },
    }
}

/// [`oram_engine::Oram::grow`] of the partition `inner` (see the module): once
/// no access is staged, raises the top level so that it holds `capacity`
/// blocks.
pub(crate) async fn grow(
    inner: &Inner,
    capacity: u64,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<Grown> {
    let mut g = inner.core.lock().await;
    let geo = inner.geo();
    let current = geo.reals(geo.top);
    if capacity < current {
        return Err(OramError::Config(format!(
            "a volume cannot shrink ({current} blocks, {capacity} asked for)"
        )));
    }
    progress(0, 0);
    if capacity == current {
        return Ok(Grown {
            capacity,
            ..Grown::default()
        });
    }
    let top = Geometry::for_capacity(capacity, geo.block_size).top;
    if top > MAX_TOP {
        return Err(OramError::Config(format!(
            "a partition holds at most 2^{MAX_TOP} blocks ({capacity} asked for)"
        )));
    }
    let st = g.state.as_mut();
    st.set_meta(TOP_KEY, Bytes::copy_from_slice(&top.to_le_bytes()));
    if let Err(e) = st.stage().commit().await {
        st.rollback();
        return Err(e.into());
    }
    st.settle();
    inner.shuffle.for_top(top);
    inner.landing.for_top(top);
    inner.top.store(top, Ordering::Release);
    Ok(Grown {
        capacity: geo.reals(top),
        ..Grown::default()
    })
}
