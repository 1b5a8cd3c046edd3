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
        let pkt = match self.caravans.get_mut(&KeyWords(h.key)) {
            Some((Open::Caravan(builder), _)) => match builder.push_parsed(pkt, parsed) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 1;
                    return;
                }
                // A datagram that does not fit, or differs where a caravan keeps one IP header
                // (TTL, ECN, DF), starts the flow's next caravan; one that cannot travel in any
                // passes. Either way after the held caravan, so the flow keeps its order.
                Err((CaravanError::Full | CaravanError::Mismatch, pkt)) => {
                    self.close_caravan(&h.key, out);
                    pkt
                }
                Err((_, pkt)) => {
                    self.close_caravan(&h.key, out);
                    return out.push(pkt);
                }
            },
            Some((Open::Lone(first, first_parsed), _)) => {
                match caravan::can_pair_parsed(first, first_parsed, &pkt, parsed, &ccfg) {
                    Ok(()) => return self.pair(pkt, h, parsed, &ccfg, out),
                    // Nothing joins the held datagram: it leaves as it came, first.
                    Err(_) => {
                        self.close_caravan(&h.key, out);
                        pkt
                    }
                }
            }
            None => pkt,
        };
        if self.caravans.len() >= MAX_OPEN_CARAVANS {
            return out.push(pkt);
        }
        // Held as it came until a second datagram joins it; one that could never open a caravan
        // passes at once.
        match caravan::packable_parsed(&pkt, parsed, &ccfg) {
            Ok(()) => {
                self.caravans
                    .insert(KeyWords(h.key), (Open::Lone(pkt, *parsed), now));
            }
            Err(_) => out.push(pkt),
        }
    }

    /// A second datagram for the flow's held one, which [`caravan::can_pair_parsed`] said it
    /// joins: the two open a caravan, which keeps the held one's start time. Both bring their
    /// parses along.
    pub(super) fn pair(
        &mut self,
        second: B,
        h: &Headers,
        parsed: &Parsed,
        ccfg: &CaravanConfig,
        out: &mut Vec<B>,
    ) {
        let (first, first_parsed, since) = match self.caravans.remove(&KeyWords(h.key)) {
            Some((Open::Lone(first, first_parsed), since)) => (first, first_parsed, since),
            // Callers pair only with a lone datagram. Should an open caravan be found instead,
            // it leaves whole, first, rather than being dropped, and the datagram follows it.
            Some(open) => {
                self.caravans.insert(KeyWords(h.key), open);
                self.close_caravan(&h.key, out);
                return out.push(second);
            }
            None => return out.push(second),
        };
        match CaravanBuilder::start_parsed(first, &first_parsed, *ccfg, &self.pool) {
            Ok(mut b) => match b.push_parsed(second, parsed) {
                Ok(()) => {
                    self.report.caravan.datagrams_packed += 2;
                    self.caravans
                        .insert(KeyWords(h.key), (Open::Caravan(b), since));
                }
                // can_pair checked everything push does; should it still refuse, the caravan of
                // one leaves (a valid caravan) and the second passes behind it.
                Err((_, second)) => {
                    self.report.caravan.datagrams_packed += 1;
                    self.report.caravan.caravans_built += 1;
                    out.push(b.finish());
                    out.push(second);
                }
            },
            // No buffer for the caravan's header: both leave as they came, in order (nothing
            // is lost for want of a header buffer).
            Err((_, first)) => {
                self.report.caravan.unwrapped_single += 2;
                out.push(first);
                out.push(second);
            }
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

    pub(super) fn close_caravan(&mut self, key: &FlowKey, out: &mut Vec<B>) {
        match self.caravans.remove(&KeyWords(*key)) {
            Some((Open::Caravan(b), _)) => {
                self.report.caravan.caravans_built += 1;
                out.push(b.finish());
            }
            // Nothing joined it: it goes as it came.
            Some((Open::Lone(pkt, _), _)) => {
                self.report.caravan.unwrapped_single += 1;
                out.push(pkt);
            }
            None => {}
        }
    }

    /// Closes the caravans opened at or before `opened_by` (all of them with `None`), oldest
    /// first.
    pub(super) fn close_caravans_opened_by(&mut self, opened_by: Option<u64>, out: &mut Vec<B>) {
        self.expired.clear();
        self.expired.extend(
            self.caravans
                .iter()
                .filter(|(_, (_, t))| opened_by.is_none_or(|by| *t <= by))
                .map(|(k, (_, t))| (*t, k.0)),
        );
        // Oldest first (ties by flow key), so they leave in the order they were opened and a
        // replay of the same capture gives the same output, not the order of a randomly
        // seeded hash map.
        self.expired
            .sort_unstable_by_key(|&(t, k)| (t, k.v6, k.src, k.dst, k.sport, k.dport, k.proto));
        for i in 0..self.expired.len() {
            let key = self.expired[i].1;
            self.close_caravan(&key, out);
        }
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
