//! `gateway-bench`: pxgw's whole per-packet work (its pipeline on real mbufs) against a gateway
//! built from DPDK's libraries, pxio's engines alone and the floor of moving a packet, on the
//! same traffic. Run it through `cargo xtask bench gateway [--json FILE]`, which builds it in
//! release mode. Needs root (the DPDK EAL, with `--no-huge`).

#![forbid(unsafe_code)]

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Parser;
use pxbench::gateway::frames::Kind;
use pxbench::gateway::{
    check_json, print_table, run_gateway, scenarios, write_json, GatewayBenchConfig, SideKind,
};

/// Command line of the gateway bench.
#[derive(Debug, Parser)]
#[command(about = "pxgw's pipeline against a DPDK-native gateway, pxio alone and the floor")]
struct Args {
    /// Also write the rows as a JSON array to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A smoke run: 100 flows only, 12,000 frames per scenario, one run per side.
    #[arg(long)]
    quick: bool,
    /// About this many frames per scenario (default 150,000; 12,000 with --quick).
    #[arg(long, value_name = "N")]
    packets: Option<u64>,
    /// Runs per side and scenario, the fastest reported (default 3; 1 with --quick).
    #[arg(long)]
    reps: Option<u32>,
    /// Only these scenarios (repeatable): inbound-tcp, outbound-tcp, inbound-udp, mix.
    #[arg(long = "scenario", value_enum)]
    kinds: Vec<KindArg>,
    /// Only these flow counts (repeatable).
    #[arg(long = "flows", value_name = "F")]
    flows: Vec<u32>,
    /// Only this port profile: nic, nic-lro, none (repeatable).
    #[arg(long = "profile", value_enum)]
    profiles: Vec<ProfileArg>,
    /// Only IPv4 (`4`) or IPv6 (`6`).
    #[arg(long)]
    family: Option<u8>,
    /// Only these sides (repeatable; for profiling): pxgw, engine, dpdk, floor.
    #[arg(long = "only", value_enum)]
    only: Vec<SideArg>,
    /// Trace seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The DPDK gateway's flush period, µs of simulated time.
    #[arg(long, default_value_t = 20.0)]
    dpdk_flush_us: f64,
    /// Skip comparing payload bytes and checksums (every output is still accounted for).
    #[arg(long)]
    no_verify: bool,
    /// After writing the JSON, check that every row has every field and a passing ledger.
    #[arg(long, requires = "json")]
    check: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum KindArg {
    InboundTcp,
    OutboundTcp,
    InboundUdp,
    Mix,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProfileArg {
    Nic,
    NicLro,
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum SideArg {
    Pxgw,
    Engine,
    Dpdk,
    Floor,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let all = scenarios(args.quick);
    let kind_of = |k: KindArg| match k {
        KindArg::InboundTcp => Kind::InboundTcp,
        KindArg::OutboundTcp => Kind::OutboundTcp,
        KindArg::InboundUdp => Kind::InboundUdp,
        KindArg::Mix => Kind::Mix,
    };
    let chosen: Vec<_> = all
        .into_iter()
        .filter(|s| args.kinds.is_empty() || args.kinds.iter().any(|&k| kind_of(k) == s.kind))
        .filter(|s| args.flows.is_empty() || args.flows.contains(&s.flows))
        .filter(|s| match args.family {
            Some(4) => !s.v6,
            Some(6) => s.v6,
            _ => true,
        })
        .filter(|s| {
            args.profiles.is_empty()
                || args.profiles.iter().any(|p| match p {
                    ProfileArg::Nic => s.profile.offloads() && s.profile.lro().is_none(),
                    ProfileArg::NicLro => s.profile.lro().is_some(),
                    ProfileArg::None => !s.profile.offloads(),
                })
        })
        .collect();
    if chosen.is_empty() {
        bail!("no scenario matches the filters");
    }
    if !(args.dpdk_flush_us >= 0.0 && args.dpdk_flush_us.is_finite()) {
        bail!("--dpdk-flush-us must be a non-negative number of microseconds");
    }

    // Mempools and the TSC only; one lcore (the bench is single-core by design).
    let eal = dpdk::EalBuilder::no_hardware("pxbench-gateway")
        .init()
        .context("starting the DPDK EAL (--no-huge; run as root)")?;
    let mut cfg = GatewayBenchConfig::new(&eal);
    cfg.seed = args.seed;
    cfg.packets = args
        .packets
        .unwrap_or(if args.quick { 12_000 } else { cfg.packets });
    cfg.reps = args
        .reps
        .unwrap_or(if args.quick { 1 } else { cfg.reps })
        .max(1);
    cfg.verify = !args.no_verify;
    cfg.dpdk_flush_ns = (args.dpdk_flush_us * 1e3).round() as u64;
    cfg.only = args
        .only
        .iter()
        .map(|s| match s {
            SideArg::Pxgw => SideKind::Pxgw,
            SideArg::Engine => SideKind::Engine,
            SideArg::Dpdk => SideKind::Dpdk,
            SideArg::Floor => SideKind::Floor,
        })
        .collect();

    let started = std::time::Instant::now();
    let rows = run_gateway(&eal, &chosen, &cfg)?;
    let mut stdout = std::io::stdout().lock();
    print_table(&mut stdout, &rows)?;
    writeln!(
        stdout,
        "{} scenarios in {:.1} s; the TSC runs at {:.3} GHz",
        rows.len(),
        started.elapsed().as_secs_f64(),
        cfg.tsc_hz as f64 / 1e9
    )?;
    for (sc, r) in chosen.iter().zip(&rows) {
        if !cfg.only.is_empty() {
            for (side, ns) in [
                (SideKind::Pxgw, r.pxgw_ns_per_pkt),
                (SideKind::Engine, r.engine_ns_per_pkt),
                (SideKind::Dpdk, r.dpdk_gateway_ns_per_pkt),
                (SideKind::Floor, r.floor_ns_per_pkt),
            ] {
                if let Some(ns) = ns.filter(|_| cfg.only.contains(&side)) {
                    writeln!(
                        stdout,
                        "profile: {} {} {} flows {}{}: {} {ns:.1} ns/pkt (fastest of {}), {} packets",
                        r.scenario,
                        r.family,
                        r.flows,
                        r.profile,
                        if sc.profile.lro().is_some() { "+lro" } else { "" },
                        side.name(),
                        cfg.reps,
                        r.packets
                    )?;
                }
            }
        }
    }
    drop(stdout);
    if let Some(path) = &args.json {
        write_json(path, &rows)?;
        println!("wrote {}", path.display());
        if args.check {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let wrong = check_json(&text, &chosen);
            if !wrong.is_empty() {
                bail!("the report fails its check:\n  {}", wrong.join("\n  "));
            }
            println!("checked: {} rows, every field, every ledger", rows.len());
        }
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| !r.ledger_ok)
        .map(|r| {
            format!(
                "{} {} {} flows {}{}: {}",
                r.scenario,
                r.family,
                r.flows,
                r.profile,
                if r.lro { "+lro" } else { "" },
                r.ledger_faults.join("; ")
            )
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "outputs lost, duplicated or changed bytes:\n  {}",
            failed.join("\n  ")
        );
    }
    Ok(())
}
