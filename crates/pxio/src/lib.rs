//! PXIO: the zero-copy merge/split engine (SIGCOMM'26 §4, §6, Appendix A).
//!
//! This crate is filled by its own issue; the foundation only reserves its place in the workspace.
