//! Ethernet ports and their queues.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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

/// Port counters (`rte_eth_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets the hardware dropped for lack of RX descriptors.
    pub rx_missed: u64,
    /// Erroneous received packets.
    pub rx_errors: u64,
    /// Failed transmissions.
    pub tx_errors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

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
        }
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
        let info = dev_info(self.id)?;
        let fail = |op: &'static str, ret: i32| Error::Port {
            port,
            op,
            errno: Errno::from_ret(ret),
        };
        let config_error = |what: String| Error::PortConfig { port, what };
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
            if mtu < info.min_mtu || mtu > info.max_mtu {
                return Err(config_error(format!(
                    "MTU {mtu} asked, the device allows {}..={}",
                    info.min_mtu, info.max_mtu
                )));
            }
        }

        let rx_granted = RxOffloads::from_bits_truncate(info.rx_offload_capa) & self.rx_offloads;
        let tx_granted = TxOffloads::from_bits_truncate(info.tx_offload_capa) & self.tx_offloads;
        let rss = RssHash::from_bits_retain(info.flow_type_rss_offloads & self.rss.bits());
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
        // SAFETY: valid port id (dev_info succeeded) and a fully initialised conf.
        let ret =
            unsafe { dpdk_sys::rte_eth_dev_configure(port, self.rx_queues, self.tx_queues, &conf) };
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
            rss: if conf.rxmode.mq_mode == dpdk_sys::RTE_ETH_MQ_RX_RSS {
                rss
            } else {
                RssHash::empty()
            },
            driver: info.driver,
            _pool: pool.clone(),
            _eal: self.eal.inner.clone(),
        });
        if let Some(mtu) = self.mtu {
            // SAFETY: configured port.
            let ret = unsafe { dpdk_sys::rte_eth_dev_set_mtu(port, mtu) };
            if ret < 0 {
                return Err(fail("rte_eth_dev_set_mtu", ret));
            }
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
        for q in 0..self.rx_queues {
            // SAFETY: configured port, q < rx_queues, a live pool that the port keeps alive
            // (PortShared holds the Arc); NULL rxconf means the driver's defaults.
            let ret = unsafe {
                dpdk_sys::rte_eth_rx_queue_setup(
                    port,
                    q,
                    rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
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

struct DevInfo {
    driver: String,
    hash_key_size: u8,
    max_rx_queues: u16,
    max_tx_queues: u16,
    min_mtu: u16,
    max_mtu: u16,
    rx_offload_capa: u64,
    tx_offload_capa: u64,
    flow_type_rss_offloads: u64,
}

fn dev_info(id: PortId) -> Result<DevInfo> {
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
    let driver = if info.driver_name.is_null() {
        String::new()
    } else {
        // SAFETY: DPDK's driver name is a static NUL-terminated string.
        unsafe { CStr::from_ptr(info.driver_name) }
            .to_string_lossy()
            .into_owned()
    };
    Ok(DevInfo {
        driver,
        hash_key_size: info.hash_key_size,
        max_rx_queues: info.max_rx_queues,
        max_tx_queues: info.max_tx_queues,
        min_mtu: info.min_mtu,
        max_mtu: info.max_mtu,
        rx_offload_capa: info.rx_offload_capa,
        tx_offload_capa: info.tx_offload_capa,
        flow_type_rss_offloads: info.flow_type_rss_offloads,
    })
}

/// What a started port and its queue handles share; the last one out stops and closes the port.
pub(crate) struct PortShared {
    pub(crate) id: PortId,
    rx_taken: Box<[AtomicBool]>,
    tx_taken: Box<[AtomicBool]>,
    rx_offloads: RxOffloads,
    tx_offloads: TxOffloads,
    rss: RssHash,
    driver: String,
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

    /// RSS hash types in effect (empty with one RX queue or without device support).
    pub fn rss(&self) -> RssHash {
        self.shared.rss
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

    /// The port's counters.
    pub fn stats(&self) -> Result<PortStats> {
        let mut s = dpdk_sys::rte_eth_stats::default();
        // SAFETY: started port and valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_stats_get(self.shared.id.0, &mut s) };
        if ret < 0 {
            return Err(self.error("rte_eth_stats_get", ret));
        }
        Ok(PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// The MTU in effect.
    pub fn mtu(&self) -> Result<u16> {
        let mut mtu = 0u16;
        // SAFETY: started port and valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_mtu(self.shared.id.0, &mut mtu) };
        if ret < 0 {
            return Err(self.error("rte_eth_dev_get_mtu", ret));
        }
        Ok(mtu)
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
        let (ptr, spare) = burst.spare_raw();
        let want = spare.min(usize::from(u16::MAX)) as u16;
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
