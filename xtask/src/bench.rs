//! `cargo xtask bench KIND [--json FILE]`: runs a benchmark in release mode and prints its
//! table; with `--json FILE` the benchmark also writes its JSON report there.
//!
//! `merge`: pxio's merge engine against DPDK's `rte_gro` on the same deterministic traces
//! (SIGCOMM'26 §7.1): six flow counts under three schedules (Poisson TSO bursts, paced, round
//! robin), both engines given what a NIC gives and parsing headers on the clock, via
//! `cargo run --release -p pxbench --bin merge`.
//!
//! `caravan`: the receive cost of plain UDP (one `recv` per datagram, `recvmmsg`, `UDP_GRO`)
//! against PX-caravans, decapsulated by caravan-ebpf or read whole with `caravan::Reader` and
//! `caravan::BatchReader` (SIGCOMM'26 §7.2), between two network namespaces. It
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

use crate::progress::Progress;
use crate::{build_ebpf, cargo, deps, describe, run_status};

/// The benchmarks `cargo xtask bench` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BenchKind {
    /// pxio's merge engine against DPDK's rte_gro, six flow-count scenarios, three schedules.
    Merge,
    /// Plain UDP (recv, recvmmsg, UDP_GRO) against PX-caravans (eBPF-decapsulated, or read
    /// whole, one or many per syscall) at a receiver.
    Caravan,
    /// F-PMTUD's PMTU cache: Bloom filter false-positive rate, lookup ns of hits and misses.
    PmtuCache,
    /// The UPF, NAT and L4LB of px-nfs, plain against pxio and the 9000 B MTU bound.
    Nf,
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
            BenchKind::Nf => "nf",
            BenchKind::RuleManager => "rule-manager",
        }
    }

    /// Whether the benchmark needs root: an EAL, or namespaces and eBPF. The PMTU cache runs in
    /// plain memory.
    fn needs_root(self) -> bool {
        match self {
            BenchKind::Merge | BenchKind::Caravan | BenchKind::Nf => true,
            BenchKind::PmtuCache | BenchKind::RuleManager => false,
        }
    }

    /// The `pxbench` binary that runs this benchmark.
    fn binary(self) -> &'static str {
        match self {
            BenchKind::Merge => "merge",
            BenchKind::Caravan => "caravan-bench",
            BenchKind::PmtuCache => "pmtu-cache",
            BenchKind::Nf => "nf-bench",
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
    let steps = if what == BenchKind::Caravan { 4 } else { 3 };
    let mut progress = Progress::new("bench", steps);
    progress.step("checking what is installed");
    progress.quiet(deps::ensure_all)?;
    if what == BenchKind::Caravan {
        // The caravan crate embeds the object at build time.
        progress.run(
            "building the eBPF caravan decapsulator",
            &mut build_ebpf::command()?,
        )?;
        build_ebpf::check_object()?;
    }
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "-j2",
        "-p",
        "pxbench",
        "--bin",
        what.binary(),
    ]);
    progress.run(&format!("building {} (release)", what.binary()), &mut build)?;
    progress.step("running the benchmark");
    progress.finish();
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
