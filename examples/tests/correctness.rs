//! The plain and the pxio version of each NF, on the same traffic, on real mbufs under an EAL
//! (ring ports, `--no-huge`): the same per-flow byte streams come out (after translation), the
//! NAT makes the same mappings, the load balancer picks the same backends, the UPF's PDRs match
//! the same bytes, and no mbuf leaks (each run checks its pools). The example files themselves
//! are run: their `run` functions are included here.

use std::collections::BTreeMap;
use std::sync::Mutex;

use dpdk::testing;
use px_nfs::lb::{Lb, LbConfig};
use px_nfs::nat::{Nat, NatConfig};
use px_nfs::traffic::{self, StreamKey};
use px_nfs::upf::{SessionSpec, Upf, UpfConfig, STANDARD_RULES};

#[allow(dead_code)]
#[path = "../lb.rs"]
mod lb_plain;
#[allow(dead_code)]
#[path = "../lb-px.rs"]
mod lb_px;
#[allow(dead_code)]
#[path = "../nat.rs"]
mod nat_plain;
#[allow(dead_code)]
#[path = "../nat-px.rs"]
mod nat_px;
#[allow(dead_code)]
#[path = "../upf.rs"]
mod upf_plain;
#[allow(dead_code)]
#[path = "../upf-px.rs"]
mod upf_px;

/// One lab at a time: each holds two 16 k-mbuf pools, and the test EAL has 512 MB.
static LAB: Mutex<()> = Mutex::new(());

type Streams = BTreeMap<StreamKey, Vec<u8>>;

/// The streams of `frames`, asserting that every frame's checksums verify.
fn checked_streams(frames: &[Vec<u8>], what: &str) -> Streams {
    let (s, bad) = traffic::streams(frames);
    assert_eq!(
        bad, 0,
        "{what}: {bad} frames with a bad checksum or GTP-U header"
    );
    s
}

/// `input`'s streams with every key mapped through `f` (what the NF should make of them).
fn expected(input: &[Vec<u8>], f: impl Fn(StreamKey) -> StreamKey) -> Streams {
    checked_streams(input, "input")
        .into_iter()
        .map(|(k, v)| (f(k), v))
        .collect()
}

fn assert_same(a: &Streams, b: &Streams, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: number of streams");
    for ((ka, va), (kb, vb)) in a.iter().zip(b) {
        assert_eq!(ka, kb, "{what}: stream keys");
        assert!(
            va == vb,
            "{what}: stream {ka:?} differs ({} vs {} bytes)",
            va.len(),
            vb.len()
        );
    }
}

fn flows(n: usize, dport: u16) -> Vec<traffic::Flow> {
    traffic::flows(n, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, dport)
}

#[test]
fn nat_plain_and_px_give_the_same_streams_and_mappings() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    for mtu in [1500u16, 1400, 4000] {
        let input = traffic::tcp_traffic(&flows(24, 443), 6, 45, mtu);
        let cfg = NatConfig::default();
        let (plain, nat_a) = nat_plain::run(
            eal,
            &testing::unique("nat"),
            input.clone(),
            Nat::new(cfg.clone()),
            true,
        )
        .unwrap();
        let (px, nat_b) = nat_px::run(
            eal,
            &testing::unique("natpx"),
            input.clone(),
            Nat::new(cfg.clone()),
            true,
        )
        .unwrap();
        let map = |n: &Nat| -> BTreeMap<_, _> {
            n.mappings()
                .map(|(k, p)| ((k.src, k.sport, k.v6), p))
                .collect()
        };
        assert_eq!(map(&nat_a), map(&nat_b), "MTU {mtu}: the same mappings");
        assert_eq!(map(&nat_a).len(), 24);
        let want = expected(&input, |(t, src, dst, sport, dport)| {
            let v6 = src[4..] != [0; 12];
            let public = if v6 {
                cfg.public_v6
            } else {
                px_nfs::addr16(&cfg.public_v4)
            };
            (t, public, dst, map(&nat_a)[&(src, sport, v6)], dport)
        });
        assert_same(
            &checked_streams(&plain, "plain"),
            &want,
            &format!("nat MTU {mtu}"),
        );
        assert_same(
            &checked_streams(&px, "px"),
            &want,
            &format!("nat-px MTU {mtu}"),
        );
        assert!(
            nat_b.stats().outbound < nat_a.stats().outbound,
            "the PX version ran less often"
        );
    }
}

#[test]
fn lb_plain_and_px_give_the_same_streams_and_backends() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    for mtu in [1500u16, 4000] {
        // Flows to the VIP and, for the last 4, to another port (passed unchanged).
        let mut fl = flows(20, 80);
        fl.extend(flows(24, 8443).into_iter().skip(20));
        let input = traffic::tcp_traffic(&fl, 6, 45, mtu);
        let cfg = LbConfig::with_backends(traffic::VIP_V4, traffic::SERVER_V6, 80, 5);
        let (plain, lb_a) = lb_plain::run(
            eal,
            &testing::unique("lb"),
            input.clone(),
            Lb::new(cfg.clone()),
            true,
        )
        .unwrap();
        let (px, lb_b) = lb_px::run(
            eal,
            &testing::unique("lbpx"),
            input.clone(),
            Lb::new(cfg.clone()),
            true,
        )
        .unwrap();
        let conns = |l: &Lb| -> BTreeMap<_, _> {
            l.connections()
                .map(|(k, b)| ((k.src, k.sport), b.v4))
                .collect()
        };
        assert_eq!(conns(&lb_a), conns(&lb_b), "MTU {mtu}: the same backends");
        assert_eq!(conns(&lb_a).len(), 20);
        let used: std::collections::BTreeSet<_> = conns(&lb_a).into_values().collect();
        assert!(
            used.len() >= 3,
            "20 connections spread over several of 5 backends: {used:?}"
        );
        let want = expected(&input, |(t, src, dst, sport, dport)| {
            match lb_a
                .connections()
                .find(|(k, _)| k.src == src && k.sport == sport)
            {
                Some((k, b)) => (
                    t,
                    src,
                    if k.v6 { b.v6 } else { px_nfs::addr16(&b.v4) },
                    sport,
                    b.port,
                ),
                None => (t, src, dst, sport, dport),
            }
        });
        assert_same(
            &checked_streams(&plain, "plain"),
            &want,
            &format!("lb MTU {mtu}"),
        );
        assert_same(
            &checked_streams(&px, "px"),
            &want,
            &format!("lb-px MTU {mtu}"),
        );
        assert_eq!(
            lb_a.stats().passed,
            4 * 6 * 45 + 4,
            "non-VIP packets pass unchanged"
        );
    }
}

/// A UPF with `n` synthetic sessions and one per test host, at `mbr` bit/s for the hosts.
fn upf(n: u32, hosts: u16, mbr: u64) -> Upf {
    let ues: Vec<SessionSpec> = (0..hosts).map(|i| SessionSpec::for_host(i, mbr)).collect();
    Upf::synthetic(UpfConfig::default(), n, 1_000_000_000, &ues).unwrap()
}

#[test]
fn upf_plain_and_px_give_the_same_streams_and_rule_decisions() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    let fl = flows(16, 443);
    let input = traffic::upf_traffic(&fl, 6, 45, 1500, UpfConfig::default().n3_addr);
    let (plain, upf_a) = upf_plain::run(
        eal,
        &testing::unique("upf"),
        input.clone(),
        upf(10_000, 16, 100_000_000_000),
        true,
    )
    .unwrap();
    let (px, upf_b) = upf_px::run(
        eal,
        &testing::unique("upfpx"),
        input.clone(),
        upf(10_000, 16, 100_000_000_000),
        true,
    )
    .unwrap();
    assert_eq!(upf_a.rule_counts(), (160_256, 20_032, 20_032));
    // Every PDR matched the same bytes in both versions (usage reports would agree).
    assert!(
        upf_a.pdr_bytes() == upf_b.pdr_bytes(),
        "PDR byte counts differ"
    );
    assert_eq!(
        upf_a.pdr_bytes().iter().filter(|&&b| b > 0).count(),
        32,
        "16 hosts: one downlink and one uplink PDR each"
    );
    assert_eq!(upf_a.stats().qer_drops + upf_b.stats().qer_drops, 0);
    // Downlink leaves in GTP-U with the host's downlink TEID; uplink leaves decapsulated.
    let want = expected(&input, |(teid, src, dst, sport, dport)| {
        if teid == 0 {
            let host = u16::from_be_bytes([dst[14], dst[15]]) as u32;
            let host = if dst[0] == 10 {
                u16::from_be_bytes([dst[2], dst[3]]) as u32
            } else {
                host
            };
            (0x2000_0000 + host, src, dst, sport, dport)
        } else {
            (0, src, dst, sport, dport)
        }
    });
    assert_same(&checked_streams(&plain, "plain"), &want, "upf");
    assert_same(&checked_streams(&px, "px"), &want, "upf-px");
    // The outer headers fit the N3 MTU.
    assert!(px
        .iter()
        .all(|f| f.len() <= 14 + usize::from(UpfConfig::default().n3_mtu)));
}

/// Traffic that hits the session's filters at different precedence: each of 8 UEs (IPv4 and
/// IPv6) downloads and uploads on ports 443 (the CDN rule of its family), 5201 (the
/// measurement service) and 8080 (only the match-all rule), all in one session per UE.
#[test]
fn upf_plain_and_px_pick_the_same_pdrs_by_precedence() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    let ports = [443u16, 5201, 8080];
    let fl: Vec<traffic::Flow> = ports.iter().flat_map(|&p| flows(8, p)).collect();
    let input = traffic::upf_traffic(&fl, 4, 45, 1500, UpfConfig::default().n3_addr);
    let (_, upf_a) = upf_plain::run(
        eal,
        &testing::unique("upfprec"),
        input.clone(),
        upf(1000, 8, 100_000_000_000),
        false,
    )
    .unwrap();
    let (_, upf_b) = upf_px::run(
        eal,
        &testing::unique("upfprecpx"),
        input,
        upf(1000, 8, 100_000_000_000),
        false,
    )
    .unwrap();
    assert!(
        upf_b.stats().downlink < upf_a.stats().downlink,
        "the PX version merged"
    );
    assert_eq!(upf_a.stats().no_pdr + upf_b.stats().no_pdr, 0);
    assert!(
        upf_a.pdr_bytes() == upf_b.pdr_bytes(),
        "the versions' PDRs matched different bytes"
    );
    // Which PDR each UE's traffic should hit: per direction, the CDN rule of its family (443),
    // the measurement service (5201), the match-all rule (8080); nothing else.
    let per = STANDARD_RULES.len();
    let bytes = upf_a.pdr_bytes();
    for h in 0..8usize {
        let first = (1000 + h) * per;
        let v6 = h % 2 == 1;
        let cdn = if v6 { 300 } else { 200 };
        let mut hit: Vec<(bool, u32)> = (first..first + per)
            .filter(|&i| bytes[i] > 0)
            .map(|i| {
                let uplink = i - first >= per / 2;
                (uplink, upf_a.precedence(i as u32).unwrap())
            })
            .collect();
        hit.sort_unstable();
        let want = [
            (false, cdn),
            (false, 500),
            (false, u32::MAX),
            (true, cdn),
            (true, 500),
            (true, u32::MAX),
        ];
        assert_eq!(
            hit, want,
            "UE {h} (IPv6 {v6}): PDRs hit (uplink, precedence)"
        );
    }
}

#[test]
fn upf_qer_limits_hold_in_both_versions() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    let fl = flows(8, 443);
    let input = traffic::upf_traffic(&fl, 10, 45, 1500, UpfConfig::default().n3_addr);
    let bursts = input.len().div_ceil(px_nfs::harness::BURST) as u64;
    let duration_ns = bursts * px_nfs::harness::BURST_NS;
    // 2 Gb/s per session: far below what the trace offers each host (about 12 Gb/s).
    let mbr = 2_000_000_000u64;
    for px in [false, true] {
        let name = testing::unique("upfqer");
        let (_, u) = if px {
            upf_px::run(eal, &name, input.clone(), upf(100, 8, mbr), false).unwrap()
        } else {
            upf_plain::run(eal, &name, input.clone(), upf(100, 8, mbr), false).unwrap()
        };
        assert!(u.stats().qer_drops > 0, "px {px}: the QERs dropped");
        // Each host's session: its PDRs are the last 8 sessions' (16 each, in order).
        let bytes = u.pdr_bytes();
        let per = STANDARD_RULES.len();
        let depth = (mbr as f64 / 8e9 * 1e6).max(65_536.0);
        let limit = depth + mbr as f64 / 8e9 * duration_ns as f64;
        for h in 0..8 {
            let first = (100 + h) * per;
            let passed: u64 = bytes[first..first + per].iter().sum();
            assert!(passed > 0, "px {px} host {h}: something passed");
            assert!(
                passed as f64 <= limit,
                "px {px} host {h}: {passed} B passed, MBR allows {limit:.0}"
            );
        }
    }
}

#[test]
fn upf_px_splits_jumbo_uplink_to_the_n6_mtu() {
    let _one = LAB.lock().unwrap_or_else(|e| e.into_inner());
    let eal = testing::eal();
    let fl = flows(6, 443);
    // A gNB on a jumbo N3 sends 4000 B inner packets.
    let input: Vec<Vec<u8>> = traffic::upf_traffic(&fl, 4, 45, 4000, UpfConfig::default().n3_addr)
        .into_iter()
        .filter(|f| f.len() > 4000 + 14) // uplink only
        .collect();
    assert_eq!(input.len(), 6 * 4 * 45);
    let (out, u) = upf_px::run(
        eal,
        &testing::unique("upfjumbo"),
        input.clone(),
        upf(100, 6, 100_000_000_000),
        true,
    )
    .unwrap();
    assert_eq!(u.stats().uplink, 6 * 4 * 45);
    assert!(out.iter().all(|f| f.len() <= 1514), "split to the N6 MTU");
    let want = expected(&input, |(_, src, dst, sport, dport)| {
        (0, src, dst, sport, dport)
    });
    assert_same(&checked_streams(&out, "px"), &want, "upf-px jumbo uplink");
}
