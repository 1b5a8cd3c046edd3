//! PXIO: PacketExpress's packet I/O stack (SIGCOMM'26 §4).
//!
//! The engine core is generic over [`PacketBuf`], implemented by [`dpdk::Mbuf`] for real ports
//! and by [`HeapBuf`] for tests, fuzzing and benches that run without an EAL.

#![forbid(unsafe_code)]

pub mod buf;
pub mod caravan;
pub mod checksum;
pub mod merge;
pub mod split;
pub mod stack;
pub mod toeplitz;
pub mod wire;

pub use buf::{HeapBuf, HeapChain, HeapPool, PacketBuf, PacketChain, TxOffload};
pub use stack::{Clock, ManualClock, Pxio, PxioConfig, TscClock, TxStats};

/// The README's Rust examples (the `dpdk` wrapper and embedding pxio), compiled as doc tests so
/// they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
