//! The endpoint daemon: answers probes to this host (HotNets'25 §4.2 "F-PMTUD daemon").
//!
//! Two sockets: a UDP socket bound to the probe port, and a [`Capture`] of probe fragments.
//! The capture feeds a [`FragmentTracker`], which yields each probe with its fragment sizes.
//! The UDP socket receives the same probe once the kernel has reassembled it and verified its
//! checksum, which proves it was addressed to this host (a router running the daemon does not
//! answer probes it merely forwards); it also sends the report, from the probe port. A probe is
//! answered once both have seen it: same source, source port, probe id and nonce.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::capture::Capture;
use super::EndpointError;
use crate::fragment::{FragmentTracker, ProbeRecord, TrackerConfig, TrackerStats};
use crate::responder::{Responder, ResponderConfig, ResponderStats};
use crate::wire::{self, Probe};
use crate::Nanos;

/// How long one half of a probe (captured, or received by the UDP socket) waits for the other.
const RENDEZVOUS: Nanos = 1_000_000_000;
/// Probes waiting for their other half, at most, per half.
const MAX_WAITING: usize = 1024;

/// Settings of the endpoint daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// Address to bind the UDP socket to: `::` (the default) takes IPv4 and IPv6.
    pub bind: IpAddr,
    /// The probe port ([`wire::DEFAULT_PORT`]).
    pub port: u16,
    /// Rate limits and report size.
    pub responder: ResponderConfig,
    /// Fragment reassembly limits (its `port` is overridden by [`ServeConfig::port`]).
    pub tracker: TrackerConfig,
    /// Longest wait in one [`Server::step`].
    pub poll: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            bind: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            port: wire::DEFAULT_PORT,
            responder: ResponderConfig::default(),
            tracker: TrackerConfig::default(),
            poll: Duration::from_millis(50),
        }
    }
}

/// Counters of a [`Server`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Reports sent.
    pub reports_sent: u64,
    /// Reports that could not be sent (socket error).
    pub send_errors: u64,
    /// Datagrams on the probe port that were not probes.
    pub not_probes: u64,
    /// Probes seen by only one of the two sockets within the rendezvous time.
    pub unmatched: u64,
    /// The fragment tracker's counters.
    pub tracker: TrackerStats,
    /// The responder's counters.
    pub responder: ResponderStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProbeKey {
    src: IpAddr,
    src_port: u16,
    probe_id: u32,
    nonce: u64,
}

/// The endpoint daemon (`fpmtud serve`).
#[derive(Debug)]
pub struct Server {
    udp: UdpSocket,
    dual_stack: bool,
    capture: Capture,
    tracker: FragmentTracker,
    responder: Responder,
    /// Captured probes waiting for the UDP socket's copy.
    captured: HashMap<ProbeKey, (ProbeRecord, Nanos)>,
    /// Probes the UDP socket received, waiting for their capture.
    delivered: HashMap<ProbeKey, Nanos>,
    epoch: Instant,
    stats: ServerStats,
    /// Receive buffer, reused across steps.
    buf: Vec<u8>,
}

fn bind_udp(bind: IpAddr, port: u16) -> io::Result<(UdpSocket, bool)> {
    let addr = SocketAddr::new(bind, port);
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let dual = bind.is_ipv6() && bind.is_unspecified();
    if dual {
        socket.set_only_v6(false)?;
    }
    socket.bind(&SockAddr::from(addr))?;
    socket.set_nonblocking(true)?;
    Ok((socket.into(), dual))
}

impl Server {
    /// Binds the UDP socket (falling back from `::` to `0.0.0.0` where IPv6 is off) and opens
    /// the capture. Needs `CAP_NET_RAW`.
    pub fn bind(cfg: ServeConfig) -> Result<Self, EndpointError> {
        let responder = Responder::new(cfg.responder.clone())?;
        let (udp, dual_stack) = match bind_udp(cfg.bind, cfg.port) {
            Ok(s) => s,
            Err(e) if cfg.bind == IpAddr::V6(Ipv6Addr::UNSPECIFIED) => {
                tracing::debug!(error = %e, "no IPv6, binding 0.0.0.0");
                bind_udp(IpAddr::V4(Ipv4Addr::UNSPECIFIED), cfg.port)
                    .map_err(EndpointError::io(format!("bind UDP port {}", cfg.port)))?
            }
            Err(e) => {
                return Err(EndpointError::Io {
                    what: format!("bind UDP {}", SocketAddr::new(cfg.bind, cfg.port)),
                    source: e,
                })
            }
        };
        let capture = Capture::open(cfg.port, cfg.poll).map_err(EndpointError::io(
            "open the AF_PACKET fragment capture (needs CAP_NET_RAW)",
        ))?;
        let tracker = FragmentTracker::new(TrackerConfig {
            port: cfg.port,
            ..cfg.tracker
        });
        Ok(Self {
            udp,
            dual_stack,
            capture,
            tracker,
            responder,
            captured: HashMap::new(),
            delivered: HashMap::new(),
            epoch: Instant::now(),
            stats: ServerStats::default(),
            buf: vec![0; 65536],
        })
    }

    /// The UDP socket's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.udp.local_addr()
    }

    /// Counters so far.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            tracker: self.tracker.stats(),
            responder: self.responder.stats(),
            ..self.stats
        }
    }

    fn now(&self) -> Nanos {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Serves until `stop` is set; returns the final counters.
    pub fn run_until(&mut self, stop: &AtomicBool) -> Result<ServerStats, EndpointError> {
        while !stop.load(Ordering::Relaxed) {
            self.step()?;
        }
        Ok(self.stats())
    }

    /// One turn: waits up to the poll time for a captured packet, drains the UDP socket,
    /// answers matched probes and expires stale state.
    pub fn step(&mut self) -> Result<(), EndpointError> {
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.step_with(&mut buf);
        self.buf = buf;
        result
    }

    fn step_with(&mut self, buf: &mut [u8]) -> Result<(), EndpointError> {
        let captured = self
            .capture
            .recv(buf)
            .map_err(EndpointError::io("read the fragment capture"))?;
        if let Some(packet) = captured {
            let now = self.now();
            match self.tracker.on_packet(packet, now) {
                Ok(Some(record)) => self.on_captured(record, now),
                Ok(None) => {}
                Err(e) => tracing::trace!(error = %e, "capture: not a probe fragment"),
            }
        }
        self.drain_udp(buf)?;
        let now = self.now();
        self.tracker.expire(now);
        let before = self.captured.len() + self.delivered.len();
        self.captured
            .retain(|_, (_, at)| now.saturating_sub(*at) <= RENDEZVOUS);
        self.delivered
            .retain(|_, at| now.saturating_sub(*at) <= RENDEZVOUS);
        self.stats.unmatched += (before - self.captured.len() - self.delivered.len()) as u64;
        Ok(())
    }

    fn on_captured(&mut self, record: ProbeRecord, now: Nanos) {
        let Ok(probe) = Probe::parse(&record.head) else {
            self.stats.not_probes += 1;
            return;
        };
        let key = ProbeKey {
            src: record.src,
            src_port: record.src_port,
            probe_id: probe.probe_id,
            nonce: probe.nonce,
        };
        if self.delivered.remove(&key).is_some() {
            self.answer(&record, now);
        } else if self.captured.len() < MAX_WAITING {
            self.captured.insert(key, (record, now));
        }
    }

    fn drain_udp(&mut self, buf: &mut [u8]) -> Result<(), EndpointError> {
        loop {
            let (n, from) = match self.udp.recv_from(buf) {
                Ok(r) => r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // ICMP errors for earlier reports surface here; they concern no probe.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(EndpointError::io("receive on the probe port")(e)),
            };
            let now = self.now();
            let Ok(probe) = Probe::parse(buf.get(..n).unwrap_or(&[])) else {
                self.stats.not_probes += 1;
                continue;
            };
            let key = ProbeKey {
                src: from.ip().to_canonical(),
                src_port: from.port(),
                probe_id: probe.probe_id,
                nonce: probe.nonce,
            };
            if let Some((record, _)) = self.captured.remove(&key) {
                self.answer(&record, now);
            } else if self.delivered.len() < MAX_WAITING {
                self.delivered.insert(key, now);
            }
        }
    }

    fn answer(&mut self, record: &ProbeRecord, now: Nanos) {
        let report = match self.responder.on_record(record, now) {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(src = %record.src, error = %e, "probe not answered");
                return;
            }
        };
        let ip = match record.src {
            IpAddr::V4(v4) if self.dual_stack => IpAddr::V6(v4.to_ipv6_mapped()),
            other => other,
        };
        let to = SocketAddr::new(ip, record.src_port);
        match self.udp.send_to(&report, to) {
            Ok(_) => {
                self.stats.reports_sent += 1;
                tracing::info!(
                    src = %record.src,
                    fragments = ?record.fragments,
                    "answered F-PMTUD probe"
                );
            }
            Err(e) => {
                self.stats.send_errors += 1;
                tracing::warn!(%to, error = %e, "could not send F-PMTUD report");
            }
        }
    }
}
