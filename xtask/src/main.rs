//! `cargo xtask`: developer tasks for the PacketExpress workspace.
//!
//! * `cargo xtask deps` installs the Debian packages and rustup components the build and the
//!   tests need, and only those that are missing.
//! * `cargo xtask build-ebpf` builds the caravan eBPF object (`crates/caravan-ebpf`) with
//!   Debian's rustc-web and bpf-linker; `crates/caravan` embeds it.
//! * `cargo xtask test` is the one test command (`.ci/run` calls it): the documentation's links,
//!   deps, fmt, clippy, rustdoc, build checks, the tests (and the ignored ones this machine can
//!   run), then the integration suites; its summary counts and names every test it skipped.
//! * `cargo xtask bench merge|gateway|caravan|pmtu-cache|nf|rule-manager [--json FILE]` runs a
//!   benchmark in release mode and prints its table (and writes its JSON report);
//!   `instructions` and `gateway-instructions` count the merge and gateway benchmarks' timed
//!   sections under callgrind.
//! * `cargo xtask lab pmtud|stress|scale-out [--json FILE]` runs a namespace lab in release mode and
//!   prints its table (and writes its JSON report): F-PMTUD, scamper and the kernel's PMTUD,
//!   with and without an ICMP black hole; hostile input against pxgw (crafted TCP sequences
//!   compared with a Linux receiver, floods, a restart, mempool exhaustion).
//! * `cargo xtask fuzz [--seconds N] [TARGET...]` runs the cargo-fuzz targets of `fuzz/` for N
//!   seconds each and prints executions and crashes per target; a crash fails it.

#![forbid(unsafe_code)]

mod bench;
mod build_ebpf;
mod demo;
mod deps;
mod fuzz;
mod lab;
mod links;
mod progress;
mod test;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

/// Command-line interface of `cargo xtask`.
#[derive(Debug, Parser)]
#[command(
    bin_name = "cargo xtask",
    about = "Developer tasks for the PacketExpress workspace"
)]
struct Cli {
    /// The task to run.
    #[command(subcommand)]
    task: Task,
}

/// The tasks `cargo xtask` knows.
#[derive(Debug, Subcommand)]
enum Task {
    /// Install missing build and test dependencies (Debian packages, rustup components).
    Deps,
    /// Build the caravan eBPF object (crates/caravan-ebpf) with rustc-web and bpf-linker.
    BuildEbpf,
    /// Run the full test sequence: deps, fmt, clippy, rustdoc, build checks, the tests (and the
    /// ignored ones this machine can run), integration suites (as root).
    Test,
    /// The newcomer's first command: pxgw between two network namespaces, with real traffic
    /// (installs what is missing first; as root).
    Demo {
        /// Also write the results as JSON to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Draw the figure (frame sizes outside and inside, yield over time, added delay) as
        /// an SVG to FILE.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
        /// Extra arguments for `pxgw-lab demo` (e.g. `-- --file-mb 64`).
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// Run a benchmark in release mode and print its table (as root).
    Bench {
        /// Which benchmark.
        #[arg(value_enum)]
        what: bench::BenchKind,
        /// Also write the JSON report to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        /// Further arguments for the benchmark binary, after `--` (e.g. `-- --flows 64`).
        #[arg(last = true)]
        extra: Vec<String>,
    },
    /// Run a namespace lab in release mode and print its table (installs what is missing
    /// first; as root).
    Lab {
        /// Which lab.
        #[arg(value_enum)]
        what: lab::LabKind,
        /// Also write the JSON report to FILE.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
    /// Run the cargo-fuzz targets of fuzz/ (all, or those named) for N seconds each, from their
    /// committed seeds, and print executions and crashes per target (installs the nightly
    /// toolchain and cargo-fuzz when missing).
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Targets to run (default: every target in fuzz/Cargo.toml).
        targets: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.task {
        Task::Deps => deps::run(),
        Task::BuildEbpf => build_ebpf::run(),
        Task::Test => test::run(),
        Task::Demo { json, plot, extra } => demo::run(json, plot, &extra),
        Task::Bench { what, json, extra } => bench::run(what, json, &extra),
        Task::Lab { what, json } => lab::run(what, json),
        Task::Fuzz { seconds, targets } => fuzz::run(seconds, &targets),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A `Command` for the cargo that runs this xtask (`$CARGO`), falling back to `cargo` on `PATH`.
fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Whether an executable named `name` is found in a directory of `PATH`.
fn on_path(name: impl AsRef<OsStr>) -> bool {
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| dir.join(name.as_ref()).is_file())
}

/// Runs `cmd` with inherited stdio and fails unless it exits successfully.
fn run_status(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed: {status}", describe(cmd));
    }
    Ok(())
}

/// Runs `cmd`, captures its stdout and returns it as text; fails unless it exits successfully.
fn run_output(cmd: &mut Command) -> Result<String> {
    let out = run_captured(cmd)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `cmd` and captures its stdout and stderr; fails, with its stderr, unless it exits
/// successfully.
fn run_captured(cmd: &mut Command) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}: {}",
            describe(cmd),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// A human-readable rendering of `cmd`'s program and arguments, for messages.
fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}
