//! When to change the number of active RX queues (SIGCOMM'26 §4.3, "Finding the proper RXQ
//! subset").
//!
//! The active-flow count is the number of distinct flows in one RX batch, averaged over a window
//! (1 s by default). Each worker measures its own batches ([`ActiveFlowGauge`]); flows are
//! partitioned among workers by RSS, so the port's count is the sum of the workers' averages.
//! At the end of a window the policy scales up one configuration when that count exceeds the
//! active queue count, and down one when it falls below 10 % of it. The gap between the two
//! thresholds is the paper's guard against oscillation; we add one more: a window during which
//! the configuration changed is not judged (it measured the old configuration).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::rxq::layout::QueueLayout;

/// The default averaging window.
pub const DEFAULT_WINDOW_NS: u64 = 1_000_000_000;
/// Scale down below this share of the active queue count.
pub const SCALE_DOWN_SHARE: f64 = 0.10;

/// Settings of [`ScalingPolicy`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PolicyConfig {
    /// Averaging window, nanoseconds.
    pub window_ns: u64,
    /// Scale down below this share of the active queue count (0.10 in §4.3).
    pub down_share: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Self {
            window_ns: DEFAULT_WINDOW_NS,
            down_share: SCALE_DOWN_SHARE,
        }
    }
}

/// One decision of the policy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    /// Active queues before.
    pub from: u16,
    /// Active queues after.
    pub to: u16,
    /// The active-flow count that triggered it.
    pub active_flows: f64,
}

/// The scaling state machine: pure, driven by window averages and time.
#[derive(Clone, Debug)]
pub struct ScalingPolicy {
    layout: QueueLayout,
    cfg: PolicyConfig,
    current: u16,
    window_start: Option<u64>,
    skip_window: bool,
}

impl ScalingPolicy {
    /// Starts at all queues (the port's default RSS, no rule installed).
    pub fn new(layout: QueueLayout, cfg: PolicyConfig) -> Self {
        let current = layout.total();
        Self {
            layout,
            cfg,
            current,
            window_start: None,
            skip_window: false,
        }
    }

    /// The layout.
    pub fn layout(&self) -> &QueueLayout {
        &self.layout
    }

    /// Active queues now.
    pub fn current(&self) -> u16 {
        self.current
    }

    /// Whether the window that began at the last call has ended at `now_ns`; the first call
    /// starts the first window.
    pub fn window_over(&mut self, now_ns: u64) -> bool {
        match self.window_start {
            None => {
                self.window_start = Some(now_ns);
                false
            }
            Some(start) => now_ns.saturating_sub(start) >= self.cfg.window_ns,
        }
    }

    /// Ends the window at `now_ns` with the port's active-flow count over it; returns the change
    /// to make, if any. The caller applies it and then calls [`ScalingPolicy::applied`] (or
    /// [`ScalingPolicy::failed`]).
    pub fn end_window(&mut self, now_ns: u64, active_flows: f64) -> Option<Decision> {
        self.window_start = Some(now_ns);
        if std::mem::take(&mut self.skip_window) {
            return None;
        }
        let current = f64::from(self.current);
        let to = if active_flows > current {
            self.layout.step_up(self.current)
        } else if active_flows < self.cfg.down_share * current {
            self.layout.step_down(self.current)
        } else {
            None
        }?;
        Some(Decision {
            from: self.current,
            to,
            active_flows,
        })
    }

    /// The decision was applied: `to` queues are active, and the next window is not judged.
    pub fn applied(&mut self, decision: &Decision) {
        self.current = decision.to;
        self.skip_window = true;
    }

    /// The decision could not be applied; the configuration stays.
    pub fn failed(&mut self, _decision: &Decision) {
        self.skip_window = true;
    }
}

/// A worker's batch measurements, read and reset by whoever runs the policy. Plain atomics, so
/// a metrics exporter can read them too.
#[derive(Debug, Default)]
pub struct ActiveFlowGauge {
    /// Sum over non-empty batches of the distinct flows in each.
    pub flows: AtomicU64,
    /// Non-empty batches.
    pub batches: AtomicU64,
}

impl ActiveFlowGauge {
    /// Records one non-empty batch with `flows` distinct flows (a worker, per burst).
    #[inline]
    pub fn record(&self, flows: u32) {
        self.flows.fetch_add(u64::from(flows), Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
    }

    /// The average distinct flows per batch since the last call, and resets (0 with no batch).
    pub fn take_average(&self) -> f64 {
        let batches = self.batches.swap(0, Ordering::Relaxed);
        let flows = self.flows.swap(0, Ordering::Relaxed);
        if batches == 0 {
            0.0
        } else {
            flows as f64 / batches as f64
        }
    }
}

/// The port's active-flow count: the sum of the workers' per-batch averages.
pub fn active_flows(gauges: &[std::sync::Arc<ActiveFlowGauge>]) -> f64 {
    gauges.iter().map(|g| g.take_average()).sum()
}

/// The configuration workers poll, published by the rule manager: the active queue count and a
/// generation that changes with every transition. Also a metric (`rxq.active_queues`).
#[derive(Debug)]
pub struct ActiveConfig {
    count: AtomicU32,
    transitions: AtomicU64,
}

impl ActiveConfig {
    /// Starts at `count` queues.
    pub fn new(count: u16) -> Self {
        Self {
            count: AtomicU32::new(u32::from(count)),
            transitions: AtomicU64::new(0),
        }
    }

    /// Active queues.
    #[inline]
    pub fn count(&self) -> u16 {
        self.count.load(Ordering::Acquire) as u16
    }

    /// Transitions published so far.
    pub fn transitions(&self) -> u64 {
        self.transitions.load(Ordering::Relaxed)
    }

    /// Publishes `count` active queues.
    pub fn publish(&self, count: u16) {
        self.count.store(u32::from(count), Ordering::Release);
        self.transitions.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts distinct flows in one batch without allocating: flow ids go into a fixed array, which
/// is sorted at the end of the batch. Batches longer than the array count its length at most
/// (flows beyond it are not seen, so the count errs low, toward fewer queues).
#[derive(Clone, Debug)]
pub struct BatchFlows {
    ids: [u64; Self::CAPACITY],
    len: usize,
}

impl Default for BatchFlows {
    fn default() -> Self {
        Self {
            ids: [0; Self::CAPACITY],
            len: 0,
        }
    }
}

impl BatchFlows {
    /// Flow ids kept per batch.
    pub const CAPACITY: usize = 1024;

    /// Adds one packet's flow id.
    #[inline]
    pub fn push(&mut self, id: u64) {
        if let Some(slot) = self.ids.get_mut(self.len) {
            *slot = id;
            self.len += 1;
        }
    }

    /// The number of distinct flows pushed since the last call, and clears.
    pub fn take_distinct(&mut self) -> u32 {
        let ids = &mut self.ids[..self.len];
        ids.sort_unstable();
        let mut distinct = 0u32;
        let mut last = None;
        for &id in ids.iter() {
            if last != Some(id) {
                distinct += 1;
                last = Some(id);
            }
        }
        self.len = 0;
        distinct
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ScalingPolicy {
        ScalingPolicy::new(QueueLayout::new(128, 2).unwrap(), PolicyConfig::default())
    }

    #[test]
    fn scales_one_step_per_window_and_skips_the_window_after_a_change() {
        let mut p = policy();
        assert_eq!(p.current(), 128);
        let d = p.end_window(1, 5.0).unwrap();
        assert_eq!((d.from, d.to), (128, 32));
        p.applied(&d);
        assert_eq!(p.end_window(2, 1.0), None); // measured under 128: not judged
        let d = p.end_window(3, 1.0).unwrap();
        assert_eq!((d.from, d.to), (32, 8));
        p.applied(&d);
        p.end_window(4, 0.0);
        let d = p.end_window(5, 0.5).unwrap();
        assert_eq!((d.from, d.to), (8, 2));
        p.applied(&d);
        p.end_window(6, 0.0);
        assert_eq!(p.end_window(7, 0.0), None); // nothing below 2
        let d = p.end_window(8, 3.0).unwrap(); // 3 > 2
        assert_eq!((d.from, d.to), (2, 8));
    }

    #[test]
    fn between_ten_percent_and_the_queue_count_nothing_changes() {
        let mut p = policy();
        for flows in [12.8, 50.0, 128.0, 1000.0] {
            assert_eq!(p.end_window(1, flows), None, "{flows}");
        }
        assert!(p.end_window(1, 12.7).is_some());
    }

    #[test]
    fn batch_flows_count_distinct_ids() {
        let mut b = BatchFlows::default();
        for id in [5, 1, 5, 9, 1, 1] {
            b.push(id);
        }
        assert_eq!(b.take_distinct(), 3);
        assert_eq!(b.take_distinct(), 0);
        let g = ActiveFlowGauge::default();
        g.record(3);
        g.record(5);
        assert_eq!(g.take_average(), 4.0);
        assert_eq!(g.take_average(), 0.0);
    }
}
