//! The one-shot prober (`fpmtud probe`): one F-PMTUD round over a std UDP socket.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use rustix::net::sockopt::{self, Ipv4PathMtuDiscovery, Ipv6PathMtuDiscovery};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::EndpointError;
use crate::prober::{PmtuEstimate, Prober, ProberConfig, Transmit};
use crate::Nanos;

/// A UDP socket for probing `dst`, bound to `local_port` (0: any), that sends with DF clear
/// (`IP_MTU_DISCOVER` = `IP_PMTUDISC_DONT`, or its IPv6 twin) so routers may fragment probes.
/// It is left unconnected: reports are accepted from any address and authenticated by nonce.
pub fn probe_socket(dst: IpAddr, local_port: u16) -> Result<UdpSocket, EndpointError> {
    let any = match dst {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let local = SocketAddr::new(any, local_port);
    let socket = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))
        .map_err(EndpointError::io("create the probe socket"))?;
    match dst {
        IpAddr::V4(_) => sockopt::set_ip_mtu_discover(&socket, Ipv4PathMtuDiscovery::DONT),
        IpAddr::V6(_) => sockopt::set_ipv6_mtu_discover(&socket, Ipv6PathMtuDiscovery::DONT),
    }
    .map_err(|e| EndpointError::Io {
        what: "clear DF on the probe socket (IP_MTU_DISCOVER)".into(),
        source: e.into(),
    })?;
    socket
        .bind(&SockAddr::from(local))
        .map_err(EndpointError::io(format!(
            "bind the probe socket to {local}"
        )))?;
    Ok(socket.into())
}

/// The MTU of the route toward `dst` as the kernel sees it (`IP_MTU` on a connected socket):
/// the next hop's eMTU.
pub fn route_mtu(dst: IpAddr) -> io::Result<u16> {
    let socket = UdpSocket::bind(match dst {
        IpAddr::V4(_) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
        IpAddr::V6(_) => SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0),
    })?;
    // Connecting a UDP socket sends nothing; it only resolves the route.
    socket.connect(SocketAddr::new(dst, 9))?;
    let mtu = match dst {
        IpAddr::V4(_) => sockopt::ip_mtu(&socket),
        IpAddr::V6(_) => sockopt::ipv6_mtu(&socket),
    }
    .map_err(io::Error::from)?;
    Ok(u16::try_from(mtu).unwrap_or(u16::MAX))
}

fn send(socket: &UdpSocket, tx: &Transmit) -> Result<(), EndpointError> {
    socket
        .send_to(&tx.payload, tx.dst)
        .map_err(EndpointError::io(format!(
            "send a {}-byte probe to {}",
            tx.size, tx.dst
        )))?;
    Ok(())
}

/// Runs one F-PMTUD round toward `dst` and returns its outcome: measured, or the fallback if
/// no valid report came back in time. When `cfg.emtu` is `None`, the route's MTU
/// ([`route_mtu`]) serves as the eMTU fallback. Bounded by `probes_per_round * interval +
/// timeout`.
pub fn probe(
    dst: IpAddr,
    mut cfg: ProberConfig,
    local_port: u16,
) -> Result<PmtuEstimate, EndpointError> {
    if cfg.emtu.is_none() {
        cfg.emtu = route_mtu(dst).ok();
    }
    let socket = probe_socket(dst, local_port)?;
    let mut prober = Prober::new(dst, cfg)?;
    let epoch = Instant::now();
    let now = || -> Nanos { u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX) };
    for tx in prober.start(now()) {
        send(&socket, &tx)?;
    }
    let mut buf = [0u8; 2048];
    while prober.is_probing() {
        let wait = prober
            .next_timeout()
            .map_or(0, |at| at.saturating_sub(now()));
        socket
            .set_read_timeout(Some(
                Duration::from_nanos(wait).max(Duration::from_millis(1)),
            ))
            .map_err(EndpointError::io("set the probe socket's timeout"))?;
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                if let Err(e) = prober.on_report(buf.get(..n).unwrap_or(&[]), now()) {
                    tracing::debug!(%from, error = %e, "ignored a datagram");
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                        | io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => return Err(EndpointError::io("receive reports")(e)),
        }
        for tx in prober.poll(now()) {
            send(&socket, &tx)?;
        }
    }
    prober.estimate().cloned().ok_or_else(|| EndpointError::Io {
        what: "F-PMTUD round".into(),
        source: io::Error::other("the round ended without an estimate"),
    })
}
