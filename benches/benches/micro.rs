//! Criterion micro-benchmarks of pxio's per-packet building blocks, for profiling work on the hot
//! path (`cargo bench -p pxbench --bench micro`). The end-to-end comparison with rte_gro is
//! `cargo xtask bench merge`.

#![forbid(unsafe_code)]
// criterion_group! generates an undocumented function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pxio::caravan::{self, CaravanBuilder, CaravanConfig};
use pxio::checksum::Sum;
use pxio::merge::{MergeConfig, Merger};
use pxio::toeplitz::Toeplitz;
use pxio::wire::{self, classify, Parsed};
use pxio::{HeapBuf, HeapPool, PacketBuf};

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
/// in its frame. The bar: 20 GB/s per core. (Criterion prints GiB/s: 1 GiB/s = 1.074 GB/s.)
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

/// A 1242 B Ethernet/IP/UDP datagram (1200 B of payload) of one flow, IPv4 or IPv6.
fn datagram(v6: bool, fill: u8) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: 0,
    };
    let ip = if v6 {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        let mut b = a;
        (a[15], b[15]) = (1, 2);
        wire::IpRepr::V6(wire::Ipv6Repr::new(a, b))
    } else {
        wire::IpRepr::V4(wire::Ipv4Repr {
            dont_frag: true,
            ..wire::Ipv4Repr::new([198, 18, 0, 1], [198, 18, 0, 2])
        })
    };
    let udp = wire::UdpRepr {
        src_port: 5000,
        dst_port: 6000,
    };
    wire::udp_frame(ethernet, ip, udp, &[fill; 1200]).expect("a datagram")
}

/// Parse once: seven datagrams of one flow packed as pxgw's pipeline packs them (the first held,
/// `can_pair` with the second, `start` and `push`, then `push` of the rest), every datagram parsed
/// once on receive as the pipeline does; the caravan builder either classifies each datagram again
/// (the entry points without a parse) or takes the pipeline's parse (the `_parsed` ones). Then the
/// caravan unpacked, with and without its parse. Per datagram.
fn caravans(c: &mut Criterion) {
    const N: usize = 7;
    let pool = HeapPool::new(256);
    let cfg = CaravanConfig::default();
    let mut g = c.benchmark_group("caravan");
    g.throughput(Throughput::Elements(N as u64));
    for v6 in [false, true] {
        let family = if v6 { "IPv6" } else { "IPv4" };
        let frames: Vec<Vec<u8>> = (0..N).map(|i| datagram(v6, i as u8)).collect();
        let input = || frames.iter().map(|f| pool.packet(f)).collect::<Vec<_>>();
        for one_parse in [false, true] {
            let how = if one_parse {
                "one parse"
            } else {
                "classify again"
            };
            g.bench_function(format!("pack {N} {family} datagrams, {how}"), |b| {
                b.iter_batched(
                    input,
                    |pkts| {
                        let mut pkts = pkts.into_iter();
                        let (first, second) = (pkts.next().unwrap(), pkts.next().unwrap());
                        let p1 = Parsed::of(black_box(first.head()), first.len());
                        let p2 = Parsed::of(black_box(second.head()), second.len());
                        let mut builder = if one_parse {
                            caravan::packable_parsed(&first, &p1, &cfg).unwrap();
                            caravan::can_pair_parsed(&first, &p1, &second, &p2, &cfg).unwrap();
                            let mut b = CaravanBuilder::start_parsed(first, &p1, cfg, &pool)
                                .unwrap_or_else(|_| panic!("start"));
                            b.push_parsed(second, &p2)
                                .unwrap_or_else(|_| panic!("push"));
                            b
                        } else {
                            caravan::packable(&first, &cfg).unwrap();
                            caravan::can_pair(&first, &second, &cfg).unwrap();
                            let mut b = CaravanBuilder::start(first, cfg, &pool)
                                .unwrap_or_else(|_| panic!("start"));
                            b.push(second).unwrap_or_else(|_| panic!("push"));
                            b
                        };
                        for pkt in pkts {
                            let p = Parsed::of(black_box(pkt.head()), pkt.len());
                            let pushed = if one_parse {
                                builder.push_parsed(pkt, &p)
                            } else {
                                builder.push(pkt)
                            };
                            pushed.unwrap_or_else(|_| panic!("push"));
                        }
                        builder.finish()
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        // The checks alone, without a buffer allocated: whether two datagrams can travel
        // together (two classifications, or none).
        let (a, b) = (pool.packet(&frames[0]), pool.packet(&frames[1]));
        let (pa, pb) = (Parsed::of(a.head(), a.len()), Parsed::of(b.head(), b.len()));
        g.throughput(Throughput::Elements(1));
        g.bench_function(format!("can_pair {family}, classify again"), |bench| {
            bench.iter(|| caravan::can_pair(black_box(&a), black_box(&b), &cfg))
        });
        g.bench_function(format!("can_pair {family}, one parse"), |bench| {
            bench.iter(|| {
                caravan::can_pair_parsed(black_box(&a), black_box(&pa), &b, black_box(&pb), &cfg)
            })
        });
        g.throughput(Throughput::Elements(N as u64));
        // The caravan of the N datagrams, to unpack.
        let packed = {
            let mut pkts = input().into_iter();
            let mut b = CaravanBuilder::start(pkts.next().unwrap(), cfg, &pool)
                .unwrap_or_else(|_| panic!("start"));
            for pkt in pkts {
                b.push(pkt).unwrap_or_else(|_| panic!("push"));
            }
            b.finish()
        };
        let segments: Vec<Vec<u8>> = {
            let mut v = Vec::new();
            packed.for_each_segment(|s| v.push(s.to_vec()));
            v
        };
        for one_parse in [false, true] {
            let how = if one_parse {
                "one parse"
            } else {
                "classify again"
            };
            g.bench_function(format!("unpack {N} {family} datagrams, {how}"), |b| {
                let mut out = Vec::with_capacity(N);
                b.iter_batched(
                    || {
                        let parts: Vec<&[u8]> = segments.iter().map(Vec::as_slice).collect();
                        HeapBuf::from_segments(&pool, &parts)
                    },
                    |pkt| {
                        let p = Parsed::of(black_box(pkt.head()), pkt.len());
                        let n = if one_parse {
                            caravan::unpack_parsed(pkt, &p, &cfg, &pool, &mut out)
                        } else {
                            caravan::unpack(pkt, &cfg, &pool, &mut out)
                        };
                        assert_eq!(n.ok(), Some(N));
                        out.clear();
                    },
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

criterion_group!(benches, parsing, checksum, merging, caravans);
criterion_main!(benches);
