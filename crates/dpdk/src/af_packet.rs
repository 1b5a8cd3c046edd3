//! Frames a `net_af_packet` port's kernel ring dropped, which DPDK 22.11 never reports.
//!
//! When a packet socket's RX ring is full, the kernel drops the frame and counts it only in that
//! socket's `PACKET_STATISTICS` (`tp_drops`): not in the interface's `rx_dropped`, nor anywhere
//! else a user can read. DPDK 22.11's `net_af_packet` never asks for it, so its `imissed` stays 0
//! while frames are lost, and a loss no counter shows is one no operator can find.
//! [`take_ring_drops`] reads it from the process's own packet sockets bound to the port's
//! interface; [`crate::Port::stats`] adds it to `imissed`, where every other driver counts a full
//! RX ring.

use std::os::fd::RawFd;

/// Reads, and so clears (the kernel resets the counters on every read), the ring drops of every
/// packet socket of this process bound to interface `if_index`: DPDK's `net_af_packet` opens one
/// per queue pair. Sockets that cannot be inspected count nothing.
pub(crate) fn take_ring_drops(if_index: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    let mut drops = 0;
    for entry in dir.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        if is_socket && packet_socket_on(fd, if_index) {
            drops += u64::from(take_drops(fd));
        }
    }
    drops
}

/// Whether `fd` is a packet socket bound to interface `if_index`.
fn packet_socket_on(fd: RawFd, if_index: u32) -> bool {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `domain` and `len` are valid for writes of the sizes given; an `fd` that is not a
    // socket (or no longer open) makes the call fail, which is checked.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if ret != 0 || domain != libc::AF_PACKET {
        return false;
    }
    // SAFETY: sockaddr_ll is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `addr` is a sockaddr_ll, the address type of a packet socket, valid for `len`
    // bytes of writes; failure is checked.
    let ret =
        unsafe { libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_ll).cast(), &mut len) };
    ret == 0 && u32::try_from(addr.sll_ifindex).is_ok_and(|i| i == if_index)
}

/// The socket's ring drops since the last read (`PACKET_STATISTICS`, which the kernel resets).
fn take_drops(fd: RawFd) -> u32 {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: `stats` is valid for `len` bytes of writes; with a TPACKET_V2 ring (DPDK 22.11's)
    // the kernel writes a `tpacket_stats`, and never more than `len`. Failure is checked.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if ret == 0 {
        stats.tp_drops
    } else {
        0
    }
}
