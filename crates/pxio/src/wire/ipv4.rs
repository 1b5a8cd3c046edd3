//! IPv4 headers with options (RFC 791).

use super::{read_u16, write_u16, WireError};
use crate::checksum::Sum;

/// Field offsets and bit layouts of the IPv4 header.
pub mod field {
    use super::super::Field;

    /// Version (high nibble) and IHL (low nibble).
    pub const VER_IHL: usize = 0;
    /// DSCP (high six bits) and ECN (low two bits).
    pub const DSCP_ECN: usize = 1;
    /// Total length of the datagram, header included.
    pub const LENGTH: Field = 2..4;
    /// Identification.
    pub const IDENT: Field = 4..6;
    /// Flags (high three bits) and fragment offset.
    pub const FLG_OFF: Field = 6..8;
    /// Time to live.
    pub const TTL: usize = 8;
    /// Protocol of the payload.
    pub const PROTOCOL: usize = 9;
    /// Header checksum.
    pub const CHECKSUM: Field = 10..12;
    /// Source address.
    pub const SRC_ADDR: Field = 12..16;
    /// Destination address.
    pub const DST_ADDR: Field = 16..20;
    /// Length of a header without options, the minimum.
    pub const HEADER_LEN: usize = 20;
    /// Length of a header with the most options IHL can express.
    pub const MAX_HEADER_LEN: usize = 60;

    /// Shift of the version in [`VER_IHL`].
    pub const VERSION_SHIFT: u32 = 4;
    /// Mask of the IHL in [`VER_IHL`].
    pub const IHL_MASK: u8 = 0x0f;
    /// IHL counts 32-bit words.
    pub const IHL_UNIT: usize = 4;
    /// Shift of the DSCP in [`DSCP_ECN`].
    pub const DSCP_SHIFT: u32 = 2;
    /// Mask of the ECN bits in [`DSCP_ECN`].
    pub const ECN_MASK: u8 = 0x03;
    /// Don't-fragment flag in [`FLG_OFF`].
    pub const FLAG_DF: u16 = 0x4000;
    /// More-fragments flag in [`FLG_OFF`].
    pub const FLAG_MF: u16 = 0x2000;
    /// Fragment offset bits in [`FLG_OFF`].
    pub const FRAG_OFFSET_MASK: u16 = 0x1fff;
    /// Fragment offsets count 8-byte units.
    pub const FRAG_OFFSET_UNIT: u16 = 8;
}

/// The IP version number of IPv4.
pub const VERSION: u8 = 4;

/// A read or write view of an IPv4 header and the part of its payload that the buffer holds.
///
/// `new_checked` validates the header only: the payload may continue in later segments of the
/// packet, so the buffer may be shorter than [`total_len`](Self::total_len).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than the header.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }

    /// Wraps `buffer` after checking the version, that IHL is at least 5, that the buffer holds
    /// the whole header with options, and that the total length covers the header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = Ipv4Packet { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// The checks of [`new_checked`](Self::new_checked).
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        let len = self.buffer.as_ref().len();
        if len < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if self.version() != VERSION {
            return Err(WireError::BadVersion);
        }
        let header_len = self.header_len();
        if header_len < field::HEADER_LEN {
            return Err(WireError::BadHeaderLength);
        }
        if len < header_len {
            return Err(WireError::Truncated);
        }
        if usize::from(self.total_len()) < header_len {
            return Err(WireError::BadLength);
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

    /// IP version (4 for a checked packet).
    #[inline]
    pub fn version(&self) -> u8 {
        self.bytes()[field::VER_IHL] >> field::VERSION_SHIFT
    }

    /// Internet header length, in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.bytes()[field::VER_IHL] & field::IHL_MASK
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * field::IHL_UNIT
    }

    /// Differentiated services code point.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.bytes()[field::DSCP_ECN] >> field::DSCP_SHIFT
    }

    /// Explicit congestion notification bits.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.bytes()[field::DSCP_ECN] & field::ECN_MASK
    }

    /// Total length of the datagram, header included.
    #[inline]
    pub fn total_len(&self) -> u16 {
        read_u16(self.bytes(), field::LENGTH)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        read_u16(self.bytes(), field::IDENT)
    }

    /// The don't-fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        read_u16(self.bytes(), field::FLG_OFF) & field::FLAG_DF != 0
    }

    /// The more-fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        read_u16(self.bytes(), field::FLG_OFF) & field::FLAG_MF != 0
    }

    /// Fragment offset in bytes (the field counts 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.bytes(), field::FLG_OFF) & field::FRAG_OFFSET_MASK) * field::FRAG_OFFSET_UNIT
    }

    /// Whether this datagram is a fragment (more-fragments set or a nonzero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        self.more_frags() || self.frag_offset() != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.bytes()[field::TTL]
    }

    /// Protocol of the payload.
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.bytes()[field::PROTOCOL]
    }

    /// Header checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.bytes(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 4] {
        let mut addr = [0; 4];
        addr.copy_from_slice(&self.bytes()[field::SRC_ADDR]);
        addr
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 4] {
        let mut addr = [0; 4];
        addr.copy_from_slice(&self.bytes()[field::DST_ADDR]);
        addr
    }

    /// The options, between the fixed header and the payload.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.bytes()[field::HEADER_LEN..self.header_len()]
    }

    /// The header, options included.
    #[inline]
    pub fn header(&self) -> &[u8] {
        &self.bytes()[..self.header_len()]
    }

    /// Whether the header checksum is correct.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        Sum::of(self.header()).checksum() == 0
    }

    /// The payload bytes this buffer holds: up to [`total_len`](Self::total_len), excluding any
    /// Ethernet padding after it, and possibly fewer when the payload continues in later
    /// segments.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        let end = usize::from(self.total_len()).clamp(start, self.bytes().len());
        &self.bytes()[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the DSCP, keeping the ECN bits.
    #[inline]
    pub fn set_dscp(&mut self, dscp: u8) {
        let byte = &mut self.bytes_mut()[field::DSCP_ECN];
        *byte = (dscp << field::DSCP_SHIFT) | (*byte & field::ECN_MASK);
    }

    /// Sets the ECN bits, keeping the DSCP.
    #[inline]
    pub fn set_ecn(&mut self, ecn: u8) {
        let byte = &mut self.bytes_mut()[field::DSCP_ECN];
        *byte = (*byte & !field::ECN_MASK) | (ecn & field::ECN_MASK);
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, len: u16) {
        write_u16(self.bytes_mut(), field::LENGTH, len);
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, ident: u16) {
        write_u16(self.bytes_mut(), field::IDENT, ident);
    }

    /// Sets or clears the don't-fragment flag.
    #[inline]
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flag(field::FLAG_DF, value);
    }

    /// Sets or clears the more-fragments flag.
    #[inline]
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flag(field::FLAG_MF, value);
    }

    /// Sets the fragment offset, in bytes (a multiple of 8: the field counts 8-byte units, and
    /// the remainder is dropped), keeping the flags.
    #[inline]
    pub fn set_frag_offset(&mut self, offset: u16) {
        let old = read_u16(self.bytes(), field::FLG_OFF);
        let units = (offset / field::FRAG_OFFSET_UNIT) & field::FRAG_OFFSET_MASK;
        write_u16(
            self.bytes_mut(),
            field::FLG_OFF,
            (old & !field::FRAG_OFFSET_MASK) | units,
        );
    }

    fn set_flag(&mut self, flag: u16, value: bool) {
        let old = read_u16(self.bytes(), field::FLG_OFF);
        let new = if value { old | flag } else { old & !flag };
        write_u16(self.bytes_mut(), field::FLG_OFF, new);
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.bytes_mut()[field::TTL] = ttl;
    }

    /// Sets the protocol of the payload.
    #[inline]
    pub fn set_protocol(&mut self, protocol: u8) {
        self.bytes_mut()[field::PROTOCOL] = protocol;
    }

    /// Sets the header checksum.
    #[inline]
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.bytes_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 4]) {
        self.bytes_mut()[field::SRC_ADDR].copy_from_slice(&addr);
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 4]) {
        self.bytes_mut()[field::DST_ADDR].copy_from_slice(&addr);
    }

    /// Computes the header checksum over the header (options included) and stores it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let checksum = Sum::of(self.header()).checksum();
        self.set_checksum(checksum);
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.bytes_mut()[field::HEADER_LEN..end]
    }

    /// The payload bytes this buffer holds, writable (see [`payload`](Self::payload)).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        let end = usize::from(self.total_len()).clamp(start, self.bytes().len());
        &mut self.bytes_mut()[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic header: 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7.
    const CLASSIC: [u8; 20] = [
        0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00,
        0x01, 0xc0, 0xa8, 0x00, 0xc7,
    ];

    #[test]
    fn reads_classic_header() {
        let p = Ipv4Packet::new_checked(&CLASSIC[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.ihl(), 5);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp(), 0);
        assert_eq!(p.ecn(), 0);
        assert_eq!(p.total_len(), 0x73);
        assert_eq!(p.ident(), 0);
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.checksum(), 0xb861);
        assert_eq!(p.src_addr(), [192, 168, 0, 1]);
        assert_eq!(p.dst_addr(), [192, 168, 0, 199]);
        assert!(p.options().is_empty());
        assert!(p.verify_checksum());
        // The buffer holds none of the 0x73 - 20 payload bytes.
        assert!(p.payload().is_empty());
    }

    #[test]
    fn fill_checksum_reproduces_known_value() {
        let mut bytes = CLASSIC;
        let mut p = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        p.set_checksum(0);
        assert!(!p.verify_checksum());
        p.fill_checksum();
        assert_eq!(p.checksum(), 0xb861);
    }

    #[test]
    fn rejects_bad_headers() {
        assert_eq!(
            Ipv4Packet::new_checked(&CLASSIC[..19]),
            Err(WireError::Truncated)
        );
        let mut b = CLASSIC;
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(WireError::BadVersion));
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]),
            Err(WireError::BadHeaderLength)
        );
        b[0] = 0x46;
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(WireError::Truncated));
        let mut b = CLASSIC;
        b[3] = 19;
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(WireError::BadLength));
    }

    #[test]
    fn options_and_payload() {
        let mut bytes = [0u8; 40];
        bytes[..20].copy_from_slice(&CLASSIC);
        bytes[0] = 0x46;
        bytes[2..4].copy_from_slice(&30u16.to_be_bytes());
        bytes[20..24].copy_from_slice(&[0x94, 0x04, 0x00, 0x00]); // router alert
        bytes[24..30].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        let mut p = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.options(), &[0x94, 0x04, 0x00, 0x00]);
        // Stops at total length; the trailing ten bytes are Ethernet padding.
        assert_eq!(p.payload(), &[1, 2, 3, 4, 5, 6]);
        p.fill_checksum();
        assert!(p.verify_checksum());
        p.options_mut()[1] = 0x05;
        assert!(!p.verify_checksum());
        p.payload_mut()[0] = 9;
        assert_eq!(p.payload()[0], 9);
        // A total length shrunk below the header leaves an empty payload rather than a panic.
        p.set_total_len(4);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = CLASSIC;
        let mut p = Ipv4Packet::new_checked(&mut bytes[..]).unwrap();
        p.set_ecn(0b11);
        p.set_dscp(46);
        assert_eq!((p.dscp(), p.ecn()), (46, 0b11));
        p.set_ecn(0b01);
        assert_eq!((p.dscp(), p.ecn()), (46, 0b01));
        p.set_total_len(1500);
        p.set_ident(0xbeef);
        p.set_dont_frag(false);
        p.set_more_frags(true);
        p.set_ttl(3);
        p.set_protocol(6);
        p.set_src_addr([10, 0, 0, 1]);
        p.set_dst_addr([10, 0, 0, 2]);
        p.set_checksum(0x1234);
        assert_eq!(p.total_len(), 1500);
        assert_eq!(p.ident(), 0xbeef);
        assert!(!p.dont_frag());
        assert!(p.more_frags());
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 3);
        assert_eq!(p.protocol(), 6);
        assert_eq!(p.src_addr(), [10, 0, 0, 1]);
        assert_eq!(p.dst_addr(), [10, 0, 0, 2]);
        assert_eq!(p.checksum(), 0x1234);
        p.fill_checksum();
        let header = etherparse::Ipv4HeaderSlice::from_slice(&bytes).unwrap();
        assert_eq!(
            header.header_checksum(),
            header.to_header().calc_header_checksum()
        );
        assert_eq!(header.total_len(), 1500);
        assert_eq!(header.identification(), 0xbeef);
        assert_eq!(header.dcp().value(), 46);
    }
}
