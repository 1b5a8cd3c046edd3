//! Hostile input: random frames, and valid frames with random bytes changed (GTP-U flags and
//! lengths, TEIDs, IP versions, ports), through every NF entry point, on heap buffers. Nothing
//! panics, and every packet gets a counted fate: forwarded, or dropped with a reason.

use proptest::prelude::*;
use px_nfs::lb::{Lb, LbConfig};
use px_nfs::nat::{Nat, NatConfig};
use px_nfs::upf::{SessionSpec, Upf, UpfConfig};
use px_nfs::{traffic, Verdict};
use pxio::wire::{classify, Class};
use pxio::{HeapBuf, HeapPool, PacketBuf};

/// Valid frames of every kind the NFs see: TCP of both families, and GTP-U uplink.
fn seeds() -> Vec<Vec<u8>> {
    let fl = traffic::flows(4, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 80);
    let mut v = traffic::tcp_traffic(&fl, 1, 2, 600);
    v.extend(traffic::upf_traffic(
        &fl,
        1,
        2,
        600,
        UpfConfig::default().n3_addr,
    ));
    v
}

fn frame() -> impl Strategy<Value = Vec<u8>> {
    let seeds = seeds();
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..200),
        (
            0..seeds.len(),
            proptest::collection::vec((0usize..700, any::<u8>()), 1..6),
            0usize..800
        )
            .prop_map(move |(i, edits, cut)| {
                let mut f = seeds[i].clone();
                for (at, b) in edits {
                    if let Some(x) = f.get_mut(at) {
                        *x = b;
                    }
                }
                f.truncate(cut.max(14));
                f
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn every_nf_gives_every_frame_a_counted_fate(frames in proptest::collection::vec(frame(), 1..24)) {
        let pool = HeapPool::new(256);
        let ues: Vec<SessionSpec> = (0..4).map(|i| SessionSpec::for_host(i, 1_000_000)).collect();
        let mut upf = Upf::synthetic(UpfConfig::default(), 16, 1_000_000, &ues).unwrap();
        let mut nat = Nat::new(NatConfig { first_port: 5000, last_port: 5003, ..NatConfig::default() });
        let mut lb = Lb::new(LbConfig::with_backends(traffic::VIP_V4, traffic::SERVER_V6, 80, 3));
        let (mut fwd, mut dropped, mut calls, mut encap_fail) = (0u64, 0u64, 0u64, 0u64);
        for (n, f) in frames.iter().enumerate() {
            let now = n as u64 * 1000;
            let (Class::Tcp(h) | Class::Udp(h)) = classify(f, f.len()) else { continue };
            calls += 1;
            let mut p: HeapBuf = pool.packet(f);
            let verdicts = [
                nat.outbound(&mut pool.packet(f), &h),
                nat.inbound(&mut pool.packet(f), &h),
                lb.process(&mut pool.packet(f), &h),
            ];
            for v in verdicts {
                if v == Verdict::Forward { fwd += 1 } else { dropped += 1 }
            }
            if Upf::is_uplink(&h) {
                if upf.uplink(&mut p, &h, now) == Verdict::Forward { fwd += 1 } else { dropped += 1 }
            } else if let Some(rule) = upf.downlink(&h, now) {
                match upf.encap(p, h.l2_len, rule, &pool) {
                    Some(out) => {
                        fwd += 1;
                        // An encapsulated frame is a well-formed GTP-U packet.
                        let bytes = out.to_vec();
                        prop_assert!(matches!(classify(&bytes, bytes.len()), Class::Udp(_)));
                    }
                    None => {
                        // Passed the rules (counted as downlink), then no outer header.
                        dropped += 1;
                        encap_fail += 1;
                    }
                }
            } else {
                dropped += 1; // no PDR, or over the QER: counted by the UPF
            }
        }
        prop_assert_eq!(fwd + dropped, calls * 4);
        let (s, u, l) = (*nat.stats(), *upf.stats(), *lb.stats());
        let nat_dropped = s.no_port + s.not_tcp_udp + s.no_mapping + s.unwritable;
        let upf_dropped = u.no_pdr + u.qer_drops + u.bad_gtp + u.no_buffer + u.offload_unsupported;
        let lb_dropped = l.no_backend + l.unwritable;
        prop_assert_eq!(nat_dropped + upf_dropped + lb_dropped, dropped, "every drop is counted");
        prop_assert_eq!(s.outbound + s.inbound + u.downlink + u.uplink + l.balanced + l.passed, fwd + encap_fail);
        prop_assert_eq!(pool.in_use(), 0);
    }
}

/// The NIC's checksum verdict on a GTP-U frame is about the outer UDP: after decapsulation the
/// UPF clears it, so pxio's split verifies the inner TCP before re-checksumming its pieces.
#[test]
fn uplink_decapsulation_forgets_the_outer_checksum_verdict() {
    let pool = HeapPool::new(256);
    let ues: Vec<SessionSpec> = (0..4)
        .map(|i| SessionSpec::for_host(i, 1_000_000))
        .collect();
    let mut upf = Upf::synthetic(UpfConfig::default(), 16, 1_000_000, &ues).unwrap();
    let mut forwarded = 0;
    for f in seeds() {
        let (Class::Tcp(h) | Class::Udp(h)) = classify(&f, f.len()) else {
            continue;
        };
        if !Upf::is_uplink(&h) {
            continue;
        }
        let mut p: HeapBuf = pool.packet(&f);
        p.set_l4_csum_verdict(Some(true));
        if upf.uplink(&mut p, &h, 0) == Verdict::Forward {
            forwarded += 1;
            assert_eq!(p.l4_csum_verdict(), None);
        }
    }
    assert!(forwarded > 0, "the seeds hold forwarded uplink frames");
}
