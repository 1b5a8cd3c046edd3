//! The merge benchmark (SIGCOMM'26 §7.1): each scenario's trace through rte_gro and pxio.

use std::time::Instant;

use dpdk::Eal;

use crate::engine::{fastest, paired_ratio, EngineResult};
use crate::gro_baseline::{run_rte_gro, run_rte_gro_gso, run_rte_gro_with, GroParse};
use crate::ledger::DEFAULT_IMTU;
use crate::pxio_engine::{run_pxio, NicInfo};
use crate::report::{MergeRow, ScenarioCost};
use crate::trace::{Schedule, Trace, TraceConfig};
use crate::BenchError;

/// The benchmark's scenarios: (flows, Gb/s per flow).
pub const SCENARIOS: [(u32, f64); 6] = [
    (1, 10.0),
    (8, 10.0),
    (64, 2.0),
    (100, 2.0),
    (800, 0.25),
    (3200, 0.054),
];

/// The delay budgets the benchmark compares the engines at, ns of simulated time: each
/// scenario runs at each, both engines given the same one ([`MergeBenchConfig::delay_budget_ns`]).
pub const DELAY_BUDGETS_NS: [u64; 2] = [20_000, 100_000];

/// Settings shared by every scenario and both engines.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeBenchConfig {
    /// Trace generator seed.
    pub seed: u64,
    /// How flows send (Poisson TSO bursts, paced, or a strict round robin as in the rte_gro
    /// round-robin figures); [`run_merge`] sets it per schedule it runs.
    pub schedule: Schedule,
    /// The delay budget: how long either engine may hold a segment for merging, ns of
    /// simulated time. It is rte_gro's flush period (a full flush every budget) and pxio's
    /// longest ETM window (`DelayConfig::max_window_ns`; its model decides below it), so that
    /// in neither engine does a segment wait longer. [`run_merge`] sets it per budget it runs.
    pub delay_budget_ns: u64,
    /// The b-network's MTU (9000 B).
    pub imtu: usize,
    /// IPv6 frames instead of IPv4. DPDK 22.11's `rte_gro` has no TCP/IPv6 GRO: it passes
    /// IPv6 through.
    pub ipv6: bool,
    /// Each trace holds at least this many packets on average.
    pub min_packets: u64,
    /// ...and lasts for at least this many bursts per flow on average.
    pub min_bursts_per_flow: f64,
    /// rte_gro table items per flow (testpmd uses 32).
    pub gro_items_per_flow: u16,
    /// Check every output payload byte against the flow's stream.
    pub verify_payload: bool,
    /// Runs per engine and scenario, the engines taking turns; the fastest is reported.
    pub repetitions: u32,
    /// TSC frequency, for converting timed cycles.
    pub tsc_hz: u64,
}

impl MergeBenchConfig {
    /// The defaults, with the TSC frequency of `eal`.
    pub fn new(eal: &Eal) -> Self {
        let trace = TraceConfig::new(1, 1.0);
        Self {
            seed: trace.seed,
            schedule: trace.schedule,
            delay_budget_ns: DELAY_BUDGETS_NS[0],
            imtu: DEFAULT_IMTU,
            ipv6: false,
            min_packets: trace.min_packets,
            min_bursts_per_flow: trace.min_bursts_per_flow,
            gro_items_per_flow: 32,
            verify_payload: false,
            repetitions: 5,
            tsc_hz: eal.tsc_hz(),
        }
    }

    /// The trace configuration for one scenario.
    pub fn trace_config(&self, flows: u32, gbps_per_flow: f64) -> TraceConfig {
        TraceConfig {
            seed: self.seed,
            schedule: self.schedule,
            min_packets: self.min_packets,
            min_bursts_per_flow: self.min_bursts_per_flow,
            ipv6: self.ipv6,
            ..TraceConfig::new(flows, gbps_per_flow)
        }
    }
}

/// One scenario's report row and what it cost to run.
#[derive(Clone, Debug)]
pub struct ScenarioRun {
    /// The comparison.
    pub row: MergeRow,
    /// Time and memory spent.
    pub cost: ScenarioCost,
}

/// Generates the trace of `flows` x `gbps_per_flow` and runs both engines on it, once per
/// delay budget of `budgets_ns` (the same trace for each; `cfg.delay_budget_ns` is not read).
pub fn run_scenario(
    eal: &Eal,
    flows: u32,
    gbps_per_flow: f64,
    budgets_ns: &[u64],
    cfg: &MergeBenchConfig,
) -> Result<Vec<ScenarioRun>, BenchError> {
    reset_peak_rss();
    let started = Instant::now();
    let trace = Trace::generate(cfg.trace_config(flows, gbps_per_flow))?;
    let generate_s = started.elapsed().as_secs_f64();
    budgets_ns
        .iter()
        .map(|&budget| {
            let cfg = MergeBenchConfig {
                delay_budget_ns: budget,
                ..cfg.clone()
            };
            let mut run = compare(eal, &trace, &cfg)?;
            run.cost.generate_s = generate_s;
            Ok(run)
        })
        .collect()
}

/// Runs every engine on `trace` at `cfg`'s delay budget and compares them.
fn compare(eal: &Eal, trace: &Trace, cfg: &MergeBenchConfig) -> Result<ScenarioRun, BenchError> {
    let (flows, gbps_per_flow) = (trace.config().flows, trace.config().gbps_per_flow);
    // The headline pxio gets everything a NIC gives; the other three each miss one thing. The
    // engines take turns, repetition by repetition, so that on a shared machine each one's
    // fastest run is picked from the same stretch of time as the others'.
    let once = MergeBenchConfig {
        repetitions: 1,
        ..cfg.clone()
    };
    let mut runs: [Vec<EngineResult>; 7] = Default::default();
    for _ in 0..cfg.repetitions.max(1) {
        runs[0].push(run_rte_gro(eal, trace, &once)?);
        runs[1].push(run_pxio(eal, trace, &once, NicInfo::FULL)?);
        runs[2].push(run_pxio(eal, trace, &once, NicInfo::SOFTWARE_CSUM)?);
        runs[3].push(run_pxio(eal, trace, &once, NicInfo::SOFTWARE_HASH)?);
        runs[4].push(run_rte_gro_gso(eal, trace, &once)?);
        runs[5].push(run_pxio(eal, trace, &once, NicInfo::SOFTWARE_CUT)?);
        runs[6].push(run_rte_gro_with(eal, trace, &once, GroParse::Minimal)?);
    }
    // Each peer's time over the headline pxio's, round by round: the ratio to judge on a shared
    // host, where the fastest runs of two engines may come from different rounds.
    let times = |i: usize| runs[i].iter().map(|r| r.ns_per_pkt).collect::<Vec<_>>();
    let [paired_gro, paired_gro_min, paired_gro_gso] =
        [0, 6, 4].map(|peer| paired_ratio(times(peer), times(1)));
    let [gro, full, sw_csum, sw_hash, gro_gso, sw_cut, gro_min] = runs.map(fastest);
    let (gro, full, sw_hash, gro_gso, sw_cut, gro_min) =
        (gro?, full?, sw_hash?, gro_gso?, sw_cut?, gro_min?);
    let pxio = Some(sw_csum?);
    let packets = trace.len() as u64;
    // What rte_gro's timed region held, counted: every packet parsed, and every merged output
    // readied for the NIC. Without either the comparison would be unfair to pxio, so a run
    // that missed one is no result.
    for (name, r) in [
        ("rte_gro", &gro),
        ("rte_gro (minimal parse)", &gro_min),
        ("rte_gro+rte_gso", &gro_gso),
    ] {
        if !parsed_all(r, packets) {
            return Err(BenchError::Config(format!(
                "{name}'s run parsed {:?} of {packets} packets in its timed region",
                r.parsed_in_timed_region
            )));
        }
        if !prepared_all(r) {
            return Err(BenchError::Config(format!(
                "{name}'s run readied {:?} of its {:?} merged outputs for the NIC in its timed \
                 region",
                r.tx_prepared_in_timed_region, r.tx_prepare_due
            )));
        }
    }
    // The two parses must lead rte_gro to the same outputs.
    if gro_min.outcome != gro.outcome {
        return Err(BenchError::Config(format!(
            "rte_gro merged differently after the minimal parse: {:?} vs {:?}",
            gro_min.outcome, gro.outcome
        )));
    }

    let row = MergeRow {
        flows,
        gbps_per_flow,
        pxio_ns_per_pkt: pxio.as_ref().map(|p| p.ns_per_pkt),
        pxio_offload_ns_per_pkt: Some(full.ns_per_pkt),
        pxio_sw_hash_ns_per_pkt: Some(sw_hash.ns_per_pkt),
        rte_gro_ns_per_pkt: gro.ns_per_pkt,
        speedup: pxio.as_ref().map(|p| gro.ns_per_pkt / p.ns_per_pkt),
        speedup_nic_csum: Some(gro.ns_per_pkt / full.ns_per_pkt),
        speedup_nic_csum_paired: paired_gro,
        cycles_per_pkt: Some(full.cycles_per_pkt),
        pxio_sw_csum_cycles_per_pkt: pxio.as_ref().map(|p| p.cycles_per_pkt),
        rte_gro_cycles_per_pkt: gro.cycles_per_pkt,
        conversion_yield: Some(full.outcome.conversion_yield),
        packets_per_imtu: Some(full.outcome.packets_per_imtu),
        rte_gro_packets_per_imtu: gro.outcome.packets_per_imtu,
        pxio_sw_csum_yield: pxio.as_ref().map(|p| p.outcome.conversion_yield),
        mean_delay_us: Some(full.outcome.mean_delay_us),
        p99_delay_us: Some(full.outcome.p99_delay_us),
        max_delay_us: Some(full.outcome.max_delay_us),
        flow_entry_bytes: Some(full.flow_entry_bytes),
        rte_gro_parse_in_timed_region: parsed_all(&gro, packets),
        rte_gro_tx_prepare_in_timed_region: prepared_all(&gro),
        rte_gro_parsed_packets: gro.parsed_in_timed_region.unwrap_or(0),
        rte_gro_tx_prepared_packets: gro.tx_prepared_in_timed_region.unwrap_or(0),
        rte_gro_merged_outputs: gro.tx_prepare_due.unwrap_or(0),
        rte_gro_parse_ns_per_pkt: gro.parse_ns_per_pkt.unwrap_or(0.0),
        rte_gro_yield: gro.outcome.conversion_yield,
        rte_gro_mean_delay_us: gro.outcome.mean_delay_us,
        rte_gro_p99_delay_us: gro.outcome.p99_delay_us,
        rte_gro_max_delay_us: Some(gro.outcome.max_delay_us),
        rte_gro_flow_entry_bytes: gro.flow_entry_bytes,
        rte_gro_segments_per_output: gro.outcome.segments_per_output,
        pxio_segments_per_output: Some(full.outcome.segments_per_output),
        input_packets: packets,
        simulated_ms: trace.end_ns() as f64 / 1e6,
        delay_budget_us: cfg.delay_budget_ns as f64 / 1e3,
        imtu: cfg.imtu,
        seed: cfg.seed,
        schedule: cfg.schedule.name().to_owned(),
        ipv6: cfg.ipv6,
        rte_gro_held_at_flush: gro.held_at_flush,
        rte_gro_min_parse_ns_per_pkt: Some(gro_min.ns_per_pkt),
        rte_gro_min_parse_share_ns_per_pkt: gro_min.parse_ns_per_pkt,
        rte_gro_min_parse_cycles_per_pkt: Some(gro_min.cycles_per_pkt),
        speedup_vs_gro_min_parse: Some(gro_min.ns_per_pkt / full.ns_per_pkt),
        speedup_vs_gro_min_parse_paired: paired_gro_min,
        rte_gro_min_parse_in_timed_region: Some(parsed_all(&gro_min, packets)),
        rte_gro_gso_ns_per_pkt: Some(gro_gso.ns_per_pkt),
        rte_gro_gso_cut_ns_per_pkt: gro_gso.gso_ns_per_pkt,
        rte_gro_gso_cycles_per_pkt: Some(gro_gso.cycles_per_pkt),
        speedup_vs_gro_gso: Some(gro_gso.ns_per_pkt / full.ns_per_pkt),
        speedup_vs_gro_gso_paired: paired_gro_gso,
        rte_gro_gso_yield: Some(gro_gso.outcome.conversion_yield),
        rte_gro_gso_packets_per_imtu: Some(gro_gso.outcome.packets_per_imtu),
        pxio_sw_cut_ns_per_pkt: Some(sw_cut.ns_per_pkt),
        speedup_sw_cut_vs_gro_gso: Some(gro_gso.ns_per_pkt / sw_cut.ns_per_pkt),
        pxio_sw_cut_yield: Some(sw_cut.outcome.conversion_yield),
        pxio_sw_cut_packets_per_imtu: Some(sw_cut.outcome.packets_per_imtu),
    };
    let cost = ScenarioCost {
        schedule: cfg.schedule.name().to_owned(),
        flows,
        gbps_per_flow,
        delay_budget_us: cfg.delay_budget_ns as f64 / 1e3,
        generate_s: 0.0,
        trace_bytes: trace.heap_bytes(),
        rte_gro_wall_s: gro.wall_s + gro_gso.wall_s + gro_min.wall_s,
        pxio_wall_s: Some(
            full.wall_s + sw_hash.wall_s + sw_cut.wall_s + pxio.as_ref().map_or(0.0, |p| p.wall_s),
        ),
        rte_gro_discarded: gro.discarded_sections
            + gro_gso.discarded_sections
            + gro_min.discarded_sections,
        pxio_discarded: Some(full.discarded_sections),
        peak_rss_bytes: peak_rss(),
    };
    Ok(ScenarioRun { row, cost })
}

/// Whether `r`'s timed region parsed each of the trace's `packets` (an engine that needs the
/// application's parse).
fn parsed_all(r: &EngineResult, packets: u64) -> bool {
    r.parsed_in_timed_region == Some(packets)
}

/// Whether `r`'s timed region readied every output that needed it for the NIC (an engine that
/// needs the application to).
fn prepared_all(r: &EngineResult) -> bool {
    r.tx_prepared_in_timed_region.is_some() && r.tx_prepared_in_timed_region == r.tx_prepare_due
}

/// Runs `scenarios` under each of `schedules` (schedule by schedule, in order), each at every
/// delay budget of `budgets_ns` (budget by budget within a scenario, on one trace), reporting
/// progress on stderr.
pub fn run_merge(
    eal: &Eal,
    scenarios: &[(u32, f64)],
    schedules: &[Schedule],
    budgets_ns: &[u64],
    cfg: &MergeBenchConfig,
) -> Result<Vec<ScenarioRun>, BenchError> {
    let runs = each_scenario(scenarios, schedules, cfg, |cfg, flows, gbps| {
        eprintln!(
            "merge: {} {flows} flows x {gbps} Gb/s ...",
            cfg.schedule.name()
        );
        run_scenario(eal, flows, gbps, budgets_ns, cfg)
    })?;
    Ok(runs.into_iter().flatten().collect())
}

/// The engine a profiling run (`merge --profile-pxio`, `--profile-gro`) runs alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfiledEngine {
    /// pxio with everything the NIC gives (the table's "pxio NIC").
    Pxio,
    /// `rte_gro` with its parse (the table's "rte_gro").
    RteGro,
}

/// One scenario of a profiling run: what was run and the fastest ns per packet.
#[derive(Clone, Debug)]
pub struct ProfileRun {
    /// The traffic schedule.
    pub schedule: Schedule,
    /// Flows in the trace.
    pub flows: u32,
    /// Input packets of the trace.
    pub packets: usize,
    /// The fastest run's cost per input packet (TSC).
    pub ns_per_pkt: f64,
    /// The delay budget it ran at, ns.
    pub delay_budget_ns: u64,
}

/// For profiling (`merge --profile-pxio` or `--profile-gro`): runs each scenario's trace through
/// one engine alone, as the table runs it, at `cfg.delay_budget_ns`, `cfg.repetitions` times,
/// so that `perf record` or callgrind (`cargo xtask bench instructions`) sees that engine only.
/// Compares nothing.
pub fn profile(
    eal: &Eal,
    scenarios: &[(u32, f64)],
    schedules: &[Schedule],
    cfg: &MergeBenchConfig,
    engine: ProfiledEngine,
) -> Result<Vec<ProfileRun>, BenchError> {
    each_scenario(scenarios, schedules, cfg, |cfg, flows, gbps| {
        let trace = Trace::generate(cfg.trace_config(flows, gbps))?;
        let best = match engine {
            ProfiledEngine::Pxio => run_pxio(eal, &trace, cfg, NicInfo::FULL)?,
            ProfiledEngine::RteGro => run_rte_gro(eal, &trace, cfg)?,
        };
        Ok(ProfileRun {
            schedule: cfg.schedule,
            flows,
            packets: trace.len(),
            ns_per_pkt: best.ns_per_pkt,
            delay_budget_ns: cfg.delay_budget_ns,
        })
    })
}

/// Runs `run` for every scenario under every schedule, schedule by schedule, with `cfg` set to
/// that schedule, and collects the results.
fn each_scenario<T>(
    scenarios: &[(u32, f64)],
    schedules: &[Schedule],
    cfg: &MergeBenchConfig,
    mut run: impl FnMut(&MergeBenchConfig, u32, f64) -> Result<T, BenchError>,
) -> Result<Vec<T>, BenchError> {
    let mut out = Vec::with_capacity(scenarios.len() * schedules.len());
    for &schedule in schedules {
        let cfg = MergeBenchConfig {
            schedule,
            ..cfg.clone()
        };
        for &(flows, gbps) in scenarios {
            out.push(run(&cfg, flows, gbps)?);
        }
    }
    Ok(out)
}

/// Resets the kernel's peak-RSS mark so that the next [`peak_rss`] covers one scenario.
fn reset_peak_rss() {
    // "5" resets VmHWM (Linux 4.0+); without it the peak covers the whole process so far.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's peak resident memory (`VmHWM`), bytes.
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
