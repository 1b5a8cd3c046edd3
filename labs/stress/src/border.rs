//! What a hostile outside host can send at pxgw's border, each through real Linux endpoints:
//!
//! - [`tiny_mss`]: a packet-socket client that announces a tiny MSS (48 B, 8 B) in its SYN and
//!   downloads from a server on the inside host; every frame reaching it is counted and sized
//!   (a peer asking for tiny segments is CVE-2019-11479's: Linux never sends below its
//!   `tcp_min_snd_mss`, 48 B, and neither may the gateway's splitting);
//! - [`FlowWatch`] and [`spoofed_syn`]: a SYN carrying an established connection's 4-tuple
//!   and a small MSS, whose effect shows in the sizes of the connection's frames (RFC 5961 §4);
//! - [`too_big`] and [`HeldAcks`]: ICMP "fragmentation needed" and Packet Too Big quoting a
//!   connection, with a sequence number in flight or far from it (RFC 5927 §4.1);
//! - [`caravan_inbound`]: a datagram wearing the caravan mark whose payload is a valid caravan,
//!   received on the inside host behind the caravan eBPF decapsulator.
//!
//! Frames are built with `pxio::wire::repr` (caravans with `pxio::caravan`'s encoder).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::{Family, Lab};
use netlab::Netns;
use pxio::caravan::{CaravanBuilder, CaravanConfig};
use pxio::wire::repr::{
    EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr, UdpRepr,
};
use pxio::wire::{classify, ethernet, icmp_frame, tcp_flags, Class, IcmpRepr};
use pxio::{HeapPool, PacketBuf};

use crate::crafted::{accept_within, stream_byte, tcp_of, CLIENT_PORT_BASE};
use crate::wire::{join, mac_of, spawn_in, PacketWire};

/// A second address of the outside host, on pxgw's segment, for the ICMP case: the path MTU
/// the inside host learns toward it (for 10 minutes, RFC 1191 §6.3) touches no other case.
pub const ALT_EXT: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 3)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 3)),
];
/// Where the ICMP errors come from: a router on the outside path (no host answers there).
pub const ROUTER: [IpAddr; 2] = [
    IpAddr::V4(Ipv4Addr::new(198, 51, 100, 254)),
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 0xfe)),
];
/// Source ports of the tiny-MSS clients: in the range whose RSTs the hosts drop
/// ([`crate::crafted::prepare`]), clear of the crafted scripts' ports.
const TINY_CLIENT_PORT: u16 = CLIENT_PORT_BASE + 900;
/// Linux's `tcp_min_snd_mss`: no segment of a Linux sender carries less (CVE-2019-11479).
pub const LINUX_MIN_MSS: usize = 48;
/// The receive window the tiny-MSS client advertises, as a Linux client's first one (no
/// window scaling): room for segments of the inside host's full MSS, so that unless the
/// gateway keeps the tiny MSS it has to cut 8960 B segments into tiny pieces.
const TINY_WINDOW: u16 = 65_535;
/// The tiny-MSS client's packet-socket buffer: the whole window in 48 B frames, each taking
/// about a kilobyte of buffer, so it loses none (a loss would show as a retransmission).
const TINY_RCVBUF: usize = 16 << 20;
/// Frames beyond Linux's own count that retransmissions may add: the client acknowledges every
/// frame at once and loses none, so only a stall of this busy machine longer than a
/// retransmission timeout (200 ms at least) or a tail-loss probe makes the server resend, and
/// Linux's F-RTO resends little after a spurious timeout.
pub const RETRANSMIT_SLACK: u64 = 64;
/// Longest a tiny-MSS download may take.
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(10);
/// A download with no new byte for this long is over.
const DOWNLOAD_IDLE: Duration = Duration::from_secs(3);

/// Index of `family` in the address tables.
fn fam(family: Family) -> usize {
    usize::from(family == Family::V6)
}

/// The family of `addr`.
fn family_of(addr: IpAddr) -> Family {
    match addr {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

/// The IP header of a frame from `src` to `dst` (IPv4 with DF, as Linux sends TCP).
fn ip_repr(src: IpAddr, dst: IpAddr) -> Result<IpRepr> {
    Ok(match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            dont_frag: true,
            ..Ipv4Repr::new(s.octets(), d.octets())
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr::new(s.octets(), d.octets())),
        _ => bail!("mixed address families: {src} and {dst}"),
    })
}

/// Whether `h` (a classified frame's headers) comes from `addr`.
fn from_addr(h: &pxio::wire::Headers, addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => !h.key.v6 && h.key.src[..4] == a.octets(),
        IpAddr::V6(a) => h.key.v6 && h.key.src == a.octets(),
    }
}

/// A pseudo-random 32-bit number (a sequence number an attacker picks), from the clock.
fn random_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = nanos ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x >> 16) as u32
}

/// Gives the outside host its second addresses ([`ALT_EXT`]); call once per lab.
pub fn prepare(lab: &Lab) -> Result<()> {
    let iface = lab.ext_iface().to_owned();
    for family in Family::BOTH {
        let cidr = match family {
            Family::V4 => format!("{}/24", ALT_EXT[0]),
            Family::V6 => format!("{}/64", ALT_EXT[1]),
        };
        let mut args = vec!["addr", "add", &cidr, "dev", &iface];
        if family == Family::V6 {
            // Deprecated from the start: never the source the outside host picks for its own
            // connections (RFC 6724 rule 3; it would win rule 8, the longest match, toward the
            // inside host), which the other cases expect from its usual address.
            args.extend(["nodad", "preferred_lft", "0"]);
        }
        lab.ext.ip(&args)?;
    }
    Ok(())
}

/// Sends `frames` from `ns`'s interface `iface`, in order.
pub fn send_from(ns: &Netns, iface: &str, frames: Vec<Vec<u8>>) -> Result<()> {
    let iface = iface.to_owned();
    join(spawn_in(ns, "border-send", move || {
        let mut wire = PacketWire::open(&iface)?;
        for f in &frames {
            wire.send(f)?;
        }
        Ok(())
    })?)
}

/// What a tiny-MSS client received ([`tiny_mss`]).
#[derive(Clone, Debug)]
pub struct Download {
    /// Bytes the inside server wrote.
    pub sent: usize,
    /// Bytes the client received in order.
    pub received: usize,
    /// The client received exactly the bytes written, then the server's FIN.
    pub intact: bool,
    /// Data frames of the connection that reached the client.
    pub frames: u64,
    /// Of those, frames carrying only bytes the client already had (retransmissions).
    pub duplicates: u64,
    /// Data frames carrying less than `min(48, bytes left from their offset)`.
    pub short: u64,
    /// The smallest payload a data frame carried.
    pub smallest: usize,
    /// Seconds from the SYN to the FIN (or to giving up).
    pub seconds: f64,
    /// Frames the client sent (its SYN, acknowledgements and FIN).
    pub frames_sent: u64,
}

/// A packet-socket client on the outside host opens a connection (the `k`-th of the lab) to a
/// server on the inside host announcing `mss` in its SYN, acknowledges every frame at once with
/// a 64 KB window, and reads the `bytes` the server writes, then its FIN.
pub fn tiny_mss(lab: &Lab, family: Family, mss: u16, bytes: usize, k: u16) -> Result<Download> {
    let server_port = 7200 + k;
    let client_port = TINY_CLIENT_PORT + k;
    let (src, dst) = (lab.ext_addr(family), lab.int_addr(family));
    let to = SocketAddr::new(dst, server_port);
    let peer_mac = mac_of(&lab.int, lab.int_iface())?;

    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let server = spawn_in(&lab.int, "tiny-mss-server", move || {
        let listener = TcpListener::bind(to).with_context(|| format!("bind {to}"))?;
        let _ = ready_tx.send(());
        let Some(mut sock) = accept_within(&listener, Duration::from_secs(5))? else {
            bail!("no connection to {to} within 5 s");
        };
        sock.set_write_timeout(Some(DOWNLOAD_LIMIT))?;
        let data: Vec<u8> = (0..bytes).map(stream_byte).collect();
        sock.write_all(&data)
            .with_context(|| format!("writing {bytes} B to the tiny-MSS client"))?;
        sock.shutdown(Shutdown::Write)?;
        // The client's FIN, so the connection ends cleanly (bounded).
        sock.set_read_timeout(Some(Duration::from_secs(2)))?;
        let _ = sock.read(&mut [0u8; 1]);
        Ok(())
    })?;
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .context("the tiny-MSS server did not start")?;

    let iface = lab.ext_iface().to_owned();
    let client = spawn_in(&lab.ext, "tiny-mss-client", move || {
        let mut wire = PacketWire::open_buffered(&iface, TINY_RCVBUF)?;
        let eth = EthernetRepr {
            dst: peer_mac,
            src: wire.mac,
            vlan_tci: None,
            ethertype: 0,
        };
        let ip = ip_repr(src, dst)?;
        let segment = |seq: u32, ack: u32, flags: u8, options: &[u8]| {
            FrameRepr {
                ethernet: eth,
                ip,
                l4: L4Repr::Tcp(TcpRepr {
                    src_port: client_port,
                    dst_port: server_port,
                    seq,
                    ack,
                    flags,
                    window: TINY_WINDOW,
                    urgent: 0,
                    options,
                }),
            }
            .to_vec(&[])
        };
        let started = Instant::now();
        let isn = random_u32();
        let mut mss_opt = [2, 4, 0, 0];
        mss_opt[2..].copy_from_slice(&mss.to_be_bytes());
        let syn = segment(isn, 0, tcp_flags::SYN, &mss_opt)?;
        let mut frames_sent = 0u64;
        let mut base = None;
        for _ in 0..2 {
            wire.send(&syn)?;
            frames_sent += 1;
            let deadline = Instant::now() + Duration::from_secs(2);
            while base.is_none() && Instant::now() < deadline {
                let Ok(frame) = wire.rx.next() else {
                    continue;
                };
                if let Some(t) = tcp_of(frame) {
                    let synack = tcp_flags::SYN | tcp_flags::ACK;
                    if t.sport == server_port
                        && t.dport == client_port
                        && t.flags & synack == synack
                        && t.ack == isn.wrapping_add(1)
                    {
                        base = Some(t.seq.wrapping_add(1));
                    }
                }
            }
            if base.is_some() {
                break;
            }
        }
        let Some(base) = base else {
            bail!("no SYN-ACK from {to} to a SYN announcing MSS {mss}");
        };
        let snd = isn.wrapping_add(1);
        wire.send(&segment(snd, base, tcp_flags::ACK, &[])?)?;
        frames_sent += 1;
        let (mut got, mut fin) = (Vec::with_capacity(bytes), false);
        let (mut frames, mut duplicates, mut short, mut smallest) = (0u64, 0u64, 0u64, usize::MAX);
        let mut progress = Instant::now();
        while !fin && started.elapsed() < DOWNLOAD_LIMIT && progress.elapsed() < DOWNLOAD_IDLE {
            let Ok(frame) = wire.rx.next() else {
                continue;
            };
            let Class::Tcp(h) = classify(frame, frame.len()) else {
                continue;
            };
            if h.key.sport != server_port || h.key.dport != client_port || !from_addr(&h, dst) {
                continue;
            }
            let Some(t) = tcp_of(frame) else {
                continue;
            };
            let off = t.seq.wrapping_sub(base) as usize;
            if off > 1 << 30 {
                continue; // the SYN-ACK again, or garbage
            }
            let payload = &frame[h.hdr_len()..h.frame_len()];
            if !payload.is_empty() {
                frames += 1;
                smallest = smallest.min(payload.len());
                if payload.len() < LINUX_MIN_MSS.min(bytes.saturating_sub(off)) {
                    short += 1;
                }
                if off + payload.len() <= got.len() {
                    duplicates += 1;
                } else if off <= got.len() {
                    got.extend_from_slice(&payload[got.len() - off..]);
                    progress = Instant::now();
                }
            }
            if t.flags & tcp_flags::FIN != 0 && off + payload.len() == got.len() {
                fin = true;
            }
            let ack = base
                .wrapping_add(got.len() as u32)
                .wrapping_add(u32::from(fin));
            wire.send(&segment(snd, ack, tcp_flags::ACK, &[])?)?;
            frames_sent += 1;
        }
        if fin {
            let ack = base.wrapping_add(got.len() as u32 + 1);
            wire.send(&segment(snd, ack, tcp_flags::ACK | tcp_flags::FIN, &[])?)?;
            frames_sent += 1;
        }
        let intact =
            fin && got.len() == bytes && got.iter().enumerate().all(|(i, &b)| b == stream_byte(i));
        Ok(Download {
            sent: bytes,
            received: got.len(),
            intact,
            frames,
            duplicates,
            short,
            smallest: if frames == 0 { 0 } else { smallest },
            seconds: started.elapsed().as_secs_f64(),
            frames_sent,
        })
    })?;
    let got = join(client);
    // The server gives up by itself (its write and read timeouts) when the client did.
    let served = join(server);
    let got = got?;
    if got.intact {
        served?;
    }
    Ok(got)
}

/// A TCP data frame of a watched flow ([`FlowWatch`]).
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    /// When the capture read it.
    pub at: Instant,
    /// Its length, Ethernet header included.
    pub frame_len: usize,
    /// TCP payload bytes.
    pub payload: usize,
    /// Its source port.
    pub sport: u16,
    /// Its sequence number.
    pub seq: u32,
}

/// Sizes of a run of data frames.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sizes {
    /// Frames.
    pub frames: usize,
    /// Mean TCP payload per frame, bytes.
    pub mean_payload: f64,
    /// Largest frame, bytes (Ethernet header included).
    pub max_frame: usize,
}

impl Sizes {
    /// The sizes of `frames`.
    pub fn of(frames: &[Seen]) -> Self {
        if frames.is_empty() {
            return Self::default();
        }
        Self {
            frames: frames.len(),
            mean_payload: frames.iter().map(|f| f.payload as f64).sum::<f64>()
                / frames.len() as f64,
            max_frame: frames.iter().map(|f| f.frame_len).max().unwrap_or(0),
        }
    }
}

impl std::fmt::Display for Sizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} frames, mean payload {:.0} B, largest frame {} B",
            self.frames, self.mean_payload, self.max_frame
        )
    }
}

/// A capture of the TCP data frames from `from` to destination port `dport` that a host's
/// interface receives, kept with their times.
pub struct FlowWatch {
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl FlowWatch {
    /// Starts capturing on `iface` in `ns`.
    pub fn start(ns: &Netns, iface: &str, from: IpAddr, dport: u16) -> Result<Self> {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        let iface = iface.to_owned();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = spawn_in(ns, "flow-watch", move || {
            let mut wire = PacketWire::open(&iface)?;
            let _ = ready_tx.send(());
            while !st.load(Ordering::Relaxed) {
                let Ok(frame) = wire.rx.next() else {
                    continue;
                };
                let Class::Tcp(h) = classify(frame, frame.len()) else {
                    continue;
                };
                if h.key.dport != dport || h.payload_len == 0 || !from_addr(&h, from) {
                    continue;
                }
                let Some(t) = tcp_of(frame) else {
                    continue;
                };
                let f = Seen {
                    at: Instant::now(),
                    frame_len: h.frame_len(),
                    payload: usize::from(h.payload_len),
                    sport: t.sport,
                    seq: t.seq,
                };
                s.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.push(f);
            }
            Ok(())
        })?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the flow capture did not start")?;
        Ok(Self {
            seen,
            stop,
            thread: Some(thread),
        })
    }

    /// The frames seen from `from` on (inclusive) until `to` (exclusive).
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Seen> {
        self.seen
            .lock()
            .map(|s| {
                s.iter()
                    .filter(|f| f.at >= from && f.at < to)
                    .copied()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The last frame seen, if any.
    pub fn last(&self) -> Option<Seen> {
        self.seen.lock().ok().and_then(|s| s.last().copied())
    }

    /// Waits up to `limit` for a frame seen at `after` or later; returns the latest one.
    pub fn next_after(&self, after: Instant, limit: Duration) -> Option<Seen> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(f) = self.last().filter(|f| f.at >= after) {
                return Some(f);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for FlowWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends, from the outside host, a SYN with `mss` whose 4-tuple is that of the connection
/// between `ext`:`ext_port` (outside) and the inside host's `int_port`, with a random sequence
/// number: what a spoofer who guessed an established connection's ports sends.
pub fn spoofed_syn(lab: &Lab, ext: IpAddr, ext_port: u16, int_port: u16, mss: u16) -> Result<()> {
    let dst = lab.int_addr(family_of(ext));
    let eth = EthernetRepr {
        dst: mac_of(&lab.int, lab.int_iface())?,
        src: mac_of(&lab.ext, lab.ext_iface())?,
        vlan_tci: None,
        ethertype: 0,
    };
    let mut opt = [2, 4, 0, 0];
    opt[2..].copy_from_slice(&mss.to_be_bytes());
    let syn = FrameRepr {
        ethernet: eth,
        ip: ip_repr(ext, dst)?,
        l4: L4Repr::Tcp(TcpRepr {
            src_port: ext_port,
            dst_port: int_port,
            seq: random_u32(),
            ack: 0,
            flags: tcp_flags::SYN,
            window: 64_240,
            urgent: 0,
            options: &opt,
        }),
    }
    .to_vec(&[])?;
    send_from(&lab.ext, lab.ext_iface(), vec![syn])
}

/// Sends, from a router on the outside path ([`ROUTER`]), ICMP "fragmentation needed" (IPv4)
/// or Packet Too Big (IPv6) with `mtu`, quoting a `frame_len`-byte segment of the connection
/// from the inside host's `int_port` to `ext`:`ext_port` whose sequence number is `seq`: as much
/// of it as a router quotes (RFC 792's header and 8 bytes for IPv4, what fits the IPv6
/// minimum MTU for IPv6).
pub fn too_big(
    lab: &Lab,
    ext: IpAddr,
    ext_port: u16,
    int_port: u16,
    seq: u32,
    frame_len: usize,
    mtu: u16,
) -> Result<()> {
    let family = family_of(ext);
    let int = lab.int_addr(family);
    let (int_mac, ext_mac) = (
        mac_of(&lab.int, lab.int_iface())?,
        mac_of(&lab.ext, lab.ext_iface())?,
    );
    // The quoted segment as the inside host sent it (through pxgw, toward the outside).
    let header_len = ethernet::field::HEADER_LEN + family.ip_header() + 20;
    let payload = vec![0u8; frame_len.saturating_sub(header_len)];
    let segment = FrameRepr {
        ethernet: EthernetRepr {
            dst: ext_mac,
            src: int_mac,
            vlan_tci: None,
            ethertype: 0,
        },
        ip: ip_repr(int, ext)?,
        l4: L4Repr::Tcp(TcpRepr {
            src_port: int_port,
            dst_port: ext_port,
            seq,
            ack: 0,
            flags: tcp_flags::ACK,
            window: 512,
            urgent: 0,
            options: &[],
        }),
    }
    .to_vec(&payload)?;
    let l3 = ethernet::field::HEADER_LEN;
    let (quoted, icmp) = match family {
        Family::V4 => (&segment[l3..l3 + 20 + 8], IcmpRepr::frag_needed(mtu)),
        Family::V6 => (
            &segment[l3..segment.len().min(l3 + 1280 - 40 - 8)],
            IcmpRepr::packet_too_big(u32::from(mtu)),
        ),
    };
    let frame = icmp_frame(
        EthernetRepr {
            dst: int_mac,
            src: ext_mac,
            vlan_tci: None,
            ethertype: 0,
        },
        ip_repr(ROUTER[fam(family)], int)?,
        icmp,
        quoted,
    )?;
    send_from(&lab.ext, lab.ext_iface(), vec![frame])
}

/// The ICMP capture's packet-socket buffer: half a second of a gigabit transfer,
/// so that a capture thread kept off the CPU loses no error among the transfer's frames.
const ICMP_WATCH_RCVBUF: usize = 64 << 20;

/// ICMP errors from [`ROUTER`] that reached the inside host's interface, counted while held.
pub struct IcmpWatch {
    count: Arc<std::sync::atomic::AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl IcmpWatch {
    /// Starts counting on the inside host.
    pub fn start(lab: &Lab) -> Result<Self> {
        let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, st) = (count.clone(), stop.clone());
        let iface = lab.int_iface().to_owned();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = spawn_in(&lab.int, "icmp-watch", move || {
            // The bulk transfer's frames share the socket with the three errors: with the
            // default buffer, a few milliseconds off the CPU on a busy machine lost one.
            let mut wire = PacketWire::open_buffered(&iface, ICMP_WATCH_RCVBUF)?;
            let _ = ready_tx.send(());
            while !st.load(Ordering::Relaxed) {
                let Ok(frame) = wire.rx.next() else {
                    continue;
                };
                if is_router_icmp(frame) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })?;
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .context("the ICMP capture did not start")?;
        Ok(Self {
            count,
            stop,
            thread: Some(thread),
        })
    }

    /// Errors seen so far.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

impl Drop for IcmpWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `frame` is an untagged ICMP or ICMPv6 message from [`ROUTER`].
fn is_router_icmp(frame: &[u8]) -> bool {
    let l3 = ethernet::field::HEADER_LEN;
    let Some(ethertype) = frame.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]])) else {
        return false;
    };
    match ethertype {
        ethernet::ethertype::IPV4 => {
            frame.len() >= l3 + 20
                && frame[l3 + 9] == pxio::wire::ip_proto::ICMP
                && IpAddr::from([
                    frame[l3 + 12],
                    frame[l3 + 13],
                    frame[l3 + 14],
                    frame[l3 + 15],
                ]) == ROUTER[0]
        }
        ethernet::ethertype::IPV6 => {
            let mut src = [0u8; 16];
            frame.len() >= l3 + 40 && {
                src.copy_from_slice(&frame[l3 + 8..l3 + 24]);
                frame[l3 + 6] == pxio::wire::ip_proto::ICMPV6 && IpAddr::from(src) == ROUTER[1]
            }
        }
        _ => false,
    }
}

/// The outside host's acknowledgements from `port` dropped (nftables, output hook) while
/// held: what the inside host sends on that connection stays in flight, unacknowledged.
pub struct HeldAcks<'a> {
    ns: &'a Netns,
}

/// The nftables table [`HeldAcks`] makes.
const HOLD_TABLE: &str = "pxstress_hold";

impl<'a> HeldAcks<'a> {
    /// Starts dropping the outside host's segments from TCP port `port`.
    pub fn start(lab: &'a Lab, port: u16) -> Result<Self> {
        let file = lab.dir.join("hold.nft");
        std::fs::write(
            &file,
            format!(
                "table inet {HOLD_TABLE} {{\n chain out {{ type filter hook output priority 0; \
                 policy accept;\n  tcp sport {port} drop\n }}\n}}\n"
            ),
        )?;
        lab.ext.exec("nft", &["-f", &file.display().to_string()])?;
        Ok(Self { ns: &lab.ext })
    }
}

impl Drop for HeldAcks<'_> {
    fn drop(&mut self) {
        let _ = self
            .ns
            .exec("nft", &["delete", "table", "inet", HOLD_TABLE]);
    }
}

/// What the inside application received of a caravan sent from outside
/// ([`caravan_inbound`]).
#[derive(Clone, Debug)]
pub struct CaravanSeen {
    /// The datagrams packed into the caravan.
    pub packed: Vec<Vec<u8>>,
    /// The caravan's UDP payload (caravan header and inner datagrams) as sent.
    pub payload: Vec<u8>,
    /// What the inside application's `recv` calls returned, in order.
    pub received: Vec<Vec<u8>>,
}

/// Sends from the outside host one UDP datagram to the inside host's `port` that wears the
/// caravan mark (`dscp`) and whose payload is a valid caravan of three datagrams (built with
/// pxio's encoder), while the caravan eBPF decapsulator is attached to the inside host's
/// interface with the same mark; returns what an ordinary UDP socket there received.
pub fn caravan_inbound(lab: &Lab, family: Family, port: u16, dscp: u8) -> Result<CaravanSeen> {
    let (src, dst) = (lab.ext_addr(family), lab.int_addr(family));
    let eth = EthernetRepr {
        dst: mac_of(&lab.int, lab.int_iface())?,
        src: mac_of(&lab.ext, lab.ext_iface())?,
        vlan_tci: None,
        ethertype: 0,
    };
    let packed: Vec<Vec<u8>> = (0..3u8)
        .map(|i| (0..100u8).map(|b| b.wrapping_mul(7) ^ i).collect())
        .collect();
    let datagram = |p: &[u8]| -> Result<Vec<u8>> {
        Ok(FrameRepr {
            ethernet: eth,
            ip: ip_repr(src, dst)?,
            l4: L4Repr::Udp(UdpRepr {
                src_port: port,
                dst_port: port,
            }),
        }
        .to_vec(p)?)
    };
    let pool = HeapPool::new(16384);
    let cfg = CaravanConfig {
        dscp,
        imtu: 1500,
        ..CaravanConfig::default()
    };
    let mut builder = CaravanBuilder::start(pool.packet(&datagram(&packed[0])?), cfg, &pool)
        .map_err(|(e, _)| anyhow::anyhow!("starting a caravan: {e}"))?;
    for p in &packed[1..] {
        builder
            .push(pool.packet(&datagram(p)?))
            .map_err(|(e, _)| anyhow::anyhow!("packing a caravan: {e}"))?;
    }
    let frame = builder.finish().to_vec();
    let Class::Udp(h) = classify(&frame, frame.len()) else {
        bail!("the caravan built is not a UDP frame");
    };
    let payload = frame[h.hdr_len()..h.frame_len()].to_vec();

    let iface = lab.int_iface().to_owned();
    let decap = lab.int.enter(move || {
        caravan::Decap::attach(
            &iface,
            caravan::DecapConfig {
                dscp,
                ..caravan::DecapConfig::default()
            },
        )
    })??;
    let at = SocketAddr::new(dst, port);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let app = spawn_in(&lab.int, "caravan-app", move || {
        let sock = UdpSocket::bind(at).with_context(|| format!("bind {at}"))?;
        sock.set_read_timeout(Some(Duration::from_millis(100)))?;
        let _ = ready_tx.send(());
        let (mut got, mut buf) = (Vec::new(), vec![0u8; 65536]);
        let deadline = Instant::now() + Duration::from_secs(1);
        while Instant::now() < deadline {
            if let Ok(n) = sock.recv(&mut buf) {
                got.push(buf[..n].to_vec());
            }
        }
        Ok(got)
    })?;
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .context("the caravan application did not start")?;
    send_from(&lab.ext, lab.ext_iface(), vec![frame])?;
    let received = join(app);
    drop(decap);
    Ok(CaravanSeen {
        packed,
        payload,
        received: received?,
    })
}
