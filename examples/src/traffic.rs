//! Test traffic for the NFs: TCP flows of IPv4 and IPv6 side by side, each opened by a SYN and
//! sending TSO-like bursts of full-size segments interleaved with the other flows, as a 1500 B
//! (or other MTU) link delivers them; GTP-U encapsulation for uplink traffic; and the per-flow
//! byte streams of what comes out, to compare two NFs' outputs.

use std::collections::BTreeMap;

use pxio::wire::gtpu::{GtpuRepr, PduDirection, UDP_PORT};
use pxio::wire::{
    classify, tcp_flags, tcp_frame, Class, EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, TcpRepr,
};

/// One TCP flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flow {
    /// IPv6 (else IPv4: the first 4 bytes of the addresses).
    pub v6: bool,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// The server every example's flows talk to, over IPv6 (2001:db8:beef::80).
pub const SERVER_V6: [u8; 16] = [
    0x20, 1, 0xd, 0xb8, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80,
];

/// The IPv4 server (and the load balancer's virtual IPv4 address) of the examples.
pub const VIP_V4: [u8; 4] = [192, 0, 2, 80];

/// NOP, NOP, time stamps: the options of every segment (12 bytes).
const TS_OPTION: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0];
/// Initial sequence number of every flow.
pub const ISN: u32 = 1_000;

/// Byte `off` of flow `flow`'s stream: a pattern that differs between flows and positions.
pub fn payload_byte(flow: usize, off: usize) -> u8 {
    (off.wrapping_mul(31) ^ flow.wrapping_mul(131) ^ (off >> 8)) as u8
}

impl Flow {
    /// IP + TCP header bytes.
    pub fn headers(&self) -> usize {
        if self.v6 {
            40 + 32
        } else {
            20 + 32
        }
    }

    /// The segment payload that fills an IP MTU of `mtu`.
    pub fn mss(&self, mtu: u16) -> usize {
        usize::from(mtu) - self.headers()
    }

    /// One Ethernet frame of this flow: `payload` at sequence number `seq`, with `flags`.
    pub fn segment(&self, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        let eth = EthernetRepr {
            dst: [2, 0, 0, 0, 0, 0x10],
            src: [2, 0, 0, 0, 0, 0x01],
            vlan_tci: None,
            ethertype: 0,
        };
        let ip = if self.v6 {
            IpRepr::V6(Ipv6Repr::new(self.src, self.dst))
        } else {
            let mut src = [0u8; 4];
            let mut dst = [0u8; 4];
            src.copy_from_slice(&self.src[..4]);
            dst.copy_from_slice(&self.dst[..4]);
            IpRepr::V4(Ipv4Repr {
                dont_frag: true,
                ..Ipv4Repr::new(src, dst)
            })
        };
        let tcp = TcpRepr {
            src_port: self.sport,
            dst_port: self.dport,
            seq,
            ack: 1,
            flags,
            window: 1024,
            urgent: 0,
            options: &TS_OPTION,
        };
        // The reprs are well-formed and the payload below 64 KiB.
        tcp_frame(eth, ip, tcp, payload).unwrap_or_default()
    }
}

/// `n` flows, alternately IPv4 and IPv6, from `src_v4`/`src_v6` hosts (the flow index in the
/// last two bytes) to `dst_v4`/`dst_v6`, destination port `dport`.
pub fn flows(
    n: usize,
    src_v4: [u8; 2],
    dst_v4: [u8; 4],
    dst_v6: [u8; 16],
    dport: u16,
) -> Vec<Flow> {
    (0..n)
        .map(|i| {
            let v6 = i % 2 == 1;
            let mut src = [0u8; 16];
            let idx = (i as u16).to_be_bytes();
            if v6 {
                src = [
                    0x20, 0x01, 0x0d, 0xb8, 0xa, 0, 0, 0, 0, 0, 0, 0, 0, 0, idx[0], idx[1],
                ];
            } else {
                src[..4].copy_from_slice(&[src_v4[0], src_v4[1], idx[0], idx[1]]);
            }
            let dst = if v6 { dst_v6 } else { crate::addr16(&dst_v4) };
            Flow {
                v6,
                src,
                dst,
                sport: 40_000 + i as u16,
                dport,
            }
        })
        .collect()
}

/// The traffic of `flows`: each sends a SYN, then `bursts` bursts of `burst` full-size
/// segments (IP MTU `mtu`); flows take turns burst by burst, and the last segment of each
/// burst carries PSH. Payload bytes follow [`payload_byte`].
pub fn tcp_traffic(flows: &[Flow], bursts: usize, burst: usize, mtu: u16) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for f in flows {
        out.push(f.segment(ISN - 1, tcp_flags::SYN, &[]));
    }
    let mut offset = vec![0usize; flows.len()];
    for _ in 0..bursts {
        for (i, f) in flows.iter().enumerate() {
            let mss = f.mss(mtu);
            for s in 0..burst {
                let start = offset[i];
                let payload: Vec<u8> = (start..start + mss).map(|o| payload_byte(i, o)).collect();
                let mut flags = tcp_flags::ACK;
                if s + 1 == burst {
                    flags |= tcp_flags::PSH;
                }
                out.push(f.segment(ISN + start as u32, flags, &payload));
                offset[i] += mss;
            }
        }
    }
    out
}

/// The same flows in the other direction (server to host).
pub fn reversed(flows: &[Flow]) -> Vec<Flow> {
    flows
        .iter()
        .map(|f| Flow {
            src: f.dst,
            dst: f.src,
            sport: f.dport,
            dport: f.sport,
            ..*f
        })
        .collect()
}

/// The examples' UPF traffic for `flows` (hosts as UEs, see `SessionSpec::for_host`):
/// downlink from the server to every UE, and uplink from every UE in GTP-U from its gNB, burst
/// by burst alternately.
pub fn upf_traffic(
    flows: &[Flow],
    bursts: usize,
    burst: usize,
    mtu: u16,
    n3: [u8; 4],
) -> Vec<Vec<u8>> {
    let down = tcp_traffic(&reversed(flows), bursts, burst, mtu);
    let up = tcp_traffic(flows, bursts, burst, mtu);
    let mut out = Vec::with_capacity(down.len() + up.len());
    let per_round = flows.len() * burst;
    let (mut d, mut u) = (down.into_iter().peekable(), up.into_iter());
    while d.peek().is_some() {
        out.extend(d.by_ref().take(per_round));
        for f in u.by_ref().take(per_round) {
            // The host index is in the last two bytes of the source address.
            let v6 = f[12..14] == [0x86, 0xdd];
            let at = if v6 { 14 + 8 + 14 } else { 14 + 12 + 2 };
            let i = u16::from_be_bytes([f[at], f[at + 1]]);
            out.push(gtpu_uplink(
                &f,
                [198, 51, 100, 250],
                n3,
                0x4000_0000 + u32::from(i),
            ));
        }
    }
    out
}

/// Wraps `inner` (an Ethernet frame) in GTP-U toward `n3` from `gnb` with `teid`, as a gNB sends
/// uplink (outer IPv4, UDP 2152, a PDU Session Container with QFI 9).
pub fn gtpu_uplink(inner: &[u8], gnb: [u8; 4], n3: [u8; 4], teid: u32) -> Vec<u8> {
    let ip = &inner[14..];
    let gtp = GtpuRepr {
        teid,
        qfi: Some((PduDirection::Uplink, 9)),
    };
    let udp_len = 8 + gtp.buffer_len() + ip.len();
    let mut f = vec![0u8; 14 + 20 + udp_len];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x10]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x20]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let outer = Ipv4Repr {
        protocol: pxio::wire::ip_proto::UDP,
        payload_len: udp_len,
        dont_frag: true,
        ..Ipv4Repr::new(gnb, n3)
    };
    let _ = IpRepr::V4(outer).emit(&mut f[14..34]);
    f[34..36].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[36..38].copy_from_slice(&UDP_PORT.to_be_bytes());
    f[38..40].copy_from_slice(&(udp_len as u16).to_be_bytes());
    let _ = gtp.emit(&mut f[42..], ip.len());
    f[42 + gtp.buffer_len()..].copy_from_slice(ip);
    f
}

/// What identifies a stream at the output: the GTP-U TEID it was tunnelled with (0 when not)
/// and the inner flow's addresses and ports.
pub type StreamKey = (u32, [u8; 16], [u8; 16], u16, u16);

/// Per-flow TCP payload streams of output frames, in the order they left (GTP-U is taken off
/// first), with every frame's checksums verified; frames that are not TCP are counted under
/// the all-zero key with their length. Returns the streams and how many frames failed a check.
pub fn streams(frames: &[Vec<u8>]) -> (BTreeMap<StreamKey, Vec<u8>>, usize) {
    let mut out: BTreeMap<StreamKey, Vec<u8>> = BTreeMap::new();
    let mut bad = 0;
    for f in frames {
        let (teid, inner) = match classify(f, f.len()) {
            Class::Udp(h) if h.key.dport == UDP_PORT => {
                let at = h.hdr_len();
                match GtpuRepr::parse(&f[at..], usize::from(h.payload_len)) {
                    Ok((g, len)) => {
                        // A fake Ethernet header in front of the inner packet.
                        let ip = &f[at + len..h.frame_len()];
                        let mut inner = vec![0u8; 14 + ip.len()];
                        let v6 = ip.first().map(|b| b >> 4) == Some(6);
                        inner[12..14]
                            .copy_from_slice(&if v6 { 0x86ddu16 } else { 0x0800 }.to_be_bytes());
                        inner[14..].copy_from_slice(ip);
                        (g.teid, inner)
                    }
                    Err(_) => {
                        bad += 1;
                        continue;
                    }
                }
            }
            _ => (0, f.clone()),
        };
        match classify(&inner, inner.len()) {
            Class::Tcp(h) => {
                if !tcp_checksums_ok(&inner, &h) {
                    bad += 1;
                }
                let key = (teid, h.key.src, h.key.dst, h.key.sport, h.key.dport);
                out.entry(key)
                    .or_default()
                    .extend_from_slice(&inner[h.hdr_len()..h.frame_len()]);
            }
            _ => out
                .entry((0, [0; 16], [0; 16], 0, 0))
                .or_default()
                .extend_from_slice(&(inner.len() as u32).to_be_bytes()),
        }
    }
    (out, bad)
}

/// Whether the IPv4 header checksum and the TCP checksum of a frame verify.
fn tcp_checksums_ok(frame: &[u8], h: &pxio::wire::Headers) -> bool {
    use pxio::checksum::{pseudo_header_v4, pseudo_header_v6, Sum};
    let l3 = &frame[h.l3_offset()..h.l4_offset()];
    let l4 = &frame[h.l4_offset()..h.frame_len()];
    let pseudo = if h.v6 {
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&l3[8..24]);
        d.copy_from_slice(&l3[24..40]);
        pseudo_header_v6(s, d, h.proto, l4.len() as u32)
    } else {
        if Sum::of(l3).fold() != 0xffff {
            return false;
        }
        let mut s = [0u8; 4];
        let mut d = [0u8; 4];
        s.copy_from_slice(&l3[12..16]);
        d.copy_from_slice(&l3[16..20]);
        pseudo_header_v4(s, d, h.proto, l4.len() as u16)
    };
    pseudo.add(Sum::of(l4)).fold() == 0xffff
}
