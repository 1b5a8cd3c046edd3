//! Fragment capture for the endpoint daemon: an `AF_PACKET` socket with a classic BPF filter
//! (SIGCOMM'26 §5.2: the responder "reports all fragment sizes").
//!
//! Linux's `IP_RECVFRAGSIZE` cmsg would give only the largest fragment, and neither `nix` 0.31
//! nor `socket2` nor `rustix` can set that option without `unsafe`, which this crate does not
//! use. Capturing gives every fragment's size, before the kernel reassembles the datagram, and
//! runs the same [`crate::FragmentTracker`] as pxgw. The filter keeps the cost down: the socket
//! sees only incoming IPv4/IPv6 UDP fragments and UDP datagrams to the probe port.

use std::io::{self, Read};
use std::time::Duration;

use socket2::{Domain, Protocol, SockFilter, Socket, Type};

/// Classic BPF opcodes and Linux ancillary offsets the filter uses (`linux/filter.h`).
pub mod bpf {
    /// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word (or an ancillary value).
    pub const LD_W_ABS: u16 = 0x20;
    /// `BPF_LD | BPF_H | BPF_ABS`: load a big-endian 16-bit word.
    pub const LD_H_ABS: u16 = 0x28;
    /// `BPF_LD | BPF_B | BPF_ABS`: load a byte.
    pub const LD_B_ABS: u16 = 0x30;
    /// `BPF_LD | BPF_H | BPF_IND`: load 16 bits at X + k.
    pub const LD_H_IND: u16 = 0x48;
    /// `BPF_LDX | BPF_B | BPF_MSH`: X = 4 * (byte at k & 0xf), the IPv4 header length.
    pub const LDX_B_MSH: u16 = 0xb1;
    /// `BPF_JMP | BPF_JEQ | BPF_K`.
    pub const JEQ_K: u16 = 0x15;
    /// `BPF_JMP | BPF_JSET | BPF_K`.
    pub const JSET_K: u16 = 0x45;
    /// `BPF_RET | BPF_K`: accept k bytes (0: drop).
    pub const RET_K: u16 = 0x06;
    /// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the packet type ancillary load.
    pub const AD_PKTTYPE: u32 = (-0x1000i32 + 4) as u32;
    /// `SKF_AD_OFF + SKF_AD_PROTOCOL`: the ethertype ancillary load.
    pub const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
    /// `PACKET_OUTGOING`: a packet this host sends.
    pub const PACKET_OUTGOING: u32 = 4;
    /// IPv4 ethertype.
    pub const ETH_P_IP: u32 = 0x0800;
    /// IPv6 ethertype.
    pub const ETH_P_IPV6: u32 = 0x86dd;
    /// All ethertypes (the socket's protocol).
    pub const ETH_P_ALL: u16 = 0x0003;
}

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A conditional jump from instruction `at` to the absolute targets `yes` and `no`.
fn jump(at: usize, code: u16, k: u32, yes: usize, no: usize) -> libc::sock_filter {
    let rel = |target: usize| u8::try_from(target - at - 1).unwrap_or(u8::MAX);
    libc::sock_filter {
        code,
        jt: rel(yes),
        jf: rel(no),
        k,
    }
}

/// The capture filter: incoming (not outgoing) packets that are IPv4 UDP fragments, IPv4 UDP
/// to `port`, IPv6 UDP fragments (fragment header right after the fixed header), or IPv6 UDP
/// to `port`. Offsets count from the IP header (an `AF_PACKET`/`SOCK_DGRAM` socket).
pub fn filter(port: u16) -> Vec<libc::sock_filter> {
    use bpf::*;
    const V4: usize = 5;
    const V6: usize = 12;
    const V6_FRAG: usize = 17;
    const ACCEPT: usize = 19;
    const DROP: usize = 20;
    let port = u32::from(port);
    let prog = vec![
        stmt(LD_W_ABS, AD_PKTTYPE),
        jump(1, JEQ_K, PACKET_OUTGOING, DROP, 2),
        stmt(LD_W_ABS, AD_PROTOCOL),
        jump(3, JEQ_K, ETH_P_IP, V4, 4),
        jump(4, JEQ_K, ETH_P_IPV6, V6, DROP),
        // V4: UDP only; any fragment (MF or offset), or a whole datagram to the port.
        stmt(LD_B_ABS, 9),
        jump(6, JEQ_K, 17, 7, DROP),
        stmt(LD_H_ABS, 6),
        jump(8, JSET_K, 0x3fff, ACCEPT, 9),
        stmt(LDX_B_MSH, 0),
        stmt(LD_H_IND, 2),
        jump(11, JEQ_K, port, ACCEPT, DROP),
        // V6: next header is a fragment header, or UDP to the port.
        stmt(LD_B_ABS, 6),
        jump(13, JEQ_K, 44, V6_FRAG, 14),
        jump(14, JEQ_K, 17, 15, DROP),
        stmt(LD_H_ABS, 42),
        jump(16, JEQ_K, port, ACCEPT, DROP),
        // V6_FRAG: the fragment header's next header is UDP.
        stmt(LD_B_ABS, 40),
        jump(18, JEQ_K, 17, ACCEPT, DROP),
        stmt(RET_K, 0xffff),
        stmt(RET_K, 0),
    ];
    debug_assert_eq!(prog.len(), DROP + 1);
    prog
}

/// A filtered `AF_PACKET` capture of probe fragments on every interface of the current
/// network namespace. Needs `CAP_NET_RAW`.
#[derive(Debug)]
pub struct Capture {
    socket: Socket,
}

impl Capture {
    /// Opens the capture for probes to `port`; [`Capture::recv`] waits at most `poll`.
    pub fn open(port: u16, poll: Duration) -> io::Result<Self> {
        let protocol = Protocol::from(i32::from(bpf::ETH_P_ALL.to_be()));
        let socket = Socket::new(Domain::PACKET, Type::DGRAM, Some(protocol))?;
        // socket2 0.6 takes its own wrapper of `sock_filter`; the tests interpret the raw one.
        let prog: Vec<SockFilter> = filter(port)
            .iter()
            .map(|i| SockFilter::new(i.code, i.jt, i.jf, i.k))
            .collect();
        socket.attach_filter(&prog)?;
        socket.set_read_timeout(Some(poll.max(Duration::from_millis(1))))?;
        Ok(Self { socket })
    }

    /// The next captured IP packet, or `None` after the poll time passed without one.
    pub fn recv<'b>(&self, buf: &'b mut [u8]) -> io::Result<Option<&'b [u8]>> {
        match (&self.socket).read(buf) {
            Ok(n) => Ok(buf.get(..n)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::tests::fragment_v4;

    /// Runs the subset of classic BPF the filter uses, with ancillary packet type and protocol.
    fn run(prog: &[libc::sock_filter], pkt: &[u8], pkttype: u32, proto: u32) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let byte = |i: usize| pkt.get(i).copied();
        let half = |i: usize| Some(u32::from(byte(i)?) << 8 | u32::from(byte(i + 1)?));
        loop {
            let ins = prog[pc];
            pc += 1;
            let k = ins.k;
            match ins.code {
                bpf::LD_W_ABS if k == bpf::AD_PKTTYPE => a = pkttype,
                bpf::LD_W_ABS if k == bpf::AD_PROTOCOL => a = proto,
                bpf::LD_H_ABS => match half(k as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                bpf::LD_B_ABS => match byte(k as usize) {
                    Some(v) => a = u32::from(v),
                    None => return 0,
                },
                bpf::LD_H_IND => match half((x + k) as usize) {
                    Some(v) => a = v,
                    None => return 0,
                },
                bpf::LDX_B_MSH => match byte(k as usize) {
                    Some(v) => x = 4 * u32::from(v & 0xf),
                    None => return 0,
                },
                bpf::JEQ_K | bpf::JSET_K => {
                    let taken = if ins.code == bpf::JEQ_K {
                        a == k
                    } else {
                        a & k != 0
                    };
                    pc += usize::from(if taken { ins.jt } else { ins.jf });
                }
                bpf::RET_K => return k,
                other => panic!("opcode {other:#x} not in the filter"),
            }
        }
    }

    fn v6(next: u8, frag_next: u8, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 64];
        p[0] = 0x60;
        p[6] = next;
        p[40] = frag_next;
        p[42..44].copy_from_slice(&dport.to_be_bytes());
        p
    }

    #[test]
    fn filter_keeps_probe_traffic_only() {
        let prog = filter(4689);
        let host = 0;
        let (ip, ip6) = (bpf::ETH_P_IP, bpf::ETH_P_IPV6);
        let frags = fragment_v4(&[0; 3000], 53, 1, 1500);
        let whole = fragment_v4(&[0; 100], 4689, 1, 1500);
        let other = fragment_v4(&[0; 100], 80, 1, 1500);
        // Every IPv4 UDP fragment (the port is only in the first), whole datagrams to 4689.
        assert_ne!(run(&prog, &frags[0], host, ip), 0);
        assert_ne!(run(&prog, &frags[1], host, ip), 0);
        assert_ne!(run(&prog, &whole[0], host, ip), 0);
        assert_eq!(run(&prog, &other[0], host, ip), 0);
        // Not outgoing packets, not TCP, not ARP.
        assert_eq!(run(&prog, &whole[0], bpf::PACKET_OUTGOING, ip), 0);
        let mut tcp = frags[1].clone();
        tcp[9] = 6;
        assert_eq!(run(&prog, &tcp, host, ip), 0);
        assert_eq!(run(&prog, &whole[0], host, 0x0806), 0);
        // IPv6: UDP to the port, UDP fragments; not other ports or other fragments.
        assert_ne!(run(&prog, &v6(17, 0, 4689), host, ip6), 0);
        assert_eq!(run(&prog, &v6(17, 0, 443), host, ip6), 0);
        assert_ne!(run(&prog, &v6(44, 17, 0), host, ip6), 0);
        assert_eq!(run(&prog, &v6(44, 6, 0), host, ip6), 0);
        assert_eq!(run(&prog, &v6(6, 0, 4689), host, ip6), 0);
    }
}
