//! Which DPDK port type sees frames as they are on the wire, fragments as fragments.
//!
//! A namespace host sends a 3000 B UDP datagram, DF clear, over a route with MTU 1400: the kernel
//! fragments it into three frames. Its veth end (in this namespace) is bridged to a persistent
//! TAP that DPDK's `net_tap` opens, and also opened by `net_af_packet`. The TAP port receives
//! the three fragments; af_packet receives one reassembled frame (its socket joins a fanout group
//! with `PACKET_FANOUT_FLAG_DEFRAG`), which is why the gateway's outside port does not use it.
//! The TAP spreads flows over two queues; it cannot take 9000 B frames, so the inside port (where
//! nothing arrives fragmented from outside) stays on af_packet.

use std::collections::HashSet;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use dpdk::testing::{assert_no_leaks, eal, pool, vdev};
use dpdk::{Burst, Mbuf, Mempool, Port, RssHash};
use etherparse::Ipv4HeaderSlice;
use netlab::{Netns, TapWire, Veth};

const JUMBO: usize = 9000;
/// The outside MTU, which the TAP carries.
const EMTU: u32 = 1500;
const HOST: &str = "198.18.6.1";
/// A destination behind the route with MTU 1400 (answered by nobody: a static neighbour entry).
const FAR: &str = "198.18.7.9";
const FAR_MAC: &str = "02:00:00:00:07:09";
const PATH_MTU: usize = 1400;
/// IP payload per fragment on that path: the largest multiple of 8 that fits.
const _: () = assert!((PATH_MTU - 20) / 8 * 8 == 1376);
const DATAGRAM: usize = 3000;
/// Mbufs that hold a whole frame (the ports here receive into one mbuf per frame).
const DATA_ROOM: u16 = 2048 + 128;

struct Lab {
    ns: Netns,
    veth: Veth,
    wire: TapWire,
}

fn lab() -> Lab {
    let ns = Netns::new("pxtw").unwrap();
    let veth = Veth::new("pxtw", EMTU).unwrap();
    veth.move_b_into(&ns).unwrap();
    let wire = TapWire::new("pxtw", veth.a(), EMTU).unwrap();
    let b = veth.b();
    ns.ip(&["addr", "add", &format!("{HOST}/24"), "dev", b])
        .unwrap();
    ns.exec("sysctl", &["-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        .unwrap();
    // `mtu lock`: the kernel fragments what is larger, and does not set DF (ip_dont_fragment).
    ns.ip(&[
        "route",
        "add",
        &format!("{FAR}/32"),
        "dev",
        b,
        "mtu",
        "lock",
        &PATH_MTU.to_string(),
    ])
    .unwrap();
    ns.ip(&["neigh", "add", FAR, "lladdr", FAR_MAC, "dev", b])
        .unwrap();
    Lab { ns, veth, wire }
}

fn tap_port(lab: &Lab, queues: u16, pool: &std::sync::Arc<Mempool>) -> Port {
    let id = vdev("net_tap", &format!("iface={}", lab.wire.tap()));
    let port = Port::builder(eal(), id)
        .rx_queues(queues)
        .tx_queues(queues)
        .rss(RssHash::IP | RssHash::UDP)
        .mtu(EMTU as u16)
        // The TAP PMD fills every RX descriptor with an mbuf at set-up.
        .descriptors(256, 256)
        .start(pool)
        .unwrap();
    assert_eq!(port.driver(), "net_tap");
    port
}

/// Everything the port's queue `q` receives within `window`.
fn receive_for(port: &Port, q: u16, window: Duration) -> Vec<Mbuf> {
    let mut rx = port.rx_queue(q).unwrap();
    let mut got = Vec::new();
    let deadline = Instant::now() + window;
    while Instant::now() < deadline {
        let mut burst = Burst::<32>::new();
        if rx.rx_burst(&mut burst) == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        got.extend(burst.drain());
    }
    got
}

/// The IPv4 packets from the namespace host to `FAR` among `frames`: (id, MF, offset, length,
/// payload).
fn toward_far(frames: &[Mbuf]) -> Vec<(u16, bool, u16, usize, Vec<u8>)> {
    let far: [u8; 4] = FAR.parse::<std::net::Ipv4Addr>().unwrap().octets();
    frames
        .iter()
        .filter_map(|m| {
            let bytes = m.to_vec();
            if bytes.get(12..14) != Some(&[0x08, 0x00][..]) {
                return None;
            }
            let ip = Ipv4HeaderSlice::from_slice(&bytes[14..]).ok()?;
            (ip.destination() == far).then(|| {
                let payload =
                    bytes[14 + ip.slice().len()..14 + usize::from(ip.total_len())].to_vec();
                (
                    ip.identification(),
                    ip.more_fragments(),
                    ip.fragments_offset().value() * 8,
                    usize::from(ip.total_len()),
                    payload,
                )
            })
        })
        .collect()
}

fn send_datagram(lab: &Lab, len: usize, sport: u16) {
    lab.ns
        .enter(|| {
            let socket = UdpSocket::bind((HOST, sport)).unwrap();
            socket.send_to(&vec![0x5a; len], (FAR, 7000)).unwrap();
        })
        .unwrap();
}

#[test]
fn net_tap_receives_fragments_as_on_the_wire_and_af_packet_reassembles_them() {
    let lab = lab();
    let pool = pool(1024, DATA_ROOM);
    let tap = tap_port(&lab, 1, &pool);
    // af_packet on the veth end, for comparison: its ring frames must hold the reassembled frame.
    let af_id = vdev(
        "net_af_packet",
        &format!(
            "iface={},framesz=10240,blocksz=40960,framecnt=16",
            lab.veth.a()
        ),
    );
    let af_pool = dpdk::testing::pool(128, 10240 + 128);
    let af_packet = Port::builder(eal(), af_id).start(&af_pool).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    send_datagram(&lab, DATAGRAM, 5000);
    let (tap_frames, af_frames) = std::thread::scope(|s| {
        let af = s.spawn(|| receive_for(&af_packet, 0, Duration::from_secs(2)));
        (
            receive_for(&tap, 0, Duration::from_secs(2)),
            af.join().unwrap(),
        )
    });

    let fragments = toward_far(&tap_frames);
    let sizes: Vec<(bool, u16, usize)> = fragments.iter().map(|f| (f.1, f.2, f.3)).collect();
    // On a 1400 B path a fragment carries 1376 B (the 8-byte grid): 1396 B packets, then the rest
    // of the 3008 B UDP datagram.
    assert_eq!(
        sizes,
        vec![
            (true, 0, 20 + 1376),
            (true, 1376, 20 + 1376),
            (false, 2752, 20 + 256)
        ],
        "net_tap: three fragments as the kernel sent them"
    );
    assert!(
        fragments.iter().all(|f| f.0 == fragments[0].0),
        "one datagram"
    );
    let reassembled: Vec<u8> = fragments.iter().flat_map(|f| f.4.clone()).collect();
    assert_eq!(reassembled.len(), 8 + DATAGRAM);
    assert!(reassembled[8..].iter().all(|&b| b == 0x5a), "bytes intact");

    let whole = toward_far(&af_frames);
    let sizes: Vec<(bool, u16, usize)> = whole.iter().map(|f| (f.1, f.2, f.3)).collect();
    assert_eq!(
        sizes,
        vec![(false, 0, 20 + 8 + DATAGRAM)],
        "net_af_packet: one frame, reassembled by the kernel (PACKET_FANOUT_FLAG_DEFRAG)"
    );

    drop((tap_frames, af_frames, tap, af_packet));
    assert_no_leaks(&pool);
    assert_no_leaks(&af_pool);
}

#[test]
fn net_tap_refuses_jumbo_frames_so_the_inside_port_stays_on_af_packet() {
    let lab = lab();
    let pool = pool(64, 9216 + 128);
    let id = vdev("net_tap", &format!("iface={}", lab.wire.tap()));
    // DPDK 22.11's TAP PMD reports a 1522 B maximum frame, and its TX drops frames longer than
    // its MTU: it cannot carry the 9000 B inside of the lab. The builder refuses the MTU before
    // configuring the device, naming the limit.
    let refused = Port::builder(eal(), id).mtu(JUMBO as u16).start(&pool);
    assert!(
        matches!(&refused, Err(dpdk::Error::Mtu { driver, mtu, reason, .. })
            if driver == "net_tap" && usize::from(*mtu) == JUMBO && reason.contains("1504")),
        "{refused:?}"
    );
    drop(refused);
    assert_no_leaks(&pool);
}

#[test]
fn a_two_queue_tap_spreads_flows_and_keeps_fragments_of_a_datagram_together() {
    let lab = lab();
    let pool = pool(2048, DATA_ROOM);
    let port = tap_port(&lab, 2, &pool);
    std::thread::sleep(Duration::from_millis(300));
    // 32 flows of one small datagram each, and one fragmented datagram.
    for sport in 6000..6032 {
        send_datagram(&lab, 100, sport);
    }
    send_datagram(&lab, DATAGRAM, 6100);
    let (q0, q1) = std::thread::scope(|s| {
        let q1 = s.spawn(|| receive_for(&port, 1, Duration::from_secs(2)));
        (
            receive_for(&port, 0, Duration::from_secs(2)),
            q1.join().unwrap(),
        )
    });
    let (p0, p1) = (toward_far(&q0), toward_far(&q1));
    let small = |p: &[(u16, bool, u16, usize, Vec<u8>)]| p.iter().filter(|f| f.3 == 128).count();
    assert_eq!(small(&p0) + small(&p1), 32, "every datagram arrived once");
    assert!(
        small(&p0) > 0 && small(&p1) > 0,
        "both queues carry flows: {} / {}",
        small(&p0),
        small(&p1)
    );
    // The fragments hash on addresses only, so all three reach one queue.
    let frags =
        |p: &[(u16, bool, u16, usize, Vec<u8>)]| p.iter().filter(|f| f.1 || f.2 > 0).count();
    let per_queue: HashSet<usize> = [frags(&p0), frags(&p1)].into_iter().collect();
    assert_eq!(
        per_queue,
        HashSet::from([0, 3]),
        "{} / {}",
        frags(&p0),
        frags(&p1)
    );

    drop((q0, q1, port));
    assert_no_leaks(&pool);
}
