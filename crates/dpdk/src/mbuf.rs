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
///
/// A packet moves to another worker thread:
///
/// ```no_run
/// fn hand_over(packet: dpdk::Mbuf) -> usize {
///     let packet = packet;
///     std::thread::scope(|s| s.spawn(move || packet.len()).join().unwrap())
/// }
/// ```
///
/// but two threads cannot share one: the same code with a borrow (which needs `Mbuf: Sync`) does
/// not compile.
///
/// ```compile_fail,E0277
/// fn hand_over(packet: dpdk::Mbuf) -> usize {
///     let packet = &packet;
///     std::thread::scope(|s| s.spawn(move || packet.len()).join().unwrap())
/// }
/// ```
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
        // What `rte_pktmbuf_headroom` returns, without the call.
        self.head().data_off as usize
    }

    /// Free bytes after the last segment's data.
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid segment of our chain.
        tailroom(unsafe { self.last_seg().as_ref() })
    }

    /// Grows the packet by `len` zeroed bytes at the end of the last segment and returns them.
    pub fn append(&mut self, len: usize) -> Result<&mut [u8]> {
        let last = self.last_seg();
        writable(last)?;
        // SAFETY: valid segment of our chain.
        let available = tailroom(unsafe { last.as_ref() });
        if len > available {
            return Err(Error::NoRoom {
                what: "tailroom",
                available,
                requested: len,
            });
        }
        // What `rte_pktmbuf_append` does, without walking the chain a second time.
        // SAFETY: `last` and the head are segments of our chain (possibly the same one, so each
        // is borrowed only for its own statement); `len` fits the last segment's tailroom, so
        // the grown region lies inside its exclusively owned buffer (checked writable above),
        // and &mut self bounds the borrow of the bytes.
        let bytes = unsafe {
            let p = data_ptr(last.as_ref()).add(last.as_ref().data_len as usize);
            (*last.as_ptr()).data_len += len as u16;
            (*self.raw.as_ptr()).pkt_len += len as u32;
            std::slice::from_raw_parts_mut(p, len)
        };
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
        let p = self.grow_front(len)?;
        // SAFETY: `grow_front` gave `len` bytes inside our exclusively owned first segment;
        // they are zeroed before the slice exists, and &mut self bounds the borrow.
        unsafe {
            std::ptr::write_bytes(p, 0, len);
            Ok(std::slice::from_raw_parts_mut(p, len))
        }
    }

    /// Grows the packet by a copy of `bytes` in front of the first segment, in its headroom
    /// (`rte_pktmbuf_prepend` and a copy): a header written where a stripped one was, without a
    /// buffer of its own. Fails, and leaves the packet unchanged, when the first segment's
    /// buffer is shared or its headroom is too small.
    pub fn prepend_slice(&mut self, bytes: &[u8]) -> Result<()> {
        let p = self.grow_front(bytes.len())?;
        // SAFETY: `grow_front` gave `bytes.len()` writable bytes inside our exclusively owned
        // first segment; `ptr::copy` allows for `bytes` overlapping the buffer, which safe code
        // cannot arrange anyway.
        unsafe { std::ptr::copy(bytes.as_ptr(), p, bytes.len()) };
        Ok(())
    }

    /// Moves the first segment's data start `len` bytes back into its headroom (what
    /// `rte_pktmbuf_prepend` does, without the call: a split does it once per piece) and
    /// returns where the new bytes start. They hold whatever the buffer held: the caller writes
    /// them before anything reads them. Fails, leaving the packet unchanged, when the buffer is
    /// shared or the headroom is too small.
    fn grow_front(&mut self, len: usize) -> Result<*mut u8> {
        writable(self.raw)?;
        let available = self.headroom();
        if len > available {
            return Err(Error::NoRoom {
                what: "headroom",
                available,
                requested: len,
            });
        }
        // SAFETY: we own the head struct, and its buffer exclusively (checked writable above);
        // len <= data_off, so the grown data starts inside the buffer, and data_len + len <=
        // data_off + data_len <= buf_len, so no counter overflows.
        unsafe {
            let m = self.raw.as_ptr();
            (*m).data_off -= len as u16;
            (*m).data_len += len as u16;
            (*m).pkt_len += len as u32;
            Ok(data_ptr(&*m))
        }
    }

    /// Forgets what this mbuf says about its packet, as `rte_pktmbuf_reset` does for a fresh
    /// one, keeping the data: offload and RX flags (checksum verdicts, RSS hash present, VLAN
    /// stripped, dynamic flags), the TX offload lengths, the packet type and the VLAN tags.
    /// For a received buffer that now heads a packet of its own (a split's piece): it must not
    /// carry the verdicts or requests of the packet it came in.
    pub fn reset_metadata(&mut self) {
        // SAFETY: we own the head struct; these are plain metadata fields. Whether the buffer
        // is attached (indirect or external) is kept: DPDK's free depends on it, as
        // `rte_pktmbuf_reset` keeps RTE_MBUF_F_EXTERNAL.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags &= dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL;
        m.vlan_tci = 0;
        m.vlan_tci_outer = 0;
        m.__bindgen_anon_1.packet_type = 0;
        m.__bindgen_anon_3.tx_offload = 0;
    }

    /// Each segment's bytes, in order, with the headroom [`prepend_slice`](Self::prepend_slice)
    /// could use in front of it were it a packet's first segment: its headroom when its buffer
    /// is exclusively this chain's (direct, refcount 1), else 0. Lets a caller decide, before
    /// cutting the chain, which of its pieces can take a header in place.
    pub fn segments_with_headroom(&self) -> impl Iterator<Item = (&[u8], usize)> + '_ {
        self.segment_ptrs().map(|seg| {
            // SAFETY: seg is a valid segment of our chain, borrowed as long as self is.
            let m = unsafe { seg.as_ref() };
            let room = if exclusive(seg) {
                usize::from(m.data_off)
            } else {
                0
            };
            (seg_bytes(m), room)
        })
    }

    /// Removes `len` bytes from the front of the first segment (no data is written, so this is
    /// allowed on clones).
    #[inline(always)]
    pub fn adj(&mut self, len: usize) -> Result<()> {
        let available = self.head().data_len as usize;
        if len > available {
            return Err(Error::NoRoom {
                what: "data",
                available,
                requested: len,
            });
        }
        // What `rte_pktmbuf_adj` does, without the call.
        // SAFETY: we own the head struct; len <= its data_len, so the data stays inside the
        // buffer and the lengths cannot underflow.
        let m = unsafe { self.raw.as_mut() };
        m.data_len -= len as u16;
        m.data_off += len as u16;
        m.pkt_len -= len as u32;
        Ok(())
    }

    /// Removes `len` bytes from the end of the last segment.
    pub fn trim(&mut self, len: usize) -> Result<()> {
        let last = self.last_seg();
        // SAFETY: valid segment of our chain.
        let available = unsafe { last.as_ref().data_len } as usize;
        if len > available {
            return Err(Error::NoRoom {
                what: "data",
                available,
                requested: len,
            });
        }
        // What `rte_pktmbuf_trim` does, without walking the chain a second time.
        // SAFETY: `last` and the head are segments we own (possibly the same one, so each is
        // written through its raw pointer in its own statement); len <= the last segment's
        // data_len <= pkt_len, so nothing underflows.
        unsafe {
            (*last.as_ptr()).data_len -= len as u16;
            (*self.raw.as_ptr()).pkt_len -= len as u32;
        }
        Ok(())
    }

    /// Appends `tail`'s chain to this one: zero-copy, the bytes follow this packet's.
    /// On failure `tail` comes back untouched. Walks this chain to its last segment; to grow a
    /// packet one segment at a time, use an [`MbufChain`].
    pub fn chain(&mut self, tail: Mbuf) -> std::result::Result<(), (Error, Mbuf)> {
        let last = self.last_seg();
        self.link_after(last, tail)
    }

    /// Links `tail` after `last`, which must be this chain's last segment (`rte_pktmbuf_chain`
    /// without its walk).
    #[inline(always)]
    fn link_after(
        &mut self,
        last: NonNull<dpdk_sys::rte_mbuf>,
        tail: Mbuf,
    ) -> std::result::Result<(), (Error, Mbuf)> {
        let segs = self.num_segs() + tail.num_segs();
        if segs > MAX_SEGS {
            return Err((Error::TooManySegments(segs), tail));
        }
        let tail = tail.into_raw();
        // SAFETY: `last` is the last segment of our chain (callers' contract; both are owned by
        // us) and `tail` a valid chain we own: linking it moves its ownership into self (its
        // Mbuf was forgotten by into_raw). The head, `last` and `tail` may alias (head ==
        // last), so each is accessed through the raw pointer one statement at a time. Like
        // DPDK, pkt_len is only meaningful in the head.
        unsafe {
            (*last.as_ptr()).next = tail.as_ptr();
            let t = tail.as_ptr();
            let head = self.raw.as_ptr();
            (*head).nb_segs = segs as u16;
            (*head).pkt_len += (*t).pkt_len;
            (*t).pkt_len = u32::from((*t).data_len);
        }
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

    /// Cuts the chain at byte `len` when that is a segment boundary: this packet keeps the
    /// first `len` bytes, the rest comes back as a chain of its own. Nothing is copied, shared
    /// or allocated (the segments move). `None`, and this packet unchanged, when `len` falls
    /// inside a segment or is not strictly between 0 and the packet's length.
    pub fn detach_at(&mut self, len: usize) -> Option<Mbuf> {
        if len == 0 || len >= self.len() {
            return None;
        }
        let (seg, end, segs) = self.segment_ending_at_or_after(len)?;
        if end != len {
            return None;
        }
        // SAFETY: seg is the `segs`-th segment of our chain and ends at byte `len`.
        unsafe { self.unlink_after(seg, segs, len) }
    }

    /// Cuts the packet at byte `at`: this packet keeps the first `at` bytes and the rest comes
    /// back as a packet of its own, zero-copy. The segments past the one holding byte `at` move
    /// to the rest as they are; only that one segment, when `at` falls inside it, is shared: one
    /// indirect mbuf from `pool` views its bytes from `at` on. So a cut costs at most one mbuf
    /// and one reference however long the chain, where a view of the whole rest
    /// ([`share_range`](Self::share_range)) costs one per segment. On failure (`at` not strictly
    /// inside the packet, `pool` empty) this packet is unchanged.
    pub fn split_off(&mut self, at: usize, pool: &Mempool) -> Result<Mbuf> {
        let total = self.len();
        let short =
            || Error::InvalidArgument(format!("a cut at {at} outside a {total}-byte packet"));
        if at == 0 || at >= total {
            return Err(short());
        }
        let (seg, end, segs) = self.segment_ending_at_or_after(at).ok_or_else(short)?;
        if end == at {
            // A boundary: the segments after `seg` move, nothing is allocated.
            // SAFETY: seg is the `segs`-th segment of our chain and ends at byte `at`.
            return unsafe { self.unlink_after(seg, segs, at) }.ok_or_else(short);
        }
        let view = pool.alloc()?;
        // SAFETY: seg is a valid segment of our chain.
        let seg_len = usize::from(unsafe { seg.as_ref().data_len });
        let skip = at - (end - seg_len);
        let all = self.head().nb_segs;
        // SAFETY: view is a fresh, empty, direct mbuf we own; seg a valid segment of our chain
        // holding bytes `skip..seg_len` past `at`. Attaching makes view indirect, pointing at
        // seg's buffer with a reference on it (DPDK's free of view drops it); moving its start
        // by `skip` and giving it the `seg_len - skip` bytes after stays inside seg's data. The
        // segments after seg move to view (seg's link is cut, so each has one owner), and seg
        // keeps its first `skip` bytes. Counters are set in both heads (`seg` may be this
        // packet's head: written through raw pointers, one statement at a time).
        unsafe {
            let v = view.as_ptr();
            dpdk_sys::px_pktmbuf_attach(v, seg.as_ptr());
            (*v).data_off += skip as u16;
            (*v).data_len = (seg_len - skip) as u16;
            (*v).next = (*seg.as_ptr()).next;
            (*v).nb_segs = all - segs + 1;
            (*v).pkt_len = (total - at) as u32;
            (*seg.as_ptr()).next = std::ptr::null_mut();
            (*seg.as_ptr()).data_len = skip as u16;
            let head = self.raw.as_ptr();
            (*head).nb_segs = segs;
            (*head).pkt_len = at as u32;
        }
        Ok(view)
    }

    /// The first segment of the chain that ends at byte `at` or after it, with the byte it
    /// ends at and its place in the chain (1 for the head); `None` past the chain's end.
    fn segment_ending_at_or_after(
        &self,
        at: usize,
    ) -> Option<(NonNull<dpdk_sys::rte_mbuf>, usize, u16)> {
        let mut end = 0usize;
        for (i, seg) in self.segment_ptrs().enumerate() {
            // SAFETY: seg is a valid segment of our chain, borrowed for this loop.
            end += usize::from(unsafe { seg.as_ref() }.data_len);
            if end >= at {
                return Some((seg, end, i as u16 + 1));
            }
        }
        None
    }

    /// Cuts the chain after `seg`, its `segs`-th segment, which ends at byte `len`: this
    /// packet keeps `len` bytes, the segments after `seg` come back as a chain of their own.
    /// `None`, and nothing changed, when no segment follows.
    ///
    /// # Safety
    /// `seg` must be the `segs`-th segment of this chain, ending at byte `len`.
    unsafe fn unlink_after(
        &mut self,
        seg: NonNull<dpdk_sys::rte_mbuf>,
        segs: u16,
        len: usize,
    ) -> Option<Mbuf> {
        let total = self.len();
        let head = self.raw.as_ptr();
        // SAFETY: seg, head and tail are valid segments of the chain we own (the caller's
        // contract for seg). Cutting after seg leaves two well-formed chains once each head's
        // counters are set (like DPDK, pkt_len and nb_segs are only meaningful in a head); the
        // tail's ownership moves to the returned Mbuf, nothing else refers to it.
        unsafe {
            let tail = NonNull::new((*seg.as_ptr()).next)?;
            (*seg.as_ptr()).next = std::ptr::null_mut();
            let all = (*head).nb_segs;
            (*head).nb_segs = segs;
            (*head).pkt_len = len as u32;
            (*tail.as_ptr()).nb_segs = all - segs;
            (*tail.as_ptr()).pkt_len = (total - len) as u32;
            Some(Mbuf::from_raw(tail))
        }
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
        if self.head().nb_segs == 1 {
            // One segment (a cut's rest, in the merge engine): one view, its lengths set at once.
            let piece = pool.alloc()?;
            // SAFETY: piece is a fresh, empty, direct mbuf we own; self is a valid one-segment
            // packet. Attaching makes piece indirect, pointing at self's buffer and holding a
            // reference on it (DPDK's free of piece drops it). The range lies inside self's data
            // (checked above: offset + len <= pkt_len == data_len), so moving piece's start by
            // `offset` and giving it `len` bytes stays inside the shared data.
            unsafe {
                dpdk_sys::px_pktmbuf_attach(piece.as_ptr(), self.raw.as_ptr());
                let m = &mut *piece.as_ptr();
                m.data_off += offset as u16;
                m.data_len = len as u16;
                m.pkt_len = len as u32;
            }
            return Ok(piece);
        }
        let mut head: Option<MbufChain> = None;
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
                None => head = Some(MbufChain::new(piece)),
                Some(h) => h.append(piece).map_err(|(e, _)| e)?,
            }
            skip = 0;
            left -= take;
        }
        head.map(MbufChain::into_mbuf)
            .ok_or_else(|| Error::InvalidArgument("empty range".into()))
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

    /// The NIC's verdict on the L4 checksum on receive: `Some(true)` when it found it good
    /// (`RTE_MBUF_F_RX_L4_CKSUM_GOOD`), `Some(false)` when it found it wrong
    /// (`RTE_MBUF_F_RX_L4_CKSUM_BAD`), `None` when it did not check (`UNKNOWN`) or when the
    /// checksum field was never filled in (`NONE`: the data is intact but the field holds a
    /// partial sum, as from a virtual port) — then only the bytes themselves can tell.
    #[inline]
    pub fn rx_l4_checksum_verdict(&self) -> Option<bool> {
        let mask = u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        match self.head().ol_flags & mask {
            f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD) => Some(true),
            f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD) => Some(false),
            _ => None,
        }
    }

    /// Whether the NIC verified the L4 checksum and, when `ipv4`, the IPv4 header checksum
    /// too: [`Mbuf::rx_l4_checksum_verdict`] and [`Mbuf::rx_ip_checksum_verdict`] both
    /// `Some(true)`, in one test of the flags.
    #[inline]
    pub fn rx_checksums_good(&self, ipv4: bool) -> bool {
        let (mut mask, mut good) = (
            u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK),
            u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD),
        );
        if ipv4 {
            mask |= u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK);
            good |= u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD);
        }
        self.head().ol_flags & mask == good
    }

    /// Marks the packet as if the NIC had verified its L4 checksum on receive
    /// (`RTE_MBUF_F_RX_L4_CKSUM_GOOD`): for traces and vdevs that stand in for such a NIC.
    pub fn mark_rx_l4_checksum_good(&mut self) {
        // SAFETY: we own the head struct; ol_flags is plain metadata.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags &= !u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        m.ol_flags |= u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD);
    }

    /// Marks the packet as a NIC with RX checksum offload marks a good IP/TCP or IP/UDP frame:
    /// IP and L4 checksums verified (`RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD`).
    /// For traces and vdevs that stand in for such a NIC.
    pub fn mark_rx_checksums_good(&mut self) {
        self.set_rx_ip_checksum_verdict(Some(true));
        self.set_rx_l4_checksum_verdict(Some(true));
    }

    /// Sets the L4 checksum verdict as [`Mbuf::rx_l4_checksum_verdict`] reads it:
    /// `Some(true)` good, `Some(false)` bad, `None` unknown. For software that knows the
    /// checksum field is right for the bytes (it just computed it, or kept it right with
    /// incremental updates), or that changed bytes without updating it (then `None`).
    pub fn set_rx_l4_checksum_verdict(&mut self, verdict: Option<bool>) {
        let flag = match verdict {
            Some(true) => dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
            Some(false) => dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_BAD,
            None => dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_UNKNOWN,
        };
        // SAFETY: we own the head struct; ol_flags is plain metadata.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags &= !u64::from(dpdk_sys::RTE_MBUF_F_RX_L4_CKSUM_MASK);
        m.ol_flags |= u64::from(flag);
    }

    /// The NIC's verdict on the IPv4 header checksum on receive: `Some(true)` good
    /// (`RTE_MBUF_F_RX_IP_CKSUM_GOOD`), `Some(false)` wrong (`RTE_MBUF_F_RX_IP_CKSUM_BAD`),
    /// `None` not checked (`UNKNOWN`, or `NONE`: the field was never filled in).
    #[inline]
    pub fn rx_ip_checksum_verdict(&self) -> Option<bool> {
        let mask = u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK);
        match self.head().ol_flags & mask {
            f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD) => Some(true),
            f if f == u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD) => Some(false),
            _ => None,
        }
    }

    /// Sets the IPv4 header checksum verdict as [`Mbuf::rx_ip_checksum_verdict`] reads it: for
    /// traces and vdevs that stand in for a NIC that verifies it, and for software that
    /// rewrote the header (then `None`).
    pub fn set_rx_ip_checksum_verdict(&mut self, verdict: Option<bool>) {
        let flag = match verdict {
            Some(true) => dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_GOOD,
            Some(false) => dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_BAD,
            None => dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN,
        };
        // SAFETY: we own the head struct; ol_flags is plain metadata.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags &= !u64::from(dpdk_sys::RTE_MBUF_F_RX_IP_CKSUM_MASK);
        m.ol_flags |= u64::from(flag);
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
        // The four fields packed as `rte_mbuf_tx_offload` packs them, in one write of the
        // union's u64 view (bindgen's bitfield setters cost about 34 instructions here); the
        // outer header lengths above them are kept.
        let packed = tx_offload_bits(u64::from(l2_len), L2_LEN)
            | tx_offload_bits(u64::from(l3_len), L3_LEN)
            | tx_offload_bits(u64::from(l4_len), L4_LEN)
            | tx_offload_bits(u64::from(tso_segsz), TSO_SEGSZ);
        let inner = (1u64 << (TSO_SEGSZ.0 + TSO_SEGSZ.1)) - 1;
        // SAFETY: every bit pattern of the union's u64 view is valid, for reading and writing.
        unsafe {
            let tx = &mut m.__bindgen_anon_3.tx_offload;
            *tx = *tx & !inner | packed;
        }
    }

    /// Writes into the headers what the NIC's transmit offloads that [`set_tx_offload`]
    /// requested need: the IPv4 header checksum zeroed, and the TCP or UDP checksum field
    /// seeded with the pseudo-header sum (without the length under TSO, which differs per
    /// piece). DPDK's `rte_net_intel_cksum_prepare`, what `rte_eth_tx_prepare` runs for Intel
    /// PMDs: what an application must do to a packet whose headers it changed (a merged one)
    /// before a NIC fills its checksums.
    ///
    /// # Errors
    /// [`Error::SharedData`] when the first segment's data is shared with a clone;
    /// [`Error::InvalidArgument`] for outer (tunnel) offloads, which this does not prepare,
    /// and when the header lengths do not cover the headers the flags name, in the first
    /// segment.
    ///
    /// [`set_tx_offload`]: Mbuf::set_tx_offload
    pub fn prepare_tx_checksums(&mut self) -> Result<()> {
        use dpdk_sys as d;
        let m = self.head();
        let flags = m.ol_flags;
        let outer = d::RTE_MBUF_F_TX_OUTER_IPV4
            | d::RTE_MBUF_F_TX_OUTER_IPV6
            | d::RTE_MBUF_F_TX_OUTER_IP_CKSUM
            | d::RTE_MBUF_F_TX_OUTER_UDP_CKSUM;
        if flags & outer != 0 {
            return Err(Error::InvalidArgument(
                "outer (tunnel) checksum offloads are not prepared here".into(),
            ));
        }
        let l4 = flags & d::RTE_MBUF_F_TX_L4_MASK;
        let tcp = l4 == d::RTE_MBUF_F_TX_TCP_CKSUM || flags & d::RTE_MBUF_F_TX_TCP_SEG != 0;
        let udp = l4 == d::RTE_MBUF_F_TX_UDP_CKSUM;
        let ipv4 = flags & d::RTE_MBUF_F_TX_IPV4 != 0;
        let ip_csum = ipv4 && flags & d::RTE_MBUF_F_TX_IP_CKSUM != 0;
        if !(tcp || udp || ip_csum) {
            return Ok(());
        }
        let (l2, l3, l4_len) = self.header_lens();
        // The headers the C function writes or reads, whole, in the first segment.
        let l3_min = if ipv4 { 20 } else { 40 };
        let l4_min = if tcp {
            20
        } else if udp {
            8
        } else {
            0
        };
        let covered = usize::from(l3) >= l3_min
            && usize::from(l4_len) >= l4_min
            && usize::from(l2) + usize::from(l3) + usize::from(l4_len) <= usize::from(m.data_len);
        if !covered {
            return Err(Error::InvalidArgument(format!(
                "header lengths {l2}/{l3}/{l4_len} do not cover the headers the TX flags name \
                 in the first segment ({} bytes)",
                m.data_len
            )));
        }
        writable(self.raw)?;
        // SAFETY: the first segment's data is exclusively ours (checked writable), and it holds
        // the l2 + l3 + l4 header bytes, which are long enough for every field the function
        // reads or writes under these flags (an IPv4 header of 20+ bytes, or IPv6 of 40+; a
        // TCP header of 20+ or a UDP one of 8); it touches nothing else, and no outer offload
        // is set. It returns 0 or -ENOTSUP (headers past the first segment, excluded above).
        let rc = unsafe { dpdk_sys::px_net_intel_cksum_prepare(self.raw.as_ptr()) };
        debug_assert_eq!(rc, 0);
        Ok(())
    }

    /// Replaces the offload flags (for the wrappers that hand the packet to a DPDK library
    /// that reads them, and restore them after).
    pub(crate) fn set_ol_flags(&mut self, flags: u64) {
        // SAFETY: we own the head struct; a plain metadata field.
        unsafe { self.raw.as_mut() }.ol_flags = flags;
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

    /// The payload bytes per piece the NIC is asked to cut this packet into
    /// (`RTE_MBUF_F_TX_TCP_SEG` with `tso_segsz`), or `None` when no TSO is requested.
    pub fn tso_request(&self) -> Option<u16> {
        if self.ol_flags() & crate::tx_flags::TCP_SEG == 0 {
            return None;
        }
        // SAFETY: reading the u64 view of the tx_offload union, valid for any bits.
        let tx = unsafe { self.head().__bindgen_anon_3.tx_offload };
        Some(((tx >> TSO_SEGSZ.0) & ((1 << TSO_SEGSZ.1) - 1)) as u16)
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
        exclusive(self.raw)
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

    /// Records `hash` as the RX hash a NIC computed (`RTE_MBUF_F_RX_RSS_HASH`): for traces and
    /// vdevs that stand in for an RSS-capable NIC.
    #[inline]
    pub fn set_rss_hash(&mut self, hash: u32) {
        // SAFETY: we own the head struct; writing the `rss` member of the hash union and the
        // flag that says it is the valid one.
        let m = unsafe { self.raw.as_mut() };
        m.__bindgen_anon_2.hash.rss = hash;
        m.ol_flags |= u64::from(dpdk_sys::RTE_MBUF_F_RX_RSS_HASH);
    }

    /// Parses the headers in software with DPDK's `rte_net_get_ptype` (all layers), as an
    /// application does before `rte_gro` when the NIC reports no packet type or header lengths
    /// (testpmd's csum engine). Records the result in the mbuf ([`packet_type`](Self::packet_type),
    /// [`header_lens`](Self::header_lens)) and returns the packet type (`RTE_PTYPE_*` bits; 0
    /// when not even the L2 header is recognised).
    #[inline]
    pub fn parse_packet_type(&mut self) -> u32 {
        let mut lens = dpdk_sys::rte_net_hdr_lens::default();
        // SAFETY: `self.raw` is a valid mbuf chain we own; rte_net_get_ptype only reads it
        // (bounds-checked against data_len/pkt_len) and writes `lens`.
        let ptype = unsafe {
            dpdk_sys::rte_net_get_ptype(self.raw.as_ptr(), &mut lens, dpdk_sys::RTE_PTYPE_ALL_MASK)
        };
        self.set_packet_type(ptype);
        self.set_header_lens(lens.l2_len, lens.l3_len, lens.l4_len);
        ptype
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

/// A packet that grows at its end one chain at a time, in O(1): it remembers its last segment,
/// so [`append`](Self::append) needs no walk down the chain (as `rte_pktmbuf_chain` does).
/// PacketExpress's merge engine holds each item being merged as one (SIGCOMM'26 §4.2).
///
/// The last segment is only ever changed through this type, which owns the chain, so the
/// remembered pointer cannot go stale; [`packet`](Self::packet) lends the chain out read-only.
pub struct MbufChain {
    head: Mbuf,
    /// The chain's last segment (the head itself for a single segment).
    last: NonNull<dpdk_sys::rte_mbuf>,
}

// SAFETY: `last` points into the chain `head` owns, so it moves with it; the chain is Send (see
// Mbuf) and nothing else refers to `last`.
unsafe impl Send for MbufChain {}

impl MbufChain {
    /// Takes over `head`, walking it once to find its last segment.
    #[inline]
    pub fn new(head: Mbuf) -> Self {
        let last = head.last_seg();
        Self { head, last }
    }

    /// Appends `tail`'s segments; on failure (too many segments) `tail` comes back untouched.
    /// Only `tail` is walked, to find the new last segment.
    #[inline(always)]
    pub fn append(&mut self, tail: Mbuf) -> std::result::Result<(), (Error, Mbuf)> {
        // A single segment is its own last: its `next`, in the mbuf's second cache line, is
        // not read (null by DPDK's invariant, nb_segs counting the chain).
        let tail_last = if tail.num_segs() == 1 {
            tail.raw
        } else {
            tail.last_seg()
        };
        self.head.link_after(self.last, tail)?;
        self.last = tail_last;
        Ok(())
    }

    /// Appends another growing chain, in O(1).
    #[inline]
    pub fn append_chain(&mut self, tail: MbufChain) -> std::result::Result<(), (Error, MbufChain)> {
        let MbufChain {
            head: tail,
            last: tail_last,
        } = tail;
        match self.head.link_after(self.last, tail) {
            Ok(()) => {
                self.last = tail_last;
                Ok(())
            }
            Err((e, tail)) => Err((
                e,
                MbufChain {
                    head: tail,
                    last: tail_last,
                },
            )),
        }
    }

    /// Removes `len` bytes from the front of the first segment (see [`Mbuf::adj`]); the last
    /// segment stays the same, even when the first one is emptied.
    #[inline]
    pub fn adj(&mut self, len: usize) -> Result<()> {
        self.head.adj(len)
    }

    /// The packet, read-only.
    #[inline]
    pub fn packet(&self) -> &Mbuf {
        &self.head
    }

    /// The packet, done growing.
    #[inline]
    pub fn into_mbuf(self) -> Mbuf {
        self.head
    }
}

impl std::fmt::Debug for MbufChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MbufChain").field(&self.head).finish()
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

/// Whether `seg` is direct with refcount 1 (`RTE_MBUF_DIRECT` and `rte_mbuf_refcnt_read`,
/// without the calls).
#[inline]
fn exclusive(seg: NonNull<dpdk_sys::rte_mbuf>) -> bool {
    let attached = dpdk_sys::RTE_MBUF_F_INDIRECT | dpdk_sys::RTE_MBUF_F_EXTERNAL;
    // SAFETY: seg is a valid segment of a chain we own.
    if unsafe { seg.as_ref().ol_flags } & attached != 0 {
        return false;
    }
    // SAFETY: `refcnt` is a live, aligned u16 of a valid mbuf that DPDK updates with atomic
    // operations (possibly from another thread, through a clone); this is the relaxed atomic
    // load `rte_mbuf_refcnt_read` does.
    let refcnt = unsafe {
        std::sync::atomic::AtomicU16::from_ptr(std::ptr::addr_of_mut!((*seg.as_ptr()).refcnt))
    };
    refcnt.load(std::sync::atomic::Ordering::Relaxed) == 1
}

/// Free bytes after a segment's data (`rte_pktmbuf_tailroom`, without the call).
#[inline]
fn tailroom(m: &dpdk_sys::rte_mbuf) -> usize {
    usize::from(m.buf_len) - usize::from(m.data_off) - usize::from(m.data_len)
}

/// Where a field of `rte_mbuf`'s `tx_offload` lies: (offset, width) in bits, as DPDK's
/// `RTE_MBUF_*_OFS` and the bitfield declare them.
const L2_LEN: (u32, u32) = (0, 7);
const L3_LEN: (u32, u32) = (7, 9);
const L4_LEN: (u32, u32) = (16, 8);
const TSO_SEGSZ: (u32, u32) = (24, 16);

/// `value` in field `(offset, width)` of `tx_offload`, cut to the field's width as the
/// bitfield's setter cuts it.
#[inline(always)]
fn tx_offload_bits(value: u64, (offset, width): (u32, u32)) -> u64 {
    (value & ((1 << width) - 1)) << offset
}

/// Only a direct segment with refcount 1 owns its buffer exclusively.
#[inline]
fn writable(seg: NonNull<dpdk_sys::rte_mbuf>) -> Result<()> {
    if exclusive(seg) {
        Ok(())
    } else {
        Err(Error::SharedData)
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::{assert_no_leaks, pool};

    use super::*;

    #[test]
    fn a_growing_chain_appends_in_order_and_frees_once() {
        let pool = pool(64, 256);
        let seg = |bytes: &[u8]| {
            let mut m = pool.alloc().unwrap();
            m.extend_from_slice(bytes).unwrap();
            m
        };
        let mut chain = MbufChain::new(seg(b"hdr:ab"));
        chain.append(seg(b"cd")).unwrap();
        let mut two = seg(b"ef");
        two.chain(seg(b"gh")).unwrap();
        chain.append(two).unwrap();
        assert!(chain.adj(4).is_ok());
        let mut other = MbufChain::new(seg(b"ij"));
        other.append(seg(b"kl")).unwrap();
        chain.append_chain(other).unwrap();
        chain.append(seg(b"mn")).unwrap();
        let m = chain.into_mbuf();
        assert_eq!(m.to_vec(), b"abcdefghijklmn");
        assert_eq!((m.len(), m.num_segs()), (14, 7));
        // Every segment after the head carries its own length as pkt_len, as DPDK leaves it.
        let lens: Vec<usize> = m.segments().map(<[u8]>::len).collect();
        assert_eq!(lens, [2, 2, 2, 2, 2, 2, 2]);
        drop(m);
        assert_no_leaks(&pool);
    }

    /// The packed write leaves `tx_offload` as bindgen's bitfield setters do, outer header
    /// lengths included, for ordinary and out-of-range values.
    #[test]
    fn tx_offload_fields_are_packed_as_the_bitfield_lays_them_out() {
        let pool = pool(4, 256);
        let mut m = pool.alloc().unwrap();
        for &(l2, l3, l4, tso) in &[
            (14u8, 20u16, 32u8, 0u16),
            (22, 40, 60, 1448),
            (255, 65535, 255, 65535),
        ] {
            // SAFETY: the union's u64 view is valid for any bits (test only).
            let outer = unsafe {
                let u = &mut m.raw.as_mut().__bindgen_anon_3;
                u.tx_offload = 0xdead_beef_0000_0000 | 0x00ff_ffff_ffff;
                u.tx_offload
            };
            let mut want = dpdk_sys::rte_mbuf__bindgen_ty_3 { tx_offload: outer };
            // SAFETY: as above.
            unsafe {
                let f = &mut want.__bindgen_anon_1;
                f.set_l2_len(u64::from(l2));
                f.set_l3_len(u64::from(l3));
                f.set_l4_len(u64::from(l4));
                f.set_tso_segsz(u64::from(tso));
            }
            m.set_tx_offload(l2, l3, l4, 0, tso);
            // SAFETY: as above.
            let (got, want) = unsafe { (m.head().__bindgen_anon_3.tx_offload, want.tx_offload) };
            assert_eq!(got, want, "{l2} {l3} {l4} {tso}");
        }
    }

    #[test]
    fn a_header_goes_into_the_headroom_of_an_unshared_buffer_only() {
        let pool = pool(16, 256);
        let mut head = pool.alloc().unwrap();
        head.extend_from_slice(b"HDRpayload").unwrap();
        head.adj(3).unwrap();
        let mut tail = pool.alloc().unwrap();
        tail.extend_from_slice(b"more").unwrap();
        let room = tail.headroom();
        head.chain(tail).map_err(|(e, _)| e).unwrap();
        let clone = head.try_clone(&pool).unwrap();
        // Shared with a clone: no headroom to offer, and no prepend.
        let rooms: Vec<usize> = head.segments_with_headroom().map(|(_, r)| r).collect();
        assert_eq!(rooms, [0, 0]);
        assert!(matches!(head.prepend_slice(b"NEW"), Err(Error::SharedData)));
        drop(clone);
        let rooms: Vec<usize> = head.segments_with_headroom().map(|(_, r)| r).collect();
        assert_eq!(rooms, [head.headroom(), room]);
        let too_much = vec![0u8; head.headroom() + 1];
        assert!(matches!(
            head.prepend_slice(&too_much),
            Err(Error::NoRoom { .. })
        ));
        assert_eq!(
            head.to_vec(),
            b"payloadmore",
            "a refused prepend changes nothing"
        );
        head.mark_rx_checksums_good();
        head.set_rss_hash(7);
        head.set_tx_offload(14, 20, 20, crate::tx_flags::TCP_CKSUM, 0);
        head.prepend_slice(b"NEW").unwrap();
        head.reset_metadata();
        assert_eq!(head.to_vec(), b"NEWpayloadmore");
        assert_eq!((head.len(), head.data().len()), (14, 10));
        assert_eq!((head.ol_flags(), head.header_lens()), (0, (0, 0, 0)));
        assert_eq!(head.rss_hash(), None);
        drop(head);
        assert_no_leaks(&pool);
    }

    /// The 16-bit one's-complement sum of `bytes` (big-endian words), folded.
    fn ones_sum(bytes: &[u8]) -> u32 {
        let mut sum: u32 = bytes
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        sum
    }

    /// What a NIC's checksum offload does with the prepared TCP field: sums the segment, seed
    /// included (and under TSO each piece's length, here one piece of `tso_len` bytes), and
    /// writes the complement.
    fn nic_tcp_checksum(frame: &[u8], l4: usize, tso_len: Option<usize>) -> u16 {
        let len = tso_len.map_or(0, |n| u32::from(n as u16));
        let mut sum = ones_sum(&frame[l4..]) + len;
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn prepared_checksum_fields_let_a_nic_fill_the_right_checksums() {
        use crate::tx_flags as f;
        use etherparse::PacketBuilder;
        let pool = pool(16, 2048);
        let payload: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let v4 = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1000, 2000, 12345, 512);
        let v6 = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv6([0x20; 16], [0x30; 16], 64)
            .tcp(1000, 2000, 12345, 512);
        let frames = [(v4, false), (v6, true)].map(|(builder, v6)| {
            let mut frame = Vec::new();
            builder.write(&mut frame, &payload).unwrap();
            (frame, v6)
        });
        for (frame, v6) in frames {
            let l3 = if v6 { 40 } else { 20 };
            let l4 = 14 + l3;
            let correct_tcp = [frame[l4 + 16], frame[l4 + 17]];
            for tso in [0u16, 500] {
                let mut m = pool.alloc().unwrap();
                m.extend_from_slice(&frame).unwrap();
                let mut flags = f::TCP_CKSUM;
                flags |= if v6 { f::IPV6 } else { f::IPV4 | f::IP_CKSUM };
                if tso > 0 {
                    flags |= f::TCP_SEG;
                }
                m.set_tx_offload(14, l3 as u16, 20, flags, tso);
                m.prepare_tx_checksums().unwrap();
                let out = m.to_vec();
                if !v6 {
                    assert_eq!(
                        &out[24..26],
                        &[0, 0],
                        "the IPv4 checksum is the NIC's to fill"
                    );
                }
                // The seed, completed as a NIC completes it, is the segment's checksum.
                let tcp_len = frame.len() - l4;
                let filled = nic_tcp_checksum(&out, l4, (tso > 0).then_some(tcp_len));
                assert_eq!(filled.to_be_bytes(), correct_tcp, "v6 {v6} tso {tso}");
            }
        }
        assert_no_leaks(&pool);
    }

    #[test]
    fn checksum_preparation_refuses_headers_it_cannot_reach() {
        use crate::tx_flags as f;
        let pool = pool(16, 2048);
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(&[0u8; 54]).unwrap();
        let before = m.to_vec();
        // A TCP header shorter than TCP's, an IPv4 one shorter than IPv4's, headers longer
        // than the segment: refused, nothing written.
        for (l3, l4) in [(20, 8), (12, 20), (20, 40)] {
            m.set_tx_offload(14, l3, l4, f::IPV4 | f::IP_CKSUM | f::TCP_CKSUM, 0);
            assert!(matches!(
                m.prepare_tx_checksums(),
                Err(Error::InvalidArgument(_))
            ));
            assert_eq!(m.to_vec(), before);
        }
        // Shared with a clone: refused.
        m.set_tx_offload(14, 20, 20, f::IPV4 | f::IP_CKSUM | f::TCP_CKSUM, 0);
        let clone = m.try_clone(&pool).unwrap();
        assert!(matches!(m.prepare_tx_checksums(), Err(Error::SharedData)));
        drop(clone);
        m.prepare_tx_checksums().unwrap();
        drop(m);
        assert_no_leaks(&pool);
    }

    #[test]
    fn a_growing_chain_refuses_too_many_segments() {
        let pool = pool(8, 256);
        let mut chain = MbufChain::new(pool.alloc().unwrap());
        let long = pool.alloc().unwrap();
        // SAFETY: test-only: pretend the tail is at the segment limit; restored before drop.
        unsafe { (*long.as_ptr()).nb_segs = u16::MAX };
        let (err, mut long) = chain.append(long).unwrap_err();
        assert!(matches!(err, Error::TooManySegments(_)));
        // SAFETY: restores the true count.
        unsafe { (*long.as_ptr()).nb_segs = 1 };
        long.extend_from_slice(b"x").unwrap();
        chain.append(long).unwrap();
        assert_eq!(chain.packet().num_segs(), 2);
        drop(chain);
        assert_no_leaks(&pool);
    }
}
