//! Generates DPDK bindings with bindgen and compiles the static-inline shim, both with the exact
//! flags `pkg-config --cflags libdpdk` prints (they include `-include rte_config.h -march=corei7`).

use std::env;
use std::path::PathBuf;

const INSTALL_HINT: &str = "libdpdk (DPDK 22.11) was not found by pkg-config; install it with \
`sudo apt-get install dpdk dpdk-dev libdpdk-dev pkg-config clang libclang-dev` (or `cargo xtask deps`)";

fn main() {
    println!("cargo:rerun-if-changed=shim/px_shim.c");
    println!("cargo:rerun-if-changed=shim/px_shim.h");
    println!("cargo:rerun-if-changed=shim/wrapper.h");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    if let Err(e) = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
    {
        {
            // One clear line, then the detail for whoever wants it.
            eprintln!("error: {INSTALL_HINT}");
            eprintln!("detail: {e}");
            std::process::exit(1);
        }
    }
    // Not in libdpdk.pc's Libs, but we call them directly: hot-plugging vdevs and ring-pair ports.
    println!("cargo:rustc-link-lib=rte_bus_vdev");
    println!("cargo:rustc-link-lib=rte_net_ring");

    let cflags = dpdk_cflags();

    let mut shim = cc::Build::new();
    shim.file("shim/px_shim.c").include("shim").opt_level(3);
    for flag in &cflags {
        shim.flag(flag);
    }
    shim.compile("px_shim");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header("shim/wrapper.h")
        .clang_arg("-Ishim")
        .clang_args(&cflags)
        .clang_macro_fallback()
        .use_core()
        // Packed-with-aligned-members headers Rust cannot express; we never touch them.
        .opaque_type("rte_l2tpv2_.*")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(false)
        .generate_comments(false)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        // EAL, lcore, logging, errors, hot-plug.
        .allowlist_function("rte_eal_(init|cleanup|hotplug_add|hotplug_remove|process_type)")
        .allowlist_function("rte_(strerror|socket_id|lcore_count|get_tsc_hz|thread_register|thread_unregister)")
        .allowlist_function("rte_log_set_global_level")
        .allowlist_function("rte_vdev_(init|uninit)")
        // Mempool and mbuf.
        .allowlist_function("rte_pktmbuf_(pool_create|clone|pool_init|init)")
        .allowlist_function("rte_mempool_(free|lookup|avail_count|in_use_count)")
        .allowlist_type("rte_mbuf")
        .allowlist_var("RTE_MBUF_.*")
        .allowlist_var("RTE_PTYPE_.*")
        .allowlist_var("RTE_PKTMBUF_HEADROOM")
        // Rings, for ring-pair ports.
        .allowlist_function("rte_ring_(create|free)")
        .allowlist_function("rte_eth_from_rings")
        .allowlist_var("RING_F_.*")
        // Ethdev.
        .allowlist_function("rte_eth_(dev_.*|rx_queue_setup|tx_queue_setup|promiscuous_.*|link_get_nowait|stats_get|stats_reset|macaddr_get|find_next_owned_by|iterator_.*)")
        .allowlist_var("RTE_ETH_.*")
        .allowlist_var("RTE_ETHER_.*")
        .allowlist_type("rte_eth_(conf|dev_info|rxconf|txconf|link|stats|rss_conf)")
        // Hairpin queues (SIGCOMM'26 §4.4) and buffer split, header-only DMA (§4.2).
        .allowlist_function("rte_eth_(rx|tx)_hairpin_queue_setup|rte_eth_hairpin_(bind|unbind)")
        .allowlist_type("rte_eth_hairpin_(cap|conf|peer|queue_cap)|rte_eth_rxseg(_split|_capa)?")
        // rte_flow.
        .allowlist_function("rte_flow_(validate|create|destroy|flush|isolate)")
        .allowlist_type("rte_flow_(attr|item|item_.*|action|action_.*|error)")
        .allowlist_var("RTE_FLOW_.*")
        // rte_gro / rte_gso: the baseline our benches measure pxio against.
        .allowlist_function("rte_gro_.*")
        .allowlist_function("rte_gso_segment")
        .allowlist_type("rte_gro_param|rte_gso_ctx")
        .allowlist_var("RTE_GRO_.*|RTE_GSO_.*")
        // Software packet-type parse: what an application runs before rte_gro when the NIC
        // gives no header lengths (testpmd's csum engine, the merge bench's baseline).
        .allowlist_function("rte_net_get_ptype")
        .allowlist_type("rte_net_hdr_lens")
        // Wire headers, for rte_flow specs and tests.
        .allowlist_type("rte_(ether|ipv4|ipv6|tcp|udp)_hdr")
        // Telemetry: an application's own `/...` commands on DPDK's telemetry socket.
        .allowlist_function("rte_telemetry_register_cmd")
        .allowlist_function("rte_tel_data_(start_dict|add_dict_u64|alloc|free)")
        // The shim.
        .allowlist_function("px_.*")
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed over the DPDK headers: {e}"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");
}

/// The compiler flags libdpdk asks for, minus linker-only noise.
fn dpdk_cflags() -> Vec<String> {
    let output = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| panic!("{INSTALL_HINT} ({e})"));
    assert!(output.status.success(), "{INSTALL_HINT}");
    let text = String::from_utf8(output.stdout).expect("pkg-config prints UTF-8");
    let mut flags = Vec::new();
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word == "-include" {
            // `-include rte_config.h` is two words that must stay together.
            if let Some(file) = words.next() {
                flags.push(format!("-include{file}"));
            }
        } else {
            flags.push(word.to_owned());
        }
    }
    flags
}
