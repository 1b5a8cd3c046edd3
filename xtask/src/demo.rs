//! `cargo xtask demo [--json FILE] [--plot FILE.svg]`: the newcomer's first command. It installs
//! what is missing, builds the eBPF caravan decapsulator, pxgw, fpmtud and the gateway lab
//! (`labs/gateway`) in release mode, and runs the lab (`pxgw-lab demo`): two network namespaces
//! with real Linux TCP/UDP stacks, pxgw between them, real traffic, a results table, the same
//! transfers through a Linux bridge for comparison, and (with `--plot`) the figure: frame sizes
//! outside and inside, yield over time, added delay.

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::progress::Progress;
use crate::{build_ebpf, cargo, deps, describe, run_status};

/// Runs the demo.
pub fn run(json: Option<PathBuf>, plot: Option<PathBuf>, extra: &[String]) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("xtask demo: the lab creates network namespaces and DPDK ports; run it as root");
    }
    let mut progress = Progress::new("demo", 4);
    progress.step("checking what is installed");
    progress.quiet(deps::ensure_all)?;
    // The inside host receives caravans through the eBPF decapsulator: build it, so the demo
    // shows the whole system (the caravan crate embeds the object at build time).
    progress.run(
        "building the eBPF caravan decapsulator (crates/caravan-ebpf)",
        &mut build_ebpf::command()?,
    )?;
    build_ebpf::check_object()?;
    let mut build = cargo();
    build.args([
        "build",
        "--release",
        "-j2",
        "-p",
        "pxgw",
        "-p",
        "fpmtud",
        "-p",
        "gateway-lab",
        "--bins",
    ]);
    progress.run(
        "building pxgw, fpmtud and the gateway lab (release)",
        &mut build,
    )?;
    progress.step("running the lab");
    progress.finish();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let mut lab = std::process::Command::new(target.join("release").join("pxgw-lab"));
    lab.arg("demo");
    if let Some(path) = json {
        lab.arg("--json").arg(path);
    }
    if let Some(path) = plot {
        lab.arg("--plot").arg(path);
    }
    lab.args(extra);
    println!("==> {}", describe(&lab));
    run_status(&mut lab)
}
