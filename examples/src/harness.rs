//! What every example (and the correctness test) shares: an EAL without hardware, two pairs of
//! ring ports (a traffic source wired to the NF's RX port, the NF's TX port wired to a sink),
//! the source that injects frames one RX burst at a time, and the sink that collects what the
//! NF sent. Everything runs on real mbufs from real mempools.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use dpdk::{Burst, Eal, EalBuilder, Mbuf, Mempool, Port, RxQueue, TxQueue};
use pxio::TxSink;

/// Frames per injected burst (one NF RX burst).
pub const BURST: usize = 32;
/// Simulated time between bursts: 32 frames of 1514 B at 100 Gb/s.
pub const BURST_NS: u64 = 3_875;

/// Boots the EAL the examples use (no hugepages, no PCI, ring ports only).
pub fn eal(program: &str) -> Result<Eal> {
    EalBuilder::no_hardware(program)
        .memory_mb(1024)
        .init()
        .context("EAL init (run as root)")
}

/// An NF between a traffic source and a sink, on ring ports.
pub struct Lab {
    /// Mbufs frames are received into.
    pub pool: Arc<Mempool>,
    /// Mbufs for new headers (pxio's splits, GTP-U headers that do not fit in the headroom).
    pub headers: Arc<Mempool>,
    /// The NF's RX queue.
    pub rx: RxQueue,
    /// The NF's TX queue.
    pub tx: TxQueue,
    /// The NF's RX port.
    pub rx_port: Port,
    /// The NF's TX port.
    pub tx_port: Port,
    source: TxQueue,
    sink: RxQueue,
    _source_port: Port,
    _sink_port: Port,
    input: Vec<Vec<u8>>,
    next: usize,
    bursts: u64,
    /// Frames the sink received, when kept.
    pub output: Vec<Vec<u8>>,
    keep: bool,
    /// Frames and bytes the sink received.
    pub received: (u64, u64),
    started: Instant,
}

impl Lab {
    /// Wires up the ports and pools; `input` is injected in bursts of [`BURST`]. With `keep`,
    /// the sink keeps a copy of every frame (for comparing outputs).
    pub fn new(eal: &Eal, name: &str, input: Vec<Vec<u8>>, keep: bool) -> Result<Self> {
        let largest = input.iter().map(Vec::len).max().unwrap_or(0);
        let room = (largest + 128).max(2048 + 128);
        let room = u16::try_from(room).context("frames above 64 KiB")?;
        let pool = Mempool::new(eal, &format!("{name}_rx"), 8191, 0, room)?;
        let headers = Mempool::new(eal, &format!("{name}_hdr"), 8191, 0, 256 + 128)?;
        let (src, nf_in) = eal.ring_pair(&format!("{name}_in"), 4096)?;
        let (nf_out, snk) = eal.ring_pair(&format!("{name}_out"), 8192)?;
        let start = |id| Port::builder(eal, id).start(&pool);
        let (source_port, rx_port, tx_port, sink_port) =
            (start(src)?, start(nf_in)?, start(nf_out)?, start(snk)?);
        Ok(Self {
            source: source_port.tx_queue(0)?,
            rx: rx_port.rx_queue(0)?,
            tx: tx_port.tx_queue(0)?,
            sink: sink_port.rx_queue(0)?,
            _source_port: source_port,
            _sink_port: sink_port,
            rx_port,
            tx_port,
            pool,
            headers,
            input,
            next: 0,
            bursts: 0,
            output: Vec::new(),
            keep,
            received: (0, 0),
            started: Instant::now(),
        })
    }

    /// Collects what the NF sent, then injects the next burst of input into the NF's RX port.
    /// False once all input was injected (the NF's RX ring is then empty).
    pub fn step(&mut self) -> Result<bool> {
        self.collect();
        if self.next >= self.input.len() {
            return Ok(false);
        }
        let end = (self.next + BURST).min(self.input.len());
        let mut burst = Burst::<BURST>::new();
        for f in &self.input[self.next..end] {
            let mut m = self.pool.alloc()?;
            m.extend_from_slice(f)?;
            if burst.push(m).is_err() {
                bail!("burst overflow");
            }
        }
        let want = burst.len();
        if self.source.tx_burst(&mut burst) != want {
            bail!("the NF's RX ring is full");
        }
        self.next = end;
        self.bursts += 1;
        Ok(true)
    }

    /// Simulated arrival time of the current burst, ns.
    pub fn now_ns(&self) -> u64 {
        self.bursts * BURST_NS
    }

    /// Receives everything waiting at the sink.
    pub fn collect(&mut self) {
        let mut burst = Burst::<BURST>::new();
        while self.sink.rx_burst(&mut burst) > 0 {
            for m in burst.drain() {
                self.received.0 += 1;
                self.received.1 += m.len() as u64;
                if self.keep {
                    self.output.push(m.to_vec());
                }
            }
        }
    }

    /// Time spent so far (wall clock since the lab started).
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Frames injected.
    pub fn injected(&self) -> usize {
        self.next
    }

    /// Prints what went in and out, and checks that every mbuf is back in its pool (drop
    /// everything of the NF that holds mbufs, its `Pxio` for one, before calling it). Returns
    /// the frames the sink kept.
    pub fn report(
        mut self,
        nf: &str,
        calls: u64,
        stats: &dyn std::fmt::Debug,
    ) -> Result<Vec<Vec<u8>>> {
        self.collect();
        let in_bytes: usize = self.input.iter().map(Vec::len).sum();
        let t = self.elapsed();
        println!(
            "{nf}: {} frames in ({in_bytes} B), {} out ({} B)",
            self.next, self.received.0, self.received.1
        );
        println!("{nf}: {calls} NF invocations ({:.2} frames per invocation), {:.1} ms wall time (source and sink included; `cargo xtask bench nf` times the NF alone)", self.next as f64 / calls.max(1) as f64, t.as_secs_f64() * 1e3);
        println!("{nf}: {stats:?}");
        let output = std::mem::take(&mut self.output);
        let (pool, headers) = (self.pool.clone(), self.headers.clone());
        drop(self);
        let out = pool.in_use() + headers.in_use();
        if out != 0 {
            bail!("{out} mbufs leaked");
        }
        println!("{nf}: no mbuf leaked");
        Ok(output)
    }
}

/// The plain NFs' transmit path: packets the driver did not take wait for the next burst.
#[derive(Default)]
pub struct Sender {
    queue: VecDeque<Mbuf>,
}

impl Sender {
    /// Queues a packet.
    pub fn push(&mut self, m: Mbuf) {
        self.queue.push_back(m);
    }

    /// Offers the queue to `tx`.
    pub fn flush(&mut self, tx: &mut TxQueue) -> usize {
        tx.send(&mut self.queue)
    }
}
