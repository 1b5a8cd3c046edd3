//! The buffer abstraction the engine is written against: a packet made of one or more segments,
//! which can be chained, cut and shared without copying payload.
//!
//! Two implementations:
#![cfg_attr(feature = "dpdk", doc = "[`dpdk::Mbuf`]")]
#![cfg_attr(not(feature = "dpdk"), doc = "`dpdk::Mbuf`")]
//! (production, on real mempools; the `dpdk` feature) and [`HeapBuf`] (tests, fuzzing, benches
//! without an EAL). Both count their live segments in a pool, so the same leak check works on
//! both.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A packet buffer the engine can merge and split without copying payload (SIGCOMM'26 §4.2).
///
/// Headers are read from and written to the first segment only; the engine guarantees it never
/// needs more than that (a packet whose headers straddle segments is classified as malformed).
pub trait PacketBuf: Sized {
    /// Where new buffers (headers for split segments, indirect views) come from.
    type Pool;

    /// Most segments one packet may have; `chain` fails beyond it.
    const MAX_SEGS: usize;

    /// The same packet while it grows by appends (an item being merged, SIGCOMM'26 §4.2): it
    /// remembers its last segment, so each append costs O(1), not a walk down the chain.
    type Chain: PacketChain<Buf = Self>;

    /// Total bytes.
    fn len(&self) -> usize;
    /// Whether the packet is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of segments.
    fn num_segs(&self) -> usize;
    /// The first segment's bytes.
    fn head(&self) -> &[u8];
    /// The first segment's bytes, writable; `None` while they are shared with another buffer.
    fn head_mut(&mut self) -> Option<&mut [u8]>;
    /// Every segment, in order.
    fn for_each_segment(&self, f: impl FnMut(&[u8]));
    /// Removes `n` bytes from the front of the first segment; false if it holds fewer.
    fn adj(&mut self, n: usize) -> bool;
    /// Shortens the packet to `len` bytes; false if it is shorter.
    fn truncate(&mut self, len: usize) -> bool;
    /// Appends `tail`'s segments; gives `tail` back when the chain would be too long.
    fn chain(&mut self, tail: Self) -> Result<(), Self>;
    /// A zero-copy view of `[offset, offset + len)`, sharing the data by refcount; `None` when the
    /// pool is exhausted or the range is out of bounds.
    fn share_range(&self, offset: usize, len: usize, pool: &Self::Pool) -> Option<Self>;
    /// Cuts the packet at byte `at`, anywhere strictly inside it: `self` keeps the first `at`
    /// bytes and the rest comes back as a packet of its own, zero-copy; `None`, and `self`
    /// unchanged, when `at` is not strictly inside or the pool is exhausted. The default shares
    /// the whole rest ([`share_range`](Self::share_range)) and truncates; a buffer with chains
    /// moves the segments past the cut and shares only the one it falls in, so a cut costs the
    /// same however long the chain (an LRO packet's, say).
    fn split_off(&mut self, at: usize, pool: &Self::Pool) -> Option<Self> {
        let len = self.len();
        if at == 0 || at >= len {
            return None;
        }
        let rest = self.share_range(at, len - at, pool)?;
        self.truncate(at).then_some(rest)
    }
    /// Cuts the packet at byte `len` when that is a boundary between segments: `self` keeps
    /// the first `len` bytes and the rest comes back as a packet of its own, without copying,
    /// sharing or allocating buffers. `None`, and `self` unchanged, when `len` falls inside a
    /// segment or is not strictly between 0 and the packet's length.
    fn detach_at(&mut self, len: usize) -> Option<Self>;
    /// A new single-segment buffer holding a copy of `bytes` (used for headers of split
    /// segments and caravans); `None` when the pool is exhausted or `bytes` does not fit.
    fn alloc_with(pool: &Self::Pool, bytes: &[u8]) -> Option<Self>;
    /// Fills every slot of `slots` with a new buffer holding a copy of `bytes` (the headers of
    /// a split's pieces), from one bulk request where the pool has one. All or nothing: false,
    /// and every slot `None`, when the pool cannot give them all or `bytes` does not fit.
    fn alloc_many_with(pool: &Self::Pool, bytes: &[u8], slots: &mut [Option<Self>]) -> bool {
        for i in 0..slots.len() {
            match Self::alloc_with(pool, bytes) {
                Some(b) => slots[i] = Some(b),
                None => {
                    slots.iter_mut().for_each(|s| *s = None);
                    return false;
                }
            }
        }
        true
    }
    /// Every segment, in order, with the bytes [`PacketBuf::prepend_copy`] could write in front
    /// of it were it a packet's first segment: its headroom when its buffer is this packet's
    /// alone (direct, not shared with a clone or view), else 0. The split reads it before
    /// cutting a packet, to know which pieces need a header buffer. The default reports 0 for
    /// every segment, for buffers without in-place prepends.
    fn for_each_segment_room(&self, mut f: impl FnMut(&[u8], usize)) {
        self.for_each_segment(|s| f(s, 0));
    }
    /// Writes a copy of `bytes` in front of the first segment's data, in its headroom (as
    /// `rte_pktmbuf_prepend`), when that segment's buffer is this packet's alone and has the
    /// room; false, and the packet unchanged, otherwise (the default, for buffers without
    /// in-place prepends). The buffer then heads a packet of its own: its metadata starts
    /// afresh, as a buffer from [`PacketBuf::alloc_with`] has it (no checksum verdicts, no
    /// transmit offload request, no RSS hash), and the caller sets what applies.
    fn prepend_copy(&mut self, bytes: &[u8]) -> bool {
        let _ = bytes;
        false
    }
    /// The NIC's RSS hash, when it computed one.
    fn rss_hash(&self) -> Option<u32>;
    /// What is known of the L4 (TCP/UDP) checksum field: `Some(true)` **the field is correct
    /// for the bytes** (the NIC verified it on receive, or software that wrote the field, or
    /// kept it right with incremental updates, said so with
    /// [`PacketBuf::set_l4_csum_verdict`]); `Some(false)` the NIC found it wrong; `None`
    /// nothing is known (then only the bytes can tell).
    ///
    /// The merge engine and the split trust `Some(true)` and skip their software verification
    /// (the split still sums what its pieces' checksums need). An NF that rewrites covered
    /// bytes without updating the checksum field (an address or port rewrite without the
    /// RFC 1624 update, a payload edit) must clear it with `set_l4_csum_verdict(None)`, or a
    /// corrupt packet could leave as freshly checksummed segments.
    fn l4_csum_verdict(&self) -> Option<bool>;
    /// Sets what [`PacketBuf::l4_csum_verdict`] reports (on an mbuf: its RX L4 checksum flag).
    fn set_l4_csum_verdict(&mut self, verdict: Option<bool>);
    /// What the NIC said of the IPv4 header checksum on receive: `Some(true)` it verified it
    /// (DPDK's `RTE_MBUF_F_RX_IP_CKSUM_GOOD`), `Some(false)` it found it wrong (`_BAD`), `None`
    /// it did not check (then the merge engine sums the 20 bytes itself). Like the L4 verdict,
    /// it describes the header as received: software that rewrites the IPv4 header without
    /// fixing its checksum must clear it with [`PacketBuf::set_ip_csum_verdict`].
    fn ip_csum_verdict(&self) -> Option<bool>;
    /// Sets what [`PacketBuf::ip_csum_verdict`] reports (on an mbuf: its RX IP checksum flag).
    fn set_ip_csum_verdict(&mut self, verdict: Option<bool>);
    /// Whether the L4 checksum is vouched for (`l4_csum_verdict() == Some(true)`) and, when
    /// `ipv4`, the IPv4 header checksum too (`ip_csum_verdict() == Some(true)`).
    #[inline]
    fn csum_vouched(&self, ipv4: bool) -> bool {
        self.l4_csum_verdict() == Some(true) && (!ipv4 || self.ip_csum_verdict() == Some(true))
    }
    /// Asks the NIC to finish this packet on transmit: TSO to `tso_segsz` (0: none), and the IP
    /// and L4 checksums. Only called when the port granted those offloads.
    fn request_tx_offload(&mut self, offload: TxOffload);
    /// Copies the whole packet out (tests and slow paths only).
    fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each_segment(|s| out.extend_from_slice(s));
        out
    }
}

/// A packet that grows at its end in O(1): see [`PacketBuf::Chain`].
pub trait PacketChain: Sized {
    /// The packet type it grows.
    type Buf: PacketBuf;

    /// Starts growing `pkt` (walks it once).
    fn new(pkt: Self::Buf) -> Self;
    /// Appends `tail`'s segments; gives `tail` back when the chain would be too long.
    fn append(&mut self, tail: Self::Buf) -> Result<(), Self::Buf>;
    /// Appends another growing packet; gives it back when the chain would be too long.
    fn append_chain(&mut self, tail: Self) -> Result<(), Self>;
    /// The packet, read-only.
    fn packet(&self) -> &Self::Buf;
    /// Removes `n` bytes from the front of the first segment; false if it holds fewer.
    fn adj(&mut self, n: usize) -> bool;
    /// The packet, done growing.
    fn into_packet(self) -> Self::Buf;
}

/// Says what is known of a packet's checksum fields after software rewrote its IP and TCP
/// headers (a merged packet, a split piece), so that no verdict received with the old headers
/// survives: with `computed` the fields were computed here over verified bytes and are right
/// (a later merge or split need not verify them; IPv6 has no header checksum to vouch for),
/// else they are seeds for the NIC's transmit offload and nothing is claimed.
pub(crate) fn mark_rewritten_checksums<B: PacketBuf>(pkt: &mut B, computed: bool, v6: bool) {
    pkt.set_l4_csum_verdict(computed.then_some(true));
    pkt.set_ip_csum_verdict((computed && !v6).then_some(true));
}

/// What to ask of the NIC for one packet on transmit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxOffload {
    /// Ethernet (+VLAN) header bytes.
    pub l2_len: u8,
    /// IP header bytes.
    pub l3_len: u16,
    /// TCP/UDP header bytes.
    pub l4_len: u8,
    /// IPv4 (else IPv6).
    pub ipv4: bool,
    /// Fill the IPv4 header checksum.
    pub ip_checksum: bool,
    /// Fill the TCP checksum.
    pub tcp_checksum: bool,
    /// Fill the UDP checksum.
    pub udp_checksum: bool,
    /// Segment to this many payload bytes per packet (0: no TSO).
    pub tso_segsz: u16,
}

#[cfg(feature = "dpdk")]
impl PacketBuf for dpdk::Mbuf {
    type Pool = std::sync::Arc<dpdk::Mempool>;
    const MAX_SEGS: usize = u16::MAX as usize;
    type Chain = dpdk::MbufChain;

    #[inline]
    fn len(&self) -> usize {
        dpdk::Mbuf::len(self)
    }
    #[inline]
    fn num_segs(&self) -> usize {
        dpdk::Mbuf::num_segs(self)
    }
    #[inline]
    fn head(&self) -> &[u8] {
        self.data()
    }
    #[inline]
    fn head_mut(&mut self) -> Option<&mut [u8]> {
        self.data_mut().ok()
    }
    fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        for s in self.segments() {
            f(s);
        }
    }
    #[inline(always)]
    fn adj(&mut self, n: usize) -> bool {
        dpdk::Mbuf::adj(self, n).is_ok()
    }
    #[inline]
    fn truncate(&mut self, len: usize) -> bool {
        dpdk::Mbuf::truncate(self, len).is_ok()
    }
    #[inline]
    fn chain(&mut self, tail: Self) -> Result<(), Self> {
        dpdk::Mbuf::chain(self, tail).map_err(|(_, tail)| tail)
    }
    fn share_range(&self, offset: usize, len: usize, pool: &Self::Pool) -> Option<Self> {
        dpdk::Mbuf::share_range(self, offset, len, pool).ok()
    }
    fn split_off(&mut self, at: usize, pool: &Self::Pool) -> Option<Self> {
        dpdk::Mbuf::split_off(self, at, pool).ok()
    }
    fn detach_at(&mut self, len: usize) -> Option<Self> {
        dpdk::Mbuf::detach_at(self, len)
    }
    fn alloc_with(pool: &Self::Pool, bytes: &[u8]) -> Option<Self> {
        let mut m = pool.alloc().ok()?;
        m.extend_from_slice(bytes).ok()?;
        Some(m)
    }
    fn alloc_many_with(pool: &Self::Pool, bytes: &[u8], slots: &mut [Option<Self>]) -> bool {
        const BULK: usize = 64;
        if slots.len() > BULK {
            return slots
                .chunks_mut(BULK)
                .all(|c| Self::alloc_many_with(pool, bytes, c))
                || {
                    slots.iter_mut().for_each(|s| *s = None);
                    false
                };
        }
        let mut burst = dpdk::Burst::<BULK>::new();
        if pool.alloc_bulk(&mut burst, slots.len()).is_err() {
            return false;
        }
        for (slot, mut m) in slots.iter_mut().zip(burst.drain()) {
            if m.extend_from_slice(bytes).is_err() {
                slots.iter_mut().for_each(|s| *s = None);
                return false;
            }
            *slot = Some(m);
        }
        true
    }
    fn for_each_segment_room(&self, mut f: impl FnMut(&[u8], usize)) {
        for (s, room) in self.segments_with_headroom() {
            f(s, room);
        }
    }
    fn prepend_copy(&mut self, bytes: &[u8]) -> bool {
        if self.prepend_slice(bytes).is_err() {
            return false;
        }
        self.reset_metadata();
        true
    }
    #[inline]
    fn rss_hash(&self) -> Option<u32> {
        dpdk::Mbuf::rss_hash(self)
    }
    #[inline]
    fn l4_csum_verdict(&self) -> Option<bool> {
        self.rx_l4_checksum_verdict()
    }
    #[inline]
    fn set_l4_csum_verdict(&mut self, verdict: Option<bool>) {
        self.set_rx_l4_checksum_verdict(verdict);
    }
    #[inline]
    fn ip_csum_verdict(&self) -> Option<bool> {
        self.rx_ip_checksum_verdict()
    }
    #[inline]
    fn set_ip_csum_verdict(&mut self, verdict: Option<bool>) {
        self.set_rx_ip_checksum_verdict(verdict);
    }
    #[inline]
    fn csum_vouched(&self, ipv4: bool) -> bool {
        self.rx_checksums_good(ipv4)
    }
    fn request_tx_offload(&mut self, o: TxOffload) {
        use dpdk::tx_flags as f;
        let mut flags = if o.ipv4 { f::IPV4 } else { f::IPV6 };
        if o.ip_checksum {
            flags |= f::IP_CKSUM;
        }
        if o.tcp_checksum {
            flags |= f::TCP_CKSUM;
        }
        if o.udp_checksum {
            flags |= f::UDP_CKSUM;
        }
        if o.tso_segsz > 0 {
            flags |= f::TCP_SEG;
        }
        self.set_tx_offload(o.l2_len, o.l3_len, o.l4_len, flags, o.tso_segsz);
    }
}

#[cfg(feature = "dpdk")]
impl PacketChain for dpdk::MbufChain {
    type Buf = dpdk::Mbuf;

    #[inline]
    fn new(pkt: dpdk::Mbuf) -> Self {
        dpdk::MbufChain::new(pkt)
    }
    #[inline(always)]
    fn append(&mut self, tail: dpdk::Mbuf) -> Result<(), dpdk::Mbuf> {
        dpdk::MbufChain::append(self, tail).map_err(|(_, tail)| tail)
    }
    #[inline]
    fn append_chain(&mut self, tail: Self) -> Result<(), Self> {
        dpdk::MbufChain::append_chain(self, tail).map_err(|(_, tail)| tail)
    }
    #[inline]
    fn packet(&self) -> &dpdk::Mbuf {
        dpdk::MbufChain::packet(self)
    }
    #[inline]
    fn adj(&mut self, n: usize) -> bool {
        dpdk::MbufChain::adj(self, n).is_ok()
    }
    #[inline]
    fn into_packet(self) -> dpdk::Mbuf {
        self.into_mbuf()
    }
}

/// Counts the live segments of [`HeapBuf`]s, like a mempool's in-use count.
#[derive(Debug, Default)]
pub struct HeapPool {
    live: Arc<AtomicUsize>,
    /// Largest segment `alloc_with` accepts (like an mbuf's data room).
    seg_capacity: usize,
}

impl HeapPool {
    /// A pool whose segments hold up to `seg_capacity` bytes.
    pub fn new(seg_capacity: usize) -> Self {
        Self {
            live: Arc::default(),
            seg_capacity,
        }
    }

    /// Segments alive (buffers and views that still hold data). Zero when nothing leaked.
    pub fn in_use(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// A buffer holding a copy of `bytes` in one segment, regardless of `seg_capacity`
    /// (for building test input).
    pub fn packet(&self, bytes: &[u8]) -> HeapBuf {
        HeapBuf {
            segs: vec![Seg::new(Arc::new(SegData::new(bytes.to_vec(), &self.live)))],
            l4_verdict: None,
            ip_verdict: None,
            tx_offload: None,
            rss: None,
        }
    }
}

/// The bytes of one heap segment, shared by the segments that view them.
#[derive(Debug)]
struct SegData {
    bytes: Vec<u8>,
    live: Arc<AtomicUsize>,
}

impl SegData {
    fn new(bytes: Vec<u8>, live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self {
            bytes,
            live: live.clone(),
        }
    }
}

impl Drop for SegData {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A view of `[start, end)` of shared segment bytes.
#[derive(Debug, Clone)]
struct Seg {
    data: Arc<SegData>,
    start: usize,
    end: usize,
}

impl Seg {
    fn new(data: Arc<SegData>) -> Self {
        let end = data.bytes.len();
        Self {
            data,
            start: 0,
            end,
        }
    }
    fn bytes(&self) -> &[u8] {
        &self.data.bytes[self.start..self.end]
    }
    fn len(&self) -> usize {
        self.end - self.start
    }
}

/// A heap-backed [`PacketBuf`]: segments are views into reference-counted byte vectors, so
/// chaining and sharing copy no payload, exactly like mbufs. Used by tests, fuzzing and benches.
#[derive(Debug)]
pub struct HeapBuf {
    segs: Vec<Seg>,
    /// What a NIC would have said of the L4 checksum on receive (tests; `None` by default).
    l4_verdict: Option<bool>,
    /// What a NIC would have said of the IPv4 header checksum (tests; `None` by default).
    ip_verdict: Option<bool>,
    /// What was asked of the NIC on transmit ([`PacketBuf::request_tx_offload`]), for tests
    /// that play the NIC's part.
    tx_offload: Option<TxOffload>,
    /// What a NIC would have given as the RSS hash (tests; `None` by default).
    rss: Option<u32>,
}

impl HeapBuf {
    /// Attaches an RSS hash, as a receiving port would ([`PacketBuf::rss_hash`]): for tests of
    /// the paths that use it.
    pub fn set_rss_hash(&mut self, hash: Option<u32>) {
        self.rss = hash;
    }

    /// Builds a multi-segment packet (tests): one segment per slice.
    pub fn from_segments(pool: &HeapPool, parts: &[&[u8]]) -> HeapBuf {
        HeapBuf {
            segs: parts
                .iter()
                .map(|p| Seg::new(Arc::new(SegData::new(p.to_vec(), &pool.live))))
                .collect(),
            l4_verdict: None,
            ip_verdict: None,
            tx_offload: None,
            rss: None,
        }
    }

    /// Attaches a NIC's verdict on the L4 checksum, as a receiving port would
    /// ([`PacketBuf::l4_csum_verdict`]): for tests of the paths that trust it.
    pub fn set_l4_csum_verdict(&mut self, verdict: Option<bool>) {
        self.l4_verdict = verdict;
    }

    /// What [`PacketBuf::request_tx_offload`] last asked of the NIC for this packet, if
    /// anything: a test plays the NIC's part with it (fills the checksums it was asked to).
    pub fn requested_tx_offload(&self) -> Option<TxOffload> {
        self.tx_offload
    }

    /// Attaches a NIC's verdict on the IPv4 header checksum, as a receiving port would
    /// ([`PacketBuf::ip_csum_verdict`]): for tests of the paths that trust it.
    pub fn set_ip_csum_verdict(&mut self, verdict: Option<bool>) {
        self.ip_verdict = verdict;
    }
}

/// Chains longer than this are refused, like DPDK's limit on `nb_segs`.
const HEAP_MAX_SEGS: usize = 1024;

impl PacketBuf for HeapBuf {
    type Pool = HeapPool;
    const MAX_SEGS: usize = HEAP_MAX_SEGS;
    type Chain = HeapChain;

    fn len(&self) -> usize {
        self.segs.iter().map(Seg::len).sum()
    }
    fn num_segs(&self) -> usize {
        self.segs.len()
    }
    fn head(&self) -> &[u8] {
        self.segs.first().map_or(&[], Seg::bytes)
    }
    fn head_mut(&mut self) -> Option<&mut [u8]> {
        let seg = self.segs.first_mut()?;
        let (start, end) = (seg.start, seg.end);
        Arc::get_mut(&mut seg.data).map(|d| &mut d.bytes[start..end])
    }
    fn for_each_segment(&self, mut f: impl FnMut(&[u8])) {
        for s in &self.segs {
            f(s.bytes());
        }
    }
    fn adj(&mut self, n: usize) -> bool {
        match self.segs.first_mut() {
            Some(seg) if seg.len() >= n => {
                seg.start += n;
                true
            }
            _ => n == 0,
        }
    }
    fn truncate(&mut self, len: usize) -> bool {
        if len > self.len() {
            return false;
        }
        let mut before = 0;
        for i in 0..self.segs.len() {
            let seg_len = self.segs[i].len();
            if before + seg_len >= len {
                self.segs[i].end = self.segs[i].start + (len - before);
                self.segs.truncate(i + 1);
                return true;
            }
            before += seg_len;
        }
        true
    }
    fn chain(&mut self, mut tail: Self) -> Result<(), Self> {
        if self.segs.len() + tail.segs.len() > HEAP_MAX_SEGS {
            return Err(tail);
        }
        self.segs.append(&mut tail.segs);
        Ok(())
    }
    fn share_range(&self, offset: usize, len: usize, _pool: &HeapPool) -> Option<Self> {
        if len == 0 || offset + len > self.len() {
            return None;
        }
        let mut segs = Vec::new();
        let (mut skip, mut left) = (offset, len);
        for seg in &self.segs {
            if left == 0 {
                break;
            }
            if skip >= seg.len() {
                skip -= seg.len();
                continue;
            }
            let take = (seg.len() - skip).min(left);
            segs.push(Seg {
                data: seg.data.clone(),
                start: seg.start + skip,
                end: seg.start + skip + take,
            });
            skip = 0;
            left -= take;
        }
        Some(HeapBuf {
            segs,
            l4_verdict: None,
            ip_verdict: None,
            tx_offload: None,
            rss: None,
        })
    }
    fn detach_at(&mut self, len: usize) -> Option<Self> {
        if len == 0 || len >= self.len() {
            return None;
        }
        let mut before = 0;
        for (i, seg) in self.segs.iter().enumerate() {
            before += seg.len();
            if before == len {
                let segs = self.segs.split_off(i + 1);
                return Some(HeapBuf {
                    segs,
                    l4_verdict: None,
                    ip_verdict: None,
                    tx_offload: None,
                    rss: None,
                });
            }
            if before > len {
                return None;
            }
        }
        None
    }
    fn alloc_with(pool: &HeapPool, bytes: &[u8]) -> Option<Self> {
        (bytes.len() <= pool.seg_capacity).then(|| pool.packet(bytes))
    }
    fn for_each_segment_room(&self, mut f: impl FnMut(&[u8], usize)) {
        for s in &self.segs {
            // The bytes before the view are free only when no other view holds the vector.
            let alone = Arc::strong_count(&s.data) == 1 && Arc::weak_count(&s.data) == 0;
            f(s.bytes(), if alone { s.start } else { 0 });
        }
    }
    fn prepend_copy(&mut self, bytes: &[u8]) -> bool {
        let Some(seg) = self.segs.first_mut() else {
            return false;
        };
        let Some(start) = seg.start.checked_sub(bytes.len()) else {
            return false;
        };
        let Some(data) = Arc::get_mut(&mut seg.data) else {
            return false;
        };
        data.bytes[start..seg.start].copy_from_slice(bytes);
        seg.start = start;
        self.l4_verdict = None;
        self.ip_verdict = None;
        self.tx_offload = None;
        true
    }

    fn rss_hash(&self) -> Option<u32> {
        self.rss
    }
    fn l4_csum_verdict(&self) -> Option<bool> {
        self.l4_verdict
    }
    fn set_l4_csum_verdict(&mut self, verdict: Option<bool>) {
        self.l4_verdict = verdict;
    }
    fn ip_csum_verdict(&self) -> Option<bool> {
        self.ip_verdict
    }
    fn set_ip_csum_verdict(&mut self, verdict: Option<bool>) {
        self.ip_verdict = verdict;
    }
    fn request_tx_offload(&mut self, offload: TxOffload) {
        self.tx_offload = Some(offload);
    }
}

/// A growing [`HeapBuf`] (its [`PacketBuf::Chain`]): appending to its vector of segments is
/// O(1) already, so it is the buffer itself.
#[derive(Debug)]
pub struct HeapChain(HeapBuf);

impl PacketChain for HeapChain {
    type Buf = HeapBuf;

    fn new(pkt: HeapBuf) -> Self {
        HeapChain(pkt)
    }
    fn append(&mut self, tail: HeapBuf) -> Result<(), HeapBuf> {
        self.0.chain(tail)
    }
    fn append_chain(&mut self, tail: HeapChain) -> Result<(), HeapChain> {
        self.0.chain(tail.0).map_err(HeapChain)
    }
    fn packet(&self) -> &HeapBuf {
        &self.0
    }
    fn adj(&mut self, n: usize) -> bool {
        self.0.adj(n)
    }
    fn into_packet(self) -> HeapBuf {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heap_buffers_share_and_count_like_mbufs() {
        let pool = HeapPool::new(2048);
        let mut a = HeapBuf::from_segments(&pool, &[b"hello ", b"wide ", b"world"]);
        assert_eq!((a.len(), a.num_segs(), pool.in_use()), (16, 3, 3));
        let view = a.share_range(4, 8, &pool).unwrap();
        assert_eq!(view.to_vec(), b"o wide w");
        assert!(a.head_mut().is_none(), "shared data is read-only");
        assert!(a.truncate(8));
        assert_eq!(a.to_vec(), b"hello wi");
        assert_eq!(pool.in_use(), 3, "the view keeps the third segment alive");
        drop(view);
        assert_eq!(pool.in_use(), 2);
        a.head_mut().unwrap()[0] = b'H';
        let b = pool.packet(b"!");
        a.chain(b).unwrap();
        assert!(a.adj(1));
        assert_eq!(a.to_vec(), b"ello wi!");
        drop(a);
        assert_eq!(pool.in_use(), 0);
    }
}
