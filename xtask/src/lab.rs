//! `cargo xtask lab KIND [--json FILE]`: installs what is missing, builds the lab's binaries in
//! release mode and runs the lab, which prints its table (and writes its JSON report).
//!
//! `pmtud`: F-PMTUD next to scamper's PMTUD and the kernel's ICMP-based PMTUD on a real path
//! A —9000— R1 —4000— R2 —1400— B, with ICMP allowed and black-holed (SIGCOMM'26 §5.2, §7.4),
//! via `fpmtud-lab run` (`labs/pmtud`).
//!
//! `stress`: hostile input against pxgw while sha256-checked transfers run both ways — crafted
//! TCP sequences compared with a Linux receiver behind a bridge, floods of 1 M frames (new
//! flows, spoofed SYNs, UDP), SIGINT and a restart mid-transfer, mempool exhaustion, attacks on
//! the border (a tiny MSS, a spoofed SYN, ICMP too-big errors, a caravan formed outside, stalled
//! metrics clients) — via `pxgw-stress run` (`labs/stress`).
//!
//! `scale-out`: pxgw instances between two Linux routers that spread flows over them with ECMP
//! (5-tuple hash): symmetric and deliberately asymmetric paths in IPv4 and IPv6, then FRR's BGP
//! and BFD across every instance steering the routes through 30 s at full load (no BFD flap), a
//! crash (SIGKILL), a planned drain and an instance added under load — via `pxgw-scaleout run`
//! (`labs/scaleout`, docs/scale-out.md).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Result};
use clap::ValueEnum;

use crate::progress::Progress;
use crate::{build_ebpf, cargo, deps, describe, run_status};

/// The labs `cargo xtask lab` knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LabKind {
    /// F-PMTUD, scamper and the kernel's PMTUD, with and without an ICMP black hole.
    Pmtud,
    /// Hostile input against pxgw: crafted sequences, floods, a restart, mempool exhaustion.
    Stress,
    /// pxgw instances behind ECMP routers: symmetric and asymmetric paths, then FRR's BGP and
    /// BFD through steady load, a crash, a drain and an added instance.
    ScaleOut,
}

impl LabKind {
    /// The packages whose binaries the lab needs: the product it runs, and the lab itself.
    fn packages(self) -> &'static [&'static str] {
        match self {
            LabKind::Pmtud => &["fpmtud", "pmtud-lab"],
            LabKind::Stress => &["pxgw", "stress-lab"],
            LabKind::ScaleOut => &["pxgw", "scaleout-lab"],
        }
    }

    /// The lab's binary in that package.
    fn binary(self) -> &'static str {
        match self {
            LabKind::Pmtud => "fpmtud-lab",
            LabKind::Stress => "pxgw-stress",
            LabKind::ScaleOut => "pxgw-scaleout",
        }
    }
}

/// Runs `cargo xtask lab`: deps, a release build of the package's binaries, then the lab.
pub fn run(what: LabKind, json: Option<PathBuf>) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "xtask lab: the lab creates network namespaces and nftables tables; run it as root \
             (e.g. `sudo cargo xtask lab stress`)"
        );
    }
    let mut progress = Progress::new("lab", 4);
    progress.step("checking what is installed");
    progress.quiet(deps::ensure_all)?;
    // The labs' crates link the caravan crate, which embeds the eBPF object.
    progress.run(
        "building the eBPF caravan decapsulator",
        &mut build_ebpf::command()?,
    )?;
    build_ebpf::check_object()?;
    let mut build = cargo();
    build.args(["build", "--release", "-j2"]);
    for package in what.packages() {
        build.args(["-p", package]);
    }
    build.arg("--bins");
    progress.run(
        &format!("building {} (release)", what.packages().join(", ")),
        &mut build,
    )?;
    progress.step("running the lab");
    progress.finish();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let mut lab = Command::new(target.join("release").join(what.binary()));
    lab.arg("run");
    if let Some(path) = json {
        lab.arg("--json").arg(path);
    }
    println!("==> {}", describe(&lab));
    run_status(&mut lab)
}
