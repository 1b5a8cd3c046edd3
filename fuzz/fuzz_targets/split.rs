//! Outbound split (SIGCOMM'26 §3, §4.1) of arbitrary TCP packets — IPv4 and IPv6, 802.1Q,
//! SYN/FIN/PSH/RST/CWR/URG, urgent pointers, IPv6 destination options, bad checksums, chained
//! (LRO-style) buffers — to an arbitrary MTU, in software and with TSO, and of arbitrary bytes.
//!
//! What a receiver must get from the pieces is what the packet said (RFC 9293): the payload in
//! order at consecutive sequence numbers (a SYN takes one), every piece within the MTU with
//! checksums that verify, SYN and CWR on the first piece only, PSH, FIN and RST on the last
//! only, the same urgent point (each piece before it carries URG and a pointer relative to its
//! own sequence number, as Linux's `tcp_transmit_skb` writes them; pieces after it carry no URG),
//! the ACK number and window unchanged, IPv4 IDs consecutive. A packet that fits or is not
//! splittable TCP leaves unchanged; an error leaves nothing behind; nothing leaks.
#![forbid(unsafe_code)]
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pxio::split::{split_tcp, SplitError, SplitOffloads};
use pxio::wire::{classify, tcp_flags, Class};
use pxio::{HeapBuf, HeapPool, PacketBuf};
use pxio_fuzz::parsed::parse_tcp;
use pxio_fuzz::segment::{corrupt_payload_word, Segment};

#[derive(Arbitrary, Debug)]
struct Case {
    v6: bool,
    vlan: Option<u16>,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    urgent: u16,
    timestamps: bool,
    /// Payload bytes, modulo 9000.
    len: u16,
    /// MTU: 576 + this modulo 8425 (576..=9000).
    mtu: u16,
    /// 0: software with checksums; 1: software, checksums left to the NIC; 2: TSO.
    offload: u8,
    dest_opts: bool,
    bad_checksum: bool,
    /// Where the packet is cut into chained buffers (modulo its length).
    cuts: Vec<u16>,
    /// Cut instead at every piece boundary, as a merged packet with an aligned iMTU is (the
    /// split then moves the buffers into the pieces).
    on_boundaries: bool,
    /// The buffer vouches for its checksum (`l4_csum_verdict() == Some(true)`), even when
    /// `bad_checksum` made it wrong: not verified, but the damage must still show.
    vouched: bool,
}

/// A built packet, or a frame as it is (the seeds: large TCP frames captured in the lab).
#[derive(Arbitrary, Debug)]
enum Input {
    Built(Case),
    Raw {
        mtu: u16,
        offload: u8,
        frame: Vec<u8>,
    },
}

fuzz_target!(|input: Input| {
    let (c, raw) = match input {
        Input::Built(c) => (c, None),
        Input::Raw {
            mtu,
            offload,
            frame,
        } => (
            Case {
                v6: false,
                vlan: None,
                seq: 0,
                ack: 0,
                flags: 0,
                window: 0,
                urgent: 0,
                timestamps: false,
                len: 0,
                mtu,
                offload,
                dest_opts: false,
                bad_checksum: false,
                cuts: Vec::new(),
                on_boundaries: false,
                vouched: false,
            },
            Some(frame),
        ),
    };
    let pool = HeapPool::new(256);
    let mtu = 576 + c.mtu % 8425;
    let offloads = match c.offload % 3 {
        0 => SplitOffloads {
            tso: false,
            checksum: false,
        },
        1 => SplitOffloads {
            tso: false,
            checksum: true,
        },
        _ => SplitOffloads {
            tso: true,
            checksum: true,
        },
    };
    let payload: Vec<u8> = (0..usize::from(c.len % 9000))
        .map(|i| (i * 13 + i / 256) as u8)
        .collect();
    let ts = [1, 1, 8, 10, 0, 0, 0, 9, 0, 0, 0, 7];
    let frame = match raw {
        Some(raw) => raw,
        None => {
            let mut f = Segment {
                v6: c.v6,
                src_host: 2,
                sport: 5001,
                dport: 443,
                vlan: c.vlan,
                seq: c.seq,
                ack: c.ack,
                flags: c.flags,
                window: c.window,
                urgent: c.urgent,
                tos: 0,
                flow_label: 0,
                ident: 77,
                dont_frag: true,
                options: if c.timestamps { &ts } else { &[] },
                v6_dest_opts: c.dest_opts,
            }
            .frame(&payload);
            if c.bad_checksum {
                let l4 = f.len() - payload.len() - if c.timestamps { 32 } else { 20 };
                corrupt_payload_word(&mut f, l4, 0, 1);
            }
            f
        }
    };
    // The packet as buffers: cut at the given offsets (the headers stay in the first one).
    let hdr_end = match classify(&frame, frame.len()) {
        Class::Tcp(h) | Class::Udp(h) => h.hdr_len(),
        _ => frame.len(),
    };
    let l2 = match classify(&frame, frame.len()) {
        Class::Tcp(h) => usize::from(h.l2_len),
        _ => 0,
    };
    let mss = usize::from(mtu).saturating_sub(hdr_end - l2).max(1);
    let mut cuts: Vec<usize> = if c.on_boundaries {
        (1..64).map(|k| hdr_end + k * mss).collect()
    } else {
        c.cuts
            .iter()
            .take(8)
            .map(|&x| usize::from(x) % (frame.len() + 1))
            .collect()
    };
    cuts.retain(|&x| x > hdr_end.max(1) && x < frame.len());
    cuts.sort_unstable();
    cuts.dedup();
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut at = 0;
    for cut in cuts {
        parts.push(&frame[at..cut]);
        at = cut;
    }
    parts.push(&frame[at..]);
    let mut pkt = HeapBuf::from_segments(&pool, &parts);
    pkt.set_l4_csum_verdict(c.vouched.then_some(true));

    let original = parse_tcp(&frame);
    let mut out = Vec::new();
    match split_tcp(pkt, mtu, offloads, &pool, &mut out) {
        Ok(n) => {
            assert_eq!(n, out.len(), "the count is what was pushed");
            let pieces: Vec<Vec<u8>> = out.iter().map(PacketBuf::to_vec).collect();
            drop(out);
            check(&frame, original, &pieces, mtu, offloads);
        }
        Err((e, back)) => {
            assert!(out.is_empty(), "{e}: nothing pushed on error");
            assert_eq!(back.to_vec(), frame, "{e}: the packet comes back unchanged");
            if e == SplitError::BadChecksum {
                assert!(
                    original.is_some_and(|p| !p.tcp_ok),
                    "BadChecksum for a packet whose checksum verifies"
                );
            }
        }
    }
    assert_eq!(pool.in_use(), 0, "buffers leaked");
});

fn check(
    frame: &[u8],
    original: Option<pxio_fuzz::parsed::Parsed<'_>>,
    pieces: &[Vec<u8>],
    mtu: u16,
    offloads: SplitOffloads,
) {
    let splittable = matches!(classify(frame, frame.len()), Class::Tcp(h) if h.ip_len > mtu);
    if !splittable {
        assert_eq!(pieces.len(), 1, "one packet out");
        assert_eq!(
            pieces[0], frame,
            "a packet that is not split leaves unchanged"
        );
        return;
    }
    if offloads.tso && pieces.len() == 1 {
        // Left to the NIC whole. (What TSO must not do, URG and SYN, is cut in software.)
        return;
    }
    let o = original.expect("classify said TCP");
    if o.flags & tcp_flags::SYN != 0 && pieces.len() == 1 && pieces[0] == frame {
        // Not splitting a SYN at all is one of the two allowed answers (the other: only the
        // first piece carries the SYN).
        return;
    }
    let parsed: Vec<_> = pieces
        .iter()
        .map(|p| parse_tcp(p).expect("every piece is a TCP segment"))
        .collect();
    let last = parsed.len() - 1;
    let syn = o.flags & tcp_flags::SYN != 0;
    let mut joined = Vec::new();
    let mut next_seq = o.seq;
    for (k, p) in parsed.iter().enumerate() {
        let at = format!("piece {k} of {}", parsed.len());
        assert!(
            p.ip_len <= usize::from(mtu),
            "{at}: {} B > MTU {mtu}",
            p.ip_len
        );
        if !offloads.checksum {
            assert!(p.ip_ok, "{at}: IPv4 header checksum");
            if o.tcp_ok {
                assert!(p.tcp_ok, "{at}: TCP checksum");
            }
        }
        assert_eq!(p.seq, next_seq, "{at}: sequence number (a SYN takes one)");
        next_seq = next_seq
            .wrapping_add(p.payload.len() as u32)
            .wrapping_add(u32::from(k == 0 && syn));
        assert_eq!(
            (p.ack, p.window),
            (o.ack, o.window),
            "{at}: ACK number and window"
        );
        if !o.v6 {
            assert_eq!(p.ident, o.ident.wrapping_add(k as u16), "{at}: IPv4 ID");
        }
        let only = |flag: u8, allowed: bool, name: &str| {
            let want = allowed && o.flags & flag != 0;
            assert_eq!(p.flags & flag != 0, want, "{at}: {name}");
        };
        only(tcp_flags::SYN, k == 0, "SYN on the first piece only");
        only(tcp_flags::CWR, k == 0, "CWR on the first piece only");
        only(tcp_flags::PSH, k == last, "PSH on the last piece only");
        only(tcp_flags::FIN, k == last, "FIN on the last piece only");
        only(tcp_flags::RST, k == last, "RST on the last piece only");
        if o.flags & tcp_flags::URG != 0 && o.urgent > 0 {
            let point = o.seq.wrapping_add(u32::from(o.urgent));
            let ahead = point.wrapping_sub(p.seq) as i32;
            if ahead > 0 {
                assert!(
                    p.flags & tcp_flags::URG != 0,
                    "{at}: URG before the urgent point"
                );
                assert_eq!(
                    u32::from(p.urgent),
                    ahead as u32,
                    "{at}: urgent pointer relative to the piece's own sequence number"
                );
            } else {
                assert_eq!(
                    p.flags & tcp_flags::URG,
                    0,
                    "{at}: no URG past the urgent point"
                );
            }
        } else if k > 0 {
            assert_eq!(p.flags & tcp_flags::URG, 0, "{at}: no URG");
        }
        joined.extend_from_slice(p.payload);
    }
    assert_eq!(
        joined, o.payload,
        "the pieces carry the payload, in order, once"
    );
    if !o.tcp_ok && !offloads.checksum {
        assert!(
            parsed.iter().any(|p| !p.tcp_ok),
            "a packet whose TCP checksum fails was split into pieces that all verify"
        );
    }
}
