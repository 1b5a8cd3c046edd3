//! The channel from each worker to the readers of its counters, which no worker ever waits on.
//!
//! Each worker owns the input end of a triple buffer ([`Publisher`]): every few thousand loop
//! iterations it writes its [`Report`] into its own back buffer and swaps it in with one atomic
//! exchange; it never waits for a reader. The readers (the main thread's periodic line, the
//! metrics endpoint's HTTP thread on a scrape, DPDK telemetry's `/pxgw/stats`, all through
//! [`crate::metrics::Metrics`]) share the output ends ([`Snapshot`]) behind a mutex of their own,
//! which no worker touches.

use std::sync::Mutex;

use crate::stats::Report;

/// The worker's end of its report channel: publishing never blocks and never takes a lock.
pub struct Publisher {
    input: triple_buffer::Input<Report>,
}

impl Publisher {
    /// Makes `report` the worker's latest, for every reader to see.
    pub fn publish(&mut self, report: Report) {
        *self.input.input_buffer_mut() = report;
        self.input.publish();
    }
}

/// The readers' end of one worker's report channel.
pub struct Snapshot {
    output: Mutex<triple_buffer::Output<Report>>,
}

impl Snapshot {
    /// The worker's latest published report (all zero before its first).
    pub fn latest(&self) -> Report {
        match self.output.lock() {
            Ok(mut o) => o.read().clone(),
            Err(poisoned) => poisoned.into_inner().read().clone(),
        }
    }
}

/// A report channel for one worker.
pub fn channel() -> (Publisher, Snapshot) {
    let (input, output) = triple_buffer::triple_buffer(&Report::default());
    (
        Publisher { input },
        Snapshot {
            output: Mutex::new(output),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker publishes while a reader holds the snapshot's lock (a scrape in progress): it
    /// never waits for readers.
    #[test]
    fn publishing_never_waits_for_a_reader() {
        let (mut p, s) = channel();
        let s = std::sync::Arc::new(s);
        let held = s.output.lock().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            for i in 0..1000 {
                let mut r = Report::default();
                r.merge.merges = i;
                p.publish(r);
            }
            done_tx.send(()).unwrap();
        });
        assert!(
            done_rx
                .recv_timeout(std::time::Duration::from_secs(10))
                .is_ok(),
            "the worker blocked on a reader's lock"
        );
        drop(held);
        worker.join().unwrap();
        assert_eq!(s.latest().merge.merges, 999);
    }
}
