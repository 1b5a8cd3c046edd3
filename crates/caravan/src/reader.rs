//! `caravan::Reader`: the inner datagrams of a caravan delivered whole (opt-in pass-through).

use caravan_common::format::{self, InnerHeader, UDP_HEADER_LEN};
use caravan_common::MAX_DATAGRAMS;

/// Why a buffer is not a well-formed caravan payload: the rules of `docs/caravan.md`, in their
/// one copy in `caravan_common::format` (shared with the eBPF program and `pxio::caravan`).
pub use caravan_common::format::Malformed;

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
/// A pass-through port receives plain datagrams too, and a socket cannot see the DSCP mark
/// without `IP_RECVTOS`. Pass the flow's ports to [`Reader::with_ports`] when they are known:
/// a plain datagram then counts as a caravan only if its payload is a chain of UDP headers with
/// those very ports whose lengths add up exactly.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
    count: usize,
}

impl<'a> Reader<'a> {
    /// Validates `payload` (the outer UDP payload) as a caravan whose inner headers all carry
    /// the ports of the first one.
    pub fn new(payload: &'a [u8]) -> Result<Self, Malformed> {
        let Some(first) = payload.first_chunk::<UDP_HEADER_LEN>() else {
            // The walk refuses it: no datagram at all, or a truncated first header.
            return Self::with_ports(payload, 0, 0);
        };
        let first = InnerHeader::parse(first);
        Self::with_ports(payload, first.src_port, first.dst_port)
    }

    /// Validates `payload` as a caravan of the flow `src_port` → `dst_port`, with at most
    /// [`MAX_DATAGRAMS`] datagrams.
    pub fn with_ports(payload: &'a [u8], src_port: u16, dst_port: u16) -> Result<Self, Malformed> {
        let count = format::validate(payload, src_port, dst_port, MAX_DATAGRAMS)?;
        Ok(Self {
            rest: payload,
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

    #[test]
    fn splits_in_order_with_boundaries() {
        let payloads: [&[u8]; 4] = [b"a", b"", b"hello world", &[7u8; 1400]];
        let buf: Vec<u8> = payloads.iter().flat_map(|p| dgram(5, 6, p)).collect();
        let reader = Reader::with_ports(&buf, 5, 6).unwrap();
        assert_eq!(reader.len(), 4);
        let got: Vec<&[u8]> = reader.map(|d| d.payload).collect();
        assert_eq!(got, payloads);
    }

    #[test]
    fn refuses_malformed() {
        let good = dgram(5, 6, b"xyz");
        assert_eq!(Reader::new(&[]).unwrap_err(), Malformed::LengthMismatch);
        assert_eq!(Reader::new(&good[..5]).unwrap_err(), Malformed::Truncated);
        let mut zero = good.clone();
        zero[4..6].copy_from_slice(&4u16.to_be_bytes());
        assert_eq!(Reader::new(&zero).unwrap_err(), Malformed::ZeroLength);
        let mut long = good.clone();
        long[4..6].copy_from_slice(&100u16.to_be_bytes());
        assert_eq!(Reader::new(&long).unwrap_err(), Malformed::LengthMismatch);
        assert_eq!(
            Reader::with_ports(&good, 5, 7).unwrap_err(),
            Malformed::PortMismatch
        );
        let many: Vec<u8> = (0..65).flat_map(|_| dgram(5, 6, b"")).collect();
        assert_eq!(Reader::new(&many).unwrap_err(), Malformed::TooMany);
        let max: Vec<u8> = (0..64).flat_map(|_| dgram(5, 6, b"")).collect();
        assert_eq!(Reader::new(&max).unwrap().count(), 64);
    }
}
