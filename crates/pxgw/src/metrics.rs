//! Live metrics: what the workers publish, and the Prometheus endpoint that serves it
//! (`[stats] prometheus = "127.0.0.1:9469"`, off by default).
//!
//! **No lock on the workers' side.** Each worker publishes its [`Report`] through its own
//! channel ([`crate::publish`]) and never waits for a reader; [`Metrics`] holds the readers' ends
//! ([`Snapshot`]), which the main thread's periodic line, the HTTP thread on a scrape and DPDK
//! telemetry's `/pxgw/stats` read.
//!
//! **Exposition.** `prometheus-client` writes the OpenMetrics text format from a
//! [`Collector`] that reads the latest snapshots at scrape time; a small HTTP server of our own
//! serves it from one thread, with bounded connections and timeouts ([`Server`]). Names follow
//! Prometheus' rules: `pxgw_…_total` for counters, base units (`_bytes`, `_seconds`), labels for
//! worker, port, direction and drop reason. [`Metrics::gauge`] adds a
//! gauge in one line (for settings that change what a worker does, e.g. the active RX queues).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::publish::Snapshot;
use crate::stats::counters::{Desc, Group, Kind, Member, Value};
use crate::stats::{PortCounters, PortSample, Report, SizeHistogram, FRAME_SIZE_BOUNDS};

mod http;
pub use http::{Limits, MetricsError, Server, MAX_REQUEST};

/// A gauge someone added with [`Metrics::gauge`].
struct ExtraGauge {
    name: String,
    help: String,
    value: Arc<AtomicU64>,
}

/// Everything the metrics endpoint shows: the workers' snapshots, the ports' counters (sampled
/// by the main thread, which owns the ports), fixed facts about the run, and added gauges.
pub struct Metrics {
    workers: Vec<Snapshot>,
    ports: Mutex<PortCounters>,
    gauges: Mutex<Vec<ExtraGauge>>,
    started: Instant,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics over the workers' snapshots, in worker order.
    pub fn new(workers: Vec<Snapshot>) -> Self {
        Self {
            workers,
            ports: Mutex::new(PortCounters::default()),
            gauges: Mutex::new(Vec::new()),
            started: Instant::now(),
        }
    }

    /// Adds a gauge `name` (a Prometheus name, e.g. `pxgw_rx_queues_active`) and returns its
    /// value to set: `metrics.gauge("pxgw_rx_queues_active", "RX queues polled").store(4, Relaxed)`.
    pub fn gauge(&self, name: &str, help: &str) -> Arc<AtomicU64> {
        let value = Arc::new(AtomicU64::new(0));
        if let Ok(mut g) = self.gauges.lock() {
            g.push(ExtraGauge {
                name: name.to_owned(),
                help: help.to_owned(),
                value: value.clone(),
            });
        }
        value
    }

    /// Stores the ports' latest counters.
    pub fn set_ports(&self, ports: PortCounters) {
        if let Ok(mut p) = self.ports.lock() {
            *p = ports;
        }
    }

    /// How many workers publish.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Each worker's latest report, in worker order, ratios derived.
    pub fn reports(&self) -> Vec<Report> {
        self.workers.iter().map(Snapshot::latest).collect()
    }

    /// The workers' reports summed.
    pub fn total(&self) -> Report {
        Report::sum(&self.reports())
    }

    /// The OpenMetrics text exposition of everything, as a scrape returns it.
    pub fn encode(self: &Arc<Self>) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Collect(self.clone())));
        let mut out = String::with_capacity(32 * 1024);
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// The collector prometheus-client calls on each scrape.
#[derive(Debug)]
struct Collect(Arc<Metrics>);

type Labels = Vec<(&'static str, String)>;
/// A histogram sample: labels, sum, and (upper bound, count) per bucket.
type HistogramSample = (Labels, f64, Vec<(f64, u64)>);

/// One metric family's samples.
struct Family<'e, 'a> {
    enc: &'e mut DescriptorEncoder<'a>,
}

impl Family<'_, '_> {
    fn counter(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: &[(Labels, u64)],
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Counter)?;
        for (labels, v) in samples {
            if labels.is_empty() {
                m.encode_counter::<NoLabelSet, _, u64>(v, None)?;
            } else {
                m.encode_family(labels)?
                    .encode_counter::<NoLabelSet, _, u64>(v, None)?;
            }
        }
        Ok(())
    }

    fn gauge(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: &[(Labels, f64)],
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Gauge)?;
        for (labels, v) in samples {
            if labels.is_empty() {
                m.encode_gauge(v)?;
            } else {
                m.encode_family(labels)?.encode_gauge(v)?;
            }
        }
        Ok(())
    }

    /// A histogram per label set: (labels, sum, per-bucket counts with their upper bounds).
    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<Unit>,
        samples: &[HistogramSample],
    ) -> fmt::Result {
        let mut m = self
            .enc
            .encode_descriptor(name, help, unit.as_ref(), MetricType::Histogram)?;
        for (labels, sum, buckets) in samples {
            let count = buckets.iter().map(|b| b.1).sum();
            if labels.is_empty() {
                m.encode_histogram::<NoLabelSet>(*sum, count, buckets, None)?;
            } else {
                m.encode_family(labels)?
                    .encode_histogram::<NoLabelSet>(*sum, count, buckets, None)?;
            }
        }
        Ok(())
    }
}

/// Upper bounds of the added-delay histogram, seconds: 1 µs to 10 ms, then +Inf.
pub const DELAY_BOUNDS_S: [f64; 13] = [
    1e-6, 2e-6, 5e-6, 10e-6, 20e-6, 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3,
];

/// The added-delay histogram of a report over [`DELAY_BOUNDS_S`] (per-bucket counts, the last
/// unbounded), and its sum in seconds (from the HDR histogram's mean, within its 1 % precision).
pub fn delay_buckets(r: &Report) -> (f64, Vec<(f64, u64)>) {
    let Some(h) = r.delay_ns.as_ref().filter(|h| !h.is_empty()) else {
        let mut b: Vec<(f64, u64)> = DELAY_BOUNDS_S.iter().map(|&le| (le, 0)).collect();
        b.push((f64::INFINITY, 0));
        return (0.0, b);
    };
    let mut buckets = Vec::with_capacity(DELAY_BOUNDS_S.len() + 1);
    let mut below = 0u64;
    for le in DELAY_BOUNDS_S {
        let upto = h.count_between(0, (le * 1e9) as u64);
        buckets.push((le, upto.saturating_sub(below)));
        below = upto;
    }
    buckets.push((f64::INFINITY, h.len().saturating_sub(below)));
    (h.mean() * h.len() as f64 / 1e9, buckets)
}

/// A frame-size histogram's buckets with their upper bounds (bytes; the last, +Inf).
pub fn size_buckets(h: &SizeHistogram) -> Vec<(f64, u64)> {
    FRAME_SIZE_BOUNDS
        .iter()
        .map(|&b| b as f64)
        .chain([f64::INFINITY])
        .zip(h.counts)
        .collect()
}

/// A metric family being gathered: its samples, of the kind its first counter gave it.
struct Gathered {
    name: &'static str,
    help: String,
    kind: Kind,
    counters: Vec<(Labels, u64)>,
    gauges: Vec<(Labels, f64)>,
    histograms: Vec<HistogramSample>,
}

/// The declared counters' families, in declaration order, as samples are added.
#[derive(Default)]
struct Families {
    list: Vec<Gathered>,
}

impl Families {
    /// Every family the declarations name, empty, in declaration order.
    fn declared() -> Self {
        let mut f = Families::default();
        let members = Report::declared().chain(
            PortCounters::MEMBERS
                .iter()
                .flat_map(|m| PortSample::FIELDS.iter().map(move |d| (m, d))),
        );
        for (_, d) in members {
            let Some(p) = &d.prom else { continue };
            match f.list.iter_mut().find(|g| g.name == p.name) {
                Some(g) => {
                    if let Some(h) = p.help {
                        g.help = h.to_owned();
                    }
                }
                None => f.list.push(Gathered {
                    name: p.name,
                    help: p.help.map_or_else(|| d.help(), str::to_owned),
                    kind: d.kind,
                    counters: Vec::new(),
                    gauges: Vec::new(),
                    histograms: Vec::new(),
                }),
            }
        }
        f
    }

    /// Adds `d`'s value `v` in `member`, with `labels` before the counter's own.
    fn add(&mut self, member: &Member, d: &Desc, v: Value<'_>, mut labels: Labels) {
        let Some(p) = &d.prom else { return };
        let Some(g) = self.list.iter_mut().find(|g| g.name == p.name) else {
            return;
        };
        labels.extend(member.labels(d));
        match v {
            Value::Count(n) if g.kind == Kind::Counter => g.counters.push((labels, n)),
            Value::Count(n) => g.gauges.push((labels, n as f64)),
            Value::Ratio(x) => g.gauges.push((labels, x)),
            Value::Sizes(h) => g.histograms.push((labels, h.sum as f64, size_buckets(h))),
        }
    }

    fn encode(&self, f: &mut Family<'_, '_>) -> fmt::Result {
        for g in &self.list {
            let (name, unit) = name_and_unit(g.name);
            match g.kind {
                Kind::Counter => f.counter(name, &g.help, unit, &g.counters)?,
                Kind::Sizes => f.histogram(name, &g.help, unit, &g.histograms)?,
                _ => f.gauge(name, &g.help, unit, &g.gauges)?,
            }
        }
        Ok(())
    }
}

/// A family's name without its unit suffix, and the unit (prometheus-client adds it back).
fn name_and_unit(name: &'static str) -> (&'static str, Option<Unit>) {
    if let Some(base) = name.strip_suffix("_bytes") {
        (base, Some(Unit::Bytes))
    } else if let Some(base) = name.strip_suffix("_seconds") {
        (base, Some(Unit::Seconds))
    } else {
        (name, None)
    }
}

impl Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let reports = m.reports();
        let total = Report::sum(&reports);
        let mut families = Families::declared();
        // Per worker: counters, levels, maxima and per-worker ratios. Over all workers: the
        // frame-size histograms and the total ratios.
        for (i, r) in reports.iter().enumerate() {
            r.visit(&mut |member, d, v| {
                if !matches!(d.kind, Kind::Sizes | Kind::TotalRatio) {
                    families.add(member, d, v, vec![("worker", i.to_string())]);
                }
            });
        }
        total.visit(&mut |member, d, v| {
            if matches!(d.kind, Kind::Sizes | Kind::TotalRatio) {
                families.add(member, d, v, Vec::new());
            }
        });
        // The ports' own counters (rte_eth_stats), sampled by the main thread.
        let ports = m.ports.lock().map(|p| p.clone()).unwrap_or_default();
        for (member, sample) in ports.by_port() {
            sample.visit(&mut |d, v| families.add(member, d, v, Vec::new()));
        }
        let mut f = Family { enc: &mut enc };
        families.encode(&mut f)?;

        let (sum, buckets) = delay_buckets(&total);
        f.histogram(
            "pxgw_added_delay",
            "Delay merging added per inbound TCP segment.",
            Some(Unit::Seconds),
            &[(vec![], sum, buckets)],
        )?;
        f.gauge(
            "pxgw_workers",
            "Workers running.",
            None,
            &[(vec![], reports.len() as f64)],
        )?;
        f.gauge(
            "pxgw_uptime",
            "Seconds since the metrics started.",
            Some(Unit::Seconds),
            &[(vec![], m.started.elapsed().as_secs_f64())],
        )?;
        if let Ok(gauges) = m.gauges.lock() {
            for g in gauges.iter() {
                f.gauge(
                    &g.name,
                    &g.help,
                    None,
                    &[(vec![], g.value.load(Ordering::Relaxed) as f64)],
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::channel;

    /// A worker's published counters show on a scrape, under Prometheus names, and a second
    /// publication replaces the first.
    #[test]
    fn scrape_shows_published_counters() {
        let (mut p0, s0) = channel();
        let (mut p1, s1) = channel();
        let m = Arc::new(Metrics::new(vec![s0, s1]));
        let queues = m.gauge("pxgw_rx_queues_active", "RX queues polled.");
        queues.store(3, Ordering::Relaxed);
        let mut r = Report::default();
        r.inbound.packets_in = 10;
        r.inbound.bytes_in = 15_140;
        r.sizes.inbound_received.record(1514);
        r.drops.oversize = 2;
        p0.publish(&r, None, &[], 0);
        r.inbound.packets_in = 11;
        p0.publish(&r, None, &[], 0);
        let mut r1 = Report::default();
        r1.inbound.packets_in = 5;
        p1.publish(&r1, None, &[], 0);
        let text = m.encode();
        assert!(text.contains("pxgw_received_packets_total{worker=\"0\",port=\"external\"} 11\n"));
        assert!(text.contains("pxgw_received_packets_total{worker=\"1\",port=\"external\"} 5\n"));
        assert!(text.contains("pxgw_received_bytes_total{worker=\"0\",port=\"external\"} 15140\n"));
        assert!(text.contains("pxgw_drops_total{worker=\"0\",reason=\"oversize\"} 2\n"));
        assert!(text.contains(
            "pxgw_frame_size_bytes_bucket{le=\"1518.0\",direction=\"inbound\",side=\"received\"} 1\n"
        ));
        assert!(text.contains(
            "pxgw_frame_size_bytes_bucket{le=\"1024.0\",direction=\"inbound\",side=\"received\"} 0\n"
        ));
        assert!(text.contains("\npxgw_rx_queues_active 3.0\n"));
        assert_eq!(m.total().inbound.packets_in, 16);
    }

    /// Every declared counter with a Prometheus family is on a scrape with its own value: per
    /// worker with a `worker` label, or over all workers; the ports' counters by port.
    #[test]
    fn every_declared_counter_is_scraped() {
        let (mut p0, s0) = channel();
        let (mut p1, s1) = channel();
        let m = Arc::new(Metrics::new(vec![s0, s1]));
        let r0 = Report::every_counter_set();
        let mut r1 = Report::default();
        r1.inbound.packets_in = 5;
        p0.publish(&r0, None, &[], 0);
        p1.publish(&r1, None, &[], 0);
        let mut ports = PortCounters::default();
        ports.internal.counters.oerrors = 9;
        ports.external.counters.ibytes = 77;
        m.set_ports(ports.clone());
        let text = m.encode();
        // The value of the sample `name{labels}`, which must be there once.
        let sample = |name: String, labels: &[(&str, String)]| -> f64 {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            let head = if labels.is_empty() {
                format!("\n{name} ")
            } else {
                format!("\n{name}{{{}}} ", labels.join(","))
            };
            assert_eq!(text.matches(&head).count(), 1, "{head:?} in\n{text}");
            let at = text.find(&head).unwrap() + head.len();
            text[at..].lines().next().unwrap().parse().unwrap()
        };
        let total = Report::sum(&[m.reports()[0].clone(), m.reports()[1].clone()]);
        let mut checked = 0;
        r0.visit(&mut |member, d, v| {
            let Some(p) = &d.prom else { return };
            checked += 1;
            let mut labels = vec![("worker", "0".to_owned())];
            labels.extend(member.labels(d));
            match (d.kind, v) {
                (Kind::Counter, Value::Count(n)) => {
                    assert_eq!(sample(format!("{}_total", p.name), &labels), n as f64)
                }
                (Kind::Sizes, Value::Sizes(h)) => {
                    let labels = member.labels(d);
                    assert_eq!(
                        sample(format!("{}_count", p.name), &labels),
                        h.count() as f64
                    );
                    assert_eq!(sample(format!("{}_sum", p.name), &labels), h.sum as f64);
                }
                (Kind::TotalRatio, Value::Ratio(_)) => {
                    let mut want = None;
                    total.visit(&mut |tm, td, tv| {
                        if let (true, Value::Ratio(x)) = (tm == member && td == d, tv) {
                            want = Some(x);
                        }
                    });
                    let x = want.expect("the total has the counter");
                    assert_eq!(sample(p.name.to_owned(), &member.labels(d)), x);
                }
                (_, Value::Count(n)) => assert_eq!(sample(p.name.to_owned(), &labels), n as f64),
                (_, Value::Ratio(x)) => assert_eq!(sample(p.name.to_owned(), &labels), x),
                (kind, v) => panic!("{kind:?} {v:?}"),
            }
        });
        assert_eq!(
            checked,
            Report::declared().filter(|(_, d)| d.prom.is_some()).count()
        );
        assert_eq!(
            sample(
                "pxgw_received_packets_total".into(),
                &[("worker", "1".into()), ("port", "external".into())]
            ),
            5.0
        );
        assert_eq!(
            sample(
                "pxgw_port_transmit_errors_total".into(),
                &[("port", "internal".into())]
            ),
            9.0
        );
        assert_eq!(
            sample(
                "pxgw_port_received_bytes_total".into(),
                &[("port", "external".into())]
            ),
            77.0
        );
        // One descriptor per family, however many counters share it.
        assert_eq!(text.matches("# TYPE pxgw_drops counter").count(), 1);
    }

    /// The endpoint answers over HTTP.
    #[test]
    fn serves_over_http() {
        use std::io::{Read, Write};
        let (mut p, s) = channel();
        let m = Arc::new(Metrics::new(vec![s]));
        let mut r = Report::default();
        r.merge.merges = 42;
        p.publish(&r, None, &[], 0);
        let server = Server::start("127.0.0.1:0".parse().unwrap(), m, Limits::default()).unwrap();
        let mut c = std::net::TcpStream::connect(server.addr()).unwrap();
        c.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut body = String::new();
        c.read_to_string(&mut body).unwrap();
        assert!(body.starts_with("HTTP/1.0 200"), "{body}");
        assert!(
            body.contains("pxgw_merges_total{worker=\"0\"} 42\n"),
            "{body}"
        );
        drop(server);
    }
}
