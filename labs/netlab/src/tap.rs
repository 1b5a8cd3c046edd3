//! A wire from a DPDK `net_tap` port to a veth: a persistent multi-queue TAP device and a bridge
//! joining it to one end of a veth pair, both in the calling process's namespace.
//!
//! Why not `net_af_packet` on the veth itself: DPDK 22.11's af_packet PMD opens its socket with
//! `PACKET_FANOUT_FLAG_DEFRAG`, so the kernel reassembles IPv4 fragments before the port sees them
//! (docs/dpdk-notes.md). Frames the kernel writes to a TAP device are exactly
//! those on the wire, fragments included, and a TAP has up to 16 queues for DPDK.
//!
//! The TAP is created here before DPDK opens it (`net_tap0,iface=NAME` attaches to a persistent
//! TAP of that name), so it can be bridged before the gateway starts. The bridge does not call
//! netfilter (`nf_call_iptables 0`), which could otherwise reassemble fragments too.

use crate::{output, run, unique_name, Result};

/// Frames each TAP queue holds for its reader.
const TAP_QUEUE_LEN: &str = "4096";

/// A TAP device bridged to a veth end; both removed on drop.
#[derive(Debug)]
pub struct TapWire {
    tap: String,
    bridge: String,
}

impl TapWire {
    /// A multi-queue TAP of MTU `mtu`, bridged to `veth_end` (an interface in this namespace).
    pub fn new(prefix: &str, veth_end: &str, mtu: u32) -> Result<Self> {
        let wire = Self {
            tap: unique_name(prefix),
            bridge: unique_name(prefix),
        };
        let mtu = mtu.to_string();
        run(
            "ip",
            &[
                "tuntap",
                "add",
                "dev",
                &wire.tap,
                "mode",
                "tap",
                "multi_queue",
            ],
        )?;
        run(
            "ip",
            &[
                "link",
                "add",
                &wire.bridge,
                "mtu",
                &mtu,
                "type",
                "bridge",
                "nf_call_iptables",
                "0",
                "nf_call_ip6tables",
                "0",
                "nf_call_arptables",
                "0",
            ],
        )?;
        for iface in [&wire.tap, &wire.bridge] {
            // The bridge and the TAP are wires, not hosts: no IPv6 link-local chatter.
            let _ = run(
                "sysctl",
                &["-qw", &format!("net.ipv6.conf.{iface}.disable_ipv6=1")],
            );
        }
        run("ip", &["link", "set", &wire.tap, "mtu", &mtu])?;
        // The TAP's queue toward its reader (one ring per queue, `txqueuelen` frames) holds a
        // 32-flow burst, as the lab's af_packet rings do; what overflows is its tx_dropped.
        run(
            "ip",
            &["link", "set", &wire.tap, "txqueuelen", TAP_QUEUE_LEN],
        )?;
        run("ip", &["link", "set", &wire.tap, "master", &wire.bridge])?;
        run("ip", &["link", "set", veth_end, "master", &wire.bridge])?;
        for iface in [&wire.tap, &wire.bridge] {
            run("ip", &["link", "set", iface, "up"])?;
        }
        Ok(wire)
    }

    /// The TAP's name: give it to DPDK as `net_tapN,iface=NAME`.
    pub fn tap(&self) -> &str {
        &self.tap
    }

    /// The bridge's name.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }
}

impl Drop for TapWire {
    fn drop(&mut self) {
        let _ = output("ip", &["link", "del", &self.tap]);
        let _ = output("ip", &["link", "del", &self.bridge]);
    }
}
