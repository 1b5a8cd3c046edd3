//! MSS rewriting in TCP handshakes (SIGCOMM'26 §3.5 and §5; HotNets'25 §4.1).
//!
//! - A SYN or SYN-ACK from **outside** tells the gateway the peer's MSS: that is the flow's path
//!   MTU hint. Its MSS is then raised to the internal MTU's, so the inside host sends large
//!   segments (the gateway splits them on the way out).
//! - A SYN or SYN-ACK from **inside** has its MSS lowered to what the external MTU carries, so
//!   the outside peer sends segments the Internet path can take (the gateway merges them on the
//!   way in).
//!
//! A segment without an MSS option is left as it is: adding an option would mean growing the
//! header. TCP then assumes 536 B (RFC 9293 §3.7.1), and so does the PMTU hint.

use pxio::wire::{self, tcp_flags, Headers};

/// TCP's default MSS when the option is absent (RFC 9293 §3.7.1).
pub const DEFAULT_MSS: u16 = 536;
/// IPv4 and TCP headers without options.
const V4_OVERHEAD: u16 = 40;
/// IPv6 and TCP headers without options.
const V6_OVERHEAD: u16 = 60;

/// IP plus TCP header bytes an MSS excludes.
pub fn overhead(v6: bool) -> u16 {
    if v6 {
        V6_OVERHEAD
    } else {
        V4_OVERHEAD
    }
}

/// What the rewrite saw and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// The MSS option's value before the rewrite, if there was a well-formed one.
    pub mss: Option<u16>,
    /// The value written, if it changed.
    pub rewritten: Option<u16>,
}

/// Whether `frame` (classified as `hdr`) is a SYN or SYN-ACK.
pub fn is_syn(frame: &[u8], hdr: &Headers) -> bool {
    let tcp = &frame[hdr.l4_offset()..hdr.hdr_len()];
    wire::TcpPacket::new_checked(tcp).is_ok_and(|t| t.flags() & tcp_flags::SYN != 0)
}

/// The MSS option of the TCP segment in `frame` (classified as `hdr`), when it has a
/// well-formed, non-zero one.
pub fn read(frame: &[u8], hdr: &Headers) -> Option<u16> {
    let tcp = frame.get(hdr.l4_offset()..hdr.hdr_len())?;
    wire::TcpPacket::new_checked(tcp)
        .ok()?
        .mss()
        .filter(|&m| m > 0)
}

/// Reads the MSS of a SYN in `frame` and, if `target` is given, rewrites it to `target` when
/// `raise` (inbound: raise or lower to exactly target) or to `min(mss, target)` otherwise
/// (outbound clamp). The TCP checksum is patched incrementally.
pub fn rewrite(frame: &mut [u8], hdr: &Headers, target: Option<u16>, raise: bool) -> Handshake {
    let tcp_bytes = &mut frame[hdr.l4_offset()..hdr.hdr_len()];
    let Ok(mut tcp) = wire::TcpPacket::new_checked(tcp_bytes) else {
        return Handshake {
            mss: None,
            rewritten: None,
        };
    };
    let mss = tcp.mss().filter(|&m| m > 0);
    let rewritten = match (mss, target) {
        (Some(old), Some(t)) => {
            let new = if raise { t } else { old.min(t) };
            (new != old && tcp.set_mss_fix_checksum(new)).then_some(new)
        }
        _ => None,
    };
    Handshake { mss, rewritten }
}

/// The path MTU a peer's MSS implies, capped at the external MTU.
pub fn pmtu_from_mss(mss: Option<u16>, v6: bool, emtu: u16) -> u16 {
    mss.unwrap_or(DEFAULT_MSS)
        .saturating_add(overhead(v6))
        .min(emtu)
}
