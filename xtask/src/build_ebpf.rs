//! `cargo xtask build-ebpf`: builds `crates/caravan-ebpf` for `bpfel-unknown-none`.
//!
//! It uses Debian's `rustc-web` (rustc 1.96 on LLVM 22, with its library source in
//! `rust-web-src`), because rustup's toolchains here have no `rust-src` for `-Z build-std`, and
//! `bpf-linker` built on LLVM 22 (both installed by `cargo xtask deps`). The object lands in
//! `target/bpf/bpfel-unknown-none/release/caravan-ebpf`, where `crates/caravan/build.rs` embeds
//! it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Result};

use crate::{on_path, run_status};

/// Debian's rustc and cargo (packages rustc-web, cargo-web).
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const DEBIAN_CARGO: &str = "/usr/bin/cargo";

/// rustflags for the eBPF build, as `CARGO_ENCODED_RUSTFLAGS` (0x1f-separated).
const RUSTFLAGS: &[&str] = &[
    "--cfg",
    "bpf_target_arch=\"x86_64\"",
    "-Cdebuginfo=2",
    "-Clink-arg=--btf",
];

/// The workspace root (xtask's parent directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where the object lands.
pub fn object_path() -> PathBuf {
    workspace_root().join("target/bpf/bpfel-unknown-none/release/caravan-ebpf")
}

/// Runs `cargo xtask build-ebpf`.
pub fn run() -> Result<()> {
    run_status(&mut command()?)?;
    let object = check_object()?;
    println!("build-ebpf: {}", object.display());
    Ok(())
}

/// The command that builds the object (cargo is incremental: quick when it is up to date);
/// fails when the tools are missing.
pub fn command() -> Result<Command> {
    for tool in [DEBIAN_RUSTC, DEBIAN_CARGO] {
        if !Path::new(tool).is_file() {
            bail!("build-ebpf: {tool} is missing; run `cargo xtask deps` (rustc-web, cargo-web)");
        }
    }
    if !on_path("bpf-linker") {
        bail!("build-ebpf: bpf-linker is not on PATH; run `cargo xtask deps`");
    }
    let root = workspace_root();
    let mut cmd = Command::new(DEBIAN_CARGO);
    cmd.current_dir(root.join("crates/caravan-ebpf"))
        .env("RUSTC", DEBIAN_RUSTC)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS.join("\u{1f}"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTUP_TOOLCHAIN")
        .args([
            "build",
            "--release",
            "-j2",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--target-dir",
        ])
        .arg(root.join("target/bpf"));
    Ok(cmd)
}

/// The object's path, once a build has made it.
pub fn check_object() -> Result<PathBuf> {
    let object = object_path();
    if !object.is_file() {
        bail!(
            "build-ebpf: the build succeeded but {} is missing",
            object.display()
        );
    }
    Ok(object)
}
