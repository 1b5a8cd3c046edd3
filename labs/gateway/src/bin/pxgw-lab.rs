//! `pxgw-lab demo [--json FILE]` (what `cargo xtask demo` runs) and `pxgw-lab test` (the
//! integration suite in `cargo xtask test`): real Linux TCP/UDP stacks in two network namespaces,
//! pxgw between them, then the same transfers through a plain Linux bridge for comparison.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gateway_lab::{self as lab, FrameStats, Lab, Sizes, EXT_ADDR, INT_ADDR};
use netlab::Netns;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(
    name = "pxgw-lab",
    about = "pxgw between two network namespaces, with real traffic"
)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The newcomer's demo: 256 MB each way, iperf3, UDP, ping, and a bridge baseline.
    Demo {
        /// Also write the results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Size of each file transfer, MB.
        #[arg(long, default_value_t = 256)]
        file_mb: usize,
        /// Seconds per iperf3 run.
        #[arg(long, default_value_t = 5)]
        seconds: u32,
    },
    /// Smaller transfers, and assertions: the integration suite.
    Test {
        /// Also write the results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// Packet and byte counters of a transfer: what the sender put on its wire, what the receiver
/// took off its own.
#[derive(Debug, Default, Clone, Copy)]
struct Wire {
    sent_packets: u64,
    sent_bytes: u64,
    recv_packets: u64,
    recv_bytes: u64,
}

fn counters(ns: &Netns, iface: &str, dir: &str) -> Result<(u64, u64)> {
    Ok((
        netlab::iface_counter(ns, iface, &format!("{dir}_packets"))?,
        netlab::iface_counter(ns, iface, &format!("{dir}_bytes"))?,
    ))
}

fn on_wire<T>(
    tx: (&Netns, &str),
    rx: (&Netns, &str),
    f: impl FnOnce() -> Result<T>,
) -> Result<(T, Wire)> {
    let (tp0, tb0) = counters(tx.0, tx.1, "tx")?;
    let (rp0, rb0) = counters(rx.0, rx.1, "rx")?;
    let out = f()?;
    let (tp1, tb1) = counters(tx.0, tx.1, "tx")?;
    let (rp1, rb1) = counters(rx.0, rx.1, "rx")?;
    Ok((
        out,
        Wire {
            sent_packets: tp1 - tp0,
            sent_bytes: tb1 - tb0,
            recv_packets: rp1 - rp0,
            recv_bytes: rb1 - rb0,
        },
    ))
}

struct Direction {
    wire: Wire,
    sha_ok: bool,
    gbps: f64,
    capture: FrameStats,
}

/// One run of everything through whatever connects the hosts (pxgw or the bridge).
fn transfers(
    l: &Lab,
    sizes: Sizes,
    udp: bool,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<(Direction, Direction, Option<lab::UdpResult>)> {
    let ext = (&l.ext, l.ext_iface());
    let int = (&l.int, l.int_iface());
    let ext_ip = parse(EXT_ADDR);
    let int_ip = parse(INT_ADDR);
    let check = || {
        if stop.load(Ordering::SeqCst) {
            bail!("interrupted")
        } else {
            Ok(())
        }
    };

    check()?;
    eprintln!(
        "lab: {} MB outside -> inside, checked by sha256",
        sizes.file_bytes >> 20
    );
    let ((sha_in, wire_in), cap_in) = l.with_capture(&l.int, l.int_iface(), ext_ip, || {
        on_wire(ext, int, || l.file_transfer(true, sizes.file_bytes))
    })?;
    check()?;
    eprintln!(
        "lab: {} MB inside -> outside, checked by sha256",
        sizes.file_bytes >> 20
    );
    let ((sha_out, wire_out), cap_out) = l.with_capture(&l.ext, l.ext_iface(), int_ip, || {
        on_wire(int, ext, || l.file_transfer(false, sizes.file_bytes))
    })?;
    check()?;
    eprintln!(
        "lab: iperf3, {} flows each way, {} s",
        sizes.iperf_flows, sizes.iperf_seconds
    );
    let gbps_in = l.iperf(true, sizes.iperf_flows, sizes.iperf_seconds)?;
    check()?;
    let gbps_out = l.iperf(false, sizes.iperf_flows, sizes.iperf_seconds)?;
    check()?;
    let udp = if udp {
        eprintln!(
            "lab: {} UDP datagrams of mixed sizes outside -> inside",
            sizes.udp_datagrams
        );
        // The inside host receives caravans through the eBPF decapsulator when it is built.
        let decap = caravan::Decap::load(caravan::DecapConfig::default()).is_ok();
        if !decap {
            eprintln!("lab: the caravan eBPF object is not built (`cargo xtask build-ebpf`); parsing caravans off the wire instead");
        }
        Some(l.udp_inbound(sizes.udp_datagrams, pxio::caravan::DEFAULT_DSCP, decap)?)
    } else {
        None
    };
    Ok((
        Direction {
            wire: wire_in,
            sha_ok: sha_in.0,
            gbps: gbps_in,
            capture: cap_in,
        },
        Direction {
            wire: wire_out,
            sha_ok: sha_out.0,
            gbps: gbps_out,
            capture: cap_out,
        },
        udp,
    ))
}

fn parse(a: &str) -> [u8; 4] {
    let v: Vec<u8> = a.split('.').map(|p| p.parse().unwrap_or(0)).collect();
    [v[0], v[1], v[2], v[3]]
}

fn main() {
    let args = Args::parse();
    let (json_path, sizes, test) = match args.what {
        What::Demo {
            json,
            file_mb,
            seconds,
        } => (
            json,
            Sizes {
                file_bytes: file_mb << 20,
                iperf_seconds: seconds,
                iperf_flows: 4,
                udp_datagrams: 2000,
            },
            false,
        ),
        What::Test { json } => (
            json,
            Sizes {
                file_bytes: 16 << 20,
                iperf_seconds: 2,
                iperf_flows: 2,
                udp_datagrams: 400,
            },
            true,
        ),
    };
    match run(sizes, test, json_path) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("pxgw-lab: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run(sizes: Sizes, test: bool, json_path: Option<PathBuf>) -> Result<bool> {
    for tool in ["iperf3", "socat", "ping", "ethtool", "sha256sum", "ip"] {
        if !lab::have(tool) && tool != "ip" {
            bail!("{tool} is missing: run `cargo xtask deps`");
        }
    }
    let stop = lab::interrupted();
    let pxgw = std::env::current_exe()?.with_file_name("pxgw");
    if !pxgw.exists() {
        bail!(
            "{} is not built: `cargo build -p pxgw` first",
            pxgw.display()
        );
    }
    let l = Lab::new()?;
    eprintln!(
        "lab: px-ext {} ({EXT_ADDR}, MTU 1500) <-> pxgw <-> px-int {} ({INT_ADDR}, MTU 9000)",
        l.ext.name(),
        l.int.name()
    );
    // The outside host answers F-PMTUD probes, so pxgw's own probing is exercised end to end.
    let fpmtud = std::env::current_exe()?.with_file_name("fpmtud");
    let daemon = if fpmtud.exists() {
        Some(l.start_fpmtud(&fpmtud)?)
    } else {
        eprintln!(
            "lab: {} is not built; pxgw's F-PMTUD probes will go unanswered",
            fpmtud.display()
        );
        None
    };
    let gw = l.start_pxgw(&pxgw, 1, 900)?;
    let ping_ok = l.ping();
    let result = transfers(&l, sizes, true, &stop);
    let busiest = gw.busiest_line();
    let (code, stats) = gw.stop()?;
    let (tcp_in, tcp_out, udp) = result?;
    let udp = udp.context("UDP run")?;

    eprintln!("lab: the same transfers through a Linux bridge, for comparison");
    let baseline = {
        let _br = l.bridge()?;
        transfers(&l, sizes, false, &stop)?
    };

    let gw_yield = stats["merge"]["conversion_yield"].as_f64().unwrap_or(0.0);
    let delay = (
        stats["merge"]["mean_delay_us"].as_f64().unwrap_or(0.0),
        stats["merge"]["p99_delay_us"].as_f64().unwrap_or(0.0),
    );
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    print_table(&tcp_in, &tcp_out, &baseline.0, &baseline.1, gw_yield, delay);
    println!(
        "UDP outside -> inside: {} datagrams sent, {} caravans on the wire, {} datagrams {}, bytes {}",
        udp.datagrams_sent,
        udp.caravans_seen,
        udp.datagrams_received,
        if udp.decapsulated_by_ebpf { "received by an ordinary socket behind the eBPF decapsulator" } else { "parsed from the caravans" },
        if udp.bytes_ok { "OK" } else { "FAIL" }
    );
    println!("ping both ways: {}", if ping_ok { "OK" } else { "FAIL" });
    if let Some(line) = busiest {
        println!("pxgw's busiest second: {line}");
    }
    println!(
        "pxgw exit code {code}, leaked mbufs {leaked}, drops {}",
        stats["drops"]
    );
    let pmtud = &stats["pmtud"];
    println!(
        "pxgw F-PMTUD: {} destinations probed, {} answered, {} fell back",
        pmtud["probed"], pmtud["discovered"], pmtud["fallbacks"]
    );

    let report = json!({
        "tcp_in": {
            "yield": tcp_in.capture.yield_share(),
            "gateway_yield": gw_yield,
            "mean_rx_pkt_bytes": tcp_in.capture.mean_frame(),
            "sha256_ok": tcp_in.sha_ok,
            "gbps": tcp_in.gbps,
            "mean_delay_us": delay.0,
            "p99_delay_us": delay.1,
        },
        "tcp_out": {
            "max_ext_frame_bytes": tcp_out.capture.max_frame.load(Ordering::Relaxed),
            "sha256_ok": tcp_out.sha_ok,
            "gbps": tcp_out.gbps,
        },
        "udp_in": udp,
        "ping_ok": ping_ok,
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "stats": stats },
        "bridge_baseline": {
            "tcp_in": { "mean_rx_pkt_bytes": baseline.0.capture.mean_frame(), "sha256_ok": baseline.0.sha_ok, "gbps": baseline.0.gbps },
            "tcp_out": { "max_ext_frame_bytes": baseline.1.capture.max_frame.load(Ordering::Relaxed), "sha256_ok": baseline.1.sha_ok, "gbps": baseline.1.gbps },
        },
    });
    if let Some(p) = &json_path {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    if !test {
        return Ok(true);
    }
    let max_ext = tcp_out.capture.max_frame.load(Ordering::Relaxed);
    let checks = [
        ("sha256 outside -> inside", tcp_in.sha_ok),
        ("sha256 inside -> outside", tcp_out.sha_ok),
        (
            "inside host gets >= 90 % of inbound TCP bytes in iMTU-bound packets",
            tcp_in.capture.yield_share() >= 0.90,
        ),
        (
            "outside host never sees a frame above 1514 B",
            max_ext > 0 && max_ext <= 1514,
        ),
        ("ping both ways", ping_ok),
        (
            "UDP crosses as caravans, datagrams recovered exactly",
            udp.bytes_ok && udp.caravans_seen > 0,
        ),
        (
            "an ordinary socket behind the eBPF decapsulator gets every datagram, boundaries intact",
            udp.decapsulated_by_ebpf && udp.bytes_ok,
        ),
        ("pxgw exits cleanly", code == 0),
        ("no leaked mbufs", leaked == 0),
        (
            "pxgw's F-PMTUD probe of the outside host was answered",
            daemon.is_none() || stats["pmtud"]["discovered"].as_u64().unwrap_or(0) >= 1,
        ),
    ];
    let failed = checks.iter().filter(|(_, ok)| !ok).count();
    for (name, ok) in checks {
        println!("{} {name}", if ok { "ok  " } else { "FAIL" });
    }
    println!("{} passed, {failed} failed", checks.len() - failed);
    Ok(failed == 0)
}

fn print_table(
    tin: &Direction,
    tout: &Direction,
    bin: &Direction,
    bout: &Direction,
    y: f64,
    delay: (f64, f64),
) {
    println!();
    println!(
        "{:<26} {:>11} {:>13} {:>11} {:>13} {:>10} {:>8} {:>14} {:>7} {:>8}",
        "",
        "sent pkts",
        "sent bytes",
        "recv pkts",
        "recv bytes",
        "mean recv",
        "yield",
        "added delay",
        "sha256",
        "iperf3"
    );
    let row = |name: &str, d: &Direction, y: Option<f64>, delay: Option<(f64, f64)>| {
        let w = d.wire;
        let mean = if w.recv_packets == 0 {
            0.0
        } else {
            w.recv_bytes as f64 / w.recv_packets as f64
        };
        println!(
            "{:<26} {:>11} {:>13} {:>11} {:>13} {:>8.0} B {:>8} {:>14} {:>7} {:>5.2} Gb/s",
            name,
            w.sent_packets,
            w.sent_bytes,
            w.recv_packets,
            w.recv_bytes,
            mean,
            y.map_or("-".into(), |y| format!("{:.1} %", 100.0 * y)),
            delay.map_or("-".into(), |(m, p)| format!("{m:.0}/{p:.0} us")),
            if d.sha_ok { "OK" } else { "FAIL" },
            d.gbps
        );
    };
    row(
        "pxgw  outside -> inside",
        tin,
        Some(tin.capture.yield_share()),
        Some(delay),
    );
    row("pxgw  inside -> outside", tout, None, None);
    row(
        "bridge outside -> inside",
        bin,
        Some(bin.capture.yield_share()),
        None,
    );
    row("bridge inside -> outside", bout, None, None);
    let _ = y;
    println!();
}
