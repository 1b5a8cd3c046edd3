//! Hairpin queues (SIGCOMM'26 §4.4) and header-only DMA (buffer split, §4.2) on PMDs that have
//! neither: every vdev this machine can run. Both must be refused with a typed error before the
//! port is configured, and the port must still start normally afterwards (nothing half-done).

use dpdk::testing::{eal, pool, unique, vdev};
use dpdk::{hairpin_capability, Burst, Error, FlowAction, FlowRule, Port};

#[test]
fn vdevs_report_no_hairpin_queues_as_a_typed_error() {
    let pool = pool(256, 512);
    let (a, _b) = eal().ring_pair(&unique("hp"), 64).unwrap();
    let null = vdev("net_null", "");
    for id in [a, null] {
        match hairpin_capability(eal(), id) {
            Err(Error::HairpinUnsupported { reason, driver, .. }) => {
                assert!(reason.contains("not supported"), "{driver}: {reason}");
            }
            other => panic!("port {id}: expected HairpinUnsupported, got {other:?}"),
        }
        let refused = Port::builder(eal(), id).hairpin_queues(1).start(&pool);
        assert!(
            matches!(refused, Err(Error::HairpinUnsupported { .. })),
            "{refused:?}"
        );
        // The refusal left the device as it was: it starts without hairpin queues.
        let port = Port::builder(eal(), id).start(&pool).unwrap();
        assert!(port.hairpin_rx_queues().is_empty());
        assert!(matches!(
            port.hairpin_capability(),
            Err(Error::HairpinUnsupported { .. })
        ));
        let mut rx = port.rx_queue(0).unwrap();
        let mut burst = Burst::<8>::new();
        rx.rx_burst(&mut burst); // the port works (net_null hands out packets, net_ring none)
    }
}

#[test]
fn header_split_is_refused_where_the_device_lacks_buffer_split() {
    let headers = pool(256, 256);
    let pool = pool(256, 2048);
    let (a, _b) = eal().ring_pair(&unique("hs"), 64).unwrap();
    let err = Port::builder(eal(), a)
        .header_split(128, headers.clone())
        .start(&pool)
        .unwrap_err();
    match &err {
        Error::OffloadUnsupported {
            offload, driver, ..
        } => {
            assert!(offload.contains("BUFFER_SPLIT"));
            assert_eq!(driver, "net_ring");
        }
        other => panic!("expected OffloadUnsupported, got {other:?}"),
    }
    assert!(err
        .to_string()
        .contains("does not offer RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT"));
    // Asking for the bit through rx_offloads does not sneak it in either.
    let port = Port::builder(eal(), a)
        .rx_offloads(dpdk::RxOffloads::BUFFER_SPLIT)
        .start(&pool)
        .unwrap();
    assert!(!port.rx_offloads().contains(dpdk::RxOffloads::BUFFER_SPLIT));
}

#[test]
fn a_jump_must_go_to_a_higher_group() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("jp"), 64).unwrap();
    let port = Port::builder(eal(), a).start(&pool).unwrap();
    assert!(matches!(
        port.flow_validate(&FlowRule::new(FlowAction::Jump(0))),
        Err(Error::InvalidArgument(_))
    ));
    // A well-formed jump reaches the driver, which has no rte_flow.
    assert!(matches!(
        port.flow_create(&FlowRule::new(FlowAction::Jump(1))),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn a_sampled_hairpin_rule_is_checked_then_reaches_the_driver() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("sp"), 64).unwrap();
    let port = Port::builder(eal(), a).start(&pool).unwrap();
    let sampled = |queue, ratio, sample_queue| {
        FlowRule::new(FlowAction::SampleThenQueue {
            queue,
            ratio,
            sample_queue,
        })
    };
    assert!(matches!(
        port.flow_validate(&sampled(0, 0, 0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        port.flow_validate(&sampled(0, 16, 5)),
        Err(Error::QueueOutOfRange { index: 5, .. })
    ));
    assert!(matches!(
        port.flow_create(&sampled(0, 16, 0)),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn binding_hairpin_queues_between_ports_without_them_is_refused() {
    let pool = pool(256, 512);
    let (a, b) = eal().ring_pair(&unique("hb"), 64).unwrap();
    let (a, b) = (
        Port::builder(eal(), a).start(&pool).unwrap(),
        Port::builder(eal(), b).start(&pool).unwrap(),
    );
    match a.hairpin_bind(&b) {
        Err(Error::HairpinUnsupported { reason, .. }) => {
            assert!(reason.contains("binding its hairpin TX queues"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    // A two-port set-up is refused like a one-port one, before configuring anything.
    let (c, d) = eal().ring_pair(&unique("hb"), 64).unwrap();
    let peer = dpdk::HairpinPeer {
        port: d,
        rx_base: 1,
        tx_base: 1,
    };
    assert!(matches!(
        Port::builder(eal(), c)
            .hairpin_queues(1)
            .hairpin_peer(peer)
            .start(&pool),
        Err(Error::HairpinUnsupported { .. })
    ));
}

#[test]
fn keyed_rss_rules_are_checked_then_reach_the_driver() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("rk"), 64).unwrap();
    let port = Port::builder(eal(), a).start(&pool).unwrap();
    let keyed = |queues: Vec<u16>| {
        FlowRule::new(FlowAction::RssKeyed {
            queues,
            key: [0x6d; dpdk::RSS_KEY_LEN],
            types: dpdk::RssHash::IP | dpdk::RssHash::TCP,
        })
        .group(1)
        .priority(2)
    };
    assert!(matches!(
        port.flow_validate(&keyed(vec![])),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        port.flow_validate(&keyed(vec![0, 4])),
        Err(Error::QueueOutOfRange { index: 4, .. })
    ));
    assert!(matches!(
        port.flow_create(&keyed(vec![0])),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn the_rss_table_is_checked_then_refused_where_the_driver_has_none() {
    let pool = pool(64, 512);
    let (a, _b) = eal().ring_pair(&unique("rt"), 64).unwrap();
    let port = Port::builder(eal(), a).start(&pool).unwrap();
    assert!(matches!(
        port.set_rss_queues(&[]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        port.set_rss_queues(&[0, 3]),
        Err(Error::QueueOutOfRange { index: 3, .. })
    ));
    assert!(matches!(
        port.set_rss_queues(&[0]),
        Err(Error::Port {
            op: "rte_eth_dev_rss_reta_update",
            ..
        })
    ));
}
