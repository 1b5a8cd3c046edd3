//! A safe wrapper over DPDK 22.11, shaped for PacketExpress's run-to-completion workers.
//!
//! - [`Eal`]: initialises the environment once per process ([`EalBuilder`]), hot-plugs vdevs,
//!   registers worker threads as lcores ([`Eal::register_thread`], [`LcoreRegistration`]).
//! - [`Mempool`] and [`Mbuf`]: owned packet buffers with chains, shallow refcounted clones, and a
//!   `Drop` that frees a whole chain exactly once.
//! - [`Burst`]: a fixed-capacity, allocation-free array of mbufs for the RX/TX hot path.
//! - [`Port`], [`RxQueue`], [`TxQueue`]: port set-up with offloads intersected with what the device
//!   can do; a `tx_burst` that hands unsent mbufs back to the caller.
//! - [`FlowRule`]: `rte_flow` steering rules (queue, RSS over a queue subset, drop).
//! - [`HairpinCapability`], [`PortBuilder::hairpin_queues`]: NIC-side forwarding queues
//!   (SIGCOMM'26 §4.4); [`PortBuilder::header_split`]: header-only DMA (§4.2).
//! - [`prefetch`]: DPDK's `rte_prefetch0`, in Rust so that it inlines into a packet loop.
//! - `testing` (cargo feature `testing`, for tests and labs only): one EAL per test process, vdevs
//!   on demand, and the mempool leak check. Product builds do not compile it.
//!
//! All of the workspace's DPDK `unsafe` lives in this crate; each block says why it is sound.

mod af_packet;
mod burst;
mod eal;
mod error;
mod flow;
pub mod gro;
pub mod gso;
mod hairpin;
mod lcore;
mod mbuf;
mod mempool;
pub mod netdev;
mod port;
mod prefetch;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use burst::{Burst, Drain};
pub use eal::{Eal, EalBuilder, PortId};
pub use error::{Errno, Error, Result};
pub use flow::{Flow, FlowAction, FlowRule, IpMatch, L4Match, L4Proto};
pub use gro::GroContext;
pub use gso::GsoContext;
pub use hairpin::{hairpin_capability, HairpinCapability, HairpinPeer};
pub use lcore::{current_lcore, LcoreId, LcoreRegistration};
pub use mbuf::{Mbuf, MbufChain, Segments};
pub use mempool::Mempool;
pub use port::{
    DescLimits, DeviceInfo, Link, Port, PortBuilder, PortStats, RssHash, RxOffloads, RxQueue,
    TxOffloads, TxQueue, RSS_KEY_LEN,
};
pub use prefetch::prefetch;

/// The `RTE_MBUF_F_TX_*` flags [`Mbuf::set_tx_offload`] takes.
pub mod tx_flags {
    /// The packet is IPv4.
    pub const IPV4: u64 = dpdk_sys::RTE_MBUF_F_TX_IPV4;
    /// The packet is IPv6.
    pub const IPV6: u64 = dpdk_sys::RTE_MBUF_F_TX_IPV6;
    /// Fill the IPv4 header checksum.
    pub const IP_CKSUM: u64 = dpdk_sys::RTE_MBUF_F_TX_IP_CKSUM;
    /// Fill the TCP checksum.
    pub const TCP_CKSUM: u64 = dpdk_sys::RTE_MBUF_F_TX_TCP_CKSUM;
    /// Fill the UDP checksum.
    pub const UDP_CKSUM: u64 = dpdk_sys::RTE_MBUF_F_TX_UDP_CKSUM;
    /// TCP segmentation offload.
    pub const TCP_SEG: u64 = dpdk_sys::RTE_MBUF_F_TX_TCP_SEG;
}

/// The `RTE_PTYPE_*` packet-type bits [`Mbuf::set_packet_type`] takes.
pub mod ptype {
    /// Ethernet.
    pub const L2_ETHER: u32 = dpdk_sys::RTE_PTYPE_L2_ETHER;
    /// IPv4 without options.
    pub const L3_IPV4: u32 = dpdk_sys::RTE_PTYPE_L3_IPV4;
    /// IPv6 without extension headers.
    pub const L3_IPV6: u32 = dpdk_sys::RTE_PTYPE_L3_IPV6;
    /// TCP.
    pub const L4_TCP: u32 = dpdk_sys::RTE_PTYPE_L4_TCP;
    /// UDP.
    pub const L4_UDP: u32 = dpdk_sys::RTE_PTYPE_L4_UDP;
    /// Ethernet / IPv4 / TCP: what `rte_gro` merges.
    pub const ETHER_IPV4_TCP: u32 = L2_ETHER | L3_IPV4 | L4_TCP;
}

/// The CPU's time-stamp counter (`rte_rdtsc`): cheap, monotonic on one core.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: reads the TSC; no memory is touched.
    unsafe { dpdk_sys::px_rdtsc() }
}
