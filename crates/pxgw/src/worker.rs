//! A worker: one thread, pinned to a core, running to completion over one RX and one TX queue of
//! each port (one worker = one lcore, no async runtime).
//!
//! # More than one worker
//! Every worker owns its state outright (connection table, merger, caravan builders, PMTU hints,
//! F-PMTUD probers): nothing is shared, nothing is locked on the per-packet path. That is correct
//! only if every packet a piece of state needs reaches the worker that holds it:
//! - **Both directions of a connection.** Ports hash with a symmetric key (a 16-bit pattern
//!   repeated, drawn at start unless `[rss] key` fixes it: [`crate::rss`]), and software hashes
//!   with the same key: `hash(a -> b) == hash(b -> a)`, and the outside and inside ports have
//!   the same queue count and default redirection table, so a SYN from inside and the SYN-ACK
//!   from outside meet on one worker (the MSS hint lands where the outbound segments are
//!   split). On `net_tap` the kernel steers instead: the TAP queue of a frame is the symmetric
//!   flow hash, or the queue the flow was last sent from (tun's automatic flow steering), which
//!   is again the worker that owns it.
//! - **F-PMTUD reports.** A probe has its own 5-tuple, so its report would hash elsewhere. The
//!   probing worker picks the probe's source port so the probe's hash selects the same entry of
//!   any redirection table of up to 512 entries as the connection that triggered it
//!   ([`crate::pmtud`]); the report, hashed symmetrically, comes back to the prober.
//! - **Fragments** hash on addresses only (no ports in non-first fragments), so all fragments of
//!   a probe from outside reach one worker's responder.
//!
//! Workers register with the EAL ([`dpdk::Eal::register_thread`]) before touching a queue, so
//! their mbuf allocations and frees use the mempool's per-lcore caches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dpdk::{tx_flags, Burst, Eal, LcoreRegistration, Mbuf, Mempool, TxQueue};
use pxio::{Clock, PacketBuf, TscClock};

use crate::pipeline::Pipeline;
use crate::publish::Publisher;
use crate::queues::WorkerRx;
use crate::stats::{LoadMeter, Report};

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
    /// The EAL, which the worker's thread registers with.
    pub eal: Eal,
    /// Index, for logs.
    pub id: usize,
    /// Core to pin to.
    pub core: Option<usize>,
    /// Outside port, receive (one queue, or several through a unified receive).
    pub ext_rx: WorkerRx,
    /// Outside port, transmit.
    pub ext_tx: TxQueue,
    /// Inside port, receive.
    pub int_rx: WorkerRx,
    /// Inside port, transmit.
    pub int_tx: TxQueue,
    /// The processing state.
    pub pipeline: Pipeline<Mbuf>,
    /// Time.
    pub clock: TscClock,
    /// Where counters are published (lock-free and allocation-free on this side:
    /// [`crate::publish`]).
    pub report: Publisher,
    /// Set on SIGINT/SIGTERM.
    pub stop: Arc<AtomicBool>,
    /// L3 mode: (source MAC, next-hop MAC) to write on frames sent outside and inside.
    pub rewrite_macs: Option<([u8; 12], [u8; 12])>,
    /// Ports whose driver cannot transmit chained mbufs (no `MULTI_SEGS`): chained packets
    /// (merged, split, caravans) are first copied into one mbuf of this pool, (outside, inside).
    pub flatten: (Option<Arc<Mempool>>, Option<Arc<Mempool>>),
}

impl Worker {
    /// Runs until `stop`, then flushes everything held and publishes its final counters.
    pub fn run(mut self) {
        if let Some(core) = self.core {
            pin(core);
        }
        let lcore = self.register();
        tracing::info!(worker = self.id, core = ?self.core, lcore = ?lcore.as_ref().map(|l| l.lcore().0), "worker started");
        let mut rx = Burst::<BURST>::new();
        let mut to_int: Vec<Mbuf> = Vec::with_capacity(4 * BURST * 64);
        let mut to_ext: Vec<Mbuf> = Vec::with_capacity(4 * BURST * 64);
        let mut loops = 0u32;
        let mut idle = 0u32;
        let hz = self.eal.tsc_hz().max(1);
        let mut tsc = dpdk::rdtsc();
        let mut load = LoadMeter::new(hz, tsc);
        // Filled in place at each publication (its delay histogram and paths stay empty).
        let mut counters = Report::default();
        let mut last_expiry = tsc_ns(tsc, hz);
        // What the previous turn did, measured when the next one starts.
        let (mut received, mut busy) = (0u64, false);
        while !self.stop.load(Ordering::Relaxed) {
            tsc = dpdk::rdtsc();
            load.poll(tsc, busy, received);
            let now = tsc_ns(tsc, hz);
            received = 0;
            let n = self.ext_rx.rx_burst(&mut rx);
            if n > 0 {
                received += n as u64;
                self.pipeline.inbound_burst(rx.drain(), now, &mut to_int);
            } else if self.pipeline.next_deadline().is_some_and(|d| d <= now) {
                self.pipeline.poll(now, &mut to_int);
            }
            let n = self.int_rx.rx_burst(&mut rx);
            if n > 0 {
                received += n as u64;
                self.pipeline.outbound_burst(rx.drain(), now, &mut to_ext);
            }
            self.pipeline.take_replies(&mut to_ext);
            self.pipeline.take_inside_replies(&mut to_int);
            busy = received > 0 || !to_int.is_empty() || !to_ext.is_empty();
            self.send(&mut to_int, true);
            self.send(&mut to_ext, false);
            loops = loops.wrapping_add(1);
            if loops.is_multiple_of(PUBLISH_EVERY) {
                self.publish(&mut counters, &load, now, false);
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
                    // (small machines run the endpoints on the same cores). The nap is part of
                    // this idle turn, for the load meter.
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        let now = self.clock.now_ns();
        // What a unified receive read from the NIC but had not handed out yet is processed too.
        while self.ext_rx.holding() || self.int_rx.holding() {
            if self.ext_rx.holding() && self.ext_rx.rx_burst(&mut rx) > 0 {
                self.pipeline.inbound_burst(rx.drain(), now, &mut to_int);
            }
            if self.int_rx.holding() && self.int_rx.rx_burst(&mut rx) > 0 {
                self.pipeline.outbound_burst(rx.drain(), now, &mut to_ext);
            }
        }
        self.pipeline.flush(now, &mut to_int);
        self.send(&mut to_int, true);
        self.send(&mut to_ext, false);
        load.poll(dpdk::rdtsc(), busy, received);
        self.publish(&mut counters, &load, now, true);
        tracing::info!(worker = self.id, "worker stopped, everything held was sent");
    }

    /// Registers this thread with the EAL (per-lcore mempool caches). Without a free lcore id the
    /// worker still runs, on the shared pool ring, and says so.
    fn register(&self) -> Option<LcoreRegistration> {
        match self.eal.register_thread() {
            Ok(registration) => Some(registration),
            Err(e) => {
                tracing::warn!(worker = self.id, error = %e, "running without an lcore id (no mempool cache)");
                None
            }
        }
    }

    /// Publishes the pipeline's counters and the worker's load: copies into buffers the
    /// channel allocated, nothing more ([`crate::publish`]).
    fn publish(&mut self, counters: &mut Report, load: &LoadMeter, now: u64, last: bool) {
        self.pipeline.report_into(counters);
        load.write(&mut counters.load);
        let (delay, paths) = (
            self.pipeline.merge_delay(),
            self.pipeline.discovered_paths(),
        );
        if last {
            self.report.publish_final(counters, Some(delay), paths, now);
        } else {
            self.report.publish(counters, Some(delay), paths, now);
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
                let flatten = if inbound {
                    &self.flatten.1
                } else {
                    &self.flatten.0
                };
                if let (Some(pool), true) = (flatten, m.num_segs() > 1) {
                    match flat_copy(&m, pool) {
                        Some(flat) => m = flat,
                        None => {
                            // No buffer for the copy: the driver could not send the chain.
                            self.pipeline.count_tx_dropped(1);
                            continue;
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
            // Only what the driver took counts as sent; what it kept refusing is freed here and
            // counted as tx_dropped (not sent, and not the driver's oerrors either).
            self.pipeline
                .count_sent_burst(inbound, lens[..sent].iter().copied());
            if !burst.is_empty() {
                self.pipeline.count_tx_dropped((queued - sent) as u64);
                burst.clear();
            }
        }
    }
}

/// A copy of chained `m` in one mbuf of `pool`, with its checksum-offload requests; `None` when
/// the pool is empty or the packet does not fit one of its buffers.
fn flat_copy(m: &Mbuf, pool: &Mempool) -> Option<Mbuf> {
    let mut flat = pool.alloc().ok()?;
    if flat.tailroom() < m.len() {
        return None;
    }
    for seg in m.segments() {
        flat.extend_from_slice(seg).ok()?;
    }
    let (l2, l3, l4) = m.header_lens();
    let offloads = tx_flags::IPV4
        | tx_flags::IPV6
        | tx_flags::IP_CKSUM
        | tx_flags::TCP_CKSUM
        | tx_flags::UDP_CKSUM;
    flat.set_tx_offload(l2, l3, l4, m.ol_flags() & offloads, 0);
    Some(flat)
}

/// TSC cycles as nanoseconds, as [`TscClock`] reads them (the loop reads the TSC once, for the
/// time and for the load meter).
fn tsc_ns(tsc: u64, hz: u64) -> u64 {
    (u128::from(tsc) * 1_000_000_000 / u128::from(hz)) as u64
}

fn pin(core: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(core).is_ok() {
        if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set) {
            tracing::warn!(core, error = %e, "could not pin the worker");
        }
    }
}
