//! Port counters, MTU and device limits, on vdevs: what an operator reads (`ipackets`,
//! `imissed`, `opackets`, `oerrors`...) moves exactly as frames go through, an MTU is applied and
//! read back, and an MTU a device cannot take is a typed refusal naming its limits.

use dpdk::testing::{assert_no_leaks, eal, pool, unique, vdev};
use dpdk::{Burst, DeviceInfo, Error, Mempool, Port, PortStats, TxOffloads};
use netlab::{Netns, Veth};

fn frames(pool: &Mempool, n: usize, len: usize) -> Burst<128> {
    let mut b = Burst::<128>::new();
    for i in 0..n {
        let mut m = pool.alloc().unwrap();
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[0xff; 6]);
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14] = i as u8;
        m.extend_from_slice(&f).unwrap();
        b.push(m).unwrap();
    }
    b
}

#[test]
fn ring_counters_move_with_the_frames_and_reset() {
    let p = pool(512, 2048 + 128);
    // Depth 64: the ring holds 63 frames, so a burst of 100 overflows it.
    let (a, b) = eal().ring_pair(&unique("stats"), 64).unwrap();
    let pa = Port::builder(eal(), a).start(&p).unwrap();
    let pb = Port::builder(eal(), b).start(&p).unwrap();
    let (mut tx, mut rx) = (pa.tx_queue(0).unwrap(), pb.rx_queue(0).unwrap());
    assert_eq!(pa.stats().unwrap(), PortStats::default());

    let mut out = frames(&p, 40, 100);
    assert_eq!(tx.tx_burst(&mut out), 40);
    let mut got = Burst::<128>::new();
    assert_eq!(rx.rx_burst(&mut got), 40);
    drop(got);
    let (sa, sb) = (pa.stats().unwrap(), pb.stats().unwrap());
    // (net_ring counts packets, not bytes.)
    assert_eq!((sa.opackets, sa.oerrors), (40, 0));
    assert_eq!((sb.ipackets, sb.rx_lost()), (40, 0));

    // 100 offered to a ring with room for 63: the driver takes 63 and hands 37 back. Those are
    // still the caller's (not sent, not a driver error): only the 63 count.
    let mut out = frames(&p, 100, 60);
    let taken = tx.tx_burst(&mut out);
    assert_eq!((taken, out.len()), (63, 37));
    drop(out);
    let sa2 = pa.stats().unwrap();
    let delta = sa2.since(&sa);
    assert_eq!((delta.opackets, delta.oerrors), (63, 0));
    let mut got = Burst::<128>::new();
    assert_eq!(rx.rx_burst(&mut got), 63);
    drop(got);
    assert_eq!(pb.stats().unwrap().ipackets, 103);

    pa.reset_stats().unwrap();
    pb.reset_stats().unwrap();
    assert_eq!(pa.stats().unwrap(), PortStats::default());
    assert_eq!(pb.stats().unwrap(), PortStats::default());
    drop((tx, rx, pa, pb));
    assert_no_leaks(&p);
}

#[test]
fn ring_mtu_is_applied_read_back_and_a_change_it_cannot_make_is_refused() {
    let p = pool(64, 2048 + 128);
    let (a, _b) = eal().ring_pair(&unique("mtu"), 64).unwrap();
    let info = DeviceInfo::of(eal(), a).unwrap();
    assert_eq!(info.driver, "net_ring");
    let port = Port::builder(eal(), a).mtu(4000).start(&p).unwrap();
    assert_eq!(port.mtu().unwrap(), 4000);
    // net_ring has no MTU operation: a later change is refused, typed, and the MTU stays.
    match port.set_mtu(3000) {
        Err(Error::Mtu { mtu, reason, .. }) => {
            assert_eq!(mtu, 3000);
            assert!(reason.contains("cannot change"), "{reason}");
        }
        other => panic!("expected Error::Mtu, got {other:?}"),
    }
    assert_eq!(port.mtu().unwrap(), 4000);
    drop(port);
    assert_no_leaks(&p);
}

#[test]
fn null_device_reports_its_limits() {
    let id = vdev("net_null", "");
    let info = DeviceInfo::of(eal(), id).unwrap();
    assert_eq!(info.driver, "net_null");
    assert!(info.min_mtu <= 1500 && info.mtu_limit() >= 1500, "{info:?}");
    assert!(info.tx_desc.nb_seg_max >= 1, "{info:?}");
    assert!(info.check_mtu(info.mtu_limit()).is_ok());
    assert!(info.check_mtu(info.min_mtu.saturating_sub(1)).is_err() || info.min_mtu == 0);
}

/// Ring frames of 10 KiB, as in af_packet.rs: a 9000 B frame fits, but DPDK 22.11's
/// net_af_packet still reports `max_rx_pktlen` 1518.
const FRAMESZ: u16 = 10240;

fn af_packet(iface: &str) -> dpdk::PortId {
    vdev(
        "net_af_packet",
        &format!("iface={iface},framesz={FRAMESZ},blocksz=40960,framecnt=64"),
    )
}

fn kernel_mtu(ns: Option<&Netns>, iface: &str) -> u16 {
    let path = format!("/sys/class/net/{iface}/mtu");
    let read = || std::fs::read_to_string(&path).unwrap();
    let text = match ns {
        Some(ns) => ns.enter(read).unwrap(),
        None => read(),
    };
    text.trim().parse().unwrap()
}

#[test]
fn af_packet_mtu_reaches_the_kernel_interface_and_9000_is_refused_with_the_limit() {
    let ns = Netns::new("pxmtu").unwrap();
    let veth = Veth::new("pxmtu", 1500).unwrap();
    veth.move_b_into(&ns).unwrap();
    let p = pool(128, FRAMESZ + 128);

    let id = af_packet(veth.a());
    let info = DeviceInfo::of(eal(), id).unwrap();
    assert!(
        info.multi_segs_tx(),
        "net_af_packet offers MULTI_SEGS: {info:?}"
    );
    assert!(
        info.if_index > 0,
        "a kernel-backed port names its interface"
    );
    assert_eq!(info.mtu_limit(), 1500, "{info:?}");

    // Refused before anything is configured, naming the limit.
    let err = Port::builder(eal(), id).mtu(9000).start(&p).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Mtu { mtu: 9000, .. }), "{err:?}");
    assert!(
        text.contains("1500") && text.contains("max_rx_pktlen 1518"),
        "{text}"
    );

    // Applied: DPDK reads back 1400 and the driver set the kernel interface to it.
    let port = Port::builder(eal(), id)
        .mtu(1400)
        .tx_offloads(TxOffloads::MULTI_SEGS)
        .start(&p)
        .unwrap();
    assert_eq!(port.mtu().unwrap(), 1400);
    assert_eq!(kernel_mtu(None, veth.a()), 1400);
    assert!(port.tx_offloads().contains(TxOffloads::MULTI_SEGS));
    drop(port);
    assert_no_leaks(&p);
}

/// A full `net_af_packet` RX ring drops frames in the kernel, which counts them only in the
/// socket's `PACKET_STATISTICS`; DPDK 22.11 never reads it. The port's `imissed` must show them:
/// every frame the peer sent is in `ipackets` or `imissed`, exactly.
#[test]
fn af_packet_ring_overruns_are_imissed() {
    let ns = Netns::new("pxovr").unwrap();
    let veth = Veth::new("pxovr", 1500).unwrap();
    veth.move_b_into(&ns).unwrap();
    ns.ip(&["link", "set", veth.b(), "up"]).unwrap();
    // No IPv6 of the kernel's own on either end: the peer sends only the test's frames.
    for (ns, iface) in [(None, veth.a()), (Some(&ns), veth.b())] {
        let arg = format!("net.ipv6.conf.{iface}.disable_ipv6=1");
        match ns {
            Some(ns) => ns.exec("sysctl", &["-qw", &arg]).map(drop).unwrap(),
            None => netlab::run("sysctl", &["-qw", &arg]).map(drop).unwrap(),
        }
    }
    let p = pool(256, FRAMESZ + 128);
    // 64 ring frames; nobody polls while 500 frames arrive.
    let id = af_packet(veth.a());
    let port = Port::builder(eal(), id).start(&p).unwrap();
    let mut rx = port.rx_queue(0).unwrap();
    let mut got = Burst::<128>::new();
    while rx.rx_burst(&mut got) > 0 {
        got.clear();
    }
    port.reset_stats().unwrap();
    let sent0 = netlab::iface_counter(&ns, veth.b(), "tx_packets").unwrap();
    let peer = veth.b().to_owned();
    ns.enter(move || {
        let iface = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == peer)
            .unwrap();
        let Ok(pnet_datalink::Channel::Ethernet(mut tx, _)) =
            pnet_datalink::channel(&iface, Default::default())
        else {
            panic!("no channel on {peer}");
        };
        let mut frame = vec![0u8; 200];
        frame[..6].copy_from_slice(&[0xff; 6]);
        frame[12..14].copy_from_slice(&[0x88, 0xb5]);
        for _ in 0..500 {
            tx.send_to(&frame, None).unwrap().unwrap();
        }
    })
    .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let sent = netlab::iface_counter(&ns, veth.b(), "tx_packets").unwrap() - sent0;
    let mut received = 0;
    while rx.rx_burst(&mut got) > 0 {
        received += got.len() as u64;
        got.clear();
    }
    let s = port.stats().unwrap();
    assert_eq!(sent, 500);
    assert_eq!(s.ipackets, received);
    assert!(s.imissed > 0, "a 64-frame ring took 500 frames: {s:?}");
    assert_eq!(s.ipackets + s.imissed, sent, "{s:?}");
    // Read once, counted once: the kernel's counter was cleared, the port's total stays.
    assert_eq!(port.stats().unwrap().imissed, s.imissed);
    drop((rx, port));
    assert_no_leaks(&p);
}
