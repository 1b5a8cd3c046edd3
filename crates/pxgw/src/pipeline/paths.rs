//! Path MTU and black holes: what ICMP errors from outside teach (Packet Too Big and
//! "fragmentation needed", believed only when they quote a segment in flight: RFC 5927), the
//! smallest size the gateway ever splits to, the fallbacks when no hint is known, and IPv6
//! black-hole detection (RFC 4821 §7.7, RFC 8899 §4.3).

use crate::conn::Retransmits;

use super::*;

impl<B: PacketBuf> Pipeline<B> {
    /// An ICMP or ICMPv6 error from outside. Returns true when it answers one of the gateway's
    /// own F-PMTUD probes (then it is consumed: the inside host never sent that probe). A Packet
    /// Too Big ("fragmentation needed" for IPv4) quoting a segment of a connection the gateway
    /// knows caps the split size toward the quoted destination; it is still forwarded.
    pub(super) fn inbound_icmp(&mut self, pkt: &B, now: u64) -> bool {
        let Some(err) = quoted_error(pkt.head()) else {
            return false;
        };
        if err.proto == wire::ip_proto::UDP
            && !err.v6
            && self.pmtu.is_own_probe(err.sport, err.dport)
        {
            self.report.router.probe_errors_consumed += 1;
            return true;
        }
        let Some(mtu) = err.too_big else {
            return false;
        };
        let Some(seq) = err.tcp_seq.filter(|_| self.cfg.learn_ptb) else {
            return false;
        };
        // An endpoint believes the error only when it quotes a segment it may have in flight
        // (RFC 5927 §4.1, Linux's tcp_v4_err); so does the gateway, on the inside host's behalf.
        let floor = self.split_floor(err.v6);
        let router = &mut self.report.router;
        match self
            .conns
            .check_quoted(&conn::reverse(&err.flow()), seq, now)
        {
            conn::Quoted::InFlight => {}
            conn::Quoted::OutOfWindow => {
                router.ptb_out_of_window += 1;
                return false;
            }
            conn::Quoted::Unknown => {
                router.ptb_unknown += 1;
                return false;
            }
        }
        // Below the floor the gateway never splits (`split_floor`); IPv6 never below its
        // minimum MTU (RFC 8201 §4). Linux ignores such an MTU for IPv6 too and clamps IPv4 to
        // its own floor (`ip_rt_min_pmtu`): either way the path MTU is not lowered by it.
        if mtu < floor {
            router.ptb_below_floor += 1;
            return false;
        }
        if self.pmtu.cap(err.dst, mtu, now) {
            self.report.router.ptb_learned += 1;
            tracing::info!(dst = %err.dst, mtu, "path MTU learned from an ICMP error");
        }
        false
    }

    /// The smallest IP packet the gateway splits to: the MSS floor's. Whatever the path MTU
    /// hints say (an MSS, a Packet Too Big, F-PMTUD, the black-hole fallback), no outside host
    /// can make the gateway cut a segment into more pieces than this.
    pub(super) fn split_floor(&self, v6: bool) -> u16 {
        self.mss_floor(v6).saturating_add(mss::overhead(v6))
    }

    pub(super) fn fallback_pmtu(&self) -> u16 {
        self.fallback_pmtu_for(self.cfg.fallback)
    }

    pub(super) fn fallback_pmtu_for(&self, policy: PmtuPolicy) -> u16 {
        match policy {
            PmtuPolicy::Conservative => self.cfg.conservative,
            _ => self.cfg.emtu,
        }
    }
}

/// An IPv6 segment about to be split to `pmtu`, of a connection whose split segments `retx`
/// records: the inside host sending the same segment again and again means the split segments
/// vanish on the path and no Packet Too Big comes back (an ICMPv6 black hole, RFC 4821 §7.7/RFC
/// 8899 §4.3). The destination then falls back to `pmtu.blackhole_mtu`, logged once. Returns
/// the size to split to. A free function, so the caller can hand in the connection it already
/// looked up.
#[allow(clippy::too_many_arguments)]
pub(super) fn watch_blackhole(
    retx: &mut Retransmits,
    paths: &mut PathMtu,
    report: &mut Report,
    cfg: &Settings,
    frame: &[u8],
    h: &Headers,
    dst: IpAddr,
    pmtu: u16,
    now: u64,
) -> u16 {
    let (limit, window) = (cfg.blackhole_retransmits, cfg.blackhole_window_ns);
    if limit == 0 {
        return pmtu;
    }
    let Ok(tcp) = wire::TcpPacket::new_checked(&frame[h.l4_offset()..h.hdr_len()]) else {
        return pmtu;
    };
    if !retx.on_split(
        tcp.seq_number(),
        u32::from(h.payload_len),
        now,
        limit,
        window,
    ) {
        return pmtu;
    }
    let fallback = cfg.blackhole_mtu;
    if paths.cap(dst, fallback, now) {
        report.router.blackhole_fallbacks += 1;
        tracing::warn!(
            %dst,
            from = pmtu,
            to = fallback,
            "IPv6 black hole: split segments retransmitted without a Packet Too Big; splitting to the fallback size"
        );
    }
    fallback
}

/// An ICMP error from outside and the packet it quotes (which an inside host, or the gateway
/// on its behalf, sent).
#[derive(Clone, Copy, Debug)]
pub(super) struct QuotedError {
    v6: bool,
    /// The MTU of a Packet Too Big or "fragmentation needed", when it is one.
    too_big: Option<u16>,
    proto: u8,
    src: IpAddr,
    dst: IpAddr,
    sport: u16,
    dport: u16,
    /// The quoted TCP segment's sequence number (the 8 bytes RFC 792 guarantees hold it).
    tcp_seq: Option<u32>,
}

impl QuotedError {
    /// The quoted packet's flow, as its sender wrote it.
    fn flow(&self) -> wire::FlowKey {
        let addr = |a: IpAddr| match a {
            IpAddr::V4(v) => {
                let mut b = [0; 16];
                b[..4].copy_from_slice(&v.octets());
                b
            }
            IpAddr::V6(v) => v.octets(),
        };
        wire::FlowKey {
            src: addr(self.src),
            dst: addr(self.dst),
            sport: self.sport,
            dport: self.dport,
            proto: self.proto,
            v6: self.v6,
        }
    }
}

/// Reads an ICMPv4/ICMPv6 error frame and the header of the packet it quotes (IP header plus
/// the first 8 bytes, which hold the ports, as RFC 792 guarantees). `None` for anything else.
pub(super) fn quoted_error(head: &[u8]) -> Option<QuotedError> {
    use wire::icmp::{v4, v6};
    let eth = wire::EthernetFrame::new_checked(head).ok()?;
    let l3 = head.get(eth.header_len()..)?;
    let (v6, icmp) = match eth.ethertype() {
        wire::ethernet::ethertype::IPV4 => {
            let ip = wire::Ipv4Packet::new_checked(l3).ok()?;
            if ip.protocol() != wire::ip_proto::ICMP || ip.is_fragment() {
                return None;
            }
            let icmp = wire::IcmpPacket::new_checked(l3.get(ip.header_len()..)?).ok()?;
            if !v4::is_error(icmp.msg_type()) {
                return None;
            }
            (false, icmp)
        }
        wire::ethernet::ethertype::IPV6 => {
            let ip = wire::Ipv6Packet::new_checked(l3).ok()?;
            if ip.next_header() != wire::ip_proto::ICMPV6 {
                return None;
            }
            let icmp =
                wire::IcmpPacket::new_checked(l3.get(wire::ipv6::field::HEADER_LEN..)?).ok()?;
            if !v6::is_error(icmp.msg_type()) {
                return None;
            }
            (true, icmp)
        }
        _ => return None,
    };
    let quoted_ip = icmp.quoted();
    let (proto, src, dst, l4) = if v6 {
        let ip = wire::Ipv6Packet::new_checked(quoted_ip).ok()?;
        (
            ip.next_header(),
            IpAddr::from(ip.src_addr()),
            IpAddr::from(ip.dst_addr()),
            wire::ipv6::field::HEADER_LEN,
        )
    } else {
        let ip = wire::Ipv4Packet::new_checked(quoted_ip).ok()?;
        if ip.frag_offset() != 0 {
            return None;
        }
        (
            ip.protocol(),
            IpAddr::from(ip.src_addr()),
            IpAddr::from(ip.dst_addr()),
            ip.header_len(),
        )
    };
    let ports = quoted_ip.get(l4..l4 + 4)?;
    let tcp_seq = quoted_ip
        .get(l4 + 4..l4 + 8)
        .filter(|_| proto == wire::ip_proto::TCP)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    let too_big = match (v6, icmp.msg_type(), icmp.code()) {
        (false, v4::DEST_UNREACHABLE, v4::CODE_FRAG_NEEDED) => Some(icmp.next_hop_mtu()),
        (true, v6::PACKET_TOO_BIG, _) => Some(u16::try_from(icmp.mtu_v6()).unwrap_or(u16::MAX)),
        _ => None,
    }
    .filter(|&m| m > 0);
    Some(QuotedError {
        v6,
        too_big,
        proto,
        src,
        dst,
        sport: u16::from_be_bytes([ports[0], ports[1]]),
        dport: u16::from_be_bytes([ports[2], ports[3]]),
        tcp_seq,
    })
}
