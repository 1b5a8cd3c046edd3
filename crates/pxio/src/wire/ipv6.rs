//! IPv6 fixed headers (RFC 8200 §3). Extension headers are not parsed: the classifier passes
//! packets carrying them through untouched.

use super::{read_u16, write_u16, WireError};

/// Field offsets and bit layouts of the IPv6 fixed header.
pub mod field {
    use super::super::Field;

    /// Version, traffic class and flow label, as one big-endian 32-bit word.
    pub const VER_TC_FLOW: Field = 0..4;
    /// Length of the payload after the fixed header, extension headers included.
    pub const PAYLOAD_LEN: Field = 4..6;
    /// Protocol or extension header that follows.
    pub const NEXT_HEADER: usize = 6;
    /// Hop limit.
    pub const HOP_LIMIT: usize = 7;
    /// Source address.
    pub const SRC_ADDR: Field = 8..24;
    /// Destination address.
    pub const DST_ADDR: Field = 24..40;
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;

    /// Shift of the version in [`VER_TC_FLOW`].
    pub const VERSION_SHIFT: u32 = 28;
    /// Shift of the traffic class in [`VER_TC_FLOW`].
    pub const TRAFFIC_CLASS_SHIFT: u32 = 20;
    /// Mask of the traffic class after shifting.
    pub const TRAFFIC_CLASS_MASK: u32 = 0xff;
    /// Mask of the flow label in [`VER_TC_FLOW`].
    pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;
    /// Shift of the DSCP within the traffic class.
    pub const DSCP_SHIFT: u32 = 2;
    /// Mask of the ECN bits within the traffic class.
    pub const ECN_MASK: u8 = 0x03;
}

/// The IP version number of IPv6.
pub const VERSION: u8 = 6;

/// A read or write view of an IPv6 fixed header and the part of its payload the buffer holds.
///
/// `new_checked` validates the fixed header only: the payload may continue in later segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than the header.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }

    /// Wraps `buffer` after checking that it holds the fixed header and that the version is 6.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Ipv6Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// The checks of [`new_checked`](Self::new_checked).
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != VERSION {
            return Err(WireError::BadVersion);
        }
        Ok(())
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn first_word(&self) -> u32 {
        let mut word = [0; 4];
        word.copy_from_slice(&self.bytes()[field::VER_TC_FLOW]);
        u32::from_be_bytes(word)
    }

    /// IP version (6 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.first_word() >> field::VERSION_SHIFT) as u8
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        ((self.first_word() >> field::TRAFFIC_CLASS_SHIFT) & field::TRAFFIC_CLASS_MASK) as u8
    }

    /// Differentiated services code point: the high six bits of the traffic class.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> field::DSCP_SHIFT
    }

    /// Explicit congestion notification: the low two bits of the traffic class.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & field::ECN_MASK
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & field::FLOW_LABEL_MASK
    }

    /// Length of the payload after the fixed header.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        read_u16(self.bytes(), field::PAYLOAD_LEN)
    }

    /// Protocol or extension header after the fixed header.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.bytes()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.bytes()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 16] {
        let mut addr = [0; 16];
        addr.copy_from_slice(&self.bytes()[field::SRC_ADDR]);
        addr
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 16] {
        let mut addr = [0; 16];
        addr.copy_from_slice(&self.bytes()[field::DST_ADDR]);
        addr
    }

    /// The payload bytes this buffer holds: up to [`payload_len`](Self::payload_len), excluding
    /// any Ethernet padding, and possibly fewer when the payload continues in later segments.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = self.payload_end();
        &self.bytes()[field::HEADER_LEN..end]
    }

    fn payload_end(&self) -> usize {
        (field::HEADER_LEN + usize::from(self.payload_len())).min(self.bytes().len())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    fn set_first_word(&mut self, word: u32) {
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&word.to_be_bytes());
    }

    /// Sets the traffic class.
    #[inline]
    pub fn set_traffic_class(&mut self, tc: u8) {
        let mask = field::TRAFFIC_CLASS_MASK << field::TRAFFIC_CLASS_SHIFT;
        let word = (self.first_word() & !mask) | (u32::from(tc) << field::TRAFFIC_CLASS_SHIFT);
        self.set_first_word(word);
    }

    /// Sets the DSCP, keeping the ECN bits.
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let tc = (dscp << field::DSCP_SHIFT) | self.ecn();
        self.set_traffic_class(tc);
    }

    /// Sets the ECN bits, keeping the DSCP.
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let tc = (self.traffic_class() & !field::ECN_MASK) | (ecn & field::ECN_MASK);
        self.set_traffic_class(tc);
    }

    /// Sets the flow label (the high 12 bits of `label` are ignored).
    #[inline]
    pub fn set_flow_label(&mut self, label: u32) {
        let word = (self.first_word() & !field::FLOW_LABEL_MASK) | (label & field::FLOW_LABEL_MASK);
        self.set_first_word(word);
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::PAYLOAD_LEN, len);
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, next_header: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = next_header;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, hop_limit: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = hop_limit;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 16]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 16]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr);
    }

    /// The payload bytes this buffer holds, writable (see [`payload`](Self::payload)).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.payload_end();
        &mut self.buffer.as_mut()[field::HEADER_LEN..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let h = etherparse::Ipv6Header {
            traffic_class: 0xb9,
            flow_label: 0x12345.try_into().unwrap(),
            payload_length: 4,
            next_header: etherparse::IpNumber::UDP,
            hop_limit: 63,
            source: [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            destination: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        };
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(&[1, 2, 3, 4, 0, 0]);
        bytes
    }

    #[test]
    fn reads_fields() {
        let bytes = header();
        let p = Ipv6Packet::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.dscp(), 0xb9 >> 2);
        assert_eq!(p.ecn(), 0b01);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 4);
        assert_eq!(p.next_header(), 17);
        assert_eq!(p.hop_limit(), 63);
        assert_eq!(p.src_addr()[..4], [0x20, 1, 0x0d, 0xb8]);
        assert_eq!(p.dst_addr()[15], 2);
        assert_eq!(p.payload(), &[1, 2, 3, 4]);
    }

    #[test]
    fn rejects_bad_headers() {
        let mut bytes = header();
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..39]),
            Err(WireError::Truncated)
        );
        bytes[0] = 0x45;
        assert_eq!(
            Ipv6Packet::new_checked(&bytes[..]),
            Err(WireError::BadVersion)
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = header();
        let mut p = Ipv6Packet::new_checked(&mut bytes[..]).unwrap();
        p.set_dscp(46);
        assert_eq!((p.dscp(), p.ecn()), (46, 0b01));
        p.set_ecn(0b10);
        assert_eq!((p.dscp(), p.ecn()), (46, 0b10));
        p.set_traffic_class(0x03);
        assert_eq!(p.traffic_class(), 0x03);
        p.set_flow_label(0xfff_abcde);
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x03);
        p.set_payload_len(100);
        p.set_next_header(6);
        p.set_hop_limit(1);
        p.set_src_addr([7; 16]);
        p.set_dst_addr([8; 16]);
        assert_eq!(p.payload_len(), 100);
        // Only the six bytes the buffer holds.
        assert_eq!(p.payload_mut().len(), 6);
        let h = etherparse::Ipv6Header::from_slice(&bytes).unwrap().0;
        assert_eq!(h.traffic_class, 0x03);
        assert_eq!(h.flow_label.value(), 0xabcde);
        assert_eq!(h.payload_length, 100);
        assert_eq!(h.next_header, etherparse::IpNumber::TCP);
        assert_eq!(h.hop_limit, 1);
        assert_eq!((h.source, h.destination), ([7; 16], [8; 16]));
    }
}
