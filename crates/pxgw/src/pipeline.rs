//! The gateway's per-packet logic, independent of ports so it runs on any [`PacketBuf`]
//! (SIGCOMM'26 §3, DESIGN.md's data flow):
//!
//! - **inbound** (outside → inside): SYN/SYN-ACK have their MSS raised and the peer's MSS kept
//!   as the flow's PMTU hint; TCP of a flow whose handshake the gateway saw is merged to the
//!   iMTU; UDP is packed into caravans (except excluded ports); everything else passes
//!   untouched.
//! - **outbound** (inside → outside): SYN/SYN-ACK have their MSS clamped to the eMTU; TCP larger
//!   than the flow's PMTU is split; caravans are unpacked; other packets larger than the eMTU are
//!   dropped and counted; everything else passes untouched.

use std::collections::HashMap;

use pxio::caravan::{self, CaravanBuilder, CaravanConfig, CaravanError};
use pxio::merge::{DelayConfig, MergeConfig, Merger};
use pxio::split::{split_tcp, SplitOffloads};
use pxio::wire::{self, Class, FlowKey, Headers};
use pxio::PacketBuf;

use crate::config::{Config, PmtuPolicy};
use crate::conn::{self, ConnTable};
use crate::mss;
use crate::pmtud::PathMtu;
use crate::stats::Report;

/// Open caravans at once, per worker.
const MAX_OPEN_CARAVANS: usize = 1024;
/// Connections remembered, per worker.
const MAX_CONNECTIONS: usize = 65536;

/// The per-worker processing state.
pub struct Pipeline<B: PacketBuf> {
    cfg: Settings,
    merger: Merger<B>,
    conns: ConnTable,
    caravans: HashMap<FlowKey, (CaravanBuilder<B>, u64)>,
    expired: Vec<FlowKey>,
    pool: B::Pool,
    report: Report,
    pmtu: PathMtu,
    /// Frames the gateway itself sends outside (F-PMTUD probes and reports).
    replies: Vec<Vec<u8>>,
}

/// What the pipeline needs of the configuration, resolved once.
#[derive(Clone, Debug)]
struct Settings {
    emtu: u16,
    imtu: u16,
    merge: bool,
    mss_rewrite: bool,
    caravan: Option<CaravanConfig>,
    caravan_timeout_ns: u64,
    exclude: Vec<u16>,
    policy: PmtuPolicy,
    fallback: PmtuPolicy,
    conservative: u16,
    offloads: SplitOffloads,
}

impl<B: PacketBuf> Pipeline<B> {
    /// A pipeline for `cfg`, taking new header buffers from `pool` (and a second, cloned handle
    /// for the merge engine).
    pub fn new(
        cfg: &Config,
        pool: B::Pool,
        merge_pool: B::Pool,
        offloads: SplitOffloads,
    ) -> anyhow::Result<Self> {
        let merge_cfg = MergeConfig {
            imtu: cfg.imtu(),
            flow_capacity: cfg.merge.flows,
            checksum_offload: false,
            delay: DelayConfig {
                enabled: cfg.merge.delay,
                rate_threshold_bps: cfg.merge.rate_threshold_gbps * 1e9,
                yield_bypass: cfg.merge.yield_bypass,
                max_window_ns: cfg.merge.max_window_us * 1000,
                ..DelayConfig::default()
            },
            max_segs: cfg.merge.max_segs,
            ..MergeConfig::default()
        };
        Ok(Self {
            cfg: Settings {
                emtu: cfg.emtu(),
                imtu: cfg.imtu(),
                merge: cfg.merge.enabled,
                mss_rewrite: cfg.mss.rewrite,
                caravan: cfg.caravan.enabled.then_some(CaravanConfig {
                    dscp: cfg.caravan.dscp,
                    imtu: cfg.imtu(),
                    max_datagrams: cfg.caravan.max_datagrams,
                }),
                caravan_timeout_ns: cfg.caravan.timeout_us * 1000,
                exclude: cfg.caravan.exclude_ports.clone(),
                policy: cfg.pmtu.policy,
                fallback: cfg.pmtu.fallback,
                conservative: cfg.pmtu.conservative_mtu,
                offloads,
            },
            merger: Merger::new(merge_cfg, merge_pool)?,
            conns: ConnTable::new(MAX_CONNECTIONS),
            caravans: HashMap::with_capacity(MAX_OPEN_CARAVANS),
            expired: Vec::with_capacity(MAX_OPEN_CARAVANS),
            pool,
            report: Report::default(),
            pmtu: PathMtu::new(cfg.emtu(), cfg.pmtu.port, cfg.pmtu.probe, cfg.pmtu.respond)?,
            replies: Vec::with_capacity(64),
        })
    }

    /// The counters so far (merge and delay figures included).
    pub fn report(&self) -> Report {
        let mut r = self.report.clone();
        let s = self.merger.stats();
        r.merge.payload_in = s.payload_in;
        r.merge.payload_full = s.payload_full;
        r.merge.merges = s.merges;
        r.merge.cuts = s.cuts;
        r.merge.held_items = s.held_items;
        r.delay_ns = Some(s.delay_ns.clone());
        r.merge.bad_checksum = s.bad_checksum;
        r.connections = self.conns.len() as u64;
        r.pmtud = self.pmtu.summary();
        r.finish();
        r
    }

    /// Counts a frame sent toward the inside (`inbound`) or the outside.
    pub fn count_sent(&mut self, inbound: bool, bytes: usize) {
        let d = if inbound {
            &mut self.report.inbound
        } else {
            &mut self.report.outbound
        };
        d.packets_out += 1;
        d.bytes_out += bytes as u64;
        d.max_frame_out = d.max_frame_out.max(bytes as u64);
    }

    /// Counts frames the TX queue would not take (freed unsent).
    pub fn count_tx_dropped(&mut self, n: u64) {
        self.report.drops.tx_dropped += n;
    }

    /// When the next merge, caravan or probe deadline falls due, if any.
    pub fn next_deadline(&self) -> Option<u64> {
        let caravan = self
            .caravans
            .values()
            .map(|(_, t)| t + self.cfg.caravan_timeout_ns)
            .min();
        [
            self.merger.next_deadline(),
            caravan,
            self.pmtu.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Moves the frames the gateway itself sends outside (F-PMTUD probes and reports) to `out`,
    /// as buffers from the header pool (chained, since a probe is eMTU-sized).
    pub fn take_replies(&mut self, out: &mut Vec<B>) {
        // Small enough for any header pool (DPDK keeps 128 B of a 256 B data room as headroom).
        const CHUNK: usize = 96;
        self.report.gateway_frames.sent += self.replies.len() as u64;
        for frame in self.replies.drain(..) {
            let mut parts = frame.chunks(CHUNK).map(|c| B::alloc_with(&self.pool, c));
            let Some(Some(mut head)) = parts.next() else {
                self.report.drops.pool_exhausted += 1;
                continue;
            };
            let mut ok = true;
            for part in parts {
                match part.map(|p| head.chain(p)) {
                    Some(Ok(())) => {}
                    _ => ok = false,
                }
            }
            if ok {
                out.push(head);
            } else {
                self.report.drops.pool_exhausted += 1;
            }
        }
    }

    /// Whether anything is held.
    pub fn holding(&self) -> bool {
        self.merger.stats().held_items > 0 || !self.caravans.is_empty()
    }

    // ---- inbound ----

    /// Handles one frame from outside; what goes inside is appended to `out`.
    pub fn inbound(&mut self, mut pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.inbound.packets_in += 1;
        self.report.inbound.bytes_in += pkt.len() as u64;
        match wire::classify(pkt.head(), pkt.len()) {
            Class::Tcp(h) => {
                if mss::is_syn(pkt.head(), &h) {
                    self.inbound_syn(&mut pkt, &h, now);
                }
                let known = self.conns.touch(&conn::inbound_key(&h.key), now).is_some();
                if self.cfg.merge && known {
                    self.merger.rx(pkt, now, out);
                } else {
                    out.push(pkt);
                }
            }
            Class::Udp(h) => {
                // Only F-PMTUD traffic (probes for the inside, reports for the gateway's own
                // probes) is shown to the path-MTU state; the rest never pays for it.
                let port = self.pmtu.port();
                if (h.key.sport == port || h.key.dport == port)
                    && pkt.num_segs() == 1
                    && self.pmtu.on_inbound(pkt.head(), now, &mut self.replies)
                {
                    // A report for one of the gateway's own probes.
                    self.report.gateway_frames.received += 1;
                    return;
                }
                self.inbound_udp(pkt, &h, now, out)
            }
            Class::Fragment => {
                // A fragment may belong to a probe: the responder tracks fragments by
                // (source, destination, IP id). It is forwarded either way.
                if pkt.num_segs() == 1 {
                    self.pmtu.on_inbound(pkt.head(), now, &mut self.replies);
                }
                self.inbound_unmergeable(pkt, now, out)
            }
            Class::OtherIp | Class::Malformed(_) => self.inbound_unmergeable(pkt, now, out),
            Class::NonIp => out.push(pkt),
        }
    }

    /// A packet that is never merged but may belong to a TCP flow with held segments (IPv6
    /// extension headers, a first fragment, a malformed TCP header): the merger passes it on
    /// after that flow's held data, so the flow's order is kept.
    fn inbound_unmergeable(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        if self.cfg.merge {
            self.merger.rx(pkt, now, out);
        } else {
            out.push(pkt);
        }
    }

    fn inbound_syn(&mut self, pkt: &mut B, h: &Headers, now: u64) {
        self.report.mss.handshakes += 1;
        let target = self
            .cfg
            .mss_rewrite
            .then(|| self.cfg.imtu.saturating_sub(mss::overhead(h.key.v6)));
        let Some(frame) = pkt.head_mut() else {
            return;
        };
        let hs = mss::rewrite(frame, h, target, true);
        if hs.mss.is_none() {
            self.report.mss.without_mss += 1;
        }
        if hs.rewritten.is_some() {
            self.report.mss.rewritten += 1;
        }
        let pmtu = match self.cfg.policy {
            PmtuPolicy::Mss => match hs.mss {
                Some(_) => mss::pmtu_from_mss(hs.mss, h.key.v6, self.cfg.emtu),
                None => self.fallback_pmtu(),
            },
            _ => self.fallback_pmtu_for(self.cfg.policy),
        };
        if !self.conns.upsert(conn::inbound_key(&h.key), pmtu, now) {
            self.report.mss.table_full += 1;
        }
    }

    fn fallback_pmtu(&self) -> u16 {
        self.fallback_pmtu_for(self.cfg.fallback)
    }

    fn fallback_pmtu_for(&self, policy: PmtuPolicy) -> u16 {
        match policy {
            PmtuPolicy::Conservative => self.cfg.conservative,
            _ => self.cfg.emtu,
        }
    }

    fn inbound_udp(&mut self, mut pkt: B, h: &Headers, now: u64, out: &mut Vec<B>) {
        let Some(ccfg) = self.cfg.caravan else {
            return out.push(pkt);
        };
        let excluded =
            self.cfg.exclude.contains(&h.key.sport) || self.cfg.exclude.contains(&h.key.dport);
        if excluded {
            // An outside datagram must never reach the inside wearing the caravan mark.
            if dscp(pkt.head(), h) == ccfg.dscp {
                remark(&mut pkt, h);
            }
            return out.push(pkt);
        }
        let pkt = match self.caravans.get_mut(&h.key) {
            Some((builder, _)) => match builder.push(pkt) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 1;
                    return;
                }
                Err((CaravanError::Full, pkt)) => {
                    self.close_caravan(&h.key, out);
                    pkt
                }
                Err((_, pkt)) => return self.pass_udp(pkt, h, ccfg.dscp, out),
            },
            None => pkt,
        };
        if self.caravans.len() >= MAX_OPEN_CARAVANS {
            return self.pass_udp(pkt, h, ccfg.dscp, out);
        }
        match CaravanBuilder::start(pkt, ccfg, &self.pool) {
            Ok(b) => {
                self.report.caravan.datagrams_packed += 1;
                self.caravans.insert(h.key, (b, now));
            }
            Err((CaravanError::PoolExhausted, pkt)) => {
                self.report.drops.pool_exhausted += 1;
                drop(pkt);
            }
            Err((_, pkt)) => self.pass_udp(pkt, h, ccfg.dscp, out),
        }
    }

    fn pass_udp(&mut self, mut pkt: B, h: &Headers, mark: u8, out: &mut Vec<B>) {
        if dscp(pkt.head(), h) == mark {
            remark(&mut pkt, h);
        }
        out.push(pkt);
    }

    fn close_caravan(&mut self, key: &FlowKey, out: &mut Vec<B>) {
        if let Some((b, _)) = self.caravans.remove(key) {
            self.report.caravan.caravans_built += 1;
            out.push(b.finish());
        }
    }

    /// After an inbound RX burst: settles the merge engine, releases expired windows and
    /// caravans.
    pub fn end_of_burst(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.settle(now, out);
        self.poll(now, out);
    }

    /// Releases merge items and caravans whose time has come.
    pub fn poll(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.poll(now, out);
        self.pmtu.poll(now, &mut self.replies);
        if self.caravans.is_empty() {
            return;
        }
        let timeout = self.cfg.caravan_timeout_ns;
        self.expired.clear();
        self.expired.extend(
            self.caravans
                .iter()
                .filter(|(_, (_, t))| t + timeout <= now)
                .map(|(k, _)| *k),
        );
        for i in 0..self.expired.len() {
            let key = self.expired[i];
            self.close_caravan(&key, out);
        }
    }

    /// Emits everything held (shutdown).
    pub fn flush(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger.flush_all(now, out);
        let keys: Vec<FlowKey> = self.caravans.keys().copied().collect();
        for k in keys {
            self.close_caravan(&k, out);
        }
    }

    /// Forgets connections idle for `idle_ns`.
    pub fn expire_connections(&mut self, now: u64, idle_ns: u64) -> usize {
        self.conns.expire(now.saturating_sub(idle_ns))
    }

    // ---- outbound ----

    /// Handles one frame from inside; what goes outside is appended to `out`.
    pub fn outbound(&mut self, mut pkt: B, now: u64, out: &mut Vec<B>) {
        self.report.outbound.packets_in += 1;
        self.report.outbound.bytes_in += pkt.len() as u64;
        match wire::classify(pkt.head(), pkt.len()) {
            Class::Tcp(h) => {
                let key = conn::reverse(&h.key);
                if mss::is_syn(pkt.head(), &h) {
                    self.pmtu
                        .on_outbound_syn(pkt.head(), &h, now, &mut self.replies);
                    self.report.mss.handshakes += 1;
                    let pmtu = self
                        .conns
                        .touch(&key, now)
                        .map_or(self.cfg.emtu, |c| c.pmtu);
                    let target = self
                        .cfg
                        .mss_rewrite
                        .then(|| pmtu.saturating_sub(mss::overhead(h.key.v6)));
                    if let Some(frame) = pkt.head_mut() {
                        let hs = mss::rewrite(frame, &h, target, false);
                        self.report.mss.rewritten += u64::from(hs.rewritten.is_some());
                        self.report.mss.without_mss += u64::from(hs.mss.is_none());
                    }
                }
                let hint = match self.conns.touch(&key, now) {
                    Some(c) => c.pmtu,
                    None => self.fallback_pmtu_for(match self.cfg.policy {
                        PmtuPolicy::Mss => self.cfg.fallback,
                        p => p,
                    }),
                };
                // A path MTU F-PMTUD discovered caps the hint (the cache answers the eMTU for
                // every other destination, without touching its table).
                let dst = if h.key.v6 {
                    std::net::IpAddr::from(h.key.dst)
                } else {
                    std::net::IpAddr::from([h.key.dst[0], h.key.dst[1], h.key.dst[2], h.key.dst[3]])
                };
                let pmtu = hint.min(self.pmtu.pmtu(dst, now));
                match split_tcp(pkt, pmtu, self.cfg.offloads, &self.pool, out) {
                    Ok(n) if n > 1 => {
                        self.report.split.packets += 1;
                        self.report.split.segments += n as u64;
                    }
                    Ok(_) => {}
                    Err((_, pkt)) => {
                        self.report.drops.split_failed += 1;
                        drop(pkt);
                    }
                }
            }
            Class::Udp(h) => {
                if let Some(ccfg) = self.cfg.caravan {
                    if dscp(pkt.head(), &h) == ccfg.dscp {
                        return self.outbound_caravan(pkt, &ccfg, out);
                    }
                }
                self.outbound_fit(pkt, out);
            }
            Class::Malformed(_) | Class::Fragment | Class::OtherIp | Class::NonIp => {
                self.outbound_fit(pkt, out)
            }
        }
    }

    fn outbound_caravan(&mut self, pkt: B, ccfg: &CaravanConfig, out: &mut Vec<B>) {
        let start = out.len();
        match caravan::unpack(pkt, ccfg, &self.pool, out) {
            Ok(n) => {
                self.report.caravan.caravans_unpacked += 1;
                self.report.caravan.datagrams_unpacked += n as u64;
                // Datagrams too large for the outside are dropped one by one, counted.
                let mut i = start;
                while i < out.len() {
                    if out[i].len() > self.max_frame() {
                        drop(out.remove(i));
                        self.report.drops.oversize += 1;
                    } else {
                        i += 1;
                    }
                }
            }
            Err((CaravanError::PoolExhausted, pkt)) => {
                self.report.drops.pool_exhausted += 1;
                drop(pkt);
            }
            Err((_, pkt)) => {
                self.report.drops.caravan_malformed += 1;
                drop(pkt);
            }
        }
    }

    fn max_frame(&self) -> usize {
        // Ethernet header and one VLAN tag.
        usize::from(self.cfg.emtu) + 18
    }

    fn outbound_fit(&mut self, pkt: B, out: &mut Vec<B>) {
        if pkt.len() > self.max_frame() && ip_len_of(&pkt) > usize::from(self.cfg.emtu) {
            self.report.drops.oversize += 1;
            return drop(pkt);
        }
        out.push(pkt);
    }
}

/// The IP length of a frame, or its whole length when it is not IP.
fn ip_len_of<B: PacketBuf>(pkt: &B) -> usize {
    match wire::classify(pkt.head(), pkt.len()) {
        Class::Tcp(h) | Class::Udp(h) => usize::from(h.ip_len),
        _ => pkt.len().saturating_sub(14),
    }
}

fn dscp(frame: &[u8], h: &Headers) -> u8 {
    let l3 = &frame[h.l3_offset()..];
    if h.key.v6 {
        wire::Ipv6Packet::new_unchecked(l3).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(l3).dscp()
    }
}

/// Sets DSCP 0 (fixing the IPv4 header checksum).
fn remark<B: PacketBuf>(pkt: &mut B, h: &Headers) {
    let Some(frame) = pkt.head_mut() else {
        return;
    };
    let l3 = &mut frame[h.l3_offset()..h.l4_offset()];
    if h.key.v6 {
        wire::Ipv6Packet::new_unchecked(l3).set_dscp(0);
    } else {
        let mut ip = wire::Ipv4Packet::new_unchecked(l3);
        ip.set_dscp(0);
        ip.fill_checksum();
    }
}
