//! UDP caravans (SIGCOMM'26 §6): inbound datagrams of a flow packed into one iMTU-sized packet
//! that wears the caravan mark; outbound caravans unpacked; and the mark, which only the
//! gateway gives, cleared from every inbound frame it did not pack.

use super::*;

impl<B: PacketBuf> Pipeline<B> {
    /// An inbound UDP datagram (`h` its headers, from `parsed`, the pipeline's one parse of it,
    /// which every caravan step below takes instead of classifying again).
    pub(super) fn inbound_udp(
        &mut self,
        pkt: B,
        h: &Headers,
        parsed: &Parsed,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let Some(ccfg) = self.cfg.caravan else {
            return out.push(pkt);
        };
        let slot = hint_slot(pkt.head());
        let set = &self.cfg.exclude;
        let has = |p: u16| set[usize::from(p) / 64] & 1 << (p % 64) != 0;
        let excluded = has(h.key.sport) || has(h.key.dport);
        if excluded {
            return out.push(pkt);
        }
        if let Some(why) = self.unpackable(pkt.head(), h) {
            let c = &mut self.report.caravan;
            match why {
                Unpackable::Family => c.unpacked_family += 1,
                Unpackable::Vlan => c.unpacked_vlan += 1,
                Unpackable::LowTtl => c.unpacked_low_ttl += 1,
            }
            // What the flow has held leaves first, so the flow keeps its order.
            self.close_caravan(&h.key, out);
            return out.push(pkt);
        }
        let found = self.caravans.find(&KeyWords(h.key));
        let pkt = match found.and_then(|s| Some((s, self.caravans.slot_mut(s)?.1))) {
            Some((s, (Open::Caravan(builder), _))) => match builder.push_parsed(pkt, parsed) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 1;
                    return self.make_hot(s, slot);
                }
                // A datagram that does not fit, or differs where a caravan keeps one IP header
                // (TTL, ECN, DF), starts the flow's next caravan; one that cannot travel in any
                // passes. Either way after the held caravan, so the flow keeps its order.
                Err((CaravanError::Full | CaravanError::Mismatch, pkt)) => {
                    return self.reopen_slot(s, KeyWords(h.key), pkt, parsed, now, out);
                }
                Err((_, pkt)) => {
                    self.close_slot(s, out);
                    return out.push(pkt);
                }
            },
            Some((s, (Open::Lone(first, first_parsed), _))) => {
                match caravan::can_pair_parsed(first, first_parsed, &pkt, parsed, &ccfg) {
                    Ok(()) => return self.pair(s, pkt, parsed, &ccfg, slot, out),
                    // Nothing joins the held datagram: it leaves as it came, first.
                    Err(_) => {
                        self.close_slot(s, out);
                        pkt
                    }
                }
            }
            None => pkt,
        };
        self.hold(KeyWords(h.key), pkt, parsed, now, out);
    }

    /// Packs an inbound frame into its flow's open caravan when the frame's headers repeat that
    /// caravan's byte for byte ([`CaravanBuilder::push_same_flow`]): no parse, no hash, the
    /// caravan found through a hint kept by a fold of the frame's address and port bytes
    /// ([`hint_slot`]). Anything else comes back for the general path, which decides as it
    /// would have.
    ///
    /// Equivalent to the general path for what it takes: the datagram has the caravan's flow
    /// (whatever flow the hint was left for), so the same excluded ports (none: the caravan
    /// opened), the same family, tags and TTL (it opened, so packable), and the first's DSCP,
    /// which the general path cleared of the mark before packing (the mark itself never
    /// matches). The F-PMTUD port's caravans are never joined here, so a report for the
    /// gateway's own probe always reaches the path-MTU state.
    ///
    /// A datagram of the caravan's flow that does not fit closes it and is held for the
    /// flow's next, as the general path would do.
    pub(super) fn join_hot_caravan(&mut self, pkt: B, now: u64, out: &mut Vec<B>) -> Result<(), B> {
        if self.caravans.is_empty() {
            return Err(pkt);
        }
        let Some(at) = hint_slot(pkt.head()).and_then(|slot| self.hot_caravans[slot]) else {
            return Err(pkt);
        };
        let (port, ccfg) = (self.pmtu.port(), self.cfg.caravan);
        let Some((KeyWords(key), (open, _))) = self.caravans.slot_mut(at) else {
            return Err(pkt);
        };
        if key.sport == port || key.dport == port {
            return Err(pkt);
        }
        let builder = match open {
            Open::Caravan(builder) => builder,
            // The flow's lone datagram, which this one may join.
            Open::Lone(first, first_parsed) => {
                let Some(ccfg) = ccfg else {
                    return Err(pkt);
                };
                let Some(parsed) = caravan::pairs_by_headers(first, first_parsed, &pkt, &ccfg)
                else {
                    return Err(pkt);
                };
                let slot = hint_slot(pkt.head());
                self.pair(at, pkt, &parsed, &ccfg, slot, out);
                return Ok(());
            }
        };
        let (pkt, parsed) = match builder.push_same_flow(pkt) {
            Ok(()) => {
                self.report.caravan.datagrams_packed += 1;
                return Ok(());
            }
            Err(SameFlowRefused::Other(pkt)) => return Err(pkt),
            Err(SameFlowRefused::Full(pkt, parsed)) => (pkt, parsed),
        };
        let key = KeyWords(*key);
        self.reopen_slot(at, key, pkt, &parsed, now, out);
        Ok(())
    }

    /// The flow in `at` (of `key`) sends on what it holds, and `pkt`, its next datagram, which did not
    /// join (`parsed`, its parse), is held in the same place as [`hold`](Self::hold) would
    /// hold it: the flow's entry starts afresh, the newest, so caravans still leave in the
    /// order they opened, without a lookup or an eviction. One that could never open a
    /// caravan passes at once, after what the flow held.
    fn reopen_slot(
        &mut self,
        at: u32,
        key: KeyWords,
        pkt: B,
        parsed: &Parsed,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let packable = self
            .cfg
            .caravan
            .is_some_and(|ccfg| caravan::packable_parsed(&pkt, parsed, &ccfg).is_ok());
        if !packable {
            self.close_slot(at, out);
            return out.push(pkt);
        }
        let slot = hint_slot(pkt.head());
        match self.caravans.renew_at(at, (Open::Lone(pkt, *parsed), now)) {
            Ok((open, _)) => {
                self.emit(open, out);
                self.make_hot(at, slot);
            }
            // Callers reopen a place they just found; should it be free, the datagram (the
            // lone one just given, back) is held as any other.
            Err((open, _)) => {
                if let Open::Lone(pkt, parsed) = open {
                    self.hold(key, pkt, &parsed, now, out);
                }
            }
        }
    }

    /// Holds `pkt`, the flow of `key`'s only datagram now, until a second joins it; one that
    /// could never open a caravan passes at once. With every place taken, the flow that opened
    /// its caravan first makes room: its caravan leaves now, early but whole.
    fn hold(&mut self, key: KeyWords, pkt: B, parsed: &Parsed, now: u64, out: &mut Vec<B>) {
        let Some(ccfg) = &self.cfg.caravan else {
            return out.push(pkt);
        };
        match caravan::packable_parsed(&pkt, parsed, ccfg) {
            Ok(()) => {
                let slot = hint_slot(pkt.head());
                let (at, evicted) = self.caravans.push_at(key, (Open::Lone(pkt, *parsed), now));
                if let Some((_, (open, _))) = evicted {
                    self.report.caravan.closed_early += 1;
                    self.emit(open, out);
                }
                if let Some(slot) = slot {
                    self.hot_caravans[slot] = Some(at);
                }
            }
            Err(_) => out.push(pkt),
        }
    }

    /// Hints the caravan in `at` as the one the next frame of hint slot `slot` ([`hint_slot`],
    /// if the frame has one) is tried on first.
    fn make_hot(&mut self, at: u32, slot: Option<usize>) {
        if let Some(slot) = slot {
            self.hot_caravans[slot] = Some(at);
        }
    }

    /// A second datagram for the held one in `at`, which [`caravan::can_pair_parsed`] (or
    /// [`caravan::pairs_by_headers`]) said it joins: the two open a caravan in the held one's
    /// place, which keeps its start time (and so its place in the closing order). Both bring
    /// their parses along; `slot` is the second's hint slot.
    pub(super) fn pair(
        &mut self,
        at: u32,
        second: B,
        parsed: &Parsed,
        ccfg: &CaravanConfig,
        slot: Option<usize>,
        out: &mut Vec<B>,
    ) {
        let (pool, report) = (&self.pool, &mut self.report.caravan);
        let opened = self.caravans.update_at(at, |_, (open, since)| {
            let (first, first_parsed) = match open {
                Open::Lone(first, first_parsed) => (first, first_parsed),
                // Callers pair only with a lone datagram. Should an open caravan be found
                // instead, it leaves whole, first, rather than being dropped, and the datagram
                // follows it.
                open @ Open::Caravan(_) => {
                    emit(report, open, out);
                    out.push(second);
                    return (None, false);
                }
            };
            match CaravanBuilder::start_parsed(first, &first_parsed, *ccfg, pool) {
                // The second's header bytes first; what they cannot tell, its parse.
                Ok(mut b) => match b.push_same_flow(second).or_else(|refused| match refused {
                    SameFlowRefused::Other(second) | SameFlowRefused::Full(second, _) => {
                        b.push_parsed(second, parsed)
                    }
                }) {
                    Ok(()) => {
                        report.datagrams_packed += 2;
                        (Some((Open::Caravan(b), since)), true)
                    }
                    // can_pair checked everything push does; should it still refuse, the
                    // caravan of one leaves (a valid caravan) and the second passes behind it.
                    Err((_, second)) => {
                        report.datagrams_packed += 1;
                        report.caravans_built += 1;
                        out.push(b.finish());
                        out.push(second);
                        (None, false)
                    }
                },
                // No buffer for the caravan's header: both leave as they came, in order
                // (nothing is lost for want of a header buffer).
                Err((_, first)) => {
                    report.unwrapped_single += 2;
                    out.push(first);
                    out.push(second);
                    (None, false)
                }
            }
        });
        if opened == Some(true) {
            self.make_hot(at, slot);
        }
    }

    /// Why an inbound datagram must not travel in a caravan, if it must not: its family is not
    /// configured; it is double-tagged or 802.1ad-tagged (the decapsulator handles one 802.1Q
    /// tag); or its TTL/hop limit is so small that it may expire inside, where the ICMP error
    /// must quote the datagram as sent, not a caravan (`docs/caravan.md`).
    pub(super) fn unpackable(&self, frame: &[u8], h: &Headers) -> Option<Unpackable> {
        let (v4, v6) = self.cfg.caravan_families;
        if !(if h.key.v6 { v6 } else { v4 }) {
            return Some(Unpackable::Family);
        }
        let eth = wire::EthernetFrame::new_unchecked(frame);
        let tags_ok = match eth.vlan_count() {
            0 => true,
            1 => eth.vlan_tpid(0) == Some(wire::ethernet::ethertype::VLAN),
            _ => false,
        };
        if !tags_ok {
            return Some(Unpackable::Vlan);
        }
        let l3 = &frame[h.l3_offset()..];
        let ttl = if h.key.v6 {
            wire::Ipv6Packet::new_unchecked(l3).hop_limit()
        } else {
            wire::Ipv4Packet::new_unchecked(l3).ttl()
        };
        (ttl <= self.cfg.pass_ttl).then_some(Unpackable::LowTtl)
    }

    /// A frame the merge engine and the caravans cannot take, from outside (a fragment, a
    /// malformed datagram or segment). One that names a UDP flow leaves after what the flow
    /// holds, at once, so the flow keeps its order (the merge engine, which keeps TCP's,
    /// holds nothing of a UDP flow); anything else goes through the merge engine.
    pub(super) fn inbound_unmergeable_udp(
        &mut self,
        pkt: B,
        parsed: Parsed,
        now: u64,
        out: &mut Vec<B>,
    ) {
        match wire::flow_of(pkt.head(), pkt.len()) {
            Some(key) if key.proto == wire::ip_proto::UDP => {
                self.close_caravan(&key, out);
                out.push(pkt);
            }
            _ => self.inbound_unmergeable(pkt, parsed, now, out),
        }
    }

    /// Sends on what the flow of `key` holds, if anything: its caravan, or its lone datagram as
    /// it came.
    pub(super) fn close_caravan(&mut self, key: &FlowKey, out: &mut Vec<B>) {
        if let Some(open) = self.caravans.pop(&KeyWords(*key)) {
            self.emit(open.0, out);
        }
    }

    /// [`close_caravan`](Self::close_caravan) for the flow whose place is `at`.
    fn close_slot(&mut self, at: u32, out: &mut Vec<B>) {
        let report = &mut self.report.caravan;
        self.caravans.update_at(at, |_, (open, _)| {
            emit(report, open, out);
            (None, ())
        });
    }

    /// Sends on what a flow held.
    fn emit(&mut self, open: Open<B>, out: &mut Vec<B>) {
        emit(&mut self.report.caravan, open, out);
    }

    /// Closes the caravans opened at or before `opened_by` (all of them with `None`), oldest
    /// first: the table keeps them in the order they opened (a caravan keeps the start of the
    /// datagram it grew from), so they leave in that order, and a replay of the same capture
    /// gives the same output.
    pub(super) fn close_caravans_opened_by(&mut self, opened_by: Option<u64>, out: &mut Vec<B>) {
        while let Some((_, (_, since))) = self.caravans.peek_lru() {
            if opened_by.is_some_and(|by| *since > by) {
                break;
            }
            let Some((_, (open, _))) = self.caravans.pop_lru() else {
                break;
            };
            self.emit(open, out);
        }
    }

    /// When the oldest open caravan opened, if any is open.
    pub(super) fn oldest_caravan(&self) -> Option<u64> {
        self.caravans.peek_lru().map(|(_, (_, since))| *since)
    }

    /// An outbound datagram that wears the caravan mark (`parsed`, the pipeline's parse of it):
    /// unpacked when it is a caravan, else passed as an ordinary datagram.
    pub(super) fn outbound_caravan(
        &mut self,
        pkt: B,
        parsed: &Parsed,
        ccfg: &CaravanConfig,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let start = out.len();
        match caravan::unpack_parsed(pkt, parsed, ccfg, &self.pool, out) {
            Ok(n) => {
                self.report.caravan.caravans_unpacked += 1;
                self.report.caravan.datagrams_unpacked += n as u64;
                // Datagrams too large for the outside are handled one by one as a router would
                // (fragments, or an ICMP error); what they become goes to the end of `out`,
                // already fitting.
                let mut i = start;
                while i < out.len() {
                    if out[i].len() > self.max_frame() {
                        let pkt = out.remove(i);
                        self.outbound_fit(pkt, now, out);
                    } else {
                        i += 1;
                    }
                }
            }
            // Marked, but no caravan header: an ordinary datagram that wears the DSCP, passed
            // as it came.
            Err((CaravanError::NotCaravan, pkt)) => {
                self.report.caravan.marked_plain += 1;
                self.outbound_fit(pkt, now, out);
            }
            // A caravan header the gateway does not understand: not its to rewrite.
            Err((CaravanError::UnknownVersion(_), pkt)) => {
                self.report.caravan.unknown_version += 1;
                self.outbound_fit(pkt, now, out);
            }
            Err((CaravanError::PoolExhausted, pkt)) => {
                self.report.drops.pool_exhausted += 1;
                drop(pkt);
            }
            Err((_, pkt)) => {
                self.report.drops.caravan_malformed += 1;
                drop(pkt);
            }
        }
    }

    /// Clears the caravan mark of an inbound frame, whatever it is: the mark is the gateway's to
    /// give (inside hosts' decapsulators trust it), and an outsider's pre-formed caravan must
    /// reach the inside as the ordinary datagram it is. This runs before any other inbound
    /// step, so no path (caravans off, excluded ports, fragments, other protocols, malformed
    /// headers, oversize packets) lets the mark through. False when the frame must be dropped
    /// (counted): it wears the mark, or may, and cannot be rewritten (shared data, or a first
    /// buffer too short to hold the IP header's first bytes).
    pub(super) fn inbound_unmark(&mut self, pkt: &mut B) -> bool {
        use wire::ethernet::ethertype;
        let chained = pkt.num_segs() > 1;
        let head = pkt.head();
        let (l3, v6) = match wire::EthernetFrame::new_checked(head) {
            Ok(eth) => match eth.ethertype() {
                ethertype::IPV4 => (eth.header_len(), false),
                ethertype::IPV6 => (eth.header_len(), true),
                _ => return true,
            },
            // A runt, whole: not IP. A chain whose first buffer does not even hold the Ethernet
            // header: what it is cannot be told.
            Err(_) if !chained => return true,
            Err(_) => return self.mark_uncleared(),
        };
        match dscp_at(head, l3, v6) {
            Some(dscp) if dscp != self.cfg.mark => return true,
            // Too short to hold the IP header's first bytes, whole: not IP enough to carry it.
            None if !chained => return true,
            // Marked; or a chain whose first buffer does not hold the DSCP.
            _ => {}
        }
        match pkt.head_mut() {
            Some(frame) if frame.len() >= l3 + dscp_span(v6) => {
                clear_dscp(frame, l3, v6);
                self.report.caravan.mark_cleared += 1;
                true
            }
            _ => self.mark_uncleared(),
        }
    }

    /// Counts an inbound frame dropped because it wears the caravan mark, or may, and the mark
    /// cannot be cleared; false, for [`inbound_unmark`](Self::inbound_unmark).
    pub(super) fn mark_uncleared(&mut self) -> bool {
        self.report.drops.mark_uncleared += 1;
        false
    }
}

/// Entries of the hints to open caravans (`Pipeline::hot_caravans`): a power of two, a few
/// times the flows one RX burst interleaves.
pub(super) const HOT_CARAVANS: usize = 256;

/// Where a frame's caravan hint is kept, when it is an untagged IPv4 or IPv6 frame of UDP (by
/// its EtherType and protocol byte: most frames of other kinds are told from these two reads):
/// a fold of the bytes that hold its addresses and ports. Only a hint: flows that share a slot
/// take turns in it, and the caravan found is always checked byte for byte. The NIC's RSS hash
/// is not used: under the gateway's symmetric key it is one value for many flows.
pub(super) fn hint_slot(head: &[u8]) -> Option<usize> {
    let word = |at: usize| {
        head.get(at..at + 8)
            .map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
    };
    let ports = |at: usize| {
        head.get(at..at + 4).map_or(0, |b| {
            u64::from(u32::from_ne_bytes(b.try_into().expect("4 bytes")))
        })
    };
    let udp = |at: usize| head.get(at) == Some(&wire::ip_proto::UDP);
    let folded = match head.get(12..14) {
        // Protocol at 23; addresses at 26..34, ports at 34..38 (not the length and checksum
        // behind them).
        Some([0x08, 0x00]) if udp(23) => word(26) ^ ports(34).rotate_left(29),
        // Next header at 20; addresses at 22..54, ports at 54..58.
        Some([0x86, 0xdd]) if udp(20) => {
            word(22)
                ^ word(30).rotate_left(13)
                ^ word(38).rotate_left(29)
                ^ word(46).rotate_left(41)
                ^ ports(54).rotate_left(53)
        }
        _ => return None,
    };
    Some((folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize & (HOT_CARAVANS - 1))
}

/// Sends on what a flow held, counted: its caravan, closed, or its lone datagram as it came.
fn emit<B: PacketBuf>(report: &mut CaravanSummary, open: Open<B>, out: &mut Vec<B>) {
    match open {
        Open::Caravan(b) => {
            report.caravans_built += 1;
            out.push(b.finish());
        }
        // Nothing joined it: it goes as it came.
        Open::Lone(pkt, _) => {
            report.unwrapped_single += 1;
            out.push(pkt);
        }
    }
}

/// Open caravans at once, per worker.
pub(super) const MAX_OPEN_CARAVANS: usize = 1024;

/// What an inbound UDP flow holds: one datagram, kept as it came until a second one joins it (a
/// caravan of one is never built: `docs/caravan.md`, "Single datagrams"), or an open caravan.
pub(super) enum Open<B: PacketBuf> {
    /// A lone datagram and its parse (handed to the caravan builder when a second datagram
    /// joins it).
    Lone(B, Parsed),
    /// A caravan of at least two.
    Caravan(CaravanBuilder<B>),
}

/// Why inbound UDP passes unpacked ([`Pipeline::unpackable`]).
#[derive(Clone, Copy, Debug)]
pub(super) enum Unpackable {
    /// Its family is not in `[caravan] families`.
    Family,
    /// Double-tagged, or behind an 802.1ad tag.
    Vlan,
    /// TTL or hop limit at most `[caravan] pass_ttl`.
    LowTtl,
}

pub(super) fn dscp(frame: &[u8], h: &Headers) -> u8 {
    let l3 = &frame[h.l3_offset()..];
    if h.key.v6 {
        wire::Ipv6Packet::new_unchecked(l3).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(l3).dscp()
    }
}

/// The bytes of an IP header's start that clearing its DSCP rewrites (for IPv4, up to its
/// checksum).
pub(super) fn dscp_span(v6: bool) -> usize {
    if v6 {
        // The version, traffic class and flow label word.
        4
    } else {
        wire::ipv4::field::CHECKSUM.end
    }
}

/// The DSCP of the IP header at `l3` of `frame`, when the frame holds the bytes that carry it.
pub(super) fn dscp_at(frame: &[u8], l3: usize, v6: bool) -> Option<u8> {
    let ip = frame.get(l3..l3 + if v6 { dscp_span(v6) } else { 2 })?;
    Some(if v6 {
        wire::Ipv6Packet::new_unchecked(ip).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(ip).dscp()
    })
}

/// Sets the DSCP of the IP header at `l3` to 0. The IPv4 header checksum is updated for the one
/// word that changed (RFC 1624), never computed afresh: a header that arrived damaged stays
/// damaged, for the receiver to drop.
pub(super) fn clear_dscp(frame: &mut [u8], l3: usize, v6: bool) {
    let ip = &mut frame[l3..l3 + dscp_span(v6)];
    if v6 {
        wire::Ipv6Packet::new_unchecked(ip).set_dscp(0);
        return;
    }
    // Version, IHL and TOS: the header's first 16-bit word, before and after.
    let old = u16::from_be_bytes([ip[0], ip[1]]);
    wire::Ipv4Packet::new_unchecked(&mut *ip).set_dscp(0);
    let new = u16::from_be_bytes([ip[0], ip[1]]);
    let mut ip = wire::Ipv4Packet::new_unchecked(ip);
    ip.set_checksum(pxio::checksum::update(ip.checksum(), old, new));
}
