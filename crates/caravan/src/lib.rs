//! User-space side of the PX-caravan eBPF decapsulator (SIGCOMM'26 §6).
//!
//! This crate is filled by its own issue; the foundation only reserves its place in the workspace.
