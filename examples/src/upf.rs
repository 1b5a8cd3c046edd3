//! A 5G UPF data path in the dUPF design (APNet'23), the UPF port of SIGCOMM'26 §7.3.
//!
//! - **Downlink** (N6 → N3): the PDR is found by the UE address (the packet's destination); its
//!   FAR says where the session's gNB is and which TEID it expects; its QER meters the session
//!   against its maximum bit rate (a token bucket). The packet is then encapsulated in GTP-U
//!   (outer IPv4 + UDP 2152 + the G-PDU header with a PDU Session Container carrying the QFI,
//!   TS 29.281 / TS 38.415) toward the gNB. The PX version merges downlink TCP before these
//!   lookups and splits back to the sender's segments before encapsulating, so the tables are
//!   read once per merged packet.
//! - **Uplink** (N3 → N6): the outer headers and the G-PDU header are checked, the PDR is found
//!   by the TEID and the inner source address, FAR and QER apply, and the packet is
//!   decapsulated. The PX version hands the inner packet to pxio's `tx`, which splits it to the
//!   N6 MTU when a gNB sent more than 1500 B over a jumbo N3.
//!
//! Rules per session: four PDRs (downlink and uplink, IPv4 and IPv6), two FARs and one QER;
//! 512 k sessions make the setups of the papers: 2 M PDRs, 1 M FARs, 512 k QERs. Each PDR
//! counts the bytes it matched (what a usage report would carry).

use hashbrown::HashMap;
use pxio::wire::gtpu::{self, GtpuRepr, PduDirection};
use pxio::wire::{ip_proto, Headers, IpRepr, Ipv4Repr};
use pxio::PacketBuf;

use crate::{push_header, Frame, Verdict};

/// Outer Ethernet + IPv4 + UDP + G-PDU header with the PDU Session Container.
pub const ENCAP_LEN: usize = 14 + 20 + 8 + 16;
/// What encapsulation adds to the inner IP packet (its Ethernet header is replaced).
pub const ENCAP_OVERHEAD: u16 = (ENCAP_LEN - 14) as u16;

/// UPF settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpfConfig {
    /// The UPF's N3 address: outer source on downlink, outer destination on uplink.
    pub n3_addr: [u8; 4],
    /// The UPF's MAC address.
    pub upf_mac: [u8; 6],
    /// Next hop toward the gNBs.
    pub n3_next_hop: [u8; 6],
    /// Next hop toward the data network.
    pub n6_next_hop: [u8; 6],
    /// IP MTU of the N3 (core) network. 1600 by default: operators run N3 above 1500 + 44 so
    /// that a full-size UE packet is encapsulated without fragmenting.
    pub n3_mtu: u16,
    /// IP MTU toward the data network.
    pub n6_mtu: u16,
}

impl Default for UpfConfig {
    fn default() -> Self {
        Self {
            n3_addr: [192, 0, 2, 254],
            upf_mac: [2, 0, 0, 0, 0, 0x10],
            n3_next_hop: [2, 0, 0, 0, 0, 0x20],
            n6_next_hop: [2, 0, 0, 0, 0, 0x30],
            n3_mtu: 1600,
            n6_mtu: 1500,
        }
    }
}

/// One PDU session, as the SMF would install it over PFCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// The UE's IPv4 address.
    pub ue_v4: [u8; 4],
    /// The UE's IPv6 address.
    pub ue_v6: [u8; 16],
    /// TEID the UPF allocated (uplink packets carry it).
    pub ul_teid: u32,
    /// TEID the gNB allocated (downlink packets carry it).
    pub dl_teid: u32,
    /// The gNB's N3 address.
    pub gnb: [u8; 4],
    /// Maximum bit rate of the session (both directions), bit/s.
    pub mbr_bps: u64,
    /// The QoS flow identifier (0..=63).
    pub qfi: u8,
}

impl SessionSpec {
    /// The session of the examples' UE `i` (the hosts of [`crate::traffic::flows`]: 10.0.0.0 + i
    /// and 2001:db8:a::i), TEIDs 0x4000_0000 + i (uplink) and 0x2000_0000 + i (downlink).
    pub fn for_host(i: u16, mbr_bps: u64) -> Self {
        let idx = i.to_be_bytes();
        Self {
            ue_v4: [10, 0, idx[0], idx[1]],
            ue_v6: [
                0x20, 0x01, 0x0d, 0xb8, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, idx[0], idx[1],
            ],
            ul_teid: 0x4000_0000 + u32::from(i),
            dl_teid: 0x2000_0000 + u32::from(i),
            gnb: [198, 51, 100, 250],
            mbr_bps,
            qfi: 9,
        }
    }

    /// Session `i` of a synthetic population: UE 100.64.0.0 + i and 2001:db8:ffff::i, TEIDs
    /// i + 1 (uplink) and 0x8000_0000 + i (downlink), one of 200 gNBs.
    pub fn synthetic(i: u32, mbr_bps: u64) -> Self {
        let ue = u32::from_be_bytes([100, 64, 0, 0]) + i;
        let mut ue_v6 = [
            0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        ue_v6[12..].copy_from_slice(&i.to_be_bytes());
        Self {
            ue_v4: ue.to_be_bytes(),
            ue_v6,
            ul_teid: i + 1,
            dl_teid: 0x8000_0000 | i,
            gnb: [198, 51, 100, (i % 200) as u8 + 1],
            mbr_bps,
            qfi: 9,
        }
    }
}

/// Packet detection rule.
#[derive(Clone, Copy, Debug)]
struct Pdr {
    far: u32,
    qer: u32,
}

/// Forwarding action rule.
#[derive(Clone, Copy, Debug)]
enum Far {
    /// Encapsulate toward a gNB.
    Encap { teid: u32, gnb: [u8; 4], qfi: u8 },
    /// Decapsulated packets go to the data network.
    ToN6,
}

/// QoS enforcement rule: a token bucket for the maximum bit rate.
#[derive(Clone, Copy, Debug)]
struct Qer {
    /// Refill, bytes per ns.
    rate: f64,
    /// Bucket depth, bytes (1 ms at the MBR, at least 64 KiB).
    depth: f64,
    tokens: f64,
    last_ns: u64,
}

impl Qer {
    fn new(mbr_bps: u64) -> Self {
        let rate = mbr_bps as f64 / 8e9;
        let depth = (rate * 1e6).max(65_536.0);
        Self {
            rate,
            depth,
            tokens: depth,
            last_ns: 0,
        }
    }

    /// Whether `bytes` may pass at `now`; charges them if so.
    fn admit(&mut self, bytes: u64, now: u64) -> bool {
        let dt = now.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now);
        self.tokens = (self.tokens + dt as f64 * self.rate).min(self.depth);
        if self.tokens >= bytes as f64 {
            self.tokens -= bytes as f64;
            true
        } else {
            false
        }
    }
}

/// Why the UPF refused to install rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpfError {
    /// The tables could not be sized (too many sessions for memory).
    #[error("cannot size the rule tables for {0} sessions")]
    Capacity(usize),
    /// A rule with the same key exists.
    #[error("a PDR with the same key exists (UE address or TEID reused)")]
    Duplicate,
    /// A QFI above 63.
    #[error("QFI {0} is out of range (0..=63)")]
    Qfi(u8),
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpfStats {
    /// Downlink packets that matched a PDR and passed the QER.
    pub downlink: u64,
    /// Uplink packets that matched a PDR and passed the QER.
    pub uplink: u64,
    /// Dropped: no PDR matched.
    pub no_pdr: u64,
    /// Dropped by a QER (over the maximum bit rate).
    pub qer_drops: u64,
    /// Dropped: not a well-formed G-PDU to our N3 address.
    pub bad_gtp: u64,
    /// Dropped: no buffer for an outer header, or headers not writable.
    pub no_buffer: u64,
    /// Dropped: a downlink packet prepared for the NIC's checksum offload. Encapsulated, its
    /// offload request would need the tunnel (outer header) lengths, which this UPF does not
    /// set: run it on a `Pxio` without checksum offload.
    pub offload_unsupported: u64,
}

/// The PDR key of a UE address: the 16-byte form and the family.
type UeKey = ([u8; 16], bool);

/// What the downlink rules decided for a packet: the PDR that matched and the FAR to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlDecision {
    /// The PDR.
    pub pdr: u32,
    /// The FAR (its index, for [`Upf::encap`]).
    pub far: u32,
}

/// The UPF's rule tables and counters.
pub struct Upf {
    cfg: UpfConfig,
    pdr_dl: HashMap<UeKey, u32>,
    pdr_ul: HashMap<(u32, UeKey), u32>,
    pdrs: Vec<Pdr>,
    fars: Vec<Far>,
    qers: Vec<Qer>,
    /// Bytes (L4 payload) each PDR matched.
    pdr_bytes: Vec<u64>,
    stats: UpfStats,
}

fn key4(a: [u8; 4]) -> UeKey {
    (crate::addr16(&a), false)
}

impl Upf {
    /// Empty tables sized for `sessions` sessions.
    pub fn with_capacity(cfg: UpfConfig, sessions: usize) -> Result<Self, UpfError> {
        let mut u = Self {
            cfg,
            pdr_dl: HashMap::new(),
            pdr_ul: HashMap::new(),
            pdrs: Vec::new(),
            fars: Vec::new(),
            qers: Vec::new(),
            pdr_bytes: Vec::new(),
            stats: UpfStats::default(),
        };
        let err = |_| UpfError::Capacity(sessions);
        let n = sessions
            .checked_mul(4)
            .ok_or(UpfError::Capacity(sessions))?;
        u.pdr_dl.try_reserve(sessions * 2).map_err(err)?;
        u.pdr_ul.try_reserve(sessions * 2).map_err(err)?;
        u.pdrs
            .try_reserve(n)
            .map_err(|_| UpfError::Capacity(sessions))?;
        u.pdr_bytes
            .try_reserve(n)
            .map_err(|_| UpfError::Capacity(sessions))?;
        u.fars
            .try_reserve(sessions * 2)
            .map_err(|_| UpfError::Capacity(sessions))?;
        u.qers
            .try_reserve(sessions)
            .map_err(|_| UpfError::Capacity(sessions))?;
        Ok(u)
    }

    /// Whether a packet with headers `hdr` is uplink: GTP-U (UDP port 2152).
    pub fn is_uplink(hdr: &Headers) -> bool {
        hdr.proto == ip_proto::UDP && hdr.key.dport == gtpu::UDP_PORT
    }

    /// Tables holding `n` synthetic sessions ([`SessionSpec::synthetic`]) plus `extra`.
    pub fn synthetic(
        cfg: UpfConfig,
        n: u32,
        mbr_bps: u64,
        extra: &[SessionSpec],
    ) -> Result<Self, UpfError> {
        let mut u = Self::with_capacity(cfg, n as usize + extra.len())?;
        for i in 0..n {
            u.add_session(&SessionSpec::synthetic(i, mbr_bps))?;
        }
        for s in extra {
            u.add_session(s)?;
        }
        Ok(u)
    }

    /// Installs a session: 4 PDRs, 2 FARs, 1 QER. Returns the index of its first PDR.
    pub fn add_session(&mut self, s: &SessionSpec) -> Result<u32, UpfError> {
        if s.qfi > 63 {
            return Err(UpfError::Qfi(s.qfi));
        }
        let dl_keys = [key4(s.ue_v4), (s.ue_v6, true)];
        let ul_keys = [(s.ul_teid, key4(s.ue_v4)), (s.ul_teid, (s.ue_v6, true))];
        if dl_keys.iter().any(|k| self.pdr_dl.contains_key(k))
            || ul_keys.iter().any(|k| self.pdr_ul.contains_key(k))
        {
            return Err(UpfError::Duplicate);
        }
        let first = self.pdrs.len() as u32;
        let qer = self.qers.len() as u32;
        self.qers.push(Qer::new(s.mbr_bps));
        let dl_far = self.fars.len() as u32;
        self.fars.push(Far::Encap {
            teid: s.dl_teid,
            gnb: s.gnb,
            qfi: s.qfi,
        });
        self.fars.push(Far::ToN6);
        for (i, k) in dl_keys.into_iter().enumerate() {
            self.pdr_dl.insert(k, first + i as u32);
            self.pdrs.push(Pdr { far: dl_far, qer });
        }
        for (i, k) in ul_keys.into_iter().enumerate() {
            self.pdr_ul.insert(k, first + 2 + i as u32);
            self.pdrs.push(Pdr {
                far: dl_far + 1,
                qer,
            });
        }
        self.pdr_bytes.resize(self.pdrs.len(), 0);
        Ok(first)
    }

    /// (PDRs, FARs, QERs) installed.
    pub fn rule_counts(&self) -> (usize, usize, usize) {
        (self.pdrs.len(), self.fars.len(), self.qers.len())
    }

    /// The settings.
    pub fn config(&self) -> &UpfConfig {
        &self.cfg
    }

    /// Downlink rules for a packet from the data network with headers `hdr`, arriving at
    /// `now_ns`: PDR by the UE (destination) address, then the QER charges the packet's
    /// payload. `None`: dropped and counted.
    pub fn downlink(&mut self, hdr: &Headers, now_ns: u64) -> Option<DlDecision> {
        let Some(&pdr) = self.pdr_dl.get(&(hdr.key.dst, hdr.key.v6)) else {
            self.stats.no_pdr += 1;
            return None;
        };
        let p = self.pdrs[pdr as usize];
        if !self.qers[p.qer as usize].admit(u64::from(hdr.payload_len), now_ns) {
            self.stats.qer_drops += 1;
            return None;
        }
        self.pdr_bytes[pdr as usize] += u64::from(hdr.payload_len);
        self.stats.downlink += 1;
        Some(DlDecision { pdr, far: p.far })
    }

    /// Encapsulates one downlink packet (its L2 header of `l2_len` bytes is replaced) in
    /// GTP-U per FAR `far`. `None`: dropped and counted (no buffer for the outer header).
    pub fn encap<B: Frame>(
        &mut self,
        mut pkt: B,
        l2_len: u16,
        far: u32,
        pool: &B::Pool,
    ) -> Option<B> {
        let Far::Encap { teid, gnb, qfi } = self.fars[far as usize] else {
            return Some(pkt);
        };
        if pkt.tx_checksums_by_nic() != (false, false) {
            self.stats.offload_unsupported += 1;
            return None;
        }
        let inner = pkt.len().saturating_sub(usize::from(l2_len));
        if !pkt.adj(usize::from(l2_len)) {
            self.stats.no_buffer += 1;
            return None;
        }
        let mut h = [0u8; ENCAP_LEN];
        h[..6].copy_from_slice(&self.cfg.n3_next_hop);
        h[6..12].copy_from_slice(&self.cfg.upf_mac);
        h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        let gtp = GtpuRepr {
            teid,
            qfi: Some((PduDirection::Downlink, qfi)),
        };
        let udp_len = 8 + gtp.buffer_len() + inner;
        let ip = Ipv4Repr {
            protocol: ip_proto::UDP,
            payload_len: udp_len,
            dont_frag: true,
            ..Ipv4Repr::new(self.cfg.n3_addr, gnb)
        };
        // The lengths fit (an inner packet is at most 64 KiB minus headers, checked by emit).
        if IpRepr::V4(ip).emit(&mut h[14..34]).is_err()
            || gtp.emit(&mut h[42..], inner).is_err()
            || udp_len > usize::from(u16::MAX)
        {
            self.stats.no_buffer += 1;
            return None;
        }
        h[34..36].copy_from_slice(&gtpu::UDP_PORT.to_be_bytes());
        h[36..38].copy_from_slice(&gtpu::UDP_PORT.to_be_bytes());
        h[38..40].copy_from_slice(&(udp_len as u16).to_be_bytes());
        // UDP checksum 0: allowed for IPv4 (RFC 768), as GTP-U over IPv4 commonly sends it.
        let out = push_header(pkt, &h, pool);
        if out.is_none() {
            self.stats.no_buffer += 1;
        }
        out
    }

    /// Uplink: checks the G-PDU (outer headers `outer`, as the classifier found them), applies
    /// PDR (TEID + inner source address), QER and FAR, and decapsulates in place (the inner
    /// packet gets an Ethernet header toward N6).
    pub fn uplink<B: PacketBuf>(&mut self, pkt: &mut B, outer: &Headers, now_ns: u64) -> Verdict {
        if outer.proto != ip_proto::UDP
            || outer.key.dport != gtpu::UDP_PORT
            || outer.v6
            || outer.key.dst[..4] != self.cfg.n3_addr
        {
            self.stats.bad_gtp += 1;
            return Verdict::Drop;
        }
        let at = outer.hdr_len();
        let udp_payload = usize::from(outer.payload_len);
        let Ok((gtp, gtp_len)) = GtpuRepr::parse(&pkt.head()[at..], udp_payload) else {
            self.stats.bad_gtp += 1;
            return Verdict::Drop;
        };
        let inner_at = at + gtp_len;
        let head = pkt.head();
        let (v6, src) = match head.get(inner_at).map(|b| b >> 4) {
            Some(4) if head.len() >= inner_at + 20 => {
                (false, crate::addr16(&head[inner_at + 12..inner_at + 16]))
            }
            Some(6) if head.len() >= inner_at + 40 => {
                (true, crate::addr16(&head[inner_at + 8..inner_at + 24]))
            }
            _ => {
                self.stats.bad_gtp += 1;
                return Verdict::Drop;
            }
        };
        let Some(&pdr) = self.pdr_ul.get(&(gtp.teid, (src, v6))) else {
            self.stats.no_pdr += 1;
            return Verdict::Drop;
        };
        let p = self.pdrs[pdr as usize];
        let inner_len = (udp_payload - gtp_len) as u64;
        if !self.qers[p.qer as usize].admit(inner_len, now_ns) {
            self.stats.qer_drops += 1;
            return Verdict::Drop;
        }
        // Decapsulate: keep 14 bytes in front of the inner packet for its new Ethernet header.
        let mut eth = [0u8; 14];
        eth[..6].copy_from_slice(&self.cfg.n6_next_hop);
        eth[6..12].copy_from_slice(&self.cfg.upf_mac);
        eth[12..].copy_from_slice(&if v6 { 0x86ddu16 } else { 0x0800 }.to_be_bytes());
        // Ethernet padding after the outer IP packet is not part of the inner one.
        let frame_len = outer.frame_len();
        if !pkt.truncate(frame_len) || !pkt.adj(inner_at - 14) {
            self.stats.no_buffer += 1;
            return Verdict::Drop;
        }
        let Some(bytes) = pkt.head_mut() else {
            self.stats.no_buffer += 1;
            return Verdict::Drop;
        };
        bytes[..14].copy_from_slice(&eth);
        // A NIC's checksum verdict was on the outer UDP: nothing is known of the inner
        // packet's, so pxio's split must verify it before re-checksumming pieces.
        pkt.set_l4_csum_verdict(None);
        self.pdr_bytes[pdr as usize] += inner_len;
        self.stats.uplink += 1;
        Verdict::Forward
    }

    /// Bytes each PDR matched (downlink: TCP/UDP payload; uplink: inner IP bytes).
    pub fn pdr_bytes(&self) -> &[u64] {
        &self.pdr_bytes
    }

    /// The counters.
    pub fn stats(&self) -> &UpfStats {
        &self.stats
    }
}
