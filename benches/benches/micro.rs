//! Criterion micro-benchmarks of pxio's per-packet building blocks, for profiling work on the hot
//! path (`cargo bench -p pxbench --bench micro`). The end-to-end comparison with rte_gro is
//! `cargo xtask bench merge`.

#![forbid(unsafe_code)]
// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pxio::checksum::Sum;
use pxio::merge::{MergeConfig, Merger};
use pxio::toeplitz::Toeplitz;
use pxio::wire::{self, classify};
use pxio::{HeapBuf, HeapPool};

/// A 1514 B Ethernet/IPv4/TCP frame with timestamps, `seq` in its header.
fn frame(seq: u32) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: wire::ethernet::ethertype::IPV4,
    };
    let ip = wire::IpRepr::V4(wire::Ipv4Repr::new([198, 18, 0, 1], [198, 18, 0, 2]));
    let tcp = wire::TcpRepr {
        src_port: 40000,
        dst_port: 443,
        seq,
        ack: 1,
        flags: wire::tcp_flags::ACK,
        window: 65000,
        urgent: 0,
        options: &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
    };
    wire::tcp_frame(ethernet, ip, tcp, &[0x5a; 1448]).expect("a 1514 B frame")
}

fn parsing(c: &mut Criterion) {
    let f = frame(1);
    let mut g = c.benchmark_group("per packet");
    g.throughput(Throughput::Elements(1));
    g.bench_function("classify", |b| b.iter(|| classify(black_box(&f), f.len())));
    let t = Toeplitz::default();
    g.bench_function("toeplitz v4", |b| {
        b.iter(|| t.hash_v4(black_box([198, 18, 0, 1]), [198, 18, 0, 2], 40000, 443))
    });
    g.bench_function("checksum 1448 B", |b| {
        b.iter(|| Sum::of(black_box(&f[66..])))
    });
    g.finish();
}

/// The one's-complement sum the engine verifies every segment with when no NIC verdict is
/// there (`merge::Merger`, "Checksums"), in GB/s on data already in cache: a 64 B header, a
/// 1448 B segment, a 9000 B packet and a 64 KB TSO burst, and a segment's payload where it sits
/// in its frame. Issue 12's bar: 20 GB/s per core. (Criterion prints GiB/s: 1 GiB/s = 1.074
/// GB/s.)
fn checksum(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for len in [64usize, 1448, 9000, 65535] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(format!("Sum::of {len} B"), |b| {
            b.iter(|| Sum::of(black_box(&data)))
        });
    }
    // As the engine meets it: a segment's payload starts 66 B into the frame (2-byte aligned).
    let f = frame(1);
    g.throughput(Throughput::Bytes(1448));
    g.bench_function("Sum::of 1448 B payload at frame offset 66", |b| {
        b.iter(|| Sum::of(black_box(&f[66..])))
    });
    g.finish();
}

fn merging(c: &mut Criterion) {
    // One 64 KB TSO burst (45 segments) of one flow, in order, merged and emitted.
    let frames: Vec<Vec<u8>> = (0..45u32).map(|i| frame(1 + i * 1448)).collect();
    let pool = HeapPool::new(256);
    let mut g = c.benchmark_group("merge");
    g.throughput(Throughput::Elements(frames.len() as u64));
    // Without a NIC verdict the engine reads every payload to verify its checksum; with the
    // NIC's "good" it does not.
    for (name, verdict) in [
        (
            "45-segment burst, heap buffers, software checksum check",
            None,
        ),
        (
            "45-segment burst, heap buffers, NIC checksum verdict",
            Some(true),
        ),
    ] {
        g.bench_function(name, |b| {
            let cfg = MergeConfig {
                flow_capacity: 64,
                max_items: 256,
                ..MergeConfig::default()
            };
            let mut merger = Merger::<HeapBuf>::new(cfg, HeapPool::new(256)).unwrap();
            let mut out = Vec::with_capacity(64);
            let mut now = 0;
            b.iter_batched(
                || {
                    frames
                        .iter()
                        .map(|f| {
                            let mut p = pool.packet(f);
                            p.set_l4_csum_verdict(verdict);
                            p
                        })
                        .collect::<Vec<_>>()
                },
                |pkts| {
                    now += 1_000_000;
                    merger.rx_burst(pkts, now, &mut out);
                    merger.flush_all(now, &mut out);
                    out.clear();
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, parsing, checksum, merging);
criterion_main!(benches);
