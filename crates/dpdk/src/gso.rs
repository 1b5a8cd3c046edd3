//! DPDK's generic segmentation offload, `rte_gso`, for TCP/IPv4: cuts a packet longer than a
//! size into packets of at most that size, as a NIC's TSO would.
//!
//! The merge benchmark uses it behind `rte_gro`: DPDK 22.11's GRO merges up to 64 KB and has no
//! size cap, so an application that wants packets bounded by an MTU (PacketExpress's iMTU) must
//! cut GRO's output again, and GSO is DPDK's tool for that.
//!
//! Each output is a header mbuf (a copy of the input's headers, from the *direct* pool) chained
//! to indirect mbufs (from the *indirect* pool) that point into the input's buffers, so no
//! payload is copied. GSO rewrites each output's IPv4 total length and ID and its TCP sequence
//! number, and clears PSH and FIN on all outputs but the last. It neither checks nor updates a
//! checksum: an application leaves them to the NIC (`RTE_MBUF_F_TX_IP_CKSUM`,
//! `RTE_MBUF_F_TX_TCP_CKSUM`), or recomputes them.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::gro::{tcp4_headers_len, MIN_L2_LEN, MIN_L3_LEN, MIN_L4_LEN};
use crate::{tx_flags, Mbuf, Mempool};

/// An `rte_gso` context for TCP/IPv4 with incrementing IP IDs.
///
/// It holds its two pools, so they outlive every segmentation it makes.
pub struct GsoContext {
    ctx: dpdk_sys::rte_gso_ctx,
    direct: Arc<Mempool>,
    _indirect: Arc<Mempool>,
}

// SAFETY: the context is plain data plus pointers to two mempools, which are thread-safe and
// kept alive by the Arcs beside it; `rte_gso_segment` only reads it.
unsafe impl Send for GsoContext {}
// SAFETY: as above: shared use only reads the context, and the pools are MP/MC-safe.
unsafe impl Sync for GsoContext {}

impl GsoContext {
    /// A context that cuts TCP/IPv4 packets into packets of at most `max_len` bytes, Ethernet
    /// header included (an IP MTU of `m` over untagged Ethernet is `m + 14`).
    ///
    /// `direct` gives the header mbufs (each must hold a copy of the headers), `indirect` the
    /// mbufs that point into the input's buffers (their own data room is not used).
    pub fn tcp4(direct: &Arc<Mempool>, indirect: &Arc<Mempool>, max_len: u16) -> Result<Self> {
        if usize::from(max_len) <= MIN_L2_LEN + MIN_L3_LEN + MIN_L4_LEN {
            return Err(Error::InvalidArgument(format!(
                "GSO size {max_len} leaves no room for payload after the shortest headers"
            )));
        }
        Ok(Self {
            ctx: dpdk_sys::rte_gso_ctx {
                direct_pool: direct.as_ptr(),
                indirect_pool: indirect.as_ptr(),
                flag: 0,
                gso_types: dpdk_sys::RTE_ETH_TX_OFFLOAD_TCP_TSO,
                gso_size: max_len,
            },
            direct: direct.clone(),
            _indirect: indirect.clone(),
        })
    }

    /// The largest packet the context leaves, Ethernet header included.
    pub fn max_len(&self) -> u16 {
        self.ctx.gso_size
    }

    /// `rte_gso_segment`: cuts `pkt`, a TCP/IPv4 packet whose header lengths are set
    /// ([`Mbuf::set_header_lens`]), into packets of at most [`max_len`](Self::max_len) bytes
    /// and pushes them onto `out`, in order; `pkt` itself is released (its buffers live on in
    /// the outputs). A packet that is short enough, an IPv4 fragment, or a packet without
    /// payload is pushed as it is. Returns how many packets were pushed.
    ///
    /// An error hands `pkt` back unchanged: header lengths that are not Ethernet/IPv4/TCP-sized
    /// or do not fit the first segment, headers too long for the direct pool's mbufs or for
    /// `max_len`, or an exhausted pool.
    pub fn segment(
        &self,
        mut pkt: Mbuf,
        out: &mut Vec<Mbuf>,
    ) -> std::result::Result<usize, (Error, Mbuf)> {
        if pkt.len() <= usize::from(self.ctx.gso_size) {
            out.push(pkt);
            return Ok(1);
        }
        let hdr = match self.headers(&pkt) {
            Ok(hdr) => hdr,
            Err(e) => return Err((e, pkt)),
        };
        let unit = usize::from(self.ctx.gso_size) - hdr;
        let pieces = (pkt.len() - hdr).div_ceil(unit);
        out.reserve(pieces);
        let spare = out.spare_capacity_mut();
        let flags = pkt.ol_flags();
        // Plain TCP/IPv4 TSO: stale tunnel or outer-header flags would send rte_gso down a
        // tunnel path that trusts the outer header lengths.
        let tunnel = dpdk_sys::RTE_MBUF_F_TX_TUNNEL_MASK
            | dpdk_sys::RTE_MBUF_F_TX_OUTER_IPV4
            | dpdk_sys::RTE_MBUF_F_TX_OUTER_IPV6
            | dpdk_sys::RTE_MBUF_F_TX_UDP_SEG;
        pkt.set_ol_flags((flags & !tunnel) | tx_flags::TCP_SEG | tx_flags::IPV4);
        // SAFETY: `headers` checked what rte_gso trusts: the header lengths are those of
        // Ethernet/IPv4/TCP, the headers lie in the first segment (it reads the IPv4 and TCP
        // headers there and copies `hdr` bytes from it), they fit a fresh direct mbuf (it copies
        // them there unchecked) and leave room for payload within gso_size. `spare` has room for
        // every piece (`pieces` slots, at most what it writes). The context's pools are alive
        // (held by self). On success DPDK wrote `n` new packets we now own; the input's
        // segments are referenced by the indirect mbufs, so releasing the input is correct.
        let n = unsafe {
            dpdk_sys::rte_gso_segment(
                pkt.as_ptr(),
                &self.ctx,
                spare.as_mut_ptr().cast(),
                pieces.min(usize::from(u16::MAX)) as u16,
            )
        };
        match n {
            n if n > 0 => {
                let n = n as usize;
                // SAFETY: DPDK initialised the first `n` spare slots with owned mbufs.
                unsafe { out.set_len(out.len() + n) };
                drop(pkt);
                Ok(n)
            }
            0 => {
                // Not segmented (an IPv4 fragment): DPDK left it as it was.
                pkt.set_ol_flags(flags);
                out.push(pkt);
                Ok(1)
            }
            e => {
                pkt.set_ol_flags(flags);
                let err = if e == -libc::ENOMEM {
                    Error::PoolExhausted(self.direct.name().to_owned())
                } else {
                    Error::InvalidArgument(format!("rte_gso_segment failed: {e}"))
                };
                Err((err, pkt))
            }
        }
    }

    /// The length of `pkt`'s headers, when rte_gso may cut it safely.
    fn headers(&self, pkt: &Mbuf) -> Result<usize> {
        let Some(hdr) = tcp4_headers_len(pkt) else {
            let (l2, l3, l4) = pkt.header_lens();
            return Err(Error::InvalidArgument(format!(
                "GSO needs Ethernet/IPv4/TCP header lengths within the first segment \
                 ({} B), got {l2}/{l3}/{l4}",
                pkt.data().len()
            )));
        };
        if hdr > self.direct.fresh_room() {
            return Err(Error::NoRoom {
                what: "header-mbuf room",
                available: self.direct.fresh_room(),
                requested: hdr,
            });
        }
        if hdr >= usize::from(self.ctx.gso_size) {
            return Err(Error::InvalidArgument(format!(
                "headers of {hdr} B leave no payload within the GSO size {}",
                self.ctx.gso_size
            )));
        }
        Ok(hdr)
    }
}

impl std::fmt::Debug for GsoContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GsoContext")
            .field("max_len", &self.ctx.gso_size)
            .finish()
    }
}
