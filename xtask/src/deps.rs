//! `cargo xtask deps`: an idempotent installer for what the build and the tests need.
//!
//! Each [`Source`] checks what is already there and installs only what is missing, printing one
//! line per action. When nothing was needed it prints `deps: all present`.

use std::process::Command;

use anyhow::{bail, Result};

use crate::progress::Progress;
use crate::{on_path, run_output, run_status};

/// Debian packages the workspace needs.
const APT_PACKAGES: &[&str] = &[
    // Build: DPDK 22.11 headers and libraries (crates/dpdk-sys links them, found through
    // pkg-config), and the EAL's PMD plugins (net_af_packet, net_ring, ...) at run time.
    "dpdk",
    "dpdk-dev",
    "libdpdk-dev",
    "pkg-config",
    // Build: bindgen needs clang and libclang to generate the DPDK bindings.
    "clang",
    "libclang-dev",
    // Build: `cargo check` of fuzz/ (in `xtask test`) builds libfuzzer-sys, whose build script
    // compiles libFuzzer's C++ with `c++`; a fresh Debian has neither it nor libstdc++'s headers.
    "g++",
    // Test peers and lab tools: traffic (iperf3, socat, ping), capture (tcpdump), a real PMTUD
    // peer (scamper), ICMP black-holing (nftables), offload control (ethtool), hand-made packets
    // (python3-scapy), BPF inspection (bpftool), namespaces/veths/routes (iproute2).
    "iperf3",
    "tcpdump",
    "scamper",
    "nftables",
    "socat",
    "iputils-ping",
    "ethtool",
    "python3-scapy",
    "bpftool",
    "iproute2",
    // The scale-out lab's routing control plane: zebra, bgpd and bfdd (FRR 8.4), which the lab
    // starts in each router namespace with its own configuration and sockets.
    "frr",
    // What an operator sees (the gateway lab): the Prometheus scrape (curl), DPDK's telemetry
    // client (dpdk-telemetry.py, in the dpdk package above), and the font the figure's text is
    // measured with (plotters).
    "curl",
    "fonts-dejavu-core",
    // `cargo xtask bench instructions`: exact instruction counts of the merge engines
    // (callgrind), where this VM has no hardware counters.
    "valgrind",
    // `cargo xtask build-ebpf` (crates/caravan-ebpf): Debian's rustc 1.96 built on LLVM 22 with
    // its library source (for `-Z build-std=core`), and LLVM 22 for building bpf-linker.
    "rustc-web",
    "cargo-web",
    "rust-web-src",
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
];

/// bpf-linker, built on Debian's LLVM 22 (the same LLVM as rustc-web), for `build-ebpf`. The
/// version is pinned (and `--locked`) so a fresh machine builds what was verified here, not a
/// newer release that may need a newer Rust.
const BPF_LINKER: CargoInstall = CargoInstall {
    binary: "bpf-linker",
    krate: "bpf-linker",
    args: &[
        "--version",
        "=0.13.0",
        "--locked",
        "--no-default-features",
        "--features",
        "llvm-22",
    ],
    env: &[("LLVM_PREFIX", "/usr/lib/llvm-22")],
};

/// cargo-fuzz, for `cargo xtask fuzz` (and its step in `cargo xtask test`). Pinned and
/// `--locked`, like bpf-linker; it builds with the stable toolchain and drives the nightly one.
const CARGO_FUZZ: CargoInstall = CargoInstall {
    binary: "cargo-fuzz",
    krate: "cargo-fuzz",
    args: &["--version", "=0.13.1", "--locked"],
    env: &[],
};

/// The rustup toolchain cargo-fuzz runs the targets with (libFuzzer's instrumentation needs
/// `-Z` flags).
const FUZZ_TOOLCHAIN: &str = "nightly";

/// A tool installed with `cargo install` unless `<binary> --version` already runs.
struct CargoInstall {
    /// The executable `cargo install` puts on PATH.
    binary: &'static str,
    /// The crate to install.
    krate: &'static str,
    /// Further `cargo install` arguments.
    args: &'static [&'static str],
    /// Environment for the build.
    env: &'static [(&'static str, &'static str)],
}

/// rustup components `cargo xtask test` uses (`cargo fmt`, `cargo clippy`).
const RUSTUP_COMPONENTS: &[&str] = &["rustfmt", "clippy"];

/// Seconds apt-get waits for a dpkg/apt lock held by another process before giving up.
const APT_LOCK_TIMEOUT_SECS: u32 = 300;

/// One kind of dependency that `deps` knows how to check and install.
///
/// Extension point: to add a new kind of dependency (for example `bpf-linker` through
/// `cargo install`, needed by `cargo xtask build-ebpf`), add a variant here, implement its check
/// and install in [`Source::ensure`], and list it in [`SOURCES`].
enum Source {
    /// Debian packages, installed with apt-get (needs root).
    Apt(&'static [&'static str]),
    /// rustup components, installed with `rustup component add` (only when rustup is on PATH).
    Rustup(&'static [&'static str]),
    /// A binary crate, installed with `cargo install` (after the Debian packages it builds on).
    CargoInstall(&'static CargoInstall),
    /// A rustup toolchain, installed with `rustup toolchain install --profile minimal`.
    Toolchain(&'static str),
}

/// Everything `deps` ensures, in order.
const SOURCES: &[Source] = &[
    Source::Apt(APT_PACKAGES),
    Source::Rustup(RUSTUP_COMPONENTS),
    Source::CargoInstall(&BPF_LINKER),
    Source::Toolchain(FUZZ_TOOLCHAIN),
    Source::CargoInstall(&CARGO_FUZZ),
];

impl Source {
    /// What this source is, for the progress line.
    fn describe(&self) -> String {
        match self {
            Source::Apt(p) => format!("{} Debian packages", p.len()),
            Source::Rustup(c) => format!("rustup components ({})", c.join(", ")),
            Source::CargoInstall(t) => format!("{} (cargo install)", t.krate),
            Source::Toolchain(t) => format!("the {t} toolchain (cargo xtask fuzz)"),
        }
    }

    /// Installs whatever of this source is missing; returns the number of actions taken.
    fn ensure(&self) -> Result<usize> {
        match self {
            Source::Apt(packages) => ensure_apt(packages),
            Source::Rustup(components) => ensure_rustup(components),
            Source::CargoInstall(tool) => ensure_cargo_install(tool),
            Source::Toolchain(name) => ensure_toolchain(name),
        }
    }
}

/// Runs `cargo xtask deps`, one progress step per kind of dependency.
pub fn run() -> Result<()> {
    let mut progress = Progress::new("deps", SOURCES.len() as u64);
    let mut actions = 0;
    for source in SOURCES {
        progress.step(&source.describe());
        actions += progress.quiet(|| source.ensure())?;
    }
    progress.finish();
    if actions == 0 {
        println!("deps: all present");
    }
    Ok(())
}

/// Everything `deps` ensures, without a progress bar of its own (for tasks that have one).
pub fn ensure_all() -> Result<()> {
    for source in SOURCES {
        source.ensure()?;
    }
    Ok(())
}

/// What `cargo xtask fuzz` needs: the nightly toolchain and cargo-fuzz (a subset of
/// [`run`], for the fuzz command alone).
pub fn ensure_fuzzing() -> Result<()> {
    ensure_toolchain(FUZZ_TOOLCHAIN)?;
    ensure_cargo_install(&CARGO_FUZZ)?;
    Ok(())
}

/// Installs the rustup toolchain `name` unless `rustup toolchain list` shows it.
fn ensure_toolchain(name: &str) -> Result<usize> {
    if !on_path("rustup") {
        bail!(
            "deps: rustup is not on PATH; it is needed for the {name} toolchain (cargo xtask fuzz)"
        );
    }
    let listed = run_output(Command::new("rustup").args(["toolchain", "list"]))?;
    // `nightly-x86_64-unknown-linux-gnu (default)`
    let present = listed.lines().any(|l| {
        l.split_whitespace()
            .next()
            .is_some_and(|t| t == name || t.strip_prefix(name).is_some_and(|r| r.starts_with('-')))
    });
    if present {
        return Ok(0);
    }
    println!("deps: rustup toolchain install {name} --profile minimal");
    run_status(Command::new("rustup").args([
        "toolchain",
        "install",
        name,
        "--profile",
        "minimal",
    ]))?;
    Ok(1)
}

/// Whether dpkg reports `package` as fully installed.
fn dpkg_installed(package: &str) -> Result<bool> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .map_err(|e| anyhow::anyhow!("cannot run dpkg-query (is this Debian?): {e}"))?;
    // dpkg-query exits non-zero for a package it has never heard of: that is "missing".
    Ok(out.status.success()
        && String::from_utf8_lossy(&out.stdout).trim() == "install ok installed")
}

/// Installs the missing ones among `packages` with apt-get.
fn ensure_apt(packages: &[&str]) -> Result<usize> {
    let mut missing = Vec::new();
    for &package in packages {
        if !dpkg_installed(package)? {
            missing.push(package);
        }
    }
    if missing.is_empty() {
        return Ok(0);
    }
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "deps: missing Debian packages: {}; run `cargo xtask deps` as root to install them",
            missing.join(" ")
        );
    }
    let lock_timeout = format!("DPkg::Lock::Timeout={APT_LOCK_TIMEOUT_SECS}");
    println!("deps: apt-get update");
    run_status(Command::new("apt-get").args(["-o", &lock_timeout, "update"]))?;
    println!("deps: apt-get install {}", missing.join(" "));
    run_status(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args([
                "-o",
                &lock_timeout,
                "install",
                "-y",
                "--no-install-recommends",
            ])
            .args(&missing),
    )?;
    if missing.contains(&"frr") {
        stop_frr_service()?;
    }
    Ok(2)
}

/// Debian's `frr` package enables and starts its service, a routing daemon in the machine's
/// own namespace. The labs run their own daemons in their namespaces and need none of it, so
/// the service is stopped and disabled.
fn stop_frr_service() -> Result<()> {
    if std::path::Path::new("/run/systemd/system").exists() {
        println!("deps: systemctl disable --now frr (the labs run their own FRR daemons)");
        run_status(Command::new("systemctl").args(["disable", "--now", "frr.service"]))?;
    } else if std::path::Path::new("/etc/init.d/frr").exists() {
        println!("deps: /etc/init.d/frr stop (the labs run their own FRR daemons)");
        run_status(Command::new("/etc/init.d/frr").arg("stop"))?;
    }
    Ok(())
}

/// Adds the missing ones among `components` to the active rustup toolchain.
fn ensure_rustup(components: &[&str]) -> Result<usize> {
    if !on_path("rustup") {
        return Ok(0);
    }
    let listed = run_output(Command::new("rustup").args(["component", "list", "--installed"]))?;
    // Installed components are listed with their target triple, e.g. `clippy-x86_64-unknown-linux-gnu`.
    let installed = |component: &str| {
        listed.lines().map(str::trim).any(|line| {
            line == component
                || line
                    .strip_prefix(component)
                    .is_some_and(|rest| rest.starts_with('-'))
        })
    };
    let missing: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !installed(c))
        .collect();
    if missing.is_empty() {
        return Ok(0);
    }
    println!("deps: rustup component add {}", missing.join(" "));
    run_status(
        Command::new("rustup")
            .args(["component", "add"])
            .args(&missing),
    )?;
    Ok(1)
}

/// Installs `tool` with `cargo install` unless `<binary> --version` already succeeds.
fn ensure_cargo_install(tool: &CargoInstall) -> Result<usize> {
    let present = Command::new(tool.binary)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if present {
        return Ok(0);
    }
    println!(
        "deps: cargo install {} {} (takes a few minutes)",
        tool.krate,
        tool.args.join(" ")
    );
    let mut cmd = crate::cargo();
    cmd.args(["install", "-j2", tool.krate]).args(tool.args);
    for (key, value) in tool.env {
        cmd.env(key, value);
    }
    run_status(&mut cmd)?;
    Ok(1)
}
