//! Ethernet II frames with up to two VLAN tags (IEEE 802.1Q, 802.1ad).

use super::{read_u16, write_u16, WireError};

/// Field offsets of an Ethernet II header, and of the VLAN tags that may follow the addresses.
pub mod field {
    use super::super::Field;

    /// Destination MAC address.
    pub const DST_ADDR: Field = 0..6;
    /// Source MAC address.
    pub const SRC_ADDR: Field = 6..12;
    /// EtherType of an untagged frame, or TPID of the first VLAN tag.
    pub const ETHERTYPE: Field = 12..14;
    /// Length of an untagged header.
    pub const HEADER_LEN: usize = 14;
    /// Length of one VLAN tag (TPID and TCI); each tag pushes the EtherType this far back.
    pub const VLAN_TAG_LEN: usize = 4;
    /// Offset of the TCI of tag `n` relative to the TPID of tag `n`.
    pub const TCI_FROM_TPID: usize = 2;
    /// VLAN identifier bits of a TCI.
    pub const VLAN_ID_MASK: u16 = 0x0fff;
    /// Most VLAN tags we parse: an 802.1ad outer tag and an 802.1Q inner tag.
    pub const MAX_VLAN_TAGS: usize = 2;
}

/// EtherType values the classifier distinguishes.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IEEE 802.1Q VLAN tag (C-tag).
    pub const VLAN: u16 = 0x8100;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// IEEE 802.1ad provider bridging tag (S-tag, "QinQ").
    pub const QINQ: u16 = 0x88a8;
    /// LLDP.
    pub const LLDP: u16 = 0x88cc;
}

/// Whether `value`, read where an EtherType belongs, announces a VLAN tag.
pub fn is_vlan_tpid(value: u16) -> bool {
    value == ethertype::VLAN || value == ethertype::QINQ
}

/// Where the EtherType field sits after `tags` VLAN tags.
fn ethertype_field(tags: usize) -> super::Field {
    let start = field::ETHERTYPE.start + tags * field::VLAN_TAG_LEN;
    start..start + field::ETHERTYPE.len()
}

/// Walks the VLAN tags at the start of `buffer` and returns `(tags, header_len, ethertype)`.
///
/// When `buffer` ends before the header does, returns `Err(n)` where `n` is the shortest
/// length that would let the walk make progress (the header needs at least `n` bytes).
pub(crate) fn walk_header(buffer: &[u8]) -> Result<(usize, usize, u16), usize> {
    let mut tags = 0;
    loop {
        let ethertype = ethertype_field(tags);
        if buffer.len() < ethertype.end {
            return Err(ethertype.end);
        }
        let value = read_u16(buffer, ethertype.clone());
        if !is_vlan_tpid(value) || tags == field::MAX_VLAN_TAGS {
            let header_len = field::HEADER_LEN + tags * field::VLAN_TAG_LEN;
            // The EtherType ends the header, so `buffer.len() >= header_len` here.
            return Ok((tags, header_len, value));
        }
        tags += 1;
    }
}

/// A read or write view of an Ethernet II frame.
///
/// A third VLAN tag is not parsed: its TPID then reads as the frame's [`ethertype`](Self::ethertype).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` without checks; accessors may panic if it is shorter than the header.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }

    /// Wraps `buffer` after checking that it holds the whole header, VLAN tags included.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        walk_header(buffer.as_ref()).map_err(|_| WireError::Truncated)?;
        Ok(EthernetFrame { buffer })
    }

    /// Gives the buffer back.
    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn walk(&self) -> (usize, usize, u16) {
        // A checked buffer always walks; an unchecked one reads as an untagged frame.
        walk_header(self.buffer.as_ref()).unwrap_or((0, field::HEADER_LEN, 0))
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut addr = [0; 6];
        addr.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        addr
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        let mut addr = [0; 6];
        addr.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        addr
    }

    /// Number of VLAN tags (0 to 2).
    #[inline]
    pub fn vlan_count(&self) -> usize {
        self.walk().0
    }

    /// Header length, VLAN tags included.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.walk().1
    }

    /// The EtherType of the payload, after any VLAN tags.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        self.walk().2
    }

    /// The TPID of VLAN tag `index` (0 is the outermost).
    #[inline]
    pub fn vlan_tpid(&self, index: usize) -> Option<u16> {
        (index < self.vlan_count()).then(|| read_u16(self.buffer.as_ref(), ethertype_field(index)))
    }

    /// The tag control information (PCP, DEI, VLAN ID) of VLAN tag `index` (0 is the outermost).
    #[inline]
    pub fn vlan_tci(&self, index: usize) -> Option<u16> {
        (index < self.vlan_count()).then(|| read_u16(self.buffer.as_ref(), tci_field(index)))
    }

    /// The 12-bit VLAN ID of VLAN tag `index` (0 is the outermost).
    #[inline]
    pub fn vlan_id(&self, index: usize) -> Option<u16> {
        self.vlan_tci(index).map(|tci| tci & field::VLAN_ID_MASK)
    }

    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let start = self.header_len();
        &self.buffer.as_ref()[start..]
    }
}

fn tci_field(index: usize) -> super::Field {
    let start = ethertype_field(index).start + field::TCI_FROM_TPID;
    start..start + field::ETHERTYPE.len()
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&addr);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, addr: [u8; 6]) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&addr);
    }

    /// Sets the EtherType of the payload (after any VLAN tags).
    #[inline]
    pub fn set_ethertype(&mut self, value: u16) {
        let at = ethertype_field(self.vlan_count());
        write_u16(self.buffer.as_mut(), at, value);
    }

    /// Sets the TCI of VLAN tag `index`; false if the frame has no such tag.
    #[inline]
    pub fn set_vlan_tci(&mut self, index: usize, tci: u16) -> bool {
        if index >= self.vlan_count() {
            return false;
        }
        write_u16(self.buffer.as_mut(), tci_field(index), tci);
        true
    }

    /// The bytes after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.buffer.as_mut()[start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tpids: &[u16], ethertype: u16) -> Vec<u8> {
        let mut f = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
        for (i, tpid) in tpids.iter().enumerate() {
            f.extend_from_slice(&tpid.to_be_bytes());
            f.extend_from_slice(&(0x100 + i as u16).to_be_bytes());
        }
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&[0xaa; 4]);
        f
    }

    #[test]
    fn untagged() {
        let bytes = frame(&[], ethertype::IPV4);
        let f = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(f.dst_addr(), [1, 2, 3, 4, 5, 6]);
        assert_eq!(f.src_addr(), [7, 8, 9, 10, 11, 12]);
        assert_eq!(f.vlan_count(), 0);
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.ethertype(), ethertype::IPV4);
        assert_eq!(f.vlan_tci(0), None);
        assert_eq!(f.payload(), &[0xaa; 4]);
    }

    #[test]
    fn double_tagged() {
        let bytes = frame(&[ethertype::QINQ, ethertype::VLAN], ethertype::IPV6);
        let f = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(f.vlan_count(), 2);
        assert_eq!(f.header_len(), 22);
        assert_eq!(f.ethertype(), ethertype::IPV6);
        assert_eq!(f.vlan_tpid(0), Some(ethertype::QINQ));
        assert_eq!(f.vlan_id(0), Some(0x100));
        assert_eq!(f.vlan_id(1), Some(0x101));
        assert_eq!(f.vlan_id(2), None);
    }

    #[test]
    fn third_tag_is_not_parsed() {
        let bytes = frame(&[ethertype::VLAN; 3], ethertype::IPV4);
        let f = EthernetFrame::new_checked(&bytes[..]).unwrap();
        assert_eq!(f.vlan_count(), 2);
        assert_eq!(f.ethertype(), ethertype::VLAN);
    }

    #[test]
    fn truncated_tags_are_rejected() {
        let bytes = frame(&[ethertype::VLAN], ethertype::IPV4);
        assert_eq!(
            EthernetFrame::new_checked(&bytes[..17]),
            Err(WireError::Truncated)
        );
        assert!(EthernetFrame::new_checked(&bytes[..18]).is_ok());
        assert_eq!(
            EthernetFrame::new_checked(&bytes[..13]),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut bytes = frame(&[ethertype::VLAN], ethertype::IPV4);
        let mut f = EthernetFrame::new_checked(&mut bytes[..]).unwrap();
        f.set_dst_addr([0xff; 6]);
        f.set_src_addr([0x02, 0, 0, 0, 0, 1]);
        f.set_ethertype(ethertype::ARP);
        assert!(f.set_vlan_tci(0, 0x2abc));
        assert!(!f.set_vlan_tci(1, 0));
        f.payload_mut()[0] = 0x55;
        assert_eq!(f.dst_addr(), [0xff; 6]);
        assert_eq!(f.src_addr(), [0x02, 0, 0, 0, 0, 1]);
        assert_eq!(f.ethertype(), ethertype::ARP);
        assert_eq!(f.vlan_tci(0), Some(0x2abc));
        assert_eq!(f.vlan_id(0), Some(0xabc));
        assert_eq!(f.payload()[0], 0x55);
    }
}
