//! `pxgw --config pxgw.toml`: the PacketExpress gateway.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use dpdk::{
    DeviceInfo, Eal, EalBuilder, HairpinPeer, Mempool, Port, PortId, RssHash, RxOffloads,
    TxOffloads,
};
use pxgw::config::{is_pci, parse_mac, Backing, Config, Mode};
use pxgw::metrics::{self, Metrics};
use pxgw::pipeline::Pipeline;
use pxgw::ports::{self, PortPlan};
use pxgw::privileges::{self, Target};
use pxgw::replay::{self, Prefix, ReplayOptions};
use pxgw::stats::{KernelSample, PortCounters, PortReport, Report};
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
    #[arg(long, required = true)]
    inside: Vec<Prefix>,
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
    let problems = ports::preflight(&cfg, Path::new(SYSFS), ports::effective_caps());
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

/// The EAL's file prefix unless `[eal] args` sets one: telemetry's socket directory.
const FILE_PREFIX: &str = "pxgw";

/// How often the main thread samples the ports' counters for the metrics endpoint, at most.
const PORT_INTERVAL: Duration = Duration::from_millis(500);

/// Where the kernel's interface and PCI device files are.
const SYSFS: &str = "/sys";

fn device_name(device: &str) -> &str {
    device.split(',').next().unwrap_or(device)
}

/// The largest `framesz=` among the vdev strings (net_af_packet), if any.
fn framesz(cfg: &Config) -> Option<u32> {
    [&cfg.ports.external.device, &cfg.ports.internal.device]
        .iter()
        .flat_map(|d| d.split(','))
        .filter_map(|kv| kv.strip_prefix("framesz="))
        .filter_map(|v| v.parse().ok())
        .max()
}

/// The EAL, the pools and the two started ports, checked against the configuration.
struct Gateway {
    eal: Eal,
    pool: Arc<Mempool>,
    headers: Arc<Mempool>,
    ext: Port,
    int: Port,
    plans: [PortPlan; 2],
}

fn start_eal(cfg: &Config) -> Result<Eal> {
    // Telemetry stays on: `dpdk-telemetry.py -f pxgw` shows the ports (`/ethdev/stats,N`) and
    // pxgw's own counters (`/pxgw/stats`), from the socket under /var/run/dpdk/pxgw/ (a second
    // instance gets the next `-i` index).
    let mut eal = EalBuilder::new("pxgw").memory_mb(cfg.eal.memory_mb);
    if !cfg.eal.args.iter().any(|a| a.starts_with("--file-prefix")) {
        eal = eal.arg(format!("--file-prefix={FILE_PREFIX}"));
    }
    if cfg.eal.no_huge {
        eal = eal.no_huge().no_shconf();
    }
    let mut pci = false;
    for d in [&cfg.ports.external.device, &cfg.ports.internal.device] {
        if is_pci(d) {
            pci = true;
            eal = eal.arg("-a").arg(d.clone());
        } else {
            eal = eal.vdev(d);
        }
    }
    if !pci {
        eal = eal.no_pci();
    }
    for a in &cfg.eal.args {
        eal = eal.arg(a.clone());
    }
    Ok(eal.init()?)
}

fn open(cfg: &Config) -> Result<Gateway> {
    let eal = start_eal(cfg)?;
    // Mbufs must hold a whole frame of the larger MTU (net_af_packet: a whole ring frame).
    let frame = u32::from(cfg.internal_mtu()) + 14 + 8;
    let data_room = framesz(cfg).unwrap_or(0).max(frame).min(65535 - 128) + 128;
    let pool = Mempool::new(
        &eal,
        "pxgw_rx",
        cfg.workers.pool_size,
        256,
        data_room as u16,
    )
    .context("creating the packet pool")?;
    let headers =
        Mempool::new(&eal, "pxgw_hdr", 16383, 256, 256).context("creating the header pool")?;
    // Hairpin queues only when both ports have them: what the external port leaves on the NIC
    // leaves by the internal one (an RX hairpin queue outside, a TX hairpin queue inside; each
    // port gets a pair, the unused halves stay idle). Otherwise every flow goes to the CPU
    // (reported when the rule manager starts).
    let ids: Vec<Option<PortId>> = ports::ports(cfg)
        .iter()
        .map(|(_, pc, _)| eal.port_by_name(device_name(&pc.device)).ok())
        .collect();
    let hairpin = match (cfg.queues.hairpin, ids[0], ids[1]) {
        (true, Some(e), Some(i)) => {
            let caps = [e, i].map(|id| dpdk::hairpin_capability(&eal, id));
            for (c, name) in caps.iter().zip(["external", "internal"]) {
                if let Err(e) = c {
                    tracing::debug!("ports.{name}: {e}");
                }
            }
            caps.iter().all(Result::is_ok).then_some((e, i))
        }
        _ => None,
    };
    let n = pxgw::queues::rx_queue_count(cfg);
    let peer = |port, sample_queue: bool| HairpinPeer {
        port,
        rx_base: n + u16::from(sample_queue),
        tx_base: n,
    };
    let (ext, ext_plan) = open_port(
        &eal,
        &pool,
        &headers,
        cfg,
        0,
        hairpin.map(|(_, i)| peer(i, false)),
    )?;
    let (int, int_plan) = open_port(
        &eal,
        &pool,
        &headers,
        cfg,
        1,
        hairpin.map(|(e, _)| peer(e, true)),
    )?;
    if hairpin.is_some() {
        // Only flow rules fill the sample queue: the port's own RSS leaves it out, so no frame
        // lands where no worker reads it, whatever happens to the rules.
        ext.set_rss_queues(&(0..n).collect::<Vec<_>>())
            .context("ports.external: keeping the hairpin sample queue out of RSS")?;
        // What the external port hairpins leaves by the internal one.
        int.hairpin_bind(&ext).context("ports.internal: hairpin")?;
    }
    Ok(Gateway {
        eal,
        pool,
        headers,
        ext,
        int,
        plans: [ext_plan, int_plan],
    })
}

/// Starts port `which` (0 external, 1 internal) with its configured MTU and rings, and reads back
/// what it granted; every refusal is one line naming the port and the limit.
fn open_port(
    eal: &Eal,
    pool: &Arc<Mempool>,
    headers: &Arc<Mempool>,
    cfg: &Config,
    which: usize,
    hairpin_peer: Option<HairpinPeer>,
) -> Result<(Port, PortPlan)> {
    let (name, pc, mtu) = ports::ports(cfg)[which];
    let device = device_name(&pc.device);
    let id = eal.port_by_name(device).map_err(|_| match pc.backing() {
        Backing::Pci(addr) => anyhow!(
            "ports.{name}: DPDK found no port for PCI device {addr}: is it bound to a DPDK-capable \
             driver (vfio-pci, or a bifurcated one such as mlx5)?"
        ),
        _ => anyhow!("ports.{name}: DPDK created no port named {device}"),
    })?;
    let info = DeviceInfo::of(eal, id).with_context(|| format!("ports.{name}"))?;
    let mut note = None;
    let apply_mtu = match info.check_mtu(mtu) {
        Ok(()) => true,
        Err(_) if ports::af_packet_holds(pc, mtu) => {
            note = Some(format!(
                "DPDK's net_af_packet limit (max_rx_pktlen {}) set aside: its ring frames hold \
                 MTU {mtu} and the kernel interface enforces it",
                info.max_rx_pktlen
            ));
            false
        }
        Err(reason) => bail!(
            "ports.{name}: {} cannot take the configured MTU {mtu}: {reason}",
            info.driver
        ),
    };
    let mut builder = Port::builder(eal, id)
        .rx_queues(pxgw::queues::rx_queue_count(cfg))
        // As many TX queues as RX queues (net_tap requires it); workers use the first
        // `workers.count`, the others stay empty.
        .tx_queues(pxgw::queues::rx_queue_count(cfg))
        .descriptors(pc.rx_descriptors, pc.tx_descriptors)
        .rss(RssHash::IP | RssHash::TCP | RssHash::UDP)
        // Both directions of a connection on one worker (pxgw::worker docs).
        .rss_key(cfg.rss.key().context("rss.key")?.bytes())
        .tx_offloads(
            TxOffloads::MULTI_SEGS
                | TxOffloads::TCP_TSO
                | TxOffloads::IPV4_CKSUM
                | TxOffloads::TCP_CKSUM,
        )
        // Where the device verifies checksums on receive, the merge engine trusts its verdicts
        // instead of summing every segment itself (about 85 ns per 1448 B segment here), and
        // takes its run path. Granted only where the device offers them.
        .rx_offloads(RxOffloads::IPV4_CKSUM | RxOffloads::TCP_CKSUM | RxOffloads::UDP_CKSUM);
    if apply_mtu {
        builder = builder.mtu(mtu);
    }
    if cfg.queues.header_split {
        // Refused by start() on a device without buffer split: never emulated.
        builder = builder.header_split(cfg.queues.header_bytes, headers.clone());
    }
    if let Some(peer) = hairpin_peer {
        // One hairpin queue pair, peered with the other port's; outside, one more RX queue: the
        // sample the heavy-hitter monitor reads (pxgw::queues).
        builder = builder
            .hairpin_queues(1)
            .hairpin_peer(peer)
            .rx_queues(pxgw::queues::rx_queue_count(cfg) + u16::from(which == 0));
    }
    let port = builder.start(pool).map_err(|e| match e {
        dpdk::Error::Mtu { .. } => anyhow!("ports.{name}: {e}"),
        e => anyhow!("ports.{name}: starting {}: {e}", pc.device),
    })?;
    let dpdk_mtu = port.mtu().with_context(|| format!("ports.{name}"))?;
    let kernel_mtu = match pc.backing() {
        Backing::Kernel { iface, .. } => {
            let k = ports::kernel_mtu(Path::new(SYSFS), &iface);
            if k != Some(mtu) {
                bail!(
                    "ports.{name}: configured MTU {mtu} but interface {iface} has MTU {} after \
                     the port started",
                    k.map_or("(unknown)".into(), |k| k.to_string())
                );
            }
            k
        }
        _ => None,
    };
    if apply_mtu && dpdk_mtu != mtu {
        bail!("ports.{name}: configured MTU {mtu} but the device kept MTU {dpdk_mtu}");
    }
    let plan = PortPlan {
        name,
        driver: info.driver.clone(),
        mtu: if apply_mtu { dpdk_mtu } else { mtu },
        kernel_mtu,
        multi_segs: port.tx_offloads().contains(TxOffloads::MULTI_SEGS),
        tx_nb_seg_max: info.tx_desc.nb_seg_max,
        mtu_limit: info.mtu_limit(),
        note,
    };
    Ok((port, plan))
}

/// `--check`: open everything as configured, report, forward nothing.
fn check(args: &Args, cfg: &Config, target: Option<&Target>) -> Result<usize> {
    let path = args.config.as_deref().unwrap_or(Path::new("?"));
    println!("pxgw: {}: configuration is valid", path.display());
    let gw = open(cfg)?;
    for (plan, pc) in gw
        .plans
        .iter()
        .zip([&cfg.ports.external, &cfg.ports.internal])
    {
        println!("pxgw: {}", plan.describe(pc));
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

fn run(args: &Args, cfg: &Config, target: Option<&Target>) -> Result<usize> {
    let interval = cfg.stats.interval()?;
    let limits = cfg.stats.prometheus_limits()?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cores: Vec<usize> = match &cfg.workers.cores {
        Some(c) => c.clone(),
        None => (0..usize::from(cfg.workers.count))
            .map(|i| i % ncpu)
            .collect(),
    };

    let Gateway {
        eal,
        pool,
        headers,
        ext,
        int,
        plans,
    } = open(cfg)?;
    for (plan, pc) in plans.iter().zip([&cfg.ports.external, &cfg.ports.internal]) {
        tracing::info!("{}", plan.describe(pc));
    }
    let run_cfg = tuned(cfg, &plans);
    let cfg = &run_cfg;
    let queues = cfg.workers.count;
    // Split with TSO only where the external port does TSO, checksums and chains. Not on
    // net_tap: its "TSO" is DPDK's software GSO, which here counts most split segments as
    // oerrors and stalls a TCP transfer (pxgw-lab), and is no faster than pxgw's own split.
    let tso = ext.tx_offloads().contains(
        TxOffloads::TCP_TSO
            | TxOffloads::IPV4_CKSUM
            | TxOffloads::TCP_CKSUM
            | TxOffloads::MULTI_SEGS,
    ) && plans[0].driver != "net_tap";
    let offloads = SplitOffloads { tso, checksum: tso };
    let flatten = (
        (!plans[0].multi_segs).then(|| pool.clone()),
        (!plans[1].multi_segs).then(|| pool.clone()),
    );
    tracing::info!(
        external = %cfg.ports.external.device, internal = %cfg.ports.internal.device,
        ext_tx_offloads = ?ext.tx_offloads(), ext_rx_offloads = ?ext.rx_offloads(), emtu = cfg.emtu(), imtu = cfg.imtu(), workers = queues,
        merge_max_segs = cfg.merge.max_segs,
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
    let clock = TscClock::new(&eal);
    let (reports, snapshots): (Vec<_>, Vec<_>) = (0..queues).map(|_| metrics::channel()).unzip();
    let metrics = Arc::new(Metrics::new(snapshots));
    metrics.set_ports(sample_ports(cfg, &ext, &int));
    let _server = match cfg.stats.prometheus {
        Some(addr) => {
            let server = metrics::Server::start(addr, metrics.clone(), limits)?;
            tracing::info!("Prometheus metrics at http://{}/metrics", server.addr());
            Some(server)
        }
        None => None,
    };
    // The statistics file is created while its directory may still need root.
    let mut stats_file = match (&args.stats_json, target) {
        (Some(path), Some(_)) => Some(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        _ => None,
    };
    // Everything that needs privileges to open is open: the EAL, the ports, the metrics socket.
    // Workers and the rule manager start after the switch, with the capabilities kept.
    if let Some(target) = target {
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
    }
    let mut handles = Vec::new();
    let (mut rxq, worker_rx) = pxgw::queues::start(cfg, &ext, &int)?;
    let mut worker_rx = worker_rx.into_iter();
    for (i, report) in (0..queues).zip(reports) {
        let (ext_rx, int_rx) = worker_rx.next().context("one receive side per worker")?;
        let worker = Worker {
            eal: eal.clone(),
            id: usize::from(i),
            core: cores.get(usize::from(i)).copied(),
            ext_rx,
            ext_tx: ext.tx_queue(i)?,
            int_rx,
            int_tx: int.tx_queue(i)?,
            pipeline: Pipeline::new(cfg, headers.clone(), headers.clone(), offloads)?,
            clock,
            report,
            stop: stop.clone(),
            rewrite_macs,
            flatten: flatten.clone(),
        };
        handles.push(
            std::thread::Builder::new()
                .name(format!("pxgw-w{i}"))
                .spawn(move || worker.run())?,
        );
    }

    let telemetry_metrics = metrics.clone();
    if let Err(e) = dpdk::telemetry::register(
        "/pxgw/stats",
        "pxgw's counters, all workers added up (docs/operations.md)",
        move |_| telemetry_answer(&telemetry_metrics.total()),
    ) {
        tracing::warn!(error = %e, "cannot register the /pxgw/stats telemetry command");
    }

    // RX queue scaling over time ([queues]): what the scaler runs and what its policy wants.
    let rxq_active = metrics.gauge(
        "pxgw_rx_queues_active",
        "RX queues per port in the active configuration (RX queue scaling).",
    );
    let rxq_advised = metrics.gauge(
        "pxgw_rx_queues_advised",
        "RX queues per port the scaling policy wants (differs from active when scaling cannot act).",
    );
    let publish_rxq = |rxq: &pxgw::queues::QueueControl| {
        rxq_active.store(u64::from(rxq.active_queues()), Ordering::Relaxed);
        rxq_advised.store(u64::from(rxq.advised_queues()), Ordering::Relaxed);
    };
    publish_rxq(&rxq);

    let started = Instant::now();
    rxq.sample(0.0);
    // The ports' counters for the metrics endpoint: fresh enough for a scrape, cheap to read.
    let port_interval = interval.map_or(PORT_INTERVAL, |i| i.min(PORT_INTERVAL));
    let mut prev = Report::default();
    let mut prev_ports = sample_ports(cfg, &ext, &int);
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
            metrics.set_ports(sample_ports(cfg, &ext, &int));
            publish_rxq(&rxq);
            last_ports = Instant::now();
        }
        if interval.is_some_and(|i| last.elapsed() >= i) {
            let now = metrics.total();
            let now_ports = sample_ports(cfg, &ext, &int);
            rxq.sample(started.elapsed().as_secs_f64());
            // The header again every 20 rows, so a scrolled terminal still names the columns.
            if rows.is_multiple_of(20) {
                tracing::info!("{}", Report::header());
            }
            rows += 1;
            tracing::info!(
                "{}{}",
                now.row(
                    &prev,
                    last.elapsed().as_secs_f64(),
                    started.elapsed().as_secs_f64(),
                    &now_ports,
                    &prev_ports
                ),
                rxq.line()
            );
            prev = now;
            prev_ports = now_ports;
            last = Instant::now();
        }
    }
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
    let fin_ports = sample_ports(cfg, &ext, &int);
    // The endpoint shows the final counters until pxgw exits.
    metrics.set_ports(fin_ports.clone());
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
            Backing::Kernel { iface, .. } => KernelSample::read(Path::new(SYSFS), &iface),
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

/// `/pxgw/stats`: the counters an operator checks first, flat, for DPDK's telemetry client.
fn telemetry_answer(r: &Report) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = [
        ("inbound_packets_in", r.inbound.packets_in),
        ("inbound_bytes_in", r.inbound.bytes_in),
        ("inbound_packets_out", r.inbound.packets_out),
        ("inbound_bytes_out", r.inbound.bytes_out),
        ("outbound_packets_in", r.outbound.packets_in),
        ("outbound_bytes_in", r.outbound.bytes_in),
        ("outbound_packets_out", r.outbound.packets_out),
        ("outbound_bytes_out", r.outbound.bytes_out),
        ("merge_payload_in", r.merge.payload_in),
        ("merge_payload_full", r.merge.payload_full),
        ("merges", r.merge.merges),
        ("cuts", r.merge.cuts),
        ("held_items", r.merge.held_items),
        ("merge_flows", r.merge.flows),
        ("merge_evictions", r.merge.evictions),
        ("caravans_built", r.caravan.caravans_built),
        ("caravans_unpacked", r.caravan.caravans_unpacked),
        ("pmtud_probes_sent", r.pmtud.probes_sent),
        ("pmtud_answers", r.pmtud.discovered),
        ("pmtud_fallbacks", r.pmtud.fallbacks),
        ("mss_rewrites", r.mss.rewritten),
        ("connections", r.connections),
        ("drops", r.drops.total()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    v.push((
        "yield_permille".into(),
        (r.merge.conversion_yield * 1000.0).round() as u64,
    ));
    v
}
