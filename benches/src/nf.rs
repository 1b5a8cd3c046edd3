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

use std::collections::HashMap;
use std::sync::Arc;

use dpdk::{Burst, Eal, Mbuf, Mempool};
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
    /// Runs per variant; the fastest counts.
    pub reps: u32,
    /// UPF sessions besides the trace's UEs (each: 4 PDRs, 2 FARs, 1 QER).
    pub upf_sessions: u32,
    /// The TSC frequency.
    pub tsc_hz: u64,
    /// The pxio versions' [`PxioBuilder::align_imtu`] (the trace's IP + TCP headers are
    /// 52 B: TCP timestamps); `None`: the engine's 9000 B iMTU as it is.
    pub align_imtu: Option<u16>,
}

impl NfBenchConfig {
    /// The merge bench's 800-flow scenario, 3 runs, 512 k UPF sessions.
    pub fn new(eal: &Eal) -> Self {
        Self {
            flows: 800,
            gbps_per_flow: 0.25,
            min_packets: 300_000,
            reps: 3,
            upf_sessions: 512 * 1024,
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
    /// The better pxio variant over plain.
    pub speedup: f64,
    /// The better pxio variant over the 9000 B MTU case.
    pub px_of_mtu9000: f64,
    /// Where the `px` variant's time goes, ns per input frame: merging (rx), the NF's own
    /// calls, pxio's transmit side (split, queue).
    pub px_ns_rx_nf_tx: [f64; 3],
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
}

/// The trace's destination: the load balancer's VIP.
const VIP: [u8; 4] = [10, 0, 0, 2];
const VIP_PORT: u16 = 5201;

impl Nfs {
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

/// Fills `rx` with the frames of `slots`, marked checksum-good by the NIC and carrying its RSS
/// hash; for the UPF the frame
/// is turned around (addresses and ports swapped, which leaves every checksum valid) so that
/// the trace's sources are the UEs of downlink traffic.
fn fill(
    trace: &Trace,
    slots: std::ops::Range<usize>,
    pool: &Mempool,
    rx: &mut Burst<64>,
    kind: Kind,
) -> Result<(), BenchError> {
    pool.alloc_bulk(rx, slots.len())?;
    for (m, slot) in rx.as_mut_slice().iter_mut().zip(slots) {
        let room = m.append(FRAME_LEN)?;
        trace.write_frame(slot, room);
        if kind == Kind::Upf {
            swap(room, IP_SRC, IP_DST, 4);
            swap(room, TCP_SRC_PORT, TCP_DST_PORT, 2);
        }
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
    let mut calls = 0u64;
    for burst in trace.bursts() {
        fill(trace, burst.slots.clone(), &pools.rx, &mut rx, kind)?;
        let now = burst.time_ns;
        timer.time(|| {
            for m in rx.drain() {
                calls += 1;
                if let Class::Tcp(h) | Class::Udp(h) = classify(m.data(), m.len()) {
                    nfs.step(kind, m, &h, now, &pools.headers, &mut out);
                }
            }
        });
        out.clear();
    }
    Ok(Run {
        ns: timer.ns(),
        calls,
        rx_ns: 0.0,
        nf_ns: 0.0,
        frames_out: 0,
    })
}

/// The pxio version; with `feed9000`, instead, the merged packets are copied into contiguous
/// buffers untimed and the plain NF runs on them (the 9000 B MTU case).
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
) -> Result<Run, BenchError> {
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
    Ok(Run {
        ns: run.timer.ns(),
        calls: run.calls,
        rx_ns: run.rx_timer.ns(),
        nf_ns: run.nf_timer.ns(),
        frames_out: px.tx_stats().packets_out,
    })
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
    /// untimed, and the plain NF runs on those.
    repack: Option<Repack>,
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

    /// The NF on what pxio released, and pxio's TX; or, with `feed9000`, the plain NF on
    /// contiguous copies (`last`: the run's end, when the repacker gives up what it holds).
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
            ..
        } = self;
        let kind = *kind;
        if let Some(repack) = repack {
            // Untimed: full 9000 B packets, as a 9000 B link would deliver them.
            let mut frames = Vec::new();
            for RxPacket { pkt, .. } in merged.drain(..) {
                repack.push(&pkt.to_vec(), &mut frames);
            }
            if last {
                repack.flush(&mut frames);
            }
            let mut big = Vec::with_capacity(frames.len());
            for f in frames {
                let mut m = pools.big.alloc()?;
                m.extend_from_slice(&f)?;
                big.push(m);
            }
            timer.time(|| {
                for m in big.drain(..) {
                    *calls += 1;
                    if let Class::Tcp(h) | Class::Udp(h) = classify(m.data(), m.len()) {
                        nfs.step(kind, m, &h, now, &pools.headers, sink);
                    }
                }
            });
            sink.clear();
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
pub fn run_nf(eal: &Eal, cfg: &NfBenchConfig) -> Result<Vec<NfRow>, BenchError> {
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
    let upf = Upf::synthetic(UpfConfig::default(), cfg.upf_sessions, 1_000_000_000, &ues)
        .map_err(|e| BenchError::Config(e.to_string()))?;
    println!(
        "trace: {} flows x {} Gb/s, {} frames of {} B; UPF rules (PDRs, FARs, QERs) = {:?}",
        cfg.flows,
        cfg.gbps_per_flow,
        trace.len(),
        FRAME_LEN,
        upf.rule_counts()
    );
    let mut nfs = Nfs {
        upf,
        nat: Nat::new(NatConfig::default()),
        lb: Lb::new(LbConfig::with_backends(VIP, [0; 16], VIP_PORT, 16)),
    };
    let gbps = |r: &Run| wire_bytes * 8.0 / r.ns;
    let mut rows = Vec::new();
    for kind in [Kind::Upf, Kind::Nat, Kind::Lb] {
        let best = |f: &mut dyn FnMut() -> Result<Run, BenchError>| -> Result<Run, BenchError> {
            let mut best: Option<Run> = None;
            for _ in 0..cfg.reps.max(1) {
                let r = f()?;
                if best.as_ref().is_none_or(|b| r.ns < b.ns) {
                    best = Some(r);
                }
            }
            best.ok_or_else(|| BenchError::Config("no run".into()))
        };
        let plain = best(&mut || run_plain(&trace, kind, &mut nfs, &pools, cfg.tsc_hz))?;
        let px = best(&mut || {
            run_px(
                &trace,
                kind,
                &mut nfs,
                &pools,
                cfg.tsc_hz,
                false,
                false,
                cfg.align_imtu,
            )
        })?;
        let tso = if kind == Kind::Upf {
            None
        } else {
            Some(best(&mut || {
                run_px(
                    &trace,
                    kind,
                    &mut nfs,
                    &pools,
                    cfg.tsc_hz,
                    true,
                    false,
                    cfg.align_imtu,
                )
            })?)
        };
        let big = best(&mut || {
            run_px(
                &trace, kind, &mut nfs, &pools, cfg.tsc_hz, false, true, None,
            )
        })?;
        let px_best = gbps(&px).max(tso.as_ref().map_or(0.0, gbps));
        rows.push(NfRow {
            nf: kind.name().into(),
            plain_calls: plain.calls,
            px_calls: px.calls,
            mtu9000_calls: big.calls,
            frames_in: trace.len() as u64,
            px_frames_out: px.frames_out,
            plain_gbps: gbps(&plain),
            px_gbps: gbps(&px),
            px_tso_gbps: tso.as_ref().map(gbps),
            mtu9000_gbps: gbps(&big),
            speedup: px_best / gbps(&plain),
            px_of_mtu9000: px_best / gbps(&big),
            px_ns_rx_nf_tx: {
                let n = trace.len() as f64;
                let (rx, nf) = (px.rx_ns / n, px.nf_ns / n);
                [rx, nf, (px.ns / n - rx - nf).max(0.0)]
            },
        });
    }
    Ok(rows)
}

/// Prints the table, and where the `px` variant's time goes.
pub fn print_nf_table(rows: &[NfRow]) {
    println!(
        "{:<5} {:>11} {:>9} {:>11} {:>11} {:>9} {:>10} {:>12} {:>8} {:>10}",
        "nf",
        "plain calls",
        "px calls",
        "plain Gb/s",
        "px Gb/s",
        "px+TSO",
        "9000 Gb/s",
        "9000 calls",
        "speedup",
        "px/9000"
    );
    for r in rows {
        println!(
            "{:<5} {:>11} {:>9} {:>11.1} {:>11.1} {:>9} {:>10.1} {:>12} {:>7.2}x {:>9.0}%",
            r.nf,
            r.plain_calls,
            r.px_calls,
            r.plain_gbps,
            r.px_gbps,
            r.px_tso_gbps.map_or("-".into(), |g| format!("{g:.1}")),
            r.mtu9000_gbps,
            r.mtu9000_calls,
            r.speedup,
            100.0 * r.px_of_mtu9000
        );
    }
    println!(
        "px, ns per input frame: merge (rx_meta, polls) / NF calls / transmit (split, queue); frames out per frame in"
    );
    for r in rows {
        let [rx, nf, tx] = r.px_ns_rx_nf_tx;
        println!(
            "{:<5} {rx:>8.1} / {nf:>6.1} / {tx:>6.1}   {:.3}",
            r.nf,
            r.px_frames_out as f64 / r.frames_in.max(1) as f64
        );
    }
}
