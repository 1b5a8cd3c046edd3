//! `pxgw --config pxgw.toml`: the PacketExpress gateway.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use dpdk::{EalBuilder, Mempool, Port, RssHash, TxOffloads};
use pxgw::config::{parse_mac, Config, Mode};
use pxgw::pipeline::Pipeline;
use pxgw::stats::Report;
use pxgw::worker::Worker;
use pxio::split::SplitOffloads;
use pxio::TscClock;

/// The PacketExpress gateway: merges inbound TCP to the internal MTU, splits outbound TCP to the
/// path MTU, rewrites MSS options, carries UDP as caravans.
#[derive(Debug, Parser)]
#[command(name = "pxgw", version)]
struct Args {
    /// The configuration file (see pxgw.toml in the repository).
    #[arg(long, short)]
    config: PathBuf,
    /// Write the final statistics as JSON to this file.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Stop by itself after this many seconds (labs and tests); otherwise run until SIGINT or
    /// SIGTERM.
    #[arg(long)]
    run_for: Option<f64>,
    /// Only check the configuration and exit.
    #[arg(long)]
    check: bool,
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
    let cfg = match Config::load(&args.config) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("pxgw: {}: {e}", args.config.display());
            std::process::exit(2);
        }
    };
    if args.check {
        println!("pxgw: {}: configuration is valid", args.config.display());
        return;
    }
    match run(&args, &cfg) {
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

fn is_pci(device: &str) -> bool {
    let d = device.split(',').next().unwrap_or("");
    d.len() >= 7
        && d.chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        && d.contains(':')
}

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

fn run(args: &Args, cfg: &Config) -> Result<usize> {
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

    let mut eal = EalBuilder::new("pxgw")
        .memory_mb(cfg.eal.memory_mb)
        .no_telemetry();
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
    let eal = eal.init().context("starting DPDK")?;

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

    let queues = cfg.workers.count;
    let start = |device: &str| -> Result<Port> {
        let id = eal
            .port_by_name(device_name(device))
            .with_context(|| format!("no DPDK port for {device}"))?;
        Port::builder(&eal, id)
            .rx_queues(queues)
            .tx_queues(queues)
            .rss(RssHash::IP | RssHash::TCP | RssHash::UDP)
            // Both directions of a connection on one worker (pxgw::worker docs).
            .rss_key(pxio::toeplitz::SYMMETRIC_RSS_KEY)
            .tx_offloads(
                TxOffloads::MULTI_SEGS
                    | TxOffloads::TCP_TSO
                    | TxOffloads::IPV4_CKSUM
                    | TxOffloads::TCP_CKSUM,
            )
            .start(&pool)
            .with_context(|| format!("starting port {device}"))
    };
    let ext = start(&cfg.ports.external.device)?;
    let int = start(&cfg.ports.internal.device)?;
    // Split with TSO only where the external port does both TSO and checksums.
    let tso = ext
        .tx_offloads()
        .contains(TxOffloads::TCP_TSO | TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM);
    let offloads = SplitOffloads { tso, checksum: tso };
    tracing::info!(
        external = %cfg.ports.external.device, internal = %cfg.ports.internal.device,
        ext_tx_offloads = ?ext.tx_offloads(), emtu = cfg.emtu(), imtu = cfg.imtu(), workers = queues,
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
    let mut reports = Vec::new();
    let mut handles = Vec::new();
    for i in 0..queues {
        let report = Arc::new(Mutex::new(Report::default()));
        reports.push(report.clone());
        let worker = Worker {
            eal: eal.clone(),
            id: usize::from(i),
            core: cores.get(usize::from(i)).copied(),
            ext_rx: ext.rx_queue(i)?,
            ext_tx: ext.tx_queue(i)?,
            int_rx: int.rx_queue(i)?,
            int_tx: int.tx_queue(i)?,
            pipeline: Pipeline::new(cfg, headers.clone(), headers.clone(), offloads)?,
            clock,
            report,
            stop: stop.clone(),
            rewrite_macs,
        };
        handles.push(
            std::thread::Builder::new()
                .name(format!("pxgw-w{i}"))
                .spawn(move || worker.run())?,
        );
    }

    let started = Instant::now();
    let interval = Duration::from_secs_f64(cfg.stats.interval_s.max(0.05));
    let mut prev = Report::default();
    let mut last = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(20));
        if args
            .run_for
            .is_some_and(|s| started.elapsed().as_secs_f64() >= s)
        {
            stop.store(true, Ordering::Relaxed);
        }
        if cfg.stats.interval_s > 0.0 && last.elapsed() >= interval {
            let now = total(&reports);
            tracing::info!("{}", now.line(&prev, last.elapsed().as_secs_f64()));
            prev = now;
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
    let fin = total(&reports);
    drop((ext, int));
    let leaked = pool.in_use() + headers.in_use();
    println!(
        "pxgw: final after {seconds:.1} s: {}",
        fin.line(&Report::default(), seconds)
    );
    println!(
        "pxgw: inbound {} pkts {} B -> {} pkts {} B; outbound {} pkts {} B -> {} pkts {} B; yield {:.1} %; caravans {}/{} datagrams; leaked mbufs {leaked}",
        fin.inbound.packets_in, fin.inbound.bytes_in, fin.inbound.packets_out, fin.inbound.bytes_out,
        fin.outbound.packets_in, fin.outbound.bytes_in, fin.outbound.packets_out, fin.outbound.bytes_out,
        100.0 * fin.merge.conversion_yield, fin.caravan.caravans_built, fin.caravan.datagrams_packed,
    );
    if let Some(path) = &args.stats_json {
        let json = serde_json::to_string_pretty(&fin.to_json(seconds, leaked))?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(leaked)
}

fn total(reports: &[Arc<Mutex<Report>>]) -> Report {
    let mut sum = Report::default();
    for r in reports {
        if let Ok(r) = r.lock() {
            sum.add(&r);
        }
    }
    sum
}
