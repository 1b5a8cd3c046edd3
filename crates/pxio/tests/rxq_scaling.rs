//! RX queue scaling (SIGCOMM'26 §4.3) driven by simulated load, as in Figure 11b: the sequence
//! of configurations, no oscillation, and no packet lost across transitions. The NIC is
//! `pxio::rxq::sim::SimulatedNic`, a simulation (this machine has no NIC with rte_flow).

use std::collections::HashMap;
use std::sync::Arc;

use pxio::rxq::sim::{flow_frame, SimQueue, SimulatedNic};
use pxio::rxq::{
    ActiveFlowGauge, ManagerStats, PolicyConfig, QueueLayout, Scaler, ScalingPolicy, ScalingState,
    UnifiedRx,
};
use pxio::{HeapBuf, HeapPool, PacketBuf};

const QUEUES: u16 = 128;
const WORKERS: u16 = 2;
/// Virtual time per tick, and ticks per policy window.
const TICK_NS: u64 = 1_000_000;
const WINDOW_TICKS: u64 = 100;

struct Rig {
    nic: SimulatedNic,
    scaler: Scaler<pxio::rxq::sim::SimPort>,
    ports: Vec<pxio::rxq::sim::SimPort>,
    workers: Vec<UnifiedRx<SimQueue>>,
    stats: ManagerStats,
    pool: HeapPool,
    received: u64,
    /// Per flow, the sequence numbers received (to check none is missing or doubled).
    seen: HashMap<u32, Vec<u32>>,
}

impl Rig {
    fn new(layout: QueueLayout) -> Self {
        let nic = SimulatedNic::new("sim0", layout.total(), 4096);
        let gauges: Vec<Arc<ActiveFlowGauge>> = (0..layout.workers())
            .map(|_| Arc::new(ActiveFlowGauge::default()))
            .collect();
        let policy = ScalingPolicy::new(
            layout.clone(),
            PolicyConfig {
                window_ns: WINDOW_TICKS * TICK_NS,
                ..Default::default()
            },
        );
        let scaler = Scaler::new(policy, 1, gauges.clone(), 0);
        let workers = (0..layout.workers())
            .map(|w| {
                let rings = layout.worker_pool(w).map(|q| nic.queue(q)).collect();
                UnifiedRx::new(
                    &layout,
                    rings,
                    scaler.config(),
                    gauges[usize::from(w)].clone(),
                    256,
                )
            })
            .collect();
        Self {
            ports: vec![nic.port()],
            nic,
            scaler,
            workers,
            stats: ManagerStats::default(),
            pool: HeapPool::new(64),
            received: 0,
            seen: HashMap::new(),
        }
    }

    /// One tick: traffic arrives, the policy may act, then every worker polls once.
    fn tick(&mut self, t: u64, flows: &[(u32, bool)], seq: &mut HashMap<u32, u32>) {
        for &(flow, v6) in flows {
            let s = seq.entry(flow).or_insert(0);
            self.nic.arrive(flow_frame(&self.pool, flow, v6, *s, 64));
            *s += 1;
        }
        self.scaler.tick(t * TICK_NS, &mut self.ports, &self.stats);
        let mut out: Vec<HeapBuf> = Vec::new();
        for w in &mut self.workers {
            w.rx_burst(&mut out);
        }
        self.account(out);
    }

    fn account(&mut self, out: Vec<HeapBuf>) {
        for p in out {
            let head = p.head();
            // sport - 1024 + 60000 * host; the lab flows stay below 60000.
            let sport_at = if head[12..14] == [0x86, 0xdd] { 54 } else { 34 };
            let flow = u32::from(u16::from_be_bytes([head[sport_at], head[sport_at + 1]])) - 1024;
            let seq = u32::from_be_bytes(head[sport_at + 4..sport_at + 8].try_into().unwrap());
            self.seen.entry(flow).or_default().push(seq);
            self.received += 1;
        }
    }
}

/// The flows of each phase of Figure 11b: 80 rate-limited flows (each sends once every 64
/// ticks), then 800 unconstrained ones on top (one packet every tick), then the 80 alone again.
/// Flows alternate between IPv4 and IPv6.
fn phase_flows(t: u64, phase: usize) -> Vec<(u32, bool)> {
    let mut flows: Vec<(u32, bool)> = (0..80u32)
        .filter(|f| (u64::from(*f) + t).is_multiple_of(64))
        .map(|f| (f, f % 2 == 1))
        .collect();
    if phase == 1 {
        flows.extend((1000..1800u32).map(|f| (f, f % 2 == 1)));
    }
    flows
}

fn run_figure_11b(rig: &mut Rig) -> (Vec<u16>, HashMap<u32, u32>) {
    let mut sequence = vec![rig.scaler.config().count()];
    let mut seq = HashMap::new();
    let phase_ticks = 12 * WINDOW_TICKS;
    for t in 0..3 * phase_ticks {
        let phase = (t / phase_ticks) as usize;
        let flows = phase_flows(t, phase);
        rig.tick(t, &flows, &mut seq);
        let now = rig.scaler.config().count();
        if *sequence.last().unwrap() != now {
            sequence.push(now);
        }
    }
    // Quiet ticks: whatever is still queued is read.
    for t in 3 * phase_ticks..3 * phase_ticks + 20 {
        rig.tick(t, &[], &mut seq);
    }
    (sequence, seq)
}

#[test]
fn figure_11b_scaling_sequence_without_oscillation_or_loss() {
    let layout = QueueLayout::new(QUEUES, WORKERS).unwrap();
    assert_eq!(layout.configs(), &[2, 8, 32, 128]);
    let mut rig = Rig::new(layout);
    let (sequence, sent) = run_figure_11b(&mut rig);

    // Phase 1 settles at 8 (from all 128), phase 2 climbs to 128, phase 3 falls back to 8:
    // one step per window, no reversal inside a phase (no oscillation).
    assert_eq!(sequence, vec![128, 32, 8, 32, 128, 32, 8]);
    assert_eq!(rig.scaler.state(), &ScalingState::Active);
    let history = rig.scaler.history();
    let history = history.lock().unwrap();
    assert_eq!(history.len(), 6);
    for t in history.iter() {
        println!(
            "t = {:>5} ms (phase {}): {:>7.1} active flows -> {:>3} to {:>3} queues",
            t.at_ns / 1_000_000,
            t.at_ns / (12 * WINDOW_TICKS * TICK_NS) + 1,
            t.active_flows,
            t.from,
            t.to
        );
    }
    for pair in history.windows(2) {
        // At least two windows between transitions: the window after a change is not judged.
        assert!(pair[1].at_ns - pair[0].at_ns >= 2 * WINDOW_TICKS * TICK_NS);
    }

    // No packet lost: every packet that arrived was read, exactly once, none dropped.
    let c = rig.nic.counters();
    let total_sent: u64 = sent.values().map(|&n| u64::from(n)).sum();
    assert_eq!(c.arrived, total_sent);
    assert_eq!(c.missed, 0, "queues overflowed");
    assert_eq!(c.read, c.arrived);
    assert_eq!(rig.received, total_sent);
    assert!(rig.nic.backlog().iter().all(|&b| b == 0));
    for (flow, &n) in &sent {
        let mut got = rig.seen.remove(flow).unwrap_or_default();
        got.sort_unstable();
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "flow {flow}");
    }
    // Shrinking transitions found packets in the queues that left, and the workers drained them.
    let drained: u64 = rig.workers.iter().map(|w| w.stats().drained).sum();
    println!(
        "{} packets arrived, {} read, {} missed; {drained} read from queues that had left the \
         configuration",
        c.arrived, c.read, c.missed
    );
    assert!(
        drained > 0,
        "no transition had anything to drain: the test would not see a loss"
    );
    // Exactly the rule of the active subset is left on the NIC.
    assert_eq!(rig.nic.rules().len(), 1);
}

#[test]
fn a_refused_rule_leaves_all_queues_active_and_says_why() {
    let layout = QueueLayout::new(QUEUES, WORKERS).unwrap();
    let mut rig = Rig::new(layout);
    rig.nic
        .set_refusal(Some("no flow engine (simulated refusal)"));
    let (sequence, sent) = run_figure_11b(&mut rig);
    assert_eq!(sequence, vec![128]);
    match rig.scaler.state() {
        ScalingState::Unavailable(why) => assert!(why.contains("simulated refusal"), "{why}"),
        other => panic!("{other:?}"),
    }
    // The policy still advises (a metric), from its first decision on.
    assert!(rig.scaler.advised() < QUEUES);
    let total_sent: u64 = sent.values().map(|&n| u64::from(n)).sum();
    assert_eq!(rig.received, total_sent);
    assert!(rig.nic.rules().is_empty());
}

/// Why transitions are insert-then-evict (§4.3): with the old rule evicted first, packets that
/// arrive before the new rule is in are spread by the port's own RSS over all 128 queues, most of
/// them outside the next configuration, where no worker reads. Inserted first, the new rule
/// waits behind the old one (its priority is lower) and takes over when the old one goes: no
/// packet ever lands outside the subsets in force.
#[test]
fn insert_then_evict_never_steers_outside_the_subsets_evict_then_insert_does() {
    use pxio::rxq::sim::SimRule;
    use pxio::rxq::FlowPort;
    let layout = QueueLayout::new(QUEUES, WORKERS).unwrap();
    let pool = HeapPool::new(64);
    let subset = |count: u16| SimRule::Subset {
        group: 0,
        priority: layout.priority(count).unwrap(),
        queues: layout.queues(count),
    };
    let burst = |nic: &SimulatedNic| {
        for f in 0..400u32 {
            nic.arrive(flow_frame(&pool, f, f % 2 == 0, 0, 64));
        }
    };
    // Packets that landed outside the 32-queue configuration (queues no worker polls there).
    let outside = |nic: &SimulatedNic| -> u64 {
        let allowed = layout.queues(32);
        nic.queued_per_queue()
            .iter()
            .enumerate()
            .filter(|(q, _)| !allowed.contains(&(*q as u16)))
            .map(|(_, n)| n)
            .sum()
    };
    // 8 -> 32, evict first.
    let nic = SimulatedNic::new("e-i", QUEUES, 4096);
    let mut port = nic.port();
    let old = port.insert(&subset(8)).unwrap();
    burst(&nic);
    port.remove(old).unwrap();
    burst(&nic); // arrives between the two calls
    port.insert(&subset(32)).unwrap();
    burst(&nic);
    let stranded = outside(&nic);
    // 96 of the 128 queues are outside the 32-queue configuration: about 3/4 of the burst.
    assert!(
        stranded > 200,
        "evict-then-insert spread {stranded} of 400 packets"
    );
    // 8 -> 32, insert first (what Scaler does).
    let nic = SimulatedNic::new("i-e", QUEUES, 4096);
    let mut port = nic.port();
    let old = port.insert(&subset(8)).unwrap();
    burst(&nic);
    port.insert(&subset(32)).unwrap();
    burst(&nic); // still on the 8 queues: the new rule waits behind the old one
    port.remove(old).unwrap();
    burst(&nic);
    assert_eq!(outside(&nic), 0);
    assert_eq!(nic.counters().queued, 3 * 400);
}

#[test]
fn flow_counting_can_be_turned_off_where_nothing_reads_it() {
    let layout = QueueLayout::new(4, 1).unwrap();
    let pool = HeapPool::new(64);
    for on in [true, false] {
        let nic = SimulatedNic::new("count", 4, 256);
        let gauge = Arc::new(ActiveFlowGauge::default());
        let mut rx = UnifiedRx::new(
            &layout,
            (0..4).map(|q| nic.queue(q)).collect(),
            Arc::new(pxio::rxq::ActiveConfig::new(4)),
            gauge.clone(),
            64,
        )
        .count_flows(on);
        for f in 0..10 {
            nic.arrive(flow_frame(&pool, f, f % 2 == 0, 0, 64));
        }
        let mut out = Vec::new();
        assert_eq!(rx.rx_burst(&mut out), 10);
        assert_eq!(gauge.take_average(), if on { 10.0 } else { 0.0 });
    }
}
