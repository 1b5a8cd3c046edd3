//! F-PMTUD over real Linux forwarding (SIGCOMM'26 §5.2): namespaces A — R — B, where R is a
//! Linux router with a 1400 B link toward B and A's link is 9000 B. The responder runs in B,
//! the prober in A. Addresses are from 198.18.0.0/15 inside these namespaces only.
//!
//! Needs root (namespaces, AF_PACKET), so every test is `#[ignore]`d: `cargo xtask test` runs
//! them as root (`cargo test -p fpmtud --test namespaces -- --ignored`). Every wait is bounded.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use fpmtud::endpoint::{self, ServeConfig, Server, ServerStats};
use fpmtud::wire::{Probe, Report};
use fpmtud::{PmtuEstimate, PmtuSource, ProberConfig};
use netlab::{run, Netns, Veth};

const B_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2));
/// A 9000 B probe (8980 B of IP payload) cut by a 1400 B link: 1376 B (172 x 8) per fragment.
const EXPECTED: [u16; 7] = [1396, 1396, 1396, 1396, 1396, 1396, 744];

struct Lab {
    a: Netns,
    _r: Netns,
    b: Netns,
    _links: [Veth; 2],
}

fn lab() -> Lab {
    let a = Netns::new("fpA").unwrap();
    let r = Netns::new("fpR").unwrap();
    let b = Netns::new("fpB").unwrap();
    let ar = Veth::new("fpar", 9000).unwrap();
    let rb = Veth::new("fprb", 1400).unwrap();
    run("ip", &["link", "set", ar.a(), "netns", a.name()]).unwrap();
    a.ip(&["link", "set", ar.a(), "up"]).unwrap();
    ar.move_b_into(&r).unwrap();
    run("ip", &["link", "set", rb.a(), "netns", r.name()]).unwrap();
    r.ip(&["link", "set", rb.a(), "up"]).unwrap();
    rb.move_b_into(&b).unwrap();
    a.ip(&["addr", "add", "198.18.1.1/24", "dev", ar.a()])
        .unwrap();
    r.ip(&["addr", "add", "198.18.1.2/24", "dev", ar.b()])
        .unwrap();
    r.ip(&["addr", "add", "198.18.2.1/24", "dev", rb.a()])
        .unwrap();
    b.ip(&["addr", "add", "198.18.2.2/24", "dev", rb.b()])
        .unwrap();
    a.ip(&["route", "add", "default", "via", "198.18.1.2"])
        .unwrap();
    b.ip(&["route", "add", "default", "via", "198.18.2.1"])
        .unwrap();
    r.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"]).unwrap();
    // Resolve neighbours on every hop first, so the probes measure the path, not ARP.
    a.exec("ping", &["-c", "1", "-W", "2", "198.18.2.2"])
        .unwrap();
    Lab {
        a,
        _r: r,
        b,
        _links: [ar, rb],
    }
}

fn cfg(size: u16) -> ProberConfig {
    ProberConfig {
        probe_size: size,
        interval: Duration::from_millis(50),
        timeout: Duration::from_millis(500),
        ..ProberConfig::default()
    }
}

/// Runs `serve` (a responder loop) in `ns` while `body` runs; stops it afterwards.
fn with_responder<T: Send>(
    ns: &Netns,
    serve: impl FnOnce(&AtomicBool, mpsc::Sender<()>) -> ServerStats + Send,
    body: impl FnOnce() -> T,
) -> (T, ServerStats) {
    let stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| ns.enter(|| serve(&stop, ready_tx)).unwrap());
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("responder did not start");
        let out = body();
        stop.store(true, Ordering::Relaxed);
        (out, server.join().unwrap())
    })
}

fn real_server(stop: &AtomicBool, ready: mpsc::Sender<()>) -> ServerStats {
    let mut server = Server::bind(ServeConfig {
        poll: Duration::from_millis(20),
        ..ServeConfig::default()
    })
    .unwrap();
    ready.send(()).unwrap();
    server.run_until(stop).unwrap()
}

fn probe_from(ns: &Netns, dst: IpAddr, cfg: ProberConfig) -> PmtuEstimate {
    ns.enter(|| endpoint::probe(dst, cfg, 0)).unwrap().unwrap()
}

#[test]
#[ignore = "needs root (network namespaces)"]
fn probe_through_a_1400_link_takes_one_round_trip() {
    let lab = lab();
    let ((big, fits), stats) = with_responder(&lab.b, real_server, || {
        (
            probe_from(&lab.a, B_ADDR, cfg(9000)),
            probe_from(&lab.a, B_ADDR, cfg(1400)),
        )
    });
    // The router cut the probe into 8-byte-aligned fragments: the largest, 1396 B, is the
    // estimate; the link's 1400 B is at most 7 bytes above it.
    assert_eq!(big.source, PmtuSource::Probe, "{big:?}");
    assert_eq!(big.mtu, 1396);
    assert!((1393..=1400).contains(&big.mtu));
    assert_eq!(big.fragments, EXPECTED);
    assert_eq!(big.fragments_seen, 7);
    assert_eq!(big.round_trips, 1);
    assert_eq!(
        big.probes, 1,
        "the second probe is sent only if the first is unanswered"
    );
    assert!(big.elapsed < Duration::from_millis(50), "{big:?}");
    // A probe that fits arrives whole: the PMTU is at least the probe.
    assert_eq!((fits.mtu, fits.source), (1400, PmtuSource::Probe));
    assert_eq!(fits.fragments, [1400]);
    assert_eq!(stats.reports_sent, 2, "{stats:?}");
    assert_eq!(stats.responder.answered, 2);
}

/// A responder that is not one: it echoes the probe id with a wrong nonce (an attacker who
/// saw the id but not the nonce), claiming no fragmentation; then, if `honest`, the genuine
/// report with the right nonce and the fragment sizes the lab produces.
fn forging_server(honest: bool) -> impl FnOnce(&AtomicBool, mpsc::Sender<()>) -> ServerStats {
    move |stop, ready| {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, fpmtud::DEFAULT_PORT)).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        ready.send(()).unwrap();
        let mut buf = vec![0; 65536];
        let mut stats = ServerStats::default();
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let probe = Probe::parse(&buf[..n]).unwrap();
            let mut report = Report {
                probe_id: probe.probe_id,
                nonce: probe.nonce ^ 1,
                fragments_seen: 1,
                sizes: vec![9000],
            };
            socket.send_to(&report.to_bytes().unwrap(), from).unwrap();
            if honest {
                report.nonce = probe.nonce;
                report.fragments_seen = 7;
                report.sizes = EXPECTED.to_vec();
                socket.send_to(&report.to_bytes().unwrap(), from).unwrap();
            }
            stats.reports_sent += 1;
        }
        stats
    }
}

#[test]
#[ignore = "needs root (network namespaces)"]
fn reports_with_a_bad_nonce_are_ignored() {
    let lab = lab();
    // Forged first, genuine second: the forged one does not end the round.
    let (e, _) = with_responder(&lab.b, forging_server(true), || {
        probe_from(&lab.a, B_ADDR, cfg(9000))
    });
    assert_eq!((e.mtu, e.source), (1396, PmtuSource::Probe), "{e:?}");
    assert_eq!(e.ignored_reports, 1);
    // Forged only: ignored every time, so the round falls back instead of taking 9000.
    let (e, forged) = with_responder(&lab.b, forging_server(false), || {
        probe_from(
            &lab.a,
            B_ADDR,
            ProberConfig {
                timeout: Duration::from_millis(200),
                emtu: Some(1500),
                ..cfg(9000)
            },
        )
    });
    assert_eq!((e.mtu, e.source), (1500, PmtuSource::Emtu), "{e:?}");
    assert_eq!(e.probes, 2);
    assert_eq!(u64::from(e.ignored_reports), forged.reports_sent);
    assert_eq!(e.ignored_reports, 2);
}

#[test]
#[ignore = "needs root (network namespaces)"]
fn without_a_responder_the_prober_falls_back() {
    let lab = lab();
    let quick = |mss_hint, emtu| ProberConfig {
        timeout: Duration::from_millis(200),
        mss_hint,
        emtu,
        ..cfg(9000)
    };
    // MSS hint first (MSS + 40 for IPv4)...
    let e = probe_from(&lab.a, B_ADDR, quick(Some(1360), None));
    assert_eq!((e.mtu, e.source), (1400, PmtuSource::MssHint), "{e:?}");
    assert_eq!((e.probes, e.round_trips), (2, 0));
    assert!(e.elapsed >= Duration::from_millis(250), "{e:?}");
    assert!(e.elapsed < Duration::from_secs(2), "{e:?}");
    // ...then the eMTU: A's route MTU (its 9000 B link) when none is given.
    let e = probe_from(&lab.a, B_ADDR, quick(None, None));
    assert_eq!((e.mtu, e.source), (9000, PmtuSource::Emtu), "{e:?}");
    let e = probe_from(&lab.a, B_ADDR, quick(None, Some(1500)));
    assert_eq!((e.mtu, e.source), (1500, PmtuSource::Emtu), "{e:?}");
}

/// IPv4 and IPv6 on one host whose loopback MTU is 1400: the sending kernel fragments the
/// probe itself (DF clear), and the capture sees IPv4 and IPv6 fragments alike.
#[test]
#[ignore = "needs root (network namespaces)"]
fn loopback_fragments_ipv4_and_ipv6() {
    let ns = Netns::new("fpL").unwrap();
    ns.ip(&["link", "set", "lo", "mtu", "1400"]).unwrap();
    let ((v4, v6), stats) = with_responder(&ns, real_server, || {
        (
            probe_from(&ns, IpAddr::V4(Ipv4Addr::LOCALHOST), cfg(9000)),
            probe_from(&ns, IpAddr::V6(Ipv6Addr::LOCALHOST), cfg(9000)),
        )
    });
    assert_eq!((v4.mtu, v4.source), (1396, PmtuSource::Probe), "{v4:?}");
    assert_eq!(v4.fragments, EXPECTED);
    // IPv6: 40 + 8 bytes of headers, 1352 (169 x 8) of payload per fragment.
    assert_eq!((v6.mtu, v6.source), (1400, PmtuSource::Probe), "{v6:?}");
    assert_eq!(v6.fragments.len(), 7);
    assert_eq!(stats.reports_sent, 2, "{stats:?}");
}
