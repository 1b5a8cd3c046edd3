//! `rule-manager`: how fast the asynchronous rule manager (SIGCOMM'26 §4.4, `px_flow`) applies
//! rules, and whether a worker slows down while it does. Run it through
//! `cargo xtask bench rule-manager [--json FILE]`.
//!
//! The NIC is `pxio::rxq::sim::SimulatedNic`, a simulation whose rule calls take a fixed time
//! (330 µs stands for a ConnectX firmware round trip, §4.4; 0 µs shows the manager's own cost).
//! The worker's work is real: the unified RX's per-packet flow identification
//! (`pxio::rxq::flow_id`, a header parse and a hash) over IPv4 and IPv6 frames. Three modes:
//! no rule updates; updates through the manager (insert, then remove, as fast as accepted); the
//! worker making the same calls itself.
//!
//! The machine is shared, so the modes run interleaved in rounds and the table shows medians,
//! with throughput as a ratio to the no-update run of the same round. Nothing passes or fails on
//! the times.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;

use pxio::rxq::sim::{flow_frame, SimRule, SimulatedNic};
use pxio::rxq::{flow_id, FlowPort, ManagerSetup, Op, RuleManager};
use pxio::HeapPool;
use serde::Serialize;

/// How updates are made during a run.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    None,
    Async,
    Sync,
}

#[derive(Debug, Parser)]
#[command(
    name = "rule-manager",
    about = "The px_flow rule manager: update rate, and worker throughput while updates run"
)]
struct Args {
    /// Seconds per run.
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Rounds (each runs every mode once).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Simulated rule-call latencies, microseconds.
    #[arg(long, value_delimiter = ',', default_value = "330,0")]
    rule_call_us: Vec<u64>,
    /// Also write the results here as JSON.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One row of the table.
#[derive(Debug, Serialize)]
struct Row {
    rule_call_us: u64,
    mode: &'static str,
    worker_mpps: f64,
    updates_per_s: f64,
    vs_no_updates: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pool = HeapPool::new(64);
    let frames: Vec<_> = (0..256u32)
        .map(|f| flow_frame(&pool, f, f % 2 == 1, f, 1400))
        .collect();
    println!(
        "worker: flow_id over 256 frames (IPv4 + IPv6); {} rounds of {} s per mode, modes \
         interleaved; medians",
        args.rounds, args.seconds
    );
    println!(
        "{:<34} {:>12} {:>15} {:>14}",
        "run", "worker Mpps", "rule updates/s", "vs no updates"
    );
    let mut rows = Vec::new();
    for &delay_us in &args.rule_call_us {
        let delay = Duration::from_micros(delay_us);
        // Per round: (pps, updates/s) for each mode; ratios are taken within the round.
        let mut rounds = Vec::new();
        for _ in 0..args.rounds.max(1) {
            let none = run(&frames, Mode::None, delay, args.seconds);
            let asy = run(&frames, Mode::Async, delay, args.seconds);
            let syn = run(&frames, Mode::Sync, delay, args.seconds);
            rounds.push([none, asy, syn]);
        }
        for (i, (mode, name)) in [
            ("none", format!("no updates (rule call {delay_us} us)")),
            ("px_flow", format!("px_flow manager ({delay_us} us)")),
            ("worker", format!("worker calls the NIC ({delay_us} us)")),
        ]
        .into_iter()
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
            rows.push(Row {
                rule_call_us: delay_us,
                mode,
                worker_mpps: pps / 1e6,
                updates_per_s: ups,
                vs_no_updates: ratio,
            });
        }
    }
    if let Some(path) = &args.json {
        let report = serde_json::json!({
            "seconds_per_run": args.seconds,
            "rounds": args.rounds,
            "runs": rows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
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
