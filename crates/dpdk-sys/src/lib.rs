//! Raw bindings to DPDK 22.11, generated at build time by bindgen over `pkg-config libdpdk`.
//!
//! Only what PacketExpress uses is allowlisted: EAL, lcore, mempool, mbuf, ethdev, rte_flow and, for
//! the benches, rte_gro/rte_gso. DPDK's `static inline` functions (rx/tx burst, mbuf alloc/free,
//! chain, adj/trim/append, refcount, attach, `rte_errno`, `rte_lcore_id`, `rte_rdtsc`) are
//! reached through `px_*` wrappers compiled from `shim/px_shim.c`.
//!
//! Nothing here is safe to call without reading DPDK's documentation; the `dpdk` crate is the
//! safe layer.

#![no_std]
// bindgen's output: C names, no docs, and bitfield/array helpers whose `unsafe fn` bodies call
// unsafe functions without their own `unsafe` block.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    unsafe_op_in_unsafe_fn
)]
#![allow(clippy::all, clippy::undocumented_unsafe_blocks)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
