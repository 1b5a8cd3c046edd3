//! `pxgw --config pxgw.toml`: the PacketExpress gateway.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::thread::JoinHandle;

use anyhow::{bail, Context, Result};
use clap::Parser;
use dpdk::{Mempool, Port, TxOffloads};
use pxgw::config::{parse_mac, Backing, Config, Mode};
use pxgw::metrics::{self, Metrics};
use pxgw::pipeline::{Offloads, Pipeline};
use pxgw::ports::{self, Gateway, PortPlan};
use pxgw::privileges::{self, Target};
use pxgw::publish::{self, Publisher};
use pxgw::queues::QueueControl;
use pxgw::replay::{self, ReplayOptions};
use pxgw::stats::{PortCounters, PortReport, Report, Sample, Table};
use pxgw::sysfs;
use pxgw::worker::Worker;
use pxio::split::SplitOffloads;
use pxio::TscClock;

/// The PacketExpress gateway: merges inbound TCP to the internal MTU, splits outbound TCP to the
/// path MTU, rewrites MSS options, carries UDP as caravans.
#[derive(Debug, Parser)]
#[command(name = "pxgw", version, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// The configuration file (see pxgw.toml in the repository).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Write the final statistics as JSON to this file.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Stop by itself after this many seconds (labs and tests); otherwise run until SIGINT or
    /// SIGTERM.
    #[arg(long)]
    run_for: Option<f64>,
    /// Check the configuration, open the ports as configured (MTU, chained TX, segment limits,
    /// the kernel interfaces' MTU), report, and exit without forwarding: 0 when all is as
    /// configured, 1 with one line per problem otherwise.
    #[arg(long)]
    check: bool,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// What would PacketExpress do to my traffic? Runs a pcap or pcapng capture through the
    /// gateway's pipeline in trace time, writes what the inside host would receive, and reports
    /// (docs/operations.md, "Replay").
    Replay(ReplayArgs),
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The gateway's configuration (its MTUs, delay budget and caravan settings are used; its
    /// ports are not opened).
    #[arg(long, short)]
    config: PathBuf,
    /// The capture to replay (pcap or pcapng, Ethernet).
    #[arg(long)]
    pcap: PathBuf,
    /// Where to write what the inside host would receive (pcap).
    #[arg(long)]
    out: PathBuf,
    /// Also write what the outside would receive (pcap).
    #[arg(long)]
    outside_out: Option<PathBuf>,
    /// The inside network: a frame to it goes inbound, one from it outbound (repeatable;
    /// e.g. 10.0.0.0/8, 2001:db8::/32).
    #[arg(long, required = true, value_parser = replay::parse_prefix)]
    inside: Vec<ipnet::IpNet>,
    /// Inbound frames closer than this to the first of a burst share one RX burst (µs).
    #[arg(long, default_value_t = 10.0)]
    burst_us: f64,
    /// Also write the report as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_target(false)
        .init();
    let args = Args::parse();
    if let Some(Cmd::Replay(r)) = &args.cmd {
        std::process::exit(match replay_cmd(r) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("pxgw replay: {e:#}");
                1
            }
        });
    }
    let Some(config) = &args.config else {
        eprintln!("pxgw: --config FILE is required (or `pxgw replay --help`)");
        std::process::exit(2);
    };
    let mut cfg = match Config::load(config) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("pxgw: {}: {e}", config.display());
            std::process::exit(2);
        }
    };
    // One RSS key for the whole process: the ports, their flow rules and every worker's
    // software hash read it from here (pxgw::rss).
    let rss_pattern = match cfg.rss.resolve() {
        Ok(key) => key.pattern(),
        Err(e) => {
            eprintln!("pxgw: rss.key: {e}");
            std::process::exit(2);
        }
    };
    let cfg = cfg;
    // A missing user stops pxgw before it opens anything.
    let target = match privileges::resolve(&cfg.process) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("pxgw: {}: {e}", config.display());
            std::process::exit(2);
        }
    };
    let problems = ports::preflight(&cfg, Path::new(sysfs::ROOT), ports::effective_caps());
    if !problems.is_empty() {
        for p in &problems {
            eprintln!("pxgw: {p}");
        }
        std::process::exit(1);
    }
    let result = if args.check {
        check(&args, &cfg, target.as_ref())
    } else {
        // Logged when ports open with it, not by `--check`, whose refusals are one line each.
        tracing::info!(pattern = format!("{rss_pattern:#06x}"), "RSS key");
        run(&args, &cfg, target.as_ref())
    };
    match result {
        Ok(0) => {}
        Ok(leaked) => {
            eprintln!("pxgw: {leaked} mbufs were not returned to their pools");
            std::process::exit(3);
        }
        Err(e) => {
            eprintln!("pxgw: {e:#}");
            std::process::exit(1);
        }
    }
}

/// How often the main thread samples the ports' counters for the metrics endpoint, at most.
const PORT_INTERVAL: Duration = Duration::from_millis(500);

/// `--check`: open everything as configured, report, forward nothing.
fn check(args: &Args, cfg: &Config, target: Option<&Target>) -> Result<usize> {
    let path = args.config.as_deref().unwrap_or(Path::new("?"));
    println!("pxgw: {}: configuration is valid", path.display());
    let gw = ports::open(cfg)?;
    for (plan, pc) in gw
        .plans
        .iter()
        .zip([&cfg.ports.external, &cfg.ports.internal])
    {
        println!("pxgw: {}", plan.describe(pc));
        for w in &plan.warnings {
            println!("pxgw: warning: {w}");
        }
    }
    let run_cfg = tuned(cfg, &gw.plans);
    if run_cfg.merge.max_segs != cfg.merge.max_segs {
        println!(
            "pxgw: merge.max_segs lowered from {} to {}: the internal port's nb_seg_max",
            cfg.merge.max_segs, run_cfg.merge.max_segs
        );
    }
    if let Some(t) = target {
        println!(
            "pxgw: runs as user {} ({}), group {} ({}) once the ports are open, keeping \
             capabilities {:?}",
            t.user,
            t.uid,
            t.group,
            t.gid,
            privileges::names(&privileges::needed_caps(cfg))
        );
    }
    println!("pxgw: check passed: both ports are configured as the configuration says");
    let Gateway {
        pool,
        headers,
        ext,
        int,
        eal,
        ..
    } = gw;
    drop((ext, int));
    let leaked = pool.in_use() + headers.in_use();
    drop(eal);
    Ok(leaked)
}

/// The configuration the workers run with: the merge and caravan chains capped at the internal
/// port's segment limit when it transmits chains itself (otherwise chains are copied flat).
fn tuned(cfg: &Config, plans: &[PortPlan; 2]) -> Config {
    let mut run = cfg.clone();
    let int = &plans[1];
    if int.multi_segs {
        let limit = int.tx_nb_seg_max.max(2);
        run.merge.max_segs = run.merge.max_segs.min(limit);
        run.caravan.max_datagrams = run.caravan.max_datagrams.min(limit - 1).max(1);
    }
    run
}

/// Forwards until SIGINT, SIGTERM or `--run-for`, then reports; returns the mbufs not returned
/// to their pools. The steps keep one order: everything that needs privileges to open (the EAL,
/// the ports, the metrics socket, the statistics file) opens before pxgw drops them, and the
/// workers start after.
fn run(args: &Args, cfg: &Config, target: Option<&Target>) -> Result<usize> {
    let interval = cfg.stats.interval()?;
    let limits = cfg.stats.prometheus_limits()?;
    let stop = stop_on_signals()?;
    let cores = worker_cores(cfg);
    let (gw, run_cfg) = open_ports(cfg)?;
    let cfg = &run_cfg;
    let datapath = Datapath::of(cfg, &gw)?;
    let (reports, live) = start_metrics(cfg, &gw, limits)?;
    // The statistics file is created while its directory may still need root.
    let stats_file = match (&args.stats_json, target) {
        (Some(path), Some(_)) => Some(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        _ => None,
    };
    if let Some(target) = target {
        drop_privileges(cfg, target)?;
    }
    let mut workers = start_workers(cfg, &gw, &datapath, &cores, reports, &stop)?;
    register_telemetry(&live.metrics);
    let started = wait(
        args,
        cfg,
        &gw,
        &live.metrics,
        &mut workers.rxq,
        interval,
        &stop,
    );
    shut_down(args, cfg, gw, workers, &live.metrics, started, stats_file)
}

/// A stop flag that SIGINT and SIGTERM raise.
fn stop_on_signals() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    Ok(stop)
}

/// The core of each worker: `workers.cores`, or 0, 1, ... wrapped at the CPU count.
fn worker_cores(cfg: &Config) -> Vec<usize> {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    match &cfg.workers.cores {
        Some(c) => c.clone(),
        None => (0..usize::from(cfg.workers.count))
            .map(|i| i % ncpu)
            .collect(),
    }
}

/// The EAL and both ports, logged as granted, with the configuration tuned to what they granted.
fn open_ports(cfg: &Config) -> Result<(Gateway, Config)> {
    let gw = ports::open(cfg)?;
    for (plan, pc) in gw
        .plans
        .iter()
        .zip([&cfg.ports.external, &cfg.ports.internal])
    {
        tracing::info!("{}", plan.describe(pc));
        for w in &plan.warnings {
            tracing::warn!("{w}");
        }
    }
    let run_cfg = tuned(cfg, &gw.plans);
    Ok((gw, run_cfg))
}

/// What every worker's data path shares, from the started ports.
struct Datapath {
    offloads: Offloads,
    flatten: (Option<Arc<Mempool>>, Option<Arc<Mempool>>),
    rewrite_macs: Option<([u8; 12], [u8; 12])>,
    clock: TscClock,
}

impl Datapath {
    fn of(cfg: &Config, gw: &Gateway) -> Result<Self> {
        let Gateway {
            eal,
            pool,
            ext,
            int,
            plans,
            ..
        } = gw;
        // Split with TSO only where the external port does TSO, checksums and chains. Not on
        // net_tap: its "TSO" is DPDK's software GSO, which here counts most split segments as
        // oerrors and stalls a TCP transfer (pxgw-lab), and is no faster than pxgw's own split.
        let tso = ext.tx_offloads().contains(
            TxOffloads::TCP_TSO
                | TxOffloads::IPV4_CKSUM
                | TxOffloads::TCP_CKSUM
                | TxOffloads::MULTI_SEGS,
        ) && plans[0].driver != "net_tap";
        // Merged packets toward the inside: the NIC fills their checksums, and with TSO it
        // cuts items grown past the iMTU (the engine's `tso_max_len`), where the inside port
        // grants it. Not net_tap: its checksums and TSO are DPDK's software ones, no cheaper
        // than the engine's sums, which it derives from the segments' without reading payload.
        let inside = int.tx_offloads();
        let inside_checksum = inside.contains(TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM)
            && plans[1].multi_segs
            && plans[1].driver != "net_tap";
        let inside_tso = inside_checksum && inside.contains(TxOffloads::TCP_TSO);
        let offloads = Offloads {
            inside_checksum,
            inside_tso_max_len: if inside_tso { u16::MAX } else { 0 },
            outside: SplitOffloads { tso, checksum: tso },
        };
        let flatten = (
            (!plans[0].multi_segs).then(|| pool.clone()),
            (!plans[1].multi_segs).then(|| pool.clone()),
        );
        tracing::info!(
            external = %cfg.ports.external.device, internal = %cfg.ports.internal.device,
            ext_tx_offloads = ?ext.tx_offloads(), ext_rx_offloads = ?ext.rx_offloads(), emtu = cfg.emtu(), imtu = cfg.imtu(), workers = cfg.workers.count,
            merge_max_segs = cfg.merge.max_segs,
            merge_tx_checksum = offloads.inside_checksum,
            merge_tso = offloads.inside_tso_max_len > 0,
            split_tso = offloads.outside.tso,
            "ports started"
        );
        let rewrite_macs = match cfg.mode {
            Mode::Transparent => None,
            Mode::L3 => {
                let mac = |p: &pxgw::config::Port| {
                    parse_mac(p.next_hop_mac.as_deref().unwrap_or("")).unwrap_or_default()
                };
                let (ext_mac, int_mac) = (ext.mac()?, int.mac()?);
                let pair = |dst: [u8; 6], src: [u8; 6]| {
                    let mut b = [0u8; 12];
                    b[..6].copy_from_slice(&dst);
                    b[6..].copy_from_slice(&src);
                    b
                };
                Some((
                    pair(mac(&cfg.ports.external), ext_mac),
                    pair(mac(&cfg.ports.internal), int_mac),
                ))
            }
        };
        Ok(Self {
            offloads,
            flatten,
            rewrite_macs,
            clock: TscClock::new(eal),
        })
    }
}

/// The counters workers publish and the main thread reads, and the metrics endpoint serving
/// them while it lives.
struct Live {
    metrics: Arc<Metrics>,
    _server: Option<metrics::Server>,
}

/// One publisher per worker, the counters they feed, and the metrics endpoint (its socket opens
/// here, before privileges drop).
fn start_metrics(
    cfg: &Config,
    gw: &Gateway,
    limits: metrics::Limits,
) -> Result<(Vec<Publisher>, Live)> {
    let (reports, snapshots): (Vec<_>, Vec<_>) =
        (0..cfg.workers.count).map(|_| publish::channel()).unzip();
    let metrics = Arc::new(Metrics::new(snapshots));
    metrics.set_ports(sample_ports(cfg, &gw.ext, &gw.int));
    let server = match cfg.stats.prometheus {
        Some(addr) => {
            let server = metrics::Server::start(addr, metrics.clone(), limits)?;
            tracing::info!("Prometheus metrics at http://{}/metrics", server.addr());
            Some(server)
        }
        None => None,
    };
    Ok((
        reports,
        Live {
            metrics,
            _server: server,
        },
    ))
}

/// Switches to `[process]`'s user, keeping the capabilities the ports need. Everything that needs
/// privileges to open is open by now: the EAL, the ports, the metrics socket. Workers and the
/// rule manager start after the switch, with the capabilities kept.
fn drop_privileges(cfg: &Config, target: &Target) -> Result<()> {
    let dropped = privileges::drop_to(target, &privileges::needed_caps(cfg))?;
    tracing::info!(
        user = %target.user, uid = %dropped.uid, group = %target.group, gid = %dropped.gid,
        capabilities = ?privileges::names(&dropped.caps),
        "running unprivileged"
    );
    if !dropped.unchanged_threads.is_empty() {
        tracing::warn!(
            threads = ?dropped.unchanged_threads,
            "threads the EAL started before the switch keep their capabilities (pxgw did \
             not change user); start pxgw as root with [process] user to drop them too"
        );
    }
    Ok(())
}

/// The worker threads and the RX queue control that steers traffic to them.
struct Workers {
    handles: Vec<JoinHandle<()>>,
    rxq: QueueControl,
}

/// The RX queue control (rule manager) and one pinned worker thread per publisher.
fn start_workers(
    cfg: &Config,
    gw: &Gateway,
    datapath: &Datapath,
    cores: &[usize],
    reports: Vec<Publisher>,
    stop: &Arc<AtomicBool>,
) -> Result<Workers> {
    let mut handles = Vec::new();
    let (rxq, worker_rx) = pxgw::queues::start(cfg, &gw.ext, &gw.int)?;
    let mut worker_rx = worker_rx.into_iter();
    for (i, report) in (0..cfg.workers.count).zip(reports) {
        let (ext_rx, int_rx) = worker_rx.next().context("one receive side per worker")?;
        let worker = Worker {
            eal: gw.eal.clone(),
            id: usize::from(i),
            core: cores.get(usize::from(i)).copied(),
            ext_rx,
            ext_tx: gw.ext.tx_queue(i)?,
            int_rx,
            int_tx: gw.int.tx_queue(i)?,
            pipeline: Pipeline::new(
                cfg,
                gw.headers.clone(),
                gw.headers.clone(),
                datapath.offloads,
            )?,
            clock: datapath.clock,
            report,
            stop: stop.clone(),
            rewrite_macs: datapath.rewrite_macs,
            flatten: datapath.flatten.clone(),
        };
        handles.push(
            std::thread::Builder::new()
                .name(format!("pxgw-w{i}"))
                .spawn(move || worker.run())?,
        );
    }
    Ok(Workers { handles, rxq })
}

/// `/pxgw/stats` for DPDK's telemetry client; a refusal is only logged.
fn register_telemetry(metrics: &Arc<Metrics>) {
    let telemetry_metrics = metrics.clone();
    if let Err(e) = dpdk::telemetry::register(
        "/pxgw/stats",
        "pxgw's counters, all workers added up (docs/operations.md)",
        move |_| telemetry_metrics.total().telemetry(),
    ) {
        tracing::warn!(error = %e, "cannot register the /pxgw/stats telemetry command");
    }
}

/// Samples the ports, the RX queue scaler and the summary lines until `stop` (or `--run-for`);
/// returns when forwarding started.
fn wait(
    args: &Args,
    cfg: &Config,
    gw: &Gateway,
    metrics: &Metrics,
    rxq: &mut QueueControl,
    interval: Option<Duration>,
    stop: &AtomicBool,
) -> Instant {
    let (ext, int) = (&gw.ext, &gw.int);
    // RX queue scaling over time ([queues]): what the scaler runs and what its policy wants.
    let rxq_active = metrics.gauge(
        "pxgw_rx_queues_active",
        "RX queues per port in the active configuration (RX queue scaling).",
    );
    let rxq_advised = metrics.gauge(
        "pxgw_rx_queues_advised",
        "RX queues per port the scaling policy wants (differs from active when scaling cannot act).",
    );
    let publish_rxq = |rxq: &QueueControl| {
        rxq_active.store(u64::from(rxq.active_queues()), Ordering::Relaxed);
        rxq_advised.store(u64::from(rxq.advised_queues()), Ordering::Relaxed);
    };
    publish_rxq(rxq);

    let started = Instant::now();
    rxq.sample(0.0);
    // The ports' counters for the metrics endpoint: fresh enough for a scrape, cheap to read.
    let port_interval = interval.map_or(PORT_INTERVAL, |i| i.min(PORT_INTERVAL));
    let table = Table::new(metrics.workers());
    let mut prev = Sample {
        ports: sample_ports(cfg, ext, int),
        ..Sample::default()
    };
    let mut last = Instant::now();
    let mut last_ports = Instant::now();
    let mut rows = 0u64;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if args
            .run_for
            .is_some_and(|s| started.elapsed().as_secs_f64() >= s)
        {
            stop.store(true, Ordering::Relaxed);
        }
        if last_ports.elapsed() >= port_interval {
            metrics.set_ports(sample_ports(cfg, ext, int));
            publish_rxq(rxq);
            last_ports = Instant::now();
        }
        if interval.is_some_and(|i| last.elapsed() >= i) {
            let now = Sample::new(
                started.elapsed().as_secs_f64(),
                metrics.reports(),
                sample_ports(cfg, ext, int),
            );
            rxq.sample(now.t);
            // The header again every 20 rows, so a scrolled terminal still names the columns.
            if rows.is_multiple_of(20) {
                tracing::info!("{}", table.header());
            }
            rows += 1;
            tracing::info!("{}{}", table.row(&now, &prev), rxq.line());
            prev = now;
            last = Instant::now();
        }
    }
    started
}

/// Joins the workers (they flush what they hold), stops the RX queue control, prints the final
/// counters and writes `--stats-json`; returns the mbufs not returned to their pools.
fn shut_down(
    args: &Args,
    cfg: &Config,
    gw: Gateway,
    workers: Workers,
    metrics: &Metrics,
    started: Instant,
    mut stats_file: Option<std::fs::File>,
) -> Result<usize> {
    let Workers { handles, mut rxq } = workers;
    tracing::info!("stopping: flushing held packets");
    for h in handles {
        if h.join().is_err() {
            bail!("a worker panicked");
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    rxq.sample(seconds);
    rxq.stop();
    let fin = metrics.total();
    let fin_ports = sample_ports(cfg, &gw.ext, &gw.int);
    // The endpoint shows the final counters until pxgw exits.
    metrics.set_ports(fin_ports.clone());
    let Gateway {
        pool,
        headers,
        ext,
        int,
        ..
    } = gw;
    drop((ext, int));
    let leaked = pool.in_use() + headers.in_use();
    println!("pxgw: final {}", fin.summary(seconds, &fin_ports));
    println!("pxgw: leaked mbufs {leaked}");
    if let Some(path) = &args.stats_json {
        let mut json = fin.to_json(seconds, leaked, &fin_ports);
        json["workers"] = Report::workers_json(&metrics.reports());
        json["rxq"] = rxq.to_json();
        let json = serde_json::to_string_pretty(&json)?;
        match stats_file.as_mut() {
            Some(file) => std::io::Write::write_all(file, json.as_bytes()),
            None => std::fs::write(path, json),
        }
        .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(leaked)
}

/// Both ports' counters now, with the kernel interfaces' for kernel-backed ports.
fn sample_ports(cfg: &Config, ext: &Port, int: &Port) -> PortCounters {
    let one = |pc: &pxgw::config::Port, port: &Port| PortReport {
        device: pc.device.clone(),
        counters: port.stats().map(Into::into).unwrap_or_else(|e| {
            tracing::warn!(device = %pc.device, error = %e, "cannot read the port's counters");
            Default::default()
        }),
        kernel: match pc.backing() {
            Backing::Kernel { iface, .. } => sysfs::kernel_counters(Path::new(sysfs::ROOT), &iface),
            _ => None,
        },
    };
    PortCounters {
        external: one(&cfg.ports.external, ext),
        internal: one(&cfg.ports.internal, int),
    }
}

/// `pxgw replay`: the capture through the pipeline, the report on stdout (and as JSON).
fn replay_cmd(a: &ReplayArgs) -> Result<()> {
    let cfg = Config::load(&a.config).with_context(|| a.config.display().to_string())?;
    let opts = ReplayOptions {
        inside: a.inside.clone(),
        burst_ns: (a.burst_us.max(0.0) * 1e3) as u64,
    };
    let r = replay::replay(&cfg, &a.pcap, &a.out, a.outside_out.as_deref(), &opts)?;
    println!(
        "pxgw replay: {} ({}), {} frames over {:.3} s; eMTU {}, iMTU {}",
        a.pcap.display(),
        r.format,
        r.frames,
        r.duration_s,
        cfg.emtu(),
        cfg.imtu()
    );
    for (name, d) in [("inbound ", &r.inbound), ("outbound", &r.outbound)] {
        println!(
            "  {name} {:>9} frames {:>12} B  ->  {:>9} frames {:>12} B   NF cost x{:.3}",
            d.packets_in, d.bytes_in, d.packets_out, d.bytes_out, d.nf_cost_ratio
        );
    }
    println!(
        "  yield {:.1} %; added delay mean {:.1} µs, p50 {:.1}, p99 {:.1}, max {:.1} ({} segments)",
        100.0 * r.conversion_yield,
        r.added_delay.mean_us,
        r.added_delay.p50_us,
        r.added_delay.p99_us,
        r.added_delay.max_us,
        r.added_delay.segments
    );
    println!(
        "  UDP: {} datagrams inbound, {} in {} caravans ({:.1} %)",
        r.udp.datagrams,
        r.udp.in_caravans,
        r.caravan.caravans_built,
        100.0 * r.udp.caravan_share
    );
    println!(
        "  TCP flows inbound with data: {}, merged {}, never merged {}",
        r.flows.tcp_flows,
        r.flows.merged,
        r.flows.never_merged.len() as u64 + r.flows.never_merged_unlisted
    );
    for f in r.flows.never_merged.iter().take(10) {
        println!(
            "    {} ({} segments, {} B): {}",
            f.flow, f.segments, f.payload_bytes, f.reason
        );
    }
    if r.skipped > 0 {
        println!(
            "  {} frames neither to nor from --inside were left out",
            r.skipped
        );
    }
    if r.above_emtu > 0 {
        println!(
            "  warning: {} frames are larger than the eMTU: the capture host's offloads (GRO, \
             TSO) were on, so the capture does not show the wire (`ethtool -K IF gro off tso off`)",
            r.above_emtu
        );
    }
    if r.drops.total() > 0 {
        println!("  drops: {:?}", r.drops);
    }
    println!("  wrote {}", a.out.display());
    if let Some(path) = &a.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
