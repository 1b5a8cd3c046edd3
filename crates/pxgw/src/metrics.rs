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
use crate::stats::{PortCounters, Report, SizeHistogram, FRAME_SIZE_BOUNDS};

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

    /// Each worker's latest report, in worker order.
    pub fn reports(&self) -> Vec<Report> {
        self.workers.iter().map(Snapshot::latest).collect()
    }

    /// The workers' reports summed.
    pub fn total(&self) -> Report {
        let mut sum = Report::default();
        for r in self.reports() {
            sum.add(&r);
        }
        sum
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

impl Collector for Collect {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let m = &self.0;
        let reports = m.reports();
        let mut total = Report::default();
        for r in &reports {
            total.add(r);
        }
        let mut f = Family { enc: &mut enc };
        let w = |i: usize| -> Labels { vec![("worker", i.to_string())] };
        let per_worker = |get: &dyn Fn(&Report) -> u64| -> Vec<(Labels, u64)> {
            reports
                .iter()
                .enumerate()
                .map(|(i, r)| (w(i), get(r)))
                .collect()
        };
        let wp = |i: usize, port: &str| -> Labels {
            vec![("worker", i.to_string()), ("port", port.to_owned())]
        };
        // Packets and bytes per worker and port: received on the outside port is inbound,
        // received on the inside port outbound; sent the other way round.
        let by_port = |get: &dyn Fn(&Report, bool) -> u64| -> Vec<(Labels, u64)> {
            let mut v = Vec::new();
            for (i, r) in reports.iter().enumerate() {
                v.push((wp(i, "external"), get(r, true)));
                v.push((wp(i, "internal"), get(r, false)));
            }
            v
        };
        f.counter(
            "pxgw_received_packets",
            "Frames a worker received, by port.",
            None,
            &by_port(&|r, ext| {
                if ext {
                    r.inbound.packets_in
                } else {
                    r.outbound.packets_in
                }
            }),
        )?;
        f.counter(
            "pxgw_received",
            "Bytes of the frames a worker received, by port.",
            Some(Unit::Bytes),
            &by_port(&|r, ext| {
                if ext {
                    r.inbound.bytes_in
                } else {
                    r.outbound.bytes_in
                }
            }),
        )?;
        f.counter(
            "pxgw_sent_packets",
            "Frames a worker handed to a port's driver, by port.",
            None,
            &by_port(&|r, ext| {
                if ext {
                    r.outbound.packets_out
                } else {
                    r.inbound.packets_out
                }
            }),
        )?;
        f.counter(
            "pxgw_sent",
            "Bytes of the frames a worker handed to a port's driver, by port.",
            Some(Unit::Bytes),
            &by_port(&|r, ext| {
                if ext {
                    r.outbound.bytes_out
                } else {
                    r.inbound.bytes_out
                }
            }),
        )?;

        // The ports' own counters (rte_eth_stats), sampled by the main thread.
        let ports = m.ports.lock().map(|p| p.clone()).unwrap_or_default();
        let port = |name: &'static str| -> Labels { vec![("port", name.to_owned())] };
        for (metric, help, unit, get) in [
            (
                "pxgw_port_received_packets",
                "Frames the port delivered (ipackets).",
                None,
                (|c: &crate::stats::PortSample| c.ipackets) as fn(&_) -> u64,
            ),
            (
                "pxgw_port_received",
                "Bytes the port delivered (ibytes).",
                Some(Unit::Bytes),
                |c| c.ibytes,
            ),
            (
                "pxgw_port_sent_packets",
                "Frames the port transmitted (opackets).",
                None,
                |c| c.opackets,
            ),
            (
                "pxgw_port_sent",
                "Bytes the port transmitted (obytes).",
                Some(Unit::Bytes),
                |c| c.obytes,
            ),
            (
                "pxgw_port_missed_packets",
                "Frames the port dropped because its RX ring was full (imissed).",
                None,
                |c| c.imissed,
            ),
            (
                "pxgw_port_receive_errors",
                "Erroneous frames received (ierrors).",
                None,
                |c| c.ierrors,
            ),
            (
                "pxgw_port_rx_nombuf",
                "Frames lost for lack of an mbuf (rx_nombuf).",
                None,
                |c| c.rx_nombuf,
            ),
            (
                "pxgw_port_transmit_errors",
                "Frames the driver took but failed to transmit (oerrors).",
                None,
                |c| c.oerrors,
            ),
        ] {
            f.counter(
                metric,
                help,
                unit,
                &[
                    (port("external"), get(&ports.external.counters)),
                    (port("internal"), get(&ports.internal.counters)),
                ],
            )?;
        }

        // Merging (SIGCOMM'26 §4.1).
        f.counter(
            "pxgw_merge_payload",
            "TCP payload bytes that went into merge items.",
            Some(Unit::Bytes),
            &per_worker(&|r| r.merge.payload_in),
        )?;
        f.counter(
            "pxgw_merge_full_payload",
            "Of those, bytes that left in iMTU-bound packets (yield = this / pxgw_merge_payload_bytes_total).",
            Some(Unit::Bytes),
            &per_worker(&|r| r.merge.payload_full),
        )?;
        f.gauge(
            "pxgw_merge_yield_ratio",
            "Conversion yield since the start: share of merged payload that left iMTU-bound.",
            None,
            &[(vec![], total.merge.conversion_yield)],
        )?;
        for (name, help, get) in [
            (
                "pxgw_merges",
                "Segments merged into others.",
                (|r: &Report| r.merge.merges) as fn(&Report) -> u64,
            ),
            ("pxgw_merge_cuts", "Segments cut at the iMTU.", |r| {
                r.merge.cuts
            }),
            (
                "pxgw_merge_flow_evictions",
                "Flows evicted from a full bucket of the merge flow table.",
                |r| r.merge.evictions,
            ),
            ("pxgw_caravans_built", "UDP caravans sent inside.", |r| {
                r.caravan.caravans_built
            }),
            (
                "pxgw_caravan_datagrams_packed",
                "Datagrams packed into caravans.",
                |r| r.caravan.datagrams_packed,
            ),
            (
                "pxgw_caravans_unpacked",
                "Caravans from inside unpacked.",
                |r| r.caravan.caravans_unpacked,
            ),
            (
                "pxgw_caravan_datagrams_unpacked",
                "Datagrams those caravans carried.",
                |r| r.caravan.datagrams_unpacked,
            ),
            ("pxgw_pmtud_probes_sent", "F-PMTUD probes sent.", |r| {
                r.pmtud.probes_sent
            }),
            (
                "pxgw_pmtud_answers",
                "F-PMTUD rounds that ended with a report (an answer).",
                |r| r.pmtud.discovered,
            ),
            (
                "pxgw_pmtud_fallbacks",
                "F-PMTUD rounds that fell back (no report in time).",
                |r| r.pmtud.fallbacks,
            ),
            (
                "pxgw_pmtud_probes_answered",
                "F-PMTUD probes from outside that the gateway answered.",
                |r| r.pmtud.answered,
            ),
            (
                "pxgw_pmtud_expired",
                "Lowered path MTUs forgotten after pmtu.expire_s (back at the eMTU).",
                |r| r.pmtud.expired,
            ),
            (
                "pxgw_pmtud_respond_source_limited",
                "F-PMTUD probes from outside not answered: their source exceeded its rate.",
                |r| r.pmtud.respond_source_limited,
            ),
            (
                "pxgw_pmtud_respond_global_limited",
                "F-PMTUD probes from outside not answered: pmtu.respond_per_sec reached.",
                |r| r.pmtud.respond_global_limited,
            ),
            (
                "pxgw_mss_handshakes",
                "SYN and SYN-ACK segments seen.",
                |r| r.mss.handshakes,
            ),
            ("pxgw_mss_rewrites", "MSS options rewritten.", |r| {
                r.mss.rewritten
            }),
            (
                "pxgw_connections_learned",
                "Connections learned from their data, their handshake unseen (after a restart).",
                |r| r.mss.learned,
            ),
            (
                "pxgw_connections_learned_one_way",
                "Connections learned from one direction only ([connections] one_way, behind ECMP).",
                |r| r.mss.learned_one_way,
            ),
            (
                "pxgw_connections_half_open_evicted",
                "Half-open connections evicted for newer ones (a SYN flood shows here).",
                |r| r.mss.half_open_evicted,
            ),
            (
                "pxgw_connections_evicted",
                "Established connections evicted, least recently seen first, for newer ones.",
                |r| r.mss.established_evicted,
            ),
            (
                "pxgw_mss_below_floor",
                "Outside SYNs announcing an MSS below [mss] min: not raised.",
                |r| r.mss.below_floor,
            ),
            (
                "pxgw_syn_ignored",
                "SYN and SYN-ACK segments on established connections that changed nothing.",
                |r| r.mss.syn_ignored,
            ),
            (
                "pxgw_ptb_learned",
                "Packet Too Big / fragmentation needed from outside that lowered a path MTU.",
                |r| r.router.ptb_learned,
            ),
            (
                "pxgw_ptb_out_of_window",
                "Packet Too Big / fragmentation needed quoting a sequence number not in flight: ignored.",
                |r| r.router.ptb_out_of_window,
            ),
            (
                "pxgw_ptb_below_floor",
                "Packet Too Big / fragmentation needed with an MTU below the floor: ignored.",
                |r| r.router.ptb_below_floor,
            ),
            (
                "pxgw_ptb_unknown",
                "Packet Too Big / fragmentation needed quoting an unknown connection: ignored.",
                |r| r.router.ptb_unknown,
            ),
            (
                "pxgw_caravan_mark_cleared",
                "Inbound packets that wore the caravan mark, cleared.",
                |r| r.caravan.mark_cleared,
            ),
            (
                "pxgw_split_packets",
                "Outbound TCP packets split to the path MTU in software.",
                |r| r.split.packets,
            ),
        ] {
            f.counter(name, help, None, &per_worker(&get))?;
        }
        for (name, help, get) in [
            (
                "pxgw_merge_held_items",
                "Merge items held right now.",
                (|r: &Report| r.merge.held_items) as fn(&Report) -> u64,
            ),
            (
                "pxgw_merge_flows",
                "Flows in the merge flow table (its occupancy).",
                |r| r.merge.flows,
            ),
            (
                "pxgw_connections",
                "TCP connections the worker knows.",
                |r| r.connections,
            ),
        ] {
            let v: Vec<(Labels, f64)> = per_worker(&get)
                .into_iter()
                .map(|(l, v)| (l, v as f64))
                .collect();
            f.gauge(name, help, None, &v)?;
        }
        let mut drops = Vec::new();
        for (i, r) in reports.iter().enumerate() {
            for (reason, v) in r.drops.by_reason() {
                drops.push((
                    vec![("worker", i.to_string()), ("reason", reason.to_owned())],
                    v,
                ));
            }
        }
        f.counter(
            "pxgw_drops",
            "Frames dropped, by reason (every frame is sent or counted here).",
            None,
            &drops,
        )?;

        // Histograms, over all workers.
        let (sum, buckets) = delay_buckets(&total);
        f.histogram(
            "pxgw_added_delay",
            "Delay merging added per inbound TCP segment.",
            Some(Unit::Seconds),
            &[(vec![], sum, buckets)],
        )?;
        let s = &total.sizes;
        let dir = |d: &str, side: &str| -> Labels {
            vec![("direction", d.to_owned()), ("side", side.to_owned())]
        };
        let mut sizes = Vec::new();
        for (labels, h) in [
            (dir("inbound", "received"), &s.inbound_received),
            (dir("inbound", "sent"), &s.inbound_sent),
            (dir("outbound", "received"), &s.outbound_received),
            (dir("outbound", "sent"), &s.outbound_sent),
        ] {
            sizes.push((labels, h.sum as f64, size_buckets(h)));
        }
        f.histogram(
            "pxgw_frame_size",
            "Frame sizes received and sent (Ethernet, without FCS), per direction.",
            Some(Unit::Bytes),
            &sizes,
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
        p0.publish(r.clone());
        r.inbound.packets_in = 11;
        p0.publish(r);
        let mut r1 = Report::default();
        r1.inbound.packets_in = 5;
        p1.publish(r1);
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

    /// The endpoint answers over HTTP.
    #[test]
    fn serves_over_http() {
        use std::io::{Read, Write};
        let (mut p, s) = channel();
        let m = Arc::new(Metrics::new(vec![s]));
        let mut r = Report::default();
        r.merge.merges = 42;
        p.publish(r);
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
