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
pub use nf::{Pxio, PxioConfig, TxStats};

/// The README's Rust examples (the `dpdk` wrapper and embedding pxio), compiled as doc tests so
/// they cannot drift from the API. They use DPDK, so they need the `dpdk` feature.
#[cfg(all(doctest, feature = "dpdk"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
