//! What the kernel says about a network interface behind a kernel-backed port (`net_af_packet`,
//! `net_tap`, `net_af_xdp`): its driver and its offload features, as `ethtool -i` and
//! `ethtool -k` show them, read with the `SIOCETHTOOL` ioctl (no `ethtool` binary needed, and no
//! privilege: reading is open to every user).
//!
//! A packet socket receives what the kernel's stack holds: with GRO or LRO on, TCP segments
//! already coalesced into packets of up to 64 KB, which DPDK 22.11's `net_af_packet` cuts to its
//! ring frame without a word. Callers compare [`Features`] with what their frames hold.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ETHTOOL_GDRVINFO`: driver information.
const ETHTOOL_GDRVINFO: u32 = 0x03;
/// `ETHTOOL_GSTRINGS`: the names of a string set.
const ETHTOOL_GSTRINGS: u32 = 0x1b;
/// `ETHTOOL_GSSET_INFO`: the sizes of string sets.
const ETHTOOL_GSSET_INFO: u32 = 0x37;
/// `ETHTOOL_GFEATURES`: the feature bits.
const ETHTOOL_GFEATURES: u32 = 0x3a;
/// `ETH_SS_FEATURES`: the string set naming the feature bits.
const ETH_SS_FEATURES: u32 = 4;
/// `ETH_GSTRING_LEN`: bytes per name in a string set.
const ETH_GSTRING_LEN: usize = 32;
/// Most feature bits a kernel has had (64 today); anything far above is a corrupt answer.
const MAX_FEATURES: u32 = 1024;

/// One offload feature of an interface, as `ethtool -k` lists it (by its kernel name:
/// `rx-gro`, `rx-lro`, `tx-tcp-segmentation`...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feature {
    /// The kernel's name of the feature (`rx-gro` is what `ethtool -k` shows as
    /// `generic-receive-offload`).
    pub name: String,
    /// In effect now.
    pub active: bool,
    /// The driver lets it be switched (`ethtool -k` marks the others `[fixed]`).
    pub changeable: bool,
}

/// The driver and offload features of one kernel interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Features {
    /// The interface.
    pub iface: String,
    /// Its driver (`veth`, `tun`, `ixgbe`, ...), as `ethtool -i` shows it; empty when the
    /// interface states none (loopback).
    pub driver: String,
    /// Every feature the kernel names, in its order.
    pub features: Vec<Feature>,
}

impl Features {
    /// Reads the driver and offload features of interface `iface` in this process's network
    /// namespace. Errors name the interface and the request (`ENODEV`: no such interface).
    pub fn of(iface: &str) -> io::Result<Self> {
        let socket = Control::open(iface)?;
        // Some interfaces (loopback) have no driver information; their features still read.
        let driver = match socket.driver() {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => String::new(),
            other => other?,
        };
        let names = socket.feature_names()?;
        let blocks = socket.feature_blocks(names.len())?;
        let features = names
            .into_iter()
            .enumerate()
            .map(|(i, name)| {
                let block = blocks[i / 32];
                let bit = 1u32 << (i % 32);
                Feature {
                    name,
                    active: block.active & bit != 0,
                    changeable: block.available & bit != 0 && block.never_changed & bit == 0,
                }
            })
            .collect();
        Ok(Self {
            iface: iface.to_owned(),
            driver,
            features,
        })
    }

    /// Whether feature `name` (a kernel name, `rx-gro`) is in effect; `None` when this kernel
    /// has no such feature.
    pub fn active(&self, name: &str) -> Option<bool> {
        self.features
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.active)
    }
}

/// The block of four words `ETHTOOL_GFEATURES` answers per 32 features.
#[derive(Clone, Copy, Debug, Default)]
struct Block {
    available: u32,
    active: u32,
    never_changed: u32,
}

/// A datagram socket to send `SIOCETHTOOL` through, for one interface.
struct Control {
    fd: OwnedFd,
    name: [libc::c_char; libc::IFNAMSIZ],
    iface: String,
}

impl Control {
    fn open(iface: &str) -> io::Result<Self> {
        let bytes = iface.as_bytes();
        if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{iface:?} is not an interface name"),
            ));
        }
        let mut name = [0 as libc::c_char; libc::IFNAMSIZ];
        for (d, s) in name.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: plain socket(2); the result is checked before it is owned.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("{iface}: a socket for SIOCETHTOOL: {e}"),
            ));
        }
        Ok(Self {
            // SAFETY: `fd` is a new descriptor nobody else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            name,
            iface: iface.to_owned(),
        })
    }

    /// Sends ethtool command `data` (whose first word is the command) for the interface.
    ///
    /// # Safety
    /// `data` must point to a buffer laid out as the command's structure, valid for reads and
    /// writes of the whole size the kernel uses for that command and the lengths inside it.
    unsafe fn ethtool(&self, op: &'static str, data: *mut u8) -> io::Result<()> {
        // SAFETY: ifreq is plain data; all zeroes is a valid value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        ifr.ifr_name = self.name;
        ifr.ifr_ifru.ifru_data = data.cast();
        // SAFETY: `ifr` names the interface and points at `data`, which the caller vouches for;
        // the kernel reads and writes no more than the command's structure and the lengths in it.
        let ret = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("{}: SIOCETHTOOL {op}: {e}", self.iface),
            ));
        }
        Ok(())
    }

    /// The driver's name (`ETHTOOL_GDRVINFO`).
    fn driver(&self) -> io::Result<String> {
        // struct ethtool_drvinfo: cmd, then driver[32], version[32], fw_version[32],
        // bus_info[32], erom_version[32], reserved2[12], then five u32: 196 bytes.
        let mut buf = [0u32; 49];
        buf[0] = ETHTOOL_GDRVINFO;
        // SAFETY: `buf` is 196 bytes, the size of struct ethtool_drvinfo, aligned for its words.
        unsafe { self.ethtool("ETHTOOL_GDRVINFO", buf.as_mut_ptr().cast())? };
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let driver = &bytes[4..4 + 32];
        Ok(CStr::from_bytes_until_nul(driver)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default())
    }

    /// The names of the feature bits (`ETHTOOL_GSSET_INFO`, then `ETHTOOL_GSTRINGS`).
    fn feature_names(&self) -> io::Result<Vec<String>> {
        // struct ethtool_sset_info: cmd, reserved, u64 sset_mask, then one u32 per set asked.
        let mut info = [0u32; 5];
        info[0] = ETHTOOL_GSSET_INFO;
        let mask = 1u64 << ETH_SS_FEATURES;
        info[2..4].copy_from_slice(&[mask as u32, (mask >> 32) as u32]);
        if cfg!(target_endian = "big") {
            info.swap(2, 3);
        }
        // SAFETY: `info` holds the header (16 bytes) and one answer word: one set is asked.
        unsafe { self.ethtool("ETHTOOL_GSSET_INFO", info.as_mut_ptr().cast())? };
        let answered = u64::from(info[2]) | (u64::from(info[3]) << 32);
        if answered & mask == 0 {
            return Ok(Vec::new());
        }
        let count = info[4].min(MAX_FEATURES);
        // struct ethtool_gstrings: cmd, string_set, len, then len names of 32 bytes.
        let mut strings = vec![0u32; 3 + count as usize * ETH_GSTRING_LEN / 4];
        strings[..3].copy_from_slice(&[ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count]);
        // SAFETY: `strings` holds the 12-byte header and `count` names of 32 bytes, the most the
        // kernel writes for the set's size it just gave.
        unsafe { self.ethtool("ETHTOOL_GSTRINGS", strings.as_mut_ptr().cast())? };
        let len = strings[2].min(count) as usize;
        let bytes: Vec<u8> = strings[3..].iter().flat_map(|w| w.to_ne_bytes()).collect();
        Ok(bytes
            .chunks(ETH_GSTRING_LEN)
            .take(len)
            .map(|name| {
                CStr::from_bytes_until_nul(name)
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| String::from_utf8_lossy(name).into_owned())
            })
            .collect())
    }

    /// The feature bits (`ETHTOOL_GFEATURES`) for `count` features.
    fn feature_blocks(&self, count: usize) -> io::Result<Vec<Block>> {
        let blocks = count.div_ceil(32);
        // struct ethtool_gfeatures: cmd, size, then `size` blocks of available, requested,
        // active, never_changed.
        let mut buf = vec![0u32; 2 + 4 * blocks];
        buf[0] = ETHTOOL_GFEATURES;
        buf[1] = blocks as u32;
        // SAFETY: `buf` holds the 8-byte header and `blocks` blocks of 16 bytes, the size given.
        unsafe { self.ethtool("ETHTOOL_GFEATURES", buf.as_mut_ptr().cast())? };
        Ok(buf[2..]
            .chunks_exact(4)
            .map(|b| Block {
                available: b[0],
                active: b[2],
                never_changed: b[3],
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_its_features() {
        // Every namespace has `lo`; its driver answers ETHTOOL_GFEATURES like any other.
        let f = Features::of("lo").unwrap();
        assert!(f.features.len() >= 32, "{f:?}");
        assert!(f.active("rx-gro").is_some(), "{f:?}");
        assert_eq!(f.active("no-such-feature"), None);
    }

    #[test]
    fn a_missing_interface_is_an_error_naming_it() {
        let e = Features::of("pxnosuchif0").unwrap_err();
        assert!(e.to_string().contains("pxnosuchif0"), "{e}");
        assert!(Features::of("").is_err());
        assert!(Features::of("a-name-far-too-long").is_err());
    }
}
