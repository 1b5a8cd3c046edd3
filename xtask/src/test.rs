//! `cargo xtask test`: the one test command.
//!
//! Runs, in order and stopping at the first failure: the documentation's links, deps,
//! build-ebpf, `cargo fmt --check`, clippy with `-D warnings`, rustdoc with `-D warnings`,
//! `cargo check` of `fuzz/` and of pxio without its default features, the workspace's tests,
//! each of [`IGNORED_TESTS`] whose prerequisite this machine has, each of
//! [`INTEGRATION_SUITES`], then every fuzz target for [`FUZZ_SECONDS`] seconds
//! (`cargo xtask fuzz`), after the fuzz crate's own tests.
//!
//! No test disappears silently: the summary counts and names every test that was `#[ignore]`d in
//! the workspace run and did not pass in a later step, with the reason (a failed prerequisite
//! probe, or the test's own `#[ignore = "..."]` text when [`IGNORED_TESTS`] does not know it).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{build_ebpf, cargo, deps, describe, links, run_status};

/// Parallel build jobs for cargo: the development machines have 2 cores.
const JOBS: &str = "-j2";

/// Seconds each fuzz target runs in `cargo xtask test`.
const FUZZ_SECONDS: u64 = 30;

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
        // The figure too: it is drawn from the Prometheus scrapes the suite checks.
        args: &["test", "--plot", "target/pxgw-lab-test.svg"],
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
    // The stress lab, short (floods of 100 k frames; `cargo xtask lab stress` runs 1 M): crafted
    // TCP sequences (overlaps, bad and cancelling checksums, urgent data, data in SYNs, a RST
    // behind IPv6 destination options, wrapping sequence numbers, 802.1Q, flow labels) each
    // compared with what a Linux receiver behind a bridge reads, floods of new flows, spoofed
    // SYNs and UDP, SIGINT and a restart mid-transfer, mempool exhaustion; attacks on the
    // border, each on a pxgw of its own whose counters it checks: clients announcing MSS 48 and
    // 8 (64 KB intact in Linux's 48 B segments, mss.below_floor), a SYN spoofed on a running
    // transfer (frame sizes kept, mss.syn_ignored), ICMP too-big errors out of and in the window
    // (router.ptb_out_of_window, ptb_below_floor, ptb_learned), a caravan formed outside with
    // caravans off (one datagram inside, caravan.mark_cleared), 1000 stalled metrics clients and
    // one that never reads (a real scrape still answered); the clean yield at least 85 %.
    // sha256-checked transfers run both ways throughout, pxgw must not crash and must leak no
    // mbuf.
    Suite {
        name: "stress-build",
        program: "cargo",
        args: &[
            "build",
            "--release",
            "-j2",
            "-p",
            "pxgw",
            "-p",
            "stress-lab",
            "--bins",
        ],
    },
    Suite {
        name: "stress-lab",
        program: "target/release/pxgw-stress",
        args: &["test"],
    },
    // The scale-out lab, short (1 MB per connection; `cargo xtask lab scale-out` sends 8 MB):
    // two pxgw instances between Linux routers with ECMP, 16 connections each way per run,
    // symmetric and asymmetric paths in IPv4 and IPv6 (every byte sha256-checked, both
    // instances carrying, the inside host's MSS raised, one-way learning only where the paths
    // are asymmetric), the control without one-way learning; then FRR (bgpd, bfdd, zebra in
    // each router) steers the routes: 5 s at full load without a BFD flap, a crash (SIGKILL,
    // BFD withdraws the instance, every byte arrives), a drain (BGP sessions shut, SIGINT: no
    // retransmission timeout, no mbuf leaked) and a third instance added under load.
    Suite {
        name: "scaleout-build",
        program: "cargo",
        args: &[
            "build",
            "--release",
            "-j2",
            "-p",
            "pxgw",
            "-p",
            "scaleout-lab",
            "--bins",
        ],
    },
    Suite {
        name: "scaleout-lab",
        program: "target/release/pxgw-scaleout",
        args: &["test"],
    },
    // The merge benchmark from a clean build, small: both engines on real traces at both delay
    // budgets, every output byte verified against the flows' streams, and the JSON report
    // written (the run fails unless rte_gro's parse and TX preparation were counted in its
    // timed region, and its two parses merged alike). It checks that the bench works and that
    // pxio's output is correct on bench traffic; it asserts no timing.
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
            "--delay-us",
            "20",
            "--delay-us",
            "100",
            "--reps",
            "1",
            "--verify",
            "--min-packets",
            "20000",
            "--json",
            "target/bench-smoke-merge.json",
        ],
    },
    // The same on IPv6 at a 4000 B iMTU, where cuts leave remainders: pxio's
    // output verified byte for byte; rte_gro (DPDK 22.11) passes IPv6 through.
    Suite {
        name: "bench-smoke-v6",
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
            "--ipv6",
            "--imtu",
            "4000",
            "--flows",
            "8",
            "--flows",
            "800",
            "--schedule",
            "poisson-tso",
            "--reps",
            "1",
            "--verify",
            "--min-packets",
            "20000",
        ],
    },
    // The gateway bench, small (`--quick`: 100 flows, 12,000 frames per scenario, one run per
    // side): pxgw's pipeline, pxio alone, the DPDK gateway and the floor on every scenario kind,
    // both families, the NIC profile with and without LRO and none. It fails unless every
    // side's outputs account for every input byte (none lost, duplicated or changed) and the
    // JSON has every field of every scenario (`--check`). No timing is asserted.
    Suite {
        name: "gateway-bench-smoke",
        program: "cargo",
        args: &[
            "run",
            "--release",
            "-j2",
            "-p",
            "pxbench",
            "--bin",
            "gateway-bench",
            "--",
            "--quick",
            "--json",
            "target/gateway-bench-smoke.json",
            "--check",
        ],
    },
    // The caravan receive benchmark, small: all six receive paths (plain recv, recvmmsg,
    // UDP_GRO, eBPF decapsulation, Reader, BatchReader) between two namespaces; fails unless
    // each delivered every datagram intact and in order. No timing is asserted.
    Suite {
        name: "caravan-bench-smoke",
        program: "cargo",
        args: &[
            "run",
            "--release",
            "-j2",
            "-p",
            "pxbench",
            "--bin",
            "caravan-bench",
            "--",
            "--datagrams",
            "20000",
            "--reps",
            "1",
            "--quiet-wait",
            "1",
            "--check",
        ],
    },
    Suite {
        name: "caravan-bench-smoke-v6",
        program: "cargo",
        args: &[
            "run",
            "--release",
            "-j2",
            "-p",
            "pxbench",
            "--bin",
            "caravan-bench",
            "--",
            "--ipv6",
            "--datagrams",
            "20000",
            "--reps",
            "1",
            "--quiet-wait",
            "1",
            "--check",
        ],
    },
];

/// Tests that are `#[ignore = "needs ..."]` because they need something a machine may lack: the
/// workspace run skips them, and `xtask test` runs them (`cargo test -p <package> --test <target>
/// -- --ignored`) where `needs` is found, or names them as skipped. A test ignored for being slow
/// belongs here too, with a prerequisite that says so.
struct IgnoredTests {
    /// The package of the test target.
    package: &'static str,
    /// The integration-test target (`tests/<target>.rs`) whose ignored tests these are.
    target: &'static str,
    /// What they need, probed before running them.
    needs: Prerequisite,
}

/// The ignored tests `xtask test` knows how to run, in order, after the workspace's tests.
const IGNORED_TESTS: &[IgnoredTests] = &[
    // F-PMTUD across real Linux forwarding between namespaces.
    IgnoredTests {
        package: "fpmtud",
        target: "namespaces",
        needs: Prerequisite::Root,
    },
    // The caravan file-transfer example through pxgw between the gateway lab's namespaces
    // (the workspace's tests have built target/debug/pxgw by then).
    IgnoredTests {
        package: "px-nfs",
        target: "caravan_file",
        needs: Prerequisite::Root,
    },
    // rte_flow steering and drop rules on net_tap, which implements them with kernel TC.
    IgnoredTests {
        package: "dpdk",
        target: "flow_tap",
        needs: Prerequisite::NetTapTcFlow,
    },
];

/// Something an ignored test needs from the machine.
#[derive(Clone, Copy)]
enum Prerequisite {
    /// Root, for network namespaces and packet sockets.
    Root,
    /// Kernel TC's `multiq` qdisc, `flower` classifier and `skbedit`/`gact` actions, with which
    /// net_tap implements `rte_flow`.
    NetTapTcFlow,
}

impl Prerequisite {
    /// What is needed, in the words of the tests' `#[ignore = "needs ..."]`.
    fn needs(self) -> &'static str {
        match self {
            Prerequisite::Root => "needs root (network namespaces)",
            Prerequisite::NetTapTcFlow => {
                "needs kernel TC multiq/flower/skbedit/gact (net_tap's rte_flow)"
            }
        }
    }

    /// `Ok` when this machine has it; otherwise what is missing.
    fn probe(self) -> std::result::Result<(), String> {
        match self {
            Prerequisite::Root if nix::unistd::geteuid().is_root() => Ok(()),
            Prerequisite::Root => Err("not running as root".to_owned()),
            Prerequisite::NetTapTcFlow => netlab::tc_flow_support(),
        }
    }
}

/// What one step of the test sequence does.
enum Action {
    /// The documentation's relative links resolve ([`crate::links`]), in process.
    Links,
    /// `cargo xtask deps`, in process.
    Deps,
    /// `cargo xtask build-ebpf`, in process.
    BuildEbpf,
    /// An external command.
    Command(Command),
    /// A `cargo test` command whose output is read into the [`TestLog`] (and echoed).
    Tests(Command),
    /// The ignored tests of one [`IGNORED_TESTS`] entry, if its prerequisite is found.
    Ignored(&'static IgnoredTests),
    /// `cargo xtask fuzz --seconds N`, in process.
    Fuzz(u64),
}

/// How a step ended, when it did not fail.
enum Outcome {
    /// It ran and succeeded.
    Ran,
    /// It did not run; the summary's `skipped:` line says why.
    Skipped,
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

    /// A step for the ignored tests of `tests`.
    fn ignored(tests: &'static IgnoredTests) -> Self {
        Step {
            name: format!("ignored:{}/{}", tests.package, tests.target),
            action: Action::Ignored(tests),
        }
    }

    /// Runs the step, recording what the tests it runs report in `log`.
    fn run(&mut self, log: &mut TestLog) -> Result<Outcome> {
        match &mut self.action {
            Action::Links => links::run()?,
            Action::Deps => deps::run()?,
            Action::BuildEbpf => build_ebpf::run()?,
            Action::Command(cmd) => run_status(cmd)?,
            Action::Tests(cmd) => run_tests(cmd, log)?,
            Action::Fuzz(seconds) => crate::fuzz::run(*seconds, &[])?,
            Action::Ignored(tests) => {
                if let Err(missing) = tests.needs.probe() {
                    let why = format!("{}: {missing}", tests.needs.needs());
                    println!("skipped: {why}");
                    log.probe_failed.insert(binary_key(tests.target), why);
                    return Ok(Outcome::Skipped);
                }
                let mut cmd = cargo();
                cmd.args(["test", JOBS, "-p", tests.package, "--test", tests.target]);
                cmd.args(["--", "--ignored"]);
                run_tests(&mut cmd, log)?;
            }
        }
        Ok(Outcome::Ran)
    }
}

/// Runs `cmd` (a `cargo test`), echoing its stdout and stderr as they come and reading what
/// libtest reports into `log`; fails unless it exits successfully.
fn run_tests(cmd: &mut Command, log: &mut TestLog) -> Result<()> {
    // One pipe for both streams keeps cargo's `Running <binary>` lines (stderr) in order with
    // libtest's `test <name> ... <result>` lines (stdout).
    let (reader, writer) = nix::unistd::pipe().context("pipe")?;
    cmd.stdout(Stdio::from(writer.try_clone().context("dup pipe")?));
    cmd.stderr(Stdio::from(writer));
    let child = cmd.spawn();
    // The command holds the write ends until its stdio is replaced: end-of-file needs them closed.
    cmd.stdout(Stdio::inherit()).stderr(Stdio::inherit());
    let mut child = child.with_context(|| format!("cannot start {}", describe(cmd)))?;
    let mut stdout = std::io::stdout();
    for line in BufReader::new(std::fs::File::from(reader)).split(b'\n') {
        let line = line.context("read test output")?;
        stdout.write_all(&line)?;
        stdout.write_all(b"\n")?;
        log.record(&String::from_utf8_lossy(&line));
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("{} failed: {status}", describe(cmd));
    }
    Ok(())
}

/// The test binary a `Running` line names, as `xtask test` keys it: the executable's name
/// without cargo's hash (`target/debug/deps/flow_tap-0123abcd` is `flow_tap`), which is the test
/// target's name with `-` as `_`.
fn binary_key(path_or_target: &str) -> String {
    let file = path_or_target.rsplit('/').next().unwrap_or(path_or_target);
    let name = match file.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name
        }
        _ => file,
    };
    name.replace('-', "_")
}

/// What libtest reported across the steps: which tests passed and which were ignored, per test
/// binary.
#[derive(Default)]
struct TestLog {
    /// The binary whose output is being read.
    binary: String,
    /// Ignored tests found in that binary's output so far.
    ignored_here: u64,
    /// (binary, test) → the `#[ignore]` reason, for every test reported as ignored.
    ignored: BTreeMap<(String, String), String>,
    /// (binary, test) of every test reported `ok`.
    passed: BTreeSet<(String, String)>,
    /// Binary → why its ignored tests were not run (a failed [`Prerequisite`] probe).
    probe_failed: BTreeMap<String, String>,
    /// Binary → how many of its ignored tests libtest counted but the output did not name.
    unnamed: BTreeMap<String, u64>,
}

impl TestLog {
    /// Reads one line of `cargo test` output.
    fn record(&mut self, line: &str) {
        let trimmed = line.trim();
        if let Some(running) = trimmed.strip_prefix("Running ") {
            // `Running tests/flow_tap.rs (target/debug/deps/flow_tap-0123abcd)`
            let path = running
                .rsplit_once('(')
                .map_or(running, |(_, p)| p.trim_end_matches(')'));
            self.start(binary_key(path));
        } else if let Some(krate) = trimmed.strip_prefix("Doc-tests ") {
            self.start(format!("{krate} (doc-tests)"));
        } else if let Some(result) = trimmed.strip_prefix("test result: ") {
            self.check_count(result);
        } else if let Some((test, result)) = line
            .strip_prefix("test ")
            .and_then(|l| l.rsplit_once(" ... "))
        {
            let key = (self.binary.clone(), test.to_owned());
            if result == "ok" {
                self.passed.insert(key);
            } else if let Some(reason) = result.strip_prefix("ignored") {
                self.ignored_here += 1;
                let reason = reason.trim_start_matches(", ").to_owned();
                self.ignored.insert(key, reason);
            }
        }
    }

    /// A new test binary's output begins.
    fn start(&mut self, binary: String) {
        self.binary = binary;
        self.ignored_here = 0;
    }

    /// Checks libtest's `N ignored` against the ignored tests read by name, so that a line lost
    /// in interleaved output still counts (as an unnamed skipped test).
    fn check_count(&mut self, result: &str) {
        let reported = result
            .split(';')
            .find_map(|part| part.trim().strip_suffix(" ignored"))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if reported > self.ignored_here {
            *self.unnamed.entry(self.binary.clone()).or_default() += reported - self.ignored_here;
        }
    }

    /// Every ignored test that did not pass later, grouped by why.
    fn skipped(&self) -> BTreeMap<String, Vec<String>> {
        let mut skipped: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (key @ (binary, test), reason) in &self.ignored {
            if self.passed.contains(key) {
                continue;
            }
            let known = IGNORED_TESTS
                .iter()
                .any(|t| binary_key(t.target) == *binary);
            let why = match self.probe_failed.get(binary) {
                Some(why) => why.clone(),
                None if known => reason.clone(),
                None if reason.is_empty() => "#[ignore], not in xtask's IGNORED_TESTS".to_owned(),
                None => format!("{reason} (not in xtask's IGNORED_TESTS)"),
            };
            skipped
                .entry(why)
                .or_default()
                .push(format!("{binary}: {test}"));
        }
        for (binary, &count) in &self.unnamed {
            let why = "ignored, but the output garbled its `test ... ignored` line".to_owned();
            let tests = skipped.entry(why).or_default();
            tests.extend((0..count).map(|_| format!("{binary}: (unnamed)")));
        }
        skipped
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

    let mut doc = cargo();
    doc.args(["doc", "--workspace", "--no-deps", JOBS])
        .env("RUSTDOCFLAGS", "-D warnings");
    let mut tests = cargo();
    tests.args(["test", "--workspace", JOBS]);
    let mut steps = vec![
        // First: it builds nothing and needs no network, so a broken link fails in a second.
        Step {
            name: "links".to_owned(),
            action: Action::Links,
        },
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
        Step {
            name: "doc".to_owned(),
            action: Action::Command(doc),
        },
        // fuzz/ is its own workspace (cargo-fuzz builds it with its own flags): check it builds.
        Step::cargo(
            "fuzz-check",
            &["check", "--manifest-path", "fuzz/Cargo.toml", JOBS],
        ),
        // pxio's engine must build without DPDK (its `dpdk` feature).
        Step::cargo(
            "pxio-no-dpdk",
            &["check", "-p", "pxio", "--no-default-features", JOBS],
        ),
        Step {
            name: "test".to_owned(),
            action: Action::Tests(tests),
        },
    ];
    steps.extend(IGNORED_TESTS.iter().map(Step::ignored));
    steps.extend(INTEGRATION_SUITES.iter().map(Step::suite));
    // The fuzz crate's own tests (its merge checker catches what it must), then every target.
    let mut fuzz_tests = cargo();
    fuzz_tests.args(["test", "--manifest-path", "fuzz/Cargo.toml", "--lib", JOBS]);
    steps.push(Step {
        name: "fuzz-lib-tests".to_owned(),
        action: Action::Tests(fuzz_tests),
    });
    steps.push(Step {
        name: "fuzz".to_owned(),
        action: Action::Fuzz(FUZZ_SECONDS),
    });

    let total = Instant::now();
    let mut log = TestLog::default();
    let mut done: Vec<(String, Duration, Outcome)> = Vec::new();
    for step in &mut steps {
        println!("==> {}", step.name);
        let start = Instant::now();
        let result = step.run(&mut log);
        let elapsed = start.elapsed();
        match result {
            Ok(outcome) => {
                let verdict = match outcome {
                    Outcome::Ran => "ok",
                    Outcome::Skipped => "skipped",
                };
                println!(
                    "<== {} {verdict} ({:.1} s)",
                    step.name,
                    elapsed.as_secs_f64()
                );
                done.push((step.name.clone(), elapsed, outcome));
            }
            Err(err) => {
                eprintln!("{err:#}");
                print_summary(&done, Some((&step.name, elapsed)), total.elapsed(), &log);
                bail!("xtask test: step {} failed", step.name);
            }
        }
    }
    print_summary(&done, None, total.elapsed(), &log);
    Ok(())
}

/// Prints one line per step that ran, the total, then the count of skipped tests with why and
/// their names.
fn print_summary(
    done: &[(String, Duration, Outcome)],
    failed: Option<(&str, Duration)>,
    total: Duration,
    log: &TestLog,
) {
    println!();
    println!("xtask test summary:");
    for (name, elapsed, outcome) in done {
        let verdict = match outcome {
            Outcome::Ran => "ok",
            Outcome::Skipped => "skipped",
        };
        println!("  {verdict:<7} {name:<24} {:>8.1} s", elapsed.as_secs_f64());
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
    let skipped = log.skipped();
    let count: usize = skipped.values().map(Vec::len).sum();
    if count == 0 {
        println!("  skipped: 0 tests");
        return;
    }
    let why: Vec<String> = skipped
        .iter()
        .map(|(why, tests)| format!("{} {why}", tests.len()))
        .collect();
    println!("  skipped: {count} (why: {})", why.join("; "));
    for tests in skipped.values() {
        for test in tests {
            println!("    {test}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `cargo test` prints (stderr and stdout in one stream) for a workspace run with two
    /// ignored tests in a known target, one in an unknown one and one line lost to interleaving.
    const WORKSPACE_RUN: &str = "\
     Running unittests src/lib.rs (target/debug/deps/dpdk-0123456789abcdef)
running 1 test
test mbuf::tests::chain ... ok
test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out
     Running tests/flow_tap.rs (target/debug/deps/flow_tap-fedcba9876543210)
running 2 tests
test a_queue_rule_steers ... ignored, needs kernel TC multiq/flower/skbedit/gact (net_tap's rte_flow)
test refusal_is_clean ... ok
test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out
     Running tests/namespaces.rs (target/debug/deps/namespaces-00112233445566aa)
test probe_once ... ignored, needs root (network namespaces)
test result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out
     Running tests/slow.rs (target/debug/deps/slow-00112233445566bb)
test takes_an_hour ... ignored, slow
EAL: garbled test stays_a_secret ... ignored
test result: ok. 0 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out
   Doc-tests dpdk
test crates/dpdk/src/port.rs - port::RxQueue (line 581) - compile fail ... ok
";

    fn log_of(output: &str) -> TestLog {
        let mut log = TestLog::default();
        output.lines().for_each(|l| log.record(l));
        log
    }

    #[test]
    fn binary_keys_drop_cargos_hash_only() {
        assert_eq!(
            binary_key("target/debug/deps/flow_tap-0123456789abcdef"),
            "flow_tap"
        );
        assert_eq!(binary_key("flow_tap"), "flow_tap");
        assert_eq!(binary_key("caravan-bench"), "caravan_bench");
    }

    #[test]
    fn every_ignored_test_that_did_not_pass_is_named_with_why() {
        let mut log = log_of(WORKSPACE_RUN);
        assert!(log.passed.contains(&(
            "dpdk (doc-tests)".to_owned(),
            "crates/dpdk/src/port.rs - port::RxQueue (line 581) - compile fail".to_owned()
        )));
        // The root run of fpmtud's namespaces passes its test; net_tap's probe fails.
        log.record(
            "     Running tests/namespaces.rs (target/debug/deps/namespaces-99112233445566aa)",
        );
        log.record("test probe_once ... ok");
        log.probe_failed.insert(
            "flow_tap".to_owned(),
            "needs kernel TC: no TC multiq".to_owned(),
        );
        let skipped = log.skipped();
        let names: Vec<&String> = skipped.values().flatten().collect();
        assert_eq!(names.len(), 3, "{skipped:?}");
        assert_eq!(
            skipped["needs kernel TC: no TC multiq"],
            ["flow_tap: a_queue_rule_steers"]
        );
        assert_eq!(
            skipped["slow (not in xtask's IGNORED_TESTS)"],
            ["slow: takes_an_hour"]
        );
        assert_eq!(
            skipped["ignored, but the output garbled its `test ... ignored` line"],
            ["slow: (unnamed)"]
        );
    }
}
