//! UDP headers (RFC 768).

use super::{read_u16, write_u16, WireError};
use crate::checksum::Sum;

/// Field offsets of the UDP header.
pub mod field {
    use super::super::Field;

    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Length of header and payload.
    pub const LENGTH: Field = 4..6;
    /// Checksum (zero over IPv4: none computed).
    pub const CHECKSUM: Field = 6..8;
    /// Length of the header.
    pub const HEADER_LEN: usize = 8;
}

/// What a computed checksum of zero is sent as, since zero means "no checksum" (RFC 768).
const ZERO_CHECKSUM_ON_WIRE: u16 = 0xffff;

/// A read or write view of a UDP header and the part of its payload the buffer holds.
///
/// `new_checked` validates the header only: the payload may continue in later segments, so the
/// buffer may be shorter than [`len`](Self::len).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than the header.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }

    /// Wraps `buffer` after checking that it holds the header and that the length field covers
    /// at least the header.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = UdpPacket { buffer };
        packet.check_len()?;
        Ok(packet)
    }

    /// The checks of [`new_checked`](Self::new_checked).
    #[inline]
    pub fn check_len(&self) -> Result<(), WireError> {
        if self.buffer.as_ref().len() < field::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if usize::from(self.len()) < field::HEADER_LEN {
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

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(self.bytes(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(self.bytes(), field::DST_PORT)
    }

    /// Length of header and payload.
    #[allow(clippy::len_without_is_empty)] // a header field, not a container length
    #[inline]
    pub fn len(&self) -> u16 {
        read_u16(self.bytes(), field::LENGTH)
    }

    /// Checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.bytes(), field::CHECKSUM)
    }

    /// The payload bytes this buffer holds: up to [`len`](Self::len), excluding any Ethernet
    /// padding, and possibly fewer when the payload continues in later segments.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let end = self.datagram_end();
        &self.bytes()[field::HEADER_LEN..end]
    }

    fn datagram_end(&self) -> usize {
        usize::from(self.len()).clamp(field::HEADER_LEN, self.bytes().len())
    }

    /// Whether the checksum is correct for a datagram that the buffer holds entirely (up to
    /// [`len`](Self::len)), given the pseudo-header sum. A zero checksum, which over IPv4 means
    /// "none computed", does not verify: check for it first.
    #[inline]
    pub fn verify_checksum(&self, pseudo_header: Sum) -> bool {
        let datagram = &self.bytes()[..self.datagram_end()];
        self.checksum() != 0 && pseudo_header.add(Sum::of(datagram)).checksum() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, port);
    }

    /// Sets the length of header and payload.
    #[inline]
    pub fn set_len(&mut self, len: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, len);
    }

    /// Sets the checksum.
    #[inline]
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, checksum);
    }

    /// The payload bytes this buffer holds, writable (see [`payload`](Self::payload)).
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = self.datagram_end();
        &mut self.buffer.as_mut()[field::HEADER_LEN..end]
    }

    /// Computes the checksum of a datagram that the buffer holds entirely and stores it, given
    /// the pseudo-header sum; a computed zero is sent as `0xffff`.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo_header: Sum) {
        self.set_checksum(0);
        let datagram = &self.bytes()[..self.datagram_end()];
        let csum = match pseudo_header.add(Sum::of(datagram)).checksum() {
            0 => ZERO_CHECKSUM_ON_WIRE,
            csum => csum,
        };
        self.set_checksum(csum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::{pseudo_header_v4, pseudo_header_v6};
    use etherparse::UdpHeader;

    #[test]
    fn reads_and_verifies_like_etherparse() {
        let src = [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let dst = [0x20, 1, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
        let payload = b"odd-length payload!";
        let h = UdpHeader::with_ipv6_checksum(
            5000,
            6000,
            &etherparse::Ipv6Header {
                source: src,
                destination: dst,
                ..Default::default()
            },
            payload,
        )
        .unwrap();
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(payload);
        bytes.extend_from_slice(&[0; 3]); // padding after the datagram
        let pseudo = pseudo_header_v6(src, dst, 17, u32::from(h.length));
        let p = UdpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.src_port(), 5000);
        assert_eq!(p.dst_port(), 6000);
        assert_eq!(p.len(), h.length);
        assert_eq!(p.checksum(), h.checksum);
        assert_eq!(p.payload(), payload);
        assert!(p.verify_checksum(pseudo));

        let mut copy = bytes.clone();
        let mut q = UdpPacket::new_checked(&mut copy[..]).unwrap();
        q.fill_checksum(pseudo);
        assert_eq!(q.checksum(), h.checksum);
    }

    #[test]
    fn rejects_bad_headers() {
        let bytes = [0, 1, 0, 2, 0, 7, 0, 0];
        assert_eq!(
            UdpPacket::new_checked(&bytes[..7]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            UdpPacket::new_checked(&bytes[..]),
            Err(WireError::BadLength)
        );
    }

    #[test]
    fn computed_zero_is_sent_as_ffff() {
        // Choose a payload word that makes the sum come out as negative zero.
        let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
        let mut bytes = vec![0, 1, 0, 2, 0, 10, 0, 0, 0, 0];
        let pseudo = pseudo_header_v4(src, dst, 17, 10);
        let partial = pseudo.add(Sum::of(&bytes)).fold();
        bytes[8..10].copy_from_slice(&(!partial).to_be_bytes());
        let mut p = UdpPacket::new_checked(&mut bytes[..]).unwrap();
        p.fill_checksum(pseudo);
        assert_eq!(p.checksum(), 0xffff);
        assert!(p.verify_checksum(pseudo));
        p.set_checksum(0);
        assert!(!p.verify_checksum(pseudo));
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = vec![0u8; 12];
        let mut p = UdpPacket::new_unchecked(&mut bytes[..]);
        p.set_src_port(53);
        p.set_dst_port(33333);
        p.set_len(12);
        p.set_checksum(0xbeef);
        p.payload_mut().copy_from_slice(b"abcd");
        assert!(p.check_len().is_ok());
        assert_eq!(
            (p.src_port(), p.dst_port(), p.len(), p.checksum()),
            (53, 33333, 12, 0xbeef)
        );
        let (h, rest) = UdpHeader::from_slice(&bytes).unwrap();
        assert_eq!(
            (h.source_port, h.destination_port, h.length, h.checksum),
            (53, 33333, 12, 0xbeef)
        );
        assert_eq!(rest, b"abcd");
    }
}
