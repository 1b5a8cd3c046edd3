//! DPDK's generic receive offload, `rte_gro`, in heavyweight mode: the baseline that
//! PacketExpress's merge engine is measured against (SIGCOMM'26 §7.1).
//!
//! A [`GroContext`] owns a reassembly table. [`GroContext::reassemble`] moves the TCP/IPv4
//! segments it can merge (or hold for a later merge) out of a [`Burst`] into the table, and
//! leaves the rest in the burst. [`GroContext::timeout_flush`] moves merged packets, oldest
//! first, back out into a burst. DPDK 22.11 merges TCP/IPv4 only (it has no TCP/IPv6 GRO), it
//! has no cap on merged size other than IPv4's 64 KB, and it finds a packet's flow by a linear
//! scan of the table.
//!
//! What `rte_gro` needs on each mbuf: `packet_type` (see [`crate::ptype::ETHER_IPV4_TCP`]) and
//! the header lengths ([`Mbuf::set_header_lens`]). It merges only pure-ACK segments with a
//! payload, from the same 4-tuple, ACK number and MAC pair, whose TCP options are identical
//! (so TCP time stamps must match) and whose sequence numbers are contiguous. It does not
//! verify or update the TCP checksum; on flush it rewrites the IPv4 total length (and ID) of
//! merged packets.

use std::cell::Cell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::eal::EalInner;
use crate::error::{Error, Result};
use crate::{Burst, Eal, Mbuf};

/// The only GRO type DPDK 22.11 has for plain TCP.
const GRO_TYPES: u64 = dpdk_sys::RTE_GRO_TCP_IPV4 as u64;

/// Shortest Ethernet header `rte_gro` and `rte_gso` read (MAC addresses and EtherType).
pub(crate) const MIN_L2_LEN: usize = 14;
/// Shortest IPv4 header.
pub(crate) const MIN_L3_LEN: usize = 20;
/// Shortest TCP header.
pub(crate) const MIN_L4_LEN: usize = 20;
/// Longest TCP header (data offset 15).
pub(crate) const MAX_L4_LEN: usize = 60;

/// Segments flushed per `rte_gro_timeout_flush` call when the context is dropped.
const DROP_FLUSH_BURST: usize = 64;

/// An `rte_gro` heavyweight-mode context for TCP/IPv4: a reassembly table that keeps segments
/// across bursts until they are flushed.
///
/// - `Send` (the table and the mbufs in it may move to another worker) but not `Sync`
///   (`rte_gro` is not thread-safe).
/// - Dropping it flushes every packet still held, frees them, and destroys the table.
pub struct GroContext {
    ctx: NonNull<c_void>,
    max_flows: u16,
    max_items_per_flow: u16,
    /// The table lives in DPDK memory: keep the EAL up until it is destroyed.
    _eal: Arc<EalInner>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the context exclusively owns its table and the mbufs in it; moving that ownership to
// another thread is what a pipeline does. No method can be called from two threads at once
// (`&mut self`, and the type is not Sync).
unsafe impl Send for GroContext {}

impl GroContext {
    /// Creates a TCP/IPv4 reassembly table.
    ///
    /// DPDK sizes both its flow array and its item array at `max_flows * max_items_per_flow`
    /// entries (capped at 1 Mi), so that product is the number of distinct merged packets it can
    /// hold at once; a segment that finds no free entry is handed back by
    /// [`reassemble`](Self::reassemble).
    pub fn new(eal: &Eal, max_flows: u16, max_items_per_flow: u16) -> Result<Self> {
        let err = || Error::GroContext {
            max_flows,
            max_items_per_flow,
        };
        if max_flows == 0 || max_items_per_flow == 0 {
            return Err(err());
        }
        let param = dpdk_sys::rte_gro_param {
            gro_types: GRO_TYPES,
            max_flow_num: max_flows,
            max_item_per_flow: max_items_per_flow,
            // SAFETY: reads the calling thread's socket id.
            socket_id: unsafe { dpdk_sys::rte_socket_id() } as u16,
        };
        // SAFETY: the EAL is initialised (we hold it); param is valid for the call and DPDK
        // copies what it keeps.
        let ctx = unsafe { dpdk_sys::rte_gro_ctx_create(&param) };
        let ctx = NonNull::new(ctx).ok_or_else(err)?;
        Ok(Self {
            ctx,
            max_flows,
            max_items_per_flow,
            _eal: eal.inner.clone(),
            _not_sync: PhantomData,
        })
    }

    /// The flows the table was sized for.
    pub fn max_flows(&self) -> u16 {
        self.max_flows
    }

    /// The items per flow the table was sized for.
    pub fn max_items_per_flow(&self) -> u16 {
        self.max_items_per_flow
    }

    /// `rte_gro_reassemble`: offers every packet of `burst` to the table. The packets the table
    /// takes (merged into a held packet, or held as a new one) leave the burst; the others (not
    /// TCP/IPv4 per `packet_type`, flags other than a bare ACK, no payload, table full) stay in
    /// it, in their original order. Returns how many the table took.
    ///
    /// A packet whose header lengths do not fit its first segment, or whose first data buffer is
    /// shared with a clone (`rte_gro` writes the IPv4 header of a merged packet), is never handed
    /// to DPDK as TCP: it stays in the burst, its metadata unchanged.
    pub fn reassemble<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        const {
            assert!(
                N <= u16::MAX as usize,
                "rte_gro takes at most 65535 packets"
            )
        };
        let len = burst.len();
        if len == 0 {
            return 0;
        }
        if burst.as_slice().iter().all(safe_for_gro) {
            // SAFETY: we own the context and the first `len` slots hold owned mbufs that are
            // safe for rte_gro to parse (checked above). rte_gro keeps some of them and
            // compacts the ones it does not keep, in order, to the front; it returns their
            // count, which keep_front adopts while forgetting the ones DPDK now owns.
            let kept = unsafe {
                let left =
                    dpdk_sys::rte_gro_reassemble(burst.as_raw(), len as u16, self.ctx.as_ptr());
                burst.keep_front(usize::from(left));
                usize::from(left)
            };
            return len - kept;
        }
        self.reassemble_guarded(burst)
    }

    /// The slow path of [`reassemble`](Self::reassemble): hides the packets that are unsafe for
    /// `rte_gro` behind packet type 0 (which it hands back untouched) and restores their type
    /// afterwards.
    #[cold]
    fn reassemble_guarded<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        let len = burst.len();
        let mut hidden: [(*mut dpdk_sys::rte_mbuf, u32); N] = [(std::ptr::null_mut(), 0); N];
        let mut n_hidden = 0;
        for m in burst.as_mut_slice() {
            if !safe_for_gro(m) {
                hidden[n_hidden] = (m.as_ptr(), m.packet_type());
                n_hidden += 1;
                m.set_packet_type(0);
            }
        }
        // SAFETY: as in `reassemble`; every packet rte_gro may parse passed `safe_for_gro`,
        // and the others have packet type 0, which rte_gro returns without reading them.
        let left = unsafe {
            let left = dpdk_sys::rte_gro_reassemble(burst.as_raw(), len as u16, self.ctx.as_ptr());
            burst.keep_front(usize::from(left));
            usize::from(left)
        };
        for m in burst.as_mut_slice() {
            if let Some(&(_, ptype)) = hidden[..n_hidden].iter().find(|(p, _)| *p == m.as_ptr()) {
                m.set_packet_type(ptype);
            }
        }
        len - left
    }

    /// `rte_gro_timeout_flush`: moves the held packets that entered the table at least
    /// `timeout_cycles` TSC cycles ago (see [`rdtsc`](crate::rdtsc), [`Eal::tsc_hz`]) into
    /// `out`'s free slots, merged packets with their IPv4 length updated. Returns how many it
    /// moved; it stops when `out` is full. A timeout of 0 flushes everything.
    ///
    /// DPDK's header calls the timeout "nanoseconds", but it compares it with `rte_rdtsc()`:
    /// it is in cycles.
    pub fn timeout_flush<const N: usize>(
        &mut self,
        timeout_cycles: u64,
        out: &mut Burst<N>,
    ) -> usize {
        // DPDK computes `rte_rdtsc() - timeout_cycles` unchecked: a timeout longer than the
        // uptime would wrap around and flush everything. Nothing can be that old.
        if timeout_cycles > crate::rdtsc() {
            return 0;
        }
        let (ptr, spare) = out.spare_raw();
        let spare = spare.min(usize::from(u16::MAX)) as u16;
        if spare == 0 {
            return 0;
        }
        // SAFETY: ptr points at `spare` writable slots; DPDK writes `n` held packets there and
        // gives up ownership of them, and add_len adopts exactly those.
        unsafe {
            let n = dpdk_sys::rte_gro_timeout_flush(
                self.ctx.as_ptr(),
                timeout_cycles,
                GRO_TYPES,
                ptr,
                spare,
            );
            out.add_len(usize::from(n));
            usize::from(n)
        }
    }

    /// Packets held in the table (each a merged packet or a lone segment waiting for a
    /// neighbour): `rte_gro_get_pkt_count`.
    pub fn item_count(&self) -> usize {
        // SAFETY: we own the live context; this reads a counter.
        unsafe { dpdk_sys::rte_gro_get_pkt_count(self.ctx.as_ptr()) as usize }
    }
}

impl Drop for GroContext {
    fn drop(&mut self) {
        let mut out = Burst::<DROP_FLUSH_BURST>::new();
        while self.item_count() > 0 {
            let n = self.timeout_flush(0, &mut out);
            out.clear();
            if n == 0 {
                tracing::warn!(
                    held = self.item_count(),
                    "rte_gro flush returned nothing with packets held; leaking them"
                );
                break;
            }
        }
        // SAFETY: the table is ours and holds no packet we still need (all flushed and freed);
        // nothing uses the pointer after this.
        unsafe { dpdk_sys::rte_gro_ctx_destroy(self.ctx.as_ptr()) };
    }
}

impl std::fmt::Debug for GroContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroContext")
            .field("max_flows", &self.max_flows)
            .field("max_items_per_flow", &self.max_items_per_flow)
            .field("items", &self.item_count())
            .finish()
    }
}

/// Whether `rte_gro` may parse `m` as Ethernet/IPv4/TCP without reading past its first segment
/// and without writing into data shared with a clone: it trusts the header lengths blindly.
#[inline]
fn safe_for_gro(m: &Mbuf) -> bool {
    tcp4_headers_len(m).is_some() && m.head_writable()
}

/// The length of `m`'s headers when the header lengths set on it ([`Mbuf::header_lens`]) are
/// those of Ethernet, IPv4 and TCP and the headers lie in its first segment: what `rte_gro` and
/// `rte_gso` trust without checking, so what they may read.
#[inline]
pub(crate) fn tcp4_headers_len(m: &Mbuf) -> Option<usize> {
    let (l2, l3, l4) = m.header_lens();
    let (l2, l3, l4) = (usize::from(l2), usize::from(l3), usize::from(l4));
    let hdr = l2 + l3 + l4;
    (l2 >= MIN_L2_LEN
        && l3 >= MIN_L3_LEN
        && (MIN_L4_LEN..=MAX_L4_LEN).contains(&l4)
        && m.data().len() >= hdr)
        .then_some(hdr)
}
