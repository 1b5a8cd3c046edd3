//! Structure-aware fuzzing of the merge engine (SIGCOMM'26 §4.1, §4.2): sequences of TCP
//! segments of up to three flows (IPv4 and IPv6, 802.1Q, sequence numbers that wrap), with
//! conflicting retransmissions, header changes that end a merge (ACK, TOS, timestamps, VLAN
//! tag, IPv6 flow label), PSH/FIN/SYN/RST/URG, IPv6 destination options, corrupted checksums
//! (a bad IPv4 header checksum, payload words changed by +1/−1 behind the TCP checksum), junk
//! frames, RX burst boundaries and waits, with or without a NIC's checksum verdicts on each
//! frame (with them the engine's run path is taken), checked against the property-test invariants
//! (`pxio_fuzz::merge_check`): every byte of a segment that verifies leaves exactly once at its
//! sequence number, no reordering against held data, nothing the receiver would reject made
//! acceptable, nothing leaked.
#![forbid(unsafe_code)]
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pxio::merge::{MergeConfig, Merger};
use pxio::wire::tcp_flags;
use pxio::{HeapBuf, HeapPool, PacketBuf};
use pxio_fuzz::merge_check::{self, Flow, Sent};
use pxio_fuzz::parsed::parse_tcp;
use pxio_fuzz::segment::{
    corrupt_ip_checksum, corrupt_payload_word, v4_addr, v6_addr, Segment, DST_HOST,
};

/// Bytes of each flow's stream: offsets are taken modulo this.
const STREAM_LEN: usize = 12_000;
/// Largest payload of one segment (a 1500 B IPv4 path with timestamps).
const MSS: usize = 1448;
/// Bytes a sequence number may start below 2^32 when a flow wraps.
const WRAP_WINDOW: u32 = 16_000;
/// Most operations per input (longer inputs are cut, to keep executions fast).
const MAX_OPS: usize = 96;

#[derive(Arbitrary, Debug)]
struct Scenario {
    flows: [FlowArb; 3],
    /// 1..=3 flows.
    nflows: u8,
    /// iMTU: 2000, 4000 or 9000 B.
    imtu: u8,
    /// Items a flow may hold: 1..=8.
    items_per_flow: u8,
    /// Items held at once across flows: 1..=64.
    max_items: u8,
    /// Each frame carries a NIC's checksum verdicts (true ones: a corrupted frame is marked
    /// bad), so the engine's run path (`merge::run`) is taken, not only the general one.
    nic_verdicts: bool,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
struct FlowArb {
    v6: bool,
    vlan: Option<u16>,
    isn: u32,
    /// Start just below 2^32, so the stream wraps.
    wrap: bool,
    dont_frag: bool,
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A data segment.
    Data(Seg),
    /// A control segment: SYN, RST or URG (with or without payload), or a pure ACK.
    Control {
        flow: u8,
        offset: u16,
        kind: u8,
        len: u8,
        dest_opts: bool,
    },
    /// A non-IP frame, which must pass untouched.
    Junk(Vec<u8>),
    /// End of the RX burst.
    EndBurst,
    /// Time passes (µs), and the engine is polled.
    Wait(u16),
}

#[derive(Arbitrary, Debug)]
struct Seg {
    flow: u8,
    /// Where: mostly right after the flow's last segment, sometimes before or after it.
    position: u8,
    distance: u16,
    /// Payload length: mostly a full MSS.
    len: u16,
    /// Non-zero: the payload differs from the stream (a conflicting retransmission).
    conflict: u8,
    /// Header changes (0 keeps the flow's usual value).
    ack: u8,
    tos: u8,
    tsval: u8,
    window: u16,
    retag: bool,
    flow_label: u8,
    psh: bool,
    fin: bool,
    dest_opts: bool,
    /// Corruption: mostly none.
    corrupt: u8,
    word: u8,
}

/// The stream byte of `flow` at `offset`.
fn stream_byte(flow: usize, offset: usize) -> u8 {
    (offset.wrapping_mul(7) ^ (offset >> 8) ^ flow.wrapping_mul(0x55)) as u8
}

struct FlowState {
    arb_v6: bool,
    vlan: Option<u16>,
    isn: u32,
    dont_frag: bool,
    next: usize,
    ident: u16,
}

fn timestamps(tsval: u8) -> [u8; 12] {
    let mut o = [1, 1, 8, 10, 0, 0, 0, 0, 0, 0, 0, 7];
    o[4..8].copy_from_slice(&(1000 + u32::from(tsval % 4)).to_be_bytes());
    o
}

fuzz_target!(|sc: Scenario| {
    let nflows = usize::from(sc.nflows % 3) + 1;
    let imtu = [2000usize, 4000, 9000][usize::from(sc.imtu % 3)];
    let mut states: Vec<FlowState> = sc.flows[..nflows]
        .iter()
        .map(|f| FlowState {
            arb_v6: f.v6,
            vlan: f.vlan.map(|v| v & 0x0fff),
            isn: if f.wrap {
                u32::MAX - f.isn % WRAP_WINDOW
            } else {
                f.isn
            },
            dont_frag: f.dont_frag,
            next: 0,
            ident: 0,
        })
        .collect();
    let flows: Vec<Flow> = states
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let host = i as u8 + 1;
            let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
            if s.arb_v6 {
                src = v6_addr(host);
                dst = v6_addr(DST_HOST);
            } else {
                src[..4].copy_from_slice(&v4_addr(host));
                dst[..4].copy_from_slice(&v4_addr(DST_HOST));
            }
            Flow {
                v6: s.arb_v6,
                src,
                dst,
                sport: 40000 + i as u16,
                dport: 80,
                isn: s.isn,
                stream_len: STREAM_LEN,
            }
        })
        .collect();

    let pool = HeapPool::new(2048);
    let cfg = MergeConfig {
        imtu: imtu as u16,
        flow_capacity: 8,
        max_items_per_flow: sc.items_per_flow % 8 + 1,
        max_items: usize::from(sc.max_items % 64) + 1,
        checksum_offload: false,
        ..MergeConfig::default()
    };
    // A fixed flow-table seed: the same input takes the same path (libFuzzer needs that).
    let mut merger =
        Merger::<HeapBuf>::with_hash_seed(cfg, HeapPool::new(2048), 0).expect("valid config");
    let mut sent: Vec<Sent> = Vec::new();
    let mut burst: Vec<HeapBuf> = Vec::new();
    let mut out: Vec<HeapBuf> = Vec::new();
    let mut now = 1_000_000u64;

    for op in sc.ops.iter().take(MAX_OPS) {
        match op {
            Op::Data(seg) => {
                let fi = usize::from(seg.flow) % nflows;
                let st = &mut states[fi];
                let len = if seg.len % 4 != 0 {
                    MSS
                } else {
                    1 + usize::from(seg.len / 4) % MSS
                };
                let offset = match seg.position % 8 {
                    0..=4 => st.next,
                    5 => st.next.saturating_sub(usize::from(seg.distance) % 4000),
                    6 => st.next + usize::from(seg.distance) % 4000,
                    _ => usize::from(seg.distance),
                } % STREAM_LEN;
                let len = len.min(STREAM_LEN - offset);
                let mut payload: Vec<u8> =
                    (offset..offset + len).map(|o| stream_byte(fi, o)).collect();
                if seg.conflict != 0 {
                    payload.iter_mut().for_each(|b| *b ^= seg.conflict);
                }
                let mut flags = tcp_flags::ACK;
                if seg.psh {
                    flags |= tcp_flags::PSH;
                }
                if seg.fin {
                    flags |= tcp_flags::FIN;
                }
                let opts = timestamps(seg.tsval);
                st.ident = st.ident.wrapping_add(1);
                let vlan = match (st.vlan, seg.retag) {
                    (v, false) => v,
                    (None, true) => Some(100),
                    (Some(v), true) => Some(v ^ 1),
                };
                let segment = Segment {
                    v6: st.arb_v6,
                    src_host: fi as u8 + 1,
                    sport: 40000 + fi as u16,
                    dport: 80,
                    vlan,
                    seq: st.isn.wrapping_add(offset as u32),
                    ack: 7_000 + u32::from(seg.ack % 3),
                    flags,
                    window: if seg.window % 2 == 0 { 500 } else { seg.window },
                    urgent: 0,
                    tos: seg.tos % 3,
                    flow_label: u32::from(seg.flow_label % 3),
                    ident: st.ident,
                    dont_frag: st.dont_frag,
                    options: &opts,
                    v6_dest_opts: seg.dest_opts,
                };
                let mut frame = segment.frame(&payload);
                let l3 = if vlan.is_some() { 18 } else { 14 };
                let l4 = frame.len() - payload.len() - 32;
                match seg.corrupt % 16 {
                    13 => {
                        corrupt_ip_checksum(&mut frame, l3);
                    }
                    14 => {
                        corrupt_payload_word(&mut frame, l4, usize::from(seg.word) % 4, 1);
                    }
                    15 => {
                        corrupt_payload_word(&mut frame, l4, usize::from(seg.word) % 4, -1);
                    }
                    _ => {}
                }
                // The bytes the frame really carries, and whether a receiver would accept them.
                let p = parse_tcp(&frame).expect("a built segment parses");
                let (payload, verified) = (p.payload.to_vec(), p.verifies());
                st.next = (offset + len).max(st.next);
                let mut pkt = pool.packet(&frame);
                if sc.nic_verdicts {
                    pkt.set_ip_csum_verdict((!st.arb_v6).then_some(p.ip_ok));
                    pkt.set_l4_csum_verdict(Some(p.tcp_ok));
                    // The RSS hash the fast path keys on: none, one per flow, or one shared
                    // by every flow (it must only ever be a hint).
                    pkt.set_rss_hash(match seg.word / 4 % 3 {
                        0 => None,
                        1 => Some(fi as u32),
                        _ => Some(0x5eed),
                    });
                }
                burst.push(pkt);
                sent.push(Sent {
                    frame,
                    flow: Some(fi),
                    offset,
                    payload,
                    verified,
                });
            }
            Op::Control {
                flow,
                offset,
                kind,
                len,
                dest_opts,
            } => {
                let fi = usize::from(*flow) % nflows;
                let st = &mut states[fi];
                let offset = usize::from(*offset) % STREAM_LEN;
                let flags = match kind % 4 {
                    0 => tcp_flags::SYN,
                    1 => tcp_flags::RST | tcp_flags::ACK,
                    2 => tcp_flags::URG | tcp_flags::ACK,
                    _ => tcp_flags::ACK,
                };
                let len = if kind % 4 == 3 {
                    0
                } else {
                    usize::from(*len).min(STREAM_LEN - offset)
                };
                let payload: Vec<u8> = (offset..offset + len).map(|o| stream_byte(fi, o)).collect();
                st.ident = st.ident.wrapping_add(1);
                let frame = Segment {
                    v6: st.arb_v6,
                    src_host: fi as u8 + 1,
                    sport: 40000 + fi as u16,
                    dport: 80,
                    vlan: st.vlan,
                    seq: st.isn.wrapping_add(offset as u32),
                    ack: 7_000,
                    flags,
                    window: 500,
                    urgent: if flags & tcp_flags::URG != 0 {
                        len as u16
                    } else {
                        0
                    },
                    tos: 0,
                    flow_label: 0,
                    ident: st.ident,
                    dont_frag: st.dont_frag,
                    options: &timestamps(0),
                    v6_dest_opts: *dest_opts,
                }
                .frame(&payload);
                burst.push(pool.packet(&frame));
                sent.push(Sent {
                    frame,
                    flow: Some(fi),
                    offset,
                    payload,
                    verified: true,
                });
            }
            Op::Junk(bytes) => {
                // A local experimental EtherType: never IP.
                let mut frame = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x88, 0xb5];
                frame.extend_from_slice(&bytes[..bytes.len().min(200)]);
                burst.push(pool.packet(&frame));
                sent.push(Sent {
                    frame,
                    flow: None,
                    offset: 0,
                    payload: Vec::new(),
                    verified: true,
                });
            }
            Op::EndBurst => {
                merger.rx_burst(burst.drain(..), now, &mut out);
                now += 1_000;
                merger.poll(now, &mut out);
            }
            Op::Wait(us) => {
                merger.rx_burst(burst.drain(..), now, &mut out);
                now += u64::from(*us) * 1_000;
                merger.poll(now, &mut out);
            }
        }
    }
    merger.rx_burst(burst.drain(..), now, &mut out);
    merger.flush_all(now, &mut out);
    assert_eq!(merger.stats().held_items, 0, "flush_all left items held");
    let outputs: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
    drop(out);
    assert_eq!(merger.pool().in_use(), 0, "engine buffers leaked");
    drop(merger);
    assert_eq!(pool.in_use(), 0, "buffers leaked");
    if let Err(broken) = merge_check::check(&flows, &sent, &outputs, imtu) {
        panic!("{broken}");
    }
});
