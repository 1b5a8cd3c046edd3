//! `cargo xtask fuzz [--seconds N] [TARGET...]`: runs the cargo-fuzz targets of `fuzz/` for N
//! seconds each (all of them by default) and prints executions and crashes per target.
//!
//! Each target starts from its committed seeds (`fuzz/seeds/<target>/`, frames cut from lab
//! captures and hand-made inputs) and a working corpus (`fuzz/corpus/<target>/`, not committed,
//! where libFuzzer keeps what it finds). A target with a dictionary (`fuzz/dicts/<target>.dict`)
//! gets it. The targets are built once, with the rustup nightly toolchain cargo-fuzz needs and
//! without a sanitizer: every fuzzed crate forbids `unsafe`, so the findings are panics and
//! failed assertions, and a sanitizer would only slow them down. A crash fails the command and
//! names the input libFuzzer wrote (`fuzz/artifacts/<target>/crash-...`), which
//! `cargo +nightly fuzz run -s none <target> <file>` replays.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::{deps, describe};

/// The rustup toolchain cargo-fuzz runs on (it needs `-Z` flags).
const TOOLCHAIN: &str = "nightly";
/// The fuzz crate, from the repository root.
const FUZZ_DIR: &str = "fuzz";

/// What one target's run did.
struct Outcome {
    target: String,
    seconds: u64,
    execs: Option<u64>,
    corpus: usize,
    /// The input that crashed it, if one did.
    crash: Option<String>,
}

/// The targets `fuzz/Cargo.toml` declares (its `[[bin]]` names), in order.
fn all_targets() -> Result<Vec<String>> {
    let manifest = Path::new(FUZZ_DIR).join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).with_context(|| {
        format!(
            "reading {} (run from the repository root)",
            manifest.display()
        )
    })?;
    let mut targets = Vec::new();
    let mut in_bin = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_bin = line == "[[bin]]";
        } else if let (true, Some(v)) = (in_bin, line.strip_prefix("name")) {
            let name = v.trim_start_matches([' ', '=']).trim().trim_matches('"');
            targets.push(name.to_owned());
        }
    }
    if targets.is_empty() {
        bail!("{} declares no fuzz targets", manifest.display());
    }
    Ok(targets)
}

/// `cargo +nightly fuzz ...`, through rustup (the `$CARGO` of this xtask is the stable one).
fn cargo_fuzz() -> Command {
    let mut cmd = Command::new("rustup");
    cmd.args(["run", TOOLCHAIN, "cargo", "fuzz"]);
    // Two cores, shared: keep the build to two jobs.
    cmd.env("CARGO_BUILD_JOBS", "2");
    cmd
}

/// Runs `cargo xtask fuzz`.
pub fn run(seconds: u64, targets: &[String]) -> Result<()> {
    deps::ensure_fuzzing()?;
    let known = all_targets()?;
    let targets: Vec<String> = if targets.is_empty() {
        known.clone()
    } else {
        for t in targets {
            if !known.contains(t) {
                bail!(
                    "unknown fuzz target {t}; the targets are: {}",
                    known.join(", ")
                );
            }
        }
        targets.to_vec()
    };
    let mut build = cargo_fuzz();
    build.args(["build", "-s", "none"]);
    println!("==> {}", describe(&build));
    crate::run_status(&mut build)?;

    let mut outcomes = Vec::new();
    for target in &targets {
        println!("==> fuzz {target} for {seconds} s");
        outcomes.push(fuzz_one(target, seconds)?);
    }
    println!();
    print_table(&outcomes);
    let crashed: Vec<&Outcome> = outcomes.iter().filter(|o| o.crash.is_some()).collect();
    if !crashed.is_empty() {
        for o in &crashed {
            eprintln!(
                "fuzz: {} crashed on {}; replay with `cargo +nightly fuzz run -s none {} {}`",
                o.target,
                o.crash.as_deref().unwrap_or("?"),
                o.target,
                o.crash.as_deref().unwrap_or("?"),
            );
        }
        bail!(
            "xtask fuzz: {} of {} targets crashed",
            crashed.len(),
            outcomes.len()
        );
    }
    Ok(())
}

/// Fuzzes `target` for `seconds`; a crash is an outcome, not an error.
fn fuzz_one(target: &str, seconds: u64) -> Result<Outcome> {
    // Absolute paths: libFuzzer's working directory is cargo-fuzz's business.
    let fuzz_dir = std::env::current_dir()?.join(FUZZ_DIR);
    let corpus = fuzz_dir.join("corpus").join(target);
    let seeds = fuzz_dir.join("seeds").join(target);
    std::fs::create_dir_all(&corpus)?;
    let mut cmd = cargo_fuzz();
    // The first directory is the working corpus libFuzzer adds to; the seeds are only read.
    cmd.args(["run", "-s", "none", target]).arg(&corpus);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    cmd.arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1");
    let dict = fuzz_dir.join("dicts").join(format!("{target}.dict"));
    if dict.is_file() {
        cmd.arg(format!("-dict={}", dict.display()));
    }
    println!("    {}", describe(&cmd));
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start {}", describe(&cmd)))?;
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    // Per process: two runs at once (a CI run and a developer's) must not share a log.
    let log_file =
        std::env::temp_dir().join(format!("xtask-fuzz-{}-{target}.log", std::process::id()));
    std::fs::write(&log_file, &log)?;
    let execs = log
        .lines()
        .find_map(|l| l.strip_prefix("stat::number_of_executed_units:"))
        .and_then(|v| v.trim().parse().ok())
        .or_else(|| {
            // "Done 13005675 runs in 16 second(s)"
            log.lines()
                .find_map(|l| l.strip_prefix("Done "))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        });
    let crash = log
        .lines()
        .find_map(|l| {
            l.split_once("Test unit written to ")
                .map(|(_, p)| p.trim().to_owned())
        })
        .map(|p| {
            // cargo-fuzz gives libFuzzer an absolute artifact prefix; keep any other as it is.
            let p = PathBuf::from(p);
            p.strip_prefix(std::env::current_dir().unwrap_or_default())
                .map_or(p.clone(), Path::to_path_buf)
                .display()
                .to_string()
        });
    if crash.is_none() && !out.status.success() {
        bail!(
            "fuzzing {target} failed ({}) without a crash input; its output: {}",
            out.status,
            log_file.display()
        );
    }
    if let Some(c) = &crash {
        // What broke, from the panic message.
        let why: Vec<&str> = log
            .lines()
            .skip_while(|l| !l.contains("panicked at"))
            .take(3)
            .collect();
        eprintln!("fuzz: {target} crashed ({c}):\n{}", why.join("\n"));
    }
    let corpus_len = std::fs::read_dir(&corpus).map_or(0, |d| d.count());
    Ok(Outcome {
        target: target.to_owned(),
        seconds,
        execs,
        corpus: corpus_len,
        crash,
    })
}

fn print_table(outcomes: &[Outcome]) {
    println!(
        "{:<14} {:>8} {:>14} {:>10} {:>8}  crash",
        "target", "seconds", "execs", "execs/s", "corpus"
    );
    for o in outcomes {
        let execs = o.execs.map_or("?".to_owned(), |e| e.to_string());
        let rate = o.execs.map_or("?".to_owned(), |e| {
            format!("{:.0}", e as f64 / o.seconds.max(1) as f64)
        });
        println!(
            "{:<14} {:>8} {:>14} {:>10} {:>8}  {}",
            o.target,
            o.seconds,
            execs,
            rate,
            o.corpus,
            o.crash.as_deref().unwrap_or("none")
        );
    }
}
