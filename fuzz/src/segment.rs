//! TCP segments for the fuzz targets, built with `pxio::wire::repr` (the one place frames are
//! written), plus what `repr` cannot express: an IPv6 destination-options header before TCP,
//! and deliberate corruption (a bad IPv4 header checksum, payload words changed behind the TCP
//! checksum's back).

use pxio::wire::repr::{EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr};
use pxio::wire::{ip_proto, ipv4, ipv6, tcp, Ipv4Packet, Ipv6Packet};

/// Source MAC of every built frame.
pub const SRC_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];
/// Destination MAC of every built frame.
pub const DST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 2];
/// Bytes of the destination-options header [`Segment::v6_dest_opts`] inserts (PadN only).
pub const DEST_OPTS_LEN: usize = 8;

/// The IPv4 address of host `host` (198.18.1.`host`, the benchmark range).
pub fn v4_addr(host: u8) -> [u8; 4] {
    [198, 18, 1, host]
}

/// The IPv6 address of host `host` (2001:db8::`host`).
pub fn v6_addr(host: u8) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
    a[15] = host;
    a
}

/// One TCP segment to build: every header field a test may want to vary.
#[derive(Clone, Debug)]
pub struct Segment<'a> {
    /// IPv6 rather than IPv4.
    pub v6: bool,
    /// Source host number ([`v4_addr`], [`v6_addr`]); the destination is host 200.
    pub src_host: u8,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// An 802.1Q tag's TCI.
    pub vlan: Option<u16>,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// TCP flags ([`tcp::tcp_flags`]).
    pub flags: u8,
    /// Receive window.
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// IPv4 TOS or IPv6 traffic class (DSCP and ECN).
    pub tos: u8,
    /// IPv6 flow label.
    pub flow_label: u32,
    /// IPv4 identification.
    pub ident: u16,
    /// IPv4 Don't Fragment.
    pub dont_frag: bool,
    /// TCP options (at most 40 bytes).
    pub options: &'a [u8],
    /// IPv6 only: a destination-options extension header between the IPv6 header and TCP.
    pub v6_dest_opts: bool,
}

/// The destination host number of every built segment.
pub const DST_HOST: u8 = 200;

impl Segment<'_> {
    /// The Ethernet frame carrying `payload`, with correct lengths and checksums.
    pub fn frame(&self, payload: &[u8]) -> Vec<u8> {
        let ip = if self.v6 {
            IpRepr::V6(Ipv6Repr {
                dscp: self.tos >> 2,
                ecn: self.tos & 3,
                flow_label: self.flow_label & 0xf_ffff,
                ..Ipv6Repr::new(v6_addr(self.src_host), v6_addr(DST_HOST))
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                dscp: self.tos >> 2,
                ecn: self.tos & 3,
                ident: self.ident,
                dont_frag: self.dont_frag,
                ..Ipv4Repr::new(v4_addr(self.src_host), v4_addr(DST_HOST))
            })
        };
        let repr = FrameRepr {
            ethernet: EthernetRepr {
                dst: DST_MAC,
                src: SRC_MAC,
                vlan_tci: self.vlan.map(|t| t & 0x0fff),
                ethertype: 0,
            },
            ip,
            l4: L4Repr::Tcp(TcpRepr {
                src_port: self.sport,
                dst_port: self.dport,
                seq: self.seq,
                ack: self.ack,
                flags: self.flags,
                window: self.window,
                urgent: self.urgent,
                options: &self.options[..self.options.len().min(40)],
            }),
        };
        let mut frame = repr
            .to_vec(payload)
            .expect("a segment of at most 64 KiB with 40 B of options fits its fields");
        if self.v6 && self.v6_dest_opts {
            let l3 = repr.ethernet.buffer_len();
            insert_dest_opts(&mut frame, l3);
        }
        frame
    }
}

/// Inserts a destination-options header (next header TCP, PadN) behind the IPv6 header at
/// `l3`. The TCP checksum stays valid: the pseudo-header counts the upper-layer length only.
fn insert_dest_opts(frame: &mut Vec<u8>, l3: usize) {
    let at = l3 + ipv6::field::HEADER_LEN;
    let opts: [u8; DEST_OPTS_LEN] = [ip_proto::TCP, 0, 1, 4, 0, 0, 0, 0];
    frame.splice(at..at, opts);
    let mut ip = Ipv6Packet::new_unchecked(&mut frame[l3..]);
    let len = ip.payload_len();
    ip.set_payload_len(len + DEST_OPTS_LEN as u16);
    ip.set_next_header(ip_proto::IPV6_OPTS);
}

/// Breaks the IPv4 header checksum of `frame` (no-op for IPv6, which has none); returns whether
/// it did.
pub fn corrupt_ip_checksum(frame: &mut [u8], l3: usize) -> bool {
    let Some(bytes) = frame.get_mut(l3..) else {
        return false;
    };
    match Ipv4Packet::new_checked(&mut *bytes) {
        Ok(mut ip) if ip.version() == ipv4::VERSION => {
            let c = ip.checksum();
            ip.set_checksum(c ^ 0x0100);
            true
        }
        _ => false,
    }
}

/// Adds `delta` to the 16-bit payload word at even offset `word * 2` of the segment that
/// starts at `l4` in `frame`, without touching the checksum (a corruption on the wire). Two
/// segments corrupted by +1 and −1 in the same column cancel in the one's-complement sum of
/// their concatenation. Returns whether the payload held that word.
pub fn corrupt_payload_word(frame: &mut [u8], l4: usize, word: usize, delta: i16) -> bool {
    let Some(hdr) = frame.get(l4 + tcp::field::DATA_OFFSET) else {
        return false;
    };
    let header_len = usize::from(hdr >> tcp::field::DATA_OFFSET_SHIFT) * 4;
    let at = l4 + header_len + word * 2;
    let Some(w) = frame.get_mut(at..at + 2) else {
        return false;
    };
    let v = u16::from_be_bytes([w[0], w[1]]).wrapping_add_signed(delta);
    w.copy_from_slice(&v.to_be_bytes());
    true
}
