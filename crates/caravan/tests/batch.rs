//! `caravan::BatchReader` on real sockets, IPv4 and IPv6 (needs root: it makes a namespace and
//! talks over its loopback). Caravans, plain datagrams, malformed and oversize caravans arrive
//! together, all wearing the caravan mark; one `recvmmsg` takes them, and each gets its typed
//! verdict, never a panic.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use caravan::{BatchError, BatchReader, Malformed, Refused};
use caravan_common::format;
use netlab::Netns;
use nix::sys::socket::{setsockopt, sockopt};

/// One inner datagram: UDP header (ports, length, a checksum) and payload.
fn dgram(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&sport.to_be_bytes());
    v.extend_from_slice(&dport.to_be_bytes());
    v.extend_from_slice(&((payload.len() + 8) as u16).to_be_bytes());
    v.extend_from_slice(&[0x12, 0x34]);
    v.extend_from_slice(payload);
    v
}

/// A caravan of `payloads`, as a packer writes it.
fn caravan(sport: u16, dport: u16, payloads: &[Vec<u8>]) -> Vec<u8> {
    let mut v = format::encode_header(payloads.len() as u8).to_vec();
    for p in payloads {
        v.extend(dgram(sport, dport, p));
    }
    v
}

fn payloads(n: usize, size: usize, salt: u8) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| (0..size).map(|j| (i * 31 + j) as u8 ^ salt).collect())
        .collect()
}

fn run(ip: IpAddr) {
    let ns = Netns::new("cbatch").unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    let (rx, tx) = ns
        .enter(|| {
            let rx = UdpSocket::bind(SocketAddr::new(ip, 5002)).unwrap();
            let tx = UdpSocket::bind(SocketAddr::new(ip, 41000)).unwrap();
            let mark = i32::from(format::DEFAULT_DSCP) << 2;
            if ip.is_ipv6() {
                setsockopt(&tx, sockopt::Ipv6TClass, &mark).unwrap();
            } else {
                setsockopt(&tx, sockopt::Ipv4Tos, &mark).unwrap();
            }
            caravan::report_traffic_class(&rx).unwrap();
            (rx, tx)
        })
        .unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let to = rx.local_addr().unwrap();

    let good: Vec<Vec<Vec<u8>>> = vec![
        payloads(7, 1200, 1),
        payloads(1, 1, 2),
        payloads(64, 0, 3),
        payloads(3, 2900, 4),
    ];
    // A header that says 3 over two datagrams.
    let mut count_mismatch = caravan(41000, 5002, &payloads(2, 10, 5));
    count_mismatch[..format::HEADER_LEN].copy_from_slice(&format::encode_header(3));
    // Valid, but longer than the batch's 9000 B messages.
    let oversize = caravan(41000, 5002, &payloads(10, 1000, 6));
    assert!(oversize.len() > 9000);
    let mut sent: Vec<Vec<u8>> = good.iter().map(|p| caravan(41000, 5002, p)).collect();
    sent.insert(1, b"an ordinary datagram".to_vec());
    sent.insert(3, count_mismatch);
    sent.push(oversize);
    sent.push(caravan(41000, 5002, &payloads(2, 100, 7)));
    for m in &sent {
        tx.send_to(m, to).unwrap();
    }

    // Capacity 6 of the 8 messages: one call takes six, the next the other two.
    let mut batch = BatchReader::new(6, 9000).unwrap();
    assert_eq!(batch.capacity(), 6);
    assert_eq!(batch.recv(&rx).unwrap(), 6);
    let msgs: Vec<_> = batch.iter().collect();
    assert!(msgs
        .iter()
        .all(|m| m.peer == Some(tx.local_addr().unwrap())));
    let split = |m: &caravan::Received<'_>| -> Vec<Vec<u8>> {
        m.caravan()
            .unwrap()
            .map(|d| {
                assert_eq!((d.src_port, d.dst_port, d.checksum), (41000, 5002, 0x1234));
                d.payload.to_vec()
            })
            .collect()
    };
    assert_eq!(split(&msgs[0]), good[0]);
    assert_eq!(msgs[1].caravan().unwrap_err(), Refused::NotCaravan);
    assert_eq!(msgs[1].payload, b"an ordinary datagram");
    assert_eq!(split(&msgs[2]), good[1]);
    assert_eq!(
        msgs[3].caravan().unwrap_err(),
        Refused::Malformed(Malformed::CountMismatch)
    );
    assert_eq!(split(&msgs[4]), good[2]);
    assert_eq!(split(&msgs[5]), good[3]);
    assert_eq!(
        msgs[5].caravan_with_ports(41000, 5003).unwrap_err(),
        Refused::Malformed(Malformed::PortMismatch)
    );

    assert_eq!(batch.recv(&rx).unwrap(), 2);
    let msgs: Vec<_> = batch.iter().collect();
    assert!(msgs[0].truncated);
    assert_eq!(msgs[0].payload.len(), 9000);
    assert_eq!(
        msgs[0].caravan().unwrap_err(),
        Refused::Malformed(Malformed::Truncated)
    );
    assert!(!msgs[1].truncated);
    assert_eq!(split(&msgs[1]), payloads(2, 100, 7));

    // Nothing queued on a non-blocking socket: a typed error, and the old batch is gone.
    rx.set_nonblocking(true).unwrap();
    match batch.recv(&rx) {
        Err(BatchError::Io(e)) => assert_eq!(e.kind(), ErrorKind::WouldBlock),
        other => panic!("{other:?}"),
    }
    assert!(batch.is_empty());
}

#[test]
fn one_call_takes_many_caravans_and_judges_each_ipv4() {
    run(IpAddr::V4(Ipv4Addr::LOCALHOST));
}

#[test]
fn one_call_takes_many_caravans_and_judges_each_ipv6() {
    run(IpAddr::V6(Ipv6Addr::LOCALHOST));
}

#[test]
fn an_empty_or_huge_batch_is_refused() {
    for (m, s) in [(0, 9000), (4, 0)] {
        assert!(matches!(
            BatchReader::new(m, s),
            Err(BatchError::Empty { .. })
        ));
    }
    for (m, s) in [(usize::MAX, 2), (1 << 20, 65536), (1 << 30, 1), (1025, 1)] {
        assert!(matches!(
            BatchReader::new(m, s),
            Err(BatchError::TooLarge { .. })
        ));
    }
}
