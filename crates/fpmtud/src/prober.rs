//! The prober: one destination's F-PMTUD state machine, sans-IO (SIGCOMM'26 §5.2).
//!
//! A round sends up to [`ProberConfig::probes_per_round`] probes (two by default),
//! [`ProberConfig::interval`] apart, each sized to the next hop's eMTU with DF clear. The first
//! report that echoes an outstanding probe's id and nonce ends the round: the PMTU is the
//! largest fragment it lists (which is the whole probe if it arrived unfragmented). A later
//! probe of the round is sent only while no report has come back, since it exists to cover the
//! loss of the earlier one.
//!
//! If no valid report arrives within [`ProberConfig::timeout`] of the last probe, the prober
//! falls back (SIGCOMM'26 §5.2 "Fallback mechanism"): the MSS hint plus headers, else the eMTU,
//! else [`CONSERVATIVE_MTU`]. Rounds repeat every [`ProberConfig::reprobe_every`] (10 minutes by
//! default) and after a PTB/ICMP hint, at most once per [`ProberConfig::min_reprobe_gap`].
//!
//! The driver owns the socket and the clock: it calls [`Prober::start`] / [`Prober::poll`] and
//! sends the [`Transmit`]s they return, passes every datagram received to
//! [`Prober::on_report`], and sleeps until [`Prober::next_timeout`].

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::wire::{self, Probe, Report, WireError};
use crate::Nanos;

/// The fallback when neither an MSS hint nor the eMTU is known: the IPv6 minimum MTU
/// (RFC 8200 §5), which SIGCOMM'26 §5.2 names with macOS/FreeBSD's 1240 as conservative choices.
pub const CONSERVATIVE_MTU: u16 = 1280;

/// The smallest IPv4 MTU (RFC 791): a report whose largest fragment is smaller is implausible.
pub const MIN_IPV4_MTU: u16 = 68;

/// IPv4 header without options plus TCP header without options: MSS + 40 = MTU (RFC 879).
pub const TCP_IPV4_OVERHEAD: u16 = 40;
/// IPv6 header plus TCP header without options: MSS + 60 = MTU.
pub const TCP_IPV6_OVERHEAD: u16 = 60;

/// IP header length the prober assumes when sizing a probe: IPv4 without options, IPv6 fixed.
pub const fn ip_header_len(addr: &IpAddr) -> u16 {
    match addr {
        IpAddr::V4(_) => 20,
        IpAddr::V6(_) => 40,
    }
}

/// Settings of a [`Prober`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProberConfig {
    /// The responder's UDP port ([`wire::DEFAULT_PORT`]).
    pub port: u16,
    /// The probe's IP size: the next hop's eMTU (SIGCOMM'26 §5.2).
    pub probe_size: u16,
    /// Probes per round (2 in the paper), `interval` apart.
    pub probes_per_round: u8,
    /// Gap between the probes of a round.
    pub interval: Duration,
    /// How long after the round's last probe to wait for a report before falling back.
    pub timeout: Duration,
    /// Period of re-probing (10 minutes in the paper).
    pub reprobe_every: Duration,
    /// Least time between the starts of two rounds when a PTB hint asks for one, so spoofed
    /// ICMP cannot turn the prober into a probe generator.
    pub min_reprobe_gap: Duration,
    /// The peer's TCP MSS, if one was seen: the first fallback.
    pub mss_hint: Option<u16>,
    /// The next hop's eMTU, if known: the second fallback, and the cap on the first.
    pub emtu: Option<u16>,
}

impl Default for ProberConfig {
    fn default() -> Self {
        Self {
            port: wire::DEFAULT_PORT,
            probe_size: 1500,
            probes_per_round: 2,
            interval: Duration::from_millis(100),
            timeout: Duration::from_secs(1),
            reprobe_every: Duration::from_secs(600),
            min_reprobe_gap: Duration::from_secs(1),
            mss_hint: None,
            emtu: None,
        }
    }
}

/// A setting out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The probe cannot hold the header, or is smaller than the minimum.
    #[error("probe size {size} out of range ({min}..=65535)")]
    ProbeSize {
        /// The size asked for.
        size: u16,
        /// The least allowed.
        min: u16,
    },
    /// A setting that must be positive is zero.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// A setting above its limit.
    #[error("{name} is {value}, above the limit {max}")]
    TooLarge {
        /// The setting.
        name: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        max: u64,
    },
}

/// Where the current PMTU came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PmtuSource {
    /// Measured by a probe: the largest fragment a responder reported.
    Probe,
    /// Fallback: the MSS hint plus TCP/IP headers, capped at the eMTU.
    MssHint,
    /// Fallback: the next hop's eMTU.
    Emtu,
    /// Fallback: [`CONSERVATIVE_MTU`].
    Conservative,
}

impl PmtuSource {
    /// Whether this is a fallback rather than a measurement.
    pub fn is_fallback(self) -> bool {
        self != PmtuSource::Probe
    }

    /// A short lowercase name (`probe`, `mss`, `emtu`, `conservative`).
    pub fn name(self) -> &'static str {
        match self {
            PmtuSource::Probe => "probe",
            PmtuSource::MssHint => "mss",
            PmtuSource::Emtu => "emtu",
            PmtuSource::Conservative => "conservative",
        }
    }
}

/// The outcome of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PmtuEstimate {
    /// The path MTU. From a probe, it is the largest fragment's IP length, which may be up to
    /// 7 bytes below the bottleneck MTU (fragments carry multiples of 8 bytes): conservative.
    pub mtu: u16,
    /// Where it came from.
    pub source: PmtuSource,
    /// The fragment sizes the responder listed (empty for a fallback).
    pub fragments: Vec<u16>,
    /// How many fragments the responder saw (it may list fewer).
    pub fragments_seen: u16,
    /// Probes sent in the round.
    pub probes: u32,
    /// Round trips until the answer: 1 when the first probe was answered, 2 for the second.
    /// 0 for a fallback.
    pub round_trips: u32,
    /// From the round's first probe to its end.
    pub elapsed: Duration,
    /// Reports ignored during the round (bad nonce, unknown probe, malformed).
    pub ignored_reports: u32,
}

/// A datagram to send: UDP payload `payload` to `dst` from the prober's socket, with DF clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// The responder's address and port.
    pub dst: SocketAddr,
    /// The IP packet size this payload makes (the probe size).
    pub size: u16,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

/// Why a received datagram did not end the round.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Not a well-formed report.
    #[error("malformed report: {0}")]
    Malformed(#[from] WireError),
    /// No round is in progress.
    #[error("no probe outstanding")]
    NotProbing,
    /// No outstanding probe has this id.
    #[error("report for unknown probe {0:#x}")]
    UnknownProbe(u32),
    /// The id matches but the nonce does not: spoofed or stale (SIGCOMM'26 §5.2 (d)).
    #[error("report for probe {0:#x} with a wrong nonce")]
    BadNonce(u32),
    /// Its largest fragment is below the IPv4 minimum or above the probe.
    #[error("implausible report: largest fragment {largest} for a {probe_size}-byte probe")]
    Implausible {
        /// The largest listed size.
        largest: u16,
        /// The probe's size.
        probe_size: u16,
    },
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    id: u32,
    nonce: u64,
}

#[derive(Debug)]
struct Round {
    started: Nanos,
    sent: Vec<Sent>,
    next_send: Option<Nanos>,
    deadline: Nanos,
    ignored: u32,
}

#[derive(Debug)]
enum State {
    /// Never started, or between rounds; `next` is when the next round is due.
    Idle {
        next: Option<Nanos>,
    },
    Probing(Round),
}

/// A source of unpredictable 64-bit nonces.
pub type NonceSource = Box<dyn FnMut() -> u64 + Send>;

/// Nonces from a keyed PRF: SipHash (std's `RandomState`, whose keys come from the OS's random
/// source) of a counter. Unpredictable to anyone who has not seen the key.
pub fn os_nonces() -> NonceSource {
    let key = RandomState::new();
    let mut counter = 0u64;
    Box::new(move || {
        counter = counter.wrapping_add(1);
        let mut h = key.build_hasher();
        h.write_u64(counter);
        h.finish()
    })
}

// The smallest probe holds an IPv6 header, a UDP header and the probe header.
const _: () = assert!(
    wire::MIN_PROBE_SIZE as usize >= 40 + crate::fragment::UDP_HEADER_LEN + wire::field::HEADER_LEN
);

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One destination's F-PMTUD prober (SIGCOMM'26 §5.2, HotNets'25 §4.2 "PMTU prober").
pub struct Prober {
    dst: SocketAddr,
    cfg: ProberConfig,
    state: State,
    nonces: NonceSource,
    next_id: u32,
    last_start: Option<Nanos>,
    estimate: Option<PmtuEstimate>,
}

impl std::fmt::Debug for Prober {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prober")
            .field("dst", &self.dst)
            .field("cfg", &self.cfg)
            .field("state", &self.state)
            .field("estimate", &self.estimate)
            .finish_non_exhaustive()
    }
}

impl Prober {
    /// A prober for `dst` with nonces from [`os_nonces`].
    pub fn new(dst: IpAddr, cfg: ProberConfig) -> Result<Self, ConfigError> {
        Self::with_nonces(dst, cfg, os_nonces())
    }

    /// A prober with the given nonce source (tests inject a deterministic one).
    pub fn with_nonces(
        dst: IpAddr,
        cfg: ProberConfig,
        mut nonces: NonceSource,
    ) -> Result<Self, ConfigError> {
        // 576 leaves room for the IPv6 header, UDP header and probe header alike.
        let min = wire::MIN_PROBE_SIZE;
        if cfg.probe_size < min {
            return Err(ConfigError::ProbeSize {
                size: cfg.probe_size,
                min,
            });
        }
        if cfg.probes_per_round == 0 {
            return Err(ConfigError::Zero("probes_per_round"));
        }
        if cfg.probes_per_round > 16 {
            return Err(ConfigError::TooLarge {
                name: "probes_per_round",
                value: u64::from(cfg.probes_per_round),
                max: 16,
            });
        }
        if cfg.timeout.is_zero() {
            return Err(ConfigError::Zero("timeout"));
        }
        if cfg.reprobe_every.is_zero() {
            return Err(ConfigError::Zero("reprobe_every"));
        }
        // Start ids at a random point so two probers (or restarts) do not share ids.
        let next_id = nonces() as u32;
        Ok(Self {
            dst: SocketAddr::new(dst, cfg.port),
            cfg,
            state: State::Idle { next: None },
            nonces,
            next_id,
            last_start: None,
            estimate: None,
        })
    }

    /// The responder's address.
    pub fn destination(&self) -> SocketAddr {
        self.dst
    }

    /// The settings.
    pub fn config(&self) -> &ProberConfig {
        &self.cfg
    }

    /// The current PMTU: measured, or the fallback after a failed round; `None` before the
    /// first round ends.
    pub fn pmtu(&self) -> Option<u16> {
        self.estimate.as_ref().map(|e| e.mtu)
    }

    /// The last round's outcome.
    pub fn estimate(&self) -> Option<&PmtuEstimate> {
        self.estimate.as_ref()
    }

    /// Whether a round is in progress.
    pub fn is_probing(&self) -> bool {
        matches!(self.state, State::Probing(_))
    }

    /// Updates the MSS hint (pxgw learns it from handshakes).
    pub fn set_mss_hint(&mut self, mss: Option<u16>) {
        self.cfg.mss_hint = mss;
    }

    /// The fallback PMTU and its source: MSS hint + headers (capped at the eMTU), else eMTU,
    /// else [`CONSERVATIVE_MTU`].
    pub fn fallback(&self) -> (u16, PmtuSource) {
        let overhead = match self.dst.ip() {
            IpAddr::V4(_) => TCP_IPV4_OVERHEAD,
            IpAddr::V6(_) => TCP_IPV6_OVERHEAD,
        };
        match (self.cfg.mss_hint, self.cfg.emtu) {
            (Some(mss), emtu) => {
                let mtu = mss.saturating_add(overhead);
                (emtu.map_or(mtu, |e| mtu.min(e)), PmtuSource::MssHint)
            }
            (None, Some(emtu)) => (emtu, PmtuSource::Emtu),
            (None, None) => (CONSERVATIVE_MTU, PmtuSource::Conservative),
        }
    }

    /// Starts a round now, unless one is in progress; returns the first probe.
    pub fn start(&mut self, now: Nanos) -> Vec<Transmit> {
        if self.is_probing() {
            return Vec::new();
        }
        let interval = nanos(self.cfg.interval);
        let extra = u64::from(self.cfg.probes_per_round - 1);
        let mut round = Round {
            started: now,
            sent: Vec::with_capacity(usize::from(self.cfg.probes_per_round)),
            next_send: (extra > 0).then(|| now.saturating_add(interval)),
            deadline: now
                .saturating_add(interval.saturating_mul(extra))
                .saturating_add(nanos(self.cfg.timeout)),
            ignored: 0,
        };
        let tx = self.make_probe(&mut round);
        self.state = State::Probing(round);
        self.last_start = Some(now);
        vec![tx]
    }

    fn make_probe(&mut self, round: &mut Round) -> Transmit {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let nonce = (self.nonces)();
        let size = self.cfg.probe_size;
        let udp_len = usize::from(size - ip_header_len(&self.dst.ip()));
        let mut payload = vec![0; udp_len - crate::fragment::UDP_HEADER_LEN];
        // The size was checked in `with_nonces`, so the header fits.
        let _ = Probe {
            probe_id: id,
            nonce,
            size,
        }
        .emit(&mut payload);
        round.sent.push(Sent { id, nonce });
        Transmit {
            dst: self.dst,
            size,
            payload,
        }
    }

    /// Advances time: sends a round's next probe when due, ends a round that timed out (with
    /// the fallback), and starts a round when re-probing is due.
    pub fn poll(&mut self, now: Nanos) -> Vec<Transmit> {
        match &mut self.state {
            State::Idle { next: Some(at) } if *at <= now => self.start(now),
            State::Idle { .. } => Vec::new(),
            State::Probing(round) => {
                if now >= round.deadline {
                    let round = std::mem::replace(&mut self.state, State::Idle { next: None });
                    if let State::Probing(round) = round {
                        self.fail(round, now);
                    }
                    return Vec::new();
                }
                match round.next_send {
                    Some(at) if at <= now => {
                        let mut round =
                            match std::mem::replace(&mut self.state, State::Idle { next: None }) {
                                State::Probing(r) => r,
                                State::Idle { .. } => return Vec::new(),
                            };
                        let tx = self.make_probe(&mut round);
                        round.next_send = (round.sent.len()
                            < usize::from(self.cfg.probes_per_round))
                        .then(|| at.saturating_add(nanos(self.cfg.interval)));
                        self.state = State::Probing(round);
                        vec![tx]
                    }
                    _ => Vec::new(),
                }
            }
        }
    }

    /// When [`Prober::poll`] next has something to do.
    pub fn next_timeout(&self) -> Option<Nanos> {
        match &self.state {
            State::Idle { next } => *next,
            State::Probing(r) => Some(r.next_send.map_or(r.deadline, |s| s.min(r.deadline))),
        }
    }

    fn fail(&mut self, round: Round, now: Nanos) {
        let (mtu, source) = self.fallback();
        tracing::debug!(dst = %self.dst, mtu, source = source.name(), "F-PMTUD round timed out");
        self.estimate = Some(PmtuEstimate {
            mtu,
            source,
            fragments: Vec::new(),
            fragments_seen: 0,
            probes: round.sent.len() as u32,
            round_trips: 0,
            elapsed: Duration::from_nanos(now.saturating_sub(round.started)),
            ignored_reports: round.ignored,
        });
        self.state = State::Idle {
            next: Some(now.saturating_add(nanos(self.cfg.reprobe_every))),
        };
    }

    /// Handles a datagram received on the prober's socket. A report echoing an outstanding
    /// probe's id and nonce ends the round and returns the new estimate; anything else is
    /// ignored, counted, and explained by the error.
    pub fn on_report(&mut self, bytes: &[u8], now: Nanos) -> Result<&PmtuEstimate, ReportError> {
        let State::Probing(round) = &mut self.state else {
            return Err(ReportError::NotProbing);
        };
        let verdict = judge(round, bytes, self.cfg.probe_size);
        let (index, report) = match verdict {
            Ok(v) => v,
            Err(e) => {
                round.ignored += 1;
                tracing::debug!(dst = %self.dst, error = %e, "ignored F-PMTUD report");
                return Err(e);
            }
        };
        let largest = report.largest().unwrap_or(0);
        let estimate = PmtuEstimate {
            // Whole probe: the probe size; fragmented: the largest fragment (never above the
            // probe, checked in `judge`).
            mtu: largest,
            source: PmtuSource::Probe,
            fragments_seen: report.fragments_seen,
            fragments: report.sizes,
            probes: round.sent.len() as u32,
            round_trips: index as u32 + 1,
            elapsed: Duration::from_nanos(now.saturating_sub(round.started)),
            ignored_reports: round.ignored,
        };
        self.state = State::Idle {
            next: Some(now.saturating_add(nanos(self.cfg.reprobe_every))),
        };
        Ok(self.estimate.insert(estimate))
    }

    /// A PTB (ICMP "fragmentation needed" / "packet too big") or other hint that the path
    /// changed: re-probe as soon as [`ProberConfig::min_reprobe_gap`] allows. The hint's MTU
    /// value is not trusted (ICMP is easy to spoof); the probe measures.
    pub fn on_ptb_hint(&mut self, now: Nanos) {
        if let State::Idle { next } = &mut self.state {
            let earliest = self
                .last_start
                .map_or(now, |s| s.saturating_add(nanos(self.cfg.min_reprobe_gap)))
                .max(now);
            *next = Some(next.map_or(earliest, |n| n.min(earliest)));
        }
    }
}

fn judge(round: &Round, bytes: &[u8], probe_size: u16) -> Result<(usize, Report), ReportError> {
    let report = Report::parse(bytes)?;
    let Some(index) = round.sent.iter().position(|s| s.id == report.probe_id) else {
        return Err(ReportError::UnknownProbe(report.probe_id));
    };
    if round.sent[index].nonce != report.nonce {
        return Err(ReportError::BadNonce(report.probe_id));
    }
    let largest = report.largest().unwrap_or(0);
    if !(MIN_IPV4_MTU..=probe_size).contains(&largest) {
        return Err(ReportError::Implausible {
            largest,
            probe_size,
        });
    }
    Ok((index, report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const MS: u64 = 1_000_000;

    fn prober(cfg: ProberConfig) -> Prober {
        let mut n = 0u64;
        Prober::with_nonces(
            IpAddr::V4(Ipv4Addr::new(198, 18, 2, 2)),
            cfg,
            Box::new(move || {
                n = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
                n
            }),
        )
        .unwrap()
    }

    fn answer(tx: &Transmit, sizes: &[u16]) -> Vec<u8> {
        let probe = Probe::parse(&tx.payload).unwrap();
        Report {
            probe_id: probe.probe_id,
            nonce: probe.nonce,
            fragments_seen: sizes.len() as u16,
            sizes: sizes.to_vec(),
        }
        .to_bytes()
        .unwrap()
    }

    fn cfg9000() -> ProberConfig {
        ProberConfig {
            probe_size: 9000,
            ..ProberConfig::default()
        }
    }

    #[test]
    fn probe_is_sized_to_the_emtu() {
        let mut p = prober(cfg9000());
        let tx = p.start(0);
        assert_eq!(tx.len(), 1);
        assert_eq!(tx[0].payload.len(), 9000 - 20 - 8);
        assert_eq!(tx[0].size, 9000);
        assert_eq!(tx[0].dst.port(), 4689);
        assert_eq!(Probe::parse(&tx[0].payload).unwrap().size, 9000);
    }

    #[test]
    fn one_round_trip_gives_the_largest_fragment() {
        let mut p = prober(cfg9000());
        let tx = p.start(0);
        let e = p
            .on_report(
                &answer(&tx[0], &[1396, 1396, 1396, 1396, 1396, 1396, 744]),
                5 * MS,
            )
            .unwrap()
            .clone();
        assert_eq!(e.mtu, 1396);
        assert_eq!(e.source, PmtuSource::Probe);
        assert_eq!((e.probes, e.round_trips), (1, 1));
        assert_eq!(e.elapsed, Duration::from_millis(5));
        assert_eq!(p.pmtu(), Some(1396));
        // The second probe is not sent once the first was answered.
        assert!(p.poll(100 * MS).is_empty());
        assert!(!p.is_probing());
    }

    #[test]
    fn unfragmented_probe_gives_the_probe_size() {
        let mut p = prober(ProberConfig::default());
        let tx = p.start(0);
        assert_eq!(p.on_report(&answer(&tx[0], &[1500]), MS).unwrap().mtu, 1500);
    }

    #[test]
    fn second_probe_covers_the_loss_of_the_first() {
        let mut p = prober(cfg9000());
        let first = p.start(0);
        assert!(p.poll(99 * MS).is_empty());
        let second = p.poll(100 * MS);
        assert_eq!(second.len(), 1);
        assert_ne!(first[0].payload[..20], second[0].payload[..20]);
        // Only two probes per round.
        assert!(p.poll(200 * MS).is_empty());
        let e = p
            .on_report(&answer(&second[0], &[1500, 1500]), 130 * MS)
            .unwrap();
        assert_eq!((e.probes, e.round_trips, e.mtu), (2, 2, 1500));
    }

    #[test]
    fn spoofed_and_stale_reports_are_ignored() {
        let mut p = prober(cfg9000());
        let tx = p.start(0);
        let mut forged = answer(&tx[0], &[9000]);
        forged[wire::field::NONCE.start] ^= 1;
        assert!(matches!(
            p.on_report(&forged, MS),
            Err(ReportError::BadNonce(_))
        ));
        let mut unknown = answer(&tx[0], &[9000]);
        unknown[wire::field::PROBE_ID.end - 1] ^= 0x55;
        assert!(matches!(
            p.on_report(&unknown, MS),
            Err(ReportError::UnknownProbe(_))
        ));
        assert!(matches!(
            p.on_report(b"hello", MS),
            Err(ReportError::Malformed(_))
        ));
        assert!(matches!(
            p.on_report(&answer(&tx[0], &[9001]), MS),
            Err(ReportError::Implausible { .. })
        ));
        assert!(matches!(
            p.on_report(&answer(&tx[0], &[40]), MS),
            Err(ReportError::Implausible { .. })
        ));
        assert!(p.is_probing());
        let e = p.on_report(&answer(&tx[0], &[1396, 744]), 2 * MS).unwrap();
        assert_eq!((e.mtu, e.ignored_reports), (1396, 5));
        // A replay after the round ended does nothing.
        assert_eq!(
            p.on_report(&answer(&tx[0], &[9000]), 3 * MS),
            Err(ReportError::NotProbing)
        );
        assert_eq!(p.pmtu(), Some(1396));
    }

    #[test]
    fn timeout_falls_back_mss_then_emtu_then_conservative() {
        let cases = [
            (Some(1360), Some(1500), 1400, PmtuSource::MssHint),
            (Some(8960), Some(1500), 1500, PmtuSource::MssHint),
            (None, Some(1500), 1500, PmtuSource::Emtu),
            (None, None, CONSERVATIVE_MTU, PmtuSource::Conservative),
        ];
        for (mss, emtu, mtu, source) in cases {
            let mut p = prober(ProberConfig {
                mss_hint: mss,
                emtu,
                ..cfg9000()
            });
            p.start(0);
            p.poll(100 * MS);
            // Deadline: the last probe (100 ms) + the timeout (1 s).
            assert!(p.poll(1099 * MS).is_empty());
            assert!(p.is_probing());
            assert_eq!(p.next_timeout(), Some(1100 * MS));
            p.poll(1100 * MS);
            let e = p.estimate().unwrap();
            assert_eq!((e.mtu, e.source), (mtu, source), "{mss:?} {emtu:?}");
            assert_eq!((e.probes, e.round_trips), (2, 0));
            assert!(e.source.is_fallback());
        }
    }

    #[test]
    fn reprobes_periodically_and_on_ptb() {
        let mut p = prober(ProberConfig::default());
        let tx = p.start(0);
        p.on_report(&answer(&tx[0], &[1500]), MS).unwrap();
        assert_eq!(p.next_timeout(), Some(MS + 600_000 * MS));
        assert!(p.poll(599_000 * MS).is_empty());
        assert_eq!(p.poll(600_001 * MS).len(), 1);
        let tx = p.poll(600_101 * MS);
        p.on_report(&answer(&tx[0], &[1400]), 600_102 * MS).unwrap();
        assert_eq!(p.pmtu(), Some(1400));
        // A PTB hint brings the next round forward, but not closer than min_reprobe_gap to the
        // last round's start (600_001 ms).
        p.on_ptb_hint(600_200 * MS);
        assert_eq!(p.next_timeout(), Some(601_001 * MS));
        assert_eq!(p.poll(601_001 * MS).len(), 1);
        // During a round, hints change nothing.
        p.on_ptb_hint(601_002 * MS);
        assert!(p.is_probing());
    }

    #[test]
    fn bad_settings_are_refused() {
        let dst = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let e = Prober::new(
            dst,
            ProberConfig {
                probe_size: 100,
                ..ProberConfig::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e,
            ConfigError::ProbeSize {
                size: 100,
                min: 576
            }
        );
        assert!(e.to_string().contains("576"));
        assert_eq!(
            Prober::new(
                dst,
                ProberConfig {
                    probes_per_round: 0,
                    ..ProberConfig::default()
                }
            )
            .unwrap_err(),
            ConfigError::Zero("probes_per_round")
        );
    }

    #[test]
    fn os_nonces_differ() {
        let mut n = os_nonces();
        let (a, b) = (n(), n());
        assert_ne!(a, b);
    }
}
