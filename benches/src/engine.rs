//! What an engine run reports, and the clock both engines are timed with.

use crate::ledger::Outcome;
use crate::BenchError;

/// One engine's result on one trace.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineResult {
    /// CPU time of the engine's own work (merge and flush, not building input or recording
    /// output) per input packet, ns, on one core.
    pub ns_per_pkt: f64,
    /// The same in TSC cycles.
    pub cycles_per_pkt: f64,
    /// Packets whose headers the run parsed for the engine inside its timed sections, when the
    /// engine needs the application to do it (rte_gro: `rte_net_get_ptype`); `None` when the
    /// engine parses for itself (pxio classifies inside `rx`).
    pub parsed_in_timed_region: Option<u64>,
    /// The share of [`ns_per_pkt`](Self::ns_per_pkt) spent in that parse, ns per packet.
    pub parse_ns_per_pkt: Option<f64>,
    /// Packets the run readied for the NIC's checksum offload and TSO inside its timed
    /// sections, when the engine leaves that to the application (rte_gro: its merged packets'
    /// checksums are stale); `None` when the engine does it itself (pxio's emit).
    pub tx_prepared_in_timed_region: Option<u64>,
    /// The outputs that needed that (rewritten by the engine), counted from the outputs
    /// outside the timed sections; equal to
    /// [`tx_prepared_in_timed_region`](Self::tx_prepared_in_timed_region) when the work was
    /// done and timed.
    pub tx_prepare_due: Option<u64>,
    /// The share of `ns_per_pkt` spent cutting outputs to the iMTU with `rte_gso` (the
    /// rte_gro + rte_gso peer only).
    pub gso_ns_per_pkt: Option<f64>,
    /// Yield, delay and output counts.
    pub outcome: Outcome,
    /// Bytes of per-flow state the engine keeps.
    pub flow_entry_bytes: u64,
    /// Wall-clock seconds of the whole run, input building and recording included.
    pub wall_s: f64,
    /// Timed sections set aside as descheduled ([`CycleTimer::discarded`]).
    pub discarded_sections: u64,
    /// Mean packets the engine held when it flushed, when it can tell.
    pub held_at_flush: Option<f64>,
}

/// A timed section longer than this was almost surely descheduled (a legitimate section is one
/// RX burst or one flush: tens of µs even for rte_gro at thousands of flows).
const PREEMPTED_NS: f64 = 250_000.0;

/// Accumulates CPU time of the timed sections only, with the TSC.
///
/// On a shared machine the OS may deschedule the thread inside a section, which would add a
/// whole time slice to it. A section longer than 250 µs is therefore set aside, and the total
/// is extrapolated from the other sections (`kept cycles x sections / kept sections`).
/// [`discarded`](Self::discarded) says how many were set aside; on a quiet machine, none.
#[derive(Clone, Debug)]
pub struct CycleTimer {
    tsc_hz: u64,
    preempted_cycles: u64,
    cycles: u64,
    kept: u64,
    discarded: u64,
}

impl CycleTimer {
    /// A timer for a TSC running at `tsc_hz` ([`dpdk::Eal::tsc_hz`]).
    pub fn new(tsc_hz: u64) -> Self {
        Self {
            tsc_hz,
            preempted_cycles: (PREEMPTED_NS * tsc_hz as f64 / 1e9) as u64,
            cycles: 0,
            kept: 0,
            discarded: 0,
        }
    }

    /// Runs `f` as one timed section. Never inlined, so a profiler can count exactly the timed
    /// sections (callgrind's `--toggle-collect='*CycleTimer*time*'`) and not the untimed set-up
    /// that calls the same functions, such as the gateway bench's handshakes.
    #[inline(never)]
    pub fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let start = dpdk::rdtsc();
        let r = f();
        let spent = dpdk::rdtsc().wrapping_sub(start);
        if spent > self.preempted_cycles {
            self.discarded += 1;
        } else {
            self.cycles += spent;
            self.kept += 1;
        }
        r
    }

    /// Sections set aside as descheduled.
    pub fn discarded(&self) -> u64 {
        self.discarded
    }

    /// Total timed nanoseconds, extrapolated over the sections set aside.
    pub fn ns(&self) -> f64 {
        self.cycles() * 1e9 / self.tsc_hz.max(1) as f64
    }

    /// Total timed TSC cycles, extrapolated over the sections set aside.
    pub fn cycles(&self) -> f64 {
        let sections = (self.kept + self.discarded) as f64;
        let scale = if self.kept == 0 {
            0.0
        } else {
            sections / self.kept as f64
        };
        self.cycles as f64 * scale
    }
}

/// Runs an engine `repetitions` times (at least once) on the same trace and keeps the fastest
/// run: on a shared machine, the least disturbed one. The runs must agree on everything but
/// time (same outputs, same yield and delays), else the engine is not deterministic and the
/// result is an error. `wall_s` becomes the total over all runs.
pub fn best_of(
    repetitions: u32,
    mut run: impl FnMut() -> Result<EngineResult, BenchError>,
) -> Result<EngineResult, BenchError> {
    let runs = (0..repetitions.max(1))
        .map(|_| run())
        .collect::<Result<Vec<_>, _>>()?;
    fastest(runs)
}

/// The median over rounds of `a`'s time over `b`'s in the same round (`a[i]` and
/// `b[i]` ran in round `i`). A round runs each side once, back to back, so what disturbs the
/// shared host for a round (a neighbour's load, the clock) weighs on both sides of its ratio,
/// where the fastest run of each side may come from different rounds. `None` when either
/// side did not run.
pub fn paired_ratio(
    a: impl IntoIterator<Item = f64>,
    b: impl IntoIterator<Item = f64>,
) -> Option<f64> {
    let mut ratios: Vec<f64> = a
        .into_iter()
        .zip(b)
        .map(|(a, b)| a / b)
        .filter(|r| r.is_finite())
        .collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(ratios[n / 2]),
        _ => Some((ratios[n / 2 - 1] + ratios[n / 2]) / 2.0),
    }
}

/// The fastest of `runs` of one engine on one trace (made in any order, e.g. interleaved with
/// another engine's so that both sample the same moments of a shared machine), checked as in
/// [`best_of`]. `wall_s` becomes the total. An empty list is an error.
pub fn fastest(runs: Vec<EngineResult>) -> Result<EngineResult, BenchError> {
    let mut runs = runs.into_iter();
    let mut best = runs
        .next()
        .ok_or_else(|| BenchError::Config("no run to pick from".into()))?;
    let mut wall_s = best.wall_s;
    for next in runs {
        wall_s += next.wall_s;
        if next.outcome != best.outcome {
            return Err(BenchError::Config(format!(
                "two runs on the same trace differ: {:?} vs {:?}",
                best.outcome, next.outcome
            )));
        }
        if next.parsed_in_timed_region != best.parsed_in_timed_region
            || next.tx_prepared_in_timed_region != best.tx_prepared_in_timed_region
            || next.tx_prepare_due != best.tx_prepare_due
        {
            return Err(BenchError::Config(
                "two runs on the same trace parsed or readied different packet counts".into(),
            ));
        }
        if next.ns_per_pkt < best.ns_per_pkt {
            best = next;
        }
    }
    best.wall_s = wall_s;
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::paired_ratio;

    #[test]
    fn a_paired_ratio_is_the_median_of_each_rounds_ratio() {
        // The third round disturbed the first side only. Round by round the first side took
        // 1.2, 1.0 and 3.0 times the second's time: the median says 1.2.
        assert_eq!(
            paired_ratio([12.0, 10.0, 30.0], [10.0, 10.0, 10.0]),
            Some(1.2)
        );
        assert_eq!(paired_ratio([12.0, 10.0], [10.0, 10.0]), Some(1.1));
        // A side that did not run, or a run with no time, gives no ratio.
        assert_eq!(paired_ratio([12.0], []), None);
        assert_eq!(paired_ratio([12.0], [0.0]), None);
    }
}
