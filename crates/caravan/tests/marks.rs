//! Only a datagram whose IP header wore the caravan mark is read as a caravan, on real sockets
//! (needs root: it makes a namespace and talks over its loopback), IPv4, IPv6 and IPv4 to a
//! dual-stack socket, through `caravan::recv` and `caravan::BatchReader`. The same
//! caravan-shaped payload sent without the mark (or with another DSCP) is one ordinary datagram;
//! sent with the mark (ECN bits or not) it is unpacked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use caravan::{BatchReader, Received, Refused};
use caravan_common::format;
use netlab::Netns;
use nix::sys::socket::{setsockopt, sockopt};

const MARK: u8 = format::DEFAULT_DSCP;

/// A valid caravan of three datagrams from `sport` to `dport`: a payload any sender can write.
fn caravan_payload(sport: u16, dport: u16) -> (Vec<u8>, Vec<Vec<u8>>) {
    let payloads: Vec<Vec<u8>> = vec![b"one".to_vec(), Vec::new(), vec![0x5a; 1000]];
    let mut v = format::encode_header(payloads.len() as u8).to_vec();
    for p in &payloads {
        v.extend_from_slice(&sport.to_be_bytes());
        v.extend_from_slice(&dport.to_be_bytes());
        v.extend_from_slice(&((p.len() + 8) as u16).to_be_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(p);
    }
    (v, payloads)
}

/// A sender bound in `ip`'s family whose datagrams carry the traffic class `tc`.
fn sender(ip: IpAddr, tc: u8) -> UdpSocket {
    let s = UdpSocket::bind(SocketAddr::new(ip, 0)).unwrap();
    if ip.is_ipv6() {
        setsockopt(&s, sockopt::Ipv6TClass, &i32::from(tc)).unwrap();
    } else {
        setsockopt(&s, sockopt::Ipv4Tos, &i32::from(tc)).unwrap();
    }
    s
}

/// What the receiver must make of each datagram sent with traffic class `tc`.
struct Case {
    tc: u8,
    caravan: bool,
}

const CASES: [Case; 5] = [
    // Unmarked: an ordinary datagram, whatever its payload.
    Case {
        tc: 0,
        caravan: false,
    },
    // Another DSCP (EF), and the mark's neighbour.
    Case {
        tc: 46 << 2,
        caravan: false,
    },
    Case {
        tc: (MARK + 1) << 2,
        caravan: false,
    },
    // The mark, without and with ECN bits.
    Case {
        tc: MARK << 2,
        caravan: true,
    },
    Case {
        tc: MARK << 2 | 0b10,
        caravan: true,
    },
];

fn check(
    what: &str,
    msg: &Received<'_>,
    tc: u8,
    want_caravan: bool,
    sent: &[u8],
    inner: &[Vec<u8>],
) {
    assert_eq!(
        msg.traffic_class,
        Some(tc),
        "{what}: traffic class reported"
    );
    assert_eq!(msg.payload, sent, "{what}: the whole payload, one datagram");
    assert!(!msg.truncated, "{what}");
    if want_caravan {
        let got: Vec<Vec<u8>> = msg
            .caravan()
            .unwrap_or_else(|e| panic!("{what}: a marked caravan is unpacked: {e}"))
            .map(|d| d.payload.to_vec())
            .collect();
        assert_eq!(got, inner, "{what}: its datagrams");
    } else {
        assert_eq!(
            msg.caravan().unwrap_err(),
            Refused::NotCaravan,
            "{what}: an unmarked datagram is one ordinary datagram"
        );
        assert_eq!(
            msg.caravan_with_ports(41000, 5002).unwrap_err(),
            Refused::NotCaravan,
            "{what}"
        );
    }
}

/// Sends every case from `tx_ip` to a receiver bound to `rx_bind`, reads them one `recv` at a
/// time, then again as one batch.
fn run(tx_ip: IpAddr, rx_bind: IpAddr, dst: IpAddr) {
    let ns = Netns::new("cvmark").unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    ns.enter(|| {
        let rx = UdpSocket::bind(SocketAddr::new(rx_bind, 5002)).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        caravan::report_traffic_class(&rx).unwrap();
        let to = SocketAddr::new(dst, 5002);
        let senders: Vec<UdpSocket> = CASES.iter().map(|c| sender(tx_ip, c.tc)).collect();
        let sent: Vec<(Vec<u8>, Vec<Vec<u8>>)> = senders
            .iter()
            .map(|s| caravan_payload(s.local_addr().unwrap().port(), 5002))
            .collect();
        let send_all = || {
            for (s, (payload, _)) in senders.iter().zip(&sent) {
                s.send_to(payload, to).unwrap();
            }
        };

        send_all();
        let mut buf = vec![0u8; 9000];
        for (case, (payload, inner)) in CASES.iter().zip(&sent) {
            let msg = caravan::recv(&rx, &mut buf).unwrap();
            let what = format!("recv, {tx_ip} -> {rx_bind}, traffic class {:#04x}", case.tc);
            check(&what, &msg, case.tc, case.caravan, payload, inner);
        }

        send_all();
        let mut batch = BatchReader::new(8, 9000).unwrap();
        assert_eq!(batch.recv(&rx).unwrap(), CASES.len());
        for ((case, (payload, inner)), msg) in CASES.iter().zip(&sent).zip(batch.iter()) {
            let what = format!(
                "batch, {tx_ip} -> {rx_bind}, traffic class {:#04x}",
                case.tc
            );
            check(&what, &msg, case.tc, case.caravan, payload, inner);
        }
    })
    .unwrap();
}

#[test]
fn only_marked_datagrams_are_caravans_ipv4() {
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    run(lo, lo, lo);
}

#[test]
fn only_marked_datagrams_are_caravans_ipv6() {
    let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
    run(lo, lo, lo);
}

/// An IPv4 datagram to a dual-stack IPv6 socket: its TOS byte comes as `IP_TOS`.
#[test]
fn only_marked_datagrams_are_caravans_ipv4_to_a_dual_stack_socket() {
    let v4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    run(v4, IpAddr::V6(Ipv6Addr::UNSPECIFIED), v4);
}

/// Another mark: `with_dscp` judges against it, and the default mark no longer counts.
#[test]
fn a_configured_mark_is_the_one_that_counts() {
    let ns = Netns::new("cvmark").unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    ns.enter(|| {
        let lo = IpAddr::V6(Ipv6Addr::LOCALHOST);
        let rx = UdpSocket::bind(SocketAddr::new(lo, 5002)).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        caravan::report_traffic_class(&rx).unwrap();
        let (default, other) = (sender(lo, MARK << 2), sender(lo, 11 << 2));
        for s in [&default, &other] {
            let (payload, _) = caravan_payload(s.local_addr().unwrap().port(), 5002);
            s.send_to(&payload, rx.local_addr().unwrap()).unwrap();
        }
        let mut batch = BatchReader::new(4, 9000).unwrap().with_dscp(11);
        assert_eq!(batch.recv(&rx).unwrap(), 2);
        let msgs: Vec<Received<'_>> = batch.iter().collect();
        assert_eq!(msgs[0].caravan().unwrap_err(), Refused::NotCaravan);
        assert_eq!(msgs[1].caravan().unwrap().count(), 3);
        let mut buf = vec![0u8; 9000];
        let (payload, _) = caravan_payload(other.local_addr().unwrap().port(), 5002);
        other.send_to(&payload, rx.local_addr().unwrap()).unwrap();
        let msg = caravan::recv(&rx, &mut buf).unwrap();
        assert_eq!(msg.caravan().unwrap_err(), Refused::NotCaravan);
        assert_eq!(msg.with_dscp(11).caravan().unwrap().count(), 3);
    })
    .unwrap();
}

/// A socket that does not report traffic classes gives none, and then nothing is a caravan.
/// Once it reports them, the same reader sees them by its next call but one: the kernel shrank
/// the control buffers of the messages taken before to nothing, so those messages come with
/// their control messages cut short, are read as ordinary datagrams (never trusted), and the
/// buffers are renewed.
#[test]
fn without_traffic_class_reports_nothing_is_a_caravan() {
    let ns = Netns::new("cvmark").unwrap();
    ns.ip(&["link", "set", "lo", "up"]).unwrap();
    ns.enter(|| {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let rx = UdpSocket::bind(SocketAddr::new(lo, 5002)).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = sender(lo, MARK << 2);
        let (payload, _) = caravan_payload(tx.local_addr().unwrap().port(), 5002);
        let to = rx.local_addr().unwrap();
        let mut batch = BatchReader::new(4, 9000).unwrap();
        for _ in 0..3 {
            tx.send_to(&payload, to).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 3);
        for msg in batch.iter() {
            assert_eq!(msg.traffic_class, None);
            assert_eq!(msg.caravan().unwrap_err(), Refused::NotCaravan);
        }
        caravan::report_traffic_class(&rx).unwrap();
        for _ in 0..4 {
            tx.send_to(&payload, to).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 4);
        let classes: Vec<Option<u8>> = batch.iter().map(|m| m.traffic_class).collect();
        // The three buffers used before were shrunk; the fourth was not.
        assert_eq!(classes, [None, None, None, Some(MARK << 2)]);
        for msg in batch.iter().take(3) {
            assert_eq!(msg.caravan().unwrap_err(), Refused::NotCaravan);
        }
        for _ in 0..4 {
            tx.send_to(&payload, to).unwrap();
        }
        assert_eq!(batch.recv(&rx).unwrap(), 4);
        for msg in batch.iter() {
            assert_eq!(msg.traffic_class, Some(MARK << 2));
            assert_eq!(msg.caravan().unwrap().count(), 3);
        }
    })
    .unwrap();
}
