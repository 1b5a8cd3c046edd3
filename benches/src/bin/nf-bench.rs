//! `nf-bench`: the UPF, NAT and L4LB of `px-nfs`, plain against ported to pxio, and the 9000 B
//! MTU upper bound (SIGCOMM'26 §7.3, Figure 14). Run it through `cargo xtask bench nf
//! [--json FILE]`, which builds it in release mode. Needs root (the DPDK EAL, `--no-huge`).

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use dpdk::EalBuilder;
use pxbench::nf::{print_nf_report, run_nf, NfBenchConfig};

/// Command line of the NF benchmark.
#[derive(Debug, Parser)]
#[command(about = "NFs plain against ported to pxio, on the merge bench's trace model")]
struct Args {
    /// Also write `{"nfs": [...]}` to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Minimum input packets.
    #[arg(long, default_value_t = 300_000)]
    min_packets: u64,
    /// Runs per variant, the variants taking turns; the fastest counts.
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// UPF sessions besides the trace's UEs (16 PDRs, 2 FARs, 2 QERs each).
    #[arg(long, default_value_t = 256 * 1024)]
    upf_sessions: u32,
    /// pxgw's outside port coalesces with LRO (the "behind pxgw" column).
    #[arg(long)]
    pxgw_lro: bool,
    /// IP + TCP header bytes the pxio versions align their iMTU to (PxioBuilder::align_imtu;
    /// the trace's are 52); 0: the unaligned 9000 B iMTU.
    #[arg(long, default_value_t = 52)]
    align_imtu: u16,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let eal = EalBuilder::no_hardware("nf-bench")
        .memory_mb(2048)
        .init()
        .context("EAL init (run as root)")?;
    let mut cfg = NfBenchConfig::new(&eal);
    cfg.min_packets = args.min_packets;
    cfg.reps = args.reps;
    cfg.upf_sessions = args.upf_sessions;
    cfg.align_imtu = (args.align_imtu > 0).then_some(args.align_imtu);
    cfg.pxgw_lro = args.pxgw_lro;
    let report = run_nf(&eal, &cfg)?;
    print_nf_report(&report, &cfg);
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
