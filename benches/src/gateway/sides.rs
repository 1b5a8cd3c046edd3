//! The gateways the bench compares, and the run that times one of them on a scenario.
//!
//! Each side gets the same bursts, written into mbufs by the same emulated port
//! ([`super::nic`]), outside the timed sections. Timed, per side: its work on each RX burst
//! (and, for the gateways that hold packets, each poll at a deadline between bursts and the
//! final flush), and, in a section of its own, freeing what it sent, as a TX completion would.
//! Recording the outputs in the [`Tally`] is not timed.
//!
//! - [`PxgwSide`]: `pxgw::pipeline::Pipeline<Mbuf>`, the code a pxgw worker runs, with the
//!   worker's per-burst calls (the burst, the frames the gateway sends of its own, the sent
//!   counters).
//! - [`EngineSide`]: pxio alone: the merge engine on what arrives from outside, the TCP split on
//!   what arrives from inside, with the configuration pxgw gives them.
//! - [`DpdkSide`]: what a DPDK user builds from DPDK's libraries, as testpmd's csum engine with
//!   `set gro on` and `set gso on` does: the header parse (`rte_net_get_ptype`), `rte_gro` on
//!   what arrives from outside with a full flush every flush period of simulated time, and TX
//!   preparation: with the NIC's offloads, a TSO request at the iMTU (inbound) or the eMTU
//!   (outbound) and the checksums' pseudo-header seeds (`rte_net_intel_cksum_prepare`);
//!   without them, `rte_gso` at the iMTU or the eMTU and the checksums in software. TCP/IPv4
//!   only (DPDK 22.11's GRO and GSO); other packets are forwarded as they came.
//! - [`FloorSide`]: receive and transmit, nothing else (testpmd's `io` forwarding).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use dpdk::{tx_flags, Burst, GroContext, GsoContext, Mbuf, Mempool};
use pxgw::config::Config;
use pxgw::pipeline::{Offloads, Pipeline};
use pxio::checksum::{pseudo_header_v4, Sum};
use pxio::merge::Merger;
use pxio::split::{split_tcp, SplitOffloads};

use super::frames::{tuple_of, Workload, EMTU, ETH_LEN, RX_MAX};
use super::nic::{Filler, Pools, Profile};
use super::tally::{Tally, TallyOutcome};
use crate::engine::CycleTimer;
use crate::BenchError;

/// `RTE_PTYPE_L4_MASK`.
const L4_MASK: u32 = 0x0f00;
/// Packets taken out of rte_gro's table per flush call.
const FLUSH_CAPACITY: usize = 1024;
/// Polls at deadlines after the last burst, at most (F-PMTUD's retries end long before).
const MAX_TAIL_POLLS: usize = 100_000;

/// A gateway under test: what the run calls, each call one timed section.
pub trait Side {
    /// Handles an RX burst from the outside port; what it sends (either way) goes to `out`.
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>);
    /// Handles an RX burst from the inside port.
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>);
    /// When the side next wants a poll, if it holds anything.
    fn next_deadline(&self) -> Option<u64>;
    /// A poll at a deadline.
    fn timed_poll(&mut self, now: u64, out: &mut Vec<Mbuf>);
    /// The end: everything held goes out.
    fn timed_finish(&mut self, now: u64, out: &mut Vec<Mbuf>);
    /// Packets the side dropped and counted, by reason.
    fn drops(&self) -> BTreeMap<String, u64> {
        BTreeMap::new()
    }
}

/// Frees what a side sent: its own timed section.
#[inline(never)]
fn timed_free(out: &mut Vec<Mbuf>) {
    out.clear();
}

/// pxgw's offloads for a port profile: everything a ConnectX grants (the inside port's checksums
/// and TSO up to 64 KB, the outside port's TSO and checksums), or nothing.
pub fn pxgw_offloads(profile: Profile) -> Offloads {
    if profile.offloads() {
        Offloads {
            inside_checksum: true,
            inside_tso_max_len: u16::MAX,
            outside: SplitOffloads {
                tso: true,
                checksum: true,
            },
        }
    } else {
        Offloads::default()
    }
}

/// pxgw's pipeline, called as its worker calls it.
pub struct PxgwSide {
    p: Pipeline<Mbuf>,
    to_int: Vec<Mbuf>,
    to_ext: Vec<Mbuf>,
}

impl PxgwSide {
    /// A pipeline for `cfg` on the bench's header pool, with `profile`'s offloads.
    pub fn new(cfg: &Config, pools: &Pools, profile: Profile) -> Result<Self, BenchError> {
        let p = Pipeline::new(
            cfg,
            pools.headers.clone(),
            pools.headers.clone(),
            pxgw_offloads(profile),
        )
        .map_err(|e| BenchError::Config(format!("pxgw's pipeline: {e:#}")))?;
        Ok(Self {
            p,
            to_int: Vec::with_capacity(4096),
            to_ext: Vec::with_capacity(4096),
        })
    }

    /// What the worker does after each burst: the gateway's own frames, then the sent counters.
    #[inline]
    fn send(&mut self, out: &mut Vec<Mbuf>) {
        self.p.take_replies(&mut self.to_ext);
        self.p.take_inside_replies(&mut self.to_int);
        self.p
            .count_sent_burst(true, self.to_int.iter().map(Mbuf::len));
        self.p
            .count_sent_burst(false, self.to_ext.iter().map(Mbuf::len));
        out.append(&mut self.to_int);
        out.append(&mut self.to_ext);
    }
}

impl Side for PxgwSide {
    #[inline(never)]
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        self.p.inbound_burst(rx.drain(), now, &mut self.to_int);
        self.send(out);
    }

    #[inline(never)]
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        self.p.outbound_burst(rx.drain(), now, &mut self.to_ext);
        self.send(out);
    }

    fn next_deadline(&self) -> Option<u64> {
        self.p.next_deadline()
    }

    #[inline(never)]
    fn timed_poll(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        self.p.poll(now, &mut self.to_int);
        self.send(out);
    }

    #[inline(never)]
    fn timed_finish(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        self.p.flush(now, &mut self.to_int);
        self.send(out);
    }

    fn drops(&self) -> BTreeMap<String, u64> {
        self.p
            .report()
            .drops
            .by_reason()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(what, n)| (what.to_owned(), n))
            .collect()
    }
}

/// pxio alone: its merge engine inbound, its split outbound, configured as pxgw configures them.
pub struct EngineSide {
    merger: Merger<Mbuf>,
    pool: Arc<Mempool>,
    split: SplitOffloads,
    failed: u64,
}

impl EngineSide {
    /// The engines for `cfg` and `profile`, the flow table's hash seeded with `seed`.
    pub fn new(
        cfg: &Config,
        pools: &Pools,
        profile: Profile,
        seed: u64,
    ) -> Result<Self, BenchError> {
        let offloads = pxgw_offloads(profile);
        let mut merge = cfg
            .merge_engine()
            .map_err(|e| BenchError::Config(e.to_string()))?;
        merge.checksum_offload = offloads.inside_checksum;
        merge.tso_max_len = if offloads.inside_checksum {
            offloads.inside_tso_max_len
        } else {
            0
        };
        let merger = Merger::with_hash_seed(merge, pools.headers.clone(), seed)
            .map_err(|e| BenchError::Config(e.to_string()))?;
        Ok(Self {
            merger,
            pool: pools.headers.clone(),
            split: offloads.outside,
            failed: 0,
        })
    }
}

impl Side for EngineSide {
    #[inline(never)]
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        self.merger.rx_burst(rx.drain(), now, out);
    }

    #[inline(never)]
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        for m in rx.drain() {
            if split_tcp(m, EMTU as u16, self.split, &self.pool, out).is_err() {
                self.failed += 1;
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.merger.next_deadline()
    }

    #[inline(never)]
    fn timed_poll(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        self.merger.poll(now, out);
    }

    #[inline(never)]
    fn timed_finish(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        self.merger.flush_all(now, out);
    }

    fn drops(&self) -> BTreeMap<String, u64> {
        let s = self.merger.stats();
        [
            ("split_failed", self.failed),
            ("merge_no_buffer", s.dropped_no_buffer),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(w, n)| (w.to_owned(), n))
        .collect()
    }
}

/// A DPDK gateway built from DPDK's libraries (see the module docs). TCP over IPv4 only.
pub struct DpdkSide {
    gro: GroContext,
    /// Flush period, ns of simulated time (0: after every burst).
    period: u64,
    due: Option<u64>,
    offloads: bool,
    imtu: u32,
    /// rte_gso at the iMTU and at the eMTU, without the NIC's TSO.
    gso: Option<(GsoContext, GsoContext)>,
    flushed: Box<Burst<FLUSH_CAPACITY>>,
    cut: Vec<Mbuf>,
    failed: u64,
}

impl DpdkSide {
    /// The gateway for `w`'s flows (rte_gro's table sized for them, 32 items each as testpmd),
    /// flushing every `period_ns`.
    pub fn new(
        eal: &dpdk::Eal,
        w: &Workload,
        pools: &Pools,
        profile: Profile,
        period_ns: u64,
    ) -> Result<Self, BenchError> {
        // IPv6 UDP passes through it as through the IPv4 one; IPv6 TCP it cannot merge or cut.
        if w.spec.v6 && (w.trace.is_some() || !w.out_stream_bytes.is_empty()) {
            return Err(BenchError::Config(
                "DPDK 22.11's rte_gro and rte_gso do TCP/IPv4 only".into(),
            ));
        }
        let flows =
            w.trace.as_ref().map_or(0, |t| t.config().flows) + w.out_stream_bytes.len() as u32;
        let flows = u16::try_from(flows.max(1)).unwrap_or(u16::MAX);
        let imtu = w.spec.imtu as u32;
        let gso = if profile.offloads() {
            None
        } else {
            let at = |mtu: usize| {
                GsoContext::tcp4(&pools.headers, &pools.indirect, (ETH_LEN + mtu) as u16)
            };
            Some((at(w.spec.imtu)?, at(EMTU)?))
        };
        Ok(Self {
            gro: GroContext::new(eal, flows, 32)?,
            period: period_ns,
            due: None,
            offloads: profile.offloads(),
            imtu,
            gso,
            flushed: Box::new(Burst::new()),
            cut: Vec::with_capacity(256),
            failed: 0,
        })
    }

    /// Readies `m` for a port whose IP MTU is `limit`: a TCP/IPv4 packet rte_gro merged (or the
    /// NIC's LRO coalesced), or one longer than `limit`, gets its checksums and the cut to
    /// `limit` from the NIC (TSO) or in software (rte_gso); any other packet leaves as it came.
    #[inline]
    fn ready(&mut self, mut m: Mbuf, limit: u32, out: &mut Vec<Mbuf>) {
        let tcp = m.packet_type() & L4_MASK == dpdk::ptype::L4_TCP;
        if !tcp || (m.num_segs() == 1 && m.len() <= ETH_LEN + limit as usize) {
            out.push(m);
            return;
        }
        let (l2, l3, l4) = m.header_lens();
        let ip_len = (m.len() - usize::from(l2)) as u32;
        let headers = u32::from(l3) + u32::from(l4);
        if self.offloads {
            let base = tx_flags::IPV4 | tx_flags::IP_CKSUM | tx_flags::TCP_CKSUM;
            let (flags, segsz) = if ip_len > limit && limit > headers {
                (base | tx_flags::TCP_SEG, (limit - headers) as u16)
            } else {
                (base, 0)
            };
            m.reset_metadata();
            m.set_tx_offload(l2, l3, l4, flags, segsz);
            match m.prepare_tx_checksums() {
                Ok(()) => out.push(m),
                Err(_) => self.failed += 1,
            }
            return;
        }
        if ip_len <= limit {
            if software_checksums(&mut m, l2, l3).is_ok() {
                out.push(m);
            } else {
                self.failed += 1;
            }
            return;
        }
        let Some((at_imtu, at_emtu)) = &self.gso else {
            self.failed += 1;
            return;
        };
        let gso = if limit == self.imtu { at_imtu } else { at_emtu };
        if gso.segment(m, &mut self.cut).is_err() {
            self.failed += 1;
        }
        for mut piece in self.cut.drain(..) {
            // A piece carries its input's TSO request: it is a packet of its own now.
            piece.reset_metadata();
            if software_checksums(&mut piece, l2, l3).is_ok() {
                out.push(piece);
            } else {
                self.failed += 1;
            }
        }
    }

    fn flush(&mut self, out: &mut Vec<Mbuf>) {
        self.due = None;
        loop {
            self.gro.timeout_flush(0, &mut *self.flushed);
            let more = self.flushed.is_full();
            let mut flushed = std::mem::take(&mut self.flushed);
            for m in flushed.drain() {
                self.ready(m, self.imtu, out);
            }
            self.flushed = flushed;
            if !more {
                break;
            }
        }
    }
}

impl Side for DpdkSide {
    #[inline(never)]
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        for m in rx.as_mut_slice() {
            m.parse_packet_type();
        }
        self.gro.reassemble(rx);
        for m in rx.drain() {
            self.ready(m, self.imtu, out);
        }
        if self.period == 0 {
            self.flush(out);
        } else if self.due.is_none() && self.gro.item_count() > 0 {
            self.due = Some((now / self.period + 1) * self.period);
        }
    }

    #[inline(never)]
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        for m in rx.as_mut_slice() {
            m.parse_packet_type();
        }
        for m in rx.drain() {
            self.ready(m, EMTU as u32, out);
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        self.due
    }

    #[inline(never)]
    fn timed_poll(&mut self, _now: u64, out: &mut Vec<Mbuf>) {
        self.flush(out);
    }

    #[inline(never)]
    fn timed_finish(&mut self, _now: u64, out: &mut Vec<Mbuf>) {
        self.flush(out);
    }

    fn drops(&self) -> BTreeMap<String, u64> {
        if self.failed > 0 {
            BTreeMap::from([("not_prepared".to_owned(), self.failed)])
        } else {
            BTreeMap::new()
        }
    }
}

/// Writes a TCP/IPv4 packet's IPv4 header checksum and TCP checksum, summing its payload across
/// its segments: what a gateway without the NIC's checksum offload does to a packet it changed.
fn software_checksums(m: &mut Mbuf, l2: u8, l3: u16) -> Result<(), dpdk::Error> {
    let (l2, l3) = (usize::from(l2), usize::from(l3));
    let l4 = l2 + l3;
    let total = m.len();
    let mut sum = Sum(0);
    let mut pos = 0usize;
    for seg in m.segments() {
        let (a, b) = (l4.max(pos), total.min(pos + seg.len()));
        if a < b {
            let part = Sum::of(&seg[a - pos..b - pos]);
            sum = sum.add(if (a - l4) % 2 == 1 {
                part.swapped()
            } else {
                part
            });
        }
        pos += seg.len();
    }
    let head = m.data_mut()?;
    if head.len() < l4 + 20 {
        return Err(dpdk::Error::InvalidArgument(
            "headers past the first segment".into(),
        ));
    }
    // The TCP checksum field was summed as it was: take it out.
    let old = u16::from_be_bytes([head[l4 + 16], head[l4 + 17]]);
    let sum = sum.sub(Sum(u32::from(old)));
    let ip = &mut head[l2..l4];
    ip[10..12].fill(0);
    let ip_sum = Sum::of(ip).checksum();
    ip[10..12].copy_from_slice(&ip_sum.to_be_bytes());
    let a = |at: usize| -> [u8; 4] { [ip[at], ip[at + 1], ip[at + 2], ip[at + 3]] };
    let pseudo = pseudo_header_v4(a(12), a(16), 6, (total - l4) as u16);
    let tcp = pseudo.add(sum).checksum();
    head[l4 + 16..l4 + 18].copy_from_slice(&tcp.to_be_bytes());
    Ok(())
}

/// Receive and transmit, nothing else.
#[derive(Default)]
pub struct FloorSide;

impl Side for FloorSide {
    #[inline(never)]
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        out.extend(rx.drain());
    }

    #[inline(never)]
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        out.extend(rx.drain());
    }

    fn next_deadline(&self) -> Option<u64> {
        None
    }

    fn timed_poll(&mut self, _now: u64, _out: &mut Vec<Mbuf>) {}

    fn timed_finish(&mut self, _now: u64, _out: &mut Vec<Mbuf>) {}
}

/// One timed run of one side on one scenario.
#[derive(Clone, Debug, PartialEq)]
pub struct SideRun {
    /// CPU time per input frame, ns.
    pub ns_per_pkt: f64,
    /// The same in TSC cycles.
    pub cycles_per_pkt: f64,
    /// What the outputs came to, faults included.
    pub outcome: TallyOutcome,
    /// Drops the side counted, by reason.
    pub drops: BTreeMap<String, u64>,
    /// Timed sections set aside as descheduled.
    pub discarded_sections: u64,
    /// LRO packets the port delivered, and the segments in them.
    pub lro: (u64, u64),
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
}

/// Runs `w` through the side `make` builds (after playing the handshakes through it, untimed)
/// with the ports of `profile`, and checks its outputs with `tally`. The side is dropped before
/// the pools are checked for leaks.
pub fn run_side(
    make: impl FnOnce() -> Result<Box<dyn Side>, BenchError>,
    w: &Workload,
    profile: Profile,
    pools: &Pools,
    mut tally: Tally<'_>,
    tsc_hz: u64,
) -> Result<SideRun, BenchError> {
    let wall = Instant::now();
    let mut side = make()?;
    let mut filler = Filler::default();
    let mut rx = Burst::<RX_MAX>::new();
    let mut out: Vec<Mbuf> = Vec::with_capacity(8192);
    handshakes(&mut *side, w, profile, pools, &mut rx, &mut out)?;

    let mut timer = CycleTimer::new(tsc_hz);
    for burst in &w.bursts {
        let mut last = None;
        while let Some(due) = side.next_deadline().filter(|&d| d < burst.time_ns) {
            if last == Some(due) {
                break; // a deadline the poll did not move waits for the next burst
            }
            last = Some(due);
            timer.time(|| side.timed_poll(due, &mut out));
            tally.record_all(&out, due);
            timer.time(|| timed_free(&mut out));
        }
        filler.fill(w, burst, profile, pools, &mut rx)?;
        let now = burst.time_ns;
        if burst.outside {
            timer.time(|| side.timed_inbound(&mut rx, now, &mut out));
        } else {
            timer.time(|| side.timed_outbound(&mut rx, now, &mut out));
        }
        if !rx.is_empty() {
            return Err(BenchError::Config(
                "a side left packets in its RX burst".into(),
            ));
        }
        tally.record_all(&out, now);
        timer.time(|| timed_free(&mut out));
    }
    let mut end = w.end_ns();
    let mut last = None;
    for _ in 0..MAX_TAIL_POLLS {
        let Some(due) = side.next_deadline() else {
            break;
        };
        if last == Some(due) {
            break;
        }
        last = Some(due);
        end = end.max(due);
        timer.time(|| side.timed_poll(due, &mut out));
        tally.record_all(&out, due);
        timer.time(|| timed_free(&mut out));
    }
    timer.time(|| side.timed_finish(end, &mut out));
    tally.record_all(&out, end);
    timer.time(|| timed_free(&mut out));
    let drops = side.drops();
    drop(side);
    let mut outcome = tally.finish();
    let in_use = pools.in_use();
    if in_use != [0; 4] {
        outcome.faults.push(format!(
            "leaked mbufs (small, big, header, indirect): {in_use:?}"
        ));
    }
    let n = w.len().max(1) as f64;
    Ok(SideRun {
        ns_per_pkt: timer.ns() / n,
        cycles_per_pkt: timer.cycles() / n,
        outcome,
        drops,
        discarded_sections: timer.discarded(),
        lro: (filler.lro_packets, filler.lro_segments),
        wall_s: wall.elapsed().as_secs_f64(),
    })
}

/// Plays `w`'s handshakes through `side`, round by round, untimed; what comes out is freed.
fn handshakes(
    side: &mut dyn Side,
    w: &Workload,
    profile: Profile,
    pools: &Pools,
    rx: &mut Burst<RX_MAX>,
    out: &mut Vec<Mbuf>,
) -> Result<(), BenchError> {
    for round in &w.handshakes {
        for outside in [true, false] {
            let frames: Vec<&Vec<u8>> = round
                .iter()
                .filter(|f| f.0 == outside)
                .map(|f| &f.1)
                .collect();
            for chunk in frames.chunks(32) {
                for bytes in chunk {
                    let mut m = pools.small.alloc()?;
                    m.extend_from_slice(bytes)?;
                    if profile.offloads() {
                        if let Some(t) = tuple_of(bytes) {
                            let h = pxio::toeplitz::Toeplitz::default();
                            let hash = if t.v6 {
                                h.hash_v6(t.src, t.dst, t.sport, t.dport)
                            } else {
                                let v4 = |a: [u8; 16]| [a[0], a[1], a[2], a[3]];
                                h.hash_v4(v4(t.src), v4(t.dst), t.sport, t.dport)
                            };
                            m.set_rss_hash(hash);
                        }
                        m.mark_rx_checksums_good();
                    }
                    rx.push(m)
                        .map_err(|_| BenchError::Config("handshake burst overflow".into()))?;
                }
                if outside {
                    side.timed_inbound(rx, 0, out);
                } else {
                    side.timed_outbound(rx, 0, out);
                }
                rx.clear();
                out.clear();
            }
        }
    }
    Ok(())
}
