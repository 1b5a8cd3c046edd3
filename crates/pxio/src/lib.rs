//! PXIO: PacketExpress's packet I/O stack (SIGCOMM'26 §4).
//!
//! The engine core is generic over [`PacketBuf`], implemented by
#![cfg_attr(feature = "dpdk", doc = "[`dpdk::Mbuf`]")]
#![cfg_attr(not(feature = "dpdk"), doc = "`dpdk::Mbuf`")]
//! for real ports and by [`HeapBuf`] for tests, fuzzing and benches that run without an EAL.
//!
//! # Features
//! - `dpdk` (default): the [`PacketBuf`] implementation for DPDK mbufs, the port-facing
//!   `Pxio::rx_queues` and the TSC-based `TscClock`. Without it pxio has no DPDK in its
//!   dependency graph (no libdpdk, no bindgen): merging, splitting and caravans run on
//!   [`HeapBuf`], for fuzzing, simulation, or embedding on another packet I/O layer.

//!
//! # Embedding pxio in a network function
//! A network function receives merged packets through [`Pxio`], runs its logic once per merged
//! packet (up to 6 times fewer calls for 1500 B input and a 9000 B iMTU, SIGCOMM'26 §7.3), and
//! sends through [`Pxio`], which splits back to the next hop's MTU and keeps what the driver
//! did not take. This example runs as is (`cargo test --doc -p pxio`), on heap buffers; on DPDK
//! ports, the sink is a `dpdk::TxQueue` and `PxioBuilder::for_ports` derives the settings.
//!
//! ```
//! use pxio::wire::{tcp_flags, tcp_frame, EthernetRepr, IpRepr, Ipv4Repr, TcpRepr};
//! use pxio::{HeapBuf, HeapPool, ManualClock, PacketBuf, PxioBuilder, RxPacket};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = HeapPool::new(256);
//! let clock = ManualClock::new(0);
//! let mut px = PxioBuilder::new()
//!     .imtu(9000)
//!     .tx_mtu(1500)
//!     .delay(false)
//!     .build::<HeapBuf, _>(HeapPool::new(256), &clock)?;
//!
//! // Six 1448-byte segments of one flow, as a 1500 B link delivers them.
//! let segment = |i: u32| {
//!     let eth = EthernetRepr { dst: [2, 0, 0, 0, 0, 2], src: [2, 0, 0, 0, 0, 1], vlan_tci: None, ethertype: 0 };
//!     let ip = Ipv4Repr { dont_frag: true, ..Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]) };
//!     let tcp = TcpRepr {
//!         src_port: 40000, dst_port: 80, seq: 1000 + i * 1448, ack: 1,
//!         flags: tcp_flags::ACK, window: 512, urgent: 0, options: &[],
//!     };
//!     pool.packet(&tcp_frame(eth, IpRepr::V4(ip), tcp, &[i as u8; 1448]).unwrap())
//! };
//! let mut merged: Vec<RxPacket<HeapBuf>> = Vec::new();
//! px.rx_meta((0..6).map(segment), &mut merged);
//!
//! // The NF runs once, on one 8742-byte packet, with its headers already parsed.
//! assert_eq!(merged.len(), 1);
//! let RxPacket { pkt, meta } = merged.pop().unwrap();
//! let meta = meta.expect("TCP");
//! assert_eq!((meta.key().dport, meta.hdr.payload_len, meta.seg_size), (80, 6 * 1448, 1448));
//!
//! // Out through pxio: split back to the sender's own segments (`px.tx(pkt)` would split to
//! // the configured 1500 B instead), queued, handed to the sink (here a Vec).
//! assert_eq!(px.tx_to(pkt, meta.seg_mtu())?, 6);
//! let mut wire: Vec<HeapBuf> = Vec::new();
//! px.flush_tx(&mut wire);
//! assert!(wire.iter().all(|p| p.len() == 14 + 20 + 20 + 1448));
//! assert_eq!(px.tx_stats().sent, 6);
//! # drop((wire, px));
//! # assert_eq!(pool.in_use(), 0);
//! # Ok(())
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod buf;
pub mod caravan;
pub mod checksum;
pub mod clock;
pub mod merge;
pub mod nf;
pub mod rxq;
pub mod split;
pub mod toeplitz;
pub mod wire;

pub use buf::{HeapBuf, HeapChain, HeapPool, PacketBuf, PacketChain, TxOffload};
#[cfg(feature = "dpdk")]
pub use clock::TscClock;
pub use clock::{Clock, ManualClock};
pub use nf::{
    MergeFilter, PacketMeta, Pxio, PxioBuilder, PxioConfig, PxioError, RxPacket, TxSink, TxStats,
};

/// Asks the CPU to bring `*value`'s cache lines in, for a read soon after: DPDK's
/// `rte_prefetch0` (see [`dpdk::prefetch`]); nothing without the `dpdk` feature.
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(feature = "dpdk")]
    dpdk::prefetch(value);
    #[cfg(not(feature = "dpdk"))]
    let _ = value;
}

/// The README's Rust example (embedding pxio), compiled as a doc test so it cannot drift from
/// the API. It uses DPDK, so it needs the `dpdk` feature.
#[cfg(all(doctest, feature = "dpdk"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// docs/embedding.md's Rust examples (the NF API and the `dpdk` wrapper), compiled as doc tests
/// for the same reason.
#[cfg(all(doctest, feature = "dpdk"))]
#[doc = include_str!("../../../docs/embedding.md")]
pub struct EmbeddingDoctests;
