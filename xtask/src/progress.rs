//! Where a long task is and how far along: on a terminal, an `indicatif` bar (step k of n, what
//! it is doing, for how long) while the step's own output goes to a log file, shown only when
//! the step fails; in CI (no terminal, or `CI` set), one plain line per step and the step's
//! output as it comes.

use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::describe;

/// The steps of one task.
pub struct Progress {
    label: &'static str,
    total: u64,
    done: u64,
    bar: Option<ProgressBar>,
}

/// Whether to draw a bar: stderr is a terminal and this is not CI.
fn interactive() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

impl Progress {
    /// A task named `label` of `total` steps.
    pub fn new(label: &'static str, total: u64) -> Self {
        let bar = interactive().then(|| {
            let bar = ProgressBar::new(total);
            bar.set_style(
                ProgressStyle::with_template(
                    "{prefix:.bold} [{bar:24.cyan/blue}] {pos}/{len} {spinner} {msg} ({elapsed})",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(label);
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            label,
            total,
            done: 0,
            bar,
        }
    }

    /// Starts the next step, `what`.
    pub fn step(&mut self, what: &str) {
        self.done += 1;
        match &self.bar {
            Some(bar) => {
                bar.set_position(self.done - 1);
                bar.set_message(what.to_owned());
            }
            None => println!("==> {} [{}/{}] {what}", self.label, self.done, self.total),
        }
    }

    /// Runs `f` with the bar hidden, for work that talks to the terminal itself (installs).
    pub fn quiet<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.bar {
            Some(bar) => bar.suspend(f),
            None => f(),
        }
    }

    /// Runs `cmd` as the next step, `what`. On a terminal its output goes to a log file under
    /// target/xtask-logs/ (its last lines are printed if it fails); otherwise it is inherited.
    pub fn run(&mut self, what: &str, cmd: &mut Command) -> Result<()> {
        self.step(what);
        if self.bar.is_none() {
            println!("    {}", describe(cmd));
            return crate::run_status(cmd);
        }
        let dir = crate::build_ebpf::workspace_root().join("target/xtask-logs");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log_path = dir.join(format!("{}-{}.log", self.label, self.done));
        let mut log = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&log_path)
            .with_context(|| format!("creating {}", log_path.display()))?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?)
            .status()
            .with_context(|| format!("cannot start {}", describe(cmd)))?;
        if !status.success() {
            let mut text = String::new();
            log.seek(SeekFrom::Start(0))?;
            log.read_to_string(&mut text)?;
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            self.abandon();
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
            bail!(
                "{} failed: {status} (full output in {})",
                describe(cmd),
                log_path.display()
            );
        }
        Ok(())
    }

    /// Ends the bar (all steps done).
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.set_position(self.total);
            bar.finish_with_message("done");
        }
    }

    fn abandon(&self) {
        if let Some(bar) = &self.bar {
            bar.abandon_with_message("failed");
        }
    }
}
