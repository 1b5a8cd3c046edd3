//! The gateway bench's ledger: every output of a gateway traced back to the input it came from,
//! and every input accounted for, whatever the traffic.
//!
//! - **Inbound TCP data** (the trace's flows) goes to the merge bench's [`Ledger`]: yield,
//!   packets per iMTU, delay, and every byte exactly once (the iMTU enforced on the gateways, a
//!   TSO request counted as the pieces the NIC cuts).
//! - **Outbound TCP data**: each output's byte range in its flow's stream is recorded and its
//!   bytes compared with the stream; at the end every stream must be covered exactly once. An
//!   output longer than the eMTU is a fault unless it asks the NIC to cut it to the eMTU (TSO).
//! - **UDP**: a caravan is walked (its header validated as a receiver does) and each datagram
//!   in it compared, UDP header and payload, with the one that came in; a datagram passed alone
//!   is compared whole. Caravan yield: the share of datagram bytes that left in caravans that
//!   could not take one more of the flow's datagrams.
//! - **ACKs, ICMP, ARP** pass unchanged: each must come out once, byte for byte.
//! - **Checksums**: a packet that asks nothing of the NIC must carry right IPv4, TCP, UDP and ICMP
//!   checksums; one that asks for checksum offload or TSO must say where its headers are (the
//!   lengths a NIC reads), as they are, and carry the seeds DPDK's contract asks for (the IPv4
//!   header checksum zeroed, the pseudo-header sum in the TCP or UDP field).
//!
//! Frames the gateway sends of its own (F-PMTUD probes, ICMP errors) are counted, not faulted.
//! Anything else is a fault; a run with a fault fails.

use std::collections::{BTreeMap, HashMap};

use dpdk::{tx_flags, Mbuf};
use pxio::caravan::format as caravan_format;
use pxio::checksum::Sum;

use super::frames::{
    be16, be32, parse_ip, pseudo, tuple_of, Frame, IpInfo, Tuple, TupleKind, Workload, EMTU,
    ETH_LEN,
};
use crate::ledger::{Ledger, Outcome};

/// The F-PMTUD port (pxgw's probes and reports).
const FPMTUD_PORT: u16 = fpmtud::DEFAULT_PORT;
/// The DSCP that marks caravans (pxgw's default).
const CARAVAN_DSCP: u8 = pxio::caravan::DEFAULT_DSCP;
/// Most datagrams per caravan (pxgw's default).
const CARAVAN_MAX: u32 = pxio::caravan::DEFAULT_MAX_DATAGRAMS as u32;
/// What a caravan adds to its datagrams: the outer UDP header and the caravan header.
const CARAVAN_OVERHEAD: usize = pxio::caravan::OVERHEAD;

/// What a side's outputs came to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TallyOutcome {
    /// The trace ledger's outcome (inbound TCP data), when the scenario has a trace and the
    /// ledger found no fault.
    pub tcp: Option<Outcome>,
    /// Share of UDP datagram bytes that left in full caravans, when the scenario has UDP.
    pub udp_yield: Option<f64>,
    /// Frames carrying UDP out per iMTU's worth of datagram bytes in (1.0 is ideal).
    pub udp_packets_per_imtu: Option<f64>,
    /// Packets handed to the ports (TX descriptors' packets).
    pub tx_packets: u64,
    /// Frames on the wire: a TSO request counts as the pieces the NIC cuts.
    pub wire_frames: u64,
    /// Frames the gateway sent of its own (F-PMTUD, ICMP errors).
    pub gateway_frames: u64,
    /// Caravans among the outputs.
    pub caravans: u64,
    /// What went wrong (empty: nothing), "what: count" each.
    pub faults: Vec<String>,
}

/// Key of a frame that must pass unchanged.
fn pass_key(kind: u64, a: u32, b: u32) -> u64 {
    kind << 56 | u64::from(a) << 32 | u64::from(b)
}

/// Records one side's outputs for one run.
pub struct Tally<'w> {
    w: &'w Workload,
    ledger: Option<Ledger<'w>>,
    tuples: HashMap<Tuple, (TupleKind, u32)>,
    /// Frames that pass unchanged (and UDP datagrams), by key: their index in the workload.
    pass: HashMap<u64, u32>,
    /// How often each workload frame came out (pass-through frames and datagrams).
    seen: Vec<u8>,
    /// Outbound data: (flow, stream offset, bytes).
    ranges: Vec<(u32, u64, u32)>,
    faults: BTreeMap<&'static str, u64>,
    verify: bool,
    enforce: bool,
    flat: Vec<u8>,
    expect: Vec<u8>,
    out: TallyOutcome,
    udp_bound: u64,
    udp_frames: u64,
    ack_base: Vec<u32>,
    trace_salts: Option<Vec<u8>>,
}

impl<'w> Tally<'w> {
    /// A tally of `w`'s outputs; `enforce`: outputs must fit the iMTU inside and the eMTU
    /// outside (a gateway; not the floor, which moves frames as they came); `verify`: compare
    /// payloads and check checksums (not timed, but slower).
    pub fn new(w: &'w Workload, side: &str, enforce: bool, verify: bool) -> Self {
        // The trace's payloads are compared here, at memory speed, when their pattern is known;
        // else by the trace's ledger.
        let salts = if verify { w.trace_salts() } else { None };
        let ledger = w.trace.as_ref().map(|t| {
            let l = Ledger::new(t, side, w.spec.imtu, verify && salts.is_none());
            if enforce {
                l.enforcing_imtu()
            } else {
                l
            }
        });
        let mut pass = HashMap::new();
        for (i, f) in w.frames.iter().enumerate() {
            let key = match *f {
                Frame::AckOut { flow, acked } => pass_key(1, flow, acked),
                Frame::AckIn { flow, acked } => pass_key(2, flow, acked),
                Frame::Udp { flow, seq } => pass_key(3, flow, seq),
                Frame::Icmp { outside, n } => pass_key(4, u32::from(outside), u32::from(n)),
                Frame::Arp { outside, n } => pass_key(5, u32::from(outside), n),
                Frame::Trace(_) | Frame::OutData { .. } => continue,
            };
            pass.insert(key, i as u32);
        }
        let tuples: HashMap<Tuple, (TupleKind, u32)> = w
            .tuples()
            .into_iter()
            .map(|(t, k, f)| (t, (k, f)))
            .collect();
        let ack_base = w.ack_bases();
        Self {
            w,
            ledger,
            tuples,
            pass,
            seen: vec![0; w.frames.len()],
            ranges: Vec::new(),
            faults: BTreeMap::new(),
            verify,
            enforce,
            flat: Vec::with_capacity(65536),
            expect: Vec::with_capacity(9216),
            out: TallyOutcome::default(),
            udp_bound: 0,
            udp_frames: 0,
            ack_base,
            trace_salts: salts,
        }
    }

    fn fault(&mut self, what: &'static str) {
        *self.faults.entry(what).or_default() += 1;
    }

    /// Records every packet of `out` as emitted at `emit_ns`; they stay in `out`.
    pub fn record_all(&mut self, out: &[Mbuf], emit_ns: u64) {
        for m in out {
            self.record(m, emit_ns);
        }
    }

    /// Records one output packet emitted at `emit_ns`.
    pub fn record(&mut self, m: &Mbuf, emit_ns: u64) {
        self.out.tx_packets += 1;
        let mut flat = std::mem::take(&mut self.flat);
        flat.clear();
        for s in m.segments() {
            flat.extend_from_slice(s);
        }
        self.record_frame(m, &flat, emit_ns);
        self.flat = flat;
    }

    fn record_frame(&mut self, m: &Mbuf, f: &[u8], emit_ns: u64) {
        if f.len() >= ETH_LEN && be16(f, 12) == 0x0806 {
            self.out.wire_frames += 1;
            if f.len() >= ETH_LEN + 14 {
                let key = pass_key(5, u32::from(f[ETH_LEN + 9]), be32(f, ETH_LEN + 10));
                return self.pass_through(key, f);
            }
            return self.fault("malformed");
        }
        let Some(ip) = parse_ip(f) else {
            self.out.wire_frames += 1;
            return self.fault("malformed");
        };
        if ETH_LEN + ip.ip_len != f.len() {
            self.fault("bad_ip_length");
        }
        let flags = m.ol_flags();
        let asks = flags
            & (tx_flags::IP_CKSUM | tx_flags::TCP_CKSUM | tx_flags::UDP_CKSUM | tx_flags::TCP_SEG)
            != 0;
        if asks {
            self.check_tx_request(m, flags, f, &ip);
        } else if self.verify && !checksums_ok(f, &ip) {
            self.fault("bad_checksum");
        }
        let tso = m.tso_request();
        match ip.proto {
            6 => self.tcp(f, &ip, tso, emit_ns),
            17 => self.udp(f, &ip),
            1 | 58 => self.icmp(f, &ip),
            _ => {
                self.out.wire_frames += 1;
                self.fault("malformed");
            }
        }
    }

    /// A TX offload request must name the headers where they are, and find the checksum fields
    /// as DPDK's contract wants them (what `rte_net_intel_cksum_prepare` leaves): the IPv4
    /// header checksum zeroed when the NIC is to fill it, the TCP or UDP checksum seeded with
    /// the pseudo-header sum (without the length under TSO, whose pieces each have their own).
    /// An Intel-style NIC adds to that seed: any other value leaves every piece's checksum
    /// wrong, where a ConnectX, which ignores it, would hide the fault.
    fn check_tx_request(&mut self, m: &Mbuf, flags: u64, f: &[u8], ip: &IpInfo) {
        self.check_tx_lengths(m, f, ip);
        if flags & tx_flags::IP_CKSUM != 0 && !ip.v6 && be16(f, ETH_LEN + 10) != 0 {
            self.fault("tx_ip_checksum_not_zeroed");
        }
        let field = match ip.proto {
            6 if flags & (tx_flags::TCP_CKSUM | tx_flags::TCP_SEG) != 0 => ip.l4 + 16,
            17 if flags & tx_flags::UDP_CKSUM != 0 => ip.l4 + 6,
            _ => return,
        };
        if field + 2 > f.len() {
            return self.fault("malformed");
        }
        let l4_len = if flags & tx_flags::TCP_SEG != 0 {
            0
        } else {
            (ETH_LEN + ip.ip_len).saturating_sub(ip.l4)
        };
        let seed = pseudo(ip.v6, f, ip.proto, l4_len).fold();
        // 0 and 0xffff are the same ones' complement sum.
        if u32::from(be16(f, field)) % 0xffff != u32::from(seed) % 0xffff {
            self.fault("tx_l4_seed");
        }
    }

    /// A TX offload request must name the headers where they are.
    fn check_tx_lengths(&mut self, m: &Mbuf, f: &[u8], ip: &IpInfo) {
        let l4_len = match ip.proto {
            6 if f.len() > ip.l4 + 12 => usize::from(f[ip.l4 + 12] >> 4) * 4,
            17 => 8,
            _ => 0,
        };
        let (l2, l3, l4) = m.header_lens();
        if (usize::from(l2), usize::from(l3), usize::from(l4)) != (ETH_LEN, ip.l4 - ETH_LEN, l4_len)
        {
            self.fault("tx_offload_lengths");
        }
    }

    fn tcp(&mut self, f: &[u8], ip: &IpInfo, tso: Option<u16>, emit_ns: u64) {
        let hl = usize::from(f.get(ip.l4 + 12).copied().unwrap_or(0) >> 4) * 4;
        let payload = f.len().saturating_sub(ip.l4 + hl);
        self.out.wire_frames += match tso {
            Some(s) if s > 0 => payload.div_ceil(usize::from(s)).max(1) as u64,
            _ => 1,
        };
        let Some(tuple) = tuple_of(f) else {
            return self.fault("malformed");
        };
        match self.tuples.get(&tuple).copied() {
            Some((TupleKind::OutData, flow)) => self.out_data(f, ip, hl, flow, tso),
            Some((kind @ (TupleKind::AckOut | TupleKind::AckIn), flow)) => {
                let base = match kind {
                    TupleKind::AckOut => self.w.out_isn(flow),
                    _ => self.ack_base.get(flow as usize).copied().unwrap_or(0),
                };
                let acked = be32(f, ip.l4 + 8).wrapping_sub(base);
                let k = if kind == TupleKind::AckOut { 1 } else { 2 };
                self.pass_through(pass_key(k, flow, acked), f);
            }
            Some((TupleKind::Udp, _)) => self.fault("malformed"),
            None => {
                self.trace_payload(f, ip, hl);
                match self.ledger.as_mut() {
                    Some(l) => l.record_tso(|v| v(f), emit_ns, tso),
                    None => self.fault("malformed"),
                }
            }
        }
    }

    /// Compares an inbound trace output's payload with its flow's stream (the ledger accounts
    /// for its bytes, and faults an output that names no flow of the trace).
    fn trace_payload(&mut self, f: &[u8], ip: &IpInfo, hl: usize) {
        let (Some(salts), Some(trace)) = (self.trace_salts.as_ref(), self.w.trace.as_ref()) else {
            return;
        };
        let src = be32(f, if ip.v6 { ETH_LEN + 20 } else { ETH_LEN + 12 });
        let Some(flow) = trace.flow_of_source(src) else {
            return;
        };
        let Some(offset) = trace.stream_offset(flow, be32(f, ip.l4 + 4)) else {
            return;
        };
        let payload = &f[(ip.l4 + hl).min(f.len())..];
        let salt = salts[flow as usize];
        if !self.w.pattern_matches(payload, offset as u64, salt) {
            self.fault("corrupted");
        }
    }

    fn out_data(&mut self, f: &[u8], ip: &IpInfo, hl: usize, flow: u32, tso: Option<u16>) {
        let payload = &f[(ip.l4 + hl).min(f.len())..];
        let offset = u64::from(be32(f, ip.l4 + 4).wrapping_sub(self.w.out_isn(flow)));
        let total = self
            .w
            .out_stream_bytes
            .get(flow as usize)
            .copied()
            .unwrap_or(0);
        if payload.is_empty() || offset + payload.len() as u64 > total {
            return self.fault("malformed");
        }
        if self.verify && !self.w.out_payload_matches(flow, offset as usize, payload) {
            self.fault("corrupted");
        }
        if self.enforce && ip.ip_len > EMTU {
            let mss = EMTU - (ip.l4 - ETH_LEN) - hl;
            if !tso.is_some_and(|s| s > 0 && usize::from(s) <= mss) {
                self.fault("oversize");
            }
        }
        self.ranges.push((flow, offset, payload.len() as u32));
    }

    fn udp(&mut self, f: &[u8], ip: &IpInfo) {
        self.out.wire_frames += 1;
        let Some(tuple) = tuple_of(f) else {
            return self.fault("malformed");
        };
        let flow = match self.tuples.get(&tuple) {
            Some(&(TupleKind::Udp, flow)) => flow,
            _ if tuple.sport == FPMTUD_PORT || tuple.dport == FPMTUD_PORT => {
                self.out.gateway_frames += 1;
                return;
            }
            _ => return self.fault("malformed"),
        };
        self.udp_frames += 1;
        let end = (ETH_LEN + ip.ip_len).min(f.len());
        let payload = &f[(ip.l4 + 8).min(end)..end];
        if ip.dscp != CARAVAN_DSCP {
            if payload.len() < 8 {
                return self.fault("malformed");
            }
            let key = pass_key(3, be32(payload, 0), be32(payload, 4));
            if be32(payload, 0) != flow {
                return self.fault("malformed");
            }
            return self.pass_through(key, f);
        }
        let count = match caravan_format::validate(payload, tuple.sport, tuple.dport, CARAVAN_MAX) {
            Ok(n) => n,
            Err(_) => return self.fault("bad_caravan"),
        };
        self.out.caravans += 1;
        let mut at = caravan_format::HEADER_LEN;
        let mut bytes = 0u64;
        for _ in 0..count {
            let len = usize::from(be16(payload, at + 4));
            let inner = &payload[at..at + len];
            at += len;
            bytes += len as u64;
            if len < 16 || be32(inner, 8) != flow {
                self.fault("malformed");
                continue;
            }
            let key = pass_key(3, flow, be32(inner, 12));
            let Some(&i) = self.pass.get(&key) else {
                self.fault("malformed");
                continue;
            };
            self.seen[i as usize] = self.seen[i as usize].saturating_add(1);
            let w = self.w;
            let n = w.write(&w.frames[i as usize], self.expect_buf());
            let l4 = ip.l4;
            if self.expect[l4..n] != *inner {
                self.fault("corrupted");
            }
        }
        let dgram = 8 + self.w.udp_payload();
        if ip.ip_len + dgram > self.w.spec.imtu || count >= CARAVAN_MAX {
            self.udp_bound += bytes;
        }
    }

    fn icmp(&mut self, f: &[u8], ip: &IpInfo) {
        self.out.wire_frames += 1;
        let (ty, l4) = (f.get(ip.l4).copied().unwrap_or(255), ip.l4);
        let echo =
            matches!(ty, 0 | 8 | 128 | 129) && f.len() >= l4 + 8 && be16(f, l4 + 4) == 0x1234;
        if !echo {
            // An error the gateway sends of its own (fragmentation needed, Packet Too Big).
            self.out.gateway_frames += 1;
            return;
        }
        let outside = matches!(ty, 8 | 128);
        self.pass_through(
            pass_key(4, u32::from(outside), u32::from(be16(f, l4 + 6))),
            f,
        );
    }

    fn expect_buf(&mut self) -> &mut [u8] {
        self.expect.resize(self.w.max_frame().max(1514), 0);
        &mut self.expect
    }

    /// A frame that must come out once, exactly as it went in.
    fn pass_through(&mut self, key: u64, f: &[u8]) {
        let Some(&i) = self.pass.get(&key) else {
            return self.fault("malformed");
        };
        self.seen[i as usize] = self.seen[i as usize].saturating_add(1);
        let w = self.w;
        let n = w.write(&w.frames[i as usize], self.expect_buf());
        if self.expect[..n] != *f {
            self.fault("corrupted");
        }
    }

    /// The outcome: faults found, and what the outputs came to.
    pub fn finish(mut self) -> TallyOutcome {
        if let Some(l) = self.ledger.take() {
            match l.finish() {
                Ok(o) => self.out.tcp = Some(o),
                Err(e) => self.out.faults.push(format!("inbound TCP: {:?}", e.faults)),
            }
        }
        for &i in self.pass.values() {
            match self.seen[i as usize] {
                0 => *self.faults.entry("missing").or_default() += 1,
                1 => {}
                _ => *self.faults.entry("duplicated").or_default() += 1,
            }
        }
        // Every outbound stream covered exactly once.
        self.ranges.sort_unstable();
        let mut covered = vec![0u64; self.w.out_stream_bytes.len()];
        for &(flow, start, len) in &self.ranges {
            let c = &mut covered[flow as usize];
            if start < *c {
                *self.faults.entry("duplicated").or_default() += 1;
            } else if start > *c {
                *self.faults.entry("missing").or_default() += 1;
            }
            *c = (*c).max(start + u64::from(len));
        }
        for (f, &total) in self.w.out_stream_bytes.iter().enumerate() {
            if covered[f] < total {
                *self.faults.entry("missing").or_default() += 1;
            }
        }
        let datagrams = self.w.census()[3];
        if datagrams > 0 {
            let dgram = (8 + self.w.udp_payload()) as f64;
            let bytes = datagrams as f64 * dgram;
            let cap = (self.w.spec.imtu - super::frames::l3_len(self.w.spec.v6) - CARAVAN_OVERHEAD)
                as f64;
            self.out.udp_yield = Some(self.udp_bound as f64 / bytes);
            self.out.udp_packets_per_imtu = Some(self.udp_frames as f64 * cap / bytes);
        }
        for (what, n) in &self.faults {
            self.out.faults.push(format!("{what}: {n}"));
        }
        self.out
    }
}

/// Whether an output's IPv4 header checksum and its TCP, UDP or ICMP checksum are right.
fn checksums_ok(f: &[u8], ip: &IpInfo) -> bool {
    if !ip.v6 && Sum::of(&f[ETH_LEN..ip.l4]).fold() != 0xffff {
        return false;
    }
    let end = (ETH_LEN + ip.ip_len).min(f.len());
    let l4 = &f[ip.l4.min(end)..end];
    match ip.proto {
        // An IPv4 UDP checksum of 0 means none.
        17 if !ip.v6 && l4.len() >= 8 && be16(l4, 6) == 0 => true,
        6 | 17 | 58 => pseudo(ip.v6, f, ip.proto, l4.len()).add(Sum::of(l4)).fold() == 0xffff,
        1 => Sum::of(l4).fold() == 0xffff,
        _ => true,
    }
}
