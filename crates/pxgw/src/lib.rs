//! PXGW: the MTU-translating gateway (SIGCOMM'26 §3).
//!
//! This crate is filled by its own issue; the foundation only reserves its place in the workspace.
