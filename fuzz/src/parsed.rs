//! A TCP segment read back from a frame, checksums verified, IPv6 extension headers walked: what
//! a receiver would see of a packet the engine emitted.

use pxio::checksum::{pseudo_header_v4, pseudo_header_v6};
use pxio::wire::{ip_proto, ipv4, ipv6, EthernetFrame, Ipv4Packet, Ipv6Packet, TcpPacket};

/// Most IPv6 extension headers walked before giving up.
const MAX_EXT: usize = 8;

/// The fields of a TCP segment the checks need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<'a> {
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// Source address (IPv4 in the first four bytes).
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// TCP flags.
    pub flags: u8,
    /// Window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// IPv4 identification (0 for IPv6).
    pub ident: u16,
    /// The IP packet's length, headers included.
    pub ip_len: usize,
    /// Extension headers between IPv6 and TCP.
    pub ext_headers: usize,
    /// The IPv4 header checksum verifies (always true for IPv6).
    pub ip_ok: bool,
    /// The TCP checksum verifies.
    pub tcp_ok: bool,
    /// The first VLAN tag's ID.
    pub vlan: Option<u16>,
    /// The TCP payload.
    pub payload: &'a [u8],
}

impl Parsed<'_> {
    /// Both checksums verify: a receiver would accept the segment.
    pub fn verifies(&self) -> bool {
        self.ip_ok && self.tcp_ok
    }
}

/// Parses an Ethernet frame holding an unfragmented IPv4 or IPv6 TCP segment; `None` for
/// anything else or anything cut short.
pub fn parse_tcp(frame: &[u8]) -> Option<Parsed<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let l2 = eth.header_len();
    let vlan = eth.vlan_id(0);
    let l3 = frame.get(l2..)?;
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    let (v6, ip, l4_at, ip_ok, ident, ext_headers) = match eth.ethertype() {
        0x0800 => {
            let v4 = Ipv4Packet::new_checked(l3).ok()?;
            if v4.version() != ipv4::VERSION || v4.is_fragment() || v4.protocol() != ip_proto::TCP {
                return None;
            }
            let ip = l3.get(..usize::from(v4.total_len()))?;
            src[..4].copy_from_slice(&v4.src_addr());
            dst[..4].copy_from_slice(&v4.dst_addr());
            (
                false,
                ip,
                v4.header_len(),
                v4.verify_checksum(),
                v4.ident(),
                0,
            )
        }
        0x86dd => {
            let v6 = Ipv6Packet::new_checked(l3).ok()?;
            let ip = l3.get(..ipv6::field::HEADER_LEN + usize::from(v6.payload_len()))?;
            src = v6.src_addr();
            dst = v6.dst_addr();
            let (mut next, mut at, mut n) = (v6.next_header(), ipv6::field::HEADER_LEN, 0);
            while next != ip_proto::TCP {
                if n == MAX_EXT
                    || !matches!(
                        next,
                        ip_proto::HOP_BY_HOP | ip_proto::IPV6_ROUTE | ip_proto::IPV6_OPTS
                    )
                {
                    return None;
                }
                let ext = ip.get(at..at + 2)?;
                next = ext[0];
                at += (usize::from(ext[1]) + 1) * 8;
                n += 1;
            }
            (true, ip, at, true, 0, n)
        }
        _ => return None,
    };
    let segment = ip.get(l4_at..)?;
    let tcp = TcpPacket::new_checked(segment).ok()?;
    let pseudo = if v6 {
        pseudo_header_v6(src, dst, ip_proto::TCP, segment.len() as u32)
    } else {
        let mut s4 = [0u8; 4];
        let mut d4 = [0u8; 4];
        s4.copy_from_slice(&src[..4]);
        d4.copy_from_slice(&dst[..4]);
        pseudo_header_v4(s4, d4, ip_proto::TCP, u16::try_from(segment.len()).ok()?)
    };
    Some(Parsed {
        v6,
        src,
        dst,
        sport: tcp.src_port(),
        dport: tcp.dst_port(),
        seq: tcp.seq_number(),
        ack: tcp.ack_number(),
        flags: tcp.flags(),
        window: tcp.window(),
        urgent: tcp.urgent_ptr(),
        ident,
        ip_len: ip.len(),
        ext_headers,
        ip_ok,
        tcp_ok: tcp.verify_checksum(pseudo),
        vlan,
        payload: &segment[tcp.header_len()..],
    })
}
