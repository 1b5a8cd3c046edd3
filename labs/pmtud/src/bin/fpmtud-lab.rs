//! `fpmtud-lab`: F-PMTUD next to scamper and the kernel's ICMP-based PMTUD on a real Linux path
//! A —9000— R1 —4000— R2 —1400— B, with ICMP allowed and black-holed (SIGCOMM'26 §5.2, §7.4).
//!
//! - `fpmtud-lab run [--json FILE]` prints the table (what `cargo xtask lab pmtud` runs).
//! - `fpmtud-lab test [--json FILE]` prints the table, then one line per check and
//!   `N passed, M failed`; it exits with 1 if any check failed (an integration suite of
//!   `cargo xtask test`).
//!
//! Needs root, `nft`, `scamper` and the `fpmtud` binary next to this one.

#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use pmtud_lab::{self as lab, LabConfig};

#[derive(Parser)]
#[command(
    name = "fpmtud-lab",
    about = "F-PMTUD, scamper and the kernel's PMTUD on a real path, with and without an ICMP \
             black hole"
)]
struct Cli {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// Run every method with ICMP allowed and black-holed, and print the table.
    Run {
        /// Also write the results as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// The same, then assert F-PMTUD's properties (the integration suite).
    Test {
        /// Also write the results as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .with_target(false)
        .init();
    let (test, json) = match Cli::parse().what {
        What::Run { json } => (false, json),
        What::Test { json } => (true, json),
    };
    match run(test, json.as_deref()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("fpmtud-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the lab; returns whether every check passed (always true for `run`).
fn run(test: bool, json: Option<&Path>) -> Result<bool> {
    if !netlab::is_root() {
        bail!("the lab creates network namespaces and nftables tables: run it as root");
    }
    // SIGINT/SIGTERM end the lab between two steps, so everything it built is removed.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("install the signal handler")?;
    }
    let fpmtud = std::env::current_exe()
        .context("find this binary")?
        .with_file_name("fpmtud");
    let report = lab::run(&LabConfig::new(fpmtud), &stop).context("run the PMTUD lab")?;
    let checks = report.checks();
    println!();
    print!("{}", report.table());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report.to_json(&checks))
            .context("encode the JSON report")?;
        std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))?;
    }
    if !test {
        return Ok(true);
    }
    println!();
    let failed = checks.iter().filter(|c| !c.ok).count();
    for c in &checks {
        println!("{} {}", if c.ok { "ok  " } else { "FAIL" }, c.name);
    }
    println!("{} passed, {failed} failed", checks.len() - failed);
    Ok(failed == 0)
}
