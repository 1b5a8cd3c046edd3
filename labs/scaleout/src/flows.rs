//! The lab's traffic: TCP transfers between the outside and the inside host, each checked by
//! sha256 at both ends and timed read by read (to measure stalls), and a capture at the inside
//! host that measures the yield (the share of the inbound payload that arrives in iMTU-bound
//! packets, SIGCOMM'26 §7).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::Family;
use pnet_datalink::{Channel, Config as ChannelConfig};
use pxio::wire::{classify, Class};
use sha2::{Digest, Sha256};

use crate::topology::{ext_addr, int_addr, EcmpLab, IMTU};

/// Bytes per write.
const CHUNK: usize = 64 << 10;
/// How long a socket waits for the other end (failover makes TCP back off for seconds).
const PATIENCE: Duration = Duration::from_secs(60);
/// Read gaps shorter than this are not recorded.
const GAP_RECORDED: Duration = Duration::from_millis(20);
/// TCP timestamps, as Linux puts them on every segment.
const TCP_TIMESTAMPS: usize = 12;

/// A deterministic stream of pseudo-random bytes (xorshift64*), seeded per flow.
struct Stream(u64);

impl Stream {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// One transfer to run.
#[derive(Clone, Copy, Debug)]
pub struct FlowSpec {
    /// The IP family.
    pub family: Family,
    /// Outside → inside (the outside host connects and sends); else inside → outside (the
    /// inside host connects and sends).
    pub inbound: bool,
    /// The receiver's port.
    pub port: u16,
    /// Bytes to send.
    pub bytes: u64,
    /// Sending rate limit, bytes per second.
    pub pace: Option<u64>,
}

/// How a transfer ended.
#[derive(Clone, Debug)]
pub struct FlowResult {
    /// What was asked.
    pub spec: FlowSpec,
    /// Bytes written and read.
    pub sent: u64,
    /// Bytes the receiver read.
    pub received: u64,
    /// Same byte count and sha256 at both ends.
    pub sha_ok: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The inside host's sending MSS on this connection (`TCP_MAXSEG`): the MSS the outside
    /// peer's SYN or SYN-ACK carried after pxgw raised it, less options.
    pub inside_mss: u32,
    /// Gaps between the receiver's reads of at least 20 ms: (when the gap ended, its length).
    pub gaps: Vec<(Instant, Duration)>,
}

impl FlowResult {
    /// The longest gap between reads that ended after `t`: how long this connection stalled
    /// around an event at `t`.
    pub fn stall_after(&self, t: Instant) -> Duration {
        self.gaps
            .iter()
            .filter(|(end, _)| *end > t)
            .map(|(_, g)| *g)
            .max()
            .unwrap_or_default()
    }

    /// The longest gap between reads that ended before `t` (a baseline: pacing, scheduling).
    pub fn gap_before(&self, t: Instant) -> Duration {
        self.gaps
            .iter()
            .filter(|(end, _)| *end <= t)
            .map(|(_, g)| *g)
            .max()
            .unwrap_or_default()
    }
}

/// A transfer in flight.
pub struct Flow {
    spec: FlowSpec,
    sender: JoinHandle<netlab::Result<Result<(u64, String, u32)>>>,
    receiver: JoinHandle<netlab::Result<Result<Received>>>,
}

struct Received {
    bytes: u64,
    sha: String,
    mss: u32,
    gaps: Vec<(Instant, Duration)>,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn maxseg(s: &TcpStream) -> u32 {
    nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::TcpMaxSeg).unwrap_or(0)
}

impl Flow {
    /// Starts the receiver, then the sender.
    pub fn start(lab: &EcmpLab, spec: FlowSpec) -> Result<Self> {
        let (rx_ns, tx_ns, addr) = if spec.inbound {
            (&lab.int, &lab.ext, int_addr(spec.family))
        } else {
            (&lab.ext, &lab.int, ext_addr(spec.family))
        };
        let to = SocketAddr::new(addr, spec.port);
        let listener = rx_ns.enter(|| TcpListener::bind(to))?.context("bind")?;
        let receiver = rx_ns.spawn("so-rx", move || -> Result<Received> {
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + PATIENCE;
            let mut sock = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            bail!("no connection to {to}");
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            sock.set_nonblocking(false)?;
            sock.set_read_timeout(Some(PATIENCE))?;
            let mss = maxseg(&sock);
            let (mut hash, mut bytes, mut buf) = (Sha256::new(), 0u64, vec![0u8; CHUNK]);
            let (mut gaps, mut last) = (Vec::new(), Instant::now());
            loop {
                match sock.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let now = Instant::now();
                        if now - last >= GAP_RECORDED {
                            gaps.push((now, now - last));
                        }
                        last = now;
                        hash.update(&buf[..n]);
                        bytes += n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => bail!("receiving on {to} after {bytes} B: {e}"),
                }
            }
            Ok(Received {
                bytes,
                sha: hex(&hash.finalize()),
                mss,
                gaps,
            })
        })?;
        let sender = tx_ns.spawn("so-tx", move || -> Result<(u64, String, u32)> {
            let mut sock = TcpStream::connect_timeout(&to, Duration::from_secs(20))
                .with_context(|| format!("connect {to}"))?;
            sock.set_write_timeout(Some(PATIENCE))?;
            let mss = maxseg(&sock);
            let mut stream = Stream(0x9e37_79b9_7f4a_7c15 ^ u64::from(spec.port));
            let (mut hash, mut sent, mut buf) = (Sha256::new(), 0u64, vec![0u8; CHUNK]);
            let started = Instant::now();
            while sent < spec.bytes {
                let n = (spec.bytes - sent).min(CHUNK as u64) as usize;
                stream.fill(&mut buf[..n]);
                sock.write_all(&buf[..n])
                    .with_context(|| format!("sending to {to} after {sent} B"))?;
                hash.update(&buf[..n]);
                sent += n as u64;
                if let Some(rate) = spec.pace {
                    let due = Duration::from_secs_f64(sent as f64 / rate as f64);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait);
                    }
                }
            }
            sock.shutdown(Shutdown::Write)?;
            // Wait for the receiver to close: everything was delivered.
            sock.set_read_timeout(Some(PATIENCE))?;
            let _ = sock.read(&mut buf);
            Ok((sent, hex(&hash.finalize()), mss))
        })?;
        Ok(Self {
            spec,
            sender,
            receiver,
        })
    }

    /// Waits for both ends.
    pub fn finish(self) -> FlowResult {
        let rx = join(self.receiver);
        let tx = join(self.sender);
        let mut r = FlowResult {
            spec: self.spec,
            sent: 0,
            received: 0,
            sha_ok: false,
            error: None,
            inside_mss: 0,
            gaps: Vec::new(),
        };
        match (tx, rx) {
            (Ok((sent, tx_sha, tx_mss)), Ok(got)) => {
                r.sent = sent;
                r.received = got.bytes;
                r.sha_ok = sent == got.bytes && tx_sha == got.sha;
                r.inside_mss = if self.spec.inbound { got.mss } else { tx_mss };
                r.gaps = got.gaps;
                if !r.sha_ok {
                    r.error = Some(format!("sent {sent} B, received {} B", got.bytes));
                }
            }
            (Err(e), _) | (_, Err(e)) => r.error = Some(format!("{e:#}")),
        }
        r
    }
}

/// Joins a lab thread, turning a panic or a namespace error into an error.
fn join<T>(h: JoinHandle<netlab::Result<Result<T>>>) -> Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("a lab thread panicked"))??
}

/// Inbound TCP payload the inside host received from the outside host, per family: all of it,
/// and what arrived in iMTU-bound packets (one more outside segment would not have fit).
#[derive(Debug, Default)]
pub struct YieldCounts {
    payload: [AtomicU64; 2],
    bound: [AtomicU64; 2],
    /// The outside path's MTU: the outside host's segments are sized for it.
    outside_mtu: u16,
}

impl YieldCounts {
    fn record(&self, frame: &[u8]) {
        let Class::Tcp(h) = classify(frame, frame.len()) else {
            return;
        };
        if h.payload_len == 0 {
            return;
        }
        let (f, i) = if h.key.v6 {
            (Family::V6, 1)
        } else {
            (Family::V4, 0)
        };
        let from = match ext_addr(f) {
            std::net::IpAddr::V4(a) => h.key.src[..4] == a.octets(),
            std::net::IpAddr::V6(a) => h.key.src == a.octets(),
        };
        if !from {
            return;
        }
        let payload = u64::from(h.payload_len);
        self.payload[i].fetch_add(payload, Ordering::Relaxed);
        let segment = usize::from(self.outside_mtu) - f.ip_header() - 20 - TCP_TIMESTAMPS;
        if usize::from(h.ip_len) + segment > usize::from(IMTU) {
            self.bound[i].fetch_add(payload, Ordering::Relaxed);
        }
    }

    /// The yield of `family`'s inbound payload (0 when none was seen).
    pub fn share(&self, family: Family) -> f64 {
        let i = usize::from(family == Family::V6);
        let p = self.payload[i].load(Ordering::Relaxed);
        if p == 0 {
            0.0
        } else {
            self.bound[i].load(Ordering::Relaxed) as f64 / p as f64
        }
    }
}

/// A capture on the inside host's interface, counting [`YieldCounts`] until stopped.
pub struct Capture {
    stop: Arc<AtomicBool>,
    counts: Arc<YieldCounts>,
    thread: JoinHandle<netlab::Result<Result<()>>>,
}

impl Capture {
    /// Starts capturing (the outside path's MTU is `outside_mtu`); returns once the socket is
    /// open.
    pub fn start(lab: &EcmpLab, outside_mtu: u16) -> Result<Self> {
        let (stop, counts) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(YieldCounts {
                outside_mtu,
                ..YieldCounts::default()
            }),
        );
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let iface = lab.int_iface.clone();
        let (s, c) = (stop.clone(), counts.clone());
        let thread = lab.int.spawn("so-capture", move || -> Result<()> {
            let interface = pnet_datalink::interfaces()
                .into_iter()
                .find(|i| i.name == iface)
                .with_context(|| format!("no interface {iface}"))?;
            let config = ChannelConfig {
                read_timeout: Some(Duration::from_millis(50)),
                read_buffer_size: 4 << 20,
                ..ChannelConfig::default()
            };
            let Channel::Ethernet(_, mut rx) = pnet_datalink::channel(&interface, config)? else {
                bail!("unexpected channel type");
            };
            let _ = ready_tx.send(());
            while !s.load(Ordering::Relaxed) {
                if let Ok(frame) = rx.next() {
                    c.record(frame);
                }
            }
            Ok(())
        })?;
        let _ = ready_rx.recv_timeout(Duration::from_secs(5));
        Ok(Self {
            stop,
            counts,
            thread,
        })
    }

    /// Stops and returns what was counted.
    pub fn finish(self) -> Result<Arc<YieldCounts>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the capture thread panicked"))???;
        Ok(self.counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pxio::wire::{self, tcp_flags, EthernetRepr, IpRepr, Ipv4Repr, TcpRepr};

    fn frame(src: [u8; 4], payload: usize) -> Vec<u8> {
        let eth = EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan_tci: None,
            ethertype: 0,
        };
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: 20000,
            seq: 1,
            ack: 1,
            flags: tcp_flags::ACK,
            window: 1000,
            urgent: 0,
            options: &[],
        };
        let ip = IpRepr::V4(Ipv4Repr::new(src, [198, 19, 100, 2]));
        wire::tcp_frame(eth, ip, tcp, &vec![7u8; payload]).unwrap()
    }

    /// A packet counts as iMTU-bound when one more of the outside host's segments (sized for
    /// the outside path) would not have fit; only the outside host's TCP payload counts.
    #[test]
    fn the_yield_counts_the_outside_hosts_payload_in_imtu_bound_packets() {
        let c = YieldCounts {
            outside_mtu: 1400,
            ..YieldCounts::default()
        };
        let ext = [198, 18, 0, 2];
        // 1348 B segments: a packet of 7700 B IP is bound (7700 + 1348 > 9000), 7600 B is not.
        c.record(&frame(ext, 7700 - 40));
        c.record(&frame(ext, 7600 - 40));
        c.record(&frame([198, 18, 0, 9], 8000)); // another source: ignored
        c.record(&frame(ext, 0)); // a pure ACK: ignored
        let (bound, all) = (7660.0, 7660.0 + 7560.0);
        assert!((c.share(Family::V4) - bound / all).abs() < 1e-9);
        assert_eq!(c.share(Family::V6), 0.0);
    }
}
