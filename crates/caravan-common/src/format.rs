//! The PX-caravan wire format: its constants, its caravan header and its validation rules, in
//! one copy for the packer/unpacker (`pxio::caravan`), the pass-through reader
//! (`caravan::Reader`) and the eBPF decapsulator (`crates/caravan-ebpf`) (SIGCOMM'26 §6,
//! `docs/caravan.md`).
//!
//! A caravan is a marked UDP packet whose payload starts with an 8-byte caravan header
//! ([`HEADER_LEN`]): the magic `PXCV`, a version, the datagram count and a 16-bit header check.
//! [`recognise`] tells a caravan header from ordinary payload, in constant time, before anything
//! else is read. The rules are then checked by a [`Walk`] over the inner UDP headers. It reads
//! no memory itself: the caller loads each 8-byte inner header where [`Walk::next_header`] says,
//! from a slice, a chained packet buffer or a socket buffer in the kernel, and hands it to
//! [`Walk::accept`]. Every step is a handful of comparisons with no loop, so the eBPF verifier
//! accepts it inline in a bounded loop. [`validate`] runs the whole walk over a contiguous
//! payload.

use core::fmt;

/// UDP header bytes: the outer header, and the header in front of every inner datagram.
pub const UDP_HEADER_LEN: usize = 8;

/// The smallest legal inner UDP length: the header alone (an empty datagram is legal).
pub const MIN_INNER_LEN: usize = UDP_HEADER_LEN;

/// Caravan header bytes, right behind the outer UDP header. A multiple of 4 (and 8), so every
/// inner UDP header keeps the alignment it would have behind the outer one.
pub const HEADER_LEN: usize = 8;

/// The caravan header's first four bytes: `PXCV`. An ordinary datagram is taken for a caravan
/// only if its payload starts with them, then [`VERSION`] (a control character, so never text),
/// a count and the matching check (`docs/caravan.md`, "False positives").
pub const MAGIC: [u8; 4] = *b"PXCV";

/// The caravan format version this code writes and reads. A caravan header with another version
/// is not unpacked: the packet passes untouched, counted ([`Refused::UnknownVersion`]).
pub const VERSION: u8 = 1;

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

/// Byte offsets inside the caravan header.
pub mod header {
    /// [`MAGIC`](super::MAGIC) (4 bytes).
    pub const MAGIC: usize = 0;
    /// [`VERSION`](super::VERSION) (1 byte).
    pub const VERSION: usize = 4;
    /// Number of inner datagrams (1 byte, 1..=64).
    pub const COUNT: usize = 5;
    /// The check (2 bytes, big-endian): the ones' complement of the ones'-complement sum of the
    /// caravan header's other three 16-bit words (RFC 1071, as the IPv4 header checksum).
    pub const CHECK: usize = 6;
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
    /// Rule 1: an inner UDP header runs past the end of the caravan (or the IP packet past the
    /// end of the frame).
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
    /// Rule 6: the caravan header's count differs from the datagrams found.
    CountMismatch,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::Truncated => "an inner UDP header is truncated",
            Malformed::ZeroLength => "an inner UDP length is below 8",
            Malformed::PortMismatch => "an inner UDP header's ports differ from the caravan's",
            Malformed::LengthMismatch => "inner UDP lengths disagree with the caravan's length",
            Malformed::TooMany => "more inner datagrams than allowed",
            Malformed::CountMismatch => "the caravan header's count differs from its datagrams",
        })
    }
}

impl core::error::Error for Malformed {}

/// Why a marked UDP payload is not delivered as a caravan's datagrams.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refused {
    /// No caravan header (no [`MAGIC`], or a version-1 header whose check fails): ordinary
    /// UDP, which a receiver passes on untouched.
    NotCaravan,
    /// A caravan header of another version: not unpacked, passed on untouched and counted.
    UnknownVersion(u8),
    /// A caravan that breaks a rule: refused whole.
    Malformed(Malformed),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::NotCaravan => f.write_str("not a caravan (no caravan header)"),
            Refused::UnknownVersion(v) => write!(f, "caravan version {v} is not understood"),
            Refused::Malformed(m) => write!(f, "malformed caravan: {m}"),
        }
    }
}

impl core::error::Error for Refused {}

impl From<Malformed> for Refused {
    fn from(m: Malformed) -> Self {
        Refused::Malformed(m)
    }
}

/// The big-endian `u16` at `at`.
#[inline(always)]
const fn be16(bytes: &[u8; UDP_HEADER_LEN], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

/// The ones'-complement sum of the four big-endian 16-bit words of a caravan header, folded to
/// 16 bits (RFC 1071): 0xffff when its check verifies.
#[inline(always)]
const fn header_sum(bytes: &[u8; HEADER_LEN]) -> u16 {
    let sum = be16(bytes, 0) as u32
        + be16(bytes, 2) as u32
        + be16(bytes, 4) as u32
        + be16(bytes, 6) as u32;
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u16
}

/// The caravan header of a caravan of `count` datagrams.
pub const fn encode_header(count: u8) -> [u8; HEADER_LEN] {
    let mut h = [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], VERSION, count, 0, 0];
    let check = (!header_sum(&h)).to_be_bytes();
    h[header::CHECK] = check[0];
    h[header::CHECK + 1] = check[1];
    h
}

/// A recognised caravan header ([`recognise`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaravanHeader {
    /// The datagram count it declares.
    pub count: u8,
}

/// Tells a caravan header from ordinary payload: the first [`HEADER_LEN`] bytes of a marked UDP
/// packet's payload. [`Refused::NotCaravan`] without [`MAGIC`], or when a version-1 header's
/// check fails; [`Refused::UnknownVersion`] with another version (whose header this code cannot
/// check).
#[inline(always)]
pub const fn recognise(bytes: &[u8; HEADER_LEN]) -> Result<CaravanHeader, Refused> {
    if bytes[header::MAGIC] != MAGIC[0]
        || bytes[header::MAGIC + 1] != MAGIC[1]
        || bytes[header::MAGIC + 2] != MAGIC[2]
        || bytes[header::MAGIC + 3] != MAGIC[3]
    {
        return Err(Refused::NotCaravan);
    }
    if bytes[header::VERSION] != VERSION {
        return Err(Refused::UnknownVersion(bytes[header::VERSION]));
    }
    if header_sum(bytes) != 0xffff {
        return Err(Refused::NotCaravan);
    }
    Ok(CaravanHeader {
        count: bytes[header::COUNT],
    })
}

/// Recognises the caravan header at the start of a contiguous outer UDP payload; a payload too
/// short to hold one is [`Refused::NotCaravan`].
pub fn recognise_payload(payload: &[u8]) -> Result<CaravanHeader, Refused> {
    match payload.first_chunk::<HEADER_LEN>() {
        Some(h) => recognise(h),
        None => Err(Refused::NotCaravan),
    }
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
/// let header = recognise(&payload[..8])?;           // magic, version, check
/// let mut walk = Walk::new(&header, payload_len, sport, dport, max);
/// while let Some(offset) = walk.next_header()? {   // rules 5 and 1
///     let inner = /* load 8 bytes at `offset` of the outer UDP payload */;
///     walk.accept(&inner)?;                         // rules 2, 3 and 4 (overrun)
/// }
/// let count = walk.finish()?;                       // rules 4 and 6
/// ```
///
/// Offsets are into the outer UDP payload, caravan header included (the first inner header is
/// at [`HEADER_LEN`]). A caller that stops early (a loop bound) gets [`Malformed::TooMany`] from
/// [`finish`](Self::finish), never a success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    payload_len: usize,
    offset: usize,
    count: u32,
    max: u32,
    declared: u8,
    src_port: u16,
    dst_port: u16,
}

impl Walk {
    /// Starts the walk over an outer UDP payload of `payload_len` bytes (caravan header
    /// included) of the flow `src_port` → `dst_port`, whose caravan header is `header`,
    /// allowing at most `max` datagrams.
    #[inline(always)]
    pub const fn new(
        header: &CaravanHeader,
        payload_len: usize,
        src_port: u16,
        dst_port: u16,
        max: u32,
    ) -> Self {
        Self {
            payload_len,
            offset: HEADER_LEN,
            count: 0,
            max,
            declared: header.count,
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

    /// Ends the walk: the number of datagrams, when there is at least one, the walk reached the
    /// end of the payload exactly and the caravan header declared that many.
    #[inline(always)]
    pub const fn finish(&self) -> Result<u32, Malformed> {
        if self.count == 0 {
            Err(Malformed::LengthMismatch)
        } else if self.offset != self.payload_len {
            // Only reachable when the caller stopped before `next_header` said `None`.
            Err(Malformed::TooMany)
        } else if self.count != self.declared as u32 {
            Err(Malformed::CountMismatch)
        } else {
            Ok(self.count)
        }
    }
}

/// Validates a contiguous outer UDP payload (caravan header included) as a caravan of the flow
/// `src_port` → `dst_port` with at most `max` datagrams; returns the number of datagrams.
pub fn validate(payload: &[u8], src_port: u16, dst_port: u16, max: u32) -> Result<u32, Refused> {
    let header = recognise_payload(payload)?;
    let mut walk = Walk::new(&header, payload.len(), src_port, dst_port, max);
    while let Some(offset) = walk.next_header()? {
        let inner = payload
            .get(offset..)
            .and_then(|rest| rest.first_chunk::<UDP_HEADER_LEN>())
            .ok_or(Malformed::Truncated)?;
        walk.accept(inner)?;
    }
    Ok(walk.finish()?)
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

    /// Writes the caravan header for `count` inner datagrams into `out[..8]`.
    fn seal(out: &mut [u8], count: u8) {
        out[..HEADER_LEN].copy_from_slice(&encode_header(count));
    }

    const P: (u16, u16) = (5, 6);

    #[test]
    fn accepts_well_formed_caravans() {
        let mut buf = [0u8; 72];
        let mut end = put(&mut buf, HEADER_LEN, P, 9, b"a");
        end = put(&mut buf, end, P, 8, b"");
        end = put(&mut buf, end, P, 19, b"hello world");
        seal(&mut buf[..end], 3);
        assert_eq!(&buf[..4], b"PXCV");
        assert_eq!(buf[4], VERSION);
        assert_eq!(validate(&buf[..end], 5, 6, MAX_DATAGRAMS), Ok(3));
        assert_eq!(validate(&buf[..end], 5, 6, 3), Ok(3));
    }

    #[test]
    fn refuses_each_rule() {
        let mut buf = [0u8; 64];
        let end = put(&mut buf, HEADER_LEN, P, 11, b"xyz");
        seal(&mut buf[..end], 1);
        let v = |b: &[u8]| validate(b, 5, 6, MAX_DATAGRAMS);
        assert_eq!(v(&buf[..end]), Ok(1));
        let m = |m| Err(Refused::Malformed(m));
        // A caravan header and nothing behind it.
        let mut empty = [0u8; HEADER_LEN];
        seal(&mut empty[..HEADER_LEN], 0);
        assert_eq!(v(&empty), m(Malformed::LengthMismatch));
        assert_eq!(v(&buf[..HEADER_LEN + 5]), m(Malformed::Truncated));
        assert_eq!(validate(&buf[..end], 5, 7, 64), m(Malformed::PortMismatch));
        let mut zero = buf;
        put(&mut zero, HEADER_LEN, P, 7, b"");
        assert_eq!(v(&zero[..end]), m(Malformed::ZeroLength));
        let mut long = buf;
        put(&mut long, HEADER_LEN, P, 100, b"");
        assert_eq!(v(&long[..end]), m(Malformed::LengthMismatch));
        // Three empty datagrams where two are allowed.
        let mut many = [0u8; HEADER_LEN + 24];
        for i in 0..3 {
            put(&mut many, HEADER_LEN + i * 8, P, 8, b"");
        }
        seal(&mut many, 3);
        assert_eq!(validate(&many, 5, 6, 2), m(Malformed::TooMany));
        assert_eq!(validate(&many, 5, 6, 3), Ok(3));
        // The header declares another count (with a check that matches it).
        let mut count = many;
        seal(&mut count, 2);
        assert_eq!(validate(&count, 5, 6, 3), m(Malformed::CountMismatch));
        seal(&mut count, 0);
        assert_eq!(validate(&count, 5, 6, 3), m(Malformed::CountMismatch));
    }

    #[test]
    fn only_a_caravan_header_makes_a_caravan() {
        // A chain of inner headers with the flow's ports, as a caravan body: not a caravan.
        let mut body = [0u8; 24];
        let end = put(&mut body, 0, P, 9, b"a");
        put(&mut body, end, P, 15, b"hello!!");
        assert_eq!(validate(&body, 5, 6, 64), Err(Refused::NotCaravan));
        // Too short to hold a caravan header.
        assert_eq!(validate(b"PXCV\x01", 5, 6, 64), Err(Refused::NotCaravan));
        assert_eq!(validate(&[], 5, 6, 64), Err(Refused::NotCaravan));
        // The magic and the version, but the count changed without its check: not a caravan
        // header (an ordinary payload that happens to start with "PXCV\x01").
        let mut buf = [0u8; 32];
        let end = put(&mut buf, HEADER_LEN, P, 11, b"xyz");
        seal(&mut buf[..end], 1);
        assert_eq!(validate(&buf[..end], 5, 6, 64), Ok(1));
        buf[header::COUNT] = 2;
        assert_eq!(validate(&buf[..end], 5, 6, 64), Err(Refused::NotCaravan));
        buf[header::COUNT] = 1;
        buf[header::CHECK + 1] ^= 1;
        assert_eq!(validate(&buf[..end], 5, 6, 64), Err(Refused::NotCaravan));
        // Another version: recognised, not understood.
        let mut buf = [0u8; 32];
        let end = put(&mut buf, HEADER_LEN, P, 11, b"xyz");
        seal(&mut buf[..end], 1);
        buf[header::VERSION] = 2;
        assert_eq!(
            validate(&buf[..end], 5, 6, 64),
            Err(Refused::UnknownVersion(2))
        );
    }

    #[test]
    fn a_walk_stopped_early_is_not_a_success() {
        let mut buf = [0u8; HEADER_LEN + 16];
        put(&mut buf, HEADER_LEN, P, 8, b"");
        put(&mut buf, HEADER_LEN + 8, P, 8, b"");
        seal(&mut buf, 2);
        let header = recognise_payload(&buf).unwrap();
        let mut walk = Walk::new(&header, buf.len(), 5, 6, 64);
        assert_eq!(walk.next_header(), Ok(Some(8)));
        assert_eq!(walk.accept(buf[8..16].try_into().unwrap()), Ok(8));
        assert_eq!(walk.finish(), Err(Malformed::TooMany));
        assert_eq!(walk.next_header(), Ok(Some(16)));
        assert_eq!(walk.accept(buf[16..].try_into().unwrap()), Ok(8));
        assert_eq!(walk.next_header(), Ok(None));
        assert_eq!(walk.finish(), Ok(2));
    }

    #[test]
    fn the_header_is_one_of_64_fixed_strings() {
        // For every count, exactly one check verifies: 8 random bytes are a version-1 caravan
        // header with probability 256 / 2^64 (2^-56), and one with a count up to 64 with 2^-58.
        for count in 0..=u8::MAX {
            let h = encode_header(count);
            assert_eq!(recognise(&h), Ok(CaravanHeader { count }));
            for bit in 0..64 {
                let mut flipped = h;
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert!(recognise(&flipped).is_err(), "count {count}, bit {bit}");
            }
        }
    }

    #[test]
    fn the_mark_ignores_ecn() {
        assert!(is_marked(DEFAULT_DSCP << 2 | 0b11, DEFAULT_DSCP));
        assert!(!is_marked(0, DEFAULT_DSCP));
    }
}
