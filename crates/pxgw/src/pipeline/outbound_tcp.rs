//! Outbound TCP (inside → outside): connection tracking, the MSS clamped on SYNs, and segments
//! above the path MTU split to it (TSO where the outside port grants it). A coalesced packet
//! (GRO on a kernel-backed port) is such a segment too: split, never fragmented or answered
//! with ICMP.
//!
//! A segment of an established connection costs one lookup: the connection found refreshes,
//! records what the inside host sent, and gives the path MTU hint and the black-hole record.

use pxio::split::split_tcp_parsed;

use super::paths::watch_blackhole;
use super::*;
use super::{inbound_tcp, NEVER};

impl<B: PacketBuf> Pipeline<B> {
    /// An outbound TCP packet (`parsed`, its one parse; `h`, its headers).
    pub(super) fn outbound_tcp(
        &mut self,
        pkt: B,
        parsed: &Parsed,
        h: &Headers,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let key = conn::reverse(&h.key);
        let seg = conn::Segment::parse(pkt.head(), h);
        let floor = self.split_floor(h.key.v6);
        let default_hint = self.default_hint();
        // By reference: the segment is read where `parse` wrote it.
        if let Some(seg) = seg.as_ref().filter(|s| !s.syn) {
            let dst = dst_addr(&h.key);
            // Disjoint fields: the connection found stays borrowed while the path MTU state
            // and the counters are read and written.
            // The connection's slot, remembered as inbound segments remember it.
            let slot = inbound_tcp::recent_slot(&key);
            let at = self.recall(slot, &key).map(|r| r.at);
            if let Some((found, c)) = self.conns.on_inside_mut(at, &key, seg, now) {
                if at != Some(found) {
                    // No acknowledgement or period of an inbound segment: the next inbound
                    // segment records its own.
                    self.recent[slot] = inbound_tcp::Recent::new(key, None, NEVER, found);
                }
                let hint = if c.pmtu > 0 { c.pmtu } else { default_hint };
                let mut pmtu = hint.min(self.pmtu.pmtu(dst, now)).max(floor);
                if h.key.v6 && h.ip_len > pmtu && pmtu > self.cfg.blackhole_mtu {
                    pmtu = watch_blackhole(
                        &mut c.retx,
                        &mut self.pmtu,
                        &mut self.report,
                        &self.cfg,
                        pkt.head(),
                        h,
                        dst,
                        pmtu,
                        now,
                    );
                }
                return self.leave(pkt, parsed, h, pmtu, out);
            }
            // The inside host's segments may complete a half-open connection.
            self.conns.on_segment(&key, seg, false, now);
        }
        self.outbound_tcp_unknown(pkt, parsed, h, seg, now, out)
    }

    /// [`outbound_tcp`](Self::outbound_tcp) for a SYN, a SYN-ACK, or a segment of a connection
    /// that is not established here (half-open, learned one way, or unknown).
    fn outbound_tcp_unknown(
        &mut self,
        mut pkt: B,
        parsed: &Parsed,
        h: &Headers,
        seg: Option<conn::Segment>,
        now: u64,
        out: &mut Vec<B>,
    ) {
        let key = conn::reverse(&h.key);
        if let Some(seg) = seg.filter(|s| s.syn) {
            self.pmtu
                .on_outbound_syn(pkt.head(), h, now, &mut self.replies);
            self.report.mss.handshakes += 1;
            // The handshake first: a SYN-ACK that starts a new incarnation takes the hint of the
            // SYN it answers, not the old connection's.
            self.conns.on_handshake(key, &seg, false, None, now);
            let pmtu = self.conns.pmtu_hint(&key, now).unwrap_or(self.cfg.emtu);
            let target = self
                .cfg
                .mss_rewrite
                .then(|| pmtu.saturating_sub(mss::overhead(h.key.v6)));
            if let Some(frame) = pkt.head_mut() {
                let hs = mss::rewrite(frame, h, target, false);
                self.report.mss.rewritten += u64::from(hs.rewritten.is_some());
                self.report.mss.without_mss += u64::from(hs.mss.is_none());
            }
        }
        // A half-open connection's hint counts too (data may follow a SYN-ACK at once, as with
        // TCP Fast Open); it only ever concerns that connection's packets.
        let hint = self
            .conns
            .pmtu_hint(&key, now)
            .unwrap_or_else(|| self.default_hint());
        // A path MTU F-PMTUD discovered caps the hint (the cache answers the eMTU for every
        // other destination, without touching its table).
        let dst = dst_addr(&h.key);
        let mut pmtu = hint
            .min(self.pmtu.pmtu(dst, now))
            .max(self.split_floor(h.key.v6));
        if h.key.v6 && h.ip_len > pmtu && pmtu > self.cfg.blackhole_mtu {
            // Also for a connection this instance splits without knowing it (behind ECMP it
            // may see only the inside host's segments).
            if let Some(retx) = self.conns.retransmits_mut(&key, now) {
                pmtu = watch_blackhole(
                    retx,
                    &mut self.pmtu,
                    &mut self.report,
                    &self.cfg,
                    pkt.head(),
                    h,
                    dst,
                    pmtu,
                    now,
                );
            }
        }
        self.leave(pkt, parsed, h, pmtu, out)
    }

    /// The path MTU of a connection with no hint of its own: the fallback policy's.
    fn default_hint(&self) -> u16 {
        self.fallback_pmtu_for(match self.cfg.policy {
            PmtuPolicy::Mss => self.cfg.fallback,
            p => p,
        })
    }

    /// A segment that fits `pmtu` leaves as it is. One that does not is split from the parse
    /// it came with: the MSS rewrite keeps every length and offset, so `parsed` still
    /// describes it.
    fn leave(&mut self, pkt: B, parsed: &Parsed, h: &Headers, pmtu: u16, out: &mut Vec<B>) {
        if h.ip_len <= pmtu {
            return out.push(pkt);
        }
        if !inbound_tcp::received_checksums_ok(&pkt, h, self.cfg.offloads) {
            self.report.drops.split_failed += 1;
            return;
        }
        self.report.coalesced.outbound += u64::from(h.ip_len > self.cfg.imtu);
        match split_tcp_parsed(pkt, parsed, pmtu, self.cfg.offloads, &self.pool, out) {
            Ok(n) if n > 1 => {
                self.report.split.packets += 1;
                self.report.split.segments += n as u64;
            }
            Ok(_) => {}
            Err((e, pkt)) => {
                tracing::debug!(error = %e, "outbound segment not split");
                self.report.drops.split_failed += 1;
                drop(pkt);
            }
        }
    }
}

/// The destination address of a flow key.
fn dst_addr(key: &FlowKey) -> IpAddr {
    if key.v6 {
        IpAddr::from(key.dst)
    } else {
        IpAddr::from([key.dst[0], key.dst[1], key.dst[2], key.dst[3]])
    }
}
