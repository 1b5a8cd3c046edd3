//! The kernel's own ICMP-based PMTUD (RFC 1191; SIGCOMM'26 §5.1 "PMTUD"), driven the way an
//! application sees it: a connected UDP socket with DF set (`IP_MTU_DISCOVER` =
//! `IP_PMTUDISC_DO`) sends a datagram the size of the route's MTU (`IP_MTU`). A router that
//! cannot forward it answers with a PTB; the kernel lowers the route's MTU and reports
//! `EMSGSIZE`; the sender resends at the new MTU, until B echoes a datagram or time runs out.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery};

use super::background::with_helper;
use super::topology::{Topology, B_ADDR};
use super::{LabConfig, LabError, Outcome};

/// UDP port of B's echo (the discard/echo well-known port; nothing else listens in B's
/// namespace).
pub const ECHO_PORT: u16 = 7;
/// IPv4 and UDP headers: the datagram's IP size is its payload plus this.
const IP_UDP_HEADERS: usize = 28;
/// Sends per run at most, whatever happens (each normally waits for an answer or `wait`).
const MAX_SENDS: u32 = 64;

/// What the sender saw.
#[derive(Debug, Clone, Default)]
struct KernelRun {
    /// The IP size B echoed, if any datagram got through.
    delivered: Option<u16>,
    /// The route's MTU as the socket saw it last.
    route_mtu: u16,
    /// Datagrams that left the socket.
    sent: u32,
    /// Of those, the ones answered by a PTB (as `EMSGSIZE`) or by the echo.
    answered: u32,
    /// Sizes sent, in order.
    sizes: Vec<u16>,
    /// From the first send to the echo, or to the time limit.
    elapsed: Duration,
}

fn is_msgsize(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EMSGSIZE)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// The sender, in A.
fn df_sender(dst: SocketAddr, limit: Duration, wait: Duration) -> io::Result<KernelRun> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    socket.connect(dst)?;
    sockopt::set_ip_mtu_discover(&socket, Ipv4PathMtuDiscovery::DO)?;
    let mtu = |s: &UdpSocket| -> io::Result<u16> {
        Ok(u16::try_from(sockopt::ip_mtu(s)?).unwrap_or(u16::MAX))
    };
    let mut run = KernelRun::default();
    let started = Instant::now();
    let deadline = started + limit;
    let mut reply = [0u8; 64];
    let mut attempts = 0;
    while Instant::now() < deadline && attempts < MAX_SENDS {
        attempts += 1;
        let size = mtu(&socket)?;
        run.route_mtu = size;
        let datagram = vec![0u8; usize::from(size).saturating_sub(IP_UDP_HEADERS)];
        match socket.send(&datagram) {
            Ok(_) => {
                run.sent += 1;
                run.sizes.push(size);
            }
            // The route's MTU fell between reading it and sending: read it again.
            Err(e) if is_msgsize(&e) => continue,
            Err(e) => return Err(e),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        socket.set_read_timeout(Some(wait.min(left).max(Duration::from_millis(1))))?;
        match socket.recv(&mut reply) {
            Ok(n) if n >= 2 && u16::from_be_bytes([reply[0], reply[1]]) == size => {
                run.answered += 1;
                run.delivered = Some(size);
                break;
            }
            // An echo of an earlier, larger datagram cannot happen (they were dropped); any
            // other reply is not ours: send again.
            Ok(_) => {}
            // A PTB lowered the route's MTU: the next send uses it.
            Err(e) if is_msgsize(&e) => run.answered += 1,
            // Lost without a word (the black hole): send again at what the route says.
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    run.elapsed = started.elapsed();
    run.route_mtu = mtu(&socket)?;
    Ok(run)
}

/// B's echo: answers each datagram with its IP size (2 bytes, big-endian).
fn echo(stop: &AtomicBool, ready: mpsc::Sender<()>) -> io::Result<u32> {
    let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, ECHO_PORT))?;
    socket.set_read_timeout(Some(Duration::from_millis(20)))?;
    let _ = ready.send(());
    let mut buf = vec![0u8; 65536];
    let mut echoed = 0;
    while !stop.load(Ordering::Relaxed) {
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let size = u16::try_from(n + IP_UDP_HEADERS).unwrap_or(u16::MAX);
                socket.send_to(&size.to_be_bytes(), from)?;
                echoed += 1;
            }
            Err(e) if is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(echoed)
}

/// The `kernel` row.
pub(crate) fn measure(topo: &Topology, cfg: &LabConfig) -> Result<Outcome, LabError> {
    let dst = SocketAddr::from((B_ADDR, ECHO_PORT));
    let ((run, wall), _echoed) = with_helper(&topo.b, "B's UDP echo", echo, || {
        let started = Instant::now();
        let run = topo
            .a
            .enter(|| df_sender(dst, cfg.kernel_limit, cfg.kernel_wait));
        (run, started.elapsed())
    })?;
    let run = run?.map_err(LabError::io("the DF=1 UDP sender"))?;
    let learned = topo.learned_mtu()?;
    let sizes: Vec<String> = run.sizes.iter().map(u16::to_string).collect();
    let note = match (run.delivered, learned) {
        (Some(size), Some(mtu)) => format!(
            "sent {}; echoed at {size}; route cache learned mtu {mtu}",
            sizes.join(" ")
        ),
        (Some(size), None) => format!("sent {}; echoed at {size}", sizes.join(" ")),
        (None, _) => format!(
            "sent {}; no echo within {} ms, route mtu still {}",
            sizes.join(" "),
            cfg.kernel_limit.as_millis(),
            run.route_mtu
        ),
    };
    Ok(Outcome {
        // Without an echo, what the kernel believes: the route's MTU.
        pmtu: Some(run.delivered.unwrap_or(run.route_mtu)),
        reported_probes: run.sent,
        round_trips: run.answered,
        elapsed: run.elapsed,
        wall,
        fallback: false,
        note,
    })
}
