//! `cargo xtask test`: the one test command.
//!
//! Runs, in order and stopping at the first failure: deps, build-ebpf, `cargo fmt --check`, clippy with
//! `-D warnings`, the workspace's unit tests, then each of [`INTEGRATION_SUITES`].

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::{build_ebpf, cargo, deps, run_status};

/// Parallel build jobs for cargo: the development machines have 2 cores.
const JOBS: &str = "-j2";

/// An integration suite: a named command run after the unit tests, as root.
struct Suite {
    /// Name shown in the step header and the summary.
    name: &'static str,
    /// Program to run; `"cargo"` means `$CARGO`.
    program: &'static str,
    /// Arguments to `program`.
    args: &'static [&'static str],
}

/// Integration suites, run in order after the unit tests.
///
/// Append new suites here, e.g.
/// `Suite { name: "netlab", program: "cargo", args: &["test", "-p", "netlab", "--", "--ignored"] }`.
const INTEGRATION_SUITES: &[Suite] = &[
    // The gateway lab with smaller transfers: pxgw between two namespaces, real TCP/UDP stacks,
    // sha256 both ways, yield, frame sizes, ping, clean exit without leaked mbufs.
    Suite {
        name: "pxgw-build",
        program: "cargo",
        args: &[
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
        ],
    },
    Suite {
        name: "pxgw-lab",
        program: "target/release/pxgw-lab",
        args: &["test"],
    },
    // The PMTUD lab: A —9000— R1 —4000— R2 —1400— B, F-PMTUD next to scamper and the kernel's
    // PMTUD, ICMP allowed and black-holed. Asserts that fpmtud finds the bottleneck in one probe
    // round trip either way, ignores a report with a bad nonce, and falls back without a
    // responder (and that the black hole really drops every PTB).
    Suite {
        name: "fpmtud-build",
        program: "cargo",
        args: &[
            "build",
            "--release",
            "-j2",
            "-p",
            "fpmtud",
            "-p",
            "pmtud-lab",
            "--bins",
        ],
    },
    Suite {
        name: "fpmtud-lab",
        program: "target/release/fpmtud-lab",
        args: &["test"],
    },
    // The merge benchmark from a clean build, small: both engines on real traces, every output
    // byte verified against the flows' streams. It checks that the bench works and that pxio's
    // output is correct on bench traffic; it asserts no timing.
    Suite {
        name: "bench-smoke",
        program: "cargo",
        args: &[
            "run",
            "--release",
            "-j2",
            "-p",
            "pxbench",
            "--bin",
            "merge",
            "--",
            "--flows",
            "8",
            "--flows",
            "800",
            "--reps",
            "1",
            "--verify",
            "--min-packets",
            "20000",
        ],
    },
];

/// What one step of the test sequence does.
enum Action {
    /// `cargo xtask deps`, in process.
    Deps,
    /// `cargo xtask build-ebpf`, in process.
    BuildEbpf,
    /// An external command.
    Command(Command),
}

/// One step of the test sequence.
struct Step {
    /// Name shown in the header (`==> name`), failure message and summary.
    name: String,
    /// What the step runs.
    action: Action,
}

impl Step {
    /// A step that runs `$CARGO` with `args`.
    fn cargo(name: &str, args: &[&str]) -> Self {
        let mut cmd = cargo();
        cmd.args(args);
        Step {
            name: name.to_owned(),
            action: Action::Command(cmd),
        }
    }

    /// A step for an integration suite.
    fn suite(suite: &Suite) -> Self {
        let mut cmd = if suite.program == "cargo" {
            cargo()
        } else {
            Command::new(suite.program)
        };
        cmd.args(suite.args);
        Step {
            name: suite.name.to_owned(),
            action: Action::Command(cmd),
        }
    }

    /// Runs the step.
    fn run(&mut self) -> Result<()> {
        match &mut self.action {
            Action::Deps => deps::run(),
            Action::BuildEbpf => build_ebpf::run(),
            Action::Command(cmd) => run_status(cmd),
        }
    }
}

/// Runs `cargo xtask test`.
pub fn run() -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "xtask test: the tests create network namespaces and DPDK vdevs; run as root \
             (e.g. `sudo .ci/run`)"
        );
    }

    let mut steps = vec![
        Step {
            name: "deps".to_owned(),
            action: Action::Deps,
        },
        // Before clippy and the tests: crates/caravan embeds the object it builds.
        Step {
            name: "build-ebpf".to_owned(),
            action: Action::BuildEbpf,
        },
        Step::cargo("fmt", &["fmt", "--all", "--", "--check"]),
        Step::cargo(
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                JOBS,
                "--",
                "-D",
                "warnings",
            ],
        ),
        Step::cargo("test", &["test", "--workspace", JOBS]),
    ];
    steps.extend(INTEGRATION_SUITES.iter().map(Step::suite));

    let total = Instant::now();
    let mut done: Vec<(String, Duration)> = Vec::new();
    for step in &mut steps {
        println!("==> {}", step.name);
        let start = Instant::now();
        let result = step.run();
        let elapsed = start.elapsed();
        if let Err(err) = result {
            eprintln!("{err:#}");
            print_summary(&done, Some((&step.name, elapsed)), total.elapsed());
            bail!("xtask test: step {} failed", step.name);
        }
        println!("<== {} ok ({:.1} s)", step.name, elapsed.as_secs_f64());
        done.push((step.name.clone(), elapsed));
    }
    print_summary(&done, None, total.elapsed());
    Ok(())
}

/// Prints one line per step that ran, then the total.
fn print_summary(done: &[(String, Duration)], failed: Option<(&str, Duration)>, total: Duration) {
    println!();
    println!("xtask test summary:");
    for (name, elapsed) in done {
        println!("  ok      {name:<24} {:>8.1} s", elapsed.as_secs_f64());
    }
    if let Some((name, elapsed)) = failed {
        println!("  FAILED  {name:<24} {:>8.1} s", elapsed.as_secs_f64());
    }
    let verdict = if failed.is_some() { "FAILED" } else { "ok" };
    println!(
        "  {verdict:<7} {:<24} {:>8.1} s",
        "total",
        total.as_secs_f64()
    );
}
