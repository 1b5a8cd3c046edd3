//! Fragment tracking: from raw IP packets to completed probe sightings (SIGCOMM'26 §5.2).
//!
//! The responder must know the size of every fragment a probe arrived in. The endpoint daemon
//! captures them (see [`crate::endpoint`]); pxgw sees them on its port. Both feed each IP
//! packet to a [`FragmentTracker`], which groups fragments by (source, destination, protocol,
//! IP id), reads the probe header from the first fragment, and once the datagram is complete
//! yields a [`ProbeRecord`] with every fragment's IP total length in offset order.
//!
//! Only UDP to the probe port is kept. Memory is bounded: at most
//! [`TrackerConfig::max_datagrams`] datagrams in progress, each of at most
//! [`TrackerConfig::max_fragments`] fragments, dropped after [`TrackerConfig::timeout`].

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use pxio::wire::{ip_proto, ipv4, ipv6, udp, Ipv4Packet, Ipv6Packet};

use crate::wire;
use crate::Nanos;

/// Field offsets of the IPv6 fragment header (RFC 8200 §4.5) right behind the fixed header
/// (whose offsets are `pxio::wire::ipv6::field`'s). Fragment headers behind other extension
/// headers are not followed.
pub mod frag_header {
    /// A byte range of a field.
    pub type Field = core::ops::Range<usize>;
    /// The fragment header's next header (the upper-layer protocol).
    pub const NEXT_HEADER: usize = 40;
    /// Fragment offset (8-byte units, high 13 bits) and M flag (low bit).
    pub const OFF_M: Field = 42..44;
    /// Shift of the fragment offset inside [`OFF_M`].
    pub const OFFSET_SHIFT: u32 = 3;
    /// The M (more fragments) flag inside [`OFF_M`].
    pub const FLAG_M: u16 = 1;
    /// Identification.
    pub const IDENT: Field = 44..48;
    /// Fixed header plus fragment header.
    pub const HEADERS_LEN: usize = 48;
}

/// Length of the UDP header.
pub const UDP_HEADER_LEN: usize = udp::field::HEADER_LEN;
/// Fragment offsets count in units of this many bytes (RFC 791, RFC 8200), so every fragment
/// but the last carries a multiple of 8 payload bytes.
pub const FRAGMENT_UNIT: usize = ipv4::field::FRAG_OFFSET_UNIT as usize;

/// Why an IP packet could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum IpError {
    /// Shorter than its header or than its length field.
    #[error("IP packet truncated: {needed} bytes needed, {got} present")]
    Truncated {
        /// Bytes needed.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// Neither IPv4 nor IPv6.
    #[error("IP version {0} is neither 4 nor 6")]
    BadVersion(u8),
    /// IPv4 header length below 20 bytes, or a total length shorter than the header.
    #[error("inconsistent IPv4 header or total length")]
    BadLength,
    /// The IPv4 header checksum does not verify: the end host would drop this packet too.
    #[error("bad IPv4 header checksum")]
    BadChecksum,
}

/// One IP packet as the tracker sees it: a whole datagram or one fragment of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpFragment<'a> {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// IP identification (IPv4: 16 bits; IPv6 fragment header: 32 bits; 0 if unfragmented).
    pub ident: u32,
    /// Offset of this fragment's payload in the datagram, in bytes.
    pub offset: usize,
    /// More fragments follow.
    pub more: bool,
    /// Whether this is a fragment at all (offset > 0, or more fragments follow).
    pub is_fragment: bool,
    /// The packet's size on the wire, IP header included: the size a report lists.
    pub wire_len: u16,
    /// This fragment's share of the datagram payload (after IP and fragment headers).
    pub payload: &'a [u8],
}

fn be16(bytes: &[u8], f: core::ops::Range<usize>) -> u16 {
    let mut b = [0; 2];
    b.copy_from_slice(&bytes[f]);
    u16::from_be_bytes(b)
}

/// Reads an IP packet (IPv4, or IPv6 with at most a fragment header) starting at its IP
/// header. Bytes past the IP length (link padding) are ignored.
pub fn parse_ip(bytes: &[u8]) -> Result<IpFragment<'_>, IpError> {
    let Some(&first) = bytes.first() else {
        return Err(IpError::Truncated { needed: 1, got: 0 });
    };
    match first >> ipv4::field::VERSION_SHIFT {
        ipv4::VERSION => parse_ipv4(bytes),
        ipv6::VERSION => parse_ipv6(bytes),
        v => Err(IpError::BadVersion(v)),
    }
}

fn parse_ipv4(bytes: &[u8]) -> Result<IpFragment<'_>, IpError> {
    if bytes.len() < ipv4::field::HEADER_LEN {
        return Err(IpError::Truncated {
            needed: ipv4::field::HEADER_LEN,
            got: bytes.len(),
        });
    }
    let ip = Ipv4Packet::new_unchecked(bytes);
    let ihl = ip.header_len();
    let total = ip.total_len();
    if ihl < ipv4::field::HEADER_LEN || usize::from(total) < ihl {
        return Err(IpError::BadLength);
    }
    if bytes.len() < usize::from(total) {
        return Err(IpError::Truncated {
            needed: usize::from(total),
            got: bytes.len(),
        });
    }
    if !ip.verify_checksum() {
        return Err(IpError::BadChecksum);
    }
    let offset = usize::from(ip.frag_offset());
    let more = ip.more_frags();
    Ok(IpFragment {
        src: IpAddr::V4(Ipv4Addr::from(ip.src_addr())),
        dst: IpAddr::V4(Ipv4Addr::from(ip.dst_addr())),
        protocol: ip.protocol(),
        ident: u32::from(ip.ident()),
        offset,
        more,
        is_fragment: more || offset > 0,
        wire_len: total,
        payload: &bytes[ihl..usize::from(total)],
    })
}

fn parse_ipv6(bytes: &[u8]) -> Result<IpFragment<'_>, IpError> {
    if bytes.len() < ipv6::field::HEADER_LEN {
        return Err(IpError::Truncated {
            needed: ipv6::field::HEADER_LEN,
            got: bytes.len(),
        });
    }
    let ip = Ipv6Packet::new_unchecked(bytes);
    let end = ipv6::field::HEADER_LEN + usize::from(ip.payload_len());
    if bytes.len() < end {
        return Err(IpError::Truncated {
            needed: end,
            got: bytes.len(),
        });
    }
    let wire_len = u16::try_from(end).map_err(|_| IpError::BadLength)?;
    let (src, dst) = (
        IpAddr::V6(Ipv6Addr::from(ip.src_addr())),
        IpAddr::V6(Ipv6Addr::from(ip.dst_addr())),
    );
    let next = ip.next_header();
    if next != ip_proto::IPV6_FRAG {
        return Ok(IpFragment {
            src,
            dst,
            protocol: next,
            ident: 0,
            offset: 0,
            more: false,
            is_fragment: false,
            wire_len,
            payload: &bytes[ipv6::field::HEADER_LEN..end],
        });
    }
    if end < frag_header::HEADERS_LEN {
        return Err(IpError::Truncated {
            needed: frag_header::HEADERS_LEN,
            got: end,
        });
    }
    let off_m = be16(bytes, frag_header::OFF_M);
    let offset = usize::from(off_m >> frag_header::OFFSET_SHIFT) * FRAGMENT_UNIT;
    let more = off_m & frag_header::FLAG_M != 0;
    let mut ident = [0; 4];
    ident.copy_from_slice(&bytes[frag_header::IDENT]);
    Ok(IpFragment {
        src,
        dst,
        protocol: bytes[frag_header::NEXT_HEADER],
        ident: u32::from_be_bytes(ident),
        offset,
        more,
        // An atomic fragment (offset 0, no more) is a whole datagram behind a fragment header.
        is_fragment: more || offset > 0,
        wire_len,
        payload: &bytes[frag_header::HEADERS_LEN..end],
    })
}

/// A probe datagram whose fragments have all been seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeRecord {
    /// The prober's address.
    pub src: IpAddr,
    /// The address the probe was sent to.
    pub dst: IpAddr,
    /// The prober's UDP port: reports go back there.
    pub src_port: u16,
    /// The probe port.
    pub dst_port: u16,
    /// The IP id the fragments shared (0 for an unfragmented IPv6 probe).
    pub ident: u32,
    /// Each fragment's IP total length, in offset order; one entry if the probe arrived whole.
    pub fragments: Vec<u16>,
    /// The datagram's UDP payload length (the UDP length field minus 8).
    pub payload_len: usize,
    /// The first bytes of the UDP payload (at most the F-PMTUD header), from the first fragment.
    pub head: Vec<u8>,
}

impl ProbeRecord {
    /// The largest fragment: the PMTU estimate the prober will derive.
    pub fn largest_fragment(&self) -> Option<u16> {
        self.fragments.iter().copied().max()
    }
}

/// Limits of a [`FragmentTracker`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackerConfig {
    /// The probe port: UDP datagrams to other ports are ignored.
    pub port: u16,
    /// How long after its first fragment a datagram may take to complete.
    pub timeout: Duration,
    /// Datagrams in progress at once; more are refused until some complete or expire.
    pub max_datagrams: usize,
    /// Fragments per datagram. 256 covers a 9000 B probe over a 68 B MTU path.
    pub max_fragments: usize,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            port: wire::DEFAULT_PORT,
            timeout: Duration::from_secs(2),
            max_datagrams: 1024,
            max_fragments: 256,
        }
    }
}

/// Why a packet did not advance a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TrackError {
    /// Not a readable IP packet.
    #[error("malformed IP packet: {0}")]
    Malformed(#[from] IpError),
    /// Not UDP.
    #[error("not UDP (protocol {0})")]
    NotUdp(u8),
    /// UDP to another port than the probe port.
    #[error("UDP to port {0}, not the probe port")]
    OtherPort(u16),
    /// A first fragment too short for the UDP header, or a UDP length that disagrees with
    /// the fragments.
    #[error("inconsistent UDP header in the probe's fragments")]
    BadUdp,
    /// Fragments that overlap or run past the datagram's end.
    #[error("overlapping or inconsistent fragments")]
    Overlap,
    /// [`TrackerConfig::max_datagrams`] datagrams are already in progress.
    #[error("too many datagrams in progress")]
    TableFull,
    /// The datagram has more than [`TrackerConfig::max_fragments`] fragments.
    #[error("too many fragments in one datagram")]
    TooManyFragments,
}

/// Counters of a [`FragmentTracker`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrackerStats {
    /// Probe datagrams completed.
    pub completed: u64,
    /// Fragments kept while their datagram was in progress.
    pub fragments: u64,
    /// Packets refused (each [`TrackError`]).
    pub refused: u64,
    /// Datagrams dropped incomplete after the timeout.
    pub expired: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    src: IpAddr,
    dst: IpAddr,
    ident: u32,
}

#[derive(Debug, Clone, Copy)]
struct Piece {
    offset: usize,
    len: usize,
    wire_len: u16,
    more: bool,
}

#[derive(Debug)]
struct Datagram {
    first_seen: Nanos,
    /// Sorted by offset, no overlaps.
    pieces: Vec<Piece>,
    /// From the first fragment: ports, UDP length, payload head.
    head: Option<(u16, u16, usize, Vec<u8>)>,
    /// Not a probe (other port, or broken): absorb its fragments until it expires.
    ignored: Option<TrackError>,
}

/// Groups IP fragments of probes into [`ProbeRecord`]s (SIGCOMM'26 §5.2: "D-PXGW receives
/// the fragmented packets and reports all fragment sizes"). Sans-IO: feed it packets and a
/// time; call [`FragmentTracker::expire`] now and then.
#[derive(Debug)]
pub struct FragmentTracker {
    cfg: TrackerConfig,
    timeout: Nanos,
    datagrams: HashMap<Key, Datagram>,
    stats: TrackerStats,
}

impl FragmentTracker {
    /// A tracker with these limits.
    pub fn new(cfg: TrackerConfig) -> Self {
        let timeout = u64::try_from(cfg.timeout.as_nanos()).unwrap_or(u64::MAX);
        Self {
            cfg,
            timeout,
            datagrams: HashMap::new(),
            stats: TrackerStats::default(),
        }
    }

    /// The limits.
    pub fn config(&self) -> &TrackerConfig {
        &self.cfg
    }

    /// Counters so far.
    pub fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// Datagrams in progress.
    pub fn in_progress(&self) -> usize {
        self.datagrams.len()
    }

    /// Feeds one IP packet (from its IP header). Returns the probe it completes, if any;
    /// `Ok(None)` when it is kept for a datagram still in progress.
    pub fn on_packet(&mut self, ip: &[u8], now: Nanos) -> Result<Option<ProbeRecord>, TrackError> {
        let result = self.track(ip, now);
        match &result {
            Ok(Some(_)) => self.stats.completed += 1,
            Ok(None) => self.stats.fragments += 1,
            Err(_) => self.stats.refused += 1,
        }
        result
    }

    fn track(&mut self, ip: &[u8], now: Nanos) -> Result<Option<ProbeRecord>, TrackError> {
        let frag = parse_ip(ip)?;
        if frag.protocol != ip_proto::UDP {
            return Err(TrackError::NotUdp(frag.protocol));
        }
        if !frag.is_fragment {
            return self.whole(&frag).map(Some);
        }
        let key = Key {
            src: frag.src,
            dst: frag.dst,
            ident: frag.ident,
        };
        if !self.datagrams.contains_key(&key) {
            if self.datagrams.len() >= self.cfg.max_datagrams {
                self.expire(now);
            }
            if self.datagrams.len() >= self.cfg.max_datagrams {
                return Err(TrackError::TableFull);
            }
            self.datagrams.insert(
                key,
                Datagram {
                    first_seen: now,
                    pieces: Vec::new(),
                    head: None,
                    ignored: None,
                },
            );
        }
        let max_fragments = self.cfg.max_fragments;
        let port = self.cfg.port;
        let Some(dgram) = self.datagrams.get_mut(&key) else {
            return Err(TrackError::TableFull);
        };
        if let Some(e) = dgram.ignored {
            return Err(e);
        }
        if let Err(e) = add_piece(dgram, &frag, port, max_fragments) {
            // Keep the entry so the datagram's other fragments are absorbed, but free its pieces.
            dgram.ignored = Some(e);
            dgram.pieces = Vec::new();
            dgram.head = None;
            return Err(e);
        }
        match complete(dgram) {
            Ok(false) => Ok(None),
            Ok(true) => {
                let Some(d) = self.datagrams.remove(&key) else {
                    return Ok(None);
                };
                let Some((src_port, dst_port, payload_len, head)) = d.head else {
                    return Ok(None);
                };
                Ok(Some(ProbeRecord {
                    src: key.src,
                    dst: key.dst,
                    src_port,
                    dst_port,
                    ident: key.ident,
                    fragments: d.pieces.iter().map(|p| p.wire_len).collect(),
                    payload_len,
                    head,
                }))
            }
            Err(e) => {
                dgram.ignored = Some(e);
                dgram.pieces = Vec::new();
                dgram.head = None;
                Err(e)
            }
        }
    }

    fn whole(&self, frag: &IpFragment<'_>) -> Result<ProbeRecord, TrackError> {
        let (src_port, dst_port, udp_len) = udp_header(frag.payload)?;
        if dst_port != self.cfg.port {
            return Err(TrackError::OtherPort(dst_port));
        }
        if usize::from(udp_len) < UDP_HEADER_LEN || usize::from(udp_len) > frag.payload.len() {
            return Err(TrackError::BadUdp);
        }
        Ok(ProbeRecord {
            src: frag.src,
            dst: frag.dst,
            src_port,
            dst_port,
            ident: frag.ident,
            fragments: vec![frag.wire_len],
            payload_len: usize::from(udp_len) - UDP_HEADER_LEN,
            head: head_of(&frag.payload[UDP_HEADER_LEN..]),
        })
    }

    /// Drops datagrams whose first fragment is older than the timeout; returns how many.
    pub fn expire(&mut self, now: Nanos) -> usize {
        let timeout = self.timeout;
        let before = self.datagrams.len();
        self.datagrams
            .retain(|_, d| now.saturating_sub(d.first_seen) <= timeout);
        let expired = before - self.datagrams.len();
        self.stats.expired += expired as u64;
        expired
    }
}

fn udp_header(payload: &[u8]) -> Result<(u16, u16, u16), TrackError> {
    if payload.len() < UDP_HEADER_LEN {
        return Err(TrackError::BadUdp);
    }
    Ok((
        be16(payload, 0..2),
        be16(payload, 2..4),
        be16(payload, 4..6),
    ))
}

fn head_of(udp_payload: &[u8]) -> Vec<u8> {
    udp_payload[..udp_payload.len().min(wire::field::HEADER_LEN)].to_vec()
}

fn add_piece(
    dgram: &mut Datagram,
    frag: &IpFragment<'_>,
    port: u16,
    max_fragments: usize,
) -> Result<(), TrackError> {
    if frag.offset == 0 {
        let (src_port, dst_port, udp_len) = udp_header(frag.payload)?;
        if dst_port != port {
            return Err(TrackError::OtherPort(dst_port));
        }
        if usize::from(udp_len) < UDP_HEADER_LEN {
            return Err(TrackError::BadUdp);
        }
        dgram.head = Some((
            src_port,
            dst_port,
            usize::from(udp_len) - UDP_HEADER_LEN,
            head_of(&frag.payload[UDP_HEADER_LEN..]),
        ));
    }
    let piece = Piece {
        offset: frag.offset,
        len: frag.payload.len(),
        wire_len: frag.wire_len,
        more: frag.more,
    };
    // Every fragment but the last carries a multiple of 8 bytes (RFC 791).
    if piece.more && !piece.len.is_multiple_of(FRAGMENT_UNIT) {
        return Err(TrackError::Overlap);
    }
    let at = dgram.pieces.partition_point(|p| p.offset < piece.offset);
    if let Some(same) = dgram.pieces.get(at).filter(|p| p.offset == piece.offset) {
        // A duplicate (the second probe's copy never shares an id, so this is a retransmission
        // by the network): identical is harmless, different is inconsistent.
        return if same.len == piece.len && same.more == piece.more {
            Ok(())
        } else {
            Err(TrackError::Overlap)
        };
    }
    let overlaps_prev = at
        .checked_sub(1)
        .and_then(|i| dgram.pieces.get(i))
        .is_some_and(|p| p.offset + p.len > piece.offset || !p.more);
    let overlaps_next = dgram
        .pieces
        .get(at)
        .is_some_and(|n| piece.offset + piece.len > n.offset || !piece.more);
    if overlaps_prev || overlaps_next {
        return Err(TrackError::Overlap);
    }
    if dgram.pieces.len() >= max_fragments {
        return Err(TrackError::TooManyFragments);
    }
    dgram.pieces.insert(at, piece);
    Ok(())
}

/// Whether the pieces cover the datagram from 0 to a last fragment without gaps, and agree
/// with the UDP length.
fn complete(dgram: &Datagram) -> Result<bool, TrackError> {
    let Some(last) = dgram.pieces.last() else {
        return Ok(false);
    };
    if last.more || dgram.head.is_none() {
        return Ok(false);
    }
    let mut end = 0;
    for p in &dgram.pieces {
        if p.offset != end {
            return Ok(false);
        }
        end = p.offset + p.len;
    }
    match &dgram.head {
        Some((_, _, payload_len, _)) if payload_len + UDP_HEADER_LEN == end => Ok(true),
        _ => Err(TrackError::BadUdp),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds an IPv4 datagram carrying a UDP probe payload of `payload_len` bytes to `port`,
    /// and fragments it as a router with `mtu` would (RFC 791: payload per fragment rounded
    /// down to 8 bytes). Returns the fragments as IP packets.
    pub(crate) fn fragment_v4(payload: &[u8], port: u16, ident: u16, mtu: usize) -> Vec<Vec<u8>> {
        let mut udp = vec![0; UDP_HEADER_LEN + payload.len()];
        udp[UDP_HEADER_LEN..].copy_from_slice(payload);
        let ip = pxio::wire::Ipv4Repr {
            ident,
            protocol: ip_proto::UDP,
            payload_len: udp.len(),
            ..pxio::wire::Ipv4Repr::new([198, 18, 1, 1], [198, 18, 2, 2])
        };
        pxio::wire::UdpRepr {
            src_port: 40000,
            dst_port: port,
        }
        .emit(&mut udp, &pxio::wire::IpRepr::V4(ip))
        .unwrap();
        let per = (mtu - ipv4::field::HEADER_LEN) / FRAGMENT_UNIT * FRAGMENT_UNIT;
        let mut out = Vec::new();
        let mut off = 0;
        while off < udp.len() {
            let n = per.min(udp.len() - off);
            let mut p = vec![0u8; ipv4::field::HEADER_LEN];
            pxio::wire::Ipv4Repr {
                payload_len: n,
                ..ip
            }
            .emit(&mut p)
            .unwrap();
            let mut view = Ipv4Packet::new_unchecked(&mut p[..]);
            view.set_more_frags(off + n < udp.len());
            view.set_frag_offset(u16::try_from(off).unwrap());
            view.fill_checksum();
            p.extend_from_slice(&udp[off..off + n]);
            out.push(p);
            off += n;
        }
        out
    }

    /// Fills the IPv4 header checksum of `p` (a header at its start).
    pub(crate) fn set_checksum(p: &mut [u8]) {
        Ipv4Packet::new_unchecked(p).fill_checksum();
    }

    fn probe_payload(len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        wire::Probe {
            probe_id: 3,
            nonce: 99,
            size: u16::try_from(len + 28).unwrap(),
        }
        .emit(&mut buf)
        .unwrap();
        buf
    }

    #[test]
    fn a_9000_probe_through_a_1400_link() {
        let frags = fragment_v4(&probe_payload(8972), 4689, 77, 1400);
        let mut t = FragmentTracker::new(TrackerConfig::default());
        let mut done = None;
        for (i, f) in frags.iter().enumerate() {
            let r = t.on_packet(f, 1000 + i as u64).unwrap();
            if i + 1 < frags.len() {
                assert!(r.is_none());
            } else {
                done = r;
            }
        }
        let rec = done.unwrap();
        assert_eq!(rec.fragments, vec![1396, 1396, 1396, 1396, 1396, 1396, 744]);
        assert_eq!(rec.largest_fragment(), Some(1396));
        assert_eq!(rec.payload_len, 8972);
        assert_eq!(rec.src_port, 40000);
        assert_eq!(wire::Probe::parse(&rec.head).unwrap().nonce, 99);
        assert_eq!(t.in_progress(), 0);
        assert_eq!(t.stats().completed, 1);
    }

    #[test]
    fn whole_probe_is_one_fragment() {
        let frags = fragment_v4(&probe_payload(1372), 4689, 1, 1500);
        assert_eq!(frags.len(), 1);
        let mut t = FragmentTracker::new(TrackerConfig::default());
        let rec = t.on_packet(&frags[0], 0).unwrap().unwrap();
        assert_eq!(rec.fragments, vec![1400]);
    }

    #[test]
    fn other_ports_and_protocols_are_refused() {
        let mut t = FragmentTracker::new(TrackerConfig::default());
        let frags = fragment_v4(&probe_payload(3000), 53, 5, 1500);
        assert_eq!(t.on_packet(&frags[0], 0), Err(TrackError::OtherPort(53)));
        // The datagram's other fragments are absorbed, not kept.
        assert_eq!(t.on_packet(&frags[1], 0), Err(TrackError::OtherPort(53)));
        let mut tcp = fragment_v4(&probe_payload(100), 4689, 6, 1500).remove(0);
        tcp[9] = 6;
        assert_eq!(
            t.on_packet(&tcp, 0),
            Err(TrackError::Malformed(IpError::BadChecksum))
        );
        set_checksum(&mut tcp);
        assert_eq!(t.on_packet(&tcp, 0), Err(TrackError::NotUdp(6)));
        assert!(matches!(
            t.on_packet(&[0x45, 0], 0),
            Err(TrackError::Malformed(IpError::Truncated { .. }))
        ));
    }

    #[test]
    fn incomplete_datagrams_expire_and_the_table_is_bounded() {
        let cfg = TrackerConfig {
            max_datagrams: 2,
            timeout: Duration::from_millis(10),
            ..TrackerConfig::default()
        };
        let mut t = FragmentTracker::new(cfg);
        for id in 0..2 {
            let frags = fragment_v4(&probe_payload(3000), 4689, id, 1500);
            assert_eq!(t.on_packet(&frags[0], 0), Ok(None));
        }
        let frags = fragment_v4(&probe_payload(3000), 4689, 9, 1500);
        assert_eq!(t.on_packet(&frags[0], 1), Err(TrackError::TableFull));
        // Past the timeout, the stale ones make room.
        assert_eq!(t.on_packet(&frags[0], 20_000_000), Ok(None));
        assert_eq!(t.stats().expired, 2);
    }

    #[test]
    fn ipv6_fragments() {
        let payload = probe_payload(2952);
        let mut udp = vec![0x9c, 0x40, 0x12, 0x51];
        udp.extend_from_slice(&u16::try_from(payload.len() + 8).unwrap().to_be_bytes());
        udp.extend_from_slice(&[0, 0]);
        udp.extend_from_slice(&payload);
        let mut t = FragmentTracker::new(TrackerConfig::default());
        let per = 1232;
        let mut off = 0;
        let mut rec = None;
        while off < udp.len() {
            let n = per.min(udp.len() - off);
            let more = off + n < udp.len();
            let mut p = vec![0u8; frag_header::HEADERS_LEN];
            pxio::wire::Ipv6Repr {
                next_header: ip_proto::IPV6_FRAG,
                payload_len: frag_header::HEADERS_LEN - ipv6::field::HEADER_LEN + n,
                ..pxio::wire::Ipv6Repr::new(
                    Ipv6Addr::LOCALHOST.octets(),
                    Ipv6Addr::LOCALHOST.octets(),
                )
            }
            .emit(&mut p)
            .unwrap();
            p[frag_header::NEXT_HEADER] = ip_proto::UDP;
            let om = u16::try_from(off / FRAGMENT_UNIT).unwrap() << frag_header::OFFSET_SHIFT
                | u16::from(more);
            p[frag_header::OFF_M].copy_from_slice(&om.to_be_bytes());
            p[frag_header::IDENT].copy_from_slice(&0xabcd_u32.to_be_bytes());
            p.extend_from_slice(&udp[off..off + n]);
            rec = t.on_packet(&p, 0).unwrap();
            off += n;
        }
        let rec = rec.unwrap();
        assert_eq!(rec.fragments, vec![1280, 1280, 544]);
        assert_eq!(rec.ident, 0xabcd);
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(
            packets in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..120), 0..20)
        ) {
            let mut t = FragmentTracker::new(TrackerConfig::default());
            for (i, p) in packets.iter().enumerate() {
                let mut p = p.clone();
                // Bias toward valid IPv4/IPv6 headers so the deeper paths run.
                if let Some(b) = p.first_mut() { *b = if i % 2 == 0 { 0x45 } else { 0x60 }; }
                if i % 2 == 0 && p.len() >= 20 { set_checksum(&mut p); }
                let _ = t.on_packet(&p, i as u64);
            }
        }

        #[test]
        fn any_order_any_mtu_gives_the_router_sizes(
            len in 600usize..9000, mtu in 68usize..1500, seed in any::<u64>()
        ) {
            let mut frags = fragment_v4(&probe_payload(len), 4689, 1, mtu);
            let expected: Vec<u16> = frags.iter().map(|f| u16::from_be_bytes([f[2], f[3]])).collect();
            // Shuffle deterministically from the seed.
            let mut s = seed | 1;
            for i in (1..frags.len()).rev() {
                s ^= s << 13; s ^= s >> 7; s ^= s << 17;
                frags.swap(i, (s % (i as u64 + 1)) as usize);
            }
            let mut t = FragmentTracker::new(TrackerConfig::default());
            let mut rec = None;
            for f in &frags {
                if let Some(r) = t.on_packet(f, 0).unwrap() { rec = Some(r); }
            }
            let rec = rec.unwrap();
            prop_assert_eq!(&rec.fragments, &expected);
            let largest = usize::from(rec.largest_fragment().unwrap());
            prop_assert!(largest <= mtu && largest + 7 >= mtu.min(len + 28));
        }
    }
}
