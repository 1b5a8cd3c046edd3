//! `pxgw-stress run [--json FILE]` (what `cargo xtask lab stress` runs: floods of 1 M frames)
//! and `pxgw-stress test` (the integration suite in `cargo xtask test`: floods of 100 k):
//! crafted TCP sequences, floods, a restart and mempool exhaustion against pxgw while
//! sha256-checked transfers run; a table, and a JSON report with `--json`.

#![forbid(unsafe_code)]

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use stress_lab::cases::{self, Plan};

#[derive(Debug, Parser)]
#[command(
    name = "pxgw-stress",
    about = "Hostile input against pxgw, in network namespaces"
)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The full run: floods of 1 M frames (`--flood` to change).
    Run {
        /// Also write the report as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Frames per flood.
        #[arg(long, default_value_t = 1_000_000)]
        flood: u64,
        /// Run only the cases whose name contains this (and the clean one).
        #[arg(long)]
        only: Option<String>,
    },
    /// The short run of the integration suite: floods of 100 k frames; exits non-zero when a
    /// case fails.
    Test {
        /// Also write the report as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Run only the cases whose name contains this (and the clean one).
        #[arg(long)]
        only: Option<String>,
    },
    /// Capture real traffic through pxgw and write the fuzz targets' seeds (fuzz/seeds).
    Seeds {
        /// Where the per-target seed directories go.
        #[arg(long, default_value = "fuzz/seeds")]
        out: PathBuf,
    },
}

fn main() {
    let args = Args::parse();
    match run(args.what) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("pxgw-stress: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(what: What) -> Result<bool> {
    if let What::Seeds { out } = &what {
        let written = stress_lab::seeds::make(&cases::pxgw_binary()?, out)?;
        for (target, n) in written {
            println!("{target}: {n} seeds in {}", out.join(&target).display());
        }
        return Ok(true);
    }
    let (plan, json) = match what {
        What::Run { json, flood, only } => (
            Plan {
                flood,
                only,
                ..Plan::full()
            },
            json,
        ),
        What::Test { json, only } => (
            Plan {
                only,
                ..Plan::short()
            },
            json,
        ),
        What::Seeds { .. } => unreachable!("handled above"),
    };
    for tool in ["nft", "ping", "ethtool"] {
        if !gateway_lab::have(tool) {
            anyhow::bail!("{tool} is missing: run `cargo xtask deps`");
        }
    }
    let pxgw = cases::pxgw_binary()?;
    let report = cases::run(&pxgw, &plan)?;
    println!();
    print!("{}", report.table());
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report.ok())
}
