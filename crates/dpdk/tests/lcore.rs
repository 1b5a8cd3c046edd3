//! Worker threads registered with the EAL get an lcore id of their own (so the mempool's
//! per-lcore caches serve them), and give it back when the registration is dropped.

use std::collections::HashSet;
use std::sync::{Arc, Barrier};

use dpdk::testing::{assert_no_leaks, eal};
use dpdk::{current_lcore, Mempool};

#[test]
fn a_registered_thread_has_a_valid_lcore_id_until_it_unregisters() {
    let eal = eal();
    let main = current_lcore().expect("the thread that booted the EAL is the main lcore");
    // The main lcore keeps its id; registering it again changes nothing.
    assert_eq!(eal.register_thread().unwrap().lcore(), main);
    assert_eq!(current_lcore(), Some(main));

    // A pool with per-lcore caches, used from the registered threads.
    let pool = Mempool::new(eal, "lcore_cache_pool", 1023, 64, 2048).unwrap();
    // Both threads hold their registration at the same time, so their ids must differ.
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (barrier, pool) = (barrier.clone(), pool.clone());
            std::thread::spawn(move || {
                assert_eq!(current_lcore(), None, "a new thread has no lcore id");
                let registration = eal.register_thread().expect("rte_thread_register");
                let id = registration.lcore();
                assert_eq!(
                    current_lcore(),
                    Some(id),
                    "rte_lcore_id() is the registered id"
                );
                let mbufs: Vec<_> = (0..32).map(|_| pool.alloc().unwrap()).collect();
                assert_eq!(mbufs.len(), 32);
                drop(mbufs);
                barrier.wait();
                drop(registration);
                assert_eq!(current_lcore(), None, "the id went back to the EAL");
                id.0
            })
        })
        .collect();
    let ids: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let distinct: HashSet<u32> = ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        2,
        "two live registrations, two ids: {ids:?}"
    );
    assert!(!distinct.contains(&main.0), "{ids:?} vs main {}", main.0);
    // Mbufs freed into the threads' caches count as available, not leaked.
    assert_no_leaks(&pool);
}
