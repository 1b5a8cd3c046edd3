//! Clients of pxgw's Prometheus endpoint as a hostile or broken peer makes them: connections
//! that send half a request line and stall ([`stall`]), one that asks for many responses and
//! never reads them ([`never_reads`]); and the real scrape that must still be answered
//! ([`scrape`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::socket::{
    connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType, SockaddrIn,
    SockaddrIn6,
};

/// How long [`stall`] may spend opening connections.
const OPEN_BUDGET: Duration = Duration::from_secs(5);
/// How long one connection attempt may take (a server that stops accepting leaves SYNs
/// unanswered once its backlog is full).
const CONNECT_TIMEOUT: Duration = Duration::from_millis(100);
/// How long one attempt of the real scrape waits for its connection.
const CONNECT_ATTEMPT: Duration = Duration::from_millis(250);
/// The receive buffer the client that never reads asks for (the kernel's minimum is about
/// 2 KB): the server's responses pile up in its own send buffer at once.
pub const UNREAD_RCVBUF: usize = 1024;

/// Connections held open by [`stall`] (closed on drop).
pub struct Stalled {
    /// Connections that were opened and sent their half line.
    pub opened: usize,
    /// Attempts the server did not accept in time, or refused.
    pub failed: usize,
    _socks: Vec<TcpStream>,
}

/// Raises this process's soft limit on open files so it can hold `n` more sockets (up to the
/// hard limit).
pub fn room_for(n: u64) -> Result<()> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    let want = (n + 1024).min(hard);
    if soft < want {
        setrlimit(Resource::RLIMIT_NOFILE, want, hard)?;
    }
    Ok(())
}

/// Opens up to `n` connections to `addr`, each sending half a request line (`GET /metr`) and
/// nothing more, within a few seconds.
pub fn stall(addr: SocketAddr, n: usize) -> Stalled {
    let started = Instant::now();
    let (mut socks, mut failed) = (Vec::with_capacity(n), 0);
    for _ in 0..n {
        if started.elapsed() > OPEN_BUDGET {
            failed += n - socks.len() - failed;
            break;
        }
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(mut s) => {
                let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
                if s.write_all(b"GET /metr").is_ok() {
                    socks.push(s);
                } else {
                    failed += 1;
                }
            }
            Err(_) => failed += 1,
        }
    }
    Stalled {
        opened: socks.len(),
        failed,
        _socks: socks,
    }
}

/// Connects to `addr` with a tiny receive buffer and sends `requests` pipelined requests for
/// the metrics, then never reads: the server's answers fill both sides' buffers and its writes
/// block. Hold the stream as long as the client should hang.
pub fn never_reads(addr: SocketAddr, requests: usize) -> Result<TcpStream> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::empty(), None)?;
    // Before connecting, so the window the client announces is small from the start.
    setsockopt(&fd, sockopt::RcvBuf, &UNREAD_RCVBUF)?;
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    match addr {
        SocketAddr::V4(a) => connect(raw, &SockaddrIn::from(a)),
        SocketAddr::V6(a) => connect(raw, &SockaddrIn6::from(a)),
    }
    .with_context(|| format!("connecting to {addr}"))?;
    let mut sock = TcpStream::from(fd);
    sock.set_write_timeout(Some(Duration::from_secs(1)))?;
    let request = "GET /metrics HTTP/1.1\r\nHost: pxgw\r\n\r\n".repeat(requests);
    // The server may stop reading before it has them all: what it took is enough.
    let _ = sock.write_all(request.as_bytes());
    Ok(sock)
}

/// A scrape that succeeded.
#[derive(Clone, Copy, Debug)]
pub struct Scraped {
    /// Seconds from the first attempt to the full answer.
    pub seconds: f64,
    /// Attempts it took (a server at its connection bound may refuse some).
    pub attempts: u32,
    /// Bytes of the answer.
    pub bytes: usize,
}

/// Scrapes `http://addr/metrics` as Prometheus would, retrying until an answer with status 200
/// and pxgw's counters arrives, or until `limit`.
pub fn scrape(addr: SocketAddr, limit: Duration) -> Result<Scraped> {
    let started = Instant::now();
    let deadline = started + limit;
    let mut attempts = 0;
    let mut last = anyhow::anyhow!("no attempt");
    while Instant::now() < deadline {
        attempts += 1;
        match scrape_once(addr, deadline) {
            Ok(bytes) => {
                return Ok(Scraped {
                    seconds: started.elapsed().as_secs_f64(),
                    attempts,
                    bytes,
                })
            }
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "no answer within {:.1} s ({attempts} attempts; the last: {last:#})",
        limit.as_secs_f64()
    )
}

/// One scrape, given up at `deadline`; returns the answer's length.
fn scrape_once(addr: SocketAddr, deadline: Instant) -> Result<usize> {
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    // Short attempts: a SYN the server's full backlog dropped is sent again only after a
    // second, a new attempt sends one at once.
    let mut sock = TcpStream::connect_timeout(&addr, left().min(CONNECT_ATTEMPT))?;
    sock.set_write_timeout(Some(left()))?;
    sock.write_all(b"GET /metrics HTTP/1.1\r\nHost: pxgw\r\nConnection: close\r\n\r\n")?;
    let (mut answer, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
    loop {
        sock.set_read_timeout(Some(left()))?;
        match sock.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context(format!("after {} B of the answer", answer.len())),
        }
        if Instant::now() >= deadline {
            bail!(
                "the answer was still coming ({} B) at the deadline",
                answer.len()
            );
        }
    }
    let text = String::from_utf8_lossy(&answer);
    if !text.starts_with("HTTP/1.1 200") && !text.starts_with("HTTP/1.0 200") {
        bail!("answer: {:?}", text.lines().next().unwrap_or("(empty)"));
    }
    if !text.contains("pxgw_received_packets_total") {
        bail!("the answer holds no pxgw counters ({} B)", answer.len());
    }
    Ok(answer.len())
}
