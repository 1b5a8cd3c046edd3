//! What pxgw reads of the kernel's sysfs about the devices behind its ports: a kernel
//! interface's MTU and counters (af_packet, af_xdp and tap ports), and whether a PCI device is
//! there. Every reader takes the sysfs root, so tests point it at a directory of their own.

use std::path::Path;

use crate::stats::KernelSample;

/// Where the kernel's sysfs is mounted.
pub const ROOT: &str = "/sys";

/// The MTU of kernel interface `iface`, from `sysfs` (normally [`ROOT`]).
pub fn kernel_mtu(sysfs: &Path, iface: &str) -> Option<u16> {
    std::fs::read_to_string(sysfs.join("class/net").join(iface).join("mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The kernel's counters of interface `iface` under `sysfs` (normally [`ROOT`]); `None` when it
/// has none.
pub fn kernel_counters(sysfs: &Path, iface: &str) -> Option<KernelSample> {
    let dir = sysfs.join("class/net").join(iface).join("statistics");
    let get = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(KernelSample {
        rx_packets: get("rx_packets")?,
        rx_dropped: get("rx_dropped")?,
        tx_packets: get("tx_packets")?,
        tx_dropped: get("tx_dropped")?,
    })
}

/// Whether PCI device `full` (with its domain: `0000:3b:00.0`) is on this machine, under
/// `sysfs` (normally [`ROOT`]).
pub fn pci_device_exists(sysfs: &Path, full: &str) -> bool {
    sysfs.join("bus/pci/devices").join(full).exists()
}
