//! `cargo xtask bench KIND [--json FILE]`: runs a benchmark in release mode and prints its
//! table; with `--json FILE` the benchmark also writes its JSON report there.
//!
//! `merge`: pxio's merge engine against DPDK's `rte_gro` on the same deterministic traces
//! (SIGCOMM'26 §7.1), via `cargo run --release -p pxbench --bin merge`.
//!
//! `caravan`: the receive cost of plain UDP against PX-caravans, decapsulated by caravan-ebpf or
//! read whole with `caravan::Reader` (SIGCOMM'26 §7.2), between two network namespaces. It
//! builds the eBPF object first (`cargo xtask build-ebpf`), then runs
//! `cargo run --release -p pxbench --bin caravan-bench`.
//!
//! `pmtu-cache`: F-PMTUD's PMTU cache, its counting Bloom filter's false-positive rate and the
//! lookup ns of hits and misses against a plain `HashMap` (SIGCOMM'26 §5.2), via
//! `cargo run --release -p pxbench --bin pmtu-cache`.
//!
//! `rule-manager`: the asynchronous rule manager's update rate, and a worker's throughput while
//! it runs, against a worker making the rule calls itself, on the simulated NIC (SIGCOMM'26
//! §4.4), via `cargo run --release -p pxbench --bin rule-manager`.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::{build_ebpf, cargo, deps, describe, run_status};

/// The benchmarks `cargo xtask bench` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchKind {
    /// pxio's merge engine against DPDK's rte_gro, six flow-count scenarios.
    Merge,
    /// Plain UDP against PX-caravans (eBPF-decapsulated, or read whole) at a receiver.
    Caravan,
    /// F-PMTUD's PMTU cache: Bloom filter false-positive rate, lookup ns of hits and misses.
    PmtuCache,
    /// The px_flow rule manager: update rate, worker throughput while updates run.
    RuleManager,
}

impl BenchKind {
    /// The name on the command line.
    fn name(self) -> &'static str {
        match self {
            BenchKind::Merge => "merge",
            BenchKind::Caravan => "caravan",
            BenchKind::PmtuCache => "pmtu-cache",
            BenchKind::RuleManager => "rule-manager",
        }
    }

    /// Whether the benchmark needs root: an EAL, or namespaces and eBPF. The PMTU cache runs in
    /// plain memory.
    fn needs_root(self) -> bool {
        match self {
            BenchKind::Merge | BenchKind::Caravan => true,
            BenchKind::PmtuCache | BenchKind::RuleManager => false,
        }
    }

    /// The `pxbench` binary that runs this benchmark.
    fn binary(self) -> &'static str {
        match self {
            BenchKind::Merge => "merge",
            BenchKind::Caravan => "caravan-bench",
            BenchKind::PmtuCache => "pmtu-cache",
            BenchKind::RuleManager => "rule-manager",
        }
    }
}

/// Runs `cargo xtask bench`: deps, then the benchmark's binary, built in release mode.
pub fn run(what: BenchKind, json: Option<PathBuf>, extra: &[String]) -> Result<()> {
    if what.needs_root() && !nix::unistd::geteuid().is_root() {
        bail!(
            "xtask bench: the benchmarks start a DPDK EAL (with --no-huge) or network namespaces \
             and eBPF; run as root (e.g. `sudo cargo xtask bench {}`)",
            what.name()
        );
    }
    deps::run()?;
    if what == BenchKind::Caravan {
        // The caravan crate embeds the object at build time.
        build_ebpf::run()?;
    }
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "-p",
        "pxbench",
        "--bin",
        what.binary(),
        "--",
    ]);
    if let Some(path) = json {
        cmd.arg("--json").arg(path);
    }
    cmd.args(extra);
    println!("==> {}", describe(&cmd));
    run_status(&mut cmd)
}
