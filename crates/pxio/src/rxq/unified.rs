//! One receive call over a worker's RX queues (SIGCOMM'26 §4.3, `px_eth_rx_burst`).
//!
//! A worker holds every queue of its pool (see [`QueueLayout::worker_pool`]) from the start and
//! polls the first `active` of them, as the published [`ActiveConfig`] says. When the
//! configuration grows the worker polls the larger range at once (the rule manager publishes a
//! larger configuration before it changes the rules). When it shrinks the worker keeps polling
//! the queues that left until they have been empty for [`DRAIN_EMPTY_PASSES`] passes in a row:
//! the rule manager publishes a smaller configuration only after the NIC stopped steering to
//! them, so what is still there is drained, never stranded.

use std::sync::Arc;

use crate::buf::PacketBuf;
use crate::rxq::layout::QueueLayout;
use crate::rxq::policy::{ActiveConfig, ActiveFlowGauge, BatchFlows};
use crate::wire::{classify, Class};

/// Consecutive empty passes after which a queue that left the configuration is no longer polled.
pub const DRAIN_EMPTY_PASSES: u32 = 8;

/// One RX queue, as the unified receive sees it.
pub trait RxRing {
    /// What it delivers.
    type Pkt: PacketBuf;
    /// Receives up to `max` packets, appended to `out`; returns how many.
    fn rx_into(&mut self, out: &mut Vec<Self::Pkt>, max: usize) -> usize;
}

/// The flow a packet belongs to, for counting active flows: the NIC's RSS hash when it delivered
/// one, else a hash of the 5-tuple. `None` for what is neither TCP nor UDP.
pub fn flow_id<B: PacketBuf>(pkt: &B) -> Option<u64> {
    if let Some(h) = pkt.rss_hash() {
        return Some(u64::from(h));
    }
    let headers = match classify(pkt.head(), pkt.len()) {
        Class::Tcp(h) | Class::Udp(h) => h,
        _ => return None,
    };
    // FNV-1a over the key: cheap, and only ever compared within one batch.
    let k = headers.key;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&k.src);
    eat(&k.dst);
    eat(&k.sport.to_be_bytes());
    eat(&k.dport.to_be_bytes());
    eat(&[k.proto]);
    Some(h)
}

/// Counters of one worker's unified receive; plain fields a stats exporter can copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnifiedRxStats {
    /// Packets received.
    pub packets: u64,
    /// Of those, packets read from queues that had left the configuration (drained).
    pub drained: u64,
    /// Queues this worker polls now (active plus draining).
    pub polled_queues: u16,
    /// Queues of this worker in the active configuration.
    pub active_queues: u16,
}

/// A worker's unified RX over its share of a port's queues.
pub struct UnifiedRx<R: RxRing> {
    rings: Vec<R>,
    workers: u16,
    config: Arc<ActiveConfig>,
    gauge: Arc<ActiveFlowGauge>,
    per_queue: usize,
    active: usize,
    polled: usize,
    empty_passes: u32,
    batch: BatchFlows,
    count_flows: bool,
    stats: UnifiedRxStats,
}

impl<R: RxRing> UnifiedRx<R> {
    /// Worker `worker`'s unified RX. `rings` are the queues of its pool
    /// ([`QueueLayout::worker_pool`]), in order; `config` is published by the rule manager and
    /// `gauge` read by it; each queue gives at most `per_queue` packets per call.
    pub fn new(
        layout: &QueueLayout,
        rings: Vec<R>,
        config: Arc<ActiveConfig>,
        gauge: Arc<ActiveFlowGauge>,
        per_queue: usize,
    ) -> Self {
        let workers = layout.workers();
        let active = usize::from(config.count() / workers).min(rings.len());
        Self {
            rings,
            workers,
            config,
            gauge,
            per_queue: per_queue.max(1),
            active,
            polled: active,
            empty_passes: 0,
            batch: BatchFlows::default(),
            count_flows: true,
            stats: UnifiedRxStats::default(),
        }
    }

    /// Whether to count each batch's distinct flows for the scaling policy (on by default). Off
    /// where nothing reads the gauge, it saves a header parse per packet when the NIC delivers
    /// no RSS hash.
    pub fn count_flows(mut self, on: bool) -> Self {
        self.count_flows = on;
        self
    }

    /// Reads the active queues (and those still draining) once each, appending to `out`;
    /// returns how many packets arrived. Records the batch's distinct flows for the policy.
    pub fn rx_burst(&mut self, out: &mut Vec<R::Pkt>) -> usize {
        let active = usize::from(self.config.count() / self.workers).min(self.rings.len());
        if active != self.active {
            self.active = active;
            // Growing: poll the new queues now. Shrinking: keep polling until drained.
            self.polled = self.polled.max(active);
            self.empty_passes = 0;
        }
        let start = out.len();
        let mut draining = 0;
        for (i, ring) in self.rings[..self.polled].iter_mut().enumerate() {
            let got = ring.rx_into(out, self.per_queue);
            if i >= self.active {
                draining += got;
            }
        }
        if self.polled > self.active {
            if draining == 0 {
                self.empty_passes += 1;
                if self.empty_passes >= DRAIN_EMPTY_PASSES {
                    self.polled = self.active;
                }
            } else {
                self.empty_passes = 0;
            }
        }
        let n = out.len() - start;
        if n > 0 && self.count_flows {
            for pkt in &out[start..] {
                if let Some(id) = flow_id(pkt) {
                    self.batch.push(id);
                }
            }
            self.gauge.record(self.batch.take_distinct());
        }
        self.stats.packets += n as u64;
        self.stats.drained += draining as u64;
        self.stats.polled_queues = self.polled as u16;
        self.stats.active_queues = self.active as u16;
        n
    }

    /// Counters.
    pub fn stats(&self) -> UnifiedRxStats {
        self.stats
    }

    /// The queues, e.g. to read them one last time at shutdown.
    pub fn rings_mut(&mut self) -> &mut [R] {
        &mut self.rings
    }
}

#[cfg(feature = "dpdk")]
impl RxRing for dpdk::RxQueue {
    type Pkt = dpdk::Mbuf;

    fn rx_into(&mut self, out: &mut Vec<dpdk::Mbuf>, max: usize) -> usize {
        let mut burst = dpdk::Burst::<32>::new();
        let mut total = 0;
        while total < max {
            let n = self.rx_burst_up_to(&mut burst, max - total);
            total += n;
            out.extend(burst.drain());
            if n == 0 || total >= max {
                break;
            }
        }
        total
    }
}
