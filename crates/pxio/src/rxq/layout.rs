//! Which RX queues each configuration uses, and which worker polls them (SIGCOMM'26 §4.3,
//! Figure 6).
//!
//! The port is started with all `total` queues. Worker `w` owns the contiguous pool
//! `w * total / workers ..`; a configuration of `count` queues activates the first
//! `count / workers` queues of every pool. Configurations therefore nest: a smaller one is a
//! subset of every larger one, for every worker, so a worker moving between them only ever adds
//! or drops queues at the end of its range.

use std::ops::Range;

/// The rule-selected subset sizes of §4.3; the fifth configuration is "all queues".
pub const SUBSET_SIZES: [u16; 4] = [2, 8, 32, 128];

/// Why a layout cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// No workers, or no queues.
    #[error("a queue layout needs at least one worker and one queue ({workers} workers, {total} queues)")]
    Empty {
        /// Workers asked for.
        workers: u16,
        /// Queues asked for.
        total: u16,
    },
    /// The queues do not divide evenly among the workers.
    #[error("{total} RX queues cannot be split evenly among {workers} workers")]
    Uneven {
        /// Workers asked for.
        workers: u16,
        /// Queues asked for.
        total: u16,
    },
}

/// The queue configurations of one port and their partition among workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueLayout {
    total: u16,
    workers: u16,
    /// Ascending; the last is `total`.
    configs: Vec<u16>,
}

impl QueueLayout {
    /// `total` queues (the maximum, allocated at start) shared by `workers` workers. The subset
    /// sizes of [`SUBSET_SIZES`] smaller than `total` that give every worker the same number of
    /// queues are kept, then `total` itself.
    pub fn new(total: u16, workers: u16) -> Result<Self, LayoutError> {
        if workers == 0 || total == 0 {
            return Err(LayoutError::Empty { workers, total });
        }
        if !total.is_multiple_of(workers) {
            return Err(LayoutError::Uneven { workers, total });
        }
        let mut configs: Vec<u16> = SUBSET_SIZES
            .iter()
            .copied()
            .filter(|&s| s < total && s >= workers && s % workers == 0)
            .collect();
        configs.push(total);
        Ok(Self {
            total,
            workers,
            configs,
        })
    }

    /// All queues.
    pub fn total(&self) -> u16 {
        self.total
    }

    /// Workers sharing them.
    pub fn workers(&self) -> u16 {
        self.workers
    }

    /// The queue counts this layout can run at, ascending (the last is [`QueueLayout::total`]).
    pub fn configs(&self) -> &[u16] {
        &self.configs
    }

    /// Worker `w`'s own queues (all of them, whatever the configuration).
    pub fn worker_pool(&self, w: u16) -> Range<u16> {
        let per = self.total / self.workers;
        w * per..(w + 1) * per
    }

    /// The queues worker `w` polls when `count` queues are active (Figure 6).
    pub fn active(&self, w: u16, count: u16) -> Range<u16> {
        let start = self.worker_pool(w).start;
        start..start + count / self.workers
    }

    /// Every active queue of configuration `count`, worker by worker: the RSS queue list of its
    /// rule.
    pub fn queues(&self, count: u16) -> Vec<u16> {
        (0..self.workers)
            .flat_map(|w| self.active(w, count))
            .collect()
    }

    /// The rule priority of configuration `count`: smaller subsets take higher priority (a lower
    /// number), so inserting a smaller subset's rule takes over at once and evicting it hands
    /// back to the larger one. `None` for all queues, which needs no rule (the port's own RSS).
    pub fn priority(&self, count: u16) -> Option<u32> {
        if count == self.total {
            return None;
        }
        self.configs
            .iter()
            .position(|&c| c == count)
            .map(|i| i as u32)
    }

    /// The next larger configuration.
    pub fn step_up(&self, count: u16) -> Option<u16> {
        self.configs.iter().copied().find(|&c| c > count)
    }

    /// The next smaller configuration.
    pub fn step_down(&self, count: u16) -> Option<u16> {
        self.configs.iter().rev().copied().find(|&c| c < count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figure 6: 16 queues, two threads, configurations 2/4/8/16 (we keep 2 and 8 of §4.3's).
    #[test]
    fn figure_6_partition() {
        let l = QueueLayout::new(16, 2).unwrap();
        assert_eq!(l.configs(), &[2, 8, 16]);
        assert_eq!(l.worker_pool(0), 0..8);
        assert_eq!(l.worker_pool(1), 8..16);
        assert_eq!(l.queues(8), vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(l.queues(2), vec![0, 8]);
        assert_eq!(l.active(1, 16), 8..16);
    }

    #[test]
    fn five_configurations_when_the_port_has_more_than_128_queues() {
        let l = QueueLayout::new(256, 8).unwrap();
        assert_eq!(l.configs(), &[8, 32, 128, 256]);
        let l = QueueLayout::new(256, 2).unwrap();
        assert_eq!(l.configs(), &[2, 8, 32, 128, 256]);
        // Smaller subsets, higher priority (lower number); all queues need no rule.
        assert_eq!(l.priority(2), Some(0));
        assert_eq!(l.priority(128), Some(3));
        assert_eq!(l.priority(256), None);
        assert_eq!(l.step_up(8), Some(32));
        assert_eq!(l.step_down(8), Some(2));
        assert_eq!(l.step_down(2), None);
        assert_eq!(l.step_up(256), None);
    }

    #[test]
    fn configurations_nest_for_every_worker() {
        let l = QueueLayout::new(128, 4).unwrap();
        for w in 0..4 {
            for pair in l.configs().windows(2) {
                let (small, big) = (l.active(w, pair[0]), l.active(w, pair[1]));
                assert_eq!(small.start, big.start);
                assert!(small.end <= big.end);
            }
        }
    }

    #[test]
    fn bad_layouts_are_refused() {
        assert!(matches!(
            QueueLayout::new(10, 4),
            Err(LayoutError::Uneven { .. })
        ));
        assert!(matches!(
            QueueLayout::new(8, 0),
            Err(LayoutError::Empty { .. })
        ));
        // One worker per queue: only "all queues".
        assert_eq!(QueueLayout::new(2, 2).unwrap().configs(), &[2]);
    }
}
