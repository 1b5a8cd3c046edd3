//! `fpmtud`: the F-PMTUD endpoint daemon and prober (SIGCOMM'26 §5.2, HotNets'25 §4.2).
//!
//! - `fpmtud serve [--port 4689] [--bind ::]` answers probes to this host.
//! - `fpmtud probe HOST [--size 9000] [--json FILE]` measures the path MTU toward HOST.

#![forbid(unsafe_code)]

use std::net::{IpAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fpmtud::endpoint::{self, ServeConfig, Server};
use fpmtud::{PmtuEstimate, ProberConfig, ResponderConfig, DEFAULT_PORT};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "fpmtud",
    version,
    about = "F-PMTUD: path MTU discovery in one round trip from IP fragments, without ICMP"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Answer F-PMTUD probes to this host (needs CAP_NET_RAW for the fragment capture).
    Serve {
        /// UDP port to answer on.
        #[arg(long, default_value_t = DEFAULT_PORT)]
        port: u16,
        /// Address to bind; `::` also takes IPv4.
        #[arg(long, default_value = "::")]
        bind: IpAddr,
        /// Probes answered per second per source address.
        #[arg(long, default_value_t = ResponderConfig::default().rate_per_sec)]
        rate: u32,
        /// Probes answered in a burst per source address.
        #[arg(long, default_value_t = ResponderConfig::default().burst)]
        burst: u32,
        /// Probes answered per second over all sources together (a flood of spoofed sources
        /// gets no more).
        #[arg(long, default_value_t = ResponderConfig::default().global_rate_per_sec)]
        global_rate: u32,
        /// Probes answered in a burst over all sources together.
        #[arg(long, default_value_t = ResponderConfig::default().global_burst)]
        global_burst: u32,
    },
    /// Measure the path MTU toward HOST.
    Probe {
        /// Host name or address running `fpmtud serve` (or a PacketExpress gateway).
        host: String,
        /// Probe size in bytes, IP header included: the next hop's eMTU.
        #[arg(long, default_value_t = 9000)]
        size: u16,
        /// The responder's UDP port.
        #[arg(long, default_value_t = DEFAULT_PORT)]
        port: u16,
        /// Local UDP port to probe from (0: any).
        #[arg(long, default_value_t = 0)]
        source_port: u16,
        /// Gap between the two probes, in ms.
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
        /// Wait for a report after the last probe, in ms.
        #[arg(long, default_value_t = 1000)]
        timeout_ms: u64,
        /// Probes per round.
        #[arg(long, default_value_t = 2)]
        probes: u8,
        /// TCP MSS seen for this path: the first fallback (MSS + 40, or + 60 for IPv6).
        #[arg(long)]
        mss_hint: Option<u16>,
        /// eMTU for the fallback (default: the route's MTU as the kernel knows it).
        #[arg(long)]
        emtu: Option<u16>,
        /// Also write the result as JSON to FILE.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Serve {
            port,
            bind,
            rate,
            burst,
            global_rate,
            global_burst,
        } => serve(
            port,
            bind,
            ResponderConfig {
                rate_per_sec: rate,
                burst,
                global_rate_per_sec: global_rate,
                global_burst,
                ..ResponderConfig::default()
            },
        ),
        Command::Probe {
            host,
            size,
            port,
            source_port,
            interval_ms,
            timeout_ms,
            probes,
            mss_hint,
            emtu,
            json,
        } => {
            let cfg = ProberConfig {
                port,
                probe_size: size,
                probes_per_round: probes,
                interval: Duration::from_millis(interval_ms),
                timeout: Duration::from_millis(timeout_ms),
                mss_hint,
                emtu,
                ..ProberConfig::default()
            };
            probe(&host, cfg, source_port, json.as_deref())
        }
    }
}

fn serve(port: u16, bind: IpAddr, responder: ResponderConfig) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .context("install the signal handler")?;
    }
    let cfg = ServeConfig {
        bind,
        port,
        responder,
        ..ServeConfig::default()
    };
    let mut server = Server::bind(cfg).context("start the F-PMTUD responder")?;
    let local = server.local_addr().context("read the bound address")?;
    tracing::info!(%local, "answering F-PMTUD probes");
    let stats = server.run_until(&stop)?;
    println!(
        "reports sent {}, not probes {}, unmatched {}, rate-limited {} per source and {} \
         globally, send errors {}",
        stats.reports_sent,
        stats.not_probes,
        stats.unmatched,
        stats.responder.source_limited,
        stats.responder.global_limited,
        stats.send_errors
    );
    Ok(())
}

fn resolve(host: &str, port: u16) -> Result<IpAddr> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    let addr = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("resolve {host}"))?
        .next()
        .with_context(|| format!("{host} has no address"))?;
    Ok(addr.ip())
}

fn probe(host: &str, cfg: ProberConfig, source_port: u16, json: Option<&Path>) -> Result<()> {
    let dst = resolve(host, cfg.port)?;
    let timeout = cfg.timeout;
    let e = endpoint::probe(dst, cfg, source_port)
        .with_context(|| format!("probe the path MTU toward {dst}"))?;
    println!("{}", summary(&e, timeout));
    if let Some(path) = json {
        let report = json!({
            "destination": dst.to_string(),
            "pmtu": e.mtu,
            "probes": e.probes,
            "round_trips": e.round_trips,
            "elapsed_ms": e.elapsed.as_secs_f64() * 1e3,
            "fragments": e.fragments,
            "fragments_seen": e.fragments_seen,
            "fallback": e.source.is_fallback(),
            "source": e.source.name(),
            "ignored_reports": e.ignored_reports,
        });
        write_json(path, &report)?;
    }
    Ok(())
}

/// One line for a person: `pmtu 1396 (probes 1, round trips 1, elapsed 0.4 ms, fragments seen
/// [1396, ...])`, or the fallback and why.
fn summary(e: &PmtuEstimate, timeout: Duration) -> String {
    let ms = e.elapsed.as_secs_f64() * 1e3;
    if e.source.is_fallback() {
        format!(
            "pmtu {} (fallback: {}; probes {}, no valid report within {} ms, elapsed {ms:.1} ms, \
             ignored reports {})",
            e.mtu,
            e.source.name(),
            e.probes,
            timeout.as_millis(),
            e.ignored_reports
        )
    } else {
        format!(
            "pmtu {} (probes {}, round trips {}, elapsed {ms:.1} ms, fragments seen {:?})",
            e.mtu, e.probes, e.round_trips, e.fragments
        )
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).context("encode JSON")?;
    std::fs::write(path, text + "\n").with_context(|| format!("write {}", path.display()))
}
