//! High-level header representations, parsed from the views and emitted into buffers, in the
//! style of smoltcp's `Repr::parse`/`Repr::emit`: the one place where pxio, its tests and its
//! benches write headers (SIGCOMM'26 §4.1, whose packets the gateway and its tests build).
//!
//! Each `Repr` names what a caller chooses (addresses, ports, flags) and leaves out what follows
//! from the rest: version and header-length fields, length fields, and checksums, which `emit`
//! computes (the IPv4 header checksum, the UDP and TCP checksums over the pseudo-header and the
//! payload, through [`crate::checksum`]). `emit` writes at the views' named `field` offsets and
//! refuses a buffer that is too short, or a length a field cannot hold, with a [`WireError`];
//! it never allocates. [`FrameRepr`] stacks Ethernet, IP and UDP/TCP for the common case.

use super::{
    ethernet, ip_proto, ipv4, ipv6, tcp, udp, write_u16, EthernetFrame, Ipv4Packet, Ipv6Packet,
    TcpPacket, UdpPacket, WireError,
};
use crate::checksum::{pseudo_header_v4, pseudo_header_v6, Sum};

/// Returns the first `len` bytes of `buf`, or [`WireError::Truncated`].
fn room(buf: &mut [u8], len: usize) -> Result<&mut [u8], WireError> {
    buf.get_mut(..len).ok_or(WireError::Truncated)
}

/// An Ethernet header, with at most one 802.1Q tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// The 802.1Q tag's TCI (PCP, DEI, VLAN ID), when the frame is tagged.
    pub vlan_tci: Option<u16>,
    /// The EtherType of the payload (behind the tag, if any).
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the addresses, the first VLAN tag and the payload's EtherType of `frame`; `None`
    /// for a frame with two tags (QinQ), which this representation cannot hold.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Option<Self> {
        if frame.vlan_count() > 1 {
            return None;
        }
        Some(Self {
            dst: frame.dst_addr(),
            src: frame.src_addr(),
            vlan_tci: frame.vlan_tci(0),
            ethertype: frame.ethertype(),
        })
    }

    /// Header bytes, the tag included.
    pub fn buffer_len(&self) -> usize {
        ethernet::field::HEADER_LEN
            + usize::from(self.vlan_tci.is_some()) * ethernet::field::VLAN_TAG_LEN
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let hdr = room(buf, self.buffer_len())?;
        hdr[ethernet::field::DST_ADDR].copy_from_slice(&self.dst);
        hdr[ethernet::field::SRC_ADDR].copy_from_slice(&self.src);
        let mut ethertype_at = ethernet::field::ETHERTYPE;
        if let Some(tci) = self.vlan_tci {
            write_u16(hdr, ethertype_at.clone(), ethernet::ethertype::VLAN);
            let tci_at = ethertype_at.start + ethernet::field::TCI_FROM_TPID;
            write_u16(hdr, tci_at..tci_at + 2, tci);
            ethertype_at = ethertype_at.start + ethernet::field::VLAN_TAG_LEN
                ..ethertype_at.end + ethernet::field::VLAN_TAG_LEN;
        }
        write_u16(hdr, ethertype_at, self.ethertype);
        Ok(())
    }
}

/// An IPv4 header without options.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Protocol of the payload ([`ip_proto`]).
    pub protocol: u8,
    /// Payload bytes behind the header: the total length is 20 more.
    pub payload_len: usize,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// ECN (0..=3).
    pub ecn: u8,
    /// Identification.
    pub ident: u16,
    /// Don't Fragment.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
}

impl Ipv4Repr {
    /// A header from `src` to `dst` with TTL 64 and every other field zero (no DF).
    pub const fn new(src: [u8; 4], dst: [u8; 4]) -> Self {
        Self {
            src,
            dst,
            protocol: 0,
            payload_len: 0,
            dscp: 0,
            ecn: 0,
            ident: 0,
            dont_frag: false,
            ttl: 64,
        }
    }

    /// Reads the fields of an unfragmented packet without options (the payload length from the
    /// total length); `None` for a fragment or a header with options.
    pub fn parse<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Option<Self> {
        if ip.header_len() != ipv4::field::HEADER_LEN || ip.is_fragment() {
            return None;
        }
        Some(Self {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            protocol: ip.protocol(),
            payload_len: usize::from(ip.total_len()).checked_sub(ipv4::field::HEADER_LEN)?,
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ident: ip.ident(),
            dont_frag: ip.dont_frag(),
            ttl: ip.ttl(),
        })
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        ipv4::field::HEADER_LEN
    }

    /// Writes the header at the start of `buf`, with its total length and header checksum.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let total = u16::try_from(ipv4::field::HEADER_LEN + self.payload_len)
            .map_err(|_| WireError::BadLength)?;
        let hdr = room(buf, ipv4::field::HEADER_LEN)?;
        hdr.fill(0);
        hdr[ipv4::field::VER_IHL] = (ipv4::VERSION << ipv4::field::VERSION_SHIFT)
            | (ipv4::field::HEADER_LEN / ipv4::field::IHL_UNIT) as u8;
        let mut ip = Ipv4Packet::new_unchecked(hdr);
        ip.set_dscp(self.dscp);
        ip.set_ecn(self.ecn);
        ip.set_total_len(total);
        ip.set_ident(self.ident);
        ip.set_dont_frag(self.dont_frag);
        ip.set_ttl(self.ttl);
        ip.set_protocol(self.protocol);
        ip.set_src_addr(self.src);
        ip.set_dst_addr(self.dst);
        ip.fill_checksum();
        Ok(())
    }
}

/// An IPv6 header without extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Next header ([`ip_proto`]).
    pub next_header: u8,
    /// Payload length.
    pub payload_len: usize,
    /// DSCP (0..=63).
    pub dscp: u8,
    /// ECN (0..=3).
    pub ecn: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// A header from `src` to `dst` with hop limit 64 and every other field zero.
    pub const fn new(src: [u8; 16], dst: [u8; 16]) -> Self {
        Self {
            src,
            dst,
            next_header: 0,
            payload_len: 0,
            dscp: 0,
            ecn: 0,
            flow_label: 0,
            hop_limit: 64,
        }
    }

    /// Reads the fields of the fixed header.
    pub fn parse<T: AsRef<[u8]>>(ip: &Ipv6Packet<T>) -> Self {
        Self {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            next_header: ip.next_header(),
            payload_len: usize::from(ip.payload_len()),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            flow_label: ip.flow_label(),
            hop_limit: ip.hop_limit(),
        }
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        ipv6::field::HEADER_LEN
    }

    /// Writes the header at the start of `buf`, with its payload length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let payload_len = u16::try_from(self.payload_len).map_err(|_| WireError::BadLength)?;
        let hdr = room(buf, ipv6::field::HEADER_LEN)?;
        let version = u32::from(ipv6::VERSION) << ipv6::field::VERSION_SHIFT;
        hdr[ipv6::field::VER_TC_FLOW].copy_from_slice(&version.to_be_bytes());
        let mut ip = Ipv6Packet::new_unchecked(hdr);
        ip.set_dscp(self.dscp);
        ip.set_ecn(self.ecn);
        ip.set_flow_label(self.flow_label);
        ip.set_payload_len(payload_len);
        ip.set_next_header(self.next_header);
        ip.set_hop_limit(self.hop_limit);
        ip.set_src_addr(self.src);
        ip.set_dst_addr(self.dst);
        Ok(())
    }
}

/// An IPv4 or IPv6 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// The EtherType that announces this header.
    pub const fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ethernet::ethertype::IPV4,
            IpRepr::V6(_) => ethernet::ethertype::IPV6,
        }
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        match self {
            IpRepr::V4(ip) => ip.buffer_len(),
            IpRepr::V6(ip) => ip.buffer_len(),
        }
    }

    /// Protocol (IPv4) or next header (IPv6).
    pub const fn protocol(&self) -> u8 {
        match self {
            IpRepr::V4(ip) => ip.protocol,
            IpRepr::V6(ip) => ip.next_header,
        }
    }

    /// Payload bytes behind the header.
    pub const fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(ip) => ip.payload_len,
            IpRepr::V6(ip) => ip.payload_len,
        }
    }

    /// The same header carrying `payload_len` bytes of `protocol`.
    pub const fn with_payload(self, protocol: u8, payload_len: usize) -> Self {
        match self {
            IpRepr::V4(ip) => IpRepr::V4(Ipv4Repr {
                protocol,
                payload_len,
                ..ip
            }),
            IpRepr::V6(ip) => IpRepr::V6(Ipv6Repr {
                next_header: protocol,
                payload_len,
                ..ip
            }),
        }
    }

    /// The pseudo-header sum that the TCP or UDP checksum of this packet's payload covers
    /// (RFC 768, RFC 793 §3.1, RFC 8200 §8.1).
    pub fn pseudo_header(&self) -> Result<Sum, WireError> {
        Ok(match self {
            IpRepr::V4(ip) => {
                let len = u16::try_from(ip.payload_len).map_err(|_| WireError::BadLength)?;
                pseudo_header_v4(ip.src, ip.dst, ip.protocol, len)
            }
            IpRepr::V6(ip) => {
                let len = u32::try_from(ip.payload_len).map_err(|_| WireError::BadLength)?;
                pseudo_header_v6(ip.src, ip.dst, ip.next_header, len)
            }
        })
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        match self {
            IpRepr::V4(ip) => ip.emit(buf),
            IpRepr::V6(ip) => ip.emit(buf),
        }
    }
}

/// A UDP header: the ports. The length and checksum follow from the datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Reads the ports.
    pub fn parse<T: AsRef<[u8]>>(udp: &UdpPacket<T>) -> Self {
        Self {
            src_port: udp.src_port(),
            dst_port: udp.dst_port(),
        }
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        udp::field::HEADER_LEN
    }

    /// Writes the header into `datagram`, which holds the whole datagram (header room, then the
    /// payload, already in place): the length is `datagram.len()`, and the checksum covers
    /// `ip`'s pseudo-header (whose payload length must be `datagram.len()`) and the datagram.
    /// A computed zero is sent as `0xffff`.
    pub fn emit(&self, datagram: &mut [u8], ip: &IpRepr) -> Result<(), WireError> {
        let len = u16::try_from(datagram.len()).map_err(|_| WireError::BadLength)?;
        if datagram.len() < udp::field::HEADER_LEN || ip.payload_len() != datagram.len() {
            return Err(if datagram.len() < udp::field::HEADER_LEN {
                WireError::Truncated
            } else {
                WireError::BadLength
            });
        }
        let pseudo = ip.pseudo_header()?;
        let mut udp = UdpPacket::new_unchecked(datagram);
        udp.set_src_port(self.src_port);
        udp.set_dst_port(self.dst_port);
        udp.set_len(len);
        udp.fill_checksum(pseudo);
        Ok(())
    }
}

/// A TCP header, its options as raw bytes (padded with zeros to a multiple of 4 on emit). The
/// data offset and the checksum follow from the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TcpRepr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Flags ([`tcp::tcp_flags`]).
    pub flags: u8,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options, at most 40 bytes.
    pub options: &'a [u8],
}

impl<'a> TcpRepr<'a> {
    /// Reads the fields and borrows the options of `tcp` (a view checked by `new_checked`, so
    /// its options lie in the buffer).
    pub fn parse(tcp: &TcpPacket<&'a [u8]>) -> Self {
        let bytes: &'a [u8] = tcp.clone().into_inner();
        let options = bytes
            .get(tcp::field::HEADER_LEN..tcp.header_len())
            .unwrap_or_default();
        Self {
            src_port: tcp.src_port(),
            dst_port: tcp.dst_port(),
            seq: tcp.seq_number(),
            ack: tcp.ack_number(),
            flags: tcp.flags(),
            window: tcp.window(),
            urgent: tcp.urgent_ptr(),
            options,
        }
    }

    /// Header bytes: 20 plus the options rounded up to a multiple of 4.
    pub const fn buffer_len(&self) -> usize {
        let unit = tcp::field::DATA_OFFSET_UNIT;
        tcp::field::HEADER_LEN + self.options.len().div_ceil(unit) * unit
    }

    /// Writes the header into `segment`, which holds the whole segment (header room, then the
    /// payload, already in place); the checksum covers `ip`'s pseudo-header (whose payload
    /// length must be `segment.len()`) and the segment.
    pub fn emit(&self, segment: &mut [u8], ip: &IpRepr) -> Result<(), WireError> {
        let header_len = self.buffer_len();
        if header_len > tcp::field::MAX_HEADER_LEN {
            return Err(WireError::BadHeaderLength);
        }
        if segment.len() < header_len {
            return Err(WireError::Truncated);
        }
        if ip.payload_len() != segment.len() {
            return Err(WireError::BadLength);
        }
        let pseudo = ip.pseudo_header()?;
        let hdr = &mut segment[..header_len];
        hdr.fill(0);
        hdr[tcp::field::HEADER_LEN..tcp::field::HEADER_LEN + self.options.len()]
            .copy_from_slice(self.options);
        hdr[tcp::field::DATA_OFFSET] =
            ((header_len / tcp::field::DATA_OFFSET_UNIT) as u8) << tcp::field::DATA_OFFSET_SHIFT;
        let mut tcp = TcpPacket::new_unchecked(segment);
        tcp.set_src_port(self.src_port);
        tcp.set_dst_port(self.dst_port);
        tcp.set_seq_number(self.seq);
        tcp.set_ack_number(self.ack);
        tcp.set_flags(self.flags);
        tcp.set_window(self.window);
        tcp.set_urgent_ptr(self.urgent);
        tcp.fill_checksum(pseudo);
        Ok(())
    }
}

/// The transport header of a [`FrameRepr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Repr<'a> {
    /// UDP.
    Udp(UdpRepr),
    /// TCP.
    Tcp(TcpRepr<'a>),
}

impl L4Repr<'_> {
    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        match self {
            L4Repr::Udp(udp) => udp.buffer_len(),
            L4Repr::Tcp(tcp) => tcp.buffer_len(),
        }
    }

    /// The IP protocol number.
    pub const fn protocol(&self) -> u8 {
        match self {
            L4Repr::Udp(_) => ip_proto::UDP,
            L4Repr::Tcp(_) => ip_proto::TCP,
        }
    }
}

/// A whole frame: Ethernet, IPv4 or IPv6, then UDP or TCP in front of a payload. The EtherType,
/// the IP protocol and every length come from the layers below; the IP representation's own
/// `protocol`/`payload_len` and the Ethernet `ethertype` are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameRepr<'a> {
    /// The Ethernet header.
    pub ethernet: EthernetRepr,
    /// The IP header.
    pub ip: IpRepr,
    /// The transport header.
    pub l4: L4Repr<'a>,
}

impl FrameRepr<'_> {
    /// Frame bytes with a payload of `payload_len` bytes.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.ethernet.buffer_len() + self.ip.buffer_len() + self.l4.buffer_len() + payload_len
    }

    /// Writes the frame carrying `payload` at the start of `buf`, allocation-free; returns its
    /// length.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, WireError> {
        let len = self.buffer_len(payload.len());
        let frame = room(buf, len)?;
        let l3 = self.ethernet.buffer_len();
        let l4 = l3 + self.ip.buffer_len();
        let l4_len = len - l4;
        let ip = self.ip.with_payload(self.l4.protocol(), l4_len);
        EthernetRepr {
            ethertype: ip.ethertype(),
            ..self.ethernet
        }
        .emit(frame)?;
        ip.emit(&mut frame[l3..])?;
        frame[l4 + self.l4.buffer_len()..].copy_from_slice(payload);
        match &self.l4 {
            L4Repr::Udp(udp) => udp.emit(&mut frame[l4..], &ip)?,
            L4Repr::Tcp(tcp) => tcp.emit(&mut frame[l4..], &ip)?,
        }
        Ok(len)
    }

    /// The frame carrying `payload`, in a new vector.
    pub fn to_vec(&self, payload: &[u8]) -> Result<Vec<u8>, WireError> {
        let mut frame = vec![0; self.buffer_len(payload.len())];
        self.emit(&mut frame, payload)?;
        Ok(frame)
    }
}

/// An Ethernet + IP + UDP frame carrying `payload`, with correct lengths and checksums.
pub fn udp_frame(
    ethernet: EthernetRepr,
    ip: IpRepr,
    udp: UdpRepr,
    payload: &[u8],
) -> Result<Vec<u8>, WireError> {
    FrameRepr {
        ethernet,
        ip,
        l4: L4Repr::Udp(udp),
    }
    .to_vec(payload)
}

/// An Ethernet + IP + TCP frame carrying `payload`, with correct lengths and checksums.
pub fn tcp_frame(
    ethernet: EthernetRepr,
    ip: IpRepr,
    tcp: TcpRepr<'_>,
    payload: &[u8],
) -> Result<Vec<u8>, WireError> {
    FrameRepr {
        ethernet,
        ip,
        l4: L4Repr::Tcp(tcp),
    }
    .to_vec(payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{classify, Class};
    use etherparse::{NetSlice, SlicedPacket, TransportSlice};
    use proptest::prelude::*;

    const MACS: EthernetRepr = EthernetRepr {
        dst: [0x02, 0, 0, 0, 0, 2],
        src: [0x02, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: 0,
    };
    const V4: Ipv4Repr = Ipv4Repr {
        dscp: 7,
        ecn: 1,
        ident: 0x1234,
        dont_frag: true,
        ..Ipv4Repr::new([198, 18, 0, 1], [198, 51, 100, 7])
    };
    const V6: Ipv6Repr = Ipv6Repr {
        dscp: 46,
        ecn: 2,
        flow_label: 0xabcde,
        hop_limit: 9,
        ..Ipv6Repr::new(
            [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [
                0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbe, 0xef,
            ],
        )
    };
    /// MSS 1460, NOP, window scale 7: 7 bytes, padded to 8 on emit.
    const OPTIONS: &[u8] = &[2, 4, 0x05, 0xb4, 1, 3, 3, 7];

    fn tcp_repr(options: &[u8]) -> TcpRepr<'_> {
        TcpRepr {
            src_port: 443,
            dst_port: 50000,
            seq: 0xdead_beef,
            ack: 7,
            flags: tcp::tcp_flags::ACK | tcp::tcp_flags::PSH,
            window: 1024,
            urgent: 0,
            options,
        }
    }

    /// Checks `frame` with etherparse: the lengths, the IPv4 header checksum and the transport
    /// checksum it computes itself; returns the transport payload.
    fn etherparse_payload(frame: &[u8]) -> Vec<u8> {
        let p = SlicedPacket::from_ethernet(frame).expect("etherparse parses the frame");
        let (payload, sum_ok) = match (&p.net, &p.transport) {
            (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Udp(u))) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum());
                let expect = u.to_header().calc_checksum_ipv4(&h, u.payload()).unwrap();
                (u.payload().to_vec(), u.checksum() == expect)
            }
            (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Udp(u))) => {
                let h = ip.header().to_header();
                let expect = u.to_header().calc_checksum_ipv6(&h, u.payload()).unwrap();
                (u.payload().to_vec(), u.checksum() == expect)
            }
            (Some(NetSlice::Ipv4(ip)), Some(TransportSlice::Tcp(t))) => {
                let h = ip.header().to_header();
                assert_eq!(h.header_checksum, h.calc_header_checksum());
                let expect = t.to_header().calc_checksum_ipv4(&h, t.payload()).unwrap();
                (t.payload().to_vec(), t.checksum() == expect)
            }
            (Some(NetSlice::Ipv6(ip)), Some(TransportSlice::Tcp(t))) => {
                let h = ip.header().to_header();
                let expect = t.to_header().calc_checksum_ipv6(&h, t.payload()).unwrap();
                (t.payload().to_vec(), t.checksum() == expect)
            }
            other => panic!("unexpected layers {other:?}"),
        };
        assert!(sum_ok, "transport checksum agrees with etherparse");
        payload
    }

    /// Parses `frame` back through the views into representations.
    fn parse_back(frame: &[u8]) -> (EthernetRepr, IpRepr, &[u8], &[u8]) {
        let eth = EthernetFrame::new_checked(frame).unwrap();
        let ethernet = EthernetRepr::parse(&eth).unwrap();
        let l3 = eth.header_len();
        let (ip, l4) = if ethernet.ethertype == ethernet::ethertype::IPV4 {
            let ip = Ipv4Packet::new_checked(&frame[l3..]).unwrap();
            (IpRepr::V4(Ipv4Repr::parse(&ip).unwrap()), l3 + 20)
        } else {
            let ip = Ipv6Packet::new_checked(&frame[l3..]).unwrap();
            (IpRepr::V6(Ipv6Repr::parse(&ip)), l3 + 40)
        };
        (ethernet, ip, &frame[l3..l4], &frame[l4..])
    }

    #[test]
    fn udp_frames_round_trip_and_agree_with_etherparse() {
        let payload: Vec<u8> = (0..=200u8).collect();
        for ip in [IpRepr::V4(V4), IpRepr::V6(V6)] {
            for vlan_tci in [None, Some(0x2064)] {
                let eth = EthernetRepr { vlan_tci, ..MACS };
                let udp = UdpRepr {
                    src_port: 5353,
                    dst_port: 53,
                };
                let frame = udp_frame(eth, ip, udp, &payload).unwrap();
                assert_eq!(frame.len(), eth.buffer_len() + ip.buffer_len() + 8 + 201);
                assert_eq!(etherparse_payload(&frame), payload);
                let Class::Udp(h) = classify(&frame, frame.len()) else {
                    panic!("classify sees UDP");
                };
                assert_eq!(usize::from(h.payload_len), payload.len());
                let (e, parsed_ip, _, l4) = parse_back(&frame);
                assert_eq!(
                    e,
                    EthernetRepr {
                        ethertype: ip.ethertype(),
                        ..eth
                    }
                );
                assert_eq!(parsed_ip, ip.with_payload(ip_proto::UDP, 8 + 201));
                let view = UdpPacket::new_checked(l4).unwrap();
                assert_eq!(UdpRepr::parse(&view), udp);
                assert!(view.verify_checksum(parsed_ip.pseudo_header().unwrap()));
            }
        }
    }

    #[test]
    fn tcp_frames_round_trip_and_agree_with_etherparse() {
        let payload = vec![0x5a; 1448];
        for ip in [IpRepr::V4(V4), IpRepr::V6(V6)] {
            for options in [&[][..], OPTIONS, &OPTIONS[..7]] {
                let tcp = tcp_repr(options);
                let frame = tcp_frame(MACS, ip, tcp, &payload).unwrap();
                assert_eq!(etherparse_payload(&frame), payload);
                let (_, parsed_ip, _, l4) = parse_back(&frame);
                let view = TcpPacket::new_checked(l4).unwrap();
                assert_eq!(view.header_len(), 20 + options.len().div_ceil(4) * 4);
                let back = TcpRepr::parse(&view);
                assert_eq!(&back.options[..options.len()], options);
                assert_eq!(
                    TcpRepr {
                        options: &back.options[..options.len()],
                        ..back
                    },
                    tcp
                );
                assert!(view.verify_checksum(parsed_ip.pseudo_header().unwrap()));
                assert_eq!(view.mss(), options.first().map(|_| 1460));
            }
        }
    }

    #[test]
    fn emit_refuses_short_buffers_and_oversized_lengths() {
        let repr = FrameRepr {
            ethernet: MACS,
            ip: IpRepr::V4(V4),
            l4: L4Repr::Udp(UdpRepr {
                src_port: 1,
                dst_port: 2,
            }),
        };
        let mut short = [0u8; 41];
        assert_eq!(repr.emit(&mut short, b""), Err(WireError::Truncated));
        let mut exact = [0u8; 42];
        assert_eq!(repr.emit(&mut exact, b""), Ok(42));
        let huge = vec![0u8; 65536];
        assert_eq!(repr.to_vec(&huge), Err(WireError::BadLength));
        let too_many_options = [1u8; 41];
        let tcp = tcp_repr(&too_many_options);
        assert_eq!(
            tcp_frame(MACS, IpRepr::V4(V4), tcp, b""),
            Err(WireError::BadHeaderLength)
        );
    }

    #[test]
    fn a_computed_zero_udp_checksum_goes_out_as_ffff() {
        // Find a 2-byte payload whose checksum computes to zero: the sum of everything else,
        // complemented, placed as the payload makes the total 0xffff.
        let ip = IpRepr::V4(V4).with_payload(ip_proto::UDP, 10);
        let udp = UdpRepr {
            src_port: 7,
            dst_port: 9,
        };
        let mut probe = [0u8; 10];
        udp.emit(&mut probe, &ip).unwrap();
        let rest = ip.pseudo_header().unwrap().add(Sum::of(&probe[..6]));
        let payload = (!rest.fold()).to_be_bytes();
        let frame = udp_frame(MACS, ip, udp, &payload).unwrap();
        assert_eq!(&frame[14 + 20 + 6..14 + 20 + 8], &[0xff, 0xff]);
        etherparse_payload(&frame);
    }

    proptest! {
        #[test]
        fn any_frame_round_trips(v6 in any::<bool>(), tcp in any::<bool>(),
                                 payload in proptest::collection::vec(any::<u8>(), 0..1500),
                                 ports in any::<(u16, u16)>(), seq in any::<u32>(),
                                 ident in any::<u16>(), dscp in 0u8..64) {
            let ip = if v6 {
                IpRepr::V6(Ipv6Repr { dscp, ..V6 })
            } else {
                IpRepr::V4(Ipv4Repr { dscp, ident, ..V4 })
            };
            let l4 = if tcp {
                L4Repr::Tcp(TcpRepr { src_port: ports.0, dst_port: ports.1, seq, ..tcp_repr(OPTIONS) })
            } else {
                L4Repr::Udp(UdpRepr { src_port: ports.0, dst_port: ports.1 })
            };
            let repr = FrameRepr { ethernet: MACS, ip, l4 };
            let frame = repr.to_vec(&payload).unwrap();
            prop_assert_eq!(etherparse_payload(&frame), payload.clone());
            let (_, parsed_ip, _, _) = parse_back(&frame);
            prop_assert_eq!(parsed_ip, ip.with_payload(l4.protocol(), l4.buffer_len() + payload.len()));
            let mut again = vec![0xee; frame.len() + 3];
            prop_assert_eq!(repr.emit(&mut again, &payload), Ok(frame.len()));
            prop_assert_eq!(&again[..frame.len()], &frame[..]);
        }
    }
}
