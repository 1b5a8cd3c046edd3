//! The PMTUD lab (`fpmtud-lab`, `cargo xtask lab pmtud`): F-PMTUD next to scamper's PMTUD and
//! the kernel's ICMP-based PMTUD, on the same real Linux path, with ICMP "fragmentation needed"
//! allowed and then black-holed (SIGCOMM'26 §5.1 "PMTUD", §5.2, §7.4).
//!
//! ```text
//!   A ──9000── R1 ──4000── R2 ──1400── B
//!   198.18.1.1                         198.18.3.2   (198.18.0.0/15, inside the lab only)
//! ```
//!
//! R1 and R2 are Linux routers: they fragment DF=0 packets and answer DF=1 packets that do not
//! fit with ICMP "fragmentation needed" (PTB). In the black-hole runs, nftables on both routers
//! drops every PTB. Each method starts with a cold route cache in every namespace:
//!
//! | method | what runs | needs ICMP |
//! |---|---|---|
//! | `fpmtud` | `fpmtud probe B --size 9000` in A, `fpmtud serve` in B | no |
//! | `scamper` | `scamper -c "trace -M -w 1"` in A (traceroute, then PMTUD with black-hole search) | for speed |
//! | `kernel` | a DF=1 UDP sender in A that resends at the route's learned MTU (`IP_MTU`), B echoes | yes |
//!
//! Probes are counted on the wire by nftables on R1 (what A really sent toward B), PTBs where the
//! routers send or drop them. Then two negative runs: a responder that answers with a bad nonce
//! (the prober must ignore it), and no responder at all (the prober must fall back).
//!
//! Every namespace, link and nftables table is a [`netlab`] object or lives inside one, so it is
//! removed on drop; every child process is stopped on drop; every wait has a limit.

#![forbid(unsafe_code)]

mod background;
mod daemon;
mod kernel;
mod report;
mod scamper;
mod topology;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use kernel::ECHO_PORT;
pub use report::{
    Check, FpmtudRun, LabReport, Method, MethodResult, NegativeRun, BOTTLENECK_MTU, CORRECT_RANGE,
    FIRST_HOP_MTU,
};
pub use scamper::{parse_dump, ScamperDump, ScamperProbe};
pub use topology::{parse_counter, parse_route_mtu, Counters, Topology, A_ADDR, B_ADDR, LINK_MTUS};

use background::Scratch;

/// What went wrong while building or running the lab.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// Building the namespaces, links or routes failed.
    #[error(transparent)]
    Netlab(#[from] netlab::Error),
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A child process or helper did not finish in time (it was stopped).
    #[error("{what} did not finish within {limit:?}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The limit.
        limit: Duration,
    },
    /// A child process exited unsuccessfully.
    #[error("{what} failed ({status}): {stderr}")]
    Failed {
        /// The command.
        what: String,
        /// Its exit status.
        status: ExitStatus,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    /// A tool printed something the lab cannot read.
    #[error("{what}: cannot read {text:?}")]
    Parse {
        /// What was being read.
        what: String,
        /// The text (or its start).
        text: String,
    },
    /// A program the lab needs is not installed.
    #[error("`{0}` is not installed: run `cargo xtask deps`")]
    Missing(&'static str),
    /// The `fpmtud` binary is not where the lab expects it.
    #[error("{} is not built: `cargo build --release -p fpmtud --bins` first", .0.display())]
    NotBuilt(PathBuf),
    /// SIGINT or SIGTERM arrived; the lab stopped between two steps.
    #[error("interrupted")]
    Interrupted,
}

impl LabError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| LabError::Io { what, source }
    }
}

/// Settings of a lab run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabConfig {
    /// The `fpmtud` binary: `serve` runs in B, `probe` in A.
    pub fpmtud: PathBuf,
    /// scamper's wait for each reply (`trace -w`, seconds). Its PMTUD black-hole search waits
    /// this long for every probe that is lost, so it bounds the black-hole run's length.
    pub scamper_wait_s: u32,
    /// How long the kernel's DF=1 sender keeps trying before it reports what it learned.
    pub kernel_limit: Duration,
    /// How long the kernel's DF=1 sender waits for an answer (echo or PTB) per datagram.
    pub kernel_wait: Duration,
    /// Upper bound on `fpmtud serve`'s life (it also runs under `timeout`, so it ends even if
    /// the lab is killed).
    pub serve_limit: Duration,
}

impl LabConfig {
    /// The defaults, with the `fpmtud` binary at `fpmtud`.
    pub fn new(fpmtud: PathBuf) -> Self {
        Self {
            fpmtud,
            scamper_wait_s: 1,
            kernel_limit: Duration::from_secs(3),
            kernel_wait: Duration::from_secs(1),
            serve_limit: Duration::from_secs(600),
        }
    }
}

/// The programs the lab runs.
const TOOLS: [&str; 5] = ["ip", "nft", "scamper", "sc_wartsdump", "timeout"];

/// Builds the lab, runs every method with ICMP allowed and black-holed, then the negative runs,
/// and tears it all down. `stop` (set by a signal handler) ends it between two steps.
pub fn run(cfg: &LabConfig, stop: &AtomicBool) -> Result<LabReport, LabError> {
    for tool in TOOLS {
        if !background::on_path(tool) {
            return Err(LabError::Missing(tool));
        }
    }
    if !cfg.fpmtud.is_file() {
        return Err(LabError::NotBuilt(cfg.fpmtud.clone()));
    }
    let check = || {
        if stop.load(Ordering::Relaxed) {
            Err(LabError::Interrupted)
        } else {
            Ok(())
        }
    };
    let scratch = Scratch::new()?;
    let topo = Topology::new()?;
    tracing::info!(
        "lab: A {} —9000— R1 {} —4000— R2 {} —1400— B {}",
        topo.a.name(),
        topo.r1.name(),
        topo.r2.name(),
        topo.b.name()
    );
    let mut serve = daemon::Serve::start(&topo, cfg, &scratch)?;
    let mut results = Vec::new();
    for blackhole in [false, true] {
        topo.set_blackhole(blackhole)?;
        for method in Method::ALL {
            check()?;
            tracing::info!(
                "lab: {} with ICMP {}",
                method.name(),
                if blackhole { "black-holed" } else { "allowed" }
            );
            results.push(measure(&topo, cfg, &scratch, stop, method)?);
        }
    }
    topo.set_blackhole(false)?;
    check()?;
    let serve_reports_sent = serve.stop()?;

    tracing::info!("lab: a responder in B that answers with a bad nonce");
    topo.flush_route_caches()?;
    let hint = report::SPOOFED_MSS_HINT.to_string();
    let spoofed_args = [daemon::NEGATIVE_TIMEOUT, ["--mss-hint", hint.as_str()]].concat();
    let (probe, forged_sent) =
        background::with_helper(&topo.b, "the forging responder", daemon::forge, || {
            daemon::probe(&topo, cfg, &scratch, stop, "spoofed", &spoofed_args)
        })?;
    let spoofed = NegativeRun {
        run: probe?,
        forged_sent,
    };
    check()?;
    tracing::info!("lab: no responder in B");
    topo.flush_route_caches()?;
    let no_responder = NegativeRun {
        run: daemon::probe(
            &topo,
            cfg,
            &scratch,
            stop,
            "absent",
            &daemon::NEGATIVE_TIMEOUT,
        )?,
        forged_sent: 0,
    };
    Ok(LabReport {
        results,
        serve_reports_sent,
        spoofed,
        no_responder,
    })
}

/// One method from a cold start, with what the wire and the routers saw of it.
fn measure(
    topo: &Topology,
    cfg: &LabConfig,
    scratch: &Scratch,
    stop: &AtomicBool,
    method: Method,
) -> Result<MethodResult, LabError> {
    topo.flush_route_caches()?;
    let cold_start = topo.learned_mtu()?.is_none();
    let before = topo.counters()?;
    let outcome = match method {
        Method::Fpmtud => daemon::measure(topo, cfg, scratch, stop)?,
        Method::Scamper => scamper::measure(topo, cfg, scratch, stop)?,
        Method::Kernel => kernel::measure(topo, cfg)?,
    };
    let seen = topo.counters()?.since(&before);
    Ok(MethodResult {
        method,
        icmp_blackhole: topo.blackhole(),
        pmtu: outcome.pmtu,
        correct: outcome.pmtu.is_some_and(|m| CORRECT_RANGE.contains(&m)),
        probes: seen.probes,
        reported_probes: outcome.reported_probes,
        small_probes: seen.small,
        round_trips: outcome.round_trips,
        elapsed_ms: outcome.elapsed.as_secs_f64() * 1e3,
        wall_ms: outcome.wall.as_secs_f64() * 1e3,
        ptb_sent: seen.ptb_sent,
        ptb_dropped: seen.ptb_dropped,
        cold_start,
        fallback: outcome.fallback,
        note: outcome.note,
    })
}

/// What a method reports about itself; [`measure`] adds what the wire saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    /// The PMTU it settled on, if any.
    pub pmtu: Option<u16>,
    /// Probes it says it sent.
    pub reported_probes: u32,
    /// Probes that drew an answer.
    pub round_trips: u32,
    /// Its own discovery time.
    pub elapsed: Duration,
    /// The whole command or call.
    pub wall: Duration,
    /// Whether it reported a fallback rather than a measurement (fpmtud only).
    pub fallback: bool,
    /// One line of detail.
    pub note: String,
}
