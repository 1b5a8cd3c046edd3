//! Ports over a `net_ring` pair: byte-for-byte delivery, partial TX, queue ownership, and the
//! errors a user can cause.

use dpdk::testing::{assert_no_leaks, eal, pool, unique};
use dpdk::{Burst, Error, FlowAction, FlowRule, IpMatch, L4Proto, Mbuf, Mempool, Port, PortId};

fn start(id: PortId, pool: &std::sync::Arc<Mempool>) -> Port {
    Port::builder(eal(), id).start(pool).unwrap()
}

/// A packet whose bytes depend on `seed`, so a mix-up shows.
fn packet(pool: &Mempool, seed: u8, len: usize) -> Mbuf {
    let mut m = pool.alloc().unwrap();
    let bytes: Vec<u8> = (0..len).map(|i| seed.wrapping_add(i as u8)).collect();
    m.extend_from_slice(&bytes).unwrap();
    m
}

#[test]
fn packets_cross_a_ring_pair_byte_for_byte() {
    let pool = pool(256, 2048 + 128);
    let (a, b) = eal().ring_pair(&unique("rp"), 1024).unwrap();
    let (pa, pb) = (start(a, &pool), start(b, &pool));
    assert_eq!(pa.driver(), "net_ring");
    let mut tx = pa.tx_queue(0).unwrap();
    let mut rx = pb.rx_queue(0).unwrap();

    let mut out = Burst::<32>::new();
    let mut sent = Vec::new();
    for i in 0..20u8 {
        let len = 60 + usize::from(i) * 97;
        let m = packet(&pool, i, len);
        sent.push(m.to_vec());
        out.push(m).unwrap();
    }
    // A chain crosses as a chain.
    let mut chain = packet(&pool, 100, 1500);
    chain
        .chain(packet(&pool, 200, 700))
        .map_err(|(e, _)| e)
        .unwrap();
    sent.push(chain.to_vec());
    out.push(chain).unwrap();

    assert_eq!(tx.tx_burst(&mut out), 21);
    assert!(out.is_empty());

    let mut got = Burst::<64>::new();
    assert_eq!(rx.rx_burst(&mut got), 21);
    let received: Vec<Vec<u8>> = got.as_slice().iter().map(Mbuf::to_vec).collect();
    assert_eq!(received, sent);
    assert_eq!(got.as_slice()[20].num_segs(), 2);

    let stats = pa.stats().unwrap();
    assert_eq!(stats.opackets, 21);
    assert_eq!(pb.stats().unwrap().ipackets, 21);
    assert!(pa.link().unwrap().up);

    drop(got);
    drop((tx, rx, pa, pb));
    assert_no_leaks(&pool);
}

#[test]
fn partial_tx_burst_returns_the_unsent_in_order() {
    let pool = pool(128, 512);
    // A ring of 16 slots holds 15 packets.
    let (a, b) = eal().ring_pair(&unique("rp"), 16).unwrap();
    let (pa, pb) = (start(a, &pool), start(b, &pool));
    let mut tx = pa.tx_queue(0).unwrap();
    let mut rx = pb.rx_queue(0).unwrap();

    let mut out = Burst::<32>::new();
    for i in 0..32u8 {
        out.push(packet(&pool, i, 64)).unwrap();
    }
    let mut received = Vec::new();
    let mut rounds = 0;
    while !out.is_empty() {
        rounds += 1;
        assert!(
            rounds <= 4,
            "the ring drains every round, so 3 rounds suffice"
        );
        let before = out.len();
        let sent = tx.tx_burst(&mut out);
        assert_eq!(sent, before.min(15), "the PMD takes what fits");
        assert_eq!(out.len(), before - sent, "the rest comes back");
        // The unsent ones are the next in sequence.
        if let Some(first) = out.as_slice().first() {
            assert_eq!(first.data()[0], received.len() as u8 + sent as u8);
        }
        let mut got = Burst::<32>::new();
        rx.rx_burst(&mut got);
        received.extend(got.drain().map(|m| m.data()[0]));
    }
    assert_eq!(received, (0..32).collect::<Vec<u8>>());
    assert_eq!(
        pool.in_use() as u64,
        0,
        "every mbuf sent and received was freed once"
    );

    // Unsent mbufs that the caller drops are freed, not leaked.
    for i in 0..20u8 {
        out.push(packet(&pool, i, 64)).unwrap();
    }
    assert_eq!(tx.tx_burst(&mut out), 15);
    drop(out);
    drop((tx, rx, pa, pb));
    assert_no_leaks(&pool);
}

#[test]
fn queues_have_one_owner_and_bounds() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("rp"), 64).unwrap();
    let port = start(a, &pool);
    assert!(matches!(
        port.rx_queue(1),
        Err(Error::QueueOutOfRange {
            kind: "rx",
            index: 1,
            count: 1,
            ..
        })
    ));
    assert!(matches!(
        port.tx_queue(7),
        Err(Error::QueueOutOfRange {
            kind: "tx",
            index: 7,
            count: 1,
            ..
        })
    ));
    let q = port.rx_queue(0).unwrap();
    assert!(matches!(port.rx_queue(0), Err(Error::QueueTaken { .. })));
    drop(q);
    port.rx_queue(0).expect("a dropped handle frees its queue");
    let q = port.tx_queue(0).unwrap();
    assert!(matches!(
        port.tx_queue(0),
        Err(Error::QueueTaken { kind: "tx", .. })
    ));
    drop(q);
    port.tx_queue(0).expect("a dropped handle frees its queue");
    drop(port);
    assert_no_leaks(&pool);
}

#[test]
fn bad_port_configuration_is_an_error() {
    let pool = pool(64, 512);
    let (a, b) = eal().ring_pair(&unique("rp"), 64).unwrap();
    assert!(matches!(
        Port::builder(eal(), a).rx_queues(0).start(&pool),
        Err(Error::PortConfig { .. })
    ));
    assert!(matches!(
        Port::builder(eal(), b).tx_queues(u16::MAX).start(&pool),
        Err(Error::PortConfig { .. })
    ));
    assert!(matches!(
        Port::builder(eal(), PortId(4000)).start(&pool),
        Err(Error::NoDevice(_))
    ));
    assert!(matches!(
        eal().ring_pair(&unique("rp"), 100),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        eal().port_by_name("net_ring_nope"),
        Err(Error::NoDevice(_))
    ));
    assert!(matches!(
        eal().vdev("net_nosuchdriver0", ""),
        Err(Error::Vdev { .. })
    ));
}

#[test]
fn rte_flow_on_a_driver_without_it_is_unsupported() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("rp"), 64).unwrap();
    let port = start(a, &pool);
    let rule = FlowRule::new(FlowAction::Queue(0))
        .ip(IpMatch::V4 {
            src: None,
            dst: None,
        })
        .l4(L4Proto::Tcp, None, Some(80));
    assert!(matches!(
        port.flow_validate(&rule),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        port.flow_create(&rule),
        Err(Error::Unsupported(_))
    ));
    // Rules we can tell are wrong never reach the driver.
    assert!(matches!(
        port.flow_validate(&FlowRule::new(FlowAction::Queue(3))),
        Err(Error::QueueOutOfRange { index: 3, .. })
    ));
    assert!(matches!(
        port.flow_validate(&FlowRule::new(FlowAction::Rss(vec![]))),
        Err(Error::InvalidArgument(_))
    ));
    let too_long = FlowRule::new(FlowAction::Drop).ip(IpMatch::V4 {
        src: Some(("10.0.0.0".parse().unwrap(), 33)),
        dst: None,
    });
    assert!(matches!(
        port.flow_validate(&too_long),
        Err(Error::InvalidArgument(_))
    ));
    let l4_only = FlowRule::new(FlowAction::Drop).l4(L4Proto::Udp, None, None);
    assert!(matches!(
        port.flow_validate(&l4_only),
        Err(Error::InvalidArgument(_))
    ));
}
