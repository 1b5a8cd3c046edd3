//! Multi-queue receive in the lab: pxgw with several RX queues per worker, RX queue scaling and
//! hairpin opt-in on (`[queues]`, SIGCOMM'26 §4.3-§4.4), between real hosts.
//!
//! The lab's ports (`net_tap` outside, `net_af_packet` inside) have neither `rte_flow` nor
//! hairpin queues, so what this pass can show is the behaviour a user of such ports gets: pxgw
//! starts, says at start that every flow goes to the CPU (hairpin opt-in is inbound: the
//! external port) and that queue scaling cannot apply its
//! rules, keeps all queues active, reads them all through the unified receive (both workers carry
//! traffic), and forwards IPv4 and IPv6 byte for byte; `--stats-json`'s `rxq` shows the active
//! queue count over time and what the policy would have chosen (`advised_queues`). Transitions
//! between configurations need a NIC with `rte_flow` RSS rules (docs/architecture.md).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::wire_checks::Check;
use crate::{Family, Lab, Topology};

const WORKERS: u16 = 2;
const PER_WORKER: u16 = 2;
const FLOWS: u32 = 8;

/// Runs the pass (module docs).
pub fn run(pxgw: &Path, file_bytes: usize, stop: &AtomicBool) -> Result<(Value, Vec<Check>)> {
    let queues = WORKERS * PER_WORKER;
    let topo = Topology {
        queues,
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    eprintln!(
        "lab: {topo}, {WORKERS} workers x {PER_WORKER} RX queues per port, queue scaling and \
         hairpin opt-in on"
    );
    let config = format!(
        "{}[queues]\nper_worker = {PER_WORKER}\nscaling = true\nhairpin = true\nwindow_ms = 200\n",
        l.pxgw_config(WORKERS)
            .replace(&format!("qpairs={WORKERS}"), &format!("qpairs={queues}"))
    );
    let gw = l.start_pxgw_with(pxgw, &config, 600)?;
    let run = || -> Result<_> {
        let mut sha = Vec::new();
        for f in [Family::V4, Family::V6] {
            for inbound in [true, false] {
                let (ok, _) = l.file_transfer(f, inbound, file_bytes)?;
                sha.push((f, inbound, ok));
                if stop.load(Ordering::Relaxed) {
                    bail!("interrupted");
                }
            }
        }
        let gin = l.iperf(Family::V4, true, FLOWS, 2)?;
        Ok((sha, gin))
    };
    let result = run();
    let log_path = gw.log.clone();
    let (code, stats) = gw.stop()?;
    let (sha, gin) = result?;
    let rxq = stats["rxq"].clone();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let per_worker: Vec<u64> = stats["workers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|w| w["packets_in"].as_u64().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    let samples: Vec<(f64, u64, u64)> = rxq["samples"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["t_s"].as_f64().unwrap_or(0.0),
                        s["active_queues"].as_u64().unwrap_or(0),
                        s["advised_queues"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let scaling = rxq["scaling"].as_str().unwrap_or("").to_owned();
    let steering: Vec<String> = rxq["steering"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s["mode"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default();
    println!(
        "queues: {WORKERS} workers x {PER_WORKER} queues per port; sha256 {}; iperf3 {FLOWS} flows \
         in {gin:.2} Gb/s; packets per worker {per_worker:?}; scaling: {scaling}; active/advised \
         queues over time {}; exit code {code}, leaked mbufs {leaked}",
        sha.iter()
            .map(|(f, i, ok)| format!("{f:?} {} {}", if *i { "in" } else { "out" }, if *ok { "OK" } else { "FAIL" }))
            .collect::<Vec<_>>()
            .join(", "),
        samples
            .iter()
            .map(|(t, a, d)| format!("{t:.1}s {a}/{d}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let report = json!({
        "topology": topo.to_string(),
        "workers": WORKERS,
        "queues_per_worker": PER_WORKER,
        "sha256_ok": sha.iter().map(|(f, i, ok)| json!({"family": format!("{f:?}"), "inbound": i, "ok": ok})).collect::<Vec<_>>(),
        "iperf_gbps_in": gin,
        "packets_per_worker": per_worker,
        "rxq": rxq,
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked },
    });
    let mut checks: Vec<Check> = sha
        .iter()
        .map(|(f, inbound, ok)| {
            (
                format!(
                    "queues: {f:?} sha256 {} with {PER_WORKER} queues per worker",
                    if *inbound {
                        "outside -> inside"
                    } else {
                        "inside -> outside"
                    }
                ),
                *ok,
            )
        })
        .collect();
    checks.extend([
        (
            format!("queues: both workers read their queues (packets per worker {per_worker:?})"),
            per_worker.len() == usize::from(WORKERS) && per_worker.iter().all(|&n| n > 0),
        ),
        (
            format!("queues: pxgw says hairpin opt-in is off on the external port (no hairpin queues), every flow to the CPU ({steering:?})"),
            steering.len() == 2
                && steering[0].contains("no hairpin queues")
                && steering[1].contains("off on this port")
                && log.matches("ports.external: hairpin opt-in off").count() == 1,
        ),
        (
            format!("queues: scaling reports the refusal and keeps all {queues} queues active ({scaling})"),
            scaling.starts_with("unavailable") && rxq["active_queues"] == queues,
        ),
        (
            format!("queues: the active queue count is sampled over time ({} samples)", samples.len()),
            samples.len() >= 2 && samples.iter().all(|&(_, a, _)| a == u64::from(queues)),
        ),
        (
            format!("queues: pxgw exits cleanly, no leaked mbufs (exit {code}, leaked {leaked})"),
            code == 0 && leaked == 0,
        ),
    ]);
    Ok((report, checks))
}
