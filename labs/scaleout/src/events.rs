//! The lab on FRR: the routers' BGP and BFD across the instances steer every connection, and
//! the lab changes the set of instances under load, as an operator's network does.
//!
//! - **steady**: every instance at full load (unpaced transfers, both families, both ways) for
//!   a while; no BFD session may flap.
//! - **crash**: instance A is killed (SIGKILL) mid-transfer; BFD detects it, BGP withdraws its
//!   next hops, zebra moves the routes. Every byte must arrive.
//! - **drain**: the maintenance procedure of docs/scale-out.md on instance A: its BGP sessions
//!   are shut on both routers, the lab waits until both routers route around it and one merge
//!   delay window more, then stops it with SIGINT. No byte lost, no retransmission timeout,
//!   pxgw exits cleanly with no mbuf leaked.
//! - **add**: instance C, started and forwarding, has its BGP sessions enabled under load; the
//!   routers' hash moves some connections to it. How many, and how long they stalled.
//!
//! Each event runs 64 paced connections (16 each way per family), every one sha256-checked.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use gateway_lab::Family;
use serde::Serialize;

use crate::flows::{Flow, FlowResult, FlowSpec};
use crate::frr::{wait_converged, wait_routes, BfdTimers, ControlPlane};
use crate::instance::{Instance, InstanceReport};
use crate::run::Plan;
use crate::topology::{EcmpLab, INSTANCES, PAIR};

/// How long the routers may take to converge after FRR starts or an instance comes back.
const CONVERGE: Duration = Duration::from_secs(60);
/// How long the routers take at most, in the lab, to bring a new instance's sessions up and
/// route over it (seen: 4.4-4.5 s).
const ADD_CONVERGE: Duration = Duration::from_secs(10);
/// The steady phase's first listening port. Every listening port of the lab is below the
/// ephemeral range (32768 and up), where a running connection's own port could take it.
const STEADY_PORTS: u16 = 10000;
/// Blocks of 64 listening ports the steady phase's batches cycle through.
const STEADY_PORT_BLOCKS: u16 = 80;
/// How long the routers may take to move their routes after an event.
const MOVE: Duration = Duration::from_secs(10);

/// How an instance ended.
#[derive(Clone, Debug, Serialize)]
pub struct Exit {
    /// "A", "B" or "C".
    pub name: &'static str,
    /// pxgw's exit code; -9 for the one killed.
    pub exit_code: i32,
    /// Mbufs not returned to their pools at exit (none reported by a killed instance).
    pub leaked_mbufs: Option<u64>,
    /// Every drop counter, summed (none reported by a killed instance).
    pub drops: Option<u64>,
    /// Inbound UDP datagrams it held for a caravan; the only UDP here is BFD, never held.
    pub caravan_held: Option<u64>,
}

impl From<&InstanceReport> for Exit {
    fn from(r: &InstanceReport) -> Self {
        Self {
            name: r.name,
            exit_code: r.exit_code,
            leaked_mbufs: Some(r.leaked_mbufs),
            drops: Some(r.drops),
            caravan_held: Some(r.caravan_held),
        }
    }
}

/// The steady phase's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct SteadyReport {
    /// How long every instance ran at full load, s.
    pub seconds: f64,
    /// Connections run (unpaced, in batches until the time was up).
    pub connections: usize,
    /// Every connection delivered every byte.
    pub bytes_ok: bool,
    /// Instances whose inside wires carried more than 1 MB in the phase.
    pub instances_carrying: usize,
    /// What each instance's inside wire carried, both directions, Mb/s (A, B).
    pub instance_mbps: Vec<f64>,
    /// BFD session-down events on both routers during the phase.
    pub bfd_flaps: u64,
    /// The MSS the inside router's BGP sockets send with (`ss -ti`): pxgw raised the MSS of
    /// the outside router's SYN, so the inside router sends segments up to the iMTU, which
    /// pxgw splits toward the outside router.
    pub bgp_mss_inside: Vec<u32>,
    /// Errors of connections that failed.
    pub errors: Vec<String>,
}

/// One event's outcome (crash, drain, add).
#[derive(Clone, Debug, Serialize)]
pub struct EventReport {
    /// "crash", "drain" or "add".
    pub event: &'static str,
    /// The instance killed, drained or added.
    pub instance: &'static str,
    /// Connections running when the event happened.
    pub connections_total: usize,
    /// Those that completed with every byte (sha256 at both ends).
    pub connections_intact: usize,
    /// The longest gap between a receiver's reads after the event, over the connections, ms.
    pub stall_ms_max: u64,
    /// The median of the connections' stalls, ms.
    pub stall_ms_median: u64,
    /// Each connection's stall, ms, smallest first.
    pub stalls_ms: Vec<u64>,
    /// The longest gap of any connection before the event, ms: the baseline (pacing, the
    /// instances' busy-polling workers sharing two cores with the hosts and the routers).
    pub gap_before_ms: u64,
    /// From the event (SIGKILL; the sessions shut; the sessions enabled) until both routers'
    /// kernel routes, both families, have moved, ms (polled every 5 ms, each poll reading four
    /// routes). For the crash: BFD detection, BGP withdrawal and zebra's route update.
    pub routes_moved_ms: u64,
    /// BFD's detection time on the crashed instance's sessions as bfdd logged it (from SIGKILL
    /// to the first session going down), ms; crash only.
    pub bfd_detection_ms: Option<u64>,
    /// BFD session-down events of the other instances' sessions during the event.
    pub bfd_flaps: u64,
    /// TCP retransmission timeouts in the outside and the inside host during the event
    /// (`TcpExtTCPTimeouts`).
    pub tcp_timeouts: u64,
    /// Connections whose path through the instances changed in either direction (add only).
    pub moved: Option<usize>,
    /// The moved connections' longest stall, ms (add only).
    pub moved_stall_ms_max: Option<u64>,
    /// The moved connections' median stall, ms (add only).
    pub moved_stall_ms_median: Option<u64>,
    /// How the instances that stopped in this event ended.
    pub instances: Vec<Exit>,
    /// Errors of connections that failed.
    pub errors: Vec<String>,
}

/// The FRR part of the report.
#[derive(Clone, Debug, Serialize)]
pub struct FrrReport {
    /// BFD's timers on every session.
    pub bfd: BfdTimers,
    /// Every instance at full load.
    pub steady: Option<SteadyReport>,
    /// The events.
    pub events: Vec<EventReport>,
}

fn median(sorted: &[u64]) -> u64 {
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

fn stalls(results: &[&FlowResult], at: Instant) -> Vec<u64> {
    let mut s: Vec<u64> = results
        .iter()
        .map(|r| r.stall_after(at).as_millis() as u64)
        .collect();
    s.sort_unstable();
    s
}

/// TCP retransmission timeouts so far in the outside and the inside host.
fn tcp_timeouts(lab: &EcmpLab) -> Result<u64> {
    let mut n = 0;
    for ns in [&lab.ext, &lab.int] {
        let out = ns.exec("nstat", &["-asz", "TcpExtTCPTimeouts"])?;
        n += out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                (w.next()? == "TcpExtTCPTimeouts").then_some(())?;
                w.next()?.parse::<u64>().ok()
            })
            .sum::<u64>();
    }
    Ok(n)
}

/// The MSS of the inside router's BGP connections.
fn bgp_mss(lab: &EcmpLab) -> Result<Vec<u32>> {
    let out = lab.ri.exec(
        "ss",
        &[
            "-Htni",
            "state",
            "established",
            "( sport = :179 or dport = :179 )",
        ],
    )?;
    Ok(out
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("mss:")?.parse().ok())
        .collect())
}

/// BFD session-down events of the instances other than `except`.
fn flaps(before: &[u64], after: &[u64], except: Option<usize>) -> u64 {
    before
        .iter()
        .zip(after)
        .enumerate()
        .filter(|(i, _)| Some(*i) != except)
        .map(|(_, (b, a))| a.saturating_sub(*b))
        .sum()
}

/// The first time bfdd logged a session of instance `i` going down, after `since` (wall
/// clock), from the routers' bfdd logs (`debug bfd peer`, millisecond timestamps).
fn bfd_down_logged(lab: &EcmpLab, i: usize, since: chrono_like::Stamp) -> Option<u64> {
    let peers: Vec<String> = Family::BOTH
        .into_iter()
        .flat_map(|f| {
            [
                crate::topology::link_addr(f, i, true).to_string(),
                crate::topology::link_addr(f, i, false).to_string(),
            ]
        })
        .collect();
    let mut first: Option<u64> = None;
    for r in ["frr-ro", "frr-ri"] {
        let Ok(text) = std::fs::read_to_string(lab.dir.join(r).join("frr.log")) else {
            continue;
        };
        for line in text.lines() {
            let lower = line.to_ascii_lowercase();
            if !(lower.contains("-> down")
                || lower.contains("state-change") && lower.contains("down"))
            {
                continue;
            }
            if !peers.iter().any(|p| line.contains(p.as_str())) {
                continue;
            }
            let Some(t) = chrono_like::parse(line) else {
                continue;
            };
            if let Some(ms) = t.millis_since(since) {
                first = Some(first.map_or(ms, |f: u64| f.min(ms)));
            }
        }
    }
    first
}

/// Millisecond wall-clock stamps as FRR logs them (`2026/11/28 01:16:50.123`), in UTC: the
/// lab's daemons run with `TZ=UTC`, and the lab's own stamps are milliseconds since the epoch.
mod chrono_like {
    /// Milliseconds since 1970-01-01 00:00 UTC.
    #[derive(Clone, Copy, Debug)]
    pub struct Stamp(pub u64);

    impl Stamp {
        /// Now, UTC (the lab starts FRR's daemons with `TZ=UTC`, so their log is in UTC too).
        pub fn now() -> Self {
            let since = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Stamp(since.as_millis() as u64)
        }

        /// `self - earlier`, ms, when not negative.
        pub fn millis_since(self, earlier: Stamp) -> Option<u64> {
            self.0.checked_sub(earlier.0)
        }
    }

    /// The stamp at the start of `line`.
    pub fn parse(line: &str) -> Option<Stamp> {
        let (date, rest) = line.split_once(' ')?;
        let time = rest.split_whitespace().next()?;
        let d: Vec<u64> = date
            .split('/')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let (hms, frac) = time.split_once('.')?;
        let t: Vec<u64> = hms
            .split(':')
            .map(|x| x.parse().ok())
            .collect::<Option<_>>()?;
        let (&[y, mo, day], &[h, mi, s]) = (d.as_slice(), t.as_slice()) else {
            return None;
        };
        let ms: u64 = frac.get(..3)?.parse().ok()?;
        // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
        let (y, mo) = if mo <= 2 {
            (y - 1, mo + 9)
        } else {
            (y, mo - 3)
        };
        let era = y / 400;
        let yoe = y - era * 400;
        let doy = (153 * mo + 2) / 5 + day - 1;
        let days = (era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy).checked_sub(719_468)?;
        Some(Stamp(((days * 24 + h) * 60 + mi) * 60_000 + s * 1000 + ms))
    }
}

/// The 64 paced connections of an event: `flows_each_way` each way, per family.
fn event_flows(lab: &EcmpLab, plan: &Plan, base: u16) -> Result<Vec<Flow>> {
    let mut flows = Vec::new();
    for (k, family) in Family::BOTH.into_iter().enumerate() {
        for i in 0..plan.flows_each_way * 2 {
            flows.push(Flow::start(
                lab,
                FlowSpec {
                    family,
                    inbound: i % 2 == 0,
                    port: base + 1000 * k as u16 + i,
                    bytes: plan.event_bytes,
                    pace: Some(plan.event_pace),
                },
            )?);
        }
    }
    Ok(flows)
}

/// What the event's connections did around `at`.
fn event_report(
    event: &'static str,
    instance: usize,
    results: &[FlowResult],
    at: Instant,
) -> EventReport {
    let all: Vec<&FlowResult> = results.iter().collect();
    let s = stalls(&all, at);
    EventReport {
        event,
        instance: INSTANCES[instance],
        connections_total: results.len(),
        connections_intact: results.iter().filter(|r| r.sha_ok).count(),
        stall_ms_max: s.last().copied().unwrap_or(0),
        stall_ms_median: median(&s),
        stalls_ms: s.clone(),
        gap_before_ms: results
            .iter()
            .map(|r| r.gap_before(at).as_millis() as u64)
            .max()
            .unwrap_or(0),
        routes_moved_ms: 0,
        bfd_detection_ms: None,
        bfd_flaps: 0,
        tcp_timeouts: 0,
        moved: None,
        moved_stall_ms_max: None,
        moved_stall_ms_median: None,
        instances: Vec::new(),
        errors: results.iter().filter_map(|r| r.error.clone()).collect(),
    }
}

/// The add event's pace for connections that run at `pace` in the other events: the share of
/// the load on the busiest core, where instances are pinned to cores in turn, kept to the other
/// events' (A and B alone).
fn add_pace(pace: u64) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    // The busiest core's share of the load: its instances over all of them.
    let busiest = |instances: usize| instances.div_ceil(cores) as f64 / instances as f64;
    let scale = (busiest(PAIR) / busiest(INSTANCES.len())).min(1.0);
    (pace as f64 * scale) as u64
}

/// Whether the FRR run `name` is selected by `--only` (a prefix of its name, or `frr` for all).
pub fn selected(name: &str, only: &str) -> bool {
    name.starts_with(only) || only == "frr"
}

/// The FRR runs whose name (`steady`, `crash`, `drain`, `add`) starts with `only` (all of
/// them for `frr`).
pub fn run_frr(lab: &EcmpLab, pxgw: &Path, plan: &Plan, only: &str) -> Result<FrrReport> {
    lab.remove_static_routes()?;
    let mut instances: Vec<Option<Instance>> = (0..PAIR)
        .map(|i| Instance::start(lab, pxgw, i, true, 1200).map(Some))
        .collect::<Result<_>>()?;
    let cp = ControlPlane::start(lab, plan.bfd, &[2])?;
    let took = wait_converged(lab, &cp, &[0, 1], CONVERGE).context("FRR's first convergence")?;
    println!(
        "scale-out: FRR up, both routers route over A and B, every BFD session up ({took:?} after start)"
    );
    let mut report = FrrReport {
        bfd: plan.bfd,
        steady: None,
        events: Vec::new(),
    };
    if selected("steady", only) {
        let s = steady(lab, &cp, plan)?;
        println!("{}", steady_line(&s));
        report.steady = Some(s);
    }
    if selected("crash", only) {
        let e = crash(lab, &cp, pxgw, plan, &mut instances)?;
        println!("{}", event_line(&e));
        report.events.push(e);
    }
    if selected("drain", only) {
        let e = drain(lab, &cp, pxgw, plan, &mut instances)?;
        println!("{}", event_line(&e));
        report.events.push(e);
    }
    if selected("add", only) {
        let e = add(lab, &cp, pxgw, plan, instances)?;
        println!("{}", event_line(&e));
        report.events.push(e);
    }
    Ok(report)
}

/// Every instance at full load for `plan.steady`: batches of unpaced transfers, both
/// families, both ways; BFD flaps counted.
fn steady(lab: &EcmpLab, cp: &ControlPlane, plan: &Plan) -> Result<SteadyReport> {
    let downs = cp.bfd_downs()?;
    let before: Vec<u64> = lab.slots[..PAIR]
        .iter()
        .map(|s| s.inside_bytes())
        .collect::<Result<_>>()?;
    let start = Instant::now();
    let mut results = Vec::new();
    let mut batch: u16 = 0;
    while start.elapsed() < plan.steady {
        let mut flows = Vec::new();
        // Each batch listens on ports of its own (a closing connection of the last batch may
        // still hold its port), 64 apart, cycling through 80 blocks.
        let first = batch * 2;
        let block = |k: u16| STEADY_PORTS + ((first + k) % STEADY_PORT_BLOCKS) * 64;
        batch = (batch + 1) % STEADY_PORT_BLOCKS;
        for (k, family) in Family::BOTH.into_iter().enumerate() {
            for i in 0..plan.steady_flows * 2 {
                flows.push(Flow::start(
                    lab,
                    FlowSpec {
                        family,
                        inbound: i % 2 == 0,
                        port: block(k as u16) + i,
                        bytes: plan.bytes,
                        pace: None,
                    },
                )?);
            }
        }
        results.extend(flows.into_iter().map(Flow::finish));
    }
    let seconds = start.elapsed().as_secs_f64();
    let carried = lab.slots[..PAIR]
        .iter()
        .zip(&before)
        .map(|(s, b)| Ok(s.inside_bytes()? - b))
        .collect::<Result<Vec<u64>>>()?;
    Ok(SteadyReport {
        seconds,
        connections: results.len(),
        bytes_ok: results.iter().all(|r| r.sha_ok),
        instances_carrying: carried.iter().filter(|&&b| b > 1 << 20).count(),
        instance_mbps: carried
            .iter()
            .map(|&b| (b as f64 * 8e-6 / seconds * 10.0).round() / 10.0)
            .collect(),
        bfd_flaps: flaps(&downs, &cp.bfd_downs()?, None),
        bgp_mss_inside: bgp_mss(lab)?,
        errors: results.iter().filter_map(|r| r.error.clone()).collect(),
    })
}

/// Brings instance `i` back after an event and waits until the routers use A and B again.
fn restore(
    lab: &EcmpLab,
    cp: &ControlPlane,
    pxgw: &Path,
    instances: &mut [Option<Instance>],
    i: usize,
) -> Result<()> {
    instances[i] = Some(Instance::start(lab, pxgw, i, true, 1200)?);
    cp.sessions(i, true)?;
    wait_converged(lab, cp, &[0, 1], CONVERGE)
        .context("the routers did not take the instance back")?;
    Ok(())
}

fn crash(
    lab: &EcmpLab,
    cp: &ControlPlane,
    pxgw: &Path,
    plan: &Plan,
    instances: &mut [Option<Instance>],
) -> Result<EventReport> {
    println!(
        "scale-out: crash: 64 paced connections, instance A killed (SIGKILL) after {:?}; BFD {} ms x {}",
        plan.event_after, plan.bfd.interval_ms, plan.bfd.multiplier
    );
    let flows = event_flows(lab, plan, 24000)?;
    std::thread::sleep(plan.event_after);
    let (downs, timeouts) = (cp.bfd_downs()?, tcp_timeouts(lab)?);
    let stamp = chrono_like::Stamp::now();
    let at = Instant::now();
    let victim = instances[0].take().context("A is not running")?;
    let mut victim = victim;
    victim.kill();
    let moved = wait_routes(lab, &[1], MOVE)?;
    let results: Vec<FlowResult> = flows.into_iter().map(Flow::finish).collect();
    let mut e = event_report("crash", 0, &results, at);
    e.routes_moved_ms = moved.as_millis() as u64;
    e.bfd_detection_ms = bfd_down_logged(lab, 0, stamp);
    e.bfd_flaps = flaps(&downs, &cp.bfd_downs()?, Some(0));
    e.tcp_timeouts = tcp_timeouts(lab)? - timeouts;
    e.instances.push(Exit {
        name: INSTANCES[0],
        exit_code: -9,
        leaked_mbufs: None,
        drops: None,
        caravan_held: None,
    });
    restore(lab, cp, pxgw, instances, 0)?;
    Ok(e)
}

fn drain(
    lab: &EcmpLab,
    cp: &ControlPlane,
    pxgw: &Path,
    plan: &Plan,
    instances: &mut [Option<Instance>],
) -> Result<EventReport> {
    println!(
        "scale-out: drain: 64 paced connections; after {:?} instance A's BGP sessions shut on both routers, routes moved, one delay window, SIGINT",
        plan.event_after
    );
    let flows = event_flows(lab, plan, 26000)?;
    std::thread::sleep(plan.event_after);
    let (downs, timeouts) = (cp.bfd_downs()?, tcp_timeouts(lab)?);
    let at = Instant::now();
    cp.sessions(0, false)?;
    let moved = wait_routes(lab, &[1], MOVE)?;
    std::thread::sleep(plan.delay_window);
    let drained = instances[0].take().context("A is not running")?.stop()?;
    let results: Vec<FlowResult> = flows.into_iter().map(Flow::finish).collect();
    let mut e = event_report("drain", 0, &results, at);
    e.routes_moved_ms = moved.as_millis() as u64;
    e.bfd_flaps = flaps(&downs, &cp.bfd_downs()?, Some(0));
    e.tcp_timeouts = tcp_timeouts(lab)? - timeouts;
    e.instances.push(Exit::from(&drained));
    restore(lab, cp, pxgw, instances, 0)?;
    Ok(e)
}

fn add(
    lab: &EcmpLab,
    cp: &ControlPlane,
    pxgw: &Path,
    plan: &Plan,
    mut instances: Vec<Option<Instance>>,
) -> Result<EventReport> {
    println!(
        "scale-out: add: instance C started, 64 paced connections; after {:?} C's BGP sessions enabled",
        plan.event_after
    );
    instances.push(Some(Instance::start(lab, pxgw, 2, true, 1200)?));
    // The connections run well past the routers' convergence (BGP's connect, OPEN and the
    // first UPDATE take seconds), so that every one is mid-transfer when the routes change.
    //
    // The busiest core carries no more than in the other events: on a machine with fewer cores
    // than instances, C shares A's core (`instance::config`), and the connections slow down in
    // proportion (on 2 cores, to three quarters: A and C's two thirds of the load on one core,
    // against half of it in the other events). At the other events' pace that core fell behind
    // on a slow 2-core machine, its queues overflowed, and the BFD packets lost there took A's
    // sessions down: an overloaded machine, not an event that went wrong.
    let event_pace = add_pace(plan.event_pace);
    let add_plan = Plan {
        event_pace,
        event_bytes: event_pace * (plan.event_after + ADD_CONVERGE).as_secs(),
        ..*plan
    };
    let flows = event_flows(lab, &add_plan, 28000)?;
    std::thread::sleep(plan.event_after);
    let conns = lab.connections()?;
    let paths_before: Vec<_> = conns.iter().map(|c| lab.path_of(c)).collect();
    let (downs, timeouts) = (cp.bfd_downs()?, tcp_timeouts(lab)?);
    let at = Instant::now();
    cp.sessions(2, true)?;
    let moved_after = wait_routes(lab, &[0, 1, 2], CONVERGE)?;
    // C's sessions count from when they are up: BGP may route over C while they still come
    // up, and one that expires before it was ever up is no flap.
    wait_converged(lab, cp, &[0, 1, 2], CONVERGE).context("C's BFD sessions")?;
    let downs_up = cp.bfd_downs()?;
    // A connection moved when either router's hash sends it through another instance now.
    let mut ports = BTreeSet::new();
    for (c, before) in conns.iter().zip(&paths_before) {
        if lab.path_of(c) != *before {
            ports.insert(c.ext_port);
            ports.insert(c.int_port);
        }
    }
    let results: Vec<FlowResult> = flows.into_iter().map(Flow::finish).collect();
    let downs_end = cp.bfd_downs()?;
    let mut e = event_report("add", 2, &results, at);
    e.routes_moved_ms = moved_after.as_millis() as u64;
    // A and B's sessions through the whole event, C's from when they were up.
    e.bfd_flaps = flaps(&downs, &downs_end, Some(2)) + downs_end[2].saturating_sub(downs_up[2]);
    e.tcp_timeouts = tcp_timeouts(lab)? - timeouts;
    let moved: Vec<&FlowResult> = results
        .iter()
        .filter(|r| ports.contains(&r.spec.port))
        .collect();
    let s = stalls(&moved, at);
    e.moved = Some(moved.len());
    e.moved_stall_ms_max = Some(s.last().copied().unwrap_or(0));
    e.moved_stall_ms_median = Some(median(&s));
    for i in instances.into_iter().flatten() {
        e.instances.push(Exit::from(&i.stop()?));
    }
    cp.sessions(2, false)?;
    Ok(e)
}

/// The steady phase's line.
pub fn steady_line(s: &SteadyReport) -> String {
    format!(
        "  steady: {:.0} s at full load, {} connections, bytes {}, instances carrying {} ({:?} Mb/s), BFD flaps {}, inside router's BGP MSS {:?}",
        s.seconds,
        s.connections,
        if s.bytes_ok { "OK" } else { "BAD" },
        s.instances_carrying,
        s.instance_mbps,
        s.bfd_flaps,
        s.bgp_mss_inside
    )
}

/// One event's line.
pub fn event_line(e: &EventReport) -> String {
    let exits: Vec<String> = e
        .instances
        .iter()
        .map(|x| {
            format!(
                "{} exit {} leaked {}",
                x.name,
                x.exit_code,
                x.leaked_mbufs.map_or("-".into(), |n| n.to_string())
            )
        })
        .collect();
    format!(
        "  {}: {}/{} intact, stall max {} ms, median {} ms (gap before {} ms), routes moved after {} ms, BFD detection {} ms, BFD flaps {}, TCP timeouts {}{}; [{}]",
        e.event,
        e.connections_intact,
        e.connections_total,
        e.stall_ms_max,
        e.stall_ms_median,
        e.gap_before_ms,
        e.routes_moved_ms,
        e.bfd_detection_ms.map_or("-".into(), |d| d.to_string()),
        e.bfd_flaps,
        e.tcp_timeouts,
        e.moved.map_or(String::new(), |m| format!(
            ", {m} moved (stall max {} ms, median {} ms)",
            e.moved_stall_ms_max.unwrap_or(0),
            e.moved_stall_ms_median.unwrap_or(0)
        )),
        exits.join("; ")
    )
}

impl FrrReport {
    /// What the lab asserts of the FRR runs; each failure is one line.
    pub fn failures(&self) -> Vec<String> {
        let mut bad = Vec::new();
        if let Some(s) = &self.steady {
            if !s.bytes_ok {
                bad.push(format!("steady: bytes not intact: {:?}", s.errors));
            }
            if s.bfd_flaps != 0 {
                bad.push(format!("steady: {} BFD flaps at full load", s.bfd_flaps));
            }
            if s.instances_carrying != PAIR {
                bad.push(format!(
                    "steady: {} instances carried traffic",
                    s.instances_carrying
                ));
            }
        }
        for e in &self.events {
            let name = e.event;
            if e.connections_intact != e.connections_total {
                bad.push(format!(
                    "{name}: {}/{} connections intact: {:?}",
                    e.connections_intact, e.connections_total, e.errors
                ));
            }
            if e.bfd_flaps != 0 {
                bad.push(format!(
                    "{name}: {} BFD flaps of the other instances",
                    e.bfd_flaps
                ));
            }
            for x in &e.instances {
                let clean = x.exit_code == 0 && x.leaked_mbufs == Some(0);
                let killed = name == "crash" && x.exit_code == -9;
                if !clean && !killed {
                    bad.push(format!(
                        "{name}: pxgw {} exit code {}, leaked mbufs {:?}",
                        x.name, x.exit_code, x.leaked_mbufs
                    ));
                }
                if let Some(n @ 1..) = x.caravan_held {
                    bad.push(format!(
                        "{name}: pxgw {} held {n} BFD datagrams for a caravan",
                        x.name
                    ));
                }
            }
            match name {
                // The drain is planned: no connection may wait for a retransmission timeout.
                "drain" if e.tcp_timeouts != 0 => bad.push(format!(
                    "drain: {} TCP retransmission timeouts",
                    e.tcp_timeouts
                )),
                // The routers' hash gave the new instance some of 64 connections (each
                // connection's two directions hashed on their own: with three next hops,
                // none moving has a chance far below 1e-9).
                "add" if e.moved == Some(0) => {
                    bad.push("add: no connection moved to the new instance".into())
                }
                _ => {}
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &'static str) -> EventReport {
        EventReport {
            event: name,
            instance: "A",
            connections_total: 64,
            connections_intact: 64,
            stall_ms_max: 400,
            stall_ms_median: 40,
            stalls_ms: vec![40; 64],
            gap_before_ms: 60,
            routes_moved_ms: 350,
            bfd_detection_ms: (name == "crash").then_some(300),
            bfd_flaps: 0,
            tcp_timeouts: 0,
            moved: (name == "add").then_some(20),
            moved_stall_ms_max: None,
            moved_stall_ms_median: None,
            instances: vec![Exit {
                name: "A",
                exit_code: if name == "crash" { -9 } else { 0 },
                leaked_mbufs: (name != "crash").then_some(0),
                drops: None,
                caravan_held: (name != "crash").then_some(0),
            }],
            errors: Vec::new(),
        }
    }

    fn good() -> FrrReport {
        FrrReport {
            bfd: BfdTimers::LAB,
            steady: Some(SteadyReport {
                seconds: 30.0,
                connections: 128,
                bytes_ok: true,
                instances_carrying: 2,
                instance_mbps: vec![900.0, 900.0],
                bfd_flaps: 0,
                bgp_mss_inside: vec![8948],
                errors: Vec::new(),
            }),
            events: vec![event("crash"), event("drain"), event("add")],
        }
    }

    /// What a failure line must say, and how to break a good report so that it does.
    type Breakage = (&'static str, fn(&mut FrrReport));

    /// Each check of [`FrrReport::failures`] catches what it is meant to.
    #[test]
    fn every_check_fails_on_what_it_guards() {
        assert_eq!(good().failures(), Vec::<String>::new());
        let broken: [Breakage; 8] = [
            ("drain: pxgw A held 5 BFD datagrams", |r| {
                r.events[1].instances[0].caravan_held = Some(5)
            }),
            ("steady: 1 BFD flaps", |r| {
                r.steady.as_mut().into_iter().for_each(|s| s.bfd_flaps = 1)
            }),
            ("crash: 63/64", |r| r.events[0].connections_intact = 63),
            ("drain: 2 TCP retransmission timeouts", |r| {
                r.events[1].tcp_timeouts = 2
            }),
            ("drain: pxgw A exit code 0, leaked mbufs Some(3)", |r| {
                r.events[1].instances[0].leaked_mbufs = Some(3)
            }),
            ("add: 1 BFD flaps", |r| r.events[2].bfd_flaps = 1),
            ("add: no connection moved", |r| r.events[2].moved = Some(0)),
            ("add: pxgw A exit code 1", |r| {
                r.events[2].instances[0].exit_code = 1
            }),
        ];
        for (what, breaks) in broken {
            let mut r = good();
            breaks(&mut r);
            let failures = r.failures();
            assert!(
                failures.iter().any(|f| f.contains(what)),
                "{what}: {failures:?}"
            );
        }
    }

    #[test]
    fn frr_log_stamps_subtract_within_a_day_and_across_midnight() {
        // 2026-11-28 01:16:50.123 UTC, as the epoch counts it.
        let epoch = chrono_like::parse("2026/11/28 01:16:50.123 BFD: x").unwrap();
        assert_eq!(epoch.0, 1_795_828_610_123);
        let a = chrono_like::parse("2026/11/28 01:16:50.123 BFD: x").unwrap();
        let b = chrono_like::parse("2026/11/28 01:16:51.023 BFD: y").unwrap();
        assert_eq!(b.millis_since(a), Some(900));
        assert_eq!(a.millis_since(b), None);
        let c = chrono_like::parse("2026/12/01 00:00:00.100 BFD: z").unwrap();
        let d = chrono_like::parse("2026/11/30 23:59:59.900 BFD: z").unwrap();
        assert_eq!(c.millis_since(d), Some(200));
    }
}
