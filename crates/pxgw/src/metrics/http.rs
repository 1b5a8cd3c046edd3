//! The metrics endpoint's HTTP server: one thread polling non-blocking `std::net` sockets, so no
//! client can hold up another.
//!
//! - **Bounded connections.** At most [`Limits::max_connections`] are held. A connection beyond
//!   that replaces the oldest one still sending its request (or, when every one is being
//!   answered, the oldest): thousands of connections that never finish a request cannot lock a
//!   scraper out.
//! - **Timeouts.** A request (its line and headers, at most [`MAX_REQUEST`] bytes) must arrive
//!   within [`Limits::read_timeout`] of the connection, and its answer must be taken within
//!   [`Limits::write_timeout`]: a client that stops reading is dropped, with a reset, so the
//!   kernel frees what it still held for it.
//! - **HTTP.** `GET /metrics` (and `HEAD`) answer the exposition; any other path gets 404, any
//!   other method 405, a malformed request 400, an oversized one 431. One request per
//!   connection (`Connection: close`), answered in the request's HTTP/1.x version.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::Metrics;

/// The longest request accepted (request line and headers): a scraper sends a few hundred bytes.
pub const MAX_REQUEST: usize = 8 * 1024;

/// The longest the server thread sleeps before it looks at its stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// New connections taken per turn of the loop, so pending requests keep moving during a flood.
const ACCEPT_BATCH: usize = 64;

/// The content type of the OpenMetrics text format.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How much the endpoint holds, and for how long (`[stats] prometheus_max_connections`,
/// `prometheus_timeout_ms`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections held at once.
    pub max_connections: usize,
    /// How long a client has to send its request, from the connection.
    pub read_timeout: Duration,
    /// How long a client has to take the answer, from its request.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 16,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
        }
    }
}

/// The Prometheus endpoint: its own thread, stopped on drop.
pub struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Server {
    /// Serves `metrics` at `http://ADDR/metrics` within `limits`. The socket is bound when this
    /// returns.
    pub fn start(
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        limits: Limits,
    ) -> Result<Self, MetricsError> {
        let bind = |e: std::io::Error| MetricsError::Bind(addr, e.to_string());
        let listener = TcpListener::bind(addr).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let local = listener.local_addr().map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("pxgw-metrics".into())
            .spawn(move || serve(&listener, &metrics, limits, &flag))
            .map_err(MetricsError::Thread)?;
        Ok(Self {
            stop,
            thread: Some(thread),
            addr: local,
        })
    }

    /// The address it listens on (useful when the configuration asked for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why the endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address could not be bound.
    #[error("stats.prometheus: cannot listen on {0}: {1}")]
    Bind(SocketAddr, String),
    /// The server thread could not be started.
    #[error("stats.prometheus: cannot start the server thread: {0}")]
    Thread(std::io::Error),
}

/// Where a connection is.
enum State {
    /// Receiving its request.
    Reading(Vec<u8>),
    /// Sending the answer; `sent` bytes of it are out.
    Writing { answer: Vec<u8>, sent: usize },
}

struct Conn {
    stream: TcpStream,
    accepted: Instant,
    deadline: Instant,
    state: State,
}

/// What became of a connection after it made progress.
enum Next {
    Keep,
    /// Answered, or the client went away: close normally.
    Close,
}

impl Conn {
    fn reading(&self) -> bool {
        matches!(self.state, State::Reading(_))
    }

    /// Drops the connection with a reset: nothing it still holds is sent.
    fn abort(self) {
        let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
    }

    /// Reads and writes what the socket allows without blocking.
    fn progress(&mut self, metrics: &Arc<Metrics>, limits: &Limits) -> Next {
        if let State::Reading(request) = &mut self.state {
            let mut chunk = [0u8; 1024];
            loop {
                let room = (MAX_REQUEST - request.len()).min(chunk.len());
                match self.stream.read(&mut chunk[..room]) {
                    // The client hung up before finishing its request.
                    Ok(0) => return Next::Close,
                    Ok(n) => {
                        request.extend_from_slice(&chunk[..n]);
                        if head_len(request).is_some() {
                            break;
                        }
                        if request.len() >= MAX_REQUEST {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
                    Err(_) => return Next::Close,
                }
            }
            let answer = answer(request, metrics);
            self.state = State::Writing { answer, sent: 0 };
            self.deadline = Instant::now() + limits.write_timeout;
        }
        let State::Writing { answer, sent } = &mut self.state else {
            return Next::Keep;
        };
        while *sent < answer.len() {
            match self.stream.write(&answer[*sent..]) {
                Ok(0) => return Next::Close,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
                Err(_) => return Next::Close,
            }
        }
        Next::Close
    }
}

/// The server loop: accept, read requests, write answers, drop what overstays, until `stop`.
fn serve(listener: &TcpListener, metrics: &Arc<Metrics>, limits: Limits, stop: &AtomicBool) {
    let max = limits.max_connections.max(1);
    let mut conns: Vec<Conn> = Vec::with_capacity(max);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let mut i = 0;
        while i < conns.len() {
            if conns[i].deadline <= now {
                conns.swap_remove(i).abort();
            } else {
                i += 1;
            }
        }
        let wait = conns
            .iter()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .map_or(STOP_POLL, |d| d.min(STOP_POLL));
        // Rounded up: a deadline is never polled for in a busy loop of zero-millisecond waits.
        let wait_ms = u16::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u16::MAX);
        let (accept, ready) = {
            let mut fds = Vec::with_capacity(1 + conns.len());
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            for c in &conns {
                let events = if c.reading() {
                    PollFlags::POLLIN
                } else {
                    PollFlags::POLLOUT
                };
                fds.push(PollFd::new(c.stream.as_fd(), events));
            }
            match poll(&mut fds, PollTimeout::from(wait_ms)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics endpoint: poll failed");
                    std::thread::sleep(STOP_POLL);
                    continue;
                }
            }
            let fired = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            let ready: Vec<bool> = fds[1..].iter().map(fired).collect();
            (fired(&fds[0]), ready)
        };
        // Backwards, so that removing one leaves the indices of those still to visit intact.
        for i in (0..ready.len()).rev() {
            if ready[i] {
                if let Next::Close = conns[i].progress(metrics, &limits) {
                    conns.swap_remove(i);
                }
            }
        }
        if accept {
            for _ in 0..ACCEPT_BATCH {
                let stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    // WouldBlock: all taken; anything else (a connection reset while queued,
                    // out of descriptors) is the next turn's concern.
                    Err(_) => break,
                };
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if conns.len() >= max {
                    evict(&mut conns);
                }
                let now = Instant::now();
                let mut conn = Conn {
                    stream,
                    accepted: now,
                    deadline: now + limits.read_timeout,
                    state: State::Reading(Vec::new()),
                };
                // A scraper's request is usually there with the connection: answer it now,
                // before a flood of new connections can push it out.
                if let Next::Keep = conn.progress(metrics, &limits) {
                    conns.push(conn);
                }
            }
        }
    }
}

/// Makes room for one connection: the oldest still sending its request goes, or else the oldest.
fn evict(conns: &mut Vec<Conn>) {
    let oldest = |reading: bool| {
        conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !reading || c.reading())
            .min_by_key(|(_, c)| c.accepted)
            .map(|(i, _)| i)
    };
    if let Some(i) = oldest(true).or_else(|| oldest(false)) {
        conns.swap_remove(i).abort();
    }
}

/// The length of the request's head (through the blank line that ends its headers), once the
/// whole head is there.
fn head_len(request: &[u8]) -> Option<usize> {
    let crlf = request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4);
    let lf = request.windows(2).position(|w| w == b"\n\n").map(|p| p + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The whole answer to `request` (status line, headers, body).
fn answer(request: &[u8], metrics: &Arc<Metrics>) -> Vec<u8> {
    if head_len(request).is_none() {
        return response(
            "HTTP/1.1",
            "431 Request Header Fields Too Large",
            "text/plain",
            b"pxgw: request too large\n",
            true,
        );
    }
    let line = request.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line.strip_suffix(b"\r").unwrap_or(line)).unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad_request();
    };
    let version = match version {
        "HTTP/1.0" => "HTTP/1.0",
        v if v.starts_with("HTTP/1.") => "HTTP/1.1",
        _ => return bad_request(),
    };
    let path = target.split('?').next().unwrap_or("");
    let with_body = method == "GET";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => response(
            version,
            "200 OK",
            CONTENT_TYPE,
            metrics.encode().as_bytes(),
            with_body,
        ),
        ("GET" | "HEAD", _) => response(
            version,
            "404 Not Found",
            "text/plain",
            b"pxgw: metrics are at /metrics\n",
            with_body,
        ),
        _ => response(
            version,
            "405 Method Not Allowed",
            "text/plain",
            b"pxgw: GET /metrics\n",
            true,
        ),
    }
}

fn bad_request() -> Vec<u8> {
    response(
        "HTTP/1.1",
        "400 Bad Request",
        "text/plain",
        b"pxgw: GET /metrics\n",
        true,
    )
}

fn response(
    version: &str,
    status: &str,
    content_type: &str,
    body: &[u8],
    with_body: bool,
) -> Vec<u8> {
    let head = format!(
        "{version} {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    if with_body {
        out.extend_from_slice(body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::channel;
    use crate::stats::Report;

    fn metrics_with_merges(n: u64) -> Arc<Metrics> {
        let (mut p, s) = channel();
        let mut r = Report::default();
        r.merge.merges = n;
        p.publish(&r, None, &[], 0);
        Arc::new(Metrics::new(vec![s]))
    }

    /// `GET /metrics` over a fresh connection, with a client-side bound; the whole answer.
    fn scrape(addr: SocketAddr, bound: Duration) -> std::io::Result<String> {
        let mut c = TcpStream::connect_timeout(&addr, bound)?;
        c.set_read_timeout(Some(bound))?;
        c.set_write_timeout(Some(bound))?;
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")?;
        let mut body = String::new();
        c.read_to_string(&mut body)?;
        Ok(body)
    }

    /// Reads until the server closes the connection (EOF or reset), or `bound` passes; the bytes
    /// read and whether the server closed it.
    fn until_closed(c: &mut TcpStream, bound: Duration) -> (usize, bool) {
        let end = Instant::now() + bound;
        let mut total = 0;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (total, false);
            }
            c.set_read_timeout(Some(left)).unwrap();
            match c.read(&mut buf) {
                Ok(0) => return (total, true),
                Ok(n) => total += n,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return (total, true),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return (total, false)
                }
                Err(e) => panic!("reading: {e}"),
            }
        }
    }

    /// 500 connections that send half a request line and never finish it: a scrape right after
    /// still gets the metrics, well within the request timeout, and every stuck connection is
    /// closed by the server within the timeout.
    #[test]
    fn unfinished_requests_do_not_lock_out_a_scrape() {
        let timeout = Duration::from_millis(500);
        let limits = Limits {
            max_connections: 16,
            read_timeout: timeout,
            write_timeout: timeout,
        };
        let server = Server::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics_with_merges(42),
            limits,
        )
        .unwrap();
        let mut stuck: Vec<TcpStream> = (0..500)
            .map(|_| {
                let mut c = TcpStream::connect(server.addr()).unwrap();
                c.write_all(b"GET /metr").unwrap();
                c
            })
            .collect();
        let started = Instant::now();
        let body = scrape(server.addr(), timeout * 20).expect("the scrape got an answer");
        let elapsed = started.elapsed();
        assert!(body.starts_with("HTTP/1.1 200 OK\r\n"), "{body}");
        assert!(
            body.contains("pxgw_merges_total{worker=\"0\"} 42\n"),
            "{body}"
        );
        // A bound on behaviour: at worst the scrape waits out one request timeout.
        assert!(elapsed < timeout * 4, "the scrape took {elapsed:?}");
        // Every stuck connection was dropped: replaced by newer ones, or timed out.
        let deadline = started + timeout * 4;
        for (i, c) in stuck.iter_mut().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let (_, closed) = until_closed(c, left.max(Duration::from_millis(1)));
            assert!(
                closed,
                "stuck connection {i} still open {:?} after the scrape",
                started.elapsed()
            );
        }
    }

    /// A client that asks for a large answer and never reads it: another scrape is served at
    /// once, and the stuck connection is dropped after the write timeout, its answer unsent.
    #[test]
    fn a_client_that_never_reads_is_dropped_after_the_write_timeout() {
        let timeout = Duration::from_millis(500);
        let limits = Limits {
            max_connections: 16,
            read_timeout: timeout,
            write_timeout: timeout,
        };
        let m = metrics_with_merges(7);
        // An answer far larger than what the kernel buffers on both sides of a loopback
        // connection (net.ipv4.tcp_wmem tops out at 4 MiB by default).
        const PADDING: usize = 16 << 20;
        m.gauge("pxgw_test_padding", &"x".repeat(PADDING));
        let server = Server::start("127.0.0.1:0".parse().unwrap(), m, limits).unwrap();
        let socket = socket2::Socket::new(
            socket2::Domain::IPV4,
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )
        .unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(&server.addr().into()).unwrap();
        let mut stuck: TcpStream = socket.into();
        stuck
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        // Let the server start answering it and fill the buffers.
        std::thread::sleep(timeout / 5);
        let started = Instant::now();
        let body = scrape(server.addr(), timeout * 20).expect("the scrape got an answer");
        assert!(body.contains("pxgw_merges_total{worker=\"0\"} 7\n"));
        assert!(
            body.len() > PADDING,
            "the answer is whole: {} B",
            body.len()
        );
        // The stuck client reads now: it gets what the kernel buffered, then a reset, well
        // before the whole answer.
        std::thread::sleep(timeout * 2);
        let (got, closed) = until_closed(&mut stuck, timeout * 4);
        assert!(
            closed,
            "the stuck connection is still open {:?} after the scrape",
            started.elapsed()
        );
        assert!(
            got < PADDING,
            "the stuck client got {got} B: the answer was not cut"
        );
    }

    /// Paths, methods, versions and malformed or oversized requests.
    #[test]
    fn answers_what_it_is_asked() {
        let server = Server::start(
            "127.0.0.1:0".parse().unwrap(),
            metrics_with_merges(1),
            Limits::default(),
        )
        .unwrap();
        let ask = |request: &[u8]| {
            let mut c = TcpStream::connect(server.addr()).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(request).unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            out
        };
        let ok = ask(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.0 200 OK\r\n"), "{ok}");
        assert!(ok.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")));
        let head = ask(b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            head.starts_with("HTTP/1.1 200 OK\r\n") && head.ends_with("\r\n\r\n"),
            "{head}"
        );
        assert!(ask(b"GET / HTTP/1.1\n\n").starts_with("HTTP/1.1 404 "));
        assert!(ask(b"POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
        assert!(ask(b"GET /metrics\r\n\r\n").starts_with("HTTP/1.1 400 "));
        assert!(ask(b"GET /metrics SPDY/3\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        huge.resize(MAX_REQUEST, b'a');
        assert!(ask(&huge).starts_with("HTTP/1.1 431 "));
    }
}
