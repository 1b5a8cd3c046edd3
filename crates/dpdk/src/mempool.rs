//! Packet-buffer pools.

use std::sync::Arc;

use crate::eal::{cstring, EalInner};
use crate::error::{Errno, Error, Result};
use crate::{Burst, Eal, Mbuf};

/// An `rte_pktmbuf` pool. Shared by `Arc` between the ports that receive into it and the code
/// that allocates from it.
///
/// Dropping the last `Arc` frees the pool only when every mbuf is back; otherwise the pool (and
/// the EAL with it) is deliberately leaked, so a stray mbuf can never point into freed memory.
#[derive(Debug)]
pub struct Mempool {
    raw: std::ptr::NonNull<dpdk_sys::rte_mempool>,
    name: String,
    /// Each mbuf's buffer, headroom included.
    data_room: u16,
    eal: Arc<EalInner>,
}

// SAFETY: DPDK mempools are multi-producer/multi-consumer (the default ring ops); per-lcore caches
// are indexed by the calling thread's own lcore id, so concurrent use from several threads is the
// intended use.
unsafe impl Send for Mempool {}
// SAFETY: as above; every method takes &self and is thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `count` mbufs, each with `data_room` bytes of buffer (headroom
    /// included; DPDK's default headroom is 128 B), and a per-lcore cache of `cache` mbufs.
    pub fn new(eal: &Eal, name: &str, count: u32, cache: u32, data_room: u16) -> Result<Arc<Self>> {
        let c_name = cstring(name)?;
        // SAFETY: valid name; the EAL is initialised (we hold it).
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(
                c_name.as_ptr(),
                count,
                cache,
                0,
                data_room,
                dpdk_sys::rte_socket_id() as i32,
            )
        };
        let raw = std::ptr::NonNull::new(raw).ok_or_else(|| Error::Mempool {
            name: name.to_owned(),
            errno: Errno::last(),
        })?;
        Ok(Arc::new(Self {
            raw,
            name: name.to_owned(),
            data_room,
            eal: eal.inner.clone(),
        }))
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Bytes of buffer each mbuf has, headroom included.
    pub fn data_room(&self) -> u16 {
        self.data_room
    }

    /// Bytes a fresh mbuf of this pool can hold after its headroom (DPDK reserves
    /// `RTE_PKTMBUF_HEADROOM`, 128 B, or the whole buffer when it is smaller).
    pub fn fresh_room(&self) -> usize {
        let headroom = (dpdk_sys::RTE_PKTMBUF_HEADROOM as u16).min(self.data_room);
        usize::from(self.data_room - headroom)
    }

    pub(crate) fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }

    /// Allocates one mbuf, reset and empty.
    #[inline]
    pub fn alloc(&self) -> Result<Mbuf> {
        // SAFETY: the pool is live; a non-null result is a fresh mbuf we now own.
        let m = unsafe { dpdk_sys::px_pktmbuf_alloc(self.as_ptr()) };
        std::ptr::NonNull::new(m)
            // SAFETY: fresh from the pool, owned by nobody else.
            .map(|m| unsafe { Mbuf::from_raw(m) })
            .ok_or_else(|| Error::PoolExhausted(self.name.clone()))
    }

    /// Fills `burst` up to `count` mbufs in one bulk call: all or nothing.
    pub fn alloc_bulk<const N: usize>(&self, burst: &mut Burst<N>, count: usize) -> Result<()> {
        let (ptr, spare) = burst.spare_raw();
        if count > spare {
            return Err(Error::InvalidArgument(format!(
                "asked for {count} mbufs, the burst has room for {spare}"
            )));
        }
        // SAFETY: ptr points at `spare` >= count writable slots; on success DPDK writes `count`
        // owned mbufs there, which the burst then adopts.
        let ret = unsafe { dpdk_sys::px_pktmbuf_alloc_bulk(self.as_ptr(), ptr, count as u32) };
        if ret != 0 {
            return Err(Error::PoolExhausted(self.name.clone()));
        }
        // SAFETY: the `count` slots were just initialised with owned mbufs.
        unsafe { burst.add_len(count) };
        Ok(())
    }

    /// Mbufs currently out of the pool: held by us, by a port's RX ring, or in flight.
    /// Zero when nothing leaked.
    pub fn in_use(&self) -> usize {
        // SAFETY: the pool is live.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.as_ptr()) as usize }
    }

    /// Mbufs available for allocation (per-lcore caches included).
    pub fn available(&self) -> usize {
        // SAFETY: the pool is live.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.as_ptr()) as usize }
    }
}

impl Drop for Mempool {
    fn drop(&mut self) {
        let in_use = self.in_use();
        if in_use == 0 {
            // SAFETY: no mbuf of this pool exists (in_use is 0) and no one can allocate any more:
            // this was the last reference, and ports hold an Arc to the pool they receive into.
            unsafe { dpdk_sys::rte_mempool_free(self.as_ptr()) };
        } else {
            tracing::warn!(pool = %self.name, in_use, "mempool dropped with mbufs outstanding; leaking it");
            // Keep the EAL alive for the mbufs still pointing into this pool.
            std::mem::forget(self.eal.clone());
        }
    }
}
