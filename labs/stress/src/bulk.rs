//! The sha256-checked bulk transfers that run through pxgw while a case runs, and the capture
//! that measures their yield (the share of their payload that reaches the inside host in
//! iMTU-bound packets, SIGCOMM'26 §7).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::{Family, Lab};
use pxio::wire::{classify, Class};
use sha2::{Digest, Sha256};

use crate::wire::{join, spawn_in, PacketWire};

/// Bytes per write of the sender.
const CHUNK: usize = 64 << 10;
/// How long a transfer may take to drain after it was asked to stop (a restarted gateway
/// makes TCP back off for seconds).
const DRAIN: Duration = Duration::from_secs(60);

/// A deterministic stream of pseudo-random bytes (xorshift64*), so the sender needs no file.
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

/// What one end of a transfer saw: bytes and their sha256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digested {
    /// Bytes sent or received.
    pub bytes: u64,
    /// Their sha256, hex.
    pub sha256: String,
}

fn hex(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A TCP transfer running through whatever connects the hosts, until [`Bulk::finish`].
pub struct Bulk {
    /// The server port (unique per transfer: the yield capture keys on it).
    pub port: u16,
    /// Outside → inside.
    pub inbound: bool,
    /// The IP family.
    pub family: Family,
    stop: Arc<AtomicBool>,
    sender: JoinHandle<Result<Digested>>,
    receiver: JoinHandle<Result<Digested>>,
}

/// How a transfer ended.
#[derive(Clone, Debug)]
pub struct BulkResult {
    /// Bytes the sender wrote.
    pub sent: u64,
    /// Bytes the receiver read.
    pub received: u64,
    /// Same byte count and the same sha256 at both ends.
    pub sha_ok: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

impl Bulk {
    /// Starts a transfer on `port` in `family` (`inbound`: outside → inside), paced at about
    /// `mbps` Mb/s; it runs until [`Bulk::finish`].
    pub fn start(lab: &Lab, family: Family, inbound: bool, port: u16, mbps: u32) -> Result<Self> {
        let addr = if inbound {
            lab.int_addr(family)
        } else {
            lab.ext_addr(family)
        };
        Self::start_to(lab, family, inbound, addr, port, mbps)
    }

    /// [`Bulk::start`] toward `addr`, an address of the receiving host (the inside host when
    /// `inbound`, else the outside host) other than its usual one.
    pub fn start_to(
        lab: &Lab,
        family: Family,
        inbound: bool,
        addr: IpAddr,
        port: u16,
        mbps: u32,
    ) -> Result<Self> {
        let (rx_ns, tx_ns) = if inbound {
            (&lab.int, &lab.ext)
        } else {
            (&lab.ext, &lab.int)
        };
        let to = SocketAddr::new(addr, port);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let receiver = spawn_in(rx_ns, "bulk-rx", move || {
            let listener = TcpListener::bind(to).with_context(|| format!("bind {to}"))?;
            let _ = ready_tx.send(());
            listener.set_nonblocking(true)?;
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut sock = loop {
                match listener.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            bail!("no connection to {to} within 30 s");
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(e.into()),
                }
            };
            sock.set_nonblocking(false)?;
            sock.set_read_timeout(Some(DRAIN))?;
            let (mut hash, mut bytes, mut buf) = (Sha256::new(), 0u64, vec![0u8; CHUNK]);
            loop {
                match sock.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        hash.update(&buf[..n]);
                        bytes += n as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => bail!("receiving on {to} after {bytes} B: {e}"),
                }
            }
            Ok(Digested {
                bytes,
                sha256: hex(&hash.finalize()),
            })
        })?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the bulk receiver did not start")?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop_tx = stop.clone();
        let seed = 0x9e37_79b9_7f4a_7c15 ^ u64::from(port);
        let sender = spawn_in(tx_ns, "bulk-tx", move || {
            let mut sock = TcpStream::connect_timeout(&to, Duration::from_secs(10))
                .with_context(|| format!("connect {to}"))?;
            sock.set_write_timeout(Some(DRAIN))?;
            let (mut stream, mut hash, mut bytes) = (Stream(seed), Sha256::new(), 0u64);
            let mut buf = vec![0u8; CHUNK];
            let started = Instant::now();
            while !stop_tx.load(Ordering::SeqCst) {
                stream.fill(&mut buf);
                sock.write_all(&buf)
                    .with_context(|| format!("sending to {to} after {bytes} B"))?;
                hash.update(&buf);
                bytes += buf.len() as u64;
                // Pace: never ahead of `mbps`.
                let due = Duration::from_secs_f64(bytes as f64 * 8.0 / (f64::from(mbps) * 1e6));
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
            sock.shutdown(Shutdown::Write)?;
            // Wait for the receiver's close so every byte is acknowledged before we go.
            let mut sink = [0u8; 16];
            sock.set_read_timeout(Some(DRAIN))?;
            let _ = sock.read(&mut sink);
            Ok(Digested {
                bytes,
                sha256: hex(&hash.finalize()),
            })
        })?;
        Ok(Self {
            port,
            inbound,
            family,
            stop,
            sender,
            receiver,
        })
    }

    /// Stops the sender, waits for the receiver to read everything, and compares.
    pub fn finish(self) -> BulkResult {
        self.stop.store(true, Ordering::SeqCst);
        let sent = join(self.sender);
        let received = join(self.receiver);
        match (sent, received) {
            (Ok(s), Ok(r)) => BulkResult {
                sent: s.bytes,
                received: r.bytes,
                sha_ok: s == r,
                error: (s != r).then(|| {
                    format!(
                        "sent {} B sha256 {}, received {} B sha256 {}",
                        s.bytes, s.sha256, r.bytes, r.sha256
                    )
                }),
            },
            (s, r) => BulkResult {
                sent: s.as_ref().map_or(0, |d| d.bytes),
                received: r.as_ref().map_or(0, |d| d.bytes),
                sha_ok: false,
                error: Some(format!(
                    "{}{}",
                    s.err()
                        .map_or(String::new(), |e| format!("sender: {e:#}; ")),
                    r.err()
                        .map_or(String::new(), |e| format!("receiver: {e:#}"))
                )),
            },
        }
    }
}

/// Payload counters of one port's inbound TCP data frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// TCP payload bytes.
    pub payload: u64,
    /// Of which in iMTU-bound frames (one more full outside segment would not have fit).
    pub bound: u64,
}

impl Counted {
    /// The yield: bound payload over all payload (0 when nothing was seen).
    pub fn share(&self) -> f64 {
        if self.payload == 0 {
            0.0
        } else {
            self.bound as f64 / self.payload as f64
        }
    }

    /// What was counted since `earlier`.
    pub fn since(&self, earlier: &Counted) -> Counted {
        Counted {
            payload: self.payload - earlier.payload,
            bound: self.bound - earlier.bound,
        }
    }
}

/// A capture on the inside host's interface counting, per destination port, the TCP payload
/// from outside and how much of it arrived in iMTU-bound frames.
pub struct YieldMeter {
    counts: Arc<Mutex<HashMap<u16, Counted>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl YieldMeter {
    /// Starts capturing on `lab`'s inside host.
    pub fn start(lab: &Lab) -> Result<Self> {
        let counts: Arc<Mutex<HashMap<u16, Counted>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (counts.clone(), stop.clone());
        let iface = lab.int_iface().to_owned();
        let topo = lab.topology();
        let imtu = usize::from(topo.imtu);
        let segment = [topo.ext_segment(Family::V4), topo.ext_segment(Family::V6)];
        let ext = [lab.ext_addr(Family::V4), lab.ext_addr(Family::V6)];
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = spawn_in(&lab.int, "yield-meter", move || {
            let mut wire = PacketWire::open(&iface)?;
            let _ = ready_tx.send(());
            while !s.load(Ordering::Relaxed) {
                let Ok(frame) = wire.rx.next() else {
                    continue;
                };
                let Class::Tcp(h) = classify(frame, frame.len()) else {
                    continue;
                };
                let from_ext = ext.iter().any(|a| match a {
                    IpAddr::V4(a) => !h.key.v6 && h.key.src[..4] == a.octets(),
                    IpAddr::V6(a) => h.key.v6 && h.key.src == a.octets(),
                });
                if !from_ext || h.payload_len == 0 {
                    continue;
                }
                let seg = segment[usize::from(h.key.v6)];
                let payload = u64::from(h.payload_len);
                let bound = usize::from(h.ip_len) + seg > imtu;
                let mut counts = c.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
                let e = counts.entry(h.key.dport).or_default();
                e.payload += payload;
                if bound {
                    e.bound += payload;
                }
            }
            Ok(())
        })?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the yield capture did not start")?;
        Ok(Self {
            counts,
            stop,
            thread: Some(thread),
        })
    }

    /// What was counted so far for destination port `port`.
    pub fn get(&self, port: u16) -> Counted {
        self.counts
            .lock()
            .map(|c| c.get(&port).copied().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl Drop for YieldMeter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
