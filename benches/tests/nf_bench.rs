//! The NF bench runs end to end on a small trace: every NF in every variant, pxio drops
//! nothing on TX (the bench refuses a run where it does), the PX versions run fewer NF
//! invocations than there were frames, the 9000 B MTU case gets the bytes in full 9000 B
//! packets, the "behind pxgw" column gets what pxgw's pipeline sent inside (its outputs pass
//! the gateway bench's tally, and every NF forwards every one of those frames: the bench
//! refuses a run where one does not), the UPF holds 16 PDRs per session, and the figures are
//! finite. No timing is asserted.

use dpdk::testing;
use pxbench::nf::{run_nf, NfBenchConfig};

#[test]
fn the_nf_bench_runs_every_nf_and_variant() {
    let eal = testing::eal();
    let mut cfg = NfBenchConfig::new(eal);
    cfg.flows = 64;
    cfg.gbps_per_flow = 2.0;
    cfg.min_packets = 20_000;
    cfg.reps = 1;
    cfg.upf_sessions = 1000;
    let report = run_nf(eal, &cfg).unwrap();
    let rows = &report.nfs;
    let u = &report.upf;
    assert_eq!(u.sessions, 1000 + 64);
    assert_eq!(
        (u.pdrs, u.fars, u.qers),
        (16 * u.sessions, 2 * u.sessions, 2 * u.sessions)
    );
    let g = &report.pxgw;
    assert!(g.config.contains("mtu = 9000"), "{}", g.config);
    assert!(
        g.conversion_yield > 0.5 && g.conversion_yield <= 1.0,
        "pxgw's yield {}",
        g.conversion_yield
    );
    assert!(
        g.mean_ip_len > 4000.0 && g.mean_ip_len <= 9000.0,
        "pxgw sent {} B packets on average",
        g.mean_ip_len
    );
    let names: Vec<&str> = rows.iter().map(|r| r.nf.as_str()).collect();
    assert_eq!(names, ["upf", "nat", "lb"]);
    for r in rows {
        assert!(
            r.plain_calls >= 15_000,
            "{}: {} frames",
            r.nf,
            r.plain_calls
        );
        assert!(
            r.px_calls * 2 < r.plain_calls,
            "{}: merging at 2 Gb/s per flow",
            r.nf
        );
        // Full 9000 B packets (8948 B of payload): every byte there, and few short ones (the
        // last of each of the 64 flows, and one per reordering gap).
        let ideal = r.plain_calls * 1448 / 8948;
        assert!(
            r.mtu9000_calls >= ideal && r.mtu9000_calls <= ideal + 2 * 64,
            "{}: {} packets of 9000 B, ideal {ideal}",
            r.nf,
            r.mtu9000_calls
        );
        // Behind pxgw: every frame pxgw sent inside, each a call (fewer than the trace's).
        assert_eq!(r.behind_pxgw_calls, g.frames, "{}", r.nf);
        assert!(
            r.behind_pxgw_calls * 2 < r.plain_calls,
            "{}: {} calls behind pxgw",
            r.nf,
            r.behind_pxgw_calls
        );
        for g in [
            r.plain_gbps,
            r.px_gbps,
            r.mtu9000_gbps,
            r.speedup,
            r.behind_pxgw_gbps,
            r.behind_pxgw_speedup,
            r.behind_pxgw_of_mtu9000,
        ] {
            assert!(g.is_finite() && g > 0.0, "{}: {g}", r.nf);
        }
        assert_eq!(r.px_tso_gbps.is_some(), r.nf != "upf");
        // The iMTU aligned to the trace's segments: a merged packet splits back into full
        // segments, never one more frame than came in.
        assert_eq!(r.frames_in, r.plain_calls);
        assert!(
            r.px_frames_out <= r.frames_in,
            "{}: {} frames out of {}",
            r.nf,
            r.px_frames_out,
            r.frames_in
        );
    }
}
