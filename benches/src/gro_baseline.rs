//! The baseline: a trace through DPDK's `rte_gro` (heavyweight mode, TCP/IPv4) on real mbufs.
//!
//! For each RX burst:
//! 1. **Not timed:** take 32 mbufs from a mempool, write the trace's frames into them, and add
//!    what a NIC writes into the mbuf and no more: the RSS hash (`RTE_MBUF_F_RX_RSS_HASH`) and
//!    the L4 checksum verdict (`RTE_MBUF_F_RX_L4_CKSUM_GOOD`). pxio gets exactly the same.
//! 2. **Timed:** the header parse `rte_gro` relies on, then `rte_gro_reassemble` on the burst,
//!    and, when due, the flush. `rte_gro` trusts `packet_type` and `l2/l3/l4_len` and parses
//!    nothing itself; a NIC does not fill in the lengths, so an application must parse first, as
//!    testpmd does before GRO. The parse is one of two ([`GroParse`]): `rte_net_get_ptype` (all
//!    layers) per packet ([`Mbuf::parse_packet_type`]), or a minimal one that checks the fixed
//!    Ethernet/IPv4/TCP layout and fills the type and lengths from it, as an application whose
//!    NIC reports the packet type would (it has only the lengths to fill). Either is inside the
//!    timed region, as pxio's own classify is inside its, and
//!    [`EngineResult::parsed_in_timed_region`] counts the parses. Each flush readies the merged
//!    packets it hands out for the NIC (`prepare_tx`): rte_gro leaves their checksums stale,
//!    and pxio's emit does the same work for its own inside its timed region.
//!    [`EngineResult::tx_prepared_in_timed_region`] counts the packets readied there, and
//!    [`EngineResult::tx_prepare_due`] the outputs that needed it and carry the request, counted
//!    outside the timed region from the outputs themselves: equal counts show the work was done
//!    and timed.
//! 3. **Not timed:** record what came out in the [`Ledger`] and free it (a TX path would).
//!
//! **The flush emulates "timeout flush with the same delay budget".** `rte_gro` stamps each held
//! packet with the real TSC when it enters the table, and `rte_gro_timeout_flush` compares those
//! stamps with the real TSC. Real time cannot follow the trace's simulated time (the CPU runs a
//! trace far faster or slower than real time), so we never ask it for a partial timeout. Instead
//! the emulated worker does a full flush (timeout 0) every time simulated time has advanced by
//! the delay budget ([`MergeBenchConfig::delay_budget_ns`], the same budget pxio's longest
//! delay window gets) since the last flush, as a polling loop that checks its flush timer
//! on every iteration, with or without traffic, would: the flushes fall on a grid of budget-long
//! steps starting at the first burst. A flush due before a burst arrives runs, and is dated,
//! at its deadline, before that burst is reassembled; a deadline that passes with an empty table
//! costs nothing. One more flush at the first deadline after the last burst ends the run. So a
//! packet waits between 0 and one budget for its flush (a mean of about half the budget), where
//! `rte_gro`'s own timeout would hold each merged packet a full budget after its first segment.
//! The flushes' CPU cost is timed. A budget of 0 flushes after every burst.
//!
//! **Table size.** The context is sized for the scenario's flow count and
//! [`MergeBenchConfig::gro_items_per_flow`] items per flow (32, testpmd's `MAX_PKT_BURST`).
//! DPDK 22.11 allocates `flows x items` entries for both its flow array (32 B each,
//! `struct gro_tcp4_flow`) and its item array (40 B each, `struct gro_tcp4_item`), so it
//! reserves `items x 72` bytes per flow; that is its [`EngineResult::flow_entry_bytes`].

use std::time::Instant;

use dpdk::{Burst, Eal, GroContext, GsoContext, Mbuf, Mempool};

use crate::engine::{best_of, CycleTimer, EngineResult};
use crate::ledger::Ledger;
use crate::trace::layout::{ETH_LEN, FRAME_LEN, IPV4_LEN};
use crate::trace::Trace;
use crate::{BenchError, MergeBenchConfig};

/// Largest RX burst the baseline takes.
pub const RX_CAPACITY: usize = 64;
/// Packets taken out of the table per flush call.
const FLUSH_CAPACITY: usize = 1024;
/// `sizeof(struct gro_tcp4_flow)` in DPDK 22.11 (MACs, addresses, ACK, ports, start index).
pub const GRO_FLOW_BYTES: u64 = 32;
/// `sizeof(struct gro_tcp4_item)` in DPDK 22.11 (first and last mbuf, start time, next index,
/// sequence, IP ID, merge count, atomic flag; padded).
pub const GRO_ITEM_BYTES: u64 = 40;
/// Data room of the baseline's mbufs: a 1514 B frame after DPDK's 128 B headroom.
const DATA_ROOM: u16 = 2048 + 128;
/// Data room of GSO's header mbufs: the longest headers (Ethernet, IPv4, TCP with options)
/// after the headroom.
const GSO_HEADER_ROOM: u16 = 128 + 128;

/// How the application fills in the packet type and header lengths `rte_gro` trusts, before it
/// (inside the timed region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroParse {
    /// `rte_net_get_ptype` over all layers ([`Mbuf::parse_packet_type`]), as testpmd's csum
    /// engine parses before GRO: for a NIC that reports neither type nor lengths.
    Full,
    /// A check of the fixed Ethernet/IPv4/TCP layout (EtherType, IP version and header length,
    /// protocol, no fragment, the TCP data offset; IPv6 likewise, without extension headers)
    /// that fills the type and lengths from it ([`parse_fixed_layout`]): the least an
    /// application does when its NIC reports the packet type, which leaves it only the lengths
    /// to fill. Anything else gets no type and passes through rte_gro unmerged.
    Minimal,
}

/// Runs `trace` through `rte_gro` [`MergeBenchConfig::repetitions`] times and reports the
/// fastest run (see [`best_of`]), with the full parse ([`GroParse::Full`]).
pub fn run_rte_gro(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
) -> Result<EngineResult, BenchError> {
    run_rte_gro_with(eal, trace, cfg, GroParse::Full)
}

/// [`run_rte_gro`] with the parse `parse`.
pub fn run_rte_gro_with(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
    parse: GroParse,
) -> Result<EngineResult, BenchError> {
    best_of(cfg.repetitions, || run_once(eal, trace, cfg, false, parse))
}

/// [`run_rte_gro`] followed by `rte_gso` at the iMTU, so that the peer's output fits the
/// iMTU as pxio's does: DPDK 22.11's GRO merges up to 64 KB, and DPDK's way to cut a packet
/// to a size is GSO. Each flushed packet longer than the iMTU is cut (a header mbuf and
/// indirect mbufs per piece, as [`GsoContext::segment`] describes) inside the timed region,
/// and the merged packet is released; its [`EngineResult::gso_ns_per_pkt`] is that step's
/// share. The ledger holds it to the iMTU.
pub fn run_rte_gro_gso(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
) -> Result<EngineResult, BenchError> {
    best_of(cfg.repetitions, || {
        run_once(eal, trace, cfg, true, GroParse::Full)
    })
}

/// One run of `trace` through a fresh `rte_gro` context (and `rte_gso` after it with `gso`),
/// each burst parsed by `parse` first.
fn run_once(
    eal: &Eal,
    trace: &Trace,
    cfg: &MergeBenchConfig,
    gso: bool,
    parse: GroParse,
) -> Result<EngineResult, BenchError> {
    let wall = Instant::now();
    let flows = trace.config().flows;
    let max_flows = u16::try_from(flows).map_err(|_| {
        BenchError::Config(format!(
            "rte_gro tables hold at most 65535 flows, not {flows}"
        ))
    })?;
    if trace.config().rx_burst > RX_CAPACITY {
        return Err(BenchError::Config(format!(
            "RX bursts of {} exceed the baseline's {RX_CAPACITY}",
            trace.config().rx_burst
        )));
    }
    let held = pool_size(trace, cfg.delay_budget_ns);
    let pool = Mempool::new(eal, &unique_pool_name(), held, 256, DATA_ROOM)?;
    let gso = if gso {
        // What one flush call hands out is cut and released before the next call: at most
        // `held` segments, so at most `held` indirect mbufs plus one per piece, and a header
        // mbuf per piece. A piece carries at least one full segment but for the last of each
        // packet, and only packets of two or more segments are cut: under `held` / 2 pieces.
        // Sized as tightly as pxio's pools are: a mempool hands back freed mbufs in ring
        // order once its cache overflows, so a pool much larger than needed cycles through
        // colder memory.
        let held = held as usize;
        let direct = Mempool::new(
            eal,
            &unique_pool_name(),
            pool_count(held / 2 + 64),
            256,
            GSO_HEADER_ROOM,
        )?;
        let indirect = Mempool::new(
            eal,
            &unique_pool_name(),
            pool_count(held + held / 2 + 64),
            256,
            0,
        )?;
        let max_len = u16::try_from(cfg.imtu + ETH_LEN).map_err(|_| {
            BenchError::Config(format!("iMTU {} is beyond rte_gso's sizes", cfg.imtu))
        })?;
        Some(GsoContext::tcp4(&direct, &indirect, max_len)?)
    } else {
        None
    };
    // rte_gro alone is counted as if cut at the iMTU; with GSO its outputs must fit it.
    let ledger = match gso {
        Some(_) => {
            Ledger::new(trace, "rte_gro+rte_gso", cfg.imtu, cfg.verify_payload).enforcing_imtu()
        }
        None => {
            let name = match parse {
                GroParse::Full => "rte_gro",
                GroParse::Minimal => "rte_gro (minimal parse)",
            };
            Ledger::new(trace, name, cfg.imtu, cfg.verify_payload)
        }
    };
    let mut run = Run {
        gro: GroContext::new(eal, max_flows, cfg.gro_items_per_flow)?,
        out: Box::new(Burst::new()),
        timer: CycleTimer::new(cfg.tsc_hz),
        ledger,
        flushes: 0,
        held_at_flushes: 0,
        parsed: 0,
        parse_timer: CycleTimer::new(cfg.tsc_hz),
        tx_prepared: 0,
        tx: TxCount::default(),
        gso,
        cut: Vec::with_capacity(FLUSH_CAPACITY * 8),
        gso_timer: CycleTimer::new(cfg.tsc_hz),
        imtu: u32::try_from(cfg.imtu).unwrap_or(u32::MAX),
    };
    let mut rx = Burst::<RX_CAPACITY>::new();

    let budget = cfg.delay_budget_ns;
    let mut next_flush = trace.bursts().next().map_or(0, |b| b.time_ns) + budget;
    for burst in trace.bursts() {
        if budget > 0 && burst.time_ns >= next_flush {
            run.flush(next_flush)?;
            // Later deadlines up to this burst found the table empty.
            next_flush += ((burst.time_ns - next_flush) / budget + 1) * budget;
        }
        pool.alloc_bulk(&mut rx, burst.len())?;
        for (m, slot) in rx.as_mut_slice().iter_mut().zip(burst.slots.clone()) {
            fill(m, trace, slot)?;
        }
        // Two sections, to tell the parse's share; their sum is rte_gro's cost.
        let parsed = &mut run.parsed;
        run.parse_timer.time(|| {
            match parse {
                GroParse::Full => timed_parse(&mut rx),
                GroParse::Minimal => timed_parse_fixed_layout(&mut rx),
            }
            *parsed += rx.len() as u64;
        });
        run.timer.time(|| timed_reassemble(&mut run.gro, &mut rx));
        // What rte_gro hands back (nothing, for this trace's pure-ACK data segments, unless the
        // table is full) leaves at once.
        run.tx.record(&mut run.ledger, rx.drain(), burst.time_ns);
        if budget == 0 {
            run.flush(burst.time_ns)?;
        }
    }
    run.flush(if budget == 0 {
        trace.end_ns()
    } else {
        next_flush
    })?;
    debug_assert_eq!(run.gro.item_count(), 0);

    let held_at_flush = run.held_at_flushes as f64 / run.flushes.max(1) as f64;
    let with_gso = run.gso.is_some();
    let (tx_prepared, tx_due) = (run.tx_prepared, run.tx.due);
    if run.tx.ready != tx_due {
        return Err(BenchError::Config(format!(
            "{} of rte_gro's {tx_due} merged outputs left without a TX checksum request",
            tx_due - run.tx.ready
        )));
    }
    let (timer, ledger, parsed, parse) = (run.timer, run.ledger, run.parsed, run.parse_timer);
    let cut = run.gso_timer;
    let n = trace.len().max(1) as f64;
    Ok(EngineResult {
        ns_per_pkt: (timer.ns() + parse.ns() + cut.ns()) / n,
        cycles_per_pkt: (timer.cycles() + parse.cycles() + cut.cycles()) / n,
        parsed_in_timed_region: Some(parsed),
        parse_ns_per_pkt: Some(parse.ns() / n),
        tx_prepared_in_timed_region: Some(tx_prepared),
        tx_prepare_due: Some(tx_due),
        gso_ns_per_pkt: with_gso.then(|| cut.ns() / n),
        outcome: ledger.finish()?,
        flow_entry_bytes: u64::from(cfg.gro_items_per_flow) * (GRO_FLOW_BYTES + GRO_ITEM_BYTES),
        wall_s: wall.elapsed().as_secs_f64(),
        discarded_sections: timer.discarded() + parse.discarded() + cut.discarded(),
        held_at_flush: Some(held_at_flush),
    })
}

/// rte_gro's timed sections: the parse it needs, the reassembly of a burst, and a flush. Never
/// inlined, so that callgrind can count them as it counts pxio's
/// (`--toggle-collect='pxbench::gro_baseline::timed_*'`, see `cargo xtask bench instructions`).
#[inline(never)]
fn timed_parse(rx: &mut Burst<RX_CAPACITY>) {
    for m in rx.as_mut_slice() {
        m.parse_packet_type();
    }
}

/// See [`timed_parse`]: the minimal parse ([`GroParse::Minimal`]).
#[inline(never)]
fn timed_parse_fixed_layout(rx: &mut Burst<RX_CAPACITY>) {
    for m in rx.as_mut_slice() {
        parse_fixed_layout(m);
    }
}

/// The minimal parse ([`GroParse::Minimal`]): when the frame has the fixed Ethernet/IPv4/TCP
/// layout (EtherType 0x0800, IPv4 without options, TCP, not a fragment; or EtherType 0x86dd,
/// IPv6 whose next header is TCP) and a TCP data offset of 20..=60 bytes, records its packet
/// type and header lengths in the mbuf, as `rte_gro` reads them; otherwise clears both, and
/// rte_gro passes the packet through unmerged. Returns the packet type (0 for the others).
pub fn parse_fixed_layout(m: &mut Mbuf) -> u32 {
    use dpdk::ptype::{L2_ETHER, L3_IPV4, L3_IPV6, L4_TCP};
    let (ptype, l2, l3, l4) = match fixed_tcp_layout(m.data()) {
        Some((v6, l4)) => {
            let (l3_type, l3) = if v6 {
                (L3_IPV6, 40)
            } else {
                (L3_IPV4, IPV4_LEN as u16)
            };
            (L2_ETHER | l3_type | L4_TCP, ETH_LEN as u8, l3, l4)
        }
        None => (0, 0, 0, 0),
    };
    m.set_packet_type(ptype);
    // The lengths in one store of the packed offload word (no flags, no TSO size), as C's
    // `m->tx_offload = rte_mbuf_tx_offload(...)` writes them.
    m.set_tx_offload(l2, l3, l4, 0, 0);
    ptype
}

/// Whether `frame` has the fixed layout [`parse_fixed_layout`] accepts: `Some((ipv6, TCP
/// header length))`.
#[inline]
fn fixed_tcp_layout(frame: &[u8]) -> Option<(bool, u8)> {
    let eth = ETH_LEN;
    let (v6, l3) = match frame.get(eth - 2..eth)? {
        [0x08, 0x00] => {
            let ip: &[u8; IPV4_LEN] = frame.get(eth..)?.first_chunk()?;
            // Version 4 and no options; TCP; MF clear and offset 0.
            let frag = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff;
            (ip[0] == 0x45 && ip[9] == 6 && frag == 0).then_some((false, IPV4_LEN))?
        }
        [0x86, 0xdd] => {
            let ip: &[u8; 40] = frame.get(eth..)?.first_chunk()?;
            (ip[0] >> 4 == 6 && ip[6] == 6).then_some((true, 40))?
        }
        _ => return None,
    };
    let doff = usize::from(*frame.get(eth + l3 + 12)? >> 4) * 4;
    (20..=60).contains(&doff).then_some((v6, doff as u8))
}

/// See [`timed_parse`].
#[inline(never)]
fn timed_reassemble(gro: &mut GroContext, rx: &mut Burst<RX_CAPACITY>) -> usize {
    gro.reassemble(rx)
}

/// See [`timed_parse`]. The flush, then, given the iMTU `tso_at`, each merged packet readied
/// for the NIC ([`prepare_tx`]), with TSO when it is longer than the iMTU. (When rte_gso cuts
/// what comes out, it readies its outputs instead.) Returns the packets flushed and the
/// packets readied.
#[inline(never)]
fn timed_flush(
    gro: &mut GroContext,
    out: &mut Burst<FLUSH_CAPACITY>,
    tso_at: Option<u32>,
) -> Result<(usize, u64), dpdk::Error> {
    let n = gro.timeout_flush(0, out);
    let mut readied = 0;
    if let Some(imtu) = tso_at {
        // Only merged packets (chains) need it; the others' header lengths, in the mbuf's
        // second cache line, are not read.
        for m in out.as_mut_slice().iter_mut().filter(|m| m.num_segs() > 1) {
            let lens = m.header_lens();
            readied += u64::from(prepare_tx(m, lens, imtu, true)?);
        }
    }
    Ok((n, readied))
}

/// Readies a packet that left rte_gro (or rte_gso) for a NIC with checksum offload, and with
/// TSO at the iMTU when `tso` and it is longer: the TX flags and header lengths, the IPv4
/// checksum zeroed and the TCP checksum seeded with the pseudo-header sum
/// ([`Mbuf::prepare_tx_checksums`], DPDK's `rte_net_intel_cksum_prepare`). rte_gro rewrites
/// only a merged packet's IPv4 length, and rte_gso its pieces' lengths, IDs, sequence numbers
/// and flags: both leave the checksums stale, for the application to fix before transmit (as
/// testpmd's csum engine does). pxio's emit does the same work for its merged packets inside
/// its timed region (`finalize`). A packet of one segment was not merged and leaves as it came.
/// The flags say IPv4: DPDK 22.11's rte_gro and rte_gso merge and cut TCP/IPv4 only.
/// Returns whether the packet was readied (it was not when it has one segment).
#[inline]
fn prepare_tx(
    m: &mut Mbuf,
    (l2, l3, l4): (u8, u16, u8),
    imtu: u32,
    tso: bool,
) -> Result<bool, dpdk::Error> {
    use dpdk::tx_flags as f;
    if m.num_segs() == 1 {
        return Ok(false);
    }
    let ip_len = (m.len() - usize::from(l2)) as u32;
    let headers = u32::from(l3) + u32::from(l4);
    let (flags, segsz) = if tso && ip_len > imtu && imtu > headers {
        let segsz = u16::try_from(imtu - headers).unwrap_or(u16::MAX);
        (f::IPV4 | f::IP_CKSUM | f::TCP_CKSUM | f::TCP_SEG, segsz)
    } else {
        (f::IPV4 | f::IP_CKSUM | f::TCP_CKSUM, 0)
    };
    // A piece rte_gso cut may carry its input's TSO request: it is a packet of its own now.
    m.reset_metadata();
    m.set_tx_offload(l2, l3, l4, flags, segsz);
    m.prepare_tx_checksums()?;
    Ok(true)
}

/// Whether `m` left rte_gro (or rte_gso) rewritten, so that it needed [`prepare_tx`]: a merged
/// packet, or a piece rte_gso cut (a header mbuf chained to the payload's), both chains.
fn needs_tx_prepare(m: &Mbuf) -> bool {
    m.num_segs() > 1
}

/// Whether `m` asks the NIC to fill its TCP checksum (with or without TSO), as
/// [`prepare_tx`] leaves it.
fn tx_prepared(m: &Mbuf) -> bool {
    m.ol_flags() & (dpdk::tx_flags::TCP_CKSUM | dpdk::tx_flags::TCP_SEG) != 0
}

/// The state of one run.
struct Run<'t> {
    gro: GroContext,
    out: Box<Burst<FLUSH_CAPACITY>>,
    timer: CycleTimer,
    ledger: Ledger<'t>,
    flushes: u64,
    /// Packets the table held, summed over flushes.
    held_at_flushes: u64,
    /// Packets parsed (`rte_net_get_ptype`) inside the timed sections.
    parsed: u64,
    /// The parse's sections.
    parse_timer: CycleTimer,
    /// Packets readied for the NIC ([`prepare_tx`]) inside the timed sections.
    tx_prepared: u64,
    /// The outputs that needed it.
    tx: TxCount,
    /// GSO at the iMTU after each flush, when the peer is rte_gro + rte_gso.
    gso: Option<GsoContext>,
    /// GSO's outputs, recorded after its timed section.
    cut: Vec<Mbuf>,
    /// GSO's sections.
    gso_timer: CycleTimer,
    /// The iMTU, bytes: merged packets longer leave with a TSO request (or cut by rte_gso).
    imtu: u32,
}

impl Run<'_> {
    /// Flushes the whole table (timed) and, with GSO, cuts what came out to the iMTU (timed on
    /// its own), then records the outputs as emitted at `now_ns` and frees them (not timed).
    fn flush(&mut self, now_ns: u64) -> Result<(), BenchError> {
        self.flushes += 1;
        self.held_at_flushes += self.gro.item_count() as u64;
        let imtu = self.imtu;
        let tso_at = self.gso.is_none().then_some(imtu);
        loop {
            let (gro, out) = (&mut self.gro, &mut *self.out);
            let (_, readied) = self.timer.time(|| timed_flush(gro, out, tso_at))?;
            self.tx_prepared += readied;
            let more = self.out.is_full();
            if let Some(gso) = &self.gso {
                let (out, cut) = (&mut *self.out, &mut self.cut);
                let readied = self.gso_timer.time(|| {
                    let mut readied = 0u64;
                    out.drain().try_for_each(|m| {
                        // Only a merged packet, or one rte_gso cuts, is rewritten; the
                        // header lengths of any other are not read.
                        let rewritten = m.num_segs() > 1 || m.len() > usize::from(gso.max_len());
                        let lens = rewritten.then(|| m.header_lens());
                        let from = cut.len();
                        gso.segment(m, cut).map_err(|(e, _)| e)?;
                        lens.map_or(Ok(()), |lens| {
                            cut[from..].iter_mut().try_for_each(|piece| {
                                readied += u64::from(prepare_tx(piece, lens, imtu, false)?);
                                Ok(())
                            })
                        })
                    })?;
                    Ok::<_, dpdk::Error>(readied)
                })?;
                self.tx_prepared += readied;
                self.tx.record(&mut self.ledger, self.cut.drain(..), now_ns);
            }
            self.tx.record(&mut self.ledger, self.out.drain(), now_ns);
            if !more {
                break;
            }
        }
        Ok(())
    }
}

/// The outputs that needed readying for the NIC, counted from the outputs themselves outside
/// the timed sections.
#[derive(Default)]
struct TxCount {
    /// Rewritten outputs ([`needs_tx_prepare`]).
    due: u64,
    /// Of those, the ones that carry the checksum request ([`tx_prepared`]).
    ready: u64,
}

impl TxCount {
    /// Records `pkts`, emitted at `now_ns`, in `ledger` (which frees them), counting them.
    fn record(&mut self, ledger: &mut Ledger<'_>, pkts: impl Iterator<Item = Mbuf>, now_ns: u64) {
        let pkts = pkts.inspect(|m| {
            if needs_tx_prepare(m) {
                self.due += 1;
                self.ready += u64::from(tx_prepared(m));
            }
        });
        ledger.record_mbufs(pkts, now_ns);
    }
}

/// Writes slot `slot`'s frame into the empty mbuf `m` with what a NIC adds (RSS hash, IP and L4
/// checksum verdict), and nothing else: no packet type, no header lengths.
pub fn fill(m: &mut Mbuf, trace: &Trace, slot: usize) -> Result<(), BenchError> {
    let room = m.append(FRAME_LEN)?;
    trace.write_frame(slot, room);
    m.set_rss_hash(trace.rss_hash(slot));
    m.mark_rx_checksums_good();
    Ok(())
}

/// Mbufs a run can hold at once: the most packets delivered within `budget_ns` (between two
/// flushes for rte_gro, within the longest ETM window for pxio), plus the burst in hand,
/// rounded up to a power of two minus one (DPDK's favourite pool size). Both engines' input
/// pools are sized by it: a mempool hands freed mbufs back in ring order once its per-core
/// cache overflows, so a pool larger than needed cycles through colder memory.
pub fn pool_size(trace: &Trace, budget_ns: u64) -> u32 {
    let bursts: Vec<(u64, usize)> = trace.bursts().map(|b| (b.time_ns, b.len())).collect();
    let (mut most, mut held, mut end) = (0usize, 0usize, 0usize);
    // After a flush at burst i, bursts i+1..=k accumulate, k being the first burst a budget
    // later (its own flush runs after it is reassembled).
    for i in 0..bursts.len() {
        if end <= i {
            end = i + 1;
            held = 0;
        }
        while end < bursts.len() && bursts[end].0 - bursts[i].0 < budget_ns {
            held += bursts[end].1;
            end += 1;
        }
        let next = bursts.get(end).map_or(0, |b| b.1);
        most = most.max(held + next);
        if end > i + 1 {
            held -= bursts[i + 1].1;
        }
    }
    pool_count(most + 2 * RX_CAPACITY + 64)
}

/// A mempool size for `needed` mbufs: rounded up to a power of two minus one (DPDK's favourite
/// pool size), 1023 at least.
pub fn pool_count(needed: usize) -> u32 {
    (needed + 1).next_power_of_two().max(1024) as u32 - 1
}

fn unique_pool_name() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("pxbench_gro{}", NEXT.fetch_add(1, Ordering::Relaxed))
}
