//! The gateway bench (`cargo xtask bench gateway`): the whole of pxgw's per-packet work,
//! `pxgw::pipeline::Pipeline<Mbuf>` on real mbufs under a real EAL, against a gateway built from
//! DPDK's libraries, pxio's engines alone, and the floor of moving a packet at all, on the same
//! frames in the same run.
//!
//! - [`frames`]: the scenarios' traffic: the merge bench's inbound TCP trace, outbound
//!   iMTU-sized segments and their ACKs, UDP for caravans, and a mix; the handshakes.
//! - [`nic`]: the emulated ports (a NIC with RSS hash, checksum verdicts, TX offloads and LRO;
//!   `net_af_packet` with none of them).
//! - [`sides`]: the four gateways and the timed run.
//! - [`tally`]: every output checked against the input (no byte lost, duplicated or changed).
//!
//! Each scenario runs every side `reps` times, the sides taking turns (one round: every side
//! once); the fastest run of each is reported, and beside it pxgw's time over the engine's and
//! the DPDK gateway's, paired: the median over rounds of the ratio within a round, which a
//! shared host's disturbances move far less. A side whose outputs fail the tally fails the
//! bench (its row says why).

pub mod frames;
pub mod nic;
pub mod sides;
pub mod tally;

use std::io::{self, Write};
use std::path::Path;

use dpdk::Eal;
use serde::{Deserialize, Serialize};

use self::frames::{Kind, Workload, WorkloadSpec};
use self::nic::{Lro, Pools, Profile};
use self::sides::{run_side, DpdkSide, EngineSide, FloorSide, PxgwSide, Side, SideRun};
use self::tally::Tally;
use crate::engine::paired_ratio;
use crate::BenchError;

/// The sides, in report order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SideKind {
    /// pxgw's pipeline.
    Pxgw,
    /// pxio's merge engine and split alone.
    Engine,
    /// The gateway built from DPDK's libraries.
    Dpdk,
    /// Receive and transmit only.
    Floor,
}

impl SideKind {
    /// Every side.
    pub const ALL: [SideKind; 4] = [
        SideKind::Pxgw,
        SideKind::Engine,
        SideKind::Dpdk,
        SideKind::Floor,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            SideKind::Pxgw => "pxgw",
            SideKind::Engine => "engine",
            SideKind::Dpdk => "dpdk-gateway",
            SideKind::Floor => "floor",
        }
    }
}

/// One row of the bench: a traffic scenario under one port profile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// The traffic.
    pub kind: Kind,
    /// Flows of the main traffic.
    pub flows: u32,
    /// Each flow's rate, Gb/s.
    pub gbps_per_flow: f64,
    /// IPv6.
    pub v6: bool,
    /// The ports.
    pub profile: Profile,
}

impl Scenario {
    /// Whether the DPDK gateway can do this scenario's work: DPDK 22.11's rte_gro and rte_gso
    /// do TCP/IPv4 only (UDP passes through it in either family).
    pub fn dpdk_applies(&self) -> bool {
        !self.v6 || self.kind == Kind::InboundUdp
    }

    /// Whether pxio's engines alone have work here (merging inbound TCP, splitting outbound).
    pub fn engine_applies(&self) -> bool {
        self.kind != Kind::InboundUdp
    }

    fn family(&self) -> &'static str {
        if self.v6 {
            "ipv6"
        } else {
            "ipv4"
        }
    }
}

/// The merge bench's flow counts and rates for inbound TCP.
pub const INBOUND_TCP_FLOWS: [(u32, f64); 4] = [(1, 10.0), (100, 2.0), (800, 0.25), (3200, 0.054)];

/// The bench's scenarios: inbound TCP at each flow count (IPv4) and at 100 flows (IPv6),
/// outbound TCP and inbound UDP at 100 flows in both families, the mix at 100 flows (IPv4);
/// each under the NIC profile and `none`, the ones with inbound TCP also with LRO.
/// With `quick`, 100 flows only.
pub fn scenarios(quick: bool) -> Vec<Scenario> {
    let lro = Profile::Nic {
        lro: Some(Lro::default()),
    };
    let nic = Profile::Nic { lro: None };
    let tcp_profiles = [nic, lro, Profile::None];
    let other_profiles = [nic, Profile::None];
    let mut v = Vec::new();
    let s = |kind, flows, gbps, v6, profile| Scenario {
        kind,
        flows,
        gbps_per_flow: gbps,
        v6,
        profile,
    };
    for (flows, gbps) in INBOUND_TCP_FLOWS {
        if quick && flows != 100 {
            continue;
        }
        for p in tcp_profiles {
            v.push(s(Kind::InboundTcp, flows, gbps, false, p));
        }
    }
    for p in tcp_profiles {
        v.push(s(Kind::InboundTcp, 100, 2.0, true, p));
    }
    for kind in [Kind::OutboundTcp, Kind::InboundUdp] {
        for v6 in [false, true] {
            for p in other_profiles {
                v.push(s(kind, 100, 2.0, v6, p));
            }
        }
    }
    for p in tcp_profiles {
        v.push(s(Kind::Mix, 100, 2.0, false, p));
    }
    v
}

/// Settings of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct GatewayBenchConfig {
    /// Trace seed.
    pub seed: u64,
    /// About this many frames per scenario.
    pub packets: u64,
    /// Runs per side and scenario (the sides taking turns); the fastest is reported.
    pub reps: u32,
    /// Compare every payload byte and check every checksum (not timed).
    pub verify: bool,
    /// The b-network's MTU.
    pub imtu: usize,
    /// The DPDK gateway's flush period, ns of simulated time (the merge bench's 20 µs budget).
    pub dpdk_flush_ns: u64,
    /// Run only these sides (profiling); all when empty.
    pub only: Vec<SideKind>,
    /// TSC frequency.
    pub tsc_hz: u64,
}

impl GatewayBenchConfig {
    /// The defaults, with `eal`'s TSC.
    pub fn new(eal: &Eal) -> Self {
        Self {
            seed: 1,
            packets: 150_000,
            reps: 3,
            verify: true,
            imtu: 9000,
            dpdk_flush_ns: 20_000,
            only: Vec::new(),
            tsc_hz: eal.tsc_hz(),
        }
    }

    /// pxgw's configuration: its defaults (eMTU 1500), the iMTU on the inside port.
    pub fn pxgw_config(&self) -> Result<pxgw::config::Config, BenchError> {
        pxgw::config::Config::parse(&format!(
            "[ports.external]\ndevice = \"net_null0\"\n\
             [ports.internal]\ndevice = \"net_null1\"\nmtu = {}\n",
            self.imtu
        ))
        .map_err(|e| BenchError::Config(format!("pxgw's configuration: {e}")))
    }

    fn runs(&self, side: SideKind) -> bool {
        self.only.is_empty() || self.only.contains(&side)
    }
}

/// One row of the report. `null` where a side does not apply (the DPDK gateway on IPv6 TCP,
/// pxio's engines on UDP) or was not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatewayRow {
    /// `inbound-tcp`, `outbound-tcp`, `inbound-udp` or `mix`.
    pub scenario: String,
    /// `ipv4` or `ipv6`.
    pub family: String,
    /// Flows of the scenario's main traffic.
    pub flows: u32,
    /// `nic` or `none`.
    pub profile: String,
    /// Whether the outside port coalesced with LRO.
    pub lro: bool,
    /// Each flow's rate, Gb/s.
    pub gbps_per_flow: f64,
    /// Frames in (wire frames, both ports).
    pub packets: u64,
    /// pxgw's CPU time per frame in, ns, one core.
    pub pxgw_ns_per_pkt: Option<f64>,
    /// The same in TSC cycles.
    pub pxgw_cycles_per_pkt: Option<f64>,
    /// Frames per second one core handles at that cost, millions.
    pub pxgw_mpps: Option<f64>,
    /// pxio's engines alone, ns per frame in.
    pub engine_ns_per_pkt: Option<f64>,
    /// The same in cycles.
    pub engine_cycles_per_pkt: Option<f64>,
    /// The share of pxgw's time spent outside pxio's engines: `1 - engine / pxgw`.
    pub outside_engine_share: Option<f64>,
    /// pxgw's time over the engine's, paired: the median over rounds of the ratio of the two
    /// sides' runs in the same round.
    pub pxgw_per_engine_paired: Option<f64>,
    /// pxgw's time over the DPDK gateway's, paired the same way.
    pub pxgw_per_dpdk_gateway_paired: Option<f64>,
    /// The gateway built from DPDK's libraries, ns per frame in.
    pub dpdk_gateway_ns_per_pkt: Option<f64>,
    /// The same in cycles.
    pub dpdk_gateway_cycles_per_pkt: Option<f64>,
    /// Receive and transmit only, ns per frame in.
    pub floor_ns_per_pkt: Option<f64>,
    /// The same in cycles.
    pub floor_cycles_per_pkt: Option<f64>,
    /// pxgw's conversion yield: inbound TCP payload in iMTU-bound packets (the merge bench's
    /// definition); for UDP alone, datagram bytes in full caravans.
    #[serde(rename = "yield")]
    pub conversion_yield: Option<f64>,
    /// pxgw's packets out per iMTU of inbound TCP payload (UDP alone: of datagram bytes).
    pub packets_per_imtu: Option<f64>,
    /// pxgw's frames on the wire (a TSO request counted as its pieces) per frame in.
    pub frames_out_per_frame_in: Option<f64>,
    /// pxgw's mean added delay of inbound TCP, µs.
    pub mean_delay_us: Option<f64>,
    /// pxgw's caravan yield, when the scenario has UDP.
    pub udp_yield: Option<f64>,
    /// The engine's yield.
    pub engine_yield: Option<f64>,
    /// The DPDK gateway's yield.
    pub dpdk_gateway_yield: Option<f64>,
    /// The DPDK gateway's packets per iMTU.
    pub dpdk_gateway_packets_per_imtu: Option<f64>,
    /// The DPDK gateway's frames out per frame in.
    pub dpdk_gateway_frames_out_per_frame_in: Option<f64>,
    /// The DPDK gateway's mean added delay of inbound TCP, µs.
    pub dpdk_gateway_mean_delay_us: Option<f64>,
    /// Segments per LRO packet the port delivered (LRO only).
    pub lro_segments_per_packet: Option<f64>,
    /// Drops pxgw counted, by reason.
    pub pxgw_drops: std::collections::BTreeMap<String, u64>,
    /// Frames pxgw sent of its own (F-PMTUD probes, ICMP errors).
    pub pxgw_gateway_frames: Option<u64>,
    /// Whether every side's outputs passed the tally.
    pub ledger_ok: bool,
    /// What failed, `side: fault` each.
    pub ledger_faults: Vec<String>,
    /// Timed sections set aside as descheduled, all sides.
    pub discarded_sections: u64,
    /// The DPDK gateway's flush period, µs.
    pub dpdk_flush_us: f64,
    /// The iMTU.
    pub imtu: usize,
    /// Trace seed.
    pub seed: u64,
    /// Runs per side (fastest reported).
    pub reps: u32,
}

/// The JSON fields every row has (some `null` where a side does not apply).
pub const REQUIRED_FIELDS: [&str; 12] = [
    "scenario",
    "family",
    "flows",
    "profile",
    "pxgw_ns_per_pkt",
    "pxgw_cycles_per_pkt",
    "engine_ns_per_pkt",
    "dpdk_gateway_ns_per_pkt",
    "floor_ns_per_pkt",
    "yield",
    "packets_per_imtu",
    "frames_out_per_frame_in",
];

/// The fastest of `runs` (a run's outcome is the same every time but for the timing; a differing
/// one is reported as a fault).
fn fastest(mut runs: Vec<SideRun>) -> Option<SideRun> {
    if runs.is_empty() {
        return None;
    }
    let faults: Vec<String> = runs
        .iter()
        .flat_map(|r| r.outcome.faults.iter().cloned())
        .collect();
    let mut best = runs.swap_remove(
        runs.iter()
            .enumerate()
            .min_by(|a, b| a.1.ns_per_pkt.total_cmp(&b.1.ns_per_pkt))
            .map_or(0, |(i, _)| i),
    );
    for f in faults {
        if !best.outcome.faults.contains(&f) {
            best.outcome.faults.push(f);
        }
    }
    Some(best)
}

/// Runs `scenarios` (workloads generated once per traffic and shared by its profiles), reporting
/// progress on stderr.
pub fn run_gateway(
    eal: &Eal,
    scenarios: &[Scenario],
    cfg: &GatewayBenchConfig,
) -> Result<Vec<GatewayRow>, BenchError> {
    let pxgw_cfg = cfg.pxgw_config()?;
    let pools = Pools::new(eal, (cfg.imtu + 14 + 128) as u16)?;
    let mut rows = Vec::with_capacity(scenarios.len());
    let mut cached: Option<((Kind, u32, bool), Workload)> = None;
    for sc in scenarios {
        let key = (sc.kind, sc.flows, sc.v6);
        if cached.as_ref().is_none_or(|c| c.0 != key) {
            // The last scenario's workload goes before the next is generated.
            drop(cached.take());
            let w = Workload::generate(WorkloadSpec {
                kind: sc.kind,
                flows: sc.flows,
                gbps_per_flow: sc.gbps_per_flow,
                v6: sc.v6,
                packets: cfg.packets,
                seed: cfg.seed,
                imtu: cfg.imtu,
            })?;
            cached = Some((key, w));
        }
        let w = &cached.as_ref().expect("just generated").1;
        eprintln!(
            "gateway: {} {} {} flows, {}{} ({} frames) ...",
            sc.kind.name(),
            sc.family(),
            sc.flows,
            sc.profile.name(),
            if sc.profile.lro().is_some() {
                "+lro"
            } else {
                ""
            },
            w.len()
        );
        rows.push(run_scenario(eal, sc, w, &pxgw_cfg, &pools, cfg)?);
    }
    Ok(rows)
}

/// Runs every side on one scenario and makes its row.
fn run_scenario(
    eal: &Eal,
    sc: &Scenario,
    w: &Workload,
    pxgw_cfg: &pxgw::config::Config,
    pools: &Pools,
    cfg: &GatewayBenchConfig,
) -> Result<GatewayRow, BenchError> {
    let mut runs: [Vec<SideRun>; 4] = Default::default();
    for _ in 0..cfg.reps.max(1) {
        for (i, kind) in SideKind::ALL.into_iter().enumerate() {
            let applies = match kind {
                SideKind::Engine => sc.engine_applies(),
                SideKind::Dpdk => sc.dpdk_applies(),
                _ => true,
            };
            if !applies || !cfg.runs(kind) {
                continue;
            }
            let profile = sc.profile;
            // The floor moves frames as they came. pxio's merger alone passes a coalesced
            // (LRO) packet above the iMTU as it came (pxgw cuts it first): counted as if cut,
            // as the merge bench counts rte_gro's outputs.
            let enforce = match kind {
                SideKind::Floor => false,
                SideKind::Engine => profile.lro().is_none(),
                _ => true,
            };
            let tally = Tally::new(w, kind.name(), enforce, cfg.verify);
            let run = run_side(
                || -> Result<Box<dyn Side>, BenchError> {
                    Ok(match kind {
                        SideKind::Pxgw => Box::new(PxgwSide::new(pxgw_cfg, pools, profile)?),
                        SideKind::Engine => {
                            Box::new(EngineSide::new(pxgw_cfg, pools, profile, cfg.seed)?)
                        }
                        SideKind::Dpdk => {
                            Box::new(DpdkSide::new(eal, w, pools, profile, cfg.dpdk_flush_ns)?)
                        }
                        SideKind::Floor => Box::new(FloorSide),
                    })
                },
                w,
                profile,
                pools,
                tally,
                cfg.tsc_hz,
            )?;
            runs[i].push(run);
        }
    }
    let times = |i: usize| runs[i].iter().map(|r| r.ns_per_pkt).collect::<Vec<_>>();
    let (pxgw_per_engine, pxgw_per_dpdk) = (
        paired_ratio(times(0), times(1)),
        paired_ratio(times(0), times(2)),
    );
    let [pxgw, engine, dpdk, floor] = runs.map(fastest);
    let n = w.len() as u64;
    let per_in = |r: &SideRun| r.outcome.wire_frames as f64 / n.max(1) as f64;
    let tcp_yield = |r: &SideRun| r.outcome.tcp.as_ref().map(|o| o.conversion_yield);
    let yield_of = |r: &SideRun| {
        if sc.kind.has_trace() {
            tcp_yield(r)
        } else {
            r.outcome.udp_yield
        }
    };
    let ppi_of = |r: &SideRun| {
        if sc.kind.has_trace() {
            r.outcome.tcp.as_ref().map(|o| o.packets_per_imtu)
        } else {
            r.outcome.udp_packets_per_imtu
        }
    };
    let mut faults = Vec::new();
    let mut discarded = 0;
    for (kind, r) in SideKind::ALL.iter().zip([&pxgw, &engine, &dpdk, &floor]) {
        if let Some(r) = r {
            discarded += r.discarded_sections;
            for f in &r.outcome.faults {
                faults.push(format!("{}: {f}", kind.name()));
            }
        }
    }
    let ns = |r: &Option<SideRun>| r.as_ref().map(|r| r.ns_per_pkt);
    let cycles = |r: &Option<SideRun>| r.as_ref().map(|r| r.cycles_per_pkt);
    let lro = pxgw
        .as_ref()
        .or(floor.as_ref())
        .map(|r| r.lro)
        .unwrap_or((0, 0));
    Ok(GatewayRow {
        scenario: sc.kind.name().to_owned(),
        family: sc.family().to_owned(),
        flows: sc.flows,
        profile: sc.profile.name().to_owned(),
        lro: sc.profile.lro().is_some(),
        gbps_per_flow: sc.gbps_per_flow,
        packets: n,
        pxgw_ns_per_pkt: ns(&pxgw),
        pxgw_cycles_per_pkt: cycles(&pxgw),
        pxgw_mpps: ns(&pxgw).map(|ns| 1e3 / ns),
        engine_ns_per_pkt: ns(&engine),
        engine_cycles_per_pkt: cycles(&engine),
        outside_engine_share: ns(&pxgw).zip(ns(&engine)).map(|(p, e)| 1.0 - e / p),
        pxgw_per_engine_paired: pxgw_per_engine,
        pxgw_per_dpdk_gateway_paired: pxgw_per_dpdk,
        dpdk_gateway_ns_per_pkt: ns(&dpdk),
        dpdk_gateway_cycles_per_pkt: cycles(&dpdk),
        floor_ns_per_pkt: ns(&floor),
        floor_cycles_per_pkt: cycles(&floor),
        conversion_yield: pxgw.as_ref().and_then(yield_of),
        packets_per_imtu: pxgw.as_ref().and_then(ppi_of),
        frames_out_per_frame_in: pxgw.as_ref().map(per_in),
        mean_delay_us: pxgw
            .as_ref()
            .and_then(|r| r.outcome.tcp.as_ref())
            .map(|o| o.mean_delay_us),
        udp_yield: pxgw.as_ref().and_then(|r| r.outcome.udp_yield),
        engine_yield: engine.as_ref().and_then(tcp_yield),
        dpdk_gateway_yield: dpdk.as_ref().and_then(yield_of),
        dpdk_gateway_packets_per_imtu: dpdk.as_ref().and_then(ppi_of),
        dpdk_gateway_frames_out_per_frame_in: dpdk.as_ref().map(per_in),
        dpdk_gateway_mean_delay_us: dpdk
            .as_ref()
            .and_then(|r| r.outcome.tcp.as_ref())
            .map(|o| o.mean_delay_us),
        lro_segments_per_packet: (lro.0 > 0).then(|| lro.1 as f64 / lro.0 as f64),
        pxgw_drops: pxgw.as_ref().map(|r| r.drops.clone()).unwrap_or_default(),
        pxgw_gateway_frames: pxgw.as_ref().map(|r| r.outcome.gateway_frames),
        ledger_ok: faults.is_empty(),
        ledger_faults: faults,
        discarded_sections: discarded,
        dpdk_flush_us: cfg.dpdk_flush_ns as f64 / 1e3,
        imtu: cfg.imtu,
        seed: cfg.seed,
        reps: cfg.reps.max(1),
    })
}

/// Prints the table.
pub fn print_table(out: &mut impl Write, rows: &[GatewayRow]) -> io::Result<()> {
    let f1 = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.1}"));
    let f2 = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}"));
    let pct = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{:.0}%", v * 100.0));
    writeln!(
        out,
        "ns and TSC cycles per frame in, one core; Mpps = 1000 / ns; outside = pxgw's time outside \
         pxio's engines; paired = the median over rounds of pxgw's time over the engine's and \
         the DPDK gateway's in the same round; yield, packets per iMTU and frames out per frame \
         in are pxgw's (DPDK gateway's after the slash)"
    )?;
    writeln!(
        out,
        "{:<12} {:<4} {:>5} {:<7} | {:>7} {:>7} {:>6} | {:>7} {:>7} | {:>7} {:>6} | {:>11} | {:>11} {:>11} {:>11} | ledger",
        "scenario", "fam", "flows", "profile", "pxgw ns", "cycles", "Mpps", "engine", "outside", "dpdk gw", "floor", "paired e/d", "yield", "pkts/iMTU", "out/in"
    )?;
    for r in rows {
        let profile = if r.lro {
            format!("{}+lro", r.profile)
        } else {
            r.profile.clone()
        };
        let pair = |a: Option<f64>, b: Option<f64>, f: &dyn Fn(Option<f64>) -> String| {
            if b.is_some() {
                format!("{}/{}", f(a), f(b))
            } else {
                f(a)
            }
        };
        writeln!(
            out,
            "{:<12} {:<4} {:>5} {:<7} | {:>7} {:>7} {:>6} | {:>7} {:>7} | {:>7} {:>6} | {:>11} | {:>11} {:>11} {:>11} | {}",
            r.scenario,
            if r.family == "ipv6" { "v6" } else { "v4" },
            r.flows,
            profile,
            f1(r.pxgw_ns_per_pkt),
            f1(r.pxgw_cycles_per_pkt),
            f2(r.pxgw_mpps),
            f1(r.engine_ns_per_pkt),
            pct(r.outside_engine_share),
            f1(r.dpdk_gateway_ns_per_pkt),
            f1(r.floor_ns_per_pkt),
            format!(
                "{}/{}",
                f2(r.pxgw_per_engine_paired),
                f2(r.pxgw_per_dpdk_gateway_paired)
            ),
            pair(r.conversion_yield, r.dpdk_gateway_yield, &pct),
            pair(r.packets_per_imtu, r.dpdk_gateway_packets_per_imtu, &f2),
            pair(r.frames_out_per_frame_in, r.dpdk_gateway_frames_out_per_frame_in, &f2),
            if r.ledger_ok { "ok".to_owned() } else { r.ledger_faults.join("; ") },
        )?;
        if !r.pxgw_drops.is_empty() {
            writeln!(out, "{:>32} pxgw drops: {:?}", "", r.pxgw_drops)?;
        }
    }
    Ok(())
}

/// Writes the rows as a JSON array.
pub fn write_json(path: &Path, rows: &[GatewayRow]) -> Result<(), BenchError> {
    let io = |source| BenchError::Io {
        path: path.to_owned(),
        source,
    };
    let text = serde_json::to_string_pretty(rows).map_err(|e| io(io::Error::other(e)))?;
    std::fs::write(path, text + "\n").map_err(io)
}

/// Checks a written report: every row has every [`REQUIRED_FIELDS`] key, with a number wherever
/// the side applies, and every row's ledger passed. Returns what is wrong.
pub fn check_json(text: &str, scenarios: &[Scenario]) -> Vec<String> {
    let mut wrong = Vec::new();
    let rows: Vec<serde_json::Value> = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return vec![format!("not a JSON array of rows: {e}")],
    };
    if rows.len() != scenarios.len() {
        wrong.push(format!(
            "{} rows for {} scenarios",
            rows.len(),
            scenarios.len()
        ));
    }
    for (i, (row, sc)) in rows.iter().zip(scenarios).enumerate() {
        for field in REQUIRED_FIELDS {
            let Some(v) = row.get(field) else {
                wrong.push(format!("row {i}: no field {field}"));
                continue;
            };
            let needed = match field {
                "engine_ns_per_pkt" => sc.engine_applies(),
                "dpdk_gateway_ns_per_pkt" => sc.dpdk_applies(),
                "yield" | "packets_per_imtu" => sc.kind != Kind::OutboundTcp,
                _ => true,
            };
            if needed && v.is_null() {
                wrong.push(format!(
                    "row {i} ({} {}): {field} is null",
                    sc.kind.name(),
                    sc.family()
                ));
            }
        }
        if row.get("ledger_ok") != Some(&serde_json::Value::Bool(true)) {
            wrong.push(format!(
                "row {i}: ledger failed: {}",
                row.get("ledger_faults").unwrap_or(&serde_json::Value::Null)
            ));
        }
    }
    wrong
}
