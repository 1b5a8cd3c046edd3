//! What one receive on a pass-through port brought, with the traffic class its IP header
//! carried: only a datagram that wore the caravan mark is read as a caravan (SIGCOMM'26 §6; the
//! pass-through goes beyond the paper).
//!
//! The payload alone cannot tell a caravan from an ordinary datagram that happens to carry the
//! same bytes: any sender may put a caravan header in front of a chain of UDP headers, and a
//! reader that trusted it would hand the application up to 64 datagrams that nobody sent. The
//! mark is in the IP header, which a socket only sees as the `IP_TOS` / `IPV6_TCLASS` control
//! message that [`report_traffic_class`] asks for. The gateway never lets an outside datagram
//! into the b-network still wearing the mark (`docs/caravan.md`, "What the endpoint trusts").

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};

use caravan_common::format;
use caravan_common::DEFAULT_DSCP;
use nix::sys::socket::{
    getsockname, recvmsg, setsockopt, sockopt, AddressFamily, ControlMessageOwned, MsgFlags,
    RecvMsg, SockaddrLike, SockaddrStorage,
};

use crate::reader::{Malformed, Reader, Refused};

/// Room for the control messages a datagram brings: `IP_TOS` (one byte) or `IPV6_TCLASS` (an
/// `int`), each with its header, and a few more that socket options the application set may
/// add (a timestamp, the destination address).
pub(crate) const CMSG_ROOM: usize = 128;

/// Asks the kernel to report the traffic class of every datagram `sock` receives: the IPv4 TOS
/// byte (`IP_RECVTOS`) and, on an IPv6 socket, the IPv6 traffic class (`IPV6_RECVTCLASS`). An
/// IPv6 socket gets both, since it also receives IPv4 datagrams (as v4-mapped addresses), whose
/// TOS byte only `IP_RECVTOS` reports.
///
/// [`recv`] and [`BatchReader`](crate::BatchReader) need it: without it no datagram carries a
/// traffic class, and none is read as a caravan. Call it once, after binding.
pub fn report_traffic_class(sock: &impl AsFd) -> io::Result<()> {
    let family = getsockname::<SockaddrStorage>(sock.as_fd().as_raw_fd())?.family();
    setsockopt(sock, sockopt::IpRecvTos, &true)?;
    if family == Some(AddressFamily::Inet6) {
        setsockopt(sock, sockopt::Ipv6RecvTClass, &true)?;
    }
    Ok(())
}

/// Receives one datagram from `sock` into `buf` (one `recvmsg`), with the traffic class it
/// arrived with; blocks like the socket. `sock` must report traffic classes
/// ([`report_traffic_class`]). A datagram longer than `buf` is cut and reported as truncated.
/// Allocates nothing.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let sock = std::net::UdpSocket::bind("[::]:5002")?;
/// caravan::report_traffic_class(&sock)?;
/// let mut buf = vec![0u8; 9000];
/// loop {
///     let msg = caravan::recv(&sock, &mut buf)?;
///     match msg.caravan() {
///         Ok(reader) => reader.for_each(|d| println!("{} B", d.payload.len())),
///         Err(caravan::Refused::NotCaravan) => println!("a plain datagram: {:?}", msg.payload),
///         Err(e) => eprintln!("refused whole: {e}"),
///     }
/// }
/// # }
/// ```
pub fn recv<'a>(sock: &impl AsFd, buf: &'a mut [u8]) -> io::Result<Received<'a>> {
    let mut cmsg = Cmsgs([0; CMSG_ROOM]);
    let (len, truncated, peer, traffic_class) = {
        let mut iov = [io::IoSliceMut::new(buf)];
        let msg = recvmsg::<SockaddrStorage>(
            sock.as_fd().as_raw_fd(),
            &mut iov,
            Some(&mut cmsg.0[..]),
            MsgFlags::empty(),
        )?;
        (
            msg.bytes,
            msg.flags.contains(MsgFlags::MSG_TRUNC),
            msg.address.as_ref().and_then(socket_addr),
            // Cut short: not trusted.
            traffic_class(&msg).ok().flatten(),
        )
    };
    Ok(Received {
        payload: &buf[..len.min(buf.len())],
        truncated,
        peer,
        traffic_class,
        mark: DEFAULT_DSCP,
    })
}

/// A control-message buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Cmsgs([u8; CMSG_ROOM]);

/// The traffic class a received message carried: `Err` when its control messages were cut short
/// (`MSG_CTRUNC`: the buffer was too small), `Ok(None)` without an `IP_TOS` or `IPV6_TCLASS`
/// control message.
pub(crate) fn traffic_class<S>(msg: &RecvMsg<'_, '_, S>) -> Result<Option<u8>, nix::Error> {
    let mut class = None;
    for cmsg in msg.cmsgs()? {
        match cmsg {
            ControlMessageOwned::Ipv4Tos(tos) => class = Some(tos),
            ControlMessageOwned::Ipv6TClass(tc) => class = u8::try_from(tc).ok(),
            _ => {}
        }
    }
    Ok(class)
}

/// The peer address of a received message.
pub(crate) fn socket_addr(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from((v4.ip(), v4.port())));
    }
    let v6 = s.as_sockaddr_in6()?;
    Some(SocketAddr::from((v6.ip(), v6.port())))
}

/// One UDP payload as received ([`recv`], [`BatchReader`](crate::BatchReader)): a caravan, or
/// an ordinary datagram, told apart by the mark its IP header carried and by the caravan format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received<'a> {
    /// The bytes received (at most the buffer's size).
    pub payload: &'a [u8],
    /// Whether the datagram was longer than the buffer and was cut.
    pub truncated: bool,
    /// The sender, when the kernel reported one.
    pub peer: Option<SocketAddr>,
    /// The IPv4 TOS byte or IPv6 traffic class (DSCP and ECN) the datagram arrived with; `None`
    /// when the socket does not report it ([`report_traffic_class`]).
    pub traffic_class: Option<u8>,
    /// The caravan mark (DSCP) this payload is judged against.
    pub(crate) mark: u8,
}

impl<'a> Received<'a> {
    /// The same message, judged against the caravan mark `dscp` (the decapsulator's and the
    /// gateway's, when not the default 7).
    pub fn with_dscp(self, dscp: u8) -> Self {
        Self { mark: dscp, ..self }
    }

    /// Whether the datagram's IP header carried the caravan mark (ECN aside).
    pub fn marked(&self) -> bool {
        self.traffic_class
            .is_some_and(|tc| format::is_marked(tc, self.mark))
    }

    /// The message as a caravan ([`Reader::new`]) when its IP header carried the mark;
    /// otherwise [`Refused::NotCaravan`], an ordinary datagram, whatever its payload says. A
    /// marked message that was cut is [`Malformed::Truncated`] whatever its bytes say.
    pub fn caravan(&self) -> Result<Reader<'a>, Refused> {
        self.marked_whole()?;
        Reader::new(self.payload)
    }

    /// The message as a caravan of the flow `src_port` → `dst_port` ([`Reader::with_ports`]),
    /// under the same rules as [`caravan`](Self::caravan).
    pub fn caravan_with_ports(&self, src_port: u16, dst_port: u16) -> Result<Reader<'a>, Refused> {
        self.marked_whole()?;
        Reader::with_ports(self.payload, src_port, dst_port)
    }

    fn marked_whole(&self) -> Result<(), Refused> {
        if !self.marked() {
            Err(Refused::NotCaravan)
        } else if self.truncated {
            Err(Refused::Malformed(Malformed::Truncated))
        } else {
            Ok(())
        }
    }
}
