//! F-PMTUD: path MTU discovery in one round trip from IP fragments, without ICMP
//! (SIGCOMM'26 §5.2, HotNets'25 §4.2).
//!
//! A prober sends a UDP probe sized to the next hop's eMTU, with DF clear, to the well-known
//! port [`DEFAULT_PORT`]. Routers with a smaller MTU fragment it. The responder reports the size
//! of every fragment it received, and the prober takes the largest as the path MTU. A
//! [`PmtuCache`] then serves the per-packet lookups behind a counting Bloom filter.
//!
//! The protocol core is sans-IO (bytes and a time in, bytes out), so the endpoint daemon
//! ([`endpoint`], std sockets) and pxgw (DPDK ports) drive the same code:
//!
//! | stage | type | paper |
//! |---|---|---|
//! | message format | [`wire::Probe`], [`wire::Report`] | §5.2, Figure 8 |
//! | prober | [`Prober`] | §5.2 (two probes, fallback, re-probing) |
//! | fragments → probe | [`FragmentTracker`] | §5.2 ("reports all fragment sizes") |
//! | responder | [`Responder`] | §5.2, HotNets'25 §4.2 (daemon) |
//! | rate limits | [`ratelimit::RateLimiter`] | per-source and global token buckets |
//! | lookup | [`PmtuCache`], [`CountingBloom`] | §5.2 "Fast PMTU lookup" |
//!
//! The PMTUD lab (`labs/pmtud`, `cargo xtask lab pmtud`) runs F-PMTUD next to scamper and the
//! kernel's ICMP-based PMTUD on a real Linux path with and without an ICMP black hole.
//!
//! `docs/fpmtud.md` specifies the format field by field, the port, the 8-byte rounding, the
//! fallback order, the rate limits and the security properties.

#![forbid(unsafe_code)]

pub mod bloom;
pub mod cache;
pub mod endpoint;
pub mod fragment;
pub mod prober;
pub mod ratelimit;
pub mod responder;
pub mod wire;

pub use bloom::CountingBloom;
pub use cache::{CacheConfig, PmtuCache};
pub use fragment::{FragmentTracker, ProbeRecord, TrackerConfig};
pub use prober::{PmtuEstimate, PmtuSource, Prober, ProberConfig, Transmit};
pub use responder::{ProbeSeen, Responder, ResponderConfig};
pub use wire::DEFAULT_PORT;

/// A point in time in nanoseconds since an arbitrary epoch of the driver's choosing (pxgw
/// passes its worker clock, the std drivers an `Instant`). Only differences matter.
pub type Nanos = u64;
