//! Inbound TCP (outside → inside): connection tracking, the MSS raised on SYNs, and merging to
//! the iMTU for connections whose handshake crossed the gateway.
//!
//! Within an RX burst, the segments bound for the merge engine (and the packets that may belong
//! to a held flow: fragments, extension headers, malformed TCP) are gathered and handed to
//! [`Merger::rx_burst_parsed`] together at the end of the burst, with the parse the pipeline
//! made, so the engine's fast path and its grouping by flow run as they do alone. A TCP packet
//! that goes straight inside (a connection the gateway does not merge) first sends what was
//! gathered, so no packet overtakes an earlier one of its flow.
//!
//! A TCP packet above the iMTU is coalesced (the NIC's LRO, or GRO on a kernel-backed port):
//! it is a run of segments, cut here at the iMTU and merged as segments are (the paper's
//! Appendix example of 13.5 KB and 7.5 KB LRO packets), never taken for an oversize packet.

use pxio::split::split_tcp_parsed;

use super::*;

impl<B: PacketBuf> Pipeline<B> {
    /// An inbound TCP packet (`parsed`, its one parse; `h`, its headers).
    pub(super) fn inbound_tcp(
        &mut self,
        mut pkt: B,
        parsed: &Parsed,
        h: &Headers,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let key = conn::inbound_key(&h.key);
        let seg = conn::Segment::parse(pkt.head(), h);
        if let Some(seg) = seg.filter(|s| s.syn) {
            self.inbound_syn(&mut pkt, h, &seg, now);
        }
        // A plain segment of an established connection seen within the same recency period
        // (`conn::PROMOTE_EVERY_NS`) with the same acknowledgement: the lookup would change
        // nothing but its last sighting, which the table keeps to that period anyway (the
        // connection is still established while the table's generation is the same, and the
        // ACK was applied). A TSO burst's segments mostly arrive so. Any other segment of a
        // connection seen before finds it in the slot remembered (one key compare, no hash):
        // an outside receiver's ACKs, each acknowledging more, cost no lookup either.
        //
        // The connection is remembered by the merge engine's flow entry when the engine named
        // one for the packet (the start of a flow's next burst comes so), else by its hashed
        // slot.
        let plain = seg.filter(|s| !(s.syn || s.rst || s.fin));
        let slot = recent_slot(&key);
        let stamp = self.recent_stamp(now);
        let flow = self
            .streaming
            .and_then(|i| self.merger.streamed_flow(i, &h.key));
        let seen = flow
            .and_then(|f| self.flow_recent.get(f as usize))
            .filter(|r| r.key == key)
            .or_else(|| self.recall(slot, &key));
        let at = seen.map(|r| r.at);
        let repeat =
            plain.is_some_and(|s| seen.is_some_and(|r| r.ack == s.ack && r.stamp() == stamp));
        let found = if repeat {
            at
        } else {
            self.conns.on_outside(at, &key, seg.as_ref(), now)
        };
        let known = match seg {
            _ if found.is_some() => true,
            // A segment that completes a half-open connection makes it known.
            Some(seg) if !seg.syn => {
                self.conns.on_segment(&key, &seg, true, now) == conn::Outcome::Established
            }
            _ => false,
        };
        if let (Some(s), Some(found)) = (plain.filter(|_| self.in_burst && !repeat), found) {
            let r = Recent::new(key, s.ack, stamp, found);
            match flow {
                Some(f) => self.remember_flow(f, r),
                None => self.recent[slot] = r,
            }
        }
        if h.ip_len > self.cfg.imtu {
            return self.inbound_coalesced(pkt, parsed, h, known, now, out);
        }
        if self.cfg.merge && known {
            // A pure ACK goes on at once when the engine holds nothing (nor was anything
            // gathered for it), as the engine would pass it.
            if self.gathered.is_empty() {
                match self.merger.pass_if_idle(pkt, h, out) {
                    Ok(()) => return,
                    Err(back) => pkt = back,
                }
            }
            // A SYN's MSS rewrite above keeps every length: the parse still fits (and the
            // engine parses again if it did not).
            self.hand_to_merger(pkt, parsed, now, out);
        } else {
            self.send_inside(pkt, &h.key, now, out);
        }
    }

    /// An outside receiver's ACK, taken from a burst before anything else looks at it: a TCP
    /// segment without payload, SYN, RST or FIN, in an untagged frame over IPv4 without options
    /// (its header vouched for by the NIC) or IPv6 without extension headers, without the
    /// caravan mark, of a connection its recent slot remembers. It is handled exactly as
    /// [`inbound_tcp`](Self::inbound_tcp) handles it: the connection refreshed and its acknowledgement applied (unless the slot
    /// already holds that acknowledgement from this recency period), then handed to the merge
    /// engine, which sends what it holds of the flow first and passes it
    /// ([`Merger::pass_bare_ack`]); but without the general parse, the mark check and the
    /// classification, and, in the engine, without the parse and (when the engine holds
    /// nothing) the flow lookup. Three frames in four of an upload through the gateway are such
    /// ACKs. Anything else is given back untouched, with nothing recorded, for the general
    /// path; so is every frame while packets are gathered for the engine (it would overtake
    /// them).
    ///
    /// Out of line: a burst of data segments never calls it ([`BARE_ACK_MAX_FRAME`]), and its
    /// loop stays as small as it was without it.
    #[inline(never)]
    pub(super) fn outside_ack(&mut self, pkt: B, now: u64, out: &mut Vec<B>) -> Result<(), B> {
        if !self.cfg.merge || !self.gathered.is_empty() {
            return Err(pkt);
        }
        // A marked frame has its mark cleared on the general path; an IPv4 header the NIC did
        // not vouch for has its checksum checked there.
        let vouched = pkt.ip_csum_verdict() == Some(true);
        let Some(a) = wire::plain_ack(pkt.head(), pkt.len())
            .filter(|a| a.dscp != self.cfg.mark && (a.key.v6 || vouched))
        else {
            return Err(pkt);
        };
        let key = conn::inbound_key(&a.key);
        let slot = recent_slot(&key);
        let Some(&seen) = self.recall(slot, &key) else {
            return Err(pkt);
        };
        let stamp = self.recent_stamp(now);
        if seen.ack != Some(a.ack) || seen.stamp() != stamp {
            // Gone since (expired, evicted): the general path says what it is now. A failed
            // lookup changes nothing.
            let Some(found) = self
                .conns
                .on_outside_ack(seen.at, seen.generation, &key, a.ack, now)
            else {
                return Err(pkt);
            };
            let r = &mut self.recent[slot];
            (r.ack, r.period, r.generation, r.at) = (Some(a.ack), stamp.0, stamp.1, found);
        }
        // Vouched for (or IPv6), so never given back.
        self.merger.pass_bare_ack(pkt, &a.key, now, out)
    }

    /// A coalesced TCP segment above the iMTU: cut into iMTU-sized segments (zero-copy views
    /// of its payload), which are merged, or sent on, as any segment of their connection is.
    /// Its checksum is verified first (the NIC's verdict, else in software): a damaged one is
    /// dropped and counted, never re-checksummed into pieces that would look valid.
    fn inbound_coalesced(
        &mut self,
        pkt: B,
        parsed: &Parsed,
        h: &Headers,
        known: bool,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let offloads = SplitOffloads {
            tso: false,
            checksum: self.cfg.inside_checksum,
        };
        // Cut where the engine would: at the iMTU, or with TSO toward the inside at the most
        // whole iMTU-sized pieces a TSO request carries, so that a 64 KB LRO packet makes two
        // pieces, not eight, and the engine's cuts stash the rest for the next one.
        // A chain longer than the inside port sends in one packet (its `nb_seg_max`, the
        // engine's `max_segs`) is cut at the iMTU, whose pieces span a few buffers each: taken
        // whole, it could leave as it came, with nothing to join it.
        let merged = self.cfg.merge && known;
        let to = if merged && pkt.num_segs() <= usize::from(self.merger.config().max_segs) {
            let l34 = u32::from(h.ip_len) - u32::from(h.payload_len);
            u16::try_from(self.merger.largest_item(l34)).unwrap_or(self.cfg.imtu)
        } else {
            self.cfg.imtu
        };
        if h.ip_len <= to {
            return self.inbound_coalesced_whole(pkt, parsed, h, now, out);
        }
        if !received_checksums_ok(&pkt, h, offloads) {
            self.report.drops.coalesced_failed += 1;
            return;
        }
        let mut pieces = std::mem::take(&mut self.pieces);
        match split_tcp_parsed(pkt, parsed, to, offloads, &self.pool, &mut pieces) {
            Ok(n) => {
                self.count_coalesced_inbound(n);
                for mut piece in pieces.drain(..) {
                    // Cut from a verified segment: each piece's checksum is right (or left to
                    // the NIC, which the merge engine's offload mode expects).
                    piece.set_l4_csum_verdict(Some(true));
                    piece.set_ip_csum_verdict(Some(true));
                    let parsed = Parsed::of(piece.head(), piece.len());
                    // A piece above the iMTU (TSO toward the inside) asks the NIC to cut it
                    // there, should the engine pass it on as it is (a retransmission, no free
                    // item): nothing above the iMTU ever reaches the wire.
                    if let Class::Tcp(ph) = parsed.class() {
                        if ph.ip_len > self.cfg.imtu && !self.request_tso(&mut piece, ph) {
                            self.report.drops.coalesced_failed += 1;
                            continue;
                        }
                    }
                    if merged {
                        self.hand_to_merger(piece, &parsed, now, out);
                    } else {
                        self.send_inside(piece, &h.key, now, out);
                    }
                }
            }
            Err((e, pkt)) => {
                tracing::debug!(error = %e, "coalesced inbound segment not cut");
                self.report.drops.coalesced_failed += 1;
                drop(pkt);
            }
        }
        self.pieces = pieces;
    }

    /// A coalesced TCP segment of a merged connection that needs no cut (`h`, its headers from
    /// `parsed`): the merge engine takes it whole, and with TSO toward the inside the NIC cuts
    /// it at the iMTU should it leave as it is. Its checksums are verified first, as a cut
    /// would verify them (the NIC's verdict, else in software): a damaged one is dropped and
    /// counted, never sent on with checksums made afresh over its bytes.
    fn inbound_coalesced_whole(
        &mut self,
        mut pkt: B,
        parsed: &Parsed,
        h: &Headers,
        now: u64,
        out: &mut Vec<B>,
    ) {
        if !pxio::merge::tcp_checksums_ok(&pkt, h) {
            self.report.drops.coalesced_failed += 1;
            return;
        }
        pkt.set_l4_csum_verdict(Some(true));
        pkt.set_ip_csum_verdict(Some(true));
        if h.ip_len > self.cfg.imtu && !self.request_tso(&mut pkt, h) {
            self.report.drops.coalesced_failed += 1;
            return;
        }
        self.count_coalesced_inbound(1);
        self.hand_to_merger(pkt, parsed, now, out);
    }

    /// Has the NIC cut `pkt` (headers `h`) at the iMTU, readied as DPDK's TSO contract wants
    /// ([`pxio::split::request_tso`]), should the merge engine pass it on as it is. False when
    /// its headers cannot be written (shared).
    fn request_tso(&self, pkt: &mut B, h: &Headers) -> bool {
        let l34 = h.ip_len - h.payload_len;
        pxio::split::request_tso(pkt, h, self.cfg.imtu - l34)
    }

    /// Counts a coalesced inbound packet (above the iMTU), cut into `pieces` (1: taken whole).
    pub(super) fn count_coalesced_inbound(&mut self, pieces: usize) {
        self.report.coalesced.inbound += 1;
        self.report.coalesced.inbound_segments += pieces as u64;
    }

    /// A segment the merge engine's fast path took in an inbound burst, of its flow entry
    /// `flow`. It continued an item that began with a segment of a known connection, and it
    /// carries that item's acknowledgement (the fast path compares it), which that segment
    /// applied: its connection has nothing to learn from it but that it was seen, which is
    /// recorded once per recency period, as for any plain segment. A connection gone since the
    /// item began (expired, evicted, reset) has the flow's items sent on at once, so that its
    /// next segments find it unknown and pass unmerged.
    ///
    /// The period is checked on the flow entry's record alone, not its key: an entry the
    /// engine gives to another flow began that flow's first item with a segment this pipeline
    /// looked up, so a record left by the entry's last flow only skips one refresh.
    pub(super) fn fast_joined(&mut self, flow: u32, now: u64, out: &mut Vec<B>) {
        let stamp = self.recent_stamp(now);
        match self.fast_seen.get(flow as usize) {
            Some(&seen) if seen != fast_stamp(stamp) => {
                self.refresh_fast_flow(flow, stamp, now, out)
            }
            _ => {}
        }
    }

    /// [`fast_joined`](Self::fast_joined) once per recency period: the connection refreshed,
    /// found through the slot the flow entry or its hashed slot remembers (no lookup), and
    /// the entry's record rewritten; or the flow's items sent on, its connection gone.
    #[cold]
    fn refresh_fast_flow(&mut self, flow: u32, stamp: (u64, u32), now: u64, out: &mut Vec<B>) {
        let (Some(&seen), Some(&key)) = (
            self.flow_recent.get(flow as usize),
            self.merger.flow_key(flow),
        ) else {
            return;
        };
        let mine = seen.key == key;
        let at = if mine {
            Some(seen.at)
        } else {
            self.recall(recent_slot(&key), &key).map(|r| r.at)
        };
        match self.conns.on_outside(at, &key, None, now) {
            // The acknowledgement the entry remembers was applied; another flow's is not this
            // connection's.
            Some(found) => {
                let ack = if mine { seen.ack } else { None };
                self.remember_flow(flow, Recent::new(key, ack, stamp, found));
            }
            None => self.merger.release_flow(flow, now, out),
        }
    }

    /// Remembers `r`, a connection just refreshed, by the merge engine's flow entry `flow`: in
    /// full for its flow's next burst, and its stamp for the fast path's segments.
    fn remember_flow(&mut self, flow: u32, r: Recent) {
        if let (Some(by_flow), Some(seen)) = (
            self.flow_recent.get_mut(flow as usize),
            self.fast_seen.get_mut(flow as usize),
        ) {
            *seen = fast_stamp(r.stamp());
            *by_flow = r;
        }
    }

    /// When a recent-connection slot is written at `now` ([`Recent`]): the recency period and
    /// the connection table's generation. A plain segment carrying the acknowledgement its
    /// slot holds, with the same stamp, has nothing to change in its connection.
    fn recent_stamp(&self, now: u64) -> (u64, u32) {
        (now / conn::PROMOTE_EVERY_NS, self.conns.generation())
    }

    /// Asks the CPU to bring in what the recent-connection slot of `key` (inbound-oriented)
    /// remembers, for a packet of that connection a little later in the burst.
    #[inline]
    pub(super) fn prefetch_recent(&self, key: &FlowKey) {
        dpdk::prefetch(&self.recent[recent_slot(key)]);
    }

    /// Whether the records [`prefetch_flow_records`](Self::prefetch_flow_records) fetches, one
    /// per flow the merge engine holds, are more than a first-level data cache holds. Below
    /// that they stay in it from one burst to the next, and fetching them again cost more than
    /// it saved: 23 instructions per frame at 100 flows, no time saved without LRO.
    #[inline]
    pub(super) fn flow_records_outgrow_cache(&self) -> bool {
        const RECORD_BYTES: usize =
            std::mem::size_of::<Recent>() + std::mem::size_of::<(u32, u32)>();
        self.merger.flows() * RECORD_BYTES > FIRST_LEVEL_CACHE_BYTES
    }

    /// Asks the CPU to bring in what the pipeline remembers by the flow entries the merge
    /// engine named for the chunk it streams ([`Merger::stream_hints`]): the fast path's stamp
    /// for each segment it joins, and the record the first segment of a flow's next burst
    /// finds its connection by. With thousands of flows neither is in the cache, and a load
    /// of each, one packet after another, waited for its miss in turn. Once per chunk, out of
    /// the burst loop's code.
    #[inline(never)]
    pub(super) fn prefetch_flow_records(&self) {
        for flow in self.merger.stream_hints() {
            if let (Some(seen), Some(r)) = (
                self.fast_seen.get(flow as usize),
                self.flow_recent.get(flow as usize),
            ) {
                dpdk::prefetch(seen);
                dpdk::prefetch(r);
            }
        }
    }

    /// What the recent-connection slot `slot` remembers of `key`'s connection, if it is that
    /// connection's ([`Recent`]).
    pub(super) fn recall(&self, slot: usize, key: &FlowKey) -> Option<&Recent> {
        let r = &self.recent[slot];
        (r.key == *key).then_some(r)
    }

    /// Hands `pkt` to the merge engine: at once on its general path while it streams the
    /// burst's chunk, gathered for the end of the chunk otherwise inside
    /// [`inbound_burst`](Pipeline::inbound_burst), at once for a packet handed over alone.
    pub(super) fn hand_to_merger(&mut self, pkt: B, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        if let Some(i) = self.streaming {
            self.merger.rx_streamed(i, pkt, parsed, now, out);
        } else if self.in_burst {
            self.gathered.push((pkt, *parsed));
        } else {
            self.merger.rx_parsed(pkt, *parsed, now, out);
        }
    }

    /// Sends a packet of the TCP flow `key` inside without the merge engine: after what was
    /// gathered for it, and after what the engine holds of its flow (its connection was known
    /// when that data came, and may not be now: expired, evicted), so it never overtakes an
    /// earlier packet of its flow.
    pub(super) fn send_inside(&mut self, pkt: B, key: &FlowKey, now: u64, out: &mut Vec<B>) {
        self.merge_gathered(now, out);
        self.merger.release_key(key, now, out);
        out.push(pkt);
    }

    /// Hands what the burst gathered to the merge engine, which settles it. Checked inline:
    /// every chunk asks, and mostly nothing was gathered.
    #[inline]
    pub(super) fn merge_gathered(&mut self, now: u64, out: &mut Vec<B>) {
        if !self.gathered.is_empty() {
            self.merge_gathered_now(now, out);
        }
    }

    #[inline(never)]
    fn merge_gathered_now(&mut self, now: u64, out: &mut Vec<B>) {
        self.merger
            .rx_burst_parsed(self.gathered.drain(..), now, out);
    }

    /// An outside SYN or SYN-ACK. Its MSS is raised to the iMTU's, so the inside host sends
    /// large segments that the gateway splits on the way out; but not when it is below the
    /// floor (`[mss] min`): an outside host announcing a tiny MSS (8 B, say) would otherwise
    /// have the gateway cut each large segment into a thousand frames, where the inside host's
    /// own TCP would never send below its own floor (Linux's `tcp_min_snd_mss`, 48 B). Left as
    /// it is, that MSS reaches the inside host, which segments and checks for itself.
    pub(super) fn inbound_syn(&mut self, pkt: &mut B, h: &Headers, seg: &conn::Segment, now: u64) {
        self.report.mss.handshakes += 1;
        let v6 = h.key.v6;
        let announced = mss::read(pkt.head(), h);
        let below_floor = announced.is_some_and(|m| m < self.mss_floor(v6));
        self.report.mss.below_floor += u64::from(below_floor);
        let target = (self.cfg.mss_rewrite && !below_floor)
            .then(|| self.cfg.imtu.saturating_sub(mss::overhead(v6)));
        if let Some(frame) = pkt.head_mut() {
            let hs = mss::rewrite(frame, h, target, true);
            self.report.mss.rewritten += u64::from(hs.rewritten.is_some());
        }
        self.report.mss.without_mss += u64::from(announced.is_none());
        let pmtu = match self.cfg.policy {
            PmtuPolicy::Mss => match announced {
                Some(_) => mss::pmtu_from_mss(announced, v6, self.cfg.emtu),
                None => self.fallback_pmtu(),
            },
            _ => self.fallback_pmtu_for(self.cfg.policy),
        };
        // A SYN from outside only makes a half-open connection; a SYN-ACK that acknowledges
        // the inside host's SYN completes one; neither changes an established one
        // (`crate::conn`).
        self.conns
            .on_handshake(conn::inbound_key(&h.key), seg, true, Some(pmtu), now);
    }

    /// A packet that is never merged but may belong to a TCP flow with held segments (IPv6
    /// extension headers, a first fragment, a malformed TCP header): the merger passes it on
    /// after that flow's held data, so the flow's order is kept.
    pub(super) fn inbound_unmergeable(
        &mut self,
        pkt: B,
        parsed: Parsed,
        now: u64,
        out: &mut Vec<B>,
    ) {
        if self.cfg.merge {
            self.hand_to_merger(pkt, &parsed, now, out);
        } else {
            out.push(pkt);
        }
    }

    /// The smallest MSS the gateway raises toward the inside host (`[mss] min`, `min_v6`).
    pub(super) fn mss_floor(&self, v6: bool) -> u16 {
        if v6 {
            self.cfg.mss_floor.1
        } else {
            self.cfg.mss_floor.0
        }
    }
}

/// Whether the checksums of `pkt` (headers `h`), a received TCP segment about to be split with
/// `offloads`, hold where the split would not check them itself: the IPv4 header always (the
/// pieces' headers are made from it), the TCP checksum when the NIC is to make the pieces'
/// (checksum offload, TSO). The software split verifies the TCP checksum on its way. A damaged
/// segment must not leave as pieces with checksums made afresh over its bytes.
pub(super) fn received_checksums_ok<B: PacketBuf>(
    pkt: &B,
    h: &Headers,
    offloads: SplitOffloads,
) -> bool {
    if offloads.tso || offloads.checksum {
        pxio::merge::tcp_checksums_ok(pkt, h)
    } else {
        pxio::merge::ip_header_ok(pkt, h)
    }
}

/// A connection seen established: its key, the acknowledgement a plain inbound segment of it
/// carried, when (the recency period, the connection table's generation), and its slot in the
/// connection table. One cache line: a slot laid out across two cost a second miss on many
/// lookups.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(super) struct Recent {
    pub(super) key: FlowKey,
    pub(super) ack: Option<u32>,
    pub(super) period: u64,
    pub(super) generation: u32,
    pub(super) at: u32,
}

const _: () = assert!(std::mem::size_of::<Recent>() == 64);

impl Recent {
    /// A slot no packet's connection has: its key is no packet's, nor its stamp.
    pub(super) const EMPTY: Self = Self::new(FlowKey::ZERO, None, NEVER, 0);

    /// `key`'s connection, found in slot `at`, with `ack` seen at `stamp`.
    pub(super) const fn new(key: FlowKey, ack: Option<u32>, stamp: (u64, u32), at: u32) -> Self {
        Self {
            key,
            ack,
            period: stamp.0,
            generation: stamp.1,
            at,
        }
    }

    /// When it was written: the recency period and the connection table's generation.
    pub(super) fn stamp(&self) -> (u64, u32) {
        (self.period, self.generation)
    }
}

/// The first-level data cache of the servers pxgw runs on (32 KB on x86 and most Arm server
/// cores since 2010; 48 KB on the newest), the smaller taken.
const FIRST_LEVEL_CACHE_BYTES: usize = 32 << 10;

/// A recency stamp in the eight bytes [`Pipeline::fast_joined`] reads per segment: the period
/// as 32 bits wraps after 2.3 years of 16.7 ms periods, and a stale record that matches again
/// only skips one refresh.
pub(super) fn fast_stamp((period, generation): (u64, u32)) -> (u32, u32) {
    (period as u32, generation)
}

/// The longest frame a bare ACK comes in ([`Pipeline::outside_ack`]): an untagged Ethernet
/// header, an IPv6 header and the longest TCP header, without payload (a frame that long needs
/// no Ethernet padding; an IPv4 one is shorter).
pub(super) const BARE_ACK_MAX_FRAME: usize = 14 + 40 + 60;

/// Connections remembered for [`Pipeline::inbound_tcp`]'s shortcut.
pub(super) const RECENT_SLOTS: usize = 1024;

/// The slot of `key` (inbound-oriented, so both directions of a connection share it) among the
/// recent connections: a multiplicative fold of its words (`conn::key_words`). Not the NIC's RSS
/// hash: under the ports' symmetric key that hash is a function of the XOR of the tuple's
/// 16-bit words, so flows whose address and port step together (198.19.0.n:32768+n, say) all
/// share one. A slot only saves a lookup (its whole key is compared), so keys that collide,
/// chosen or not, only cost the lookup.
#[inline]
pub(super) fn recent_slot(key: &FlowKey) -> usize {
    let [s0, s1, d0, d1, ports] = conn::key_words(key);
    let h = (s0 ^ s1 ^ (d0 ^ d1).rotate_left(29) ^ ports.rotate_left(47))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
}
