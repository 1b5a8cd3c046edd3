//! The gateway bench on a real EAL, small: every scenario kind's rows complete, every side's
//! outputs accounted for byte by byte (pxgw losing, duplicating or changing a byte fails this),
//! and the tally itself catches a side that does.

use dpdk::testing::eal;
use dpdk::{Burst, Mbuf};
use pxbench::gateway::frames::{Kind, Workload, WorkloadSpec, RX_MAX};
use pxbench::gateway::nic::{Lro, Pools, Profile};
use pxbench::gateway::sides::{run_side, Side};
use pxbench::gateway::tally::Tally;
use pxbench::gateway::{check_json, run_gateway, GatewayBenchConfig, Scenario};

fn config() -> GatewayBenchConfig {
    GatewayBenchConfig {
        packets: 4_000,
        reps: 1,
        verify: true,
        ..GatewayBenchConfig::new(eal())
    }
}

fn scenario(kind: Kind, v6: bool, profile: Profile) -> Scenario {
    Scenario {
        kind,
        flows: 100,
        gbps_per_flow: 2.0,
        v6,
        profile,
    }
}

const NIC: Profile = Profile::Nic { lro: None };

/// Every kind of traffic, both families, both profiles and LRO: complete rows whose ledgers
/// hold, with what each scenario must show.
#[test]
fn every_scenario_kind_runs_with_every_byte_accounted_for() {
    let lro = Profile::Nic {
        lro: Some(Lro::default()),
    };
    let scenarios = [
        scenario(Kind::InboundTcp, false, NIC),
        scenario(Kind::InboundTcp, false, lro),
        scenario(Kind::InboundTcp, false, Profile::None),
        scenario(Kind::InboundTcp, true, NIC),
        scenario(Kind::OutboundTcp, false, NIC),
        scenario(Kind::OutboundTcp, true, Profile::None),
        scenario(Kind::InboundUdp, false, Profile::None),
        scenario(Kind::Mix, false, lro),
    ];
    let rows = run_gateway(eal(), &scenarios, &config()).unwrap();
    let json = serde_json::to_string(&rows).unwrap();
    let wrong = check_json(&json, &scenarios);
    assert!(wrong.is_empty(), "{wrong:#?}");
    for (sc, r) in scenarios.iter().zip(&rows) {
        let what = format!(
            "{} {} {}{}",
            r.scenario,
            r.family,
            r.profile,
            if r.lro { "+lro" } else { "" }
        );
        assert!(r.ledger_ok, "{what}: {:?}", r.ledger_faults);
        assert!(
            r.pxgw_drops.is_empty(),
            "{what}: pxgw dropped {:?}",
            r.pxgw_drops
        );
        let (pxgw, floor) = (r.pxgw_ns_per_pkt.unwrap(), r.floor_ns_per_pkt.unwrap());
        assert!(pxgw > 0.0 && floor > 0.0, "{what}");
        let out_in = r.frames_out_per_frame_in.unwrap();
        match sc.kind {
            Kind::InboundTcp => {
                // Merged: far fewer frames leave than came, most bytes in iMTU-bound packets.
                assert!(out_in < 0.5, "{what}: {out_in}");
                assert!(
                    r.conversion_yield.unwrap() > 0.5,
                    "{what}: {:?}",
                    r.conversion_yield
                );
                assert_eq!(r.dpdk_gateway_ns_per_pkt.is_some(), !sc.v6, "{what}");
                assert!(r.engine_ns_per_pkt.is_some(), "{what}");
            }
            // Each 8,948 B segment leaves as six 1,448 B pieces and a rest; ACKs pass.
            Kind::OutboundTcp => assert!(out_in > 2.0, "{what}: {out_in}"),
            Kind::InboundUdp => {
                assert!(out_in < 0.5, "{what}: caravans: {out_in}");
                assert!(r.udp_yield.unwrap() > 0.5, "{what}: {:?}", r.udp_yield);
                assert_eq!(r.engine_ns_per_pkt, None);
            }
            Kind::Mix => {
                assert!(
                    r.udp_yield.is_some() && r.conversion_yield.is_some(),
                    "{what}"
                );
            }
        }
        if sc.profile.lro().is_some() {
            assert!(
                r.lro_segments_per_packet.unwrap() > 2.0,
                "{what}: {:?}",
                r.lro_segments_per_packet
            );
        }
    }
}

/// A side that holds nothing: every packet of every burst, either way, goes through its
/// function, and leaves when the function gives it back.
struct PerPacket<F>(F);

impl<F: FnMut(Mbuf) -> Option<Mbuf>> PerPacket<F> {
    fn forward(&mut self, rx: &mut Burst<RX_MAX>, out: &mut Vec<Mbuf>) {
        out.extend(rx.drain().filter_map(&mut self.0));
    }
}

impl<F: FnMut(Mbuf) -> Option<Mbuf>> Side for PerPacket<F> {
    fn timed_inbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        self.forward(rx, out);
    }
    fn timed_outbound(&mut self, rx: &mut Burst<RX_MAX>, _now: u64, out: &mut Vec<Mbuf>) {
        self.forward(rx, out);
    }
    fn next_deadline(&self) -> Option<u64> {
        None
    }
    fn timed_poll(&mut self, _now: u64, _out: &mut Vec<Mbuf>) {}
    fn timed_finish(&mut self, _now: u64, _out: &mut Vec<Mbuf>) {}
}

/// A side that forwards everything but drops frame `drop` and flips a byte of frame `flip`
/// (counted from 1; 0: none).
fn faulty(drop: usize, flip: usize) -> Box<dyn Side> {
    let mut seen = 0;
    Box::new(PerPacket(move |mut m: Mbuf| {
        seen += 1;
        if seen == drop {
            return None;
        }
        if seen == flip {
            let d = m.data_mut().unwrap();
            let last = d.len() - 1;
            d[last] ^= 1;
        }
        Some(m)
    }))
}

/// The tally fails a side that loses a frame or changes a byte, in every kind of traffic, and
/// passes the same side when it does neither.
#[test]
fn the_tally_catches_a_lost_frame_and_a_changed_byte() {
    let pools = Pools::new(eal(), 9000 + 14 + 128).unwrap();
    for kind in [
        Kind::InboundTcp,
        Kind::OutboundTcp,
        Kind::InboundUdp,
        Kind::Mix,
    ] {
        let w = Workload::generate(WorkloadSpec {
            kind,
            flows: 8,
            gbps_per_flow: 2.0,
            v6: false,
            packets: 3_000,
            seed: 1,
            imtu: 9000,
        })
        .unwrap();
        // Handshake frames come first: count past them.
        let handshake: usize = w.handshakes.iter().map(Vec::len).sum();
        for (drop, flip, faults) in [
            (0, 0, false),
            (handshake + 700, 0, true),
            (0, handshake + 901, true),
        ] {
            let tally = Tally::new(&w, "faulty", false, true);
            let run = run_side(
                || Ok(faulty(drop, flip)),
                &w,
                Profile::None,
                &pools,
                tally,
                eal().tsc_hz(),
            )
            .unwrap();
            assert_eq!(
                !run.outcome.faults.is_empty(),
                faults,
                "{kind:?} drop {drop} flip {flip}: {:?}",
                run.outcome.faults
            );
        }
    }
}

/// How [`tso_requester`] leaves the checksum fields of the segments it asks the NIC to cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seeds {
    /// As DPDK's contract wants them (`pxio::split::request_tso`).
    Right,
    /// The segment's own TCP checksum left in the field.
    OwnTcpChecksum,
    /// The IPv4 header checksum left as it came.
    OwnIpChecksum,
}

/// A side that forwards everything, asking the NIC to cut each segment from inside to the
/// eMTU (TSO), its checksum fields left as `seeds` says.
fn tso_requester(seeds: Seeds) -> Box<dyn Side> {
    Box::new(PerPacket(move |mut m: Mbuf| {
        let parsed = pxio::wire::Parsed::of(m.data(), m.len());
        if let Some(h) = parsed.tcp().filter(|h| h.ip_len > 1500) {
            let (ip_at, tcp_at) = (h.l3_offset(), h.l4_offset() + 16);
            let before = m.data().to_vec();
            assert!(pxio::split::request_tso(
                &mut m,
                h,
                1500 - h.l3_len - h.l4_len
            ));
            let d = m.data_mut().unwrap();
            match seeds {
                Seeds::Right => {}
                Seeds::OwnTcpChecksum => {
                    d[tcp_at..tcp_at + 2].copy_from_slice(&before[tcp_at..tcp_at + 2])
                }
                Seeds::OwnIpChecksum => {
                    d[ip_at + 10..ip_at + 12].copy_from_slice(&before[ip_at + 10..ip_at + 12])
                }
            }
        }
        Some(m)
    }))
}

/// A TSO request whose checksum fields are not the seeds DPDK's contract asks for fails the
/// tally (an Intel-style NIC would send every piece with a wrong checksum), and one with the
/// seeds passes, in both families (IPv6 has no header checksum to zero).
#[test]
fn the_tally_catches_a_tso_request_without_its_seeds() {
    let pools = Pools::new(eal(), 9000 + 14 + 128).unwrap();
    for v6 in [false, true] {
        let w = Workload::generate(WorkloadSpec {
            kind: Kind::OutboundTcp,
            flows: 8,
            gbps_per_flow: 2.0,
            v6,
            packets: 3_000,
            seed: 1,
            imtu: 9000,
        })
        .unwrap();
        let cases = [
            (Seeds::Right, None),
            (Seeds::OwnTcpChecksum, Some("tx_l4_seed")),
            (Seeds::OwnIpChecksum, Some("tx_ip_checksum_not_zeroed")),
        ];
        for (seeds, fault) in cases
            .into_iter()
            .filter(|c| !v6 || c.0 != Seeds::OwnIpChecksum)
        {
            let tally = Tally::new(&w, "tso", true, true);
            let run = run_side(
                || Ok(tso_requester(seeds)),
                &w,
                NIC,
                &pools,
                tally,
                eal().tsc_hz(),
            )
            .unwrap();
            // "what: count" each.
            let faults: Vec<&str> = run
                .outcome
                .faults
                .iter()
                .filter_map(|f| f.split(':').next())
                .collect();
            match fault {
                None => assert!(
                    faults.is_empty(),
                    "v6 {v6}, {seeds:?}: {:?}",
                    run.outcome.faults
                ),
                Some(f) => assert_eq!(faults, [f], "v6 {v6}, {seeds:?}"),
            }
        }
    }
}
