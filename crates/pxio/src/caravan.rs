//! PX-caravan (SIGCOMM'26 §6): many UDP datagrams of one flow in one large packet, each still
//! behind its own UDP header, so the receiver can give every socket its original datagrams back.
//!
//! The wire format is specified in `docs/caravan.md`. In short:
//!
//! ```text
//! | Ethernet | IPv4/IPv6 (DSCP = mark) | UDP (flow ports, total length) | caravan header | UDP hdr | payload | UDP hdr | payload | ...
//! ```
//!
//! The 8-byte caravan header (magic `PXCV`, version, datagram count, header check) is what
//! tells a caravan from an ordinary datagram that wears the mark.
//!
//! Packing is zero-copy: the caravan is a fresh outer header chained to the original datagrams'
//! UDP parts. Unpacking is zero-copy too: each datagram becomes a fresh L2/L3 header chained to
//! a refcounted view of its bytes in the caravan.
//!
//! Every entry point that looks at a received frame has a `_parsed` twin that takes the frame's
//! [`Parsed`] (made once on receive), so a caller that already classified the packet does not pay
//! for it again. The twin trusts the parse only when it fits the frame's shape ([`Parsed::fits`]:
//! same length, same first segment), and classifies afresh when it does not, so a stale parse can
//! neither read out of bounds nor change a result. The plain entry points classify, then call
//! their twins.

use crate::buf::{PacketBuf, PacketChain};
use crate::checksum::{self, Sum};
use crate::wire::{self, Class, Headers, Parsed};
use caravan_common::format::{Refused, Walk};

/// The wire format's constants and rules, in their one copy (`caravan_common::format`).
pub use caravan_common::format;

/// The DSCP codepoint that marks a caravan by default: 7 (`000111`), from the pool RFC 2474 §6
/// reserves for experimental or local use (codepoints `xxxx11`).
pub use caravan_common::format::DEFAULT_DSCP;

/// The caravan header's magic (`PXCV`) and the format version pxio writes and reads.
pub use caravan_common::format::{MAGIC, VERSION};

/// Most datagrams one caravan may carry, by default (receivers reject more).
// caravan_common's bound is 64: the cast is lossless.
pub const DEFAULT_MAX_DATAGRAMS: u16 = format::MAX_DATAGRAMS as u16;

/// UDP header bytes.
const UDP_HDR: usize = format::UDP_HEADER_LEN;

/// Caravan header bytes, behind the outer UDP header.
const CARAVAN_HDR: usize = format::HEADER_LEN;

/// What a caravan adds to its datagrams' UDP bytes: the outer UDP header and the caravan header
/// (the outer IP header replaces the datagrams' own).
pub const OVERHEAD: usize = UDP_HDR + CARAVAN_HDR;

/// Room for a caravan's outer headers (Ethernet with tags, IP, UDP, caravan header), copied on
/// the stack before the header buffer is allocated.
const MAX_OUTER: usize = 128;

/// Caravan settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaravanConfig {
    /// The DSCP codepoint that marks caravans (0..=63, not 0).
    pub dscp: u8,
    /// Largest caravan IP packet (the internal MTU).
    pub imtu: u16,
    /// Most datagrams per caravan.
    pub max_datagrams: u16,
}

impl Default for CaravanConfig {
    fn default() -> Self {
        Self {
            dscp: DEFAULT_DSCP,
            imtu: 9000,
            max_datagrams: DEFAULT_MAX_DATAGRAMS,
        }
    }
}

/// Why a caravan is malformed: the rules of `docs/caravan.md`, in their one copy in
/// `caravan_common::format` (shared with the eBPF decapsulator and `caravan::Reader`).
pub use caravan_common::format::Malformed;

/// Why packing or unpacking did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CaravanError {
    /// Not an unfragmented UDP packet with valid headers.
    #[error("not a UDP packet")]
    NotUdp,
    /// The datagram's DSCP is neither 0 nor the caravan mark: packing would lose it.
    #[error("DSCP {0} would be lost in a caravan")]
    Dscp(u8),
    /// The datagram belongs to another flow, or its IP header differs where a caravan keeps one.
    #[error("datagram does not match the caravan's flow or IP header")]
    Mismatch,
    /// Adding the datagram would exceed the iMTU or the datagram bound.
    #[error("caravan is full")]
    Full,
    /// No buffer for a header.
    #[error("buffer pool exhausted")]
    PoolExhausted,
    /// Not a caravan: no DSCP mark, or no caravan header behind the UDP header (an ordinary
    /// datagram, which a receiver passes on untouched).
    #[error("not a caravan (no DSCP mark or no caravan header)")]
    NotCaravan,
    /// A caravan header of a version this code does not understand (passed on untouched).
    #[error("caravan version {0} is not understood")]
    UnknownVersion(u8),
    /// Marked as a caravan but malformed.
    #[error("malformed caravan: {0}")]
    Malformed(Malformed),
}

/// Why [`CaravanBuilder::push_same_flow`] gave a datagram back.
#[derive(Debug)]
pub enum SameFlowRefused<B> {
    /// The datagram is of the caravan's flow, and the caravan has no room for it; its parse
    /// comes with it.
    Full(B, Parsed),
    /// The datagram's headers do not repeat the caravan's first's: the general path decides.
    Other(B),
}

/// An open caravan: datagrams are appended zero-copy until [`finish`](Self::finish).
pub struct CaravanBuilder<B: PacketBuf> {
    /// The outer header, then every datagram, growing at its end in O(1): a walk down the
    /// chain on each append would cost a caravan of k datagrams k² pointer chases.
    pkt: B::Chain,
    hdr: Headers,
    /// The first datagram's [`ip_signature`], which every other must have (the outer header
    /// keeps the first's until `finish`).
    sig: Option<(u8, u8, bool)>,
    /// The header bytes every other datagram repeats ([`push_same_flow`](Self::push_same_flow)).
    mask: Option<HeaderMask>,
    /// The sum of the flow's pseudo-header without its length (addresses and protocol).
    pseudo: Sum,
    /// One's-complement sum of the inner datagrams, aligned to the outer payload.
    inner_sum: Sum,
    inner_len: usize,
    count: u16,
    cfg: CaravanConfig,
}

impl<B: PacketBuf> std::fmt::Debug for CaravanBuilder<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaravanBuilder")
            .field("hdr", &self.hdr)
            .field("count", &self.count)
            .field("ip_len", &self.ip_len())
            .field("segments", &self.pkt.packet().num_segs())
            .finish_non_exhaustive()
    }
}

/// The IP fields a caravan keeps once for all its datagrams: they must agree. `None` for a
/// header too short for its family, or IPv4 with options. Read straight from the bytes (ECN,
/// TTL or hop limit, DF): it runs on every datagram packed.
fn ip_signature(frame: &[u8], hdr: &Headers) -> Option<(u8, u8, bool)> {
    let l3 = frame.get(usize::from(hdr.l2_len)..usize::from(hdr.l2_len + hdr.l3_len))?;
    if hdr.v6 {
        let ip = l3.first_chunk::<40>()?;
        // Version, traffic class (its low two bits are ECN) and flow label; then the hop limit.
        Some(((ip[1] >> 4) & 0b11, ip[7], true))
    } else {
        let ip = l3.first_chunk::<20>()?;
        if ip[0] & 0x0f != 5 {
            return None; // IP options would have to be repeated per datagram: not packed
        }
        Some((ip[1] & 0b11, ip[8], ip[6] & 0x40 != 0))
    }
}

fn dscp_of(frame: &[u8], hdr: &Headers) -> u8 {
    let l3 = &frame[usize::from(hdr.l2_len)..];
    if hdr.v6 {
        wire::Ipv6Packet::new_unchecked(l3).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(l3).dscp()
    }
}

/// Sum of a datagram's UDP header and payload, from its checksum when it has one (no payload
/// read), else by reading it. `layout` gives its header lengths, `ip_len` its IP length, and
/// `pseudo` the sum of its pseudo-header without the length (its flow's: addresses and
/// protocol).
fn datagram_sum<B: PacketBuf>(pkt: &B, layout: &Headers, ip_len: u16, pseudo: Sum) -> Sum {
    let frame = pkt.head();
    let l4 = layout.l4_offset();
    let udp = wire::UdpPacket::new_unchecked(&frame[l4..l4 + UDP_HDR]);
    let udp_len = u32::from(ip_len - layout.l3_len);
    if udp.checksum() != 0 {
        // The length is one 16-bit word of the pseudo-header in either family (IPv6's 32-bit
        // field has a zero high word below 64 KiB).
        let pseudo = pseudo.add(Sum(udp_len));
        // The sender's sum had the checksum field as 0; inside the caravan the field holds the
        // checksum itself, which the outer checksum covers too.
        return checksum::covered_sum(udp.checksum())
            .sub(pseudo)
            .add(Sum(u32::from(udp.checksum())));
    }
    read_sum(pkt, l4, udp_len as usize)
}

/// Sum of `len` bytes of `pkt` from `offset`, aligned to `offset`.
fn read_sum<B: PacketBuf>(pkt: &B, offset: usize, len: usize) -> Sum {
    let (end, mut pos, mut sum) = (offset + len, 0usize, Sum::default());
    pkt.for_each_segment(|s| {
        let (a, b) = (offset.max(pos), end.min(pos + s.len()));
        if a < b {
            let part = Sum::of(&s[a - pos..b - pos]);
            sum = sum.add(if (a - offset) % 2 == 1 {
                part.swapped()
            } else {
                part
            });
        }
        pos += s.len();
    });
    sum
}

/// The UDP headers of the frame whose first segment is `head` and whose length is `frame_len`:
/// `parsed`'s when it fits that shape, else those of a fresh classification (a parse of
/// another shape, a stale one or another packet's, is never trusted). `None` when the frame is
/// not a well-formed UDP datagram.
#[inline]
fn udp_headers(head: &[u8], frame_len: usize, parsed: &Parsed) -> Option<Headers> {
    parsed.or_fresh(head, frame_len).udp().copied()
}

/// What [`CaravanBuilder::start`] checks of a caravan's first datagram (`frame`, its UDP
/// headers `hdr` or `None` when it is not UDP): DSCP 0 or the mark, no IPv4 options, room in
/// the iMTU; returns its headers.
fn opening(
    frame: &[u8],
    hdr: Option<Headers>,
    cfg: &CaravanConfig,
) -> Result<Headers, CaravanError> {
    let hdr = hdr.ok_or(CaravanError::NotUdp)?;
    let dscp = dscp_of(frame, &hdr);
    if dscp != 0 && dscp != cfg.dscp {
        return Err(CaravanError::Dscp(dscp));
    }
    if ip_signature(frame, &hdr).is_none() || hdr.hdr_len() + CARAVAN_HDR > MAX_OUTER {
        return Err(CaravanError::Mismatch);
    }
    if usize::from(hdr.ip_len) + OVERHEAD > usize::from(cfg.imtu) {
        return Err(CaravanError::Full);
    }
    Ok(hdr)
}

/// What [`CaravanBuilder::push`] checks of a datagram (`frame`, its UDP headers `hdr` or
/// `None`) against the caravan's first (`first`, whose headers are `first_hdr`): the same flow,
/// L2 header and IP signature (ECN, TTL, DF), and DSCP 0 or the mark; returns its headers.
fn joining(
    first: &[u8],
    first_hdr: &Headers,
    first_sig: Option<(u8, u8, bool)>,
    frame: &[u8],
    hdr: Option<Headers>,
    cfg: &CaravanConfig,
) -> Result<Headers, CaravanError> {
    let hdr = hdr.ok_or(CaravanError::NotUdp)?;
    if hdr.key != first_hdr.key
        || hdr.l2_len != first_hdr.l2_len
        || hdr.l3_len != first_hdr.l3_len
        || frame[..usize::from(hdr.l2_len)] != first[..usize::from(hdr.l2_len)]
        || ip_signature(frame, &hdr) != first_sig
    {
        return Err(CaravanError::Mismatch);
    }
    let dscp = dscp_of(frame, &hdr);
    if dscp != 0 && dscp != cfg.dscp {
        return Err(CaravanError::Dscp(dscp));
    }
    Ok(hdr)
}

/// Most header bytes, from the link header to the UDP ports, that a [`HeaderMask`] covers:
/// two VLAN tags, IPv6 and the ports fit.
const MASKED_MAX: usize = 64;

/// Which bytes of a caravan's first datagram, from its link header to its ports, every other
/// datagram of the caravan must repeat: all of them but the IP lengths, and IPv4's
/// identification and header checksum. Compared eight bytes at a time.
#[derive(Clone, Copy, Debug)]
struct HeaderMask {
    /// Bytes covered (at least eight).
    len: usize,
    /// 0xff where the bytes must be equal, 0 where they may differ: one of [`MASKS`], made
    /// when the program is built. A mask made for each caravan was written byte by byte and
    /// read back eight or sixteen at a time at once, which stalls on store forwarding.
    bytes: &'static [u8; MASKED_MAX],
}

/// Link headers a [`HeaderMask`] is made for: Ethernet and zero to six VLAN tags (IPv4; IPv6
/// fits one tag at most).
const MASK_LAYOUTS: usize = 7;

/// The masks for each link header ([`MASK_LAYOUTS`], by tag count) and family (IPv4, IPv6).
static MASKS: [[[u8; MASKED_MAX]; 2]; MASK_LAYOUTS] = {
    let mut all = [[[0u8; MASKED_MAX]; 2]; MASK_LAYOUTS];
    let mut tags = 0;
    while tags < MASK_LAYOUTS {
        all[tags][0] = mask_bytes(ETH_HLEN + 4 * tags, false);
        all[tags][1] = mask_bytes(ETH_HLEN + 4 * tags, true);
        tags += 1;
    }
    all
};

/// Untagged Ethernet header bytes.
const ETH_HLEN: usize = 14;

/// The mask bytes of a link header of `l2` bytes and an IPv4 header without options (or an
/// IPv6 one, `v6`): 0xff up to the ports' end, but for the fields that differ between
/// datagrams. Bytes past [`MASKED_MAX`] are left out (such a layout gets no mask).
const fn mask_bytes(l2: usize, v6: bool) -> [u8; MASKED_MAX] {
    let l3 = if v6 { 40 } else { 20 };
    let mut bytes = [0u8; MASKED_MAX];
    let mut i = 0;
    while i < l2 + l3 + 4 && i < MASKED_MAX {
        let free = if v6 {
            i >= l2 + 4 && i < l2 + 6 // payload length
        } else {
            (i >= l2 + 2 && i < l2 + 6) // total length, identification
                || (i >= l2 + 10 && i < l2 + 12) // header checksum
        };
        if !free {
            bytes[i] = 0xff;
        }
        i += 1;
    }
    bytes
}

impl HeaderMask {
    /// The mask for datagrams like one with headers `h` (UDP; IPv4 without options, or IPv6
    /// without extension headers); `None` for any other layout, whose datagrams take the
    /// general path.
    fn of(h: &Headers) -> Option<HeaderMask> {
        let l2 = usize::from(h.l2_len);
        let len = h.l4_offset() + 4;
        let l3_plain = if h.v6 { 40 } else { 20 };
        if len > MASKED_MAX
            || h.l3_len != l3_plain
            || l2 < ETH_HLEN
            || !(l2 - ETH_HLEN).is_multiple_of(4)
        {
            return None;
        }
        let bytes = &MASKS.get((l2 - ETH_HLEN) / 4)?[usize::from(h.v6)];
        Some(HeaderMask { len, bytes })
    }

    /// Whether `new` repeats `old` wherever the mask says it must.
    #[inline]
    fn repeats(&self, new: &[u8], old: &[u8]) -> bool {
        let n = self.len;
        let (Some(new), Some(old)) = (new.get(..n), old.get(..n)) else {
            return false;
        };
        let word = |b: &[u8], at: usize| {
            u64::from_ne_bytes(b[at..at + 8].try_into().expect("eight bytes"))
        };
        let differ = |at: usize| (word(new, at) ^ word(old, at)) & word(self.bytes, at);
        let mut diff = 0;
        let mut at = 0;
        while at + 8 <= n {
            diff |= differ(at);
            at += 8;
        }
        if at < n {
            // The last bytes, in a word that overlaps the one before (`n` is at least 8).
            diff |= differ(n - 8);
        }
        diff == 0
    }
}

/// The IP length of the datagram whose first segment is `head` and whose length is
/// `frame_len`, when its headers repeat, byte for byte, those of the datagram `first` (its bytes from the link
/// header on; `first_hdr` its headers, UDP without IP options) wherever a caravan keeps one
/// header for all (`mask`, of `first_hdr`): the link header, the IP header but for its length,
/// identification and checksum (IPv4) or payload length (IPv6), and the ports; and when its
/// lengths agree with each other and the frame as a parse requires. Its headers are then
/// `first_hdr` with that length ([`with_ip_len`]), as [`Parsed::of`] finds them.
#[inline]
fn repeated_headers(
    first: &[u8],
    first_hdr: &Headers,
    mask: &HeaderMask,
    head: &[u8],
    frame_len: usize,
) -> Option<u16> {
    let (l2, l3) = (usize::from(first_hdr.l2_len), usize::from(first_hdr.l3_len));
    let l4 = l2 + l3;
    let new = head.get(..l4 + UDP_HDR)?;
    if !mask.repeats(new, first) {
        return None;
    }
    let be16 = |at: usize| usize::from(u16::from_be_bytes([new[at], new[at + 1]]));
    let ip_len = if first_hdr.v6 {
        l3 + be16(l2 + 4)
    } else {
        be16(l2 + 2)
    };
    // A UDP length that fills the IP payload exactly, in a frame that holds the IP packet
    // (what a parse requires).
    if ip_len < l3 + UDP_HDR
        || ip_len > usize::from(u16::MAX)
        || be16(l4 + 4) != ip_len - l3
        || l2 + ip_len > frame_len
    {
        return None;
    }
    // Bounded by u16::MAX just above: lossless.
    Some(ip_len as u16)
}

/// `first_hdr` with the IP length `ip_len` (at least its IP and UDP headers): the headers of
/// a datagram of the same flow and layout.
fn with_ip_len(first_hdr: &Headers, ip_len: u16) -> Headers {
    Headers {
        ip_len,
        payload_len: ip_len - first_hdr.l3_len - UDP_HDR as u16,
        ..*first_hdr
    }
}

/// Whether `second` joins `first` in a caravan, told from their header bytes alone: `second`'s
/// repeat `first`'s wherever a caravan keeps one header ([`CaravanBuilder::push_same_flow`]),
/// `first` could open a caravan, and the two fit one. When so, [`can_pair_parsed`] says yes
/// too, and `second`'s parse (the one [`Parsed::of`] makes) comes back; `None` says only that
/// this shortcut cannot tell, and the caller asks `can_pair_parsed`.
pub fn pairs_by_headers<B: PacketBuf>(
    first: &B,
    first_parsed: &Parsed,
    second: &B,
    cfg: &CaravanConfig,
) -> Option<Parsed> {
    let a = opening(
        first.head(),
        udp_headers(first.head(), first.len(), first_parsed),
        cfg,
    )
    .ok()?;
    let mask = HeaderMask::of(&a)?;
    let b = with_ip_len(
        &a,
        repeated_headers(first.head(), &a, &mask, second.head(), second.len())?,
    );
    let ip_len = usize::from(a.ip_len) + OVERHEAD + usize::from(b.ip_len) - usize::from(a.l3_len);
    if cfg.max_datagrams < 2
        || ip_len > usize::from(cfg.imtu)
        || 1 + first.num_segs() + second.num_segs() > B::MAX_SEGS
    {
        return None;
    }
    Some(Parsed::of_headers(
        Class::Udp(b),
        second.head(),
        second.len(),
    ))
}

/// Whether `first` could open a caravan ([`CaravanBuilder::start`] would take it, pool
/// permitting), without taking it: a packer may hold it until a second datagram comes.
pub fn packable<B: PacketBuf>(first: &B, cfg: &CaravanConfig) -> Result<(), CaravanError> {
    packable_parsed(first, &Parsed::of(first.head(), first.len()), cfg)
}

/// [`packable`] for a datagram whose parse the caller already has (`parsed`, checked to fit
/// `first`, made again if it does not).
pub fn packable_parsed<B: PacketBuf>(
    first: &B,
    parsed: &Parsed,
    cfg: &CaravanConfig,
) -> Result<(), CaravanError> {
    let hdr = udp_headers(first.head(), first.len(), parsed);
    opening(first.head(), hdr, cfg).map(|_| ())
}

/// Whether `first` and `second` could travel in one caravan: [`CaravanBuilder::start`] with
/// `first`, then [`CaravanBuilder::push`] of `second`, would both succeed (pool permitting).
/// A packer that holds a lone datagram asks this before it builds anything, so that a datagram
/// nothing joins can still leave as it came (`docs/caravan.md`, "Single datagrams").
pub fn can_pair<B: PacketBuf>(
    first: &B,
    second: &B,
    cfg: &CaravanConfig,
) -> Result<(), CaravanError> {
    let first_parsed = Parsed::of(first.head(), first.len());
    let second_parsed = Parsed::of(second.head(), second.len());
    can_pair_parsed(first, &first_parsed, second, &second_parsed, cfg)
}

/// [`can_pair`] for two datagrams whose parses the caller already has, each after its packet
/// (each parse checked to fit its packet, made again if it does not).
pub fn can_pair_parsed<B: PacketBuf>(
    first: &B,
    first_parsed: &Parsed,
    second: &B,
    second_parsed: &Parsed,
    cfg: &CaravanConfig,
) -> Result<(), CaravanError> {
    let a = opening(
        first.head(),
        udp_headers(first.head(), first.len(), first_parsed),
        cfg,
    )?;
    let b = joining(
        first.head(),
        &a,
        ip_signature(first.head(), &a),
        second.head(),
        udp_headers(second.head(), second.len(), second_parsed),
        cfg,
    )?;
    // One outer IP header, the caravan's headers, and both datagrams' UDP bytes.
    let ip_len = usize::from(a.ip_len) + OVERHEAD + usize::from(b.ip_len) - usize::from(a.l3_len);
    if cfg.max_datagrams < 2
        || ip_len > usize::from(cfg.imtu)
        || 1 + first.num_segs() + second.num_segs() > B::MAX_SEGS
    {
        return Err(CaravanError::Full);
    }
    Ok(())
}

impl<B: PacketBuf> CaravanBuilder<B> {
    /// Opens a caravan with its first datagram.
    pub fn start(first: B, cfg: CaravanConfig, pool: &B::Pool) -> Result<Self, (CaravanError, B)> {
        let parsed = Parsed::of(first.head(), first.len());
        Self::start_parsed(first, &parsed, cfg, pool)
    }

    /// [`start`](Self::start) for a datagram whose parse the caller already has (`parsed`,
    /// checked to fit `first`, made again if it does not).
    pub fn start_parsed(
        first: B,
        parsed: &Parsed,
        cfg: CaravanConfig,
        pool: &B::Pool,
    ) -> Result<Self, (CaravanError, B)> {
        let first_hdr = udp_headers(first.head(), first.len(), parsed);
        let hdr = match opening(first.head(), first_hdr, &cfg) {
            Ok(h) => h,
            Err(e) => return Err((e, first)),
        };
        // The outer header: the first datagram's L2/L3/UDP headers and room for the caravan
        // header, rewritten in finish().
        let outer_len = hdr.hdr_len() + CARAVAN_HDR;
        let mut outer = [0u8; MAX_OUTER];
        outer[..hdr.hdr_len()].copy_from_slice(&first.head()[..hdr.hdr_len()]);
        let Some(outer) = B::alloc_with(pool, &outer[..outer_len]) else {
            return Err((CaravanError::PoolExhausted, first));
        };
        let sig = ip_signature(first.head(), &hdr);
        let mut builder = Self {
            pkt: B::Chain::new(outer),
            hdr,
            sig,
            mask: HeaderMask::of(&hdr),
            pseudo: crate::split::pseudo_header(first.head(), &hdr, 0),
            inner_sum: Sum::default(),
            inner_len: 0,
            count: 0,
            cfg,
        };
        // The headers just checked are the first datagram's own, and it is its own flow: no
        // parse and no comparison again.
        if let Err((e, first)) = builder.append(first, hdr.ip_len) {
            return Err((e, first));
        }
        Ok(builder)
    }

    /// Datagrams so far.
    pub fn count(&self) -> u16 {
        self.count
    }

    /// IP bytes the caravan would have now.
    pub fn ip_len(&self) -> usize {
        usize::from(self.hdr.l3_len) + OVERHEAD + self.inner_len
    }

    /// Whether `next` (a datagram of `ip_len` IP bytes) would fit. A length shorter than the
    /// caravan's IP header cannot be a datagram of this flow: it does not fit.
    pub fn fits(&self, ip_len: usize) -> bool {
        let Some(inner) = ip_len.checked_sub(usize::from(self.hdr.l3_len)) else {
            return false;
        };
        self.count < self.cfg.max_datagrams && self.ip_len() + inner <= usize::from(self.cfg.imtu)
    }

    /// Appends a datagram of the same flow; gives it back when it does not belong or fit.
    pub fn push(&mut self, dgram: B) -> Result<(), (CaravanError, B)> {
        let parsed = Parsed::of(dgram.head(), dgram.len());
        self.push_parsed(dgram, &parsed)
    }

    /// [`push`](Self::push) for a datagram whose parse the caller already has (`parsed`,
    /// checked to fit `dgram`, made again if it does not).
    pub fn push_parsed(&mut self, dgram: B, parsed: &Parsed) -> Result<(), (CaravanError, B)> {
        let hdr = udp_headers(dgram.head(), dgram.len(), parsed);
        self.push_headers(dgram, hdr)
    }

    /// [`push`](Self::push) of a datagram whose UDP headers (`None`: not UDP) are known to be
    /// its own.
    fn push_headers(&mut self, dgram: B, hdr: Option<Headers>) -> Result<(), (CaravanError, B)> {
        let joined = joining(
            self.pkt.packet().head(),
            &self.hdr,
            self.sig,
            dgram.head(),
            hdr,
            &self.cfg,
        );
        match joined {
            // Joined: the same flow and header layout as the first.
            Ok(hdr) => self.append(dgram, hdr.ip_len),
            Err(e) => Err((e, dgram)),
        }
    }

    /// Appends a datagram whose headers repeat the caravan's first's, byte for byte, wherever
    /// the caravan keeps one header for all: the link header, the IP header but for its length,
    /// identification and checksum (IPv4) or payload length (IPv6), and the ports. Nothing but
    /// those bytes and the lengths is read: no parse, no flow key. This is the cost of a flow's
    /// run of datagrams once its caravan is open.
    ///
    /// What this takes, [`push_parsed`](Self::push_parsed) would take too, with the same
    /// result: the same flow, link header and IP signature, the DSCP the first had (0 or the
    /// mark), and the lengths a parse accepts. A datagram of the caravan's flow that does not
    /// fit comes back as [`SameFlowRefused::Full`], with its parse (the one [`Parsed::of`] makes),
    /// for the caller to start the flow's next caravan with; anything else comes back
    /// untouched, as [`SameFlowRefused::Other`], for `push_parsed`, which decides as always.
    pub fn push_same_flow(&mut self, dgram: B) -> Result<(), SameFlowRefused<B>> {
        let Some(ip_len) = self.same_flow_ip_len(dgram.head(), dgram.len()) else {
            return Err(SameFlowRefused::Other(dgram));
        };
        self.append(dgram, ip_len).map_err(|(e, dgram)| match e {
            CaravanError::Full => {
                let hdr = with_ip_len(&self.hdr, ip_len);
                let parsed = Parsed::of_headers(Class::Udp(hdr), dgram.head(), dgram.len());
                SameFlowRefused::Full(dgram, parsed)
            }
            _ => SameFlowRefused::Other(dgram),
        })
    }

    /// The IP length of the datagram whose first segment is `head` and whose length is
    /// `frame_len`, when its headers repeat the caravan's first's ([`push_same_flow`]).
    ///
    /// [`push_same_flow`]: Self::push_same_flow
    #[inline]
    fn same_flow_ip_len(&self, head: &[u8], frame_len: usize) -> Option<u16> {
        let mask = self.mask.as_ref()?;
        repeated_headers(self.pkt.packet().head(), &self.hdr, mask, head, frame_len)
    }

    /// Appends `dgram`, a datagram of this caravan's flow with the first's header layout and
    /// an IP length of `ip_len`, when it fits.
    fn append(&mut self, mut dgram: B, ip_len: u16) -> Result<(), (CaravanError, B)> {
        if !self.fits(usize::from(ip_len))
            || self.pkt.packet().num_segs() + dgram.num_segs() > B::MAX_SEGS
        {
            return Err((CaravanError::Full, dgram));
        }
        let hdr = &self.hdr;
        let sum = datagram_sum(&dgram, hdr, ip_len, self.pseudo);
        let udp_len = usize::from(ip_len - hdr.l3_len);
        // Keep only the UDP header and payload (and drop Ethernet padding).
        let l4 = hdr.l4_offset();
        if !dgram.truncate(l4 + udp_len) || !dgram.adj(l4) {
            return Err((CaravanError::NotUdp, dgram));
        }
        if let Err(dgram) = self.pkt.append(dgram) {
            return Err((CaravanError::Full, dgram));
        }
        self.inner_sum = self.inner_sum.add(if self.inner_len % 2 == 1 {
            sum.swapped()
        } else {
            sum
        });
        self.inner_len += udp_len;
        self.count += 1;
        Ok(())
    }

    /// Closes the caravan: outer lengths, the DSCP mark, the IPv4 header checksum, the caravan
    /// header and the outer UDP checksum (derived from the inner checksums, without reading
    /// payload).
    pub fn finish(self) -> B {
        let hdr = self.hdr;
        let (l2, l3) = (usize::from(hdr.l2_len), usize::from(hdr.l3_len));
        let udp_len = (OVERHEAD + self.inner_len) as u16;
        // At most `max_datagrams` (a u16 the configuration bounds to 64): lossless.
        let caravan_hdr = format::encode_header(self.count as u8);
        let ip_len = hdr.l3_len + udp_len;
        let dscp = self.cfg.dscp;
        let mut pkt = self.pkt.into_packet();
        let bytes = pkt
            .head_mut()
            .expect("the outer header is a fresh private buffer");
        if hdr.v6 {
            let mut ip = wire::Ipv6Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
            ip.set_payload_len(udp_len);
            ip.set_dscp(dscp);
        } else {
            let mut ip = wire::Ipv4Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
            ip.set_total_len(ip_len);
            ip.set_dscp(dscp);
            ip.fill_checksum();
        }
        let l4 = l2 + l3;
        bytes[l4 + UDP_HDR..l4 + OVERHEAD].copy_from_slice(&caravan_hdr);
        // The flow's pseudo-header with the caravan's length (one 16-bit word, as in
        // `datagram_sum`).
        let pseudo = self.pseudo.add(Sum(u32::from(udp_len)));
        let mut udp = wire::UdpPacket::new_unchecked(&mut bytes[l4..l4 + UDP_HDR]);
        udp.set_len(udp_len);
        udp.set_checksum(0);
        let sum = pseudo
            .add(Sum::of(&bytes[l4..l4 + OVERHEAD]))
            .add(self.inner_sum);
        let mut value = sum.checksum();
        if value == 0 {
            value = 0xffff; // 0 means "no checksum" in UDP
        }
        wire::UdpPacket::new_unchecked(&mut bytes[l4..l4 + UDP_HDR]).set_checksum(value);
        pkt
    }
}

/// Whether `frame` looks like a caravan from the outside: a UDP packet with DSCP `dscp` whose
/// payload starts with a caravan header of this version (its datagrams are not checked).
pub fn is_caravan(head: &[u8], frame_len: usize, dscp: u8) -> bool {
    is_caravan_parsed(head, frame_len, &Parsed::of(head, frame_len), dscp)
}

/// [`is_caravan`] for a frame whose parse the caller already has (`parsed`, checked to fit the
/// frame, made again if it does not).
pub fn is_caravan_parsed(head: &[u8], frame_len: usize, parsed: &Parsed, dscp: u8) -> bool {
    let Some(h) = udp_headers(head, frame_len, parsed) else {
        return false;
    };
    let ip_payload = usize::from(h.ip_len - h.l3_len);
    dscp_of(head, &h) == dscp
        && ip_payload >= OVERHEAD
        && head
            .get(h.hdr_len()..)
            .is_some_and(|rest| format::recognise_payload(rest).is_ok())
}

/// Reads the caravan header of the UDP packet `hdr` in `pkt`.
fn caravan_header<B: PacketBuf>(
    pkt: &B,
    hdr: &Headers,
) -> Result<format::CaravanHeader, CaravanError> {
    let mut bytes = [0u8; CARAVAN_HDR];
    if usize::from(hdr.ip_len - hdr.l3_len) < OVERHEAD || !read_into(pkt, hdr.hdr_len(), &mut bytes)
    {
        return Err(CaravanError::NotCaravan);
    }
    format::recognise(&bytes).map_err(|e| match e {
        Refused::UnknownVersion(v) => CaravanError::UnknownVersion(v),
        Refused::Malformed(m) => CaravanError::Malformed(m),
        Refused::NotCaravan => CaravanError::NotCaravan,
    })
}

/// Validates a caravan: the mark and the caravan header (magic, version, check), then every
/// inner header (length at least 8, the outer ports, inside the caravan), the lengths adding up
/// to the outer payload exactly, the datagram bound and the header's count. Returns the outer
/// headers and the datagram count.
pub fn parse<B: PacketBuf>(pkt: &B, cfg: &CaravanConfig) -> Result<(Headers, u16), CaravanError> {
    parse_parsed(pkt, &Parsed::of(pkt.head(), pkt.len()), cfg)
}

/// [`parse`] for a packet whose [`wire`] parse the caller already has (`parsed`, checked to fit
/// `pkt`, made again if it does not): only the caravan is read, not its outer headers again.
pub fn parse_parsed<B: PacketBuf>(
    pkt: &B,
    parsed: &Parsed,
    cfg: &CaravanConfig,
) -> Result<(Headers, u16), CaravanError> {
    let hdr = udp_headers(pkt.head(), pkt.len(), parsed).ok_or(CaravanError::NotUdp)?;
    if dscp_of(pkt.head(), &hdr) != cfg.dscp {
        return Err(CaravanError::NotCaravan);
    }
    let header = caravan_header(pkt, &hdr)?;
    let payload_len = usize::from(hdr.ip_len - hdr.l3_len) - UDP_HDR;
    let mut walk = Walk::new(
        &header,
        payload_len,
        hdr.key.sport,
        hdr.key.dport,
        u32::from(cfg.max_datagrams),
    );
    let malformed = CaravanError::Malformed;
    while let Some(offset) = walk.next_header().map_err(malformed)? {
        let mut h = [0u8; UDP_HDR];
        if !read_into(pkt, hdr.hdr_len() + offset, &mut h) {
            return Err(malformed(Malformed::Truncated));
        }
        walk.accept(&h).map_err(malformed)?;
    }
    // At most `cfg.max_datagrams`, a u16: lossless.
    let count = walk.finish().map_err(malformed)? as u16;
    Ok((hdr, count))
}

/// Copies `out.len()` bytes at `offset` out of a possibly chained packet.
fn read_into<B: PacketBuf>(pkt: &B, offset: usize, out: &mut [u8]) -> bool {
    let (end, mut pos, mut copied) = (offset + out.len(), 0usize, 0usize);
    pkt.for_each_segment(|s| {
        let (a, b) = (offset.max(pos), end.min(pos + s.len()));
        if a < b {
            out[a - offset..b - offset].copy_from_slice(&s[a - pos..b - pos]);
            copied += b - a;
        }
        pos += s.len();
    });
    copied == out.len()
}

/// Unpacks a caravan into its datagrams, pushed to `out` in order: each a fresh copy of the outer
/// L2/L3 header (DSCP back to 0, lengths and IPv4 ID/checksum per datagram) chained to a
/// zero-copy view of the inner UDP datagram, whose own checksum is untouched. On error nothing
/// was pushed and the caravan comes back.
pub fn unpack<B: PacketBuf>(
    pkt: B,
    cfg: &CaravanConfig,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, (CaravanError, B)> {
    let parsed = Parsed::of(pkt.head(), pkt.len());
    unpack_parsed(pkt, &parsed, cfg, pool, out)
}

/// [`unpack`] for a caravan whose [`wire`] parse the caller already has (`parsed`, checked to
/// fit `pkt`, made again if it does not).
pub fn unpack_parsed<B: PacketBuf>(
    pkt: B,
    parsed: &Parsed,
    cfg: &CaravanConfig,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, (CaravanError, B)> {
    let (hdr, count) = match parse_parsed(&pkt, parsed, cfg) {
        Ok(x) => x,
        Err(e) => return Err((e, pkt)),
    };
    let start = out.len();
    let (l2, l3) = (usize::from(hdr.l2_len), usize::from(hdr.l3_len));
    let base_id = if hdr.v6 {
        0
    } else {
        wire::Ipv4Packet::new_unchecked(&pkt.head()[l2..]).ident()
    };
    let mut offset = hdr.hdr_len() + CARAVAN_HDR;
    for i in 0..count {
        let mut h = [0u8; UDP_HDR];
        let read = read_into(&pkt, offset, &mut h);
        debug_assert!(read, "parse() checked every inner header");
        let len = usize::from(wire::UdpPacket::new_unchecked(&h[..]).len());
        let made = B::alloc_with(pool, &pkt.head()[..l2 + l3]).and_then(|mut d| {
            let view = pkt.share_range(offset, len, pool)?;
            let bytes = d.head_mut()?;
            let ip_len = (l3 + len) as u16;
            if hdr.v6 {
                let mut ip = wire::Ipv6Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
                ip.set_payload_len(len as u16);
                ip.set_dscp(0);
            } else {
                let mut ip = wire::Ipv4Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
                ip.set_total_len(ip_len);
                ip.set_dscp(0);
                ip.set_ident(base_id.wrapping_add(i));
                ip.fill_checksum();
            }
            d.chain(view).ok()?;
            Some(d)
        });
        let Some(d) = made else {
            out.truncate(start);
            return Err((CaravanError::PoolExhausted, pkt));
        };
        out.push(d);
        offset += len;
    }
    Ok(usize::from(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every mask keeps the bytes a caravan keeps one of, and frees exactly the fields that
    /// differ between datagrams: made here as the fields are named, byte by byte.
    #[test]
    fn masks_free_only_the_lengths_identification_and_checksum() {
        for v6 in [false, true] {
            let mut masked = Vec::new();
            for tags in 0..MASK_LAYOUTS {
                let l2 = ETH_HLEN + 4 * tags;
                let l3 = if v6 { 40 } else { 20 };
                let len = l2 + l3 + 4;
                let h = Headers {
                    l2_len: l2 as u16,
                    l3_len: l3 as u16,
                    l4_len: 8,
                    v6,
                    proto: wire::ip_proto::UDP,
                    ip_len: (l3 + 8) as u16,
                    payload_len: 0,
                    key: wire::FlowKey {
                        src: [0; 16],
                        dst: [0; 16],
                        sport: 1,
                        dport: 2,
                        proto: wire::ip_proto::UDP,
                        v6,
                    },
                };
                let Some(mask) = HeaderMask::of(&h) else {
                    continue;
                };
                masked.push(tags);
                assert_eq!(mask.len, len);
                let mut want = [0u8; MASKED_MAX];
                want[..len].fill(0xff);
                // (start, end) of each field that differs between datagrams.
                let free: Vec<(usize, usize)> = if v6 {
                    vec![(l2 + 4, l2 + 6)]
                } else {
                    vec![(l2 + 2, l2 + 4), (l2 + 4, l2 + 6), (l2 + 10, l2 + 12)]
                };
                for (start, end) in free {
                    want[start..end].fill(0);
                }
                assert_eq!(mask.bytes, &want, "{tags} tags, v6 {v6}");
            }
            // Every layout whose headers fit the mask has one: IPv4 with up to six tags, IPv6
            // with one at most.
            let fits: Vec<usize> = if v6 { vec![0, 1] } else { (0..7).collect() };
            assert_eq!(masked, fits, "v6 {v6}");
        }
    }
}
