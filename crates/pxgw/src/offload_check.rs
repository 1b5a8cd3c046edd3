//! The kernel's TCP coalescing under kernel-backed ports: harmless, or refused at start with the
//! fix, never a silent stall.
//!
//! An interface with GRO on (the kernel's default on a physical NIC), LRO or hardware GRO hands
//! its packet sockets TCP segments already coalesced into packets of up to 64 KB. DPDK 22.11's
//! `net_af_packet` copies each packet into one mbuf, cut to its ring frame (the kernel's
//! `tp_snaplen`), and drops the length the packet had (`tp_len`): pxgw would get a packet whose
//! IP header claims more bytes than it carries, which it can neither split nor forward, and the
//! sender retransmits into the same cut until the transfer stalls. No ring frame holds 64 KB:
//! `net_af_packet` needs an mbuf of the whole frame, an mbuf's data room is a 16-bit length
//! (65,535 B with its headroom, less than a 64 KB packet and its ring header), and a pool of such
//! mbufs would take 2 GB. So pxgw refuses to start on such an interface, with one line naming it
//! and the `ethtool` command that turns the coalescing off ([`refusal`]); `pxgw --check` reports
//! the same line (both run [`crate::ports::preflight`]).
//!
//! `net_tap` asks the kernel for no offload (DPDK 22.11 sets no `TUNSETOFFLOAD`), so the kernel
//! segments and checksums every packet before queueing it to the TAP: GRO, TSO and GSO around a
//! TAP are harmless. `net_af_xdp` sees frames in the driver, before GRO, and the kernel turns LRO
//! off when XDP attaches. A DPDK-driven NIC coalesces only with LRO, which pxgw requests itself
//! (`dpdk::PortBuilder::lro`) and whose packets the pipeline takes as runs of segments.
//!
//! A veth under `net_af_packet` also passes on, whole, the TSO packets its peer sends, and with
//! the peer's TX checksum offload on, packets whose TCP checksum was left for a NIC that never
//! computes it (DPDK 22.11 drops the kernel's `TP_STATUS_CSUMNOTREADY`). pxgw cannot read the
//! peer's settings (it is usually in another namespace), so [`veth_warning`] says what the peer
//! needs.

use dpdk::netdev::Features;

use crate::config::{Backing, Port, AF_PACKET_FRAME_OVERHEAD};

/// The largest packet GRO or LRO builds: an IPv4 total length (the kernel's default
/// `gro_max_size`, 64 KB, less one).
pub const COALESCED_MAX: u32 = 65_535;

/// What the kernel coalesces on receive on one interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coalescing {
    /// Generic receive offload (`rx-gro`; ethtool's `gro`).
    pub gro: bool,
    /// Large receive offload in the NIC (`rx-lro`; ethtool's `lro`).
    pub lro: bool,
    /// GRO in the NIC (`rx-gro-hw`).
    pub gro_hw: bool,
}

impl Coalescing {
    /// What `features` has on.
    pub fn of(features: &Features) -> Self {
        let on = |name| features.active(name).unwrap_or(false);
        Self {
            gro: on("rx-gro"),
            lro: on("rx-lro"),
            gro_hw: on("rx-gro-hw"),
        }
    }

    /// Whether anything is coalesced.
    pub fn any(self) -> bool {
        self.gro || self.lro || self.gro_hw
    }

    /// What is on, as ethtool names it: `GRO`, `GRO and LRO`...
    fn names(self) -> String {
        let on: Vec<&str> = [
            (self.gro, "GRO"),
            (self.lro, "LRO"),
            (self.gro_hw, "hardware GRO"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect();
        match on.as_slice() {
            [] => "nothing".to_owned(),
            [one] => (*one).to_owned(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    }

    /// The `ethtool` command that turns it off on `iface`.
    pub fn fix(self, iface: &str) -> String {
        let hw = if self.gro_hw { " rx-gro-hw off" } else { "" };
        format!("ethtool -K {iface} gro off lro off{hw}")
    }
}

/// The refusal for port `name` (`external`, `internal`) configured as `port`, whose kernel
/// interface coalesces as `coalescing` says; `None` when the port's frames hold what the kernel
/// builds, or the kernel hands the port segments whatever it coalesces.
pub fn refusal(name: &str, port: &Port, coalescing: Coalescing) -> Option<String> {
    let Backing::Kernel { iface, .. } = port.backing() else {
        return None;
    };
    // Only net_af_packet receives the stack's packets as they are (module docs).
    let framesz = port.af_packet_framesz()?;
    let holds = u32::from(framesz).saturating_sub(u32::from(AF_PACKET_FRAME_OVERHEAD));
    if !coalescing.any() || COALESCED_MAX <= holds {
        return None;
    }
    Some(format!(
        "ports.{name}: interface {iface} has {} on: the kernel hands pxgw TCP segments \
         coalesced into packets of up to 64 KB, which net_af_packet cuts to its {framesz} B ring \
         frames (packets of at most {holds} B), and transfers would stall; turn it off: `{}`",
        coalescing.names(),
        coalescing.fix(&iface),
    ))
}

/// The warning for a `net_af_packet` port on a veth: what its peer must not send.
pub fn veth_warning(name: &str, port: &Port, driver: &str) -> Option<String> {
    let Backing::Kernel { iface, .. } = port.backing() else {
        return None;
    };
    (port.af_packet_framesz().is_some() && driver == "veth").then(|| {
        format!(
            "ports.{name}: interface {iface} is a veth: its peer must send frames as a wire \
             carries them, so turn off TSO, GSO and TX checksum offload there \
             (`ethtool -K PEER tso off gso off tx off`); pxgw cannot see the peer's settings, \
             and DPDK's net_af_packet cuts a TSO packet to its ring frame and keeps no mark of \
             a checksum left to the NIC"
        )
    })
}

/// What `--check` and the start-up log say of a kernel interface's offloads.
pub fn describe(features: &Features) -> String {
    let on = |name| match features.active(name) {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    };
    // Drivers name their TX checksum offload by what they sum: any IP, or IPv4 and IPv6.
    let sums = [
        "tx-checksum-ip-generic",
        "tx-checksum-ipv4",
        "tx-checksum-ipv6",
    ]
    .map(|n| features.active(n));
    let tx_checksums = if sums.contains(&Some(true)) {
        "on"
    } else if sums.iter().all(Option::is_none) {
        "n/a"
    } else {
        "off"
    };
    format!(
        "interface {} ({}): GRO {}, LRO {}, hardware GRO {}, TSO {}, GSO {}, TX checksums \
         {tx_checksums}",
        features.iface,
        if features.driver.is_empty() {
            "no driver name"
        } else {
            &features.driver
        },
        on("rx-gro"),
        on("rx-lro"),
        on("rx-gro-hw"),
        on("tx-tcp-segmentation"),
        on("tx-generic-segmentation"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use dpdk::netdev::Feature;

    fn port(device: &str, mtu: u16) -> Port {
        let cfg = Config::parse(&format!(
            "[ports.external]\ndevice = \"net_ring0\"\nmtu = 1500\n\
             [ports.internal]\ndevice = \"{device}\"\nmtu = {mtu}\n"
        ))
        .unwrap();
        cfg.ports.internal
    }

    fn features(driver: &str, on: &[&str]) -> Features {
        let names = [
            "rx-gro",
            "rx-lro",
            "rx-gro-hw",
            "tx-tcp-segmentation",
            "tx-generic-segmentation",
            "tx-checksum-ip-generic",
        ];
        Features {
            iface: "pxi0".into(),
            driver: driver.into(),
            features: names
                .iter()
                .map(|n| Feature {
                    name: (*n).into(),
                    active: on.contains(n),
                    changeable: true,
                })
                .collect(),
        }
    }

    const AF_PACKET: &str = "net_af_packet1,iface=pxi0,framesz=10240,blocksz=40960";

    #[test]
    fn gro_under_af_packet_is_refused_with_the_fix() {
        let c = Coalescing::of(&features("ixgbe", &["rx-gro", "tx-tcp-segmentation"]));
        assert_eq!(
            c,
            Coalescing {
                gro: true,
                ..Coalescing::default()
            }
        );
        assert_eq!(
            refusal("internal", &port(AF_PACKET, 9000), c).unwrap(),
            "ports.internal: interface pxi0 has GRO on: the kernel hands pxgw TCP segments \
             coalesced into packets of up to 64 KB, which net_af_packet cuts to its 10240 B ring \
             frames (packets of at most 10160 B), and transfers would stall; turn it off: \
             `ethtool -K pxi0 gro off lro off`"
        );
    }

    #[test]
    fn lro_and_hardware_gro_are_named_and_turned_off_too() {
        let c = Coalescing::of(&features("bnxt_en", &["rx-gro", "rx-lro", "rx-gro-hw"]));
        let line = refusal("internal", &port(AF_PACKET, 9000), c).unwrap();
        assert!(line.contains("has GRO, LRO and hardware GRO on"), "{line}");
        assert!(
            line.ends_with("`ethtool -K pxi0 gro off lro off rx-gro-hw off`"),
            "{line}"
        );
        let lro = Coalescing::of(&features("ixgbe", &["rx-lro"]));
        let line = refusal("internal", &port(AF_PACKET, 9000), lro).unwrap();
        assert!(line.contains("has LRO on"), "{line}");
        // The default ring frame is refused alike.
        let small = port("net_af_packet1,iface=pxi0", 1500);
        let line = refusal("internal", &small, lro).unwrap();
        assert!(
            line.contains("its 2048 B ring frames (packets of at most 1968 B)"),
            "{line}"
        );
    }

    #[test]
    fn nothing_coalesced_or_a_port_that_gets_segments_passes() {
        let off = Coalescing::of(&features(
            "veth",
            &["tx-tcp-segmentation", "tx-generic-segmentation"],
        ));
        assert!(!off.any());
        assert_eq!(refusal("internal", &port(AF_PACKET, 9000), off), None);
        let gro = Coalescing {
            gro: true,
            ..Coalescing::default()
        };
        // The kernel segments what it queues to a TAP; XDP sees frames before GRO; a PCI port
        // has no kernel interface.
        for device in [
            "net_tap0,iface=pxt0",
            "net_af_xdp0,iface=pxi0",
            "0000:3b:00.0",
            "net_ring0",
        ] {
            assert_eq!(
                refusal("internal", &port(device, 1500), gro),
                None,
                "{device}"
            );
        }
    }

    #[test]
    fn an_af_packet_veth_is_warned_about_its_peer() {
        let w = veth_warning("internal", &port(AF_PACKET, 9000), "veth").unwrap();
        assert!(
            w.starts_with("ports.internal: interface pxi0 is a veth"),
            "{w}"
        );
        assert!(
            w.contains("`ethtool -K PEER tso off gso off tx off`"),
            "{w}"
        );
        assert_eq!(
            veth_warning("internal", &port(AF_PACKET, 9000), "ixgbe"),
            None
        );
        assert_eq!(
            veth_warning("internal", &port("net_tap0,iface=pxt0", 1500), "veth"),
            None
        );
    }

    #[test]
    fn the_offloads_are_described_as_ethtool_shows_them() {
        let f = features("veth", &["rx-gro", "tx-checksum-ip-generic"]);
        assert_eq!(
            describe(&f),
            "interface pxi0 (veth): GRO on, LRO off, hardware GRO off, TSO off, GSO off, \
             TX checksums on"
        );
        let mut bare = features("", &[]);
        bare.features.clear();
        assert!(describe(&bare).contains("(no driver name): GRO n/a"));
    }
}
