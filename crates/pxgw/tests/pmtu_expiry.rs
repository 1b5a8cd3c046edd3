//! Lowered path MTUs age out (RFC 1191 §6.3, RFC 8201 §4): a destination capped by a Packet Too
//! Big, an F-PMTUD result or a black-hole fallback gets the eMTU back `pmtu.expire_s` after it
//! was lowered, however often it is looked up meanwhile, and is probed again on its next
//! connection. Also: the settings reach `PathMtu` from the configuration (`pmtu.expire_s`,
//! `pmtu.respond_per_sec`, `[rss] key`), and the counters reach the statistics.

use std::net::IpAddr;
use std::time::Duration;

use pxgw::config::Config;
use pxgw::pmtud::{probe_source_port, PathMtu, PathMtuConfig, PmtudSummary};
use pxgw::rss::SymmetricKey;
use pxgw::stats::{PortCounters, Report};
use pxio::wire::{
    self, tcp_flags, Class, EthernetRepr, Headers, IpRepr, Ipv4Repr, TcpRepr, UdpRepr,
};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const EMTU: u16 = 1500;
const PORT: u16 = fpmtud::DEFAULT_PORT;
const INSIDE: [u8; 4] = [198, 18, 8, 2];
const OUTSIDE: [u8; 4] = [198, 18, 7, 1];
/// An arbitrary start, so no time in these tests is near 0.
const T0: u64 = 1_000 * SEC;
/// Frames from inside (the host's MAC to the next hop's) and from outside (the reverse).
const FROM_INSIDE: EthernetRepr = EthernetRepr {
    dst: [2, 0, 0, 0, 0, 1],
    src: [2, 0, 0, 0, 0, 2],
    vlan_tci: None,
    ethertype: 0,
};
const FROM_OUTSIDE: EthernetRepr = EthernetRepr {
    dst: [2, 0, 0, 0, 0, 2],
    src: [2, 0, 0, 0, 0, 1],
    vlan_tci: None,
    ethertype: 0,
};

fn dst() -> IpAddr {
    IpAddr::from(OUTSIDE)
}

fn path_mtu(probe: bool) -> PathMtu {
    PathMtu::new(PathMtuConfig {
        emtu: EMTU,
        probe,
        ..PathMtuConfig::default()
    })
    .unwrap()
}

/// An inside host's SYN toward `to` from source port `sport`, and its parse.
fn syn(to: [u8; 4], sport: u16) -> (Vec<u8>, Headers) {
    let tcp = TcpRepr {
        src_port: sport,
        dst_port: 443,
        seq: 1,
        ack: 0,
        flags: tcp_flags::SYN,
        window: 65000,
        urgent: 0,
        options: &[],
    };
    let frame =
        wire::tcp_frame(FROM_INSIDE, IpRepr::V4(Ipv4Repr::new(INSIDE, to)), tcp, &[]).unwrap();
    let Class::Tcp(h) = wire::classify(&frame, frame.len()) else {
        panic!("a SYN is TCP")
    };
    (frame, h)
}

/// The probes an inside SYN toward the outside host makes `p` send at `now`.
fn probes_on_syn(p: &mut PathMtu, now: u64) -> Vec<Vec<u8>> {
    let (frame, h) = syn(OUTSIDE, 50000);
    let mut out = Vec::new();
    p.on_outbound_syn(&frame, &h, now, &mut out);
    out
}

/// Answers the probe `probe` (a frame `p` sent) with a report saying the path carries 1400 B.
fn answer(p: &mut PathMtu, probe: &[u8], now: u64) {
    let Class::Udp(u) = wire::classify(probe, probe.len()) else {
        panic!("a probe is UDP")
    };
    let parsed = fpmtud::wire::Probe::parse(&probe[u.hdr_len()..u.frame_len()]).unwrap();
    let report = fpmtud::wire::Report {
        probe_id: parsed.probe_id,
        nonce: parsed.nonce,
        fragments_seen: 2,
        sizes: vec![1400, 120],
    };
    let frame = wire::udp_frame(
        FROM_OUTSIDE,
        IpRepr::V4(Ipv4Repr::new(OUTSIDE, INSIDE)),
        UdpRepr {
            src_port: PORT,
            dst_port: u.key.sport,
        },
        &report.to_bytes().unwrap(),
    )
    .unwrap();
    assert!(
        p.on_inbound(&frame, now, &mut Vec::new()),
        "the report is ours"
    );
}

/// Looks `dst` up as an active connection would (every 10 ms) and polls as the worker does,
/// from `from` to `to`; every lookup must give `want`.
fn busy(p: &mut PathMtu, from: u64, to: u64, want: u16) {
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        assert_eq!(p.pmtu(dst(), t), want, "at {} ms", (t - T0) / MS);
        p.poll(t, &mut out);
        t += 10 * MS;
    }
    assert!(out.is_empty());
}

#[test]
fn a_capped_destination_gets_the_emtu_back_after_expire_s_and_not_before() {
    let mut p = path_mtu(false);
    assert!(p.cap(dst(), 1280, T0), "a Packet Too Big lowers it");
    assert_eq!(
        p.next_deadline(),
        Some(T0 + 600 * SEC),
        "expiry is a deadline"
    );
    // Looked up every 10 ms for 600 s: use does not keep it alive, and it stays until then.
    busy(&mut p, T0, T0 + 600 * SEC, 1280);
    assert_eq!(p.pmtu(dst(), T0 + 600 * SEC - 1), 1280);
    assert_eq!(p.summary().expired, 0);
    assert_eq!(
        p.pmtu(dst(), T0 + 600 * SEC),
        EMTU,
        "due at exactly expire_s"
    );
    // The poll after it removes the entry and counts it.
    p.poll(T0 + 600 * SEC, &mut Vec::new());
    let s = p.summary();
    assert_eq!((s.expired, s.cached), (1, 0));
    assert_eq!(p.next_deadline(), None, "nothing left to expire");
    // A new Packet Too Big lowers it again, for another 600 s.
    assert!(p.cap(dst(), 1280, T0 + 700 * SEC));
    busy(&mut p, T0 + 700 * SEC, T0 + 1300 * SEC, 1280);
    busy(&mut p, T0 + 1300 * SEC, T0 + 1302 * SEC, EMTU);
    assert_eq!(p.summary().expired, 2);
}

#[test]
fn a_lower_value_restarts_the_age_and_a_higher_one_does_not() {
    let mut p = path_mtu(false);
    assert!(p.cap(dst(), 1400, T0));
    assert!(
        p.cap(dst(), 1280, T0 + 300 * SEC),
        "lower: taken, age from now"
    );
    assert!(!p.cap(dst(), 1350, T0 + 400 * SEC), "higher: refused");
    assert!(!p.cap(dst(), 1280, T0 + 500 * SEC), "the same: refused");
    busy(&mut p, T0 + 300 * SEC, T0 + 900 * SEC, 1280);
    busy(&mut p, T0 + 900 * SEC, T0 + 902 * SEC, EMTU);
    assert_eq!(p.summary().expired, 1);
}

#[test]
fn a_probed_destination_is_probed_again_once_its_pmtu_expired() {
    let mut p = path_mtu(true);
    let probes = probes_on_syn(&mut p, T0);
    assert_eq!(probes.len(), 1);
    answer(&mut p, &probes[0], T0 + MS);
    assert_eq!(p.pmtu(dst(), T0 + MS), 1400);
    assert_eq!(p.summary().discovered, 1);
    // New connections before the expiry probe nothing: the cached value stands.
    busy(&mut p, T0 + MS, T0 + 600 * SEC, 1400);
    assert!(probes_on_syn(&mut p, T0 + 599 * SEC).is_empty());
    // Stored when the report came (T0 + 1 ms): due 600 s later.
    busy(&mut p, T0 + 600 * SEC + MS, T0 + 602 * SEC, EMTU);
    assert_eq!(p.summary().expired, 1);
    let again = probes_on_syn(&mut p, T0 + 602 * SEC);
    assert_eq!(again.len(), 1, "probed again on the next connection");
    assert_eq!(p.summary().probed, 2);
    answer(&mut p, &again[0], T0 + 602 * SEC + MS);
    assert_eq!(p.pmtu(dst(), T0 + 602 * SEC + MS), 1400);
}

#[test]
fn a_packet_too_big_during_a_probe_round_is_not_raised_by_its_result() {
    let mut p = path_mtu(true);
    let probes = probes_on_syn(&mut p, T0);
    assert!(p.cap(dst(), 1280, T0 + MS));
    answer(&mut p, &probes[0], T0 + 2 * MS);
    assert_eq!(p.pmtu(dst(), T0 + 3 * MS), 1280);
}

#[test]
fn many_due_entries_are_removed_over_several_polls() {
    let mut p = path_mtu(false);
    for i in 0..2000u32 {
        let d = IpAddr::from((0xc612_0000u32 + i).to_be_bytes());
        assert!(p.cap(d, 1280, T0));
    }
    let mut out = Vec::new();
    // One poll removes a bounded number; the next polls take the rest at once.
    p.poll(T0 + 600 * SEC, &mut out);
    let first = p.summary().expired;
    assert!(first > 0 && first < 2000, "{first} in one poll");
    for i in 1..=16 {
        p.poll(T0 + 600 * SEC + i, &mut out);
    }
    assert_eq!(p.summary().expired, 2000);
    assert_eq!(p.summary().cached, 0);
}

fn config(extra: &str) -> Result<Config, pxgw::config::ConfigError> {
    Config::parse(&format!(
        "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n{extra}"
    ))
}

#[test]
fn the_settings_come_from_the_configuration() {
    let c = PathMtuConfig::of(
        &config("[pmtu]\nexpire_s = 30\nrespond_per_sec = 50\n[rss]\nkey = 0x1f35\n").unwrap(),
    )
    .unwrap();
    assert_eq!(c.expire, Duration::from_secs(30));
    assert_eq!(
        (c.responder.global_rate_per_sec, c.responder.global_burst),
        (50, 50)
    );
    assert_eq!(c.rss_key.pattern(), 0x1f35);
    let d = PathMtuConfig::of(&config("").unwrap()).unwrap();
    assert_eq!(d.expire, Duration::from_secs(600));
    assert_eq!(d.responder.global_rate_per_sec, 1000);

    // A 30 s age, through PathMtu::from_config.
    let cfg = config("[pmtu]\nexpire_s = 30\n").unwrap();
    let mut p = PathMtu::from_config(&cfg).unwrap();
    assert!(p.cap(dst(), 1280, T0));
    busy(&mut p, T0, T0 + 30 * SEC, 1280);
    assert_eq!(p.pmtu(dst(), T0 + 30 * SEC), EMTU);

    for (extra, key) in [
        ("[pmtu]\nexpire_s = 0\n", "pmtu.expire_s"),
        ("[pmtu]\nexpire_s = 604801\n", "pmtu.expire_s"),
        ("[pmtu]\nexpire_s = 1000000000000\n", "pmtu.expire_s"),
        ("[pmtu]\nrespond_per_sec = 0\n", "pmtu.respond_per_sec"),
        ("[rss]\nkey = 0\n", "rss.key"),
        ("[rss]\nkey = 0x0003\n", "rss.key"),
    ] {
        let e = config(extra).unwrap_err().to_string();
        assert!(e.contains(key), "{extra:?}: {e}");
    }
    assert!(config("[rss]\nkey = \"fixed\"\n").is_err());
}

#[test]
fn probes_hash_with_the_configured_key() {
    // 0x1f35 and the well-known 0x6d5a choose different probe source ports for this SYN.
    let (frame, h) = syn(OUTSIDE, 50001);
    let fixed = SymmetricKey::new(0x1f35).unwrap();
    let want = probe_source_port(&fixed.toeplitz(), &h, PORT);
    assert_ne!(
        want,
        probe_source_port(&SymmetricKey::default().toeplitz(), &h, PORT)
    );
    let cfg = config("[rss]\nkey = 0x1f35\n").unwrap();
    let mut p = PathMtu::from_config(&cfg).unwrap();
    let mut out = Vec::new();
    p.on_outbound_syn(&frame, &h, T0, &mut out);
    let Class::Udp(u) = wire::classify(&out[0], out[0].len()) else {
        panic!("a probe is UDP")
    };
    assert_eq!(u.key.sport, want);
    let t = fixed.toeplitz();
    assert_eq!(
        t.hash_v4(INSIDE, OUTSIDE, want, PORT) & 0x1ff,
        t.hash_v4(INSIDE, OUTSIDE, 50001, 443) & 0x1ff,
        "the probe lands on the SYN's redirection-table entry under the port's key"
    );
}

#[test]
fn the_counters_add_up_and_reach_json() {
    let a = Report {
        pmtud: PmtudSummary {
            expired: 2,
            respond_source_limited: 3,
            respond_global_limited: 5,
            ..PmtudSummary::default()
        },
        ..Report::default()
    };
    let mut b = a.clone();
    b.add(&a);
    let j = b.to_json(1.0, 0, &PortCounters::default());
    assert_eq!(j["pmtud"]["expired"], 4);
    assert_eq!(j["pmtud"]["respond_source_limited"], 6);
    assert_eq!(j["pmtud"]["respond_global_limited"], 10);
}
