//! A safe wrapper over DPDK 22.11, shaped for PacketExpress's run-to-completion workers.
//!
//! - [`Eal`]: initialises the environment once per process ([`EalBuilder`]), hot-plugs vdevs.
//! - [`Mempool`] and [`Mbuf`]: owned packet buffers with chains, shallow refcounted clones, and a
//!   `Drop` that frees a whole chain exactly once.
//! - [`Burst`]: a fixed-capacity, allocation-free array of mbufs for the RX/TX hot path.
//! - [`Port`], [`RxQueue`], [`TxQueue`]: port set-up with offloads intersected with what the device
//!   can do; a `tx_burst` that hands unsent mbufs back to the caller.
//! - [`FlowRule`]: `rte_flow` steering rules (queue, RSS over a queue subset, drop).
//! - [`testing`]: one EAL per test process, vdevs on demand, and the mempool leak check.
//!
//! All of the workspace's DPDK `unsafe` lives in this crate; each block says why it is sound.

mod burst;
mod eal;
mod error;
mod flow;
mod mbuf;
mod mempool;
mod port;
pub mod testing;

pub use burst::{Burst, Drain};
pub use eal::{Eal, EalBuilder, PortId};
pub use error::{Errno, Error, Result};
pub use flow::{Flow, FlowAction, FlowRule, IpMatch, L4Match, L4Proto};
pub use mbuf::{Mbuf, Segments};
pub use mempool::Mempool;
pub use port::{
    Link, Port, PortBuilder, PortStats, RssHash, RxOffloads, RxQueue, TxOffloads, TxQueue,
};

/// The README's Rust examples, compiled as doc tests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The CPU's time-stamp counter (`rte_rdtsc`): cheap, monotonic on one core.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: reads the TSC; no memory is touched.
    unsafe { dpdk_sys::px_rdtsc() }
}
