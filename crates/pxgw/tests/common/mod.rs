//! What pxgw's pipeline tests share: a pipeline on heap buffers, built from a configuration.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use etherparse::{SlicedPacket, TcpOptionElement, TransportSlice};
use pxgw::config::Config;
use pxgw::pipeline::Pipeline;
use pxio::split::SplitOffloads;
use pxio::wire::EthernetRepr;
use pxio::{HeapBuf, HeapPool};

/// A pipeline on heap buffers for `net_null` ports: `external` adds keys to `[ports.external]`,
/// `extra` adds tables after the ports.
#[allow(dead_code)] // not every test binary that includes this module builds a pipeline
pub fn pipeline_with(external: &str, extra: &str) -> Pipeline<HeapBuf> {
    let cfg = Config::parse(&format!(
        "[ports.external]\ndevice = \"net_null0\"\n{external}\
         [ports.internal]\ndevice = \"net_null1\"\n{extra}"
    ))
    .unwrap();
    Pipeline::new(
        &cfg,
        HeapPool::new(256),
        HeapPool::new(256),
        SplitOffloads::default(),
    )
    .unwrap()
}

/// A pipeline on mbufs for `net_null` ports, without offloads, building from `headers`.
#[allow(dead_code)] // not every test binary that includes this module runs on mbufs
pub fn mbuf_pipeline(headers: &std::sync::Arc<dpdk::Mempool>) -> Pipeline<dpdk::Mbuf> {
    let cfg = Config::parse(
        "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n",
    )
    .unwrap();
    Pipeline::new(
        &cfg,
        headers.clone(),
        headers.clone(),
        SplitOffloads::default(),
    )
    .unwrap()
}

/// The Ethernet header of a frame arriving from outside (the outside router's MAC to pxgw's).
#[allow(dead_code)] // not every test binary that includes this module sends frames
pub const FROM_OUTSIDE: EthernetRepr = EthernetRepr {
    dst: [2, 0, 0, 0, 0, 2],
    src: [2, 0, 0, 0, 0, 1],
    vlan_tci: None,
    ethertype: 0,
};

/// The IP header of a packet from outside host `host` to the inside host: 198.18.0.`host` to
/// 198.51.100.2, or 2001:db8::`host` to 2001:db8::2, with TTL (hop limit) `ttl` and DSCP `dscp`.
#[allow(dead_code)] // not every test binary that includes this module builds IP headers
pub fn ip_from_outside(v6: bool, host: u8, ttl: u8, dscp: u8) -> pxio::wire::IpRepr {
    use pxio::wire::{IpRepr, Ipv4Repr, Ipv6Repr};
    if v6 {
        let (mut src, mut dst) = ([0u8; 16], [0u8; 16]);
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        dst[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        (src[15], dst[15]) = (host, 2);
        IpRepr::V6(Ipv6Repr {
            hop_limit: ttl,
            dscp,
            ..Ipv6Repr::new(src, dst)
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            ttl,
            dscp,
            ..Ipv4Repr::new([198, 18, 0, host], [198, 51, 100, 2])
        })
    }
}

/// The Ethernet header of a frame arriving from inside.
#[allow(dead_code)]
pub const FROM_INSIDE: EthernetRepr = EthernetRepr {
    dst: [2, 0, 0, 0, 0, 1],
    src: [2, 0, 0, 0, 0, 2],
    vlan_tci: None,
    ethertype: 0,
};

/// The outside host of the TCP helpers ([`tcp`]), over IPv4.
#[allow(dead_code)] // not every test binary that includes this module sends TCP
pub const OUTSIDE: [u8; 4] = [198, 51, 100, 7];
/// The inside host of the TCP helpers, over IPv4.
#[allow(dead_code)]
pub const INSIDE: [u8; 4] = [198, 18, 8, 2];
/// The outside host of the TCP helpers, over IPv6.
#[allow(dead_code)]
pub const OUTSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7];
/// The inside host of the TCP helpers, over IPv6.
#[allow(dead_code)]
pub const INSIDE6: [u8; 16] = [0x20, 1, 0x0d, 0xb8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

/// A TCP frame of the connection between port `port` of [`OUTSIDE`] (or [`OUTSIDE6`]) and port
/// 80 of [`INSIDE`] (or [`INSIDE6`]); `inbound` means outside → inside. A SYN announces MSS
/// 1460.
#[allow(dead_code)]
pub fn tcp(
    v6: bool,
    inbound: bool,
    port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    use pxio::wire::{self, IpRepr, Ipv4Repr, Ipv6Repr, TcpRepr};
    let ip = match (v6, inbound) {
        (false, true) => IpRepr::V4(Ipv4Repr {
            dont_frag: true,
            ..Ipv4Repr::new(OUTSIDE, INSIDE)
        }),
        (false, false) => IpRepr::V4(Ipv4Repr {
            dont_frag: true,
            ..Ipv4Repr::new(INSIDE, OUTSIDE)
        }),
        (true, true) => IpRepr::V6(Ipv6Repr::new(OUTSIDE6, INSIDE6)),
        (true, false) => IpRepr::V6(Ipv6Repr::new(INSIDE6, OUTSIDE6)),
    };
    let (src_port, dst_port) = if inbound { (port, 80) } else { (80, port) };
    let mss = [2, 4, 0x05, 0xb4]; // 1460
    let tcp = TcpRepr {
        src_port,
        dst_port,
        seq,
        ack,
        flags,
        window: 65000,
        urgent: 0,
        options: if flags & wire::tcp_flags::SYN != 0 {
            &mss
        } else {
            &[]
        },
    };
    let eth = if inbound { FROM_OUTSIDE } else { FROM_INSIDE };
    wire::tcp_frame(eth, ip, tcp, payload).unwrap()
}

/// [`tcp`] over IPv4.
#[allow(dead_code)]
pub fn tcp4(inbound: bool, port: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    tcp(false, inbound, port, seq, ack, flags, payload)
}

/// The MSS option of a TCP frame, and whether its checksum verifies.
#[allow(dead_code)] // not every test binary that includes this module reads MSS options
pub fn mss_of(frame: &[u8]) -> (Option<u16>, bool) {
    let p = SlicedPacket::from_ethernet(frame).unwrap();
    let Some(TransportSlice::Tcp(t)) = &p.transport else {
        panic!("not TCP")
    };
    let h = t.to_header();
    let mss = h.options_iterator().find_map(|o| match o {
        Ok(TcpOptionElement::MaximumSegmentSize(m)) => Some(m),
        _ => None,
    });
    let sum = match p.net.as_ref().unwrap() {
        etherparse::NetSlice::Ipv4(ip) => {
            h.calc_checksum_ipv4(&ip.header().to_header(), t.payload())
        }
        etherparse::NetSlice::Ipv6(ip) => {
            h.calc_checksum_ipv6(&ip.header().to_header(), t.payload())
        }
        _ => panic!("not IP"),
    };
    (mss, sum.unwrap() == h.checksum)
}

/// Runs the `pxgw` binary with `config` written to `dir/pxgw.toml`, `extra` arguments and
/// `RUST_LOG` set to `log`, until it exits.
#[allow(dead_code)] // only the tests that run the binary
pub fn run_pxgw(dir: &Path, config: &str, extra: &[&str], log: &str) -> Output {
    let path = dir.join("pxgw.toml");
    std::fs::write(&path, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_pxgw"))
        .env("RUST_LOG", log)
        .arg("--config")
        .arg(&path)
        .args(extra)
        .output()
        .unwrap()
}

/// A directory of its own for test `name` of `suite`, in this process.
#[allow(dead_code)] // only the tests that run the binary
pub fn scratch(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pxgw-{suite}-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The TCP test connections' hosts: the outside peer, the inside host, and a router outside
/// that sends ICMP errors, in each family.
#[allow(dead_code)] // not every test binary that includes this module sends TCP
pub mod hosts {
    pub const OUTSIDE_V4: [u8; 4] = [198, 51, 100, 1];
    pub const INSIDE_V4: [u8; 4] = [198, 18, 0, 2];
    pub const ROUTER_V4: [u8; 4] = [198, 51, 100, 254];
    pub const OUTSIDE_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    pub const INSIDE_V6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
    pub const ROUTER_V6: [u8; 16] = [
        0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe,
    ];
}

/// An ICMP error from the router outside quoting the first bytes of `quoted` (an inside host's
/// frame): "fragmentation needed" (IPv4) or Packet Too Big (IPv6) with `mtu`.
#[allow(dead_code)] // not every test binary that includes this module sends ICMP errors
pub fn too_big(quoted: &[u8], v6: bool, mtu: u32) -> Vec<u8> {
    use etherparse::{icmpv4::DestUnreachableHeader, Icmpv4Type, Icmpv6Type, PacketBuilder};
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip_len = if v6 { 40 } else { 20 };
    // The IP header and 8 bytes of TCP: all RFC 792 promises.
    let quote = &quoted[14..14 + ip_len + 8];
    let mut v = Vec::new();
    if v6 {
        eth.ipv6(hosts::ROUTER_V6, hosts::INSIDE_V6, 64)
            .icmpv6(Icmpv6Type::PacketTooBig { mtu })
            .write(&mut v, quote)
            .unwrap();
    } else {
        let next_hop_mtu = u16::try_from(mtu).unwrap();
        eth.ipv4(hosts::ROUTER_V4, hosts::INSIDE_V4, 64)
            .icmpv4(Icmpv4Type::DestinationUnreachable(
                DestUnreachableHeader::FragmentationNeeded { next_hop_mtu },
            ))
            .write(&mut v, quote)
            .unwrap();
    }
    v
}
