//! The channel from each worker to the readers of its counters, which no worker ever waits on
//! and which allocates nothing on the worker's side.
//!
//! A worker publishes through its [`Publisher`] every few hundred loop iterations. What it
//! publishes goes through three triple buffers, each written whole into a buffer allocated when
//! the channel was made and swapped in with one atomic exchange:
//!
//! - **the counters** ([`Report`]'s declared counters, frame-size histograms included: about two
//!   kilobytes of plain numbers), every publication;
//! - **the merge engine's delay histogram** (an HDR histogram of about 30 KB), at most every
//!   [`DELAY_EVERY_NS`] and only when it recorded something since, so its copy costs a worker a
//!   few microseconds a few times a second whatever its loop rate;
//! - **the discovered path MTUs** (at most [`MAX_PATHS`]), only when they changed.
//!
//! The readers (the main thread's periodic table, the metrics endpoint's HTTP thread on a scrape,
//! DPDK telemetry's `/pxgw/stats`, all through [`crate::metrics::Metrics`]) share the output ends
//! ([`Snapshot`]) behind a mutex of their own, which no worker touches, and build a whole
//! [`Report`] from them (that allocates, on the reader's side).

use std::sync::Mutex;

use hdrhistogram::Histogram;

use crate::pmtud::DiscoveredPath;
use crate::stats::Report;

/// The shortest time between two publications of the delay histogram, ns.
pub const DELAY_EVERY_NS: u64 = 100_000_000;

/// Discovered paths published per worker (the pipeline keeps as many, the most recent).
pub const MAX_PATHS: usize = 64;

/// The bounds of the merge engine's delay histogram (`pxio::merge::MergeStats::delay_ns`): 1 ns
/// to 60 s, two significant digits. Buffers of the same layout take a copy as one `memcpy`; one
/// of another layout still takes it, value by value.
const DELAY_BOUNDS: (u64, u64, u8) = (1, 60_000_000_000, 2);

/// Discovered paths, in a buffer that never allocates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Paths {
    len: usize,
    items: [Option<DiscoveredPath>; MAX_PATHS],
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            len: 0,
            items: [None; MAX_PATHS],
        }
    }
}

impl Paths {
    /// The most recent [`MAX_PATHS`] of `paths` (oldest first).
    fn set(&mut self, paths: &[DiscoveredPath]) {
        let paths = &paths[paths.len().saturating_sub(MAX_PATHS)..];
        self.len = paths.len();
        for (slot, p) in self.items.iter_mut().zip(paths) {
            *slot = Some(*p);
        }
    }

    /// Whether these are `paths` (their most recent [`MAX_PATHS`]).
    fn is(&self, paths: &[DiscoveredPath]) -> bool {
        let paths = &paths[paths.len().saturating_sub(MAX_PATHS)..];
        self.len == paths.len() && self.items.iter().zip(paths).all(|(a, b)| *a == Some(*b))
    }

    fn to_vec(self) -> Vec<DiscoveredPath> {
        self.items
            .iter()
            .take(self.len)
            .flatten()
            .copied()
            .collect()
    }
}

fn empty_delay() -> Histogram<u64> {
    let (low, high, sigfig) = DELAY_BOUNDS;
    Histogram::new_with_bounds(low, high, sigfig).expect("static histogram bounds are valid")
}

/// The worker's end of its report channel: publishing never blocks, never takes a lock and
/// never allocates.
pub struct Publisher {
    counters: triple_buffer::Input<Report>,
    delay: triple_buffer::Input<Histogram<u64>>,
    paths: triple_buffer::Input<Paths>,
    /// When the delay histogram was last published, and how many values it held.
    delay_published: Option<(u64, u64)>,
    /// The paths last published.
    paths_published: Paths,
}

impl Publisher {
    /// Makes `counters`' counters the worker's latest, with the merge engine's `delay`
    /// histogram (when [`DELAY_EVERY_NS`] has passed since its last publication and it recorded
    /// something since) and the discovered `paths` (when they changed); `now` is the worker's
    /// clock, ns. `counters`' own delay histogram and paths are not read.
    pub fn publish(
        &mut self,
        counters: &Report,
        delay: Option<&Histogram<u64>>,
        paths: &[DiscoveredPath],
        now: u64,
    ) {
        self.publish_counters(counters);
        if let Some(h) = delay {
            let due = match self.delay_published {
                None => true,
                Some((at, len)) => len != h.len() && now.saturating_sub(at) >= DELAY_EVERY_NS,
            };
            if due {
                self.publish_delay(h, now);
            }
        }
        self.publish_paths(paths);
    }

    /// As [`publish`](Self::publish), with the delay histogram whatever the time: the worker's
    /// last publication, when it stops.
    pub fn publish_final(
        &mut self,
        counters: &Report,
        delay: Option<&Histogram<u64>>,
        paths: &[DiscoveredPath],
        now: u64,
    ) {
        self.publish_counters(counters);
        if let Some(h) = delay {
            self.publish_delay(h, now);
        }
        self.publish_paths(paths);
    }

    fn publish_counters(&mut self, counters: &Report) {
        self.counters
            .input_buffer_mut()
            .copy_counters_from(counters);
        self.counters.publish();
    }

    fn publish_delay(&mut self, h: &Histogram<u64>, now: u64) {
        // The buffer holds no values outside the engine's range: set_to only fails for a
        // histogram of another range with values beyond this one's, and then the previous copy
        // stays out.
        if self.delay.input_buffer_mut().set_to(h).is_ok() {
            self.delay.publish();
            self.delay_published = Some((now, h.len()));
        }
    }

    fn publish_paths(&mut self, paths: &[DiscoveredPath]) {
        if !self.paths_published.is(paths) {
            self.paths_published.set(paths);
            *self.paths.input_buffer_mut() = self.paths_published;
            self.paths.publish();
        }
    }
}

/// The readers' ends of one worker's channel.
struct Outputs {
    counters: triple_buffer::Output<Report>,
    delay: triple_buffer::Output<Histogram<u64>>,
    paths: triple_buffer::Output<Paths>,
}

/// The readers' end of one worker's report channel.
pub struct Snapshot {
    outputs: Mutex<Outputs>,
}

impl Snapshot {
    /// The worker's latest published report, ratios derived (all zero before its first).
    pub fn latest(&self) -> Report {
        let mut o = match self.outputs.lock() {
            Ok(o) => o,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut r = o.counters.read().clone();
        let delay = o.delay.read();
        r.delay_ns = (!delay.is_empty()).then(|| delay.clone());
        r.pmtud_paths = o.paths.read().to_vec();
        r.finish();
        r
    }
}

/// A report channel for one worker.
pub fn channel() -> (Publisher, Snapshot) {
    let (counters, counters_out) = triple_buffer::triple_buffer(&Report::default());
    let (delay, delay_out) = triple_buffer::triple_buffer(&empty_delay());
    let (paths, paths_out) = triple_buffer::triple_buffer(&Paths::default());
    (
        Publisher {
            counters,
            delay,
            paths,
            delay_published: None,
            paths_published: Paths::default(),
        },
        Snapshot {
            outputs: Mutex::new(Outputs {
                counters: counters_out,
                delay: delay_out,
                paths: paths_out,
            }),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    fn path(i: u8) -> DiscoveredPath {
        DiscoveredPath {
            destination: IpAddr::V4(Ipv4Addr::new(192, 0, 2, i)),
            pmtu: 1400 + u16::from(i),
        }
    }

    /// A worker publishes while a reader holds the snapshot's lock (a scrape in progress): it
    /// never waits for readers.
    #[test]
    fn publishing_never_waits_for_a_reader() {
        let (mut p, s) = channel();
        let s = std::sync::Arc::new(s);
        let held = s.outputs.lock().unwrap();
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let worker = std::thread::spawn(move || {
            let mut r = Report::default();
            for i in 0..1000 {
                r.merge.merges = i;
                p.publish(&r, None, &[], i);
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

    /// The delay histogram goes out at the first publication, then again only when it recorded
    /// something and [`DELAY_EVERY_NS`] has passed (or at the final publication); the counters
    /// go out every time; the ratios are derived on the reader's side.
    #[test]
    fn delay_histogram_is_published_at_most_every_interval() {
        let (mut p, s) = channel();
        let mut r = Report::default();
        let mut h = empty_delay();
        h.record(5_000).unwrap();
        r.merge.payload_in = 10;
        r.merge.payload_full = 9;
        p.publish(&r, Some(&h), &[], 0);
        let got = s.latest();
        assert_eq!(got.delay_ns.as_ref().map(Histogram::len), Some(1));
        assert!((got.merge.mean_delay_us - 5.0).abs() < 0.1);
        assert!((got.merge.conversion_yield - 0.9).abs() < 1e-12);
        h.record(7_000).unwrap();
        r.merge.merges = 3;
        p.publish(&r, Some(&h), &[], DELAY_EVERY_NS - 1);
        let got = s.latest();
        assert_eq!(got.merge.merges, 3, "counters go out every time");
        assert_eq!(
            got.delay_ns.as_ref().map(Histogram::len),
            Some(1),
            "too soon"
        );
        p.publish(&r, Some(&h), &[], DELAY_EVERY_NS);
        assert_eq!(s.latest().delay_ns.as_ref().map(Histogram::len), Some(2));
        h.record(9_000).unwrap();
        p.publish_final(&r, Some(&h), &[], DELAY_EVERY_NS + 1);
        assert_eq!(s.latest().delay_ns.as_ref().map(Histogram::len), Some(3));
    }

    /// Paths go out when they change, the most recent [`MAX_PATHS`] of them.
    #[test]
    fn paths_are_published_when_they_change() {
        let (mut p, s) = channel();
        let r = Report::default();
        p.publish(&r, None, &[path(1), path(2)], 0);
        assert_eq!(s.latest().pmtud_paths, [path(1), path(2)]);
        let many: Vec<DiscoveredPath> = (0..100).map(path).collect();
        p.publish(&r, None, &many, 1);
        assert_eq!(s.latest().pmtud_paths, many[100 - MAX_PATHS..]);
        p.publish(&r, None, &[], 2);
        assert!(s.latest().pmtud_paths.is_empty());
    }
}
