//! Three network functions, each in a plain version that handles every 1500 B packet and a
//! version ported to pxio that runs the same logic once per merged packet (SIGCOMM'26 §7.3,
//! Figure 14: a UPF, a NAT and an L4 load balancer, each ported in fewer than 50 changed lines).
//!
//! - [`upf`]: a 5G UPF data path as dUPF (APNet'23) designs it: PDRs matched on the UE address
//!   (downlink) or the TEID and UE address (uplink), FARs, per-session QERs with a token-bucket
//!   maximum bit rate, GTP-U encapsulation and decapsulation.
//! - [`nat`]: a stateful source NAT (NAPT, endpoint-independent mapping): per-flow state, port
//!   allocation, address and port rewriting with incremental checksum updates.
//! - [`lb`]: an L4 load balancer: Maglev consistent hashing over a backend pool, with
//!   connection affinity.
//!
//! The NF logic is written once, against [`pxio::PacketBuf`] and the parsed
//! [`pxio::wire::Headers`]; the examples (`examples/*.rs`) are the two drivers of each, and
//! [`harness`] is what they share: an EAL, ring ports, a traffic source and a checking sink.

pub mod harness;
pub mod lb;
pub mod nat;
pub mod traffic;
pub mod upf;

use pxio::checksum;
use pxio::wire::{ip_proto, Headers};
use pxio::PacketBuf;

/// What an NF decided for a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verdict {
    /// Send it on (possibly rewritten).
    Forward,
    /// Drop it; the NF counted why.
    Drop,
}

/// A packet buffer an NF can push headers onto (GTP-U encapsulation).
pub trait Frame: PacketBuf {
    /// `n` new bytes in front of the packet, writable; `None` when there is no headroom or the
    /// first segment is shared (the caller then chains a new header buffer instead).
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]>;

    /// Whether the NIC will fill, on transmit, the IPv4 header checksum and the L4 checksum
    /// (pxio asks it to when the port granted checksum offload): the fields then hold zero and
    /// the pseudo-header seed, not checksums, and a rewrite must keep them so.
    fn tx_checksums_by_nic(&self) -> (bool, bool) {
        (false, false)
    }
}

impl Frame for dpdk::Mbuf {
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        if !self.head_writable() || self.headroom() < n {
            return None;
        }
        dpdk::Mbuf::prepend(self, n).ok()
    }

    fn tx_checksums_by_nic(&self) -> (bool, bool) {
        use dpdk::tx_flags;
        let ol = self.ol_flags();
        // The L4 request is a 2-bit field; UDP_CKSUM is its mask.
        (ol & tx_flags::IP_CKSUM != 0, ol & tx_flags::UDP_CKSUM != 0)
    }
}

impl Frame for pxio::HeapBuf {
    fn prepend(&mut self, _n: usize) -> Option<&mut [u8]> {
        None
    }
}

/// Puts `header` in front of `pkt`: in its headroom when it has some, else in a new buffer from
/// `pool` chained in front. `None` (the packet dropped) when the pool is empty.
pub fn push_header<B: Frame>(mut pkt: B, header: &[u8], pool: &B::Pool) -> Option<B> {
    if let Some(room) = pkt.prepend(header.len()) {
        room.copy_from_slice(header);
        return Some(pkt);
    }
    let mut head = B::alloc_with(pool, header)?;
    head.chain(pkt).ok()?;
    Some(head)
}

/// Where an address sits in a frame: the source or the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Source address and port.
    Src,
    /// Destination address and port.
    Dst,
}

/// Rewrites the source or destination address and port of a TCP or UDP packet whose headers
/// `hdr` describes, updating the IPv4 header checksum and the L4 checksum incrementally
/// (RFC 1624), so the packet's payload is never read. `addr` holds 4 bytes for IPv4, 16 for
/// IPv6. When the NIC will fill the checksums ([`Frame::tx_checksums_by_nic`]), the L4 field is
/// the pseudo-header seed: it follows the address (not the port, which the seed does not
/// cover), and a zeroed IPv4 checksum stays zero. Returns false when the headers are shared or
/// do not match `hdr` (nothing changed).
pub fn rewrite<B: Frame>(pkt: &mut B, hdr: &Headers, side: Side, addr: &[u8], port: u16) -> bool {
    let (l3, l4) = (hdr.l3_offset(), hdr.l4_offset());
    let alen = if hdr.v6 { 16 } else { 4 };
    if addr.len() != alen {
        return false;
    }
    let (ip_by_nic, l4_by_nic) = pkt.tx_checksums_by_nic();
    let Some(bytes) = pkt.head_mut() else {
        return false;
    };
    if bytes.len() < hdr.hdr_len() {
        return false;
    }
    let addr_at = l3
        + match (hdr.v6, side) {
            (false, Side::Src) => 12,
            (false, Side::Dst) => 16,
            (true, Side::Src) => 8,
            (true, Side::Dst) => 24,
        };
    let port_at = l4 + if side == Side::Src { 0 } else { 2 };
    let csum_at = l4 + if hdr.proto == ip_proto::TCP { 16 } else { 6 };
    let word = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    let mut l4_sum = word(bytes, csum_at);
    // An IPv4 UDP checksum of 0 means "none": it stays 0.
    let l4_has_sum = l4_by_nic || !(hdr.proto == ip_proto::UDP && !hdr.v6 && l4_sum == 0);
    let mut ip_sum = word(bytes, l3 + 10);
    for i in (0..alen).step_by(2) {
        let (old, new) = (
            word(bytes, addr_at + i),
            u16::from_be_bytes([addr[i], addr[i + 1]]),
        );
        l4_sum = if l4_by_nic {
            // The seed is the plain (uncomplemented) pseudo-header sum.
            checksum::Sum(u32::from(l4_sum))
                .add_u16(!old)
                .add_u16(new)
                .fold()
        } else {
            checksum::update(l4_sum, old, new)
        };
        if !hdr.v6 && !ip_by_nic {
            ip_sum = checksum::update(ip_sum, old, new);
        }
    }
    bytes[addr_at..addr_at + alen].copy_from_slice(addr);
    if !l4_by_nic {
        l4_sum = checksum::update(l4_sum, word(bytes, port_at), port);
    }
    bytes[port_at..port_at + 2].copy_from_slice(&port.to_be_bytes());
    if !hdr.v6 && !ip_by_nic {
        bytes[l3 + 10..l3 + 12].copy_from_slice(&ip_sum.to_be_bytes());
    }
    if l4_has_sum {
        // UDP sends a computed 0 as 0xffff (RFC 768).
        if hdr.proto == ip_proto::UDP && l4_sum == 0 && !l4_by_nic {
            l4_sum = 0xffff;
        }
        bytes[csum_at..csum_at + 2].copy_from_slice(&l4_sum.to_be_bytes());
    }
    true
}

/// The 16-byte address field of a [`pxio::wire::FlowKey`] for an IPv4 or IPv6 address.
pub fn addr16(addr: &[u8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a[..addr.len().min(16)].copy_from_slice(&addr[..addr.len().min(16)]);
    a
}

/// FNV-1a over `bytes` with `seed`: a deterministic hash, the same in every process and run
/// (Maglev's table and a flow's backend must not depend on a per-process seed).
pub fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::{self, Flow};
    use pxio::checksum::{pseudo_header_v4, pseudo_header_v6};
    use pxio::wire::{classify, Class};
    use pxio::TxOffload;

    /// The pseudo-header seed a NIC expects for `frame` (DPDK's TSO/checksum contract).
    fn seed(frame: &[u8], h: &Headers) -> u16 {
        let l3 = &frame[h.l3_offset()..];
        let l4_len = u32::from(h.ip_len - h.l3_len);
        if h.v6 {
            let (s, d) = (
                l3[8..24].try_into().unwrap(),
                l3[24..40].try_into().unwrap(),
            );
            pseudo_header_v6(s, d, h.proto, l4_len).fold()
        } else {
            let (s, d) = (
                l3[12..16].try_into().unwrap(),
                l3[16..20].try_into().unwrap(),
            );
            pseudo_header_v4(s, d, h.proto, l4_len as u16).fold()
        }
    }

    #[test]
    fn rewrite_keeps_nic_seeds_when_the_nic_fills_checksums() {
        let pool = dpdk::testing::pool(64, 2048 + 128);
        for (v6, addr) in [(false, vec![203, 0, 113, 9]), (true, vec![0x20; 16])] {
            let f = &traffic::flows(2, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 80)
                [usize::from(v6)];
            assert_eq!(f.v6, v6);
            let frame = Flow::segment(f, 1, 0x10, &[7; 100]);
            let Class::Tcp(h) = classify(&frame, frame.len()) else {
                panic!()
            };
            let mut m = pool.alloc().unwrap();
            m.extend_from_slice(&frame).unwrap();
            // As pxio prepares a merged packet for checksum offload: seed in, IPv4 sum zero.
            let s = seed(&frame, &h);
            let b = m.data_mut().unwrap();
            b[h.l4_offset() + 16..h.l4_offset() + 18].copy_from_slice(&s.to_be_bytes());
            if !v6 {
                b[24..26].copy_from_slice(&[0, 0]);
            }
            m.request_tx_offload(TxOffload {
                l2_len: 14,
                l3_len: h.l3_len,
                l4_len: h.l4_len as u8,
                ipv4: !v6,
                ip_checksum: !v6,
                tcp_checksum: true,
                ..TxOffload::default()
            });
            assert_eq!(m.tx_checksums_by_nic(), (!v6, true));
            assert!(rewrite(&mut m, &h, Side::Src, &addr, 4242));
            let out = m.to_vec();
            let at = h.l4_offset() + 16;
            assert_eq!(
                u16::from_be_bytes([out[at], out[at + 1]]),
                seed(&out, &h),
                "v6 {v6}: the seed follows the address"
            );
            if !v6 {
                assert_eq!(&out[24..26], &[0, 0], "the NIC fills the IPv4 checksum");
            }
            assert_eq!(
                &out[h.l4_offset()..h.l4_offset() + 2],
                &4242u16.to_be_bytes()
            );
        }
        dpdk::testing::assert_no_leaks(&pool);
    }
}
