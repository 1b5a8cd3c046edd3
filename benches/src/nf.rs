//! The middlebox gain (SIGCOMM'26 §7.3, Figure 14): the NFs of `px-nfs` (UPF downlink, NAT,
//! L4LB) in their plain and pxio versions, on the merge bench's trace model (800 flows of
//! 0.25 Gb/s, 1514 B frames, on real mbufs), and the same bytes already in ~9000 B packets.
//!
//! What is timed, per RX burst: the NF's own work and, for the pxio version, pxio's (merge,
//! polls at the ETM deadlines, split or TSO preparation, the TX queue). Not timed: writing the
//! trace's frames into mbufs, and freeing what the NF sent (a driver's work in both versions).
//! Inputs carry the NIC's "L4 checksum good" verdict in every version (RX checksum offload,
//! which every NIC does): the merge engine then does not verify checksums in software.
//!
//! Variants:
//! - `plain`: the NF on every 1514 B frame.
//! - `px`: pxio merges, the NF runs per merged packet, pxio splits in software, and the NIC fills
//!   the checksums (TX checksum offload; not for the UPF, see `UpfStats::offload_unsupported`).
//! - `px_tso`: the same with TSO granted on the TX port (the NIC cuts the segments). Not for the
//!   UPF, whose segments are each encapsulated after the split.
//! - `mtu9000`: the plain NF on the same bytes already in contiguous packets of 9000 B, as a
//!   sender on a 9000 B MTU path would send them: each flow's stream, as pxio releases it, is
//!   cut into full 9000 B packets (untimed; the last ones of a flow may be shorter): the upper
//!   bound of §7.3.
//!
//! The pxio versions align their iMTU to the trace's 52 B headers (`PxioBuilder::align_imtu`,
//! `--align-imtu 0` turns it off): merged packets hold whole segments, so the split sends one
//! frame per frame received and takes the packets' own mbufs for its pieces.
//!
//! Gbps-equivalent: the trace's bytes on the wire (1514 B frames) × 8 over the timed CPU time,
//! the same numerator for every variant.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use dpdk::{tx_flags, Burst, Eal, Mbuf, Mempool};
use px_nfs::lb::{Lb, LbConfig};
use px_nfs::nat::{Nat, NatConfig};
use px_nfs::upf::{SessionSpec, Upf, UpfConfig};
use px_nfs::Verdict;
use pxio::checksum::pseudo_header_v4;
use pxio::split::SplitOffloads;
use pxio::wire::{classify, Class, FlowKey, Headers, Ipv4Packet, TcpPacket};
use pxio::{ManualClock, PxioBuilder, RxPacket};
use serde::Serialize;

use crate::engine::CycleTimer;
use crate::gateway::frames::{Kind as WorkloadKind, Workload, WorkloadSpec, RX_MAX};
use crate::gateway::nic::{Pools as GatewayPools, Profile};
use crate::gateway::sides::{run_side, PxgwSide, Side};
use crate::gateway::tally::Tally;
use crate::trace::layout::{
    FRAME_LEN, IPV4_LEN, IP_DST, IP_SRC, TCP_DST_PORT, TCP_LEN, TCP_SRC_PORT,
};
use crate::trace::{Trace, TraceConfig};
use crate::BenchError;

/// Settings of the NF bench.
#[derive(Clone, Debug)]
pub struct NfBenchConfig {
    /// Flows of the trace.
    pub flows: u32,
    /// Rate of each, Gb/s.
    pub gbps_per_flow: f64,
    /// Minimum packets of the trace.
    pub min_packets: u64,
    /// Runs per variant, the variants taking turns; the fastest counts.
    pub reps: u32,
    /// UPF sessions besides the trace's UEs (each: 16 PDRs, 2 FARs, 2 QERs).
    pub upf_sessions: u32,
    /// The NIC profile pxgw's ports run with for the "behind pxgw" column: LRO on the outside
    /// port or not (RSS, checksum verdicts, TX checksums and TSO either way).
    pub pxgw_lro: bool,
    /// The TSC frequency.
    pub tsc_hz: u64,
    /// The pxio versions' [`PxioBuilder::align_imtu`] (the trace's IP + TCP headers are
    /// 52 B: TCP timestamps); `None`: the engine's 9000 B iMTU as it is.
    pub align_imtu: Option<u16>,
}

impl NfBenchConfig {
    /// The merge bench's 800-flow scenario, 5 runs, 256 Ki UPF sessions (4 M PDRs, 512 k FARs
    /// and QERs, the PacketExpress paper's UPF setup).
    pub fn new(eal: &Eal) -> Self {
        Self {
            flows: 800,
            gbps_per_flow: 0.25,
            min_packets: 300_000,
            reps: 5,
            upf_sessions: 256 * 1024,
            pxgw_lro: false,
            tsc_hz: eal.tsc_hz(),
            align_imtu: Some((IPV4_LEN + TCP_LEN) as u16),
        }
    }
}

/// One NF's figures.
#[derive(Clone, Debug, Serialize)]
pub struct NfRow {
    /// The NF.
    pub nf: String,
    /// NF invocations: plain (one per frame).
    pub plain_calls: u64,
    /// NF invocations: pxio (one per merged packet).
    pub px_calls: u64,
    /// NF invocations: 9000 B MTU.
    pub mtu9000_calls: u64,
    /// NF invocations: the plain NF behind pxgw (one per frame pxgw sent inside).
    pub behind_pxgw_calls: u64,
    /// Frames into every variant (the trace's).
    pub frames_in: u64,
    /// Frames the `px` variant sent (split pieces; plain sends one per frame in).
    pub px_frames_out: u64,
    /// Gbps-equivalent per core, plain.
    pub plain_gbps: f64,
    /// Gbps-equivalent per core, pxio with software split.
    pub px_gbps: f64,
    /// Gbps-equivalent per core, pxio with TSO (None for the UPF).
    pub px_tso_gbps: Option<f64>,
    /// Gbps-equivalent per core, 9000 B MTU.
    pub mtu9000_gbps: f64,
    /// Gbps-equivalent per core, the plain NF on what pxgw sent inside.
    pub behind_pxgw_gbps: f64,
    /// The 9000 B MTU case over plain.
    pub mtu9000_speedup: f64,
    /// Behind pxgw over plain.
    pub behind_pxgw_speedup: f64,
    /// Behind pxgw over the 9000 B MTU case.
    pub behind_pxgw_of_mtu9000: f64,
    /// The better pxio variant over plain.
    pub speedup: f64,
    /// The better pxio variant over the 9000 B MTU case.
    pub px_of_mtu9000: f64,
    /// Where the `px` variant's time goes, ns per input frame: merging (rx), the NF's own
    /// calls, pxio's transmit side (split, queue).
    pub px_ns_rx_nf_tx: [f64; 3],
    /// The same for `px_tso` (None for the UPF).
    pub px_tso_ns_rx_nf_tx: Option<[f64; 3]>,
}

/// What pxgw made of the trace for the "behind pxgw" column.
#[derive(Clone, Debug, Serialize)]
pub struct PxgwFeed {
    /// pxgw's configuration file.
    pub config: String,
    /// The port profile: `nic` or `nic+lro`.
    pub profile: String,
    /// Frames pxgw sent inside (the NF's inputs; a TSO request counted as its pieces).
    pub frames: u64,
    /// Their mean IP length, bytes.
    pub mean_ip_len: f64,
    /// pxgw's conversion yield (the gateway bench's definition).
    #[serde(rename = "yield")]
    pub conversion_yield: f64,
    /// pxgw's packets per iMTU of payload.
    pub packets_per_imtu: f64,
}

/// The UPF's rule tables.
#[derive(Clone, Debug, Serialize)]
pub struct UpfTables {
    /// Sessions installed.
    pub sessions: u64,
    /// PDRs, FARs, QERs.
    pub pdrs: u64,
    /// FARs.
    pub fars: u64,
    /// QERs.
    pub qers: u64,
    /// Memory the tables hold, MiB.
    pub mib: f64,
    /// Seconds to install them.
    pub build_s: f64,
}

/// The bench's report.
#[derive(Clone, Debug, Serialize)]
pub struct NfReport {
    /// One row per NF: UPF, NAT, LB.
    pub nfs: Vec<NfRow>,
    /// pxgw's side of the "behind pxgw" column.
    pub pxgw: PxgwFeed,
    /// The UPF's rules.
    pub upf: UpfTables,
    /// Trace frames (1514 B).
    pub frames: u64,
}

/// Which NF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Upf,
    Nat,
    Lb,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Upf => "upf",
            Kind::Nat => "nat",
            Kind::Lb => "lb",
        }
    }
}

/// The NFs' state.
struct Nfs {
    upf: Upf,
    nat: Nat,
    lb: Lb,
    /// A UPF burst: its packets, their headers and the decisions.
    upf_pkts: Vec<Mbuf>,
    upf_hdrs: Vec<Headers>,
    upf_rules: Vec<Option<px_nfs::upf::DlDecision>>,
}

/// The trace's destination: the load balancer's VIP.
const VIP: [u8; 4] = [10, 0, 0, 2];
const VIP_PORT: u16 = 5201;

impl Nfs {
    /// The plain NF on an RX burst: the UPF a burst at a time ([`Upf::downlink_burst`], its
    /// table lookups overlapped), the others packet by packet.
    fn burst(
        &mut self,
        kind: Kind,
        rx: impl Iterator<Item = Mbuf>,
        now: u64,
        pool: &Arc<Mempool>,
        out: &mut Vec<Mbuf>,
        calls: &mut u64,
    ) {
        if kind != Kind::Upf {
            for m in rx {
                *calls += 1;
                if let Class::Tcp(h) | Class::Udp(h) = classify(m.data(), m.len()) {
                    self.step(kind, m, &h, now, pool, out);
                }
            }
            return;
        }
        for m in rx {
            *calls += 1;
            if let Class::Tcp(h) | Class::Udp(h) = classify(m.data(), m.len()) {
                self.upf_pkts.push(m);
                self.upf_hdrs.push(h);
            }
        }
        self.upf
            .downlink_burst(&self.upf_hdrs, now, &mut self.upf_rules);
        for ((m, h), rule) in self
            .upf_pkts
            .drain(..)
            .zip(self.upf_hdrs.drain(..))
            .zip(self.upf_rules.drain(..))
        {
            if let Some(rule) = rule {
                if let Some(p) = self.upf.encap(m, h.l2_len, rule, pool) {
                    out.push(p);
                }
            }
        }
    }

    fn fresh_state(&mut self) {
        self.nat = Nat::new(NatConfig::default());
        self.lb = Lb::new(LbConfig::with_backends(VIP, [0; 16], VIP_PORT, 16));
    }

    /// The NF on one packet (for the UPF, one already cut to its final size); what it forwards
    /// goes to `out`.
    fn step(
        &mut self,
        kind: Kind,
        mut pkt: Mbuf,
        hdr: &Headers,
        now: u64,
        pool: &Arc<Mempool>,
        out: &mut Vec<Mbuf>,
    ) {
        match kind {
            Kind::Nat => {
                if self.nat.outbound(&mut pkt, hdr) == Verdict::Forward {
                    out.push(pkt);
                }
            }
            Kind::Lb => {
                if self.lb.process(&mut pkt, hdr) == Verdict::Forward {
                    out.push(pkt);
                }
            }
            Kind::Upf => {
                if let Some(rule) = self.upf.downlink(hdr, now) {
                    if let Some(p) = self.upf.encap(pkt, hdr.l2_len, rule, pool) {
                        out.push(p);
                    }
                }
            }
        }
    }
}

/// The trace's flow `i` as a UE (its source address, as the UPF bench turns the trace around).
fn ue_session(i: u32) -> SessionSpec {
    let src = u32::from_be_bytes([198, 18, 0, 0]) + i;
    let mut ue_v6 = [
        0x20, 0x01, 0x0d, 0xb8, 0xee, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    ue_v6[12..].copy_from_slice(&i.to_be_bytes());
    SessionSpec {
        ue_v4: src.to_be_bytes(),
        ue_v6,
        ul_teid: 0x4000_0000 + i,
        dl_teid: 0x2000_0000 + i,
        gnb: [198, 51, 100, 250],
        mbr_bps: 1_000_000_000_000,
        qfi: 9,
    }
}

/// Fills `rx` with the frames of `slots`, marked checksum-good and carrying its RSS hash; for the UPF the frame is turned around (addresses and ports swapped, which leaves every checksum valid) so that
/// the trace's sources are the UEs of downlink traffic.
fn fill(
    trace: &Trace,
    slots: std::ops::Range<usize>,
    pool: &Mempool,
    rx: &mut Burst<64>,
    kind: Kind,
) -> Result<(), BenchError> {
    pool.alloc_bulk(rx, slots.len())?;
    let mut frame = [0u8; FRAME_LEN];
    for (m, slot) in rx.as_mut_slice().iter_mut().zip(slots) {
        trace.write_frame(slot, &mut frame);
        if kind == Kind::Upf {
            swap(&mut frame, IP_SRC, IP_DST, 4);
            swap(&mut frame, TCP_SRC_PORT, TCP_DST_PORT, 2);
        }
        m.append(FRAME_LEN)?.copy_from_slice(&frame);
        m.mark_rx_checksums_good();
        // The RSS hash a NIC writes (per flow; for the UPF, of the flow before the turn
        // around, which is as good a per-flow value as any).
        m.set_rss_hash(trace.rss_hash(slot));
    }
    Ok(())
}

fn swap(b: &mut [u8], x: usize, y: usize, n: usize) {
    for i in 0..n {
        b.swap(x + i, y + i);
    }
}

/// Re-cuts each flow's stream into full packets of `IMTU` IP bytes (the 9000 B MTU case):
/// headers from the flow's first packet, sequence number, lengths and checksums rewritten.
#[derive(Default)]
struct Repack {
    /// Per flow: its headers (bytes and layout), the sequence number of the first pending
    /// byte, and the pending bytes.
    flows: HashMap<FlowKey, (Vec<u8>, Headers, u32, Vec<u8>)>,
}

/// The 9000 B MTU.
const IMTU: usize = 9000;

impl Repack {
    /// Adds a frame of a flow; full packets go to `out`.
    fn push(&mut self, frame: &[u8], out: &mut Vec<Vec<u8>>) {
        let Class::Tcp(h) = classify(frame, frame.len()) else {
            out.push(frame.to_vec());
            return;
        };
        let Ok(tcp) = TcpPacket::new_checked(&frame[h.l4_offset()..h.hdr_len()]) else {
            out.push(frame.to_vec());
            return;
        };
        let seq = tcp.seq_number();
        let payload = &frame[h.hdr_len()..h.frame_len()];
        let fresh = (frame[..h.hdr_len()].to_vec(), h, seq, Vec::new());
        let entry = self.flows.entry(h.key).or_insert_with(|| fresh.clone());
        if entry.2.wrapping_add(entry.3.len() as u32) != seq {
            // A gap (reordering): what is pending goes as it is.
            if !entry.3.is_empty() {
                out.push(emit(&entry.0, &entry.1, entry.2, &entry.3));
            }
            *entry = fresh;
        }
        entry.3.extend_from_slice(payload);
        let mss = IMTU - usize::from(h.l3_len + h.l4_len);
        while entry.3.len() >= mss {
            out.push(emit(&entry.0, &entry.1, entry.2, &entry.3[..mss]));
            entry.3.drain(..mss);
            entry.2 = entry.2.wrapping_add(mss as u32);
        }
    }

    /// Everything still pending.
    fn flush(&mut self, out: &mut Vec<Vec<u8>>) {
        for (_, (hdr, h, seq, data)) in self.flows.drain() {
            if !data.is_empty() {
                out.push(emit(&hdr, &h, seq, &data));
            }
        }
    }
}

/// One IPv4 TCP frame: `hdr`'s headers (layout `h`) with `data` at `seq`.
fn emit(hdr: &[u8], h: &Headers, seq: u32, data: &[u8]) -> Vec<u8> {
    let mut f = hdr[..h.hdr_len()].to_vec();
    f.extend_from_slice(data);
    let (l3, l4) = (h.l3_offset(), h.l4_offset());
    let ip_len = (f.len() - l3) as u16;
    if let Ok(mut ip) = Ipv4Packet::new_checked(&mut f[l3..l4]) {
        ip.set_total_len(ip_len);
        ip.fill_checksum();
    }
    let pseudo = pseudo_header_v4(
        f[l3 + 12..l3 + 16].try_into().unwrap_or_default(),
        f[l3 + 16..l3 + 20].try_into().unwrap_or_default(),
        h.proto,
        ip_len - h.l3_len,
    );
    if let Ok(mut tcp) = TcpPacket::new_checked(&mut f[l4..]) {
        tcp.set_seq_number(seq);
        tcp.fill_checksum(pseudo);
    }
    f
}

/// Timed NF work of one run: (ns, NF invocations).
struct Run {
    ns: f64,
    calls: u64,
    /// Of `ns`, in the pxio version: merging (rx_meta and polls) and the NF's own calls; the
    /// rest is pxio's transmit side (split, queue, flush).
    rx_ns: f64,
    nf_ns: f64,
    /// Frames sent (pxio's TX queue; 0 where not counted).
    frames_out: u64,
    /// Packets the plain NF forwarded (0 where not counted).
    forwarded: u64,
}

struct Pools {
    rx: Arc<Mempool>,
    headers: Arc<Mempool>,
    big: Arc<Mempool>,
}

fn run_plain(
    trace: &Trace,
    kind: Kind,
    nfs: &mut Nfs,
    pools: &Pools,
    tsc_hz: u64,
) -> Result<Run, BenchError> {
    nfs.fresh_state();
    let mut timer = CycleTimer::new(tsc_hz);
    let mut rx = Burst::<64>::new();
    let mut out = Vec::with_capacity(128);
    let (mut calls, mut forwarded) = (0u64, 0u64);
    for burst in trace.bursts() {
        fill(trace, burst.slots.clone(), &pools.rx, &mut rx, kind)?;
        let now = burst.time_ns;
        timer.time(|| nfs.burst(kind, rx.drain(), now, &pools.headers, &mut out, &mut calls));
        forwarded += out.len() as u64;
        out.clear();
    }
    Ok(Run {
        ns: timer.ns(),
        calls,
        rx_ns: 0.0,
        nf_ns: 0.0,
        frames_out: 0,
        forwarded,
    })
}

/// Frames as they reach an NF, with the time each was released; bytes, written into mbufs
/// burst by burst when replayed.
#[derive(Default)]
struct Replay {
    bytes: Vec<u8>,
    /// Each frame's end in `bytes`.
    ends: Vec<usize>,
    /// Each frame's release time (set by [`Replay::released`]).
    times: Vec<u64>,
}

impl Replay {
    fn push(&mut self, frame: &[u8]) {
        self.bytes.extend_from_slice(frame);
        self.ends.push(self.bytes.len());
    }

    /// The frames pushed since the last call were released at `now`.
    fn released(&mut self, now: u64) {
        self.times.resize(self.ends.len(), now);
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn frame(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.bytes[start..self.ends[i]]
    }

    /// Mean IP length of the frames.
    fn mean_ip_len(&self) -> f64 {
        (self.bytes.len() - self.len() * ETH_HEADER) as f64 / self.len().max(1) as f64
    }
}

/// Ethernet header bytes of every frame here.
const ETH_HEADER: usize = 14;

/// Packets per RX burst when replaying: a poll-mode driver's burst, full, as it is for an NF
/// at capacity whatever the packets' size (the trace's bursts hold as many 1514 B frames).
const REPLAY_BURST: usize = 32;

/// The plain NF on `replay`'s frames in full RX bursts: each burst written into mbufs (for the
/// UPF turned around, as [`fill`] does), then timed.
fn run_replay(
    replay: &Replay,
    kind: Kind,
    nfs: &mut Nfs,
    pools: &Pools,
    tsc_hz: u64,
) -> Result<Run, BenchError> {
    nfs.fresh_state();
    let mut timer = CycleTimer::new(tsc_hz);
    let mut rx: Vec<Mbuf> = Vec::with_capacity(REPLAY_BURST);
    let mut out = Vec::with_capacity(2 * REPLAY_BURST);
    let (mut calls, mut forwarded) = (0u64, 0u64);
    for start in (0..replay.len()).step_by(REPLAY_BURST) {
        let stop = (start + REPLAY_BURST).min(replay.len());
        for i in start..stop {
            let f = replay.frame(i);
            let mut m = pools.big.alloc()?;
            let room = m.append(f.len())?;
            room.copy_from_slice(f);
            if kind == Kind::Upf {
                swap(room, IP_SRC, IP_DST, 4);
                swap(room, TCP_SRC_PORT, TCP_DST_PORT, 2);
            }
            m.mark_rx_checksums_good();
            rx.push(m);
        }
        let now = replay.times[stop - 1];
        timer.time(|| {
            nfs.burst(
                kind,
                rx.drain(..),
                now,
                &pools.headers,
                &mut out,
                &mut calls,
            )
        });
        forwarded += out.len() as u64;
        out.clear();
    }
    Ok(Run {
        ns: timer.ns(),
        calls,
        rx_ns: 0.0,
        nf_ns: 0.0,
        frames_out: 0,
        forwarded,
    })
}

/// pxgw's configuration for the "behind pxgw" column, as an operator writes it for a b-network
/// of 9000 B MTU behind a 1500 B Internet: pxgw's defaults (merging, caravans, MSS rewrite,
/// eMTU 1500, its delay budget), the inside port's MTU raised. The devices are not opened.
pub const PXGW_CONFIG: &str = "[ports.external]\ndevice = \"net_null0\"\n\
[ports.internal]\ndevice = \"net_null1\"\nmtu = 9000\n";

/// pxgw's pipeline as the gateway bench runs it, keeping what it sends inside.
struct Capture {
    inner: PxgwSide,
    sink: Rc<RefCell<Replay>>,
    flat: Vec<u8>,
}

impl Capture {
    /// Keeps the TCP data frames among `out` (what pxgw sent inside) as they leave the inside
    /// port, as one burst at `now`.
    fn keep(&mut self, out: &[Mbuf], now: u64) {
        let mut r = self.sink.borrow_mut();
        for m in out {
            self.flat.clear();
            for seg in m.segments() {
                self.flat.extend_from_slice(seg);
            }
            wire_frames(m, &self.flat, &mut r);
        }
        r.released(now);
    }
}

/// What the inside port puts on the wire for `m` (bytes `flat`), when it is TCP data: a TSO
/// request cut at its segment size (FIN and PSH on the last piece only), checksums filled
/// where the packet asks the NIC to.
fn wire_frames(m: &Mbuf, flat: &[u8], r: &mut Replay) {
    let Class::Tcp(h) = classify(flat, flat.len()) else {
        return;
    };
    if h.payload_len == 0 || h.v6 {
        return;
    }
    let Ok(tcp) = TcpPacket::new_checked(&flat[h.l4_offset()..h.hdr_len()]) else {
        return;
    };
    let seq = tcp.seq_number();
    let payload = &flat[h.hdr_len()..h.frame_len()];
    let asks = m.ol_flags() & (tx_flags::IP_CKSUM | tx_flags::TCP_CKSUM | tx_flags::TCP_SEG) != 0;
    match m.tso_request().map(usize::from) {
        Some(mss) if mss > 0 && payload.len() > mss => {
            let n = payload.len().div_ceil(mss);
            for (k, piece) in payload.chunks(mss).enumerate() {
                let mut f = emit(flat, &h, seq.wrapping_add((k * mss) as u32), piece);
                if k + 1 < n {
                    let at = h.l4_offset() + 13;
                    f[at] &= !(TCP_FIN | TCP_PSH);
                    refill_tcp_checksum(&mut f, &h);
                }
                r.push(&f);
            }
        }
        _ if asks => r.push(&emit(flat, &h, seq, payload)),
        _ => r.push(&flat[..h.frame_len()]),
    }
}

const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;

/// Sums the TCP checksum of IPv4 frame `f` (layout `h`) again.
fn refill_tcp_checksum(f: &mut [u8], h: &Headers) {
    let (l3, l4) = (h.l3_offset(), h.l4_offset());
    let ip_len = (f.len() - l3) as u16;
    let pseudo = pseudo_header_v4(
        f[l3 + 12..l3 + 16].try_into().unwrap_or_default(),
        f[l3 + 16..l3 + 20].try_into().unwrap_or_default(),
        h.proto,
        ip_len - h.l3_len,
    );
    if let Ok(mut tcp) = TcpPacket::new_checked(&mut f[l4..]) {
        tcp.fill_checksum(pseudo);
    }
}

impl Side for Capture {
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        let n = out.len();
        self.inner.timed_inbound(rx, now, out);
        self.keep(&out[n..], now);
    }

    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, now: u64, out: &mut Vec<Mbuf>) {
        let n = out.len();
        self.inner.timed_outbound(rx, now, out);
        self.keep(&out[n..], now);
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    fn timed_poll(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        let n = out.len();
        self.inner.timed_poll(now, out);
        self.keep(&out[n..], now);
    }

    fn timed_finish(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        let n = out.len();
        self.inner.timed_finish(now, out);
        self.keep(&out[n..], now);
    }

    fn drops(&self) -> BTreeMap<String, u64> {
        self.inner.drops()
    }
}

/// Runs the trace through pxgw's pipeline (the gateway bench's harness: real mbufs, the NIC
/// profile's offloads, its outputs checked by the gateway bench's tally) and keeps what it
/// sends inside.
fn behind_pxgw(
    eal: &Eal,
    trace: &Trace,
    cfg: &NfBenchConfig,
) -> Result<(Replay, PxgwFeed), BenchError> {
    let pxgw_cfg = pxgw::config::Config::parse(PXGW_CONFIG)
        .map_err(|e| BenchError::Config(format!("pxgw's configuration: {e}")))?;
    let w = Workload::generate(WorkloadSpec {
        kind: WorkloadKind::InboundTcp,
        flows: cfg.flows,
        gbps_per_flow: cfg.gbps_per_flow,
        v6: false,
        packets: cfg.min_packets,
        seed: trace.config().seed,
        imtu: 9000,
    })?;
    if w.trace.as_ref().map(Trace::len) != Some(trace.len()) {
        return Err(BenchError::Config(
            "the gateway workload's trace is not the NF bench's".into(),
        ));
    }
    let profile = Profile::Nic {
        lro: cfg.pxgw_lro.then(Default::default),
    };
    let pools = GatewayPools::new(eal, (9000 + 14 + 128) as u16)?;
    let sink = Rc::new(RefCell::new(Replay::default()));
    let tally = Tally::new(&w, "pxgw", true, true);
    let run = run_side(
        || -> Result<Box<dyn Side>, BenchError> {
            Ok(Box::new(Capture {
                inner: PxgwSide::new(&pxgw_cfg, &pools, profile)?,
                sink: sink.clone(),
                flat: Vec::with_capacity(65_536),
            }))
        },
        &w,
        profile,
        &pools,
        tally,
        cfg.tsc_hz,
    )?;
    if !run.outcome.faults.is_empty() {
        return Err(BenchError::Config(format!(
            "pxgw's outputs failed the tally: {:?}",
            run.outcome.faults
        )));
    }
    let tcp = run
        .outcome
        .tcp
        .ok_or_else(|| BenchError::Config("pxgw: no trace outcome".into()))?;
    let replay = Rc::try_unwrap(sink)
        .map_err(|_| BenchError::Config("the capture is still shared".into()))?
        .into_inner();
    let feed = PxgwFeed {
        config: PXGW_CONFIG.to_owned(),
        profile: if cfg.pxgw_lro { "nic+lro" } else { "nic" }.to_owned(),
        frames: replay.len() as u64,
        mean_ip_len: replay.mean_ip_len(),
        conversion_yield: tcp.conversion_yield,
        packets_per_imtu: tcp.packets_per_imtu,
    };
    Ok((replay, feed))
}

/// The pxio version; with `feed9000`, instead, nothing is timed: the merged packets are
/// repacked into full 9000 B frames (the 9000 B MTU case), returned for [`run_replay`].
#[allow(clippy::too_many_arguments)]
fn run_px(
    trace: &Trace,
    kind: Kind,
    nfs: &mut Nfs,
    pools: &Pools,
    tsc_hz: u64,
    tso: bool,
    feed9000: bool,
    align_imtu: Option<u16>,
) -> Result<(Run, Replay), BenchError> {
    nfs.fresh_state();
    let clock = ManualClock::new(0);
    let mut builder = PxioBuilder::new()
        .flow_capacity(trace.config().flows as usize * 4)
        // TX checksum offload, as every NIC has, except for the UPF, which encapsulates the
        // segments (their offload request would need tunnel lengths).
        .offloads(SplitOffloads {
            tso,
            checksum: kind != Kind::Upf,
        })
        .tx_queue_limit(1 << 16);
    if let Some(h) = align_imtu {
        builder = builder.align_imtu(h);
    }
    let px = builder
        .build::<Mbuf, _>(pools.headers.clone(), &clock)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    let mut run = PxRun {
        px,
        kind,
        nfs,
        pools,
        timer: CycleTimer::new(tsc_hz),
        rx_timer: CycleTimer::new(tsc_hz),
        nf_timer: CycleTimer::new(tsc_hz),
        merged: Vec::new(),
        pieces: Vec::new(),
        sink: Vec::new(),
        fwd: Vec::new(),
        calls: 0,
        repack: feed9000.then(Repack::default),
        replay: Replay::default(),
    };
    let mut rx = Burst::<64>::new();
    let mut bursts = trace.bursts().peekable();
    loop {
        let next = bursts.peek().map(|b| b.time_ns);
        // Deadlines due before the next burst (or all, at the end) fire on time.
        while let Some(due) = run
            .px
            .next_deadline()
            .filter(|&d| next.is_none_or(|t| d < t))
        {
            clock.set(due);
            run.released(|px, merged| px.poll_meta(merged));
            run.process(due, false)?;
        }
        let Some(burst) = bursts.next() else { break };
        fill(trace, burst.slots.clone(), &pools.rx, &mut rx, kind)?;
        clock.set(burst.time_ns);
        run.released(|px, merged| px.rx_meta(rx.drain(), merged));
        run.process(burst.time_ns, false)?;
    }
    run.released(|px, merged| px.flush_meta(merged));
    run.process(trace.end_ns(), true)?;
    let px = &run.px;
    if px.tx_stats().dropped + px.tx_stats().queue_drops > 0 {
        return Err(BenchError::Config(format!(
            "pxio dropped on TX: {:?}",
            px.tx_stats()
        )));
    }
    let r = Run {
        ns: run.timer.ns(),
        calls: run.calls,
        rx_ns: run.rx_timer.ns(),
        nf_ns: run.nf_timer.ns(),
        frames_out: px.tx_stats().packets_out,
        forwarded: 0,
    };
    Ok((r, run.replay))
}

/// One pxio run's state: the engine, the NF, the timers and the vectors packets pass through.
struct PxRun<'a, 'c> {
    px: pxio::Pxio<Mbuf, &'c ManualClock>,
    kind: Kind,
    nfs: &'a mut Nfs,
    pools: &'a Pools,
    /// Everything timed: pxio's RX and TX and the NF.
    timer: CycleTimer,
    /// pxio's RX alone, and the NF alone.
    rx_timer: CycleTimer,
    nf_timer: CycleTimer,
    merged: Vec<RxPacket<Mbuf>>,
    pieces: Vec<Mbuf>,
    sink: Vec<Mbuf>,
    fwd: Vec<Mbuf>,
    /// Packets the NF was called on.
    calls: u64,
    /// With `feed9000`: the merged packets are repacked into contiguous 9000 B frames,
    /// untimed, into `replay`.
    repack: Option<Repack>,
    replay: Replay,
}

impl PxRun<'_, '_> {
    /// Lets pxio release packets into `merged` (`f`: a poll, a burst's RX, the final flush),
    /// on the clock unless the packets are only repacked for the 9000 B case.
    fn released(
        &mut self,
        f: impl FnOnce(&mut pxio::Pxio<Mbuf, &ManualClock>, &mut Vec<RxPacket<Mbuf>>),
    ) {
        let (px, merged) = (&mut self.px, &mut self.merged);
        if self.repack.is_some() {
            f(px, merged);
        } else {
            let rx_timer = &mut self.rx_timer;
            self.timer.time(|| rx_timer.time(|| f(px, merged)));
        }
    }

    /// The NF on what pxio released, and pxio's TX; or, with `feed9000`, full 9000 B frames
    /// into the replay, one burst (`last`: the run's end, when the repacker gives up what it
    /// holds).
    fn process(&mut self, now: u64, last: bool) -> Result<(), BenchError> {
        let Self {
            px,
            kind,
            nfs,
            pools,
            timer,
            nf_timer,
            merged,
            pieces,
            sink,
            fwd,
            calls,
            repack,
            replay,
            ..
        } = self;
        let kind = *kind;
        if let Some(repack) = repack {
            let mut frames = Vec::new();
            for RxPacket { pkt, .. } in merged.drain(..) {
                repack.push(&pkt.to_vec(), &mut frames);
            }
            if last {
                repack.flush(&mut frames);
            }
            for f in &frames {
                replay.push(f);
            }
            replay.released(now);
            return Ok(());
        }
        timer.time(|| {
            for RxPacket { pkt, meta } in merged.drain(..) {
                *calls += 1;
                let Some(m) = meta else { continue };
                // NF cycles: the rule lookups, rewrites and encapsulations (the pieces' split
                // is pxio's).
                if kind == Kind::Upf {
                    let rule = nf_timer.time(|| nfs.upf.downlink(&m.hdr, now));
                    if let Some(rule) = rule {
                        let _ = px.split(pkt, m.seg_mtu(), pieces);
                        for p in pieces.drain(..) {
                            let p = nf_timer
                                .time(|| nfs.upf.encap(p, m.hdr.l2_len, rule, &pools.headers));
                            if let Some(p) = p {
                                px.enqueue(p);
                            }
                        }
                    }
                } else {
                    nf_timer.time(|| nfs.step(kind, pkt, &m.hdr, now, &pools.headers, fwd));
                    for p in fwd.drain(..) {
                        let _ = px.tx(p);
                    }
                }
            }
            px.flush_tx(sink);
        });
        sink.clear();
        Ok(())
    }
}

/// Runs every NF in every variant; rows in the order UPF, NAT, LB.
pub fn run_nf(eal: &Eal, cfg: &NfBenchConfig) -> Result<NfReport, BenchError> {
    let mut tc = TraceConfig::new(cfg.flows, cfg.gbps_per_flow);
    tc.min_packets = cfg.min_packets;
    let trace = Trace::generate(tc)?;
    let wire_bytes = (trace.len() * FRAME_LEN) as f64;
    let tag = format!("nf{}", std::process::id());
    let pools = Pools {
        rx: Mempool::new(eal, &format!("{tag}rx"), 32767, 256, 2048 + 128)?,
        headers: Mempool::new(eal, &format!("{tag}hd"), 32767, 256, 256 + 128)?,
        big: Mempool::new(eal, &format!("{tag}bg"), 4095, 256, 9216 + 128)?,
    };
    let ues: Vec<SessionSpec> = (0..cfg.flows).map(ue_session).collect();
    let built = std::time::Instant::now();
    let upf = Upf::synthetic(UpfConfig::default(), cfg.upf_sessions, 1_000_000_000, &ues)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    let (pdrs, fars, qers) = upf.rule_counts();
    let tables = UpfTables {
        sessions: u64::from(cfg.upf_sessions) + ues.len() as u64,
        pdrs: pdrs as u64,
        fars: fars as u64,
        qers: qers as u64,
        mib: upf.table_bytes() as f64 / (1 << 20) as f64,
        build_s: built.elapsed().as_secs_f64(),
    };
    let mut nfs = Nfs {
        upf,
        nat: Nat::new(NatConfig::default()),
        lb: Lb::new(LbConfig::with_backends(VIP, [0; 16], VIP_PORT, 16)),
        upf_pkts: Vec::with_capacity(64),
        upf_hdrs: Vec::with_capacity(64),
        upf_rules: Vec::with_capacity(64),
    };
    // The NFs' inputs other than the trace, untimed: full 9000 B frames, and what pxgw sends.
    let (_, mtu9000) = run_px(
        &trace,
        Kind::Nat,
        &mut nfs,
        &pools,
        cfg.tsc_hz,
        false,
        true,
        None,
    )?;
    let (pxgw_frames, feed) = behind_pxgw(eal, &trace, cfg)?;
    let gbps = |r: &Run| wire_bytes * 8.0 / r.ns;
    let breakdown = |r: &Run| {
        let n = trace.len() as f64;
        let (rx, nf) = (r.rx_ns / n, r.nf_ns / n);
        [rx, nf, (r.ns / n - rx - nf).max(0.0)]
    };
    let mut rows = Vec::new();
    for kind in [Kind::Upf, Kind::Nat, Kind::Lb] {
        // The variants take turns, rep by rep, so that a disturbed stretch of time hits them
        // alike; the fastest run of each counts.
        let mut runs: [Option<Run>; 5] = Default::default();
        for _ in 0..cfg.reps.max(1) {
            for (v, slot) in runs.iter_mut().enumerate() {
                let r = match v {
                    0 => run_plain(&trace, kind, &mut nfs, &pools, cfg.tsc_hz)?,
                    1 | 2 if v == 2 && kind == Kind::Upf => continue,
                    1 | 2 => {
                        run_px(
                            &trace,
                            kind,
                            &mut nfs,
                            &pools,
                            cfg.tsc_hz,
                            v == 2,
                            false,
                            cfg.align_imtu,
                        )?
                        .0
                    }
                    3 => run_replay(&mtu9000, kind, &mut nfs, &pools, cfg.tsc_hz)?,
                    _ => run_replay(&pxgw_frames, kind, &mut nfs, &pools, cfg.tsc_hz)?,
                };
                if slot.as_ref().is_none_or(|b| r.ns < b.ns) {
                    *slot = Some(r);
                }
            }
        }
        let [plain, px, tso, big, gw] = runs;
        let no_run = || BenchError::Config("no run".into());
        let (plain, px, big, gw) = (
            plain.ok_or_else(no_run)?,
            px.ok_or_else(no_run)?,
            big.ok_or_else(no_run)?,
            gw.ok_or_else(no_run)?,
        );
        for (what, r) in [("plain", &plain), ("9000", &big), ("behind pxgw", &gw)] {
            if r.forwarded != r.calls {
                return Err(BenchError::Config(format!(
                    "{} {what}: forwarded {} of {} packets",
                    kind.name(),
                    r.forwarded,
                    r.calls
                )));
            }
        }
        let px_best = gbps(&px).max(tso.as_ref().map_or(0.0, gbps));
        rows.push(NfRow {
            nf: kind.name().into(),
            plain_calls: plain.calls,
            px_calls: px.calls,
            mtu9000_calls: big.calls,
            behind_pxgw_calls: gw.calls,
            frames_in: trace.len() as u64,
            px_frames_out: px.frames_out,
            plain_gbps: gbps(&plain),
            px_gbps: gbps(&px),
            px_tso_gbps: tso.as_ref().map(gbps),
            mtu9000_gbps: gbps(&big),
            behind_pxgw_gbps: gbps(&gw),
            mtu9000_speedup: gbps(&big) / gbps(&plain),
            behind_pxgw_speedup: gbps(&gw) / gbps(&plain),
            behind_pxgw_of_mtu9000: gbps(&gw) / gbps(&big),
            speedup: px_best / gbps(&plain),
            px_of_mtu9000: px_best / gbps(&big),
            px_ns_rx_nf_tx: breakdown(&px),
            px_tso_ns_rx_nf_tx: tso.as_ref().map(breakdown),
        });
    }
    Ok(NfReport {
        nfs: rows,
        pxgw: feed,
        upf: tables,
        frames: trace.len() as u64,
    })
}

/// Prints the set-up, the table, and where the PX versions' time goes.
pub fn print_nf_report(report: &NfReport, cfg: &NfBenchConfig) {
    let u = &report.upf;
    println!(
        "trace: {} flows x {} Gb/s, {} frames of {FRAME_LEN} B (Gb/s-equivalent: these bytes x 8 / \
         the NF's CPU time, one core)",
        cfg.flows, cfg.gbps_per_flow, report.frames
    );
    println!(
        "UPF rules: {} sessions, {} PDRs, {} FARs, {} QERs; {:.0} MiB, installed in {:.1} s",
        u.sessions, u.pdrs, u.fars, u.qers, u.mib, u.build_s
    );
    let g = &report.pxgw;
    println!(
        "behind pxgw: pxgw's pipeline (ports: {}; RSS, checksum verdicts, TX checksums, TSO) with \
         this configuration:",
        g.profile
    );
    for line in g.config.lines() {
        println!("    {line}");
    }
    println!(
        "  sent inside {} frames of {:.0} B IP on average; yield {:.1} %, {:.2} packets per iMTU",
        g.frames,
        g.mean_ip_len,
        100.0 * g.conversion_yield,
        g.packets_per_imtu
    );
    println!();
    println!(
        "{:<4} | {:>8} {:>6} | {:>8} {:>6} {:>6} | {:>8} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6}",
        "nf",
        "plain", "Gb/s",
        "9000 B", "Gb/s", "x",
        "pxgw", "Gb/s", "x", "/9000",
        "px", "Gb/s", "+TSO", "x"
    );
    println!(
        "{:<4} | {:>8} {:>6} | {:>8} {:>6} {:>6} | {:>8} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6}",
        "", "calls", "", "calls", "", "plain", "calls", "", "plain", "", "calls", "", "Gb/s", "plain"
    );
    for r in &report.nfs {
        println!(
            "{:<4} | {:>8} {:>6.1} | {:>8} {:>6.1} {:>5.2}x | {:>8} {:>6.1} {:>5.2}x {:>5.0}% | {:>6} {:>6.1} {:>6} {:>5.2}x",
            r.nf,
            r.plain_calls,
            r.plain_gbps,
            r.mtu9000_calls,
            r.mtu9000_gbps,
            r.mtu9000_speedup,
            r.behind_pxgw_calls,
            r.behind_pxgw_gbps,
            r.behind_pxgw_speedup,
            100.0 * r.behind_pxgw_of_mtu9000,
            r.px_calls,
            r.px_gbps,
            r.px_tso_gbps.map_or("-".into(), |g| format!("{g:.1}")),
            r.speedup,
        );
    }
    println!();
    println!(
        "PX-ported, ns per input frame: merge (rx_meta, polls; NIC LRO's work) / NF / transmit \
         (split or TSO preparation, queue; NIC TSO's work), frames out per frame in"
    );
    for r in &report.nfs {
        let [rx, nf, tx] = r.px_ns_rx_nf_tx;
        let tso = r.px_tso_ns_rx_nf_tx.map_or(String::new(), |[rx, nf, tx]| {
            format!("   with TSO: {rx:>5.1} / {nf:>5.1} / {tx:>5.1}")
        });
        println!(
            "{:<4} software split: {rx:>5.1} / {nf:>5.1} / {tx:>5.1}   {:.3}{tso}",
            r.nf,
            r.px_frames_out as f64 / r.frames_in.max(1) as f64
        );
    }
}
