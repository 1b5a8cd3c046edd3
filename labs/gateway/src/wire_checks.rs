//! The wire as it is, in the lab: fragments reach pxgw as fragments, F-PMTUD through pxgw finds a
//! router's 1400 B bottleneck from both sides (SIGCOMM'26 §5.2), and two workers carry the demo's
//! traffic.
//!
//! - [`fragment_checks`]: pxgw (eMTU 1500, outside port on `net_tap`, see the crate docs) behind
//!   a Linux router that forwards IPv4 at 1400 B in both directions (`mtu lock` on its routes, so
//!   the router itself fragments DF-clear packets, and answers DF-set ones with "fragmentation
//!   needed"). The outside host's `fpmtud probe` of the inside host is fragmented by the router
//!   into 1396 + 124 B; pxgw answers it with the fragment sizes it saw, so the prober's report
//!   shows what reached pxgw's port. pxgw's own probe of the outside host (triggered by an inside
//!   host's connection) is fragmented by the router the other way, and its result is in pxgw's
//!   `--stats-json` (`pmtud.paths`). Both with and without the router's ICMP black hole, and an
//!   inside → outside transfer must arrive intact each time (with the black hole, only because
//!   pxgw splits at the path MTU F-PMTUD found).
//! - [`two_workers`]: the default topology with 2 queues per port and `workers.count = 2`: the
//!   demo's sha256 and yield checks, 8 parallel iperf3 flows each way, F-PMTUD reports reaching
//!   the probing worker, both workers' packet counts (`workers` in `--stats-json`) above 0, and
//!   each worker's merges and iMTU-bound payload (`pxgw_merges_total`,
//!   `pxgw_merge_full_payload_bytes_total` by `worker` label) above 0.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::{Family, Lab, RouterConfig, Topology};

/// A named assertion: what a user would notice, and whether it held.
pub type Check = (String, bool);

/// The bottleneck the router imposes in IPv4, both ways.
const BOTTLENECK: u16 = 1400;
/// The largest fragment on that path: the IP header and a payload on the 8-byte grid.
const GRID_PMTU: u16 = 20 + (BOTTLENECK - 20) / 8 * 8;
/// The probe size: the eMTU (the outside host's and pxgw's).
const PROBE: u16 = 1500;
/// The fragments of a [`PROBE`]-sized probe on that path.
const FRAGMENTS: [u16; 2] = [GRID_PMTU, 20 + (PROBE - 20) - (GRID_PMTU - 20)];

fn interrupted(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::SeqCst) {
        bail!("interrupted")
    }
    Ok(())
}

/// The router topology of these checks: eMTU 1500, iMTU 9000, and a router whose IPv4 routes
/// toward both sides are locked at [`BOTTLENECK`].
fn bottleneck_lab() -> Result<Lab> {
    let topo = Topology {
        router: Some(RouterConfig {
            link_mtu: PROBE,
            blackhole_icmp: false,
        }),
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    let router = l.router.as_ref().context("the topology has a router")?;
    let (to_gw, to_ext) = l.router_ifaces().context("the topology has a router")?;
    let mtu = BOTTLENECK.to_string();
    // The connected routes, again, with a locked MTU: forwarded packets are fragmented (or
    // refused, with DF) at it, whatever the interfaces' MTU (ip_dst_mtu_maybe_forward).
    for (net, dev) in [("198.51.100.0/24", to_gw), ("198.18.0.0/24", to_ext)] {
        router.ip(&[
            "-4", "route", "replace", net, "dev", dev, "mtu", "lock", &mtu,
        ])?;
    }
    Ok(l)
}

/// What the outside host's `fpmtud probe` reported.
struct ProbeResult {
    pmtu: u64,
    fragments: Vec<u64>,
    fallback: bool,
}

fn probe_from_outside(l: &Lab, fpmtud: &Path) -> Result<ProbeResult> {
    let json = l.dir.join("probe.json");
    let _ = std::fs::remove_file(&json);
    let to = l.int_addr(Family::V4).to_string();
    let size = PROBE.to_string();
    let file = json.display().to_string();
    l.ext.exec(
        &fpmtud.display().to_string(),
        &["probe", &to, "--size", &size, "--json", &file],
    )?;
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    Ok(ProbeResult {
        pmtu: v["pmtu"].as_u64().unwrap_or(0),
        fragments: v["fragments"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_u64).collect())
            .unwrap_or_default(),
        fallback: v["fallback"].as_bool().unwrap_or(true),
    })
}

/// The path MTU pxgw's `--stats-json` lists for `dst`, if any.
fn listed_pmtu(stats: &Value, dst: &str) -> Option<u64> {
    stats["pmtud"]["paths"]
        .as_array()?
        .iter()
        .find(|p| p["destination"].as_str() == Some(dst))
        .and_then(|p| p["pmtu"].as_u64())
}

/// Fragments reach pxgw as fragments, and F-PMTUD through pxgw finds the router's bottleneck
/// from both sides, with and without the router's ICMP black hole (module docs).
pub fn fragment_checks(
    pxgw: &Path,
    fpmtud: &Path,
    stop: &AtomicBool,
) -> Result<(Value, Vec<Check>)> {
    let l = bottleneck_lab()?;
    let topo = l.topology();
    eprintln!(
        "lab: {topo}, the router forwarding IPv4 at {BOTTLENECK} B both ways; pxgw's outside port on {}",
        if l.gw_ext_tap().is_some() { "net_tap" } else { "net_af_packet" }
    );
    // The outside host answers pxgw's probes; the inside host runs no responder: pxgw answers.
    let _daemon = l.start_fpmtud(fpmtud)?;
    let ext = l.ext_addr(Family::V4).to_string();
    let mut checks = Vec::new();
    let mut report = json!({ "topology": topo.to_string(), "bottleneck": BOTTLENECK });
    for blackhole in [false, true] {
        interrupted(stop)?;
        l.set_icmp_blackhole(blackhole)?;
        let label = if blackhole {
            "with the router's ICMP black hole"
        } else {
            "without ICMP black hole"
        };
        eprintln!("lab: F-PMTUD both ways through pxgw, {label}");
        let gw = l.start_pxgw(pxgw, 1, 300)?;
        let probe = probe_from_outside(&l, fpmtud);
        // An inside host's connection to the outside host: pxgw probes that destination, and
        // splits the transfer at what it finds.
        let transfer = l.file_transfer(Family::V4, false, 4 << 20);
        // The report to pxgw's own probe is a round trip away; the transfer took longer.
        std::thread::sleep(Duration::from_millis(300));
        let blackholed = l.icmp_blackholed().unwrap_or(0);
        let (code, stats) = gw.stop()?;
        let probe = probe?;
        let (sha_ok, _) = transfer?;
        let pmtud = &stats["pmtud"];
        let fragments_in = pmtud["fragments_in"].as_u64().unwrap_or(0);
        let answered = pmtud["answered"].as_u64().unwrap_or(0);
        let own = listed_pmtu(&stats, &ext);
        println!(
            "F-PMTUD through pxgw, {label}: outside host's probe of the inside host: pmtu {} from fragments {:?} (pxgw answered {answered}, saw {fragments_in} fragments); pxgw's probe of {ext}: pmtu {}; transfer inside -> outside sha256 {}; ICMP errors black-holed {blackholed}",
            probe.pmtu,
            probe.fragments,
            own.map_or("none".into(), |p| p.to_string()),
            if sha_ok { "OK" } else { "FAIL" },
        );
        let key = if blackhole { "blackhole" } else { "plain" };
        report[key] = json!({
            "outside_probe": { "pmtu": probe.pmtu, "fragments": probe.fragments, "fallback": probe.fallback },
            "pxgw_pmtud": pmtud,
            "transfer_out_sha256_ok": sha_ok,
            "icmp_blackholed": blackholed,
            "pxgw_exit_code": code,
        });
        let want: Vec<u64> = FRAGMENTS.iter().map(|&f| u64::from(f)).collect();
        checks.extend([
            (
                format!("fragments, {label}: the outside host's {PROBE} B probe reaches pxgw as {} fragments {want:?} (pxgw's answer lists {:?}; its port saw {fragments_in} fragments)", want.len(), probe.fragments),
                probe.fragments == want && fragments_in >= 2 && answered >= 1,
            ),
            (
                format!("fragments, {label}: the outside host's F-PMTUD finds {GRID_PMTU} through pxgw (got {}{})", probe.pmtu, if probe.fallback { ", a fallback" } else { "" }),
                !probe.fallback && probe.pmtu == u64::from(GRID_PMTU),
            ),
            (
                format!("fragments, {label}: pxgw's F-PMTUD finds {GRID_PMTU} toward the outside host (pmtud.paths: {})", own.map_or("none".into(), |p| p.to_string())),
                own == Some(u64::from(GRID_PMTU)),
            ),
            (
                format!("fragments, {label}: 4 MB inside -> outside intact (sha256) across the {BOTTLENECK} B router"),
                sha_ok,
            ),
            (format!("fragments, {label}: pxgw exits cleanly"), code == 0 && stats["leaked_mbufs"].as_u64() == Some(0)),
        ]);
    }
    l.set_icmp_blackhole(false)?;
    Ok((report, checks))
}

/// The demo's topology with 2 queues per port and 2 workers (module docs).
pub fn two_workers(
    pxgw: &Path,
    fpmtud: &Path,
    file_bytes: usize,
    stop: &AtomicBool,
) -> Result<(Value, Vec<Check>)> {
    const WORKERS: u16 = 2;
    const FLOWS: u32 = 8;
    let topo = Topology {
        queues: WORKERS,
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    eprintln!(
        "lab: {topo}, {WORKERS} queues per port, workers.count = {WORKERS} (outside port on {})",
        if l.gw_ext_tap().is_some() {
            "net_tap"
        } else {
            "net_af_packet"
        }
    );
    let _daemon = l.start_fpmtud(fpmtud)?;
    let gw = l.start_pxgw(pxgw, WORKERS, 600)?;
    let run = || -> Result<_> {
        let f = Family::V4;
        let mb = file_bytes >> 20;
        eprintln!("lab: {WORKERS} workers: {mb} MB each way, checked by sha256");
        let ((sha_in, _), cap) = l.with_capture(&l.int, l.int_iface(), l.ext_addr(f), || {
            l.file_transfer(f, true, file_bytes)
        })?;
        interrupted(stop)?;
        let (sha_out, _) = l.file_transfer(f, false, file_bytes)?;
        interrupted(stop)?;
        eprintln!("lab: {WORKERS} workers: iperf3, {FLOWS} flows each way");
        let gin = l.iperf(f, true, FLOWS, 2)?;
        interrupted(stop)?;
        let gout = l.iperf(f, false, FLOWS, 2)?;
        Ok((sha_in, sha_out, cap.yield_share(), gin, gout))
    };
    let result = run();
    // Each worker's merging, from the Prometheus endpoint (`--stats-json` counts packets per
    // worker, and those include the ACKs a worker only forwards): segments merged into others
    // and payload bytes that left iMTU-bound, per `worker` label.
    let merged = gw
        .metrics_url()
        .context("pxgw announced no Prometheus endpoint")
        .and_then(|url| crate::observe::scrape(&url))
        .map(|s| {
            (0..WORKERS)
                .map(|w| {
                    let label = [("worker", w.to_string())];
                    let label: Vec<(&str, &str)> =
                        label.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    (
                        crate::observe::sum(&s, "pxgw_merges_total", &label) as u64,
                        crate::observe::sum(&s, "pxgw_merge_full_payload_bytes_total", &label)
                            as u64,
                    )
                })
                .collect::<Vec<_>>()
        });
    let (code, stats) = gw.stop()?;
    let (sha_in, sha_out, yield_share, gin, gout) = result?;
    let merged = merged?;
    let per_worker: Vec<u64> = stats["workers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|w| w["packets_in"].as_u64().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let discovered = stats["pmtud"]["discovered"].as_u64().unwrap_or(0);
    let fallbacks = stats["pmtud"]["fallbacks"].as_u64().unwrap_or(u64::MAX);
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    println!(
        "{WORKERS} workers: sha256 in {}, out {}; yield {:.1} %; iperf3 {FLOWS} flows {gin:.2} Gb/s in, {gout:.2} Gb/s out; packets per worker {per_worker:?}; (merges, iMTU-bound payload bytes) per worker {merged:?}; F-PMTUD answered {discovered}; exit code {code}, leaked mbufs {leaked}",
        ok(sha_in),
        ok(sha_out),
        100.0 * yield_share
    );
    let report = json!({
        "topology": topo.to_string(),
        "workers": WORKERS,
        "sha256_in_ok": sha_in,
        "sha256_out_ok": sha_out,
        "yield": yield_share,
        "iperf_gbps": { "in": gin, "out": gout },
        "packets_per_worker": per_worker,
        "merges_per_worker": merged.iter().map(|m| m.0).collect::<Vec<_>>(),
        "full_payload_bytes_per_worker": merged.iter().map(|m| m.1).collect::<Vec<_>>(),
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "stats": stats },
    });
    let checks = vec![
        (format!("{WORKERS} workers: sha256 outside -> inside"), sha_in),
        (format!("{WORKERS} workers: sha256 inside -> outside"), sha_out),
        // The lab keeps the workers off the traffic's core (`Cores`), so a second worker
        // holds the one-worker bar.
        (
            format!("{WORKERS} workers: inside host gets >= 90 % of inbound TCP bytes in iMTU-bound packets ({:.1} %)", 100.0 * yield_share),
            yield_share >= 0.90,
        ),
        (
            format!("{WORKERS} workers: iperf3 with {FLOWS} flows each way ({gin:.2} / {gout:.2} Gb/s)"),
            gin > 0.0 && gout > 0.0,
        ),
        (
            format!("{WORKERS} workers: both carry traffic (packets per worker {per_worker:?})"),
            per_worker.len() == usize::from(WORKERS) && per_worker.iter().all(|&n| n > 0),
        ),
        // The 8 iperf3 flows each way spread over both workers' queues; a worker that only
        // forwarded (or a second worker that never got data) shows 0 here.
        (
            format!("{WORKERS} workers: each merges (merges, iMTU-bound payload bytes per worker {merged:?})"),
            merged.len() == usize::from(WORKERS) && merged.iter().all(|&(m, b)| m > 0 && b > 0),
        ),
        (
            format!("{WORKERS} workers: pxgw's F-PMTUD reports reach the probing worker ({discovered} answered, {fallbacks} fell back)"),
            discovered >= 1 && fallbacks == 0,
        ),
        (
            format!("{WORKERS} workers: pxgw exits cleanly, no leaked mbufs"),
            code == 0 && leaked == 0,
        ),
    ];
    Ok((report, checks))
}

fn ok(b: bool) -> &'static str {
    if b {
        "OK"
    } else {
        "FAIL"
    }
}
