//! pxgw's queue settings (`[queues]`, SIGCOMM'26 §4.2-§4.4) on vdevs, which have neither
//! `rte_flow`, hairpin queues nor buffer split: header-only DMA is refused at start with one
//! line; hairpin opt-in and queue scaling fall back (every flow to the CPU, all queues active),
//! say so, and `--stats-json` shows it with the active queue count over time.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use pxgw::config::{Config, ConfigError};

fn config(extra: &str) -> String {
    format!(
        "[ports.external]\ndevice = \"net_null0\"\nmtu = 1500\nrx_descriptors = 256\ntx_descriptors = 256\n\
         [ports.internal]\ndevice = \"net_null1\"\nmtu = 9000\nrx_descriptors = 256\ntx_descriptors = 256\n\
         [pmtu]\nprobe = false\n[stats]\ninterval_s = 0.2\n{extra}"
    )
}

fn pxgw(dir: &Path, config: &str, extra: &[&str]) -> Output {
    common::run_pxgw(dir, config, extra, "info")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("queues", name)
}

#[test]
fn queue_settings_are_validated() {
    let bad = |extra: &str| match Config::parse(&config(extra)) {
        Err(e @ ConfigError::Invalid { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(bad("[queues]\nper_worker = 0\n").contains("queues.per_worker"));
    assert!(bad("[queues]\nwindow_ms = 1\n").contains("10..=60000"));
    assert!(bad("[queues]\nheader_bytes = 8\n").contains("queues.header_bytes"));
    assert!(matches!(
        Config::parse(&config("[queues]\nscalling = true\n")),
        Err(ConfigError::Parse(e)) if e.contains("unknown field `scalling`")
    ));
    let ok = Config::parse(&config("[queues]\nper_worker = 4\nscaling = true\n")).unwrap();
    assert!(ok.queues.scaling);
}

#[test]
fn header_split_is_refused_on_a_device_without_buffer_split() {
    let dir = scratch("split");
    let out = pxgw(
        &dir,
        &config("[queues]\nheader_split = true\n"),
        &["--check"],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("does not offer RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT (header-only DMA)"),
        "{stderr}"
    );
}

#[test]
fn scaling_and_hairpin_fall_back_on_vdevs_and_the_stats_say_so() {
    let dir = scratch("scale");
    let json = dir.join("stats.json");
    let out = pxgw(
        &dir,
        &config(
            "[workers]\ncount = 2\npool_size = 16383\n\
             [queues]\nper_worker = 4\nscaling = true\nhairpin = true\nwindow_ms = 100\n",
        ),
        &["--run-for", "1.5", "--stats-json", json.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // pxgw's log (stdout, and stderr for EAL lines).
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Hairpin opt-in is inbound only: the external port reports why it is off.
    assert_eq!(
        said.matches("ports.external: hairpin opt-in off").count(),
        1,
        "{said}"
    );
    assert!(!said.contains("ports.internal: hairpin"), "{said}");
    assert!(said.contains("no hairpin queues"), "{said}");
    assert!(said.contains("RX queue scaling unavailable"), "{said}");
    assert!(said.contains("| rxq 8/8 (advised"), "{said}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rxq = &stats["rxq"];
    assert_eq!(rxq["queues_per_port"], 8, "{rxq:#}");
    assert_eq!(rxq["configurations"], serde_json::json!([2, 8]));
    assert_eq!(rxq["active_queues"], 8);
    assert!(
        rxq["scaling"].as_str().unwrap().contains("rte_flow"),
        "{rxq:#}"
    );
    let steering = rxq["steering"].as_array().unwrap();
    let mode = |i: usize| steering[i]["mode"].as_str().unwrap().to_owned();
    assert!(mode(0).contains("no hairpin queues"), "{rxq:#}");
    assert!(mode(1).contains("off on this port"), "{rxq:#}");
    let samples = rxq["samples"].as_array().unwrap();
    assert!(!samples.is_empty());
    assert!(samples.iter().all(|s| s["active_queues"] == 8));
    // Every worker read packets (net_null delivers on all 8 queues; each worker reads its 4).
    for w in stats["workers"].as_array().unwrap() {
        assert!(w["packets_in"].as_u64().unwrap() > 0, "{w:#}");
    }
}
