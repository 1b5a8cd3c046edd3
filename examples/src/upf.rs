//! A 5G UPF data path in the dUPF design (APNet'23), the UPF port of SIGCOMM'26 §7.3.
//!
//! - **Rules** as TS 29.244 has them: a session's PDRs each carry a precedence and an SDF
//!   filter (protocol, remote prefix and ports, UE ports); of the PDRs that match a packet, the
//!   one of highest precedence (lowest value) applies, and names the FAR and the QER. The
//!   classifier finds the session by one hash lookup (UE address downlink, TEID uplink) and
//!   walks that session's PDRs in precedence order, so its cost does not grow with the number
//!   of sessions. [`STANDARD_RULES`] is an operator's rule set of 8 PDRs per direction.
//! - **Downlink** (N6 → N3): the session by the UE address (the packet's destination), its
//!   downlink PDR by the filters (remote = source); the PDR's QER meters the QoS flow against
//!   its maximum bit rate (a token bucket) and gives the QFI; its FAR says where the session's
//!   gNB is and which TEID it expects. The packet is then encapsulated in GTP-U (outer IPv4 +
//!   UDP 2152 + the G-PDU header with a PDU Session Container carrying the QFI, TS 29.281 /
//!   TS 38.415) toward the gNB. The PX version merges downlink TCP before these lookups and
//!   splits back to the sender's segments before encapsulating, so the tables are read once
//!   per merged packet.
//! - **Uplink** (N3 → N6): the outer headers and the G-PDU header are checked, the session is
//!   found by the TEID and the inner source must be its UE address, its uplink PDR by the
//!   filters (remote = inner destination), QER and FAR apply, and the packet is decapsulated.
//!   The PX version hands the inner packet to pxio's `tx`, which splits it to the N6 MTU when
//!   a gNB sent more than 1500 B over a jumbo N3.
//!
//! With [`STANDARD_RULES`] a session has 16 PDRs, 2 FARs and 2 QERs: 262,144 sessions make the
//! rule counts of the PacketExpress paper's UPF setup (4 M PDRs, 500 k FARs, 500 k QERs).
//! Each PDR counts the bytes it matched (what a usage report would carry).

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
    /// Maximum bit rate of each of the session's QoS flows (both directions), bit/s.
    pub mbr_bps: u64,
    /// The QoS flow identifier of the session's default flow (0..=63).
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

/// A port range, both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// The first port.
    pub lo: u16,
    /// The last port.
    pub hi: u16,
}

impl PortRange {
    /// Every port.
    pub const ANY: Self = Self::new(0, u16::MAX);

    /// `lo..=hi`.
    pub const fn new(lo: u16, hi: u16) -> Self {
        Self { lo, hi }
    }

    /// One port.
    pub const fn one(port: u16) -> Self {
        Self::new(port, port)
    }

    fn holds(self, port: u16) -> bool {
        self.lo <= port && port <= self.hi
    }
}

/// An address prefix of one family; a length of 0 matches every address of both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// The address (an IPv4 address fills the first 4 bytes).
    pub addr: [u8; 16],
    /// Its length in bits.
    pub len: u8,
    /// IPv6.
    pub v6: bool,
}

impl Prefix {
    /// Any address.
    pub const ANY: Self = Self {
        addr: [0; 16],
        len: 0,
        v6: false,
    };

    /// An IPv4 prefix.
    pub const fn v4(a: [u8; 4], len: u8) -> Self {
        Self {
            addr: [a[0], a[1], a[2], a[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            len,
            v6: false,
        }
    }

    /// An IPv6 prefix.
    pub const fn v6(addr: [u8; 16], len: u8) -> Self {
        Self {
            addr,
            len,
            v6: true,
        }
    }
}

/// A service data flow filter (TS 29.244 §5.2.1: the PDI's SDF filter, a flow description in
/// the IPFilterRule form `permit out <proto> from <remote> <ports> to <UE> <ports>`): the
/// protocol, the remote end's prefix and ports, and the UE's ports. The remote end is the
/// source of a downlink packet and the destination of an uplink one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SdfFilter {
    /// IP protocol; `None`: any.
    pub proto: Option<u8>,
    /// The remote end's address.
    pub remote: Prefix,
    /// The remote end's ports.
    pub remote_ports: PortRange,
    /// The UE's ports.
    pub ue_ports: PortRange,
}

impl SdfFilter {
    /// Matches every packet.
    pub const ANY: Self = Self {
        proto: None,
        remote: Prefix::ANY,
        remote_ports: PortRange::ANY,
        ue_ports: PortRange::ANY,
    };
}

/// A PDR as the SMF installs it: direction, precedence (the lower value wins, TS 29.244
/// §8.2.11), its SDF filter, and which of the session's QERs applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PdrSpec {
    /// Uplink (source interface access) or downlink (core).
    pub uplink: bool,
    /// Precedence: of the PDRs that match, the one with the lowest value applies.
    pub precedence: u32,
    /// The SDF filter.
    pub filter: SdfFilter,
    /// The session's QER: 0 the session's default QoS flow, 1 its prioritised flow.
    pub qer: u8,
}

const fn pdr(uplink: bool, precedence: u32, filter: SdfFilter, qer: u8) -> PdrSpec {
    PdrSpec {
        uplink,
        precedence,
        filter,
        qer,
    }
}

const fn sdf(proto: Option<u8>, remote: Prefix, remote_ports: PortRange) -> SdfFilter {
    SdfFilter {
        proto,
        remote,
        remote_ports,
        ue_ports: PortRange::ANY,
    }
}

/// An operator's PCC rules of one data network, installed in every session: SIP signalling,
/// a video CDN per family and a measurement service on the prioritised QoS flow, DNS, HTTPS and
/// the operator's own services on the default one, and a match-all rule last; each rule once
/// per direction (8 downlink and 8 uplink PDRs). Addresses from the documentation ranges.
pub const STANDARD_RULES: [PdrSpec; 16] = {
    const TCP: Option<u8> = Some(ip_proto::TCP);
    const UDP: Option<u8> = Some(ip_proto::UDP);
    const CDN6: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    const RULES: [(u32, SdfFilter, u8); 8] = [
        (100, sdf(UDP, Prefix::ANY, PortRange::new(5060, 5061)), 1),
        (
            200,
            sdf(TCP, Prefix::v4([192, 0, 2, 0], 25), PortRange::one(443)),
            1,
        ),
        (300, sdf(TCP, Prefix::v6(CDN6, 48), PortRange::one(443)), 1),
        (400, sdf(UDP, Prefix::ANY, PortRange::one(53)), 0),
        (500, sdf(TCP, Prefix::ANY, PortRange::new(5201, 5210)), 1),
        (600, sdf(TCP, Prefix::ANY, PortRange::one(443)), 0),
        (
            700,
            sdf(None, Prefix::v4([10, 0, 0, 0], 8), PortRange::ANY),
            0,
        ),
        (u32::MAX, SdfFilter::ANY, 0),
    ];
    let mut out = [pdr(false, 0, SdfFilter::ANY, 0); 16];
    let mut i = 0;
    while i < 8 {
        let (prec, f, q) = RULES[i];
        out[i] = pdr(false, prec, f, q);
        out[8 + i] = pdr(true, prec, f, q);
        i += 1;
    }
    out
};

/// The QFI of the sessions' prioritised QoS flow ([`STANDARD_RULES`]' QER 1): 5QI 1,
/// conversational voice.
pub const PRIORITY_QFI: u8 = 1;

/// A PDR as the data path reads it: 32 bytes, a session's PDRs side by side in precedence
/// order, so that matching one walks a few adjacent cache lines. Its FAR is its direction's
/// (a session has one per direction) and its QER one of its session's two; its precedence,
/// which only orders the PDRs when they are installed, is kept apart.
#[derive(Clone, Copy, Debug)]
struct Pdr {
    /// The remote prefix, as a big-endian 128-bit number split in two.
    net: [u64; 2],
    remote_ports: PortRange,
    ue_ports: PortRange,
    plen: u8,
    /// 0: any family (a zero-length prefix), else 4 or 6.
    family: u8,
    /// 0: any protocol.
    proto: u8,
    /// The session's QER: 0 or 1.
    qer: u8,
}

/// The 128-bit number of a [`FlowKey`](pxio::wire::FlowKey)-style 16-byte address.
fn addr_bits(a: &[u8; 16]) -> u128 {
    u128::from_be_bytes(*a)
}

impl Pdr {
    fn new(spec: &PdrSpec) -> Self {
        let f = &spec.filter;
        let len = f.remote.len.min(if f.remote.v6 { 128 } else { 32 });
        let net = addr_bits(&f.remote.addr) & mask(len);
        Self {
            net: [(net >> 64) as u64, net as u64],
            plen: len,
            family: match (len, f.remote.v6) {
                (0, _) => 0,
                (_, false) => 4,
                (_, true) => 6,
            },
            proto: f.proto.unwrap_or(0),
            remote_ports: f.remote_ports,
            ue_ports: f.ue_ports,
            qer: spec.qer,
        }
    }

    /// Whether a packet of protocol `proto` between `remote` (port `rport`) and the UE's port
    /// `uport` matches the filter.
    #[inline]
    fn matches(&self, v6: bool, proto: u8, remote: u128, rport: u16, uport: u16) -> bool {
        (self.family == 0 || (self.family == 6) == v6)
            && (self.proto == 0 || self.proto == proto)
            && self.remote_ports.holds(rport)
            && self.ue_ports.holds(uport)
            && (remote ^ ((u128::from(self.net[0]) << 64) | u128::from(self.net[1])))
                & mask(self.plen)
                == 0
    }
}

/// The mask of a `len`-bit prefix.
fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// A session: where its PDRs are (downlink first, then uplink, each in precedence order), its
/// UE addresses (an uplink PDR's PDI names the UE address the inner source must carry), its
/// downlink FAR's tunnel and its two QERs: two cache lines, all a packet reads of its session
/// besides the PDRs it walks.
#[derive(Clone, Copy, Debug)]
#[repr(align(64))]
struct Session {
    first_pdr: u32,
    dl: u16,
    ul: u16,
    /// The downlink FAR: encapsulate with this TEID toward this gNB (the uplink one: to N6).
    dl_teid: u32,
    gnb: [u8; 4],
    ue_v4: [u8; 4],
    ue_v6: [u8; 16],
    qers: [Qer; 2],
}

/// QoS enforcement rule: the QoS flow's QFI and a token bucket for its maximum bit rate.
#[derive(Clone, Copy, Debug)]
struct Qer {
    /// Refill, bytes per ns.
    rate: f64,
    /// Bucket depth, bytes (1 ms at the MBR, at least 64 KiB).
    depth: f64,
    tokens: f64,
    last_ns: u64,
    qfi: u8,
}

impl Qer {
    fn new(mbr_bps: u64, qfi: u8) -> Self {
        let rate = mbr_bps as f64 / 8e9;
        let depth = (rate * 1e6).max(65_536.0);
        Self {
            rate,
            depth,
            tokens: depth,
            last_ns: 0,
            qfi,
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
    /// A session's PDRs name a QER it does not have, or are too many for one direction.
    #[error("a session's PDRs are malformed: {0}")]
    Rules(&'static str),
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

/// What the downlink rules decided for a packet: the PDR that matched, the FAR to apply and
/// the QoS flow it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DlDecision {
    /// The PDR.
    pub pdr: u32,
    /// The FAR (its index, for [`Upf::encap`]).
    pub far: u32,
    /// The QFI the QER gives the packet (carried in the G-PDU's PDU Session Container).
    pub qfi: u8,
}

/// The UPF's rule tables and counters.
///
/// Classification is two-stage, as a UPF with millions of PDRs does it: the session is found
/// by one hash lookup (the UE address on downlink, the TEID on uplink), then its few PDRs
/// are tried in precedence order and the first whose SDF filter matches applies. The cost per
/// packet is one lookup and a walk of one session's PDRs, whatever the number of sessions.
pub struct Upf {
    cfg: UpfConfig,
    /// Sessions by UE IPv4 address, UE IPv6 address and uplink TEID.
    by_v4: Index<u32>,
    by_v6: Index<u128>,
    by_teid: Index<u32>,
    sessions: Vec<Session>,
    pdrs: Vec<Pdr>,
    /// Each PDR's precedence (read when installing and reporting, not per packet).
    precedence: Vec<u32>,
    /// Bytes (L4 payload) each PDR matched.
    pdr_bytes: Vec<u64>,
    stats: UpfStats,
}

impl Upf {
    /// Empty tables sized for `sessions` sessions of [`STANDARD_RULES`].
    pub fn with_capacity(cfg: UpfConfig, sessions: usize) -> Result<Self, UpfError> {
        let mut u = Self {
            cfg,
            by_v4: Index::new(),
            by_v6: Index::new(),
            by_teid: Index::new(),
            sessions: Vec::new(),
            pdrs: Vec::new(),
            precedence: Vec::new(),
            pdr_bytes: Vec::new(),
            stats: UpfStats::default(),
        };
        let err = |_| UpfError::Capacity(sessions);
        let n = sessions
            .checked_mul(STANDARD_RULES.len())
            .ok_or(UpfError::Capacity(sessions))?;
        u.by_v4.reserve(sessions).map_err(err)?;
        u.by_v6.reserve(sessions).map_err(err)?;
        u.by_teid.reserve(sessions).map_err(err)?;
        let cap = |_| UpfError::Capacity(sessions);
        u.sessions.try_reserve_exact(sessions).map_err(cap)?;
        u.pdrs.try_reserve_exact(n).map_err(cap)?;
        u.precedence.try_reserve_exact(n).map_err(cap)?;
        u.pdr_bytes.try_reserve_exact(n).map_err(cap)?;
        Ok(u)
    }

    /// Whether a packet with headers `hdr` is uplink: GTP-U (UDP port 2152).
    pub fn is_uplink(hdr: &Headers) -> bool {
        hdr.proto == ip_proto::UDP && hdr.key.dport == gtpu::UDP_PORT
    }

    /// Tables holding `n` synthetic sessions ([`SessionSpec::synthetic`]) plus `extra`, each
    /// with [`STANDARD_RULES`].
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

    /// Installs a session with [`STANDARD_RULES`]: 16 PDRs, 2 FARs, 2 QERs. Returns the index
    /// of its first PDR.
    pub fn add_session(&mut self, s: &SessionSpec) -> Result<u32, UpfError> {
        self.add_session_with(s, &STANDARD_RULES)
    }

    /// Installs a session with the PDRs `rules` (any order; ties in precedence keep their
    /// order), one FAR per direction, and two QERs at the session's MBR: 0 with the session's
    /// QFI, 1 with [`PRIORITY_QFI`]. Returns the index of its first PDR: its downlink PDRs
    /// follow in precedence order, then its uplink ones.
    pub fn add_session_with(
        &mut self,
        s: &SessionSpec,
        rules: &[PdrSpec],
    ) -> Result<u32, UpfError> {
        if s.qfi > 63 {
            return Err(UpfError::Qfi(s.qfi));
        }
        if rules.iter().any(|r| r.qer > 1) {
            return Err(UpfError::Rules("a PDR names a QER other than 0 or 1"));
        }
        let dl = rules.iter().filter(|r| !r.uplink).count();
        let ul = rules.len() - dl;
        let (Ok(dl16), Ok(ul16)) = (u16::try_from(dl), u16::try_from(ul)) else {
            return Err(UpfError::Rules("more than 65535 PDRs in one direction"));
        };
        let v4 = u32::from_be_bytes(s.ue_v4);
        let v6 = u128::from_be_bytes(s.ue_v6);
        if self.by_v4.get(v4).is_some()
            || self.by_v6.get(v6).is_some()
            || self.by_teid.get(s.ul_teid).is_some()
        {
            return Err(UpfError::Duplicate);
        }
        let session = self.sessions.len() as u32;
        let first = self.pdrs.len() as u32;
        let mut sorted: Vec<&PdrSpec> = rules.iter().collect();
        // Downlink first, then by precedence; the sort is stable.
        sorted.sort_by_key(|r| (r.uplink, r.precedence));
        for r in sorted {
            self.pdrs.push(Pdr::new(r));
            self.precedence.push(r.precedence);
        }
        self.pdr_bytes.resize(self.pdrs.len(), 0);
        self.sessions.push(Session {
            first_pdr: first,
            dl: dl16,
            ul: ul16,
            dl_teid: s.dl_teid,
            gnb: s.gnb,
            ue_v4: s.ue_v4,
            ue_v6: s.ue_v6,
            qers: [
                Qer::new(s.mbr_bps, s.qfi),
                Qer::new(s.mbr_bps, PRIORITY_QFI),
            ],
        });
        self.by_v4
            .insert(v4, session)
            .and_then(|()| self.by_v6.insert(v6, session))
            .and_then(|()| self.by_teid.insert(s.ul_teid, session))
            .map_err(|_| UpfError::Capacity(self.sessions.len()))?;
        Ok(first)
    }

    /// (PDRs, FARs, QERs) installed: two FARs and two QERs a session.
    pub fn rule_counts(&self) -> (usize, usize, usize) {
        let n = self.sessions.len();
        (self.pdrs.len(), 2 * n, 2 * n)
    }

    /// The precedence of PDR `pdr`.
    pub fn precedence(&self, pdr: u32) -> Option<u32> {
        self.precedence.get(pdr as usize).copied()
    }

    /// Bytes of memory the rule tables hold (capacity, hash tables' buckets included).
    pub fn table_bytes(&self) -> usize {
        use std::mem::size_of;
        self.by_v4.bytes()
            + self.by_v6.bytes()
            + self.by_teid.bytes()
            + self.sessions.capacity() * size_of::<Session>()
            + self.pdrs.capacity() * size_of::<Pdr>()
            + self.precedence.capacity() * size_of::<u32>()
            + self.pdr_bytes.capacity() * size_of::<u64>()
    }

    /// The settings.
    pub fn config(&self) -> &UpfConfig {
        &self.cfg
    }

    /// The first of `pdrs` (in precedence order) whose filter matches.
    #[inline]
    fn first_match(
        pdrs: &[Pdr],
        v6: bool,
        proto: u8,
        remote: &[u8; 16],
        rport: u16,
        uport: u16,
    ) -> Option<usize> {
        let remote = addr_bits(remote);
        pdrs.iter()
            .position(|p| p.matches(v6, proto, remote, rport, uport))
    }

    /// The session of a downlink packet (by its destination, the UE address).
    #[inline]
    fn dl_session(&self, hdr: &Headers) -> Option<u32> {
        let k = &hdr.key;
        if k.v6 {
            self.by_v6.get(u128::from_be_bytes(k.dst))
        } else {
            self.by_v4
                .get(u32::from_be_bytes([k.dst[0], k.dst[1], k.dst[2], k.dst[3]]))
        }
    }

    /// Prefetches the index slot [`Upf::dl_session`] will read first.
    #[inline]
    fn prefetch_dl_session(&self, hdr: &Headers) {
        let k = &hdr.key;
        if k.v6 {
            self.by_v6.prefetch(u128::from_be_bytes(k.dst));
        } else {
            self.by_v4
                .prefetch(u32::from_be_bytes([k.dst[0], k.dst[1], k.dst[2], k.dst[3]]));
        }
    }

    /// [`Upf::downlink`] for a burst: `out[i]` is the decision for `hdrs[i]`, taken in order
    /// (a QER charges the packets as they come). The index slots of the whole burst are
    /// prefetched, then its sessions looked up and their records, PDRs and counters prefetched,
    /// so that the burst's table misses overlap instead of each stalling its packet (as
    /// UPF-EPC does with DPDK's bulk hash lookup).
    pub fn downlink_burst(
        &mut self,
        hdrs: &[Headers],
        now_ns: u64,
        out: &mut Vec<Option<DlDecision>>,
    ) {
        const MAX: usize = 64;
        out.clear();
        for chunk in hdrs.chunks(MAX) {
            let mut sessions = [None; MAX];
            for h in chunk {
                self.prefetch_dl_session(h);
            }
            for (s, h) in sessions.iter_mut().zip(chunk) {
                *s = self.dl_session(h);
                if let Some(i) = *s {
                    dpdk::prefetch(&self.sessions[i as usize]);
                }
            }
            for s in sessions[..chunk.len()].iter().flatten() {
                let s = &self.sessions[*s as usize];
                let first = s.first_pdr as usize;
                // The PDRs a packet may walk, up to eight (256 B), and their byte counters.
                let n = usize::from(s.dl).min(8);
                if let Some(p) = self.pdrs.get(first..first + n) {
                    match <&[Pdr; 8]>::try_from(p) {
                        Ok(all) => dpdk::prefetch(all),
                        Err(_) => p.iter().for_each(dpdk::prefetch),
                    }
                }
                if let Some(c) = self.pdr_bytes.get(first..first + n) {
                    c.iter().for_each(dpdk::prefetch);
                }
            }
            for (s, h) in sessions.iter().zip(chunk) {
                out.push(self.downlink_in(*s, h, now_ns));
            }
        }
    }

    /// Downlink rules for a packet from the data network with headers `hdr`, arriving at
    /// `now_ns`: the session by the UE (destination) address, its downlink PDR of highest
    /// precedence whose SDF filter matches (remote = source), then that PDR's QER charges the
    /// packet's payload. `None`: dropped and counted.
    pub fn downlink(&mut self, hdr: &Headers, now_ns: u64) -> Option<DlDecision> {
        let session = self.dl_session(hdr);
        self.downlink_in(session, hdr, now_ns)
    }

    /// [`Upf::downlink`] once the session is known.
    #[inline]
    fn downlink_in(
        &mut self,
        session: Option<u32>,
        hdr: &Headers,
        now_ns: u64,
    ) -> Option<DlDecision> {
        let k = &hdr.key;
        let Some(si) = session else {
            self.stats.no_pdr += 1;
            return None;
        };
        let s = &mut self.sessions[si as usize];
        let first = s.first_pdr as usize;
        let pdrs = &self.pdrs[first..first + usize::from(s.dl)];
        let Some(i) = Self::first_match(pdrs, k.v6, hdr.proto, &k.src, k.sport, k.dport) else {
            self.stats.no_pdr += 1;
            return None;
        };
        let p = pdrs[i];
        let pdr = (first + i) as u32;
        let qer = &mut s.qers[usize::from(p.qer & 1)];
        if !qer.admit(u64::from(hdr.payload_len), now_ns) {
            self.stats.qer_drops += 1;
            return None;
        }
        let qfi = qer.qfi;
        self.pdr_bytes[pdr as usize] += u64::from(hdr.payload_len);
        self.stats.downlink += 1;
        Some(DlDecision {
            pdr,
            far: 2 * si,
            qfi,
        })
    }

    /// Encapsulates one downlink packet (its L2 header of `l2_len` bytes is replaced) in
    /// GTP-U per the decision's FAR, with its QFI. `None`: dropped and counted (no buffer for
    /// the outer header).
    pub fn encap<B: Frame>(
        &mut self,
        mut pkt: B,
        l2_len: u16,
        rule: DlDecision,
        pool: &B::Pool,
    ) -> Option<B> {
        // A session's FARs: 2 i encapsulates toward its gNB, 2 i + 1 sends to N6.
        let Some(s) = self.sessions.get(rule.far as usize / 2) else {
            return Some(pkt);
        };
        if rule.far % 2 == 1 {
            return Some(pkt);
        }
        let (teid, gnb) = (s.dl_teid, s.gnb);
        let qfi = rule.qfi;
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
        let Some(inner) = pkt.head().get(inner_at..).and_then(Inner::parse) else {
            self.stats.bad_gtp += 1;
            return Verdict::Drop;
        };
        let v6 = inner.v6;
        // The session by TEID; its PDRs' PDI names the UE address the inner source must be.
        let session = self
            .by_teid
            .get(gtp.teid)
            .map(|i| &mut self.sessions[i as usize]);
        let Some(s) = session.filter(|s| {
            if v6 {
                inner.src == s.ue_v6
            } else {
                inner.src[..4] == s.ue_v4
            }
        }) else {
            self.stats.no_pdr += 1;
            return Verdict::Drop;
        };
        let first = s.first_pdr as usize + usize::from(s.dl);
        let pdrs = &self.pdrs[first..first + usize::from(s.ul)];
        let Some(i) =
            Self::first_match(pdrs, v6, inner.proto, &inner.dst, inner.dport, inner.sport)
        else {
            self.stats.no_pdr += 1;
            return Verdict::Drop;
        };
        let p = pdrs[i];
        let pdr = first + i;
        let inner_len = (udp_payload - gtp_len) as u64;
        if !s.qers[usize::from(p.qer & 1)].admit(inner_len, now_ns) {
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
        self.pdr_bytes[pdr] += inner_len;
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

/// A session index: open addressing with linear probing over (key, session) slots, at most
/// half full. Unlike a general hash map, the slot a key starts at is known without reading the
/// table, so a burst's slots can be prefetched before any is read. The hash is keyed with a
/// per-table random seed, so that keys cannot be chosen to collide.
struct Index<K> {
    slots: Vec<(K, u32)>,
    len: usize,
    seed: u64,
}

/// An empty slot's session.
const VACANT: u32 = u32::MAX;

impl<K: Copy + Eq + Default + Into<u128>> Index<K> {
    fn new() -> Self {
        use std::hash::BuildHasher;
        Self {
            slots: Vec::new(),
            len: 0,
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
        }
    }

    /// The slot `key` starts at (the table is not empty).
    #[inline]
    fn home(&self, key: K) -> usize {
        let k: u128 = key.into();
        let mut x = (k as u64) ^ self.seed;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= (k >> 64) as u64;
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        (x as usize) & (self.slots.len() - 1)
    }

    /// Room for `n` keys in all without growing.
    fn reserve(&mut self, n: usize) -> Result<(), std::collections::TryReserveError> {
        let want = n
            .saturating_add(self.len)
            .saturating_mul(2)
            .next_power_of_two()
            .max(16);
        if want <= self.slots.len() {
            return Ok(());
        }
        let mut slots = Vec::new();
        slots.try_reserve_exact(want)?;
        slots.resize(want, (K::default(), VACANT));
        let old = std::mem::replace(&mut self.slots, slots);
        self.len = 0;
        for (k, v) in old {
            if v != VACANT {
                self.place(k, v);
            }
        }
        Ok(())
    }

    fn place(&mut self, key: K, value: u32) {
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        while self.slots[i].1 != VACANT {
            i = (i + 1) & mask;
        }
        self.slots[i] = (key, value);
        self.len += 1;
    }

    /// Adds `key` (not present) for session `value`.
    fn insert(&mut self, key: K, value: u32) -> Result<(), std::collections::TryReserveError> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.reserve(self.len.max(8))?;
        }
        self.place(key, value);
        Ok(())
    }

    #[inline]
    fn get(&self, key: K) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        // At most half full: an empty slot ends every probe.
        loop {
            let (k, v) = self.slots[i];
            if v == VACANT {
                return None;
            }
            if k == key {
                return Some(v);
            }
            i = (i + 1) & mask;
        }
    }

    #[inline]
    fn prefetch(&self, key: K) {
        if self.len > 0 {
            dpdk::prefetch(&self.slots[self.home(key)]);
        }
    }

    fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<(K, u32)>()
    }
}

/// What the uplink PDRs read of a decapsulated packet: family, protocol, addresses and ports
/// (0 for a protocol without ports, or an IPv6 packet whose first header is not TCP or UDP).
struct Inner {
    v6: bool,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
}

impl Inner {
    fn parse(b: &[u8]) -> Option<Self> {
        let (v6, proto, src, dst, l4) = match b.first().map(|b| b >> 4) {
            Some(4) if b.len() >= 20 => (
                false,
                b[9],
                crate::addr16(&b[12..16]),
                crate::addr16(&b[16..20]),
                usize::from(b[0] & 0x0f) * 4,
            ),
            Some(6) if b.len() >= 40 => (
                true,
                b[6],
                crate::addr16(&b[8..24]),
                crate::addr16(&b[24..40]),
                40,
            ),
            _ => return None,
        };
        let ported = proto == ip_proto::TCP || proto == ip_proto::UDP;
        let (sport, dport) = match b.get(l4..l4 + 4) {
            Some(p) if ported => (
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            ),
            _ => (0, 0),
        };
        Some(Self {
            v6,
            proto,
            src,
            dst,
            sport,
            dport,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic;
    use pxio::wire::{classify, Class};

    /// Downlink headers of a server (`traffic::VIP_V4` or `SERVER_V6`, source port `port`)
    /// sending to UE `i` (`SessionSpec::for_host`), IPv6 for odd `i`.
    fn dl(i: u16, port: u16, udp: bool) -> Headers {
        let f = traffic::reversed(&traffic::flows(
            usize::from(i) + 1,
            [10, 0],
            traffic::VIP_V4,
            traffic::SERVER_V6,
            port,
        ))[usize::from(i)];
        let frame = f.segment(1, 0x10, &[0; 100]);
        let Class::Tcp(mut h) = classify(&frame, frame.len()) else {
            panic!("a TCP segment");
        };
        if udp {
            // The same addresses and ports as UDP: what the PDRs read of a packet.
            h.proto = ip_proto::UDP;
            h.key.proto = ip_proto::UDP;
        }
        h
    }

    fn upf() -> Upf {
        let ues: Vec<SessionSpec> = (0..4)
            .map(|i| SessionSpec::for_host(i, 1_000_000_000_000))
            .collect();
        Upf::synthetic(UpfConfig::default(), 100, 1_000_000, &ues).unwrap()
    }

    #[test]
    fn the_matching_pdr_of_highest_precedence_applies() {
        let mut u = upf();
        assert_eq!(u.rule_counts(), (104 * 16, 208, 208));
        // (UE, server port, UDP): the precedence expected, and the QFI of its QER.
        let cases = [
            (0, 443, false, 200, PRIORITY_QFI), // IPv4 CDN
            (1, 443, false, 300, PRIORITY_QFI), // IPv6 CDN
            (0, 5060, true, 100, PRIORITY_QFI), // SIP before everything
            (1, 53, true, 400, 9),              // DNS
            (2, 5205, false, 500, PRIORITY_QFI),
            (2, 5211, false, u32::MAX, 9), // just past the port range: match-all
            (3, 8080, false, u32::MAX, 9),
        ];
        for (ue, port, udp, precedence, qfi) in cases {
            let h = dl(ue, port, udp);
            let d = u.downlink(&h, 0).expect("a PDR matches");
            assert_eq!(
                u.precedence(d.pdr),
                Some(precedence),
                "UE {ue} port {port} udp {udp}"
            );
            assert_eq!(d.qfi, qfi, "UE {ue} port {port}");
            // The PDR is the UE's session's (the hosts' sessions follow the 100 synthetic).
            let first = (100 + u32::from(ue)) * 16;
            assert!(
                (first..first + 8).contains(&d.pdr),
                "a downlink PDR of UE {ue}"
            );
        }
        // No session for an address no UE has.
        let mut h = dl(0, 443, false);
        h.key.dst[3] = 200;
        assert_eq!(u.downlink(&h, 0), None);
        assert_eq!(u.stats().no_pdr, 1);
    }

    #[test]
    fn a_burst_decides_as_packet_by_packet() {
        let (mut a, mut b) = (upf(), upf());
        let hdrs: Vec<Headers> = (0..70)
            .map(|k: u16| {
                dl(
                    k % 5,
                    [443, 53, 5201, 8080, 5060][usize::from(k % 4)],
                    k.is_multiple_of(3),
                )
            })
            .collect();
        let mut burst = Vec::new();
        b.downlink_burst(&hdrs, 7, &mut burst);
        let one: Vec<Option<DlDecision>> = hdrs.iter().map(|h| a.downlink(h, 7)).collect();
        assert_eq!(burst, one);
        assert!(one.iter().any(Option::is_none), "UE 4 has no session");
        assert_eq!(a.pdr_bytes(), b.pdr_bytes());
        assert_eq!(a.stats(), b.stats());
    }
}
