//! The merge engine on arbitrary frames at arbitrary times: no panic, every packet accounted
//! for, nothing leaked after a flush.
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxio::merge::{MergeConfig, Merger};
use pxio::{HeapBuf, HeapPool, PacketBuf};

fuzz_target!(|data: &[u8]| {
    let pool = HeapPool::new(256);
    let cfg = MergeConfig {
        flow_capacity: 8,
        max_items_per_flow: 2,
        max_items: 64,
        ..MergeConfig::default()
    };
    // A fixed flow-table seed: the same input takes the same path (libFuzzer needs that).
    let mut merger = Merger::<HeapBuf>::with_hash_seed(cfg, HeapPool::new(256), 0).unwrap();
    let mut out = Vec::new();
    let mut now = 0u64;
    // Frames are length-prefixed: [len: u8][time step: u8][bytes...].
    let mut rest = data;
    while rest.len() >= 2 {
        let (len, step) = (usize::from(rest[0]) * 8, u64::from(rest[1]) * 1000);
        rest = &rest[2..];
        let frame = &rest[..len.min(rest.len())];
        rest = &rest[frame.len()..];
        now += step;
        merger.poll(now, &mut out);
        merger.rx_burst([pool.packet(frame)], now, &mut out);
    }
    merger.flush_all(now, &mut out);
    assert_eq!(merger.stats().held_items, 0);
    let emitted = out.len();
    drop(out);
    assert!(emitted as u64 <= merger.stats().packets_in + merger.stats().cuts);
    drop(merger);
    assert_eq!(pool.in_use(), 0);
    let _ = PacketBuf::len(&pool.packet(&[]));
});
