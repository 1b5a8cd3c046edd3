//! `merge`: pxio's merge engine against DPDK's `rte_gro`, scenario by scenario (SIGCOMM'26
//! §7.1). Run it through `cargo xtask bench merge [--json FILE]`, which builds it in release
//! mode. Needs root (the DPDK EAL, with `--no-huge`).

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Parser;
use pxbench::report::{print_costs, print_table, write_json};
use pxbench::trace::Schedule;
use pxbench::{profile, run_merge, MergeBenchConfig, ProfiledEngine, DELAY_BUDGETS_NS, SCENARIOS};

/// Command line of the merge benchmark.
#[derive(Debug, Parser)]
#[command(about = "pxio's merge engine against DPDK's rte_gro on the same deterministic traces")]
struct Args {
    /// Also write the rows as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Run only the scenarios with these flow counts (repeatable).
    #[arg(long = "flows", value_name = "F")]
    only_flows: Vec<u32>,
    /// Trace generator seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How flows send (repeatable; default: all three, burstiest first).
    #[arg(long = "schedule", value_enum)]
    schedules: Vec<ScheduleArg>,
    /// IPv6 frames instead of IPv4 (rte_gro, DPDK 22.11, passes IPv6 through unmerged).
    #[arg(long)]
    ipv6: bool,
    /// The b-network's MTU, bytes (the merge target; yield and packets per iMTU follow it).
    #[arg(long, default_value_t = 9000)]
    imtu: usize,
    /// Delay budget, µs of simulated time, both engines the same: rte_gro's flush period and
    /// pxio's longest delay window (repeatable; default: 20 and 100; a profile runs the
    /// first).
    #[arg(long = "delay-us", value_name = "US")]
    delay_us: Vec<f64>,
    /// Minimum input packets per scenario.
    #[arg(long)]
    min_packets: Option<u64>,
    /// rte_gro table items per flow.
    #[arg(long)]
    gro_items: Option<u16>,
    /// Runs per engine and scenario (the engines take turns): the fastest is reported, and the
    /// median of the ratios within a round.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Check every output payload byte against the flow's stream (slower, not timed).
    #[arg(long)]
    verify: bool,
    /// Profile instead of compare: run only pxio (with the NIC's hash and checksum verdicts)
    /// `--reps` times per scenario and print its ns per packet, so that `perf record` sees one
    /// engine (docs/benchmarks.md, "Profiling the merge engine").
    #[arg(long, conflicts_with = "profile_gro")]
    profile_pxio: bool,
    /// As `--profile-pxio`, for rte_gro alone (its parse included, as in the table).
    #[arg(long)]
    profile_gro: bool,
}

/// `--schedule` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum ScheduleArg {
    /// 64 KB TSO bursts on a Poisson schedule (the default model).
    PoissonTso,
    /// One segment per flow in turn (the setup of the rte_gro round-robin figures).
    RoundRobin,
    /// One segment at a time per flow at its rate, with jitter (after a bottleneck).
    Paced,
}

impl From<ScheduleArg> for Schedule {
    fn from(s: ScheduleArg) -> Self {
        match s {
            ScheduleArg::PoissonTso => Schedule::PoissonTso,
            ScheduleArg::RoundRobin => Schedule::RoundRobin,
            ScheduleArg::Paced => Schedule::Paced,
        }
    }
}

fn main() -> Result<()> {
    let args = Args::parse();
    let scenarios: Vec<(u32, f64)> = SCENARIOS
        .iter()
        .copied()
        .filter(|(f, _)| args.only_flows.is_empty() || args.only_flows.contains(f))
        .collect();
    if scenarios.is_empty() {
        bail!(
            "no scenario has {:?} flows; the scenarios have {:?}",
            args.only_flows,
            SCENARIOS.map(|s| s.0)
        );
    }
    // pxio's iMTU is a u16; below 1514 B nothing would merge.
    if !(1514..=65535).contains(&args.imtu) {
        bail!("--imtu must be 1514..=65535 bytes");
    }
    // (A NaN is in no range.)
    if args.delay_us.iter().any(|us| !(0.0..=1e6).contains(us)) {
        bail!("--delay-us must be 0..=1000000 microseconds (pxio's windows end at 1 s)");
    }
    let budgets_ns: Vec<u64> = if args.delay_us.is_empty() {
        DELAY_BUDGETS_NS.to_vec()
    } else {
        args.delay_us
            .iter()
            .map(|us| (us * 1e3).round() as u64)
            .collect()
    };

    // Mempools and the TSC only; one lcore (the benchmark is single-core by design).
    let eal = dpdk::EalBuilder::no_hardware("pxbench-merge")
        .init()
        .context("starting the DPDK EAL (--no-huge; run as root)")?;
    let mut cfg = MergeBenchConfig::new(&eal);
    cfg.seed = args.seed;
    let schedules: Vec<Schedule> = if args.schedules.is_empty() {
        Schedule::ALL.to_vec()
    } else {
        Schedule::ALL
            .into_iter()
            .filter(|s| args.schedules.iter().any(|&a| Schedule::from(a) == *s))
            .collect()
    };
    cfg.delay_budget_ns = budgets_ns[0];
    cfg.imtu = args.imtu;
    cfg.ipv6 = args.ipv6;
    cfg.verify_payload = args.verify;
    cfg.repetitions = args.reps.max(1);
    if let Some(n) = args.min_packets {
        cfg.min_packets = n;
    }
    if let Some(n) = args.gro_items {
        cfg.gro_items_per_flow = n;
    }

    let profiled = match (args.profile_pxio, args.profile_gro) {
        (true, _) => Some((ProfiledEngine::Pxio, "pxio NIC")),
        (_, true) => Some((ProfiledEngine::RteGro, "rte_gro")),
        _ => None,
    };
    if let Some((engine, name)) = profiled {
        for r in profile(&eal, &scenarios, &schedules, &cfg, engine)? {
            println!(
                "profile: {} {} flows: {name} {:.1} ns/pkt (fastest of {}), budget {} µs, {} packets",
                r.schedule.name(),
                r.flows,
                r.ns_per_pkt,
                cfg.repetitions,
                r.delay_budget_ns as f64 / 1e3,
                r.packets
            );
        }
        return Ok(());
    }
    let runs = run_merge(&eal, &scenarios, &schedules, &budgets_ns, &cfg)?;
    let rows: Vec<_> = runs.iter().map(|r| r.row.clone()).collect();
    let costs: Vec<_> = runs.iter().map(|r| r.cost.clone()).collect();

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "merge: pxio vs rte_gro, {} traffic, IPv{}, delay budgets {} µs, iMTU {} B, seed {}, TSC {:.3} GHz, one core",
        schedules.iter().map(|s| s.name()).collect::<Vec<_>>().join(" / "),
        if cfg.ipv6 { 6 } else { 4 },
        budgets_ns
            .iter()
            .map(|ns| format!("{}", *ns as f64 / 1e3))
            .collect::<Vec<_>>()
            .join(" / "),
        cfg.imtu,
        cfg.seed,
        cfg.tsc_hz as f64 / 1e9
    )?;
    print_table(&mut out, &rows)?;
    writeln!(
        out,
        "Every engine gets what a NIC gives (RSS hash, L4 checksum verdict, TSO on transmit) \
         and no more. pxio NIC: uses all three, merging past the iMTU and asking the NIC to cut \
         at the iMTU (TSO), as the paper's PXIO does and as rte_gro's 64 KB outputs need too; \
         sw cut: cuts at the iMTU itself (a port without TSO); sw csum: verifies every checksum \
         itself (and cuts itself); sw hash: hashes itself. \
         budget: the delay budget both engines get, rte_gro's flush period and pxio's longest \
         delay window; no segment waits longer in either (max delay). \
         rte_gro ns includes rte_net_get_ptype (the header parse it needs) on every packet, its \
         share in parentheses, and readies each merged packet for the NIC's checksum offload and \
         TSO (rte_net_intel_cksum_prepare: rte_gro leaves its checksums stale), as pxio's emit \
         does for its own; both counted in its timed region. gro/pxio: rte_gro ns / pxio NIC ns, \
         each engine's fastest run; in parentheses, the median over rounds of the same ratio \
         within one round (the engines take turns), the one to judge on a shared host. \
         gro min: rte_gro after a minimal parse instead, the packet type and header lengths from \
         a check of the fixed Ethernet/IPv4/TCP layout (a NIC that reports the packet type \
         leaves only the lengths to fill). gro+gso: rte_gro, then rte_gso \
         cutting every flushed packet longer than the iMTU (DPDK's way to deliver packets that \
         fit it without TSO), each merged or cut output readied for checksum offload; the cut's share in \
         parentheses. (gro+gso)/pxio and (gro+gso)/sw cut: gro+gso ns over \
         each. pkts/iMTU: packets out per iMTU of payload (ideal 1.0; an output past the iMTU, \
         rte_gro's or a TSO request, counted as the packets it is cut into at the iMTU)."
    )?;
    writeln!(out)?;
    writeln!(out, "cost of each scenario:")?;
    print_costs(&mut out, &costs)?;
    if let Some(path) = &args.json {
        write_json(path, &rows)?;
        writeln!(out, "wrote {}", path.display())?;
    }
    Ok(())
}
