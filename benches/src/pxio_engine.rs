//! pxio's side of the merge benchmark (SIGCOMM'26 §4, §7.1).
//!
//! ============================================================================================
//! TO BE FILLED by the author of `pxio::merge`. Until then [`run_pxio`] returns `None` and the
//! report prints `n/a` in the pxio columns. Do not put placeholder numbers here.
//! ============================================================================================
//!
//! The contract, so that both engines are measured the same way (see `gro_baseline.rs`):
//! - Same input: for each [`RxBurst`](crate::trace::RxBurst) of `trace.bursts()`, build one
//!   `HeapBuf` per slot from `trace.write_frame(slot, &mut frame)` (`HeapPool::packet`), NOT
//!   timed.
//! - Timed with [`CycleTimer::time`](crate::engine::CycleTimer::time): the engine's own work for the burst, i.e. `rx` of each
//!   packet at `burst.time_ns`, then `poll(burst.time_ns, ..)`; and the final
//!   `flush_all(trace.end_ns(), ..)`.
//! - Between bursts a real worker keeps polling, so its timers fire on time even when no packet
//!   arrives: call `poll(t, ..)` also at the simulated times `t` its deadlines fall due between
//!   two bursts (for instance at every 1 µs tick between bursts, or at the merger's next
//!   deadline if it can tell), and date those outputs `t`. rte_gro's emulation does the same
//!   with its flush grid (see `gro_baseline.rs`). Those polls are timed too.
//! - NOT timed: recording each output with [`Ledger::record`](crate::ledger::Ledger::record) at the simulated time it was
//!   emitted (`burst.time_ns`, or `trace.end_ns()` for the final flush), and dropping it.
//! - Delay budget `cfg.delay_budget_ns`, iMTU `cfg.imtu`. The ledger computes yield and delay
//!   from the outputs exactly as for rte_gro; the merger's own delay histogram
//!   (`merger.stats()`) can be cross-checked against it.
//! - `flow_entry_bytes` is `pxio::merge::FLOW_ENTRY_BYTES`.
//!
//! A sketch (add `pxio = { path = "../crates/pxio" }` to benches/Cargo.toml):
//!
//! ```text
//! use pxio::merge::{MergeConfig, Merger, FLOW_ENTRY_BYTES};
//! use pxio::{HeapBuf, HeapPool, PacketBuf};
//!
//! let wall = std::time::Instant::now();
//! let pool = HeapPool::new(2048);
//! let mut merger = Merger::<HeapBuf>::new(MergeConfig { /* delay budget, iMTU, flows */ });
//! let mut ledger = Ledger::new(trace, "pxio", cfg.imtu, cfg.verify_payload);
//! let mut timer = CycleTimer::new(cfg.tsc_hz);
//! let (mut frame, mut input, mut out) = ([0u8; FRAME_LEN], Vec::new(), Vec::new());
//! for burst in trace.bursts() {
//!     // (poll at the deadlines due before burst.time_ns here, timed, dated at each deadline)
//!     input.clear();
//!     for slot in burst.slots.clone() {
//!         trace.write_frame(slot, &mut frame);
//!         input.push(pool.packet(&frame));
//!     }
//!     timer.time(|| {
//!         for pkt in input.drain(..) {
//!             merger.rx(pkt, burst.time_ns, &mut out);
//!         }
//!         merger.poll(burst.time_ns, &mut out);
//!     });
//!     for p in out.drain(..) {
//!         ledger.record(|v| p.for_each_segment(v), burst.time_ns);
//!     }
//! }
//! timer.time(|| merger.flush_all(trace.end_ns(), &mut out));
//! for p in out.drain(..) {
//!     ledger.record(|v| p.for_each_segment(v), trace.end_ns());
//! }
//! // Wrap all of this in `best_of(cfg.repetitions, || ...)`, as run_rte_gro does.
//! Some(Ok(EngineResult {
//!     ns_per_pkt: timer.ns() / trace.len() as f64,
//!     outcome: ledger.finish()?,
//!     flow_entry_bytes: FLOW_ENTRY_BYTES as u64,
//!     wall_s: wall.elapsed().as_secs_f64(),
//!     discarded_sections: timer.discarded(),
//!     held_at_flush: None,
//! }))
//! ```

use crate::engine::EngineResult;
use crate::trace::Trace;
use crate::{BenchError, MergeBenchConfig};

/// Runs `trace` through pxio's merge engine; `None` until it is implemented (see the module
/// documentation for the contract).
pub fn run_pxio(trace: &Trace, cfg: &MergeBenchConfig) -> Option<Result<EngineResult, BenchError>> {
    let _ = (trace, cfg);
    None
}
