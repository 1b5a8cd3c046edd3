//! Floods from the outside host, as fast as a packet socket sends them, bounded in count and
//! time: many flows of small TCP segments, SYNs from spoofed sources, UDP datagrams. Frames are
//! built with `pxio::wire::repr` into one reused buffer.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use gateway_lab::{Family, Lab};
use pxio::wire::repr::{
    EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, L4Repr, TcpRepr, UdpRepr,
};
use pxio::wire::tcp_flags;

use crate::wire::{join, mac_of, spawn_in, PacketWire};

/// What a flood sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Every frame a new flow: a 64 B TCP data segment from a spoofed source (addresses in
    /// 198.18.0.0/16, ports varying) to a closed port of the inside host.
    Flows,
    /// SYNs with an MSS option from spoofed sources, every one a new connection.
    Syn,
    /// 32 B UDP datagrams to the inside host's port 7000, round-robin over `flows` flows (the
    /// outside host's real address, source ports varying), `burst` back to back per flow.
    Udp {
        /// Flows the datagrams are spread over.
        flows: u32,
        /// Datagrams of one flow in a row.
        burst: u32,
    },
}

/// What a flood did.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// Frames sent.
    pub frames: u64,
    /// How long it took.
    pub seconds: f64,
}

/// A spoofed IPv4 source for frame `i`: 198.18.x.y (the benchmark range), never a lab host.
fn spoofed(i: u64) -> [u8; 4] {
    let n = (i % 65_000) as u16 + 256;
    [198, 18, (n >> 8) as u8, n as u8]
}

/// Sends `count` frames of `kind` in `family` from the outside host to the inside host, for
/// at most `limit`, as fast as it can or at most `pps` frames per second.
pub fn flood(
    lab: &Lab,
    kind: Kind,
    family: Family,
    count: u64,
    limit: Duration,
    pps: Option<u64>,
) -> Result<Sent> {
    let iface = lab.ext_iface().to_owned();
    let dst_mac = mac_of(&lab.int, lab.int_iface())?;
    let (dst, ext) = (lab.int_addr(family), lab.ext_addr(family));
    let handle = spawn_in(&lab.ext, "flood", move || {
        let mut wire = PacketWire::open(&iface)?;
        let eth = EthernetRepr {
            dst: dst_mac,
            src: wire.mac,
            vlan_tci: None,
            ethertype: 0,
        };
        let payload = [0x5au8; 64];
        let mss = [2, 4, 0x05, 0xb4];
        let mut buf = vec![0u8; 256];
        let started = Instant::now();
        let mut frames = 0u64;
        while frames < count && started.elapsed() < limit {
            let i = frames;
            let src: IpAddr = match (kind, ext) {
                (Kind::Udp { .. }, a) => a,
                (_, IpAddr::V4(_)) => IpAddr::from(spoofed(i)),
                (_, IpAddr::V6(_)) => {
                    let mut a = [0u8; 16];
                    a[..6].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff]);
                    a[12..].copy_from_slice(&(i as u32).to_be_bytes());
                    IpAddr::from(a)
                }
            };
            let ip = match (src, dst) {
                (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
                    ident: i as u16,
                    ..Ipv4Repr::new(s.octets(), d.octets())
                }),
                (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr::new(s.octets(), d.octets())),
                _ => bail!("mixed families"),
            };
            let sport = 1024 + (i / 65_000) as u16;
            let (l4, body): (L4Repr<'_>, &[u8]) = match kind {
                Kind::Flows => (
                    L4Repr::Tcp(TcpRepr {
                        src_port: sport,
                        dst_port: 9,
                        seq: (i as u32).wrapping_mul(2_654_435_761),
                        ack: 1,
                        flags: tcp_flags::ACK | tcp_flags::PSH,
                        window: 512,
                        urgent: 0,
                        options: &[],
                    }),
                    &payload,
                ),
                Kind::Syn => (
                    L4Repr::Tcp(TcpRepr {
                        src_port: sport,
                        dst_port: 9,
                        seq: (i as u32).wrapping_mul(2_654_435_761),
                        ack: 0,
                        flags: tcp_flags::SYN,
                        window: 64_240,
                        urgent: 0,
                        options: &mss,
                    }),
                    &[],
                ),
                Kind::Udp { flows, burst } => (
                    L4Repr::Udp(UdpRepr {
                        src_port: 10_000
                            + ((i / u64::from(burst.max(1))) % u64::from(flows.max(1))) as u16,
                        dst_port: 7000,
                    }),
                    &payload[..32],
                ),
            };
            let len = FrameRepr {
                ethernet: eth,
                ip,
                l4,
            }
            .emit(&mut buf, body)?;
            // A full socket buffer is a drop on the sender's side: try again.
            while wire.send(&buf[..len]).is_err() {
                if started.elapsed() >= limit {
                    break;
                }
                std::thread::yield_now();
            }
            frames += 1;
            if let Some(pps) = pps.filter(|_| frames.is_multiple_of(64)) {
                let due = Duration::from_secs_f64(frames as f64 / pps as f64);
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        Ok(Sent {
            frames,
            seconds: started.elapsed().as_secs_f64(),
        })
    })?;
    join(handle)
}
