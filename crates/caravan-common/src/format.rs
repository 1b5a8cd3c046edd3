//! The PX-caravan wire format: its constants and its validation rules, in one copy for the
//! packer/unpacker (`pxio::caravan`), the pass-through reader (`caravan::Reader`) and the eBPF
//! decapsulator (`crates/caravan-ebpf`) (SIGCOMM'26 §6, `docs/caravan.md`).
//!
//! The rules are checked by a [`Walk`] over the inner UDP headers. It reads no memory itself:
//! the caller loads each 8-byte inner header where [`Walk::next_header`] says, from a slice, a
//! chained packet buffer or a socket buffer in the kernel, and hands it to [`Walk::accept`].
//! Every step is a handful of comparisons with no loop, so the eBPF verifier accepts it inline
//! in a bounded loop. [`validate`] runs the whole walk over a contiguous payload.

use core::fmt;

/// UDP header bytes: the outer header, and the header in front of every inner datagram.
pub const UDP_HEADER_LEN: usize = 8;

/// The smallest legal inner UDP length: the header alone (an empty datagram is legal).
pub const MIN_INNER_LEN: usize = UDP_HEADER_LEN;

/// The DSCP codepoint that marks a caravan by default: 7 (`000111`), from the pool RFC 2474 §6
/// reserves for experimental or local use (codepoints `xxxx11`).
pub const DEFAULT_DSCP: u8 = 7;

/// The most datagrams one caravan may carry by default; also the receiver's hard bound, and the
/// bound of the eBPF program's loops (the verifier needs one).
pub const MAX_DATAGRAMS: u32 = 64;

/// Shift of the DSCP inside the IPv4 TOS byte and the IPv6 traffic class (RFC 2474 §3).
pub const DSCP_SHIFT: u32 = 2;

/// Byte offsets inside a UDP header (RFC 768), outer or inner.
pub mod udp {
    /// Source port (2 bytes, big-endian).
    pub const SRC_PORT: usize = 0;
    /// Destination port (2 bytes, big-endian).
    pub const DST_PORT: usize = 2;
    /// Length of header plus payload (2 bytes, big-endian).
    pub const LENGTH: usize = 4;
    /// Checksum (2 bytes, big-endian).
    pub const CHECKSUM: usize = 6;
}

/// Whether an IPv4 TOS byte or IPv6 traffic class carries the caravan mark `dscp` (ECN ignored).
#[inline(always)]
pub const fn is_marked(traffic_class: u8, dscp: u8) -> bool {
    traffic_class >> DSCP_SHIFT == dscp
}

/// Why a caravan is malformed: the rule of `docs/caravan.md` ("Telling a caravan from ordinary
/// UDP") that it breaks. A receiver refuses the whole caravan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Rule 1: an inner UDP header runs past the end of the caravan.
    Truncated,
    /// Rule 2: an inner length field is below 8.
    ZeroLength,
    /// Rule 3: an inner header's ports differ from the caravan's.
    PortMismatch,
    /// Rule 4: the inner lengths do not add up to the outer payload exactly, or there is no
    /// datagram.
    LengthMismatch,
    /// Rule 5: more datagrams than the bound.
    TooMany,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::Truncated => "an inner UDP header is truncated",
            Malformed::ZeroLength => "an inner UDP length is below 8",
            Malformed::PortMismatch => "an inner UDP header's ports differ from the caravan's",
            Malformed::LengthMismatch => "inner UDP lengths disagree with the caravan's length",
            Malformed::TooMany => "more inner datagrams than allowed",
        })
    }
}

impl core::error::Error for Malformed {}

/// The big-endian `u16` at `at`.
#[inline(always)]
const fn be16(bytes: &[u8; UDP_HEADER_LEN], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

/// One inner UDP header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InnerHeader {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// UDP length: header plus payload.
    pub len: u16,
    /// The sender's checksum, as carried.
    pub checksum: u16,
}

impl InnerHeader {
    /// Decodes the big-endian fields of `bytes`.
    #[inline(always)]
    pub const fn parse(bytes: &[u8; UDP_HEADER_LEN]) -> Self {
        Self {
            src_port: be16(bytes, udp::SRC_PORT),
            dst_port: be16(bytes, udp::DST_PORT),
            len: be16(bytes, udp::LENGTH),
            checksum: be16(bytes, udp::CHECKSUM),
        }
    }
}

/// The walk over a caravan's inner headers that checks every rule, one datagram per step.
///
/// ```text
/// let mut walk = Walk::new(payload_len, sport, dport, max);
/// while let Some(offset) = walk.next_header()? {   // rules 5 and 1
///     let header = /* load 8 bytes at `offset` of the outer UDP payload */;
///     walk.accept(&header)?;                        // rules 2, 3 and 4 (overrun)
/// }
/// let count = walk.finish()?;                       // rule 4 (at least one, exact sum)
/// ```
///
/// A caller that stops early (a loop bound) gets [`Malformed::TooMany`] from
/// [`finish`](Self::finish), never a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    payload_len: usize,
    offset: usize,
    count: u32,
    max: u32,
    src_port: u16,
    dst_port: u16,
}

impl Walk {
    /// Starts the walk over an outer UDP payload of `payload_len` bytes of the flow
    /// `src_port` → `dst_port`, allowing at most `max` datagrams.
    #[inline(always)]
    pub const fn new(payload_len: usize, src_port: u16, dst_port: u16, max: u32) -> Self {
        Self {
            payload_len,
            offset: 0,
            count: 0,
            max,
            src_port,
            dst_port,
        }
    }

    /// Where the next inner header starts (an offset into the outer UDP payload), or `None` at
    /// the end of the payload. Refuses a datagram beyond the bound ([`Malformed::TooMany`]) and a
    /// header cut short by the end of the payload ([`Malformed::Truncated`]).
    #[inline(always)]
    pub const fn next_header(&self) -> Result<Option<usize>, Malformed> {
        let left = self.payload_len.saturating_sub(self.offset);
        if left == 0 {
            Ok(None)
        } else if self.count >= self.max {
            Err(Malformed::TooMany)
        } else if left < UDP_HEADER_LEN {
            Err(Malformed::Truncated)
        } else {
            Ok(Some(self.offset))
        }
    }

    /// Checks the inner header loaded at [`next_header`](Self::next_header)'s offset and steps
    /// over its datagram; returns the datagram's UDP length.
    #[inline(always)]
    pub const fn accept(&mut self, header: &[u8; UDP_HEADER_LEN]) -> Result<usize, Malformed> {
        let left = self.payload_len.saturating_sub(self.offset);
        if left < UDP_HEADER_LEN {
            return Err(Malformed::Truncated);
        }
        let inner = InnerHeader::parse(header);
        let len = inner.len as usize;
        if len < MIN_INNER_LEN {
            return Err(Malformed::ZeroLength);
        }
        if inner.src_port != self.src_port || inner.dst_port != self.dst_port {
            return Err(Malformed::PortMismatch);
        }
        if len > left {
            return Err(Malformed::LengthMismatch);
        }
        self.offset += len;
        self.count += 1;
        Ok(len)
    }

    /// Datagrams accepted so far.
    #[inline(always)]
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// Ends the walk: the number of datagrams, when there is at least one and the walk reached
    /// the end of the payload exactly.
    #[inline(always)]
    pub const fn finish(&self) -> Result<u32, Malformed> {
        if self.count == 0 {
            Err(Malformed::LengthMismatch)
        } else if self.offset != self.payload_len {
            // Only reachable when the caller stopped before `next_header` said `None`.
            Err(Malformed::TooMany)
        } else {
            Ok(self.count)
        }
    }
}

/// Validates a contiguous outer UDP payload as a caravan of the flow `src_port` → `dst_port`
/// with at most `max` datagrams; returns the number of datagrams.
pub fn validate(payload: &[u8], src_port: u16, dst_port: u16, max: u32) -> Result<u32, Malformed> {
    let mut walk = Walk::new(payload.len(), src_port, dst_port, max);
    while let Some(offset) = walk.next_header()? {
        let header = payload
            .get(offset..)
            .and_then(|rest| rest.first_chunk::<UDP_HEADER_LEN>())
            .ok_or(Malformed::Truncated)?;
        walk.accept(header)?;
    }
    walk.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes one inner datagram (header with length field `len`, then `payload`) into `out` at
    /// `at`; returns the end.
    fn put(out: &mut [u8], at: usize, ports: (u16, u16), len: u16, payload: &[u8]) -> usize {
        out[at..at + 2].copy_from_slice(&ports.0.to_be_bytes());
        out[at + 2..at + 4].copy_from_slice(&ports.1.to_be_bytes());
        out[at + 4..at + 6].copy_from_slice(&len.to_be_bytes());
        out[at + 6..at + 8].copy_from_slice(&[0xab, 0xcd]);
        out[at + 8..at + 8 + payload.len()].copy_from_slice(payload);
        at + 8 + payload.len()
    }

    const P: (u16, u16) = (5, 6);

    #[test]
    fn accepts_well_formed_caravans() {
        let mut buf = [0u8; 64];
        let mut end = put(&mut buf, 0, P, 9, b"a");
        end = put(&mut buf, end, P, 8, b"");
        end = put(&mut buf, end, P, 19, b"hello world");
        assert_eq!(validate(&buf[..end], 5, 6, MAX_DATAGRAMS), Ok(3));
        assert_eq!(validate(&buf[..end], 5, 6, 3), Ok(3));
    }

    #[test]
    fn refuses_each_rule() {
        let mut buf = [0u8; 64];
        let end = put(&mut buf, 0, P, 11, b"xyz");
        let v = |b: &[u8]| validate(b, 5, 6, MAX_DATAGRAMS);
        assert_eq!(v(&[]), Err(Malformed::LengthMismatch));
        assert_eq!(v(&buf[..5]), Err(Malformed::Truncated));
        assert_eq!(
            validate(&buf[..end], 5, 7, 64),
            Err(Malformed::PortMismatch)
        );
        let mut zero = buf;
        put(&mut zero, 0, P, 7, b"");
        assert_eq!(v(&zero[..end]), Err(Malformed::ZeroLength));
        let mut long = buf;
        put(&mut long, 0, P, 100, b"");
        assert_eq!(v(&long[..end]), Err(Malformed::LengthMismatch));
        // Three empty datagrams where two are allowed.
        let mut many = [0u8; 24];
        for i in 0..3 {
            put(&mut many, i * 8, P, 8, b"");
        }
        assert_eq!(validate(&many, 5, 6, 2), Err(Malformed::TooMany));
        assert_eq!(validate(&many, 5, 6, 3), Ok(3));
    }

    #[test]
    fn a_walk_stopped_early_is_not_a_success() {
        let mut buf = [0u8; 16];
        put(&mut buf, 0, P, 8, b"");
        put(&mut buf, 8, P, 8, b"");
        let mut walk = Walk::new(16, 5, 6, 64);
        assert_eq!(walk.next_header(), Ok(Some(0)));
        assert_eq!(walk.accept(buf[..8].try_into().unwrap()), Ok(8));
        assert_eq!(walk.finish(), Err(Malformed::TooMany));
        assert_eq!(walk.next_header(), Ok(Some(8)));
        assert_eq!(walk.accept(buf[8..].try_into().unwrap()), Ok(8));
        assert_eq!(walk.next_header(), Ok(None));
        assert_eq!(walk.finish(), Ok(2));
    }

    #[test]
    fn the_mark_ignores_ecn() {
        assert!(is_marked(DEFAULT_DSCP << 2 | 0b11, DEFAULT_DSCP));
        assert!(!is_marked(0, DEFAULT_DSCP));
    }
}
