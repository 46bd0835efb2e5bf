//! Where a round's time goes: wall time summed per step of an engine's
//! rounds (planning and the intent record, reads, opening, sealing, writes,
//! the commit), exported as counters in [`crate::EngineStats::extra`] so that
//! `/metrics` and the benchmarks can split a round's time without a profiler.
//!
//! A step's time is the wall time from its start to its end, as the task
//! running it saw it: steps of one round that run at once (the partitions of a
//! partition engine's round, a tree round reading ahead of the one landing)
//! each count their own time, so the sums of such steps may exceed the wall
//! time of the rounds. Nothing here changes what the storage server observes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::{Stat, StatKind};

/// One step of a round: its counter's name (`<name>` in
/// `oram_engine_<name>`, ending in `_microseconds_total`) and help text.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    /// The counter's name, without the engine prefix.
    pub name: &'static str,
    /// One line saying what the step is.
    pub help: &'static str,
}

/// Microseconds spent per step, for the steps an engine names; shared by the
/// tasks of its rounds (each counter is updated on its own, without a lock).
#[derive(Debug)]
pub struct StepClock {
    steps: &'static [Step],
    /// Microseconds per step, in the order of `steps`.
    micros: Vec<AtomicU64>,
}

impl StepClock {
    /// A clock of `steps`, all at zero.
    pub fn new(steps: &'static [Step]) -> Self {
        Self {
            steps,
            micros: steps.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Adds the time since `since` to step `step` (an index into the steps);
    /// returns now, the start of whatever follows.
    pub fn lap(&self, step: usize, since: Instant) -> Instant {
        let now = Instant::now();
        self.add_micros(
            step,
            now.saturating_duration_since(since).as_micros() as u64,
        );
        now
    }

    /// Adds `micros` to step `step`.
    pub fn add_micros(&self, step: usize, micros: u64) {
        if let Some(m) = self.micros.get(step) {
            m.fetch_add(micros, Ordering::Relaxed);
        }
    }

    /// The counters, one per step, in order.
    pub fn stats(&self) -> impl Iterator<Item = Stat> + '_ {
        self.steps.iter().zip(&self.micros).map(|(s, m)| Stat {
            name: s.name,
            help: s.help,
            kind: StatKind::Counter,
            value: m.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEPS: &[Step] = &[
        Step {
            name: "step_a_microseconds_total",
            help: "a",
        },
        Step {
            name: "step_b_microseconds_total",
            help: "b",
        },
    ];

    #[test]
    fn laps_add_to_their_step_only() {
        let c = StepClock::new(STEPS);
        let t = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(3));
        c.lap(1, t);
        c.add_micros(0, 7);
        c.add_micros(5, 9); // no such step: ignored
        let s: Vec<Stat> = c.stats().collect();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].name, s[0].value), ("step_a_microseconds_total", 7));
        assert!(s[1].value >= 3000, "{:?}", s[1]);
        assert!(s.iter().all(|x| x.kind == StatKind::Counter));
    }
}
