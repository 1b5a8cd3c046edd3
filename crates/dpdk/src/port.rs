//! Ethernet ports and their queues.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::af_packet;
use crate::eal::EalInner;
use crate::error::{Errno, Error, Result};
use crate::{Burst, Eal, Mempool, PortId};

bitflags::bitflags! {
    /// RX offloads PacketExpress may ask for. What a port grants is the intersection with the
    /// device's capabilities; see [`Port::rx_offloads`].
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RxOffloads: u64 {
        /// Hardware TCP large-receive offload: first-stage merging in the NIC (SIGCOMM'26 §4.2).
        const TCP_LRO = dpdk_sys::RTE_ETH_RX_OFFLOAD_TCP_LRO as u64;
        /// IPv4 header checksum verified by the NIC.
        const IPV4_CKSUM = dpdk_sys::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM as u64;
        /// TCP checksum verified by the NIC.
        const TCP_CKSUM = dpdk_sys::RTE_ETH_RX_OFFLOAD_TCP_CKSUM as u64;
        /// UDP checksum verified by the NIC.
        const UDP_CKSUM = dpdk_sys::RTE_ETH_RX_OFFLOAD_UDP_CKSUM as u64;
        /// Frames larger than one mbuf arrive as chains.
        const SCATTER = dpdk_sys::RTE_ETH_RX_OFFLOAD_SCATTER as u64;
        /// The RSS hash is delivered in the mbuf.
        const RSS_HASH = dpdk_sys::RTE_ETH_RX_OFFLOAD_RSS_HASH as u64;
        /// Each frame is split over two buffers from two pools: header-only DMA (SIGCOMM'26
        /// §4.2). Requested with [`PortBuilder::header_split`], never through `rx_offloads`.
        const BUFFER_SPLIT = dpdk_sys::RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT as u64;
    }
}

bitflags::bitflags! {
    /// TX offloads PacketExpress may ask for.
    ///
    /// `MBUF_FAST_FREE` is deliberately absent: it lets a PMD skip refcount checks, which would
    /// free the shared data of chained or cloned mbufs (our zero-copy merge and split) too early.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct TxOffloads: u64 {
        /// TCP segmentation offload: the NIC splits to `tso_segsz` (SIGCOMM'26 §4.1).
        const TCP_TSO = dpdk_sys::RTE_ETH_TX_OFFLOAD_TCP_TSO as u64;
        /// IPv4 header checksum filled in by the NIC.
        const IPV4_CKSUM = dpdk_sys::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM as u64;
        /// TCP checksum filled in by the NIC.
        const TCP_CKSUM = dpdk_sys::RTE_ETH_TX_OFFLOAD_TCP_CKSUM as u64;
        /// UDP checksum filled in by the NIC.
        const UDP_CKSUM = dpdk_sys::RTE_ETH_TX_OFFLOAD_UDP_CKSUM as u64;
        /// Chained mbufs may be transmitted.
        const MULTI_SEGS = dpdk_sys::RTE_ETH_TX_OFFLOAD_MULTI_SEGS as u64;
    }
}

bitflags::bitflags! {
    /// Which headers RSS hashes over.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RssHash: u64 {
        /// IPv4/IPv6 addresses.
        const IP = dpdk_sys::RTE_ETH_RSS_IP as u64;
        /// Addresses and TCP ports.
        const TCP = dpdk_sys::RTE_ETH_RSS_TCP as u64;
        /// Addresses and UDP ports.
        const UDP = dpdk_sys::RTE_ETH_RSS_UDP as u64;
    }
}

/// Link state, as the driver reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Carrier up.
    pub up: bool,
    /// Speed in Mb/s (0 when unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Port counters (`rte_eth_stats`), named as DPDK names them so an operator can match them to
/// `dpdk-testpmd`'s and the driver's documentation.
///
/// How the counters add up: every frame that reached the device is in `ipackets` (delivered to
/// the application), `imissed` (dropped by the device because the RX ring was full), `ierrors`
/// (bad frames) or `rx_nombuf` (no mbuf to receive into; some drivers also count these in
/// `imissed`). Every frame the application handed to the driver that the driver accepted is in
/// `opackets` or, if the driver then failed to put it on the wire, `oerrors`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames received and delivered to the application.
    pub ipackets: u64,
    /// Frames transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Frames the device dropped because the RX ring was full (the application did not poll
    /// fast enough, or the ring is too small for the bursts it gets). For `net_af_packet`, the
    /// kernel socket rings' drops, which DPDK 22.11 leaves out (read by this crate instead).
    pub imissed: u64,
    /// Erroneous frames received.
    pub ierrors: u64,
    /// Frames the driver accepted but failed to transmit.
    pub oerrors: u64,
    /// Frames lost because no mbuf was free to receive them.
    pub rx_nombuf: u64,
}

impl PortStats {
    /// The change since `earlier` (counters that went backwards, after a reset, give 0).
    pub fn since(&self, earlier: &PortStats) -> PortStats {
        PortStats {
            ipackets: self.ipackets.saturating_sub(earlier.ipackets),
            opackets: self.opackets.saturating_sub(earlier.opackets),
            ibytes: self.ibytes.saturating_sub(earlier.ibytes),
            obytes: self.obytes.saturating_sub(earlier.obytes),
            imissed: self.imissed.saturating_sub(earlier.imissed),
            ierrors: self.ierrors.saturating_sub(earlier.ierrors),
            oerrors: self.oerrors.saturating_sub(earlier.oerrors),
            rx_nombuf: self.rx_nombuf.saturating_sub(earlier.rx_nombuf),
        }
    }

    /// Frames that reached the device but never reached the application.
    pub fn rx_lost(&self) -> u64 {
        self.imissed + self.ierrors + self.rx_nombuf
    }
}

/// Descriptor-ring limits of one direction (`rte_eth_desc_lim`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescLimits {
    /// Most descriptors per queue.
    pub nb_max: u16,
    /// Fewest descriptors per queue.
    pub nb_min: u16,
    /// Most segments (mbufs of a chain) per packet.
    pub nb_seg_max: u16,
    /// Most segments per MTU-sized packet (for TSO, the segments of one wire frame).
    pub nb_mtu_seg_max: u16,
}

impl DescLimits {
    fn from_raw(lim: &dpdk_sys::rte_eth_desc_lim) -> Self {
        Self {
            nb_max: lim.nb_max,
            nb_min: lim.nb_min,
            nb_seg_max: lim.nb_seg_max,
            nb_mtu_seg_max: lim.nb_mtu_seg_max,
        }
    }
}

/// What a device can do (`rte_eth_dev_info`), read before or after the port is started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The driver's name (`net_af_packet`, `net_ixgbe`, ...).
    pub driver: String,
    /// The kernel interface index behind the port (kernel-backed drivers: af_packet, af_xdp,
    /// tap), or 0.
    pub if_index: u32,
    /// Most RX queues.
    pub max_rx_queues: u16,
    /// Most TX queues.
    pub max_tx_queues: u16,
    /// Smallest MTU the device takes.
    pub min_mtu: u16,
    /// Largest MTU the device reports (many drivers leave DPDK's default, 65535, and limit the
    /// frame length instead; see [`DeviceInfo::mtu_limit`]).
    pub max_mtu: u16,
    /// Longest frame the device receives, Ethernet header and CRC included.
    pub max_rx_pktlen: u32,
    /// RX descriptor limits.
    pub rx_desc: DescLimits,
    /// TX descriptor limits.
    pub tx_desc: DescLimits,
    /// RX offloads the device offers (those PacketExpress knows).
    pub rx_offloads: RxOffloads,
    /// TX offloads the device offers (those PacketExpress knows).
    pub tx_offloads: TxOffloads,
    /// RSS hash types the device offers (those PacketExpress knows).
    pub rss: RssHash,
    /// Length of the RSS hash key the device takes (0: it takes none, e.g. most vdevs).
    pub hash_key_size: u8,
    /// Longest packet the device's LRO builds, Ethernet header included (0: the driver states
    /// no limit of its own, and ethdev then holds LRO to one frame of the MTU).
    pub max_lro_pkt_size: u32,
}

impl DeviceInfo {
    /// Reads the device information of port `id` (started or not).
    pub fn of(_eal: &Eal, id: PortId) -> Result<Self> {
        let raw = dev_info_raw(id)?;
        let driver = if raw.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: DPDK's driver name is a static NUL-terminated string.
            unsafe { CStr::from_ptr(raw.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        Ok(Self {
            driver,
            if_index: raw.if_index,
            max_rx_queues: raw.max_rx_queues,
            max_tx_queues: raw.max_tx_queues,
            min_mtu: raw.min_mtu,
            max_mtu: raw.max_mtu,
            max_rx_pktlen: raw.max_rx_pktlen,
            hash_key_size: raw.hash_key_size,
            max_lro_pkt_size: raw.max_lro_pkt_size,
            rx_desc: DescLimits::from_raw(&raw.rx_desc_lim),
            tx_desc: DescLimits::from_raw(&raw.tx_desc_lim),
            rx_offloads: RxOffloads::from_bits_truncate(raw.rx_offload_capa),
            tx_offloads: TxOffloads::from_bits_truncate(raw.tx_offload_capa),
            rss: RssHash::from_bits_truncate(raw.flow_type_rss_offloads),
        })
    }

    /// Whether the device transmits chained mbufs (`RTE_ETH_TX_OFFLOAD_MULTI_SEGS`). Merged
    /// packets and split segments are chains (SIGCOMM'26 §4: zero-copy merging).
    pub fn multi_segs_tx(&self) -> bool {
        self.tx_offloads.contains(TxOffloads::MULTI_SEGS)
    }

    /// Whether the device receives frames larger than one mbuf as chains
    /// (`RTE_ETH_RX_OFFLOAD_SCATTER`).
    pub fn scatter_rx(&self) -> bool {
        self.rx_offloads.contains(RxOffloads::SCATTER)
    }

    /// Whether the device coalesces received TCP segments (`RTE_ETH_RX_OFFLOAD_TCP_LRO`).
    pub fn lro(&self) -> bool {
        self.rx_offloads.contains(RxOffloads::TCP_LRO)
    }

    /// The largest MTU DPDK lets this device be set to: `max_mtu`, and the frame-length limit
    /// `max_rx_pktlen` less the L2 overhead, computed as ethdev itself does (the difference
    /// between `max_rx_pktlen` and `max_mtu` when the driver sets both, else header + CRC).
    pub fn mtu_limit(&self) -> u16 {
        let overhead = if self.max_mtu != u16::MAX && self.max_rx_pktlen > u32::from(self.max_mtu) {
            self.max_rx_pktlen - u32::from(self.max_mtu)
        } else {
            ETHER_OVERHEAD
        };
        let by_frame = self.max_rx_pktlen.saturating_sub(overhead);
        u32::from(self.max_mtu)
            .min(by_frame)
            .min(u32::from(u16::MAX)) as u16
    }

    /// Whether DPDK would take `mtu` for this device; `Err` says why not, with the limits.
    pub fn check_mtu(&self, mtu: u16) -> std::result::Result<(), String> {
        if mtu < self.min_mtu || mtu > self.mtu_limit() {
            return Err(format!(
                "the device takes MTU {}..={} (max_mtu {}, max_rx_pktlen {})",
                self.min_mtu,
                self.mtu_limit(),
                self.max_mtu,
                self.max_rx_pktlen
            ));
        }
        Ok(())
    }
}

/// Ethernet header and CRC: ethdev's L2 overhead when a driver states no other.
const ETHER_OVERHEAD: u32 = 18;

/// Configures and starts a port. Defaults: one RX and one TX queue, 1024 descriptors each, no
/// RSS, no offloads, the device's MTU, promiscuous mode on.
#[derive(Clone, Debug)]
pub struct PortBuilder {
    eal: Eal,
    id: PortId,
    rx_queues: u16,
    tx_queues: u16,
    rx_desc: u16,
    tx_desc: u16,
    rss: RssHash,
    rss_key: Option<[u8; RSS_KEY_LEN]>,
    mtu: Option<u16>,
    promiscuous: bool,
    rx_offloads: RxOffloads,
    tx_offloads: TxOffloads,
    hairpin_queues: u16,
    hairpin_peer: Option<crate::HairpinPeer>,
    header_split: Option<(u16, Arc<Mempool>)>,
    lro: Option<u32>,
}

impl PortBuilder {
    /// Starts configuring port `id`.
    pub fn new(eal: &Eal, id: PortId) -> Self {
        Self {
            eal: eal.clone(),
            id,
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            rss: RssHash::empty(),
            rss_key: None,
            mtu: None,
            promiscuous: true,
            rx_offloads: RxOffloads::empty(),
            tx_offloads: TxOffloads::empty(),
            hairpin_queues: 0,
            hairpin_peer: None,
            header_split: None,
            lro: None,
        }
    }

    /// Hardware TCP large-receive offload (SIGCOMM'26 §4.2: the NIC's first merging stage),
    /// building packets of at most `max_pkt_size` bytes, Ethernet header included, where the
    /// device offers it; a device without it is configured without, as with every offload
    /// ([`Port::lro_max_pkt_size`] says what was granted).
    ///
    /// The size is lowered to the device's `max_lro_pkt_size`. Coalesced packets longer than one
    /// mbuf of the pool arrive as chains: `RTE_ETH_RX_OFFLOAD_SCATTER` is requested with LRO;
    /// where the device has no scatter, the size is lowered to what one mbuf holds, and LRO is
    /// left off when that is less than a frame of the MTU. A driver that states no limit of its
    /// own is given none, and ethdev holds its LRO to one frame of the MTU.
    pub fn lro(mut self, max_pkt_size: u32) -> Self {
        self.lro = Some(max_pkt_size);
        self
    }

    /// Also sets up `n` hairpin queue pairs (SIGCOMM'26 §4.4), after the ordinary queues: RX
    /// hairpin queue `rx_queues + i` forwards to TX queue `tx_queues + i` in the NIC.
    /// [`PortBuilder::start`] fails with [`Error::HairpinUnsupported`] when the device has
    /// none (every vdev), before configuring anything.
    pub fn hairpin_queues(mut self, n: u16) -> Self {
        self.hairpin_queues = n;
        self
    }

    /// Makes the hairpin queues forward to another port (a gateway between two ports: what
    /// arrives on one leaves by the other) instead of back out of this one. The queues are then
    /// bound manually once both ports run: [`Port::hairpin_bind`].
    pub fn hairpin_peer(mut self, peer: crate::HairpinPeer) -> Self {
        self.hairpin_peer = Some(peer);
        self
    }

    /// Header-only DMA (SIGCOMM'26 §4.2, `RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT`): the first
    /// `header_len` bytes of each frame land in an mbuf of `header_pool`, the rest in one of the
    /// RX pool, chained. [`PortBuilder::start`] fails with [`Error::OffloadUnsupported`] when the
    /// device does not offer buffer split (every vdev): it is never emulated by copying.
    pub fn header_split(mut self, header_len: u16, header_pool: Arc<Mempool>) -> Self {
        self.header_split = Some((header_len, header_pool));
        self
    }

    /// Number of RX queues.
    pub fn rx_queues(mut self, n: u16) -> Self {
        self.rx_queues = n;
        self
    }

    /// Number of TX queues.
    pub fn tx_queues(mut self, n: u16) -> Self {
        self.tx_queues = n;
        self
    }

    /// Descriptors per RX and per TX queue (adjusted to the device's limits).
    pub fn descriptors(mut self, rx: u16, tx: u16) -> Self {
        self.rx_desc = rx;
        self.tx_desc = tx;
        self
    }

    /// Spread flows over the RX queues by hashing these headers (granted as far as the device can).
    pub fn rss(mut self, hash: RssHash) -> Self {
        self.rss = hash;
        self
    }

    /// The 40-byte Toeplitz key RSS hashes with (a symmetric key keeps both directions of a
    /// connection on one queue). Applied where the device hashes with a 40-byte key; devices that
    /// do not (most vdevs) keep their own distribution.
    pub fn rss_key(mut self, key: [u8; RSS_KEY_LEN]) -> Self {
        self.rss_key = Some(key);
        self
    }

    /// The MTU (L3 bytes), checked against the device's range.
    pub fn mtu(mut self, mtu: u16) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Promiscuous mode (on by default: a bump-in-the-wire gateway forwards every frame).
    pub fn promiscuous(mut self, on: bool) -> Self {
        self.promiscuous = on;
        self
    }

    /// RX offloads to request; the port grants those the device supports.
    pub fn rx_offloads(mut self, offloads: RxOffloads) -> Self {
        self.rx_offloads = offloads;
        self
    }

    /// TX offloads to request; the port grants those the device supports.
    pub fn tx_offloads(mut self, offloads: TxOffloads) -> Self {
        self.tx_offloads = offloads;
        self
    }

    /// Configures the device, sets up its queues (RX into `pool`) and starts it.
    pub fn start(mut self, pool: &Arc<Mempool>) -> Result<Port> {
        let port = self.id.0;
        let info = DeviceInfo::of(&self.eal, self.id)?;
        let fail = |op: &'static str, ret: i32| Error::Port {
            port,
            op,
            errno: Errno::from_ret(ret),
        };
        let config_error = |what: String| Error::PortConfig { port, what };
        // Refusals that depend only on the device come first, so nothing is configured.
        let hairpin = if self.hairpin_queues > 0 {
            let cap = crate::hairpin::capability(port, &info.driver)?;
            if self.hairpin_queues > cap.max_queues {
                return Err(Error::HairpinUnsupported {
                    port,
                    driver: info.driver.clone(),
                    reason: format!(
                        "{} hairpin queues asked, the device has {}",
                        self.hairpin_queues, cap.max_queues
                    ),
                });
            }
            Some(cap)
        } else {
            None
        };
        if let Some((header_len, _)) = &self.header_split {
            if !info.rx_offloads.contains(RxOffloads::BUFFER_SPLIT) {
                return Err(Error::OffloadUnsupported {
                    port,
                    driver: info.driver.clone(),
                    offload: "RTE_ETH_RX_OFFLOAD_BUFFER_SPLIT (header-only DMA)",
                });
            }
            if *header_len == 0 {
                return Err(config_error("header split with a 0-byte header".into()));
            }
        }
        let (ring_rx, ring_tx) = (self.rx_queues, self.tx_queues);
        if self.rx_queues == 0 || self.rx_queues > info.max_rx_queues {
            return Err(config_error(format!(
                "{} RX queues asked, the device allows 1..={}",
                self.rx_queues, info.max_rx_queues
            )));
        }
        if self.tx_queues == 0 || self.tx_queues > info.max_tx_queues {
            return Err(config_error(format!(
                "{} TX queues asked, the device allows 1..={}",
                self.tx_queues, info.max_tx_queues
            )));
        }
        if let Some(mtu) = self.mtu {
            // Checked here, so the refusal names the limit instead of a bare EINVAL from
            // rte_eth_dev_configure.
            info.check_mtu(mtu).map_err(|reason| Error::Mtu {
                port,
                driver: info.driver.clone(),
                mtu,
                reason,
            })?;
        }

        let mut rx_granted =
            info.rx_offloads & self.rx_offloads & !(RxOffloads::BUFFER_SPLIT | RxOffloads::TCP_LRO);
        if self.header_split.is_some() {
            rx_granted |= RxOffloads::BUFFER_SPLIT | (info.rx_offloads & RxOffloads::SCATTER);
        }
        let frame = self
            .mtu
            .map_or(1500 + ETHER_OVERHEAD, |m| u32::from(m) + ETHER_OVERHEAD);
        let lro = self
            .lro
            .and_then(|asked| lro_size(&info, asked, pool.fresh_room() as u32, frame));
        if let Some(plan) = lro {
            rx_granted |= RxOffloads::TCP_LRO;
            if plan.scatter {
                rx_granted |= RxOffloads::SCATTER;
            }
        }
        let tx_granted = info.tx_offloads & self.tx_offloads;
        let rss = info.rss & self.rss;
        let mut conf = dpdk_sys::rte_eth_conf::default();
        conf.rxmode.offloads = rx_granted.bits();
        conf.txmode.offloads = tx_granted.bits();
        if !rss.is_empty() && self.rx_queues > 1 {
            conf.rxmode.mq_mode = dpdk_sys::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss.bits();
            if let Some(key) = self.rss_key.as_mut() {
                if usize::from(info.hash_key_size) == RSS_KEY_LEN {
                    // DPDK copies the key during rte_eth_dev_configure; `key` outlives the call.
                    conf.rx_adv_conf.rss_conf.rss_key = key.as_mut_ptr();
                    conf.rx_adv_conf.rss_conf.rss_key_len = RSS_KEY_LEN as u8;
                }
            }
        }
        if let Some(mtu) = self.mtu {
            conf.rxmode.mtu = u32::from(mtu);
        }
        if let Some(plan) = lro {
            conf.rxmode.max_lro_pkt_size = plan.max_pkt_size;
        }
        let driver = info.driver.clone();
        // SAFETY: valid port id (dev_info succeeded) and a fully initialised conf.
        let ret = unsafe {
            dpdk_sys::rte_eth_dev_configure(
                port,
                ring_rx + self.hairpin_queues,
                ring_tx + self.hairpin_queues,
                &conf,
            )
        };
        if ret < 0 {
            return Err(fail("rte_eth_dev_configure", ret));
        }
        // From here on the port is configured: PortShared's Drop closes it on any error.
        let shared = Arc::new(PortShared {
            id: self.id,
            rx_taken: (0..self.rx_queues)
                .map(|_| AtomicBool::new(false))
                .collect(),
            tx_taken: (0..self.tx_queues)
                .map(|_| AtomicBool::new(false))
                .collect(),
            rx_offloads: rx_granted,
            tx_offloads: tx_granted,
            lro_max_pkt_size: lro.map(|plan| plan.max_pkt_size),
            rss: if conf.rxmode.mq_mode == dpdk_sys::RTE_ETH_MQ_RX_RSS {
                rss
            } else {
                RssHash::empty()
            },
            rss_key: self.rss_key,
            ring_drops: (info.driver == "net_af_packet" && info.if_index > 0)
                .then(|| (info.if_index, AtomicU64::new(0))),
            driver: info.driver,
            mtu_set: AtomicBool::new(false),
            hairpin_rx: ring_rx..ring_rx + self.hairpin_queues,
            hairpin_bound: AtomicU32::new(0),
            _header_pool: self.header_split.as_ref().map(|(_, p)| p.clone()),
            _pool: pool.clone(),
            _eal: self.eal.inner.clone(),
        });
        if let Some(mtu) = self.mtu {
            set_mtu(self.id, &driver, mtu)?;
        }
        let (mut rx_desc, mut tx_desc) = (self.rx_desc, self.tx_desc);
        // SAFETY: valid out-pointers; DPDK clamps them to the device's limits.
        let ret =
            unsafe { dpdk_sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut rx_desc, &mut tx_desc) };
        if ret < 0 {
            return Err(fail("rte_eth_dev_adjust_nb_rx_tx_desc", ret));
        }
        // SAFETY: reads the NUMA socket of a valid port.
        let socket = unsafe { dpdk_sys::rte_eth_dev_socket_id(port) }.max(0) as u32;
        // Header split: segment 0 (the header) from the header pool, the rest from `pool`; the
        // mempool argument is then NULL, as rte_eth_rx_queue_setup requires.
        let mut segments = self.header_split.as_ref().map(|(len, header_pool)| {
            let mut seg = [dpdk_sys::rte_eth_rxseg::default(); 2];
            seg[0].split = dpdk_sys::rte_eth_rxseg_split {
                mp: header_pool.as_ptr(),
                length: *len,
                ..Default::default()
            };
            seg[1].split = dpdk_sys::rte_eth_rxseg_split {
                mp: pool.as_ptr(),
                ..Default::default()
            };
            seg
        });
        for q in 0..self.rx_queues {
            let mut rxconf = dpdk_sys::rte_eth_rxconf::default();
            let (conf_ptr, mp) = match segments.as_mut() {
                Some(seg) => {
                    rxconf.offloads = rx_granted.bits();
                    rxconf.rx_nseg = 2;
                    rxconf.rx_seg = seg.as_mut_ptr();
                    (&rxconf as *const _, std::ptr::null_mut())
                }
                None => (std::ptr::null(), pool.as_ptr()),
            };
            // SAFETY: configured port, q < rx_queues, live pools that the port keeps alive
            // (PortShared holds their Arcs); NULL rxconf means the driver's defaults, else
            // `rxconf` and the segments it points to outlive the call (DPDK copies them).
            let ret =
                unsafe { dpdk_sys::rte_eth_rx_queue_setup(port, q, rx_desc, socket, conf_ptr, mp) };
            if ret < 0 {
                return Err(fail("rte_eth_rx_queue_setup", ret));
            }
        }
        for q in 0..self.tx_queues {
            // SAFETY: configured port, q < tx_queues; NULL txconf means the driver's defaults
            // (the port-level offloads above apply; MBUF_FAST_FREE is never among them).
            let ret = unsafe {
                dpdk_sys::rte_eth_tx_queue_setup(port, q, tx_desc, socket, std::ptr::null())
            };
            if ret < 0 {
                return Err(fail("rte_eth_tx_queue_setup", ret));
            }
        }
        if let Some(cap) = &hairpin {
            crate::hairpin::setup_queues(
                port,
                &driver,
                (ring_rx, ring_tx),
                self.hairpin_queues,
                cap,
                self.hairpin_peer,
            )?;
        }
        // SAFETY: all queues are set up.
        let ret = unsafe { dpdk_sys::rte_eth_dev_start(port) };
        if ret < 0 {
            return Err(fail("rte_eth_dev_start", ret));
        }
        if self.promiscuous {
            // SAFETY: started port. Some vdevs (net_ring) have no promiscuous mode: not an error.
            let ret = unsafe { dpdk_sys::rte_eth_promiscuous_enable(port) };
            if ret < 0 && ret != -libc::ENOTSUP {
                return Err(fail("rte_eth_promiscuous_enable", ret));
            }
        }
        Ok(Port { shared })
    }
}

/// Length of a Toeplitz RSS key, as most NICs and [`PortBuilder::rss_key`] take it.
pub const RSS_KEY_LEN: usize = 40;

/// How LRO is configured on a device that offers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LroPlan {
    /// `rxmode.max_lro_pkt_size` (0: the driver states no limit; ethdev then uses one frame).
    max_pkt_size: u32,
    /// Coalesced packets may span several mbufs.
    scatter: bool,
}

/// LRO for a device described by `info`, asked for packets of up to `asked` bytes, into mbufs
/// of `room` bytes, on a port whose frames are `frame` bytes long; `None` when the device has
/// no LRO, or coalesced packets could not even hold one frame.
fn lro_size(info: &DeviceInfo, asked: u32, room: u32, frame: u32) -> Option<LroPlan> {
    if !info.lro() {
        return None;
    }
    if info.max_lro_pkt_size == 0 {
        // ethdev 22.11 then takes only 0 or exactly one frame: the driver's own default.
        return Some(LroPlan {
            max_pkt_size: 0,
            scatter: false,
        });
    }
    let size = asked.min(info.max_lro_pkt_size);
    let plan = if size <= room {
        LroPlan {
            max_pkt_size: size,
            scatter: false,
        }
    } else if info.scatter_rx() {
        LroPlan {
            max_pkt_size: size,
            scatter: true,
        }
    } else {
        // Without scatter a coalesced packet must fit one mbuf.
        LroPlan {
            max_pkt_size: room,
            scatter: false,
        }
    };
    // Coalescing into less than a frame would refuse frames the port otherwise takes.
    (plan.max_pkt_size >= frame).then_some(plan)
}

fn dev_info_raw(id: PortId) -> Result<dpdk_sys::rte_eth_dev_info> {
    // SAFETY: any u16 may be checked.
    if unsafe { dpdk_sys::rte_eth_dev_is_valid_port(id.0) } == 0 {
        return Err(Error::NoDevice(format!("port {id}")));
    }
    let mut info = dpdk_sys::rte_eth_dev_info::default();
    // SAFETY: valid port and out-pointer.
    let ret = unsafe { dpdk_sys::rte_eth_dev_info_get(id.0, &mut info) };
    if ret < 0 {
        return Err(Error::Port {
            port: id.0,
            op: "rte_eth_dev_info_get",
            errno: Errno::from_ret(ret),
        });
    }
    Ok(info)
}

/// Sets the MTU of a configured port and reads it back: a driver that accepts the call but keeps
/// another MTU is a refusal too.
fn set_mtu(id: PortId, driver: &str, mtu: u16) -> Result<()> {
    let refused = |reason: String| Error::Mtu {
        port: id.0,
        driver: driver.to_owned(),
        mtu,
        reason,
    };
    // SAFETY: a valid, configured port.
    let ret = unsafe { dpdk_sys::rte_eth_dev_set_mtu(id.0, mtu) };
    if ret < 0 {
        let errno = Errno::from_ret(ret);
        // A driver without an MTU operation (net_ring, net_null) runs at the MTU
        // rte_eth_dev_configure recorded: that is a success when it is the one asked for.
        if errno.0 == libc::ENOTSUP && get_mtu(id)? == mtu {
            return Ok(());
        }
        return Err(refused(if errno.0 == libc::ENOTSUP {
            "the driver cannot change its MTU (rte_eth_dev_set_mtu: not supported)".to_owned()
        } else {
            format!("rte_eth_dev_set_mtu failed: {errno}")
        }));
    }
    let got = get_mtu(id)?;
    if got != mtu {
        return Err(refused(format!("the driver kept MTU {got}")));
    }
    Ok(())
}

fn get_mtu(id: PortId) -> Result<u16> {
    let mut mtu = 0u16;
    // SAFETY: a valid port and a valid out-pointer.
    let ret = unsafe { dpdk_sys::rte_eth_dev_get_mtu(id.0, &mut mtu) };
    if ret < 0 {
        return Err(Error::Port {
            port: id.0,
            op: "rte_eth_dev_get_mtu",
            errno: Errno::from_ret(ret),
        });
    }
    Ok(mtu)
}

/// What a started port and its queue handles share; the last one out stops and closes the port.
pub(crate) struct PortShared {
    pub(crate) id: PortId,
    rx_taken: Box<[AtomicBool]>,
    tx_taken: Box<[AtomicBool]>,
    rx_offloads: RxOffloads,
    tx_offloads: TxOffloads,
    /// The LRO packet size granted (`rxmode.max_lro_pkt_size`), when LRO is on.
    lro_max_pkt_size: Option<u32>,
    rss: RssHash,
    /// The Toeplitz key given to [`PortBuilder::rss_key`], for rules that must hash alike.
    rss_key: Option<[u8; RSS_KEY_LEN]>,
    driver: String,
    /// Serialises MTU changes on a started port (they are control-path calls).
    mtu_set: AtomicBool,
    /// RX hairpin queue indices (after the ordinary queues), targets for flow rules only.
    pub(crate) hairpin_rx: std::ops::Range<u16>,
    /// The port this one's hairpin TX queues were bound to ([`Port::hairpin_bind`]), plus one
    /// (0: none); unbound before the port stops.
    pub(crate) hairpin_bound: AtomicU32,
    /// The header pool of a header-split port, kept alive as long as its queues.
    _header_pool: Option<Arc<Mempool>>,
    /// `net_af_packet`: the interface index, and the kernel ring drops read so far (reading them
    /// clears the kernel's count; see [`crate::af_packet`]).
    ring_drops: Option<(u32, AtomicU64)>,
    _pool: Arc<Mempool>,
    _eal: Arc<EalInner>,
}

impl PortShared {
    pub(crate) fn rx_queue_count(&self) -> u16 {
        self.rx_taken.len() as u16
    }
}

impl Drop for PortShared {
    fn drop(&mut self) {
        // Some drivers (net_ring) keep received-but-unread mbufs across close: read and free them
        // first, so closing a port never leaks. Bounded, in case a peer keeps sending.
        for queue in 0..self.rx_queue_count() {
            for _ in 0..1024 {
                let mut burst = Burst::<64>::new();
                let (ptr, spare) = burst.spare_raw();
                // SAFETY: no queue handle remains (they hold this Arc), so this is the only
                // reader; `ptr` has `spare` free slots.
                let n = unsafe { dpdk_sys::px_eth_rx_burst(self.id.0, queue, ptr, spare as u16) };
                // SAFETY: DPDK wrote n owned mbufs; the burst frees them when dropped.
                unsafe { burst.add_len(usize::from(n)) };
                if n == 0 {
                    break;
                }
            }
        }
        let bound = self.hairpin_bound.load(Ordering::Acquire);
        if bound > 0 {
            // SAFETY: this port's hairpin TX queues were bound to that port, which is valid
            // until closed; unbinding a port already closed only returns an error.
            unsafe { dpdk_sys::rte_eth_hairpin_unbind(self.id.0, (bound - 1) as u16) };
        }
        // SAFETY: no queue handle remains, so nobody is in rx/tx_burst; stop then close releases
        // the port and the mbufs its descriptor rings hold.
        unsafe {
            dpdk_sys::rte_eth_dev_stop(self.id.0);
            dpdk_sys::rte_eth_dev_close(self.id.0);
        }
    }
}

/// A started port. Queue handles are taken from it, one owner per queue.
#[derive(Clone)]
pub struct Port {
    pub(crate) shared: Arc<PortShared>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.shared.id)
            .field("driver", &self.shared.driver)
            .finish()
    }
}

impl Port {
    /// Starts configuring port `id`.
    pub fn builder(eal: &Eal, id: PortId) -> PortBuilder {
        PortBuilder::new(eal, id)
    }

    /// The port id.
    pub fn id(&self) -> PortId {
        self.shared.id
    }

    /// The driver's name (`net_ring`, `net_af_packet`, ...).
    pub fn driver(&self) -> &str {
        &self.shared.driver
    }

    /// RX offloads actually granted: requested ∩ device capabilities. Upper layers fall back to
    /// software for the rest.
    pub fn rx_offloads(&self) -> RxOffloads {
        self.shared.rx_offloads
    }

    /// TX offloads actually granted.
    pub fn tx_offloads(&self) -> TxOffloads {
        self.shared.tx_offloads
    }

    /// With LRO granted ([`PortBuilder::lro`]), the longest packet it builds, Ethernet header
    /// included (`Some(0)`: the driver's own limit, one frame of the MTU); `None` without LRO.
    pub fn lro_max_pkt_size(&self) -> Option<u32> {
        self.shared.lro_max_pkt_size
    }

    /// RSS hash types in effect (empty with one RX queue or without device support).
    pub fn rss(&self) -> RssHash {
        self.shared.rss
    }

    /// The Toeplitz key the port was built with ([`PortBuilder::rss_key`]; `None`: the
    /// driver's default). `rte_flow` RSS rules take it too, so traffic they spread hashes as
    /// the port's own RSS does.
    pub fn rss_key(&self) -> Option<[u8; RSS_KEY_LEN]> {
        self.shared.rss_key
    }

    /// Number of RX queues.
    pub fn rx_queue_count(&self) -> u16 {
        self.shared.rx_queue_count()
    }

    /// Number of TX queues.
    pub fn tx_queue_count(&self) -> u16 {
        self.shared.tx_taken.len() as u16
    }

    /// Takes RX queue `index`. Fails when out of range or already taken.
    pub fn rx_queue(&self, index: u16) -> Result<RxQueue> {
        take(&self.shared, &self.shared.rx_taken, "rx", index)?;
        Ok(RxQueue {
            port: self.shared.clone(),
            queue: index,
            _not_sync: std::marker::PhantomData,
        })
    }

    /// Takes TX queue `index`. Fails when out of range or already taken.
    pub fn tx_queue(&self, index: u16) -> Result<TxQueue> {
        take(&self.shared, &self.shared.tx_taken, "tx", index)?;
        Ok(TxQueue {
            port: self.shared.clone(),
            queue: index,
            _not_sync: std::marker::PhantomData,
        })
    }

    /// Link state, without waiting.
    pub fn link(&self) -> Result<Link> {
        let mut link = dpdk_sys::rte_eth_link::default();
        // SAFETY: started port and valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_link_get_nowait(self.shared.id.0, &mut link) };
        if ret < 0 {
            return Err(self.error("rte_eth_link_get_nowait", ret));
        }
        Ok(Link {
            up: u32::from(link.link_status()) == dpdk_sys::RTE_ETH_LINK_UP,
            speed_mbps: link.link_speed,
            full_duplex: u32::from(link.link_duplex()) == dpdk_sys::RTE_ETH_LINK_FULL_DUPLEX,
        })
    }

    /// The port's counters (`rte_eth_stats_get`).
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: started port and valid out-pointer; DPDK allows reading the counters from
        // any thread while the queues run (the drivers' counters are per queue, read as words).
        let ret = unsafe { dpdk_sys::rte_eth_stats_get(self.shared.id.0, &mut s) };
        if ret < 0 {
            return Err(self.error("rte_eth_stats_get", ret));
        }
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed + self.ring_drops(),
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Sets the port's counters back to zero (`rte_eth_stats_reset`).
    pub fn reset_stats(&self) -> Result<()> {
        // SAFETY: started port.
        let ret = unsafe { dpdk_sys::rte_eth_stats_reset(self.shared.id.0) };
        if ret < 0 {
            return Err(self.error("rte_eth_stats_reset", ret));
        }
        if let Some((if_index, total)) = &self.shared.ring_drops {
            af_packet::take_ring_drops(*if_index);
            total.store(0, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Frames the kernel dropped because the port's socket rings were full (`net_af_packet`,
    /// which does not count them itself); 0 for other drivers.
    fn ring_drops(&self) -> u64 {
        match &self.shared.ring_drops {
            Some((if_index, total)) => {
                let new = af_packet::take_ring_drops(*if_index);
                total.fetch_add(new, Ordering::Relaxed) + new
            }
            None => 0,
        }
    }

    /// What the device can do (MTU range, segment limits, offloads offered).
    pub fn device_info(&self) -> Result<DeviceInfo> {
        DeviceInfo::of(
            &Eal {
                inner: self.shared._eal.clone(),
            },
            self.shared.id,
        )
    }

    /// The MTU in effect.
    pub fn mtu(&self) -> Result<u16> {
        get_mtu(self.shared.id)
    }

    /// Changes the MTU of the running port and reads it back. A device that cannot take it
    /// gives [`Error::Mtu`], naming its limits.
    pub fn set_mtu(&self, mtu: u16) -> Result<()> {
        let info = self.device_info()?;
        let refused = |reason: String| Error::Mtu {
            port: self.shared.id.0,
            driver: self.shared.driver.clone(),
            mtu,
            reason,
        };
        info.check_mtu(mtu).map_err(refused)?;
        if self.shared.mtu_set.swap(true, Ordering::AcqRel) {
            return Err(refused("another MTU change is in progress".into()));
        }
        let result = set_mtu(self.shared.id, &self.shared.driver, mtu);
        self.shared.mtu_set.store(false, Ordering::Release);
        result
    }

    /// Spreads the port's own RSS (what no flow rule steers) over `queues` only, by rewriting
    /// its redirection table round-robin (`rte_eth_dev_rss_reta_update`). PXIO keeps a queue
    /// that only flow rules fill (the hairpin sample) out of RSS this way.
    pub fn set_rss_queues(&self, queues: &[u16]) -> Result<()> {
        let port = self.id().0;
        if queues.is_empty() {
            return Err(Error::InvalidArgument("an RSS table with no queues".into()));
        }
        if let Some(&q) = queues.iter().find(|&&q| q >= self.rx_queue_count()) {
            return Err(Error::QueueOutOfRange {
                port,
                kind: "rx",
                index: q,
                count: self.rx_queue_count(),
            });
        }
        let size = dev_info_raw(self.id())?.reta_size;
        if size == 0 {
            return Err(Error::Port {
                port,
                op: "rte_eth_dev_rss_reta_update",
                errno: Errno(libc::ENOTSUP),
            });
        }
        let group = dpdk_sys::RTE_ETH_RETA_GROUP_SIZE as usize;
        let mut table: Vec<dpdk_sys::rte_eth_rss_reta_entry64> = (0..usize::from(size)
            .div_ceil(group))
            .map(|_| dpdk_sys::rte_eth_rss_reta_entry64 {
                mask: u64::MAX,
                reta: [0; 64],
            })
            .collect();
        for i in 0..usize::from(size) {
            table[i / group].reta[i % group] = queues[i % queues.len()];
        }
        // SAFETY: a started port; `table` holds `size` entries (whole groups of 64).
        let ret = unsafe { dpdk_sys::rte_eth_dev_rss_reta_update(port, table.as_mut_ptr(), size) };
        if ret < 0 {
            return Err(Error::Port {
                port,
                op: "rte_eth_dev_rss_reta_update",
                errno: Errno::from_ret(ret),
            });
        }
        Ok(())
    }

    /// The port's MAC address.
    pub fn mac(&self) -> Result<[u8; 6]> {
        let mut addr = dpdk_sys::rte_ether_addr::default();
        // SAFETY: started port and valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_macaddr_get(self.shared.id.0, &mut addr) };
        if ret < 0 {
            return Err(self.error("rte_eth_macaddr_get", ret));
        }
        Ok(addr.addr_bytes)
    }

    fn error(&self, op: &'static str, ret: i32) -> Error {
        Error::Port {
            port: self.shared.id.0,
            op,
            errno: Errno::from_ret(ret),
        }
    }
}

fn take(shared: &PortShared, flags: &[AtomicBool], kind: &'static str, index: u16) -> Result<()> {
    let flag = flags
        .get(usize::from(index))
        .ok_or(Error::QueueOutOfRange {
            port: shared.id.0,
            kind,
            index,
            count: flags.len() as u16,
        })?;
    if flag.swap(true, Ordering::AcqRel) {
        return Err(Error::QueueTaken {
            port: shared.id.0,
            kind,
            index,
        });
    }
    Ok(())
}

/// The sole handle to one RX queue: `Send`, not `Sync` (DPDK queues are single-threaded).
///
/// One handle per queue is a runtime rule: [`Port::rx_queue`] refuses a queue whose handle is
/// alive ([`Error::QueueTaken`]) and frees it when the handle is dropped. The types make the rest
/// hold: a handle moves to its worker thread,
///
/// ```no_run
/// fn start_worker(mut rx: dpdk::RxQueue) {
///     let rx = &mut rx;
///     std::thread::scope(|s| {
///         s.spawn(move || rx.index());
///     });
/// }
/// ```
///
/// (a `&mut` crossing threads needs `RxQueue: Send`) but is never shared by two threads (the same
/// code with a shared borrow needs `RxQueue: Sync`),
///
/// ```compile_fail,E0277
/// fn start_worker(mut rx: dpdk::RxQueue) {
///     let rx = &rx;
///     std::thread::scope(|s| {
///         s.spawn(move || rx.index());
///     });
/// }
/// ```
///
/// and it cannot be duplicated, unlike the [`Port`] it came from:
///
/// ```no_run
/// fn two_handles(port: dpdk::Port) -> (dpdk::Port, dpdk::Port) {
///     (port.clone(), port)
/// }
/// ```
///
/// ```compile_fail,E0599
/// fn two_handles(rx: dpdk::RxQueue) -> (dpdk::RxQueue, dpdk::RxQueue) {
///     (rx.clone(), rx)
/// }
/// ```
pub struct RxQueue {
    port: Arc<PortShared>,
    queue: u16,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl RxQueue {
    /// The queue index.
    pub fn index(&self) -> u16 {
        self.queue
    }

    /// The port id.
    pub fn port_id(&self) -> PortId {
        self.port.id
    }

    /// Receives into the free slots of `burst`; returns how many arrived.
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        self.rx_burst_up_to(burst, usize::MAX)
    }

    /// Receives at most `max` packets into the free slots of `burst`; returns how many arrived
    /// (a unified RX over several queues bounds each queue's share).
    #[inline]
    pub fn rx_burst_up_to<const N: usize>(&mut self, burst: &mut Burst<N>, max: usize) -> usize {
        let (ptr, spare) = burst.spare_raw();
        let want = spare.min(max).min(usize::from(u16::MAX)) as u16;
        // SAFETY: we own this queue (one handle per queue, !Sync), the port is started, and
        // `ptr` has `want` writable slots; DPDK writes `n` owned mbufs there.
        let n = unsafe { dpdk_sys::px_eth_rx_burst(self.port.id.0, self.queue, ptr, want) };
        // SAFETY: the n slots now hold mbufs owned by nobody else.
        unsafe { burst.add_len(usize::from(n)) };
        usize::from(n)
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        self.port.rx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}

/// The sole handle to one TX queue: `Send`, not `Sync`.
///
/// As for [`RxQueue`]: [`Port::tx_queue`] hands out one live handle per queue
/// ([`Error::QueueTaken`] otherwise); the handle moves to its worker thread,
///
/// ```no_run
/// fn start_worker(mut tx: dpdk::TxQueue) {
///     let tx = &mut tx;
///     std::thread::scope(|s| {
///         s.spawn(move || tx.index());
///     });
/// }
/// ```
///
/// is never shared by two threads,
///
/// ```compile_fail,E0277
/// fn start_worker(mut tx: dpdk::TxQueue) {
///     let tx = &tx;
///     std::thread::scope(|s| {
///         s.spawn(move || tx.index());
///     });
/// }
/// ```
///
/// and cannot be duplicated.
///
/// ```compile_fail,E0599
/// fn two_handles(tx: dpdk::TxQueue) -> (dpdk::TxQueue, dpdk::TxQueue) {
///     (tx.clone(), tx)
/// }
/// ```
pub struct TxQueue {
    port: Arc<PortShared>,
    queue: u16,
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl TxQueue {
    /// The queue index.
    pub fn index(&self) -> u16 {
        self.queue
    }

    /// The port id.
    pub fn port_id(&self) -> PortId {
        self.port.id
    }

    /// Offers every mbuf in `burst` to the driver. The driver takes ownership of exactly the
    /// ones it accepted (the first `n`, returned); the rest stay in `burst`, in order, still the
    /// caller's to retry or drop.
    #[inline]
    pub fn tx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        let len = burst.len().min(usize::from(u16::MAX)) as u16;
        // SAFETY: we own this queue; the first `len` slots hold owned mbufs. DPDK takes
        // ownership of the first `n` of them, which consume_front then forgets.
        let n =
            unsafe { dpdk_sys::px_eth_tx_burst(self.port.id.0, self.queue, burst.as_raw(), len) };
        burst.consume_front(usize::from(n));
        usize::from(n)
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        self.port.tx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(rx: RxOffloads, max_lro_pkt_size: u32) -> DeviceInfo {
        let desc = DescLimits {
            nb_max: 4096,
            nb_min: 64,
            nb_seg_max: 40,
            nb_mtu_seg_max: 8,
        };
        DeviceInfo {
            driver: "net_test".into(),
            if_index: 0,
            max_rx_queues: 4,
            max_tx_queues: 4,
            min_mtu: 68,
            max_mtu: 9600,
            max_rx_pktlen: 9618,
            rx_desc: desc,
            tx_desc: desc,
            rx_offloads: rx,
            tx_offloads: TxOffloads::empty(),
            rss: RssHash::empty(),
            hash_key_size: 40,
            max_lro_pkt_size,
        }
    }

    const FRAME: u32 = 9018;
    const ROOM: u32 = 10240;

    #[test]
    fn lro_takes_the_devices_limit_and_scatters_beyond_one_mbuf() {
        let d = device(RxOffloads::TCP_LRO | RxOffloads::SCATTER, 65280);
        assert_eq!(
            lro_size(&d, 65535, ROOM, FRAME),
            Some(LroPlan {
                max_pkt_size: 65280,
                scatter: true
            })
        );
        // Asked for less than the device allows, and within one mbuf: no chains needed.
        assert_eq!(
            lro_size(&d, 9500, ROOM, FRAME),
            Some(LroPlan {
                max_pkt_size: 9500,
                scatter: false
            })
        );
    }

    #[test]
    fn lro_without_scatter_fits_one_mbuf_or_stays_off() {
        let d = device(RxOffloads::TCP_LRO, 65280);
        assert_eq!(
            lro_size(&d, 65535, ROOM, FRAME),
            Some(LroPlan {
                max_pkt_size: ROOM,
                scatter: false
            })
        );
        // An mbuf that holds less than a frame: LRO would refuse frames, so it stays off.
        assert_eq!(lro_size(&d, 65535, 2048, FRAME), None);
    }

    #[test]
    fn lro_is_never_asked_of_a_device_without_it() {
        assert_eq!(
            lro_size(&device(RxOffloads::SCATTER, 65280), 65535, ROOM, FRAME),
            None
        );
        // A driver with no stated limit gets 0: ethdev then holds it to one frame.
        assert_eq!(
            lro_size(&device(RxOffloads::TCP_LRO, 0), 65535, ROOM, FRAME),
            Some(LroPlan {
                max_pkt_size: 0,
                scatter: false
            })
        );
    }
}
