//! `caravan::Reader`: the inner datagrams of a caravan delivered whole (opt-in pass-through).

use caravan_common::format::{self, InnerHeader, HEADER_LEN, UDP_HEADER_LEN};
use caravan_common::MAX_DATAGRAMS;

/// Why a caravan is malformed: the rules of `docs/caravan.md`, in their one copy in
/// `caravan_common::format` (shared with the eBPF program and `pxio::caravan`).
pub use caravan_common::format::Malformed;

/// Why a payload is not read as a caravan: no caravan header (an ordinary datagram), a version
/// this reader does not understand, or a malformed caravan.
pub use caravan_common::format::Refused;

/// One inner datagram of a caravan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// UDP source port of the datagram (the caravan's).
    pub src_port: u16,
    /// UDP destination port of the datagram (the caravan's).
    pub dst_port: u16,
    /// The sender's UDP checksum, as carried (it covers the original pseudo-header).
    pub checksum: u16,
    /// The datagram's payload: what `recv` on the unpacked datagram would return.
    pub payload: &'a [u8],
}

/// The inner datagrams of one caravan, from the payload one `recv` returned on a pass-through
/// port (SIGCOMM'26 §6; the pass-through itself goes beyond the paper).
///
/// [`Reader::new`] validates the whole caravan first, with the same rules as the eBPF program,
/// so iteration never fails half way. Iteration allocates nothing.
///
/// A `Reader` judges the payload alone, so only build one from a datagram whose IP header
/// carried the caravan mark. A pass-through port receives ordinary datagrams too, and any sender
/// can make a payload that passes every rule of the format: read from a socket, such a datagram
/// would become up to 64 datagrams nobody sent. [`recv`](crate::recv) and
/// [`BatchReader`](crate::BatchReader) receive the traffic class with each datagram, and their
/// [`Received::caravan`](crate::Received::caravan) builds a `Reader` only for a marked one;
/// anything else is [`Refused::NotCaravan`], one ordinary datagram (`docs/caravan.md`, "What the
/// endpoint trusts"). Pass the flow's ports to [`Reader::with_ports`] when they are known, to
/// check them too.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
    count: usize,
}

impl<'a> Reader<'a> {
    /// Validates `payload` (the outer UDP payload, caravan header first, of a datagram that
    /// wore the mark) as a caravan whose inner headers all carry the ports of the first one.
    pub fn new(payload: &'a [u8]) -> Result<Self, Refused> {
        format::recognise_payload(payload)?;
        let Some(first) = payload
            .get(HEADER_LEN..)
            .and_then(|rest| rest.first_chunk::<UDP_HEADER_LEN>())
        else {
            // The walk refuses it: no datagram at all, or a truncated first header.
            return Self::with_ports(payload, 0, 0);
        };
        let first = InnerHeader::parse(first);
        Self::with_ports(payload, first.src_port, first.dst_port)
    }

    /// Validates `payload` as a caravan of the flow `src_port` → `dst_port`, with at most
    /// [`MAX_DATAGRAMS`] datagrams.
    pub fn with_ports(payload: &'a [u8], src_port: u16, dst_port: u16) -> Result<Self, Refused> {
        let count = format::validate(payload, src_port, dst_port, MAX_DATAGRAMS)?;
        Ok(Self {
            // Validated: the caravan header is there.
            rest: &payload[HEADER_LEN..],
            // At most MAX_DATAGRAMS (64): lossless.
            count: count as usize,
        })
    }

    /// Number of datagrams left.
    pub fn remaining(&self) -> usize {
        self.count
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Datagram<'a>;

    fn next(&mut self) -> Option<Datagram<'a>> {
        // Validated in `with_ports`: every header is whole and every length fits.
        let hdr = InnerHeader::parse(self.rest.first_chunk()?);
        let len = usize::from(hdr.len);
        let datagram = Datagram {
            src_port: hdr.src_port,
            dst_port: hdr.dst_port,
            checksum: hdr.checksum,
            payload: self.rest.get(UDP_HEADER_LEN..len)?,
        };
        self.rest = &self.rest[len..];
        self.count -= 1;
        Some(datagram)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.count, Some(self.count))
    }
}

impl ExactSizeIterator for Reader<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgram(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&sport.to_be_bytes());
        v.extend_from_slice(&dport.to_be_bytes());
        v.extend_from_slice(&((payload.len() + 8) as u16).to_be_bytes());
        v.extend_from_slice(&[0xab, 0xcd]);
        v.extend_from_slice(payload);
        v
    }

    /// `body` (inner datagrams back to back) behind the caravan header a packer writes.
    fn caravan(body: &[u8]) -> Vec<u8> {
        let (mut at, mut count) = (0, 0u8);
        while at + 8 <= body.len() {
            count = count.wrapping_add(1);
            at += usize::from(u16::from_be_bytes([body[at + 4], body[at + 5]])).max(8);
        }
        [&format::encode_header(count)[..], body].concat()
    }

    #[test]
    fn splits_in_order_with_boundaries() {
        let payloads: [&[u8]; 4] = [b"a", b"", b"hello world", &[7u8; 1400]];
        let body: Vec<u8> = payloads.iter().flat_map(|p| dgram(5, 6, p)).collect();
        let buf = caravan(&body);
        let reader = Reader::with_ports(&buf, 5, 6).unwrap();
        assert_eq!(reader.len(), 4);
        let got: Vec<&[u8]> = reader.map(|d| d.payload).collect();
        assert_eq!(got, payloads);
        assert_eq!(Reader::new(&buf).unwrap().count(), 4);
    }

    #[test]
    fn refuses_malformed() {
        let good = dgram(5, 6, b"xyz");
        let m = |m| Refused::Malformed(m);
        assert_eq!(
            Reader::new(&caravan(&[])).unwrap_err(),
            m(Malformed::LengthMismatch)
        );
        assert_eq!(
            Reader::new(&caravan(&good)[..HEADER_LEN + 5]).unwrap_err(),
            m(Malformed::Truncated)
        );
        let mut zero = good.clone();
        zero[4..6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(
            Reader::new(&caravan(&zero)).unwrap_err(),
            m(Malformed::ZeroLength)
        );
        let mut long = good.clone();
        long[4..6].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(
            Reader::new(&caravan(&long)).unwrap_err(),
            m(Malformed::LengthMismatch)
        );
        assert_eq!(
            Reader::with_ports(&caravan(&good), 5, 7).unwrap_err(),
            m(Malformed::PortMismatch)
        );
        let many: Vec<u8> = (0..65).flat_map(|_| dgram(5, 6, b"")).collect();
        assert_eq!(
            Reader::new(&caravan(&many)).unwrap_err(),
            m(Malformed::TooMany)
        );
        let max: Vec<u8> = (0..64).flat_map(|_| dgram(5, 6, b"")).collect();
        assert_eq!(Reader::new(&caravan(&max)).unwrap().count(), 64);
        let count = [&format::encode_header(2)[..], &good].concat();
        assert_eq!(
            Reader::new(&count).unwrap_err(),
            m(Malformed::CountMismatch)
        );
        // A header whose check fails is no caravan header.
        let mut bad_check = caravan(&good);
        bad_check[format::header::CHECK] ^= 1;
        assert_eq!(Reader::new(&bad_check).unwrap_err(), Refused::NotCaravan);
        let mut version = caravan(&good);
        version[format::header::VERSION] = 9;
        assert_eq!(
            Reader::new(&version).unwrap_err(),
            Refused::UnknownVersion(9)
        );
    }

    #[test]
    fn a_chain_of_udp_headers_without_the_caravan_header_is_not_a_caravan() {
        let body: Vec<u8> = [dgram(5, 6, b"hello"), dgram(5, 6, b"world")].concat();
        assert_eq!(Reader::new(&body).unwrap_err(), Refused::NotCaravan);
        assert_eq!(
            Reader::with_ports(&body, 5, 6).unwrap_err(),
            Refused::NotCaravan
        );
        assert_eq!(Reader::new(b"").unwrap_err(), Refused::NotCaravan);
    }
}
