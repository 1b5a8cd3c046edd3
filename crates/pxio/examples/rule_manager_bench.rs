//! How fast the asynchronous rule manager (SIGCOMM'26 §4.4, `px_flow`) applies rules, and
//! whether a worker slows down while it does. The NIC is `pxio::rxq::sim::SimulatedNic`, a
//! simulation whose rule calls take a fixed time (330 µs stands for a ConnectX firmware round
//! trip, §4.4); the worker's work is real: the unified RX's per-packet flow identification
//! (`pxio::rxq::flow_id`, a header parse and a hash) over IPv4 and IPv6 frames.
//!
//! `cargo run --release -p pxio --example rule_manager_bench [-- SECONDS_PER_RUN]`
//!
//! Numbers are ratios within one run (the machine is shared): worker throughput while rule
//! updates run, over its throughput with none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pxio::rxq::sim::{flow_frame, SimRule, SimulatedNic};
use pxio::rxq::{flow_id, FlowPort, ManagerSetup, Op, RuleManager};
use pxio::HeapPool;

/// How updates are made during a run.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    None,
    Async,
    Sync,
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    const REPS: usize = 5;
    let pool = HeapPool::new(64);
    let frames: Vec<_> = (0..256u32)
        .map(|f| flow_frame(&pool, f, f % 2 == 1, f, 1400))
        .collect();
    println!(
        "worker: flow_id over 256 frames (IPv4 + IPv6); {REPS} rounds of {secs} s per mode, \
         modes interleaved; medians"
    );
    println!(
        "{:<34} {:>12} {:>15} {:>14}",
        "run", "worker Mpps", "rule updates/s", "vs no updates"
    );
    for delay_us in [330u64, 0] {
        let delay = Duration::from_micros(delay_us);
        // Per round: (pps, updates/s) for each mode; ratios are taken within the round.
        let mut rounds = Vec::new();
        for _ in 0..REPS {
            let none = run(&frames, Mode::None, delay, secs);
            let asy = run(&frames, Mode::Async, delay, secs);
            let syn = run(&frames, Mode::Sync, delay, secs);
            rounds.push([none, asy, syn]);
        }
        for (i, name) in [
            format!("no updates (rule call {delay_us} us)"),
            format!("px_flow manager ({delay_us} us)"),
            format!("worker calls the NIC ({delay_us} us)"),
        ]
        .iter()
        .enumerate()
        {
            let pps = median(rounds.iter().map(|r| r[i].0).collect());
            let ups = median(rounds.iter().map(|r| r[i].1).collect());
            let ratio = median(rounds.iter().map(|r| r[i].0 / r[0].0).collect());
            println!(
                "{name:<34} {:>12.2} {:>15.0} {:>13.2}x",
                pps / 1e6,
                ups,
                ratio
            );
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One run: the worker processes frames for `secs`, making rule updates as `mode` says (an
/// insert, then its removal, as fast as they are accepted). Returns (packets/s, updates/s).
fn run(frames: &[pxio::HeapBuf], mode: Mode, delay: Duration, secs: f64) -> (f64, f64) {
    let nic = SimulatedNic::new("bench", 8, 64);
    nic.set_rule_delay(delay);
    let (manager, mut clients) = RuleManager::spawn(ManagerSetup {
        capacity: 64,
        scaler: None,
        ..ManagerSetup::new(vec![nic.port()], 1)
    });
    let mut direct = nic.port();
    let client = &mut clients[0];
    let rule = SimRule::Subset {
        group: 0,
        priority: 5,
        queues: vec![0, 1, 2, 3],
    };
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let (mut packets, mut updates) = (0u64, 0u64);
    let mut pending_remove: Vec<u64> = Vec::new();
    let mut acc = 0u64;
    while start.elapsed().as_secs_f64() < secs && !stop.load(Ordering::Relaxed) {
        for f in frames {
            acc = acc.wrapping_add(flow_id(f).unwrap_or(0));
        }
        packets += frames.len() as u64;
        match mode {
            Mode::None => {}
            Mode::Async => {
                while let Some(c) = client.poll() {
                    updates += 1;
                    if let Ok(pxio::rxq::Outcome::Installed(id)) = c.result {
                        pending_remove.push(id);
                    }
                }
                while let Some(id) = pending_remove.pop() {
                    if let Err(op) = client.submit(Op::Remove(id)) {
                        if let Op::Remove(id) = op {
                            pending_remove.push(id);
                        }
                        break;
                    }
                }
                let _ = client.submit(Op::Insert {
                    port: 0,
                    rule: rule.clone(),
                });
            }
            Mode::Sync => {
                if let Ok(h) = direct.insert(&rule) {
                    let _ = direct.remove(h);
                    updates += 2;
                }
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    std::hint::black_box(acc);
    manager.stop();
    (packets as f64 / elapsed, updates as f64 / elapsed)
}
