//! `caravan-bench`: what a PX-caravan saves a receiving endpoint (SIGCOMM'26 §6; §7.2 "Receiver
//! in a b-network"). Run it through `cargo xtask bench caravan [--json FILE]` (root: it creates
//! network namespaces and loads the eBPF program).
//!
//! # Setup
//! A sender and a receiver namespace joined by a veth at MTU 9000 (addresses 198.18.9.0/24 and
//! 2001:db8:9::/64; `--ipv6` sends over IPv6).
//! The sender neither merges nor splits packets (`gro gso tso off`) and computes checksums in
//! software (`tx off`), so the receiver verifies every UDP checksum itself. The receiving veth
//! runs as a NIC's receive queue with its interrupt on the receiver's CPU: GRO on (a NIC's
//! default, and what `UDP_GRO` needs), NAPI threaded, its thread pinned to that CPU, no RPS
//! (see `lab`). A veth without NAPI would run its receive path inside the sender's `send`, one
//! packet at a time, on the sender's CPU.
//!
//! # The offered stream, the same in every case
//! `--datagrams` datagrams of `--size` B payload (sequence number in the first 8 bytes), of one
//! flow. The cases differ only in how they travel and are read. Three baselines, plain UDP
//! (one UDP packet per datagram), read as a user who cares about receive cost would:
//! 1. `plain-udp`: one `recv` per datagram; no eBPF attached.
//! 2. `plain-recvmmsg`: `recvmmsg` of up to 64 datagrams per call (`MSG_WAITFORONE`).
//! 3. `plain-udp-gro`: the socket has `UDP_GRO`, so GRO coalesces up to 64 datagrams into one
//!    socket buffer; one `recvmsg` per coalesced packet, split at the `UDP_GRO` cmsg's segment
//!    size.
//!
//! Then caravans, packed by pxio's `CaravanBuilder` up to the 9000 B iMTU (7 × 1200 B):
//! 4. `caravan-ebpf`: unpacked by caravan-ebpf on the receiver's ingress; one `recv` per
//!    datagram.
//! 5. `caravan-reader`: to a pass-through port, delivered whole, one `recvmsg` per caravan
//!    (`caravan::recv`, with the traffic class that tells a caravan: the port reports it), split
//!    by `caravan::Reader`.
//! 6. `caravan-batch`: the same, `caravan::BatchReader`: up to 64 caravans per `recvmmsg`.
//!
//! The report sets each caravan reader against the best baseline (least receive cost per
//! datagram).
//!
//! # Pacing and CPU placement
//! The sender thread is pinned to CPU 0, the receiving thread and the NAPI thread to the last
//! CPU. So the receiver is one core, as in the paper's Figure 13, and the sender's work stays
//! off it. The sender is closed-loop: it keeps at most `--window` datagrams in flight (sent,
//! not yet read by the application), so the receiver runs flat out without overflowing a queue
//! (drops would charge wasted work to one case and not another). A sender that waited 5 ms
//! sends anyway, so every loop is bounded.
//!
//! # What is measured, on the receiver
//! * `datagrams_per_s`: datagrams the application got, divided by the time from the sender's
//!   start to the last datagram read. Other processes on the receiver's CPU slow it down.
//! * `rx_cost_ns_per_datagram` ("rx ns/dg", the figure the cases are compared by): CPU time
//!   of the receiving thread (`getrusage(RUSAGE_THREAD)`), of the NAPI thread and of the
//!   receiver CPU's ksoftirqd (`/proc/PID/stat`), per datagram. The NAPI thread runs the kernel
//!   receive path (GRO, TC ingress and the eBPF program, IP, UDP, socket enqueue and wakeup),
//!   and the backlog of the datagrams the decapsulator redirects, as a softirq when it
//!   re-enables bottom halves; when that softirq runs too long the kernel hands the rest to
//!   ksoftirqd ("ksirqd", about 0 for plain UDP). The receiving thread runs the system calls
//!   and the copies. Work of other processes on that CPU is in none of them, so the figure
//!   holds on a shared machine. `/proc` counts in 10 ms ticks: with 420,000 datagrams, 24 ns
//!   per datagram.
//! * `rx_softirq_ns_per_datagram` ("softirq"): irq and softirq time on the receiver's CPU
//!   (`/proc/stat`) above its background rate measured idle for 300 ms just before, whoever it
//!   ran in: the backlog of redirected datagrams shows here, but the kernel (tick-based
//!   accounting) also charges it to the thread it ran in, so it is not added again (on a busy
//!   machine, plus the background's drift).
//! * `cpu_ns_per_datagram` ("busy ns"): busy time of the receiver's CPU (user, nice, system,
//!   irq and softirq) minus its background, per datagram; exact on a quiet machine only. Each
//!   run first waits (up to `--quiet-wait` s) until the receiver CPU is ≤ 5% and the machine
//!   ≤ 10% busy.
//! * Extras: the whole machine's CPU per datagram (sender included), receive syscalls, backlog
//!   drops (`/proc/net/softnet_stat`).
//!
//! Each case runs `--reps` times; the run with the median receive cost is reported.

#![forbid(unsafe_code)]

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use caravan::{BatchError, BatchReader, Decap, DecapConfig};
use clap::Parser;
use netlab::Netns;
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use nix::unistd::Pid;
use pxio::caravan::{CaravanBuilder, CaravanConfig, CaravanError};
use pxio::{wire, HeapBuf, HeapPool, PacketBuf};
use serde_json::json;

const TX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 1);
const RX_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 9, 2);
const TX_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 1);
const RX_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 9, 0, 0, 0, 0, 2);

/// The sender's address in the run's family.
fn tx_ip(v6: bool) -> IpAddr {
    if v6 {
        TX_IP6.into()
    } else {
        TX_IP.into()
    }
}

/// The receiver's address in the run's family.
fn rx_ip(v6: bool) -> IpAddr {
    if v6 {
        RX_IP6.into()
    } else {
        RX_IP.into()
    }
}

/// Outer IP + UDP headers of a caravan in the run's family.
fn outer(v6: bool) -> usize {
    if v6 {
        wire::ipv6::field::HEADER_LEN + UDP_HDR
    } else {
        OUTER
    }
}
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
/// The paper's receive throughput gain of PX-caravan (kernel patch, UDP_GRO on), §7.2.
const PAPER_SPEEDUP: f64 = 1.7;
/// Messages per `recvmmsg` (plain datagrams or caravans).
const BATCH: usize = 64;
/// Ports of the cases that read plain UDP in batches, or coalesced by GRO.
/// Port of the `UDP_GRO` socket (`plain-recvmmsg` reads the plain port, `caravan-batch` the
/// pass-through port: the same sockets, read another way).
const GRO_PORT: u16 = 6004;
/// Largest datagram a plain batch slot takes.
const PLAIN_SLOT: usize = 2048;

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
    /// Longest wait for a quiet machine before each run, seconds (then it measures anyway:
    /// the receive cost the cases are compared by leaves other processes out).
    #[arg(long, default_value_t = 10)]
    quiet_wait: u64,
    /// The stream over IPv6 instead of IPv4.
    #[arg(long)]
    ipv6: bool,
    /// Fail unless every run of every case delivered every datagram intact, in order (the CI
    /// smoke run).
    #[arg(long)]
    check: bool,
}

/// The ways the stream reaches the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    /// Plain UDP, one packet and one recv per datagram.
    Plain,
    /// Plain UDP, recvmmsg of up to 64 datagrams per call.
    Mmsg,
    /// Plain UDP coalesced by UDP_GRO, one recvmsg per coalesced packet.
    Gro,
    /// Caravans unpacked by caravan-ebpf, one recv per datagram.
    Ebpf,
    /// Caravans delivered whole to a pass-through port, split by caravan::Reader.
    Reader,
    /// The same, up to 64 caravans per recvmmsg (caravan::BatchReader).
    Batch,
}

impl Mode {
    /// Baselines first: the eBPF program is attached from the first caravan case on.
    const ALL: [Mode; 6] = [
        Mode::Plain,
        Mode::Mmsg,
        Mode::Gro,
        Mode::Ebpf,
        Mode::Reader,
        Mode::Batch,
    ];

    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain-udp",
            Mode::Mmsg => "plain-recvmmsg",
            Mode::Gro => "plain-udp-gro",
            Mode::Ebpf => "caravan-ebpf",
            Mode::Reader => "caravan-reader",
            Mode::Batch => "caravan-batch",
        }
    }

    fn port(self) -> u16 {
        match self {
            Mode::Plain | Mode::Mmsg => PLAIN_PORT,
            Mode::Gro => GRO_PORT,
            Mode::Ebpf => DECAP_PORT,
            Mode::Reader | Mode::Batch => PASS_PORT,
        }
    }

    /// Whether the stream travels as plain UDP (else as caravans).
    fn plain(self) -> bool {
        matches!(self, Mode::Plain | Mode::Mmsg | Mode::Gro)
    }

    /// A baseline a caravan reader is set against.
    fn baseline(self) -> bool {
        self.plain()
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
    /// irq + softirq time on the receiver's CPU, and its background share.
    rx_irq_ns: f64,
    background_irq_ns: f64,
    /// CPU time of the receiving veth's NAPI thread.
    napi_ns: u64,
    /// CPU time of the receiver CPU's ksoftirqd.
    ksoftirqd_ns: u64,
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

    /// The receive cost that other work on the receiver's CPU does not blur: the CPU time of
    /// the receiving thread, the NAPI thread and ksoftirqd, where the whole receive path runs
    /// (see [`lab`]).
    fn rx_cost_ns(&self) -> f64 {
        self.rx_thread_ns as f64 + self.napi_ns as f64 + self.ksoftirqd_ns as f64
    }

    /// irq and softirq time on the receiver's CPU above background, in whichever thread it
    /// ran (informational: the threads' own times already hold it).
    fn rx_softirq_ns(&self) -> f64 {
        (self.rx_irq_ns - self.background_irq_ns).max(0.0)
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

/// One datagram as an Ethernet/IP/UDP frame (IPv4: DF, ID 1) with a correct UDP checksum
/// (pxio packs frames).
fn datagram_frame(dport: u16, payload: &[u8], v6: bool) -> Result<Vec<u8>> {
    let ethernet = wire::EthernetRepr {
        dst: [2, 0, 0, 0, 0, 2],
        src: [2, 0, 0, 0, 0, 1],
        vlan_tci: None,
        ethertype: if v6 {
            wire::ethernet::ethertype::IPV6
        } else {
            wire::ethernet::ethertype::IPV4
        },
    };
    let ip = if v6 {
        wire::IpRepr::V6(wire::Ipv6Repr::new(TX_IP6.octets(), RX_IP6.octets()))
    } else {
        wire::IpRepr::V4(wire::Ipv4Repr {
            ident: 1,
            dont_frag: true,
            ..wire::Ipv4Repr::new(TX_IP.octets(), RX_IP.octets())
        })
    };
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

fn finish(builder: CaravanBuilder<HeapBuf>, datagrams: u64, v6: bool) -> Result<Caravan> {
    let frame = builder.finish().to_vec();
    let dscp = if v6 {
        wire::Ipv6Packet::new_unchecked(&frame[ETH..]).dscp()
    } else {
        wire::Ipv4Packet::new_unchecked(&frame[ETH..]).dscp()
    };
    ensure!(
        dscp == caravan::DEFAULT_DSCP,
        "pxio did not mark the caravan"
    );
    Ok(Caravan {
        payload: frame[ETH + outer(v6)..].to_vec(),
        datagrams,
    })
}

/// The stream packed greedily by pxio's encoder into caravans of at most the iMTU.
fn build_caravans(dport: u16, n: u64, size: usize, v6: bool) -> Result<Vec<Caravan>> {
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
        let pkt = pool.packet(&datagram_frame(dport, &buf, v6)?);
        let pkt = match open.take() {
            None => pkt,
            Some((mut b, k)) => match b.push(pkt) {
                Ok(()) => {
                    open = Some((b, k + 1));
                    continue;
                }
                Err((CaravanError::Full, pkt)) => {
                    out.push(finish(b, k, v6)?);
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
        out.push(finish(b, k, v6)?);
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

/// `/proc/stat` ticks per line: index 0 is the machine ("cpu"), 1 + i is CPU i.
struct Ticks {
    /// user + nice + system + irq + softirq.
    busy: Vec<u64>,
    /// irq + softirq: receive processing, whoever it interrupted.
    irq: Vec<u64>,
}

fn busy_ticks() -> Result<Ticks> {
    let text = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let (mut busy, mut irq) = (Vec::new(), Vec::new());
    for line in text.lines().filter(|l| l.starts_with("cpu")) {
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        ensure!(f.len() >= 7, "short /proc/stat line: {line}");
        // user nice system idle iowait irq softirq [steal guest guest_nice]
        busy.push(f[0] + f[1] + f[2] + f[5] + f[6]);
        irq.push(f[5] + f[6]);
    }
    Ok(Ticks { busy, irq })
}

/// The threads named `napi/IFACE-*`: a veth's threaded NAPI.
fn napi_threads(iface: &str) -> Vec<Pid> {
    let prefix = format!("napi/{iface}-");
    threads_where(|comm| comm.starts_with(&prefix))
}

/// The threads named exactly `name` (a kernel thread such as `ksoftirqd/1`).
fn named_threads(name: &str) -> Vec<Pid> {
    threads_where(|comm| comm == name)
}

/// The processes (kernel threads are processes) whose `comm` passes `keep`.
fn threads_where(keep: impl Fn(&str) -> bool) -> Vec<Pid> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| keep(c.trim_end()))
        })
        .map(Pid::from_raw)
        .collect()
}

/// utime + stime of `pids`, ns (`/proc/PID/stat` fields 14 and 15, in `USER_HZ` ticks).
fn threads_cpu_ns(pids: &[Pid]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The name can hold spaces; fields resume after its closing parenthesis.
            let rest = stat.get(stat.rfind(')')? + 2..)?;
            let f: Vec<&str> = rest.split_whitespace().collect();
            // `rest` starts at field 3 (state): utime is field 14, stime 15.
            let utime: u64 = f.get(11)?.parse().ok()?;
            let stime: u64 = f.get(12)?.parse().ok()?;
            Some((utime + stime) * TICK_NS)
        })
        .sum()
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
    /// The receiving veth's NAPI threads, pinned to the receiver's CPU.
    napi: Vec<Pid>,
    /// The receiver CPU's ksoftirqd, which takes over softirqs that ran too long.
    ksoftirqd: Vec<Pid>,
}

/// The lab. The receiving veth runs as a NIC's receive queue with its interrupt on the
/// receiver's CPU: GRO on (a NIC's default, and what `UDP_GRO` needs), NAPI threaded with its
/// thread pinned to that CPU, no RPS. So the whole receive path (NAPI poll, GRO, TC ingress and
/// the eBPF program, IP, UDP, the backlog of redirected datagrams, socket enqueue and wakeup)
/// runs in that thread, the rest in the application's receiving thread, and the two threads'
/// CPU time is the receive cost. A veth without NAPI would instead run its receive path from
/// the sender's `send`, one packet at a time.
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
    // IPv6 beside IPv4 (`--ipv6`), without duplicate address detection, so usable at once.
    for (ns, dev, ip) in [(&tx, &a, TX_IP6), (&rx, &b, RX_IP6)] {
        ns.ip(&["addr", "add", &format!("{ip}/64"), "dev", dev, "nodad"])?;
    }
    // The sender neither merges nor splits packets, and computes checksums in software, so the
    // receiver verifies every one.
    tx.exec(
        "ethtool",
        &[
            "-K", &a, "gro", "off", "gso", "off", "tso", "off", "tx", "off",
        ],
    )?;
    rx.exec(
        "ethtool",
        &["-K", &b, "gro", "on", "gso", "off", "tso", "off"],
    )?;
    let threaded = format!("/sys/class/net/{b}/threaded");
    rx.exec("sh", &["-c", &format!("echo 1 > {threaded}")])?;
    let napi = napi_threads(&b);
    ensure!(
        !napi.is_empty(),
        "no NAPI thread for {b} after `echo 1 > {threaded}`"
    );
    let mut set = CpuSet::new();
    set.set(rx_cpu)?;
    for &pid in &napi {
        sched_setaffinity(pid, &set).with_context(|| format!("pinning NAPI thread {pid}"))?;
    }
    println!(
        "receiver veth {b}: GRO on, threaded NAPI ({} thread(s)) pinned to CPU {rx_cpu}",
        napi.len()
    );
    Ok(Lab {
        rx,
        tx,
        rx_if: b,
        napi,
        ksoftirqd: named_threads(&format!("ksoftirqd/{rx_cpu}")),
    })
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
) -> Result<RxResult> {
    let start_ns = thread_cpu_ns();
    let deadline = Instant::now() + CASE_DEADLINE;
    let mut buf = vec![0u8; 65536];
    let mut batch = match mode {
        Mode::Mmsg => Some(BatchReader::new(BATCH, PLAIN_SLOT)?),
        Mode::Batch => Some(BatchReader::new(BATCH, usize::from(IMTU))?),
        _ => None,
    };
    let mut cmsg = nix::cmsg_space!(i32);
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
        let received: std::io::Result<()> = match (mode, batch.as_mut()) {
            (Mode::Plain | Mode::Ebpf, _) => {
                sock.recv(&mut buf).map(|n| check(&buf[..n], &mut got))
            }
            (Mode::Reader, _) => caravan::recv(sock, &mut buf).map(|m| {
                match m.caravan_with_ports(SPORT, PASS_PORT) {
                    Ok(r) => r.for_each(|d| check(d.payload, &mut got)),
                    Err(_) => check(&[], &mut got),
                }
            }),
            (Mode::Mmsg | Mode::Batch, Some(batch)) => match batch.recv(sock) {
                Ok(_) => {
                    for m in batch.iter() {
                        if mode == Mode::Mmsg {
                            check(m.payload, &mut got);
                        } else {
                            match m.caravan_with_ports(SPORT, PASS_PORT) {
                                Ok(r) => r.for_each(|d| check(d.payload, &mut got)),
                                Err(_) => check(&[], &mut got),
                            }
                        }
                    }
                    Ok(())
                }
                Err(BatchError::Io(e)) => Err(e),
                Err(e) => Err(std::io::Error::other(e)),
            },
            (Mode::Gro, _) => {
                let mut iov = [std::io::IoSliceMut::new(&mut buf)];
                let fd = std::os::fd::AsRawFd::as_raw_fd(sock);
                match recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
                    Ok(msg) => {
                        let n = msg.bytes;
                        // No cmsg: the kernel did not coalesce; the packet is one datagram.
                        let mut segment = n;
                        for c in msg.cmsgs().map_err(std::io::Error::from)? {
                            if let ControlMessageOwned::UdpGroSegments(s) = c {
                                segment = usize::try_from(s).unwrap_or(n);
                            }
                        }
                        buf[..n]
                            .chunks(segment.max(1))
                            .for_each(|d| check(d, &mut got));
                        Ok(())
                    }
                    Err(e) => Err(e.into()),
                }
            }
            (Mode::Mmsg | Mode::Batch, None) => bail!("no batch reader for {}", mode.name()),
        };
        match received {
            Ok(()) => {
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
                eprintln!("{}: receive: {e}", mode.name());
                break;
            }
        }
    }
    Ok(RxResult {
        received: got,
        bad,
        calls,
        last,
        thread_ns: thread_cpu_ns().saturating_sub(start_ns),
    })
}

/// Sends the offered stream, keeping at most `window` datagrams in flight. Returns
/// (datagrams sent, packets sent, send errors, window stalls).
fn send(
    sock: &UdpSocket,
    to: SocketAddr,
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
    napi: &[Pid],
    ksoftirqd: &[Pid],
) -> Result<Sample> {
    drain(rx_sock)?;
    let tos: u32 = if mode.plain() {
        0
    } else {
        u32::from(caravan::DEFAULT_DSCP) << 2
    };
    if args.ipv6 {
        setsockopt(tx_sock, sockopt::Ipv6TClass, &(tos as i32))?;
    } else {
        setsockopt(tx_sock, sockopt::Ipv4Tos, &(tos as i32))?;
    }
    // Background load of the receiver's CPU; wait (bounded) for a quiet machine, since other
    // work on the receiver's CPU would take its time from the receiver.
    let (mut bg_rate, mut bg_irq_rate) = (1.0, 0.0);
    let attempts = (args.quiet_wait * 1000 / (BACKGROUND.as_millis() as u64 + 1000)).max(1);
    for attempt in 0..attempts {
        let b0 = busy_ticks()?;
        let t = Instant::now();
        std::thread::sleep(BACKGROUND);
        let b1 = busy_ticks()?;
        let wall = t.elapsed().as_nanos() as f64;
        bg_rate = ((b1.busy[1 + rx_cpu] - b0.busy[1 + rx_cpu]) * TICK_NS) as f64 / wall;
        bg_irq_rate = ((b1.irq[1 + rx_cpu] - b0.irq[1 + rx_cpu]) * TICK_NS) as f64 / wall;
        let machine = ((b1.busy[0] - b0.busy[0]) * TICK_NS) as f64 / wall;
        if bg_rate <= 0.05 && machine <= 0.10 {
            break;
        }
        if attempt + 1 == attempts {
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
    let to = SocketAddr::new(rx_ip(args.ipv6), mode.port());
    let (snap0, drops0, t0, tx, rx) = std::thread::scope(|s| -> Result<_> {
        let rxh = s.spawn(|| -> Result<RxResult> {
            let pinned = pin(rx_cpu);
            barrier.wait();
            pinned?;
            receive(mode, rx_sock, expected, args.size, &progress, &done)
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
        let napi0 = (threads_cpu_ns(napi), threads_cpu_ns(ksoftirqd));
        let drops0 = backlog_drops();
        let t0 = Instant::now();
        barrier.wait();
        let tx = txh.join().expect("sender thread")?;
        let rx = rxh.join().expect("receiver thread")?;
        Ok(((snap0, napi0), drops0, t0, tx, rx))
    })?;
    let (snap0, napi0) = snap0;
    let wall = t0.elapsed();
    let snap1 = busy_ticks()?;
    let napi_ns = threads_cpu_ns(napi).saturating_sub(napi0.0);
    let ksoftirqd_ns = threads_cpu_ns(ksoftirqd).saturating_sub(napi0.1);
    let ns = |i: usize| ((snap1.busy[i] - snap0.busy[i]) * TICK_NS) as f64;
    let irq_ns = |i: usize| ((snap1.irq[i] - snap0.irq[i]) * TICK_NS) as f64;
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
        rx_irq_ns: irq_ns(1 + rx_cpu),
        background_irq_ns: bg_irq_rate * wall.as_nanos() as f64,
        napi_ns,
        ksoftirqd_ns,
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
        (8..=usize::from(IMTU) - outer(args.ipv6) - UDP_HDR).contains(&args.size),
        "--size must be 8..={}",
        usize::from(IMTU) - outer(args.ipv6) - UDP_HDR
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
        "offered stream: {} datagrams of {} B payload over IPv{}; building caravans with pxio (iMTU {IMTU})",
        args.datagrams,
        args.size,
        if args.ipv6 { 6 } else { 4 }
    );
    let decap_caravans = build_caravans(DECAP_PORT, args.datagrams, args.size, args.ipv6)?;
    let pass_caravans = build_caravans(PASS_PORT, args.datagrams, args.size, args.ipv6)?;
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
        [PLAIN_PORT, DECAP_PORT, PASS_PORT, GRO_PORT]
            .iter()
            .map(|&p| -> Result<UdpSocket> {
                let s = UdpSocket::bind(SocketAddr::new(rx_ip(args.ipv6), p))?;
                s.set_read_timeout(Some(READ_TIMEOUT))?;
                setsockopt(&s, sockopt::RcvBufForce, &(64 << 20))?;
                if p == GRO_PORT {
                    setsockopt(&s, sockopt::UdpGroSegment, &true)?;
                }
                if p == PASS_PORT {
                    // The readers take a datagram for a caravan only when it wore the mark.
                    caravan::report_traffic_class(&s)?;
                }
                Ok(s)
            })
            .collect()
    })??;
    let tx_sock = lab
        .tx
        .enter(|| UdpSocket::bind(SocketAddr::new(tx_ip(args.ipv6), SPORT)))??;
    // Resolve ARP before anything is measured.
    for _ in 0..10 {
        tx_sock.send_to(b"warm-up!", SocketAddr::new(rx_ip(args.ipv6), PLAIN_PORT))?;
    }
    std::thread::sleep(Duration::from_millis(100));
    drain(&socks[0])?;
    println!(
        "sender on CPU {tx_cpu}, receiver (its thread and the NAPI thread) on CPU {rx_cpu}; window {} datagrams; {} runs per case",
        args.window, args.reps
    );

    let mut decap: Option<Decap> = None;
    let mut results: Vec<(Sample, Vec<Sample>)> = Vec::new();
    for mode in modes {
        if !mode.plain() && decap.is_none() {
            let mut d = lab
                .rx
                .enter(|| Decap::attach(&lab.rx_if, DecapConfig::default()))?
                .context("attaching caravan-ebpf (run `cargo xtask build-ebpf`)")?;
            d.add_passthrough_port(PASS_PORT)?;
            decap = Some(d);
        }
        let plain = Offered::Plain {
            n: args.datagrams,
            size: args.size,
        };
        let (sock, offered) = match mode {
            Mode::Plain | Mode::Mmsg => (&socks[0], plain),
            Mode::Gro => (&socks[3], plain),
            Mode::Ebpf => (&socks[1], Offered::Caravans(&decap_caravans)),
            Mode::Reader | Mode::Batch => (&socks[2], Offered::Caravans(&pass_caravans)),
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
                &lab.napi,
                &lab.ksoftirqd,
            )?;
            println!(
                "  {:<15} run {}: {:>9.0} datagrams/s, {:>6.0} rx ns/datagram (thread + NAPI + ksoftirqd), {} of {} received",
                mode.name(),
                rep + 1,
                s.datagrams_per_s(),
                s.per_datagram(s.rx_cost_ns()),
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
        sorted.sort_by(|x, y| x.rx_cost_ns().total_cmp(&y.rx_cost_ns()));
        results.push((sorted[sorted.len() / 2].clone(), runs));
    }
    drop(decap);

    report(&results, &args)?;
    drop(lab);
    if args.check {
        for (_, runs) in &results {
            for r in runs {
                ensure!(
                    r.bad == 0 && r.received == r.sent && r.sent == args.datagrams,
                    "{}: {} of {} datagrams received, {} bad",
                    r.mode.name(),
                    r.received,
                    r.sent,
                    r.bad
                );
            }
        }
        println!(
            "check: every case delivered all {} datagrams intact",
            args.datagrams
        );
    }
    Ok(())
}

fn report(results: &[(Sample, Vec<Sample>)], args: &Args) -> Result<()> {
    let plain = results
        .iter()
        .find(|(s, _)| s.mode == Mode::Plain)
        .map(|(s, _)| s.clone());
    let gro = results
        .iter()
        .find(|(s, _)| s.mode == Mode::Gro)
        .map(|(s, _)| s.clone());
    let cpu_of = |s: &Sample| s.per_datagram(s.rx_cost_ns());
    // The best baseline: the plain-UDP receive path with the least receive cost per datagram.
    let best = results
        .iter()
        .map(|(s, _)| s)
        .filter(|s| s.mode.baseline() && s.received > 0)
        .min_by(|a, b| cpu_of(a).total_cmp(&cpu_of(b)))
        .cloned();
    println!();
    println!(
        "{:<15} {:>8} {:>8} {:>8} {:>6} {:>12} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "mode",
        "sent",
        "packets",
        "received",
        "bad",
        "datagrams/s",
        "rx ns/dg",
        "thread",
        "napi",
        "ksirqd",
        "softirq",
        "busy ns",
        "rx util",
        "machine ns",
        "recv calls",
        "x tput",
        "x CPU",
        "x tput B",
        "x CPU B",
        "x CPU GRO"
    );
    let mut cases = Vec::new();
    for (s, runs) in results {
        let dps = s.datagrams_per_s();
        let cpu = cpu_of(s);
        let (x_tput, x_cpu) = plain.as_ref().map_or((f64::NAN, f64::NAN), |p| {
            (dps / p.datagrams_per_s(), cpu_of(p) / cpu)
        });
        let (b_tput, b_cpu) = best.as_ref().map_or((f64::NAN, f64::NAN), |b| {
            (dps / b.datagrams_per_s(), cpu_of(b) / cpu)
        });
        let g_cpu = gro.as_ref().map_or(f64::NAN, |g| cpu_of(g) / cpu);
        println!(
            "{:<15} {:>8} {:>8} {:>8} {:>6} {:>12.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>7.0}% {:>10.0} {:>10} {:>8.2}x {:>8.2}x {:>8.2}x {:>8.2}x {:>8.2}x",
            s.mode.name(),
            s.sent,
            s.packets_sent,
            s.received,
            s.bad,
            dps,
            cpu,
            s.per_datagram(s.rx_thread_ns as f64),
            s.per_datagram(s.napi_ns as f64),
            s.per_datagram(s.ksoftirqd_ns as f64),
            s.per_datagram(s.rx_softirq_ns()),
            s.per_datagram(s.rx_cpu_ns()),
            100.0 * s.rx_utilization(),
            s.per_datagram(s.machine_busy_ns),
            s.recv_calls,
            x_tput,
            x_cpu,
            b_tput,
            b_cpu,
            g_cpu
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
            "rx_cost_ns_per_datagram": cpu,
            "rx_softirq_ns_per_datagram": s.per_datagram(s.rx_softirq_ns()),
            "napi_thread_ns_per_datagram": s.per_datagram(s.napi_ns as f64),
            "ksoftirqd_ns_per_datagram": s.per_datagram(s.ksoftirqd_ns as f64),
            "cpu_ns_per_datagram": s.per_datagram(s.rx_cpu_ns()),
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
            "throughput_vs_best_baseline": if b_tput.is_finite() { json!(b_tput) } else { json!(null) },
            "cpu_saving_vs_best_baseline": if b_cpu.is_finite() { json!(b_cpu) } else { json!(null) },
            "cpu_saving_vs_plain_udp_gro": if g_cpu.is_finite() { json!(g_cpu) } else { json!(null) },
            "runs_datagrams_per_s": runs.iter().map(Sample::datagrams_per_s).collect::<Vec<_>>(),
            "runs_cpu_ns_per_datagram": runs.iter().map(|r| r.per_datagram(r.rx_cpu_ns())).collect::<Vec<_>>(),
            "runs_rx_cost_ns_per_datagram": runs.iter().map(|r| r.per_datagram(r.rx_cost_ns())).collect::<Vec<_>>(),
        }));
    }
    println!(
        "rx ns/dg = thread + napi + ksirqd, per datagram: CPU time of the receiving thread, of \
         the veth's NAPI thread (GRO, TC/eBPF, IP, UDP, socket, and the backlog of the datagrams \
         the decapsulator redirects) and of the receiver CPU's ksoftirqd (softirq work the \
         kernel deferred), all on the receiver's CPU; other work on that CPU does not blur it. \
         softirq: irq+softirq on that CPU above background, in whichever thread (already in \
         those threads' times). busy ns: the receiver CPU's whole busy time above background \
         (valid on a quiet machine only). machine ns: all CPUs, sender included."
    );
    println!(
        "x tput / x CPU: against plain-udp (throughput, rx ns/dg); x tput B / x CPU B: against the \
         best baseline (least rx ns/dg){}; x CPU GRO: against plain-udp-gro (rx ns/dg). Above 1 \
         is less receive CPU than the baseline. The paper's kernel patch gave {PAPER_SPEEDUP}x \
         receive throughput (UDP_GRO baseline, §7.2).",
        best.as_ref()
            .map_or(String::new(), |b| format!(", here {}", b.mode.name()))
    );
    if let Some(b) = &best {
        for (s, _) in results
            .iter()
            .filter(|(s, _)| matches!(s.mode, Mode::Reader | Mode::Batch))
        {
            println!(
                "{} against {}: {:.2}x less receiver CPU per datagram, {:.2}x the throughput",
                s.mode.name(),
                b.mode.name(),
                cpu_of(b) / cpu_of(s),
                s.datagrams_per_s() / b.datagrams_per_s()
            );
        }
    }
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
                "batch": BATCH,
            },
            "best_baseline": best.as_ref().map(|b| b.mode.name()),
            "cases": cases,
        });
        std::fs::write(path, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
