//! `pxgw-lab demo [--json FILE]` (what `cargo xtask demo` runs) and `pxgw-lab test` (the
//! integration suite in `cargo xtask test`): real Linux TCP/UDP stacks in network namespaces,
//! pxgw between them, IPv4 and IPv6 side by side, then the same transfers through a plain Linux
//! bridge for comparison. `test` also runs a second topology: a Linux router between pxgw and
//! the outside host, eMTU 1400, iMTU 4000; then two workers, fragments with F-PMTUD through
//! a 1400 B router (`gateway_lab::wire_checks`), and the kernel's offloads left on as on an
//! operator's machine (`gateway_lab::offload_checks`; alone: `pxgw-lab offloads`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gateway_lab::{self as lab, Family, FrameStats, Lab, RouterConfig, Sizes, Topology};
use netlab::Netns;
use serde_json::json;

#[derive(Debug, Parser)]
#[command(
    name = "pxgw-lab",
    about = "pxgw between network namespaces, with real traffic"
)]
struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// The newcomer's demo: 256 MB each way (IPv4 and IPv6), iperf3, UDP, ping, and a bridge
    /// baseline.
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
        /// Draw the figure (frame sizes outside and inside, yield over time, added delay) as an
        /// SVG here.
        #[arg(long)]
        plot: Option<PathBuf>,
    },
    /// Records the small captures `pxgw replay`'s tests ship: tcpdump on the outside host
    /// while TCP (IPv4, IPv6, both ways) and UDP (both families) cross pxgw.
    Capture {
        /// Write `lab-outside.pcap` here.
        #[arg(long)]
        dir: PathBuf,
    },
    /// pxgw with GRO, TSO, GSO and checksum offloads left on, as on an operator's machine: the
    /// refusal at start, then the fix it names and sha256-checked transfers both ways with every
    /// frame accounted (also part of `test`).
    Offloads {
        /// Also write the results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
    },
    /// Smaller transfers, a second topology (router, eMTU 1400, iMTU 4000), and assertions: the
    /// integration suite.
    Test {
        /// Also write the results as JSON.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Draw the figure of the default topology's run as an SVG here.
        #[arg(long)]
        plot: Option<PathBuf>,
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

/// One direction of one family's run.
struct Direction {
    wire: Wire,
    sha_ok: bool,
    gbps: Option<f64>,
    capture: FrameStats,
}

/// One family's run: TCP both ways, optionally UDP inbound.
struct Run {
    family: Family,
    inbound: Direction,
    outbound: Direction,
    udp: Option<lab::UdpResult>,
}

/// What a run does besides the file transfers.
#[derive(Clone, Copy)]
struct Extras {
    iperf: bool,
    udp: bool,
}

fn check(stop: &AtomicBool) -> Result<()> {
    if stop.load(Ordering::SeqCst) {
        bail!("interrupted")
    }
    Ok(())
}

/// One run of everything in `family` through whatever connects the hosts (pxgw or the bridge).
/// Outbound frames are watched where they leave pxgw's segment: at the router, when there is
/// one, else at the outside host.
fn transfers(
    l: &Lab,
    family: Family,
    sizes: Sizes,
    extras: Extras,
    stop: &AtomicBool,
) -> Result<Run> {
    let ext = (&l.ext, l.ext_iface());
    let int = (&l.int, l.int_iface());
    let mb = sizes.file_bytes >> 20;

    check(stop)?;
    eprintln!("lab: {family}: {mb} MB outside -> inside, checked by sha256");
    let ((sha_in, wire_in), cap_in) =
        l.with_capture(&l.int, l.int_iface(), l.ext_addr(family), || {
            on_wire(ext, int, || l.file_transfer(family, true, sizes.file_bytes))
        })?;
    check(stop)?;
    eprintln!("lab: {family}: {mb} MB inside -> outside, checked by sha256");
    let (peer_ns, peer_if) = l.gw_ext_peer();
    let ((sha_out, wire_out), cap_out) =
        l.with_capture(peer_ns, peer_if, l.int_addr(family), || {
            on_wire(int, ext, || {
                l.file_transfer(family, false, sizes.file_bytes)
            })
        })?;
    check(stop)?;
    let (gbps_in, gbps_out) = if extras.iperf {
        eprintln!(
            "lab: {family}: iperf3, {} flows each way, {} s",
            sizes.iperf_flows, sizes.iperf_seconds
        );
        let gin = l.iperf(family, true, sizes.iperf_flows, sizes.iperf_seconds)?;
        check(stop)?;
        let gout = l.iperf(family, false, sizes.iperf_flows, sizes.iperf_seconds)?;
        check(stop)?;
        (Some(gin), Some(gout))
    } else {
        (None, None)
    };
    let udp = if extras.udp {
        eprintln!(
            "lab: {family}: {} UDP datagrams of 1..{} B outside -> inside",
            sizes.udp_datagrams,
            l.topology().max_udp_payload(family)
        );
        // The inside host receives caravans through the eBPF decapsulator when it is built.
        let decap = caravan::Decap::load(caravan::DecapConfig::default()).is_ok();
        if !decap {
            eprintln!("lab: {family}: no eBPF decapsulator for this run; parsing caravans off the wire instead");
        }
        Some(l.udp_inbound(
            family,
            sizes.udp_datagrams,
            pxio::caravan::DEFAULT_DSCP,
            decap,
        )?)
    } else {
        None
    };
    Ok(Run {
        family,
        inbound: Direction {
            wire: wire_in,
            sha_ok: sha_in.0,
            gbps: gbps_in,
            capture: cap_in,
        },
        outbound: Direction {
            wire: wire_out,
            sha_ok: sha_out.0,
            gbps: gbps_out,
            capture: cap_out,
        },
        udp,
    })
}

fn main() {
    let args = Args::parse();
    if let What::Capture { dir } = &args.what {
        if let Err(e) = capture(dir) {
            eprintln!("pxgw-lab: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if let What::Offloads { json } = &args.what {
        match offloads(json.as_deref()) {
            Ok(true) => return,
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("pxgw-lab: {e:#}");
                std::process::exit(1);
            }
        }
    }
    let (json_path, plot, sizes, test) = match args.what {
        What::Capture { .. } | What::Offloads { .. } => unreachable!("handled above"),
        What::Demo {
            json,
            file_mb,
            seconds,
            plot,
        } => (
            json,
            plot,
            Sizes {
                file_bytes: file_mb << 20,
                iperf_seconds: seconds,
                iperf_flows: 4,
                udp_datagrams: 2000,
            },
            false,
        ),
        What::Test { json, plot } => (
            json,
            plot,
            Sizes {
                file_bytes: 16 << 20,
                iperf_seconds: 2,
                iperf_flows: 2,
                udp_datagrams: 400,
            },
            true,
        ),
    };
    match run(sizes, test, json_path, plot) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("pxgw-lab: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The transfers' size in the offloads pass, as in `test`.
const OFFLOADS_FILE_BYTES: usize = 16 << 20;

/// `pxgw-lab offloads`: see [`What::Offloads`].
fn offloads(json: Option<&Path>) -> Result<bool> {
    let pxgw = std::env::current_exe()?.with_file_name("pxgw");
    let stop = lab::interrupted();
    let outcome = lab::offload_checks::run(&pxgw, OFFLOADS_FILE_BYTES, &stop)?;
    outcome.lines.iter().for_each(|l| println!("{l}"));
    if let Some(p) = json {
        std::fs::write(p, serde_json::to_string_pretty(&outcome.report)?)?;
    }
    let failed = outcome.checks.iter().filter(|(_, ok)| !ok).count();
    for (name, ok) in &outcome.checks {
        println!("{} {name}", if *ok { "ok  " } else { "FAIL" });
    }
    println!("{} passed, {failed} failed", outcome.checks.len() - failed);
    Ok(failed == 0)
}

/// `pxgw-lab capture`: see [`What::Capture`].
fn capture(dir: &Path) -> Result<()> {
    let pxgw = std::env::current_exe()?.with_file_name("pxgw");
    let l = Lab::new()?;
    let gw = l.start_pxgw(&pxgw, 1, 300)?;
    std::fs::create_dir_all(dir)?;
    let file = dir.join("lab-outside.pcap");
    let cap = lab::observe::OutsideCapture::start(&l, &file)?;
    for (family, inbound, bytes) in [
        (Family::V4, true, 192 << 10),
        (Family::V6, true, 192 << 10),
        (Family::V4, false, 64 << 10),
    ] {
        let (ok, _) = l.file_transfer(family, inbound, bytes)?;
        if !ok {
            bail!("{family}: the transfer through pxgw arrived damaged");
        }
    }
    for family in Family::BOTH {
        l.udp_inbound(family, 24, pxio::caravan::DEFAULT_DSCP, false)?;
    }
    // An interactive flow: eight short lines 50 ms apart, which nothing can merge.
    lab::observe::sparse_flow(&l, Family::V4, 8, std::time::Duration::from_millis(50))?;
    cap.stop()?;
    let (code, _) = gw.stop()?;
    println!(
        "wrote {}; inside: {}/32 and {}/128 (pxgw exit code {code})",
        file.display(),
        l.int_addr(Family::V4),
        l.int_addr(Family::V6)
    );
    Ok(())
}

/// A named assertion of the suite.
type Check = (String, bool);

fn run(
    sizes: Sizes,
    test: bool,
    json_path: Option<PathBuf>,
    plot: Option<PathBuf>,
) -> Result<bool> {
    for tool in [
        "iperf3",
        "socat",
        "ping",
        "ethtool",
        "sha256sum",
        "nft",
        "scamper",
    ] {
        if !lab::have(tool) {
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
    let (default_report, mut checks) =
        default_topology(&pxgw, sizes, test, plot.as_deref(), &stop)?;
    // The default topology's fields stay at the top level, as before the router topology.
    let mut report = default_report;
    if test {
        let (router_report, router_checks) = router_topology(&pxgw, sizes, &stop)?;
        report["router"] = router_report;
        checks.extend(router_checks);
        // pxgw as a router for what it cannot split: labs/gateway/src/router_checks.rs.
        let (behaviour, behaviour_checks) = lab::router_checks::run(&pxgw, &stop)?;
        report["router_behaviour"] = behaviour;
        checks.extend(behaviour_checks);
        // No invisible loss, and ports as configured or a clear refusal.
        let accounting = lab::accounting::reconcile(&pxgw, 32, 2)?;
        let port_checks = lab::accounting::port_checks(&pxgw)?;
        println!("\nframe accounting, 32 iperf3 flows each way (IPv4, IPv6), and pxgw --check");
        for part in [&accounting, &port_checks] {
            part.lines.iter().for_each(|l| println!("{l}"));
            checks.extend(part.checks.iter().cloned());
        }
        report["accounting"] = accounting.report;
        report["port_checks"] = port_checks.report;
        // GRO, TSO and GSO left on, as on an operator's machine.
        let offloads = lab::offload_checks::run(&pxgw, sizes.file_bytes, &stop)?;
        println!("\nkernel offloads left on: the refusal, then the fix it names");
        offloads.lines.iter().for_each(|l| println!("{l}"));
        checks.extend(offloads.checks.iter().cloned());
        report["offloads"] = offloads.report;
        // Two workers; fragments and F-PMTUD through a 1400 B router.
        let fpmtud = std::env::current_exe()?.with_file_name("fpmtud");
        if !fpmtud.exists() {
            bail!(
                "{} is not built: `cargo build -p fpmtud` first",
                fpmtud.display()
            );
        }
        let (r, c) = lab::wire_checks::two_workers(&pxgw, &fpmtud, sizes.file_bytes, &stop)?;
        report["two_workers"] = r;
        checks.extend(c);
        let (r, c) = lab::wire_checks::fragment_checks(&pxgw, &fpmtud, &stop)?;
        report["fragments"] = r;
        checks.extend(c);
        // Several RX queues per worker, queue scaling and hairpin opt-in.
        let (r, c) = lab::queue_checks::run(&pxgw, sizes.file_bytes, &stop)?;
        report["queues"] = r;
        checks.extend(c);
    }
    if let Some(p) = &json_path {
        std::fs::write(p, serde_json::to_string_pretty(&report)?)?;
    }
    if !test {
        return Ok(true);
    }
    let failed = checks.iter().filter(|(_, ok)| !ok).count();
    for (name, ok) in &checks {
        println!("{} {name}", if *ok { "ok  " } else { "FAIL" });
    }
    println!("{} passed, {failed} failed", checks.len() - failed);
    Ok(failed == 0)
}

/// The demo's topology: pxgw in IPv4 and IPv6, then a bridge baseline in IPv4.
fn default_topology(
    pxgw: &Path,
    sizes: Sizes,
    test: bool,
    plot: Option<&Path>,
    stop: &AtomicBool,
) -> Result<(serde_json::Value, Vec<Check>)> {
    let l = Lab::new()?;
    let topo = l.topology();
    eprintln!(
        "lab: {topo}; {} / {} outside, {} / {} inside",
        l.ext_addr(Family::V4),
        l.ext_addr(Family::V6),
        l.int_addr(Family::V4),
        l.int_addr(Family::V6)
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
    let gw = l.start_pxgw(pxgw, 1, 900)?;
    // What an operator sees: Prometheus scraped during the traffic.
    let metrics_url = gw.metrics_url();
    let scraper = metrics_url
        .clone()
        .map(|u| lab::observe::Scraper::start(u, std::time::Duration::from_millis(500)));
    let ping_ok = [l.ping(Family::V4), l.ping(Family::V6)];
    let all = Extras {
        iperf: true,
        udp: true,
    };
    let v6 = Extras {
        iperf: false,
        udp: true,
    };
    let result = transfers(&l, Family::V4, sizes, all, stop)
        .and_then(|r4| Ok((r4, transfers(&l, Family::V6, sizes, v6, stop)?)));
    let traces = traces(&l);
    let (during, scrape_failures) = scraper.map(|s| s.finish()).unwrap_or_default();
    // After the traffic: one more scrape, and DPDK telemetry (ports 0 and pxgw's own counters).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let quiet = metrics_url
        .as_deref()
        .and_then(|u| lab::observe::scrape(u).ok());
    let telemetry = lab::observe::telemetry("pxgw", &["/ethdev/stats,0", "/pxgw/stats"]);
    if let Err(e) = &telemetry {
        eprintln!("lab: {e:#}");
    }
    let busiest = gw.busiest_line();
    let (code, stats) = gw.stop()?;
    let observed = lab::observe::check(
        &during,
        scrape_failures,
        quiet.as_ref(),
        telemetry.as_deref().ok(),
        &stats,
    );
    if let Some(path) = plot {
        observed
            .figure
            .draw(path, &format!("pxgw between two namespaces: {topo}"))?;
        eprintln!("lab: wrote the figure to {}", path.display());
    }
    let (r4, r6) = result?;
    let traces = traces?;
    let udp4 = r4.udp.context("UDP run")?;
    let udp6 = r6.udp.context("UDP run")?;

    eprintln!("lab: the same IPv4 transfers through a Linux bridge, for comparison");
    let baseline = {
        let _br = l.bridge()?;
        transfers(
            &l,
            Family::V4,
            sizes,
            Extras {
                iperf: true,
                udp: false,
            },
            stop,
        )?
    };

    let gw_yield = stats["merge"]["conversion_yield"].as_f64().unwrap_or(0.0);
    let delay = (
        stats["merge"]["mean_delay_us"].as_f64().unwrap_or(0.0),
        stats["merge"]["p99_delay_us"].as_f64().unwrap_or(0.0),
    );
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    println!("\n{topo}");
    print_table(&[
        ("pxgw", &r4, Some(delay)),
        ("pxgw", &r6, None),
        ("bridge", &baseline, None),
    ]);
    for udp in [udp4, udp6] {
        println!(
            "UDP {} outside -> inside: {} datagrams sent, {} caravans on the wire, {} datagrams {}, bytes {}",
            udp.family,
            udp.datagrams_sent,
            udp.caravans_seen,
            udp.datagrams_received,
            if udp.decapsulated_by_ebpf { "received by an ordinary socket behind the eBPF decapsulator" } else { "parsed from the caravans" },
            ok(udp.bytes_ok)
        );
    }
    println!(
        "ping both ways: IPv4 {}, IPv6 {}",
        ok(ping_ok[0]),
        ok(ping_ok[1])
    );
    let hops = |t: &lab::Trace| {
        t.hops
            .iter()
            .map(|h| h.map_or("*".to_owned(), |a| a.to_string()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "UDP traceroute outside -> inside: IPv4 {} ({}), IPv6 {} ({})",
        hops(&traces[0]),
        ok(traces[0].reached),
        hops(&traces[1]),
        ok(traces[1].reached)
    );
    if let Some(line) = busiest {
        println!("pxgw's busiest second:\n{line}");
    }
    for line in &observed.lines {
        println!("{line}");
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
            "yield": r4.inbound.capture.yield_share(),
            "short_psh_share": r4.inbound.capture.short_psh_share(),
            "gateway_yield": gw_yield,
            "mean_rx_pkt_bytes": r4.inbound.capture.mean_frame(),
            "sha256_ok": r4.inbound.sha_ok,
            "gbps": r4.inbound.gbps,
            "mean_delay_us": delay.0,
            "p99_delay_us": delay.1,
        },
        "tcp_out": {
            "max_ext_frame_bytes": r4.outbound.capture.max_frame.load(Ordering::Relaxed),
            "sha256_ok": r4.outbound.sha_ok,
            "gbps": r4.outbound.gbps,
        },
        "tcp6_in": {
            "yield": r6.inbound.capture.yield_share(),
            "short_psh_share": r6.inbound.capture.short_psh_share(),
            "mean_rx_pkt_bytes": r6.inbound.capture.mean_frame(),
            "sha256_ok": r6.inbound.sha_ok,
        },
        "tcp6_out": {
            "max_ext_frame_bytes": r6.outbound.capture.max_frame.load(Ordering::Relaxed),
            "sha256_ok": r6.outbound.sha_ok,
        },
        "udp_in": udp4,
        "udp6_in": udp6,
        "ping_ok": ping_ok[0],
        "ping6_ok": ping_ok[1],
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "stats": stats },
        "bridge_baseline": {
            "tcp_in": { "mean_rx_pkt_bytes": baseline.inbound.capture.mean_frame(), "sha256_ok": baseline.inbound.sha_ok, "gbps": baseline.inbound.gbps },
            "tcp_out": { "max_ext_frame_bytes": baseline.outbound.capture.max_frame.load(Ordering::Relaxed), "sha256_ok": baseline.outbound.sha_ok, "gbps": baseline.outbound.gbps },
        },
    });
    if !test {
        return Ok((report, Vec::new()));
    }
    let ext_frame_cap = u64::from(topo.emtu) + 14;
    let mut checks: Vec<Check> = Vec::new();
    for r in [&r4, &r6] {
        let f = r.family;
        let max_ext = r.outbound.capture.max_frame.load(Ordering::Relaxed);
        checks.extend([
            (format!("{f}: sha256 outside -> inside"), r.inbound.sha_ok),
            (format!("{f}: sha256 inside -> outside"), r.outbound.sha_ok),
            merged_check(r, &topo),
            (
                format!("{f}: outside host never sees a frame above {ext_frame_cap} B"),
                max_ext > 0 && max_ext <= ext_frame_cap,
            ),
            (format!("{f}: ping both ways"), ping_ok[f as usize]),
        ]);
    }
    checks.extend(observed.checks.iter().cloned());
    checks.extend([
        udp_check("", &udp4),
        udp_check("", &udp6),
        trace_check("", &traces, &stats),
        ("pxgw exits cleanly".to_owned(), code == 0),
        ("no leaked mbufs".to_owned(), leaked == 0),
        (
            "pxgw's F-PMTUD probe of the outside host was answered".to_owned(),
            daemon.is_none() || stats["pmtud"]["discovered"].as_u64().unwrap_or(0) >= 1,
        ),
    ]);
    Ok((report, checks))
}

/// The second topology: a Linux router between pxgw and the outside host, eMTU 1400, iMTU
/// 4000; TCP both ways in both families.
fn router_topology(
    pxgw: &Path,
    sizes: Sizes,
    stop: &AtomicBool,
) -> Result<(serde_json::Value, Vec<Check>)> {
    let topo = Topology {
        emtu: 1400,
        imtu: 4000,
        router: Some(RouterConfig {
            link_mtu: 1400,
            blackhole_icmp: false,
        }),
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    eprintln!(
        "lab: {topo}; {} / {} outside, {} / {} inside",
        l.ext_addr(Family::V4),
        l.ext_addr(Family::V6),
        l.int_addr(Family::V4),
        l.int_addr(Family::V6)
    );
    let gw = l.start_pxgw(pxgw, 1, 900)?;
    let ping_ok = [l.ping(Family::V4), l.ping(Family::V6)];
    // Every UDP size crosses: 2,000 datagrams of 1 B up to what the 1400 B path carries (1352 B
    // in IPv6).
    let sizes = Sizes {
        udp_datagrams: 2000,
        ..sizes
    };
    let udp = Extras {
        iperf: false,
        udp: true,
    };
    let result = transfers(&l, Family::V4, sizes, udp, stop)
        .and_then(|r4| Ok((r4, transfers(&l, Family::V6, sizes, udp, stop)?)));
    let traces = traces(&l);
    let blackhole = blackhole_works(&l);
    let (code, stats) = gw.stop()?;
    let (r4, r6) = result?;
    let traces = traces?;
    let blackhole = blackhole?;
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    println!("\n{topo}");
    print_table(&[("pxgw", &r4, None), ("pxgw", &r6, None)]);
    println!(
        "ping both ways: IPv4 {}, IPv6 {}",
        ok(ping_ok[0]),
        ok(ping_ok[1])
    );
    println!(
        "pxgw exit code {code}, leaked mbufs {leaked}, drops {}",
        stats["drops"]
    );
    let imtu_frame = u64::from(topo.imtu) + 14;
    let emtu_frame = u64::from(topo.emtu) + 14;
    let mut checks: Vec<Check> = Vec::new();
    let mut report = json!({ "topology": topo.to_string(), "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "stats": stats } });
    for r in [&r4, &r6] {
        let f = r.family;
        let max_in = r.inbound.capture.max_frame.load(Ordering::Relaxed);
        let mean_in = r.inbound.capture.mean_frame();
        let yield_in = r.inbound.capture.yield_share();
        let max_out = r.outbound.capture.max_frame.load(Ordering::Relaxed);
        report[format!("{f}")] = json!({
            "sha256_in_ok": r.inbound.sha_ok,
            "sha256_out_ok": r.outbound.sha_ok,
            "max_int_frame_bytes": max_in,
            "mean_int_tcp_frame_bytes": mean_in,
            "yield": yield_in,
            "max_router_frame_bytes": max_out,
        });
        checks.extend([
            (format!("router topology, {f}: sha256 outside -> inside"), r.inbound.sha_ok),
            (format!("router topology, {f}: sha256 inside -> outside"), r.outbound.sha_ok),
            (
                format!("router topology, {f}: inside host's frames <= {imtu_frame} B (iMTU {}), largest {max_in}", topo.imtu),
                max_in > 0 && max_in <= imtu_frame,
            ),
            // The outside host's segments carry at most 1348 B (IPv4; 1328 B in IPv6) behind
            // the 1400 B eMTU, so three never fit in 4000 B: a gateway that only merges whole
            // segments gets pairs, 2762 B frames (2742 B), and a pair already counts as
            // iMTU-bound (a third segment would cross the iMTU), so the yield alone cannot tell
            // it from pxgw, which cuts segments to fill the iMTU (4014 B frames; 3868 B and
            // 3903 B mean, 96.6-97.7 % yield in the runs the bars were set from). The mean frame
            // bar sits between the two.
            (
                format!("router topology, {f}: inbound TCP merged to the iMTU, mean frame {mean_in:.0} B >= 3500 B"),
                mean_in >= 3500.0,
            ),
            (
                format!("router topology, {f}: inside host gets >= 90 % of inbound TCP bytes in iMTU-bound packets ({:.1} %)", 100.0 * yield_in),
                yield_in >= 0.90,
            ),
            (
                format!("router topology, {f}: router gets frames <= {emtu_frame} B from pxgw (eMTU {}), largest {max_out}", topo.emtu),
                max_out > 0 && max_out <= emtu_frame,
            ),
            (format!("router topology, {f}: ping both ways"), ping_ok[f as usize]),
        ]);
        if let Some(u) = &r.udp {
            report[format!("{f}")]["udp_in"] = json!(u);
            checks.push(udp_check("router topology, ", u));
        }
    }
    checks.extend([
        (
            format!("router topology: the ICMP black hole drops the router's time-exceeded errors (IPv4 {}, IPv6 {})", blackhole[0], blackhole[1]),
            blackhole.iter().all(|&n| n >= 1),
        ),
        trace_check("router topology: ", &traces, &stats),
        ("router topology: pxgw exits cleanly".to_owned(), code == 0),
        ("router topology: no leaked mbufs".to_owned(), leaked == 0),
    ]);
    Ok((report, checks))
}

/// How inbound merging is asserted in the default topology, the same in both families: at
/// least 90 % of the inbound TCP payload in iMTU-bound frames, and no frame above the iMTU. The
/// lab keeps pxgw's workers and the traffic on separate cores ([`lab::Cores`]), so the IPv6
/// run, which comes second, holds the bar IPv4 does.
fn merged_check(r: &Run, topo: &Topology) -> Check {
    let f = r.family;
    let cap = &r.inbound.capture;
    let (mean, max) = (cap.mean_frame(), cap.max_frame.load(Ordering::Relaxed));
    let bound = u64::from(topo.imtu) + 14;
    (
        format!(
            "{f}: inside host gets >= 90 % of inbound TCP bytes in iMTU-bound packets ({:.1} %; short with PSH {:.1} %, short without {:.1} %; mean frame {mean:.0} B), frames <= {bound} B (largest {max})",
            100.0 * cap.yield_share(),
            100.0 * cap.short_psh_share(),
            100.0 * (1.0 - cap.yield_share() - cap.short_psh_share()).max(0.0),
        ),
        cap.yield_share() >= 0.90 && max <= bound,
    )
}

/// Turns the router's ICMP black hole on, pings the outside host from inside with a TTL (hop
/// limit) of 1, and returns how many errors the black hole dropped in each family: the router's
/// time-exceeded messages.
fn blackhole_works(l: &Lab) -> Result<[u64; 2]> {
    let mut dropped = [0; 2];
    for f in Family::BOTH {
        l.set_icmp_blackhole(true)?;
        let to = l.ext_addr(f).to_string();
        // Fails either way: the probe expires at the router.
        let _ = l.int.exec("ping", &["-c", "1", "-W", "1", "-t", "1", &to]);
        dropped[f as usize] = l.icmp_blackholed()?;
        l.set_icmp_blackhole(false)?;
    }
    Ok(dropped)
}

/// UDP traceroutes from the outside host to the inside host, both families.
fn traces(l: &Lab) -> Result<[lab::Trace; 2]> {
    eprintln!("lab: UDP traceroute (scamper) outside -> inside, IPv4 and IPv6");
    Ok([l.traceroute(Family::V4)?, l.traceroute(Family::V6)?])
}

/// The traceroutes completed, and pxgw passed probes unpacked for their TTL (`pass_ttl`).
fn trace_check(prefix: &str, t: &[lab::Trace; 2], stats: &serde_json::Value) -> Check {
    let low_ttl = stats["caravan"]["unpacked_low_ttl"].as_u64().unwrap_or(0);
    let hops = |t: &lab::Trace| {
        t.hops
            .iter()
            .map(|h| h.map_or("*".to_owned(), |a| a.to_string()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for tr in t.iter().filter(|tr| !tr.reached) {
        eprintln!("{}", tr.text);
    }
    (
        format!(
            "{prefix}UDP traceroute through pxgw completes (IPv4: {}; IPv6: {}); {low_ttl} low-TTL datagrams passed unpacked",
            hops(&t[0]),
            hops(&t[1])
        ),
        t.iter().all(|tr| tr.reached) && low_ttl >= 2,
    )
}

/// UDP outside -> inside crossed as caravans and came out exactly: read by an ordinary socket
/// behind the eBPF decapsulator (one `recv` per datagram) when it is built, else parsed off the
/// wire.
fn udp_check(prefix: &str, u: &lab::UdpResult) -> Check {
    let how = if u.decapsulated_by_ebpf {
        "an ordinary socket behind the eBPF decapsulator gets"
    } else {
        "parsed off the wire (no eBPF decapsulator built):"
    };
    (
        format!(
            "{prefix}{}: {} UDP datagrams cross as {} caravans; {how} {} of them byte-exact with their boundaries",
            u.family, u.datagrams_sent, u.caravans_seen, u.datagrams_received
        ),
        u.bytes_ok && u.caravans_seen > 0,
    )
}

fn ok(b: bool) -> &'static str {
    if b {
        "OK"
    } else {
        "FAIL"
    }
}

/// A table row group: what carried the traffic, the run, pxgw's added delay (mean, p99 µs).
type Row<'a> = (&'a str, &'a Run, Option<(f64, f64)>);

fn print_table(rows: &[Row<'_>]) {
    println!(
        "{:<31} {:>11} {:>13} {:>11} {:>13} {:>10} {:>8} {:>14} {:>7} {:>10}",
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
    let row = |name: String, d: &Direction, y: Option<f64>, delay: Option<(f64, f64)>| {
        let w = d.wire;
        let mean = if w.recv_packets == 0 {
            0.0
        } else {
            w.recv_bytes as f64 / w.recv_packets as f64
        };
        println!(
            "{:<31} {:>11} {:>13} {:>11} {:>13} {:>8.0} B {:>8} {:>14} {:>7} {:>10}",
            name,
            w.sent_packets,
            w.sent_bytes,
            w.recv_packets,
            w.recv_bytes,
            mean,
            y.map_or("-".into(), |y| format!("{:.1} %", 100.0 * y)),
            delay.map_or("-".into(), |(m, p)| format!("{m:.0}/{p:.0} us")),
            ok(d.sha_ok),
            d.gbps.map_or("-".into(), |g| format!("{g:.2} Gb/s")),
        );
    };
    for (via, r, delay) in rows {
        let f = r.family;
        row(
            format!("{via:<6} {f} outside -> inside"),
            &r.inbound,
            Some(r.inbound.capture.yield_share()),
            *delay,
        );
        row(
            format!("{via:<6} {f} inside -> outside"),
            &r.outbound,
            None,
            None,
        );
    }
    println!();
}
