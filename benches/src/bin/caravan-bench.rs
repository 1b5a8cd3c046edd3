//! `caravan-bench`: what a PX-caravan saves a receiving endpoint (SIGCOMM'26 §6; §7.2 "Receiver
//! in a b-network"). Run it through `cargo xtask bench caravan [--json FILE]` (root: it creates
//! network namespaces and loads the eBPF program).
//!
//! # Setup
//! A sender and a receiver namespace joined by a veth at MTU 9000 (addresses 198.18.9.0/24),
//! with every offload that would merge or split packets off (`gro gso tso`) and software
//! checksums (`tx off` on the sender), so the receiver verifies every UDP checksum itself.
//!
//! # The offered stream, the same in all three cases
//! `--datagrams` datagrams of `--size` B payload (sequence number in the first 8 bytes), of one
//! flow. The cases differ only in how they travel and are read:
//! 1. `plain-udp`: one UDP packet per datagram, one `recv` per datagram; no eBPF attached.
//! 2. `caravan-ebpf`: packed by pxio's `CaravanBuilder` up to the 9000 B iMTU (7 × 1200 B),
//!    unpacked by caravan-ebpf on the receiver's ingress; one `recv` per datagram.
//! 3. `caravan-reader`: the same caravans to a pass-through port, delivered whole, one `recv`
//!    per caravan, split by `caravan::Reader`.
//!
//! # Pacing and CPU placement
//! The sender thread is pinned to CPU 0 and the receiving thread to the last CPU; RPS on the
//! receiver's veth steers all its receive processing (TC ingress with the eBPF program, IP, UDP,
//! socket enqueue) to that last CPU too. So the receiver is one core, as in the paper's Figure 13,
//! and the sender's work stays off it. The sender is closed-loop: it keeps at most `--window`
//! datagrams in flight (sent, not yet read by the application), so the receiver runs flat out
//! without overflowing the 1000-packet backlog (drops would charge wasted work to one case and
//! not another). A sender that waited 5 ms sends anyway, so every loop is bounded.
//!
//! # What is measured, on the receiver
//! * `datagrams_per_s`: datagrams the application got, divided by the time from the sender's
//!   start to the last datagram read.
//! * `cpu_ns_per_datagram`: busy time of the receiver's CPU (user + nice + system + irq + softirq
//!   from `/proc/stat`, so the receiving thread plus all the kernel receive work steered there),
//!   minus that CPU's background busy rate measured idle for 300 ms just before, divided by
//!   datagrams received. Other work on that CPU would steal the receiver's time, so each run
//!   first waits (up to about 80 s) until the receiver CPU is ≤ 5% and the machine ≤ 10% busy. `/proc/stat` counts in 10 ms ticks; runs last about a second.
//! * Extras: the receiving thread's own CPU (`getrusage(RUSAGE_THREAD)`: syscalls and the softirq
//!   work that ran inside them), the whole machine's CPU per datagram (sender included), recv
//!   syscalls, backlog drops (`/proc/net/softnet_stat`).
//!
//! Each case runs `--reps` times; the run with the median throughput is reported.

#![forbid(unsafe_code)]

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use caravan::{Decap, DecapConfig, Reader};
use clap::Parser;
use netlab::Netns;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::socket::{setsockopt, sockopt};
use nix::unistd::Pid;
use pxio::caravan::{CaravanBuilder, CaravanConfig, CaravanError};
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};
use serde_json::json;

const TX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 1);
const RX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 2);
const SPORT: u16 = 42000;
const PLAIN_PORT: u16 = 6001;
const DECAP_PORT: u16 = 6002;
const PASS_PORT: u16 = 6003;
const IMTU: u16 = 9000;
/// Ethernet header of the frames built here (untagged).
const ETH: usize = wire::ethernet::field::HEADER_LEN;
/// UDP header bytes: the outer one, and one inner one.
const UDP_HDR: usize = wire::udp::field::HEADER_LEN;
/// Outer IPv4 + UDP headers.
const OUTER: usize = wire::ipv4::field::HEADER_LEN + UDP_HDR;
/// `USER_HZ`: the unit of `/proc/stat` (100 on every Linux architecture that matters here).
const TICK_NS: u64 = 10_000_000;
/// How long one case may take at most.
const CASE_DEADLINE: Duration = Duration::from_secs(60);
/// Socket read timeout; two in a row after the sender finished end the case.
const READ_TIMEOUT: Duration = Duration::from_millis(200);
/// Longest a sender waits for the window before sending anyway.
const MAX_WAIT: Duration = Duration::from_millis(5);
/// Idle interval over which the receiver CPU's background load is measured.
const BACKGROUND: Duration = Duration::from_millis(300);
/// How often to look for a quiet machine before a run (each look: `BACKGROUND` + 1 s).
const QUIET_ATTEMPTS: u32 = 60;
/// The paper's receive throughput gain of PX-caravan (kernel patch, UDP_GRO on), §7.2.
const PAPER_SPEEDUP: f64 = 1.7;

/// Command line of the caravan benchmark.
#[derive(Debug, Parser)]
#[command(about = "Receive cost of plain UDP vs PX-caravans (eBPF-decapsulated or read whole)")]
struct Args {
    /// Also write the cases as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Datagrams in the offered stream.
    #[arg(long, default_value_t = 420_000)]
    datagrams: u64,
    /// Payload bytes per datagram.
    #[arg(long, default_value_t = 1200)]
    size: usize,
    /// Runs per case; the median (by throughput) is reported.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Most datagrams in flight between sender and application.
    #[arg(long, default_value_t = 512)]
    window: u64,
    /// Run only these cases (repeatable).
    #[arg(long = "mode", value_enum)]
    modes: Vec<Mode>,
}

/// The three ways the stream reaches the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Plain UDP, one packet and one recv per datagram.
    Plain,
    /// Caravans unpacked by caravan-ebpf, one recv per datagram.
    Ebpf,
    /// Caravans delivered whole to a pass-through port, split by caravan::Reader.
    Reader,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Plain, Mode::Ebpf, Mode::Reader];

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain-udp",
            Mode::Ebpf => "caravan-ebpf",
            Mode::Reader => "caravan-reader",
        }
    }

    fn port(self) -> u16 {
        match self {
            Mode::Plain => PLAIN_PORT,
            Mode::Ebpf => DECAP_PORT,
            Mode::Reader => PASS_PORT,
        }
    }
}

/// One run of one case.
#[derive(Clone, Debug)]
struct Sample {
    mode: Mode,
    sent: u64,
    packets_sent: u64,
    received: u64,
    bad: u64,
    recv_calls: u64,
    send_errors: u64,
    window_stalls: u64,
    /// Sender start to the last datagram read.
    active: Duration,
    /// The whole measured interval (CPU snapshots).
    wall: Duration,
    rx_busy_ns: f64,
    background_ns: f64,
    machine_busy_ns: f64,
    rx_thread_ns: u64,
    backlog_drops: u64,
}

impl Sample {
    fn datagrams_per_s(&self) -> f64 {
        self.received as f64 / self.active.as_secs_f64().max(1e-9)
    }

    fn per_datagram(&self, ns: f64) -> f64 {
        ns / (self.received.max(1) as f64)
    }

    fn rx_cpu_ns(&self) -> f64 {
        (self.rx_busy_ns - self.background_ns).max(0.0)
    }

    fn rx_utilization(&self) -> f64 {
        self.rx_cpu_ns() / self.active.as_nanos().max(1) as f64
    }
}

// ---------------------------------------------------------------------------------------------
// The offered stream.

fn payload(seq: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend((8..size).map(|j| (j as u8) ^ (seq as u8)));
}

/// One datagram as an Ethernet/IPv4/UDP frame (DF, ID 1) with a correct UDP checksum (pxio
/// packs frames).
fn datagram_frame(dport: u16, payload: &[u8]) -> Result<Vec<u8>> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: wire::ethernet::ethertype::IPV4,
    };
    let ip = wire::IpRepr::V4(wire::Ipv4Repr {
        ident: 1,
        dont_frag: true,
        ..wire::Ipv4Repr::new(TX_IP.octets(), RX_IP.octets())
    });
    let udp = wire::UdpRepr {
        src_port: SPORT,
        dst_port: dport,
    };
    wire::udp_frame(ethernet, ip, udp, payload).context("build a datagram frame")
}

/// A caravan's outer UDP payload and how many datagrams it carries.
struct Caravan {
    payload: Vec<u8>,
    datagrams: u64,
}

fn finish(builder: CaravanBuilder<HeapBuf>, datagrams: u64) -> Result<Caravan> {
    let frame = builder.finish().to_vec();
    ensure!(
        wire::Ipv4Packet::new_unchecked(&frame[ETH..]).dscp() == caravan::DEFAULT_DSCP,
        "pxio did not mark the caravan"
    );
    Ok(Caravan {
        payload: frame[ETH + OUTER..].to_vec(),
        datagrams,
    })
}

/// The stream packed greedily by pxio's encoder into caravans of at most the iMTU.
fn build_caravans(dport: u16, n: u64, size: usize) -> Result<Vec<Caravan>> {
    let pool = HeapPool::new(16384);
    let cfg = CaravanConfig {
        imtu: IMTU,
        ..CaravanConfig::default()
    };
    let mut out = Vec::new();
    let mut open: Option<(CaravanBuilder<HeapBuf>, u64)> = None;
    let mut buf = Vec::with_capacity(size);
    for seq in 0..n {
        payload(seq, size, &mut buf);
        let pkt = pool.packet(&datagram_frame(dport, &buf)?);
        let pkt = match open.take() {
            None => pkt,
            Some((mut b, k)) => match b.push(pkt) {
                Ok(()) => {
                    open = Some((b, k + 1));
                    continue;
                }
                Err((CaravanError::Full, pkt)) => {
                    out.push(finish(b, k)?);
                    pkt
                }
                Err((e, _)) => bail!("packing datagram {seq}: {e}"),
            },
        };
        let b = CaravanBuilder::start(pkt, cfg, &pool)
            .map_err(|(e, _)| anyhow::anyhow!("starting a caravan at datagram {seq}: {e}"))?;
        open = Some((b, 1));
    }
    if let Some((b, k)) = open {
        out.push(finish(b, k)?);
    }
    Ok(out)
}

/// What the sender sends in one case.
enum Offered<'a> {
    Plain { n: u64, size: usize },
    Caravans(&'a [Caravan]),
}

// ---------------------------------------------------------------------------------------------
// CPU accounting.

/// Busy ticks (user + nice + system + irq + softirq) per `/proc/stat` line: index 0 is the
/// machine ("cpu"), 1 + i is CPU i.
fn busy_ticks() -> Result<Vec<u64>> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.starts_with("cpu")) {
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        ensure!(f.len() >= 7, "short /proc/stat line: {line}");
        // user nice system idle iowait irq softirq [steal guest guest_nice]
        out.push(f[0] + f[1] + f[2] + f[5] + f[6]);
    }
    Ok(out)
}

/// Packets dropped at the backlog (`/proc/net/softnet_stat`, column 2), all CPUs.
fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|x| u64::from_str_radix(x, 16).ok())
        .sum()
}

fn thread_cpu_ns() -> u64 {
    getrusage(UsageWho::RUSAGE_THREAD)
        .map(|u| {
            let ns = |t: nix::sys::time::TimeVal| {
                t.tv_sec() as u64 * 1_000_000_000 + t.tv_usec() as u64 * 1000
            };
            ns(u.user_time()) + ns(u.system_time())
        })
        .unwrap_or(0)
}

fn pin(cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)?;
    sched_setaffinity(Pid::from_raw(0), &set).with_context(|| format!("pinning to CPU {cpu}"))
}

// ---------------------------------------------------------------------------------------------
// The lab.

/// Two namespaces and the veth between them; dropping it deletes all (netlab).
struct Lab {
    rx: Netns,
    tx: Netns,
    rx_if: String,
}

fn lab(rx_cpu: usize) -> Result<Lab> {
    let tx = Netns::new("cbtx")?;
    let rx = Netns::new("cbrx")?;
    let (a, b) = netlab::veth_between(
        &tx,
        &format!("{TX_IP}/24"),
        &rx,
        &format!("{RX_IP}/24"),
        "cb",
        9000,
    )?;
    // Nothing merges or splits packets; checksums are computed and verified in software.
    tx.exec(
        "ethtool",
        &[
            "-K", &a, "gro", "off", "gso", "off", "tso", "off", "tx", "off",
        ],
    )?;
    rx.exec(
        "ethtool",
        &["-K", &b, "gro", "off", "gso", "off", "tso", "off"],
    )?;
    // All receive processing of the receiver's veth on the receiver's CPU.
    let rps = format!("/sys/class/net/{b}/queues/rx-0/rps_cpus");
    rx.exec("sh", &["-c", &format!("echo {:x} > {rps}", 1u64 << rx_cpu)])?;
    let mask = rx.exec("cat", &[&rps])?;
    println!("receiver veth {b}: rps_cpus = {}", mask.trim());
    Ok(Lab { rx, tx, rx_if: b })
}

fn drain(sock: &UdpSocket) -> Result<()> {
    sock.set_nonblocking(true)?;
    let mut buf = vec![0u8; 65536];
    for _ in 0..1_000_000 {
        if sock.recv(&mut buf).is_err() {
            break;
        }
    }
    sock.set_nonblocking(false)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// One case.

struct RxResult {
    received: u64,
    bad: u64,
    calls: u64,
    last: Instant,
    thread_ns: u64,
}

fn receive(
    mode: Mode,
    sock: &UdpSocket,
    expected: u64,
    size: usize,
    progress: &AtomicU64,
    sender_done: &AtomicBool,
) -> RxResult {
    let start_ns = thread_cpu_ns();
    let deadline = Instant::now() + CASE_DEADLINE;
    let mut buf = vec![0u8; 65536];
    let (mut got, mut bad, mut calls, mut next, mut timeouts) = (0u64, 0u64, 0u64, 0u64, 0u32);
    let mut last = Instant::now();
    let mut check = |p: &[u8], got: &mut u64| {
        let seq = p
            .get(..8)
            .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
        if p.len() != size || seq != Some(next) {
            bad += 1;
        }
        next = seq.map_or(next, |s| s + 1);
        *got += 1;
    };
    while got < expected && last < deadline {
        calls += 1;
        match sock.recv(&mut buf) {
            Ok(n) => {
                match mode {
                    Mode::Plain | Mode::Ebpf => check(&buf[..n], &mut got),
                    Mode::Reader => match Reader::with_ports(&buf[..n], SPORT, PASS_PORT) {
                        Ok(r) => r.for_each(|d| check(d.payload, &mut got)),
                        Err(_) => check(&[], &mut got),
                    },
                }
                progress.store(got, Ordering::Relaxed);
                last = Instant::now();
                timeouts = 0;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if sender_done.load(Ordering::Relaxed) {
                    timeouts += 1;
                    if timeouts >= 2 {
                        break;
                    }
                }
                if Instant::now() >= deadline {
                    break;
                }
            }
            Err(e) => {
                eprintln!("{}: recv: {e}", mode.name());
                break;
            }
        }
    }
    RxResult {
        received: got,
        bad,
        calls,
        last,
        thread_ns: thread_cpu_ns().saturating_sub(start_ns),
    }
}

/// Sends the offered stream, keeping at most `window` datagrams in flight. Returns
/// (datagrams sent, packets sent, send errors, window stalls).
fn send(
    sock: &UdpSocket,
    to: SocketAddrV4,
    offered: &Offered<'_>,
    window: u64,
    progress: &AtomicU64,
) -> (u64, u64, u64, u64) {
    let (mut sent, mut packets, mut errors, mut stalls) = (0u64, 0u64, 0u64, 0u64);
    let mut buf = Vec::new();
    let mut wait_for = |sent: u64, k: u64| {
        let since = Instant::now();
        while sent + k > progress.load(Ordering::Relaxed) + window {
            if since.elapsed() > MAX_WAIT {
                stalls += 1;
                return;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    };
    let units: Box<dyn Iterator<Item = (&[u8], u64)>> = match offered {
        Offered::Plain { .. } => Box::new(std::iter::empty()),
        Offered::Caravans(c) => Box::new(c.iter().map(|c| (c.payload.as_slice(), c.datagrams))),
    };
    if let Offered::Plain { n, size } = *offered {
        for seq in 0..n {
            wait_for(sent, 1);
            payload(seq, size, &mut buf);
            if sock.send_to(&buf, to).is_err() {
                errors += 1;
            }
            sent += 1;
            packets += 1;
        }
    }
    for (bytes, k) in units {
        wait_for(sent, k);
        if sock.send_to(bytes, to).is_err() {
            errors += 1;
        }
        sent += k;
        packets += 1;
    }
    (sent, packets, errors, stalls)
}

#[allow(clippy::too_many_arguments)]
fn run_case(
    mode: Mode,
    rx_sock: &UdpSocket,
    tx_sock: &UdpSocket,
    offered: &Offered<'_>,
    expected: u64,
    args: &Args,
    (tx_cpu, rx_cpu): (usize, usize),
) -> Result<Sample> {
    drain(rx_sock)?;
    let tos: u32 = if mode == Mode::Plain {
        0
    } else {
        u32::from(caravan::DEFAULT_DSCP) << 2
    };
    setsockopt(tx_sock, sockopt::Ipv4Tos, &(tos as i32))?;
    // Background load of the receiver's CPU; wait (bounded) for a quiet machine, since other
    // work on the receiver's CPU would take its time from the receiver.
    let mut bg_rate = 1.0;
    for attempt in 0..QUIET_ATTEMPTS {
        let b0 = busy_ticks()?;
        let t = Instant::now();
        std::thread::sleep(BACKGROUND);
        let b1 = busy_ticks()?;
        let wall = t.elapsed().as_nanos() as f64;
        bg_rate = ((b1[1 + rx_cpu] - b0[1 + rx_cpu]) * TICK_NS) as f64 / wall;
        let machine = ((b1[0] - b0[0]) * TICK_NS) as f64 / wall;
        if bg_rate <= 0.05 && machine <= 0.10 {
            break;
        }
        if attempt + 1 == QUIET_ATTEMPTS {
            eprintln!(
                "  warning: the machine is busy (receiver CPU {:.0}%, all CPUs {:.0}%); measuring anyway",
                100.0 * bg_rate,
                100.0 * machine
            );
        } else if attempt == 0 {
            eprintln!(
                "  the machine is busy (receiver CPU {:.0}%, all CPUs {:.0}%): waiting for quiet",
                100.0 * bg_rate,
                100.0 * machine
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }

    let progress = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let barrier = Barrier::new(3);
    let to = SocketAddrV4::new(RX_IP, mode.port());
    let (snap0, drops0, t0, tx, rx) = std::thread::scope(|s| -> Result<_> {
        let rxh = s.spawn(|| -> Result<RxResult> {
            let pinned = pin(rx_cpu);
            barrier.wait();
            pinned?;
            Ok(receive(
                mode, rx_sock, expected, args.size, &progress, &done,
            ))
        });
        let txh = s.spawn(|| -> Result<(u64, u64, u64, u64)> {
            let pinned = pin(tx_cpu);
            barrier.wait();
            pinned?;
            let r = send(tx_sock, to, offered, args.window, &progress);
            done.store(true, Ordering::Relaxed);
            Ok(r)
        });
        let snap0 = busy_ticks()?;
        let drops0 = backlog_drops();
        let t0 = Instant::now();
        barrier.wait();
        let tx = txh.join().expect("sender thread")?;
        let rx = rxh.join().expect("receiver thread")?;
        Ok((snap0, drops0, t0, tx, rx))
    })?;
    let wall = t0.elapsed();
    let snap1 = busy_ticks()?;
    let ns = |i: usize| ((snap1[i] - snap0[i]) * TICK_NS) as f64;
    Ok(Sample {
        mode,
        sent: tx.0,
        packets_sent: tx.1,
        send_errors: tx.2,
        window_stalls: tx.3,
        received: rx.received,
        bad: rx.bad,
        recv_calls: rx.calls,
        active: rx.last.saturating_duration_since(t0),
        wall,
        rx_busy_ns: ns(1 + rx_cpu),
        background_ns: bg_rate * wall.as_nanos() as f64,
        machine_busy_ns: ns(0),
        rx_thread_ns: rx.thread_ns,
        backlog_drops: backlog_drops().saturating_sub(drops0),
    })
}

// ---------------------------------------------------------------------------------------------

fn main() -> Result<()> {
    let args = Args::parse();
    if !nix::unistd::geteuid().is_root() {
        bail!("caravan-bench needs root (namespaces, eBPF); run `sudo cargo xtask bench caravan`");
    }
    ensure!(
        (8..=usize::from(IMTU) - OUTER - UDP_HDR).contains(&args.size),
        "--size must be 8..={}",
        usize::from(IMTU) - OUTER - UDP_HDR
    );
    ensure!(
        args.datagrams > 0 && args.reps > 0 && args.window > 0,
        "counts must be positive"
    );
    let modes: Vec<Mode> = if args.modes.is_empty() {
        Mode::ALL.to_vec()
    } else {
        Mode::ALL
            .into_iter()
            .filter(|m| args.modes.contains(m))
            .collect()
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    ensure!(
        cpus >= 2,
        "caravan-bench needs 2 CPUs (sender and receiver apart)"
    );
    let (tx_cpu, rx_cpu) = (0, cpus - 1);

    println!(
        "offered stream: {} datagrams of {} B payload; building caravans with pxio (iMTU {IMTU})",
        args.datagrams, args.size
    );
    let decap_caravans = build_caravans(DECAP_PORT, args.datagrams, args.size)?;
    let pass_caravans = build_caravans(PASS_PORT, args.datagrams, args.size)?;
    let per = args.datagrams as f64 / decap_caravans.len() as f64;
    println!(
        "  {} caravans, {per:.2} datagrams each, outer UDP payload up to {} B",
        decap_caravans.len(),
        decap_caravans
            .iter()
            .map(|c| c.payload.len())
            .max()
            .unwrap_or(0)
    );

    let lab = lab(rx_cpu)?;
    let socks: Vec<UdpSocket> = lab.rx.enter(|| -> Result<Vec<UdpSocket>> {
        [PLAIN_PORT, DECAP_PORT, PASS_PORT]
            .iter()
            .map(|&p| -> Result<UdpSocket> {
                let s = UdpSocket::bind(SocketAddrV4::new(RX_IP, p))?;
                s.set_read_timeout(Some(READ_TIMEOUT))?;
                setsockopt(&s, sockopt::RcvBufForce, &(64 << 20))?;
                Ok(s)
            })
            .collect()
    })??;
    let tx_sock = lab
        .tx
        .enter(|| UdpSocket::bind(SocketAddrV4::new(TX_IP, SPORT)))??;
    // Resolve ARP before anything is measured.
    for _ in 0..10 {
        tx_sock.send_to(b"warm-up!", SocketAddrV4::new(RX_IP, PLAIN_PORT))?;
    }
    std::thread::sleep(Duration::from_millis(100));
    drain(&socks[0])?;
    println!(
        "sender on CPU {tx_cpu}, receiver (thread + RPS) on CPU {rx_cpu}; window {} datagrams; {} runs per case",
        args.window, args.reps
    );

    let mut decap: Option<Decap> = None;
    let mut results: Vec<(Sample, Vec<Sample>)> = Vec::new();
    for mode in modes {
        if mode != Mode::Plain && decap.is_none() {
            let mut d = lab
                .rx
                .enter(|| Decap::attach(&lab.rx_if, DecapConfig::default()))?
                .context("attaching caravan-ebpf (run `cargo xtask build-ebpf`)")?;
            d.add_passthrough_port(PASS_PORT)?;
            decap = Some(d);
        }
        let (sock, offered) = match mode {
            Mode::Plain => (
                &socks[0],
                Offered::Plain {
                    n: args.datagrams,
                    size: args.size,
                },
            ),
            Mode::Ebpf => (&socks[1], Offered::Caravans(&decap_caravans)),
            Mode::Reader => (&socks[2], Offered::Caravans(&pass_caravans)),
        };
        let before = decap.as_ref().map(|d| d.stats()).transpose()?;
        let mut runs = Vec::new();
        for rep in 0..args.reps {
            let s = run_case(
                mode,
                sock,
                &tx_sock,
                &offered,
                args.datagrams,
                &args,
                (tx_cpu, rx_cpu),
            )?;
            println!(
                "  {:<15} run {}: {:>9.0} datagrams/s, {:>6.0} ns/datagram rx CPU, {} of {} received",
                mode.name(),
                rep + 1,
                s.datagrams_per_s(),
                s.per_datagram(s.rx_cpu_ns()),
                s.received,
                s.sent
            );
            runs.push(s);
        }
        if let (Some(d), Some(b)) = (&decap, before) {
            let a = d.stats()?;
            println!(
                "  decap counters: +{} caravans, +{} datagrams, +{} passed through, +{} malformed, +{} helper errors",
                a.caravans - b.caravans,
                a.datagrams - b.datagrams,
                a.passed_through - b.passed_through,
                a.malformed - b.malformed,
                a.helper_errors - b.helper_errors
            );
        }
        let mut sorted = runs.clone();
        sorted.sort_by(|x, y| x.datagrams_per_s().total_cmp(&y.datagrams_per_s()));
        results.push((sorted[sorted.len() / 2].clone(), runs));
    }
    drop(decap);

    report(&results, &args)?;
    drop(lab);
    Ok(())
}

fn report(results: &[(Sample, Vec<Sample>)], args: &Args) -> Result<()> {
    let plain = results
        .iter()
        .find(|(s, _)| s.mode == Mode::Plain)
        .map(|(s, _)| s.clone());
    println!();
    println!(
        "{:<15} {:>8} {:>8} {:>8} {:>6} {:>12} {:>11} {:>8} {:>11} {:>11} {:>10} {:>9} {:>9}",
        "mode",
        "sent",
        "packets",
        "received",
        "bad",
        "datagrams/s",
        "CPU ns/dg",
        "rx util",
        "thread ns",
        "machine ns",
        "recv calls",
        "x tput",
        "x CPU"
    );
    let mut cases = Vec::new();
    for (s, runs) in results {
        let dps = s.datagrams_per_s();
        let cpu = s.per_datagram(s.rx_cpu_ns());
        let (x_tput, x_cpu) = plain.as_ref().map_or((f64::NAN, f64::NAN), |p| {
            (
                dps / p.datagrams_per_s(),
                p.per_datagram(p.rx_cpu_ns()) / cpu,
            )
        });
        println!(
            "{:<15} {:>8} {:>8} {:>8} {:>6} {:>12.0} {:>11.0} {:>7.0}% {:>11.0} {:>11.0} {:>10} {:>8.2}x {:>8.2}x",
            s.mode.name(),
            s.sent,
            s.packets_sent,
            s.received,
            s.bad,
            dps,
            cpu,
            100.0 * s.rx_utilization(),
            s.per_datagram(s.rx_thread_ns as f64),
            s.per_datagram(s.machine_busy_ns),
            s.recv_calls,
            x_tput,
            x_cpu
        );
        if s.send_errors + s.window_stalls + s.backlog_drops > 0 {
            println!(
                "{:<15} send errors {}, window stalls {}, backlog drops {}",
                "", s.send_errors, s.window_stalls, s.backlog_drops
            );
        }
        cases.push(json!({
            "mode": s.mode.name(),
            "datagrams_per_s": dps,
            "cpu_ns_per_datagram": cpu,
            "datagrams_sent": s.sent,
            "packets_sent": s.packets_sent,
            "datagrams_received": s.received,
            "bad_datagrams": s.bad,
            "recv_syscalls": s.recv_calls,
            "rx_cpu_utilization": s.rx_utilization(),
            "rx_thread_cpu_ns_per_datagram": s.per_datagram(s.rx_thread_ns as f64),
            "machine_cpu_ns_per_datagram": s.per_datagram(s.machine_busy_ns),
            "rx_background_cpu_ns": s.background_ns,
            "active_s": s.active.as_secs_f64(),
            "wall_s": s.wall.as_secs_f64(),
            "send_errors": s.send_errors,
            "window_stalls": s.window_stalls,
            "backlog_drops": s.backlog_drops,
            "throughput_vs_plain": if x_tput.is_finite() { json!(x_tput) } else { json!(null) },
            "cpu_saving_vs_plain": if x_cpu.is_finite() { json!(x_cpu) } else { json!(null) },
            "runs_datagrams_per_s": runs.iter().map(Sample::datagrams_per_s).collect::<Vec<_>>(),
            "runs_cpu_ns_per_datagram": runs.iter().map(|r| r.per_datagram(r.rx_cpu_ns())).collect::<Vec<_>>(),
        }));
    }
    println!(
        "CPU ns/dg: receiver CPU (thread + steered softirq) busy minus background, per datagram; \
         thread ns: receiving thread only; machine ns: all CPUs, sender included."
    );
    println!(
        "x tput / x CPU: against plain-udp; the paper's kernel patch gave {PAPER_SPEEDUP}x receive \
         throughput (UDP_GRO baseline, §7.2)."
    );
    if let Some(path) = &args.json {
        let doc = json!({
            "benchmark": "caravan",
            "config": {
                "datagrams": args.datagrams,
                "payload_bytes": args.size,
                "imtu": IMTU,
                "window": args.window,
                "reps": args.reps,
                "paper_receive_speedup": PAPER_SPEEDUP,
            },
            "cases": cases,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
