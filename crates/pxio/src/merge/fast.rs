//! The fast path: a segment that continues its flow's last held item joins it before it is parsed
//! at all.
//!
//! [`Merger::rx_burst`] offers each packet here first, in arrival order. The NIC's RSS hash
//! (written into the buffer on receive, free to read) finds in [`FastIndex`] the flow a packet
//! of that hash last belonged to. The packet joins that flow's last item when the flow holds
//! one or two (the first of two out of segments and waiting for the burst's settle, say) and
//! the item is open, and the packet passes the run path's test (see `run`), but for its
//! buffers: both checksums vouched for by the NIC, and its header equal to the item's first
//! segment's in every byte a merge compares. A chain (the NIC's LRO, the kernel's GRO) joins as
//! one buffer does, if it is no longer than an item may be. That masked compare covers the
//! Ethernet type and VLAN tags, the IP version and header length, the protocol, the fragment
//! fields, the TCP data offset and every address and port, so a packet that passes it has the
//! item's header layout and belongs to its flow: no parse, no flow-table hash, no lookup. What
//! the compare leaves out is checked on its own: the IP length against the frame, a payload,
//! the sequence number (it must be where the item ends), the IP ID (with DF clear), the iMTU
//! and the segment limit. The decision is the run path's, which decides as the general path
//! does (`tests/merge_props.rs` compares the three).
//!
//! A wrong flow costs nothing but the compare: two flows with the same RSS hash (or a NIC key
//! under which many flows hash alike, like the symmetric key), or more flows than the index's
//! two ways whose hashes share a bucket, only send each other's segments to the general path.
//! The hash is never trusted for the flow's identity.
//!
//! The index is read once per packet, when the chunk is prefetched (`stream_or_group`): the
//! flow it names then is the packet's hint, for the fast path and, should it refuse the packet,
//! for the general path, which takes that flow without hashing when its key is the packet's.
//! A hint that went stale within the chunk only fails those checks.
//!
//! A segment that continues its item but would overshoot the iMTU is cut here too
//! ([`Merger::fast_cut`]): the general path's cut (`place`), without the parse, the hash, the
//! lookup and the walk of the flow's items.
//!
//! **Order.** A packet the fast path refuses is parsed and merged on the general path at once,
//! before the next packet is looked at, so every packet is taken in arrival order and no
//! segment can overtake an earlier one of its flow, whatever the hashes say. Which packet is
//! the last of its flow in the chunk (a lone segment then leaves at once) is told by the
//! hashes too; a NIC that gives one flow two hashes can only make a segment leave alone that
//! could have waited for a merge.

use super::flow_table::NIL;
use super::item::Layout;
use super::place::{concat_sum, unreachable_chain, Tail};
use super::segment::{claimed_payload_sum, Segment};
use super::{delay, Merger};
use crate::buf::{PacketBuf, PacketChain};
use crate::checksum::Sum;
use crate::wire::{ip_proto, tcp_flags, Headers};

/// Flow entries by RSS hash: the flow a packet with that hash last belonged to, or [`NIL`].
/// Only a hint: every use is checked against the held item's header.
///
/// Two ways per bucket, each tagged with the whole hash: two flows whose hashes share a bucket
/// (at 8 flows in 1024 slots, one chance in 40) both keep their fast path. Flows with the same
/// whole hash (a symmetric key, see `flow_table`) still take turns.
pub(super) struct FastIndex {
    buckets: Box<[Bucket]>,
    mask: u32,
}

/// One way of a [`FastIndex`] bucket.
#[derive(Clone, Copy)]
struct Way {
    hash: u32,
    flow: u32,
}

/// A bucket of two ways, aligned to its size: it never straddles two cache lines, so one
/// prefetch brings it in.
#[derive(Clone, Copy)]
#[repr(C, align(16))]
struct Bucket([Way; 2]);

impl FastIndex {
    /// An index of at least `capacity` ways (rounded up to a power of two), all empty.
    pub(super) fn new(capacity: usize) -> Self {
        let n = capacity.div_ceil(2).max(1).next_power_of_two();
        let empty = Way { hash: 0, flow: NIL };
        Self {
            buckets: vec![Bucket([empty; 2]); n].into_boxed_slice(),
            mask: (n - 1) as u32,
        }
    }

    /// The flow last noted for `hash`, or [`NIL`].
    #[inline(always)]
    pub(super) fn get(&self, hash: u32) -> u32 {
        // Selects without branching (two flows taking turns in a bucket would make branches
        // here a coin toss).
        let Bucket([a, b]) = self.buckets[(hash & self.mask) as usize];
        let w = if a.hash == hash { a } else { b };
        if w.hash == hash {
            w.flow
        } else {
            NIL
        }
    }

    /// Prefetches `hash`'s bucket.
    #[inline]
    pub(super) fn warm_slot(&self, hash: u32) {
        crate::prefetch(&self.buckets[(hash & self.mask) as usize]);
    }

    /// Prefetches the flow entry the index names for `hash`, so it is on its way into the cache
    /// before the packet is taken (see [`FlowTable::warm`](super::FlowTable::warm)); returns
    /// that flow (or [`NIL`]), the packet's hint for [`Merger::fast_join`].
    #[inline]
    pub(super) fn warm(&self, hash: u32, flows: &super::FlowTable) -> u32 {
        let flow = self.get(hash);
        if flow != NIL {
            flows.warm_entry(flow);
        }
        flow
    }

    /// Notes that a packet with RSS hash `hash` belongs to `flow`: in the bucket's first way,
    /// the first one's flow moving to the second unless it had the same hash.
    #[inline]
    pub(super) fn note(&mut self, hash: u32, flow: u32) {
        let Bucket(ways) = &mut self.buckets[(hash & self.mask) as usize];
        if ways[0].hash != hash {
            ways[1] = ways[0];
        }
        ways[0] = Way { hash, flow };
    }
}

/// How the fast path took a segment.
pub(super) enum Joined {
    /// Appended to its item. The counters of appended segments (`packets_in`, `merges`,
    /// `run_merges`, `fast_merges`) are the caller's to add, once per chunk.
    Appended,
    /// Cut into its item and the next one; counted.
    Cut,
}

impl<B: PacketBuf> Merger<B> {
    /// Joins `pkt`, whose RSS hash is `hash`, to the item of the flow the fast index names for
    /// it, when it continues that item (see the module docs); otherwise gives it back
    /// untouched. `hint`: the flow the index named when the chunk was prefetched (it may have
    /// changed since; a wrong flow only fails the header compare), or [`NIL`] to look now.
    ///
    /// One function, holding the flow's entry and its item for the whole join: each is looked
    /// up once (split into an admission test and a join, the path looked both up again, and
    /// returned what it read through memory). A joined segment comes back with its flow, which
    /// a caller that keeps state per flow would otherwise look up again.
    #[inline(always)]
    pub(super) fn fast_join(
        &mut self,
        pkt: B,
        hash: u32,
        hint: u32,
        now: u64,
        out: &mut Vec<B>,
    ) -> Result<(Joined, u32), B> {
        let flow = if hint != NIL {
            hint
        } else {
            self.fast.get(hash)
        };
        if flow == NIL {
            return Err(pkt);
        }
        let max_segs = self.max_segs();
        let offload = self.cfg.checksum_offload;
        let inv_tau = self.etm.inv_tau();
        let Self {
            flows,
            items,
            run_masks,
            limits,
            stats,
            touched,
            ..
        } = self;
        let e = flows.get_mut(flow);
        // The flow's last item: its only one, or the second of two (the first one out of
        // segments and waiting for the burst's settle, or before a gap). A segment that
        // continues the last item is appended to it on the general path too.
        let idx = match e.n_items {
            1 => e.items,
            2 => match items.get(e.items as usize) {
                Some(first) => first.next,
                None => return Err(pkt),
            },
            _ => return Err(pkt),
        };
        let Some(it) = items.get_mut(idx as usize) else {
            return Err(pkt);
        };
        let layout = it.layout;
        // Each arm asks for the verdicts with a constant: the flags it tests fold into the
        // code (as one call with `!layout.v6`, they were worked out on every packet).
        let vouched = if layout.v6 {
            pkt.csum_vouched(false)
        } else {
            pkt.csum_vouched(true)
        };
        // A chain (the NIC's LRO, the kernel's GRO) joins as a single buffer does: its buffers
        // are linked after the item's, each counted against the item's segments.
        let segs = pkt.num_segs();
        if it.closed() || !vouched || usize::from(it.nb_segs) + segs > max_segs {
            return Err(pkt);
        }
        let Some(held) = it.pkt.as_ref() else {
            return Err(pkt);
        };
        let frame = pkt.head();
        // The item's mask, found when it started (see `RunMasks`): no layout compare here.
        if !run_masks.same(it.mask, held.packet().head(), frame) {
            return Err(pkt);
        }
        // The header is the item's layout and lies in `frame` (the compare read it): the
        // fixed fields below are inside it.
        let l3 = usize::from(layout.l2_len);
        let (Some(ip), Some(tcp)) = (
            frame.get(l3..).and_then(<[u8]>::first_chunk::<8>),
            frame
                .get(layout.l4_offset()..)
                .and_then(<[u8]>::first_chunk::<20>),
        ) else {
            return Err(pkt);
        };
        let be16 = |b: [u8; 2]| u16::from_be_bytes(b);
        let ip_len = if layout.v6 {
            40 + u32::from(be16([ip[4], ip[5]]))
        } else {
            u32::from(be16([ip[2], ip[3]]))
        };
        let l34 = layout.l3_l4_len();
        // The frame holds exactly the IP packet (no padding: a padded frame is trimmed on the
        // general path), and the packet carries payload. A packet longer than an item may be
        // alone (a coalesced one that was not cut to it) is left to the general path, which
        // never sees one: its rest would be such an item.
        let limit = super::limit_of(limits, layout);
        if pkt.len() != l3 + ip_len as usize || ip_len <= l34 || ip_len > limit {
            return Err(pkt);
        }
        let payload = ip_len - l34;
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
        let ip_id = if layout.v6 { 0 } else { be16([ip[4], ip[5]]) };
        let df = it.df(); // compared: the packet's equals the item's
        if seq != it.end_seq() || (!layout.v6 && !df && ip_id != it.last_id.wrapping_add(1)) {
            return Err(pkt);
        }
        let grown = it.ip_len() + payload;
        if grown > limit {
            // Only what the cold path cannot read again is handed over: nothing is stored for
            // it on the way of every appended packet.
            self.fast_cut(pkt, flow, idx, ip_len as u16, now, out);
            return Ok((Joined::Cut, flow));
        }
        // Read as `Tail::read` reads them (spelled out: through that function the path took 35
        // more instructions per packet). The NIC verified the checksum, so the field's claim
        // is the truth; with TX offload not even that is needed (see `segment`).
        let window = be16([tcp[14], tcp[15]]);
        let tail_flags = tcp[13] & (tcp_flags::PSH | tcp_flags::FIN);
        let sum = claimed_sum(offload, frame, layout, ip_len as u16, payload as u16);
        delay::arrive(e, ip_len as u16, payload as u16, now, inv_tau);
        let mut pkt = pkt;
        let stripped = pkt.adj(layout.hdr_len());
        debug_assert!(stripped, "the compared header is in the first segment");
        let head = it.pkt.as_mut().expect("held items have a packet");
        // The segment count was checked above, so chaining cannot fail.
        if head.append(pkt).is_err() {
            unreachable_chain();
        }
        it.nb_segs += segs as u16;
        // With TX offload every sum the fast path brings is zero, and adding zero leaves the
        // item's sum as it is (in either byte order): nothing to do.
        if !offload {
            it.payload_sum = concat_sum(it.payload_sum, it.payload_len, sum);
        }
        it.payload_len += payload;
        it.note_tail(1, ip_id, window, tail_flags, now);
        // PSH or FIN closes it (`closed`), or it reached its limit.
        let done = tail_flags != 0 || grown >= limit;
        stats.payload_in += u64::from(payload);
        super::touch_entry(e, flow, touched);
        if done {
            self.emit_through(flow, idx, now, out);
        }
        Ok((Joined::Appended, flow))
    }

    /// Cuts `pkt`, admitted as `a` but too long for its item's room under the iMTU, as the
    /// general path would: the part that fits completes the item, which leaves, and the rest
    /// starts the flow's next item (see `place`). Only what the general path would have read
    /// from the segment is read here; its flow and item are known.
    #[cold]
    fn fast_cut(&mut self, pkt: B, flow: u32, idx: u32, ip_len: u16, now: u64, out: &mut Vec<B>) {
        // The segment as the general path would read it: what varies from its header (read
        // again here, as `fast_join` read it), the rest from its item's signature, which its
        // header matched.
        let it = &self.items[idx as usize];
        let layout = it.layout;
        let payload = (u32::from(ip_len) - layout.l3_l4_len()) as u16;
        let frame = pkt.head();
        let payload_sum = claimed_sum(self.cfg.checksum_offload, frame, layout, ip_len, payload);
        let Some(tail) = Tail::read(frame, layout, payload_sum) else {
            unreachable!("the masked compare read the whole header");
        };
        let mut seg = Segment {
            layout,
            ip_len,
            payload_len: payload,
            seq: it.end_seq(),
            ack: 0,
            window: tail.window,
            flags: tail.flags,
            ttl: 0,
            tos: 0,
            flow_label: 0,
            df: false,
            ip_id: tail.ip_id,
            payload_sum: tail.sum,
        };
        it.sig.stamp(&mut seg);
        self.stats.packets_in += 1;
        self.stats.payload_in += u64::from(payload);
        self.note_arrival(flow, ip_len, payload, now);
        self.append(flow, idx, pkt, seg, now, out);
        self.touch(flow);
    }
}

/// The payload's sum as the segment's checksum field claims it, which the NIC verified (see
/// `segment`); nothing with TX checksum offload (`offload`), which needs no sum.
#[inline(always)]
fn claimed_sum(offload: bool, frame: &[u8], layout: Layout, ip_len: u16, payload: u16) -> Sum {
    if offload {
        return Sum::default();
    }
    let hdr = Headers {
        l2_len: u16::from(layout.l2_len),
        l3_len: u16::from(layout.l3_len),
        l4_len: u16::from(layout.l4_len),
        v6: layout.v6,
        proto: ip_proto::TCP,
        ip_len,
        payload_len: payload,
        key: super::FlowEntry::EMPTY_KEY,
    };
    claimed_payload_sum(frame, &hdr)
}
