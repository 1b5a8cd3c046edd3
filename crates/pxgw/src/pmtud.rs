//! F-PMTUD inside the gateway (SIGCOMM'26 §5.2):
//!
//! - **Prober:** when an inside host opens a connection to an outside destination whose path MTU
//!   is not known, the gateway sends F-PMTUD probes (eMTU-sized, DF clear) toward it, on the
//!   inside host's behalf (it has no address of its own in transparent mode), and takes the
//!   report that comes back. The result goes into a [`PmtuCache`]: only non-default PMTUs are
//!   stored, and the counting Bloom filter keeps the per-packet lookup of every other destination
//!   off the table. A lowered path MTU (from F-PMTUD, a Packet Too Big or a black-hole
//!   fallback) lasts `pmtu.expire_s` from when it was lowered (RFC 1191 §6.3, RFC 8201 §4);
//!   then the destination has the eMTU again and its next connection probes it again.
//! - **Responder:** probes from outside that arrive for the inside network (fragmented on the way)
//!   are tracked by (source, destination, IP id) from the fragments seen on the port, and
//!   answered by the gateway with the fragment sizes. The fragments are still forwarded inside,
//!   untouched.
//!
//! With several workers, a probe must leave with a source port whose symmetric RSS hash selects
//! the same redirection-table entry as the connection that triggered it, so the report comes back
//! to the worker that probes ([`probe_source_port`], and the `worker` module's docs). The hash
//! uses the ports' own key ([`crate::rss`]).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::Context;
use fpmtud::{
    CacheConfig, FragmentTracker, PmtuCache, PmtuSource, Prober, ProberConfig, Responder,
    ResponderConfig, TrackerConfig,
};
use pxio::toeplitz::Toeplitz;
use pxio::wire::{self, Headers};

use crate::config::Config;
use crate::rss::SymmetricKey;

/// Destinations probed at once.
const MAX_PROBERS: usize = 256;
/// Destinations remembered as probed recently (their PMTU may be the default, which the cache
/// does not store).
const MAX_RECENT: usize = 4096;
/// How often [`PathMtu::poll`] removes expired path MTUs from the cache, at most.
const EXPIRE_EVERY_NS: u64 = 1_000_000_000;
/// Expiry records read per [`PathMtu::poll`] at most: a poll's cost stays bounded however many
/// entries fall due at once (the rest go on the next polls).
const EXPIRE_BUDGET: usize = 256;
/// The gateway's probes leave from this UDP port of the inside host, or from the first port above
/// it that keeps the probe on the prober's worker (reports come back to it).
pub const PROBE_SOURCE_PORT: u16 = 4690;
/// Source ports tried above [`PROBE_SOURCE_PORT`] for one with the prober's RSS hash bits.
const PROBE_PORT_SEARCH: u16 = 8192;
/// Hash bits a probe shares with its connection: a redirection table of up to 512 entries is
/// indexed by the hash's low 9 bits, so the same bits pick the same entry, whatever it holds.
const RETA_INDEX_MASK: u32 = 0x1ff;
const ETH: usize = wire::ethernet::field::HEADER_LEN;
const IPV4: usize = wire::ipv4::field::HEADER_LEN;
const UDP: usize = wire::udp::field::HEADER_LEN;

/// Counters (declared with the others in [`crate::stats`]).
pub use crate::stats::PmtudSummary;

/// A path MTU the gateway's own probing discovered.
#[derive(Clone, Copy, Debug, serde::Serialize, PartialEq, Eq)]
pub struct DiscoveredPath {
    /// The outside destination probed.
    pub destination: IpAddr,
    /// Its path MTU: the largest fragment its responder saw (on the 8-byte grid).
    pub pmtu: u16,
}

/// Discoveries listed in the statistics, per worker (the most recent).
const MAX_LISTED_PATHS: usize = 64;

struct Probe {
    prober: Prober,
    /// Destination and source MAC of the frames toward the destination.
    macs: [u8; 12],
    /// The inside host on whose behalf the gateway probes.
    src: Ipv4Addr,
    /// The probes' UDP source port, where reports come back.
    sport: u16,
}

/// What [`PathMtu::new`] needs.
#[derive(Clone, Debug, PartialEq)]
pub struct PathMtuConfig {
    /// The external MTU: the path MTU of destinations with nothing learned.
    pub emtu: u16,
    /// The F-PMTUD UDP port.
    pub port: u16,
    /// Probe new outside destinations.
    pub probe: bool,
    /// Answer probes that arrive for the inside network.
    pub respond: bool,
    /// How long a lowered path MTU lasts, from when it was lowered; also how soon a destination
    /// is probed again.
    pub expire: Duration,
    /// The responder's rate limits.
    pub responder: ResponderConfig,
    /// The ports' RSS key (probe source ports must hash as the NIC does).
    pub rss_key: SymmetricKey,
}

impl Default for PathMtuConfig {
    fn default() -> Self {
        Self {
            emtu: 1500,
            port: fpmtud::DEFAULT_PORT,
            probe: true,
            respond: true,
            expire: Duration::from_secs(600),
            responder: ResponderConfig::default(),
            rss_key: SymmetricKey::default(),
        }
    }
}

impl PathMtuConfig {
    /// The settings `cfg` gives (`[pmtu]`, the external MTU, `[rss] key`).
    pub fn of(cfg: &Config) -> anyhow::Result<Self> {
        let global = cfg.pmtu.respond_per_sec;
        Ok(Self {
            emtu: cfg.emtu(),
            port: cfg.pmtu.port,
            probe: cfg.pmtu.probe,
            respond: cfg.pmtu.respond,
            expire: Duration::from_secs(cfg.pmtu.expire_s),
            responder: ResponderConfig {
                global_rate_per_sec: global,
                global_burst: ResponderConfig::default().global_burst.min(global),
                ..ResponderConfig::default()
            },
            rss_key: cfg.rss.key().context("rss.key")?,
        })
    }
}

/// The gateway's F-PMTUD state, one per worker.
pub struct PathMtu {
    cache: PmtuCache<IpAddr>,
    probers: HashMap<IpAddr, Probe>,
    /// When each destination was last probed.
    recent: HashMap<IpAddr, u64>,
    /// How long before a destination is probed again: the cache's age limit, so a destination
    /// whose lowered PMTU expired is probed on its next connection.
    reprobe_ns: u64,
    /// The earliest time [`PathMtu::poll`] removes expired entries again.
    expire_at: u64,
    /// The earliest time a prober may need [`PathMtu::poll`] (0: look at them all again, after
    /// one started or took a report): polls between bursts cost a comparison until then.
    probe_due: u64,
    /// The destinations whose probers are due (kept, so a poll allocates nothing).
    due: Vec<IpAddr>,
    tracker: FragmentTracker,
    responder: Responder,
    /// The ports' RSS hash (symmetric key), to keep probes on this worker.
    toeplitz: Toeplitz,
    probe: bool,
    respond: bool,
    emtu: u16,
    port: u16,
    ident: u16,
    summary: PmtudSummary,
    /// The most recent discoveries, for the statistics.
    paths: Vec<DiscoveredPath>,
}

impl PathMtu {
    /// F-PMTUD as `cfg` says: for a gateway whose external MTU is `emtu`, probing (`probe`) and
    /// answering (`respond`) on UDP `port`.
    pub fn new(cfg: PathMtuConfig) -> anyhow::Result<Self> {
        let PathMtuConfig {
            emtu,
            port,
            probe,
            respond,
            expire,
            responder,
            rss_key,
        } = cfg;
        Ok(Self {
            cache: PmtuCache::new(CacheConfig {
                default_pmtu: emtu,
                max_age: expire,
                ..CacheConfig::default()
            })?,
            probers: HashMap::with_capacity(MAX_PROBERS),
            recent: HashMap::with_capacity(MAX_RECENT),
            reprobe_ns: u64::try_from(expire.as_nanos()).unwrap_or(u64::MAX),
            expire_at: 0,
            probe_due: u64::MAX,
            due: Vec::with_capacity(MAX_PROBERS),
            tracker: FragmentTracker::new(TrackerConfig {
                port,
                timeout: Duration::from_secs(2),
                max_datagrams: 1024,
                max_fragments: 256,
            }),
            responder: Responder::new(responder)?,
            toeplitz: rss_key.toeplitz(),
            probe,
            respond,
            emtu,
            port,
            ident: 1,
            summary: PmtudSummary::default(),
            paths: Vec::new(),
        })
    }

    /// [`PathMtu::new`] with the settings of `cfg` ([`PathMtuConfig::of`]).
    pub fn from_config(cfg: &Config) -> anyhow::Result<Self> {
        Self::new(PathMtuConfig::of(cfg)?)
    }

    /// The F-PMTUD UDP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The counters.
    pub fn summary(&self) -> PmtudSummary {
        let r = self.responder.stats();
        PmtudSummary {
            cached: self.cache.len() as u64,
            respond_source_limited: r.source_limited,
            respond_global_limited: r.global_limited,
            ..self.summary
        }
    }

    /// The most recent path MTUs discovered by probing (at most 64), oldest first.
    pub fn paths(&self) -> &[DiscoveredPath] {
        &self.paths
    }

    /// The path MTU toward `dst`: a discovered value, or the eMTU.
    pub fn pmtu(&mut self, dst: IpAddr, now: u64) -> u16 {
        self.cache.lookup(&dst, now)
    }

    /// The earliest time a prober, or the expiry of a lowered path MTU, needs
    /// [`poll`](Self::poll).
    pub fn next_deadline(&self) -> Option<u64> {
        let expiry = self.cache.next_due().map(|due| due.max(self.expire_at));
        self.probers
            .values()
            .filter_map(|p| p.prober.next_timeout())
            .chain(expiry)
            .min()
    }

    /// Caps the path MTU toward `dst` at `mtu` (learned from a Packet Too Big, F-PMTUD, or a
    /// black-hole fallback); true when that lowered it. A lowered value lasts `expire` from
    /// now: a later, lower one starts its age again; the same or a higher one changes nothing.
    pub fn cap(&mut self, dst: IpAddr, mtu: u16, now: u64) -> bool {
        if mtu >= self.cache.lookup(&dst, now) {
            return false;
        }
        self.cache.insert(dst, mtu, now).is_ok()
    }

    /// Whether a UDP datagram from port `sport` to `dport` is one of the gateway's own probes: an
    /// ICMP error quoting it is for the gateway, not for the inside host whose address the probe
    /// wore (an outside host without a responder answers with port unreachable). The test is on
    /// the ports alone (a probe source port, the F-PMTUD port) while probing is on, so it holds
    /// whichever worker the error reaches: the worker that probed may not be the one RSS gives
    /// the ICMP message to. An inside host's own datagrams from those source ports to the
    /// F-PMTUD port (its own prober pinned there) would have their errors consumed too.
    pub fn is_own_probe(&self, sport: u16, dport: u16) -> bool {
        self.probe
            && dport == self.port
            && (PROBE_SOURCE_PORT..PROBE_SOURCE_PORT.saturating_add(PROBE_PORT_SEARCH))
                .contains(&sport)
    }

    /// An inside host's SYN toward `h.key.dst`: probe that destination if its PMTU is unknown.
    /// Only a connection the inside host opens (SYN without ACK) leads to a probe: a SYN-ACK
    /// answers an outside host, which probes on its side. Probe frames are appended to `out`
    /// (they go outside).
    pub fn on_outbound_syn(&mut self, frame: &[u8], h: &Headers, now: u64, out: &mut Vec<Vec<u8>>) {
        if !self.probe || h.key.v6 || h.l2_len as usize != ETH || self.probers.len() >= MAX_PROBERS
        {
            return;
        }
        let opening =
            wire::TcpPacket::new_checked(&frame[h.l4_offset()..h.hdr_len()]).is_ok_and(|t| {
                t.flags() & (wire::tcp_flags::SYN | wire::tcp_flags::ACK) == wire::tcp_flags::SYN
            });
        if !opening {
            return;
        }
        let dst = IpAddr::V4(Ipv4Addr::from(four(&h.key.dst)));
        let reprobe = self.reprobe_ns;
        let recently = self
            .recent
            .get(&dst)
            .is_some_and(|&t| now.saturating_sub(t) < reprobe);
        if recently || self.probers.contains_key(&dst) || self.cache.get(&dst, now).is_some() {
            return;
        }
        if self.recent.len() >= MAX_RECENT {
            self.recent.retain(|_, t| now.saturating_sub(*t) < reprobe);
            if self.recent.len() >= MAX_RECENT {
                self.recent.clear();
            }
        }
        self.recent.insert(dst, now);
        let cfg = ProberConfig {
            port: self.port,
            probe_size: self.emtu,
            emtu: Some(self.emtu),
            ..ProberConfig::default()
        };
        let Ok(mut prober) = Prober::new(dst, cfg) else {
            return;
        };
        let mut macs = [0u8; 12];
        macs.copy_from_slice(&frame[..12]);
        let src = Ipv4Addr::from(four(&h.key.src));
        let sport = probe_source_port(&self.toeplitz, h, self.port);
        self.summary.probed += 1;
        let tx = prober.start(now);
        self.send_probes(tx, macs, src, sport, dst, out);
        let probe = Probe {
            prober,
            macs,
            src,
            sport,
        };
        self.probers.insert(dst, probe);
        self.probe_due = 0;
    }

    /// A frame from outside. Returns true when it was for the gateway itself (a report to one of
    /// its probes) and must not be forwarded. Probes for the inside network are answered into
    /// `out` (frames going outside) and still forwarded.
    pub fn on_inbound(&mut self, frame: &[u8], now: u64, out: &mut Vec<Vec<u8>>) -> bool {
        self.on_inbound_parsed(frame, &wire::Parsed::of(frame, frame.len()), now, out)
    }

    /// [`on_inbound`](Self::on_inbound) for a frame whose parse the pipeline already has
    /// (one parse per packet). The parse is trusted only when it fits `frame` (one
    /// segment, all of it: [`wire::Parsed::fits`]); otherwise the frame is classified again, so
    /// a stale parse, or another packet's of another length, never decides whether a frame is
    /// a report.
    pub fn on_inbound_parsed(
        &mut self,
        frame: &[u8],
        parsed: &wire::Parsed,
        now: u64,
        out: &mut Vec<Vec<u8>>,
    ) -> bool {
        if frame.len() < ETH + IPV4
            || u16::from_be_bytes([frame[12], frame[13]]) != wire::ethernet::ethertype::IPV4
        {
            return false;
        }
        let ip = &frame[ETH..];
        let flags_offset = u16::from_be_bytes([ip[6], ip[7]]);
        if flags_offset & 0x3fff != 0 {
            // More fragments, or a non-zero offset.
            self.summary.fragments_in += 1;
        }
        // A report for one of our probes: UDP from the probe port to ours.
        let udp = parsed.or_fresh(frame, frame.len()).udp().copied();
        if let Some(h) = udp {
            let src = IpAddr::V4(Ipv4Addr::from(four(&h.key.src)));
            if h.key.sport == self.port {
                if let Some(p) = self
                    .probers
                    .get_mut(&src)
                    .filter(|p| p.sport == h.key.dport)
                {
                    let _ = p.prober.on_report(&frame[h.hdr_len()..h.frame_len()], now);
                    self.probe_due = 0;
                    self.finish_if_done(src, now);
                    return true;
                }
            }
        }
        if self.respond {
            if let Ok(Some(record)) = self.tracker.on_packet(ip, now) {
                if let (Ok(report), IpAddr::V4(prober), IpAddr::V4(us)) = (
                    self.responder.on_record(&record, now),
                    record.src,
                    record.dst,
                ) {
                    self.summary.answered += 1;
                    let mut macs = [0u8; 12];
                    macs[..6].copy_from_slice(&frame[6..12]);
                    macs[6..].copy_from_slice(&frame[..6]);
                    let ident = self.next_ident();
                    out.extend(udp_frame(
                        macs,
                        us,
                        prober,
                        self.port,
                        record.src_port,
                        &report,
                        0,
                        true,
                        ident,
                    ));
                }
            }
        }
        false
    }

    /// Drives the probers (second probes, timeouts and fallbacks; new probe frames go to `out`)
    /// and, at most once a second, forgets lowered path MTUs whose age is up (a bounded number
    /// per call). Called on every loop: what it does between those times is a comparison.
    pub fn poll(&mut self, now: u64, out: &mut Vec<Vec<u8>>) {
        if now >= self.expire_at {
            let e = self.cache.expire(now, EXPIRE_BUDGET);
            self.summary.expired += e.removed as u64;
            self.expire_at = if e.more {
                now
            } else {
                now.saturating_add(EXPIRE_EVERY_NS)
            };
        }
        if self.probers.is_empty() || now < self.probe_due {
            return;
        }
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        due.extend(
            self.probers
                .iter()
                .filter(|(_, p)| p.prober.next_timeout().is_some_and(|t| t <= now))
                .map(|(d, _)| *d),
        );
        for &dst in &due {
            let Some(p) = self.probers.get_mut(&dst) else {
                continue;
            };
            let tx = p.prober.poll(now);
            let (macs, src, sport) = (p.macs, p.src, p.sport);
            self.send_probes(tx, macs, src, sport, dst, out);
            self.finish_if_done(dst, now);
        }
        self.due = due;
        self.probe_due = self
            .probers
            .values()
            .filter_map(|p| p.prober.next_timeout())
            .min()
            .unwrap_or(u64::MAX);
        self.tracker.expire(now);
    }

    /// Frames for the prober's datagrams, from `src` (an inside host) to `dst`, DF clear.
    fn send_probes(
        &mut self,
        tx: Vec<fpmtud::Transmit>,
        macs: [u8; 12],
        src: Ipv4Addr,
        sport: u16,
        dst: IpAddr,
        out: &mut Vec<Vec<u8>>,
    ) {
        for t in tx {
            self.summary.probes_sent += 1;
            let ident = self.next_ident();
            out.extend(udp_frame(
                macs,
                src,
                dst_v4(&dst),
                sport,
                self.port,
                &t.payload,
                t.size,
                false,
                ident,
            ));
        }
    }

    fn finish_if_done(&mut self, dst: IpAddr, now: u64) {
        let Some(p) = self.probers.get(&dst) else {
            return;
        };
        if p.prober.is_probing() {
            return;
        }
        if let Some((probed, mtu)) = p
            .prober
            .estimate()
            .map(|e| (e.source == PmtuSource::Probe, e.mtu))
        {
            if probed {
                self.summary.discovered += 1;
                // Lowers only: a Packet Too Big that came during the round stands.
                self.cap(dst, mtu, now);
                if self.paths.len() >= MAX_LISTED_PATHS {
                    self.paths.remove(0);
                }
                self.paths.push(DiscoveredPath {
                    destination: dst,
                    pmtu: mtu,
                });
            } else {
                self.summary.fallbacks += 1;
            }
        }
        self.probers.remove(&dst);
    }

    fn next_ident(&mut self) -> u16 {
        self.ident = self.ident.wrapping_add(1);
        self.ident
    }
}

/// The UDP source port for probes triggered by the connection `h` (an inside host's SYN) toward
/// the responder's `port`: the first from [`PROBE_SOURCE_PORT`] up whose 4-tuple hash shares the
/// connection's redirection-table index (its low 9 bits), so the NIC delivers the connection
/// and the probe's report (hashed symmetrically) to the same queue, this worker's.
/// [`PROBE_SOURCE_PORT`] when none is found.
pub fn probe_source_port(toeplitz: &Toeplitz, h: &Headers, port: u16) -> u16 {
    let (src, dst) = (four(&h.key.src), four(&h.key.dst));
    let want = toeplitz.hash_v4(src, dst, h.key.sport, h.key.dport) & RETA_INDEX_MASK;
    (PROBE_SOURCE_PORT..PROBE_SOURCE_PORT.saturating_add(PROBE_PORT_SEARCH))
        .find(|&sport| toeplitz.hash_v4(src, dst, sport, port) & RETA_INDEX_MASK == want)
        .unwrap_or(PROBE_SOURCE_PORT)
}

fn four(a: &[u8; 16]) -> [u8; 4] {
    [a[0], a[1], a[2], a[3]]
}

fn dst_v4(a: &IpAddr) -> Ipv4Addr {
    match a {
        IpAddr::V4(v) => *v,
        IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    }
}

/// An Ethernet/IPv4/UDP frame carrying `payload`, padded with zeros so the IP packet is
/// `ip_size` bytes (0: no padding). `df` sets Don't Fragment (reports), clear for probes. `None`
/// only if the datagram would not fit in an IPv4 packet.
#[allow(clippy::too_many_arguments)]
fn udp_frame(
    macs: [u8; 12],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    dport: u16,
    payload: &[u8],
    ip_size: u16,
    df: bool,
    ident: u16,
) -> Option<Vec<u8>> {
    let padded = usize::from(ip_size)
        .saturating_sub(IPV4 + UDP)
        .max(payload.len());
    let mut body = payload.to_vec();
    body.resize(padded, 0);
    let (dst_mac, src_mac) = macs.split_at(6);
    let ethernet = wire::EthernetRepr {
        dst: dst_mac.try_into().ok()?,
        src: src_mac.try_into().ok()?,
        vlan_tci: None,
        ethertype: wire::ethernet::ethertype::IPV4,
    };
    let ip = wire::IpRepr::V4(wire::Ipv4Repr {
        ident,
        dont_frag: df,
        ..wire::Ipv4Repr::new(src.octets(), dst.octets())
    });
    let udp = wire::UdpRepr {
        src_port: sport,
        dst_port: dport,
    };
    wire::udp_frame(ethernet, ip, udp, &body).ok()
}
