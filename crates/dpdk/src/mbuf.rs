//! Owned packet buffers: single segments, chains, and shallow clones.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::Mempool;

/// Most segments one packet may have (`RTE_MBUF_MAX_NB_SEGS`).
const MAX_SEGS: usize = u16::MAX as usize;

/// One owned `rte_mbuf` chain: a packet.
///
/// - `Send` (it may move to another worker) but not `Sync` (DPDK mbufs are not thread-safe).
/// - `Drop` frees every segment exactly once, honouring refcounts, so a clone keeps the shared
///   data alive.
/// - Writing is refused while the data buffer is shared with a clone ([`Error::SharedData`]).
#[repr(transparent)]
pub struct Mbuf {
    raw: NonNull<dpdk_sys::rte_mbuf>,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: an Mbuf is the unique owner of its chain's mbuf structs; moving that ownership to
// another thread is what DPDK pipelines do. Shared data buffers are protected by atomic refcounts.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Adopts a raw mbuf.
    ///
    /// # Safety
    /// `raw` must be a valid mbuf chain head that nobody else owns or frees.
    #[inline]
    pub unsafe fn from_raw(raw: NonNull<dpdk_sys::rte_mbuf>) -> Self {
        Self {
            raw,
            _not_sync: PhantomData,
        }
    }

    /// Gives up ownership; the caller must free the chain (or hand it to DPDK).
    #[inline]
    pub fn into_raw(self) -> NonNull<dpdk_sys::rte_mbuf> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// The raw head, for FFI calls that do not take ownership.
    #[inline]
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mbuf {
        self.raw.as_ptr()
    }

    #[inline]
    fn head(&self) -> &dpdk_sys::rte_mbuf {
        // SAFETY: we own a valid mbuf; its struct is not shared (only its data may be).
        unsafe { self.raw.as_ref() }
    }

    #[inline]
    fn last_seg(&self) -> NonNull<dpdk_sys::rte_mbuf> {
        let mut seg = self.raw;
        // SAFETY: every `next` of a valid chain is null or a valid segment we own.
        while let Some(next) = NonNull::new(unsafe { seg.as_ref().next }) {
            seg = next;
        }
        seg
    }

    /// Bytes in the whole packet (all segments).
    #[inline]
    pub fn len(&self) -> usize {
        self.head().pkt_len as usize
    }

    /// Whether the packet has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of segments in the chain.
    #[inline]
    pub fn num_segs(&self) -> usize {
        self.head().nb_segs as usize
    }

    /// The first segment's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        seg_bytes(self.head())
    }

    /// The first segment's bytes, writable when the buffer is not shared with a clone.
    #[inline]
    pub fn data_mut(&mut self) -> Result<&mut [u8]> {
        let seg = self.raw;
        writable(seg)?;
        let m = self.head();
        let len = m.data_len as usize;
        // SAFETY: the buffer is exclusively ours (checked above) and [data_off, data_off+len)
        // lies inside it; &mut self prevents aliasing through this Mbuf.
        Ok(unsafe { std::slice::from_raw_parts_mut(data_ptr(m), len) })
    }

    /// Iterates the chain's segments, in order.
    pub fn segments(&self) -> Segments<'_> {
        Segments {
            next: Some(self.raw),
            _chain: PhantomData,
        }
    }

    /// Copies the whole packet out (for tests and slow paths).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        for seg in self.segments() {
            out.extend_from_slice(seg);
        }
        out
    }

    /// Free bytes in front of the first segment's data.
    #[inline]
    pub fn headroom(&self) -> usize {
        // SAFETY: valid mbuf.
        unsafe { dpdk_sys::px_pktmbuf_headroom(self.raw.as_ptr()) as usize }
    }

    /// Free bytes after the last segment's data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid segment of our chain.
        unsafe { dpdk_sys::px_pktmbuf_tailroom(self.last_seg().as_ptr()) as usize }
    }

    /// Grows the packet by `len` zeroed bytes at the end of the last segment and returns them.
    pub fn append(&mut self, len: usize) -> Result<&mut [u8]> {
        let last = self.last_seg();
        writable(last)?;
        let available = self.tailroom();
        if len > available {
            return Err(Error::NoRoom {
                what: "tailroom",
                available,
                requested: len,
            });
        }
        // SAFETY: len fits the tailroom (so u16); DPDK returns a pointer to `len` bytes inside
        // the exclusively owned last segment's buffer.
        let p = unsafe { dpdk_sys::px_pktmbuf_append(self.raw.as_ptr(), len as u16) };
        // SAFETY: the region is inside our buffer, and &mut self bounds the borrow.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        bytes.fill(0);
        Ok(bytes)
    }

    /// Appends a copy of `bytes`.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<()> {
        self.append(bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }

    /// Grows the packet by `len` zeroed bytes in front of the first segment and returns them.
    pub fn prepend(&mut self, len: usize) -> Result<&mut [u8]> {
        writable(self.raw)?;
        let available = self.headroom();
        if len > available {
            return Err(Error::NoRoom {
                what: "headroom",
                available,
                requested: len,
            });
        }
        // SAFETY: len fits the headroom; the returned pointer addresses `len` bytes inside our
        // exclusively owned first segment.
        let p = unsafe { dpdk_sys::px_pktmbuf_prepend(self.raw.as_ptr(), len as u16) };
        // SAFETY: as above; &mut self bounds the borrow.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        bytes.fill(0);
        Ok(bytes)
    }

    /// Removes `len` bytes from the front of the first segment (no data is written, so this is
    /// allowed on clones).
    pub fn adj(&mut self, len: usize) -> Result<()> {
        let available = self.head().data_len as usize;
        if len > available {
            return Err(Error::NoRoom {
                what: "data",
                available,
                requested: len,
            });
        }
        // SAFETY: len <= first segment's data_len, which DPDK requires.
        let p = unsafe { dpdk_sys::px_pktmbuf_adj(self.raw.as_ptr(), len as u16) };
        debug_assert!(!p.is_null());
        Ok(())
    }

    /// Removes `len` bytes from the end of the last segment.
    pub fn trim(&mut self, len: usize) -> Result<()> {
        // SAFETY: valid segment of our chain.
        let available = unsafe { self.last_seg().as_ref().data_len } as usize;
        if len > available {
            return Err(Error::NoRoom {
                what: "data",
                available,
                requested: len,
            });
        }
        // SAFETY: len <= last segment's data_len, which DPDK requires.
        let ret = unsafe { dpdk_sys::px_pktmbuf_trim(self.raw.as_ptr(), len as u16) };
        debug_assert_eq!(ret, 0);
        Ok(())
    }

    /// Appends `tail`'s chain to this one: zero-copy, the bytes follow this packet's.
    /// On failure `tail` comes back untouched.
    pub fn chain(&mut self, tail: Mbuf) -> std::result::Result<(), (Error, Mbuf)> {
        let segs = self.num_segs() + tail.num_segs();
        if segs > MAX_SEGS {
            return Err((Error::TooManySegments(segs), tail));
        }
        // SAFETY: both chains are valid and owned; on success DPDK links tail's segments into
        // ours, so ownership of tail moves into self (into_raw forgets it).
        let ret = unsafe { dpdk_sys::px_pktmbuf_chain(self.raw.as_ptr(), tail.as_ptr()) };
        if ret != 0 {
            return Err((Error::TooManySegments(segs), tail));
        }
        let _ = tail.into_raw();
        Ok(())
    }

    /// A shallow clone: new mbuf structs from `pool` that share this chain's data buffers by
    /// refcount. Neither side can write the shared bytes until the other is dropped.
    pub fn try_clone(&self, pool: &Mempool) -> Result<Mbuf> {
        // SAFETY: valid chain and live pool; a non-null result is a new chain we own.
        let m = unsafe { dpdk_sys::rte_pktmbuf_clone(self.raw.as_ptr(), pool.as_ptr()) };
        NonNull::new(m)
            // SAFETY: fresh chain owned by nobody else.
            .map(|m| unsafe { Mbuf::from_raw(m) })
            .ok_or_else(|| Error::PoolExhausted(pool.name().to_owned()))
    }

    /// Shortens the packet to `len` bytes, cutting inside a segment and freeing the segments past
    /// the cut. No data is written, so clones may be truncated too.
    pub fn truncate(&mut self, len: usize) -> Result<()> {
        let total = self.len();
        if len > total {
            return Err(Error::NoRoom {
                what: "data",
                available: total,
                requested: len,
            });
        }
        if len == total {
            return Ok(());
        }
        // Find the segment holding byte `len - 1` (the head when len == 0: it keeps 0 bytes).
        let mut seg = self.raw;
        let mut before = 0usize;
        let mut segs = 1u16;
        loop {
            // SAFETY: seg is a valid segment of our chain.
            let m = unsafe { seg.as_ref() };
            let seg_len = m.data_len as usize;
            if before + seg_len >= len || m.next.is_null() {
                break;
            }
            before += seg_len;
            segs += 1;
            // SAFETY: checked non-null above; it is the next segment of our chain.
            seg = unsafe { NonNull::new_unchecked(m.next) };
        }
        // SAFETY: seg and head are valid segments we own; we cut the chain after `seg`, hand the
        // detached tail (a valid chain of its own once its head's counters are fixed) to DPDK to
        // free, and fix the head's counters. No other reference to these structs exists.
        unsafe {
            let m = seg.as_ptr();
            let tail = (*m).next;
            (*m).next = std::ptr::null_mut();
            (*m).data_len = (len - before) as u16;
            if let Some(tail) = NonNull::new(tail) {
                let mut n = 0u16;
                let mut bytes = 0u32;
                let mut t = tail.as_ptr();
                while !t.is_null() {
                    n += 1;
                    bytes += u32::from((*t).data_len);
                    t = (*t).next;
                }
                (*tail.as_ptr()).nb_segs = n;
                (*tail.as_ptr()).pkt_len = bytes;
                dpdk_sys::px_pktmbuf_free(tail.as_ptr());
            }
            let head = self.raw.as_ptr();
            (*head).nb_segs = segs;
            (*head).pkt_len = len as u32;
        }
        Ok(())
    }

    /// A zero-copy view of bytes `[offset, offset + len)`: a new chain of indirect mbufs from
    /// `pool`, each attached (by refcount) to the segment of this packet it covers.
    pub fn share_range(&self, offset: usize, len: usize, pool: &Mempool) -> Result<Mbuf> {
        if offset + len > self.len() || len == 0 {
            return Err(Error::InvalidArgument(format!(
                "range {offset}+{len} outside a {}-byte packet",
                self.len()
            )));
        }
        let mut head: Option<Mbuf> = None;
        let mut skip = offset;
        let mut left = len;
        for seg in self.segment_ptrs() {
            if left == 0 {
                break;
            }
            // SAFETY: seg is a valid segment of our chain, borrowed for this loop.
            let seg_len = unsafe { seg.as_ref().data_len } as usize;
            if skip >= seg_len {
                skip -= seg_len;
                continue;
            }
            let take = (seg_len - skip).min(left);
            let mut piece = pool.alloc()?;
            // SAFETY: piece is a fresh, empty, direct mbuf we own; seg is valid. Attaching makes
            // piece indirect, pointing at seg's buffer and holding a reference on it; DPDK's free
            // of piece later drops that reference.
            unsafe { dpdk_sys::px_pktmbuf_attach(piece.as_ptr(), seg.as_ptr()) };
            piece.adj(skip)?;
            let excess = piece.len() - take;
            piece.trim(excess)?;
            match head.as_mut() {
                None => head = Some(piece),
                Some(h) => h.chain(piece).map_err(|(e, _)| e)?,
            }
            skip = 0;
            left -= take;
        }
        head.ok_or_else(|| Error::InvalidArgument("empty range".into()))
    }

    fn segment_ptrs(&self) -> impl Iterator<Item = NonNull<dpdk_sys::rte_mbuf>> + '_ {
        // SAFETY: each `next` of our valid chain is null or a valid segment.
        std::iter::successors(Some(self.raw), |s| NonNull::new(unsafe { s.as_ref().next }))
    }

    /// The offload flags (`ol_flags`).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.head().ol_flags
    }

    /// Whether the NIC verified the L4 checksum as good on receive.
    #[inline]
    pub fn rx_l4_checksum_good(&self) -> bool {
        let mask = u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        self.head().ol_flags & mask == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD)
    }

    /// Marks the packet as if the NIC had verified its L4 checksum on receive
    /// (`RTE_MBUF_F_RX_L4_CKSUM_GOOD`): for traces and vdevs that stand in for such a NIC.
    pub fn mark_rx_l4_checksum_good(&mut self) {
        // SAFETY: we own the head struct; ol_flags is plain metadata.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags &= !u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        m.ol_flags |= u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD);
    }

    /// Requests TX offloads for this packet: header lengths, the `RTE_MBUF_F_TX_*` flags to set,
    /// and the TSO segment size (0 for none). The port must have been granted the matching
    /// offloads; see [`Port::tx_offloads`](crate::Port::tx_offloads).
    pub fn set_tx_offload(
        &mut self,
        l2_len: u8,
        l3_len: u16,
        l4_len: u8,
        flags: u64,
        tso_segsz: u16,
    ) {
        // SAFETY: we own the head struct; these are plain metadata fields.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags |= flags;
        // SAFETY: writing the bitfield view of the tx_offload union, which is always valid.
        let fields = unsafe { &mut m.__bindgen_anon_3.__bindgen_anon_1 };
        fields.set_l2_len(u64::from(l2_len));
        fields.set_l3_len(u64::from(l3_len));
        fields.set_l4_len(u64::from(l4_len));
        fields.set_tso_segsz(u64::from(tso_segsz));
    }

    /// The packet type (`RTE_PTYPE_*` bits, see [`ptype`](crate::ptype)): what the NIC or the
    /// application says the headers are.
    #[inline]
    pub fn packet_type(&self) -> u32 {
        // SAFETY: every bit pattern of the union is a valid u32.
        unsafe { self.head().__bindgen_anon_1.packet_type }
    }

    /// Sets the packet type (`RTE_PTYPE_*` bits, see [`ptype`](crate::ptype)). Libraries such
    /// as `rte_gro` trust it, together with [`set_header_lens`](Self::set_header_lens).
    #[inline]
    pub fn set_packet_type(&mut self, ptype: u32) {
        // SAFETY: we own the head struct; a plain metadata field.
        unsafe { self.raw.as_mut().__bindgen_anon_1.packet_type = ptype };
    }

    /// The L2, L3 and L4 header lengths recorded in the mbuf.
    #[inline]
    pub fn header_lens(&self) -> (u8, u16, u8) {
        // SAFETY: reading the bitfield view of the tx_offload union, valid for any bits.
        let f = unsafe { &self.head().__bindgen_anon_3.__bindgen_anon_1 };
        (f.l2_len() as u8, f.l3_len() as u16, f.l4_len() as u8)
    }

    /// Records the L2, L3 and L4 header lengths, leaving the offload flags and TSO size alone
    /// (`rte_gro` reads the headers at these offsets).
    #[inline]
    pub fn set_header_lens(&mut self, l2_len: u8, l3_len: u16, l4_len: u8) {
        // SAFETY: we own the head struct; writing the bitfield view of the tx_offload union.
        let f = unsafe { &mut self.raw.as_mut().__bindgen_anon_3.__bindgen_anon_1 };
        f.set_l2_len(u64::from(l2_len));
        f.set_l3_len(u64::from(l3_len));
        f.set_l4_len(u64::from(l4_len));
    }

    /// Whether the first segment's data buffer is exclusively this mbuf's (direct, refcount 1),
    /// so writing its bytes cannot be seen through a clone. Inline (no shim call): `rte_gro`'s
    /// wrapper asks it of every packet.
    #[inline]
    pub fn head_writable(&self) -> bool {
        let attached = dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL;
        if self.head().ol_flags & attached != 0 {
            return false;
        }
        // SAFETY: `refcnt` is a live, aligned u16 of our head mbuf that DPDK updates with atomic
        // operations (possibly from another thread, through a clone); this is the relaxed
        // atomic load `rte_mbuf_refcnt_read` does.
        let refcnt = unsafe {
            std::sync::atomic::AtomicU16::from_ptr(std::ptr::addr_of_mut!(
                (*self.raw.as_ptr()).refcnt
            ))
        };
        refcnt.load(std::sync::atomic::Ordering::Relaxed) == 1
    }

    /// How many owners the first segment's data buffer has (1 when not shared).
    pub fn data_refcnt(&self) -> u16 {
        let m = self.head();
        // SAFETY: for a direct mbuf the buffer's refcount is its own; for an indirect one DPDK
        // stores the owning direct mbuf right before the buffer (rte_mbuf_from_indirect).
        unsafe {
            if dpdk_sys::px_mbuf_is_direct(m) != 0 {
                dpdk_sys::px_mbuf_refcnt_read(m)
            } else {
                let direct = (m.buf_addr as *const u8)
                    .sub(std::mem::size_of::<dpdk_sys::rte_mbuf>() + m.priv_size as usize)
                    .cast::<dpdk_sys::rte_mbuf>();
                dpdk_sys::px_mbuf_refcnt_read(direct)
            }
        }
    }

    /// The RX hash the NIC computed, when it did (`RTE_MBUF_F_RX_RSS_HASH`).
    #[inline]
    pub fn rss_hash(&self) -> Option<u32> {
        let m = self.head();
        if m.ol_flags & u64::from(dpdk_sys::RTE_MBUF_F_RX_RSS_HASH) != 0 {
            // SAFETY: the flag says the `rss` member of the hash union is the valid one.
            Some(unsafe { m.__bindgen_anon_2.hash.rss })
        } else {
            None
        }
    }

    /// The port the packet was received on.
    #[inline]
    pub fn port(&self) -> u16 {
        self.head().port
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the chain; rte_pktmbuf_free walks it and frees each segment once,
        // decrementing shared buffers' refcounts instead of freeing them.
        unsafe { dpdk_sys::px_pktmbuf_free(self.raw.as_ptr()) }
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("segs", &self.num_segs())
            .finish()
    }
}

/// Iterator over a chain's segments, as byte slices.
pub struct Segments<'a> {
    next: Option<NonNull<dpdk_sys::rte_mbuf>>,
    _chain: PhantomData<&'a Mbuf>,
}

impl<'a> Iterator for Segments<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let seg = self.next?;
        // SAFETY: seg belongs to a chain borrowed for 'a; its struct stays valid for 'a.
        let m = unsafe { seg.as_ref() };
        self.next = NonNull::new(m.next);
        Some(seg_bytes(m))
    }
}

#[inline]
fn data_ptr(m: &dpdk_sys::rte_mbuf) -> *mut u8 {
    // SAFETY: buf_addr + data_off stays inside the mbuf's buffer by DPDK's invariant.
    unsafe { (m.buf_addr as *mut u8).add(m.data_off as usize) }
}

#[inline]
fn seg_bytes(m: &dpdk_sys::rte_mbuf) -> &[u8] {
    // SAFETY: [data_off, data_off + data_len) is initialised packet data inside the buffer,
    // readable for as long as the segment is borrowed.
    unsafe { std::slice::from_raw_parts(data_ptr(m), m.data_len as usize) }
}

/// Only a direct segment with refcount 1 owns its buffer exclusively.
#[inline]
fn writable(seg: NonNull<dpdk_sys::rte_mbuf>) -> Result<()> {
    // SAFETY: seg is a valid segment of a chain we own.
    let exclusive = unsafe {
        dpdk_sys::px_mbuf_is_direct(seg.as_ptr()) != 0
            && dpdk_sys::px_mbuf_refcnt_read(seg.as_ptr()) == 1
    };
    if exclusive {
        Ok(())
    } else {
        Err(Error::SharedData)
    }
}
