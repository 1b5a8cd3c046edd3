//! A fixed-capacity array of mbufs: what `rx_burst` fills and `tx_burst` drains, without
//! allocating.

use std::mem::MaybeUninit;

use crate::Mbuf;

/// Up to `N` owned mbufs, stored inline (no heap). Dropping the burst frees what it still holds.
pub struct Burst<const N: usize = 32> {
    slots: [MaybeUninit<Mbuf>; N],
    len: usize,
}

impl<const N: usize> Default for Burst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Burst<N> {
    /// An empty burst.
    pub const fn new() -> Self {
        Self {
            slots: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether it is at capacity.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// `N`.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Adds an mbuf at the end, or gives it back when full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.slots[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` was initialised and is now outside the live range, so it is read once.
        Some(unsafe { self.slots[self.len].assume_init_read() })
    }

    /// The held mbufs, in order.
    #[inline]
    pub fn as_slice(&self) -> &[Mbuf] {
        // SAFETY: the first `len` slots are initialised, and MaybeUninit<Mbuf> has Mbuf's layout.
        unsafe { std::slice::from_raw_parts(self.slots.as_ptr().cast::<Mbuf>(), self.len) }
    }

    /// The held mbufs, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in as_slice, with exclusive access through &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast::<Mbuf>(), self.len) }
    }

    /// Takes every mbuf out, in order; the burst is empty afterwards. Mbufs the iterator does not
    /// yield are freed when it is dropped.
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = self.len;
        self.len = 0;
        Drain {
            burst: self,
            next: 0,
            end,
        }
    }

    /// Frees every mbuf held.
    pub fn clear(&mut self) {
        drop(self.drain());
    }

    /// Pointer to the first free slot and how many are free, for DPDK to fill.
    #[inline]
    pub(crate) fn spare_raw(&mut self) -> (*mut *mut dpdk_sys::rte_mbuf, usize) {
        // SAFETY: len <= N, so the pointer is in bounds (or one past the end when full).
        let ptr = unsafe { self.slots.as_mut_ptr().add(self.len) };
        (ptr.cast(), N - self.len)
    }

    /// Pointer to the first held mbuf, for DPDK to read.
    #[inline]
    pub(crate) fn as_raw(&mut self) -> *mut *mut dpdk_sys::rte_mbuf {
        self.slots.as_mut_ptr().cast()
    }

    /// Adopts `n` mbufs DPDK wrote into the spare slots.
    ///
    /// # Safety
    /// The `n` slots after `len` must hold valid mbufs owned by nobody else.
    #[inline]
    pub(crate) unsafe fn add_len(&mut self, n: usize) {
        debug_assert!(self.len + n <= N);
        self.len += n;
    }

    /// Forgets the first `n` mbufs (DPDK took them) and moves the rest to the front.
    #[inline]
    pub(crate) fn consume_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        let rest = self.len - n;
        // SAFETY: both ranges are inside the slots; ptr::copy handles the overlap. The first n
        // entries are no longer ours, so overwriting them leaks nothing.
        unsafe {
            let base = self.slots.as_mut_ptr();
            std::ptr::copy(base.add(n), base, rest);
        }
        self.len = rest;
    }

    /// Keeps the first `n` mbufs and forgets the rest (DPDK took them). DPDK may have rewritten
    /// the slot array in place (as `rte_gro_reassemble` does when it compacts what it did not
    /// keep to the front).
    ///
    /// # Safety
    /// After DPDK's call, the first `n` slots must hold mbufs owned by nobody else, and every
    /// mbuf the burst held before the call must now either be one of them or be owned by DPDK.
    #[inline]
    pub(crate) unsafe fn keep_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        self.len = n;
    }
}

impl<const N: usize> Drop for Burst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

impl<const N: usize> std::fmt::Debug for Burst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Iterator returned by [`Burst::drain`].
pub struct Drain<'a, const N: usize> {
    burst: &'a mut Burst<N>,
    next: usize,
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;

    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.next == self.end {
            return None;
        }
        // SAFETY: slots [next, end) are initialised and were detached from the burst (len = 0);
        // each is read exactly once.
        let m = unsafe { self.burst.slots[self.next].assume_init_read() };
        self.next += 1;
        Some(m)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        for m in self.by_ref() {
            drop(m);
        }
    }
}
