//! The queue machinery on real DPDK ports (vdevs under an EAL): rules go through the real
//! `rte_flow` and hairpin APIs, and the PMDs here refuse both. The refusals must come back typed
//! and be reported, with the fallback taken: every flow to the CPU, all queues active.

use std::sync::Arc;
use std::time::Duration;

use dpdk::testing::{eal, pool, unique, vdev};
use dpdk::{FlowAction, FlowRule, Port};
use pxio::rxq::{
    ActiveFlowGauge, ManagerSetup, ManagerStats, Op, PolicyConfig, QueueLayout, RuleError,
    RuleManager, Scaler, ScalingPolicy, ScalingState, Steering, UnifiedRx,
};

#[test]
fn hairpin_fallback_is_taken_on_vdevs_and_reported() {
    let pool = pool(512, 512);
    let (a, _b) = eal().ring_pair(&unique("rq"), 64).unwrap();
    let ring = Port::builder(eal(), a).start(&pool).unwrap();
    let null = Port::builder(eal(), vdev("net_null", ""))
        .start(&pool)
        .unwrap();
    let (manager, mut clients) = RuleManager::spawn(ManagerSetup {
        capacity: 4,
        scaler: None,
        hairpin: vec![0, 1],
        ..ManagerSetup::new(vec![ring, null], 1)
    });
    for s in &manager.steering {
        match s {
            Steering::CpuOnly(why) => {
                assert!(why.contains("no hairpin queues"), "{why}");
                assert!(why.contains("not supported"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
    // A rule request reaches rte_flow_create and its refusal comes back as a completion.
    let id = clients[0]
        .submit(Op::Insert {
            port: 1,
            rule: FlowRule::new(FlowAction::Rss(vec![0])),
        })
        .ok()
        .unwrap();
    let c = loop {
        if let Some(c) = clients[0].poll() {
            break c;
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    assert_eq!(c.request, id);
    assert!(
        matches!(&c.result, Err(RuleError::Unsupported { port }) if port.contains("net_null")),
        "{:?}",
        c.result
    );
    manager.stop();
}

#[test]
fn queue_scaling_on_a_vdev_keeps_all_queues_and_unified_rx_reads_them_all() {
    let pool = pool(4096, 512);
    let id = vdev("net_null", "");
    let port = Port::builder(eal(), id).rx_queues(4).start(&pool).unwrap();
    let layout = QueueLayout::new(4, 2).unwrap();
    let gauges: Vec<Arc<ActiveFlowGauge>> = (0..2)
        .map(|_| Arc::new(ActiveFlowGauge::default()))
        .collect();
    let policy = ScalingPolicy::new(layout.clone(), PolicyConfig::default());
    let mut scaler = Scaler::new(policy, 1, gauges.clone(), 0);
    let mut workers: Vec<UnifiedRx<dpdk::RxQueue>> = (0..2)
        .map(|w| {
            let rings = layout
                .worker_pool(w)
                .map(|q| port.rx_queue(q).unwrap())
                .collect();
            UnifiedRx::new(
                &layout,
                rings,
                scaler.config(),
                gauges[usize::from(w)].clone(),
                8,
            )
        })
        .collect();
    // net_null hands out packets on every queue: each worker reads both of its queues.
    let mut out = Vec::new();
    for w in &mut workers {
        assert_eq!(w.rx_burst(&mut out), 16);
        assert_eq!(w.stats().polled_queues, 2);
    }
    drop(out);
    // Low load: the policy wants 2 queues; the insert reaches rte_flow and is refused.
    let mut ports = vec![port.clone()];
    let stats = ManagerStats::default();
    scaler.tick(0, &mut ports, &stats);
    gauges[0].record(0);
    scaler.tick(2_000_000_000, &mut ports, &stats);
    match scaler.state() {
        ScalingState::Unavailable(why) => assert!(why.contains("rte_flow"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(scaler.config().count(), 4, "all queues stay active");
    assert_eq!(scaler.advised(), 2, "the policy's advice is still reported");
    let mut out = Vec::new();
    for w in &mut workers {
        assert_eq!(w.rx_burst(&mut out), 16);
    }
}
