//! A worker's load, measured as DPDK's lcore telemetry and VPP's vector rate measure theirs: the
//! TSC read once per turn of the polling loop, and the cycles since the previous read given to
//! that turn, as work when it received or sent something, as idle otherwise (a nap after idle
//! polls is idle too). The busy share of the cycles is what a core is used for; cycles per
//! frame received is what a core costs per packet, so `tsc_hz / cycles_per_packet` is what one
//! core forwards at most.

use super::WorkerLoad;

/// Polls and cycles over a span of time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    busy_polls: u64,
    idle_polls: u64,
    busy_cycles: u64,
    idle_cycles: u64,
    /// Frames received in the busy polls.
    packets: u64,
}

impl Span {
    fn add(&mut self, o: &Span) {
        self.busy_polls += o.busy_polls;
        self.idle_polls += o.idle_polls;
        self.busy_cycles += o.busy_cycles;
        self.idle_cycles += o.idle_cycles;
        self.packets += o.packets;
    }
}

/// A worker's load meter: [`poll`](Self::poll) once per turn of its loop, with the TSC read at
/// the turn's start; [`write`](Self::write) into the report it publishes. Neither allocates.
#[derive(Clone, Debug)]
pub struct LoadMeter {
    /// TSC cycles per second: the length of a window.
    hz: u64,
    /// The TSC when the turn being measured started.
    mark: u64,
    /// The TSC when the current window started.
    window_start: u64,
    /// Completed windows, added up.
    done: Span,
    /// The window being measured.
    current: Span,
    /// The last completed window.
    recent: Option<Span>,
}

impl LoadMeter {
    /// A meter for a TSC running at `tsc_hz`, its first turn starting at TSC `now`.
    pub fn new(tsc_hz: u64, now: u64) -> Self {
        Self {
            hz: tsc_hz.max(1),
            mark: now,
            window_start: now,
            done: Span::default(),
            current: Span::default(),
            recent: None,
        }
    }

    /// Ends the turn measured since the previous call (or [`new`](Self::new)) at TSC `now`,
    /// which starts the next: it was work if it received `packets` frames or sent anything
    /// (`busy`). Every second of TSC time closes a window, which the ratios are taken over.
    #[inline]
    pub fn poll(&mut self, now: u64, busy: bool, packets: u64) {
        let cycles = now.saturating_sub(self.mark);
        self.mark = now;
        let s = &mut self.current;
        if busy {
            s.busy_polls += 1;
            s.busy_cycles += cycles;
            s.packets += packets;
        } else {
            s.idle_polls += 1;
            s.idle_cycles += cycles;
        }
        if now.saturating_sub(self.window_start) >= self.hz {
            self.done.add(&self.current);
            self.recent = Some(std::mem::take(&mut self.current));
            self.window_start = now;
        }
    }

    /// Writes the counts since the start and over the last completed window (the current one
    /// until a window has completed) into `out`.
    pub fn write(&self, out: &mut WorkerLoad) {
        let mut total = self.done;
        total.add(&self.current);
        let recent = self.recent.unwrap_or(self.current);
        out.busy_polls = total.busy_polls;
        out.idle_polls = total.idle_polls;
        out.busy_cycles = total.busy_cycles;
        out.idle_cycles = total.idle_cycles;
        out.tsc_hz = self.hz;
        out.recent_busy_polls = recent.busy_polls;
        out.recent_idle_polls = recent.idle_polls;
        out.recent_busy_cycles = recent.busy_cycles;
        out.recent_idle_cycles = recent.idle_cycles;
        out.recent_packets = recent.packets;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Report;

    /// The load of known TSC spans: at 1 MHz, a second of 300 busy turns of 1000 cycles (32
    /// frames each) and 7000 idle turns of 100 cycles is 30 % busy by cycles, 300/7300 by polls,
    /// 1000/32 cycles per frame; the next window replaces it, the totals keep both.
    #[test]
    fn load_of_known_spans() {
        let hz = 1_000_000;
        let mut now = 5_000_000;
        let mut m = LoadMeter::new(hz, now);
        let mut r = Report::default();
        let mut second = |m: &mut LoadMeter, busy: u64, idle: u64| {
            for _ in 0..busy {
                now += 1000;
                m.poll(now, true, 32);
            }
            for _ in 0..idle {
                now += 100;
                m.poll(now, false, 0);
            }
        };
        second(&mut m, 300, 7000);
        m.write(&mut r.load);
        r.finish();
        assert_eq!(r.load.recent_busy_cycles, 300_000);
        assert_eq!(r.load.recent_idle_cycles, 700_000);
        assert!(
            (r.load.busy_ratio - 0.3).abs() < 1e-12,
            "{}",
            r.load.busy_ratio
        );
        assert!((r.load.busy_polls_ratio - 300.0 / 7300.0).abs() < 1e-12);
        assert!((r.load.cycles_per_packet - 1000.0 / 32.0).abs() < 1e-9);
        assert_eq!(r.load.tsc_hz, hz);
        // A second at 60 % busy: the ratio is the new second's, the counts since the start add.
        second(&mut m, 600, 4000);
        m.write(&mut r.load);
        r.finish();
        assert!(
            (r.load.busy_ratio - 0.6).abs() < 1e-12,
            "{}",
            r.load.busy_ratio
        );
        assert_eq!(r.load.busy_cycles, 900_000);
        assert_eq!(r.load.idle_cycles, 1_100_000);
        assert_eq!(r.load.busy_polls, 900);
        assert_eq!(r.load.idle_polls, 11_000);
    }

    /// Before a second has passed, the ratios are those of the time so far; a nap (a long idle
    /// turn) is idle time.
    #[test]
    fn first_window_and_naps() {
        let mut m = LoadMeter::new(1_000_000, 0);
        m.poll(200, true, 10);
        m.poll(50_200, false, 0); // idle, with a 50 µs nap
        let mut r = Report::default();
        m.write(&mut r.load);
        r.finish();
        assert_eq!(
            (r.load.recent_busy_cycles, r.load.recent_idle_cycles),
            (200, 50_000)
        );
        assert!((r.load.busy_ratio - 200.0 / 50_200.0).abs() < 1e-12);
        assert!((r.load.cycles_per_packet - 20.0).abs() < 1e-12);
    }
}
