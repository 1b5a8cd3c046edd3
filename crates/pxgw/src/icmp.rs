//! The ICMP errors the gateway sends toward the inside when an outbound packet is too large for
//! the external link and cannot be split or fragmented: "fragmentation needed" with the
//! next-hop MTU for IPv4 with DF set (RFC 792, RFC 1191), Packet Too Big for IPv6 (RFC 4443
//! §3.2). This is what a router at the same place would send, so the inside host's own PMTUD
//! learns the path (SIGCOMM'26 §5.1). Frames are built with `pxio::wire::icmp_frame`.
//!
//! - **Quote:** IPv4 errors quote as much of the packet as keeps the ICMP datagram within
//!   576 bytes (RFC 1812 §4.3.2.3, what Linux does too), so at least the IP header and 8
//!   bytes; IPv6 errors as much as keeps the message within the minimum MTU, 1280 bytes (RFC
//!   4443 §2.4(c)).
//! - **Never sent** for an ICMP error, a non-initial fragment, a source that is not a unicast
//!   host, or (IPv4) a broadcast or multicast destination (RFC 1812 §4.3.2.7, RFC 4443
//!   §2.4(e): Packet Too Big may answer multicast).
//! - **Addresses:** the gateway has no address of its own in transparent mode. The error
//!   comes from `icmp.source_v4`/`source_v6` when set, else from the destination of the packet
//!   it answers; hosts validate the quoted packet, not the source. Its MAC addresses are the
//!   original's, swapped (as if the router the host sent to answered), VLAN tag kept.
//! - **Rate limit:** per destination (the host answered), a token bucket like Linux's
//!   `icmp_ratelimit` (one per second, burst 6), and a global one like `icmp_msgs_per_sec` and
//!   `icmp_msgs_burst` (1000/s, burst 50). The per-destination table is bounded, and set
//!   associative: a new destination costs the same whatever it holds.

use std::net::IpAddr;

use pxio::wire::{self, ethernet, icmp, ip_proto, ipv6, EthernetFrame, EthernetRepr};
use pxio::PacketBuf;

use crate::config::Icmp as IcmpConfig;

/// Most bytes of an ICMPv4 error datagram (RFC 1812 §4.3.2.3).
const V4_ERROR_MAX: usize = 576;
/// Most bytes of an ICMPv6 error packet: the IPv6 minimum MTU (RFC 4443 §2.4(c)).
const V6_ERROR_MAX: usize = 1280;
/// TTL and hop limit of the errors (Linux's default).
const TTL: u8 = 64;
const NS_PER_MS: u64 = 1_000_000;
const NS_PER_S: u64 = 1_000_000_000;

/// What the gateway did as a router (declared with the other counters in [`crate::stats`]).
pub use crate::stats::RouterSummary;

/// The per-destination and global limits: [`fpmtud::ratelimit::RateLimiter`], the token buckets
/// F-PMTUD's responder uses, in a bounded set-associative table (a new destination reads one
/// set, never the whole table). A destination whose set is full of buckets still in use gets no
/// error until one refills.
#[derive(Debug)]
pub struct RateLimiter {
    limits: fpmtud::ratelimit::RateLimiter<IpAddr>,
}

impl RateLimiter {
    /// Limits from the `[icmp]` configuration, both buckets full at `now`.
    pub fn new(cfg: &IcmpConfig, now: u64) -> Self {
        use fpmtud::ratelimit::{Limit, WhenFull};
        let per_dest = (cfg.ratelimit_ms > 0).then(|| {
            Limit::every(
                cfg.ratelimit_ms.saturating_mul(NS_PER_MS),
                cfg.ratelimit_burst,
            )
        });
        let global = Limit::every(
            NS_PER_S / u64::from(cfg.msgs_per_sec.max(1)),
            cfg.msgs_burst,
        );
        Self {
            limits: fpmtud::ratelimit::RateLimiter::new(
                per_dest,
                global,
                cfg.max_destinations,
                WhenFull::Refuse,
                now,
            ),
        }
    }

    /// Whether an error to `dest` may go at `now`; takes the tokens when it may.
    pub fn allow(&mut self, dest: IpAddr, now: u64) -> bool {
        self.limits.check(dest, now) == fpmtud::ratelimit::Verdict::Allowed
    }

    /// Destinations whose rate state is held.
    pub fn tracked(&self) -> usize {
        self.limits.len()
    }
}

/// Why no error was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoError {
    /// The rules forbid an error for this packet.
    Forbidden,
    /// The packet is not IP, or its headers are not readable.
    NotIp,
}

/// The error for an outbound packet too large for a link of `mtu` bytes: "fragmentation
/// needed" (IPv4) or Packet Too Big (IPv6), as a frame toward the packet's sender.
pub fn too_big<B: PacketBuf>(pkt: &B, mtu: u16, cfg: &IcmpConfig) -> Result<Vec<u8>, NoError> {
    let head = pkt.head();
    let eth = EthernetFrame::new_checked(head).map_err(|_| NoError::NotIp)?;
    let l2 = eth.header_len();
    // A QinQ frame cannot be answered with one tag: leave it.
    let macs = EthernetRepr::parse(&eth).ok_or(NoError::Forbidden)?;
    let reply_l2 = EthernetRepr {
        dst: macs.src,
        src: macs.dst,
        ..macs
    };
    let l3 = head.get(l2..).ok_or(NoError::NotIp)?;
    match macs.ethertype {
        ethernet::ethertype::IPV4 => {
            let ip = wire::Ipv4Packet::new_checked(l3).map_err(|_| NoError::NotIp)?;
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let hl = ip.header_len();
            let is_icmp_error = ip.protocol() == ip_proto::ICMP
                && l3.get(hl).is_some_and(|&t| icmp::v4::is_error(t));
            if ip.frag_offset() != 0
                || is_icmp_error
                || !unicast_v4(src)
                || !unicast_v4(dst)
                || macs.dst[0] & 1 != 0
            {
                return Err(NoError::Forbidden);
            }
            let quote = quote(pkt, l2, usize::from(ip.total_len()), V4_ERROR_MAX - 28);
            let from = cfg.source_v4.map_or(dst, |a| a.octets());
            let reply = wire::IpRepr::V4(wire::Ipv4Repr {
                ttl: TTL,
                ..wire::Ipv4Repr::new(from, src)
            });
            wire::icmp_frame(reply_l2, reply, wire::IcmpRepr::frag_needed(mtu), &quote)
                .map_err(|_| NoError::NotIp)
        }
        ethernet::ethertype::IPV6 => {
            let ip = wire::Ipv6Packet::new_checked(l3).map_err(|_| NoError::NotIp)?;
            let (src, dst) = (ip.src_addr(), ip.dst_addr());
            let is_icmp_error = ip.next_header() == ip_proto::ICMPV6
                && l3
                    .get(ipv6::field::HEADER_LEN)
                    .is_some_and(|&t| icmp::v6::is_error(t));
            if is_icmp_error || src == [0; 16] || src[0] == 0xff {
                return Err(NoError::Forbidden);
            }
            let ip_len = ipv6::field::HEADER_LEN + usize::from(ip.payload_len());
            let quote = quote(pkt, l2, ip_len, V6_ERROR_MAX - 48);
            // A multicast destination cannot be a source: answer from the configured address
            // only, else not at all.
            let from = match (cfg.source_v6, dst[0] == 0xff) {
                (Some(a), _) => a.octets(),
                (None, false) => dst,
                (None, true) => return Err(NoError::Forbidden),
            };
            let reply = wire::IpRepr::V6(wire::Ipv6Repr {
                hop_limit: TTL,
                ..wire::Ipv6Repr::new(from, src)
            });
            wire::icmp_frame(
                reply_l2,
                reply,
                wire::IcmpRepr::packet_too_big(u32::from(mtu)),
                &quote,
            )
            .map_err(|_| NoError::NotIp)
        }
        _ => Err(NoError::NotIp),
    }
}

/// The first `min(ip_len, max)` bytes of the IP packet behind `l2` bytes, across segments.
fn quote<B: PacketBuf>(pkt: &B, l2: usize, ip_len: usize, max: usize) -> Vec<u8> {
    let want = ip_len.min(max);
    let mut out = Vec::with_capacity(want);
    let mut pos = 0;
    pkt.for_each_segment(|s| {
        let from = l2.saturating_sub(pos).min(s.len());
        pos += s.len();
        let take = (want - out.len()).min(s.len() - from);
        out.extend_from_slice(&s[from..from + take]);
    });
    out
}

/// Whether `a` is an address a host may send from and be answered at (not 0/8, loopback,
/// multicast, class E or broadcast).
fn unicast_v4(a: [u8; 4]) -> bool {
    !matches!(a[0], 0 | 127 | 224..=255)
}
