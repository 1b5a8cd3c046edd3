//! The run path: each flow's run of consecutive segments is placed in one step. In TSO-burst
//! traffic a flow's segments reach the engine back to back, each one continuing the item its
//! predecessor joined. [`Merger::rx_burst`] groups a burst's segments by flow; after the first
//! segment of a group has been placed, the following ones are offered here first, as a run: each
//! qualifying segment's buffer is linked to the item as it is checked, and the item's bookkeeping
//! and the counters are written once for the whole run, when a segment does not qualify, the group
//! ends, or the item leaves (measured: 3–4 ns per packet less than joining them one by one, which
//! `rx_parsed` still does for a segment handed over alone).
//!
//! A segment takes the run path when it continues its flow's only held item (its sequence
//! number is where the item ends, and it fits without a cut), both its checksums are vouched
//! for by the NIC (with TX checksum offload nothing more is needed; without it the payload's
//! sum follows from the checksum field, as on the general path), and its headers equal the
//! item's first segment's in every byte a merge compares: one masked compare of the whole
//! header, instead of taking the segment apart field by field and comparing its signature. It
//! then joins the item with the same bookkeeping the general path does, and the item leaves
//! when iMTU-bound or closed.
//!
//! What is left to the general path was chosen by measurement: taking the cut segments and each
//! burst's first segment of a flow here too gained nothing under TSO bursts and slowed the
//! lone-segment path (round-robin traffic) by 5–8 ns per packet.
//!
//! The test is stricter than the general path's, never looser: the masked compare also demands
//! equal addresses, ports and urgent pointer, and a frame with padding, a chained input, a cut,
//! a gap, software checksums or anything else goes back to the general path, which decides
//! exactly as it would have. So the outcome never depends on which path a segment took (the
//! `rx_burst` vs one-by-one property test in `tests/merge_props.rs` checks this).

use super::item::Layout;
use super::place::{concat_sum, unreachable_chain, Tail};
use super::segment::claimed_payload_sum;
use super::{Merger, Pending, NO_PKT};
use crate::buf::{PacketBuf, PacketChain};
use crate::checksum::Sum;
use crate::wire::{tcp_flags, Class, Headers};

/// Longest header the mask covers: two VLAN tags, IPv6, TCP with 40 B of options (122 B).
const MASK_BYTES: usize = 128;
const MASK_WORDS: usize = MASK_BYTES / 8;

/// The header masks of the run and fast paths, one slot per header layout a mergeable segment
/// can have ([`mask_slot`]): Ethernet with up to two VLAN tags (14, 18 or 22 bytes), IPv4
/// without options or IPv6 (20 or 40), and TCP of 20 to 60 bytes, 66 layouts in all. A slot's
/// mask is built the first time an item of its layout starts, and kept: no slot ever holds
/// another layout's, so an item finds its mask once, when it starts (`Item::mask`), and the
/// paths that compare headers under it on every packet look nothing up. Only the slots of
/// layouts met are ever touched.
pub(super) struct RunMasks {
    masks: Box<[RunMask; MASK_SLOTS]>,
}

/// Slots of [`RunMasks`]: the 66 layouts' and [`NO_MASK`], rounded up to a power of two, so
/// that any `u8` masked to it is a slot.
const MASK_SLOTS: usize = 128;

/// The slot of the layouts no mergeable segment has: its mask, never built, matches no header.
pub(super) const NO_MASK: u8 = (MASK_SLOTS - 1) as u8;

/// The slot of `layout`'s mask (see [`RunMasks`]), or `None` for a layout no mergeable segment
/// has.
#[inline]
fn mask_slot(layout: Layout) -> Option<u8> {
    let l2 = match layout.l2_len {
        14 => 0,
        18 => 1,
        22 => 2,
        _ => return None,
    };
    let l4 = layout.l4_len;
    let l3_ok = layout.l3_len == if layout.v6 { 40 } else { 20 };
    if !l3_ok || !(20..=60).contains(&l4) || !l4.is_multiple_of(4) {
        return None;
    }
    Some(l2 * 22 + u8::from(layout.v6) * 11 + (l4 - 20) / 4)
}

impl RunMasks {
    /// No mask yet: each layout's is built the first time it is needed.
    pub(super) fn new() -> Self {
        Self {
            masks: Box::new(std::array::from_fn(|_| RunMask::empty())),
        }
    }

    /// The slot of the mask for `layout`, built there the first time; [`NO_MASK`] for a
    /// layout no mergeable segment has.
    #[inline]
    pub(super) fn slot_for(&mut self, layout: Layout) -> u8 {
        let Some(slot) = mask_slot(layout) else {
            return NO_MASK;
        };
        let m = &mut self.masks[usize::from(slot)];
        if m.layout != layout {
            m.build(layout);
        }
        slot
    }

    /// Whether headers `a` and `b` agree under the mask in slot `slot` (see
    /// [`slot_for`](Self::slot_for)).
    #[inline(always)]
    pub(super) fn same(&self, slot: u8, a: &[u8], b: &[u8]) -> bool {
        self.masks[usize::from(slot) & (MASK_SLOTS - 1)].same(a, b)
    }

    /// The mask for `layout` (see [`slot_for`](Self::slot_for)).
    #[cfg(test)]
    fn for_layout(&mut self, layout: Layout) -> &RunMask {
        let at = self.slot_for(layout);
        &self.masks[usize::from(at)]
    }
}

/// Which header bytes of a segment must equal its item's first segment's for the run path,
/// for one header [`Layout`].
struct RunMask {
    layout: Layout,
    /// The header length.
    len: usize,
    mask: [u64; MASK_WORDS],
    /// The mask of the header's last eight bytes, which the last whole word of `mask` may
    /// not reach: compared as one word that overlaps it.
    last: u64,
}

impl RunMask {
    /// A mask for no layout.
    fn empty() -> Self {
        Self {
            // No real header has this layout (no Ethernet header).
            layout: Layout::default(),
            len: usize::MAX,
            mask: [0; MASK_WORDS],
            last: 0,
        }
    }

    /// Rebuilds the mask for `layout`: every header byte is compared but the ones that differ
    /// between consecutive segments of one item (IPv4 total length, ID and header checksum;
    /// IPv6 payload length; TCP sequence number, window and checksum, and the PSH and FIN
    /// flags, which belong to the last byte).
    #[cold]
    fn build(&mut self, layout: Layout) {
        let mut bytes = [0xffu8; MASK_BYTES];
        let hdr_len = layout.hdr_len();
        bytes[hdr_len.min(MASK_BYTES)..].fill(0);
        let l3 = usize::from(layout.l2_len);
        let l4 = layout.l4_offset();
        let mut skip = |from: usize, len: usize| bytes[from..from + len].fill(0);
        if layout.v6 {
            skip(l3 + 4, 2); // payload length
        } else {
            skip(l3 + 2, 2); // total length
            skip(l3 + 4, 2); // identification
            skip(l3 + 10, 2); // header checksum
        }
        skip(l4 + 4, 4); // sequence number
        skip(l4 + 14, 2); // window
        skip(l4 + 16, 2); // checksum
        bytes[l4 + 13] = !(tcp_flags::PSH | tcp_flags::FIN);
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("eight bytes"));
        for (m, b) in self.mask.iter_mut().zip(bytes.chunks_exact(8)) {
            *m = word(b);
        }
        // Every header is longer than eight bytes (Ethernet alone is 14).
        self.last = word(&bytes[hdr_len - 8..hdr_len]);
        self.len = hdr_len;
        self.layout = layout;
    }

    /// Whether headers `a` and `b` (each the start of a frame of this mask's layout) agree in
    /// every compared byte. False when either is shorter than the header (the first buffer of
    /// an item that began as a cut's rest holds the header alone).
    #[inline(always)]
    fn same(&self, a: &[u8], b: &[u8]) -> bool {
        let len = self.len;
        let (Some(a), Some(b)) = (a.get(..len), b.get(..len)) else {
            return false;
        };
        let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().expect("eight bytes"));
        let mut diff = 0u64;
        for ((x, y), m) in a.chunks_exact(8).zip(b.chunks_exact(8)).zip(&self.mask) {
            diff |= (word(x) ^ word(y)) & m;
        }
        // The bytes past the whole words, in one word overlapping the last whole one (bytes
        // compared twice are compared under the same mask).
        let at = len - 8;
        diff |= (word(&a[at..]) ^ word(&b[at..])) & self.last;
        diff == 0
    }
}

/// The item a run grows, as the run path left it after its last admitted segment: the run
/// checks each next segment against this, and writes the item's bookkeeping once, when the run
/// ends ([`Merger::close_run`]).
struct Run {
    flow: u32,
    idx: u32,
    layout: Layout,
    /// The slot of `layout`'s mask in [`RunMasks`].
    mask: u8,
    df: bool,
    end_seq: u32,
    last_id: u16,
    /// The item's IP length and buffer count with the admitted segments.
    ip_len: u32,
    nb_segs: u16,
    payload_len: u32,
    payload_sum: Sum,
    /// Segments admitted, and the last one's window and TCP flags.
    joined: u16,
    window: u16,
    tail_flags: u8,
    payload_in: u64,
    /// PSH/FIN or the iMTU reached: the item goes, and the run ends.
    done: bool,
}

impl<B: PacketBuf> Merger<B> {
    /// Starts a run on `flow`'s held item when the run path may grow it: the flow holds exactly
    /// one item, not closed.
    // Always inlined, as `admits` is: the `Run` it fills is not read back through memory.
    #[inline(always)]
    fn open_run(&mut self, flow: u32) -> Option<Run> {
        let e = self.flows.get(flow);
        if e.n_items != 1 {
            return None;
        }
        let idx = e.items;
        let it = &self.items[idx as usize];
        if it.closed() {
            return None;
        }
        let layout = it.layout;
        Some(Run {
            flow,
            idx,
            layout,
            mask: it.mask,
            df: it.df(),
            end_seq: it.end_seq(),
            last_id: it.last_id,
            ip_len: it.ip_len(),
            nb_segs: it.nb_segs,
            payload_len: it.payload_len,
            payload_sum: it.payload_sum,
            joined: 0,
            window: 0,
            tail_flags: 0,
            payload_in: 0,
            done: false,
        })
    }

    /// Whether `pkt` (parsed as `hdr`) continues the run (see the module docs); if so, returns
    /// what it brings besides its payload. Reads only.
    // Always inlined: returned through memory, the `Tail` it builds field by field was read
    // back as wider words, and every admitted segment stalled on store forwarding (perf).
    #[inline(always)]
    fn admits(&self, run: &Run, pkt: &B, hdr: &Headers) -> Option<Tail> {
        let layout = run.layout;
        let payload = u32::from(hdr.payload_len);
        let vouched = pkt.csum_vouched(!layout.v6);
        if run.done
            || !vouched
            || payload == 0
            || layout.v6 != hdr.v6
            || usize::from(layout.l2_len) != usize::from(hdr.l2_len)
            || usize::from(layout.l3_len) != usize::from(hdr.l3_len)
            || usize::from(layout.l4_len) != usize::from(hdr.l4_len)
            || pkt.num_segs() != 1
            || pkt.len() != usize::from(hdr.l2_len) + usize::from(hdr.ip_len)
            || usize::from(run.nb_segs) + 1 > self.max_segs()
            || run.ip_len + payload > self.item_limit(layout)
        {
            return None;
        }
        let held = self.items[run.idx as usize].pkt.as_ref()?.packet().head();
        let frame = pkt.head();
        if !self.run_masks.same(run.mask, held, frame) {
            return None;
        }
        // The layout matched, so the fixed TCP header and the IP header's first 8 bytes lie
        // inside the compared header: one check each, none per field.
        let tcp: &[u8; 20] = frame.get(layout.l4_offset()..)?.first_chunk()?;
        let ip: &[u8; 8] = frame.get(usize::from(layout.l2_len)..)?.first_chunk()?;
        let be16 = |b: [u8; 2]| u16::from_be_bytes(b);
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let ip_id = if layout.v6 { 0 } else { be16([ip[4], ip[5]]) };
        // DF is the same as the item's (compared); without it the IDs must run on.
        if seq != run.end_seq || (!layout.v6 && !run.df && ip_id != run.last_id.wrapping_add(1)) {
            return None;
        }
        // The NIC verified the checksum, so the field's claim is the truth; with TX offload
        // not even that is needed (see `segment`).
        let sum = if self.cfg.checksum_offload {
            Sum::default()
        } else {
            claimed_payload_sum(frame, hdr)
        };
        Some(Tail {
            ip_id,
            window: be16([tcp[14], tcp[15]]),
            flags: tcp[13],
            sum,
        })
    }

    /// Joins an admitted segment: its buffer is linked to the item now; the item's
    /// bookkeeping waits for [`close_run`](Self::close_run).
    #[inline(always)]
    fn join_run(&mut self, run: &mut Run, mut pkt: B, hdr: &Headers, tail: Tail, now: u64) {
        self.note_arrival(run.flow, hdr.ip_len, hdr.payload_len, now);
        let stripped = pkt.adj(run.layout.hdr_len());
        debug_assert!(stripped, "the compared header is in the first segment");
        let payload = pkt.len() as u32;
        let head = self.items[run.idx as usize]
            .pkt
            .as_mut()
            .expect("held items have a packet");
        // `admits` checked the segment count, so chaining cannot fail.
        if head.append(pkt).is_err() {
            unreachable_chain();
        }
        run.payload_sum = concat_sum(run.payload_sum, run.payload_len, tail.sum);
        run.payload_len += payload;
        run.payload_in += u64::from(payload);
        run.end_seq = run.end_seq.wrapping_add(payload);
        run.last_id = tail.ip_id;
        run.ip_len += payload;
        run.nb_segs += 1;
        run.joined += 1;
        run.window = tail.window;
        run.tail_flags = tail.flags;
        run.done = tail.flags & (tcp_flags::PSH | tcp_flags::FIN) != 0
            || run.ip_len >= self.item_limit(run.layout);
    }

    /// Ends a run: the item's bookkeeping and the counters, once for all the segments it
    /// joined, exactly as joining them one by one would have left them; the item leaves when
    /// iMTU-bound or closed.
    fn close_run(&mut self, run: Run, now: u64, out: &mut Vec<B>) {
        if run.joined == 0 {
            return;
        }
        let n = run.joined;
        let it = &mut self.items[run.idx as usize];
        it.nb_segs = run.nb_segs;
        it.payload_sum = run.payload_sum;
        it.payload_len = run.payload_len;
        it.note_tail(n, run.last_id, run.window, run.tail_flags, now);
        self.stats.packets_in += u64::from(n);
        self.stats.payload_in += run.payload_in;
        self.stats.merges += u64::from(n);
        self.stats.run_merges += u64::from(n);
        self.emit_if_done(run.flow, run.idx, now, out);
        self.touch(run.flow);
    }

    /// Joins `pkt` (a TCP segment of `flow`, parsed as `hdr`) to the flow's held item on the
    /// run path when it qualifies (see the module docs); otherwise gives it back untouched for
    /// the general path. For a segment handed over alone (`rx_parsed`).
    #[inline]
    pub(super) fn try_extend_tail(
        &mut self,
        flow: u32,
        pkt: B,
        hdr: &Headers,
        now: u64,
        out: &mut Vec<B>,
    ) -> Result<(), B> {
        let Some(mut run) = self.open_run(flow) else {
            return Err(pkt);
        };
        let Some(tail) = self.admits(&run, &pkt, hdr) else {
            return Err(pkt);
        };
        self.join_run(&mut run, pkt, hdr, tail, now);
        self.close_run(run, now, out);
        Ok(())
    }

    /// Joins the segments of `flow`'s list in `pending`, from `j` on, to the flow's held item
    /// for as long as each one qualifies (one run, its bookkeeping written once); returns the
    /// first one left for the general path, or [`NO_PKT`] when the list is done.
    #[inline]
    pub(super) fn extend_run(
        &mut self,
        flow: u32,
        pending: &mut [Pending<B>],
        mut j: u8,
        now: u64,
        out: &mut Vec<B>,
    ) -> u8 {
        let Some(mut run) = self.open_run(flow) else {
            return j;
        };
        while j != NO_PKT {
            let p = &mut pending[usize::from(j)];
            let (Some(pkt), Class::Tcp(hdr)) = (p.pkt.as_ref(), p.parsed.class()) else {
                break;
            };
            let Some(tail) = self.admits(&run, pkt, hdr) else {
                break;
            };
            let pkt = p.pkt.take().expect("checked above");
            self.join_run(&mut run, pkt, hdr, tail, now);
            j = p.next;
        }
        self.close_run(run, now, out);
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout a mergeable segment can have gets a slot of its own, its mask built once
    /// and kept whatever other layouts come; any other layout gets `NO_MASK`, which matches
    /// no header.
    #[test]
    fn each_layout_has_a_slot_of_its_own_and_its_mask_is_built_once() {
        let layout = |l2_len, v6, l4_len| Layout {
            l2_len,
            l3_len: if v6 { 40 } else { 20 },
            l4_len,
            v6,
        };
        let mut all = Vec::new();
        for l2 in [14, 18, 22] {
            for v6 in [false, true] {
                for l4 in (20..=60).step_by(4) {
                    all.push(layout(l2, v6, l4));
                }
            }
        }
        assert_eq!(all.len(), 66);
        let mut masks = RunMasks::new();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2 {
            for &k in &all {
                let slot = masks.slot_for(k);
                assert_ne!(slot, NO_MASK, "{k:?}");
                assert!(usize::from(slot) < MASK_SLOTS);
                seen.insert((slot, k.l2_len, k.l3_len, k.l4_len, k.v6));
                let mut fresh = RunMask::empty();
                fresh.build(k);
                assert_eq!(masks.for_layout(k).mask, fresh.mask, "{k:?}");
                assert_eq!(masks.masks[usize::from(slot)].layout, k);
            }
        }
        // One slot per layout, the same both rounds.
        assert_eq!(seen.len(), 66);
        let slots: std::collections::BTreeSet<u8> = seen.iter().map(|s| s.0).collect();
        assert_eq!(slots.len(), 66);
        // Layouts no mergeable segment has: odd VLAN lengths, IPv4 options, a TCP header
        // that is no multiple of 4 or out of range, an IPv6 header of the wrong length.
        let odd = [
            layout(16, false, 20),
            Layout {
                l3_len: 24,
                ..layout(14, false, 20)
            },
            layout(14, false, 22),
            layout(14, false, 64),
            layout(14, true, 16),
            Layout {
                l3_len: 20,
                ..layout(14, true, 20)
            },
            Layout::default(),
        ];
        let frame: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
        for k in odd {
            assert_eq!(masks.slot_for(k), NO_MASK, "{k:?}");
        }
        assert!(!masks.same(NO_MASK, &frame, &frame));
    }

    /// Flips each bit of each header byte, one at a time: the headers must still count as the
    /// same exactly where consecutive segments of one item may differ (IP lengths, ID and
    /// header checksum; TCP sequence number, window, checksum, PSH and FIN), and nowhere else.
    #[test]
    fn the_mask_ignores_exactly_what_varies_within_an_item() {
        for (l2_len, v6, l4_len) in [(14u8, false, 32u8), (18, false, 20), (22, true, 60)] {
            let layout = Layout {
                l2_len,
                l3_len: if v6 { 40 } else { 20 },
                l4_len,
                v6,
            };
            let (l3, l4) = (usize::from(l2_len), layout.l4_offset());
            let varies = |at: usize, bit: u8| {
                let ip = at.checked_sub(l3).filter(|_| at < l4);
                let tcp = at.checked_sub(l4);
                match (ip, tcp) {
                    (Some(o), _) if v6 => (4..6).contains(&o),
                    (Some(o), _) => (2..6).contains(&o) || (10..12).contains(&o),
                    (_, Some(13)) => bit & (tcp_flags::PSH | tcp_flags::FIN) != 0,
                    (_, Some(o)) => (4..8).contains(&o) || (14..18).contains(&o),
                    _ => false,
                }
            };
            let mut mask = RunMask::empty();
            mask.build(layout);
            let base: Vec<u8> = (0..200u32).map(|i| (i * 7 + 3) as u8).collect();
            let hdr_len = layout.hdr_len();
            assert!(mask.same(&base, &base));
            for at in 0..hdr_len {
                for b in 0..8 {
                    let bit = 1u8 << b;
                    let mut other = base.clone();
                    other[at] ^= bit;
                    assert_eq!(
                        mask.same(&base, &other),
                        varies(at, bit),
                        "{layout:?}: byte {at} bit {bit:#04x}"
                    );
                }
            }
            // Past the header (the payload) nothing is compared; a header cut short never
            // counts as the same.
            let mut other = base.clone();
            other[hdr_len..].fill(0);
            assert!(mask.same(&base, &other));
            assert!(!mask.same(&base[..hdr_len - 1], &base));
            assert!(!mask.same(&base, &base[..hdr_len - 1]));
        }
    }
}
