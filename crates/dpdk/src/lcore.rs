//! Threads the EAL knows about: lcore ids for threads Rust started.
//!
//! DPDK keys per-core state by `rte_lcore_id()`: above all the mempool's per-lcore object caches
//! (without an id, every alloc and free goes to the shared ring, with its atomic operations). The
//! EAL gives ids to its own lcores (`-l`); a thread started with `std::thread` has none until it
//! registers with `rte_thread_register`. A gateway worker registers first thing
//! ([`Eal::register_thread`]), and the id goes back to the EAL when the [`LcoreRegistration`] is
//! dropped, on that same thread.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::eal::EalInner;
use crate::error::{Errno, Error, Result};
use crate::Eal;

/// `LCORE_ID_ANY` (rte_lcore.h): the id of a thread the EAL does not know.
const LCORE_ID_ANY: u32 = u32::MAX;

/// An EAL lcore id (`0..RTE_MAX_LCORE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(pub u32);

/// The calling thread's lcore id, or `None` for a thread the EAL does not know.
pub fn current_lcore() -> Option<LcoreId> {
    // SAFETY: reads a thread-local variable; valid on any thread.
    let id = unsafe { dpdk_sys::px_lcore_id() };
    (id != LCORE_ID_ANY).then_some(LcoreId(id))
}

/// The calling thread's registration with the EAL; dropping it unregisters the thread.
///
/// Neither `Send` nor `Sync`: the lcore id belongs to the thread that registered, and
/// `rte_thread_unregister` must run there.
#[derive(Debug)]
pub struct LcoreRegistration {
    lcore: LcoreId,
    /// False when the thread was already an EAL lcore (the main thread): nothing to undo.
    registered: bool,
    _eal: Arc<EalInner>,
    _not_send: PhantomData<*const ()>,
}

impl LcoreRegistration {
    /// The lcore id the thread has while this registration lives.
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }
}

impl Drop for LcoreRegistration {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: this is the thread that registered (the type is !Send), and the EAL is
            // alive (we hold it); the thread stops using its lcore id from here on.
            unsafe { dpdk_sys::rte_thread_unregister() };
        }
    }
}

impl Eal {
    /// Registers the calling thread with the EAL (`rte_thread_register`), so that it has an lcore
    /// id and its mempool allocations use the per-lcore caches. A thread that already has an id
    /// (the main lcore) keeps it.
    ///
    /// Fails with [`Error::ThreadRegister`] when the EAL has no free lcore id left
    /// (`RTE_MAX_LCORE` counts EAL lcores and registered threads together).
    pub fn register_thread(&self) -> Result<LcoreRegistration> {
        let registration = |lcore, registered| LcoreRegistration {
            lcore,
            registered,
            _eal: self.inner.clone(),
            _not_send: PhantomData,
        };
        if let Some(lcore) = current_lcore() {
            return Ok(registration(lcore, false));
        }
        // SAFETY: the EAL is initialised (self exists); the call only touches EAL lcore tables
        // and the calling thread's TLS.
        let ret = unsafe { dpdk_sys::rte_thread_register() };
        if ret < 0 {
            return Err(Error::ThreadRegister(Errno::last()));
        }
        match current_lcore() {
            Some(lcore) => Ok(registration(lcore, true)),
            None => {
                // SAFETY: as in Drop; registration reported success, undo it.
                unsafe { dpdk_sys::rte_thread_unregister() };
                Err(Error::ThreadRegister(Errno(libc::ENOMEM)))
            }
        }
    }
}
