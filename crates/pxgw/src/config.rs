//! `pxgw.toml`: what an operator configures. Unknown keys are rejected, and every invalid value
//! gets one message naming the key, the value and what is allowed.

use std::path::Path;
use std::time::Duration;

use pxio::merge::{DelayConfig, MergeConfig};
use serde::Deserialize;

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the gateway sits: `transparent` (an L2 bump in the wire, the default) or `l3`.
    #[serde(default)]
    pub mode: Mode,
    /// The two ports.
    pub ports: Ports,
    /// Worker cores.
    #[serde(default)]
    pub workers: Workers,
    /// RX queues: how many per worker, dynamic scaling, hairpin opt-in, header-only DMA.
    #[serde(default)]
    pub queues: Queues,
    /// TCP merging (inbound).
    #[serde(default)]
    pub merge: Merge,
    /// UDP caravans.
    #[serde(default)]
    pub caravan: Caravan,
    /// TCP MSS rewriting in handshakes.
    #[serde(default)]
    pub mss: Mss,
    /// Which connections the gateway translates (scale-out behind ECMP: docs/scale-out.md).
    #[serde(default)]
    pub connections: Connections,
    /// How the path MTU of an outbound flow is chosen.
    #[serde(default)]
    pub pmtu: Pmtu,
    /// ICMP errors the gateway sends toward the inside, as a router would.
    #[serde(default)]
    pub icmp: Icmp,
    /// The ports' RSS key: random at start (the default) or a fixed 16-bit pattern.
    #[serde(default)]
    pub rss: crate::rss::RssConfig,
    /// Operator output.
    #[serde(default)]
    pub stats: Stats,
    /// DPDK EAL settings.
    #[serde(default)]
    pub eal: Eal,
    /// Who pxgw runs as once its ports are open.
    #[serde(default)]
    pub process: Process,
}

/// Forwarding mode.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Frames keep their MAC addresses: the gateway is invisible at L2.
    #[default]
    Transparent,
    /// Frames are re-addressed to static next-hop MACs (`ports.*.next_hop_mac`).
    L3,
}

/// The external (Internet, eMTU) and internal (b-network, iMTU) ports.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Ports {
    /// Toward the Internet.
    pub external: Port,
    /// Toward the large-MTU network.
    pub internal: Port,
}

/// One port.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Port {
    /// A PCI address (`0000:3b:00.0`) or a vdev string (`net_af_packet0,iface=veth0`).
    pub device: String,
    /// The link MTU (L3 bytes). Defaults: 1500 external, 9000 internal. pxgw sets it on the
    /// device and reads it back; for a kernel-backed port (af_packet, af_xdp) it must equal the
    /// kernel interface's MTU, or pxgw refuses to start.
    pub mtu: Option<u16>,
    /// L3 mode only: the MAC address frames leaving this port are sent to.
    pub next_hop_mac: Option<String>,
    /// RX descriptors per queue (default 2048; the driver may round it to its limits).
    /// `net_af_packet` ignores it: its ring is the vdev's `framecnt`.
    #[serde(default = "default_descriptors")]
    pub rx_descriptors: u16,
    /// TX descriptors per queue (default 2048).
    #[serde(default = "default_descriptors")]
    pub tx_descriptors: u16,
}

fn default_descriptors() -> u16 {
    DEFAULT_DESCRIPTORS
}

/// Descriptors per queue when the configuration says nothing: with bursts of 32, room for the
/// 64 bursts that 32 iperf3 flows can put in flight at once.
pub const DEFAULT_DESCRIPTORS: u16 = 2048;

/// How far into a `net_af_packet` ring frame the IP header starts: the kernel puts the
/// TPACKET_V2 header (32 B) and `sockaddr_ll` (20 B) first, then aligns the network header to 16
/// bytes (`TPACKET_ALIGN(52 + 16)` = 80 for an Ethernet or a single-tagged frame). So a ring
/// frame of `framesz` bytes holds an MTU of at most `framesz - 80`.
pub const AF_PACKET_FRAME_OVERHEAD: u16 = 80;

/// `net_af_packet`'s ring frame size when the vdev string has no `framesz=`.
pub const AF_PACKET_DEFAULT_FRAMESZ: u16 = 2048;

/// Where a port's frames really come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// A PCI device, driven by a DPDK poll-mode driver.
    Pci(String),
    /// A kernel network interface behind a DPDK vdev: the kernel's MTU is the one that counts.
    Kernel {
        /// The vdev driver (`net_af_packet`, `net_af_xdp`, `net_tap`).
        driver: &'static str,
        /// The kernel interface.
        iface: String,
        /// Whether the vdev creates the interface itself (`net_tap`) rather than opening an
        /// existing one.
        creates: bool,
    },
    /// Any other vdev (`net_ring`, `net_null`, `net_pcap`, ...).
    Other,
}

impl Port {
    /// The DPDK device name: the device string up to its first comma.
    pub fn device_name(&self) -> &str {
        self.device.split(',').next().unwrap_or(&self.device)
    }

    /// The value of `key=` in the device string, if given.
    pub fn device_arg(&self, key: &str) -> Option<&str> {
        self.device
            .split(',')
            .skip(1)
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }

    /// What is behind this port.
    pub fn backing(&self) -> Backing {
        let name = self.device_name();
        if is_pci(name) {
            return Backing::Pci(name.to_owned());
        }
        // DPDK also registers the af_packet driver under its old name, eth_af_packet.
        for (prefix, driver, creates) in [
            ("net_af_packet", "net_af_packet", false),
            ("eth_af_packet", "net_af_packet", false),
            ("net_af_xdp", "net_af_xdp", false),
            ("net_tap", "net_tap", true),
        ] {
            if name.starts_with(prefix) {
                let iface = match self.device_arg("iface") {
                    Some(i) => i.to_owned(),
                    // net_tap names its interface dtap<N> when not told.
                    None if creates => format!("dtap{}", name.trim_start_matches(prefix)),
                    None => return Backing::Other,
                };
                return Backing::Kernel {
                    driver,
                    iface,
                    creates,
                };
            }
        }
        Backing::Other
    }

    /// `net_af_packet`'s ring frame size, if this is an af_packet port.
    pub fn af_packet_framesz(&self) -> Option<u16> {
        match self.backing() {
            Backing::Kernel {
                driver: "net_af_packet",
                ..
            } => Some(
                self.device_arg("framesz")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(AF_PACKET_DEFAULT_FRAMESZ),
            ),
            _ => None,
        }
    }
}

impl Ports {
    /// The external MTU (default 1500).
    fn emtu(&self) -> u16 {
        self.external.mtu.unwrap_or(1500)
    }

    /// The internal MTU (default 9000).
    fn internal_mtu(&self) -> u16 {
        self.internal.mtu.unwrap_or(9000)
    }

    /// Checks both ports, then that the external MTU is at most the internal one.
    fn validate(&self, mode: Mode) -> Result<(), ConfigError> {
        self.external.validate("external", mode, self.emtu())?;
        self.internal
            .validate("internal", mode, self.internal_mtu())?;
        if self.emtu() > self.internal_mtu() {
            return Err(invalid(
                "ports.external.mtu",
                self.emtu(),
                &format!("at most the internal MTU ({})", self.internal_mtu()),
            ));
        }
        Ok(())
    }
}

impl Port {
    /// Checks `[ports.<name>]`, whose MTU (given or default) is `mtu`.
    fn validate(&self, name: &str, mode: Mode, mtu: u16) -> Result<(), ConfigError> {
        if self.device.trim().is_empty() {
            return Err(invalid(
                &format!("ports.{name}.device"),
                "\"\"",
                "a PCI address or a vdev string",
            ));
        }
        if let Some(mtu) = self.mtu {
            if !(576..=9216).contains(&mtu) {
                return Err(invalid(&format!("ports.{name}.mtu"), mtu, "576..=9216"));
            }
        }
        if let Some(framesz) = self.af_packet_framesz() {
            if u32::from(mtu) + u32::from(AF_PACKET_FRAME_OVERHEAD) > u32::from(framesz) {
                return Err(invalid(
                    &format!("ports.{name}.device"),
                    format!("framesz={framesz}"),
                    &format!(
                        "a net_af_packet ring frame of {framesz} B cannot hold MTU {mtu} \
                         (it needs framesz >= {}, and blocksz a multiple of it)",
                        u32::from(mtu) + u32::from(AF_PACKET_FRAME_OVERHEAD)
                    ),
                ));
            }
        }
        for (key, n) in [
            ("rx_descriptors", self.rx_descriptors),
            ("tx_descriptors", self.tx_descriptors),
        ] {
            if !(64..=32768).contains(&n) {
                return Err(invalid(&format!("ports.{name}.{key}"), n, "64..=32768"));
            }
        }
        match (mode, &self.next_hop_mac) {
            (Mode::L3, None) => Err(invalid(
                &format!("ports.{name}.next_hop_mac"),
                "(missing)",
                "required in l3 mode: aa:bb:cc:dd:ee:ff",
            )),
            (_, Some(mac)) if parse_mac(mac).is_none() => Err(invalid(
                &format!("ports.{name}.next_hop_mac"),
                mac,
                "six hex bytes separated by ':'",
            )),
            _ => Ok(()),
        }
    }
}

/// Whether a device string names a PCI device (`0000:3b:00.0` or `3b:00.0`).
pub fn is_pci(device: &str) -> bool {
    let d = device.split(',').next().unwrap_or("");
    !d.is_empty()
        && d.chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        && d.contains(':')
}

/// Worker cores and queues.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Workers {
    /// Worker threads, each pinned to one core, each owning one RX and one TX queue per port.
    pub count: u16,
    /// Cores to pin the workers to, in order (default: 0, 1, ...).
    pub cores: Option<Vec<usize>>,
    /// Mbufs in the packet pool.
    pub pool_size: u32,
}

impl Workers {
    /// Checks `[workers]`; the pool must hold what the `ports`' rings and `queues` take.
    fn validate(&self, ports: &Ports, queues: &Queues) -> Result<(), ConfigError> {
        if self.count == 0 || self.count > 64 {
            return Err(invalid("workers.count", self.count, "1..=64"));
        }
        if let Some(cores) = &self.cores {
            if cores.len() != usize::from(self.count) {
                return Err(invalid(
                    "workers.cores",
                    format!("{cores:?}"),
                    &format!("one core per worker ({} workers)", self.count),
                ));
            }
        }
        // Every RX descriptor holds an mbuf, and a full TX ring holds one per descriptor until
        // the driver frees it; the rest is what workers hold (bursts, merge items, caravans).
        // RX: `queues.per_worker` queues per worker and port.
        let rings = u32::from(self.count)
            * [&ports.external, &ports.internal]
                .iter()
                .map(|p| {
                    u32::from(queues.per_worker) * u32::from(p.rx_descriptors)
                        + u32::from(p.tx_descriptors)
                })
                .sum::<u32>();
        // What each worker's cache may keep, which no other worker can take.
        let caches =
            u32::from(self.count) * crate::ports::cache_keeps(crate::ports::PACKET_POOL_CACHE);
        let pool_min = rings + caches + 4096;
        if self.pool_size < pool_min {
            return Err(invalid(
                "workers.pool_size",
                self.pool_size,
                &format!(
                    "at least {pool_min}: the RX and TX rings of {} worker(s) hold {rings} mbufs, \
                     their caches up to {caches}, plus 4096 for bursts and held packets",
                    self.count
                ),
            ));
        }
        Ok(())
    }
}

impl Default for Workers {
    fn default() -> Self {
        Self {
            count: 1,
            cores: None,
            pool_size: 32767,
        }
    }
}

/// RX queues and the NIC features around them (SIGCOMM'26 §4.2-§4.4; `pxio::rxq`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Queues {
    /// RX queues each worker owns on each port (the maximum, allocated at start). With more
    /// than one, a worker polls them through one unified receive.
    pub per_worker: u16,
    /// Dynamic RX queue scaling (§4.3): rules steer traffic to subsets of 2/8/32/128 queues or
    /// to all, following the active-flow count. Needs `rte_flow` RSS rules: where the driver
    /// refuses them, every queue stays active and pxgw says so.
    pub scaling: bool,
    /// The active-flow averaging window, milliseconds.
    pub window_ms: u64,
    /// Hairpin opt-in (§4.4), inbound: flows from outside stay on the NIC (its hairpin queue
    /// forwards them to the internal port) unless chosen. Outbound traffic always goes to the
    /// CPU (it is split to the path MTU). Where the devices have no hairpin queues, pxgw says
    /// so at start and every flow goes to the CPU.
    pub hairpin: bool,
    /// With hairpin: one packet in `sample_ratio` of the flows left on the NIC is copied to the
    /// host, where heavy hitters are found and opted in.
    pub sample_ratio: u32,
    /// With hairpin: a flow above this rate (megabits per second, from the sample) is opted in
    /// to the merging workers.
    pub heavy_hitter_mbps: u64,
    /// Header-only DMA (§4.2, buffer split): refused at start on a device without
    /// `RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT`, never emulated.
    pub header_split: bool,
    /// Bytes of each frame DMA'd to the header buffer with `header_split`.
    pub header_bytes: u16,
}

/// The highest `[queues] heavy_hitter_mbps`: 10 Tb/s.
pub const MAX_HEAVY_HITTER_MBPS: u64 = 10_000_000;

impl Queues {
    /// The active-flow averaging window, ns.
    pub fn window_ns(&self) -> Result<u64, ConfigError> {
        if !(10..=60_000).contains(&self.window_ms) {
            return Err(invalid("queues.window_ms", self.window_ms, "10..=60000"));
        }
        Ok(self.window_ms * 1_000_000)
    }

    /// The heavy-hitter threshold, bits per second.
    pub fn heavy_hitter_bps(&self) -> Result<u64, ConfigError> {
        if self.heavy_hitter_mbps > MAX_HEAVY_HITTER_MBPS {
            return Err(invalid(
                "queues.heavy_hitter_mbps",
                self.heavy_hitter_mbps,
                "0..=10000000 (10 Tb/s)",
            ));
        }
        Ok(self.heavy_hitter_mbps * 1_000_000)
    }

    /// Checks `[queues]` for `workers` workers (at most 1024 RX queues per port in all).
    fn validate(&self, workers: u16) -> Result<(), ConfigError> {
        let most = 1024 / workers.max(1);
        if self.per_worker == 0 || self.per_worker > most {
            return Err(invalid(
                "queues.per_worker",
                self.per_worker,
                &format!("1..={most} ({workers} workers, at most 1024 RX queues)"),
            ));
        }
        self.window_ns()?;
        self.heavy_hitter_bps()?;
        if self.sample_ratio == 0 {
            return Err(invalid(
                "queues.sample_ratio",
                self.sample_ratio,
                "at least 1",
            ));
        }
        if !(64..=1024).contains(&self.header_bytes) {
            return Err(invalid(
                "queues.header_bytes",
                self.header_bytes,
                "64..=1024",
            ));
        }
        Ok(())
    }
}

impl Default for Queues {
    fn default() -> Self {
        Self {
            per_worker: 1,
            scaling: false,
            window_ms: 1000,
            hairpin: false,
            sample_ratio: 64,
            heavy_hitter_mbps: 100,
            header_split: false,
            header_bytes: 128,
        }
    }
}

/// TCP merging (SIGCOMM'26 §4, Appendix A).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Merge {
    /// Merge inbound TCP at all.
    pub enabled: bool,
    /// Largest merged IP packet. Defaults to the internal port's MTU.
    pub imtu: Option<u16>,
    /// Adaptive delayed merging.
    pub delay: bool,
    /// Flows slower than this never wait (Gb/s).
    pub rate_threshold_gbps: f64,
    /// Flows whose conversion yield is above this never wait (0..=1).
    pub yield_bypass: f64,
    /// Longest delay window (µs).
    pub max_window_us: u64,
    /// Flow-table entries per worker.
    pub flows: usize,
    /// Most buffers (mbufs) per merged packet. pxgw lowers it to what the internal port's driver
    /// can transmit in one packet (its `nb_seg_max`).
    pub max_segs: u16,
}

impl Merge {
    /// Checks `[merge]`'s own values (`merge.imtu` against the ports, and the engine's rules,
    /// are `Config::validate`'s).
    fn validate(&self) -> Result<(), ConfigError> {
        if !(self.rate_threshold_gbps >= 0.0 && self.rate_threshold_gbps.is_finite()) {
            return Err(invalid(
                "merge.rate_threshold_gbps",
                self.rate_threshold_gbps,
                "a number >= 0",
            ));
        }
        if !(0.0..=1.0).contains(&self.yield_bypass) {
            return Err(invalid("merge.yield_bypass", self.yield_bypass, "0..=1"));
        }
        if self.max_window_us == 0 || self.max_window_us > 100_000 {
            return Err(invalid(
                "merge.max_window_us",
                self.max_window_us,
                "1..=100000",
            ));
        }
        if self.max_segs < 2 {
            return Err(invalid("merge.max_segs", self.max_segs, "2..=65535"));
        }
        if self.flows == 0 || self.flows > 1 << 24 {
            return Err(invalid("merge.flows", self.flows, "1..=16777216"));
        }
        Ok(())
    }
}

impl Default for Merge {
    fn default() -> Self {
        Self {
            enabled: true,
            imtu: None,
            delay: true,
            rate_threshold_gbps: 1.0,
            yield_bypass: 0.93,
            max_window_us: 500,
            flows: 16384,
            max_segs: 64,
        }
    }
}

impl Caravan {
    /// How long an open caravan may wait for more datagrams, ns.
    pub fn timeout_ns(&self) -> Result<u64, ConfigError> {
        if self.timeout_us == 0 || self.timeout_us > 100_000 {
            return Err(invalid("caravan.timeout_us", self.timeout_us, "1..=100000"));
        }
        Ok(self.timeout_us * 1000)
    }

    /// Checks `[caravan]`.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.dscp == 0 || self.dscp > 63 {
            return Err(invalid(
                "caravan.dscp",
                self.dscp,
                "1..=63 (0 is best effort)",
            ));
        }
        self.timeout_ns()?;
        let most = pxio::caravan::format::MAX_DATAGRAMS;
        if !(1..=most).contains(&u32::from(self.max_datagrams)) {
            return Err(invalid(
                "caravan.max_datagrams",
                self.max_datagrams,
                &format!(
                    "1..={most} (the caravan format's limit, which every decapsulator enforces)"
                ),
            ));
        }
        if self.families.is_empty() {
            return Err(invalid(
                "caravan.families",
                "[]",
                "one or both of \"ipv4\" and \"ipv6\" (to pack nothing, set enabled = false)",
            ));
        }
        Ok(())
    }
}

/// UDP caravans (SIGCOMM'26 §6).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Caravan {
    /// Pack inbound UDP into caravans, unpack outbound ones.
    pub enabled: bool,
    /// The DSCP codepoint that marks a caravan.
    pub dscp: u8,
    /// UDP ports (source or destination) never packed: DNS, NTP, F-PMTUD probes, BFD (single
    /// hop 3784, echo 3785, multihop 4784: a routing session's liveness must not wait for a
    /// caravan's timeout, `docs/scale-out.md`), ...
    pub exclude_ports: Vec<u16>,
    /// A caravan leaves at the latest this long after its first datagram (µs).
    pub timeout_us: u64,
    /// Most datagrams per caravan.
    pub max_datagrams: u16,
    /// The IP families packed (`"ipv4"`, `"ipv6"`): those the inside hosts' decapsulator
    /// handles. UDP of another family passes unpacked, counted. Default: both, which
    /// `caravan-ebpf` decapsulates. (Untagged and single 802.1Q-tagged frames are packed;
    /// double-tagged and 802.1ad-tagged ones pass unpacked, counted.)
    pub families: Vec<CaravanFamily>,
    /// UDP whose TTL (IPv4) or hop limit (IPv6) is at most this passes unpacked, counted, so
    /// traceroute probes that would expire inside the b-network are never held or rewritten in
    /// a caravan (`docs/caravan.md`, "TTL and traceroute"). At least the number of routers
    /// between the gateway and the farthest inside host.
    pub pass_ttl: u8,
}

/// An IP family caravans may carry (`[caravan] families`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CaravanFamily {
    /// IPv4 without options.
    Ipv4,
    /// IPv6 without extension headers.
    Ipv6,
}

/// `[caravan] pass_ttl` by default: more routers than a datacenter fabric (leaf, spine, super
/// spine, up and down) or a mobile core puts between its border and a host, and far below the
/// TTL of ordinary traffic at a border (initial 64, 128 or 255, less at most ~30 Internet hops).
pub const DEFAULT_PASS_TTL: u8 = 8;

impl Default for Caravan {
    fn default() -> Self {
        Self {
            enabled: true,
            dscp: pxio::caravan::DEFAULT_DSCP,
            exclude_ports: vec![53, 123, 3784, 3785, 4689, 4784],
            timeout_us: 50,
            max_datagrams: pxio::caravan::DEFAULT_MAX_DATAGRAMS,
            families: vec![CaravanFamily::Ipv4, CaravanFamily::Ipv6],
            pass_ttl: DEFAULT_PASS_TTL,
        }
    }
}

/// MSS rewriting (SIGCOMM'26 §3.5, HotNets'25 §4.1).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Mss {
    /// Rewrite the MSS option of SYN and SYN-ACK segments.
    pub rewrite: bool,
    /// The floor for IPv4, bytes: an outside SYN or SYN-ACK announcing a smaller MSS keeps it
    /// (the inside host then segments for itself, never below its own floor, as Linux's
    /// `tcp_min_snd_mss` keeps it), and the gateway never splits IPv4 segments to less than
    /// this MSS. 536 is TCP's default MSS (RFC 9293 §3.7.1); Linux's own floor is 48.
    pub min: u16,
    /// The floor for IPv6, bytes: 1220, what the IPv6 minimum MTU of 1280 carries.
    pub min_v6: u16,
}

/// The lowest MSS floor accepted: Linux's `tcp_min_snd_mss` default.
pub const MSS_FLOOR_MIN: u16 = 48;

impl Default for Mss {
    fn default() -> Self {
        Self {
            rewrite: true,
            min: 536,
            min_v6: 1220,
        }
    }
}

impl Mss {
    /// Checks the floors against what the external MTU `emtu` carries.
    fn validate(&self, emtu: u16) -> Result<(), ConfigError> {
        for (key, value, overhead) in [
            ("mss.min", self.min, crate::mss::overhead(false)),
            ("mss.min_v6", self.min_v6, crate::mss::overhead(true)),
        ] {
            let max = emtu.saturating_sub(overhead);
            if !(MSS_FLOOR_MIN..=max).contains(&value) {
                return Err(invalid(
                    key,
                    value,
                    &format!("{MSS_FLOOR_MIN}..={max} (what the external MTU carries)"),
                ));
            }
        }
        Ok(())
    }
}

/// Which connections the gateway merges (`crate::conn`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Connections {
    /// Established connections each worker remembers. When the table is full, the least
    /// recently seen connection makes room (`mss.established_evicted` counts it): a host that
    /// opens many connections cannot keep later ones from being merged.
    pub max: usize,
    /// Merge connections this instance sees in one direction only: a run of in-order MSS-sized
    /// segments from outside while no segment of the connection from inside crossed this
    /// instance. Turn it on when several instances sit behind routers that choose each
    /// direction's instance on their own (ECMP without symmetric hashing), where the inside
    /// host's SYN-ACK and ACKs may cross another instance. Off by default: an instance that sees
    /// both directions then admits no connection the inside host did not acknowledge.
    pub one_way: bool,
}

impl Connections {
    /// Checks `[connections]`.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.max == 0 || self.max > 1 << 24 {
            return Err(invalid("connections.max", self.max, "1..=16777216"));
        }
        Ok(())
    }
}

impl Default for Connections {
    fn default() -> Self {
        Self {
            max: 65536,
            one_way: false,
        }
    }
}

/// Path MTU policy for outbound TCP.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Pmtu {
    /// `mss`: the outside peer's MSS plus headers (capped at the eMTU), falling back to
    /// `fallback`; `emtu`: always the external MTU; `conservative`: always `conservative_mtu`.
    pub policy: PmtuPolicy,
    /// When the MSS is unknown: `emtu` or `conservative`.
    pub fallback: PmtuPolicy,
    /// The conservative MTU (1280, the IPv6 minimum).
    pub conservative_mtu: u16,
    /// Probe the path MTU of new outside destinations with F-PMTUD (SIGCOMM'26 §5.2); a
    /// discovered PMTU below the eMTU then caps what `policy` gives.
    pub probe: bool,
    /// Answer F-PMTUD probes that arrive for the inside network.
    pub respond: bool,
    /// The F-PMTUD UDP port.
    pub port: u16,
    /// Learn from ICMPv6 Packet Too Big (and ICMPv4 "fragmentation needed") messages that
    /// quote a packet of a connection the gateway splits: the split size toward that
    /// destination is capped at the MTU they carry (the message still goes to the inside host).
    pub learn_ptb: bool,
    /// IPv6 black-hole detection (RFC 4821 §7.7 / RFC 8899 §4.3 in spirit): when the inside host
    /// retransmits the same segment the gateway split this many times within
    /// `blackhole_window_ms`, and no Packet Too Big came, the destination's split size falls
    /// back to `blackhole_mtu`. 0 turns detection off.
    pub blackhole_retransmits: u8,
    /// The window of `blackhole_retransmits`, ms.
    pub blackhole_window_ms: u64,
    /// The size split IPv6 falls back to after a black hole (1280, the IPv6 minimum MTU).
    pub blackhole_mtu: u16,
    /// A lowered path MTU (Packet Too Big, F-PMTUD, black-hole fallback) is forgotten this many
    /// seconds after it was lowered, and the destination probed again (RFC 1191 §6.3, RFC 8201
    /// §4: 600).
    pub expire_s: u64,
    /// F-PMTUD reports per second over all outside sources together, per worker (the
    /// per-source limit stays 50 per second).
    pub respond_per_sec: u32,
}

impl Pmtu {
    /// Checks `[pmtu]` against the external MTU `emtu`.
    fn validate(&self, emtu: u16) -> Result<(), ConfigError> {
        if self.fallback == PmtuPolicy::Mss {
            return Err(invalid(
                "pmtu.fallback",
                "mss",
                "\"emtu\" or \"conservative\"",
            ));
        }
        if self.conservative_mtu < 576 || self.conservative_mtu > emtu {
            return Err(invalid(
                "pmtu.conservative_mtu",
                self.conservative_mtu,
                &format!("576..={emtu} (the external MTU)"),
            ));
        }
        if self.port == 0 {
            return Err(invalid("pmtu.port", 0, "1..=65535"));
        }
        if self.blackhole_mtu < 1280 || self.blackhole_mtu > emtu {
            return Err(invalid(
                "pmtu.blackhole_mtu",
                self.blackhole_mtu,
                &format!("1280..={emtu} (the IPv6 minimum to the external MTU)"),
            ));
        }
        if self.blackhole_retransmits > 16 {
            return Err(invalid(
                "pmtu.blackhole_retransmits",
                self.blackhole_retransmits,
                "0..=16 (0: off)",
            ));
        }
        if self.blackhole_window_ms == 0 || self.blackhole_window_ms > 600_000 {
            return Err(invalid(
                "pmtu.blackhole_window_ms",
                self.blackhole_window_ms,
                "1..=600000",
            ));
        }
        // Up to a week: the age is kept in nanoseconds.
        if self.expire_s == 0 || self.expire_s > 604_800 {
            return Err(invalid(
                "pmtu.expire_s",
                self.expire_s,
                "1..=604800 (RFC 8201 recommends 600)",
            ));
        }
        if self.respond_per_sec == 0 || self.respond_per_sec > 1_000_000 {
            return Err(invalid(
                "pmtu.respond_per_sec",
                self.respond_per_sec,
                "1..=1000000 (to answer none, set pmtu.respond = false)",
            ));
        }
        Ok(())
    }
}

impl Default for Pmtu {
    fn default() -> Self {
        Self {
            policy: PmtuPolicy::Mss,
            fallback: PmtuPolicy::Emtu,
            conservative_mtu: 1280,
            probe: true,
            respond: true,
            port: fpmtud::DEFAULT_PORT,
            learn_ptb: true,
            blackhole_retransmits: 2,
            blackhole_window_ms: 10_000,
            blackhole_mtu: 1280,
            expire_s: 600,
            respond_per_sec: 1000,
        }
    }
}

/// ICMP errors for outbound packets too large for the external link (IPv4 with DF: "fragmentation
/// needed"; IPv6: Packet Too Big), rate-limited like Linux's `icmp_ratelimit` (per destination)
/// and `icmp_msgs_per_sec`/`icmp_msgs_burst` (global) token buckets.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Icmp {
    /// Send the errors at all (off: such packets are only dropped and counted).
    pub enabled: bool,
    /// The source address of ICMPv4 errors. The gateway has no address of its own in
    /// transparent mode: unset, an error comes from the destination of the packet it answers
    /// (hosts check the quoted packet, not the source).
    pub source_v4: Option<std::net::Ipv4Addr>,
    /// The source address of ICMPv6 errors (unset: as for `source_v4`).
    pub source_v6: Option<std::net::Ipv6Addr>,
    /// One error per destination (the sender being answered) per this many ms (Linux's
    /// `icmp_ratelimit`, 1000); 0: no per-destination limit.
    pub ratelimit_ms: u64,
    /// Errors a destination may receive at once before the limit applies (Linux: 6).
    pub ratelimit_burst: u32,
    /// Errors per second across all destinations (Linux's `icmp_msgs_per_sec`, 1000).
    pub msgs_per_sec: u32,
    /// Global burst (Linux's `icmp_msgs_burst`, 50).
    pub msgs_burst: u32,
    /// Destinations whose rate state is kept; beyond it, errors to new ones are rate-limited.
    pub max_destinations: usize,
}

impl Default for Icmp {
    fn default() -> Self {
        Self {
            enabled: true,
            source_v4: None,
            source_v6: None,
            ratelimit_ms: 1000,
            ratelimit_burst: 6,
            msgs_per_sec: 1000,
            msgs_burst: 50,
            max_destinations: 4096,
        }
    }
}

/// The longest `[icmp] ratelimit_ms`: an hour.
pub const MAX_ICMP_RATELIMIT_MS: u64 = 3_600_000;

impl Icmp {
    /// Checks `[icmp]`.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.ratelimit_ms > MAX_ICMP_RATELIMIT_MS {
            return Err(invalid(
                "icmp.ratelimit_ms",
                self.ratelimit_ms,
                "0..=3600000 (an hour)",
            ));
        }
        if self.ratelimit_burst == 0 {
            return Err(invalid("icmp.ratelimit_burst", 0, "at least 1"));
        }
        if self.msgs_per_sec == 0 || self.msgs_burst == 0 {
            return Err(invalid(
                "icmp.msgs_per_sec/icmp.msgs_burst",
                format!("{}/{}", self.msgs_per_sec, self.msgs_burst),
                "both at least 1 (use icmp.enabled = false to send none)",
            ));
        }
        if self.max_destinations == 0 || self.max_destinations > 1 << 20 {
            return Err(invalid(
                "icmp.max_destinations",
                self.max_destinations,
                "1..=1048576",
            ));
        }
        Ok(())
    }
}

impl crate::rss::RssConfig {
    /// Checks `[rss]`: a fixed key pattern must make a symmetric key.
    fn validate(&self) -> Result<(), ConfigError> {
        if let crate::rss::RssKey::Pattern(p) = self.key {
            if let Err(e) = crate::rss::SymmetricKey::new(p) {
                return Err(invalid(
                    "rss.key",
                    format!("{p:#06x}"),
                    &format!("{e}; or \"random\" (the default)"),
                ));
            }
        }
        Ok(())
    }
}

/// A PMTU source.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PmtuPolicy {
    /// From the peer's MSS.
    Mss,
    /// The external port's MTU.
    Emtu,
    /// `conservative_mtu`.
    Conservative,
}

/// Operator output.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Stats {
    /// Seconds between summary lines (0: none).
    pub interval_s: f64,
    /// Serve Prometheus metrics at `http://ADDR/metrics` (e.g. `"127.0.0.1:9469"`); off when
    /// absent (`crate::metrics`).
    pub prometheus: Option<std::net::SocketAddr>,
    /// Connections the metrics endpoint holds at once; when full, a new one replaces the oldest
    /// (one still sending its request first).
    pub prometheus_max_connections: u16,
    /// A client of the metrics endpoint has this long to send its request, and this long again
    /// to read the answer; then it is dropped (ms).
    pub prometheus_timeout_ms: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Self {
            interval_s: 1.0,
            prometheus: None,
            prometheus_max_connections: 16,
            prometheus_timeout_ms: 5000,
        }
    }
}

/// The longest `[stats] interval_s`: a day.
pub const MAX_STATS_INTERVAL_S: f64 = 86_400.0;

/// The shortest wait between two summary lines, whatever `interval_s` says.
const MIN_STATS_INTERVAL: Duration = Duration::from_millis(50);

impl Stats {
    /// The time between two summary lines (`None`: no lines), as the main loop waits it.
    pub fn interval(&self) -> Result<Option<Duration>, ConfigError> {
        let s = self.interval_s;
        if !(0.0..=MAX_STATS_INTERVAL_S).contains(&s) {
            return Err(invalid(
                "stats.interval_s",
                s,
                "0..=86400 (seconds; 0: no summary lines)",
            ));
        }
        if s == 0.0 {
            return Ok(None);
        }
        let d = Duration::try_from_secs_f64(s)
            .map_err(|e| invalid("stats.interval_s", s, &e.to_string()))?;
        Ok(Some(d.max(MIN_STATS_INTERVAL)))
    }

    /// The metrics endpoint's limits.
    pub fn prometheus_limits(&self) -> Result<crate::metrics::Limits, ConfigError> {
        if !(1..=1024).contains(&self.prometheus_max_connections) {
            return Err(invalid(
                "stats.prometheus_max_connections",
                self.prometheus_max_connections,
                "1..=1024",
            ));
        }
        if !(10..=600_000).contains(&self.prometheus_timeout_ms) {
            return Err(invalid(
                "stats.prometheus_timeout_ms",
                self.prometheus_timeout_ms,
                "10..=600000",
            ));
        }
        let timeout = Duration::from_millis(self.prometheus_timeout_ms);
        Ok(crate::metrics::Limits {
            max_connections: usize::from(self.prometheus_max_connections),
            read_timeout: timeout,
            write_timeout: timeout,
        })
    }

    /// Checks `[stats]`.
    fn validate(&self) -> Result<(), ConfigError> {
        self.interval()?;
        self.prometheus_limits()?;
        Ok(())
    }
}

/// `[process]`: the unprivileged user pxgw switches to once the EAL, its ports and the metrics
/// socket are open (`crate::privileges`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Process {
    /// The user to run as. pxgw keeps only the capabilities its port types need while running,
    /// and clears its supplementary groups. Unset: it keeps running as it was started.
    pub user: Option<String>,
    /// The group to run as (default: the user's primary group).
    pub group: Option<String>,
}

impl Process {
    fn validate(&self) -> Result<(), ConfigError> {
        for (key, name) in [("process.user", &self.user), ("process.group", &self.group)] {
            if let Some(name) = name {
                let ok = !name.is_empty()
                    && name.len() <= 32
                    && !name.starts_with('-')
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'));
                if !ok {
                    return Err(invalid(
                        key,
                        format!("{name:?}"),
                        "a user or group name (letters, digits, '_', '-', '.', at most 32)",
                    ));
                }
            }
        }
        if self.group.is_some() && self.user.is_none() {
            return Err(invalid(
                "process.group",
                format!("{:?}", self.group.as_deref().unwrap_or("")),
                "needs process.user",
            ));
        }
        Ok(())
    }
}

/// EAL settings.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Eal {
    /// Run without hugepages (`--no-huge`).
    pub no_huge: bool,
    /// Memory to reserve, MB.
    pub memory_mb: u32,
    /// Extra EAL arguments, passed as they are. Options that make the EAL print its usage and
    /// exit the process (`-h`, `--help`) are refused.
    pub args: Vec<String>,
}

impl Eal {
    /// Checks `[eal]`.
    fn validate(&self) -> Result<(), ConfigError> {
        if self.memory_mb < 128 {
            return Err(invalid("eal.memory_mb", self.memory_mb, "at least 128"));
        }
        for arg in &self.args {
            if let Some(why) = eal_arg_refusal(arg) {
                return Err(invalid("eal.args", format!("{arg:?}"), why));
            }
        }
        Ok(())
    }
}

impl Default for Eal {
    fn default() -> Self {
        Self {
            no_huge: true,
            memory_mb: 1024,
            args: Vec::new(),
        }
    }
}

/// A configuration that cannot be used, with a message an operator can act on.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// TOML syntax, an unknown key, or a value of the wrong type (toml's message names them).
    #[error("{0}")]
    Parse(String),
    /// A value out of range.
    #[error("invalid value for `{key}`: {value}; {allowed}")]
    Invalid {
        /// The key, dotted (`merge.imtu`).
        key: String,
        /// The value given.
        value: String,
        /// What is allowed.
        allowed: String,
    },
}

fn invalid(key: &str, value: impl std::fmt::Display, allowed: &str) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_owned(),
        value: value.to_string(),
        allowed: allowed.to_owned(),
    }
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text)
    }

    /// Parses and validates TOML text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The external MTU.
    pub fn emtu(&self) -> u16 {
        self.ports.emtu()
    }

    /// The internal MTU.
    pub fn internal_mtu(&self) -> u16 {
        self.ports.internal_mtu()
    }

    /// The merge target.
    pub fn imtu(&self) -> u16 {
        self.merge.imtu.unwrap_or(self.internal_mtu())
    }

    /// The merge engine's settings, as the workers' pipelines start it (checked by the engine's
    /// own rules too, so a configuration `validate` accepts always starts).
    pub fn merge_engine(&self) -> Result<MergeConfig, ConfigError> {
        let m = &self.merge;
        let engine = MergeConfig {
            imtu: self.imtu(),
            flow_capacity: m.flows,
            checksum_offload: false,
            delay: DelayConfig {
                enabled: m.delay,
                rate_threshold_bps: m.rate_threshold_gbps * 1e9,
                yield_bypass: m.yield_bypass,
                max_window_ns: m.max_window_us.saturating_mul(1000),
                ..DelayConfig::default()
            },
            max_segs: m.max_segs,
            ..MergeConfig::default()
        };
        engine
            .validate()
            .map_err(|e| invalid("merge", format!("{} = {}", e.key, e.value), e.allowed))?;
        Ok(engine)
    }

    /// Checks every value, section by section (the first invalid value is the one reported).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.queues.validate(self.workers.count)?;
        self.ports.validate(self.mode)?;
        // The merge target lies between the two ports' MTUs.
        let imtu = self.imtu();
        if imtu < self.emtu() || imtu > self.internal_mtu() {
            return Err(invalid(
                "merge.imtu",
                imtu,
                &format!(
                    "between the external MTU ({}) and the internal MTU ({})",
                    self.emtu(),
                    self.internal_mtu()
                ),
            ));
        }
        self.workers.validate(&self.ports, &self.queues)?;
        self.merge.validate()?;
        self.mss.validate(self.emtu())?;
        self.connections.validate()?;
        self.merge_engine()?;
        self.caravan.validate()?;
        self.pmtu.validate(self.emtu())?;
        self.rss.validate()?;
        self.icmp.validate()?;
        self.stats.validate()?;
        self.process.validate()?;
        self.eal.validate()
    }
}

/// Why pxgw refuses an extra EAL argument, if it does.
///
/// DPDK 22.11's EAL prints its usage and calls `exit(0)` on `-h`/`--help` (also when the short
/// option hides in a cluster such as `-vh`, or the long one is abbreviated, `--he`, as getopt
/// allows): pxgw would end "successfully" without forwarding anything. The port devices and the
/// PCI scan are pxgw's to set from `ports.*.device`, so those options are refused too.
pub fn eal_arg_refusal(arg: &str) -> Option<&'static str> {
    const HELP: &str = "the EAL prints its usage and exits on -h/--help; run `pxgw --help` \
                        or `dpdk-testpmd -h` instead";
    if arg.contains('\0') {
        return Some("an EAL argument cannot contain NUL");
    }
    if let Some(long) = arg.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or(long);
        if name.len() >= 2 && "help".starts_with(name) {
            return Some(HELP);
        }
        if matches!(name, "vdev" | "allow" | "block" | "no-pci" | "proc-type") {
            return Some(
                "pxgw adds the port devices itself (ports.*.device) and runs as a primary process",
            );
        }
        return None;
    }
    if let Some(short) = arg.strip_prefix('-') {
        // A cluster of short options: -v (version) and -h take no value; any other letter takes
        // the rest of the argument as its value, which ends the cluster.
        for c in short.chars() {
            match c {
                'h' => return Some(HELP),
                'v' => continue,
                'a' | 'b' => {
                    return Some("pxgw adds the port devices itself (ports.*.device)");
                }
                _ => return None,
            }
        }
    }
    None
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}
