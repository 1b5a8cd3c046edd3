//! What an operator sees of a running pxgw: its Prometheus endpoint, scraped during traffic and
//! parsed with a Prometheus text parser (`prometheus-parse`), and DPDK's telemetry socket read
//! with Debian's `dpdk-telemetry.py`. The checks compare both with the final `--stats-json`, and
//! the scrapes feed the figure ([`crate::plot`]).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use prometheus_parse::{Scrape, Value};
use serde_json::Value as Json;

use crate::plot::Figure;

/// One scrape, `t` seconds after scraping started.
pub struct Timed {
    /// Seconds since the scraper started.
    pub t: f64,
    /// The parsed exposition.
    pub scrape: Scrape,
}

/// Fetches and parses `url` once (curl does the HTTP).
pub fn scrape(url: &str) -> Result<Scrape> {
    let out = Command::new("curl")
        .args(["-sfm", "5", url])
        .stderr(Stdio::null())
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("curl {url} failed ({})", out.status);
    }
    let text = String::from_utf8(out.stdout).context("the exposition is not UTF-8")?;
    Ok(Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))?)
}

/// The sum of `metric`'s samples whose labels include all of `labels` (a counter comes out of
/// an OpenMetrics exposition as untyped `…_total` samples, which is what Prometheus stores).
pub fn sum(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .map(|x| match x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => 0.0,
        })
        .sum()
}

/// `metric`'s histogram with these labels: (upper bound, cumulative count), sorted by bound.
pub fn histogram(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = s
        .samples
        .iter()
        .filter(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(v)))
        .flat_map(|x| match &x.value {
            Value::Histogram(h) => h.iter().map(|c| (c.less_than, c.count)).collect(),
            _ => Vec::new(),
        })
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    v
}

/// Scrapes an endpoint every `every` on its own thread until [`finish`](Self::finish).
pub struct Scraper {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Vec<Timed>, usize)>,
}

impl Scraper {
    /// Starts scraping `url`.
    pub fn start(url: String, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let (mut got, mut failed) = (Vec::new(), 0);
            while !flag.load(Ordering::Relaxed) {
                match scrape(&url) {
                    Ok(scrape) => got.push(Timed {
                        t: started.elapsed().as_secs_f64(),
                        scrape,
                    }),
                    Err(_) => failed += 1,
                }
                std::thread::sleep(every);
            }
            (got, failed)
        });
        Self { stop, thread }
    }

    /// Stops and returns the scrapes, and how many failed.
    pub fn finish(self) -> (Vec<Timed>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Sends `commands` to pxgw's telemetry socket with `dpdk-telemetry.py -f PREFIX` and returns
/// each JSON answer.
pub fn telemetry(prefix: &str, commands: &[&str]) -> Result<Vec<Json>> {
    let mut child = Command::new("dpdk-telemetry.py")
        .args(["-f", prefix])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running dpdk-telemetry.py (Debian's dpdk package)")?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("no stdin")?;
        for c in commands {
            writeln!(stdin, "{c}")?;
        }
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // One JSON object per line after the greeting (itself a JSON object); keep the answers.
    let answers: Vec<Json> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l.trim()).ok())
        .filter(|v| {
            v.as_object().is_some_and(|o| {
                o.keys()
                    .any(|k| commands.iter().any(|c| c.starts_with(k.as_str())))
            })
        })
        .collect();
    if answers.len() != commands.len() {
        bail!(
            "dpdk-telemetry.py answered {} of {} commands: {}{}",
            answers.len(),
            commands.len(),
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(answers)
}

/// What the scrapes and telemetry showed, and the checks against the final JSON.
pub struct Observed {
    /// Named checks (for the suite).
    pub checks: Vec<(String, bool)>,
    /// Lines for the operator.
    pub lines: Vec<String>,
    /// The figure's data.
    pub figure: Figure,
}

/// Checks the scrapes taken during traffic (`during`), the last one after traffic stopped
/// (`quiet`), and telemetry's answers (`telemetry`: `/ethdev/stats,0` then `/pxgw/stats`)
/// against pxgw's final `--stats-json` (`stats`).
pub fn check(
    during: &[Timed],
    failed: usize,
    quiet: Option<&Scrape>,
    telemetry: Option<&[Json]>,
    stats: &Json,
) -> Observed {
    let mut checks = Vec::new();
    let mut lines = Vec::new();
    let rx_ext = |s: &Scrape| sum(s, "pxgw_received_packets_total", &[("port", "external")]);
    let series: Vec<f64> = during.iter().map(|t| rx_ext(&t.scrape)).collect();
    let rising = series.windows(2).filter(|w| w[1] > w[0]).count();
    let monotonic = series.windows(2).all(|w| w[1] >= w[0]);
    lines.push(format!(
        "Prometheus: {} scrapes during traffic ({failed} failed); frames received outside went {} -> {}",
        during.len(),
        series.first().copied().unwrap_or(0.0),
        series.last().copied().unwrap_or(0.0),
    ));
    checks.push((
        "metrics: scraped during traffic, counters rise between scrapes and never fall".to_owned(),
        during.len() >= 3 && rising >= 2 && monotonic,
    ));
    let final_in = stats["inbound"]["packets_in"].as_f64().unwrap_or(0.0);
    let final_out = stats["inbound"]["packets_out"].as_f64().unwrap_or(0.0);
    if let Some(q) = quiet {
        // After traffic stopped, the endpoint and the final JSON count the same frames, but for
        // the few that arrive after the last scrape (neighbour discovery) and the merge items
        // flushed at exit.
        let (s_in, s_out) = (
            rx_ext(q),
            sum(q, "pxgw_sent_packets_total", &[("port", "internal")]),
        );
        let close = |a: f64, b: f64| a <= b && b - a <= 20.0 + 0.001 * b;
        lines.push(format!(
            "Prometheus after traffic: inbound {s_in} frames in, {s_out} out; final JSON {final_in} in, {final_out} out"
        ));
        checks.push((
            "metrics: the last scrape agrees with the final JSON (frames in and out, inbound)"
                .to_owned(),
            final_in > 0.0 && close(s_in, final_in) && close(s_out, final_out),
        ));
        let payload = sum(q, "pxgw_merge_payload_bytes_total", &[]);
        let full = sum(q, "pxgw_merge_full_payload_bytes_total", &[]);
        let json_yield = stats["merge"]["conversion_yield"].as_f64().unwrap_or(-1.0);
        let scraped_yield = if payload > 0.0 { full / payload } else { 0.0 };
        checks.push((
            format!(
                "metrics: yield from the scraped counters ({:.1} %) matches the final JSON ({:.1} %)",
                100.0 * scraped_yield,
                100.0 * json_yield
            ),
            payload > 0.0 && (scraped_yield - json_yield).abs() < 0.01,
        ));
        let h = histogram(
            q,
            "pxgw_frame_size_bytes",
            &[("direction", "inbound"), ("side", "received")],
        );
        let h_count = h.last().map_or(0.0, |b| b.1);
        checks.push((
            "metrics: the inbound frame-size histogram counts every frame received outside"
                .to_owned(),
            h_count > 0.0 && h_count == s_in,
        ));
    } else {
        checks.push(("metrics: scraped after traffic".to_owned(), false));
    }
    match telemetry {
        Some([ethdev, pxgw, ..]) => {
            let ipackets = ethdev["/ethdev/stats"]["ipackets"].as_f64().unwrap_or(0.0);
            let pin = pxgw["/pxgw/stats"]["inbound_packets_in"]
                .as_f64()
                .unwrap_or(0.0);
            lines.push(format!(
                "dpdk-telemetry.py: /ethdev/stats,0 ipackets {ipackets}; /pxgw/stats inbound_packets_in {pin}"
            ));
            checks.push((
                "telemetry: dpdk-telemetry.py shows the outside port's ethdev stats and /pxgw/stats"
                    .to_owned(),
                ipackets > 0.0 && pin > 0.0 && pin <= final_in,
            ));
        }
        _ => checks.push((
            "telemetry: dpdk-telemetry.py answers /ethdev/stats and /pxgw/stats".to_owned(),
            false,
        )),
    }
    let figure = Figure::from_scrapes(during, quiet);
    Observed {
        checks,
        lines,
        figure,
    }
}

/// Sends `lines` short lines over one TCP connection from the outside host to the inside host,
/// `gap` apart (an interactive flow, for `pxgw-lab capture`).
pub fn sparse_flow(
    lab: &crate::Lab,
    family: crate::Family,
    lines: u32,
    gap: Duration,
) -> Result<()> {
    let addr = lab.int_addr(family);
    let (listen, connect) = match family {
        crate::Family::V4 => (
            "TCP4-LISTEN:5003,reuseaddr".to_owned(),
            format!("TCP4:{addr}:5003"),
        ),
        crate::Family::V6 => (
            "TCP6-LISTEN:5003,reuseaddr,ipv6only=1".to_owned(),
            format!("TCP6:[{addr}]:5003"),
        ),
    };
    let mut receiver = Command::new("ip")
        .args([
            "netns",
            "exec",
            lab.int.name(),
            "socat",
            "-u",
            &listen,
            "OPEN:/dev/null",
        ])
        .spawn()
        .context("starting socat")?;
    std::thread::sleep(Duration::from_millis(300));
    let script = format!(
        "for i in $(seq 1 {lines}); do echo line-$i; sleep {}; done | socat -u - {connect}",
        gap.as_secs_f64()
    );
    let sent = Command::new("ip")
        .args(["netns", "exec", lab.ext.name(), "sh", "-c", &script])
        .status()
        .context("starting the sender")?;
    let received = receiver.wait()?;
    if !sent.success() || !received.success() {
        bail!("the sparse flow failed: sender {sent}, receiver {received}");
    }
    Ok(())
}

/// tcpdump on the outside host's interface, writing every frame to a pcap; stopped (SIGINT,
/// so the file is complete) by [`OutsideCapture::stop`].
pub struct OutsideCapture {
    child: std::process::Child,
}

impl OutsideCapture {
    /// Starts capturing on the outside host of `lab` into `file`.
    pub fn start(lab: &crate::Lab, file: &std::path::Path) -> Result<Self> {
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                lab.ext.name(),
                "tcpdump",
                "-i",
                lab.ext_iface(),
            ])
            // Immediate mode: without it, frames of the last buffer block are lost at SIGINT.
            .args(["-s", "0", "-U", "--immediate-mode", "-n", "-w"])
            .arg(file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting tcpdump")?;
        std::thread::sleep(Duration::from_millis(700));
        Ok(Self { child })
    }

    /// Stops tcpdump and waits for it.
    pub fn stop(mut self) -> Result<()> {
        std::thread::sleep(Duration::from_millis(300));
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        self.child.wait()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An exposition as pxgw writes it, with `rx` frames received outside, `tx` sent inside.
    fn exposition(rx: u64, tx: u64) -> Scrape {
        let text = format!(
            "# HELP pxgw_received_packets Frames.\n# TYPE pxgw_received_packets counter\n\
             pxgw_received_packets_total{{worker=\"0\",port=\"external\"}} {rx}\n\
             # HELP pxgw_sent_packets Frames.\n# TYPE pxgw_sent_packets counter\n\
             pxgw_sent_packets_total{{worker=\"0\",port=\"internal\"}} {tx}\n\
             # TYPE pxgw_merge_payload_bytes counter\npxgw_merge_payload_bytes_total{{worker=\"0\"}} 1000\n\
             # TYPE pxgw_merge_full_payload_bytes counter\npxgw_merge_full_payload_bytes_total{{worker=\"0\"}} 950\n\
             # TYPE pxgw_frame_size_bytes histogram\n\
             pxgw_frame_size_bytes_bucket{{le=\"1518.0\",direction=\"inbound\",side=\"received\"}} {rx}\n\
             pxgw_frame_size_bytes_bucket{{le=\"+Inf\",direction=\"inbound\",side=\"received\"}} {rx}\n\
             # EOF\n"
        );
        Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
    }

    fn timed(values: &[u64]) -> Vec<Timed> {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| Timed {
                t: i as f64 * 0.5,
                scrape: exposition(v, v / 5),
            })
            .collect()
    }

    fn stats(rx: u64, tx: u64) -> Json {
        serde_json::json!({
            "inbound": {"packets_in": rx, "packets_out": tx},
            "merge": {"conversion_yield": 0.95},
        })
    }

    fn failed(o: &Observed) -> Vec<&str> {
        o.checks
            .iter()
            .filter(|c| !c.1)
            .map(|c| c.0.as_str())
            .collect()
    }

    #[test]
    fn parses_what_pxgw_writes() {
        let s = exposition(500, 100);
        assert_eq!(
            sum(&s, "pxgw_received_packets_total", &[("port", "external")]),
            500.0
        );
        assert_eq!(
            histogram(&s, "pxgw_frame_size_bytes", &[("side", "received")]),
            [(1518.0, 500.0), (f64::INFINITY, 500.0)]
        );
    }

    /// Rising counters that agree with the final JSON pass; counters that fall, a final JSON
    /// that disagrees, or no telemetry answer fail.
    #[test]
    fn checks_catch_what_is_wrong() {
        let tele = [
            serde_json::json!({"/ethdev/stats": {"ipackets": 900}}),
            serde_json::json!({"/pxgw/stats": {"inbound_packets_in": 900}}),
        ];
        let quiet = exposition(1000, 200);
        let good = check(
            &timed(&[0, 300, 600, 900]),
            0,
            Some(&quiet),
            Some(&tele),
            &stats(1000, 200),
        );
        assert!(failed(&good).is_empty(), "{:?}", failed(&good));
        let falling = check(
            &timed(&[0, 600, 300, 900]),
            0,
            Some(&quiet),
            Some(&tele),
            &stats(1000, 200),
        );
        assert_eq!(failed(&falling).len(), 1);
        let disagrees = check(
            &timed(&[0, 300, 600, 900]),
            0,
            Some(&quiet),
            Some(&tele),
            &stats(5000, 200),
        );
        assert_eq!(failed(&disagrees).len(), 1);
        let no_tele = check(
            &timed(&[0, 300, 600, 900]),
            0,
            Some(&quiet),
            None,
            &stats(1000, 200),
        );
        assert_eq!(failed(&no_tele).len(), 1);
    }
}
