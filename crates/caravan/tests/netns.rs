//! The namespace integration test (needs root and `cargo xtask build-ebpf`).
//!
//! A sender namespace builds caravans with pxio's encoder: 1 to 64 datagrams, 1 B up to what
//! fills the 9000 B iMTU, some exactly at the iMTU edge. It sends them over a veth to a receiver
//! namespace where caravan-ebpf is attached. Plain UDP and a malformed caravan are interleaved.
//! Ordinary sockets must get exactly the original datagrams (count, order, boundaries, bytes;
//! the kernel verifies every inner UDP checksum). A pass-through port gets the caravans whole,
//! and caravan::Reader splits them.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::Duration;

use caravan::{Decap, DecapConfig, Reader};
use netlab::Netns;
use nix::sys::socket::{setsockopt, sockopt};
use pxio::caravan::{CaravanBuilder, CaravanConfig};
use pxio::{wire, HeapPool, PacketBuf};

const TX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const RX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const IMTU: usize = 9000;
const SPORT: u16 = 41000;
const DECAP_PORT: u16 = 5001;
const PASS_PORT: u16 = 5002;
const PLAIN_PORT: u16 = 5003;
/// Largest inner payload that fits one caravan at the iMTU: 9000 - 20 - 8 (outer) - 8 (inner).
const EDGE: usize = IMTU - 36;

/// One datagram as an Ethernet/IPv4/UDP frame (DF, ID 1) with a correct UDP checksum.
fn datagram_frame(dport: u16, payload: &[u8]) -> Vec<u8> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: wire::ethernet::ethertype::IPV4,
    };
    let ip = wire::IpRepr::V4(wire::Ipv4Repr {
        ident: 1,
        dont_frag: true,
        ..wire::Ipv4Repr::new(TX_IP.octets(), RX_IP.octets())
    });
    let udp = wire::UdpRepr {
        src_port: SPORT,
        dst_port: dport,
    };
    wire::udp_frame(ethernet, ip, udp, payload).expect("a datagram of at most the iMTU")
}

/// The outer UDP payload of a caravan that pxio's encoder packs from `payloads`.
fn caravan_payload(dport: u16, payloads: &[Vec<u8>]) -> Vec<u8> {
    let pool = HeapPool::new(16384);
    let cfg = CaravanConfig {
        imtu: IMTU as u16,
        ..CaravanConfig::default()
    };
    let mut it = payloads.iter();
    let first = pool.packet(&datagram_frame(dport, it.next().expect("non-empty")));
    let mut builder = CaravanBuilder::start(first, cfg, &pool).expect("start a caravan");
    for p in it {
        builder
            .push(pool.packet(&datagram_frame(dport, p)))
            .map_err(|(e, _)| e)
            .expect("datagram fits the caravan");
    }
    let frame = builder.finish().to_vec();
    assert_eq!(frame[15] >> 2, 7, "pxio marks the caravan");
    frame[14 + 20 + 8..].to_vec()
}

/// Payload sizes of the caravans sent: 1..=64 datagrams, 1 B to the iMTU edge.
fn caravan_shapes() -> Vec<Vec<usize>> {
    vec![
        vec![1],
        vec![EDGE],       // one datagram exactly at the iMTU
        vec![0, 1, 2, 3], // an empty datagram is legal
        vec![1472; 6],
        vec![EDGE - 8 - 100, 100], // two datagrams filling the iMTU exactly
        vec![4000, 4000, IMTU - 36 - 8008 - 8], // three, at the edge again
        (1..=64).map(|i| i % 50 + 1).collect(), // 64 small ones: the bound
        vec![5000, 1, 3000],
    ]
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

/// Caravans of 1 to 64 datagrams, from 1 B to the iMTU edge, built by pxio's encoder and sent
/// over a veth to a namespace where the program is attached: ordinary sockets get exactly the
/// original datagrams (count, order, boundaries, bytes), plain UDP and a malformed caravan are
/// handled, and the pass-through port gets whole caravans that `caravan::Reader` splits.
#[test]
fn caravans_decapsulated_between_namespaces() {
    let tx = Netns::new("cvtx").unwrap();
    let rx = Netns::new("cvrx").unwrap();
    let (a, b) =
        netlab::veth_between(&tx, "198.18.7.1/24", &rx, "198.18.7.2/24", "cv", 9000).unwrap();
    // Software checksums, so the receiver verifies every inner UDP checksum itself.
    tx.exec("ethtool", &["-K", &a, "tx", "off"]).unwrap();

    let (decap, socks) = rx
        .enter(|| {
            let mut decap = Decap::attach(&b, DecapConfig::default()).expect("attach");
            decap.add_passthrough_port(PASS_PORT).unwrap();
            let socks: Vec<UdpSocket> = [DECAP_PORT, PASS_PORT, PLAIN_PORT]
                .iter()
                .map(|&p| {
                    let s = UdpSocket::bind(SocketAddrV4::new(RX_IP, p)).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
                    // Clones keep the caravan's buffer size until the socket reads them.
                    setsockopt(&s, sockopt::RcvBufForce, &(64 << 20)).unwrap();
                    s
                })
                .collect();
            (decap, socks)
        })
        .unwrap();

    let shapes = caravan_shapes();
    let sent: Vec<Vec<Vec<u8>>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| payloads_for(s, i as u8))
        .collect();
    let plain: Vec<Vec<u8>> = (0..shapes.len())
        .map(|i| vec![0xee ^ i as u8; 100 + i])
        .collect();
    tx.enter(|| {
        let sock = UdpSocket::bind(SocketAddrV4::new(TX_IP, SPORT)).unwrap();
        let plain_sock = UdpSocket::bind(SocketAddrV4::new(TX_IP, 0)).unwrap();
        setsockopt(&sock, sockopt::Ipv4Tos, &(7 << 2)).unwrap();
        for (i, payloads) in sent.iter().enumerate() {
            let c = caravan_payload(DECAP_PORT, payloads);
            sock.send_to(&c, SocketAddrV4::new(RX_IP, DECAP_PORT))
                .unwrap();
            plain_sock
                .send_to(&plain[i], SocketAddrV4::new(RX_IP, PLAIN_PORT))
                .unwrap();
            if i == 3 {
                // A malformed caravan: its second inner length overruns the payload.
                let mut bad = caravan_payload(DECAP_PORT, &[vec![1; 10], vec![2; 10]]);
                bad[18 + 4..18 + 6].copy_from_slice(&100u16.to_be_bytes());
                sock.send_to(&bad, SocketAddrV4::new(RX_IP, DECAP_PORT))
                    .unwrap();
            }
            // The same datagrams, packed for the pass-through port.
            let c = caravan_payload(PASS_PORT, payloads);
            sock.send_to(&c, SocketAddrV4::new(RX_IP, PASS_PORT))
                .unwrap();
        }
    })
    .unwrap();

    let expected: Vec<Vec<u8>> = sent.iter().flatten().cloned().collect();
    eprintln!("stats before receive: {:?}", decap.stats().unwrap());
    let got = recv_all(&socks[0], expected.len());
    assert_eq!(got.len(), expected.len(), "datagram count");
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            g == e,
            "datagram {i}: order, boundary and bytes: got {} B, want {} B",
            g.len(),
            e.len()
        );
    }
    let whole = recv_all(&socks[1], sent.len());
    assert_eq!(
        whole.len(),
        sent.len(),
        "pass-through: one recv per caravan"
    );
    for (caravan, payloads) in whole.iter().zip(&sent) {
        let reader = Reader::with_ports(caravan, SPORT, PASS_PORT).expect("a valid caravan");
        let split: Vec<Vec<u8>> = reader.map(|d| d.payload.to_vec()).collect();
        assert_eq!(&split, payloads, "Reader splits the caravan right");
    }
    assert_eq!(
        recv_all(&socks[2], plain.len()),
        plain,
        "plain UDP untouched"
    );

    let stats = decap.stats().unwrap();
    assert_eq!(stats.malformed, 1);
    assert_eq!(stats.caravans, 2 * sent.len() as u64);
    assert_eq!(stats.passed_through, sent.len() as u64);
    assert_eq!(stats.datagrams, expected.len() as u64);
    assert_eq!(stats.helper_errors, 0);
}
