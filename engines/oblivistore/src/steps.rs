//! The steps of a partition access whose wall time a partition sums
//! ([`oram_engine::StepClock`]): its counters in `/metrics`.

use oram_engine::Step;

/// The steps of a partition access whose wall time is summed (over every
/// partition, which run at once: see [`oram_engine::StepClock`]).
pub(crate) const ACCESS_STEPS: &[Step] = &[
    Step {
        name: "step_buffer_microseconds_total",
        help: "Wall time partition accesses waited for room in the shuffle buffer, in \
               microseconds (all partitions).",
    },
    Step {
        name: "step_fetch_microseconds_total",
        help:
            "Wall time of partition accesses' reads of level slots (a ranged GET of a slot, or a \
               GET of a whole level; opened and checked), in microseconds (all partitions).",
    },
    Step {
        name: "step_seal_microseconds_total",
        help: "Wall time of sealing the levels partition accesses build, in microseconds (all \
               partitions).",
    },
    Step {
        name: "step_write_microseconds_total",
        help: "Wall time of the level PUTs not left for the round's commit, in microseconds \
               (all partitions).",
    },
];
pub(crate) const STEP_BUFFER: usize = 0;
pub(crate) const STEP_FETCH: usize = 1;
pub(crate) const STEP_SEAL: usize = 2;
pub(crate) const STEP_WRITE: usize = 3;
