//! Hairpin queues: RX queues the NIC forwards to a paired TX queue in hardware, without DMA to
//! host memory (SIGCOMM'26 §4.4, Figure 7). PacketExpress leaves flows that merging would not
//! help on such a queue and steers only chosen flows to the merging workers.
//!
//! [`Port::hairpin_capability`] (or [`hairpin_capability`] before the port starts) asks the PMD;
//! [`crate::PortBuilder::hairpin_queues`] sets the queues up, each RX hairpin queue peered with
//! the TX hairpin queue of the same rank on the same port, after the ordinary queues. Steering to
//! one is an ordinary [`crate::FlowAction::Queue`] rule with an index from
//! [`Port::hairpin_rx_queues`]. No PMD in Debian's DPDK that runs without a NIC has hairpin
//! queues: every vdev answers `-ENOTSUP`, which comes back as [`Error::HairpinUnsupported`].

use std::ops::Range;

use crate::error::{Errno, Error, Result};
use crate::{Eal, Port, PortId};

/// What a device offers for hairpin queues (`rte_eth_hairpin_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HairpinCapability {
    /// Most hairpin queues (RX and TX each).
    pub max_queues: u16,
    /// Most TX queues one RX hairpin queue may be bound to.
    pub max_rx_to_tx: u16,
    /// Most RX queues one TX hairpin queue may be bound to.
    pub max_tx_to_rx: u16,
    /// Most descriptors per hairpin queue.
    pub max_descriptors: u16,
}

/// The other port of a two-port hairpin: its id, and where its hairpin queues start (its count
/// of ordinary RX and TX queues). RX hairpin queue `i` of this port forwards to TX hairpin queue
/// `tx_base + i` of the peer, and TX hairpin queue `i` takes from its RX hairpin queue
/// `rx_base + i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HairpinPeer {
    /// The peer port.
    pub port: PortId,
    /// Ordinary RX queues of the peer (its first RX hairpin queue).
    pub rx_base: u16,
    /// Ordinary TX queues of the peer (its first TX hairpin queue).
    pub tx_base: u16,
}

/// Asks the PMD of port `id` for its hairpin capability (the port need not be started).
pub fn hairpin_capability(eal: &Eal, id: PortId) -> Result<HairpinCapability> {
    let driver = crate::DeviceInfo::of(eal, id)?.driver;
    capability(id.0, &driver)
}

pub(crate) fn capability(port: u16, driver: &str) -> Result<HairpinCapability> {
    let mut cap = dpdk_sys::rte_eth_hairpin_cap::default();
    // SAFETY: `cap` is a valid out-pointer; an invalid port id is reported by the return value.
    let ret = unsafe { dpdk_sys::rte_eth_dev_hairpin_capability_get(port, &mut cap) };
    if ret < 0 {
        let errno = Errno::from_ret(ret);
        let reason = if errno.0 == libc::ENOTSUP {
            "the driver has no hairpin support (rte_eth_dev_hairpin_capability_get: not \
             supported)"
                .to_owned()
        } else {
            format!("rte_eth_dev_hairpin_capability_get failed: {errno}")
        };
        return Err(Error::HairpinUnsupported {
            port,
            driver: driver.to_owned(),
            reason,
        });
    }
    Ok(HairpinCapability {
        max_queues: cap.max_nb_queues,
        max_rx_to_tx: cap.max_rx_2_tx,
        max_tx_to_rx: cap.max_tx_2_rx,
        max_descriptors: cap.max_nb_desc,
    })
}

/// Sets up `n` hairpin queue pairs on a configured, not yet started port. Without a peer, RX
/// queue `rx_base + i` forwards to TX queue `tx_base + i` of the same port; with one, to the
/// peer's (see [`HairpinPeer`]), bound later by [`Port::hairpin_bind`].
pub(crate) fn setup_queues(
    port: u16,
    driver: &str,
    (rx_base, tx_base): (u16, u16),
    n: u16,
    cap: &HairpinCapability,
    peer: Option<HairpinPeer>,
) -> Result<()> {
    let desc = cap.max_descriptors.min(1024);
    let fail = |op: &'static str, ret: i32| Error::Port {
        port,
        op,
        errno: Errno::from_ret(ret),
    };
    if n > cap.max_queues {
        return Err(Error::HairpinUnsupported {
            port,
            driver: driver.to_owned(),
            reason: format!(
                "{n} hairpin queues asked, the device has {}",
                cap.max_queues
            ),
        });
    }
    let (peer_port, peer_rx, peer_tx) = match peer {
        Some(p) => (p.port.0, p.rx_base, p.tx_base),
        None => (port, rx_base, tx_base),
    };
    for i in 0..n {
        let mut conf = dpdk_sys::rte_eth_hairpin_conf::default();
        conf.set_peer_count(1);
        // Two ports: the queues are bound once both run (testpmd's --hairpin-mode 0x2 does the
        // same); the TX side needs no explicit flow rule.
        conf.set_manual_bind(u32::from(peer.is_some()));
        conf.peers[0] = dpdk_sys::rte_eth_hairpin_peer {
            port: peer_port,
            queue: peer_tx + i,
        };
        // SAFETY: a configured port with rx_base + n RX queues (the builder asked for them);
        // `conf` is fully initialised and DPDK copies it.
        let ret =
            unsafe { dpdk_sys::rte_eth_rx_hairpin_queue_setup(port, rx_base + i, desc, &conf) };
        if ret < 0 {
            return Err(fail("rte_eth_rx_hairpin_queue_setup", ret));
        }
        conf.peers[0].queue = peer_rx + i;
        // SAFETY: as above, for the TX side.
        let ret =
            unsafe { dpdk_sys::rte_eth_tx_hairpin_queue_setup(port, tx_base + i, desc, &conf) };
        if ret < 0 {
            return Err(fail("rte_eth_tx_hairpin_queue_setup", ret));
        }
    }
    Ok(())
}

impl Port {
    /// The PMD's hairpin capability, or [`Error::HairpinUnsupported`] (every vdev).
    pub fn hairpin_capability(&self) -> Result<HairpinCapability> {
        capability(self.id().0, self.driver())
    }

    /// Binds this port's hairpin TX queues to the RX hairpin queues of `rx_peer` (both started,
    /// both set up with [`crate::PortBuilder::hairpin_peer`] naming the other): from then on
    /// what `rx_peer` hairpins leaves by this port. Unbound when this port closes.
    pub fn hairpin_bind(&self, rx_peer: &Port) -> Result<()> {
        let (tx, rx) = (self.id().0, rx_peer.id().0);
        // SAFETY: both ports are valid and started (we hold them); DPDK checks the queues.
        let ret = unsafe { dpdk_sys::rte_eth_hairpin_bind(tx, rx) };
        if ret < 0 {
            return Err(Error::HairpinUnsupported {
                port: tx,
                driver: self.driver().to_owned(),
                reason: format!(
                    "binding its hairpin TX queues to port {rx}: {}",
                    Errno::from_ret(ret)
                ),
            });
        }
        self.shared
            .hairpin_bound
            .store(u32::from(rx) + 1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Indices of the RX hairpin queues set up with [`crate::PortBuilder::hairpin_queues`]
    /// (empty without them). They are targets for [`crate::FlowAction::Queue`], never for
    /// [`Port::rx_queue`]: the host cannot read them.
    pub fn hairpin_rx_queues(&self) -> Range<u16> {
        self.shared.hairpin_rx.clone()
    }
}
