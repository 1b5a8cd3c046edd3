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
}

impl Frame for dpdk::Mbuf {
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        if !self.head_writable() || self.headroom() < n {
            return None;
        }
        dpdk::Mbuf::prepend(self, n).ok()
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
/// IPv6. Returns false when the headers are shared or do not match `hdr` (nothing changed).
pub fn rewrite<B: PacketBuf>(
    pkt: &mut B,
    hdr: &Headers,
    side: Side,
    addr: &[u8],
    port: u16,
) -> bool {
    let (l3, l4) = (hdr.l3_offset(), hdr.l4_offset());
    let alen = if hdr.v6 { 16 } else { 4 };
    if addr.len() != alen {
        return false;
    }
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
    let l4_has_sum = !(hdr.proto == ip_proto::UDP && !hdr.v6 && l4_sum == 0);
    let mut ip_sum = word(bytes, l3 + 10);
    for i in (0..alen).step_by(2) {
        let (old, new) = (
            word(bytes, addr_at + i),
            u16::from_be_bytes([addr[i], addr[i + 1]]),
        );
        l4_sum = checksum::update(l4_sum, old, new);
        if !hdr.v6 {
            ip_sum = checksum::update(ip_sum, old, new);
        }
    }
    bytes[addr_at..addr_at + alen].copy_from_slice(addr);
    l4_sum = checksum::update(l4_sum, word(bytes, port_at), port);
    bytes[port_at..port_at + 2].copy_from_slice(&port.to_be_bytes());
    if !hdr.v6 {
        bytes[l3 + 10..l3 + 12].copy_from_slice(&ip_sum.to_be_bytes());
    }
    if l4_has_sum {
        // UDP sends a computed 0 as 0xffff (RFC 768).
        if hdr.proto == ip_proto::UDP && l4_sum == 0 {
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
