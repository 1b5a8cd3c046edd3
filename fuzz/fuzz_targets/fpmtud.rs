//! F-PMTUD's messages and the code that reads them off the wire (SIGCOMM'26 §5.2,
//! `docs/fpmtud.md`), on arbitrary bytes:
//! - `Probe::parse` and `Report::parse`: no panic; what parses emits back to bytes that parse
//!   to the same message; a report trimmed with `truncate_to` keeps its largest size and stays
//!   within the bound;
//! - the responder's path: IP packets (fragments or not) into a `FragmentTracker`, completed
//!   probes to a `Responder`, whose report is never longer than the probe (no amplification)
//!   and parses as a report;
//! - the prober's path: arbitrary report bytes to a probing `Prober`, whose estimate (if it
//!   accepts one) is a size it could have measured.
#![forbid(unsafe_code)]
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use arbitrary::Arbitrary;
use fpmtud::wire::{Probe, Report, MAX_LISTED};
use fpmtud::{FragmentTracker, Prober, ProberConfig, Responder, ResponderConfig, TrackerConfig};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Case {
    /// A message's bytes.
    Message(Vec<u8>),
    /// IP packets reaching a responder, with the nanoseconds between them.
    Responder(Vec<(u16, Vec<u8>)>),
    /// Report bytes reaching a prober, after it sent its probes.
    Prober(Vec<u8>),
}

fuzz_target!(|case: Case| match case {
    Case::Message(bytes) => {
        if let Ok(probe) = Probe::parse(&bytes) {
            let mut buf = vec![0u8; bytes.len()];
            probe
                .emit(&mut buf)
                .expect("a parsed probe fits its own bytes");
            assert_eq!(Probe::parse(&buf), Ok(probe), "probe round trip");
        }
        if let Ok(report) = Report::parse(&bytes) {
            let again = Report::parse(&report.to_bytes().expect("a parsed report emits"));
            assert_eq!(again.as_ref(), Ok(&report), "report round trip");
            for max in [1, 3, MAX_LISTED] {
                let mut r = report.clone();
                r.truncate_to(max);
                assert!(r.sizes.len() <= max);
                assert_eq!(r.largest(), report.largest(), "the PMTU survives trimming");
            }
        }
    }
    Case::Responder(packets) => {
        let mut tracker = FragmentTracker::new(TrackerConfig {
            max_datagrams: 16,
            ..TrackerConfig::default()
        });
        let mut responder = Responder::new(ResponderConfig::default()).expect("default config");
        let mut now = 0u64;
        for (gap, ip) in packets.iter().take(64) {
            now += u64::from(*gap) * 1_000;
            tracker.expire(now);
            let Ok(Some(record)) = tracker.on_packet(ip, now) else {
                continue;
            };
            assert!(
                !record.fragments.is_empty(),
                "a completed probe has fragments"
            );
            if let Ok(report) = responder.on_record(&record, now) {
                assert!(
                    report.len() <= record.payload_len,
                    "a report of {} B for a probe of {} B: amplification",
                    report.len(),
                    record.payload_len
                );
                let parsed = Report::parse(&report).expect("the responder's report parses");
                assert!(parsed.sizes.iter().all(|s| record.fragments.contains(s)));
            }
        }
        assert!(tracker.in_progress() <= 16, "the tracker's bound holds");
    }
    Case::Prober(bytes) => {
        let cfg = ProberConfig::default();
        let mut n = 0u64;
        let nonces = Box::new(move || {
            n += 1;
            0x5eed_0000 + n
        });
        let dst = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2));
        let mut prober = Prober::with_nonces(dst, cfg.clone(), nonces).expect("default config");
        let sent = prober.start(0);
        // A report with the right probe id and nonce (as an on-path attacker could send), its
        // counts and sizes from the fuzzer: the plausibility checks are what stands in the way.
        let mut report = Vec::new();
        if let Some(t) = sent.first() {
            report.extend_from_slice(&t.payload[..20.min(t.payload.len())]);
            report[5] = 2; // report
        }
        report.extend_from_slice(&bytes);
        for input in [&bytes, &report] {
            if let Ok(estimate) = prober.on_report(input, 1_000) {
                let pmtu = estimate.mtu;
                assert!(
                    (68..=cfg.probe_size).contains(&pmtu),
                    "an accepted PMTU of {pmtu} B from a probe of {} B",
                    cfg.probe_size
                );
            }
        }
    }
});
