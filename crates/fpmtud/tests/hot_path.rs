//! The per-packet PMTU lookup (SIGCOMM'26 §5.2 "Fast PMTU lookup") allocates nothing, whether
//! the filter rejects the key, the table holds it, or the filter gives a false positive.
//! Proven with allocation-counter's counting global allocator.

use std::net::{IpAddr, Ipv4Addr};

use fpmtud::{CacheConfig, PmtuCache};

fn dst(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xc612_0000 + i))
}

#[test]
fn lookups_make_no_heap_allocation() {
    let mut cache = PmtuCache::new(CacheConfig::default()).unwrap();
    for i in 0..4000 {
        cache.insert(dst(i), 1400, 0).unwrap();
    }
    let mut sum = 0u64;
    let info = allocation_counter::measure(|| {
        for i in 0..100_000 {
            sum += u64::from(cache.lookup(&dst(i), 1));
            sum += u64::from(cache.get(&dst(i + 7), 1).unwrap_or(1500));
        }
    });
    let s = cache.stats();
    assert!(
        s.filter_negatives > 0 && s.false_positives > 0 && s.table_probes > s.false_positives,
        "the run exercised misses, hits and false positives: {s:?}"
    );
    assert!(sum > 0);
    assert_eq!(info.count_total, 0, "heap allocations on the lookup path");
}
