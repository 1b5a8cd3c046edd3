//! What the gateway does as a router for packets it neither merges nor splits: IP packets above
//! the MTU of the link ahead are fragmented (IPv4 with DF clear), or dropped, counted and
//! answered with "fragmentation needed" or Packet Too Big, rate-limited; the rest passes.

use super::*;

impl<B: PacketBuf> Pipeline<B> {
    /// An inbound IP packet larger than the iMTU, handled as a router in front of the b-network
    /// would, rather than sent into a network that cannot carry it: IPv4 with DF clear is
    /// fragmented to the iMTU (the fragments go the way every fragment goes, after whatever
    /// their flow holds); IPv4 with DF set and IPv6 are dropped, counted, and answered toward the
    /// outside sender with "fragmentation needed" or Packet Too Big carrying the iMTU,
    /// rate-limited as the outbound errors are.
    pub(super) fn inbound_oversize(&mut self, pkt: B, ip: IpLayout, now: u64, out: &mut Vec<B>) {
        let imtu = self.cfg.imtu;
        if !ip.v6 && !ip.dont_frag {
            let mut frags = Vec::new();
            match fragment_ipv4(&pkt, ip.l2_len, imtu, &self.pool, &mut frags) {
                Ok(n) => {
                    drop(pkt);
                    self.report.inbound_oversize.fragmented += 1;
                    self.report.inbound_oversize.fragments_out += n as u64;
                    for frag in frags {
                        let parsed = Parsed::of(frag.head(), frag.len());
                        self.inbound_unmergeable(frag, parsed, now, out);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "oversize inbound IPv4 packet not fragmented");
                    self.report.drops.oversize_inbound += 1;
                }
            }
            return;
        }
        self.report.drops.oversize_inbound += 1;
        let counts = &mut self.report.inbound_oversize;
        if !self.cfg.icmp.enabled {
            counts.icmp_suppressed += 1;
            return;
        }
        match icmp_err::too_big(&pkt, imtu, &self.cfg.icmp) {
            Ok(frame) if self.limiter.allow(ip.src, now) => {
                if ip.v6 {
                    counts.ptb_sent += 1;
                } else {
                    counts.frag_needed_sent += 1;
                }
                self.replies.push(frame);
            }
            Ok(_) => counts.icmp_rate_limited += 1,
            Err(_) => counts.icmp_suppressed += 1,
        }
    }

    /// A packet the gateway does not split: forwarded when it fits the external link, else
    /// handled as a router would: fragmented, or dropped, counted and answered with ICMP.
    pub(super) fn outbound_fit(&mut self, pkt: B, now: u64, out: &mut Vec<B>) {
        let emtu = usize::from(self.cfg.emtu);
        match ip_layout(pkt.head()) {
            Some(ip) if ip.len > emtu => self.outbound_oversize(pkt, ip, now, out),
            Some(_) => out.push(pkt),
            None if pkt.len() > self.max_frame() => {
                self.report.drops.oversize += 1;
                drop(pkt);
            }
            None => out.push(pkt),
        }
    }

    /// An IP packet larger than the eMTU: fragmented (IPv4, DF clear), or dropped and answered
    /// with "fragmentation needed" (IPv4, DF set) or Packet Too Big (IPv6).
    pub(super) fn outbound_oversize(&mut self, pkt: B, ip: IpLayout, now: u64, out: &mut Vec<B>) {
        if !ip.v6 && !ip.dont_frag {
            match fragment_ipv4(&pkt, ip.l2_len, self.cfg.emtu, &self.pool, out) {
                Ok(n) => {
                    self.report.router.fragmented += 1;
                    self.report.router.fragments_out += n as u64;
                }
                Err(e) => {
                    tracing::debug!(error = %e, "oversize IPv4 packet not fragmented");
                    self.report.router.fragment_failed += 1;
                    self.report.drops.oversize += 1;
                }
            }
            return;
        }
        self.report.drops.oversize += 1;
        if !self.cfg.icmp.enabled {
            self.report.router.icmp_suppressed += 1;
            return;
        }
        let mtu = self.cfg.emtu.min(self.pmtu.pmtu(ip.dst, now));
        match icmp_err::too_big(&pkt, mtu, &self.cfg.icmp) {
            Ok(frame) if self.limiter.allow(ip.src, now) => {
                if ip.v6 {
                    self.report.router.ptb_sent += 1;
                } else {
                    self.report.router.frag_needed_sent += 1;
                }
                self.inside_replies.push(frame);
            }
            Ok(_) => self.report.router.icmp_rate_limited += 1,
            Err(_) => self.report.router.icmp_suppressed += 1,
        }
    }

    pub(super) fn max_frame(&self) -> usize {
        usize::from(self.cfg.emtu) + VLAN_ETH_HLEN
    }
}

/// Where an IP packet lies in its frame, and what the oversize path needs of its header.
#[derive(Clone, Copy, Debug)]
pub(super) struct IpLayout {
    pub(super) l2_len: usize,
    pub(super) v6: bool,
    /// IPv4 total length, or 40 plus the IPv6 payload length.
    pub(super) len: usize,
    pub(super) dont_frag: bool,
    pub(super) src: IpAddr,
    pub(super) dst: IpAddr,
}

/// The IP layout of a frame whose IP header lies in `head`; `None` for anything else.
pub(super) fn ip_layout(head: &[u8]) -> Option<IpLayout> {
    let eth = wire::EthernetFrame::new_checked(head).ok()?;
    let l2_len = eth.header_len();
    let l3 = head.get(l2_len..)?;
    match eth.ethertype() {
        wire::ethernet::ethertype::IPV4 => {
            let ip = wire::Ipv4Packet::new_checked(l3).ok()?;
            Some(IpLayout {
                l2_len,
                v6: false,
                len: usize::from(ip.total_len()),
                dont_frag: ip.dont_frag(),
                src: IpAddr::from(ip.src_addr()),
                dst: IpAddr::from(ip.dst_addr()),
            })
        }
        wire::ethernet::ethertype::IPV6 => {
            let ip = wire::Ipv6Packet::new_checked(l3).ok()?;
            Some(IpLayout {
                l2_len,
                v6: true,
                len: wire::ipv6::field::HEADER_LEN + usize::from(ip.payload_len()),
                dont_frag: true,
                src: IpAddr::from(ip.src_addr()),
                dst: IpAddr::from(ip.dst_addr()),
            })
        }
        _ => None,
    }
}
