//! A worker: one thread, pinned to a core, running to completion over one RX and one TX queue of
//! each port (DESIGN.md: one worker = one lcore, no async runtime).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dpdk::{Burst, Mbuf, RxQueue, TxQueue};
use pxio::{Clock, PacketBuf, TscClock};

use crate::pipeline::Pipeline;
use crate::stats::Report;

/// RX burst size.
const BURST: usize = 32;
/// How often (in loop iterations) a worker publishes its counters.
const PUBLISH_EVERY: u32 = 1024;
/// Empty polls before a worker with nothing held naps.
const IDLE_SPINS: u32 = 256;
/// Connections idle this long are forgotten (5 minutes).
const CONN_IDLE_NS: u64 = 300_000_000_000;

/// What a worker owns.
pub struct Worker {
    /// Index, for logs.
    pub id: usize,
    /// Core to pin to.
    pub core: Option<usize>,
    /// Outside port, receive.
    pub ext_rx: RxQueue,
    /// Outside port, transmit.
    pub ext_tx: TxQueue,
    /// Inside port, receive.
    pub int_rx: RxQueue,
    /// Inside port, transmit.
    pub int_tx: TxQueue,
    /// The processing state.
    pub pipeline: Pipeline<Mbuf>,
    /// Time.
    pub clock: TscClock,
    /// Where counters are published.
    pub report: Arc<Mutex<Report>>,
    /// Set on SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// L3 mode: (source MAC, next-hop MAC) to write on frames sent outside and inside.
    pub rewrite_macs: Option<([u8; 12], [u8; 12])>,
}

impl Worker {
    /// Runs until `stop`, then flushes everything held and publishes its final counters.
    pub fn run(mut self) {
        if let Some(core) = self.core {
            pin(core);
        }
        tracing::info!(worker = self.id, core = ?self.core, "worker started");
        let mut rx = Burst::<BURST>::new();
        let mut to_int: Vec<Mbuf> = Vec::with_capacity(4 * BURST * 64);
        let mut to_ext: Vec<Mbuf> = Vec::with_capacity(4 * BURST * 64);
        let mut loops = 0u32;
        let mut idle = 0u32;
        let mut last_expiry = self.clock.now_ns();
        while !self.stop.load(Ordering::Relaxed) {
            let now = self.clock.now_ns();
            let mut busy = false;
            if self.ext_rx.rx_burst(&mut rx) > 0 {
                busy = true;
                for m in rx.drain() {
                    self.pipeline.inbound(m, now, &mut to_int);
                }
                self.pipeline.end_of_burst(now, &mut to_int);
            } else if self.pipeline.next_deadline().is_some_and(|d| d <= now) {
                self.pipeline.poll(now, &mut to_int);
            }
            if self.int_rx.rx_burst(&mut rx) > 0 {
                busy = true;
                for m in rx.drain() {
                    self.pipeline.outbound(m, now, &mut to_ext);
                }
            }
            self.pipeline.take_replies(&mut to_ext);
            self.pipeline.take_inside_replies(&mut to_int);
            self.send(&mut to_int, true);
            self.send(&mut to_ext, false);
            loops = loops.wrapping_add(1);
            if loops % PUBLISH_EVERY == 0 {
                self.publish();
                if now.saturating_sub(last_expiry) > 1_000_000_000 {
                    self.pipeline.expire_connections(now, CONN_IDLE_NS);
                    last_expiry = now;
                }
            }
            if busy || self.pipeline.holding() {
                idle = 0;
            } else {
                idle += 1;
                if idle > IDLE_SPINS {
                    // Nothing held and nothing arriving: nap briefly instead of burning the core
                    // (small machines run the endpoints on the same cores).
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        let now = self.clock.now_ns();
        self.pipeline.flush(now, &mut to_int);
        self.send(&mut to_int, true);
        self.send(&mut to_ext, false);
        self.publish();
        tracing::info!(worker = self.id, "worker stopped, everything held was sent");
    }

    fn publish(&self) {
        let r = self.pipeline.report();
        if let Ok(mut shared) = self.report.lock() {
            *shared = r;
        }
    }

    /// Transmits `pkts` in bursts; what the queue keeps refusing is dropped and counted.
    fn send(&mut self, pkts: &mut Vec<Mbuf>, inbound: bool) {
        if pkts.is_empty() {
            return;
        }
        let macs = self
            .rewrite_macs
            .map(|(to_ext, to_int)| if inbound { to_int } else { to_ext });
        let mut burst = Burst::<BURST>::new();
        let mut iter = pkts.drain(..).peekable();
        while iter.peek().is_some() {
            while !burst.is_full() {
                let Some(mut m) = iter.next() else { break };
                if let Some(macs) = macs {
                    if let Ok(head) = m.data_mut() {
                        if head.len() >= 12 {
                            head[..12].copy_from_slice(&macs);
                        }
                    }
                }
                if let Err(m) = burst.push(m) {
                    drop(m); // cannot happen: the loop stops when the burst is full
                }
            }
            let lens: [usize; BURST] =
                std::array::from_fn(|i| burst.as_slice().get(i).map_or(0, PacketBuf::len));
            let queued = burst.len();
            let mut sent = 0;
            for _ in 0..64 {
                let tx = if inbound {
                    &mut self.int_tx
                } else {
                    &mut self.ext_tx
                };
                sent += tx.tx_burst(&mut burst);
                if burst.is_empty() {
                    break;
                }
            }
            for &len in &lens[..sent] {
                self.pipeline.count_sent(inbound, len);
            }
            if !burst.is_empty() {
                self.pipeline.count_tx_full((queued - sent) as u64);
                burst.clear();
            }
        }
    }
}

fn pin(core: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(core).is_ok() {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            tracing::warn!(core, error = %e, "could not pin the worker");
        }
    }
}
