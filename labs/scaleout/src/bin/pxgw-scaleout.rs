//! `pxgw-scaleout run [--json FILE]` (what `cargo xtask lab scale-out` runs) and
//! `pxgw-scaleout test` (the short version in `cargo xtask test`): pxgw instances behind ECMP
//! routers, symmetric and asymmetric paths, then FRR's BGP and BFD across the instances through
//! steady load, a crash, a drain and an added instance; a table, and a JSON report.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use scaleout_lab::frr::BfdTimers;
use scaleout_lab::run::{run_all, Plan};

#[derive(Debug, Parser)]
#[command(
    name = "pxgw-scaleout",
    about = "Two pxgw instances behind ECMP routers, in network namespaces"
)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The full run (8 MB per connection); exits non-zero when a check fails.
    Run(Options),
    /// The short run of the integration suite (1 MB per connection).
    Test(Options),
}

/// What both runs take.
#[derive(Debug, clap::Args)]
struct Options {
    /// Also write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only the runs whose name (`symmetric-IPv4-true-1500`, ..., `steady`, `crash`,
    /// `drain`, `add`) starts with this; `frr` for the runs on FRR alone.
    #[arg(long, default_value = "")]
    only: String,
    /// BFD's transmit and receive interval on every session, ms.
    #[arg(long, default_value_t = BfdTimers::LAB.interval_ms)]
    bfd_interval_ms: u32,
    /// BFD packets missed before a session goes down.
    #[arg(long, default_value_t = BfdTimers::LAB.multiplier)]
    bfd_multiplier: u32,
    /// Keep the scratch directory (pxgw's and FRR's configurations and logs, bfdd's
    /// session changes) and print where it is.
    #[arg(long)]
    keep_logs: bool,
}

fn main() {
    match run(Args::parse().what) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("pxgw-scaleout: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(what: What) -> Result<bool> {
    let (mut plan, o) = match what {
        What::Run(o) => (Plan::full(), o),
        What::Test(o) => (Plan::short(), o),
    };
    plan.bfd = BfdTimers {
        interval_ms: o.bfd_interval_ms,
        multiplier: o.bfd_multiplier,
    };
    for tool in ["nft", "ping", "ethtool", "vtysh"] {
        if !gateway_lab::have(tool) {
            anyhow::bail!("{tool} is missing: run `cargo xtask deps`");
        }
    }
    let report = run_all(&scaleout_lab::pxgw_binary()?, &plan, &o.only, o.keep_logs)?;
    println!();
    print!("{}", report.table());
    if let Some(path) = o.json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    let failures = report.failures();
    for f in &failures {
        println!("FAILED: {f}");
    }
    if failures.is_empty() {
        println!("scale-out lab: every check passed");
    }
    Ok(failures.is_empty())
}
