//! Embeds the eBPF object built by `cargo xtask build-ebpf`.
//!
//! When the object is missing the crate still builds (so `cargo clippy --workspace` stays green
//! on a fresh clone), with an empty object in its place. `caravan::Decap` then reports
//! "eBPF object not built: run `cargo xtask build-ebpf`" at run time.

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let object = manifest.join("../../target/bpf/bpfel-unknown-none/release/caravan-ebpf");
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("caravan-ebpf.o");
    println!("cargo:rerun-if-changed={}", object.display());
    match std::fs::read(&object) {
        Ok(bytes) => std::fs::write(&out, bytes).expect("write OUT_DIR/caravan-ebpf.o"),
        Err(_) => {
            println!("cargo:warning=caravan: eBPF object not built; run `cargo xtask build-ebpf`");
            std::fs::write(&out, []).expect("write OUT_DIR/caravan-ebpf.o");
        }
    }
}
