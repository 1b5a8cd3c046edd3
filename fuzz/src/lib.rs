//! Shared machinery of the fuzz targets (`fuzz_targets/`): segments built with
//! `pxio::wire::repr` and deliberately broken ([`segment`]), a parser for what the engine emits
//! ([`parsed`]), and the merge engine's invariants ([`merge_check`]).
//!
//! `cargo xtask fuzz` runs the targets; their committed seed corpora are in `fuzz/seeds/`.

#![forbid(unsafe_code)]

pub mod merge_check;
pub mod parsed;
pub mod segment;
