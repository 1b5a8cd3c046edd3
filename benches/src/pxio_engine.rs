//! pxio's side of the merge benchmark (SIGCOMM'26 §4, §7.1), measured exactly like rte_gro's
//! (`gro_baseline.rs`):
//! - the same trace, on real mbufs of the same size, filled outside the timed sections, with
//!   what a NIC adds ([`NicInfo`]): the RSS hash and the IP and L4 checksum verdicts, each of which a
//!   variant withholds, to measure ports that give neither;
//! - timed: the engine's own work per RX burst (`rx_burst`: each packet, then settling), the polls a
//!   worker makes at each ETM deadline between bursts (dated at the deadline), and the final
//!   flush;
//! - not timed: recording each output in the [`Ledger`] at its simulated emission time, and
//!   freeing it.

use std::time::Instant;

use dpdk::{Burst, Eal, Mbuf, Mempool};
use pxio::merge::{DelayConfig, MergeConfig, Merger, FLOW_ENTRY_BYTES};

use crate::engine::{best_of, CycleTimer, EngineResult};
use crate::gro_baseline::{pool_count, pool_size};
use crate::ledger::Ledger;
use crate::trace::layout::FRAME_LEN;
use crate::trace::Trace;
use crate::{BenchError, MergeBenchConfig};

/// Largest RX burst the run takes.
const RX_CAPACITY: usize = 64;
/// A 1514 B frame after DPDK's 128 B headroom.
const DATA_ROOM: u16 = 2048 + 128;

/// What the emulated NIC writes into each mbuf besides the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NicInfo {
    /// The IP and L4 checksum verdicts (`RTE_MBUF_F_RX_IP_CKSUM_GOOD`, `RTE_MBUF_F_RX_L4_CKSUM_GOOD`), and the engine leaves
    /// checksums to the NIC (`MergeConfig::checksum_offload`). Without it, pxio verifies every
    /// segment's checksum in software.
    pub csum: bool,
    /// The RSS hash (`RTE_MBUF_F_RX_RSS_HASH`). Without it, pxio hashes in software.
    pub hash: bool,
    /// TCP segmentation on transmit (TSO, `RTE_MBUF_F_TX_TCP_SEG`): pxio merges past the iMTU
    /// and asks the NIC to cut at the iMTU (`MergeConfig::tso_max_len`), as the paper's PXIO
    /// does; the ledger counts each such packet as the pieces the NIC cuts. Without it, pxio
    /// cuts at the iMTU itself. Needs `csum` (a NIC that segments fills the checksums).
    pub tso: bool,
}

impl NicInfo {
    /// Everything a NIC gives (the headline column).
    pub const FULL: NicInfo = NicInfo {
        csum: true,
        hash: true,
        tso: true,
    };
    /// The checksum verdict and the RSS hash, but no TSO: pxio cuts at the iMTU itself.
    pub const SOFTWARE_CUT: NicInfo = NicInfo {
        csum: true,
        hash: true,
        tso: false,
    };
    /// The RSS hash but no checksum verdict (and so no TSO): every segment verified in
    /// software, every cut made in software.
    pub const SOFTWARE_CSUM: NicInfo = NicInfo {
        csum: false,
        hash: true,
        tso: false,
    };
    /// The checksum verdict and TSO but no RSS hash: the flow hash computed in software.
    pub const SOFTWARE_HASH: NicInfo = NicInfo {
        csum: true,
        hash: false,
        tso: true,
    };

    fn engine_name(self) -> String {
        format!(
            "pxio ({} csum, {} hash, {} cut)",
            if self.csum { "NIC" } else { "software" },
            if self.hash { "NIC" } else { "software" },
            if self.tso { "TSO" } else { "software" }
        )
    }
}

/// The merge configuration the benchmark runs: the engine's defaults (1 Gb/s delay threshold,
/// 93 % yield bypass, p = 0.95), with the ETM window capped at the delay budget
/// ([`MergeBenchConfig::delay_budget_ns`], the period of rte_gro's flushes): no segment waits
/// longer in pxio than rte_gro's flush period.
pub fn bench_merge_config(
    cfg: &MergeBenchConfig,
    flows: u32,
    checksum_offload: bool,
    tso: bool,
) -> MergeConfig {
    MergeConfig {
        checksum_offload,
        // A TSO request may carry an IPv4 packet of up to 64 KB, as DPDK's drivers and
        // rte_gro's own outputs (and so the peer's TSO) allow.
        tso_max_len: if tso && checksum_offload { u16::MAX } else { 0 },
        imtu: cfg.imtu as u16,
        flow_capacity: (flows as usize * 4).max(1024),
        // Enough for every flow's items within a window; a worker's memory is warm, a fresh
        // engine's is not, so do not make it touch more than it needs.
        max_items: 8192,
        delay: DelayConfig {
            max_window_ns: cfg.delay_budget_ns,
            ..DelayConfig::default()
        },
        ..MergeConfig::default()
    }
}

/// Runs `trace` through pxio's merge engine [`MergeBenchConfig::repetitions`] times and reports
/// the fastest run. `nic` says what the emulated NIC wrote into each mbuf (outside the timed
/// sections); with its checksum verdict the engine also leaves checksums to the NIC, as on the
/// paper's hardware, and without it the engine verifies and derives every checksum itself.
pub fn run_pxio(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
    nic: NicInfo,
) -> Result<EngineResult, BenchError> {
    best_of(cfg.repetitions, || run_once(eal, trace, cfg, nic))
}

fn run_once(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
    nic: NicInfo,
) -> Result<EngineResult, BenchError> {
    let checksum_offload = nic.csum;
    let wall = Instant::now();
    let name = format!("pxio{}", unique());
    // Items are held for at most a window, the delay budget; the pool covers everything a
    // window can gather, sized by the same rule as rte_gro's (`pool_size`). A cut holds a
    // header mbuf until its item leaves, one per item at most.
    let held = pool_size(trace, cfg.delay_budget_ns);
    let pool = Mempool::new(eal, &name, held, 256, DATA_ROOM)?;
    let headers = Mempool::new(
        eal,
        &format!("{name}h"),
        pool_count(held as usize / 2),
        256,
        256,
    )?;
    // The flow table's hash seed comes from the trace's seed: every repetition places the same
    // flows in the same buckets, so repetitions must agree exactly (checked by `run_pxio`).
    let mut merger = Merger::<Mbuf>::with_hash_seed(
        bench_merge_config(cfg, trace.config().flows, checksum_offload, nic.tso),
        headers.clone(),
        cfg.seed,
    )
    .map_err(|e| BenchError::Config(e.to_string()))?;
    let mut ledger =
        Ledger::new(trace, &nic.engine_name(), cfg.imtu, cfg.verify_payload).enforcing_imtu();
    let mut timer = CycleTimer::new(cfg.tsc_hz);
    let mut rx = Burst::<RX_CAPACITY>::new();
    let mut out: Vec<Mbuf> = Vec::with_capacity(4096);
    for burst in trace.bursts() {
        // A worker polls while no packet arrives: deadlines due before this burst fire on time.
        while let Some(due) = merger.next_deadline().filter(|&d| d < burst.time_ns) {
            timer.time(|| timed_poll(&mut merger, due, &mut out));
            ledger.record_mbufs(out.drain(..), due);
        }
        pool.alloc_bulk(&mut rx, burst.len())?;
        for (m, slot) in rx.as_mut_slice().iter_mut().zip(burst.slots.clone()) {
            let room = m.append(FRAME_LEN)?;
            trace.write_frame(slot, room);
            if nic.csum {
                m.mark_rx_checksums_good();
            }
            if nic.hash {
                m.set_rss_hash(trace.rss_hash(slot));
            }
        }
        let now = burst.time_ns;
        timer.time(|| timed_rx_burst(&mut merger, &mut rx, now, &mut out));
        ledger.record_mbufs(out.drain(..), now);
    }
    while let Some(due) = merger.next_deadline() {
        timer.time(|| timed_poll(&mut merger, due, &mut out));
        ledger.record_mbufs(out.drain(..), due);
    }
    let end = trace.end_ns();
    timer.time(|| merger.flush_all(end, &mut out));
    ledger.record_mbufs(out.drain(..), end);
    if merger.stats().held_items != 0 {
        return Err(BenchError::Config(
            "pxio still holds items after the final flush".into(),
        ));
    }
    drop(merger);
    if pool.in_use() != 0 || headers.in_use() != 0 {
        return Err(BenchError::Config(format!(
            "pxio leaked mbufs: {} packet, {} header",
            pool.in_use(),
            headers.in_use()
        )));
    }
    Ok(EngineResult {
        ns_per_pkt: timer.ns() / trace.len().max(1) as f64,
        cycles_per_pkt: timer.cycles() / trace.len().max(1) as f64,
        parsed_in_timed_region: None,
        parse_ns_per_pkt: None,
        tx_prepared_in_timed_region: None,
        tx_prepare_due: None,
        gso_ns_per_pkt: None,
        outcome: ledger.finish()?,
        flow_entry_bytes: FLOW_ENTRY_BYTES as u64,
        wall_s: wall.elapsed().as_secs_f64(),
        discarded_sections: timer.discarded(),
        held_at_flush: None,
    })
}

/// The engine's work on one RX burst: the timed section. Never inlined, so that a profiler
/// (`perf`, or `valgrind --tool=callgrind --toggle-collect='pxbench::pxio_engine::timed_*'`
/// for exact instruction counts) can tell it from the benchmark's own work around it.
#[inline(never)]
fn timed_rx_burst(
    merger: &mut Merger<Mbuf>,
    rx: &mut Burst<RX_CAPACITY>,
    now: u64,
    out: &mut Vec<Mbuf>,
) {
    merger.rx_burst(rx.drain(), now, out);
}

/// A worker's poll at an ETM deadline: the other timed section (see [`timed_rx_burst`]).
#[inline(never)]
fn timed_poll(merger: &mut Merger<Mbuf>, due: u64, out: &mut Vec<Mbuf>) {
    merger.poll(due, out);
}

fn unique() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
