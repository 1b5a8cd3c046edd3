//! `cargo xtask demo [--json FILE]`: the newcomer's first command. It installs what is missing,
//! builds pxgw, fpmtud and the gateway lab (`labs/gateway`) in release mode, and runs the lab
//! (`pxgw-lab demo`): two network namespaces with real Linux TCP/UDP stacks, pxgw between them,
//! real traffic, a results table, and the same transfers through a Linux bridge for comparison.

use std::path::PathBuf;

use anyhow::{bail, Result};

use crate::{cargo, deps, describe, run_status};

/// Runs the demo.
pub fn run(json: Option<PathBuf>, extra: &[String]) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("xtask demo: the lab creates network namespaces and DPDK ports; run it as root");
    }
    deps::run()?;
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
    println!("==> {}", describe(&build));
    run_status(&mut build)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    let mut lab = std::process::Command::new(target.join("release").join("pxgw-lab"));
    lab.arg("demo");
    if let Some(path) = json {
        lab.arg("--json").arg(path);
    }
    lab.args(extra);
    println!("==> {}", describe(&lab));
    run_status(&mut lab)
}
