//! The asynchronous rule manager (SIGCOMM'26 §4.4, `px_flow`) under concurrent submissions from
//! every worker, and hairpin opt-in, on the simulated NIC (`pxio::rxq::sim`, a simulation).

use std::collections::HashMap;
use std::time::Duration;

use pxio::rxq::sim::{flow_frame, SimRule, SimulatedNic};
use pxio::rxq::{ManagerSetup, Op, Outcome, RuleError, RuleManager, Steering};
use pxio::wire::{classify, Class};
use pxio::{HeapPool, PacketBuf};

const WORKERS: usize = 4;
const PER_WORKER: usize = 400;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    Installed,
    Refused,
    Removed,
    Unknown,
}

#[test]
fn every_request_from_every_worker_gets_exactly_one_completion() {
    let nics = [SimulatedNic::new("a", 8, 64), SimulatedNic::new("b", 8, 64)];
    for nic in &nics {
        nic.set_rule_delay(Duration::from_micros(20)); // a slow driver, so queues fill up
    }
    let (manager, clients) = RuleManager::spawn(ManagerSetup {
        capacity: 16,
        scaler: None,
        ..ManagerSetup::new(nics.iter().map(SimulatedNic::port).collect(), WORKERS)
    });
    let results: Vec<(usize, usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(w, mut client)| {
                s.spawn(move || {
                    let mut expect: HashMap<u64, Expect> = HashMap::new();
                    let mut done: HashMap<u64, u32> = HashMap::new();
                    let mut installed: Vec<u64> = Vec::new();
                    let mut full = 0usize;
                    let mut i = 0;
                    let mut handle =
                        |c: pxio::rxq::Completion,
                         expect: &HashMap<u64, Expect>,
                         installed: &mut Vec<u64>| {
                            *done.entry(c.request).or_default() += 1;
                            let want = expect[&c.request];
                            match (&c.result, want) {
                                (Ok(Outcome::Installed(id)), Expect::Installed) => {
                                    installed.push(*id)
                                }
                                (Ok(Outcome::Removed(_)), Expect::Removed) => {}
                                (Err(RuleError::Refused { message, .. }), Expect::Refused) => {
                                    assert!(message.contains("out of range"), "{message}")
                                }
                                (Err(RuleError::UnknownRule(_)), Expect::Unknown) => {}
                                (got, want) => panic!("worker {w}: {got:?}, expected {want:?}"),
                            }
                        };
                    while i < PER_WORKER {
                        // Drain completions first; the worker never waits for one.
                        while let Some(c) = client.poll() {
                            handle(c, &expect, &mut installed);
                        }
                        let port = i % 2;
                        let (op, want) = match i % 5 {
                            // A valid subset rule.
                            0 | 1 => (
                                Op::Insert {
                                    port,
                                    rule: SimRule::Subset {
                                        group: 0,
                                        priority: 10 + w as u32,
                                        queues: vec![0, 1],
                                    },
                                },
                                Expect::Installed,
                            ),
                            // A rule the driver refuses.
                            2 => (
                                Op::Insert {
                                    port,
                                    rule: SimRule::Subset {
                                        group: 0,
                                        priority: 1,
                                        queues: vec![99],
                                    },
                                },
                                Expect::Refused,
                            ),
                            3 => match installed.pop() {
                                Some(id) => (Op::Remove(id), Expect::Removed),
                                None => (Op::Remove(u64::MAX - i as u64), Expect::Unknown),
                            },
                            _ => (Op::Remove(u64::MAX - i as u64), Expect::Unknown),
                        };
                        match client.submit(op) {
                            Ok(id) => {
                                assert!(expect.insert(id, want).is_none(), "duplicate id");
                                i += 1;
                            }
                            Err(op) => {
                                // Queue full: the request comes back untouched (a popped rule
                                // id goes back to the list); do other work, retry later.
                                if let (Op::Remove(id), Expect::Removed) = (op, want) {
                                    installed.push(id);
                                }
                                full += 1;
                                std::hint::spin_loop();
                            }
                        }
                    }
                    while client.outstanding() > 0 {
                        match client.poll() {
                            Some(c) => handle(c, &expect, &mut installed),
                            None => std::thread::sleep(Duration::from_micros(50)),
                        }
                    }
                    assert_eq!(
                        done.len(),
                        expect.len(),
                        "worker {w}: a request went unanswered"
                    );
                    assert!(
                        done.values().all(|&n| n == 1),
                        "worker {w}: a request answered twice"
                    );
                    (expect.len(), installed.len(), full)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let stats = &manager.stats;
    let completed = stats.completed.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(completed as usize, WORKERS * PER_WORKER);
    // Refused requests and unknown removals are errors; nothing else is.
    let errors = stats.errors.load(std::sync::atomic::Ordering::Relaxed) as usize;
    assert!(errors >= WORKERS * PER_WORKER / 5, "{errors}");
    // What is left on the NICs is exactly what the workers installed and did not remove.
    let left: usize = results.iter().map(|r| r.1).sum();
    let on_nics: usize = nics.iter().map(|n| n.rules().len()).sum();
    assert_eq!(on_nics, left);
    let full: usize = results.iter().map(|r| r.2).sum();
    assert!(
        full > 0,
        "the submission queues never filled: the test did not reach back-pressure"
    );
    manager.stop();
}

fn flow_of(pkt: &pxio::HeapBuf) -> pxio::wire::FlowKey {
    match classify(pkt.head(), pkt.len()) {
        Class::Tcp(h) => h.key,
        other => panic!("{other:?}"),
    }
}

/// With a hairpin queue, flows stay on the NIC unless opted in; opted-in flows reach the CPU
/// queues (both families).
#[test]
fn hairpin_opt_in_steers_only_target_flows_to_the_cpu() {
    let nic = SimulatedNic::new("hp", 4, 1024).with_hairpin();
    let (manager, mut clients) = RuleManager::spawn(ManagerSetup {
        capacity: 8,
        hairpin: vec![0],
        cpu_queues: vec![0, 1, 2, 3],
        ..ManagerSetup::new(vec![nic.port()], 1)
    });
    assert_eq!(manager.steering, vec![Steering::Hairpin]);
    let pool = HeapPool::new(16);
    let targets = [
        flow_frame(&pool, 7, false, 0, 100),
        flow_frame(&pool, 8, true, 0, 100),
    ];
    let client = &mut clients[0];
    for t in &targets {
        client
            .submit(Op::OptIn {
                port: 0,
                key: flow_of(t),
            })
            .ok()
            .unwrap();
    }
    let mut outcomes = Vec::new();
    while outcomes.len() < 2 {
        match client.poll() {
            Some(c) => outcomes.push(c.result),
            None => std::thread::sleep(Duration::from_micros(100)),
        }
    }
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(Outcome::Installed(_)))),
        "{outcomes:?}"
    );
    for flow in 0..20u32 {
        for seq in 0..5 {
            nic.arrive(flow_frame(
                &pool,
                flow,
                flow % 2 == 0 && flow != 7,
                seq,
                100,
            ));
        }
    }
    let c = nic.counters();
    assert_eq!(c.queued, 10, "only the two target flows reach the CPU");
    assert_eq!(c.hairpinned, 90, "every other flow stays on the NIC");
    manager.stop();
}

/// Without hairpin queues the manager says so at start and every flow goes to the CPU; an
/// opt-in request is answered `AlreadyOnCpu`.
#[test]
fn without_hairpin_queues_everything_goes_to_the_cpu_and_it_is_reported() {
    let nic = SimulatedNic::new("nohp", 4, 1024);
    let (manager, mut clients) = RuleManager::spawn(ManagerSetup {
        capacity: 8,
        scaler: None,
        hairpin: vec![0],
        ..ManagerSetup::new(vec![nic.port()], 1)
    });
    match &manager.steering[0] {
        Steering::CpuOnly(why) => assert!(why.contains("no hairpin"), "{why}"),
        other => panic!("{other:?}"),
    }
    let pool = HeapPool::new(16);
    let key = flow_of(&flow_frame(&pool, 3, false, 0, 10));
    clients[0].submit(Op::OptIn { port: 0, key }).ok().unwrap();
    let c = loop {
        if let Some(c) = clients[0].poll() {
            break c;
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    assert_eq!(c.result, Ok(Outcome::AlreadyOnCpu));
    for flow in 0..10 {
        nic.arrive(flow_frame(&pool, flow, flow % 2 == 0, 0, 10));
    }
    assert_eq!(nic.counters().queued, 10);
    assert_eq!(nic.counters().hairpinned, 0);
    assert!(nic.rules().is_empty());
    manager.stop();
}

/// Heavy-hitter opt-in (§4.4): flows stay on the NIC's hairpin queue; the manager thread reads a
/// 1-in-8 sample of them, finds the two elephants (one IPv4, one IPv6) among 100 mice, and opts
/// them in. From then on the CPU queues carry the elephants and nothing else.
#[test]
fn heavy_hitters_found_in_the_sample_are_opted_in_and_mice_stay_on_the_nic() {
    use pxio::rxq::{HeavyHitterMonitor, RxRing, Sample};
    let nic = SimulatedNic::new("hh", 5, 1 << 16).with_hairpin();
    let monitor = HeavyHitterMonitor::new(nic.queue(4), 0, 8, 5_000_000, 50_000_000, 16);
    let (manager, _clients) = RuleManager::spawn(ManagerSetup {
        hairpin: vec![0],
        hairpin_sample: vec![Some(Sample { ratio: 8, queue: 4 })],
        cpu_queues: vec![0, 1, 2, 3],
        monitors: vec![Box::new(monitor)],
        ..ManagerSetup::new(vec![nic.port()], 1)
    });
    assert_eq!(manager.steering, vec![Steering::Hairpin]);
    let pool = HeapPool::new(16);
    let elephants = [5000u32, 5001];
    let opted = || {
        manager
            .stats
            .opted_in
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut after = 0;
    for _ in 0..10_000 {
        for f in 0..100u32 {
            nic.arrive(flow_frame(&pool, f, f % 2 == 0, 0, 100));
        }
        for (i, &e) in elephants.iter().enumerate() {
            for s in 0..20 {
                nic.arrive(flow_frame(&pool, e, i == 1, s, 1400));
            }
        }
        std::thread::sleep(Duration::from_millis(1));
        if opted() >= 2 {
            after += 1;
            if after == 100 {
                break;
            }
        }
    }
    assert_eq!(opted(), 2, "exactly the two elephants were opted in");
    let c = nic.counters();
    assert!(c.sampled > 0 && c.hairpinned > c.queued, "{c:?}");
    // What reached the CPU queues belongs to the elephants only (both families).
    let mut on_cpu = Vec::new();
    for q in 0..4 {
        nic.queue(q).rx_into(&mut on_cpu, usize::MAX);
    }
    assert!(on_cpu.len() >= 100 * 20, "{}", on_cpu.len());
    let (mut v4, mut v6) = (0, 0);
    for p in &on_cpu {
        let k = flow_of(p);
        assert_eq!(
            k.sport,
            1024 + 5000 + u16::from(k.v6),
            "a mouse reached the CPU: {k:?}"
        );
        if k.v6 {
            v6 += 1;
        } else {
            v4 += 1;
        }
    }
    assert!(v4 > 0 && v6 > 0);
    manager.stop();
}

/// Hairpin opt-in and queue scaling together: the subset rules go in group 1, behind the opt-in
/// jump. After scaling down to 2 queues, opted-in flows reach exactly those 2 queues (one per
/// worker), and the rest still stays on the NIC.
#[test]
fn scaling_behind_hairpin_opt_in_steers_opted_in_flows_to_the_active_subset() {
    use pxio::rxq::{
        ActiveFlowGauge, PolicyConfig, QueueLayout, Scaler, ScalingPolicy, CATCH_ALL_PRIORITY,
    };
    use std::sync::Arc;
    let nic = SimulatedNic::new("hs", 8, 1 << 14).with_hairpin();
    let layout = QueueLayout::new(8, 2).unwrap();
    let gauges: Vec<Arc<ActiveFlowGauge>> = (0..2)
        .map(|_| Arc::new(ActiveFlowGauge::default()))
        .collect();
    let policy = ScalingPolicy::new(
        layout.clone(),
        PolicyConfig {
            window_ns: 20_000_000,
            ..Default::default()
        },
    );
    let scaler = Scaler::new(policy, 1, gauges.clone(), 0);
    let view = scaler.view();
    let (manager, mut clients) = RuleManager::spawn(ManagerSetup {
        hairpin: vec![0],
        cpu_queues: (0..8).collect(),
        scaler: Some(scaler),
        ..ManagerSetup::new(vec![nic.port()], 1)
    });
    assert_eq!(manager.steering, vec![Steering::Hairpin]);
    let pool = HeapPool::new(16);
    let targets: Vec<_> = (0..6u32)
        .map(|f| flow_of(&flow_frame(&pool, 100 + f, f % 2 == 0, 0, 10)))
        .collect();
    for key in &targets {
        clients[0]
            .submit(Op::OptIn { port: 0, key: *key })
            .ok()
            .unwrap();
    }
    // Low load (0 or 1 flow per batch): 8 -> 2 queues.
    for _ in 0..5_000 {
        for g in &gauges {
            g.record(0);
        }
        if view.config.count() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(view.config.count(), 2, "scaled down to 2 queues");
    let mut done = 0;
    while done < targets.len() {
        match clients[0].poll() {
            Some(c) => {
                assert!(matches!(c.result, Ok(Outcome::Installed(_))), "{c:?}");
                done += 1;
            }
            None => std::thread::sleep(Duration::from_micros(100)),
        }
    }
    let rules = nic.rules();
    let subset = rules
        .iter()
        .find(|r| matches!(r, SimRule::Subset { priority, .. } if *priority != CATCH_ALL_PRIORITY));
    assert!(
        matches!(subset, Some(SimRule::Subset { group: 1, queues, .. }) if *queues == vec![0, 4]),
        "{rules:?}"
    );
    let before = nic.queued_per_queue();
    for f in 0..200u32 {
        for seq in 0..3 {
            nic.arrive(flow_frame(&pool, f, f % 2 == 0, seq, 10));
        }
    }
    let after = nic.queued_per_queue();
    let added: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    assert_eq!(
        added.iter().sum::<u64>(),
        6 * 3,
        "only the opted-in flows reach the CPU"
    );
    for (q, n) in added.iter().enumerate() {
        if q != 0 && q != 4 {
            assert_eq!(*n, 0, "queue {q} is outside the active subset: {added:?}");
        }
    }
    assert_eq!(nic.counters().hairpinned, 194 * 3);
    manager.stop();
}
