//! `rte_flow` on `net_tap`: a rule steers matching traffic to the queue it names, and a drop rule
//! drops. The kernel sends real frames into the tap; DPDK reads them from its queues.
//!
//! net_tap implements rte_flow with kernel TC: the `multiq` qdisc, `flower` filters and the
//! `skbedit`/`gact` actions. On a kernel built without them (the CI VMs' kernel is one), the PMD
//! refuses rules. One test always runs and checks that rule creation follows what the kernel has
//! (on this kernel: a clean error carrying DPDK's own message); the steering test is
//! `#[ignore]`d, and `cargo xtask test` runs it where its probe finds TC flower and friends, or
//! names it as skipped.

use std::time::{Duration, Instant};

use dpdk::testing::{assert_no_leaks, eal, pool, unique, vdev};
use dpdk::{Burst, FlowAction, FlowRule, IpMatch, L4Proto, Port, RxQueue};
use pnet_datalink::{Channel, Config};

const STEERED_PORT: u16 = 5555;
const DROPPED_PORT: u16 = 6666;
const OTHER_PORT: u16 = 7777;

/// An Ethernet/IPv4/UDP frame to `dst_port`, built with etherparse.
fn udp_frame(dst_port: u16, seq: u8) -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .udp(40000, dst_port);
    let payload = [seq; 32];
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder.write(&mut frame, &payload).unwrap();
    frame
}

/// Writes frames straight onto `iface` with a packet socket: the kernel transmits them on the
/// tap, so the tap PMD receives them. Nothing is routed anywhere.
fn inject(iface: &str, frames: &[Vec<u8>]) {
    let interface = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == iface)
        .unwrap_or_else(|| panic!("no interface {iface}"));
    let Channel::Ethernet(mut tx, _rx) =
        pnet_datalink::channel(&interface, Config::default()).unwrap()
    else {
        unreachable!("pnet returns Ethernet channels on Linux")
    };
    for frame in frames {
        tx.send_to(frame, None).unwrap().unwrap();
    }
}

/// UDP destination ports of the IPv4/UDP frames read from `queue` until `deadline`.
fn udp_ports_on(queue: &mut RxQueue, deadline: Instant) -> Vec<u16> {
    let mut ports = Vec::new();
    while Instant::now() < deadline {
        let mut burst = Burst::<32>::new();
        if queue.rx_burst(&mut burst) == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
        for m in burst.drain() {
            if let Ok(p) = etherparse::SlicedPacket::from_ethernet(&m.to_vec()) {
                if let Some(etherparse::TransportSlice::Udp(udp)) = p.transport {
                    ports.push(udp.destination_port());
                }
            }
        }
    }
    ports
}

fn tap_port(pool: &std::sync::Arc<dpdk::Mempool>, queues: u16) -> (String, Port) {
    let iface = unique("pxtap");
    let id = vdev("net_tap", &format!("iface={iface}"));
    // net_tap backs every RX descriptor with an mbuf up front: keep rings small.
    let port = Port::builder(eal(), id)
        .rx_queues(queues)
        .tx_queues(queues)
        .descriptors(128, 128)
        .start(pool)
        .unwrap();
    assert_eq!(port.driver(), "net_tap");
    (iface, port)
}

/// Always runs: where the kernel has TC flower and friends, net_tap creates the rule; where it
/// has not (here), creation is refused with a clean error that carries DPDK's explanation.
#[test]
fn rule_creation_follows_kernel_tc_support_and_a_refusal_carries_dpdks_message() {
    let support = netlab::tc_flow_support();
    let pool = pool(1024, 2048 + 128);
    let (_iface, port) = tap_port(&pool, 2);
    let rule = FlowRule::new(FlowAction::Queue(1))
        .ip(IpMatch::V4 {
            src: None,
            dst: None,
        })
        .l4(L4Proto::Udp, None, Some(STEERED_PORT));
    // Validation is a software check of the pattern in net_tap; creation is where the kernel says
    // yes or no, and DPDK's explanation must reach the caller.
    port.flow_validate(&rule)
        .expect("the pattern itself is one net_tap understands");
    match (&support, port.flow_create(&rule)) {
        (Ok(()), Ok(flow)) => drop(flow),
        (Err(_), Err(dpdk::Error::Flow { op, message, .. })) => {
            assert_eq!(op, "create");
            assert!(message.contains("flower"), "DPDK's message: {message}");
        }
        (support, created) => {
            panic!("kernel TC support {support:?}, but net_tap's flow_create gave {created:?}")
        }
    }
    drop(port);
    assert_no_leaks(&pool);
}

#[test]
// `cargo xtask test` probes for them and runs it where they exist.
#[ignore = "needs kernel TC multiq/flower/skbedit/gact (net_tap's rte_flow)"]
fn a_queue_rule_steers_matching_traffic_and_a_drop_rule_drops() {
    netlab::tc_flow_support().expect("this test needs kernel TC support for net_tap's rte_flow");
    let pool = pool(1024, 2048 + 128);
    let (iface, port) = tap_port(&pool, 2);

    let any_ipv4 = IpMatch::V4 {
        src: None,
        dst: None,
    };
    let steer =
        FlowRule::new(FlowAction::Queue(1))
            .ip(any_ipv4)
            .l4(L4Proto::Udp, None, Some(STEERED_PORT));
    let drop_rule =
        FlowRule::new(FlowAction::Drop)
            .ip(any_ipv4)
            .l4(L4Proto::Udp, None, Some(DROPPED_PORT));
    port.flow_validate(&steer)
        .expect("net_tap accepts a queue rule");
    let _steer = port.flow_create(&steer).unwrap();
    let _drop = port.flow_create(&drop_rule).unwrap();

    let mut q0 = port.rx_queue(0).unwrap();
    let mut q1 = port.rx_queue(1).unwrap();
    let frames: Vec<Vec<u8>> = (0..20)
        .flat_map(|i| [STEERED_PORT, DROPPED_PORT, OTHER_PORT].map(|p| udp_frame(p, i as u8)))
        .collect();
    inject(&iface, &frames);

    let deadline = Instant::now() + Duration::from_millis(500);
    let on_q1 = udp_ports_on(&mut q1, deadline);
    let on_q0 = udp_ports_on(&mut q0, Instant::now() + Duration::from_millis(100));
    let count = |ports: &[u16], p: u16| ports.iter().filter(|&&x| x == p).count();

    assert_eq!(
        count(&on_q1, STEERED_PORT),
        20,
        "every steered frame on queue 1"
    );
    assert_eq!(
        count(&on_q0, STEERED_PORT),
        0,
        "no steered frame on queue 0"
    );
    assert_eq!(
        count(&on_q0, DROPPED_PORT) + count(&on_q1, DROPPED_PORT),
        0,
        "the drop rule drops"
    );
    assert_eq!(
        count(&on_q0, OTHER_PORT) + count(&on_q1, OTHER_PORT),
        20,
        "unmatched traffic still arrives"
    );

    drop((_steer, _drop, q0, q1, port));
    assert_no_leaks(&pool);
}

#[test]
fn a_rule_for_a_missing_queue_is_refused_before_the_driver() {
    let pool = pool(1024, 2048 + 128);
    let (_iface, port) = tap_port(&pool, 1);
    let rule = FlowRule::new(FlowAction::Rss(vec![0, 1]));
    assert!(matches!(
        port.flow_create(&rule),
        Err(dpdk::Error::QueueOutOfRange { index: 1, .. })
    ));
    drop(port);
    assert_no_leaks(&pool);
}
