//! What is read from one input segment (SIGCOMM'26 §4.1): once `classify` found a TCP data
//! segment, the fields merging needs (sequence and ACK numbers, flags, IP ID, TTL/TOS, IPv6
//! flow label, DF), and
//! its checksums verified: each by the NIC's verdict where the buffer carries one, else in
//! software (the IPv4 header's 20 bytes; the TCP payload read once). A verified
//! segment's payload sum then follows from its own checksum field. A segment that must never
//! be merged, or whose checksums fail, is refused here.

use super::item::{Layout, MAX_L2};
use super::Merger;
use crate::buf::PacketBuf;
use crate::checksum::{self, Sum};
use crate::split::pseudo_header;
use crate::wire::{self, tcp_flags, Headers};

/// The TCP header without options.
pub(super) const TCP_HEADER_LEN: usize = wire::tcp::field::HEADER_LEN;

/// Why a TCP segment is not merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Not a mergeable data segment (flags, no payload, IPv4 options, header layout).
    Unmergeable,
    /// The IPv4 header checksum does not verify: the receiver's IP layer drops it.
    BadIpChecksum,
    /// The TCP checksum does not verify (or the NIC said so): the receiver drops it.
    BadTcpChecksum,
}

/// What the engine needs of a TCP segment beyond its flow: where its headers lie and the fields
/// merging reads (the bytes of the signature stay in the packet until an item needs a copy).
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    pub(super) layout: Layout,
    /// IP packet length.
    pub(super) ip_len: u16,
    pub(super) payload_len: u16,
    pub(super) seq: u32,
    pub(super) ack: u32,
    pub(super) window: u16,
    pub(super) flags: u8,
    pub(super) ttl: u8,
    pub(super) tos: u8,
    /// IPv6 flow label (0 for IPv4).
    pub(super) flow_label: u32,
    pub(super) df: bool,
    pub(super) ip_id: u16,
    /// Payload sum derived from the segment's own checksum (software checksum mode).
    pub(super) payload_sum: Sum,
}

impl Segment {
    /// The TCP flags that must match (all but PSH and FIN).
    pub(super) fn merge_flags(&self) -> u8 {
        self.flags & !(tcp_flags::PSH | tcp_flags::FIN)
    }

    /// The Ethernet header and the TCP options, from the segment's `frame`.
    pub(super) fn sig_bytes<'a>(&self, frame: &'a [u8]) -> (&'a [u8], &'a [u8]) {
        let l4 = self.layout.l4_offset();
        (
            &frame[..usize::from(self.layout.l2_len)],
            &frame[l4 + TCP_HEADER_LEN..self.layout.hdr_len()],
        )
    }

    pub(super) fn hdr_len(&self) -> usize {
        self.layout.hdr_len()
    }

    /// Length of the frame without Ethernet padding.
    pub(super) fn frame_len(&self) -> usize {
        usize::from(self.layout.l2_len) + usize::from(self.ip_len)
    }
}

impl<B: PacketBuf> Merger<B> {
    /// Reads what merging needs and verifies the checksums, or says why the segment must not be
    /// merged.
    pub(super) fn segment(&self, pkt: &B, hdr: &Headers) -> Result<Segment, Refusal> {
        let layout = Layout::of(hdr).ok_or(Refusal::Unmergeable)?;
        if usize::from(layout.l2_len) > MAX_L2 {
            return Err(Refusal::Unmergeable);
        }
        // `classify` validated every header length: the views below cannot run off the end
        // (and a parse handed in from outside was checked to fit this packet's shape).
        let bytes = pkt
            .head()
            .get(..layout.hdr_len())
            .ok_or(Refusal::Unmergeable)?;
        let l3 = &bytes[layout.l4_offset() - usize::from(layout.l3_len)..layout.l4_offset()];
        if !hdr.v6 {
            let ip = wire::Ipv4Packet::new_unchecked(l3);
            // The NIC's verdict where it gave one (it read these bytes as they are now: see
            // `PacketBuf::ip_csum_verdict`); else a header without options (every mergeable
            // one) is summed in one unrolled pass.
            let verified = match (pkt.ip_csum_verdict(), l3.first_chunk::<20>()) {
                (Some(verdict), _) => verdict,
                (None, Some(h)) if l3.len() == 20 => Sum::of_20(h).fold() == 0xffff,
                (None, _) => ip.verify_checksum(),
            };
            if !verified {
                return Err(Refusal::BadIpChecksum);
            }
            if ip.header_len() != wire::ipv4::field::HEADER_LEN {
                return Err(Refusal::Unmergeable); // IPv4 options: never merged, like Linux
            }
        }
        let tcp = wire::TcpPacket::new_unchecked(&bytes[layout.l4_offset()..]);
        let never = tcp_flags::SYN | tcp_flags::RST | tcp_flags::URG | tcp_flags::CWR;
        if tcp.flags() & never != 0 || hdr.payload_len == 0 {
            return Err(Refusal::Unmergeable);
        }
        // The payload sum the checksum field claims: ~checksum covers the pseudo header, the
        // TCP header (checksum field as 0) and the payload.
        let claimed = || claimed_payload_sum(bytes, hdr);
        let payload_sum = match pkt.l4_csum_verdict() {
            Some(false) => return Err(Refusal::BadTcpChecksum),
            // The NIC verified it: the claim is the truth, and with TX offload not even that
            // is needed.
            Some(true) if self.cfg.checksum_offload => Sum::default(),
            Some(true) => claimed(),
            None => {
                let start = layout.hdr_len();
                let actual = range_sum(pkt, start, start + usize::from(hdr.payload_len));
                if !sums_equal(actual, claimed()) {
                    return Err(Refusal::BadTcpChecksum);
                }
                actual
            }
        };
        Ok(Segment::read(
            layout,
            bytes,
            hdr.ip_len,
            hdr.payload_len,
            payload_sum,
        ))
    }
}

impl Segment {
    /// The fields of a segment whose headers, of `layout`, start `bytes` (which holds them
    /// whole), carrying `ip_len` IP bytes of which `payload_len` are payload with sum
    /// `payload_sum`. Reads only: whoever calls it has checked the segment may be merged.
    // Always inlined: `segment` builds its result through it on every general-path segment.
    #[inline(always)]
    pub(super) fn read(
        layout: Layout,
        bytes: &[u8],
        ip_len: u16,
        payload_len: u16,
        payload_sum: Sum,
    ) -> Segment {
        let l3 = &bytes[usize::from(layout.l2_len)..layout.l4_offset()];
        let (ip_id, df, ttl, tos, flow_label) = if layout.v6 {
            let ip = wire::Ipv6Packet::new_unchecked(l3);
            (0, true, ip.hop_limit(), ip.traffic_class(), ip.flow_label())
        } else {
            let ip = wire::Ipv4Packet::new_unchecked(l3);
            (
                ip.ident(),
                ip.dont_frag(),
                ip.ttl(),
                ip.dscp() << 2 | ip.ecn(),
                0,
            )
        };
        let tcp = wire::TcpPacket::new_unchecked(&bytes[layout.l4_offset()..layout.hdr_len()]);
        Segment {
            layout,
            ip_len,
            payload_len,
            seq: tcp.seq_number(),
            ack: tcp.ack_number(),
            window: tcp.window(),
            flags: tcp.flags(),
            ttl,
            tos,
            flow_label,
            df,
            ip_id,
            payload_sum,
        }
    }
}

/// The payload sum a TCP segment's checksum field claims (its headers at the start of `bytes`,
/// parsed as `hdr`): the checksum covers the pseudo header, the TCP header (checksum field as
/// 0) and the payload, so the payload's share follows by subtraction, without reading it.
pub(super) fn claimed_payload_sum(bytes: &[u8], hdr: &Headers) -> Sum {
    let l4 = usize::from(hdr.l2_len) + usize::from(hdr.l3_len);
    let tcp_bytes = &bytes[l4..l4 + usize::from(hdr.l4_len)];
    let field = wire::TcpPacket::new_unchecked(tcp_bytes).checksum();
    let tcp_len = hdr.l4_len + hdr.payload_len;
    let pseudo = pseudo_header(bytes, hdr, u32::from(tcp_len));
    let header = Sum::of(tcp_bytes).sub(Sum(u32::from(field)));
    checksum::covered_sum(field).sub(pseudo).sub(header)
}

/// Whether the checksums of `pkt`, a TCP segment with headers `hdr` (its parse), hold: each by
/// the NIC's verdict where the buffer carries one, else computed, the IPv4 header's over its 20
/// or more bytes and the TCP checksum over the pseudo-header, the header and the payload in
/// every buffer of the chain. For a caller about to vouch for a segment itself (a coalesced
/// packet passed on whole, say): a segment that fails must not be sent on with checksums
/// made afresh over its damaged bytes.
pub fn tcp_checksums_ok<B: PacketBuf>(pkt: &B, hdr: &Headers) -> bool {
    // Both verdicts good, read at once: what nearly every segment from a NIC that checks has.
    if pkt.csum_vouched(!hdr.v6) {
        return pkt.head().len() >= hdr.hdr_len();
    }
    if !ip_header_ok(pkt, hdr) {
        return false;
    }
    let bytes = pkt.head();
    match pkt.l4_csum_verdict() {
        Some(verdict) => verdict,
        None => {
            let start = hdr.hdr_len();
            let actual = range_sum(pkt, start, start + usize::from(hdr.payload_len));
            sums_equal(actual, claimed_payload_sum(bytes, hdr))
        }
    }
}

/// Whether the IPv4 header checksum of `pkt` (headers `hdr`, its parse) holds, by the NIC's
/// verdict where the buffer carries one, else computed; an IPv6 header has none. False when
/// the first buffer does not hold the headers.
pub fn ip_header_ok<B: PacketBuf>(pkt: &B, hdr: &Headers) -> bool {
    let bytes = pkt.head();
    if bytes.len() < hdr.hdr_len() {
        return false;
    }
    hdr.v6
        || match pkt.ip_csum_verdict() {
            Some(verdict) => verdict,
            None => {
                wire::Ipv4Packet::new_unchecked(&bytes[usize::from(hdr.l2_len)..]).verify_checksum()
            }
        }
}

/// The sum of bytes `[start, end)` of `pkt`, aligned to `start` (as if they began a checksummed
/// area): each buffer's part is summed where it lies, and swapped when it starts at an odd
/// distance from `start`.
pub(super) fn range_sum<B: PacketBuf>(pkt: &B, start: usize, end: usize) -> Sum {
    let mut sum = Sum::default();
    let mut pos = 0usize;
    pkt.for_each_segment(|s| {
        let (s_start, s_end) = (pos, pos + s.len());
        pos = s_end;
        let (a, b) = (start.max(s_start), end.min(s_end));
        if a < b {
            let part = Sum::of(&s[a - s_start..b - s_start]);
            sum = sum.add(if (a - start) % 2 == 1 {
                part.swapped()
            } else {
                part
            });
        }
    });
    sum
}

/// One's-complement sums are equal when they fold to the same value (0 and 0xffff both mean
/// zero).
fn sums_equal(a: Sum, b: Sum) -> bool {
    let norm = |s: Sum| match s.fold() {
        0xffff => 0,
        v => v,
    };
    norm(a) == norm(b)
}
