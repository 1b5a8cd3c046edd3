//! The merge benchmark's report: one [`MergeRow`] per scenario, printed as a table and written
//! as JSON (`cargo xtask bench merge --json FILE`).
//!
//! The JSON is an array of [`MergeRow`] objects, one per scenario, schedule and delay budget.
//! A row is keyed by `flows, gbps_per_flow, delay_budget_us, schedule` (and `ipv6`, `imtu`,
//! `seed`). `delay_budget_us` is the budget both engines were given: rte_gro's flush period and
//! pxio's longest delay window, so that neither holds a segment longer (`max_delay_us` and
//! `rte_gro_max_delay_us` show it held). The core fields: `pxio_ns_per_pkt,
//! rte_gro_ns_per_pkt, speedup, yield, mean_delay_us, p99_delay_us, flow_entry_bytes`,
//! `packets_per_imtu`, `cycles_per_pkt`, and two measured flags:
//! `rte_gro_parse_in_timed_region` (every input packet parsed inside rte_gro's timed region:
//! `rte_gro_parsed_packets` equals `input_packets`) and `rte_gro_tx_prepare_in_timed_region`
//! (every merged output readied there for the NIC's checksum offload and TSO, as pxio's emit
//! does for its own: `rte_gro_tx_prepared_packets`, counted in the timed region, equals
//! `rte_gro_merged_outputs`, counted from the outputs outside it). The benchmark refuses to
//! report a run where either is false.
//!
//! `rte_gro_min_parse_*` and `speedup_vs_gro_min_parse` are rte_gro after a minimal parse
//! instead of `rte_net_get_ptype`: the packet type and header lengths filled from a check of
//! the fixed Ethernet/IPv4/TCP layout, what an application does when its NIC reports the
//! packet type (`gro_baseline::GroParse::Minimal`); same outputs, checked.
//!
//! Which pxio: `pxio_ns_per_pkt` (and `speedup`) is pxio verifying every checksum in software;
//! `pxio_offload_ns_per_pkt`, `speedup_nic_csum` and `cycles_per_pkt` are pxio with
//! everything a NIC gives (checksum verdict and RSS hash), the headline;
//! `pxio_sw_hash_ns_per_pkt` is pxio with the verdict but no RSS hash. `yield`,
//! `packets_per_imtu`, the delays and `flow_entry_bytes` are the headline pxio's. Extra fields
//! follow: rte_gro's own yield, delays and table bytes, how the scenario was sized, and `ipv6`
//! (IPv6 frames; rte_gro, DPDK 22.11, passes those through unmerged).
//!
//! `rte_gro_gso_*` and `speedup_vs_gro_gso` are a second peer: rte_gro followed by rte_gso at
//! the iMTU, DPDK's own way to deliver what pxio delivers (packets that fit the iMTU; rte_gro
//! alone merges up to 64 KB).
//!
//! Every `speedup*` divides each engine's fastest run; the engines take turns, round by round,
//! and on a shared host two fastest runs may come from different rounds, one of them lucky.
//! `speedup_nic_csum_paired`, `speedup_vs_gro_min_parse_paired` and
//! `speedup_vs_gro_gso_paired` are the median over rounds of the same ratio within one round,
//! where what disturbs the host weighs on both engines: the figures to judge on a shared host.
//! The table shows them in parentheses.

use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::BenchError;

/// One scenario's comparison of pxio and rte_gro on the same trace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MergeRow {
    /// Flows `F`.
    pub flows: u32,
    /// Rate of each flow `R`, Gb/s.
    pub gbps_per_flow: f64,
    /// The delay budget both engines were given, µs of simulated time: rte_gro's flush period
    /// and pxio's longest delay window (`DelayConfig::max_window_ns`).
    pub delay_budget_us: f64,
    /// pxio's CPU time per input packet, ns, one core.
    pub pxio_ns_per_pkt: Option<f64>,
    /// rte_gro's CPU time per input packet, ns, one core.
    pub rte_gro_ns_per_pkt: f64,
    /// pxio's CPU time per input packet when the NIC verified and fills checksums
    /// (`MergeConfig::checksum_offload`, as on the paper's ConnectX NICs), ns.
    pub pxio_offload_ns_per_pkt: Option<f64>,
    /// pxio's CPU time per input packet with the NIC's checksum verdict but no RSS hash (the
    /// flow hash in software), ns.
    pub pxio_sw_hash_ns_per_pkt: Option<f64>,
    /// `rte_gro_ns_per_pkt / pxio_ns_per_pkt`: how many times faster pxio is, verifying every
    /// checksum in software.
    pub speedup: Option<f64>,
    /// `rte_gro_ns_per_pkt / pxio_offload_ns_per_pkt`: how many times faster pxio is with what a
    /// NIC gives (the headline figure).
    pub speedup_nic_csum: Option<f64>,
    /// The median over rounds of `rte_gro`'s time over the headline pxio's in the same round
    /// (the engines take turns; [`speedup_nic_csum`](Self::speedup_nic_csum) divides each one's
    /// fastest run, which may come from different rounds): the ratio to judge on a shared host.
    #[serde(default)]
    pub speedup_nic_csum_paired: Option<f64>,
    /// pxio's (NIC verdict and hash) TSC cycles per input packet.
    pub cycles_per_pkt: Option<f64>,
    /// pxio's (software checksums) TSC cycles per input packet.
    pub pxio_sw_csum_cycles_per_pkt: Option<f64>,
    /// rte_gro's TSC cycles per input packet, its header parse included.
    pub rte_gro_cycles_per_pkt: f64,
    /// pxio's conversion yield: share of input bytes leaving in iMTU-bound packets, 0..=1.
    #[serde(rename = "yield")]
    pub conversion_yield: Option<f64>,
    /// pxio's output packets per iMTU of input payload (1.0 is ideal).
    pub packets_per_imtu: Option<f64>,
    /// rte_gro's, each output counted as the packets it would be cut into at the iMTU.
    pub rte_gro_packets_per_imtu: f64,
    /// pxio's yield when it verifies checksums in software (the same traffic; it should match).
    pub pxio_sw_csum_yield: Option<f64>,
    /// pxio's mean added delay, µs.
    pub mean_delay_us: Option<f64>,
    /// pxio's 99th-percentile added delay, µs.
    pub p99_delay_us: Option<f64>,
    /// pxio's largest added delay, µs (at most the budget).
    #[serde(default)]
    pub max_delay_us: Option<f64>,
    /// pxio's per-flow state, bytes.
    pub flow_entry_bytes: Option<u64>,
    /// rte_gro's conversion yield, its output counted as if cut at the iMTU, 0..=1.
    pub rte_gro_yield: f64,
    /// rte_gro's mean added delay, µs.
    pub rte_gro_mean_delay_us: f64,
    /// rte_gro's 99th-percentile added delay, µs.
    pub rte_gro_p99_delay_us: f64,
    /// rte_gro's largest added delay, µs (at most the budget).
    #[serde(default)]
    pub rte_gro_max_delay_us: Option<f64>,
    /// Whether rte_gro's timed region held the header parse it needs (`rte_net_get_ptype`
    /// and the header lengths) for every input packet, as counted there
    /// (`rte_gro_parsed_packets` = `input_packets`).
    pub rte_gro_parse_in_timed_region: bool,
    /// Whether rte_gro's timed region held readying each merged packet for the NIC's
    /// checksum offload and TSO (`rte_net_intel_cksum_prepare`: rte_gro leaves the checksums
    /// stale), as pxio's holds its emit's header rewrite, as counted there
    /// (`rte_gro_tx_prepared_packets` = `rte_gro_merged_outputs`).
    pub rte_gro_tx_prepare_in_timed_region: bool,
    /// Packets parsed inside rte_gro's timed region (every input packet).
    pub rte_gro_parsed_packets: u64,
    /// Packets readied for the NIC inside rte_gro's timed region.
    #[serde(default)]
    pub rte_gro_tx_prepared_packets: u64,
    /// rte_gro's merged (rewritten) outputs, counted outside its timed region, each carrying
    /// its TX checksum request.
    #[serde(default)]
    pub rte_gro_merged_outputs: u64,
    /// The parse's share of `rte_gro_ns_per_pkt`, ns.
    pub rte_gro_parse_ns_per_pkt: f64,
    /// Bytes rte_gro's table reserves per flow it is sized for.
    pub rte_gro_flow_entry_bytes: u64,
    /// Mean input segments per rte_gro output packet.
    pub rte_gro_segments_per_output: f64,
    /// Mean input segments per pxio output packet.
    pub pxio_segments_per_output: Option<f64>,
    /// Input packets in the trace.
    pub input_packets: u64,
    /// Simulated duration of the trace, ms.
    pub simulated_ms: f64,
    /// The iMTU, bytes.
    pub imtu: usize,
    /// The trace generator's seed.
    pub seed: u64,
    /// How flows sent: `poisson-tso` (the default model), `paced` or `round-robin`.
    pub schedule: String,
    /// IPv6 frames (1428 B segments) instead of IPv4 (1448 B). rte_gro (DPDK 22.11) passes
    /// IPv6 through unmerged.
    #[serde(default)]
    pub ipv6: bool,
    /// Mean packets (merged or not) rte_gro held when it flushed: how full its linearly
    /// scanned table was.
    pub rte_gro_held_at_flush: Option<f64>,
    /// rte_gro after the minimal parse (packet type and header lengths from a check of the
    /// fixed Ethernet/IPv4/TCP layout, as with a NIC that reports the packet type) instead of
    /// `rte_net_get_ptype`; CPU time per input packet, ns, the parse included.
    #[serde(default)]
    pub rte_gro_min_parse_ns_per_pkt: Option<f64>,
    /// The minimal parse's share of `rte_gro_min_parse_ns_per_pkt`, ns.
    #[serde(default)]
    pub rte_gro_min_parse_share_ns_per_pkt: Option<f64>,
    /// rte_gro with the minimal parse, TSC cycles per input packet.
    #[serde(default)]
    pub rte_gro_min_parse_cycles_per_pkt: Option<f64>,
    /// `rte_gro_min_parse_ns_per_pkt / pxio_offload_ns_per_pkt`.
    #[serde(default)]
    pub speedup_vs_gro_min_parse: Option<f64>,
    /// [`speedup_vs_gro_min_parse`](Self::speedup_vs_gro_min_parse) as the median over rounds
    /// of the ratio within one round.
    #[serde(default)]
    pub speedup_vs_gro_min_parse_paired: Option<f64>,
    /// Whether that run's timed region held the minimal parse of every input packet, as
    /// counted there.
    #[serde(default)]
    pub rte_gro_min_parse_in_timed_region: Option<bool>,
    /// The peer that delivers what pxio delivers, packets that fit the iMTU: rte_gro, then
    /// rte_gso at the iMTU on every flushed packet longer than it; CPU time per input packet, ns.
    #[serde(default)]
    pub rte_gro_gso_ns_per_pkt: Option<f64>,
    /// rte_gso's share of `rte_gro_gso_ns_per_pkt`, ns.
    #[serde(default)]
    pub rte_gro_gso_cut_ns_per_pkt: Option<f64>,
    /// rte_gro + rte_gso's TSC cycles per input packet.
    #[serde(default)]
    pub rte_gro_gso_cycles_per_pkt: Option<f64>,
    /// `rte_gro_gso_ns_per_pkt / pxio_offload_ns_per_pkt`.
    #[serde(default)]
    pub speedup_vs_gro_gso: Option<f64>,
    /// [`speedup_vs_gro_gso`](Self::speedup_vs_gro_gso) as the median over rounds of the ratio
    /// within one round.
    #[serde(default)]
    pub speedup_vs_gro_gso_paired: Option<f64>,
    /// rte_gro + rte_gso's conversion yield (its outputs fit the iMTU), 0..=1.
    #[serde(default)]
    pub rte_gro_gso_yield: Option<f64>,
    /// rte_gro + rte_gso's output packets per iMTU of input payload.
    #[serde(default)]
    pub rte_gro_gso_packets_per_imtu: Option<f64>,
    /// pxio with the NIC's checksum verdict and RSS hash but no TSO: it cuts every merged
    /// packet at the iMTU itself (a port without TSO); CPU time per input packet, ns.
    #[serde(default)]
    pub pxio_sw_cut_ns_per_pkt: Option<f64>,
    /// `rte_gro_gso_ns_per_pkt / pxio_sw_cut_ns_per_pkt`: both cut in software.
    #[serde(default)]
    pub speedup_sw_cut_vs_gro_gso: Option<f64>,
    /// That pxio's conversion yield, 0..=1.
    #[serde(default)]
    pub pxio_sw_cut_yield: Option<f64>,
    /// That pxio's output packets per iMTU of input payload.
    #[serde(default)]
    pub pxio_sw_cut_packets_per_imtu: Option<f64>,
}

/// A "win" below this yield on both sides compares two engines that merge nothing.
pub const NO_MERGE_YIELD: f64 = 0.05;

impl MergeRow {
    /// Whether neither engine merged (both yields under [`NO_MERGE_YIELD`]): a speedup there
    /// says only which engine gives up faster.
    pub fn neither_merges(&self) -> bool {
        self.conversion_yield.unwrap_or(0.0) < NO_MERGE_YIELD && self.rte_gro_yield < NO_MERGE_YIELD
    }
}

/// What a scenario cost to run (printed, not in the JSON).
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioCost {
    /// The schedule.
    pub schedule: String,
    /// Flows.
    pub flows: u32,
    /// Rate per flow, Gb/s.
    pub gbps_per_flow: f64,
    /// The delay budget, µs.
    pub delay_budget_us: f64,
    /// Seconds to generate the trace (one trace serves every budget).
    pub generate_s: f64,
    /// Heap bytes of the trace.
    pub trace_bytes: usize,
    /// Wall seconds of the rte_gro run (filling mbufs and recording included).
    pub rte_gro_wall_s: f64,
    /// Wall seconds of the pxio run.
    pub pxio_wall_s: Option<f64>,
    /// rte_gro's timed sections set aside as descheduled, in the reported run.
    pub rte_gro_discarded: u64,
    /// pxio's, likewise.
    pub pxio_discarded: Option<u64>,
    /// Peak resident memory of the process during the scenario, bytes (Linux `VmHWM`, reset
    /// before the scenario when the kernel allows it).
    pub peak_rss_bytes: Option<u64>,
}

/// Prints the comparison table: per scenario, schedule and delay budget, pxio with what a NIC
/// gives ("NIC": checksum verdict, RSS hash, TSO), pxio cutting at the iMTU itself ("sw cut"),
/// pxio verifying checksums in software ("sw csum"), pxio hashing in software ("sw hash"),
/// rte_gro with its full header parse, the ratio, rte_gro with the minimal parse and its ratio,
/// rte_gro followed by rte_gso at the iMTU and its ratios to pxio and to pxio's own software
/// cut, and each engine's yield, packets per iMTU and added delay (mean, p99, max). A ratio
/// where neither engine merges is starred and flagged in the last column.
pub fn print_table(out: &mut impl Write, rows: &[MergeRow]) -> io::Result<()> {
    let headers = [
        "schedule",
        "IP",
        "flows",
        "Gb/s/flow",
        "budget µs",
        "in pkts",
        "pxio NIC ns",
        "pxio sw cut",
        "pxio sw csum",
        "pxio sw hash",
        "rte_gro ns (parse)",
        "gro/pxio (paired)",
        "gro min ns (parse)",
        "gro min/pxio (paired)",
        "gro+gso ns (gso)",
        "(gro+gso)/pxio (paired)",
        "(gro+gso)/sw cut",
        "cyc/pkt pxio/gro",
        "yield pxio/gro",
        "pkts/iMTU pxio/gro",
        "delay µs pxio mean/p99/max",
        "delay µs gro mean/p99/max",
        "note",
    ];
    let body: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let flag = r.neither_merges();
            vec![
                r.schedule.clone(),
                if r.ipv6 { "v6" } else { "v4" }.into(),
                r.flows.to_string(),
                format!("{}", r.gbps_per_flow),
                format!("{}", r.delay_budget_us),
                r.input_packets.to_string(),
                opt(r.pxio_offload_ns_per_pkt, |v| format!("{v:.1}")),
                opt(r.pxio_sw_cut_ns_per_pkt, |v| format!("{v:.1}")),
                opt(r.pxio_ns_per_pkt, |v| format!("{v:.1}")),
                opt(r.pxio_sw_hash_ns_per_pkt, |v| format!("{v:.1}")),
                format!(
                    "{:.1} ({:.1})",
                    r.rte_gro_ns_per_pkt, r.rte_gro_parse_ns_per_pkt
                ),
                speedup(r.speedup_nic_csum, r.speedup_nic_csum_paired, flag),
                match (
                    r.rte_gro_min_parse_ns_per_pkt,
                    r.rte_gro_min_parse_share_ns_per_pkt,
                ) {
                    (Some(t), Some(p)) => format!("{t:.1} ({p:.1})"),
                    _ => "n/a".into(),
                },
                speedup(
                    r.speedup_vs_gro_min_parse,
                    r.speedup_vs_gro_min_parse_paired,
                    flag,
                ),
                match (r.rte_gro_gso_ns_per_pkt, r.rte_gro_gso_cut_ns_per_pkt) {
                    (Some(t), Some(c)) => format!("{t:.1} ({c:.1})"),
                    _ => "n/a".into(),
                },
                speedup(r.speedup_vs_gro_gso, r.speedup_vs_gro_gso_paired, flag),
                opt(r.speedup_sw_cut_vs_gro_gso, |v| {
                    format!("{v:.2}x{}", if flag { "*" } else { "" })
                }),
                format!(
                    "{} / {:.0}",
                    opt(r.cycles_per_pkt, |v| format!("{v:.0}")),
                    r.rte_gro_cycles_per_pkt
                ),
                format!(
                    "{} / {}",
                    opt(r.conversion_yield, percent),
                    percent(r.rte_gro_yield)
                ),
                format!(
                    "{} / {:.2}",
                    opt(r.packets_per_imtu, |v| format!("{v:.2}")),
                    r.rte_gro_packets_per_imtu
                ),
                match (r.mean_delay_us, r.p99_delay_us) {
                    (Some(m), Some(p)) => {
                        format!("{m:.1} / {p:.1} / {}", opt(r.max_delay_us, one_digit))
                    }
                    _ => "n/a".into(),
                },
                format!(
                    "{:.1} / {:.1} / {}",
                    r.rte_gro_mean_delay_us,
                    r.rte_gro_p99_delay_us,
                    opt(r.rte_gro_max_delay_us, one_digit)
                ),
                match (flag, r.ipv6) {
                    (true, _) => "* NEITHER MERGES".into(),
                    (false, true) => "rte_gro 22.11: no TCP/IPv6 GRO".into(),
                    (false, false) => String::new(),
                },
            ]
        })
        .collect();
    write_table(out, &headers, &body)
}

/// Prints what each scenario cost to run.
pub fn print_costs(out: &mut impl Write, costs: &[ScenarioCost]) -> io::Result<()> {
    let headers = [
        "schedule",
        "flows",
        "Gb/s/flow",
        "budget µs",
        "generate s",
        "trace MB",
        "rte_gro run s",
        "pxio runs s",
        "descheduled sections gro/pxio",
        "peak RSS MB",
    ];
    let mb = |b: u64| format!("{:.1}", b as f64 / (1 << 20) as f64);
    let body: Vec<Vec<String>> = costs
        .iter()
        .map(|c| {
            vec![
                c.schedule.clone(),
                c.flows.to_string(),
                format!("{}", c.gbps_per_flow),
                format!("{}", c.delay_budget_us),
                format!("{:.2}", c.generate_s),
                mb(c.trace_bytes as u64),
                format!("{:.2}", c.rte_gro_wall_s),
                opt(c.pxio_wall_s, |v| format!("{v:.2}")),
                format!(
                    "{} / {}",
                    c.rte_gro_discarded,
                    opt(c.pxio_discarded, |v| v.to_string())
                ),
                opt(c.peak_rss_bytes, mb),
            ]
        })
        .collect();
    write_table(out, &headers, &body)
}

/// Writes `rows` as a JSON array to `path`.
pub fn write_json(path: &Path, rows: &[MergeRow]) -> Result<(), BenchError> {
    let io_err = |source| BenchError::Io {
        path: path.to_owned(),
        source,
    };
    let mut text = serde_json::to_string_pretty(rows).map_err(|e| io_err(e.into()))?;
    text.push('\n');
    std::fs::write(path, text).map_err(io_err)
}

fn opt<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "n/a".into(), f)
}

/// A speedup cell: the fastest runs' ratio, the paired one in parentheses, `*` where neither
/// engine merges.
fn speedup(fastest: Option<f64>, paired: Option<f64>, neither_merges: bool) -> String {
    let flag = if neither_merges { "*" } else { "" };
    format!(
        "{}{flag} ({})",
        opt(fastest, |v| format!("{v:.2}x")),
        opt(paired, |v| format!("{v:.2}x"))
    )
}

fn one_digit(v: f64) -> String {
    format!("{v:.1}")
}

fn percent(v: f64) -> String {
    format!("{:.1} %", v * 100.0)
}

/// Right-aligned columns, as wide as their widest cell, two spaces apart.
fn write_table(out: &mut impl Write, headers: &[&str], body: &[Vec<String>]) -> io::Result<()> {
    let width = |i: usize| {
        body.iter()
            .map(|r| r[i].chars().count())
            .chain(std::iter::once(headers[i].chars().count()))
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..headers.len()).map(width).collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        cells
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    writeln!(out, "{}", line(&mut headers.iter().copied()))?;
    writeln!(
        out,
        "{}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ")
    )?;
    for row in body {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pxio: Option<f64>) -> MergeRow {
        MergeRow {
            flows: 64,
            gbps_per_flow: 2.0,
            pxio_ns_per_pkt: pxio,
            pxio_offload_ns_per_pkt: pxio,
            pxio_sw_hash_ns_per_pkt: pxio,
            rte_gro_ns_per_pkt: 240.0,
            speedup: pxio.map(|p| 240.0 / p),
            speedup_nic_csum: pxio.map(|p| 240.0 / p),
            speedup_nic_csum_paired: pxio.map(|p| 250.0 / p),
            cycles_per_pkt: pxio.map(|p| p * 2.0),
            pxio_sw_csum_cycles_per_pkt: pxio.map(|p| p * 2.0),
            rte_gro_cycles_per_pkt: 480.0,
            conversion_yield: pxio.map(|_| 0.9),
            packets_per_imtu: pxio.map(|_| 1.1),
            rte_gro_packets_per_imtu: 1.2,
            pxio_sw_csum_yield: None,
            mean_delay_us: None,
            p99_delay_us: None,
            flow_entry_bytes: None,
            rte_gro_yield: 0.5,
            rte_gro_mean_delay_us: 10.0,
            rte_gro_p99_delay_us: 20.0,
            max_delay_us: None,
            rte_gro_max_delay_us: Some(20.0),
            rte_gro_parse_in_timed_region: true,
            rte_gro_tx_prepare_in_timed_region: true,
            rte_gro_parsed_packets: 300_000,
            rte_gro_tx_prepared_packets: 9_000,
            rte_gro_merged_outputs: 9_000,
            rte_gro_parse_ns_per_pkt: 10.0,
            rte_gro_flow_entry_bytes: 2304,
            rte_gro_segments_per_output: 4.0,
            pxio_segments_per_output: None,
            input_packets: 300_000,
            simulated_ms: 18.0,
            delay_budget_us: 20.0,
            imtu: 9000,
            seed: 1,
            schedule: "poisson-tso".into(),
            ipv6: false,
            rte_gro_held_at_flush: Some(7.5),
            rte_gro_min_parse_ns_per_pkt: Some(235.0),
            rte_gro_min_parse_share_ns_per_pkt: Some(5.0),
            rte_gro_min_parse_cycles_per_pkt: Some(470.0),
            speedup_vs_gro_min_parse: pxio.map(|p| 235.0 / p),
            speedup_vs_gro_min_parse_paired: pxio.map(|p| 236.0 / p),
            rte_gro_min_parse_in_timed_region: Some(true),
            rte_gro_gso_ns_per_pkt: Some(300.0),
            rte_gro_gso_cut_ns_per_pkt: Some(60.0),
            rte_gro_gso_cycles_per_pkt: Some(600.0),
            speedup_vs_gro_gso: pxio.map(|p| 300.0 / p),
            speedup_vs_gro_gso_paired: pxio.map(|p| 310.0 / p),
            rte_gro_gso_yield: Some(0.5),
            rte_gro_gso_packets_per_imtu: Some(1.2),
            pxio_sw_cut_ns_per_pkt: pxio,
            speedup_sw_cut_vs_gro_gso: pxio.map(|p| 300.0 / p),
            pxio_sw_cut_yield: None,
            pxio_sw_cut_packets_per_imtu: None,
        }
    }

    #[test]
    fn json_has_the_core_fields_and_null_for_missing_pxio() {
        let v = serde_json::to_value([row(None)]).unwrap();
        let obj = v[0].as_object().unwrap();
        for field in [
            "flows",
            "gbps_per_flow",
            "delay_budget_us",
            "max_delay_us",
            "rte_gro_max_delay_us",
            "rte_gro_tx_prepared_packets",
            "rte_gro_merged_outputs",
            "rte_gro_min_parse_ns_per_pkt",
            "rte_gro_min_parse_share_ns_per_pkt",
            "speedup_vs_gro_min_parse",
            "rte_gro_min_parse_in_timed_region",
            "pxio_ns_per_pkt",
            "rte_gro_ns_per_pkt",
            "speedup",
            "yield",
            "mean_delay_us",
            "p99_delay_us",
            "flow_entry_bytes",
            "schedule",
            "packets_per_imtu",
            "rte_gro_parse_in_timed_region",
            "rte_gro_tx_prepare_in_timed_region",
            "cycles_per_pkt",
        ] {
            assert!(obj.contains_key(field), "{field} missing");
        }
        assert!(obj["pxio_ns_per_pkt"].is_null());
        assert_eq!(obj["rte_gro_parse_in_timed_region"], true);
        assert_eq!(obj["rte_gro_ns_per_pkt"], 240.0);
        assert_eq!(obj["delay_budget_us"], 20.0);
        let back: Vec<MergeRow> = serde_json::from_value(v).unwrap();
        assert_eq!(back, [row(None)]);
    }

    /// A report written before the fields added since (a budget's largest delays, the TX
    /// preparation counts, the minimal-parse peer) still reads, with those fields empty.
    #[test]
    fn an_older_report_still_reads() {
        let mut v = serde_json::to_value(row(Some(20.0))).unwrap();
        let obj = v.as_object_mut().unwrap();
        for field in [
            "max_delay_us",
            "rte_gro_max_delay_us",
            "rte_gro_tx_prepared_packets",
            "rte_gro_merged_outputs",
            "rte_gro_min_parse_ns_per_pkt",
            "rte_gro_min_parse_share_ns_per_pkt",
            "rte_gro_min_parse_cycles_per_pkt",
            "speedup_vs_gro_min_parse",
            "rte_gro_min_parse_in_timed_region",
            "speedup_nic_csum_paired",
            "speedup_vs_gro_min_parse_paired",
            "speedup_vs_gro_gso_paired",
        ] {
            assert!(obj.remove(field).is_some(), "{field}");
        }
        let back: MergeRow = serde_json::from_value(v).unwrap();
        assert_eq!(back.rte_gro_min_parse_ns_per_pkt, None);
        assert_eq!(back.rte_gro_merged_outputs, 0);
        assert_eq!(back.pxio_offload_ns_per_pkt, Some(20.0));
    }

    #[test]
    fn table_columns_line_up_and_show_na() {
        let mut out = Vec::new();
        print_table(&mut out, &[row(None), row(Some(20.0))]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        let w = lines[0].chars().count();
        assert!(lines.iter().all(|l| l.chars().count() == w), "{text}");
        assert!(lines[2].contains("n/a"));
        // The fastest runs' ratio, then the median of each round's.
        assert!(lines[3].contains("12.00x (12.50x)"), "{text}");
        assert!(lines[2].contains("n/a (n/a)"), "{text}");
        assert!(!lines[3].contains("NEITHER"));
    }

    #[test]
    fn a_win_where_neither_engine_merges_is_flagged() {
        let mut r = row(Some(20.0));
        r.conversion_yield = Some(0.01);
        r.rte_gro_yield = 0.0;
        assert!(r.neither_merges());
        let mut out = Vec::new();
        print_table(&mut out, &[r.clone(), row(Some(20.0))]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[2].contains("12.00x* (12.50x)") && lines[2].contains("NEITHER MERGES"),
            "{text}"
        );
        assert!(!lines[3].contains("NEITHER MERGES"), "{text}");
        // One engine merging is enough for the ratio to mean something.
        r.rte_gro_yield = 0.5;
        assert!(!r.neither_merges());
    }
}
