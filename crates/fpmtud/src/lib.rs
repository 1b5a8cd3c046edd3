//! F-PMTUD: path MTU discovery in one round trip from IP fragments (SIGCOMM'26 §5).
//!
//! This crate is filled by its own issue; the foundation only reserves its place in the workspace.
