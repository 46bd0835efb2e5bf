//! The steps of a tree round whose wall time the engine sums
//! ([`oram_engine::StepClock`]): its counters in `/metrics`. A round reading
//! ahead of the one landing counts its own planning and reads while the other
//! writes and commits.

use oram_engine::Step;

/// The steps, indexed by the `STEP_*` constants.
pub(crate) const ROUND_STEPS: &[Step] = &[
    Step {
        name: "step_plan_microseconds_total",
        help: "Wall time of the rounds' planning and intent records (written locally), in \
               microseconds.",
    },
    Step {
        name: "step_fetch_microseconds_total",
        help: "Wall time of the rounds' reads of buckets (GETs, at once), in microseconds.",
    },
    Step {
        name: "step_apply_microseconds_total",
        help: "Wall time of opening the buckets read, serving the ops and evicting, in \
               microseconds.",
    },
    Step {
        name: "step_write_microseconds_total",
        help: "Wall time of sealing and writing the rounds' rewritten buckets, in microseconds.",
    },
    Step {
        name: "step_commit_microseconds_total",
        help: "Wall time of the rounds' commits of the trusted state, in microseconds.",
    },
];
pub(crate) const STEP_PLAN: usize = 0;
pub(crate) const STEP_FETCH: usize = 1;
pub(crate) const STEP_APPLY: usize = 2;
pub(crate) const STEP_WRITE: usize = 3;
pub(crate) const STEP_COMMIT: usize = 4;
