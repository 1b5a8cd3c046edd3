//! Crafted TCP segment sequences: a client made of a packet socket completes a real
//! handshake with a Linux listener, then sends a script of segments — overlaps with conflicting
//! bytes, bad checksums, cancelling corruption, urgent data, data in the SYN, a RST behind an
//! IPv6 destination-options header, sequence numbers that wrap, 802.1Q, IPv6 flow labels — and
//! the listener's application reads what the kernel gives it. The same script through a plain
//! Linux bridge is the reference: through pxgw the application must read exactly the same.
//!
//! Frames are built with `pxio::wire::repr`; the destination-options header, which `repr`
//! cannot express, is inserted behind the IPv6 header, and corruption is applied afterwards.

use std::io::Read;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::{Family, Lab};
use netlab::Netns;
use nix::sys::socket::{recv, send, setsockopt, sockopt, MsgFlags};
use pxio::wire::repr::{EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr};
use pxio::wire::{classify, ip_proto, tcp_flags, Class, Ipv4Packet, Ipv6Packet, TcpPacket};

use crate::wire::{join, mac_of, spawn_in, PacketWire};

/// The VLAN the 802.1Q scripts use, on both hosts.
pub const VLAN_ID: u16 = 100;
/// Crafted clients use source ports from here up (below Linux's ephemeral range, so no real
/// connection shares them); the hosts' own RSTs from them are dropped.
pub const CLIENT_PORT_BASE: u16 = 31000;
/// How long the reading application waits for more bytes before it calls the stream ended.
const IDLE: Duration = Duration::from_millis(1500);
/// Pause between the phases of a script (a retransmission timeout, shortened).
const PHASE_GAP: Duration = Duration::from_millis(40);
/// The MSS the crafted client announces.
const CLIENT_MSS: u16 = 1400;

/// How a segment is damaged on its way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Corrupt {
    /// Not at all.
    None,
    /// The IPv4 header checksum is wrong (the TCP checksum is right for the bytes carried).
    IpChecksum,
    /// The first payload word is changed by this much behind the TCP checksum's back.
    Word(i16),
}

/// One segment of a script.
#[derive(Clone, Copy, Debug)]
pub struct Seg {
    /// Stream offset of its first byte (0 is the byte after the SYN).
    pub offset: usize,
    /// Payload bytes.
    pub len: usize,
    /// XORed into the stream's bytes: non-zero makes a conflicting copy.
    pub variant: u8,
    /// TCP flags besides ACK (PSH, URG, RST, FIN).
    pub flags: u8,
    /// Urgent pointer (with URG).
    pub urgent: u16,
    /// Damage.
    pub corrupt: Corrupt,
    /// IPv6: a destination-options header before TCP.
    pub dest_opts: bool,
    /// IPv6 flow label.
    pub flow_label: u32,
}

impl Seg {
    /// Plain data: `len` stream bytes at `offset`.
    pub const fn data(offset: usize, len: usize) -> Self {
        Self {
            offset,
            len,
            variant: 0,
            flags: 0,
            urgent: 0,
            corrupt: Corrupt::None,
            dest_opts: false,
            flow_label: 0,
        }
    }

    /// The same segment carrying other bytes than the stream's.
    pub const fn conflicting(self, variant: u8) -> Self {
        Self { variant, ..self }
    }

    /// The same segment damaged.
    pub const fn corrupted(self, corrupt: Corrupt) -> Self {
        Self { corrupt, ..self }
    }
}

/// What the reference for a script is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// What the application reads through a plain Linux bridge.
    Bridge,
    /// The stream sent (`len` bytes, then EOF): the bridge cannot carry the script (a SYN
    /// larger than the outside MTU).
    Stream(usize),
}

/// A crafted sequence.
#[derive(Clone, Debug)]
pub struct Script {
    /// Its name in the report.
    pub name: &'static str,
    /// The IP family.
    pub family: Family,
    /// The client is inside and the listener outside (the segments cross pxgw's split path).
    pub outbound: bool,
    /// Over VLAN [`VLAN_ID`] (IPv4).
    pub vlan: bool,
    /// The client's initial sequence number.
    pub isn: u32,
    /// Stream bytes carried by the SYN (TCP Fast Open, accepted without a cookie).
    pub syn_data: usize,
    /// Segments, sent back to back within a phase, phases 40 ms apart (a retransmission timeout,
    /// shortened).
    pub phases: Vec<Vec<Seg>>,
    /// A FIN at this offset, after the phases.
    pub fin: Option<usize>,
    /// What to compare with.
    pub reference: Reference,
}

/// How the application's stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum End {
    /// An orderly close (FIN).
    Eof,
    /// The connection was reset.
    Reset,
    /// Nothing more within 1.5 s.
    Idle,
    /// No connection was accepted.
    NoConnection,
}

/// What the receiving application got, and what crossed the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The bytes `read` returned, in order.
    pub stream: Vec<u8>,
    /// The out-of-band byte (`recv(MSG_OOB)`), if there was one.
    pub oob: Option<u8>,
    /// How it ended.
    pub end: End,
    /// SYN frames of the connection seen at the listener's interface.
    pub syns_seen: u32,
    /// SYNs the client sent.
    pub syns_sent: u32,
    /// Frames the client sent.
    pub frames_sent: u64,
    /// The data segments the listener's interface received, in order: each one's offset in
    /// the stream and its length. A report of a stream that differs names them, so that a
    /// segment lost or reordered on the way shows.
    pub seen: Vec<(u32, usize)>,
}

impl Observed {
    /// What the application got, for a report: bytes, out-of-band byte, end.
    pub fn summary(&self) -> String {
        format!(
            "{} B{}, {:?}",
            self.stream.len(),
            self.oob
                .map_or(String::new(), |b| format!(" + OOB {b:#04x}")),
            self.end
        )
    }

    /// Whether the application got what `reference` says it should, and why not.
    pub fn matches(&self, reference: &Observed) -> std::result::Result<(), String> {
        if self.stream != reference.stream {
            let at = self
                .stream
                .iter()
                .zip(&reference.stream)
                .position(|(a, b)| a != b)
                .unwrap_or(self.stream.len().min(reference.stream.len()));
            return Err(format!(
                "the application read {} (reference: {}); first difference at byte {at}; the \
                 listener received {} (reference: {})",
                self.summary(),
                reference.summary(),
                segments(&self.seen),
                segments(&reference.seen)
            ));
        }
        if (self.oob, self.end) != (reference.oob, reference.end) {
            return Err(format!(
                "the application read {} (reference: {})",
                self.summary(),
                reference.summary()
            ));
        }
        if self.syns_seen > self.syns_sent {
            return Err(format!(
                "{} SYN frames reached the listener for {} SYNs sent: a piece of a split SYN kept \
                 the flag",
                self.syns_seen, self.syns_sent
            ));
        }
        Ok(())
    }
}

/// The stream byte at `offset`.
pub fn stream_byte(offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ (offset / 251)) as u8
}

/// Segments as `offset+length`, in the order given.
fn segments(seen: &[(u32, usize)]) -> String {
    let each: Vec<String> = seen.iter().map(|(at, len)| format!("{at}+{len}")).collect();
    format!("[{}]", each.join(", "))
}

/// The reference for a [`Reference::Stream`] script.
pub fn stream_reference(len: usize) -> Observed {
    Observed {
        stream: (0..len).map(stream_byte).collect(),
        oob: None,
        end: End::Eof,
        syns_seen: 0,
        syns_sent: 0,
        frames_sent: 0,
        seen: Vec::new(),
    }
}

/// Prepares a lab for crafted scripts: its hosts drop their own RSTs from the crafted clients'
/// ports (the kernel knows nothing of those connections), and accept data in SYNs without a
/// cookie (TCP Fast Open server, `tcp_fastopen=0x602`).
pub fn prepare(lab: &Lab) -> Result<()> {
    let nft = lab.dir.join("crafted.nft");
    let last = CLIENT_PORT_BASE + 999;
    std::fs::write(
        &nft,
        format!(
            "table inet pxstress {{\n chain out {{ type filter hook output priority 0; policy accept;\n  \
             tcp sport {CLIENT_PORT_BASE}-{last} tcp flags & rst == rst drop\n }}\n}}\n"
        ),
    )?;
    for ns in [&lab.ext, &lab.int] {
        ns.exec("nft", &["-f", &nft.display().to_string()])?;
        ns.exec("sysctl", &["-qw", "net.ipv4.tcp_fastopen=0x602"])?;
    }
    Ok(())
}

/// One side of a script's connection.
struct Side<'a> {
    ns: &'a Netns,
    addr: IpAddr,
    iface: String,
}

/// A data segment of the connection as the listener's interface saw it.
struct Copy {
    seq: u32,
    payload: Vec<u8>,
    fin: bool,
}

/// Runs `script` through whatever connects `lab`'s hosts; `k` makes its ports unique.
///
/// An 802.1Q script is judged on the wire: this kernel has no 802.1Q module, so no host can
/// terminate a tagged connection. Its client sends a SYN (which makes pxgw merge the flow) and
/// its segments without a handshake, and what the inside host's interface receives is
/// reassembled, first copy of every byte winning, as a receiver's stream.
pub fn run(lab: &Lab, script: &Script, k: u16) -> Result<Observed> {
    let ext = Side {
        ns: &lab.ext,
        addr: lab.ext_addr(script.family),
        iface: lab.ext_iface().to_owned(),
    };
    let int = Side {
        ns: &lab.int,
        addr: lab.int_addr(script.family),
        iface: lab.int_iface().to_owned(),
    };
    let (client, server) = if script.outbound {
        (int, ext)
    } else {
        (ext, int)
    };
    let server_port = 6000 + k;
    let client_port = CLIENT_PORT_BASE + k;
    let peer_mac = mac_of(server.ns, &server.iface)?;
    let to = SocketAddr::new(server.addr, server_port);

    // The application: accept, read until EOF, reset or idle, then the out-of-band byte.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let app = spawn_in(server.ns, "crafted-app", move || {
        let listener = TcpListener::bind(to).with_context(|| format!("bind {to}"))?;
        let _ = ready_tx.send(());
        read_app(listener)
    })?;
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .context("the application did not start")?;
    // The connection's segments at the listener's interface.
    let (cap_tx, cap_rx) = std::sync::mpsc::channel();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_cap = stop.clone();
    let rx_iface = server.iface.clone();
    let capture = spawn_in(server.ns, "crafted-capture", move || {
        let mut wire = PacketWire::open(&rx_iface)?;
        let _ = cap_tx.send(());
        let (mut syns, mut copies) = (0u32, Vec::new());
        while !stop_cap.load(std::sync::atomic::Ordering::SeqCst) {
            let Ok(frame) = wire.rx.next() else {
                continue;
            };
            let Class::Tcp(h) = classify(frame, frame.len()) else {
                continue;
            };
            if h.key.dport != server_port || h.key.sport != client_port {
                continue;
            }
            let Some(t) = tcp_of(frame) else {
                continue;
            };
            if t.flags & tcp_flags::SYN != 0 {
                syns += 1;
            } else {
                copies.push(Copy {
                    seq: t.seq,
                    payload: frame[h.hdr_len()..h.frame_len()].to_vec(),
                    fin: t.flags & tcp_flags::FIN != 0,
                });
            }
        }
        Ok((syns, copies))
    })?;
    cap_rx
        .recv_timeout(Duration::from_secs(5))
        .context("the capture did not start")?;

    let script_c = script.clone();
    let (iface, src) = (client.iface.clone(), client.addr);
    let client = spawn_in(client.ns, "crafted-client", move || {
        let mut c = Client::open(&iface, &script_c, src, to, client_port, peer_mac)?;
        c.play(&script_c)?;
        Ok((c.frames, c.syns))
    })?;
    let client = join(client);
    if script.vlan {
        // Nothing will connect: let the segments arrive, and the application give up.
        std::thread::sleep(Duration::from_millis(300));
    }
    let app = join(app);
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (syns_seen, copies) = join(capture)?;
    let (frames_sent, syns_sent) = client?;
    let base = script.isn.wrapping_add(1);
    let seen = copies
        .iter()
        .filter(|c| !c.payload.is_empty())
        .map(|c| (c.seq.wrapping_sub(base), c.payload.len()))
        .collect();
    let (stream, oob, end) = if script.vlan {
        reassemble(base, &copies)
    } else {
        app?
    };
    Ok(Observed {
        stream,
        oob,
        end,
        syns_seen,
        syns_sent,
        frames_sent,
        seen,
    })
}

/// A receiver's stream from the segments seen on the wire: bytes from `base` on, the first
/// copy of every byte winning, up to the first hole; EOF when a FIN ends it.
fn reassemble(base: u32, copies: &[Copy]) -> (Vec<u8>, Option<u8>, End) {
    let mut bytes: Vec<Option<u8>> = Vec::new();
    let mut fin_at = None;
    for c in copies {
        let off = c.seq.wrapping_sub(base) as usize;
        if off > 1 << 20 {
            continue;
        }
        if bytes.len() < off + c.payload.len() {
            bytes.resize(off + c.payload.len(), None);
        }
        for (slot, &b) in bytes[off..].iter_mut().zip(&c.payload) {
            slot.get_or_insert(b);
        }
        if c.fin {
            fin_at = Some(off + c.payload.len());
        }
    }
    let stream: Vec<u8> = bytes.iter().map_while(|b| *b).collect();
    let end = if fin_at == Some(stream.len()) {
        End::Eof
    } else {
        End::Idle
    };
    (stream, None, end)
}

/// The first connection `listener` accepts within `limit` (blocking again once accepted), or
/// `None`: the listener never blocks longer than the limit, whatever the client does.
pub fn accept_within(listener: &TcpListener, limit: Duration) -> Result<Option<TcpStream>> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((sock, _)) => {
                sock.set_nonblocking(false)?;
                return Ok(Some(sock));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The application of a script: what it reads, its out-of-band byte, and how it ended.
fn read_app(listener: TcpListener) -> Result<(Vec<u8>, Option<u8>, End)> {
    let Some(mut sock) = accept_within(&listener, Duration::from_secs(5))? else {
        return Ok((Vec::new(), None, End::NoConnection));
    };
    sock.set_read_timeout(Some(IDLE))?;
    let (mut stream, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
    let end = loop {
        match sock.read(&mut buf) {
            Ok(0) => break End::Eof,
            Ok(n) => stream.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break End::Reset,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break End::Idle
            }
            Err(e) => return Err(e.into()),
        }
    };
    Ok((stream, oob_byte(&sock), end))
}

/// The urgent byte the kernel kept out of band, if any.
fn oob_byte(sock: &TcpStream) -> Option<u8> {
    let mut b = [0u8; 1];
    match recv(
        sock.as_raw_fd(),
        &mut b,
        MsgFlags::MSG_OOB | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(1) => Some(b[0]),
        _ => None,
    }
}

/// The TCP fields a client needs from a frame.
pub(crate) struct TcpSeen {
    pub(crate) sport: u16,
    pub(crate) dport: u16,
    pub(crate) seq: u32,
    pub(crate) ack: u32,
    pub(crate) flags: u8,
}

/// The TCP fields of `frame`, when it is a TCP segment.
pub(crate) fn tcp_of(frame: &[u8]) -> Option<TcpSeen> {
    let Class::Tcp(h) = classify(frame, frame.len()) else {
        return None;
    };
    let t = TcpPacket::new_checked(&frame[h.l4_offset()..]).ok()?;
    Some(TcpSeen {
        sport: t.src_port(),
        dport: t.dst_port(),
        seq: t.seq_number(),
        ack: t.ack_number(),
        flags: t.flags(),
    })
}

/// The packet-socket TCP client of a script.
struct Client {
    tx: PacketWire,
    /// 802.1Q-tagged: no handshake (nothing answers), segments only.
    vlan: bool,
    eth: EthernetRepr,
    src: IpAddr,
    to: SocketAddr,
    port: u16,
    isn: u32,
    /// The server's ISN + 1, once the SYN-ACK came.
    rcv: u32,
    frames: u64,
    syns: u32,
    family: Family,
}

impl Client {
    fn open(
        iface: &str,
        script: &Script,
        src: IpAddr,
        to: SocketAddr,
        port: u16,
        peer_mac: [u8; 6],
    ) -> Result<Self> {
        let tx = PacketWire::open(iface)?;
        let eth = EthernetRepr {
            dst: peer_mac,
            src: tx.mac,
            vlan_tci: script.vlan.then_some(VLAN_ID),
            ethertype: 0,
        };
        Ok(Self {
            tx,
            eth,
            vlan: script.vlan,
            src,
            to,
            port,
            isn: script.isn,
            rcv: 0,
            frames: 0,
            syns: 0,
            family: script.family,
        })
    }

    /// Builds and sends one segment at stream offset `offset` (the SYN is at `isn`, offset 0
    /// at `isn + 1`).
    fn segment(&mut self, seq: u32, flags: u8, s: &Seg, options: &[u8]) -> Result<()> {
        let payload: Vec<u8> = (s.offset..s.offset + s.len)
            .map(|o| stream_byte(o) ^ s.variant)
            .collect();
        let ip = match (self.src, self.to.ip()) {
            (IpAddr::V4(a), IpAddr::V4(b)) => IpRepr::V4(Ipv4Repr {
                dont_frag: true,
                ident: self.frames as u16,
                ..Ipv4Repr::new(a.octets(), b.octets())
            }),
            (IpAddr::V6(a), IpAddr::V6(b)) => IpRepr::V6(Ipv6Repr {
                flow_label: s.flow_label,
                ..Ipv6Repr::new(a.octets(), b.octets())
            }),
            _ => bail!("mixed address families"),
        };
        let repr = FrameRepr {
            ethernet: self.eth,
            ip,
            l4: L4Repr::Tcp(TcpRepr {
                src_port: self.port,
                dst_port: self.to.port(),
                seq,
                ack: self.rcv,
                flags,
                window: 65535,
                urgent: s.urgent,
                options,
            }),
        };
        let mut frame = repr.to_vec(&payload)?;
        let l3 = self.eth.buffer_len();
        if s.dest_opts && self.family == Family::V6 {
            // repr has no extension headers: a destination-options header (PadN) goes behind
            // the IPv6 header; the TCP checksum covers the upper-layer length only.
            let at = l3 + 40;
            frame.splice(at..at, [ip_proto::TCP, 0, 1, 4, 0, 0, 0, 0]);
            let mut ip = Ipv6Packet::new_unchecked(&mut frame[l3..]);
            let len = ip.payload_len();
            ip.set_payload_len(len + 8);
            ip.set_next_header(ip_proto::IPV6_OPTS);
        }
        match s.corrupt {
            Corrupt::None => {}
            Corrupt::IpChecksum => {
                let mut ip = Ipv4Packet::new_unchecked(&mut frame[l3..]);
                let c = ip.checksum();
                ip.set_checksum(c ^ 0x0100);
            }
            Corrupt::Word(delta) => {
                let at = frame.len() - payload.len();
                let w = u16::from_be_bytes([frame[at], frame[at + 1]]).wrapping_add_signed(delta);
                frame[at..at + 2].copy_from_slice(&w.to_be_bytes());
            }
        }
        self.tx.send(&frame)?;
        self.frames += 1;
        if flags & tcp_flags::SYN != 0 {
            self.syns += 1;
        }
        Ok(())
    }

    /// Waits for the SYN-ACK; returns the sequence number it acknowledges.
    fn synack(&mut self, within: Duration) -> Option<u32> {
        let deadline = Instant::now() + within;
        let wire = &mut self.tx;
        while Instant::now() < deadline {
            let Ok(frame) = wire.rx.next() else {
                continue;
            };
            if let Some(t) = tcp_of(frame) {
                let synack = tcp_flags::SYN | tcp_flags::ACK;
                if t.sport == self.to.port() && t.dport == self.port && t.flags & synack == synack {
                    self.rcv = t.seq.wrapping_add(1);
                    return Some(t.ack);
                }
            }
        }
        None
    }

    fn play(&mut self, script: &Script) -> Result<()> {
        let mut mss = [2, 4, 0, 0];
        mss[2..].copy_from_slice(&CLIENT_MSS.to_be_bytes());
        let syn = Seg::data(0, script.syn_data);
        self.segment(self.isn, tcp_flags::SYN, &syn, &mss)?;
        if self.vlan {
            // Nothing answers a tagged SYN here; the gateway has seen it all the same.
            self.rcv = 1;
            std::thread::sleep(PHASE_GAP);
            return self.data(script, self.isn.wrapping_add(1));
        }
        let mut acked = self.synack(Duration::from_secs(2));
        if acked.is_none() {
            // The data-carrying SYN did not get through: fall back to a plain SYN, as a Fast
            // Open client does.
            self.segment(self.isn, tcp_flags::SYN, &Seg::data(0, 0), &mss)?;
            acked = self.synack(Duration::from_secs(2));
        }
        let Some(acked) = acked else {
            bail!("no SYN-ACK from {}", self.to);
        };
        let base = self.isn.wrapping_add(1);
        let taken = (acked.wrapping_sub(base) as usize).min(script.syn_data);
        self.segment(
            base.wrapping_add(taken as u32),
            tcp_flags::ACK,
            &Seg::data(taken, 0),
            &[],
        )?;
        // What the SYN carried and the listener did not take, as a Fast Open client resends it.
        let mut at = taken;
        while at < script.syn_data {
            let len = (script.syn_data - at).min(usize::from(CLIENT_MSS));
            self.segment(
                base.wrapping_add(at as u32),
                tcp_flags::ACK,
                &Seg::data(at, len),
                &[],
            )?;
            at += len;
        }
        self.data(script, base)
    }

    /// The script's phases and FIN, offset 0 at `base`.
    fn data(&mut self, script: &Script, base: u32) -> Result<()> {
        for (i, phase) in script.phases.iter().enumerate() {
            if i > 0 || script.syn_data > 0 {
                std::thread::sleep(PHASE_GAP);
            }
            for s in phase {
                let seq = base.wrapping_add(s.offset as u32);
                self.segment(seq, tcp_flags::ACK | s.flags, s, &[])?;
            }
        }
        if let Some(fin) = script.fin {
            std::thread::sleep(PHASE_GAP);
            let seq = base.wrapping_add(fin as u32);
            self.segment(
                seq,
                tcp_flags::ACK | tcp_flags::FIN,
                &Seg::data(fin, 0),
                &[],
            )?;
        }
        Ok(())
    }
}

/// The urgent-data case (the urgent byte must stay the one the sender marked): a real
/// application inside sends 20,000 B with `MSG_OOB` (its last byte is urgent), then 10,000 B
/// more; the application outside reads the stream and the out-of-band byte. Through pxgw the
/// inside host sends large segments (MSS rewriting) that pxgw splits; through the bridge it
/// sends segments of the outside MSS.
pub fn urgent_outbound(lab: &Lab, family: Family, k: u16) -> Result<Observed> {
    let to = SocketAddr::new(lab.ext_addr(family), 6000 + k);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let app = spawn_in(&lab.ext, "urgent-app", move || {
        let listener = TcpListener::bind(to).with_context(|| format!("bind {to}"))?;
        let _ = ready_tx.send(());
        read_app(listener)
    })?;
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .context("the application did not start")?;
    let sender = spawn_in(&lab.int, "urgent-sender", move || {
        let sock = TcpStream::connect_timeout(&to, Duration::from_secs(5))?;
        setsockopt(&sock, sockopt::TcpNoDelay, &true)?;
        let first: Vec<u8> = (0..20_000).map(stream_byte).collect();
        let rest: Vec<u8> = (20_000..30_000).map(stream_byte).collect();
        let fd = sock.as_raw_fd();
        let mut at = 0;
        while at < first.len() {
            at += send(fd, &first[at..], MsgFlags::MSG_OOB)?;
        }
        let mut at = 0;
        while at < rest.len() {
            at += send(fd, &rest[at..], MsgFlags::empty())?;
        }
        sock.shutdown(std::net::Shutdown::Write)?;
        std::thread::sleep(Duration::from_millis(500));
        Ok(())
    })?;
    join(sender)?;
    let (stream, oob, end) = join(app)?;
    Ok(Observed {
        stream,
        oob,
        end,
        syns_seen: 0,
        syns_sent: 0,
        frames_sent: 0,
        seen: Vec::new(),
    })
}

/// The crafted scripts, each a scenario a merging or splitting gateway can get wrong (what it
/// guards in brackets).
pub fn scripts() -> Vec<Script> {
    use Family::{V4, V6};
    const MSS: usize = 1400;
    let plain = |name, family, phases: Vec<Vec<Seg>>, fin| Script {
        name,
        family,
        outbound: false,
        vlan: false,
        isn: 1_000_000,
        syn_data: 0,
        phases,
        fin: Some(fin),
        reference: Reference::Bridge,
    };
    let run = |from: usize, n: usize| -> Vec<Seg> {
        (0..n).map(|i| Seg::data(from + i * MSS, MSS)).collect()
    };
    let mut v = Vec::new();
    for family in [V4, V6] {
        // [overlaps: the first copy wins] Held a[0,1000) and c[2000,3000); X[1000,2400) overlaps
        // c with other bytes, Y continues it.
        v.push(plain(
            if family == V4 {
                "overlap-next-item"
            } else {
                "overlap-next-item-v6"
            },
            family,
            vec![vec![
                Seg::data(0, 1000),
                Seg::data(2000, 1000),
                Seg::data(1000, 1400).conflicting(0x11),
                Seg::data(2400, 1000).conflicting(0x22),
            ]],
            3400,
        ));
    }
    // A partial retransmission with other bytes, in the middle of a run.
    v.push(plain(
        "overlap-retransmission",
        V4,
        vec![vec![
            Seg::data(0, MSS),
            Seg::data(MSS, MSS),
            Seg::data(700, MSS).conflicting(0x33),
            Seg::data(2 * MSS, MSS),
            Seg::data(3 * MSS, MSS),
        ]],
        4 * MSS,
    ));
    // Out of order, then the hole filled under a conflicting copy.
    v.push(plain(
        "overlap-out-of-order",
        V4,
        vec![vec![
            Seg::data(0, 1000),
            Seg::data(2000, 1000),
            Seg::data(2400, 1000).conflicting(0x22),
            Seg::data(1000, 1000),
        ]],
        3400,
    ));
    // [checksums] Other bytes behind a bad IPv4 header checksum, then the right ones.
    v.push(plain(
        "bad-ip-checksum",
        V4,
        vec![
            vec![
                Seg::data(0, MSS),
                Seg::data(MSS, MSS)
                    .conflicting(0x44)
                    .corrupted(Corrupt::IpChecksum),
                Seg::data(2 * MSS, MSS),
            ],
            vec![Seg::data(MSS, MSS)],
        ],
        3 * MSS,
    ));
    // [checksums] One corrupted segment in a run, retransmitted right: it must cost only itself.
    for family in [V4, V6] {
        v.push(plain(
            if family == V4 {
                "bad-tcp-checksum"
            } else {
                "bad-tcp-checksum-v6"
            },
            family,
            vec![
                {
                    let mut r = run(0, 5);
                    r[1] = r[1].corrupted(Corrupt::Word(1));
                    r
                },
                vec![Seg::data(MSS, MSS)],
            ],
            5 * MSS,
        ));
    }
    // [checksums] +1 and −1 in the same 16-bit column of two segments: each fails its checksum,
    // their concatenation would verify. The right bytes follow.
    v.push(plain(
        "cancelling-corruption",
        V4,
        vec![
            vec![
                Seg::data(0, MSS).corrupted(Corrupt::Word(1)),
                Seg::data(MSS, MSS).corrupted(Corrupt::Word(-1)),
            ],
            run(0, 3),
        ],
        3 * MSS,
    ));
    // Urgent data inbound: URG segments are never merged.
    v.push(plain(
        "urgent-inbound",
        V4,
        vec![vec![
            Seg::data(0, MSS),
            Seg {
                flags: tcp_flags::URG,
                urgent: 500,
                ..Seg::data(MSS, MSS)
            },
            Seg::data(2 * MSS, MSS),
        ]],
        3 * MSS,
    ));
    // Data in the SYN, inbound (Fast Open without a cookie), then more.
    v.push(Script {
        syn_data: 1000,
        phases: vec![vec![Seg::data(1000, MSS), Seg::data(1000 + MSS, MSS)]],
        fin: Some(1000 + 2 * MSS),
        ..plain("syn-data-inbound", V4, Vec::new(), 0)
    });
    // [SYN splitting] A SYN carrying 4000 B from inside: pxgw splits it; only one piece may be
    // a SYN.
    for family in [V4, V6] {
        v.push(Script {
            outbound: true,
            syn_data: 4000,
            phases: vec![vec![Seg::data(4000, MSS)]],
            fin: Some(4000 + MSS),
            reference: Reference::Stream(4000 + MSS),
            ..plain(
                if family == V4 {
                    "syn-data-outbound"
                } else {
                    "syn-data-outbound-v6"
                },
                family,
                Vec::new(),
                0,
            )
        });
    }
    // [extension headers] IPv6: data pxgw holds, then a RST behind a destination-options header.
    v.push(Script {
        fin: None,
        ..plain(
            "rst-dest-opts-v6",
            V6,
            vec![vec![
                Seg::data(0, MSS),
                Seg::data(MSS, MSS),
                Seg {
                    flags: tcp_flags::RST,
                    dest_opts: true,
                    ..Seg::data(2 * MSS, 0)
                },
            ]],
            0,
        )
    });
    // [extension headers] IPv6 data segments with and without extension headers, interleaved.
    v.push(plain(
        "ext-headers-v6",
        V6,
        vec![{
            let mut r = run(0, 6);
            r[2].dest_opts = true;
            r[4].dest_opts = true;
            r
        }],
        6 * MSS,
    ));
    // [divergence] IPv6 segments of one flow with different flow labels.
    v.push(plain(
        "flow-labels-v6",
        V6,
        vec![run(0, 6)
            .into_iter()
            .enumerate()
            .map(|(i, s)| Seg {
                flow_label: (i as u32 % 2) * 0x12345,
                ..s
            })
            .collect()],
        6 * MSS,
    ));
    // Sequence numbers that wrap in the middle of a run, out of order on both sides of it.
    v.push(Script {
        isn: u32::MAX - 3 * MSS as u32,
        ..plain(
            "seq-wraparound",
            V4,
            vec![{
                let mut r = run(0, 8);
                r.swap(2, 3);
                r.swap(5, 6);
                r
            }],
            8 * MSS,
        )
    });
    // 802.1Q: the same run on VLAN 100, with an overlap.
    v.push(Script {
        vlan: true,
        ..plain(
            "vlan-802.1q",
            V4,
            vec![{
                let mut r = run(0, 6);
                r.insert(4, Seg::data(2 * MSS + 100, MSS).conflicting(0x55));
                r
            }],
            6 * MSS,
        )
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that differs from its reference is reported with the segments each listener
    /// received, so that a segment lost or reordered on the way can be told from bytes
    /// changed.
    #[test]
    fn a_differing_stream_names_the_segments_each_listener_received() {
        let observed = |stream: &[u8], seen: Vec<(u32, usize)>| Observed {
            stream: stream.to_vec(),
            oob: None,
            end: End::Eof,
            syns_seen: 1,
            syns_sent: 1,
            frames_sent: 4,
            seen,
        };
        let reference = observed(b"abcd", vec![(0, 2), (2, 2)]);
        let got = observed(b"abXd", vec![(0, 2), (3, 1), (2, 2)]);
        assert_eq!(
            got.matches(&reference),
            Err(
                "the application read 4 B, Eof (reference: 4 B, Eof); first difference at \
                 byte 2; the listener received [0+2, 3+1, 2+2] (reference: [0+2, 2+2])"
                    .to_owned()
            )
        );
        assert_eq!(reference.matches(&reference), Ok(()));
    }
}
