//! `pxbench`: PacketExpress's engines against DPDK's `rte_gro`, on the same deterministic input,
//! in the same run (SIGCOMM'26 §7.1).
//!
//! - [`trace`]: what one gateway core receives: `F` flows of `R` Gb/s in TSO-like 64 KB bursts
//!   on a Poisson schedule, interleaved by a switch, 0.1 % adjacent reordering, RX bursts of 32.
//! - [`gro_baseline`]: the trace through `rte_gro` on real mbufs, timed.
//! - [`pxio_engine`]: the trace through pxio's merge engine (the slot its author fills).
//! - [`ledger`]: conversion yield, added delay and output correctness, the same for both.
//! - [`report`]: the table and the JSON of `cargo xtask bench merge [--json FILE]`.
//! - [`merge`]: the scenarios and the run that ties them together.
//!
//! Simulated time stamps give yield and delay; real CPU time (the TSC) gives the cost.

#![forbid(unsafe_code)]

pub mod engine;
pub mod gateway;
pub mod gro_baseline;
pub mod ledger;
pub mod merge;
pub mod nf;
pub mod pxio_engine;
pub mod report;
pub mod trace;

use std::path::PathBuf;

pub use merge::{
    profile, run_merge, MergeBenchConfig, ProfileRun, ProfiledEngine, ScenarioRun,
    DELAY_BUDGETS_NS, SCENARIOS,
};

/// Why a benchmark could not run or its result cannot be trusted.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// DPDK refused something (EAL, mempool, GRO context).
    #[error(transparent)]
    Dpdk(#[from] dpdk::Error),
    /// The trace configuration is impossible.
    #[error(transparent)]
    Trace(#[from] trace::TraceError),
    /// An engine lost, duplicated or corrupted packets.
    #[error(transparent)]
    Ledger(#[from] ledger::LedgerError),
    /// A benchmark setting the engines cannot honour.
    #[error("bad benchmark configuration: {0}")]
    Config(String),
    /// Writing the report failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The report's path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}
