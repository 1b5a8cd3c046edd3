//! The held item (SIGCOMM'26 §4.1, "Bidirectional neighbor identification"; §4.2, "Packet
//! chaining with gather TX"): a run of contiguous segments of one flow, chained without copying
//! the payload, with what merging compares kept beside it (its header [`Layout`] and its merge
//! signature [`MergeSig`]), and the fixed slab the items live in.

use super::flow_table::NIL;
use super::segment::{Segment, TCP_HEADER_LEN};
use super::Merger;
use crate::buf::{PacketBuf, PacketChain};
use crate::checksum::Sum;
use crate::wire::{tcp_flags, Headers};

/// A run of contiguous segments of one flow, held as one chained packet.
///
/// Laid out for the append path: the bookkeeping it updates fills the first cache line, the
/// signature it compares the second (the rarely used tail of the TCP options spills into a
/// third).
#[repr(C, align(64))]
pub(super) struct Item<B: PacketBuf> {
    pub(super) pkt: Option<B::Chain>,
    /// Sum of the segments' arrival times (ns), for the added-delay average.
    pub(super) arrival_sum: u64,
    /// Earliest arrival among the segments (ns): the ETM window starts here.
    pub(super) oldest: u64,
    /// Sequence number of the first payload byte.
    pub(super) seq: u32,
    pub(super) payload_len: u32,
    /// One's-complement sum of the payload (software checksum mode).
    pub(super) payload_sum: Sum,
    pub(super) next: u32,
    pub(super) layout: Layout,
    /// The slot of `layout`'s mask in the engine's `RunMasks`, found when the item started:
    /// the fast and run paths compare headers under it without looking it up.
    pub(super) mask: u8,
    pub(super) last_id: u16,
    /// Input segments merged.
    pub(super) segs: u16,
    /// Buffer segments in `pkt` (an input may already be a chain).
    pub(super) nb_segs: u16,
    /// PSH/FIN of the last segment.
    pub(super) tail_flags: u8,
    /// [`marks`] bits: whether its headers must be rewritten, whether it was carried over.
    pub(super) marks: u8,
    /// TCP window of the segment holding the last byte: the merged packet carries it.
    pub(super) last_window: u16,
    pub(super) sig: MergeSig,
    /// IP ID of the first segment (read only to prepend and to join items: out of the first
    /// cache line, which the append path fills).
    pub(super) first_id: u16,
}

impl<B: PacketBuf> Item<B> {
    /// A free slot of the item slab.
    pub(super) fn vacant() -> Self {
        Self {
            pkt: None,
            seq: 0,
            payload_len: 0,
            layout: Layout::default(),
            mask: super::run::NO_MASK,
            sig: MergeSig::EMPTY,
            first_id: 0,
            last_id: 0,
            segs: 0,
            nb_segs: 0,
            tail_flags: 0,
            marks: 0,
            last_window: 0,
            payload_sum: Sum::default(),
            arrival_sum: 0,
            oldest: 0,
            next: NIL,
        }
    }

    pub(super) fn ip_len(&self) -> u32 {
        self.layout.l3_l4_len() + self.payload_len
    }
    pub(super) fn end_seq(&self) -> u32 {
        self.seq.wrapping_add(self.payload_len)
    }
    /// Headers must be rewritten before the packet leaves.
    pub(super) fn modified(&self) -> bool {
        self.marks & marks::MODIFIED != 0
    }
    /// It began as the rest of a cut segment (see [`marks::CARRIED`]).
    pub(super) fn carried(&self) -> bool {
        self.marks & marks::CARRIED != 0
    }
    /// Its segments have DF set (their signature's `df`, kept in the first cache line too: the
    /// fast path reads it for every IPv4 segment, and needs nothing else from the signature).
    pub(super) fn df(&self) -> bool {
        self.marks & marks::DF != 0
    }
    pub(super) fn closed(&self) -> bool {
        self.tail_flags & (tcp_flags::PSH | tcp_flags::FIN) != 0
    }

    /// Starts the item afresh with `pkt`, segment `seg` arrived at `now` (its signature is the
    /// caller's to set, and its place in the flow's list), under header mask `mask` (the
    /// slot of `seg`'s layout in `RunMasks`). `carried`: `pkt` is the rest of a cut, inserted
    /// with headers already to be rewritten, and carried over (see [`marks::CARRIED`]).
    #[inline]
    pub(super) fn start(&mut self, pkt: B, seg: &Segment, mask: u8, now: u64, carried: bool) {
        self.nb_segs = pkt.num_segs() as u16;
        self.pkt = Some(B::Chain::new(pkt));
        self.seq = seg.seq;
        self.payload_len = u32::from(seg.payload_len);
        self.layout = seg.layout;
        self.mask = mask;
        self.first_id = seg.ip_id;
        self.last_id = seg.ip_id;
        self.segs = 1;
        self.tail_flags = seg.flags & (tcp_flags::PSH | tcp_flags::FIN);
        self.marks = if carried {
            marks::MODIFIED | marks::CARRIED
        } else {
            0
        } | if seg.df { marks::DF } else { 0 };
        self.last_window = seg.window;
        self.payload_sum = seg.payload_sum;
        self.arrival_sum = now;
        self.oldest = now;
    }

    /// Notes `n` segments joined at the item's end at `now` (their bytes and sums are the
    /// caller's): the last one's IP ID, window and PSH/FIN (only those flags are kept), the
    /// segment count, the arrival times, and that the headers must be rewritten.
    #[inline]
    pub(super) fn note_tail(&mut self, n: u16, last_id: u16, window: u16, flags: u8, now: u64) {
        self.last_id = last_id;
        self.last_window = window;
        self.segs += n;
        self.tail_flags = flags & (tcp_flags::PSH | tcp_flags::FIN);
        self.marks |= marks::MODIFIED;
        self.arrival_sum += now * u64::from(n);
        self.oldest = self.oldest.min(now);
    }
}

/// [`Item::marks`] bits (one byte, so the append bookkeeping stays in one cache line).
pub(super) mod marks {
    /// Headers must be rewritten before the packet leaves.
    pub(crate) const MODIFIED: u8 = 1;
    /// The item began as the remainder of a cut segment: the flow's previous packet left
    /// full, and this one is carried into the next burst rather than sent as a runt (see
    /// `Merger::settle_flow`).
    pub(crate) const CARRIED: u8 = 2;
    /// The segments have DF set (a copy of the signature's `df`).
    pub(crate) const DF: u8 = 4;
}

/// Where a mergeable segment's headers lie: its [`Headers`] without the flow key (the flow entry
/// has it), small enough to keep with every item.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Layout {
    /// At most [`MAX_L2`].
    pub(super) l2_len: u8,
    /// 20 (IPv4 without options) or 40 (IPv6).
    pub(super) l3_len: u8,
    /// At most 60.
    pub(super) l4_len: u8,
    pub(super) v6: bool,
}

impl Layout {
    /// The layout of `hdr`, when it fits (mergeable segments always do).
    pub(super) fn of(hdr: &Headers) -> Option<Layout> {
        Some(Layout {
            l2_len: u8::try_from(hdr.l2_len).ok()?,
            l3_len: u8::try_from(hdr.l3_len).ok()?,
            l4_len: u8::try_from(hdr.l4_len).ok()?,
            v6: hdr.v6,
        })
    }
    pub(super) fn l4_offset(&self) -> usize {
        usize::from(self.l2_len) + usize::from(self.l3_len)
    }
    pub(super) fn hdr_len(&self) -> usize {
        self.l4_offset() + usize::from(self.l4_len)
    }
    pub(super) fn l3_l4_len(&self) -> u32 {
        u32::from(self.l3_len) + u32::from(self.l4_len)
    }
}

/// The header fields two segments must share to be merged (see the module docs), kept with each
/// item, so matching never touches a held packet's bytes. A new segment is compared with it in
/// place ([`MergeSig::matches`]); only a segment that starts an item has its signature copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(super) struct MergeSig {
    ack: u32,
    /// IPv6 flow label (0 for IPv4).
    flow_label: u32,
    /// IPv4 TTL or IPv6 hop limit.
    ttl: u8,
    /// IPv4 TOS byte (DSCP and ECN) or IPv6 traffic class.
    tos: u8,
    pub(super) df: bool,
    /// TCP flags other than PSH and FIN.
    flags: u8,
    l2_len: u8,
    opt_len: u8,
    /// The Ethernet header, VLAN tags included (at most two).
    l2: [u8; MAX_L2],
    /// The TCP options.
    options: [u8; MAX_TCP_OPTIONS],
}

/// Ethernet header with two VLAN tags.
pub(super) const MAX_L2: usize = 22;
/// TCP options are at most 40 bytes.
const MAX_TCP_OPTIONS: usize = 40;

impl MergeSig {
    const EMPTY: MergeSig = MergeSig {
        ack: 0,
        flow_label: 0,
        ttl: 0,
        tos: 0,
        df: false,
        flags: 0,
        l2_len: 0,
        opt_len: 0,
        l2: [0; MAX_L2],
        options: [0; MAX_TCP_OPTIONS],
    };

    /// Makes this the signature of `seg` (headers at the start of `frame`), in place: the
    /// same value as [`MergeSig::of`], without building a 104-byte value and copying it (a
    /// wide copy of freshly written narrow fields stalls on store forwarding).
    #[inline]
    pub(super) fn set(&mut self, seg: &Segment, frame: &[u8]) {
        let (l2, options) = seg.sig_bytes(frame);
        self.ack = seg.ack;
        self.flow_label = seg.flow_label;
        self.ttl = seg.ttl;
        self.tos = seg.tos;
        self.df = seg.df;
        self.flags = seg.merge_flags();
        self.l2_len = seg.layout.l2_len;
        self.opt_len = options.len() as u8;
        // The unused tails are zero, as in `of`: whole signatures are compared.
        let (l2_used, l2_rest) = self.l2.split_at_mut(l2.len());
        l2_used.copy_from_slice(l2);
        l2_rest.fill(0);
        let (opt_used, opt_rest) = self.options.split_at_mut(options.len());
        opt_used.copy_from_slice(options);
        opt_rest.fill(0);
    }

    /// Writes into `seg` the fields this signature holds: the ACK number, the IPv6 flow label,
    /// TTL, TOS and DF, and the TCP flags other than PSH and FIN (`seg.flags` keeps its own
    /// PSH and FIN). For a segment whose header equals, under the fast path's mask, that of an
    /// item with this signature, this is what reading them from its header gives.
    #[inline]
    pub(super) fn stamp(&self, seg: &mut Segment) {
        seg.ack = self.ack;
        seg.flow_label = self.flow_label;
        seg.ttl = self.ttl;
        seg.tos = self.tos;
        seg.df = self.df;
        seg.flags = self.flags | seg.flags & (tcp_flags::PSH | tcp_flags::FIN);
    }

    /// The signature of `seg`, whose headers are at the start of `frame` (what
    /// [`set`](Self::set) and [`matches`](Self::matches) are checked against).
    #[cfg(test)]
    pub(super) fn of(seg: &Segment, frame: &[u8]) -> MergeSig {
        let (l2, options) = seg.sig_bytes(frame);
        let mut sig = MergeSig {
            ack: seg.ack,
            flow_label: seg.flow_label,
            ttl: seg.ttl,
            tos: seg.tos,
            df: seg.df,
            flags: seg.merge_flags(),
            l2_len: seg.layout.l2_len,
            opt_len: options.len() as u8,
            ..MergeSig::EMPTY
        };
        sig.l2[..l2.len()].copy_from_slice(l2);
        sig.options[..options.len()].copy_from_slice(options);
        sig
    }

    /// Whether `seg` (headers at the start of `frame`) has exactly this signature: the same as
    /// `MergeSig::of(seg, frame) == *self`, without building it.
    #[inline]
    pub(super) fn matches(&self, seg: &Segment, frame: &[u8]) -> bool {
        if self.ack != seg.ack
            || self.flow_label != seg.flow_label
            || self.ttl != seg.ttl
            || self.tos != seg.tos
            || self.df != seg.df
            || self.flags != seg.merge_flags()
            || self.l2_len != seg.layout.l2_len
            || usize::from(self.opt_len) + TCP_HEADER_LEN != usize::from(seg.layout.l4_len)
        {
            return false;
        }
        let (l2, options) = seg.sig_bytes(frame);
        short_eq(&self.l2[..l2.len()], l2) && short_eq(&self.options[..options.len()], options)
    }
}

/// `a == b` for two equally long header slices of a few dozen bytes, eight bytes at a time and
/// without a `memcmp` call. A tail shorter than eight bytes is compared as the slices' last
/// eight bytes, overlapping the chunk before it, instead of byte by byte.
#[inline(always)]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("eight bytes"));
    let n = a.len().min(b.len());
    if n < 8 {
        return a.iter().zip(b).fold(0u8, |d, (p, q)| d | (p ^ q)) == 0;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut diff = 0u64;
    for (p, q) in (&mut x).zip(&mut y) {
        diff |= word(p) ^ word(q);
    }
    if !x.remainder().is_empty() {
        diff |= word(&a[n - 8..n]) ^ word(&b[n - 8..n]);
    }
    diff == 0
}

impl<B: PacketBuf> Merger<B> {
    pub(super) fn free_item(&mut self, idx: u32) {
        let it = &mut self.items[idx as usize];
        it.pkt = None;
        it.next = NIL;
        self.free_items.push(idx);
        self.stats.held_items -= 1;
    }
}

#[cfg(test)]
mod sig_tests {
    use super::*;
    use crate::checksum::Sum;

    /// Every length a signature compares (0 to 40 bytes), equal and with each byte flipped in
    /// turn: the overlapping last word must see a difference anywhere in the tail.
    #[test]
    fn short_eq_sees_a_difference_in_any_byte() {
        for len in 0..=40usize {
            let a: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            assert!(short_eq(&a, &a.clone()), "len {len}: equal");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!short_eq(&a, &b), "len {len}: byte {at} differs");
            }
        }
    }

    fn seg(layout: Layout, ack: u32) -> Segment {
        Segment {
            layout,
            ip_len: 1500,
            payload_len: 1000,
            seq: 1,
            ack,
            window: 7,
            flags: 0x10,
            ttl: 64,
            tos: 0,
            flow_label: 5,
            df: true,
            ip_id: 0,
            payload_sum: Sum::default(),
        }
    }

    /// A segment stamped from the signature of the item it matched reads as the segment
    /// itself: every field the signature holds, and its own PSH/FIN.
    #[test]
    fn a_stamped_segment_equals_the_segment_it_stands_for() {
        let layout = Layout {
            l2_len: 14,
            l3_len: 20,
            l4_len: 32,
            v6: false,
        };
        let frame: Vec<u8> = (0..=255u8).collect();
        for (ack, flags, tos, df) in [(9, 0x18, 0xb9, true), (u32::MAX, 0x11, 0, false)] {
            let mut real = seg(layout, ack);
            (real.flags, real.tos, real.df, real.ttl) = (flags, tos, df, 3);
            let sig = MergeSig::of(&real, &frame);
            let mut stamped = seg(layout, 0);
            (stamped.flags, stamped.tos, stamped.df, stamped.ttl) = (flags & 0x09, 1, !df, 200);
            stamped.flow_label = 77;
            sig.stamp(&mut stamped);
            assert_eq!(format!("{stamped:?}"), format!("{real:?}"));
        }
    }

    #[test]
    fn a_signature_set_in_place_equals_a_fresh_one() {
        let frame: Vec<u8> = (0..=255u8).collect();
        let long = Layout {
            l2_len: 22,
            l3_len: 20,
            l4_len: 60,
            v6: false,
        };
        let short = Layout {
            l2_len: 14,
            l3_len: 40,
            l4_len: 32,
            v6: true,
        };
        // Over a signature with longer L2 and options, so stale tails would show.
        let mut sig = MergeSig::of(&seg(long, 9), &frame);
        sig.set(&seg(short, 3), &frame[1..]);
        assert_eq!(sig, MergeSig::of(&seg(short, 3), &frame[1..]));
        assert!(sig.matches(&seg(short, 3), &frame[1..]));
        assert!(!sig.matches(&seg(short, 4), &frame[1..]));
    }
}

#[cfg(all(test, feature = "dpdk"))]
mod tests {
    use super::*;

    #[test]
    fn an_items_append_bookkeeping_fits_one_cache_line() {
        type MbufItem = Item<dpdk::Mbuf>;
        assert_eq!(std::mem::align_of::<MbufItem>(), 64);
        assert_eq!(std::mem::offset_of!(MbufItem, sig), 64);
        // The signature's scalars, Ethernet header and the first TCP options share a line.
        assert!(std::mem::offset_of!(MergeSig, options) + 12 <= 64);
    }
}
