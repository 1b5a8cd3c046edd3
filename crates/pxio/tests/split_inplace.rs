//! The zero-share split's in-place headers: a piece whose first buffer is the packet's alone
//! and has headroom for the header gets it written there (one buffer, no header allocated);
//! every other piece gets a header buffer in front. Both ways must give the same bytes and
//! metadata, running out of header buffers must leave the packet whole, and no buffer may leak.
//! On heap buffers and on real mbufs under an EAL.

mod common;

use std::ops::Range;

use common::{tcp_frame, FlowSpec, SegFlags};
use proptest::prelude::*;
use pxio::split::{split_tcp, SplitError, SplitOffloads};
use pxio::{HeapBuf, HeapPool, PacketBuf};

/// How the first buffer of a later piece is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// No headroom (as a buffer filled from its start).
    NoRoom,
    /// One byte of headroom short of the header.
    Short,
    /// Headroom for the header (a received segment whose header the merge stripped).
    Room,
    /// Headroom, but the buffer is shared with a clone or view still alive.
    Shared,
}

impl Head {
    fn of(code: u8) -> Self {
        [Head::NoRoom, Head::Short, Head::Room, Head::Shared][usize::from(code % 4)]
    }
}

/// One buffer of the packet to build: its bytes of the frame, its headroom, whether a clone
/// shares it.
#[derive(Clone, Debug)]
struct Part {
    bytes: Range<usize>,
    room: usize,
    shared: bool,
}

/// A packet cut on its piece boundaries (what an aligned iMTU gives a merged packet), each
/// piece in one or two buffers, optionally an empty buffer at one cut; `heads[k]` says how
/// piece k's first buffer is made. Returns the buffers and, per piece, whether it can take its
/// header in place. With `plain`, every buffer has no headroom and none is shared: the
/// allocating path for every piece.
#[allow(clippy::too_many_arguments)]
fn layout(
    frame_len: usize,
    headers: usize,
    mss: usize,
    heads: &[u8],
    subcuts: &[Option<usize>],
    empty_at: Option<usize>,
    extra: usize,
    plain: bool,
) -> (Vec<Part>, Vec<bool>) {
    let pieces = (frame_len - headers).div_ceil(mss);
    let roomy = if plain { 0 } else { headers + extra };
    let (mut parts, mut eligible) = (Vec::new(), vec![false; pieces]);
    for k in 0..pieces {
        let start = if k == 0 { 0 } else { headers + k * mss };
        let end = (headers + (k + 1) * mss).min(frame_len);
        let head = if k == 0 {
            Head::Room
        } else {
            Head::of(heads[k % heads.len()])
        };
        let (room, shared) = match head {
            _ if plain => (0, false),
            Head::NoRoom => (0, false),
            Head::Short => (headers - 1, false),
            Head::Room => (headers + extra, false),
            Head::Shared => (headers + extra, true),
        };
        eligible[k] = k > 0 && !plain && head == Head::Room;
        let mut from = start;
        if k > 0 && empty_at.is_some_and(|e| e % pieces == k) {
            // An empty buffer opens the piece: it is the one that takes the header. (A heap
            // buffer cannot share an empty range: one without room stands in for shared.)
            parts.push(Part {
                bytes: start..start,
                room: if shared { 0 } else { room },
                shared: false,
            });
        } else {
            // The piece's first buffer takes the header; the others may have room too (a bug
            // that looked at the wrong buffer would show in the segment counts).
            let p0 = start.max(headers);
            let cut = subcuts[k % subcuts.len()]
                .filter(|_| end - p0 >= 2)
                .map(|c| p0 + 1 + c % (end - p0 - 1));
            if let Some(cut) = cut {
                parts.push(Part {
                    bytes: start..cut,
                    room,
                    shared,
                });
                from = cut;
            } else {
                parts.push(Part {
                    bytes: start..end,
                    room,
                    shared,
                });
                continue;
            }
        }
        parts.push(Part {
            bytes: from..end,
            room: roomy,
            shared: false,
        });
    }
    (parts, eligible)
}

/// Buffers a piece of `eligible[i]` should have: its own, plus a header buffer unless in place.
fn expected_segs(parts: &[Part], headers: usize, mss: usize, eligible: &[bool]) -> Vec<usize> {
    let mut segs = vec![0; eligible.len()];
    for p in parts {
        // Which piece a buffer belongs to: the one its first byte (or, empty, its place) is in.
        let k = p.bytes.start.saturating_sub(headers) / mss;
        segs[k.min(eligible.len() - 1)] += 1;
    }
    for (k, s) in segs.iter_mut().enumerate() {
        if k > 0 && !eligible[k] {
            *s += 1;
        }
    }
    segs
}

fn flow(v6: bool, vlan: bool) -> FlowSpec {
    FlowSpec {
        v6,
        id: 7,
        sport: 8080,
        dport: 40000,
        isn: u32::MAX - 5000,
        ack: 12,
        df: true,
        ttl: 63,
        vlan: if vlan { vec![42] } else { Vec::new() },
        ..FlowSpec::default()
    }
}

/// What one split gave: each piece's bytes, buffers and metadata.
#[derive(Debug, PartialEq, Eq)]
struct Piece {
    bytes: Vec<u8>,
    l4_verdict: Option<bool>,
    ip_verdict: Option<bool>,
    extra: String,
}

/// A heap buffer holding `frame[part.bytes]` behind `part.room` bytes of junk headroom.
fn heap_part(pool: &HeapPool, frame: &[u8], part: &Part, keep: &mut Vec<HeapBuf>) -> HeapBuf {
    let mut bytes = vec![0xee; part.room];
    bytes.extend_from_slice(&frame[part.bytes.clone()]);
    let mut b = pool.packet(&bytes);
    assert!(b.adj(part.room));
    if part.shared {
        keep.push(
            b.share_range(0, b.len(), pool)
                .expect("shared parts are not empty"),
        );
    }
    b
}

fn heap_packet(pool: &HeapPool, frame: &[u8], parts: &[Part], keep: &mut Vec<HeapBuf>) -> HeapBuf {
    let mut pkt = heap_part(pool, frame, &parts[0], keep);
    for p in &parts[1..] {
        pkt.chain(heap_part(pool, frame, p, keep)).unwrap();
    }
    pkt
}

fn heap_pieces(out: &[HeapBuf]) -> Vec<Piece> {
    out.iter()
        .map(|p| Piece {
            bytes: p.to_vec(),
            l4_verdict: p.l4_csum_verdict(),
            ip_verdict: p.ip_csum_verdict(),
            extra: format!("{:?}", p.requested_tx_offload()),
        })
        .collect()
}

/// The inputs every case draws.
#[derive(Clone, Debug)]
struct Case {
    v6: bool,
    vlan: bool,
    mtu: u16,
    pieces: usize,
    short_by: usize,
    flags: SegFlags,
    checksum_offload: bool,
    trusted: bool,
    heads: Vec<u8>,
    subcuts: Vec<Option<usize>>,
    empty_at: Option<usize>,
    extra: usize,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            prop::sample::select(vec![1280u16, 1400, 1500, 4000]),
        ),
        (2usize..=6, any::<usize>()),
        (any::<bool>(), any::<bool>(), prop::option::of(0u16..9000)),
        (any::<bool>(), any::<bool>()),
        prop::collection::vec(any::<u8>(), 1..7),
        prop::collection::vec(prop::option::of(any::<usize>()), 1..7),
        prop::option::weighted(0.2, any::<usize>()),
        0usize..48,
    )
        .prop_map(
            |(
                (v6, vlan, mtu),
                (pieces, short_by),
                (psh, fin, urg),
                (co, tr),
                heads,
                subcuts,
                empty_at,
                extra,
            )| Case {
                v6,
                vlan,
                mtu,
                pieces,
                short_by,
                flags: SegFlags {
                    psh,
                    fin,
                    urg,
                    ..SegFlags::default()
                },
                checksum_offload: co,
                trusted: tr,
                heads,
                subcuts,
                empty_at,
                extra,
            },
        )
}

impl Case {
    /// The frame, its header bytes and the MSS.
    fn frame(&self) -> (Vec<u8>, usize, usize) {
        let f = flow(self.v6, self.vlan);
        let l3_l4 = if self.v6 { 40 } else { 20 } + common::TCP_LEN;
        let mss = usize::from(self.mtu) - l3_l4;
        // The last piece is 1..=mss bytes.
        let len = self.pieces * mss - self.short_by % mss;
        let payload: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        let frame = tcp_frame(&f, f.isn, 4000, 9, self.flags, &payload);
        let headers = frame.len() - len;
        (frame, headers, mss)
    }

    fn layout(
        &self,
        headers: usize,
        mss: usize,
        frame_len: usize,
        plain: bool,
    ) -> (Vec<Part>, Vec<bool>) {
        layout(
            frame_len,
            headers,
            mss,
            &self.heads,
            &self.subcuts,
            self.empty_at,
            self.extra,
            plain,
        )
    }

    fn offloads(&self) -> SplitOffloads {
        SplitOffloads {
            tso: false,
            checksum: self.checksum_offload,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// On heap buffers: the pieces that can take their header in place are single buffers
    /// (plus whatever else of theirs was chained), the others have a header buffer in front,
    /// and every piece is byte for byte (and verdict for verdict) what the allocating path
    /// gives. With no header buffer to be had, the split succeeds when every piece can do
    /// without, and otherwise gives the packet back whole.
    #[test]
    fn in_place_headers_give_the_allocating_paths_pieces_on_heap_buffers(c in case()) {
        let (frame, headers, mss) = c.frame();
        let pool = HeapPool::new(256);
        let reference = {
            let (parts, _) = c.layout(headers, mss, frame.len(), true);
            let mut keep = Vec::new();
            let mut pkt = heap_packet(&pool, &frame, &parts, &mut keep);
            pkt.set_l4_csum_verdict(c.trusted.then_some(true));
            let mut out = Vec::new();
            let n = split_tcp(pkt, c.mtu, c.offloads(), &pool, &mut out).map_err(|(e, _)| e).unwrap();
            prop_assert_eq!(n, c.pieces);
            prop_assert!(out[1..].iter().all(|p| p.num_segs() >= 2), "no room: headers in front");
            heap_pieces(&out)
        };
        prop_assert_eq!(pool.in_use(), 0);
        let (parts, eligible) = c.layout(headers, mss, frame.len(), false);
        let needed = eligible[1..].iter().filter(|e| !**e).count();
        // Once with headers to be had, once with none (`alloc_with` refuses every header).
        for starved in [false, true] {
            let headers_pool = if starved { HeapPool::new(headers - 1) } else { HeapPool::new(256) };
            let mut keep = Vec::new();
            let mut pkt = heap_packet(&headers_pool, &frame, &parts, &mut keep);
            pkt.set_l4_csum_verdict(c.trusted.then_some(true));
            let (segs, before) = (pkt.num_segs(), headers_pool.in_use());
            let mut out = Vec::new();
            match split_tcp(pkt, c.mtu, c.offloads(), &headers_pool, &mut out) {
                Ok(n) => {
                    prop_assert!(!starved || needed == 0, "{} pieces needed a header buffer", needed);
                    prop_assert_eq!(n, c.pieces);
                    let segs: Vec<usize> = out.iter().map(PacketBuf::num_segs).collect();
                    prop_assert_eq!(segs, expected_segs(&parts, headers, mss, &eligible));
                    // The views kept alive hold no segment of their own (they share the data).
                    prop_assert_eq!(headers_pool.in_use(), parts.len() + needed, "one header per piece without room");
                    prop_assert_eq!(&heap_pieces(&out), &reference);
                }
                Err((e, back)) => {
                    prop_assert!(starved && needed > 0, "refused: {:?}", e);
                    prop_assert_eq!(e, SplitError::PoolExhausted);
                    prop_assert!(out.is_empty());
                    prop_assert_eq!((back.num_segs(), back.to_vec()), (segs, frame.clone()), "the packet back whole");
                    prop_assert_eq!(headers_pool.in_use(), before, "nothing taken");
                }
            }
            drop((out, keep));
            prop_assert_eq!(headers_pool.in_use(), 0, "every buffer freed once");
        }
    }
}

/// The case `cargo xtask bench nf` measures: every later piece a received segment whose header the merge
/// stripped. Each piece is one buffer and no header buffer is taken, IPv4 and IPv6.
#[test]
fn a_merged_packet_splits_into_its_own_buffers() {
    for (v6, mtu) in [(false, 1500u16), (true, 1500), (false, 4000), (true, 1400)] {
        let c = Case {
            v6,
            vlan: false,
            mtu,
            pieces: 5,
            short_by: 100,
            flags: SegFlags {
                psh: true,
                ..SegFlags::default()
            },
            checksum_offload: false,
            trusted: false,
            heads: vec![2],
            subcuts: vec![None],
            empty_at: None,
            extra: 0,
        };
        let (frame, headers, mss) = c.frame();
        let (parts, eligible) = c.layout(headers, mss, frame.len(), false);
        assert!(eligible[1..].iter().all(|e| *e));
        // No header buffer to be had: none is needed.
        let pool = HeapPool::new(0);
        let pkt = heap_packet(&pool, &frame, &parts, &mut Vec::new());
        let mut out = Vec::new();
        assert_eq!(
            split_tcp(pkt, mtu, c.offloads(), &pool, &mut out).map_err(|(e, _)| e),
            Ok(5)
        );
        assert!(out.iter().all(|p| p.num_segs() == 1), "v6 {v6} mtu {mtu}");
        assert_eq!(pool.in_use(), 5, "the packet's five buffers, nothing else");
        for (k, p) in out.iter().enumerate() {
            let (_, payload, valid, _) = common::tcp_verdict(&p.to_vec()).unwrap();
            assert!(valid, "piece {k}");
            let at = headers + k * mss;
            assert_eq!(payload, frame[at..(at + mss).min(frame.len())]);
        }
        drop(out);
        assert_eq!(pool.in_use(), 0);
    }
}

#[cfg(feature = "dpdk")]
mod on_mbufs {
    use super::*;
    use dpdk::testing::{assert_no_leaks, pool};
    use dpdk::{Mbuf, Mempool};

    /// DPDK's default headroom (`RTE_PKTMBUF_HEADROOM`), where a fresh mbuf's data starts.
    const HEADROOM: usize = 128;

    /// An mbuf holding `frame[part.bytes]` at headroom `part.room`, carrying what a NIC leaves
    /// on a received frame (checksum verdicts, RSS hash, packet type, header lengths): an
    /// in-place piece must not keep any of it.
    fn mbuf_part(rx: &Mempool, frame: &[u8], part: &Part, keep: &mut Vec<Mbuf>) -> Mbuf {
        let mut m = rx.alloc().unwrap();
        if part.room < HEADROOM {
            m.prepend(HEADROOM - part.room).unwrap();
            m.truncate(0).unwrap();
        } else {
            m.extend_from_slice(&vec![0xee; part.room - HEADROOM])
                .unwrap();
            m.adj(part.room - HEADROOM).unwrap();
        }
        assert_eq!(m.headroom(), part.room);
        m.extend_from_slice(&frame[part.bytes.clone()]).unwrap();
        m.mark_rx_checksums_good();
        m.set_rss_hash(0x5eed);
        m.set_packet_type(dpdk::ptype::L2_ETHER | dpdk::ptype::L3_IPV4 | dpdk::ptype::L4_TCP);
        m.set_header_lens(14, 20, 32);
        if part.shared {
            keep.push(m.try_clone(rx).unwrap());
        }
        m
    }

    fn mbuf_packet(
        rx: &Mempool,
        frame: &[u8],
        parts: &[Part],
        trusted: bool,
        keep: &mut Vec<Mbuf>,
    ) -> Mbuf {
        let mut pkt = mbuf_part(rx, frame, &parts[0], keep);
        PacketBuf::set_l4_csum_verdict(&mut pkt, trusted.then_some(true));
        PacketBuf::set_ip_csum_verdict(&mut pkt, None);
        for p in &parts[1..] {
            pkt.chain(mbuf_part(rx, frame, p, keep))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        pkt
    }

    fn mbuf_pieces(out: &[Mbuf]) -> Vec<Piece> {
        out.iter()
            .map(|m| Piece {
                bytes: m.to_vec(),
                l4_verdict: PacketBuf::l4_csum_verdict(m),
                ip_verdict: PacketBuf::ip_csum_verdict(m),
                extra: format!(
                    "ol_flags {:#x} lens {:?} ptype {:#x} rss {:?} len {}",
                    m.ol_flags(),
                    m.header_lens(),
                    m.packet_type(),
                    m.rss_hash(),
                    m.len()
                ),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// The same on real mbufs: in-place pieces are byte for byte and flag for flag what
        /// fresh header mbufs give (the received mbuf's RX flags, RSS hash, packet type and
        /// header lengths gone), the header pool gives exactly one mbuf per piece without
        /// room, one fewer than that refuses the split and leaves the packet whole, and both
        /// pools are whole again afterwards.
        #[test]
        fn in_place_headers_give_the_allocating_paths_pieces_on_mbufs(c in case()) {
            let rx = pool(256, 4600);
            let (frame, headers, mss) = c.frame();
            let reference = {
                let (parts, _) = c.layout(headers, mss, frame.len(), true);
                let hdrs = pool(16, 256);
                let pkt = mbuf_packet(&rx, &frame, &parts, c.trusted, &mut Vec::new());
                let mut out = Vec::new();
                let n = split_tcp(pkt, c.mtu, c.offloads(), &hdrs, &mut out).map_err(|(e, _)| e).unwrap();
                prop_assert_eq!(n, c.pieces);
                prop_assert_eq!(hdrs.in_use(), c.pieces - 1);
                let pieces = mbuf_pieces(&out);
                drop(out);
                assert_no_leaks(&hdrs);
                pieces
            };
            assert_no_leaks(&rx);
            let (parts, eligible) = c.layout(headers, mss, frame.len(), false);
            let needed = eligible[1..].iter().filter(|e| !**e).count();
            // One header mbuf short (when any is needed): refused, the packet back whole.
            if needed > 0 {
                // A pool of `needed` with one mbuf held elsewhere (DPDK has no empty pools).
                let hdrs = pool(needed as u32, 256);
                let held = hdrs.alloc().unwrap();
                let mut keep = Vec::new();
                let pkt = mbuf_packet(&rx, &frame, &parts, c.trusted, &mut keep);
                let segs = pkt.num_segs();
                let mut out = Vec::new();
                let Err((e, back)) = split_tcp(pkt, c.mtu, c.offloads(), &hdrs, &mut out) else {
                    panic!("{needed} pieces needed a header, the pool had one fewer");
                };
                prop_assert_eq!(e, SplitError::PoolExhausted);
                prop_assert!(out.is_empty());
                prop_assert_eq!((back.num_segs(), back.to_vec()), (segs, frame.clone()));
                prop_assert_eq!(hdrs.in_use(), 1, "nothing taken but the held one");
                prop_assert_eq!(rx.in_use(), parts.len() + keep.len(), "nothing freed");
                drop((back, keep, held));
                assert_no_leaks(&hdrs);
                assert_no_leaks(&rx);
            }
            // Exactly as many header mbufs as pieces without room: enough.
            let hdrs = pool(needed.max(1) as u32, 256);
            let mut keep = Vec::new();
            let pkt = mbuf_packet(&rx, &frame, &parts, c.trusted, &mut keep);
            let mut out = Vec::new();
            let n = split_tcp(pkt, c.mtu, c.offloads(), &hdrs, &mut out).map_err(|(e, _)| e).unwrap();
            prop_assert_eq!(n, c.pieces);
            drop(keep);
            let segs: Vec<usize> = out.iter().map(|m| m.num_segs()).collect();
            prop_assert_eq!(segs, expected_segs(&parts, headers, mss, &eligible));
            prop_assert_eq!(hdrs.in_use(), needed);
            prop_assert_eq!(rx.in_use(), parts.len());
            prop_assert_eq!(mbuf_pieces(&out), reference);
            drop(out);
            assert_no_leaks(&rx);
            assert_no_leaks(&hdrs);
        }
    }
}
