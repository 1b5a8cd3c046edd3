//! Placing a segment among its flow's held items (SIGCOMM'26 §4.1, "Bidirectional neighbor
//! identification"; Appendix A, "partial stashing"): **append** to the item it continues,
//! **prepend** to the item it precedes, **gap-fill** (join two items the segment made touch),
//! and **cut** a segment that would overshoot the iMTU, its rest held by a refcounted view rather
//! than copied (§4.2, zero-copy chaining). Chaining never copies payload.

use super::flow_table::NIL;
use super::item::{marks, Layout, MergeSig};
use super::segment::{range_sum, Segment};
use super::Merger;
use crate::buf::{PacketBuf, PacketChain};
use crate::checksum::Sum;
use crate::wire::tcp_flags;

impl<B: PacketBuf> Merger<B> {
    /// Places `pkt` into the flow's items.
    pub(super) fn merge(
        &mut self,
        flow: u32,
        mut pkt: B,
        seg: Segment,
        now: u64,
        out: &mut Vec<B>,
    ) {
        // Drop Ethernet padding after the IP packet: it must not end up inside a merged payload.
        let frame_len = seg.frame_len();
        if pkt.len() > frame_len && !pkt.truncate(frame_len) {
            return self.pass(pkt, out);
        }
        self.stats.payload_in += u64::from(seg.payload_len);
        let s_start = seg.seq;
        let s_end = seg.seq.wrapping_add(u32::from(seg.payload_len));

        let mut prev = NIL;
        let mut cur = self.flows.get(flow).items;
        while cur != NIL {
            let it = &self.items[cur as usize];
            let (i_start, i_end) = (it.seq, it.end_seq());
            if seq_lt(s_start, i_end) && seq_lt(i_start, s_end) {
                // Overlap: a retransmission or duplicate. Never merge it.
                self.flush_flow(flow, now, out);
                return self.pass(pkt, out);
            }
            if s_start == i_end && !it.closed() && self.compatible(cur, &pkt, &seg, true) {
                // Items are sorted and disjoint: only the next one can overlap the segment's
                // tail (held a[0,1000) and c[2000,3000), X[1000,2400) continues a but overlaps
                // c).
                let next = it.next;
                if next != NIL && seq_lt(self.items[next as usize].seq, s_end) {
                    self.flush_flow(flow, now, out);
                    return self.pass(pkt, out);
                }
                return self.append(flow, cur, pkt, seg, now, out);
            }
            if s_end == i_start
                && seg.flags & (tcp_flags::PSH | tcp_flags::FIN) == 0
                && self.compatible(cur, &pkt, &seg, false)
                && it.ip_len() + u32::from(seg.payload_len) <= self.item_limit(it.layout)
            {
                self.prepend(cur, pkt, seg, now);
                let grown = if prev != NIL && self.try_join(flow, prev) {
                    prev
                } else {
                    cur
                };
                return self.emit_if_done(flow, grown, now, out);
            }
            if seq_lt(s_end, i_start) || s_end == i_start {
                break; // insert before `cur`
            }
            prev = cur;
            cur = self.items[cur as usize].next;
        }
        self.insert_item(flow, prev, pkt, seg, now, out, None);
    }

    /// Whether `seg` may join item `idx` (as its successor when `append`, else predecessor).
    #[inline]
    fn compatible(&self, idx: u32, pkt: &B, seg: &Segment, append: bool) -> bool {
        let it = &self.items[idx as usize];
        if it.layout != seg.layout
            || usize::from(it.nb_segs) + pkt.num_segs() > self.max_segs()
            || !it.sig.matches(seg, pkt.head())
        {
            return false;
        }
        if !seg.layout.v6 && !seg.df {
            let next_id = if append {
                seg.ip_id == it.last_id.wrapping_add(1)
            } else {
                seg.ip_id.wrapping_add(1) == it.first_id
            };
            if !next_id {
                return false;
            }
        }
        true
    }

    pub(super) fn append(
        &mut self,
        flow: u32,
        idx: u32,
        mut pkt: B,
        seg: Segment,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let it = &self.items[idx as usize];
        let room = self.item_limit(it.layout).saturating_sub(it.ip_len());
        let len = u32::from(seg.payload_len);
        if room >= len {
            let tail = Tail::of(&seg, seg.payload_sum, seg.flags);
            self.join_segment(idx, pkt, seg.hdr_len(), tail, now);
            return self.after_growth(flow, idx, now, out);
        }
        if room == 0 {
            self.emit_through(flow, idx, now, out);
            return self.merge(flow, pkt, seg, now, out);
        }
        // Cut: `room` bytes complete this item, the rest is held by a view.
        let (head_sum, rest_sum) = self.cut_sums(&pkt, &seg, room);
        let Some(rest) = self.remainder(&mut pkt, &seg, room) else {
            // No buffer for the rest's header: no cut; the item goes, the segment starts anew.
            self.emit_through(flow, idx, now, out);
            let prev = self.last_item_before(flow, seg.seq);
            return self.insert_item(flow, prev, pkt, seg, now, out, None);
        };
        self.stats.cuts += 1;
        // The first part carries no PSH/FIN: they belong to the last byte, now in `rest`.
        self.join_segment(idx, pkt, seg.hdr_len(), Tail::of(&seg, head_sum, 0), now);
        // The items before this one leave first, in sequence order; then this one, whose slot
        // the rest takes over where it lies: it becomes the flow's first item (every later
        // item starts past the segment's end), with the same signature and layout, which the
        // segment shares (`compatible`, or the fast path's masked compare).
        while self.flows.get(flow).items != idx {
            self.emit_head(flow, now, out);
        }
        self.send_item(flow, idx, now, out);
        let mut rest_seg = seg;
        rest_seg.seq = seg.seq.wrapping_add(room);
        rest_seg.payload_len = (len - room) as u16;
        rest_seg.ip_len = seg.ip_len - room as u16;
        rest_seg.payload_sum = rest_sum;
        let it = &mut self.items[idx as usize];
        // The same layout, so the same mask.
        let mask = it.mask;
        it.start(rest, &rest_seg, mask, now, true);
        if it.next == NIL {
            // As when the flow's last item leaves: the rest waits for a new deadline.
            self.cancel_deadline(flow);
        }
        // The rest may close a gap with its successor, or be complete on its own.
        self.after_growth(flow, idx, now, out);
    }

    /// Payload sums of the first `room` bytes and of the rest, each aligned to its own first
    /// byte. The segment was verified on arrival, so its payload sum is known: only the shorter
    /// part is read, the other follows by subtraction.
    fn cut_sums(&self, pkt: &B, seg: &Segment, room: u32) -> (Sum, Sum) {
        if self.cfg.checksum_offload {
            return (Sum::default(), Sum::default());
        }
        let start = seg.hdr_len();
        let (len, cut) = (u32::from(seg.payload_len), start + room as usize);
        let end = start + len as usize;
        // The rest sits at offset `room` of the payload: swapped there when `room` is odd.
        let at_room = |s: Sum| if room % 2 == 1 { s.swapped() } else { s };
        if room <= len - room {
            let first = range_sum(pkt, start, cut);
            (first, at_room(seg.payload_sum.sub(first)))
        } else {
            let rest = range_sum(pkt, cut, end);
            (seg.payload_sum.sub(at_room(rest)), rest)
        }
    }

    /// Cuts `pkt` after its first `room` payload bytes: the rest comes back as a new packet, a
    /// copy of the headers (sequence number advanced) chained to the rest's buffers, zero-copy
    /// ([`PacketBuf::split_off`]). `None`, and `pkt` unchanged, when no buffer is left.
    fn remainder(&self, pkt: &mut B, seg: &Segment, room: u32) -> Option<B> {
        let hdr_len = seg.hdr_len();
        let mut head = B::alloc_with(&self.pool, pkt.head().get(..hdr_len)?)?;
        // The sequence number, where the layout puts it in the copied header.
        let seq: &mut [u8; 4] = head
            .head_mut()?
            .get_mut(seg.layout.l4_offset() + 4..)?
            .first_chunk_mut()?;
        *seq = seg.seq.wrapping_add(room).to_be_bytes();
        move_rest_behind(pkt, hdr_len + room as usize, &mut head, &self.pool).then_some(head)
    }

    /// Appends segment `pkt` to item `idx`: its headers (`hdr_len` bytes) are stripped and its
    /// buffers linked after the item's; `tail` is what it brings besides its payload.
    #[inline]
    pub(super) fn join_segment(
        &mut self,
        idx: u32,
        mut pkt: B,
        hdr_len: usize,
        tail: Tail,
        now: u64,
    ) {
        let stripped = pkt.adj(hdr_len);
        debug_assert!(
            stripped,
            "classify checked the headers are in the first segment"
        );
        let seg_len = pkt.len() as u32;
        let pkt_segs = pkt.num_segs() as u16;
        let it = &mut self.items[idx as usize];
        it.nb_segs += pkt_segs;
        let head = it.pkt.as_mut().expect("held items have a packet");
        // Every caller checked the segment count, so chaining cannot fail.
        if head.append(pkt).is_err() {
            unreachable_chain();
        }
        it.payload_sum = concat_sum(it.payload_sum, it.payload_len, tail.sum);
        it.payload_len += seg_len;
        it.note_tail(1, tail.ip_id, tail.window, tail.flags, now);
        self.stats.merges += 1;
    }

    fn prepend(&mut self, idx: u32, pkt: B, seg: Segment, now: u64) {
        let it = &mut self.items[idx as usize];
        it.sig.set(&seg, pkt.head());
        let mut old = it.pkt.take().expect("held items have a packet");
        let stripped = old.adj(it.layout.hdr_len());
        debug_assert!(stripped);
        it.nb_segs += pkt.num_segs() as u16;
        let mut pkt = B::Chain::new(pkt);
        // `compatible` checked the segment count, so chaining cannot fail.
        if pkt.append_chain(old).is_err() {
            unreachable_chain();
        }
        it.payload_sum = concat_sum(seg.payload_sum, u32::from(seg.payload_len), it.payload_sum);
        it.pkt = Some(pkt);
        it.seq = seg.seq;
        it.payload_len += u32::from(seg.payload_len);
        it.layout = seg.layout;
        it.first_id = seg.ip_id;
        it.segs += 1;
        it.marks |= marks::MODIFIED;
        it.arrival_sum += now;
        it.oldest = it.oldest.min(now);
        self.stats.merges += 1;
    }

    /// After item `idx` grew: emit it when closed or iMTU-bound, else try to join its successor.
    fn after_growth(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        self.try_join(flow, idx);
        self.emit_if_done(flow, idx, now, out);
    }

    /// Gap-fill: joins item `idx` with its successor when they touch, fit and match; returns
    /// whether they were joined.
    fn try_join(&mut self, flow: u32, idx: u32) -> bool {
        let next = self.items[idx as usize].next;
        if next == NIL {
            return false;
        }
        let (a, b) = (&self.items[idx as usize], &self.items[next as usize]);
        let fits = a.ip_len() + b.payload_len <= self.item_limit(a.layout);
        // An item's signature holds the DF bit of its first segment, whose headers it carries.
        let ids_ok = b.layout.v6 || b.sig.df || b.first_id == a.last_id.wrapping_add(1);
        if a.end_seq() != b.seq || a.closed() || !fits || !ids_ok {
            return false;
        }
        if a.layout != b.layout
            || usize::from(a.nb_segs + b.nb_segs) > self.max_segs()
            || a.sig != b.sig
        {
            return false;
        }
        let mut tail = self.items[next as usize].pkt.take().expect("held");
        let stripped = tail.adj(self.items[next as usize].layout.hdr_len());
        debug_assert!(stripped);
        let head = self.items[idx as usize].pkt.as_mut().expect("held");
        if head.append_chain(tail).is_err() {
            unreachable_chain();
        }
        let b = &self.items[next as usize];
        let (b_len, b_sum, b_last, b_window, b_segs, b_nb, b_flags, b_arr, b_oldest, b_next) = (
            b.payload_len,
            b.payload_sum,
            b.last_id,
            b.last_window,
            b.segs,
            b.nb_segs,
            b.tail_flags,
            b.arrival_sum,
            b.oldest,
            b.next,
        );
        let a = &mut self.items[idx as usize];
        a.payload_sum = concat_sum(a.payload_sum, a.payload_len, b_sum);
        a.payload_len += b_len;
        a.last_id = b_last;
        a.last_window = b_window;
        a.segs += b_segs;
        a.nb_segs += b_nb;
        a.tail_flags = b_flags;
        a.arrival_sum += b_arr;
        a.oldest = a.oldest.min(b_oldest);
        a.marks |= marks::MODIFIED;
        a.next = b_next;
        self.free_item(next);
        let e = self.flows.get_mut(flow);
        e.n_items -= 1;
        self.stats.merges += 1;
        true
    }

    /// The segment limit: the configured one, within what the buffer type can chain.
    pub(super) fn max_segs(&self) -> usize {
        usize::from(self.cfg.max_segs).min(B::MAX_SEGS)
    }

    fn last_item_before(&self, flow: u32, seq: u32) -> u32 {
        let mut prev = NIL;
        let mut cur = self.flows.get(flow).items;
        while cur != NIL && seq_lt(self.items[cur as usize].seq, seq) {
            prev = cur;
            cur = self.items[cur as usize].next;
        }
        prev
    }

    /// Starts an item with `pkt` after item `prev` (or first, with [`NIL`]). `cut_from`: the
    /// packet is the rest of a cut, and this the signature of the item it was cut from (equal
    /// to its own, so it is copied rather than read from the headers).
    #[allow(clippy::too_many_arguments)]
    fn insert_item(
        &mut self,
        flow: u32,
        mut prev: u32,
        pkt: B,
        seg: Segment,
        now: u64,
        out: &mut Vec<B>,
        cut_from: Option<MergeSig>,
    ) {
        if self.flows.get(flow).n_items >= self.cfg.max_items_per_flow {
            self.flush_flow(flow, now, out);
            prev = NIL;
        }
        let Some(idx) = self.free_items.pop() else {
            // Every slot is in use: this flow's items go, and the segment passes unmerged.
            self.flush_flow(flow, now, out);
            return self.pass(pkt, out);
        };
        let mask = self.run_masks.slot_for(seg.layout);
        // The free slot is filled field by field where it lies (see `MergeSig::set`).
        let it = &mut self.items[idx as usize];
        match &cut_from {
            Some(sig) => it.sig = *sig,
            None => it.sig.set(&seg, pkt.head()),
        }
        it.start(pkt, &seg, mask, now, cut_from.is_some());
        it.next = NIL;
        let e = self.flows.get_mut(flow);
        if prev == NIL {
            self.items[idx as usize].next = e.items;
            e.items = idx;
        } else {
            let after = self.items[prev as usize].next;
            self.items[idx as usize].next = after;
            self.items[prev as usize].next = idx;
        }
        e.n_items += 1;
        self.stats.held_items += 1;
        // A new item may close a gap with its successor, or be complete on its own.
        self.after_growth(flow, idx, now, out);
    }
}

/// What a segment joining an item at its end brings besides its payload: the item's new last
/// IP ID and window, the PSH/FIN it ends with, and its payload's sum (software checksum mode).
#[derive(Clone, Copy, Debug)]
pub(super) struct Tail {
    pub(super) ip_id: u16,
    pub(super) window: u16,
    /// TCP flags; only PSH and FIN are kept.
    pub(super) flags: u8,
    pub(super) sum: Sum,
}

impl Tail {
    fn of(seg: &Segment, sum: Sum, flags: u8) -> Tail {
        Tail {
            ip_id: seg.ip_id,
            window: seg.window,
            flags,
            sum,
        }
    }

    /// The tail of the segment in `frame`, whose headers have `layout` (checked to lie inside
    /// `frame`, else `None`), with payload sum `sum`.
    #[inline(always)]
    pub(super) fn read(frame: &[u8], layout: Layout, sum: Sum) -> Option<Tail> {
        let ip: &[u8; 8] = frame.get(usize::from(layout.l2_len)..)?.first_chunk()?;
        let tcp: &[u8; 20] = frame.get(layout.l4_offset()..)?.first_chunk()?;
        Some(Tail {
            ip_id: if layout.v6 {
                0
            } else {
                u16::from_be_bytes([ip[4], ip[5]])
            },
            window: u16::from_be_bytes([tcp[14], tcp[15]]),
            flags: tcp[13] & (tcp_flags::PSH | tcp_flags::FIN),
            sum,
        })
    }
}

/// `a < b` in TCP sequence space.
#[inline]
fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// The sum of payload A (length `a_len`) followed by payload B.
#[inline]
pub(super) fn concat_sum(a: Sum, a_len: u32, b: Sum) -> Sum {
    a.add(if a_len % 2 == 1 { b.swapped() } else { b })
}

/// Moves `pkt`'s bytes from `at` on behind `head`, zero-copy ([`PacketBuf::split_off`]): `pkt`
/// keeps the first `at`. False, and both unchanged, when no buffer is left for the cut.
pub(super) fn move_rest_behind<B: PacketBuf>(
    pkt: &mut B,
    at: usize,
    head: &mut B,
    pool: &B::Pool,
) -> bool {
    let Some(rest) = pkt.split_off(at, pool) else {
        return false;
    };
    match head.chain(rest) {
        Ok(()) => true,
        // One segment more than `pkt` had: `pkt`, within the limit before, takes it back.
        Err(rest) => {
            let rejoined = pkt.chain(rest).is_ok();
            debug_assert!(rejoined, "a cut's two parts fit where the packet did");
            false
        }
    }
}

/// Chaining fails only past the segment limit, which every merge checks first.
#[cold]
pub(super) fn unreachable_chain() -> ! {
    unreachable!("segment count was checked before chaining")
}
