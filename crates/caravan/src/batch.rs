//! [`BatchReader`]: many caravans per system call (`recvmmsg`), each split by [`Reader`].
//!
//! One caravan already carries many datagrams per `recv` (SIGCOMM'26 §6). A pass-through port
//! under load also has many caravans queued at once; `recvmmsg` takes all of them (up to the
//! batch size) in one system call, as `UDP_GRO` and `recvmmsg` do for plain UDP. Beyond the
//! paper.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

use caravan_common::DEFAULT_DSCP;
use nix::sys::socket::{recvmmsg, MsgFlags, MultiHeaders, SockaddrStorage};

use crate::received::{socket_addr, traffic_class, Received, CMSG_ROOM};

/// Largest buffer a [`BatchReader`] allocates.
const MAX_BATCH_BYTES: usize = 1 << 30;
/// Most messages one `recvmmsg` takes (`UIO_MAXIOV`).
const MAX_MESSAGES: usize = 1024;

/// Why a [`BatchReader`] cannot be made or could not receive.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// A batch of no message, or of messages of no byte, can receive nothing.
    #[error("a batch needs at least one message of at least one byte ({messages} x {size} B)")]
    Empty {
        /// Messages asked for.
        messages: usize,
        /// Bytes per message asked for.
        size: usize,
    },
    /// More messages than one `recvmmsg` takes (1024, the kernel's `UIO_MAXIOV`), or more
    /// than 1 GiB of buffers (a batch is meant for tens of messages of at most 64 KiB).
    #[error("a batch of {messages} x {size} B is too large")]
    TooLarge {
        /// Messages asked for.
        messages: usize,
        /// Bytes per message asked for.
        size: usize,
    },
    /// `recvmmsg` failed: `WouldBlock` on a non-blocking socket with nothing queued,
    /// `TimedOut`/`WouldBlock` after the socket's read timeout, or a socket error.
    #[error("recvmmsg: {0}")]
    Io(#[from] io::Error),
}

/// Where one received message sits in the batch's buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    len: usize,
    truncated: bool,
    peer: Option<SocketAddr>,
    traffic_class: Option<u8>,
}

/// Receives up to `messages` UDP payloads of up to `size` bytes per system call (`recvmmsg`
/// with `MSG_WAITFORONE`: it blocks, as the socket is set to, for the first message only, then
/// takes what is queued), each with the traffic class its IP header carried, and hands each out
/// as a [`Received`]: a caravan to split with [`Reader`](crate::Reader) only when it wore the
/// mark.
///
/// The socket must report traffic classes ([`report_traffic_class`](crate::report_traffic_class),
/// before the first call): without them no message is a caravan.
///
/// Buffers are allocated once, in [`new`](Self::new); [`recv`](Self::recv) allocates one small
/// vector of I/O slices per call (not per message). The kernel shrinks each message's control
/// buffer to what it used, which stays the same while the socket's options do. When a message's
/// control messages are cut short (the socket was set to report more, or to report at all, after
/// earlier calls), that message is read as an ordinary datagram and the buffers are renewed for
/// the next call.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let sock = std::net::UdpSocket::bind("[::]:5002")?;
/// caravan::report_traffic_class(&sock)?;
/// let mut batch = caravan::BatchReader::new(32, 9000)?;
/// loop {
///     batch.recv(&sock)?;
///     for msg in batch.iter() {
///         match msg.caravan() {
///             Ok(reader) => reader.for_each(|d| println!("{} B", d.payload.len())),
///             Err(caravan::Refused::NotCaravan) => println!("a plain datagram"),
///             Err(e) => eprintln!("dropped: {e}"),
///         }
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
pub struct BatchReader {
    headers: MultiHeaders<SockaddrStorage>,
    /// Whether `headers` must be renewed before the next call: a message of the last one found
    /// its control buffer too small.
    stale: bool,
    buf: Vec<u8>,
    size: usize,
    slots: Vec<Slot>,
    mark: u8,
}

impl BatchReader {
    /// A reader of up to `messages` messages of up to `size` bytes per call. A caravan is at
    /// most the iMTU minus the outer IP and UDP headers; a bigger message is cut to `size` and
    /// reported as truncated.
    pub fn new(messages: usize, size: usize) -> Result<Self, BatchError> {
        if messages == 0 || size == 0 {
            return Err(BatchError::Empty { messages, size });
        }
        let bytes = messages
            .checked_mul(size)
            .filter(|&b| b <= MAX_BATCH_BYTES && messages <= MAX_MESSAGES)
            .ok_or(BatchError::TooLarge { messages, size })?;
        Ok(Self {
            headers: headers(messages),
            stale: false,
            buf: vec![0; bytes],
            size,
            slots: Vec::with_capacity(messages),
            mark: DEFAULT_DSCP,
        })
    }

    /// The same reader, judging messages against the caravan mark `dscp` (the decapsulator's
    /// and the gateway's, when not the default 7).
    pub fn with_dscp(self, dscp: u8) -> Self {
        Self { mark: dscp, ..self }
    }

    /// Messages one call can take.
    pub fn capacity(&self) -> usize {
        self.buf.len() / self.size
    }

    /// Receives what `sock` has queued, up to [`capacity`](Self::capacity) messages, in one
    /// system call; returns how many. Blocks like the socket (its read timeout, or not at all
    /// when non-blocking) until the first message, never for the rest. The previous batch is
    /// forgotten, even when this call fails.
    pub fn recv(&mut self, sock: &impl AsFd) -> Result<usize, BatchError> {
        self.slots.clear();
        if self.stale {
            self.headers = headers(self.capacity());
            self.stale = false;
        }
        let mut iovs: Vec<[io::IoSliceMut<'_>; 1]> = self
            .buf
            .chunks_exact_mut(self.size)
            .map(|chunk| [io::IoSliceMut::new(chunk)])
            .collect();
        let results = recvmmsg(
            sock.as_fd().as_raw_fd(),
            &mut self.headers,
            iovs.iter_mut(),
            MsgFlags::MSG_WAITFORONE,
            None,
        )
        .map_err(io::Error::from)?;
        for msg in results {
            let traffic_class = traffic_class(&msg).unwrap_or_else(|_| {
                self.stale = true;
                None // cut short: not trusted
            });
            self.slots.push(Slot {
                len: msg.bytes.min(self.size),
                truncated: msg.flags.contains(MsgFlags::MSG_TRUNC),
                peer: msg.address.as_ref().and_then(socket_addr),
                traffic_class,
            });
        }
        Ok(self.slots.len())
    }

    /// Messages the last [`recv`](Self::recv) took.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the last [`recv`](Self::recv) took nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The messages of the last [`recv`](Self::recv), in arrival order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Received<'_>> + '_ {
        self.slots.iter().enumerate().map(|(i, s)| Received {
            payload: &self.buf[i * self.size..i * self.size + s.len],
            truncated: s.truncated,
            peer: s.peer,
            traffic_class: s.traffic_class,
            mark: self.mark,
        })
    }
}

/// Message headers for `messages` messages, each with [`CMSG_ROOM`] bytes for control messages.
fn headers(messages: usize) -> MultiHeaders<SockaddrStorage> {
    MultiHeaders::preallocate(messages, Some(vec![0; CMSG_ROOM]))
}
