//! The responder: answers a probe with the fragment sizes it arrived in, sans-IO
//! (SIGCOMM'26 §5.2 "D-PXGW ... reports all fragment sizes back"; HotNets'25 §4.2
//! "F-PMTUD daemon").
//!
//! It checks the probe header, applies a per-source token bucket under a global one, and builds
//! a report no longer than the probe's UDP payload, so a spoofed probe cannot be turned into a
//! larger packet toward a victim (no amplification), nor a flood of spoofed sources into more
//! than the global rate of reports. The sources' buckets live in a bounded set-associative table
//! ([`crate::ratelimit`]): a new source costs the same few slot reads whether the table is empty
//! or full. The driver (the endpoint daemon or pxgw) sends the bytes back to the probe's source
//! address and port, from the probe port.

use std::net::IpAddr;

use crate::fragment::ProbeRecord;
use crate::ratelimit::{Limit, RateLimiter, Verdict, WhenFull};
use crate::wire::{self, Probe, Report, WireError};
use crate::Nanos;

/// Settings of a [`Responder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponderConfig {
    /// Probes answered per second per source address, sustained. One prober probes each
    /// destination twice per round; a gateway probes many destinations behind one address.
    pub rate_per_sec: u32,
    /// Probes answered in a burst per source address.
    pub burst: u32,
    /// Probes answered per second over all sources together, sustained: what a flood of probes
    /// from spoofed sources gets at most.
    pub global_rate_per_sec: u32,
    /// Probes answered in a burst over all sources together.
    pub global_burst: u32,
    /// Source addresses tracked at once. A new source takes the slot of a source whose bucket
    /// has refilled, else of the least recently seen one of its set.
    pub max_sources: usize,
    /// Fragment sizes listed per report, at most [`wire::MAX_LISTED`].
    pub max_listed: usize,
}

impl Default for ResponderConfig {
    fn default() -> Self {
        Self {
            rate_per_sec: 50,
            burst: 100,
            // Reports are at most 280 B: 1000 per second is under 2.3 Mbit/s.
            global_rate_per_sec: 1000,
            global_burst: 200,
            max_sources: 4096,
            max_listed: wire::MAX_LISTED,
        }
    }
}

/// A responder setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResponderConfigError {
    /// A setting that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// `max_listed` above [`wire::MAX_LISTED`].
    #[error("max_listed {0} above the format's limit {max}", max = wire::MAX_LISTED)]
    TooManyListed(usize),
}

/// What a responder saw of one probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeSeen<'a> {
    /// The probe's source address (the report goes back there).
    pub src: IpAddr,
    /// The probe's UDP payload, or at least its first [`wire::field::HEADER_LEN`] bytes.
    pub payload: &'a [u8],
    /// The probe's whole UDP payload length: the report is never longer.
    pub payload_len: usize,
    /// IP total length of each fragment, in offset order (one entry: arrived whole).
    pub fragments: &'a [u16],
}

/// Why a probe got no report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not a well-formed probe.
    #[error("not a probe: {0}")]
    Malformed(#[from] WireError),
    /// No fragment sizes to report.
    #[error("no fragment sizes")]
    NoFragments,
    /// The probe's payload is too short to carry a report of even one size.
    #[error("probe payload of {0} bytes is too short for a report")]
    TooSmall(usize),
    /// This source exceeded its rate.
    #[error("rate limit for {0}")]
    RateLimited(IpAddr),
    /// All sources together exceeded the global rate.
    #[error("global rate limit")]
    GlobalRateLimited,
}

/// Counters of a [`Responder`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Reports built.
    pub answered: u64,
    /// Probes refused as malformed, empty or too small.
    pub malformed: u64,
    /// Probes refused by their source's rate limit.
    pub source_limited: u64,
    /// Probes refused by the global rate limit (all sources together).
    pub global_limited: u64,
    /// Sources forgotten while their bucket was in use, to make room for a new source.
    pub sources_evicted: u64,
    /// Source-table slots read: at most [`crate::ratelimit::WAYS`] per probe, however many
    /// sources are tracked.
    pub slots_examined: u64,
}

/// Answers probes (SIGCOMM'26 §5.2). Sans-IO: bytes and a time in, report bytes out.
#[derive(Debug)]
pub struct Responder {
    cfg: ResponderConfig,
    limiter: RateLimiter<IpAddr>,
    stats: ResponderStats,
}

impl Responder {
    /// A responder with these settings.
    pub fn new(cfg: ResponderConfig) -> Result<Self, ResponderConfigError> {
        if cfg.rate_per_sec == 0 {
            return Err(ResponderConfigError::Zero("rate_per_sec"));
        }
        if cfg.burst == 0 {
            return Err(ResponderConfigError::Zero("burst"));
        }
        if cfg.global_rate_per_sec == 0 {
            return Err(ResponderConfigError::Zero("global_rate_per_sec"));
        }
        if cfg.global_burst == 0 {
            return Err(ResponderConfigError::Zero("global_burst"));
        }
        if cfg.max_sources == 0 {
            return Err(ResponderConfigError::Zero("max_sources"));
        }
        if cfg.max_listed == 0 {
            return Err(ResponderConfigError::Zero("max_listed"));
        }
        if cfg.max_listed > wire::MAX_LISTED {
            return Err(ResponderConfigError::TooManyListed(cfg.max_listed));
        }
        let limiter = RateLimiter::new(
            Some(Limit::per_second(cfg.rate_per_sec, cfg.burst)),
            Limit::per_second(cfg.global_rate_per_sec, cfg.global_burst),
            cfg.max_sources,
            WhenFull::EvictOldest,
            0,
        );
        Ok(Self {
            cfg,
            limiter,
            stats: ResponderStats::default(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> ResponderStats {
        let l = self.limiter.stats();
        ResponderStats {
            sources_evicted: l.evicted,
            slots_examined: l.slots_examined,
            ..self.stats
        }
    }

    /// Sources whose rate state is held: never more than `max_sources`.
    pub fn sources(&self) -> usize {
        self.limiter.len()
    }

    /// Answers a probe: the report's bytes, or why there is none.
    pub fn on_probe(&mut self, seen: ProbeSeen<'_>, now: Nanos) -> Result<Vec<u8>, Refusal> {
        let result = self.build(seen, now);
        match &result {
            Ok(_) => self.stats.answered += 1,
            Err(Refusal::RateLimited(_)) => self.stats.source_limited += 1,
            Err(Refusal::GlobalRateLimited) => self.stats.global_limited += 1,
            Err(_) => self.stats.malformed += 1,
        }
        result
    }

    /// Answers a probe the [`crate::FragmentTracker`] completed.
    pub fn on_record(&mut self, record: &ProbeRecord, now: Nanos) -> Result<Vec<u8>, Refusal> {
        self.on_probe(
            ProbeSeen {
                src: record.src,
                payload: &record.head,
                payload_len: record.payload_len,
                fragments: &record.fragments,
            },
            now,
        )
    }

    fn build(&mut self, seen: ProbeSeen<'_>, now: Nanos) -> Result<Vec<u8>, Refusal> {
        let probe = Probe::parse(seen.payload)?;
        if seen.fragments.is_empty() {
            return Err(Refusal::NoFragments);
        }
        // No amplification: the report fits in the probe's own UDP payload.
        let room = seen.payload_len.saturating_sub(wire::field::HEADER_LEN) / wire::field::SIZE_LEN;
        if room == 0 {
            return Err(Refusal::TooSmall(seen.payload_len));
        }
        self.take_token(seen.src, now)?;
        let mut report = Report {
            probe_id: probe.probe_id,
            nonce: probe.nonce,
            fragments_seen: u16::try_from(seen.fragments.len()).unwrap_or(u16::MAX),
            sizes: seen.fragments.to_vec(),
        };
        report.truncate_to(
            self.cfg
                .max_listed
                .min(room)
                .min(usize::from(report.fragments_seen)),
        );
        Ok(report.to_bytes()?)
    }

    fn take_token(&mut self, src: IpAddr, now: Nanos) -> Result<(), Refusal> {
        match self.limiter.check(src, now) {
            Verdict::Allowed => Ok(()),
            Verdict::Global => Err(Refusal::GlobalRateLimited),
            // A full set evicts (WhenFull::EvictOldest): never refused for room.
            Verdict::PerKey | Verdict::TableFull => Err(Refusal::RateLimited(src)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    fn probe(size: usize) -> Vec<u8> {
        let mut p = vec![0; size];
        Probe {
            probe_id: 5,
            nonce: 0xfeed,
            size: 9000,
        }
        .emit(&mut p)
        .unwrap();
        p
    }

    fn src(n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 18, 1, n))
    }

    #[test]
    fn answers_with_the_sizes_and_the_nonce() {
        let mut r = Responder::new(ResponderConfig::default()).unwrap();
        let p = probe(8972);
        let sizes = [1396, 1396, 1396, 1396, 1396, 1396, 744];
        let bytes = r
            .on_probe(
                ProbeSeen {
                    src: src(1),
                    payload: &p[..24],
                    payload_len: 8972,
                    fragments: &sizes,
                },
                0,
            )
            .unwrap();
        let report = Report::parse(&bytes).unwrap();
        assert_eq!((report.probe_id, report.nonce), (5, 0xfeed));
        assert_eq!(report.sizes, sizes);
        assert_eq!(report.fragments_seen, 7);
        assert_eq!(r.stats().answered, 1);
    }

    #[test]
    fn rate_limited_per_source() {
        let mut r = Responder::new(ResponderConfig {
            rate_per_sec: 10,
            burst: 3,
            ..ResponderConfig::default()
        })
        .unwrap();
        let p = probe(1000);
        let seen = |n| ProbeSeen {
            src: src(n),
            payload: &p,
            payload_len: 1000,
            fragments: &[1028],
        };
        for _ in 0..3 {
            assert!(r.on_probe(seen(1), 0).is_ok());
        }
        assert_eq!(r.on_probe(seen(1), 0), Err(Refusal::RateLimited(src(1))));
        // Another source has its own bucket.
        assert!(r.on_probe(seen(2), 0).is_ok());
        // 100 ms at 10/s refills one token.
        assert!(r.on_probe(seen(1), 100_000_000).is_ok());
        assert!(r.on_probe(seen(1), 100_000_000).is_err());
        assert_eq!(r.stats().source_limited, 2);
        assert_eq!(r.stats().global_limited, 0);
    }

    #[test]
    fn source_table_is_bounded() {
        let mut r = Responder::new(ResponderConfig {
            max_sources: 2,
            ..ResponderConfig::default()
        })
        .unwrap();
        let p = probe(1000);
        let seen = |n| ProbeSeen {
            src: src(n),
            payload: &p,
            payload_len: 1000,
            fragments: &[1028],
        };
        assert!(r.on_probe(seen(1), 0).is_ok());
        assert!(r.on_probe(seen(2), 1).is_ok());
        // A third source takes the place of the one seen least recently.
        assert!(r.on_probe(seen(3), 2).is_ok());
        assert_eq!(r.sources(), 2);
        assert_eq!(r.stats().sources_evicted, 1);
    }

    /// Probes from `n` distinct spoofed sources, one every `gap` ns from 0: (answered, refused
    /// by the global limit, the most sources tracked at once, probes sent).
    fn flood(r: &mut Responder, n: u32, gap: u64) -> (u64, u64, usize, u64) {
        let p = probe(1000);
        let mut most = 0;
        for i in 0..n {
            let seen = ProbeSeen {
                src: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)),
                payload: &p,
                payload_len: 1000,
                fragments: &[1028],
            };
            let _ = r.on_probe(seen, u64::from(i) * gap);
            most = most.max(r.sources());
        }
        let s = r.stats();
        (s.answered, s.global_limited, most, u64::from(n))
    }

    #[test]
    fn a_flood_from_100k_sources_is_answered_at_the_global_rate() {
        let cfg = ResponderConfig::default();
        let (rate, burst) = (
            u64::from(cfg.global_rate_per_sec),
            u64::from(cfg.global_burst),
        );
        // 100,000 sources in 100 ms (one per µs), then in 10 s (one per 100 µs).
        for (gap, seconds_x1000) in [(1_000, 100), (100_000, 10_000)] {
            let mut r = Responder::new(cfg.clone()).unwrap();
            let (answered, global, most, sent) = flood(&mut r, 100_000, gap);
            // The global bucket: its burst, plus its rate over the flood's duration.
            let bound = burst + rate * seconds_x1000 / 1000;
            assert!(answered <= bound, "{answered} answered, at most {bound}");
            assert!(
                answered >= bound - 1,
                "{answered} answered, {bound} allowed"
            );
            assert_eq!(
                answered + global,
                sent,
                "every other probe hit the global limit"
            );
            assert!(most <= cfg.max_sources, "{most} sources tracked");
            // No probe walked the table: each read one set.
            let examined = r.stats().slots_examined;
            assert!(
                examined <= answered * crate::ratelimit::WAYS as u64,
                "{examined} slots read for {sent} probes"
            );
        }
    }

    #[test]
    fn many_new_sources_under_the_global_rate_each_cost_one_set() {
        // A global limit high enough that every source reaches the table: 100,000 new sources
        // through a table of 4096, each costing one set's reads, the table never above its bound.
        // All within 10 ms, less than one token's refill (20 ms at 50/s): no source's bucket is
        // full again, so a slot is only ever taken free or by evicting (a refilled slot is
        // reused without counting an eviction, and which slots refill depends on the hash seed).
        let cfg = ResponderConfig {
            global_rate_per_sec: 1_000_000,
            global_burst: 1_000_000,
            ..ResponderConfig::default()
        };
        assert!(u64::from(cfg.rate_per_sec) * 10 < 1000);
        let mut r = Responder::new(cfg.clone()).unwrap();
        let (answered, _, most, sent) = flood(&mut r, 100_000, 100);
        assert_eq!(answered, sent, "each source's first probe is answered");
        assert_eq!(most, cfg.max_sources);
        let s = r.stats();
        assert!(s.sources_evicted >= sent - cfg.max_sources as u64);
        assert!(s.slots_examined <= sent * crate::ratelimit::WAYS as u64);
    }

    #[test]
    fn refuses_what_is_not_a_probe() {
        let mut r = Responder::new(ResponderConfig::default()).unwrap();
        let seen = ProbeSeen {
            src: src(1),
            payload: b"GET / HTTP/1.1\r\n\r\n      ",
            payload_len: 100,
            fragments: &[128],
        };
        assert!(matches!(r.on_probe(seen, 0), Err(Refusal::Malformed(_))));
        let p = probe(24);
        let tiny = ProbeSeen {
            src: src(1),
            payload: &p,
            payload_len: 25,
            fragments: &[53],
        };
        assert_eq!(r.on_probe(tiny, 0), Err(Refusal::TooSmall(25)));
        assert_eq!(r.stats().malformed, 2);
    }

    proptest! {
        #[test]
        fn never_amplifies(sizes in proptest::collection::vec(1u16.., 1..400),
                           payload_len in 24usize..2000) {
            let mut r = Responder::new(ResponderConfig::default()).unwrap();
            let p = probe(payload_len.max(24));
            let largest = sizes.iter().copied().max();
            let seen = ProbeSeen { src: src(1), payload: &p, payload_len, fragments: &sizes };
            match r.on_probe(seen, 0) {
                Ok(bytes) => {
                    prop_assert!(bytes.len() <= payload_len);
                    let report = Report::parse(&bytes).unwrap();
                    prop_assert_eq!(report.largest(), largest);
                }
                Err(e) => prop_assert_eq!(e, Refusal::TooSmall(payload_len)),
            }
        }
    }
}
