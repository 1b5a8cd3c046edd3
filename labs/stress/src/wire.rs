//! Threads that live in a lab host's namespace, and packet sockets there: what the crafted
//! sequences, the floods and the captures are made of.

use std::fs::File;
use std::os::fd::IntoRawFd;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use netlab::Netns;
use nix::sched::{setns, CloneFlags};
use nix::sys::socket::{
    setsockopt, socket, sockopt, AddressFamily, SockFlag, SockProtocol, SockType,
};
use pnet_datalink::{Channel, Config, DataLinkReceiver, DataLinkSender};

/// Spawns a thread that enters `ns` and runs `f` there (sockets it opens live in `ns`). Unlike
/// [`Netns::enter`], the caller does not wait: join the handle.
pub fn spawn_in<T: Send + 'static>(
    ns: &Netns,
    name: &str,
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<JoinHandle<Result<T>>> {
    let path = format!("/run/netns/{}", ns.name());
    let file = File::open(&path).with_context(|| format!("opening {path}"))?;
    let handle = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            setns(&file, CloneFlags::CLONE_NEWNET).context("setns")?;
            f()
        })?;
    Ok(handle)
}

/// Joins a thread spawned with [`spawn_in`], turning a panic into an error.
pub fn join<T>(handle: JoinHandle<Result<T>>) -> Result<T> {
    handle
        .join()
        .map_err(|_| anyhow::anyhow!("a lab thread panicked"))?
}

/// A packet socket on one interface of the calling thread's namespace.
pub struct PacketWire {
    /// Sends whole Ethernet frames.
    pub tx: Box<dyn DataLinkSender>,
    /// Receives every frame the interface sees (50 ms read timeout).
    pub rx: Box<dyn DataLinkReceiver>,
    /// The interface's MAC address.
    pub mac: [u8; 6],
}

impl PacketWire {
    /// Opens `iface`; call it on a thread inside the interface's namespace.
    pub fn open(iface: &str) -> Result<Self> {
        Self::open_with(iface, None)
    }

    /// Opens `iface` with a kernel receive buffer of `rcvbuf` bytes (past `net.core.rmem_max`:
    /// the lab runs as root), for a receiver that must lose no frame of a burst.
    pub fn open_buffered(iface: &str, rcvbuf: usize) -> Result<Self> {
        let fd = socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .context("a packet socket")?;
        setsockopt(&fd, sockopt::RcvBufForce, &rcvbuf).context("SO_RCVBUFFORCE")?;
        // pnet binds it to the interface and owns it from here on.
        Self::open_with(iface, Some(fd.into_raw_fd()))
    }

    fn open_with(iface: &str, socket_fd: Option<i32>) -> Result<Self> {
        let interface = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == iface)
            .with_context(|| format!("no interface {iface}"))?;
        let mac = interface.mac.map(|m| m.octets()).unwrap_or_default();
        let config = Config {
            read_timeout: Some(Duration::from_millis(50)),
            read_buffer_size: 1 << 16,
            write_buffer_size: 1 << 16,
            socket_fd,
            ..Config::default()
        };
        match pnet_datalink::channel(&interface, config)? {
            Channel::Ethernet(tx, rx) => Ok(Self { tx, rx, mac }),
            _ => bail!("unexpected channel type on {iface}"),
        }
    }

    /// Sends one frame.
    pub fn send(&mut self, frame: &[u8]) -> Result<()> {
        match self.tx.send_to(frame, None) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(e.into()),
            None => bail!("the packet socket refused a frame"),
        }
    }
}

/// The MAC address of `iface` in `ns`.
pub fn mac_of(ns: &Netns, iface: &str) -> Result<[u8; 6]> {
    let text = ns.exec("cat", &[&format!("/sys/class/net/{iface}/address")])?;
    let mut mac = [0u8; 6];
    let parts: Vec<&str> = text.trim().split(':').collect();
    if parts.len() != 6 {
        bail!("cannot read the MAC address of {iface}: {text:?}");
    }
    for (b, p) in mac.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).with_context(|| format!("MAC of {iface}: {text:?}"))?;
    }
    Ok(mac)
}
