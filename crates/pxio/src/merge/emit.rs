//! Emitting held items (SIGCOMM'26 §4.1 and §4.2): an item goes out in sequence order once it
//! is iMTU-bound or closed by PSH/FIN, at the end of a burst, or when its ETM window expires.
//! Its headers are rewritten for the merged length (lengths, flags, checksums, or the
//! pseudo-header seed when the NIC computes them), after a private copy of a shared header
//! (`privatize_head`); the conversion yield and the added delay are recorded.

use super::delay;
use super::flow_table::NIL;
use super::item::Item;
use super::Merger;
use crate::buf::{mark_rewritten_checksums, PacketBuf, PacketChain, TxOffload};
use crate::checksum::{self, Sum};
use crate::wire::{self, tcp_flags};

impl<B: PacketBuf> Merger<B> {
    pub(super) fn pass(&mut self, pkt: B, out: &mut Vec<B>) {
        self.stats.passthrough += 1;
        self.emit_raw(pkt, out);
    }

    fn emit_raw(&mut self, pkt: B, out: &mut Vec<B>) {
        self.stats.packets_out += 1;
        out.push(pkt);
    }

    /// Emits item `idx` (and those before it) when PSH/FIN closed it or it reached the iMTU.
    /// An item that is merely too full for one more whole segment stays: the next segment will
    /// be cut to fill it exactly (partial stashing).
    pub(super) fn emit_if_done(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        let it = &self.items[idx as usize];
        if it.closed() || it.ip_len() >= self.item_limit(it.layout) {
            self.emit_through(flow, idx, now, out);
        }
    }

    /// Emits the flow's items up to and including `idx`, in sequence order.
    pub(super) fn emit_through(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        loop {
            let head = self.flows.get(flow).items;
            if head == NIL {
                return;
            }
            self.emit_head(flow, now, out);
            if head == idx {
                return;
            }
        }
    }

    /// Emits every item of the flow.
    pub(super) fn flush_flow(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        while self.flows.get(flow).items != NIL {
            self.emit_head(flow, now, out);
        }
        self.cancel_deadline(flow);
    }

    /// Emits the flow's first item and frees its slot.
    pub(super) fn emit_head(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        let idx = self.flows.get(flow).items;
        self.send_item(flow, idx, now, out);
        let e = self.flows.get_mut(flow);
        let next = self.items[idx as usize].next;
        e.items = next;
        e.n_items -= 1;
        if next == NIL {
            // The last item left: nothing waits.
            self.cancel_deadline(flow);
        }
        self.free_item(idx);
    }

    /// Sends the packet of item `idx`, the flow's first: its headers rewritten, the yield and
    /// the added delay recorded. The slot stays linked and holds no packet: the caller frees it
    /// ([`emit_head`](Self::emit_head)) or starts it afresh (a cut's rest, in `place`).
    pub(super) fn send_item(&mut self, flow: u32, idx: u32, now: u64, out: &mut Vec<B>) {
        let mss = u32::from(self.flows.get(flow).mss);
        let it = &self.items[idx as usize];
        let pieces = self.tso_pieces(it.layout, it.payload_len);
        let it = &mut self.items[idx as usize];
        let mut pkt = it
            .pkt
            .take()
            .expect("held items have a packet")
            .into_packet();
        let imtu = u32::from(self.cfg.imtu);
        let (payload, segs, arrival_sum, oldest) =
            (it.payload_len, it.segs, it.arrival_sum, it.oldest);
        let l34 = it.layout.l3_l4_len();
        // With TSO, a packet past the iMTU leaves whole and the NIC cuts it into pieces of
        // `segsz` payload bytes: every piece but the last is iMTU-sized.
        let (segsz, whole, last) = pieces.map_or((0, 0, payload), |p| (p.segsz, p.whole, p.last));
        let last_full = last > 0 && l34 + last + mss > imtu;
        let offload = Offload {
            checksum: self.cfg.checksum_offload,
            tso_segsz: segsz as u16,
        };
        if it.modified() && !finalize(&mut pkt, it, offload, &self.pool) {
            // Headers could not be rewritten (no buffer for a private copy): the packet would be
            // wrong on the wire, so it is dropped and counted.
            self.stats.dropped_no_buffer += 1;
            drop(pkt);
        } else {
            self.stats.packets_out += 1;
            out.push(pkt);
        }
        self.stats.payload_full +=
            u64::from(whole * segsz) + if last_full { u64::from(last) } else { 0 };
        // Every segment arrived in this burst (the usual case): the mean is `now`, with no
        // division.
        let mean_arrival = if oldest >= now {
            now
        } else {
            arrival_sum / u64::from(segs.max(1))
        };
        let wait = now.saturating_sub(mean_arrival).max(1);
        self.record_delay(wait, u64::from(segs));
        self.stats.max_hold_ns = self.stats.max_hold_ns.max(now.saturating_sub(oldest));
        let e = self.flows.get_mut(flow);
        if whole > 0 {
            e.yield_avg = delay::update_yield_full(e.yield_avg, whole);
        }
        if last > 0 {
            let weight = (l34 + last) as f32 / imtu as f32;
            e.yield_avg = delay::update_yield(e.yield_avg, last_full, weight);
        }
    }
}

impl<B: PacketBuf> Merger<B> {
    /// Records `n` segments that waited `wait` ns. Runs of equal waits (every item completed in
    /// the burst its segments came in waited 1 ns) are added up and recorded at once, when the
    /// value changes and at the end of each burst, poll and flush
    /// ([`flush_delay_record`](Self::flush_delay_record)): the histogram ends up the same, at a
    /// fraction of the recording cost.
    #[inline]
    pub(super) fn record_delay(&mut self, wait: u64, n: u64) {
        let (value, count) = &mut self.delay_run;
        if *value == wait {
            *count += n;
        } else {
            self.flush_delay_record();
            self.delay_run = (wait, n);
        }
    }

    /// Moves the run of equal waits [`record_delay`](Self::record_delay) adds up into the
    /// histogram.
    pub(super) fn flush_delay_record(&mut self) {
        let (value, count) = std::mem::take(&mut self.delay_run);
        if count > 0 {
            let _ = self.stats.delay_ns.record_n(value, count);
        }
    }
}

/// Rewrites the headers of a merged packet: lengths, flags, the last segment's window (IP ID
/// stays the first segment's), and checksums (or the pseudo-header seed for NIC offload).
///
/// The fields are written where the item's [`Layout`] puts them: the headers were validated
/// when the first segment arrived (an IPv4 header without options, a TCP header of `l4_len`
/// bytes), and only this engine has written to them since. A header that is not there (no
/// longer as long as the layout says) fails the rewrite rather than a bounds check.
/// What the NIC does for a merged packet on transmit.
#[derive(Clone, Copy)]
struct Offload {
    /// It fills the IPv4 and TCP checksums.
    checksum: bool,
    /// It cuts the packet into pieces of this many payload bytes (TSO); 0: it sends it whole.
    tso_segsz: u16,
}

fn finalize<B: PacketBuf>(pkt: &mut B, it: &Item<B>, nic: Offload, pool: &B::Pool) -> bool {
    let offload = nic.checksum;
    let tso = nic.tso_segsz > 0;
    let layout = it.layout;
    let hdr_len = layout.hdr_len();
    if pkt.head_mut().is_none() && !privatize_head(pkt, hdr_len, pool) {
        return false;
    }
    let ip_len = it.ip_len();
    let Some(bytes) = pkt.head_mut().and_then(|b| b.get_mut(..hdr_len)) else {
        return false;
    };
    let (ip, tcp) = bytes.split_at_mut(layout.l4_offset());
    let ip = &mut ip[usize::from(layout.l2_len)..];
    let Some(tcp_fixed) = tcp.first_chunk_mut::<20>() else {
        return false;
    };
    let l4_len = ip_len - u32::from(layout.l3_len);
    // DPDK's TSO contract: the TCP checksum field holds the pseudo-header sum without the
    // length, which differs per piece.
    let pseudo_len = if tso { 0 } else { l4_len };
    let pseudo = if layout.v6 {
        let Some(ip) = ip.first_chunk_mut::<40>() else {
            return false;
        };
        ip[4..6].copy_from_slice(&((ip_len - 40) as u16).to_be_bytes());
        let ip = wire::Ipv6Packet::new_unchecked(&ip[..]);
        checksum::pseudo_header_v6(
            ip.src_addr(),
            ip.dst_addr(),
            wire::ip_proto::TCP,
            pseudo_len,
        )
    } else {
        let Some(ip) = ip.first_chunk_mut::<20>() else {
            return false;
        };
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[10..12].fill(0);
        if !offload {
            let sum = Sum::of_20(ip).checksum();
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        let ip = wire::Ipv4Packet::new_unchecked(&ip[..]);
        checksum::pseudo_header_v4(
            ip.src_addr(),
            ip.dst_addr(),
            wire::ip_proto::TCP,
            pseudo_len as u16,
        )
    };
    tcp_fixed[13] = tcp_fixed[13] & !(tcp_flags::PSH | tcp_flags::FIN) | it.tail_flags;
    // The most recent window advertisement (see the module docs, "Merge rules").
    tcp_fixed[14..16].copy_from_slice(&it.last_window.to_be_bytes());
    let tcp_sum = if offload {
        pseudo.fold()
    } else {
        tcp_fixed[16..18].fill(0);
        pseudo.add(Sum::of(tcp)).add(it.payload_sum).checksum()
    };
    tcp[16..18].copy_from_slice(&tcp_sum.to_be_bytes());
    if offload {
        pkt.request_tx_offload(TxOffload {
            l2_len: layout.l2_len,
            l3_len: u16::from(layout.l3_len),
            l4_len: layout.l4_len,
            ipv4: !layout.v6,
            ip_checksum: !layout.v6,
            tcp_checksum: true,
            tso_segsz: nic.tso_segsz,
            ..TxOffload::default()
        });
    }
    // What the split may trust: checksums computed here over verified bytes are correct; with
    // offload the fields are only the NIC's seeds.
    mark_rewritten_checksums(pkt, !offload, layout.v6);
    true
}

/// Replaces a shared first segment's headers with a private copy so they can be rewritten: the
/// rest moves behind the copy ([`PacketBuf::split_off`]: the later segments as they are, the
/// first one's payload through one view), and the shared headers are let go.
fn privatize_head<B: PacketBuf>(pkt: &mut B, hdr_len: usize, pool: &B::Pool) -> bool {
    let Some(mut head) = B::alloc_with(pool, &pkt.head()[..hdr_len]) else {
        return false;
    };
    if pkt.len() > hdr_len && !super::place::move_rest_behind(pkt, hdr_len, &mut head, pool) {
        return false;
    }
    *pkt = head;
    true
}
