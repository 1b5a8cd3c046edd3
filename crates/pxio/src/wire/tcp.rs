//! TCP headers with options (RFC 9293 §3.1).

use super::{read_u16, read_u32, write_u16, write_u32, WireError};
use crate::checksum::{self, Sum};

/// Field offsets and bit layouts of the TCP header, and the option kinds we read.
pub mod field {
    use super::super::Field;

    /// Source port.
    pub const SRC_PORT: Field = 0..2;
    /// Destination port.
    pub const DST_PORT: Field = 2..4;
    /// Sequence number.
    pub const SEQ_NUM: Field = 4..8;
    /// Acknowledgment number.
    pub const ACK_NUM: Field = 8..12;
    /// Data offset (high nibble) and reserved bits.
    pub const DATA_OFFSET: usize = 12;
    /// Control bits, see [`tcp_flags`](super::tcp_flags).
    pub const FLAGS: usize = 13;
    /// Receive window.
    pub const WINDOW: Field = 14..16;
    /// Checksum.
    pub const CHECKSUM: Field = 16..18;
    /// Urgent pointer.
    pub const URGENT: Field = 18..20;
    /// Length of a header without options, the minimum.
    pub const HEADER_LEN: usize = 20;
    /// Length of a header with the most options the data offset can express.
    pub const MAX_HEADER_LEN: usize = 60;

    /// Shift of the data offset in [`DATA_OFFSET`].
    pub const DATA_OFFSET_SHIFT: u32 = 4;
    /// The data offset counts 32-bit words.
    pub const DATA_OFFSET_UNIT: usize = 4;

    /// Option kind: end of option list.
    pub const OPT_END: u8 = 0;
    /// Option kind: no-operation (padding).
    pub const OPT_NOP: u8 = 1;
    /// Option kind: maximum segment size.
    pub const OPT_MSS: u8 = 2;
    /// Length of the MSS option, kind and length bytes included.
    pub const OPT_MSS_LEN: usize = 4;
    /// Offset of the length byte within an option.
    pub const OPT_LEN_AT: usize = 1;
    /// The MSS value within the MSS option.
    pub const OPT_MSS_VALUE: Field = 2..4;
    /// Shortest valid length of a kind-length-value option.
    pub const OPT_MIN_LEN: usize = 2;
}

/// The checksum sums 16-bit words; the TCP header starts on a word boundary.
const CHECKSUM_WORD_LEN: usize = 2;

/// TCP control bits, as they sit in the flags byte.
pub mod tcp_flags {
    /// No more data from sender.
    pub const FIN: u8 = 0x01;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN echo (RFC 3168).
    pub const ECE: u8 = 0x40;
    /// Congestion window reduced (RFC 3168).
    pub const CWR: u8 = 0x80;
}

/// The [`tcp_flags`] constants as associated constants, for `TcpFlags::SYN`-style paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpFlags;

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: u8 = tcp_flags::FIN;
    /// Synchronize sequence numbers.
    pub const SYN: u8 = tcp_flags::SYN;
    /// Reset the connection.
    pub const RST: u8 = tcp_flags::RST;
    /// Push function.
    pub const PSH: u8 = tcp_flags::PSH;
    /// Acknowledgment field is significant.
    pub const ACK: u8 = tcp_flags::ACK;
    /// Urgent pointer field is significant.
    pub const URG: u8 = tcp_flags::URG;
    /// ECN echo (RFC 3168).
    pub const ECE: u8 = tcp_flags::ECE;
    /// Congestion window reduced (RFC 3168).
    pub const CWR: u8 = tcp_flags::CWR;
}

/// A read or write view of a TCP header and the part of its payload the buffer holds.
///
/// `new_checked` validates the header only. The view does not know where the segment ends
/// (that comes from the IP header), so [`payload`](Self::payload) is everything after the
/// header; slice the buffer to the segment before using the checksum helpers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than the header.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
    }

    /// Wraps `buffer` after checking that the data offset is at least 5 and that the buffer
    /// holds the whole header with options.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let packet = TcpPacket { buffer };
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
        let header_len = self.header_len();
        if header_len < field::HEADER_LEN {
            return Err(WireError::BadHeaderLength);
        }
        if len < header_len {
            return Err(WireError::Truncated);
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        read_u32(self.bytes(), field::SEQ_NUM)
    }

    /// Acknowledgment number.
    #[inline]
    pub fn ack_number(&self) -> u32 {
        read_u32(self.bytes(), field::ACK_NUM)
    }

    /// Data offset, in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.bytes()[field::DATA_OFFSET] >> field::DATA_OFFSET_SHIFT
    }

    /// Header length in bytes, options included (data offset × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * field::DATA_OFFSET_UNIT
    }

    /// Control bits; test them with [`tcp_flags`].
    #[inline]
    pub fn flags(&self) -> u8 {
        self.bytes()[field::FLAGS]
    }

    /// Whether every bit of `flags` is set.
    #[inline]
    pub fn has_flags(&self, flags: u8) -> bool {
        self.flags() & flags == flags
    }

    /// Receive window (unscaled).
    #[inline]
    pub fn window(&self) -> u16 {
        read_u16(self.bytes(), field::WINDOW)
    }

    /// Checksum.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.bytes(), field::CHECKSUM)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent_ptr(&self) -> u16 {
        read_u16(self.bytes(), field::URGENT)
    }

    /// The options, between the fixed header and the payload.
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.bytes()[field::HEADER_LEN..self.header_len()]
    }

    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.bytes()[self.header_len()..]
    }

    /// Where the MSS option's value lies in the header, if the option is present and well
    /// formed.
    fn mss_field(&self) -> Option<super::Field> {
        let at = find_option(self.options(), field::OPT_MSS)?;
        let len = usize::from(self.options()[at + field::OPT_LEN_AT]);
        let start = field::HEADER_LEN + at;
        (len == field::OPT_MSS_LEN)
            .then_some(start + field::OPT_MSS_VALUE.start..start + field::OPT_MSS_VALUE.end)
    }

    /// The maximum segment size option, if present and well formed.
    #[inline]
    pub fn mss(&self) -> Option<u16> {
        Some(read_u16(self.bytes(), self.mss_field()?))
    }

    /// Whether the checksum is correct for a segment that fills the whole buffer, given the
    /// pseudo-header sum ([`checksum::pseudo_header_v4`] or [`checksum::pseudo_header_v6`]).
    #[inline]
    pub fn verify_checksum(&self, pseudo_header: Sum) -> bool {
        pseudo_header.add(Sum::of(self.bytes())).checksum() == 0
    }
}

/// Finds the first option of `kind` in `options` and returns its offset; `None` when it is
/// absent or the list is malformed before reaching it.
fn find_option(options: &[u8], kind: u8) -> Option<usize> {
    let mut at = 0;
    while let Some(&this) = options.get(at) {
        match this {
            field::OPT_END => return None,
            field::OPT_NOP => at += 1,
            _ => {
                let len = usize::from(*options.get(at + field::OPT_LEN_AT)?);
                if len < field::OPT_MIN_LEN || at + len > options.len() {
                    return None;
                }
                if this == kind {
                    return Some(at);
                }
                at += len;
            }
        }
    }
    None
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, port: u16) {
        write_u16(self.bytes_mut(), field::SRC_PORT, port);
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, port: u16) {
        write_u16(self.bytes_mut(), field::DST_PORT, port);
    }

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, seq: u32) {
        write_u32(self.bytes_mut(), field::SEQ_NUM, seq);
    }

    /// Sets the acknowledgment number.
    #[inline]
    pub fn set_ack_number(&mut self, ack: u32) {
        write_u32(self.bytes_mut(), field::ACK_NUM, ack);
    }

    /// Sets the control bits.
    #[inline]
    pub fn set_flags(&mut self, flags: u8) {
        self.bytes_mut()[field::FLAGS] = flags;
    }

    /// Sets the receive window.
    #[inline]
    pub fn set_window(&mut self, window: u16) {
        write_u16(self.bytes_mut(), field::WINDOW, window);
    }

    /// Sets the checksum.
    #[inline]
    pub fn set_checksum(&mut self, checksum: u16) {
        write_u16(self.bytes_mut(), field::CHECKSUM, checksum);
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent_ptr(&mut self, ptr: u16) {
        write_u16(self.bytes_mut(), field::URGENT, ptr);
    }

    /// Rewrites the MSS option's value in place; false if the header carries no (well-formed)
    /// MSS option. Leaves the checksum alone: see
    /// [`set_mss_fix_checksum`](Self::set_mss_fix_checksum).
    #[inline]
    pub fn set_mss(&mut self, mss: u16) -> bool {
        match self.mss_field() {
            Some(value) => {
                write_u16(self.bytes_mut(), value, mss);
                true
            }
            None => false,
        }
    }

    /// Like [`set_mss`](Self::set_mss), and patches the checksum incrementally (RFC 1624), even
    /// when the option sits at an odd offset after a single NOP.
    #[inline]
    pub fn set_mss_fix_checksum(&mut self, mss: u16) -> bool {
        let Some(value) = self.mss_field() else {
            return false;
        };
        let odd = value.start % CHECKSUM_WORD_LEN != 0;
        let old = read_u16(self.bytes(), value.clone());
        write_u16(self.bytes_mut(), value, mss);
        // A 16-bit value at an odd offset adds to the sum with its bytes swapped.
        let (old_word, new_word) = if !odd {
            (old, mss)
        } else {
            (old.swap_bytes(), mss.swap_bytes())
        };
        let csum = checksum::update(self.checksum(), old_word, new_word);
        self.set_checksum(csum);
        true
    }

    /// The options, writable.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.bytes_mut()[field::HEADER_LEN..end]
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.bytes_mut()[start..]
    }

    /// Computes the checksum of a segment that fills the whole buffer and stores it, given the
    /// pseudo-header sum.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo_header: Sum) {
        self.set_checksum(0);
        let csum = pseudo_header.add(Sum::of(self.bytes())).checksum();
        self.set_checksum(csum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{TcpHeader, TcpOptionElement};

    const SRC: [u8; 4] = [10, 1, 2, 3];
    const DST: [u8; 4] = [10, 4, 5, 6];

    fn segment(options: &[TcpOptionElement], payload: &[u8]) -> (TcpHeader, Vec<u8>) {
        let mut h = TcpHeader::new(40000, 443, 0x0102_0304, 29200);
        h.syn = true;
        h.ack = true;
        h.ece = true;
        h.acknowledgment_number = 0xa0b0_c0d0;
        h.urgent_pointer = 7;
        h.set_options(options).unwrap();
        h.checksum = h.calc_checksum_ipv4_raw(SRC, DST, payload).unwrap();
        let mut bytes = h.to_bytes().to_vec();
        bytes.extend_from_slice(payload);
        (h, bytes)
    }

    fn pseudo(len: usize) -> Sum {
        checksum::pseudo_header_v4(SRC, DST, 6, len as u16)
    }

    #[test]
    fn reads_fields_like_etherparse() {
        use TcpOptionElement::*;
        let opts = [
            MaximumSegmentSize(1460),
            Noop,
            WindowScale(7),
            SelectiveAcknowledgementPermitted,
            Noop,
            Noop,
        ];
        let (h, bytes) = segment(&opts, b"hello");
        let p = TcpPacket::new_checked(&bytes[..]).unwrap();
        assert_eq!(p.src_port(), h.source_port);
        assert_eq!(p.dst_port(), h.destination_port);
        assert_eq!(p.seq_number(), h.sequence_number);
        assert_eq!(p.ack_number(), h.acknowledgment_number);
        assert_eq!(p.header_len(), h.header_len());
        assert_eq!(usize::from(p.data_offset()) * 4, h.header_len());
        assert_eq!(p.flags(), tcp_flags::SYN | tcp_flags::ACK | tcp_flags::ECE);
        assert!(p.has_flags(TcpFlags::SYN | TcpFlags::ACK));
        assert!(!p.has_flags(tcp_flags::FIN));
        assert_eq!(p.window(), h.window_size);
        assert_eq!(p.checksum(), h.checksum);
        assert_eq!(p.urgent_ptr(), 7);
        assert_eq!(p.options(), h.options.as_slice());
        assert_eq!(p.payload(), b"hello");
        assert_eq!(p.mss(), Some(1460));
        assert!(p.verify_checksum(pseudo(bytes.len())));
    }

    #[test]
    fn rejects_bad_headers() {
        let (_, mut bytes) = segment(&[TcpOptionElement::MaximumSegmentSize(1460)], &[]);
        assert_eq!(
            TcpPacket::new_checked(&bytes[..19]),
            Err(WireError::Truncated)
        );
        assert_eq!(
            TcpPacket::new_checked(&bytes[..23]),
            Err(WireError::Truncated)
        );
        bytes[12] = 4 << 4;
        assert_eq!(
            TcpPacket::new_checked(&bytes[..]),
            Err(WireError::BadHeaderLength)
        );
    }

    #[test]
    fn mss_absent_or_malformed() {
        use TcpOptionElement::*;
        let (_, bytes) = segment(&[Noop, WindowScale(3)], &[]);
        let mut bytes = bytes;
        assert_eq!(TcpPacket::new_checked(&bytes[..]).unwrap().mss(), None);
        assert!(!TcpPacket::new_checked(&mut bytes[..]).unwrap().set_mss(536));
        // MSS with a wrong length byte; and an option running past the header.
        let mut raw = segment(&[], &[]).1;
        raw[12] = 6 << 4;
        raw.extend_from_slice(&[2, 3, 5, 0]);
        assert_eq!(TcpPacket::new_checked(&raw[..]).unwrap().mss(), None);
        raw[21] = 9;
        assert_eq!(TcpPacket::new_checked(&raw[..]).unwrap().mss(), None);
        raw[21] = 0;
        assert_eq!(TcpPacket::new_checked(&raw[..]).unwrap().mss(), None);
        // End of list before the MSS.
        raw[20..24].copy_from_slice(&[0, 2, 4, 5]);
        assert_eq!(TcpPacket::new_checked(&raw[..]).unwrap().mss(), None);
    }

    #[test]
    fn set_mss_rewrites_in_place() {
        use TcpOptionElement::*;
        for opts in [
            &[MaximumSegmentSize(1460), Noop, Noop, Noop, Noop][..],
            &[Noop, MaximumSegmentSize(8960), Noop, Noop, Noop][..],
            &[Noop, Noop, Noop, MaximumSegmentSize(65495), Noop][..],
        ] {
            let (_, mut bytes) = segment(opts, b"xyz");
            let mut plain = bytes.clone();
            let mut p = TcpPacket::new_checked(&mut plain[..]).unwrap();
            assert!(p.set_mss(1400));
            assert_eq!(p.mss(), Some(1400));

            let len = bytes.len();
            let mut p = TcpPacket::new_checked(&mut bytes[..]).unwrap();
            assert!(p.set_mss_fix_checksum(1400));
            assert_eq!(p.mss(), Some(1400));
            assert!(p.verify_checksum(pseudo(len)), "{opts:?}");
            let parsed = TcpHeader::from_slice(&bytes).unwrap().0;
            assert!(parsed
                .options_iterator()
                .any(|o| o == Ok(MaximumSegmentSize(1400))));
        }
    }

    #[test]
    fn setters_round_trip() {
        let (_, mut bytes) = segment(&[TcpOptionElement::MaximumSegmentSize(1460)], b"data");
        let len = bytes.len();
        let mut p = TcpPacket::new_checked(&mut bytes[..]).unwrap();
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_seq_number(0xffff_fff0);
        p.set_ack_number(5);
        p.set_flags(tcp_flags::FIN | tcp_flags::PSH | tcp_flags::CWR);
        p.set_window(1234);
        p.set_urgent_ptr(0);
        p.options_mut()[3] = 0x00;
        p.payload_mut()[0] = b'D';
        p.fill_checksum(pseudo(len));
        assert!(p.verify_checksum(pseudo(len)));
        assert_eq!(p.flags(), 0x89);
        assert_eq!(p.mss(), Some(1280));
        p.set_checksum(0xabcd);
        assert_eq!(p.checksum(), 0xabcd);

        let bytes = p.into_inner();
        let h = TcpHeader::from_slice(bytes).unwrap().0;
        assert_eq!((h.source_port, h.destination_port), (1, 2));
        assert_eq!(h.sequence_number, 0xffff_fff0);
        assert_eq!(h.acknowledgment_number, 5);
        assert!(h.fin && h.psh && h.cwr && !h.syn && !h.ack);
        assert_eq!(h.window_size, 1234);
        assert_eq!(&bytes[bytes.len() - 4..], b"Data");
    }
}
