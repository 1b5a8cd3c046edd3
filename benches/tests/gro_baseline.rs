//! The rte_gro baseline on a real EAL: small traces go through DPDK's GRO with every packet
//! accounted for, payloads intact, and yield and delay where the model puts them.

use dpdk::testing::eal;
use pxbench::gro_baseline::run_rte_gro;
use pxbench::trace::Trace;
use pxbench::MergeBenchConfig;

fn config() -> MergeBenchConfig {
    MergeBenchConfig {
        min_packets: 8_000,
        verify_payload: true,
        repetitions: 2,
        ..MergeBenchConfig::new(eal())
    }
}

#[test]
fn one_flow_merges_whole_bursts_and_waits_half_a_budget() {
    let cfg = config();
    let trace = Trace::generate(cfg.trace_config(1, 10.0)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    // A 45-segment burst counted as if cut at 8948 B keeps 7 x 8948 of its 65160 bytes.
    assert!(r.outcome.conversion_yield > 0.9, "{:?}", r.outcome);
    assert!(r.outcome.conversion_yield <= 7.0 * 8948.0 / 65160.0 + 1e-9);
    // Full flushes every 20 µs of simulated time: delays spread over 0..20 µs.
    assert!(
        (8.0..12.0).contains(&r.outcome.mean_delay_us),
        "{:?}",
        r.outcome
    );
    assert!(r.outcome.p99_delay_us <= 20.0);
    assert!(r.outcome.segments_per_output > 10.0);
    assert!(r.ns_per_pkt > 0.0);
    assert_eq!(r.flow_entry_bytes, 32 * 72);
}

#[test]
fn many_flows_fill_one_table_without_losing_a_packet() {
    let cfg = MergeBenchConfig {
        min_bursts_per_flow: 0.25,
        ..config()
    };
    let trace = Trace::generate(cfg.trace_config(800, 0.25)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert!(r.outcome.conversion_yield > 0.8, "{:?}", r.outcome);
    assert!(r.outcome.segments_per_output > 5.0);
}

#[test]
fn no_budget_means_a_flush_after_every_burst() {
    let cfg = MergeBenchConfig {
        delay_budget_ns: 0,
        ..config()
    };
    let trace = Trace::generate(cfg.trace_config(8, 10.0)).unwrap();
    let r = run_rte_gro(eal(), &trace, &cfg).unwrap();
    assert_eq!(r.outcome.mean_delay_us, 0.0);
    assert!(
        r.outcome.segments_per_output > 1.0,
        "bursts still merge within themselves"
    );
    assert!(r.outcome.conversion_yield < 0.9);
}
