//! F-PMTUD in the lab, as a user runs it (SIGCOMM'26 §5.2): the `fpmtud serve` daemon in B and
//! `fpmtud probe B --size 9000` in A, both the real binary; and a responder that is not one,
//! which answers every probe with a bad nonce.

use std::ffi::OsStr;
use std::io;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::background::{Child, Scratch};
use super::report::FpmtudRun;
use super::topology::{Topology, B_ADDR, LINK_MTUS};
use super::{LabConfig, LabError, Outcome};
use fpmtud::wire::{Probe, Report};
use fpmtud::DEFAULT_PORT;

/// How long `fpmtud serve` may take to start answering.
const SERVE_READY: Duration = Duration::from_secs(5);
/// What `fpmtud serve` logs once its sockets are open.
const SERVE_READY_LINE: &str = "answering F-PMTUD probes";
/// Limit on one `fpmtud probe` (its own bound is probes × interval + timeout, about 1.1 s).
const PROBE_LIMIT: Duration = Duration::from_secs(15);
/// The negative runs wait less for a report than the default second.
pub(crate) const NEGATIVE_TIMEOUT: [&str; 2] = ["--timeout-ms", "300"];
/// The forging responder's longest life, in case nobody stops it.
const FORGER_LIMIT: Duration = Duration::from_secs(60);

/// `fpmtud serve` running in B (under `timeout`, so it ends even if the lab is killed); stopped
/// on drop.
pub(crate) struct Serve {
    child: Child,
}

impl Serve {
    /// Starts the daemon and waits until it answers.
    pub(crate) fn start(
        topo: &Topology,
        cfg: &LabConfig,
        scratch: &Scratch,
    ) -> Result<Self, LabError> {
        let limit = cfg.serve_limit.as_secs().max(1).to_string();
        let fpmtud = cfg.fpmtud.as_os_str();
        let args = [
            "-s".as_ref(),
            "TERM".as_ref(),
            "-k".as_ref(),
            "2".as_ref(),
            limit.as_ref(),
            fpmtud,
            "serve".as_ref(),
        ];
        let mut child = Child::spawn_in(&topo.b, scratch, "serve", "timeout", &args)?;
        let deadline = Instant::now() + SERVE_READY;
        while !child.stderr().contains(SERVE_READY_LINE) {
            if !child.running()? {
                // Reports how it failed.
                child.wait_within(SERVE_READY, &AtomicBool::new(false))?;
                return Err(LabError::Parse {
                    what: "fpmtud serve exited at once".into(),
                    text: child.stderr(),
                });
            }
            if Instant::now() >= deadline {
                return Err(LabError::Timeout {
                    what: "fpmtud serve starting".into(),
                    limit: SERVE_READY,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Self { child })
    }

    /// Stops the daemon with SIGTERM and returns how many reports it sent, from the counters
    /// it prints on exit (`reports sent N, ...`).
    pub(crate) fn stop(&mut self) -> Result<u64, LabError> {
        let out = self.child.stop(Duration::from_secs(3))?;
        out.stdout
            .split("reports sent ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.trim().parse().ok())
            .ok_or_else(|| LabError::Parse {
                what: "fpmtud serve's exit counters".into(),
                text: out.stdout.clone(),
            })
    }
}

/// Runs `fpmtud probe B --size 9000 --json FILE EXTRA...` in A and reads its JSON.
pub(crate) fn probe(
    topo: &Topology,
    cfg: &LabConfig,
    scratch: &Scratch,
    stop: &AtomicBool,
    name: &str,
    extra: &[&str],
) -> Result<FpmtudRun, LabError> {
    let json = scratch.file(&format!("{name}.json"));
    let size = LINK_MTUS[0].to_string();
    let b = B_ADDR.to_string();
    let mut args = vec![
        "probe".as_ref(),
        b.as_ref(),
        "--size".as_ref(),
        size.as_ref(),
        "--json".as_ref(),
        json.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    let mut child = Child::spawn_in(&topo.a, scratch, name, &cfg.fpmtud, &args)?;
    let finished = child.wait_within(PROBE_LIMIT, stop)?;
    let text =
        std::fs::read_to_string(&json).map_err(LabError::io(format!("read {}", json.display())))?;
    let mut run = FpmtudRun::from_json(&text)?;
    run.wall_ms = finished.wall.as_secs_f64() * 1e3;
    Ok(run)
}

/// The `fpmtud` row: one probe run against the daemon.
pub(crate) fn measure(
    topo: &Topology,
    cfg: &LabConfig,
    scratch: &Scratch,
    stop: &AtomicBool,
) -> Result<Outcome, LabError> {
    let name = if topo.blackhole() {
        "fpmtud-blackhole"
    } else {
        "fpmtud-icmp"
    };
    let run = probe(topo, cfg, scratch, stop, name, &[])?;
    let note = if run.fallback {
        format!(
            "fallback: {}, ignored reports {}",
            run.source, run.ignored_reports
        )
    } else {
        let sizes: Vec<String> = run.fragments.iter().map(u16::to_string).collect();
        format!("fragments {}", sizes.join(" "))
    };
    Ok(Outcome {
        pmtu: Some(run.pmtu),
        reported_probes: run.probes,
        round_trips: run.round_trips,
        elapsed: Duration::from_secs_f64(run.elapsed_ms / 1e3),
        wall: Duration::from_secs_f64(run.wall_ms / 1e3),
        fallback: run.fallback,
        note,
    })
}

/// A responder that is not one, in B: it answers each probe with the probe's id but a wrong
/// nonce (an attacker who learnt the id, not the nonce), claiming the probe arrived whole, which
/// would make the prober believe the 9000 B first hop is the path MTU. Returns the number of
/// forged reports sent.
pub(crate) fn forge(stop: &AtomicBool, ready: mpsc::Sender<()>) -> io::Result<u32> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, DEFAULT_PORT))?;
    socket.set_read_timeout(Some(Duration::from_millis(20)))?;
    let _ = ready.send(());
    let started = Instant::now();
    let mut buf = vec![0u8; 65536];
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) && started.elapsed() < FORGER_LIMIT {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        let Ok(probe) = Probe::parse(buf.get(..n).unwrap_or_default()) else {
            continue;
        };
        let forged = Report {
            probe_id: probe.probe_id,
            nonce: probe.nonce ^ 1,
            fragments_seen: 1,
            sizes: vec![probe.size],
        };
        let bytes = forged.to_bytes().map_err(io::Error::other)?;
        socket.send_to(&bytes, from)?;
        sent += 1;
    }
    Ok(sent)
}
