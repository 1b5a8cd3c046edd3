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
//!
//! `gateway`: the whole of pxgw's per-packet work, `pxgw::pipeline::Pipeline` on real mbufs,
//! against a gateway built from DPDK's libraries (rte_gro, rte_gso, TX preparation), pxio's
//! engines alone and the floor of moving a packet, on inbound and outbound TCP, UDP and a mix,
//! under a NIC's offloads (with and without LRO) and `net_af_packet`'s none; every output checked
//! byte for byte. `cargo run --release -p pxbench --bin gateway-bench`; `-- --quick` for a smoke
//! run, `-- --packets N`, `-- --scenario KIND`, `-- --only pxgw` (profiling).
//!
//! `instructions`: the merge benchmark's two engines, pxio (with what the NIC gives) and
//! `rte_gro` (its parse included), each alone under valgrind's callgrind, which counts the
//! instructions of their timed sections exactly: the noise-free side of `merge`'s comparison on
//! a shared machine without hardware counters. `poisson-tso` at 1 and 800 flows, or the one
//! scenario given after `--` (e.g. `-- --flows 64 --schedule paced`). Beside the instructions,
//! callgrind's cache model (the host's cache sizes, as valgrind reads them) gives each engine's
//! instruction-cache, data-cache and last-level misses per packet: a simulation, not the CPU's
//! counters, but the same for every run of the same binary.
//!
//! `gateway-instructions`: the same count for the gateway benchmark's sides (pxgw's pipeline,
//! pxio's engines alone, the DPDK gateway), each alone under callgrind, per frame in: the
//! instructions, the first-level instruction- and data-cache misses and the mispredicted
//! branches of their timed sections. Inbound TCP at 1, 100 and 3,200 flows and outbound TCP at
//! 100, IPv4, NIC profile, 30,000 frames asked for; or the one scenario given after `--` (e.g.
//! `-- --scenario mix --flows 100 --profile nic-lro`). Where timing on a shared machine moves by
//! a tenth or more from one run to the next, this is how a change to pxgw's per-packet work is judged.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::ValueEnum;

use crate::progress::Progress;
use crate::{build_ebpf, cargo, deps, describe, run_captured, run_output, run_status};

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
    /// pxgw's pipeline against a DPDK-native gateway, pxio alone and the floor, per packet.
    Gateway,
    /// pxio and rte_gro alone under callgrind: exact instructions per packet in their timed
    /// sections (poisson-tso at 1 and 800 flows, or the scenario given after `--`).
    Instructions,
    /// pxgw, pxio alone and the DPDK gateway under callgrind: instructions, cache misses and
    /// mispredicted branches per frame of the gateway benchmark's scenarios.
    GatewayInstructions,
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
            BenchKind::Gateway => "gateway",
            BenchKind::Instructions => "instructions",
            BenchKind::GatewayInstructions => "gateway-instructions",
        }
    }

    /// Whether the benchmark needs root: an EAL, or namespaces and eBPF. The PMTU cache runs in
    /// plain memory.
    fn needs_root(self) -> bool {
        match self {
            BenchKind::Merge
            | BenchKind::Caravan
            | BenchKind::Nf
            | BenchKind::Gateway
            | BenchKind::Instructions
            | BenchKind::GatewayInstructions => true,
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
            BenchKind::Gateway => "gateway-bench",
            BenchKind::Instructions => "merge",
            BenchKind::GatewayInstructions => "gateway-bench",
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
    if what == BenchKind::Instructions {
        if json.is_some() {
            bail!("xtask bench instructions: no JSON report (it prints a table)");
        }
        return instructions(extra);
    }
    if what == BenchKind::GatewayInstructions {
        if json.is_some() {
            bail!("xtask bench gateway-instructions: no JSON report (it prints a table)");
        }
        return gateway_instructions(extra);
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

/// The engines `instructions` counts, in the order of its columns: the merge binary's flag
/// that runs one alone, and the pattern of its timed sections (never-inlined functions; a
/// pattern must match none nested inside).
const COUNTED: [(&str, &str); 2] = [
    ("--profile-pxio", "pxbench::pxio_engine::timed_*"),
    ("--profile-gro", "pxbench::gro_baseline::timed_*"),
];

/// What callgrind counted in one engine's timed sections, per input packet.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PerPacket {
    /// Instructions executed.
    instructions: f64,
    /// First-level instruction-cache misses.
    i1_misses: f64,
    /// First-level data-cache misses (reads and writes).
    d1_misses: f64,
    /// Last-level cache misses (instructions and data).
    ll_misses: f64,
    /// Mispredicted branches, conditional and indirect (0 without `--branch-sim=yes`).
    mispredicts: f64,
}

/// `cargo xtask bench instructions`: see the module docs.
fn instructions(extra: &[String]) -> Result<()> {
    let scenarios: Vec<Vec<String>> = if extra.is_empty() {
        ["1", "800"]
            .iter()
            .map(|f| {
                ["--flows", f, "--schedule", "poisson-tso"]
                    .map(String::from)
                    .to_vec()
            })
            .collect()
    } else {
        vec![extra.to_vec()]
    };
    let merge = release_binary("merge");
    let out = std::env::temp_dir().join(format!("px-callgrind-{}.out", std::process::id()));
    println!(
        "instructions: per input packet in each engine's timed sections, exact (valgrind \
         callgrind), one run each; cache misses per packet from callgrind's cache model \
         (I1: first-level instruction, D1: first-level data, LL: last level)"
    );
    println!(
        "{:>12}  {:>5}  {:>8}  {:>9}  {:>8}  {:>12}  {:>17}  {:>17}  {:>19}",
        "schedule",
        "flows",
        "packets",
        "pxio NIC",
        "rte_gro",
        "pxio/rte_gro",
        "I1 miss pxio/gro",
        "D1 miss pxio/gro",
        "LL miss pxio/gro",
    );
    for args in &scenarios {
        let mut per_packet = Vec::with_capacity(COUNTED.len());
        let mut scenario = None;
        for (flag, pattern) in COUNTED {
            let mut cmd = callgrind(pattern, &out, false);
            cmd.arg(&merge).args(args).args(["--reps", "1", flag]);
            let stdout = run_output(&mut cmd)?;
            let (name, packets) = profiled_scenario(&stdout)?;
            let counted = callgrind_per_packet(&out, packets)?;
            let _ = std::fs::remove_file(&out);
            per_packet.push(counted);
            scenario = Some((name, packets));
        }
        let (name, packets) = scenario.context("no engine was counted")?;
        let (schedule, flows) = name.split_once(' ').unwrap_or((name.as_str(), "?"));
        let (pxio, gro) = (per_packet[0], per_packet[1]);
        println!(
            "{schedule:>12}  {flows:>5}  {packets:>8}  {:>9.1}  {:>8.1}  {:>12.2}  {:>17}  {:>17}  {:>19}",
            pxio.instructions,
            gro.instructions,
            pxio.instructions / gro.instructions,
            format!("{:.2} / {:.2}", pxio.i1_misses, gro.i1_misses),
            format!("{:.2} / {:.2}", pxio.d1_misses, gro.d1_misses),
            format!("{:.3} / {:.3}", pxio.ll_misses, gro.ll_misses),
        );
    }
    Ok(())
}

/// A binary of the workspace's release build (`CARGO_TARGET_DIR`, else `target/`).
fn release_binary(name: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| build_ebpf::workspace_root().join("target"))
        .join("release")
        .join(name)
}

/// valgrind's callgrind, counting only inside the functions `pattern` matches (their timed
/// sections), with the cache model, the branch model too when `branches`, into `out`; the
/// program and its arguments follow.
fn callgrind(pattern: &str, out: &Path, branches: bool) -> Command {
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=callgrind",
        "--collect-atstart=no",
        "--cache-sim=yes",
    ]);
    if branches {
        cmd.arg("--branch-sim=yes");
    }
    cmd.arg(format!("--toggle-collect={pattern}"))
        .arg(format!("--callgrind-out-file={}", out.display()));
    cmd
}

/// The sides `gateway-instructions` counts, in the order of its columns (pxgw, pxio alone, the
/// DPDK gateway): the gateway benchmark's `--only` values.
const GATEWAY_SIDES: [&str; 3] = ["pxgw", "engine", "dpdk"];

/// `cargo xtask bench gateway-instructions`: see the module docs.
fn gateway_instructions(extra: &[String]) -> Result<()> {
    let scenarios: Vec<Vec<String>> = if extra.is_empty() {
        [
            ("inbound-tcp", "1"),
            ("inbound-tcp", "100"),
            ("inbound-tcp", "3200"),
            ("outbound-tcp", "100"),
        ]
        .iter()
        .map(|(kind, flows)| {
            [
                "--scenario",
                kind,
                "--flows",
                flows,
                "--family",
                "4",
                "--profile",
                "nic",
                "--packets",
                "30000",
            ]
            .map(String::from)
            .to_vec()
        })
        .collect()
    } else {
        vec![extra.to_vec()]
    };
    let bench = release_binary("gateway-bench");
    let out = std::env::temp_dir().join(format!("px-callgrind-gw-{}.out", std::process::id()));
    println!(
        "gateway-instructions: per frame in, in each side's timed sections (valgrind callgrind, \
         one run each): instructions exact; I1 (first-level instruction-cache) and D1 \
         (first-level data-cache) misses from callgrind's cache model, mispredicted branches \
         from its branch model; pxgw / pxio / DPDK gateway"
    );
    println!(
        "{:<34} {:>7} | {:>17} {:>11} | {:>17} | {:>17} | {:>17}",
        "scenario",
        "frames",
        "instructions",
        "pxgw/pxio,dpdk",
        "I1 misses",
        "D1 misses",
        "mispredicted",
    );
    for args in &scenarios {
        let mut counted = Vec::with_capacity(GATEWAY_SIDES.len());
        let mut scenario = None;
        for only in GATEWAY_SIDES {
            let mut cmd = callgrind("*CycleTimer*time*", &out, true);
            cmd.arg(&bench)
                .args(args)
                .args(["--reps", "1", "--no-verify", "--only", only]);
            let output = run_captured(&mut cmd)?;
            let (name, frames) = gateway_scenario(&String::from_utf8_lossy(&output.stderr))?;
            let side = callgrind_per_packet(&out, frames);
            let _ = std::fs::remove_file(&out);
            // A side the scenario has no place for (the DPDK gateway on IPv6 TCP, the engine
            // on UDP) runs no timed section: nothing counted, `n/a`.
            counted.push(Some(side?).filter(|p| p.instructions > 0.0));
            scenario = Some((name, frames));
        }
        let (name, frames) = scenario.context("no side was counted")?;
        let [pxgw, engine, dpdk] = counted[..] else {
            bail!("one count per side");
        };
        let fmt =
            |v: Option<f64>, prec: usize| v.map_or("n/a".to_owned(), |v| format!("{v:.prec$}"));
        let three = |f: fn(&PerPacket) -> f64, prec: usize| -> String {
            [pxgw, engine, dpdk]
                .map(|side| fmt(side.as_ref().map(f), prec))
                .join("/")
        };
        let over = |other: Option<PerPacket>| {
            let ratio = pxgw
                .zip(other)
                .map(|(p, o)| p.instructions / o.instructions);
            fmt(ratio, 2)
        };
        println!(
            "{name:<34} {frames:>7} | {:>17} {:>11} | {:>17} | {:>17} | {:>17}",
            three(|p| p.instructions, 0),
            format!("{},{}", over(engine), over(dpdk)),
            three(|p| p.i1_misses, 2),
            three(|p| p.d1_misses, 2),
            three(|p| p.mispredicts, 2),
        );
    }
    Ok(())
}

/// The scenario and frames of a `gateway-bench --only` run's progress line (on stderr), which
/// must be exactly one (callgrind counts the whole run).
fn gateway_scenario(stderr: &str) -> Result<(String, u64)> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("gateway: "))
        .collect();
    let [line] = lines[..] else {
        bail!(
            "xtask bench gateway-instructions: give one scenario (one --scenario, --flows, \
             --family and --profile): the run printed {} scenario lines",
            lines.len()
        );
    };
    let parse = || -> Option<(String, u64)> {
        let rest = line.strip_prefix("gateway: ")?;
        let (name, tail) = rest.rsplit_once(" (")?;
        let frames = tail.strip_suffix(" frames) ...")?;
        Some((name.to_string(), frames.parse().ok()?))
    };
    parse().with_context(|| format!("unexpected scenario line: {line:?}"))
}

/// The scenario (`"SCHEDULE FLOWS"`) and input packets of a `merge --profile-*` run's output,
/// which must hold exactly one scenario (callgrind counts the whole run).
fn profiled_scenario(stdout: &str) -> Result<(String, u64)> {
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("profile: "))
        .collect();
    let [line] = lines[..] else {
        bail!(
            "xtask bench instructions: give one scenario (one --flows and one --schedule): \
             the run printed {} profile lines",
            lines.len()
        );
    };
    let parse = || -> Option<(String, u64)> {
        let rest = line.strip_prefix("profile: ")?;
        let (scenario, _) = rest.split_once(" flows:")?;
        let packets = rest.rsplit_once(", ")?.1.strip_suffix(" packets")?;
        Some((scenario.to_string(), packets.parse().ok()?))
    };
    parse().with_context(|| format!("unexpected profile line: {line:?}"))
}

/// What a callgrind output file counted (its `events:` and `summary:` lines), per packet.
fn callgrind_per_packet(path: &Path, packets: u64) -> Result<PerPacket> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading callgrind's output {}", path.display()))?;
    parse_callgrind_summary(&text, packets)
        .with_context(|| format!("no events and summary lines in {}", path.display()))
}

/// [`callgrind_per_packet`] on the file's text. The events are named in the `events:` line and
/// counted in the same order in the `summary:` line, which, as every cost line of the format,
/// leaves out trailing zeros (a run that collected nothing writes `summary: 0`); an event the
/// run did not simulate (no cache model) counts as 0.
fn parse_callgrind_summary(text: &str, packets: u64) -> Option<PerPacket> {
    let names: Vec<&str> = text
        .lines()
        .find_map(|l| l.strip_prefix("events: "))?
        .split_whitespace()
        .collect();
    let counts: Vec<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))?
        .split_whitespace()
        .map(|n| n.parse().ok())
        .collect::<Option<_>>()?;
    if counts.is_empty() || counts.len() > names.len() || packets == 0 {
        return None;
    }
    let sum = |wanted: &[&str]| -> f64 {
        names
            .iter()
            .zip(&counts)
            .filter(|(n, _)| wanted.contains(n))
            .map(|(_, &c)| c as f64)
            .sum::<f64>()
            / packets as f64
    };
    if !names.contains(&"Ir") {
        return None;
    }
    Some(PerPacket {
        instructions: sum(&["Ir"]),
        i1_misses: sum(&["I1mr"]),
        d1_misses: sum(&["D1mr", "D1mw"]),
        ll_misses: sum(&["ILmr", "DLmr", "DLmw"]),
        mispredicts: sum(&["Bcm", "Bim"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profile_line_gives_its_scenario_and_packets() {
        let out =
            "profile: poisson-tso 800 flows: rte_gro 36.0 ns/pkt (fastest of 1), 302220 packets\n";
        assert_eq!(
            profiled_scenario(out).unwrap(),
            ("poisson-tso 800".to_string(), 302_220)
        );
        let two = format!("{out}{out}");
        assert!(profiled_scenario(&two).is_err(), "one scenario at a time");
        assert!(profiled_scenario("profile: garbled\n").is_err());
        assert!(profiled_scenario("").is_err());
    }

    #[test]
    fn a_gateway_scenario_line_gives_its_name_and_frames() {
        let err = "EAL: Detected CPU lcores: 2\n\
                   gateway: inbound-tcp ipv4 3200 flows, nic+lro (714105 frames) ...\n";
        assert_eq!(
            gateway_scenario(err).unwrap(),
            ("inbound-tcp ipv4 3200 flows, nic+lro".to_string(), 714_105)
        );
        let two = format!("{err}{err}");
        assert!(gateway_scenario(&two).is_err(), "one scenario at a time");
        assert!(gateway_scenario("gateway: garbled\n").is_err());
        assert!(gateway_scenario("").is_err());
    }

    #[test]
    fn a_callgrind_summary_gives_each_event_per_packet() {
        let text = "positions: line\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n\
                    fl=x\n0 1 2 3 4 5 6 7 8 9\nsummary: 1000 400 200 50 30 10 5 3 2\n";
        let p = parse_callgrind_summary(text, 10).unwrap();
        assert_eq!(
            p,
            PerPacket {
                instructions: 100.0,
                i1_misses: 5.0,
                d1_misses: 4.0,
                ll_misses: 1.0,
                mispredicts: 0.0,
            }
        );
        let branches = "events: Ir Bc Bcm Bi Bim\nsummary: 100 40 6 10 4\n";
        let b = parse_callgrind_summary(branches, 10).unwrap();
        assert_eq!((b.instructions, b.mispredicts), (10.0, 1.0));
        // Without the cache model only instructions are counted.
        let plain = parse_callgrind_summary("events: Ir\nsummary: 500\n", 5).unwrap();
        assert_eq!((plain.instructions, plain.i1_misses), (100.0, 0.0));
        // Trailing zeros are left out: a run that collected nothing counts nothing.
        let none = parse_callgrind_summary("events: Ir Dr I1mr\nsummary: 0\n", 5).unwrap();
        assert_eq!((none.instructions, none.i1_misses), (0.0, 0.0));
        assert!(parse_callgrind_summary("events: Ir Dr\nsummary: 5 1 2\n", 5).is_none());
        assert!(parse_callgrind_summary("events: Ir\nsummary: \n", 5).is_none());
        assert!(parse_callgrind_summary("events: Ir\n", 5).is_none());
        assert!(parse_callgrind_summary("events: Ir\nsummary: 5\n", 0).is_none());
    }
}
