//! The engine's settings and their validation: merging as in SIGCOMM'26 §4.1 and §4.2, and the
//! adaptive delayed merging of §4.1 and Appendix A (rate threshold, yield bypass, the quantile p
//! of Equation 1).

use super::flow_table::NIL;

/// Most item slots: 4 Mi (each slot is allocated when the engine starts; the default is 64 Ki).
pub const MAX_ITEMS: usize = 1 << 22;
// Item indices are u32 with NIL as "none".
const _: () = assert!(MAX_ITEMS < NIL as usize);

/// Longest delay window and rate time constant (1 s): longer ones hold packets past any TCP
/// retransmission timer.
pub const MAX_WINDOW_NS: u64 = 1_000_000_000;

/// Adaptive delayed merging settings (Appendix A).
#[derive(Clone, Debug, PartialEq)]
pub struct DelayConfig {
    /// Whether incomplete tail items may wait for more segments at all.
    pub enabled: bool,
    /// Flows slower than this (bits/s) never wait (paper: 1 Gb/s).
    pub rate_threshold_bps: f64,
    /// Flows whose conversion yield is above this never wait (paper: 93 %).
    pub yield_bypass: f64,
    /// The quantile p of Equation 1 (paper: 0.95).
    pub quantile: f64,
    /// No window is longer than this, whatever the model says (ns).
    pub max_window_ns: u64,
    /// Time constant of the per-flow rate average (ns). 100 µs follows a flow's bursts: a TSO
    /// burst of a 54 Mb/s flow arrives at line rate, and waiting for the rest of that burst is
    /// what lifts its yield (with 1 ms the burst is averaged away and the flow never waits).
    pub rate_tau_ns: u64,
}

impl Default for DelayConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            rate_threshold_bps: 1e9,
            yield_bypass: 0.93,
            quantile: 0.95,
            max_window_ns: 500_000,
            rate_tau_ns: 100_000,
        }
    }
}

/// Merge engine settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MergeConfig {
    /// Largest IP packet a merge may produce (the internal MTU; default 9000).
    pub imtu: u16,
    /// Flow-table entries (rounded up to a power of two).
    pub flow_capacity: usize,
    /// Items (separately held runs of segments) per flow; more flushes the flow.
    pub max_items_per_flow: u8,
    /// Items held at once across all flows; when full, new segments pass through unmerged.
    pub max_items: usize,
    /// Most segments a merged packet may have (NICs limit gather TX; DPDK allows 65535).
    pub max_segs: u16,
    /// The port granted IPv4 and TCP checksum offload on transmit: merged packets' checksums are
    /// left to the NIC. Input segments are verified either way (the NIC's receive verdict where
    /// the buffer carries one, else in software; see the merge module's "Checksums").
    pub checksum_offload: bool,
    /// The port segments TCP on transmit (TSO): the largest IP packet (bytes) a TSO request may
    /// carry, or 0 when the port has no TSO. With TSO, merged packets grow past the iMTU up to
    /// the largest whole number of iMTU-sized pieces this allows, and leave with a TSO request
    /// at the iMTU: the NIC cuts them, as the paper's PXIO does (SIGCOMM'26 §4.1, "After
    /// merging, PM applies TSO"). Every packet on the wire still fits the iMTU. Without it,
    /// merged packets are cut to the iMTU here, in software. Needs `checksum_offload` (a NIC
    /// that segments also fills the pieces' checksums).
    pub tso_max_len: u16,
    /// Adaptive delayed merging.
    pub delay: DelayConfig,
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self {
            imtu: 9000,
            flow_capacity: 16384,
            max_items_per_flow: 8,
            max_items: 65536,
            max_segs: 64,
            checksum_offload: false,
            tso_max_len: 0,
            delay: DelayConfig::default(),
        }
    }
}

/// A configuration value out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("merge config: {key} = {value} is invalid: {allowed}")]
pub struct ConfigError {
    /// The setting.
    pub key: &'static str,
    /// Its value.
    pub value: String,
    /// What is allowed.
    pub allowed: &'static str,
}

impl MergeConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key, value: &dyn std::fmt::Display, allowed| ConfigError {
            key,
            value: value.to_string(),
            allowed,
        };
        if self.imtu < 1280 {
            return Err(bad("imtu", &self.imtu, "1280..=65535"));
        }
        if self.tso_max_len != 0 && self.tso_max_len < self.imtu {
            return Err(bad(
                "tso_max_len",
                &self.tso_max_len,
                "0 (no TSO) or at least the iMTU",
            ));
        }
        if self.tso_max_len != 0 && !self.checksum_offload {
            return Err(bad(
                "tso_max_len",
                &self.tso_max_len,
                "0 unless checksum_offload is on (a NIC that segments fills the checksums)",
            ));
        }
        if self.flow_capacity == 0 || self.flow_capacity > 1 << 24 {
            return Err(bad("flow_capacity", &self.flow_capacity, "1..=16777216"));
        }
        if self.max_items_per_flow == 0 {
            return Err(bad(
                "max_items_per_flow",
                &self.max_items_per_flow,
                "1..=255",
            ));
        }
        if self.max_segs < 2 {
            return Err(bad("max_segs", &self.max_segs, "2..=65535"));
        }
        // Every item slot is allocated up front (the hot path never grows the slab): a bound
        // keeps an absurd value (4e9 asked for some 768 GB) a typed refusal, not an abort.
        if self.max_items == 0 || self.max_items > MAX_ITEMS {
            return Err(bad("max_items", &self.max_items, "1..=4194304"));
        }
        let d = &self.delay;
        if !(d.quantile > 0.0 && d.quantile < 1.0) {
            return Err(bad(
                "delay.quantile",
                &d.quantile,
                "strictly between 0 and 1",
            ));
        }
        if !(0.0..=1.0).contains(&d.yield_bypass) {
            return Err(bad("delay.yield_bypass", &d.yield_bypass, "0..=1"));
        }
        if d.rate_threshold_bps.is_nan() || d.rate_threshold_bps < 0.0 {
            return Err(bad(
                "delay.rate_threshold_bps",
                &d.rate_threshold_bps,
                ">= 0",
            ));
        }
        if d.max_window_ns > MAX_WINDOW_NS {
            return Err(bad(
                "delay.max_window_ns",
                &d.max_window_ns,
                "0..=1000000000 (1 s)",
            ));
        }
        if d.rate_tau_ns == 0 || d.rate_tau_ns > MAX_WINDOW_NS {
            return Err(bad(
                "delay.rate_tau_ns",
                &d.rate_tau_ns,
                "1..=1000000000 (1 s)",
            ));
        }
        Ok(())
    }
}
