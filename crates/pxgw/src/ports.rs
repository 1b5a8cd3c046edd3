//! Ports configured as the configuration says, or a clear refusal, never a silent fallback.
//!
//! Before the EAL starts, [`preflight`] checks what the host can tell without DPDK: the kernel
//! interface behind an af_packet/af_xdp port exists and has the configured MTU (pxgw never changes
//! a kernel interface's MTU behind the operator's back: it refuses the mismatch), it does not
//! coalesce TCP segments into packets the port's frames cannot hold (GRO or LRO under
//! `net_af_packet`: [`crate::offload_check`]), a PCI device is there, and the process may open
//! raw sockets. DPDK's own EAL log names these causes only among many lines, and `rte_eal_init`
//! then reports a bare "Operation not supported".
//!
//! [`open`] then starts the EAL, the pools and both ports. [`PortPlan`] records what each device
//! granted: the MTU read back, whether it transmits chains (`MULTI_SEGS`: merged packets are
//! chains, SIGCOMM'26 §4), and its segment limit (`nb_seg_max`), which caps the merge engine's
//! chains. Where a device offers LRO (SIGCOMM'26 §4.2: the NIC's first merging stage), the port
//! gets it, as large as the device builds: the pipeline takes a coalesced packet for the run of
//! segments it was.

use std::io;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use dpdk::{
    DeviceInfo, Eal, EalBuilder, HairpinPeer, Mempool, PortId, RssHash, RxOffloads, TxOffloads,
};

use crate::config::{is_pci, Backing, Config, Port, AF_PACKET_FRAME_OVERHEAD};
use crate::offload_check::{self, Coalescing};
use crate::sysfs;

/// `CAP_NET_ADMIN`.
const CAP_NET_ADMIN: u32 = 12;
/// `CAP_NET_RAW`.
const CAP_NET_RAW: u32 = 13;
/// `CAP_SYS_ADMIN`.
const CAP_SYS_ADMIN: u32 = 21;
/// `CAP_BPF`.
const CAP_BPF: u32 = 39;

/// The effective capability set of this process (`CapEff` in `/proc/self/status`), or all bits
/// when it cannot be read (then DPDK's own error will have to do).
pub fn effective_caps() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(u64::MAX)
}

/// The two ports with their names and configured MTUs.
pub fn ports(cfg: &Config) -> [(&'static str, &Port, u16); 2] {
    [
        ("external", &cfg.ports.external, cfg.emtu()),
        ("internal", &cfg.ports.internal, cfg.internal_mtu()),
    ]
}

/// Everything that stops the ports from being configured as `cfg` says, one line each, found
/// without starting DPDK. `root` is sysfs' root, normally [`sysfs::ROOT`]; `caps` the effective
/// capabilities. Kernel interfaces' offloads are read with `SIOCETHTOOL`.
pub fn preflight(cfg: &Config, root: &Path, caps: u64) -> Vec<String> {
    preflight_with(cfg, root, caps, &dpdk::netdev::Features::of)
}

/// [`preflight`], reading kernel interfaces' offloads with `features`.
pub fn preflight_with(
    cfg: &Config,
    root: &Path,
    caps: u64,
    features: &dyn Fn(&str) -> io::Result<dpdk::netdev::Features>,
) -> Vec<String> {
    let has = |cap: u32| caps & (1u64 << cap) != 0;
    let mut problems = Vec::new();
    for (name, port, mtu) in ports(cfg) {
        match port.backing() {
            Backing::Kernel {
                driver,
                iface,
                creates: false,
            } => {
                let Some(kernel) = sysfs::kernel_mtu(root, &iface) else {
                    problems.push(format!(
                        "ports.{name}: interface {iface} does not exist in this network namespace \
                         (device {})",
                        port.device
                    ));
                    continue;
                };
                if kernel != mtu {
                    problems.push(format!(
                        "ports.{name}: configured MTU {mtu} but interface {iface} has MTU \
                         {kernel}; make them equal (`ip link set {iface} mtu {mtu}` or \
                         ports.{name}.mtu = {kernel})"
                    ));
                }
                // Unreadable offloads (an interface without ethtool support) leave DPDK to try.
                if let Ok(f) = features(&iface) {
                    problems.extend(offload_check::refusal(name, port, Coalescing::of(&f)));
                }
                let xdp = driver == "net_af_xdp";
                if !has(CAP_NET_RAW)
                    || (xdp && !(has(CAP_NET_ADMIN) && (has(CAP_BPF) || has(CAP_SYS_ADMIN))))
                {
                    let needs = if xdp {
                        "CAP_NET_RAW, CAP_NET_ADMIN and CAP_BPF"
                    } else {
                        "CAP_NET_RAW"
                    };
                    problems.push(format!(
                        "ports.{name}: permission denied: {driver} needs {needs} to open \
                         {iface} (run pxgw as root)"
                    ));
                }
            }
            Backing::Kernel { driver, .. } => {
                if !has(CAP_NET_ADMIN) {
                    problems.push(format!(
                        "ports.{name}: permission denied: {driver} needs CAP_NET_ADMIN to create \
                         its interface (run pxgw as root)"
                    ));
                }
            }
            Backing::Pci(addr) => {
                let full = if addr.matches(':').count() == 1 {
                    format!("0000:{addr}")
                } else {
                    addr.clone()
                };
                if !sysfs::pci_device_exists(root, &full) {
                    problems.push(format!(
                        "ports.{name}: no PCI device {full} on this machine (lspci -D lists them)"
                    ));
                }
            }
            Backing::Other => {}
        }
    }
    problems
}

/// Whether DPDK's generic MTU limit can be set aside for this port: DPDK 22.11's
/// `net_af_packet` reports `max_rx_pktlen` 1518 whatever its ring, yet receives every frame that
/// fits a ring frame and sends every frame that fits one. The kernel interface enforces the MTU
/// (and [`preflight`] checked it equals the configured one), so the real limit is the ring frame.
pub fn af_packet_holds(port: &Port, mtu: u16) -> bool {
    port.af_packet_framesz()
        .is_some_and(|f| u32::from(mtu) + u32::from(AF_PACKET_FRAME_OVERHEAD) <= u32::from(f))
}

/// What one started port grants pxgw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortPlan {
    /// `external` or `internal`.
    pub name: &'static str,
    /// The driver.
    pub driver: String,
    /// The MTU in effect (read back from DPDK, or from the kernel when the kernel enforces it).
    pub mtu: u16,
    /// The kernel interface's MTU, for kernel-backed ports.
    pub kernel_mtu: Option<u16>,
    /// The device transmits chained mbufs.
    pub multi_segs: bool,
    /// Most segments per transmitted packet.
    pub tx_nb_seg_max: u16,
    /// The largest MTU DPDK accepts for the device.
    pub mtu_limit: u16,
    /// How the MTU was applied, when it was not by DPDK.
    pub note: Option<String>,
    /// With LRO granted, the longest packet it builds (Ethernet header included; 0: one frame
    /// of the MTU, the driver's own limit).
    pub lro: Option<u32>,
    /// The kernel interface's offloads, for kernel-backed ports whose interface answers.
    pub kernel_offloads: Option<String>,
    /// What the operator should know that pxgw cannot check (logged at start, printed by
    /// `--check`).
    pub warnings: Vec<String>,
}

impl PortPlan {
    /// The `--check` line for this port.
    pub fn describe(&self, port: &Port) -> String {
        let kernel = match (&port.backing(), self.kernel_mtu) {
            (Backing::Kernel { iface, .. }, Some(k)) => format!(", interface {iface} MTU {k}"),
            _ => String::new(),
        };
        let ring = port
            .af_packet_framesz()
            .map(|f| {
                format!(
                    ", af_packet ring {} frames of {f} B",
                    port.device_arg("framecnt").unwrap_or("512")
                )
            })
            .unwrap_or_default();
        let lro = match self.lro {
            Some(0) => "; LRO on (packets of one frame)".to_owned(),
            Some(n) => format!("; LRO on (packets up to {n} B)"),
            None => String::new(),
        };
        let offloads = self
            .kernel_offloads
            .as_deref()
            .map(|o| format!("; {o}"))
            .unwrap_or_default();
        format!(
            "ports.{}: {} ({}): MTU {}{kernel} (DPDK allows up to {}); chained TX (MULTI_SEGS) {}; \
             tx nb_seg_max {}; descriptors rx {} tx {}{ring}{lro}{offloads}{}",
            self.name,
            port.device_name(),
            self.driver,
            self.mtu,
            self.mtu_limit,
            if self.multi_segs {
                "yes"
            } else {
                "no: chains are copied into one buffer before sending"
            },
            self.tx_nb_seg_max,
            port.rx_descriptors,
            port.tx_descriptors,
            self.note
                .as_deref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default(),
        )
    }
}

/// The EAL's file prefix unless `[eal] args` sets one: telemetry's socket directory.
const FILE_PREFIX: &str = "pxgw";

/// The EAL, the pools and the two started ports, checked against the configuration.
pub struct Gateway {
    /// The EAL the ports run on.
    pub eal: Eal,
    /// The packet pool: every received frame, and the flattened copies of chains.
    pub pool: Arc<Mempool>,
    /// The header pool: headers the pipeline builds, and header-only DMA's buffers.
    pub headers: Arc<Mempool>,
    /// The external port.
    pub ext: dpdk::Port,
    /// The internal port.
    pub int: dpdk::Port,
    /// What each port granted: external, internal.
    pub plans: [PortPlan; 2],
}

/// Starts the EAL with the ports' devices and `[eal]`.
fn start_eal(cfg: &Config) -> Result<Eal> {
    // Telemetry stays on: `dpdk-telemetry.py -f pxgw` shows the ports (`/ethdev/stats,N`) and
    // pxgw's own counters (`/pxgw/stats`), from the socket under /var/run/dpdk/pxgw/ (a second
    // instance gets the next `-i` index).
    let mut eal = EalBuilder::new("pxgw").memory_mb(cfg.eal.memory_mb);
    if !cfg.eal.args.iter().any(|a| a.starts_with("--file-prefix")) {
        eal = eal.arg(format!("--file-prefix={FILE_PREFIX}"));
    }
    if cfg.eal.no_huge {
        eal = eal.no_huge().no_shconf();
    }
    let mut pci = false;
    for d in [&cfg.ports.external.device, &cfg.ports.internal.device] {
        if is_pci(d) {
            pci = true;
            eal = eal.arg("-a").arg(d.clone());
        } else {
            eal = eal.vdev(d);
        }
    }
    if !pci {
        eal = eal.no_pci();
    }
    for a in &cfg.eal.args {
        eal = eal.arg(a.clone());
    }
    Ok(eal.init()?)
}

/// The largest `framesz=` among the vdev strings (net_af_packet), if any.
fn framesz(cfg: &Config) -> Option<u32> {
    [&cfg.ports.external.device, &cfg.ports.internal.device]
        .iter()
        .flat_map(|d| d.split(','))
        .filter_map(|kv| kv.strip_prefix("framesz="))
        .filter_map(|v| v.parse().ok())
        .max()
}

/// The most buffers an lcore's cache of `size` keeps: DPDK's mempool flushes a cache back to
/// the shared ring only once it holds more than 1.5 times its size. No other lcore can take
/// them, so a pool shared by workers needs this much per worker beyond what they share.
pub const fn cache_keeps(size: u32) -> u32 {
    size * 3 / 2
}

/// Each worker's (lcore's) cache of packet mbufs (`workers.pool_size` counts what it may keep:
/// `crate::config`).
pub const PACKET_POOL_CACHE: u32 = 256;

/// Header buffers every worker can take from, beyond what the workers' caches keep.
pub const HEADER_POOL_SHARED: u32 = 16_383;

/// Each worker's (lcore's) cache of header buffers: DPDK's largest, 512.
///
/// A worker takes two header buffers for every piece it splits in software (its header, and a
/// view of its payload) and returns them when the burst is sent. A burst of 32 inside segments
/// of 8,948 B split to 1,500 B takes about 450. With a cache of 256, DPDK's mempool flushes
/// back to the shared ring at 384 and refills from it, and the ring hands out the buffers
/// returned longest ago, cold in every cache: each header the split writes then misses the
/// last-level cache. With 512 (flushed at 768) a burst's buffers are the ones the last burst
/// returned. The gateway bench's outbound TCP without offloads ran at 435 ns per frame with
/// 256 and at 212–218 ns with 512.
pub const HEADER_POOL_CACHE: u32 = 512;

/// The most header buffers one worker's cache keeps ([`cache_keeps`]).
pub const HEADER_POOL_CACHE_MAX: u32 = cache_keeps(HEADER_POOL_CACHE);

/// The header pool's size for `workers` workers: [`HEADER_POOL_SHARED`] plus what each
/// worker's cache may keep ([`HEADER_POOL_CACHE_MAX`]), rounded up to a power of two less one
/// (the size DPDK's ring-backed pools use best). A fixed size would leave less to share with
/// every worker: at 22 workers and more, full caches would hold the whole pool, and a worker
/// whose cache ran dry would find nothing to build with.
pub fn header_pool_size(workers: u16) -> u32 {
    let n = HEADER_POOL_SHARED + u32::from(workers) * HEADER_POOL_CACHE_MAX;
    (n + 1).next_power_of_two() - 1
}

/// The pool of header buffers (256 B each) `workers` workers build with: merged items' and
/// split pieces' headers, the views of payload they share, caravans' outer headers.
pub fn header_pool(eal: &Eal, name: &str, workers: u16) -> dpdk::Result<Arc<Mempool>> {
    Mempool::new(eal, name, header_pool_size(workers), HEADER_POOL_CACHE, 256)
}

/// Starts the EAL, the pools and both ports as `cfg` says, hairpinned where both ports can
/// (SIGCOMM'26 §4.4); every refusal is one line naming the port and the limit.
pub fn open(cfg: &Config) -> Result<Gateway> {
    let eal = start_eal(cfg)?;
    // Mbufs must hold a whole frame of the larger MTU (net_af_packet: a whole ring frame).
    let frame = u32::from(cfg.internal_mtu()) + 14 + 8;
    let data_room = framesz(cfg).unwrap_or(0).max(frame).min(65535 - 128) + 128;
    let pool = Mempool::new(
        &eal,
        "pxgw_rx",
        cfg.workers.pool_size,
        PACKET_POOL_CACHE,
        data_room as u16,
    )
    .context("creating the packet pool")?;
    let headers =
        header_pool(&eal, "pxgw_hdr", cfg.workers.count).context("creating the header pool")?;
    // Hairpin queues only when both ports have them: what the external port leaves on the NIC
    // leaves by the internal one (an RX hairpin queue outside, a TX hairpin queue inside; each
    // port gets a pair, the unused halves stay idle). Otherwise every flow goes to the CPU
    // (reported when the rule manager starts).
    let ids: Vec<Option<PortId>> = ports(cfg)
        .iter()
        .map(|(_, pc, _)| eal.port_by_name(pc.device_name()).ok())
        .collect();
    let hairpin = match (cfg.queues.hairpin, ids[0], ids[1]) {
        (true, Some(e), Some(i)) => {
            let caps = [e, i].map(|id| dpdk::hairpin_capability(&eal, id));
            for (c, name) in caps.iter().zip(["external", "internal"]) {
                if let Err(e) = c {
                    tracing::debug!("ports.{name}: {e}");
                }
            }
            caps.iter().all(Result::is_ok).then_some((e, i))
        }
        _ => None,
    };
    let n = crate::queues::rx_queue_count(cfg);
    let peer = |port, sample_queue: bool| HairpinPeer {
        port,
        rx_base: n + u16::from(sample_queue),
        tx_base: n,
    };
    let (ext, ext_plan) = open_port(
        &eal,
        &pool,
        &headers,
        cfg,
        0,
        hairpin.map(|(_, i)| peer(i, false)),
    )?;
    let (int, int_plan) = open_port(
        &eal,
        &pool,
        &headers,
        cfg,
        1,
        hairpin.map(|(e, _)| peer(e, true)),
    )?;
    if hairpin.is_some() {
        // Only flow rules fill the sample queue: the port's own RSS leaves it out, so no frame
        // lands where no worker reads it, whatever happens to the rules.
        ext.set_rss_queues(&(0..n).collect::<Vec<_>>())
            .context("ports.external: keeping the hairpin sample queue out of RSS")?;
        // What the external port hairpins leaves by the internal one.
        int.hairpin_bind(&ext).context("ports.internal: hairpin")?;
    }
    Ok(Gateway {
        eal,
        pool,
        headers,
        ext,
        int,
        plans: [ext_plan, int_plan],
    })
}

/// Starts port `which` (0 external, 1 internal) with its configured MTU and rings, and reads back
/// what it granted; every refusal is one line naming the port and the limit.
fn open_port(
    eal: &Eal,
    pool: &Arc<Mempool>,
    headers: &Arc<Mempool>,
    cfg: &Config,
    which: usize,
    hairpin_peer: Option<HairpinPeer>,
) -> Result<(dpdk::Port, PortPlan)> {
    let (name, pc, mtu) = ports(cfg)[which];
    let device = pc.device_name();
    let id = eal.port_by_name(device).map_err(|_| match pc.backing() {
        Backing::Pci(addr) => anyhow!(
            "ports.{name}: DPDK found no port for PCI device {addr}: is it bound to a DPDK-capable \
             driver (vfio-pci, or a bifurcated one such as mlx5)?"
        ),
        _ => anyhow!("ports.{name}: DPDK created no port named {device}"),
    })?;
    let info = DeviceInfo::of(eal, id).with_context(|| format!("ports.{name}"))?;
    let mut note = None;
    let apply_mtu = match info.check_mtu(mtu) {
        Ok(()) => true,
        Err(_) if af_packet_holds(pc, mtu) => {
            note = Some(format!(
                "DPDK's net_af_packet limit (max_rx_pktlen {}) set aside: its ring frames hold \
                 MTU {mtu} and the kernel interface enforces it",
                info.max_rx_pktlen
            ));
            false
        }
        Err(reason) => bail!(
            "ports.{name}: {} cannot take the configured MTU {mtu}: {reason}",
            info.driver
        ),
    };
    let mut builder = dpdk::Port::builder(eal, id)
        .rx_queues(crate::queues::rx_queue_count(cfg))
        // As many TX queues as RX queues (net_tap requires it); workers use the first
        // `workers.count`, the others stay empty.
        .tx_queues(crate::queues::rx_queue_count(cfg))
        .descriptors(pc.rx_descriptors, pc.tx_descriptors)
        .rss(RssHash::IP | RssHash::TCP | RssHash::UDP)
        // Both directions of a connection on one worker (pxgw::worker docs).
        .rss_key(cfg.rss.key().context("rss.key")?.bytes())
        .tx_offloads(
            TxOffloads::MULTI_SEGS
                | TxOffloads::TCP_TSO
                | TxOffloads::IPV4_CKSUM
                | TxOffloads::TCP_CKSUM,
        )
        // Where the device verifies checksums on receive, the merge engine trusts its verdicts
        // instead of summing every segment itself (about 85 ns per 1448 B segment here), and
        // takes its run path. Granted only where the device offers them.
        .rx_offloads(RxOffloads::IPV4_CKSUM | RxOffloads::TCP_CKSUM | RxOffloads::UDP_CKSUM);
    if apply_mtu {
        builder = builder.mtu(mtu);
    }
    if cfg.queues.header_split {
        // Refused by start() on a device without buffer split: never emulated.
        builder = builder.header_split(cfg.queues.header_bytes, headers.clone());
    }
    if info.lro() {
        // As large as the device builds: an IPv4 packet's length is 16 bits, so nothing above
        // 64 KB and its Ethernet header is asked for.
        builder = builder.lro(u32::from(u16::MAX) + 14);
    }
    if let Some(peer) = hairpin_peer {
        // One hairpin queue pair, peered with the other port's; outside, one more RX queue: the
        // sample the heavy-hitter monitor reads (pxgw::queues).
        builder = builder
            .hairpin_queues(1)
            .hairpin_peer(peer)
            .rx_queues(crate::queues::rx_queue_count(cfg) + u16::from(which == 0));
    }
    let port = builder.start(pool).map_err(|e| match e {
        dpdk::Error::Mtu { .. } => anyhow!("ports.{name}: {e}"),
        e => anyhow!("ports.{name}: starting {}: {e}", pc.device),
    })?;
    let dpdk_mtu = port.mtu().with_context(|| format!("ports.{name}"))?;
    let kernel_mtu = match pc.backing() {
        Backing::Kernel { iface, .. } => {
            let k = sysfs::kernel_mtu(Path::new(sysfs::ROOT), &iface);
            if k != Some(mtu) {
                bail!(
                    "ports.{name}: configured MTU {mtu} but interface {iface} has MTU {} after \
                     the port started",
                    k.map_or("(unknown)".into(), |k| k.to_string())
                );
            }
            k
        }
        _ => None,
    };
    if apply_mtu && dpdk_mtu != mtu {
        bail!("ports.{name}: configured MTU {mtu} but the device kept MTU {dpdk_mtu}");
    }
    let kernel = match pc.backing() {
        Backing::Kernel { iface, .. } => dpdk::netdev::Features::of(&iface).ok(),
        _ => None,
    };
    let warnings: Vec<String> = kernel
        .as_ref()
        .and_then(|f| offload_check::veth_warning(name, pc, &f.driver))
        .into_iter()
        .collect();
    let lro = port.lro_max_pkt_size();
    if let Some(size) = lro {
        tracing::info!(
            port = name,
            max_lro_pkt_size = size,
            scatter = port.rx_offloads().contains(RxOffloads::SCATTER),
            "LRO on: the device coalesces TCP segments, the pipeline takes each packet for its run"
        );
    }
    let plan = PortPlan {
        name,
        driver: info.driver.clone(),
        mtu: if apply_mtu { dpdk_mtu } else { mtu },
        kernel_mtu,
        multi_segs: port.tx_offloads().contains(TxOffloads::MULTI_SEGS),
        tx_nb_seg_max: info.tx_desc.nb_seg_max,
        mtu_limit: info.mtu_limit(),
        note,
        lro,
        kernel_offloads: kernel.as_ref().map(offload_check::describe),
        warnings,
    };
    Ok((port, plan))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ext: &str, int: &str) -> Config {
        Config::parse(&format!(
            "[ports.external]\ndevice = \"{ext}\"\nmtu = 1500\n\
             [ports.internal]\ndevice = \"{int}\"\nmtu = 9000\n"
        ))
        .unwrap()
    }

    /// A fake `/sys` with interfaces of the given MTUs.
    fn sysfs(ifaces: &[(&str, u16)]) -> tempdir::TempSys {
        let t = tempdir::TempSys::new();
        for (name, mtu) in ifaces {
            let dir = t.path().join("class/net").join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("mtu"), format!("{mtu}\n")).unwrap();
        }
        t
    }

    mod tempdir {
        /// A throw-away directory, removed on drop.
        pub struct TempSys(std::path::PathBuf);
        impl TempSys {
            pub fn new() -> Self {
                static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let p = std::env::temp_dir().join(format!("pxgw-sysfs-{}-{n}", std::process::id()));
                std::fs::create_dir_all(&p).unwrap();
                Self(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for TempSys {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const EXT: &str = "net_af_packet0,iface=ext0,framesz=2048";
    const INT: &str = "net_af_packet1,iface=int0,framesz=10240,blocksz=40960";

    #[test]
    fn matching_interfaces_pass() {
        let sys = sysfs(&[("ext0", 1500), ("int0", 9000)]);
        assert_eq!(
            preflight(&cfg(EXT, INT), sys.path(), u64::MAX),
            Vec::<String>::new()
        );
    }

    #[test]
    fn an_mtu_mismatch_is_one_line_naming_both() {
        let sys = sysfs(&[("ext0", 1500), ("int0", 1500)]);
        let problems = preflight(&cfg(EXT, INT), sys.path(), u64::MAX);
        assert_eq!(
            problems,
            vec![
                "ports.internal: configured MTU 9000 but interface int0 has MTU 1500; make them \
                  equal (`ip link set int0 mtu 9000` or ports.internal.mtu = 1500)"
            ]
        );
    }

    #[test]
    fn a_missing_interface_is_named() {
        let sys = sysfs(&[("int0", 9000)]);
        let problems = preflight(&cfg(EXT, INT), sys.path(), u64::MAX);
        assert_eq!(
            problems,
            vec![
                "ports.external: interface ext0 does not exist in this network namespace \
                  (device net_af_packet0,iface=ext0,framesz=2048)"
            ]
        );
    }

    #[test]
    fn no_raw_socket_capability_is_permission_denied() {
        let sys = sysfs(&[("ext0", 1500), ("int0", 9000)]);
        let problems = preflight(&cfg(EXT, INT), sys.path(), 0);
        assert_eq!(problems.len(), 2);
        assert_eq!(
            problems[0],
            "ports.external: permission denied: net_af_packet needs CAP_NET_RAW to open ext0 \
             (run pxgw as root)"
        );
    }

    #[test]
    fn a_missing_pci_device_is_named() {
        let sys = sysfs(&[("int0", 9000)]);
        let problems = preflight(&cfg("3b:00.0", INT), sys.path(), u64::MAX);
        assert_eq!(
            problems,
            vec![
                "ports.external: no PCI device 0000:3b:00.0 on this machine (lspci -D lists them)"
            ]
        );
    }

    /// A features reader with GRO on `gro_on`, off elsewhere; interfaces not in `ifaces` have
    /// no offloads to read.
    fn gro_reader(
        ifaces: &'static [&'static str],
        gro_on: &'static str,
    ) -> impl Fn(&str) -> io::Result<dpdk::netdev::Features> {
        move |iface: &str| {
            if !ifaces.contains(&iface) {
                return Err(io::Error::from_raw_os_error(ENODEV));
            }
            Ok(dpdk::netdev::Features {
                iface: iface.to_owned(),
                driver: "ixgbe".into(),
                features: vec![dpdk::netdev::Feature {
                    name: "rx-gro".into(),
                    active: iface == gro_on,
                    changeable: true,
                }],
            })
        }
    }

    /// ENODEV, as the ioctl answers for a missing interface.
    const ENODEV: i32 = 19;

    #[test]
    fn gro_under_an_af_packet_port_is_one_more_line() {
        let sys = sysfs(&[("ext0", 1500), ("int0", 9000)]);
        let reader = gro_reader(&["ext0", "int0"], "int0");
        let problems = preflight_with(&cfg(EXT, INT), sys.path(), u64::MAX, &reader);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("ports.internal: interface int0 has GRO on:")
                && problems[0].ends_with("`ethtool -K int0 gro off lro off`"),
            "{}",
            problems[0]
        );
        // GRO off everywhere, or offloads that cannot be read: nothing more to say.
        let off = gro_reader(&["ext0", "int0"], "none");
        assert!(preflight_with(&cfg(EXT, INT), sys.path(), u64::MAX, &off).is_empty());
        let unreadable = gro_reader(&[], "int0");
        assert!(preflight_with(&cfg(EXT, INT), sys.path(), u64::MAX, &unreadable).is_empty());
        // A mismatched MTU and GRO on are two lines, each with its fix.
        let sys = sysfs(&[("ext0", 1500), ("int0", 1500)]);
        let problems = preflight_with(&cfg(EXT, INT), sys.path(), u64::MAX, &reader);
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn af_packet_ring_frames_bound_the_mtu() {
        let c = cfg(EXT, INT);
        assert!(af_packet_holds(&c.ports.internal, 9000));
        assert!(!af_packet_holds(&c.ports.external, 2000));
        assert!(af_packet_holds(&c.ports.external, 1500));
    }
}
