//! `net_af_packet` over a veth pair whose peer lives in a network namespace: what DPDK sends is
//! what the kernel sees on the other side, and the reverse.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use dpdk::testing::{assert_no_leaks, eal, pool, vdev};
use dpdk::{Burst, Mbuf, Mempool, Port, TxOffloads};
use netlab::{Netns, Veth};
use pnet_datalink::{Channel, Config, DataLinkReceiver, DataLinkSender};

/// A local-experimental ethertype, so we ignore the kernel's own chatter (IPv6 ND and such).
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];
const JUMBO: usize = 9000;

fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, seed]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    for (i, b) in f[14..].iter_mut().enumerate() {
        *b = seed.wrapping_add((i % 251) as u8);
    }
    f
}

/// A raw packet channel on `iface` in the calling thread's namespace.
fn channel(iface: &str) -> (Box<dyn DataLinkSender>, Box<dyn DataLinkReceiver>) {
    let interface = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == iface)
        .unwrap_or_else(|| panic!("no interface {iface}"));
    let config = Config {
        read_timeout: Some(Duration::from_millis(100)),
        read_buffer_size: 65536,
        write_buffer_size: 65536,
        ..Config::default()
    };
    match pnet_datalink::channel(&interface, config).expect("packet socket") {
        Channel::Ethernet(tx, rx) => (tx, rx),
        _ => unreachable!("pnet returns Ethernet channels on Linux"),
    }
}

/// The first frame with our ethertype, within `timeout`.
fn receive_ours(rx: &mut dyn DataLinkReceiver, timeout: Duration) -> Option<Vec<u8>> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(frame) = rx.next() {
            if frame.len() >= 14 && frame[12..14] == ETHERTYPE {
                return Some(frame.to_vec());
            }
        }
    }
    None
}

struct Lab {
    ns: Netns,
    veth: Veth,
}

fn lab() -> Lab {
    let ns = Netns::new("pxaf").unwrap();
    let veth = Veth::new("pxaf", JUMBO as u32).unwrap();
    veth.move_b_into(&ns).unwrap();
    Lab { ns, veth }
}

/// Ring frames of 10 KiB (4 per 40 KiB block): room for a 9000 B frame plus the TPACKET header.
const FRAMESZ: u16 = 10240;

/// A pool whose mbufs hold one whole ring frame, as net_af_packet requires of its RX pool
/// (it copies each frame into a single mbuf).
fn rx_pool() -> std::sync::Arc<Mempool> {
    pool(256, FRAMESZ + 128)
}

fn af_packet_port(iface: &str, pool: &std::sync::Arc<Mempool>) -> Port {
    let id = vdev(
        "net_af_packet",
        &format!("iface={iface},framesz={FRAMESZ},blocksz=40960,framecnt=64"),
    );
    Port::builder(eal(), id)
        .tx_offloads(TxOffloads::MULTI_SEGS)
        .start(pool)
        .unwrap()
}

/// Splits `bytes` into a chain of `seg` -byte mbufs.
fn chained(pool: &Mempool, bytes: &[u8], seg: usize) -> Mbuf {
    let mut parts = bytes.chunks(seg).map(|chunk| {
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(chunk).unwrap();
        m
    });
    let mut head = parts.next().unwrap();
    for part in parts {
        head.chain(part).map_err(|(e, _)| e).unwrap();
    }
    head
}

#[test]
fn a_chained_9000_byte_mbuf_arrives_as_one_9000_byte_frame() {
    let lab = lab();
    let rx_pool = rx_pool();
    let pool = pool(64, 2048 + 128);
    let port = af_packet_port(lab.veth.a(), &rx_pool);
    assert_eq!(port.driver(), "net_af_packet");
    let mut tx = port.tx_queue(0).unwrap();

    let expected = frame(JUMBO, 7);
    let (ready_tx, ready_rx) = mpsc::channel();
    let received = std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            lab.ns
                .enter(|| {
                    let (_tx, mut rx) = channel(lab.veth.b());
                    ready_tx.send(()).unwrap();
                    receive_ours(rx.as_mut(), Duration::from_secs(5))
                })
                .unwrap()
        });
        ready_rx.recv().unwrap();
        let m = chained(&pool, &expected, 2000);
        assert_eq!((m.len(), m.num_segs()), (JUMBO, 5));
        let mut burst = Burst::<4>::new();
        burst.push(m).unwrap();
        assert_eq!(tx.tx_burst(&mut burst), 1);
        receiver.join().unwrap()
    });
    let received = received.expect("no frame arrived in the namespace");
    assert_eq!(
        received.len(),
        JUMBO,
        "one frame of 9000 B, as the kernel sees it"
    );
    assert_eq!(received, expected, "byte for byte");
    assert_eq!(port.stats().unwrap().obytes, JUMBO as u64);
    let rx_bytes = netlab::iface_counter(&lab.ns, lab.veth.b(), "rx_bytes").unwrap();
    assert!(rx_bytes >= JUMBO as u64, "the kernel counted {rx_bytes} B");

    drop((tx, port));
    assert_no_leaks(&pool);
    assert_no_leaks(&rx_pool);
}

#[test]
fn a_9000_byte_frame_from_the_kernel_arrives_whole() {
    let lab = lab();
    let pool = rx_pool();
    let port = af_packet_port(lab.veth.a(), &pool);
    let mut rx = port.rx_queue(0).unwrap();

    let sent = frame(JUMBO, 42);
    lab.ns
        .enter(|| {
            let (mut tx, _rx) = channel(lab.veth.b());
            tx.send_to(&sent, None).unwrap().unwrap();
        })
        .unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        let mut burst = Burst::<32>::new();
        rx.rx_burst(&mut burst);
        got = burst
            .drain()
            .find(|m| m.data().get(12..14) == Some(&ETHERTYPE[..]));
        if got.is_none() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let got = got.expect("DPDK received nothing");
    assert_eq!(got.len(), JUMBO);
    assert_eq!(got.to_vec(), sent);
    drop(got);
    drop((rx, port));
    assert_no_leaks(&pool);
}
