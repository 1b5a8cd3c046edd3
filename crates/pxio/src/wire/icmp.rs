//! ICMPv4 (RFC 792) and ICMPv6 (RFC 4443) error messages: the view the gateway reads inbound
//! errors with (a Packet Too Big or "fragmentation needed" quoting a packet it sent), and the
//! representation it emits its own with when it behaves as a router toward the inside network
//! (SIGCOMM'26 §5.1, the PMTUD that §5.2 replaces where it can).
//!
//! Both versions share the layout this module covers: type, code, checksum, four bytes of
//! "rest of header" (unused, or the next-hop MTU), then the quoted invoking packet. The
//! ICMPv4 checksum covers the message; the ICMPv6 checksum also covers the IPv6 pseudo-header.

use super::repr::{EthernetRepr, IpRepr};
use super::{ip_proto, read_u16, write_u16, Field, WireError};
use crate::checksum::Sum;

/// Field offsets of an ICMP error message.
pub mod field {
    use super::Field;

    /// Message type.
    pub const TYPE: usize = 0;
    /// Message code.
    pub const CODE: usize = 1;
    /// Checksum.
    pub const CHECKSUM: Field = 2..4;
    /// ICMPv4 "fragmentation needed": the next-hop MTU (RFC 1191 §4), after two unused bytes.
    pub const NEXT_HOP_MTU: Field = 6..8;
    /// ICMPv6 Packet Too Big: the MTU, 32 bits (RFC 4443 §3.2).
    pub const MTU_V6: Field = 4..8;
    /// Header length: the quoted packet starts here.
    pub const HEADER_LEN: usize = 8;
}

/// ICMPv4 types and codes the gateway reads or writes.
pub mod v4 {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 3;
    /// Destination unreachable, code: port unreachable.
    pub const CODE_PORT_UNREACHABLE: u8 = 3;
    /// Destination unreachable, code: fragmentation needed and DF set (RFC 1191).
    pub const CODE_FRAG_NEEDED: u8 = 4;
    /// Time exceeded (code 1: fragment reassembly time exceeded).
    pub const TIME_EXCEEDED: u8 = 11;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 12;
    /// Source quench (deprecated, still an error message).
    pub const SOURCE_QUENCH: u8 = 4;
    /// Redirect.
    pub const REDIRECT: u8 = 5;

    /// Whether `ty` is an error message (RFC 1812 §4.3.2.7: never answered with another).
    pub const fn is_error(ty: u8) -> bool {
        matches!(
            ty,
            DEST_UNREACHABLE | SOURCE_QUENCH | REDIRECT | TIME_EXCEEDED | PARAMETER_PROBLEM
        )
    }
}

/// ICMPv6 types the gateway reads or writes.
pub mod v6 {
    /// Destination unreachable.
    pub const DEST_UNREACHABLE: u8 = 1;
    /// Packet Too Big (RFC 4443 §3.2).
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Time exceeded.
    pub const TIME_EXCEEDED: u8 = 3;
    /// Parameter problem.
    pub const PARAMETER_PROBLEM: u8 = 4;

    /// Whether `ty` is an error message: types below 128 (RFC 4443 §2.1).
    pub const fn is_error(ty: u8) -> bool {
        ty < 128
    }
}

/// A read or write view of an ICMP message (either version): the 8-byte header and whatever
/// of the quoted packet the buffer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than 8 bytes.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` after checking that it holds the 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        if buffer.as_ref().len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Self { buffer })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.bytes()[field::TYPE]
    }

    /// Message code.
    pub fn code(&self) -> u8 {
        self.bytes()[field::CODE]
    }

    /// Checksum.
    pub fn checksum(&self) -> u16 {
        read_u16(self.bytes(), field::CHECKSUM)
    }

    /// The ICMPv4 next-hop MTU field (meaningful in "fragmentation needed").
    pub fn next_hop_mtu(&self) -> u16 {
        read_u16(self.bytes(), field::NEXT_HOP_MTU)
    }

    /// The ICMPv6 MTU field (meaningful in Packet Too Big).
    pub fn mtu_v6(&self) -> u32 {
        super::read_u32(self.bytes(), field::MTU_V6)
    }

    /// The quoted invoking packet (as much as the buffer holds).
    pub fn quoted(&self) -> &[u8] {
        &self.bytes()[field::HEADER_LEN..]
    }

    /// Whether the checksum is right: `pseudo` is the ICMPv6 pseudo-header sum, zero for
    /// ICMPv4. The buffer must hold exactly the message.
    pub fn verify_checksum(&self, pseudo: Sum) -> bool {
        pseudo.add(Sum::of(self.bytes())).fold() == 0xffff
    }
}

/// An ICMP error message to emit: its type, code and rest-of-header word; the quoted packet is
/// passed to [`IcmpRepr::emit`] as the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcmpRepr {
    /// Message type ([`v4`], [`v6`]).
    pub msg_type: u8,
    /// Message code.
    pub code: u8,
    /// The four bytes after the checksum, as a big-endian word: the next-hop MTU for ICMPv4
    /// "fragmentation needed" (low 16 bits), the MTU for ICMPv6 Packet Too Big, else zero.
    pub rest: u32,
}

impl IcmpRepr {
    /// ICMPv4 destination unreachable, fragmentation needed, with the next-hop MTU (RFC 1191).
    pub const fn frag_needed(mtu: u16) -> Self {
        Self {
            msg_type: v4::DEST_UNREACHABLE,
            code: v4::CODE_FRAG_NEEDED,
            rest: mtu as u32,
        }
    }

    /// ICMPv6 Packet Too Big with the MTU (RFC 4443 §3.2).
    pub const fn packet_too_big(mtu: u32) -> Self {
        Self {
            msg_type: v6::PACKET_TOO_BIG,
            code: 0,
            rest: mtu,
        }
    }

    /// Reads type, code and rest-of-header.
    pub fn parse<T: AsRef<[u8]>>(icmp: &IcmpPacket<T>) -> Self {
        Self {
            msg_type: icmp.msg_type(),
            code: icmp.code(),
            rest: super::read_u32(icmp.bytes(), 4..8),
        }
    }

    /// Header bytes.
    pub const fn buffer_len(&self) -> usize {
        field::HEADER_LEN
    }

    /// Writes the header into `message` (header room, then the quoted packet already in
    /// place), with the checksum: over the message for ICMPv4, over `ip`'s pseudo-header and
    /// the message for ICMPv6 (whose payload length must be `message.len()`).
    pub fn emit(&self, message: &mut [u8], ip: &IpRepr) -> Result<(), WireError> {
        if message.len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if ip.payload_len() != message.len() {
            return Err(WireError::BadLength);
        }
        message[field::TYPE] = self.msg_type;
        message[field::CODE] = self.code;
        write_u16(message, field::CHECKSUM, 0);
        super::write_u32(message, 4..8, self.rest);
        let pseudo = match ip {
            IpRepr::V4(_) => Sum::default(),
            IpRepr::V6(_) => ip.pseudo_header()?,
        };
        let sum = pseudo.add(Sum::of(message)).checksum();
        write_u16(message, field::CHECKSUM, sum);
        Ok(())
    }
}

/// The IP protocol number of ICMP for `ip`'s version.
pub const fn protocol_for(ip: &IpRepr) -> u8 {
    match ip {
        IpRepr::V4(_) => ip_proto::ICMP,
        IpRepr::V6(_) => ip_proto::ICMPV6,
    }
}

/// An Ethernet + IP + ICMP frame quoting `quoted`, with the EtherType, protocol, lengths and
/// checksums computed (`ip`'s own protocol and payload length are ignored).
pub fn icmp_frame(
    ethernet: EthernetRepr,
    ip: IpRepr,
    icmp: IcmpRepr,
    quoted: &[u8],
) -> Result<Vec<u8>, WireError> {
    let l3 = ethernet.buffer_len();
    let l4 = l3 + ip.buffer_len();
    let len = l4 + icmp.buffer_len() + quoted.len();
    let ip = ip.with_payload(protocol_for(&ip), len - l4);
    let mut frame = vec![0; len];
    EthernetRepr {
        ethertype: ip.ethertype(),
        ..ethernet
    }
    .emit(&mut frame)?;
    ip.emit(&mut frame[l3..])?;
    frame[l4 + icmp.buffer_len()..].copy_from_slice(quoted);
    icmp.emit(&mut frame[l4..], &ip)?;
    Ok(frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::repr::{Ipv4Repr, Ipv6Repr};
    use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, SlicedPacket, TransportSlice};

    const MACS: EthernetRepr = EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: 0,
    };

    #[test]
    fn frag_needed_agrees_with_etherparse() {
        let quoted: Vec<u8> = (0..48u8).collect();
        let ip = IpRepr::V4(Ipv4Repr::new([198, 51, 100, 1], [198, 18, 0, 2]));
        let frame = icmp_frame(MACS, ip, IcmpRepr::frag_needed(1400), &quoted).unwrap();
        let p = SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(NetSlice::Ipv4(v4)) = &p.net else {
            panic!("IPv4")
        };
        let h = v4.header().to_header();
        assert_eq!(h.header_checksum, h.calc_header_checksum());
        let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
            panic!("ICMPv4")
        };
        assert_eq!(
            icmp.icmp_type(),
            Icmpv4Type::DestinationUnreachable(
                etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded {
                    next_hop_mtu: 1400
                }
            )
        );
        assert_eq!(
            icmp.checksum(),
            icmp.icmp_type().calc_checksum(icmp.payload())
        );
        assert_eq!(icmp.payload(), &quoted[..]);
        let view = IcmpPacket::new_checked(&frame[34..]).unwrap();
        assert!(view.verify_checksum(Sum::default()));
        assert_eq!(view.next_hop_mtu(), 1400);
        assert_eq!(IcmpRepr::parse(&view), IcmpRepr::frag_needed(1400));
    }

    #[test]
    fn packet_too_big_agrees_with_etherparse() {
        let quoted = vec![0x77u8; 1232];
        let (src, dst) = (
            [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            [0x20; 16],
        );
        let ip = IpRepr::V6(Ipv6Repr::new(src, dst));
        let frame = icmp_frame(MACS, ip, IcmpRepr::packet_too_big(1400), &quoted).unwrap();
        assert_eq!(frame.len(), 14 + 1280);
        let p = SlicedPacket::from_ethernet(&frame).unwrap();
        let Some(NetSlice::Ipv6(v6)) = &p.net else {
            panic!("IPv6")
        };
        let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
            panic!("ICMPv6")
        };
        assert_eq!(icmp.icmp_type(), Icmpv6Type::PacketTooBig { mtu: 1400 });
        let expect = icmp
            .icmp_type()
            .calc_checksum(
                v6.header().source(),
                v6.header().destination(),
                icmp.payload(),
            )
            .unwrap();
        assert_eq!(icmp.checksum(), expect);
        let view = IcmpPacket::new_checked(&frame[54..]).unwrap();
        let pseudo = crate::checksum::pseudo_header_v6(src, dst, ip_proto::ICMPV6, 1240);
        assert!(view.verify_checksum(pseudo));
        assert_eq!(view.mtu_v6(), 1400);
    }

    #[test]
    fn short_messages_are_refused() {
        assert_eq!(
            IcmpPacket::new_checked(&[3u8, 4, 0][..]).err(),
            Some(WireError::Truncated)
        );
        let ip = IpRepr::V4(Ipv4Repr::new([1; 4], [2; 4])).with_payload(ip_proto::ICMP, 9);
        let mut short = [0u8; 4];
        assert_eq!(
            IcmpRepr::frag_needed(576).emit(&mut short, &ip),
            Err(WireError::Truncated)
        );
        let mut wrong = [0u8; 8];
        assert_eq!(
            IcmpRepr::frag_needed(576).emit(&mut wrong, &ip),
            Err(WireError::BadLength)
        );
    }
}
