//! IPv4 fragmentation of outbound packets too large for the external link (RFC 791 §2.3 and
//! §3.2, RFC 1812 §4.2.2.7), as a router on the path would do it for a datagram whose DF bit
//! is clear. This is the router behaviour the gateway keeps for what it cannot split at the
//! transport layer (SIGCOMM'26 §3: the gateway splits TCP; everything else it must still
//! carry or refuse like a router).
//!
//! Zero-copy, like the TCP split: each fragment is a new header buffer chained to a
//! refcounted view of the original's payload bytes, so a chained mbuf fragments without
//! copying. Every fragment keeps the identification; offsets and MF follow RFC 791 (a packet
//! that is itself a fragment is cut further, its offset added and its MF kept on the last
//! piece). The first fragment carries all options; the later ones only the options whose
//! "copied" flag is set, as RFC 791 requires (so their header, and their payload room, may
//! differ). Malformed options are refused rather than guessed at.

use pxio::wire::{self, ipv4};
use pxio::PacketBuf;

/// The "copied" flag of an IPv4 option type (RFC 791 §3.1).
const OPTION_COPIED: u8 = 0x80;
/// End of option list.
const OPTION_EOL: u8 = 0;
/// No operation (one byte, never copied).
const OPTION_NOP: u8 = 1;
/// Largest IP packet.
const MAX_IP_LEN: usize = u16::MAX as usize;

/// Why a packet was not fragmented. The caller drops and counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FragmentError {
    /// Not a well-formed IPv4 packet whose headers lie in the first segment.
    #[error("not a well-formed IPv4 packet")]
    NotIpv4,
    /// An option whose length runs past the header, or is below 2.
    #[error("malformed IPv4 options")]
    BadOptions,
    /// The MTU leaves no room for 8 bytes of payload after the header.
    #[error("MTU {0} leaves no room for a fragment")]
    MtuTooSmall(u16),
    /// The fragment offsets would run past 65535.
    #[error("fragment offset overflow")]
    OffsetOverflow,
    /// No buffer for a fragment's header or view.
    #[error("buffer pool exhausted while fragmenting")]
    PoolExhausted,
}

/// The options a non-first fragment carries: those with the copied flag, padded with
/// end-of-list bytes to a multiple of 4 (RFC 791 §3.1).
pub fn copied_options(options: &[u8]) -> Result<Vec<u8>, FragmentError> {
    let mut copied = Vec::new();
    let mut i = 0;
    while i < options.len() {
        match options[i] {
            OPTION_EOL => break,
            OPTION_NOP => i += 1,
            kind => {
                let len = usize::from(*options.get(i + 1).ok_or(FragmentError::BadOptions)?);
                if len < 2 || i + len > options.len() {
                    return Err(FragmentError::BadOptions);
                }
                if kind & OPTION_COPIED != 0 {
                    copied.extend_from_slice(&options[i..i + len]);
                }
                i += len;
            }
        }
    }
    copied.resize(
        copied.len().div_ceil(ipv4::field::IHL_UNIT) * ipv4::field::IHL_UNIT,
        0,
    );
    Ok(copied)
}

/// Cuts the IPv4 packet in `pkt` (behind an L2 header of `l2_len` bytes) into fragments of at
/// most `mtu` IP bytes, pushed to `out`; returns how many. `pkt` itself is left as it is (the
/// fragments share its payload). On error nothing was pushed.
pub fn fragment_ipv4<B: PacketBuf>(
    pkt: &B,
    l2_len: usize,
    mtu: u16,
    pool: &B::Pool,
    out: &mut Vec<B>,
) -> Result<usize, FragmentError> {
    let head = pkt.head();
    let ip = head
        .get(l2_len..)
        .and_then(|b| wire::Ipv4Packet::new_checked(b).ok())
        .filter(|ip| ip.version() == ipv4::VERSION)
        .ok_or(FragmentError::NotIpv4)?;
    let hl = ip.header_len();
    let total = usize::from(ip.total_len());
    if l2_len + total > pkt.len() {
        return Err(FragmentError::NotIpv4);
    }
    let base = usize::from(ip.frag_offset());
    let more = ip.more_frags();
    let payload = total - hl;
    if base + payload > MAX_IP_LEN {
        return Err(FragmentError::OffsetOverflow);
    }
    let first_hdr = &head[..l2_len + hl];
    let mut rest_hdr = head[..l2_len + ipv4::field::HEADER_LEN].to_vec();
    rest_hdr.extend_from_slice(&copied_options(ip.options())?);
    let rest_hl = rest_hdr.len() - l2_len;
    let room = |hl: usize| usize::from(mtu).saturating_sub(hl) & !7;
    let (first_room, rest_room) = (room(hl), room(rest_hl));
    if first_room == 0 || rest_room == 0 {
        return Err(FragmentError::MtuTooSmall(mtu));
    }
    let start = out.len();
    let mut offset = 0;
    while offset < payload {
        let (hdr, frag_hl, room) = if offset == 0 {
            (first_hdr, hl, first_room)
        } else {
            (&rest_hdr[..], rest_hl, rest_room)
        };
        let len = room.min(payload - offset);
        let last = offset + len == payload;
        let piece = B::alloc_with(pool, hdr)
            .zip(pkt.share_range(l2_len + hl + offset, len, pool))
            .and_then(|(mut h, view)| {
                let bytes = h.head_mut()?;
                // A later fragment's IHL shrinks with its options; every length fits u16
                // because the original's did.
                bytes[l2_len + ipv4::field::VER_IHL] = (ipv4::VERSION
                    << ipv4::field::VERSION_SHIFT)
                    | (frag_hl / ipv4::field::IHL_UNIT) as u8;
                let mut ip = wire::Ipv4Packet::new_unchecked(&mut bytes[l2_len..]);
                ip.set_total_len((frag_hl + len) as u16);
                ip.set_more_frags(!last || more);
                ip.set_frag_offset((base + offset) as u16);
                ip.fill_checksum();
                h.chain(view).ok()?;
                Some(h)
            });
        match piece {
            Some(p) => out.push(p),
            None => {
                out.truncate(start);
                return Err(FragmentError::PoolExhausted);
            }
        }
        offset += len;
    }
    Ok(out.len() - start)
}
