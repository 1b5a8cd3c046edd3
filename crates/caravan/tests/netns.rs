//! The namespace integration test (needs root and `cargo xtask build-ebpf`).
//!
//! A sender namespace builds caravans with pxio's encoder: 1 to 64 datagrams, 1 B up to what
//! fills the 9000 B iMTU, some exactly at the iMTU edge. It sends them over a veth to a receiver
//! namespace where caravan-ebpf is attached. Plain UDP and a malformed caravan are interleaved.
//! Ordinary sockets must get exactly the original datagrams (count, order, boundaries, bytes;
//! the kernel verifies every inner UDP checksum). A pass-through port gets the caravans whole,
//! still marked, and `caravan::recv` reads each as a caravan for caravan::Reader to split. The same runs in IPv4 and IPv6, and with 802.1Q tags: the
//! sender writes tagged frames to a packet socket, and the receiving kernel moves each tag into
//! the socket buffer's metadata before the program sees the frame, as for any tagged frame. (This
//! test kernel has no 802.1Q devices, so the tags carry VLAN 0, priority 3: the stack then
//! delivers the datagrams on the interface itself.) A caravan damaged on the way (its outer UDP
//! checksum fails) reaches no socket: the program passes it untouched and the kernel drops it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use caravan::{Decap, DecapConfig, Refused};
use netlab::Netns;
use nix::sys::socket::{setsockopt, sockopt};
use pxio::caravan::{CaravanBuilder, CaravanConfig};
use pxio::{checksum, wire, HeapPool, PacketBuf};

const IMTU: usize = 9000;
const SPORT: u16 = 41000;
const DECAP_PORT: u16 = 5001;
const PASS_PORT: u16 = 5002;
const PLAIN_PORT: u16 = 5003;
/// The TCI of the tagged runs: priority 3, VLAN 0 (802.1p).
const TCI: u16 = 3 << 13;
/// Source port of the plain datagrams.
const PLAIN_SPORT: u16 = 41001;

/// One run's addressing: the family and whether the hosts talk over a VLAN.
#[derive(Clone, Copy, Debug)]
struct Case {
    v6: bool,
    vlan: bool,
}

impl Case {
    fn tx_ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 1))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 18, 7, 1))
        }
    }

    fn rx_ip(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 7, 0, 0, 0, 0, 2))
        } else {
            IpAddr::V4(Ipv4Addr::new(198, 18, 7, 2))
        }
    }

    /// IP header bytes.
    fn ip_hdr(self) -> usize {
        if self.v6 {
            40
        } else {
            20
        }
    }

    /// Largest inner payload that fits one caravan at the iMTU: IP, outer UDP, caravan header,
    /// inner UDP.
    fn edge(self) -> usize {
        IMTU - self.ip_hdr() - 8 - 8 - 8
    }

    /// Offset of the IP header in the case's frames.
    fn l3(self) -> usize {
        14 + if self.vlan { 4 } else { 0 }
    }

    /// Offset of the outer UDP payload in the case's caravan frames.
    fn payload_at(self) -> usize {
        self.l3() + self.ip_hdr() + 8
    }

    /// One datagram as an Ethernet/IP/UDP frame (IPv4: DF, ID 1) with a correct UDP checksum,
    /// from `macs.0` to `macs.1`, tagged when the case says so: what the caravan encoder takes.
    fn datagram_frame(self, macs: Macs, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let ethernet = wire::EthernetRepr {
            dst: macs.1,
            src: macs.0,
            vlan_tci: self.vlan.then_some(TCI),
            ethertype: if self.v6 {
                wire::ethernet::ethertype::IPV6
            } else {
                wire::ethernet::ethertype::IPV4
            },
        };
        let ip = match (self.tx_ip(), self.rx_ip()) {
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                wire::IpRepr::V6(wire::Ipv6Repr::new(s.octets(), d.octets()))
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => wire::IpRepr::V4(wire::Ipv4Repr {
                ident: 1,
                dont_frag: true,
                ..wire::Ipv4Repr::new(s.octets(), d.octets())
            }),
            _ => unreachable!("one family per case"),
        };
        let udp = wire::UdpRepr {
            src_port: sport,
            dst_port: dport,
        };
        wire::udp_frame(ethernet, ip, udp, payload).expect("a datagram of at most the iMTU")
    }

    /// The frame of a caravan that pxio's encoder packs from `payloads`.
    fn caravan_frame(self, macs: Macs, dport: u16, payloads: &[Vec<u8>]) -> Vec<u8> {
        let pool = HeapPool::new(16384);
        let cfg = CaravanConfig {
            imtu: IMTU as u16,
            ..CaravanConfig::default()
        };
        let mut it = payloads.iter();
        let frame = |p: &[u8]| pool.packet(&self.datagram_frame(macs, SPORT, dport, p));
        let first = frame(it.next().expect("non-empty"));
        let mut builder = CaravanBuilder::start(first, cfg, &pool).expect("start a caravan");
        for p in it {
            builder
                .push(frame(p))
                .map_err(|(e, _)| e)
                .expect("datagram fits the caravan");
        }
        let frame = builder.finish().to_vec();
        let l3 = &frame[self.l3()..];
        let dscp = if self.v6 {
            wire::Ipv6Packet::new_unchecked(l3).dscp()
        } else {
            wire::Ipv4Packet::new_unchecked(l3).dscp()
        };
        assert_eq!(dscp, 7, "pxio marks the caravan");
        frame
    }

    /// Recomputes the outer UDP checksum of a caravan frame whose bytes were edited: a
    /// malformed caravan that arrived intact.
    fn reseal(self, frame: &mut [u8]) {
        let l4 = self.l3() + self.ip_hdr();
        let len = wire::UdpPacket::new_unchecked(&frame[l4..]).len();
        let pseudo = match (self.tx_ip(), self.rx_ip()) {
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                checksum::pseudo_header_v6(s.octets(), d.octets(), 17, u32::from(len))
            }
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                checksum::pseudo_header_v4(s.octets(), d.octets(), 17, len)
            }
            _ => unreachable!("one family per case"),
        };
        wire::UdpPacket::new_unchecked(&mut frame[l4..]).fill_checksum(pseudo);
    }

    /// The outer UDP payload of a caravan that pxio's encoder packs from `payloads`.
    fn caravan_payload(self, dport: u16, payloads: &[Vec<u8>]) -> Vec<u8> {
        self.caravan_frame(([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]), dport, payloads)
            [self.payload_at()..]
            .to_vec()
    }

    /// Payload sizes of the caravans sent: 1..=64 datagrams, 1 B to the iMTU edge.
    fn caravan_shapes(self) -> Vec<Vec<usize>> {
        let edge = self.edge();
        vec![
            vec![1],
            vec![edge],       // one datagram exactly at the iMTU
            vec![0, 1, 2, 3], // an empty datagram is legal
            vec![1452; 6],
            vec![edge - 8 - 100, 100], // two datagrams filling the iMTU exactly
            vec![4000, 4000, edge - 8016], // three, at the edge again
            (1..=64).map(|i| i % 50 + 1).collect(), // 64 small ones: the bound
            vec![5000, 1, 3000],
        ]
    }
}

fn payloads_for(shape: &[usize], tag: u8) -> Vec<Vec<u8>> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            (0..n)
                .map(|j| (j as u8).wrapping_mul(31) ^ tag ^ (i as u8))
                .collect()
        })
        .collect()
}

fn recv_all(sock: &UdpSocket, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    while got.len() < want {
        match sock.recv(&mut buf) {
            Ok(n) => got.push(buf[..n].to_vec()),
            Err(_) => break, // timed out: report what arrived
        }
    }
    got
}

/// Source and destination MAC addresses.
type Macs = ([u8; 6], [u8; 6]);

/// A veth pair between the namespaces with the case's addresses: (sender's interface,
/// receiver's interface).
fn wire_up(case: Case, tx: &Netns, rx: &Netns) -> (String, String) {
    let (a, b) =
        netlab::veth_between(tx, "198.18.9.1/30", rx, "198.18.9.2/30", "cv", 9000).expect("veth");
    let prefix = if case.v6 { 64 } else { 24 };
    for (ns, dev, ip) in [(tx, &a, case.tx_ip()), (rx, &b, case.rx_ip())] {
        let cidr = format!("{ip}/{prefix}");
        let mut args = vec!["addr", "add", &cidr, "dev", dev];
        if case.v6 {
            args.push("nodad");
        }
        ns.ip(&args).expect("address");
    }
    // Software checksums, so the receiver verifies every inner UDP checksum itself.
    tx.exec("ethtool", &["-K", &a, "tx", "off"]).unwrap();
    (a, b)
}

/// The MAC address of `iface` in `ns`.
fn mac(ns: &Netns, iface: &str) -> [u8; 6] {
    let text = ns
        .exec("cat", &[&format!("/sys/class/net/{iface}/address")])
        .unwrap();
    let mut mac = [0u8; 6];
    for (b, part) in mac.iter_mut().zip(text.trim().split(':')) {
        *b = u8::from_str_radix(part, 16).unwrap();
    }
    mac
}

/// Writes `frames` to a packet socket on `iface` in `ns`, in order (Python's AF_PACKET: the
/// test crates have no packet socket of their own).
fn send_frames(ns: &Netns, iface: &str, frames: &[Vec<u8>]) {
    let path = std::env::temp_dir().join(format!("caravan-frames-{}", netlab::unique_name("f")));
    let mut blob = Vec::new();
    for f in frames {
        blob.extend_from_slice(&(f.len() as u32).to_be_bytes());
        blob.extend_from_slice(f);
    }
    std::fs::write(&path, blob).unwrap();
    let script = "import socket, sys\n\
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n\
        s.bind((sys.argv[1], 0))\n\
        d = open(sys.argv[2], 'rb').read()\n\
        i = 0\n\
        while i < len(d):\n    n = int.from_bytes(d[i:i + 4], 'big'); s.send(d[i + 4:i + 4 + n]); i += 4 + n\n";
    let sent = ns.exec(
        "python3",
        &["-c", script, iface, &path.display().to_string()],
    );
    let _ = std::fs::remove_file(&path);
    sent.expect("python3 sends the frames");
}

/// Caravans of 1 to 64 datagrams, from 1 B to the iMTU edge, built by pxio's encoder and sent
/// over a veth to a namespace where the program is attached: ordinary sockets get exactly the
/// original datagrams (count, order, boundaries, bytes), plain UDP and a malformed caravan are
/// handled, and the pass-through port gets whole caravans that `caravan::Reader` splits.
fn caravans_decapsulated(case: Case) {
    let tx = Netns::new("cvtx").unwrap();
    let rx = Netns::new("cvrx").unwrap();
    let (a, phys) = wire_up(case, &tx, &rx);
    let macs = (mac(&tx, &a), mac(&rx, &phys));
    let rx_ip = case.rx_ip();

    let (decap, socks) = rx
        .enter(|| {
            let mut decap = Decap::attach(&phys, DecapConfig::default()).expect("attach");
            decap.add_passthrough_port(PASS_PORT).unwrap();
            let socks: Vec<UdpSocket> = [DECAP_PORT, PASS_PORT, PLAIN_PORT]
                .iter()
                .map(|&p| {
                    let s = UdpSocket::bind(SocketAddr::new(rx_ip, p)).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    // Clones keep the caravan's buffer size until the socket reads them.
                    setsockopt(&s, sockopt::RcvBufForce, &(64 << 20)).unwrap();
                    // The readers tell caravans by the mark the IP header carried.
                    caravan::report_traffic_class(&s).unwrap();
                    s
                })
                .collect();
            (decap, socks)
        })
        .unwrap();

    let shapes = case.caravan_shapes();
    let sent: Vec<Vec<Vec<u8>>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| payloads_for(s, i as u8))
        .collect();
    let plain: Vec<Vec<u8>> = (0..shapes.len())
        .map(|i| vec![0xee ^ i as u8; 100 + i])
        .collect();
    if case.vlan {
        // The same sequence as below, as tagged frames.
        let mut frames = Vec::new();
        for (i, payloads) in sent.iter().enumerate() {
            frames.push(case.caravan_frame(macs, DECAP_PORT, payloads));
            frames.push(case.datagram_frame(macs, PLAIN_SPORT, PLAIN_PORT, &plain[i]));
            if i == 3 {
                let mut bad = case.caravan_frame(macs, DECAP_PORT, &[vec![1; 10], vec![2; 10]]);
                // The second inner header: behind the caravan header and the first datagram.
                let at = case.payload_at() + 8 + 18 + 4;
                bad[at..at + 2].copy_from_slice(&100u16.to_be_bytes());
                case.reseal(&mut bad);
                frames.push(bad);
            }
            frames.push(case.caravan_frame(macs, PASS_PORT, payloads));
        }
        send_frames(&tx, &a, &frames);
    } else {
        send_sockets(case, &tx, &sent, &plain);
    }
    // A caravan damaged on the way (one payload bit, the outer UDP checksum not updated): the
    // program passes it untouched, the receiving kernel drops it, and no socket gets any of it.
    let mut damaged = case.caravan_frame(macs, DECAP_PORT, &[vec![3; 40], vec![4; 40]]);
    let last = damaged.len() - 1;
    damaged[last] ^= 0x01;
    send_frames(&tx, &a, &[damaged]);
    receive_and_check(case, &decap, &socks, &sent, &plain);
}

/// Sends the caravans of `sent` and the `plain` datagrams from ordinary sockets in `tx`.
fn send_sockets(case: Case, tx: &Netns, sent: &[Vec<Vec<u8>>], plain: &[Vec<u8>]) {
    let (rx_ip, tx_ip) = (case.rx_ip(), case.tx_ip());
    tx.enter(|| {
        let sock = UdpSocket::bind(SocketAddr::new(tx_ip, SPORT)).unwrap();
        let plain_sock = UdpSocket::bind(SocketAddr::new(tx_ip, PLAIN_SPORT)).unwrap();
        // The plain datagrams wear the mark too: without a caravan header they are ordinary
        // datagrams, and must reach their socket untouched.
        for s in [&sock, &plain_sock] {
            if case.v6 {
                setsockopt(s, sockopt::Ipv6TClass, &(7 << 2)).unwrap();
            } else {
                setsockopt(s, sockopt::Ipv4Tos, &(7 << 2)).unwrap();
            }
        }
        for (i, payloads) in sent.iter().enumerate() {
            let c = case.caravan_payload(DECAP_PORT, payloads);
            sock.send_to(&c, SocketAddr::new(rx_ip, DECAP_PORT))
                .unwrap();
            plain_sock
                .send_to(&plain[i], SocketAddr::new(rx_ip, PLAIN_PORT))
                .unwrap();
            if i == 3 {
                // A malformed caravan: its second inner length overruns the payload.
                let mut bad = case.caravan_payload(DECAP_PORT, &[vec![1; 10], vec![2; 10]]);
                // Behind the caravan header (8 B) and the first datagram (18 B).
                bad[8 + 18 + 4..8 + 18 + 6].copy_from_slice(&100u16.to_be_bytes());
                sock.send_to(&bad, SocketAddr::new(rx_ip, DECAP_PORT))
                    .unwrap();
            }
            // The same datagrams, packed for the pass-through port.
            let c = case.caravan_payload(PASS_PORT, payloads);
            sock.send_to(&c, SocketAddr::new(rx_ip, PASS_PORT)).unwrap();
        }
    })
    .unwrap();
}

/// Reads what the sockets got and checks it against what was sent, and the counters.
fn receive_and_check(
    case: Case,
    decap: &Decap,
    socks: &[UdpSocket],
    sent: &[Vec<Vec<u8>>],
    plain: &[Vec<u8>],
) {
    let expected: Vec<Vec<u8>> = sent.iter().flatten().cloned().collect();
    eprintln!(
        "{case:?}: stats before receive: {:?}",
        decap.stats().unwrap()
    );
    let got = recv_all(&socks[0], expected.len());
    assert_eq!(got.len(), expected.len(), "{case:?}: datagram count");
    socks[0]
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut extra = vec![0u8; 65536];
    assert!(
        socks[0].recv(&mut extra).is_err(),
        "{case:?}: nothing more (no datagram of the damaged caravan)"
    );
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            g == e,
            "{case:?}: datagram {i}: order, boundary and bytes: got {} B, want {} B",
            g.len(),
            e.len()
        );
    }
    // The pass-through port: one recv per caravan, still marked, split by caravan::Reader.
    let mut buf = vec![0u8; 65536];
    for (i, payloads) in sent.iter().enumerate() {
        let msg = caravan::recv(&socks[1], &mut buf)
            .unwrap_or_else(|e| panic!("{case:?}: pass-through caravan {i}: {e}"));
        let reader = msg
            .caravan_with_ports(SPORT, PASS_PORT)
            .expect("a valid caravan, still marked");
        let split: Vec<Vec<u8>> = reader.map(|d| d.payload.to_vec()).collect();
        assert_eq!(
            &split, payloads,
            "{case:?}: Reader splits the caravan right"
        );
    }
    // Plain UDP, marked or not, arrives untouched and is read as one ordinary datagram.
    for (i, want) in plain.iter().enumerate() {
        let msg = caravan::recv(&socks[2], &mut buf)
            .unwrap_or_else(|e| panic!("{case:?}: plain datagram {i}: {e}"));
        assert_eq!(msg.payload, &want[..], "{case:?}: plain UDP untouched");
        assert_eq!(msg.caravan().unwrap_err(), Refused::NotCaravan, "{case:?}");
    }

    let stats = decap.stats().unwrap();
    assert_eq!(stats.malformed, 1, "{case:?}");
    assert_eq!(stats.caravans, 2 * sent.len() as u64, "{case:?}");
    assert_eq!(stats.passed_through, sent.len() as u64, "{case:?}");
    assert_eq!(stats.datagrams, expected.len() as u64, "{case:?}");
    assert_eq!(stats.helper_errors, 0, "{case:?}");
    assert_eq!(stats.bad_checksum, 1, "{case:?}: the damaged caravan");
    let marked_plain = if case.vlan { 0 } else { plain.len() as u64 };
    assert_eq!(stats.marked_plain, marked_plain, "{case:?}");
}

#[test]
fn caravans_decapsulated_between_namespaces() {
    caravans_decapsulated(Case {
        v6: false,
        vlan: false,
    });
}

#[test]
fn ipv6_caravans_decapsulated_between_namespaces() {
    caravans_decapsulated(Case {
        v6: true,
        vlan: false,
    });
}

#[test]
fn vlan_caravans_decapsulated_between_namespaces() {
    for v6 in [false, true] {
        caravans_decapsulated(Case { v6, vlan: true });
    }
}
