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
        ports: nics.iter().map(SimulatedNic::port).collect(),
        workers: WORKERS,
        capacity: 16,
        scaler: None,
        hairpin: false,
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
                    let mut handle = |c: pxio::rxq::Completion,
                                      expect: &HashMap<u64, Expect>,
                                      installed: &mut Vec<u64>| {
                        *done.entry(c.request).or_default() += 1;
                        let want = expect[&c.request];
                        match (&c.result, want) {
                            (Ok(Outcome::Installed(id)), Expect::Installed) => installed.push(*id),
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
                    assert_eq!(done.len(), expect.len(), "worker {w}: a request went unanswered");
                    assert!(done.values().all(|&n| n == 1), "worker {w}: a request answered twice");
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
    assert!(full > 0, "the submission queues never filled: the test did not reach back-pressure");
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
        ports: vec![nic.port()],
        workers: 1,
        capacity: 8,
        scaler: None,
        hairpin: true,
    });
    assert_eq!(manager.steering, vec![Steering::Hairpin]);
    let pool = HeapPool::new(16);
    let targets = [flow_frame(&pool, 7, false, 0, 100), flow_frame(&pool, 8, true, 0, 100)];
    let client = &mut clients[0];
    for t in &targets {
        client.submit(Op::OptIn { port: 0, key: flow_of(t) }).ok().unwrap();
    }
    let mut outcomes = Vec::new();
    while outcomes.len() < 2 {
        match client.poll() {
            Some(c) => outcomes.push(c.result),
            None => std::thread::sleep(Duration::from_micros(100)),
        }
    }
    assert!(outcomes.iter().all(|o| matches!(o, Ok(Outcome::Installed(_)))), "{outcomes:?}");
    for flow in 0..20u32 {
        for seq in 0..5 {
            nic.arrive(flow_frame(&pool, flow, flow % 2 == 0 && flow != 7, seq, 100));
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
        ports: vec![nic.port()],
        workers: 1,
        capacity: 8,
        scaler: None,
        hairpin: true,
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
