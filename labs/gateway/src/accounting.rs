//! No invisible loss, and ports as configured or a clear refusal, in the lab.
//!
//! [`reconcile`] runs 32 parallel iperf3 flows through pxgw each way, then accounts for every
//! frame with three independent sets of counters: the kernel's on the hosts' veth ends (read in
//! their namespaces), the kernel's on pxgw's veth ends, and pxgw's own (its ports' `rte_eth_stats`
//! and its pipeline's, from `--stats-json`). Where two counters count the same frames the check
//! is an exact equality; the only requirement is a quiet lab at pxgw's start and stop (no frame in
//! flight while a socket opens or closes), which [`reconcile`] arranges.
//!
//! [`port_checks`] runs `pxgw --check` on the lab's configuration, on an MTU mismatch and on a
//! missing interface.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use netlab::Netns;
use serde::Serialize;
use serde_json::{json, Value};

use crate::{Family, Gateway, Lab};

/// A named assertion, as `pxgw-lab test` prints it.
pub type Check = (String, bool);

/// What a part of the suite found: checks, lines to print, and a JSON report.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The assertions.
    pub checks: Vec<Check>,
    /// Human-readable results, printed by `pxgw-lab test`.
    pub lines: Vec<String>,
    /// The same, for `--json`.
    pub report: Value,
}

/// The kernel's counters of one interface (`/sys/class/net/IF/statistics`).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct IfCounters {
    /// Frames received (for a veth: the frames its peer sent).
    pub rx_packets: u64,
    /// Frames dropped on receive (a veth: its backlog queue was full).
    pub rx_dropped: u64,
    /// Frames sent.
    pub tx_packets: u64,
    /// Frames dropped on transmit (a veth: the peer would not take them).
    pub tx_dropped: u64,
}

const IF_COUNTERS: [&str; 4] = ["rx_packets", "rx_dropped", "tx_packets", "tx_dropped"];

impl IfCounters {
    /// Reads `iface`'s counters in `ns` (the root namespace when `None`).
    pub fn read(ns: Option<&Netns>, iface: &str) -> Result<Self> {
        let paths: Vec<String> = IF_COUNTERS
            .iter()
            .map(|c| format!("/sys/class/net/{iface}/statistics/{c}"))
            .collect();
        let args: Vec<&str> = paths.iter().map(String::as_str).collect();
        let text = match ns {
            Some(ns) => ns.exec("cat", &args)?,
            None => netlab::run("cat", &args)?,
        };
        let v: Vec<u64> = text
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("counters of {iface}: {text}"))?;
        let [rx_packets, rx_dropped, tx_packets, tx_dropped] = v[..] else {
            bail!("counters of {iface}: {text}");
        };
        Ok(Self {
            rx_packets,
            rx_dropped,
            tx_packets,
            tx_dropped,
        })
    }

    /// The change since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            rx_packets: self.rx_packets - earlier.rx_packets,
            rx_dropped: self.rx_dropped - earlier.rx_dropped,
            tx_packets: self.tx_packets - earlier.tx_packets,
            tx_dropped: self.tx_dropped - earlier.tx_dropped,
        }
    }
}

/// The four veth ends around pxgw, each read where it lives.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Ends {
    /// The outside host's (or router's) end of pxgw's outside link.
    peer_ext: IfCounters,
    /// pxgw's end of its outside link (its outside port's interface).
    gw_ext: IfCounters,
    /// pxgw's end of its inside link.
    gw_int: IfCounters,
    /// The inside host's end.
    peer_int: IfCounters,
    /// The TAP pxgw's outside port opens, when it is `net_tap` (bridged to `gw_ext`): frames
    /// the kernel could not queue to pxgw are in its `tx_dropped`.
    gw_tap: IfCounters,
}

impl Ends {
    fn read(l: &Lab) -> Result<Self> {
        let (peer_ns, peer_if) = l.gw_ext_peer();
        Ok(Self {
            peer_ext: IfCounters::read(Some(peer_ns), peer_if)?,
            gw_ext: IfCounters::read(None, l.gw_ext_iface())?,
            gw_int: IfCounters::read(None, l.gw_int_iface())?,
            peer_int: IfCounters::read(Some(&l.int), l.int_iface())?,
            gw_tap: match l.gw_ext_tap() {
                Some(tap) => IfCounters::read(None, tap)?,
                None => IfCounters::default(),
            },
        })
    }

    fn since(&self, e: &Self) -> Self {
        Self {
            peer_ext: self.peer_ext.since(&e.peer_ext),
            gw_ext: self.gw_ext.since(&e.gw_ext),
            gw_int: self.gw_int.since(&e.gw_int),
            peer_int: self.peer_int.since(&e.peer_int),
            gw_tap: self.gw_tap.since(&e.gw_tap),
        }
    }
}

/// A counter of pxgw's `--stats-json` (0 when absent: a counter a build does not have counted
/// nothing).
fn n(v: &Value, path: &str) -> u64 {
    path.split('.').fold(v, |v, k| &v[k]).as_u64().unwrap_or(0)
}

/// Stops the hosts' kernels from sending frames of their own accord during the run (IPv6 router
/// solicitations repeat for ever with back-off), then waits until pxgw's veth ends have been
/// quiet for a second: a frame arriving while pxgw's sockets open or close would be counted by
/// the kernel and not by pxgw, or the reverse.
pub fn quiet(l: &Lab) -> Result<()> {
    for (ns, iface) in [(&l.ext, l.ext_iface()), (&l.int, l.int_iface())] {
        for scope in ["all", "default", iface] {
            ns.exec(
                "sysctl",
                &[
                    "-qw",
                    &format!("net.ipv6.conf.{scope}.router_solicitations=0"),
                ],
            )?;
        }
    }
    if let Some((ns, iface)) = l.router.as_ref().zip(l.router_ifaces().map(|r| r.0)) {
        ns.exec(
            "sysctl",
            &[
                "-qw",
                &format!("net.ipv6.conf.{iface}.router_solicitations=0"),
            ],
        )?;
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = Ends::read(l)?;
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(1) {
        if Instant::now() > deadline {
            bail!("the lab's links did not fall quiet within 15 s");
        }
        std::thread::sleep(Duration::from_millis(200));
        let now = Ends::read(l)?;
        if now.gw_ext.rx_packets != last.gw_ext.rx_packets
            || now.gw_int.rx_packets != last.gw_int.rx_packets
        {
            since = Instant::now();
        }
        last = now;
    }
    Ok(())
}

/// pxgw's configuration for the accounting run: the lab's, whose rings hold a 32-flow burst.
fn start(l: &Lab, pxgw: &Path, config: &str) -> Result<Gateway> {
    let config_path = l.dir.join("pxgw-accounting.toml");
    fs::write(&config_path, config)?;
    let stats = l.dir.join("pxgw-accounting.json");
    let _ = fs::remove_file(&stats);
    let log_path = l.dir.join("pxgw-accounting.log");
    let log = fs::File::create(&log_path)?;
    let child = Command::new(pxgw)
        .arg("--config")
        .arg(&config_path)
        .arg("--stats-json")
        .arg(&stats)
        .args(["--run-for", "600"])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", pxgw.display()))?;
    let gw = Gateway {
        child: Some(child),
        stats,
        log: log_path.clone(),
    };
    // No traffic until the workers poll: sockets are open from then on.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        if text.contains("worker started") {
            break;
        }
        if Instant::now() > deadline {
            bail!("pxgw did not start within 30 s; its log:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    if !l.forwarding_within(Duration::from_secs(20)) {
        let text = fs::read_to_string(&log_path).unwrap_or_default();
        bail!("pxgw did not forward within 20 s; its log:\n{text}");
    }
    Ok(gw)
}

/// `a == b`, as a check line that shows both sides.
fn equal(name: &str, a: (&str, u64), b: (&str, u64)) -> Check {
    let op = if a.1 == b.1 { "==" } else { "!=" };
    (
        format!("{name}: {} {} {op} {} {}", a.0, a.1, b.0, b.1),
        a.1 == b.1,
    )
}

/// One pxgw run with every counter read around it: pxgw's exit code and `--stats-json`, and the
/// kernel's counters of the four veth ends (and the TAP), from a quiet lab before pxgw started to
/// a quiet lab after it stopped.
pub struct Counted {
    /// pxgw's exit code.
    pub code: i32,
    /// pxgw's `--stats-json`.
    pub stats: Value,
    /// What the kernel counted meanwhile.
    pub kernel: Ends,
}

/// Runs pxgw with `config` on lab `l` while `traffic` runs, and reads every counter around it
/// ([`Counted`]); `traffic`'s error, if any, comes after pxgw has stopped.
pub fn counted<T>(
    l: &Lab,
    pxgw: &Path,
    config: &str,
    traffic: impl FnOnce() -> Result<T>,
) -> Result<(Counted, Result<T>)> {
    quiet(l)?;
    let before = Ends::read(l)?;
    let gw = start(l, pxgw, config)?;
    let out = traffic();
    // Everything in flight lands before pxgw stops reading.
    std::thread::sleep(Duration::from_secs(1));
    let (code, stats) = gw.stop()?;
    let after = Ends::read(l)?;
    Ok((
        Counted {
            code,
            stats,
            kernel: after.since(&before),
        },
        out,
    ))
}

/// 32 parallel iperf3 flows (`flows`) through pxgw each way for `seconds`, in IPv4 then IPv6,
/// then every frame reconciled: hosts' veths, pxgw's veths, pxgw's ports, pxgw's pipeline.
pub fn reconcile(pxgw: &Path, flows: u32, seconds: u32) -> Result<Outcome> {
    let l = Lab::new()?;
    let mut gbps = Vec::new();
    let (run, traffic) = counted(&l, pxgw, &l.pxgw_config(1), || -> Result<()> {
        for f in Family::BOTH {
            for inbound in [true, false] {
                eprintln!(
                    "lab: accounting: iperf3 {f}, {flows} flows {} for {seconds} s",
                    if inbound {
                        "outside -> inside"
                    } else {
                        "inside -> outside"
                    }
                );
                gbps.push((f, inbound, l.iperf(f, inbound, flows, seconds)?));
            }
        }
        Ok(())
    })?;
    traffic?;
    let Outcome {
        mut checks,
        mut lines,
        ..
    } = ledger(&run, false);
    for (f, inbound, g) in &gbps {
        lines.push(format!(
            "iperf3 {f} {flows} flows {}: {g:.2} Gb/s",
            if *inbound {
                "outside -> inside"
            } else {
                "inside -> outside"
            }
        ));
    }
    checks.push((
        format!(
            "accounting: {} iperf3 runs of {flows} flows each carried traffic",
            gbps.len()
        ),
        gbps.len() == 4 && gbps.iter().all(|(_, _, g)| *g > 0.0),
    ));
    checks.push(("accounting: pxgw exits cleanly".to_owned(), run.code == 0));
    let report = json!({
        "kernel": run.kernel,
        "pxgw": run.stats,
        "iperf_gbps": gbps.iter().map(|(f, i, g)| json!({"family": f, "inbound": i, "gbps": g})).collect::<Vec<_>>(),
    });
    Ok(Outcome {
        checks,
        lines,
        report,
    })
}

/// Every frame of a [`Counted`] run reconciled: hosts' veths, pxgw's veths, pxgw's ports, pxgw's
/// pipeline. With `outside_at_tap`, what reached pxgw's outside port is counted where the kernel
/// queued it to the port's TAP instead of where the outside host sent it: a host whose TSO is on
/// hands its veth 64 KB packets that the veth counts as one frame each, and the kernel segments
/// them only on the way into the TAP.
pub fn ledger(run: &Counted, outside_at_tap: bool) -> Outcome {
    let (stats, k) = (&run.stats, run.kernel);
    let port = |side: &str, c: &str| n(stats, &format!("ports.{side}.{c}"));
    let mut checks = Vec::new();
    let mut lines = Vec::new();

    // The wire around each port, in both directions. A veth's two ends count the same frames
    // (one end's tx is the other's rx), and a frame the receiving side's backlog refused is in
    // the sender's tx_dropped (and the receiver's rx_dropped): nothing else drops on a veth.
    // With a TAP outside port, the frames the kernel could not queue to pxgw's TAP (its ring
    // full) are the TAP's tx_dropped, not the port's imissed.
    for (side, peer, gwk, tap_dropped, name) in [
        (
            "external",
            k.peer_ext,
            k.gw_ext,
            k.gw_tap.tx_dropped,
            "outside",
        ),
        ("internal", k.peer_int, k.gw_int, 0, "inside"),
    ] {
        let rx_accounted = port(side, "ipackets")
            + port(side, "imissed")
            + port(side, "ierrors")
            + port(side, "rx_nombuf")
            + tap_dropped;
        lines.push(format!(
            "{name} host's veth sent {} frames (and could not hand over {}); pxgw's {side} port: kernel rx {} = ipackets {} + imissed {} + ierrors {} + rx_nombuf {} + TAP tx_dropped {tap_dropped}",
            peer.tx_packets, peer.tx_dropped, gwk.rx_packets,
            port(side, "ipackets"), port(side, "imissed"), port(side, "ierrors"), port(side, "rx_nombuf"),
        ));
        if outside_at_tap && side == "external" {
            lines.push(format!(
                "the kernel queued {} frames to pxgw's TAP (and dropped {tap_dropped} at a full queue)",
                k.gw_tap.tx_packets
            ));
            checks.push(equal(
                "accounting: every frame the kernel queued to pxgw's TAP reached its outside port or its counters",
                ("TAP tx + tx_dropped", k.gw_tap.tx_packets + tap_dropped),
                ("ipackets + imissed + ierrors + rx_nombuf + TAP tx_dropped", rx_accounted),
            ));
        } else {
            checks.push(equal(
                &format!("accounting: every frame the {name} host sent reached pxgw's {side} port or its counters"),
                ("sent", peer.tx_packets),
                ("ipackets + imissed + ierrors + rx_nombuf + TAP tx_dropped", rx_accounted),
            ));
        }
        checks.push(equal(
            &format!("accounting: frames the {name} host's veth could not hand to pxgw's are in both ends' drop counters"),
            ("peer tx_dropped", peer.tx_dropped),
            ("pxgw side rx_dropped", gwk.rx_dropped),
        ));
        let tx_accounted = port(side, "opackets") + port(side, "oerrors");
        lines.push(format!(
            "pxgw's {side} port: opackets {} + oerrors {} = kernel tx {} + tx_dropped {}; the {name} host's veth received {} (rx_dropped {})",
            port(side, "opackets"), port(side, "oerrors"), gwk.tx_packets, gwk.tx_dropped,
            peer.rx_packets, peer.rx_dropped,
        ));
        checks.push(equal(
            &format!("accounting: every frame pxgw's {side} port sent reached the {name} host or a drop counter"),
            ("opackets + oerrors", tx_accounted),
            ("received + veth tx_dropped", peer.rx_packets + gwk.tx_dropped),
        ));
    }

    // pxgw's ports against its pipeline: every frame received is processed, and every frame
    // counted as sent is one the driver took.
    for (dir, rx_side, tx_side) in [
        ("inbound", "external", "internal"),
        ("outbound", "internal", "external"),
    ] {
        checks.push(equal(
            &format!(
                "accounting: pxgw's {dir} pipeline saw every frame its {rx_side} port received"
            ),
            ("packets_in", n(stats, &format!("{dir}.packets_in"))),
            ("ipackets", port(rx_side, "ipackets")),
        ));
        checks.push(equal(
            &format!("accounting: pxgw counts as sent {dir} exactly what its {tx_side} port's driver took"),
            ("packets_out", n(stats, &format!("{dir}.packets_out"))),
            ("opackets + oerrors", port(tx_side, "opackets") + port(tx_side, "oerrors")),
        ));
    }

    // pxgw's pipeline: frames in, plus the frames its transformations create, equal frames out,
    // plus the frames they absorb, plus what it still holds, plus its counted drops. Merging turns
    // N segments into 1 (`merges` absorbed), a cut at the iMTU turns 1 into 2 (`cuts`), caravans
    // turn N datagrams into 1 and back, a split turns 1 into N, and the gateway's own F-PMTUD
    // frames are created (probes, answers) or absorbed (reports for its probes).
    let received = n(stats, "inbound.packets_in") + n(stats, "outbound.packets_in");
    let created = n(stats, "merge.cuts")
        + n(stats, "caravan.caravans_built")
        + n(stats, "caravan.datagrams_unpacked")
        + n(stats, "split.segments").saturating_sub(n(stats, "split.packets"))
        + n(stats, "gateway_frames.sent")
        // Router behaviour, when the build has it: fragmenting turns 1 into N, and
        // ICMP errors to inside hosts are created.
        + n(stats, "router.fragments_out").saturating_sub(n(stats, "router.fragmented"))
        + n(stats, "router.frag_needed_sent")
        + n(stats, "router.ptb_sent")
        // The same for inbound packets above the iMTU: fragments toward the inside, ICMP errors
        // toward outside senders.
        + n(stats, "inbound_oversize.fragments_out")
            .saturating_sub(n(stats, "inbound_oversize.fragmented"))
        + n(stats, "inbound_oversize.frag_needed_sent")
        + n(stats, "inbound_oversize.ptb_sent");
    let sent = n(stats, "inbound.packets_out") + n(stats, "outbound.packets_out");
    let absorbed = n(stats, "merge.merges")
        + n(stats, "caravan.datagrams_packed")
        + n(stats, "caravan.caravans_unpacked")
        + n(stats, "gateway_frames.received")
        + n(stats, "router.probe_errors_consumed");
    let drops: u64 = stats["drops"]
        .as_object()
        .map(|d| d.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let held = n(stats, "merge.held_items");
    lines.push(format!(
        "pxgw's pipeline: received {received} + created {created} (cuts {}, caravans {}, unpacked datagrams {}, split segments {} from {} packets, own frames {}) = sent {sent} + absorbed {absorbed} (merged {}, packed {}, caravans unpacked {}, reports {}) + held {held} + drops {drops}",
        n(stats, "merge.cuts"), n(stats, "caravan.caravans_built"), n(stats, "caravan.datagrams_unpacked"),
        n(stats, "split.segments"), n(stats, "split.packets"), n(stats, "gateway_frames.sent"),
        n(stats, "merge.merges"), n(stats, "caravan.datagrams_packed"), n(stats, "caravan.caravans_unpacked"),
        n(stats, "gateway_frames.received"),
    ));
    checks.push(equal(
        "accounting: pxgw's pipeline accounts for every frame",
        ("received + created", received + created),
        (
            "sent + absorbed + held + drops",
            sent + absorbed + held + drops,
        ),
    ));
    let total_in = port("external", "ipackets") + port("internal", "ipackets");
    let missed = port("external", "imissed") + port("internal", "imissed");
    lines.push(format!(
        "RX rings (af_packet framecnt): {missed} frames missed of {} ({:.3} %)",
        total_in + missed,
        100.0 * missed as f64 / (total_in + missed).max(1) as f64
    ));
    Outcome {
        checks,
        lines,
        report: json!({ "kernel": k, "pxgw": stats }),
    }
}

/// `pxgw --check` with configuration `config`: (exit code, stdout and stderr lines).
pub fn check_run(l: &Lab, pxgw: &Path, name: &str, config: &str) -> Result<(i32, Vec<String>)> {
    let path = l.dir.join(name);
    fs::write(&path, config)?;
    run_to_end(pxgw, &path, &["--check"])
}

/// pxgw with the configuration file `config` and `args`, run to its end (a refusal ends it at
/// once; `--check` and `--run-for` bound the rest): exit code, and its non-empty stdout and
/// stderr lines.
pub fn run_to_end(pxgw: &Path, config: &Path, args: &[&str]) -> Result<(i32, Vec<String>)> {
    let out = Command::new(pxgw)
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", pxgw.display()))?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    Ok((
        out.status.code().unwrap_or(-1),
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect(),
    ))
}

/// `pxgw --check`: passes on the lab's own configuration, naming both ports' MTUs; refuses with
/// one line a configured MTU the interface does not have, and a missing interface.
pub fn port_checks(pxgw: &Path) -> Result<Outcome> {
    let l = Lab::new()?;
    let topo = l.topology();
    let config = l.pxgw_config(1);
    let mut out = Outcome::default();

    let (code, lines) = check_run(&l, pxgw, "check-ok.toml", &config)?;
    let names = |port: &str, mtu: u16| {
        lines
            .iter()
            .any(|s| s.contains(&format!("ports.{port}:")) && s.contains(&format!("MTU {mtu}")))
    };
    out.lines.push(format!(
        "pxgw --check on the lab's configuration: exit {code}"
    ));
    out.lines
        .extend(lines.iter().filter(|s| s.contains("ports.")).cloned());
    out.checks.push((
        format!(
            "--check: the lab's configuration passes (exit {code}) and names both ports' MTUs ({} and {})",
            topo.emtu, topo.imtu
        ),
        code == 0 && names("external", topo.emtu) && names("internal", topo.imtu),
    ));

    // The inside interface at 4000 while the configuration says 9000.
    let iface = l.gw_int_iface().to_owned();
    netlab::run("ip", &["link", "set", &iface, "mtu", "4000"])?;
    let mismatch = check_run(&l, pxgw, "check-mtu.toml", &config);
    netlab::run(
        "ip",
        &["link", "set", &iface, "mtu", &topo.imtu.to_string()],
    )?;
    let (code, lines) = mismatch?;
    out.lines.push(format!(
        "pxgw --check, configuration MTU {} but {iface} at 4000: exit {code}: {}",
        topo.imtu,
        lines.join(" / ")
    ));
    out.checks.push((
        format!(
            "--check: configured MTU {} against interface MTU 4000 is refused with one line naming both (exit {code}, {} lines)",
            topo.imtu,
            lines.len()
        ),
        code != 0
            && lines.len() == 1
            && lines[0].contains(&topo.imtu.to_string())
            && lines[0].contains("4000")
            && lines[0].contains(&iface),
    ));

    let missing = "pxnosuch0";
    let config = config.replacen(&format!("iface={iface},"), &format!("iface={missing},"), 1);
    let (code, lines) = check_run(&l, pxgw, "check-missing.toml", &config)?;
    out.lines.push(format!(
        "pxgw --check, interface {missing} missing: exit {code}: {}",
        lines.join(" / ")
    ));
    out.checks.push((
        format!(
            "--check: a missing interface is refused with one line naming it (exit {code}, {} lines)",
            lines.len()
        ),
        code != 0 && lines.len() == 1 && lines[0].contains(missing),
    ));
    out.report = json!({ "lines": out.lines });
    Ok(out)
}
