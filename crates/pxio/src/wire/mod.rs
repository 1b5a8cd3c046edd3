//! Zero-copy header views (Ethernet, IPv4, IPv6, TCP, UDP) and the per-packet classifier the
//! merge engine runs on every received packet (SIGCOMM'26 §4.1).
//!
//! Each view wraps a buffer (`&[u8]` to read, `&mut [u8]` to write too), checks its length once
//! in `new_checked`, and then reads each field at the named offsets of its `field` module.
//! [`classify`] validates a whole frame's headers in one pass and never panics. The [`repr`]
//! layer parses views into plain values and emits them back into buffers, lengths and checksums
//! computed, for everything that builds frames.

pub mod ethernet;
pub mod gtpu;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod repr;
pub mod tcp;
pub mod udp;

#[cfg(test)]
mod tests;

pub use ethernet::EthernetFrame;
pub use icmp::{icmp_frame, IcmpPacket, IcmpRepr};
pub use ipv4::Ipv4Packet;
pub use ipv6::Ipv6Packet;
pub use repr::{
    tcp_frame, udp_frame, EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr,
    UdpRepr,
};
pub use tcp::{tcp_flags, TcpFlags, TcpPacket};
pub use udp::UdpPacket;

use crate::toeplitz::Toeplitz;

/// A byte range of a header field.
pub type Field = core::ops::Range<usize>;

/// IP protocol numbers (IPv4 protocol, IPv6 next header) the classifier distinguishes.
pub mod ip_proto {
    /// IPv6 hop-by-hop options extension header.
    pub const HOP_BY_HOP: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 routing extension header.
    pub const IPV6_ROUTE: u8 = 43;
    /// IPv6 fragment extension header.
    pub const IPV6_FRAG: u8 = 44;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const IPV6_NO_NXT: u8 = 59;
    /// IPv6 destination options extension header.
    pub const IPV6_OPTS: u8 = 60;
    /// Authentication header (IPv4 and IPv6).
    pub const AH: u8 = 51;
}

/// Why a view refused a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header does.
    #[error("buffer too short for the header")]
    Truncated,
    /// The IP version field does not match the header type.
    #[error("wrong IP version")]
    BadVersion,
    /// A header length field (IPv4 IHL, TCP data offset) is below the minimum header.
    #[error("header length field below the minimum header length")]
    BadHeaderLength,
    /// A total length field (IPv4 total length, UDP length) is shorter than the header.
    #[error("length field shorter than the header")]
    BadLength,
}

/// Reads the big-endian `u16` at `field`.
#[inline(always)]
pub(crate) fn read_u16(bytes: &[u8], field: Field) -> u16 {
    let b = &bytes[field];
    u16::from_be_bytes([b[0], b[1]])
}

/// Writes `value` big-endian at `field`.
#[inline(always)]
pub(crate) fn write_u16(bytes: &mut [u8], field: Field, value: u16) {
    bytes[field].copy_from_slice(&value.to_be_bytes());
}

/// Reads the big-endian `u32` at `field`.
#[inline(always)]
pub(crate) fn read_u32(bytes: &[u8], field: Field) -> u32 {
    let b = &bytes[field];
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Writes `value` big-endian at `field`.
#[inline(always)]
pub(crate) fn write_u32(bytes: &mut [u8], field: Field, value: u32) {
    bytes[field].copy_from_slice(&value.to_be_bytes());
}

/// The 5-tuple that identifies a flow (SIGCOMM'26 §4.1), as the sender wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address; an IPv4 address fills the first 4 bytes and the rest are zero.
    pub src: [u8; 16],
    /// Destination address; an IPv4 address fills the first 4 bytes and the rest are zero.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// IP protocol: [`ip_proto::TCP`] or [`ip_proto::UDP`].
    pub proto: u8,
    /// Whether the addresses are IPv6.
    pub v6: bool,
}

/// Length of an IPv4 address inside a [`FlowKey`]'s 16-byte address fields.
const IPV4_ADDR_LEN: usize = 4;

impl FlowKey {
    /// The all-zero key: no packet has it (an empty table slot's).
    pub const ZERO: FlowKey = FlowKey {
        src: [0; 16],
        dst: [0; 16],
        sport: 0,
        dport: 0,
        proto: 0,
        v6: false,
    };

    /// The source address as IPv4, when the key is IPv4.
    pub fn src_v4(&self) -> Option<[u8; 4]> {
        (!self.v6).then(|| first_four(&self.src))
    }

    /// The destination address as IPv4, when the key is IPv4.
    pub fn dst_v4(&self) -> Option<[u8; 4]> {
        (!self.v6).then(|| first_four(&self.dst))
    }

    /// The key of the same flow's other direction (the replies): addresses and ports swapped,
    /// protocol and IP version kept.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..*self
        }
    }

    /// The Toeplitz hash a NIC with the same key would report for this flow (SIGCOMM'26 §4.1).
    pub fn rss_hash(&self, toeplitz: &Toeplitz) -> u32 {
        if self.v6 {
            toeplitz.hash_v6(self.src, self.dst, self.sport, self.dport)
        } else {
            toeplitz.hash_v4(
                first_four(&self.src),
                first_four(&self.dst),
                self.sport,
                self.dport,
            )
        }
    }
}

fn first_four(addr: &[u8; 16]) -> [u8; 4] {
    let mut v4 = [0; IPV4_ADDR_LEN];
    v4.copy_from_slice(&addr[..IPV4_ADDR_LEN]);
    v4
}

/// Where the headers of a TCP or UDP packet lie, and its flow (SIGCOMM'26 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headers {
    /// Ethernet header length, VLAN tags included.
    pub l2_len: u16,
    /// IPv4 header length with options, or 40 for IPv6.
    pub l3_len: u16,
    /// TCP header length with options, or 8 for UDP.
    pub l4_len: u16,
    /// Whether the packet is IPv6.
    pub v6: bool,
    /// IP protocol: [`ip_proto::TCP`] or [`ip_proto::UDP`].
    pub proto: u8,
    /// IPv4 total length, or 40 plus the IPv6 payload length.
    pub ip_len: u16,
    /// L4 payload length: `ip_len - l3_len - l4_len`.
    pub payload_len: u16,
    /// The flow.
    pub key: FlowKey,
}

impl Headers {
    /// Length of all headers, L2 to L4.
    pub fn hdr_len(&self) -> usize {
        usize::from(self.l2_len) + usize::from(self.l3_len) + usize::from(self.l4_len)
    }

    /// Length of the frame without Ethernet padding: L2 header plus IP packet.
    pub fn frame_len(&self) -> usize {
        usize::from(self.l2_len) + usize::from(self.ip_len)
    }

    /// Offset of the IP header in the frame.
    pub fn l3_offset(&self) -> usize {
        usize::from(self.l2_len)
    }

    /// Offset of the TCP or UDP header in the frame.
    pub fn l4_offset(&self) -> usize {
        usize::from(self.l2_len) + usize::from(self.l3_len)
    }
}

/// What a received frame is, as far as the merge engine cares (SIGCOMM'26 §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A well-formed TCP segment.
    Tcp(Headers),
    /// A well-formed UDP datagram.
    Udp(Headers),
    /// IP fragments (any fragment of IPv4 with MF or offset != 0; IPv6 fragment header).
    Fragment,
    /// Valid IP, but a protocol or feature we pass through untouched (ICMP, IPv6 extension
    /// headers, ...).
    OtherIp,
    /// ARP, LLDP and other non-IP frames.
    NonIp,
    /// A frame whose headers are inconsistent or cut short.
    Malformed(Malformed),
}

/// A frame's classification, made once on receive and carried with the packet through every
/// stage that needs it (the gateway's pipeline, the merge engine, an NF), so no stage parses the
/// headers again: one parse per packet.
///
/// It can only be made from the frame it describes ([`Parsed::of`], [`Parsed::parse_into`]); a
/// stage that is handed one checks it still fits its packet ([`Parsed::fits`]) before trusting
/// its offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parsed {
    class: Class,
    frame_len: u32,
    head_len: u32,
}

impl Parsed {
    /// [`classify`]s the frame whose first segment is `head` and whose length is `frame_len`.
    /// Built where it is returned, field by field ([`Parsed::parse_into`]): a class built apart
    /// and copied in is read back wider than it was written, which stalls on store forwarding.
    #[inline]
    pub fn of(head: &[u8], frame_len: usize) -> Parsed {
        let mut parsed = Parsed::EMPTY;
        parsed.parse_into(head, frame_len);
        parsed
    }

    /// The parse of the frame whose first segment is `head` and whose length is `frame_len`,
    /// when the caller has already established, from the frame's own bytes, the class
    /// [`Parsed::of`] would find. Crate-private: a wrong class here would be trusted by every
    /// stage after.
    pub(crate) fn of_headers(class: Class, head: &[u8], frame_len: usize) -> Parsed {
        Parsed {
            class,
            frame_len: u32::try_from(frame_len).unwrap_or(u32::MAX),
            head_len: u32::try_from(head.len()).unwrap_or(u32::MAX),
        }
    }

    /// Parses the frame into `self` in place: the same result as [`Parsed::of`], written
    /// where it is kept (see `plain_ipv4_tcp_into`).
    #[inline]
    pub fn parse_into(&mut self, head: &[u8], frame_len: usize) {
        self.frame_len = u32::try_from(frame_len).unwrap_or(u32::MAX);
        self.head_len = u32::try_from(head.len()).unwrap_or(u32::MAX);
        let head = &head[..head.len().min(frame_len)];
        if !plain_ipv4_tcp_into(head, frame_len, &mut self.class) {
            self.class = classify_general(head, frame_len);
        }
    }

    /// The value a burst's parse slot holds for the instant before [`Parsed::parse_into`]
    /// fills it where it is kept (building a `Parsed` elsewhere and copying it in stalled on
    /// store forwarding). It describes a zero-length non-IP frame, so [`Parsed::fits`] refuses
    /// it for any real packet. Crate-private: outside pxio a `Parsed` comes only from a frame.
    pub(crate) const EMPTY: Parsed = Parsed {
        class: Class::NonIp,
        frame_len: 0,
        head_len: 0,
    };

    /// What the frame is.
    #[inline]
    pub fn class(&self) -> &Class {
        &self.class
    }

    /// The TCP headers, when the frame is a well-formed TCP segment.
    #[inline]
    pub fn tcp(&self) -> Option<&Headers> {
        match &self.class {
            Class::Tcp(h) => Some(h),
            _ => None,
        }
    }

    /// The UDP headers, when the frame is a well-formed UDP datagram.
    #[inline]
    pub fn udp(&self) -> Option<&Headers> {
        match &self.class {
            Class::Udp(h) => Some(h),
            _ => None,
        }
    }

    /// The length of the frame it was made from.
    #[inline]
    pub fn frame_len(&self) -> usize {
        self.frame_len as usize
    }

    /// Whether it describes a frame of `frame_len` bytes whose first segment holds `head_len`:
    /// the same shape as the frame it was made from, so its header offsets lie inside it. (A
    /// stage may rewrite header fields in place, e.g. the MSS option of a SYN, without making
    /// it stale; a stage that changes a length must parse again.)
    #[inline]
    pub fn fits(&self, head_len: usize, frame_len: usize) -> bool {
        self.frame_len as usize == frame_len && self.head_len as usize == head_len
    }

    /// This parse when it fits the frame whose first segment is `head` and whose length is
    /// `frame_len` ([`fits`](Self::fits)), else a fresh one: a parse of another shape (stale,
    /// or another packet's) is never trusted.
    #[inline]
    pub fn or_fresh(&self, head: &[u8], frame_len: usize) -> Parsed {
        if self.fits(head.len(), frame_len) {
            *self
        } else {
            Parsed::of(head, frame_len)
        }
    }

    /// [`or_fresh`](Self::or_fresh) by reference: this parse when it fits, else a fresh one
    /// made in `fresh`. A parse holds a whole flow key: copying it (and the headers out of it)
    /// cost a split under TSO more than half its instructions.
    #[inline]
    pub fn fitting<'a>(
        &'a self,
        head: &[u8],
        frame_len: usize,
        fresh: &'a mut Option<Parsed>,
    ) -> &'a Parsed {
        if self.fits(head.len(), frame_len) {
            self
        } else {
            Parsed::made_in(fresh, head, frame_len)
        }
    }

    /// The parse of the frame whose first segment is `head` and whose length is `frame_len`,
    /// made in `fresh`, where it is kept ([`Parsed::parse_into`]).
    #[inline]
    pub(crate) fn made_in<'a>(
        fresh: &'a mut Option<Parsed>,
        head: &[u8],
        frame_len: usize,
    ) -> &'a Parsed {
        let parsed = fresh.insert(Parsed::EMPTY);
        parsed.parse_into(head, frame_len);
        parsed
    }
}

/// Why [`classify`] rejected a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Malformed {
    /// The frame ends inside the Ethernet header or its VLAN tags.
    #[error("frame ends inside the Ethernet header")]
    TruncatedL2,
    /// The frame ends inside the IP header.
    #[error("frame ends inside the IP header")]
    TruncatedL3,
    /// The IP version does not match the EtherType.
    #[error("IP version does not match the EtherType")]
    BadVersion,
    /// IPv4 IHL below 5.
    #[error("IPv4 header length below 20 bytes")]
    BadHeaderLength,
    /// IP total length shorter than the IP header, or longer than the frame.
    #[error("IP length shorter than its header or longer than the frame")]
    BadTotalLength,
    /// The IP packet is too short for the fixed TCP or UDP header.
    #[error("IP packet too short for the TCP or UDP header")]
    TruncatedL4,
    /// TCP data offset below 5, or pointing past the end of the IP packet.
    #[error("TCP data offset below 5 or past the IP packet")]
    BadTcpDataOffset,
    /// UDP length different from the IP payload length.
    #[error("UDP length differs from the IP payload length")]
    BadUdpLength,
    /// The headers are all in the frame but not all in its first segment.
    #[error("headers continue past the first segment")]
    HeadersNotContiguous,
}

/// The bytes a classification may read: the first segment, and the frame's full length.
struct Bounds {
    head_len: usize,
    frame_len: usize,
}

impl Bounds {
    /// Checks that the frame's first `end` bytes lie in the first segment; if not, reports
    /// `truncated` when the frame itself is shorter, else that the headers are split.
    fn need(&self, end: usize, truncated: Malformed) -> Result<(), Malformed> {
        if end <= self.head_len {
            Ok(())
        } else {
            Err(self.missing(end, truncated))
        }
    }

    /// Why the first `end` bytes, known not to lie in the first segment, are missing.
    fn missing(&self, end: usize, truncated: Malformed) -> Malformed {
        if end <= self.frame_len {
            Malformed::HeadersNotContiguous
        } else {
            truncated
        }
    }
}

/// Classifies a received frame and, for TCP and UDP, locates its headers (SIGCOMM'26 §4.1).
///
/// `head` is the first segment; `frame_len` the whole packet length (the payload may continue in
/// later segments, but all headers must lie within `head`, else HeadersNotContiguous).
///
/// Rules: IP total length must be >= header length and l2_len + ip_len <= frame_len (trailing
/// Ethernet padding after ip_len is allowed); UDP length must equal ip_len - l3_len; TCP data
/// offset >= 5 and header within ip_len. An IP packet too short for the fixed 20-byte TCP or
/// 8-byte UDP header is [`Malformed::TruncatedL4`]; a TCP data offset pointing past the IP packet
/// is [`Malformed::BadTcpDataOffset`]. IPv6 packets are classified by the fixed header's next
/// header only: a fragment header there makes a [`Class::Fragment`], any other extension header
/// (or ICMPv6) an [`Class::OtherIp`]. An IPv6 packet longer than 65535 bytes in all, which
/// [`Headers::ip_len`] cannot express, is also [`Class::OtherIp`]. Bytes of `head` beyond
/// `frame_len` are ignored.
#[inline]
pub fn classify(head: &[u8], frame_len: usize) -> Class {
    let head = &head[..head.len().min(frame_len)];
    match plain_ipv4_tcp(head, frame_len) {
        Some(headers) => Class::Tcp(headers),
        None => classify_general(head, frame_len),
    }
}

/// [`classify`] for any frame (`head` already cut to `frame_len`). Out of line: the common
/// frame never gets here, and [`classify`] stays small enough to inline.
#[inline(never)]
fn classify_general(head: &[u8], frame_len: usize) -> Class {
    let bounds = Bounds {
        head_len: head.len(),
        frame_len,
    };
    match classify_frame(head, &bounds) {
        Ok(class) => class,
        Err(malformed) => Class::Malformed(malformed),
    }
}

/// The common case in one straight pass: an untagged Ethernet frame carrying a well-formed,
/// unfragmented IPv4 packet without options carrying TCP, every header in `head`. It makes
/// exactly the checks the general path makes for such a frame, and returns the same
/// [`Headers`]; anything else (including every malformed frame) is `None`, and left to the
/// general path, which says what it is. Where it returns headers, [`classify`] returns them
/// as [`Class::Tcp`]: a caller that wants only such segments (an outside receiver's ACKs) can
/// skip the general parse with it.
#[inline]
pub fn plain_ipv4_tcp(head: &[u8], frame_len: usize) -> Option<Headers> {
    let head = &head[..head.len().min(frame_len)];
    let mut class = Class::NonIp;
    match plain_ipv4_tcp_into(head, frame_len, &mut class) {
        true => match class {
            Class::Tcp(h) => Some(h),
            _ => None,
        },
        false => None,
    }
}

/// [`plain_ipv4_tcp`] writing its result straight into `out` (only when it returns true): a
/// caller that keeps the parse in an array builds it there, field by field, rather than
/// copying a finished one in (a wide copy of freshly written narrow fields stalls on store
/// forwarding).
#[inline]
fn plain_ipv4_tcp_into(head: &[u8], frame_len: usize, out: &mut Class) -> bool {
    const L2: usize = ethernet::field::HEADER_LEN;
    const L3: usize = ipv4::field::HEADER_LEN;
    const L4: usize = L2 + L3;
    const VER_IHL_PLAIN: u8 = (ipv4::VERSION << ipv4::field::VERSION_SHIFT) | 5;
    let fixed: &[u8; L4 + tcp::field::HEADER_LEN] = match head.first_chunk() {
        Some(f) => f,
        None => return false,
    };
    if read_u16(fixed, ethernet::field::ETHERTYPE) != ethernet::ethertype::IPV4
        || fixed[L2 + ipv4::field::VER_IHL] != VER_IHL_PLAIN
        || fixed[L2 + ipv4::field::PROTOCOL] != ip_proto::TCP
    {
        return false;
    }
    let ip = Ipv4Packet::new_unchecked(&fixed[L2..L4]);
    let ip_len = usize::from(ip.total_len());
    if ip_len < L3 + tcp::field::HEADER_LEN || L2 + ip_len > frame_len || ip.is_fragment() {
        return false;
    }
    let tcp = TcpPacket::new_unchecked(&fixed[L4..]);
    let l4_len = tcp.header_len();
    if l4_len < tcp::field::HEADER_LEN || l4_len > ip_len - L3 || L4 + l4_len > head.len() {
        return false;
    }
    let (src, dst) = (v4_in_16(ip.src_addr()), v4_in_16(ip.dst_addr()));
    // `ip_len` came from a u16 and bounds every other length: the casts are lossless.
    *out = Class::Tcp(Headers {
        l2_len: L2 as u16,
        l3_len: L3 as u16,
        l4_len: l4_len as u16,
        v6: false,
        proto: ip_proto::TCP,
        ip_len: ip_len as u16,
        payload_len: (ip_len - L3 - l4_len) as u16,
        key: FlowKey {
            src,
            dst,
            sport: tcp.src_port(),
            dport: tcp.dst_port(),
            proto: ip_proto::TCP,
            v6: false,
        },
    });
    true
}

/// An IPv4 address as a [`FlowKey`] holds it: in the first 4 of 16 bytes, the rest zero. Made as
/// one 16-byte value rather than 4 bytes then 12 zeros: a key's readers load its addresses 8
/// bytes at a time (hashes, comparisons), and a load that spans two stores waits for both to
/// reach the cache (no store forwarding), which cost a connection tracker a stall of about a
/// dozen cycles per word on every bare ACK.
#[inline(always)]
fn v4_in_16(addr: [u8; IPV4_ADDR_LEN]) -> [u8; 16] {
    u128::from(u32::from_le_bytes(addr)).to_le_bytes()
}

/// What [`plain_ack`] reads of a bare acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlainAck {
    /// The flow, as [`classify`] gives it.
    pub key: FlowKey,
    /// The acknowledgment number.
    pub ack: u32,
    /// The IP header's DSCP.
    pub dscp: u8,
}

/// A bare acknowledgement, as a receiver sends for the data it gets: a TCP segment without
/// payload that has ACK set and none of SYN, RST and FIN, in an untagged Ethernet frame over
/// IPv4 without options (unfragmented) or IPv6 without extension headers, every header in
/// `head`. It makes the checks [`classify`] makes of such a frame, so where it answers,
/// [`classify`] says [`Class::Tcp`] with the same key and no payload; it reads only what a
/// connection tracker needs of the segment, from fixed offsets, in one pass. Anything else is
/// `None`, left to [`classify`].
#[inline]
pub fn plain_ack(head: &[u8], frame_len: usize) -> Option<PlainAck> {
    const L2: usize = ethernet::field::HEADER_LEN;
    const NOT_BARE: u8 = tcp_flags::SYN | tcp_flags::RST | tcp_flags::FIN;
    let head = &head[..head.len().min(frame_len)];
    let (l3_len, ip_len, proto, v6) = match read_u16(head.get(..L2)?, ethernet::field::ETHERTYPE) {
        ethernet::ethertype::IPV4 => {
            let ip = Ipv4Packet::new_unchecked(head.get(L2..L2 + ipv4::field::HEADER_LEN)?);
            // Without options, as `plain_ipv4_tcp` takes it.
            if ip.version() != ipv4::VERSION || ip.ihl() != 5 || ip.is_fragment() {
                return None;
            }
            let ip_len = usize::from(ip.total_len());
            (ipv4::field::HEADER_LEN, ip_len, ip.protocol(), false)
        }
        ethernet::ethertype::IPV6 => {
            let ip = Ipv6Packet::new_unchecked(head.get(L2..L2 + ipv6::field::HEADER_LEN)?);
            if ip.version() != ipv6::VERSION {
                return None;
            }
            let ip_len = ipv6::field::HEADER_LEN + usize::from(ip.payload_len());
            (ipv6::field::HEADER_LEN, ip_len, ip.next_header(), true)
        }
        _ => return None,
    };
    let l4 = L2 + l3_len;
    let tcp = TcpPacket::new_unchecked(head.get(l4..l4 + tcp::field::HEADER_LEN)?);
    let flags = tcp.flags();
    let l4_len = tcp.header_len();
    // No payload: the IP packet is its two headers, all in `head`.
    if proto != ip_proto::TCP
        || flags & tcp_flags::ACK == 0
        || flags & NOT_BARE != 0
        || l4_len < tcp::field::HEADER_LEN
        || ip_len != l3_len + l4_len
        || L2 + ip_len > frame_len
        || l4 + l4_len > head.len()
    {
        return None;
    }
    let l3 = &head[L2..l4];
    let (src, dst, dscp) = if v6 {
        let ip = Ipv6Packet::new_unchecked(l3);
        (ip.src_addr(), ip.dst_addr(), ip.dscp())
    } else {
        let ip = Ipv4Packet::new_unchecked(l3);
        (v4_in_16(ip.src_addr()), v4_in_16(ip.dst_addr()), ip.dscp())
    };
    Some(PlainAck {
        key: FlowKey {
            src,
            dst,
            sport: tcp.src_port(),
            dport: tcp.dst_port(),
            proto: ip_proto::TCP,
            v6,
        },
        ack: tcp.ack_number(),
        dscp,
    })
}

fn classify_frame(head: &[u8], bounds: &Bounds) -> Result<Class, Malformed> {
    let (l2_len, ethertype) = match ethernet::walk_header(head) {
        Ok((_, header_len, ethertype)) => (header_len, ethertype),
        Err(needed) => return Err(bounds.missing(needed, Malformed::TruncatedL2)),
    };
    match ethertype {
        ethernet::ethertype::IPV4 => classify_ipv4(head, l2_len, bounds),
        ethernet::ethertype::IPV6 => classify_ipv6(head, l2_len, bounds),
        _ => Ok(Class::NonIp),
    }
}

/// What the IP layer found, for the L4 step.
struct Network {
    l2_len: usize,
    l3_len: usize,
    ip_len: usize,
    proto: u8,
    src: [u8; 16],
    dst: [u8; 16],
    v6: bool,
}

fn classify_ipv4(head: &[u8], l2_len: usize, bounds: &Bounds) -> Result<Class, Malformed> {
    bounds.need(l2_len + ipv4::field::HEADER_LEN, Malformed::TruncatedL3)?;
    let ip = Ipv4Packet::new_unchecked(&head[l2_len..]);
    if ip.version() != ipv4::VERSION {
        return Err(Malformed::BadVersion);
    }
    let l3_len = ip.header_len();
    if l3_len < ipv4::field::HEADER_LEN {
        return Err(Malformed::BadHeaderLength);
    }
    bounds.need(l2_len + l3_len, Malformed::TruncatedL3)?;
    let ip_len = usize::from(ip.total_len());
    if ip_len < l3_len || l2_len + ip_len > bounds.frame_len {
        return Err(Malformed::BadTotalLength);
    }
    if ip.is_fragment() {
        return Ok(Class::Fragment);
    }
    let (src, dst) = (v4_in_16(ip.src_addr()), v4_in_16(ip.dst_addr()));
    let net = Network {
        l2_len,
        l3_len,
        ip_len,
        proto: ip.protocol(),
        src,
        dst,
        v6: false,
    };
    classify_l4(head, &net, bounds)
}

fn classify_ipv6(head: &[u8], l2_len: usize, bounds: &Bounds) -> Result<Class, Malformed> {
    let l3_len = ipv6::field::HEADER_LEN;
    bounds.need(l2_len + l3_len, Malformed::TruncatedL3)?;
    let ip = Ipv6Packet::new_unchecked(&head[l2_len..]);
    if ip.version() != ipv6::VERSION {
        return Err(Malformed::BadVersion);
    }
    let ip_len = l3_len + usize::from(ip.payload_len());
    if l2_len + ip_len > bounds.frame_len {
        return Err(Malformed::BadTotalLength);
    }
    let proto = ip.next_header();
    match proto {
        ip_proto::IPV6_FRAG => return Ok(Class::Fragment),
        ip_proto::TCP | ip_proto::UDP if ip_len <= usize::from(u16::MAX) => {}
        _ => return Ok(Class::OtherIp),
    }
    let net = Network {
        l2_len,
        l3_len,
        ip_len,
        proto,
        src: ip.src_addr(),
        dst: ip.dst_addr(),
        v6: true,
    };
    classify_l4(head, &net, bounds)
}

fn classify_l4(head: &[u8], net: &Network, bounds: &Bounds) -> Result<Class, Malformed> {
    let l4_offset = net.l2_len + net.l3_len;
    let l4_room = net.ip_len - net.l3_len;
    let (l4_len, sport, dport) = match net.proto {
        ip_proto::TCP => {
            if l4_room < tcp::field::HEADER_LEN {
                return Err(Malformed::TruncatedL4);
            }
            bounds.need(l4_offset + tcp::field::HEADER_LEN, Malformed::TruncatedL4)?;
            let tcp = TcpPacket::new_unchecked(&head[l4_offset..]);
            let l4_len = tcp.header_len();
            if l4_len < tcp::field::HEADER_LEN || l4_len > l4_room {
                return Err(Malformed::BadTcpDataOffset);
            }
            bounds.need(l4_offset + l4_len, Malformed::TruncatedL4)?;
            (l4_len, tcp.src_port(), tcp.dst_port())
        }
        ip_proto::UDP => {
            let l4_len = udp::field::HEADER_LEN;
            if l4_room < l4_len {
                return Err(Malformed::TruncatedL4);
            }
            bounds.need(l4_offset + l4_len, Malformed::TruncatedL4)?;
            let udp = UdpPacket::new_unchecked(&head[l4_offset..]);
            if usize::from(udp.len()) != l4_room {
                return Err(Malformed::BadUdpLength);
            }
            (l4_len, udp.src_port(), udp.dst_port())
        }
        _ => return Ok(Class::OtherIp),
    };
    // Every length below is bounded by `ip_len`, which is at most u16::MAX here, so the casts
    // are lossless.
    let headers = Headers {
        l2_len: net.l2_len as u16,
        l3_len: net.l3_len as u16,
        l4_len: l4_len as u16,
        v6: net.v6,
        proto: net.proto,
        ip_len: net.ip_len as u16,
        payload_len: (l4_room - l4_len) as u16,
        key: FlowKey {
            src: net.src,
            dst: net.dst,
            sport,
            dport,
            proto: net.proto,
            v6: net.v6,
        },
    };
    Ok(if net.proto == ip_proto::TCP {
        Class::Tcp(headers)
    } else {
        Class::Udp(headers)
    })
}

/// Most IPv6 extension headers [`flow_of`] walks before it gives up on a packet.
const MAX_EXTENSION_HEADERS: usize = 8;

/// The TCP or UDP flow of a packet that [`classify`] does not call [`Class::Tcp`] or
/// [`Class::Udp`], when the packet still names one: an IPv6 segment behind hop-by-hop, routing,
/// destination-options or authentication headers; the first fragment of a fragmented datagram;
/// a TCP header whose data offset is out of range. `None` when no ports can be read (a later
/// fragment, a truncated header, another protocol).
///
/// Such packets are never merged, but they must keep their place in their flow: whoever holds
/// the flow's earlier segments (the merge engine, SIGCOMM'26 §4.1) flushes them first. Only
/// the addresses, the protocol and the four port bytes are read, so this is the most a
/// receiver could attribute the packet to a connection by; it is on the slow path only.
pub fn flow_of(head: &[u8], frame_len: usize) -> Option<FlowKey> {
    let head = &head[..head.len().min(frame_len)];
    let (_, l2_len, ethertype) = ethernet::walk_header(head).ok()?;
    let ip = head.get(l2_len..)?;
    let mut key = FlowKey::ZERO;
    let l4 = match ethertype {
        ethernet::ethertype::IPV4 => {
            let v4 = Ipv4Packet::new_checked(ip).ok()?;
            if v4.version() != ipv4::VERSION || v4.frag_offset() != 0 {
                return None;
            }
            (key.src, key.dst) = (v4_in_16(v4.src_addr()), v4_in_16(v4.dst_addr()));
            key.proto = v4.protocol();
            v4.header_len()
        }
        ethernet::ethertype::IPV6 => {
            let v6 = Ipv6Packet::new_checked(ip).ok()?;
            if v6.version() != ipv6::VERSION {
                return None;
            }
            key.v6 = true;
            key.src = v6.src_addr();
            key.dst = v6.dst_addr();
            let (proto, offset) = skip_extension_headers(ip, v6.next_header())?;
            key.proto = proto;
            offset
        }
        _ => return None,
    };
    if key.proto != ip_proto::TCP && key.proto != ip_proto::UDP {
        return None;
    }
    // Source and destination ports lead both headers.
    let ports = ip.get(l4..l4 + 4)?;
    key.sport = u16::from_be_bytes([ports[0], ports[1]]);
    key.dport = u16::from_be_bytes([ports[2], ports[3]]);
    Some(key)
}

/// Walks the IPv6 extension headers of `ip` (the IPv6 packet) that start with `next`: the upper
/// protocol and its offset in `ip`, or `None` for a later fragment, a truncated chain, or more
/// than [`MAX_EXTENSION_HEADERS`] headers.
fn skip_extension_headers(ip: &[u8], mut next: u8) -> Option<(u8, usize)> {
    /// An extension header's length field counts 8-byte units beyond the first 8 bytes (RFC
    /// 8200 §4.3); the authentication header's counts 4-byte units beyond the first 8 (RFC 4302).
    const UNIT: usize = 8;
    const AH_UNIT: usize = 4;
    /// Fragment header (RFC 8200 §4.5): fixed length, offset in the upper 13 bits of bytes 2..4.
    const FRAG_HEADER_LEN: usize = 8;
    const FRAG_OFFSET_MASK: u16 = 0xfff8;
    let mut offset = ipv6::field::HEADER_LEN;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let ext = ip.get(offset..offset + 4)?;
        let len = match next {
            ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTE | ip_proto::IPV6_OPTS => {
                (usize::from(ext[1]) + 1) * UNIT
            }
            ip_proto::AH => (usize::from(ext[1]) + 2) * AH_UNIT,
            ip_proto::IPV6_FRAG => {
                if u16::from_be_bytes([ext[2], ext[3]]) & FRAG_OFFSET_MASK != 0 {
                    return None;
                }
                FRAG_HEADER_LEN
            }
            upper => return Some((upper, offset)),
        };
        next = ext[0];
        offset += len;
    }
    None
}
