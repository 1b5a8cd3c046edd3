//! Test support: one EAL per test process, vdevs on demand, pools, and the leak check.
//!
//! DPDK allows one EAL per process, and `cargo test` runs a file's tests as threads of one
//! process. [`eal`] boots it once (`--no-huge --no-pci --no-shconf`: DPDK 22.11 refuses
//! `--in-memory` with `--no-huge`, and `--no-shconf` gives the same "no shared files"); each test
//! then hot-plugs the vdevs it needs under unique names with [`vdev`], so tests stay independent.
//!
//! Compiled only with the `testing` cargo feature (and for this crate's own unit tests): tests and
//! labs enable it in their dev-dependencies; the gateway's build never contains it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use crate::{Eal, EalBuilder, Mempool, PortId};

/// The EAL arguments tests use: [`EalBuilder::no_hardware`].
pub fn test_eal_builder() -> EalBuilder {
    EalBuilder::no_hardware("px-test")
}

/// The process's EAL, booted on first use.
///
/// # Panics
/// When the EAL cannot start (not root, say): a test cannot go on without it.
pub fn eal() -> &'static Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        test_eal_builder()
            .init()
            .unwrap_or_else(|e| panic!("test EAL failed to start (the tests need root): {e}"))
    })
}

/// A name unique within this process, for pools, rings and vdevs.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{prefix}{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Hot-plugs a vdev of `driver` (e.g. `net_tap`) with `args`, under a unique name.
///
/// # Panics
/// When DPDK refuses the device.
pub fn vdev(driver: &str, args: &str) -> PortId {
    let name = unique(driver);
    eal()
        .vdev(&name, args)
        .unwrap_or_else(|e| panic!("vdev {name},{args}: {e}"))
}

/// A pool of `count` mbufs with `data_room` bytes each and no per-lcore cache, so
/// [`Mempool::in_use`] is exact whichever thread the test runs on.
///
/// # Panics
/// When the pool cannot be created.
pub fn pool(count: u32, data_room: u16) -> Arc<Mempool> {
    let name = unique("pool");
    Mempool::new(eal(), &name, count, 0, data_room)
        .unwrap_or_else(|e| panic!("mempool {name}: {e}"))
}

/// The leak check: every mbuf of `pool` is back. Call it after dropping the test's mbufs and
/// ports.
///
/// # Panics
/// With the number of mbufs still out.
#[track_caller]
pub fn assert_no_leaks(pool: &Mempool) {
    let in_use = pool.in_use();
    assert_eq!(
        in_use,
        0,
        "mempool {} has {in_use} mbufs still in use: leaked or not yet returned",
        pool.name()
    );
}
