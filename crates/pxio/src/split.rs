//! Splitting outbound TCP packets to the path MTU (SIGCOMM'26 §3, §4.1): TSO when the port
//! granted it, software GSO otherwise. The payload is never copied: each segment is a fresh
//! header chained to a refcounted view of the original's bytes, or, when the cuts fall on the
//! packet's buffer boundaries, the packet's own buffers with the header written in front (in
//! the buffer's headroom when it has room and is not shared).
//!
//! # Flags and the urgent pointer
//! Each piece carries what the sender's own TCP would have put in an MSS-sized segment of the
//! same bytes (Linux `tcp_transmit_skb`, `tcp_gso_segment`):
//! - PSH, FIN and RST on the last piece only; CWR on the first only.
//! - **URG**: the urgent pointer marks one point of the sequence space (`seq + pointer`, the
//!   byte after the urgent data, RFC 6093). The first piece keeps the original pointer; every
//!   later piece that starts before that point carries URG and the pointer rebased to its own
//!   sequence number (it may point past the piece's end: the urgent data is ahead); a piece
//!   that starts at or after it carries neither URG nor a pointer.
//! - **SYN** (a SYN carrying data, e.g. TCP Fast Open): only the first piece carries SYN; the
//!   others are plain data segments that follow it in sequence space (the SYN itself takes one
//!   sequence number before the data). A receiver still in
//!   SYN-RECEIVED drops those without ACK (RFC 9293 §3.10.7.4) and the sender retransmits what
//!   the SYN-ACK did not acknowledge (RFC 7413 §4.2.2), as for a SYN cut short by any router;
//!   the SYN's options (MSS, window scale, SACK-permitted) on them are ignored, as RFC 9293
//!   requires of options that belong in a SYN.
//!
//! # TSO
//! A NIC segmenting with TSO copies the TCP flags it is not told about into every segment, and
//! the urgent pointer unchanged (Intel's TSO flag masks, for instance, only clear FIN/PSH and
//! CWR); Linux never hands such packets to TSO (`tcp_send_mss` turns large segments off for
//! `MSG_OOB`, and SYNs are never GSO). So packets with URG or SYN are split in software even
//! when the port granted TSO: both paths give the same pieces.

use crate::buf::{mark_rewritten_checksums, PacketBuf, TxOffload};
use crate::checksum::{self, Sum};
use crate::wire::{self, tcp_flags, Class, Headers, Parsed};

/// Why a packet could not be split. The caller drops and counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// The MTU leaves no room for payload after the headers.
    #[error("MTU {mtu} leaves no room for payload after {headers} header bytes")]
    MtuTooSmall {
        /// The MTU asked for.
        mtu: u16,
        /// IP + TCP header bytes.
        headers: u16,
    },
    /// No buffer for a segment's header or view.
    #[error("buffer pool exhausted while splitting")]
    PoolExhausted,
    /// The packet's TCP checksum does not match its bytes: it is not re-checksummed into
    /// segments that would look valid.
    #[error("TCP checksum of the packet to split does not verify")]
    BadChecksum,
}

/// What the port can do for us on transmit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitOffloads {
    /// TCP segmentation offload was granted.
    pub tso: bool,
    /// IPv4 and TCP checksum offload were granted.
    pub checksum: bool,
}

/// Splits `pkt` so that no IP packet exceeds `mtu`, pushing the result to `out`.
///
/// Packets that already fit, and everything that is not TCP, go to `out` unchanged. With TSO the
/// packet goes out whole with a TSO request (unless it carries URG or SYN, see the module docs);
/// otherwise it is cut in software: sequence numbers advance, IPv4 IDs increase by one per
/// segment, flags and the urgent pointer are set per piece as the module docs say, and every
/// checksum is correct (or left to the NIC when checksum offload was granted). The software
/// sums verify the input's TCP checksum on their way ([`SplitError::BadChecksum`]); with
/// checksum offload or TSO nothing is verified, since a caller that rewrote headers for the NIC
/// to finish hands in stale checksums on purpose: a caller forwarding what it received checks
/// first ([`crate::merge::tcp_checksums_ok`]). On error nothing was pushed and the packet is
/// returned with the reason.
pub fn split_tcp<B: PacketBuf>(
    pkt: B,
    mtu: u16,
    offloads: SplitOffloads,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, (SplitError, B)> {
    let parsed = Parsed::of(pkt.head(), pkt.len());
    split_tcp_parsed(pkt, &parsed, mtu, offloads, pool, out)
}

/// [`split_tcp`] for a packet whose parse the caller already has (one parse per packet,
/// carried through the pipeline): nothing is classified again. A parse that does not fit the
/// packet's shape (its length or first segment changed since, see [`Parsed::fits`]) is made
/// again. The parse must be this packet's, with the headers as they are now: the split takes
/// its offsets and lengths from it.
///
/// # Errors
/// As for [`split_tcp`].
pub fn split_tcp_parsed<B: PacketBuf>(
    pkt: B,
    parsed: &Parsed,
    mtu: u16,
    offloads: SplitOffloads,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, (SplitError, B)> {
    let mut fresh = None;
    let hdr = match parsed.fitting(pkt.head(), pkt.len(), &mut fresh).class() {
        Class::Tcp(h) if h.ip_len > mtu => h,
        _ => {
            out.push(pkt);
            return Ok(1);
        }
    };
    let headers = hdr.l3_len + hdr.l4_len;
    if mtu <= headers {
        return Err((SplitError::MtuTooSmall { mtu, headers }, pkt));
    }
    let mss = mtu - headers;
    if offloads.tso && !needs_software(&pkt, hdr) {
        let mut pkt = pkt;
        if prepare_for_nic(&mut pkt, hdr, mss) {
            out.push(pkt);
            return Ok(1);
        }
        // Shared headers we cannot prepare: fall back to software.
        return software(pkt, hdr, mss, offloads.checksum, pool, out);
    }
    match detached(pkt, hdr, mss, offloads.checksum, pool, out) {
        Ok(done) => done,
        Err(pkt) => software(pkt, hdr, mss, offloads.checksum, pool, out),
    }
}

/// Whether the packet carries flags a NIC would copy into every segment (URG with its pointer,
/// SYN): those are split in software, as Linux does (see the module docs).
fn needs_software<B: PacketBuf>(pkt: &B, hdr: &Headers) -> bool {
    let l4 = usize::from(hdr.l2_len) + usize::from(hdr.l3_len);
    // `classify` validated the TCP header: the flags byte is there.
    let flags = wire::TcpPacket::new_unchecked(&pkt.head()[l4..hdr.hdr_len()]).flags();
    flags & (tcp_flags::URG | tcp_flags::SYN) != 0
}

/// Asks the NIC to segment, and says nothing of the checksums (they are seeds now).
fn prepare_for_nic<B: PacketBuf>(pkt: &mut B, hdr: &Headers, mss: u16) -> bool {
    if !request_tso(pkt, hdr, mss) {
        return false;
    }
    mark_rewritten_checksums(pkt, false, hdr.v6);
    true
}

/// Asks the NIC to cut `pkt`, a TCP segment with headers `hdr` (its parse), into pieces of
/// `mss` payload bytes (TSO), readied as DPDK's TSO contract requires: the IPv4 header
/// checksum zeroed, the TCP checksum field seeded with the pseudo-header sum without the
/// length, the IP and TCP checksums requested. A packet sent on with a TSO request and its own
/// checksum in the field comes out of a NIC that adds to the seed (Intel's) with every piece's
/// checksum wrong. The checksum verdicts are left as they are: a caller that verified the
/// segment may hand it on as verified (a merge engine with checksum offload makes its own
/// seeds). `hdr` must be the packet's parse: its lengths are trusted as the parse validated
/// them. False, with nothing changed, when the first buffer is shared and cannot be written or
/// does not hold the headers, or when `hdr` gives lengths no IP or TCP header has.
pub fn request_tso<B: PacketBuf>(pkt: &mut B, hdr: &Headers, mss: u16) -> bool {
    let (l2, l3, end) = (
        usize::from(hdr.l2_len),
        usize::from(hdr.l3_len),
        hdr.hdr_len(),
    );
    let Some(bytes) = pkt.head_mut().filter(|b| b.len() >= end) else {
        return false;
    };
    // The parse validated these headers, and they lie in the first buffer; the least header
    // lengths keep the unchecked views below inside `bytes[..end]` for any `hdr` at all.
    let least_l3 = if hdr.v6 { 40 } else { 20 };
    if l3 < least_l3 || hdr.l4_len < 20 {
        return false;
    }
    let seed = pseudo_header(bytes, hdr, 0);
    if !hdr.v6 {
        wire::Ipv4Packet::new_unchecked(&mut bytes[l2..l2 + l3]).set_checksum(0);
    }
    wire::TcpPacket::new_unchecked(&mut bytes[l2 + l3..end]).set_checksum(seed.fold());
    pkt.request_tx_offload(TxOffload {
        l2_len: hdr.l2_len as u8,
        l3_len: hdr.l3_len,
        l4_len: hdr.l4_len as u8,
        ipv4: !hdr.v6,
        ip_checksum: !hdr.v6,
        tcp_checksum: true,
        udp_checksum: false,
        tso_segsz: mss,
    });
    true
}

/// The software split. Everything that is the same for every piece is worked out once per
/// packet (the header template's checksum sums, the pseudo-header without its length); per
/// piece only the length, IPv4 ID, sequence number, flags, urgent pointer and checksums are
/// patched. The payload is read at most once: with checksum offload not at all; otherwise each
/// piece's payload sum comes from one pass over its view, and the verification of the input's
/// checksum adds those same sums up. A packet whose checksum field is known to be right
/// ([`PacketBuf::l4_csum_verdict`] is `Some(true)`) is not verified again, and its last piece's
/// payload sum is what the field leaves after the others, so that piece is not read either.
fn software<B: PacketBuf>(
    pkt: B,
    hdr: &Headers,
    mss: u16,
    checksum_offload: bool,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, (SplitError, B)> {
    let start = out.len();
    let hdr_len = hdr.hdr_len();
    let payload = usize::from(hdr.payload_len);
    let (l2, l3) = (usize::from(hdr.l2_len), usize::from(hdr.l3_len));
    let l4 = l2 + l3;
    let head = &pkt.head()[..hdr_len];
    let ip_id = if hdr.v6 {
        0
    } else {
        wire::Ipv4Packet::new_checked(&head[l2..l4]).map_or(0, |ip| ip.ident())
    };
    let Ok(tcp) = wire::TcpPacket::new_checked(&head[l4..hdr_len]) else {
        out.push(pkt);
        return Ok(1);
    };
    let (seq, orig_csum, orig_urgent) = (tcp.seq_number(), tcp.checksum(), tcp.urgent_ptr());
    let plan = Plan::new(hdr, ip_id, &tcp);
    let software_sums = !checksum_offload;
    let trusted = software_sums && pkt.l4_csum_verdict() == Some(true);
    let template = Template::new(head, hdr, orig_csum, seq, orig_urgent);
    // What the input's checksum field says its payload sums to.
    let claimed = || {
        checksum::covered_sum(orig_csum)
            .sub(
                template
                    .pseudo
                    .add(Sum(u32::from(hdr.l4_len + hdr.payload_len))),
            )
            .sub(template.tcp_full)
    };
    let mut whole = Sum::default();
    let mut offset = 0usize;
    let mut index = 0u16;
    while offset < payload {
        let len = usize::from(mss).min(payload - offset);
        let last = offset + len == payload;
        let Some(mut seg) = B::alloc_with(pool, head) else {
            out.truncate(start);
            return Err((SplitError::PoolExhausted, pkt));
        };
        let Some(view) = pkt.share_range(hdr_len + offset, len, pool) else {
            out.truncate(start);
            return Err((SplitError::PoolExhausted, pkt));
        };
        // This piece's payload sum, as if it started at an even offset.
        let mut payload_sum = Sum::default();
        if software_sums {
            let at_odd = |s: Sum, odd: bool| if odd { s.swapped() } else { s };
            if trusted && last {
                // The field is right for the bytes: the last piece is what the others leave.
                payload_sum = at_odd(claimed().sub(whole), offset % 2 == 1);
            } else {
                let mut pos = 0usize;
                view.for_each_segment(|s| {
                    payload_sum = payload_sum.add(at_odd(Sum::of(s), pos % 2 == 1));
                    pos += s.len();
                });
                whole = whole.add(at_odd(payload_sum, offset % 2 == 1));
            }
        }
        let fields = plan.fields(index, offset, len, last);
        if !template.rewrite(&mut seg, fields, payload_sum, checksum_offload)
            || seg.chain(view).is_err()
        {
            out.truncate(start);
            return Err((SplitError::PoolExhausted, pkt));
        }
        out.push(seg);
        offset += len;
        index += 1;
    }
    if software_sums && !trusted {
        // The original's checksum must cover exactly these bytes; otherwise the packet was
        // corrupt and must not leave as freshly checksummed segments.
        let norm = |s: Sum| if s.fold() == 0xffff { 0 } else { s.fold() };
        if norm(claimed()) != norm(whole) {
            out.truncate(start);
            return Err((SplitError::BadChecksum, pkt));
        }
    }
    Ok(out.len() - start)
}

/// The zero-share split, for a packet whose cut points all fall on boundaries of its buffer
/// chain (a merged packet holds one buffer per merged segment, so with an iMTU aligned to
/// whole segments, `PxioBuilder::align_imtu`, every cut is one). The pieces take the packet's
/// own buffers: the first keeps its head, headers rewritten in place; each later one has its
/// header written into the headroom of its first buffer when that buffer is the packet's alone
/// and has the room ([`PacketBuf::prepend_copy`]: a merged segment's buffer still has the room
/// of the header the merge stripped), so the piece is that one buffer; otherwise (a shared or
/// indirect buffer, too little headroom) it gets a fresh header buffer in front of the buffers
/// it detached. Which pieces need a header buffer is known before anything is cut, and exactly
/// those are allocated first, so running out leaves the packet whole. Both ways give the same
/// bytes. No indirect buffer is attached, and none has to be freed after transmit. Checksums
/// as in [`software`]: each piece's payload sum
/// in the same single pass that checks the cut points (and verifies the input from those sums
/// unless its checksum is vouched for, whose last piece is then derived). `Err(pkt)`, the
/// packet untouched, when it does not apply; on a verification or pool failure the packet is
/// returned whole, as from [`software`].
fn detached<B: PacketBuf>(
    mut pkt: B,
    hdr: &Headers,
    mss: u16,
    checksum_offload: bool,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<Result<usize, (SplitError, B)>, B> {
    let hdr_len = hdr.hdr_len();
    let payload = usize::from(hdr.payload_len);
    let mss_len = usize::from(mss);
    let pieces = payload.div_ceil(mss_len);
    if !(2..=MAX_DETACHED).contains(&pieces)
        || pkt.head_mut().is_none()
        || pkt.len() != hdr_len + payload
    {
        return Err(pkt);
    }
    let software_sums = !checksum_offload;
    let trusted = software_sums && pkt.l4_csum_verdict() == Some(true);
    // One pass over the chain: every cut point must be a buffer boundary, each piece's
    // payload sum is taken on the way (not the last one's when the input is vouched for), and
    // each later piece's first buffer says whether it can take the header in its headroom.
    let mut sums = [Sum::default(); MAX_DETACHED];
    // Bit i: piece i's first buffer was seen (`started`); it can take the header (`in_place`).
    let (mut started, mut in_place) = (0u64, 0u64);
    let (mut at, mut aligned) = (0usize, true);
    pkt.for_each_segment_room(|s, room| {
        let (from, to) = (at.max(hdr_len), at + s.len());
        let starts_at_cut = from == at && at > hdr_len && (at - hdr_len).is_multiple_of(mss_len);
        at = to;
        if !aligned || to <= hdr_len {
            return;
        }
        let piece = (from - hdr_len) / mss_len;
        if piece >= pieces {
            // An empty buffer after the payload: nothing to sum or head.
            return;
        }
        // The buffer that `detach_at` makes the head of piece `piece`: the first one starting
        // at its cut (an empty buffer there included).
        if starts_at_cut && started & (1 << piece) == 0 {
            started |= 1 << piece;
            if room >= hdr_len {
                in_place |= 1 << piece;
            }
        }
        let piece_end = hdr_len + ((piece + 1) * mss_len).min(payload);
        if to > piece_end {
            aligned = false;
            return;
        }
        if software_sums && !(trusted && piece + 1 == pieces) {
            let part = Sum::of(&s[s.len() - (to - from)..]);
            let pos = from - hdr_len - piece * mss_len;
            sums[piece] = sums[piece].add(if pos % 2 == 1 { part.swapped() } else { part });
        }
    });
    if !aligned {
        return Err(pkt);
    }
    let head = &pkt.head()[..hdr_len];
    let ip_id = if hdr.v6 {
        0
    } else {
        wire::Ipv4Packet::new_unchecked(&head[usize::from(hdr.l2_len)..]).ident()
    };
    let l4 = usize::from(hdr.l2_len + hdr.l3_len);
    let tcp = wire::TcpPacket::new_unchecked(&head[l4..hdr_len]);
    let (seq, orig_csum, orig_urgent) = (tcp.seq_number(), tcp.checksum(), tcp.urgent_ptr());
    let plan = Plan::new(hdr, ip_id, &tcp);
    let template = Template::new(head, hdr, orig_csum, seq, orig_urgent);
    let at_odd = |s: Sum, odd: bool| if odd { s.swapped() } else { s };
    if software_sums {
        let claimed = checksum::covered_sum(orig_csum)
            .sub(
                template
                    .pseudo
                    .add(Sum(u32::from(hdr.l4_len + hdr.payload_len))),
            )
            .sub(template.tcp_full);
        let mut whole = Sum::default();
        let known = if trusted { pieces - 1 } else { pieces };
        for (i, sum) in sums[..known].iter().enumerate() {
            whole = whole.add(at_odd(*sum, i * mss_len % 2 == 1));
        }
        if trusted {
            let last = pieces - 1;
            sums[last] = at_odd(claimed.sub(whole), last * mss_len % 2 == 1);
        } else {
            let norm = |s: Sum| if s.fold() == 0xffff { 0 } else { s.fold() };
            if norm(claimed) != norm(whole) {
                return Ok(Err((SplitError::BadChecksum, pkt)));
            }
        }
    }
    // The header buffers of the pieces that cannot take theirs in place, first, so that
    // running out leaves the packet whole.
    let needed = (1..pieces).filter(|i| in_place & (1 << i) == 0).count();
    let mut heads: [Option<B>; MAX_DETACHED] = std::array::from_fn(|_| None);
    if needed > 0 && !B::alloc_many_with(pool, head, &mut heads[..needed]) {
        return Ok(Err((SplitError::PoolExhausted, pkt)));
    }
    let mut spare = heads[..needed].iter_mut();
    let start = out.len();
    let mut rest = pkt.detach_at(hdr_len + mss_len);
    let mut first = pkt;
    let mut ok = template.rewrite(
        &mut first,
        plan.fields(0, 0, mss_len, false),
        sums[0],
        checksum_offload,
    );
    for (i, &sum) in sums.iter().enumerate().take(pieces).skip(1) {
        let offset = i * mss_len;
        let len = mss_len.min(payload - offset);
        let last = i + 1 == pieces;
        // The cut points and headrooms were checked above and every other header allocated,
        // so none of this fails; if it did, the pieces are dropped and what is left is
        // returned as an error.
        let Some(mut body) = rest.take() else {
            ok = false;
            break;
        };
        if !last {
            rest = body.detach_at(len);
        }
        let mut piece = if in_place & (1 << i) != 0 {
            // The header goes where the segment's own header was stripped: one buffer, no
            // allocation. `first` still holds the header bytes every piece starts from, the
            // fields `rewrite` sets aside (it rewrites exactly those).
            if !body.prepend_copy(&first.head()[..hdr_len]) {
                ok = false;
                break;
            }
            body
        } else {
            let Some(mut piece) = spare.next().and_then(Option::take) else {
                ok = false;
                break;
            };
            if piece.chain(body).is_err() {
                ok = false;
                break;
            }
            piece
        };
        let fields = plan.fields(i as u16, offset, len, last);
        ok &= template.rewrite(&mut piece, fields, sum, checksum_offload);
        out.push(piece);
    }
    if !ok {
        out.truncate(start);
        return Ok(Err((SplitError::PoolExhausted, first)));
    }
    // The first piece goes first.
    out.push(first);
    out[start..].rotate_right(1);
    Ok(Ok(pieces))
}

/// Most pieces the zero-share split handles (larger counts take the general path).
const MAX_DETACHED: usize = 64;

/// What is the same for every piece of one packet, for working out each piece's fields.
struct Plan {
    ip_len_base: u16,
    ip_id: u16,
    seq: u32,
    data_seq: u32,
    flags: u8,
    urgent_at: u32,
    urgent: u16,
}

impl Plan {
    fn new<T: AsRef<[u8]>>(hdr: &Headers, ip_id: u16, tcp: &wire::TcpPacket<T>) -> Self {
        let (seq, flags, urgent) = (tcp.seq_number(), tcp.flags(), tcp.urgent_ptr());
        Self {
            ip_len_base: hdr.l3_len + hdr.l4_len,
            ip_id,
            seq,
            // A SYN takes one sequence number before the data (RFC 9293 §3.4).
            data_seq: seq.wrapping_add(u32::from(flags & tcp_flags::SYN != 0)),
            flags,
            // The urgent point in sequence space (meaningful only with URG).
            urgent_at: seq.wrapping_add(u32::from(urgent)),
            urgent,
        }
    }

    /// Piece `index`, `len` payload bytes at `offset` (see the module docs for the flags).
    fn fields(&self, index: u16, offset: usize, len: usize, last: bool) -> SegmentFields {
        let flags = self.flags;
        let mut seg_flags = flags;
        if !last {
            seg_flags &= !(tcp_flags::PSH | tcp_flags::FIN | tcp_flags::RST);
        }
        let seg_seq = if index == 0 {
            self.seq
        } else {
            self.data_seq.wrapping_add(offset as u32)
        };
        let mut urgent_ptr = self.urgent;
        if index > 0 {
            seg_flags &= !(tcp_flags::CWR | tcp_flags::SYN);
            if flags & tcp_flags::URG != 0 {
                // Offsets stay below 64 KiB, so a rebased pointer fits in 16 bits.
                let ahead = self.urgent_at.wrapping_sub(seg_seq);
                if (ahead as i32) > 0 {
                    urgent_ptr = ahead as u16;
                } else {
                    seg_flags &= !tcp_flags::URG;
                    urgent_ptr = 0;
                }
            }
        }
        SegmentFields {
            ip_len: self.ip_len_base + len as u16,
            ip_id: self.ip_id.wrapping_add(index),
            seq: seg_seq,
            flags: seg_flags,
            urgent_ptr,
        }
    }
}

#[derive(Clone, Copy)]
struct SegmentFields {
    ip_len: u16,
    ip_id: u16,
    seq: u32,
    flags: u8,
    urgent_ptr: u16,
}

/// The input's headers, summed once per packet: each piece's checksums are these sums plus
/// the few words that differ per piece.
struct Template<'a> {
    hdr: &'a Headers,
    /// The pseudo-header without its length.
    pseudo: Sum,
    /// The TCP header as it is, checksum field excluded.
    tcp_full: Sum,
    /// The TCP header without its checksum, sequence number, flags word and urgent pointer.
    tcp_fixed: Sum,
    /// The high byte of the flags word (data offset, reserved bits).
    offset_byte: u8,
    /// The IPv4 header without its checksum, total length and ID.
    ip_fixed: Sum,
}

impl<'a> Template<'a> {
    fn new(head: &[u8], hdr: &'a Headers, orig_csum: u16, seq: u32, urgent: u16) -> Self {
        let (l2, l4) = (
            usize::from(hdr.l2_len),
            usize::from(hdr.l2_len + hdr.l3_len),
        );
        let tcp_full = Sum::of(&head[l4..hdr.hdr_len()]).sub(Sum(u32::from(orig_csum)));
        let flags_word = u16::from_be_bytes([head[l4 + 12], head[l4 + 13]]);
        let tcp_fixed = tcp_full
            .sub(Sum(seq))
            .sub(Sum(u32::from(flags_word)))
            .sub(Sum(u32::from(urgent)));
        let ip_fixed = if hdr.v6 {
            Sum::default()
        } else {
            let ip = &head[l2..l4];
            let word = |i: usize| Sum(u32::from(u16::from_be_bytes([ip[i], ip[i + 1]])));
            // Total length (bytes 2-3), ID (4-5), checksum (10-11).
            Sum::of(ip).sub(word(2)).sub(word(4)).sub(word(10))
        };
        Self {
            hdr,
            pseudo: pseudo_header(head, hdr, 0),
            tcp_full,
            tcp_fixed,
            offset_byte: head[l4 + 12],
            ip_fixed,
        }
    }

    /// Writes one segment's header fields and checksums (or NIC seeds) into `seg`, a copy of
    /// the template's bytes.
    fn rewrite<B: PacketBuf>(
        &self,
        seg: &mut B,
        f: SegmentFields,
        payload_sum: Sum,
        checksum_offload: bool,
    ) -> bool {
        let hdr = self.hdr;
        let (l2, l3, end) = (
            usize::from(hdr.l2_len),
            usize::from(hdr.l3_len),
            hdr.hdr_len(),
        );
        let Some(bytes) = seg.head_mut() else {
            return false;
        };
        if bytes.len() < end {
            return false;
        }
        // `classify` validated the template's headers and `seg` holds a copy of them, so the
        // unchecked views stay in bounds.
        if hdr.v6 {
            let mut ip = wire::Ipv6Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
            ip.set_payload_len(f.ip_len - 40);
        } else {
            let mut ip = wire::Ipv4Packet::new_unchecked(&mut bytes[l2..l2 + l3]);
            ip.set_total_len(f.ip_len);
            ip.set_ident(f.ip_id);
            let sum = if checksum_offload {
                0
            } else {
                self.ip_fixed.add_u16(f.ip_len).add_u16(f.ip_id).checksum()
            };
            ip.set_checksum(sum);
        }
        let l4_len = u32::from(f.ip_len - hdr.l3_len);
        let pseudo = self.pseudo.add(Sum(l4_len));
        let mut tcp = wire::TcpPacket::new_unchecked(&mut bytes[l2 + l3..end]);
        tcp.set_seq_number(f.seq);
        tcp.set_flags(f.flags);
        tcp.set_urgent_ptr(f.urgent_ptr);
        let value = if checksum_offload {
            pseudo.fold()
        } else {
            pseudo
                .add(self.tcp_fixed)
                .add(Sum(f.seq))
                .add_u16(u16::from_be_bytes([self.offset_byte, f.flags]))
                .add_u16(f.urgent_ptr)
                .add(payload_sum)
                .checksum()
        };
        tcp.set_checksum(value);
        if checksum_offload {
            seg.request_tx_offload(TxOffload {
                l2_len: hdr.l2_len as u8,
                l3_len: hdr.l3_len,
                l4_len: hdr.l4_len as u8,
                ipv4: !hdr.v6,
                ip_checksum: !hdr.v6,
                tcp_checksum: true,
                ..TxOffload::default()
            });
        }
        // Seeds for the NIC, or right for the piece's bytes (a later split need not verify
        // them); a verdict received with the packet (the first piece keeps its buffer and
        // flags) no longer applies.
        mark_rewritten_checksums(seg, !checksum_offload, hdr.v6);
        true
    }
}

/// The TCP pseudo-header sum for an L4 length of `l4_len` (0: without length, for TSO seeds).
pub(crate) fn pseudo_header(frame: &[u8], hdr: &Headers, l4_len: u32) -> Sum {
    let l3 = &frame[usize::from(hdr.l2_len)..];
    // `classify` validated these headers, so the unchecked views cannot run off the end.
    if hdr.v6 {
        let ip = wire::Ipv6Packet::new_unchecked(l3);
        checksum::pseudo_header_v6(ip.src_addr(), ip.dst_addr(), hdr.proto, l4_len)
    } else {
        let ip = wire::Ipv4Packet::new_unchecked(l3);
        checksum::pseudo_header_v4(ip.src_addr(), ip.dst_addr(), hdr.proto, l4_len as u16)
    }
}
