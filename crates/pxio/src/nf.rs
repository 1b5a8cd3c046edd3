//! The API a network function embeds (SIGCOMM'26 §4.3 and §7: NFs ported with fewer than 50
//! changed lines): a unified `rx` that returns merged packets, `poll` for items whose delay window
//! expired, a `tx` that splits to the next hop's MTU, and counters.

use crate::buf::PacketBuf;
use crate::clock::Clock;
use crate::merge::{ConfigError, MergeConfig, MergeStats, Merger};
use crate::rxq::{RxRing, UnifiedRx};
use crate::split::{split_tcp, SplitOffloads};

/// Counters of the transmit side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxStats {
    /// Packets handed to [`Pxio::tx`].
    pub packets_in: u64,
    /// Packets it produced (segments count one each).
    pub packets_out: u64,
    /// Packets that had to be split.
    pub split: u64,
    /// Packets dropped because they could not be split (pool exhausted, MTU too small, bad
    /// checksum).
    pub dropped: u64,
}

/// Settings of the stack.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PxioConfig {
    /// Merging.
    pub merge: MergeConfig,
    /// What the TX port can do.
    pub offloads: SplitOffloads,
}

/// PXIO for one worker: merge on receive, split on transmit.
pub struct Pxio<B: PacketBuf, C: Clock> {
    merger: Merger<B>,
    clock: C,
    offloads: SplitOffloads,
    tx: TxStats,
}

impl<B: PacketBuf, C: Clock> Pxio<B, C> {
    /// A stack with `cfg`; new headers come from `pool`, time from `clock`.
    pub fn new(cfg: PxioConfig, pool: B::Pool, clock: C) -> Result<Self, ConfigError> {
        Ok(Self {
            merger: Merger::new(cfg.merge, pool)?,
            clock,
            offloads: cfg.offloads,
            tx: TxStats::default(),
        })
    }

    /// Merges a burst of received packets; merged (and passed-through) packets are appended to
    /// `out`. Expired delayed items are released first.
    pub fn rx(&mut self, pkts: impl IntoIterator<Item = B>, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
        self.merger.rx_burst(pkts, now, out);
    }

    /// The unified RX of §4.3 (`px_eth_rx_burst`) over a worker's share of a port's queues
    /// ([`UnifiedRx`], which follows the active queue configuration): reads them into `scratch`,
    /// merges, and appends the result to `out`. Returns how many packets were read. `scratch` is
    /// emptied again, so once it has grown nothing is allocated.
    pub fn rx_unified<R: RxRing<Pkt = B>>(
        &mut self,
        queues: &mut UnifiedRx<R>,
        scratch: &mut Vec<B>,
        out: &mut Vec<B>,
    ) -> usize {
        let n = queues.rx_burst(scratch);
        self.rx(scratch.drain(..), out);
        n
    }

    /// Releases delayed items whose window has passed. Call it when a poll loop finds no
    /// packets, so nothing waits longer than its window.
    pub fn poll(&mut self, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
    }

    /// Prepares `pkt` for a next hop with MTU `mtu`: TCP larger than that is split (or handed to
    /// TSO); the result is appended to `out`. A packet that cannot be split is dropped and
    /// counted in [`TxStats::dropped`].
    pub fn tx(&mut self, pkt: B, mtu: u16, out: &mut Vec<B>) {
        self.tx.packets_in += 1;
        let before = out.len();
        match split_tcp(pkt, mtu, self.offloads, self.merger.pool(), out) {
            Ok(n) => {
                self.tx.packets_out += n as u64;
                if n > 1 {
                    self.tx.split += 1;
                }
            }
            Err((_, pkt)) => {
                debug_assert_eq!(out.len(), before);
                self.tx.dropped += 1;
                drop(pkt);
            }
        }
    }

    /// Emits everything still held (shutdown).
    pub fn flush(&mut self, out: &mut Vec<B>) {
        let now = self.clock.now_ns();
        self.merger.flush_all(now, out);
    }

    /// Receive-side counters: packets in/out, conversion yield, held items, added delay.
    pub fn rx_stats(&self) -> &MergeStats {
        self.merger.stats()
    }

    /// Transmit-side counters.
    pub fn tx_stats(&self) -> &TxStats {
        &self.tx
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

#[cfg(feature = "dpdk")]
impl<C: Clock> Pxio<dpdk::Mbuf, C> {
    /// The unified RX of §4.3: reads every queue of `queues` once into `burst`, merges, and
    /// appends the result to `out`. Returns how many packets were read.
    ///
    /// On DPDK ports only (the `dpdk` feature).
    pub fn rx_queues<const N: usize>(
        &mut self,
        queues: &mut [dpdk::RxQueue],
        burst: &mut dpdk::Burst<N>,
        out: &mut Vec<dpdk::Mbuf>,
    ) -> usize {
        let now = self.clock.now_ns();
        self.merger.poll(now, out);
        let mut read = 0;
        for q in queues.iter_mut() {
            read += q.rx_burst(burst);
            for m in burst.drain() {
                self.merger.rx(m, now, out);
            }
        }
        self.merger.settle(now, out);
        read
    }
}
