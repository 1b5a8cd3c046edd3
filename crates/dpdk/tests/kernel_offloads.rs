//! What a kernel-backed port gets when the kernel coalesces TCP segments, and how the `dpdk`
//! crate reads the interface's offloads (`dpdk::netdev`): the facts pxgw's start-up check on
//! GRO and LRO rests on (docs/dpdk-notes.md).

use std::time::{Duration, Instant};

use dpdk::netdev::Features;
use dpdk::testing::{assert_no_leaks, eal, pool, vdev};
use dpdk::{Burst, Port};
use netlab::{Netns, Veth};

/// Ring frames of 10 KiB, as the labs' inside ports have: room for a 9000 B frame.
const FRAMESZ: u32 = 10240;
/// Where the kernel puts the Ethernet header in a TPACKET_V2 ring frame:
/// `TPACKET_ALIGN(32 + 20 + 16) - 14`.
const MAC_OFFSET: u32 = 66;

fn ethtool(ns: Option<&Netns>, args: &[&str]) {
    match ns {
        Some(ns) => ns.exec("ethtool", args).map(drop),
        None => netlab::run("ethtool", args).map(drop),
    }
    .unwrap_or_else(|e| panic!("ethtool {args:?}: {e}"));
}

#[test]
fn a_veths_features_read_as_ethtool_sets_them() {
    let veth = Veth::new("pxfe", 9000).unwrap();
    for (setting, expected) in [("on", true), ("off", false), ("on", true)] {
        ethtool(None, &["-K", veth.a(), "gro", setting]);
        let f = Features::of(veth.a()).unwrap();
        assert_eq!(f.driver, "veth");
        assert_eq!(f.iface, veth.a());
        assert_eq!(f.active("rx-gro"), Some(expected), "gro {setting}: {f:?}");
    }
    ethtool(None, &["-K", veth.a(), "tso", "off"]);
    let f = Features::of(veth.a()).unwrap();
    assert_eq!(f.active("tx-tcp-segmentation"), Some(false));
    // veth has no LRO: the feature exists, off and fixed.
    let lro = f.features.iter().find(|x| x.name == "rx-lro").unwrap();
    assert!(!lro.active && !lro.changeable, "{lro:?}");
}

/// A TCP/IPv4 frame of `payload` bytes from 10.71.0.1:40000 to 10.71.0.2:5001.
fn tcp_frame(payload: usize) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 20 + 20 + payload];
    f[..6].copy_from_slice(&[0xff; 6]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0x71, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((20 + 20 + payload) as u16).to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&[10, 71, 0, 1]);
    ip[16..20].copy_from_slice(&[10, 71, 0, 2]);
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
    let tcp = &mut f[34..54];
    tcp[..2].copy_from_slice(&40000u16.to_be_bytes());
    tcp[2..4].copy_from_slice(&5001u16.to_be_bytes());
    tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = 0x10; // ACK
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    for (i, b) in f[54..].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    f
}

/// Sends `frame` on `iface` as one TSO packet of `mss`-byte segments: what a host's TCP stack
/// hands a veth whose TSO is on (a packet socket with `PACKET_VNET_HDR` builds the same GSO
/// packet from a `virtio_net_hdr`).
fn send_tso(iface: &str, frame: &[u8], mss: u16) {
    // SAFETY: plain socket(2), checked.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    let one: libc::c_int = 1;
    // SAFETY: `one` is a valid c_int for the option's length; fd is ours.
    let ret = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_VNET_HDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(ret, 0, "{}", std::io::Error::last_os_error());
    let name = std::ffi::CString::new(iface).unwrap();
    // SAFETY: a NUL-terminated name.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    assert!(ifindex > 0, "no interface {iface}");
    // SAFETY: sockaddr_ll is plain data; zeroes are valid.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_ifindex = ifindex as i32;
    addr.sll_protocol = 0x0800u16.to_be();
    // struct virtio_net_hdr: flags NEEDS_CSUM, gso_type TCPV4, hdr_len, gso_size, csum_start,
    // csum_offset (the TCP checksum's place in the TCP header).
    let mut packet = vec![1u8, 1];
    for v in [54u16, mss, 34, 16] {
        packet.extend_from_slice(&v.to_ne_bytes());
    }
    packet.extend_from_slice(frame);
    // SAFETY: `packet` and `addr` are valid for the lengths given; fd is ours.
    let sent = unsafe {
        libc::sendto(
            fd,
            packet.as_ptr().cast(),
            packet.len(),
            0,
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: fd is ours and closed once.
    unsafe { libc::close(fd) };
    assert_eq!(sent, packet.len() as isize, "{err}");
}

#[test]
fn net_af_packet_hands_up_a_coalesced_packet_cut_to_its_ring_frame() {
    let ns = Netns::new("pxgso").unwrap();
    let veth = Veth::new("pxgso", 9000).unwrap();
    veth.move_b_into(&ns).unwrap();
    // The peer sends TSO packets as they are: veth passes them whole, as GRO would build them.
    ethtool(
        Some(&ns),
        &["-K", veth.b(), "tx", "on", "tso", "on", "gso", "on"],
    );
    let rx_pool = pool(256, FRAMESZ as u16 + 128);
    let id = vdev(
        "net_af_packet",
        &format!(
            "iface={},framesz={FRAMESZ},blocksz={},framecnt=64",
            veth.a(),
            FRAMESZ * 4
        ),
    );
    let port = Port::builder(eal(), id).start(&rx_pool).unwrap();
    let mut rx = port.rx_queue(0).unwrap();

    let frame = tcp_frame(20_000);
    ns.enter(|| send_tso(veth.b(), &frame, 1448)).unwrap();

    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = None;
    while got.is_none() && Instant::now() < deadline {
        let mut burst = Burst::<32>::new();
        rx.rx_burst(&mut burst);
        got = burst
            .drain()
            .map(|m| m.to_vec())
            .find(|f| f.len() > 34 && f[12..14] == [8, 0] && f[26..34] == frame[26..34]);
        std::thread::sleep(Duration::from_millis(10));
    }
    let got = got.expect("the TSO packet never reached the port");
    let ip_len = u16::from_be_bytes([got[16], got[17]]);
    // One packet of 20,054 B went in; DPDK 22.11 copies what the ring frame holds (the
    // kernel's tp_snaplen) and drops tp_len, so the mbuf is cut while its IP header still
    // claims 20,040 B: nothing marks it.
    assert_eq!(ip_len, 20_040);
    assert_eq!(got.len() as u32, FRAMESZ - MAC_OFFSET);
    assert_eq!(got[..], frame[..got.len()], "the bytes that fit are intact");
    drop((rx, port));
    assert_no_leaks(&rx_pool);
}

/// Lengths of the frames from 10.71.0.1 that reach `iface` in `ns` within `wait` of `send`.
fn arriving(ns: &Netns, iface: &str, wait: Duration, send: impl FnOnce()) -> Vec<usize> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            ns.enter(|| {
                let interface = pnet_datalink::interfaces()
                    .into_iter()
                    .find(|i| i.name == iface)
                    .unwrap();
                let config = pnet_datalink::Config {
                    read_timeout: Some(Duration::from_millis(50)),
                    read_buffer_size: 1 << 20,
                    ..Default::default()
                };
                let pnet_datalink::Channel::Ethernet(_tx, mut rx) =
                    pnet_datalink::channel(&interface, config).unwrap()
                else {
                    unreachable!("Ethernet channels on Linux")
                };
                ready_tx.send(()).unwrap();
                let deadline = Instant::now() + wait;
                let mut lens = Vec::new();
                while Instant::now() < deadline {
                    if let Ok(f) = rx.next() {
                        if f.len() > 34 && f[12..14] == [8, 0] && f[26..30] == [10, 71, 0, 1] {
                            lens.push(f.len());
                        }
                    }
                }
                lens
            })
            .unwrap()
        });
        ready_rx.recv().unwrap();
        send();
        receiver.join().unwrap()
    })
}

#[test]
fn net_af_packet_counts_as_sent_a_frame_above_the_mtu_that_the_kernel_drops() {
    let ns = Netns::new("pxbig").unwrap();
    let veth = Veth::new("pxbig", 9000).unwrap();
    veth.move_b_into(&ns).unwrap();
    let p = pool(64, FRAMESZ as u16 + 128);
    let id = vdev(
        "net_af_packet",
        &format!(
            "iface={},framesz={FRAMESZ},blocksz={},framecnt=64",
            veth.a(),
            FRAMESZ * 4
        ),
    );
    let port = Port::builder(eal(), id).start(&p).unwrap();
    let mut tx = port.tx_queue(0).unwrap();
    let stats = port.stats().unwrap();
    let tx_dropped = || {
        let path = format!("/sys/class/net/{}/statistics/tx_dropped", veth.a());
        std::fs::read_to_string(path)
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
    };
    let dropped = tx_dropped();
    let lens = [9000 + 14, 9000 + 14 + 4, 9000 + 14 + 100];
    let got = arriving(&ns, veth.b(), Duration::from_secs(2), || {
        for len in lens {
            let mut m = p.alloc().unwrap();
            m.extend_from_slice(&tcp_frame(len - 54)).unwrap();
            let mut burst = Burst::<1>::new();
            burst.push(m).unwrap();
            assert_eq!(tx.tx_burst(&mut burst), 1);
        }
    });
    // The kernel (tpacket_snd) sends a frame of the MTU and its Ethernet header (and room for a
    // VLAN tag only in a tagged frame), and skips the others without a count: DPDK opens its
    // socket with PACKET_LOSS. DPDK counts every frame that fit its ring frame as sent.
    assert_eq!(got, [9014]);
    let sent = port.stats().unwrap().since(&stats);
    assert_eq!((sent.opackets, sent.oerrors), (3, 0));
    assert_eq!(
        tx_dropped(),
        dropped,
        "the interface counted the skipped frames"
    );
    drop((tx, port));
    assert_no_leaks(&p);
}
