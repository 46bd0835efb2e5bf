//! Plain measurement structures, free of HTTP: a latency histogram in the
//! Prometheus layout and a bounded window of recent events. The tap of backend
//! requests ([`crate::tap`]) and the client telemetry share them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// A latency histogram in the Prometheus layout (cumulative when rendered).
#[derive(Debug, Default)]
pub struct Histogram {
    counts: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|&b| s <= b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(
            d.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Appends `name_bucket`, `name_sum` and `name_count` samples with `labels`
    /// (`k="v",...` or empty).
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        use std::fmt::Write as _;
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cum = 0;
        for (i, c) in self.counts.iter().enumerate() {
            cum += c.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS
                .get(i)
                .map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {cum}");
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cum}");
    }
}

/// A bounded window of recent events, numbered from 0 in arrival order.
#[derive(Debug)]
pub struct Ring<T> {
    cap: usize,
    next: u64,
    items: VecDeque<T>,
}

impl<T: Clone> Ring<T> {
    /// An empty window of at most `cap` events.
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            next: 0,
            items: VecDeque::with_capacity(cap.min(1024)),
        }
    }

    /// Adds an event, dropping the oldest beyond the capacity; returns its number.
    pub fn push(&mut self, item: T) -> u64 {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(item);
        self.next += 1;
        self.next - 1
    }

    /// The number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The events numbered `since` and later still in the window (at most the
    /// newest `max`), with the number of the first one returned.
    pub fn since(&self, since: u64, max: usize) -> (u64, Vec<T>) {
        let first = self.next - self.items.len() as u64;
        let from = since
            .clamp(first, self.next)
            .max(self.next.saturating_sub(max as u64));
        let skip = (from - first) as usize;
        (from, self.items.iter().skip(skip).cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_and_numbers_them() {
        let mut r = Ring::new(3);
        for i in 0..5u32 {
            assert_eq!(r.push(i), i as u64);
        }
        assert_eq!(r.since(0, 10), (2, vec![2, 3, 4]));
        assert_eq!(r.since(3, 10), (3, vec![3, 4]));
        assert_eq!(r.since(5, 10), (5, vec![]));
        assert_eq!(r.since(99, 10), (5, vec![]));
        assert_eq!(r.since(0, 1), (4, vec![4]));
        assert_eq!(r.next_seq(), 5);
    }

    #[test]
    fn histogram_is_cumulative_in_prometheus_form() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(30));
        h.observe(Duration::from_secs(1000));
        assert_eq!(h.count(), 3);
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "op=\"a\"");
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"0.001\"} 1\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"0.05\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"120\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("x_seconds_bucket{op=\"a\",le=\"+Inf\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_count{op=\"a\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_sum{op=\"a\"} 1000.0305\n"), "{out}");
    }
}
