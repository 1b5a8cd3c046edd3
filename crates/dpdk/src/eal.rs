//! The Environment Abstraction Layer: initialised once per process, cleaned up when the last user
//! (the [`Eal`] value, every [`Mempool`](crate::Mempool) and [`Port`](crate::Port)) is gone.

use std::ffi::{c_char, c_int, CString};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Errno, Error, Result};

/// Set by the first `init` attempt that gets past argument parsing; DPDK allows one EAL per
/// process, even after `rte_eal_cleanup`.
static CLAIMED: AtomicBool = AtomicBool::new(false);

/// A DPDK ethdev port id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Builds the EAL command line. Every method appends one DPDK argument, in order.
///
/// ```no_run
/// let eal = dpdk::EalBuilder::new("pxgw")
///     .no_huge()
///     .memory_mb(512)
///     .no_pci()
///     .vdev("net_af_packet0,iface=veth0")
///     .init()?;
/// # Ok::<(), dpdk::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct EalBuilder {
    args: Vec<String>,
}

impl EalBuilder {
    /// Starts a command line whose `argv[0]` is `program`.
    pub fn new(program: &str) -> Self {
        Self {
            args: vec![program.to_owned()],
        }
    }

    /// An EAL that needs no hardware: no hugepages (anonymous memory, 512 MB), no PCI scan, no
    /// shared files, no telemetry socket, one lcore, warnings only. Enough for mempools, vdevs
    /// (`net_ring`, `net_null`, `net_af_packet`, `net_tap`) and the TSC: what tests, labs and
    /// single-core benchmarks run on.
    pub fn no_hardware(program: &str) -> Self {
        Self::new(program)
            .no_huge()
            .memory_mb(512)
            .no_pci()
            .no_shconf()
            .no_telemetry()
            .lcores("0")
            .log_level("warning")
    }

    /// Appends a raw EAL argument, for options without a method here.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// `--no-huge`: anonymous memory instead of hugepages.
    pub fn no_huge(self) -> Self {
        self.arg("--no-huge")
    }

    /// `-m MB`: memory to reserve.
    pub fn memory_mb(self, mb: u32) -> Self {
        self.arg("-m").arg(mb.to_string())
    }

    /// `--no-pci`: do not scan the PCI bus.
    pub fn no_pci(self) -> Self {
        self.arg("--no-pci")
    }

    /// `--in-memory`: no shared runtime files, so several processes may run side by side.
    /// DPDK 22.11 refuses it together with `--no-huge` (which implies legacy memory); use
    /// [`no_shconf`](Self::no_shconf) there.
    pub fn in_memory(self) -> Self {
        self.arg("--in-memory")
    }

    /// `--no-shconf`: no shared configuration files. With `--no-huge` this is the way to run
    /// several DPDK processes side by side, since DPDK 22.11 refuses `--in-memory` there.
    pub fn no_shconf(self) -> Self {
        self.arg("--no-shconf")
    }

    /// `--no-telemetry`: no telemetry socket thread.
    pub fn no_telemetry(self) -> Self {
        self.arg("--no-telemetry")
    }

    /// `-l LIST`: the lcores to run on; the first is the main lcore (the calling thread).
    pub fn lcores(self, list: &str) -> Self {
        self.arg("-l").arg(list)
    }

    /// `--vdev=SPEC`: a virtual device such as `net_ring0` or `net_af_packet0,iface=veth0`.
    pub fn vdev(self, spec: &str) -> Self {
        self.arg(format!("--vdev={spec}"))
    }

    /// `--log-level=LEVEL`.
    pub fn log_level(self, level: &str) -> Self {
        self.arg(format!("--log-level={level}"))
    }

    /// The arguments so far, `argv[0]` included.
    pub fn args(&self) -> &[String] {
        &self.args
    }

    /// Runs `rte_eal_init`. The calling thread becomes the main lcore.
    ///
    /// Fails with [`Error::AlreadyInitialised`] on a second call in the same process, and with
    /// [`Error::EalInit`] when DPDK rejects the arguments or cannot start.
    pub fn init(self) -> Result<Eal> {
        let argv: Vec<CString> = self
            .args
            .iter()
            .map(|a| {
                CString::new(a.as_str())
                    .map_err(|_| Error::InvalidArgument(format!("EAL argument {a:?} contains NUL")))
            })
            .collect::<Result<_>>()?;
        if CLAIMED.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyInitialised);
        }
        // DPDK may keep pointers into argv (getopt permutes it; some options are stored as
        // given), so the strings live for the rest of the process.
        let argv: &'static mut [*mut c_char] = Vec::leak(
            argv.into_iter()
                .map(|a| a.into_raw())
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect(),
        );
        let argc = c_int::try_from(argv.len() - 1)
            .map_err(|_| Error::InvalidArgument("too many EAL arguments".into()))?;
        // SAFETY: argv holds argc valid NUL-terminated strings followed by NULL, leaked so they
        // outlive the EAL; CLAIMED guarantees this runs at most once at a time per process.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, argv.as_mut_ptr()) };
        if ret < 0 {
            let errno = Errno::last();
            // DPDK itself allows a retry after an argument error (it resets its own guard then);
            // any later failure leaves the EAL half-initialised, and a retry must be refused.
            if errno.0 == libc::EINVAL {
                CLAIMED.store(false, Ordering::Release);
            }
            return Err(Error::EalInit(errno));
        }
        Ok(Eal {
            inner: Arc::new(EalInner),
        })
    }
}

/// Keeps the EAL alive; its drop runs `rte_eal_cleanup`.
#[derive(Debug)]
pub(crate) struct EalInner;

impl Drop for EalInner {
    fn drop(&mut self) {
        // SAFETY: the last Arc is gone: no Eal, Mempool or Port remains, and Mempool leaks its
        // own Arc when mbufs are still out, so no DPDK object is in use.
        unsafe { dpdk_sys::rte_eal_cleanup() };
    }
}

/// The initialised EAL. Hold it for as long as DPDK is in use; pools and ports keep it alive too.
#[derive(Clone, Debug)]
pub struct Eal {
    pub(crate) inner: Arc<EalInner>,
}

impl Eal {
    /// Creates a virtual device at run time (hot-plug), e.g. `("net_tap0", "iface=px0")`, and
    /// returns its ethdev port. `name` must start with the driver's name.
    pub fn vdev(&self, name: &str, args: &str) -> Result<PortId> {
        let c_name = cstring(name)?;
        let c_args = cstring(args)?;
        // SAFETY: both strings are valid for the call; DPDK copies what it keeps.
        let ret = unsafe { dpdk_sys::rte_vdev_init(c_name.as_ptr(), c_args.as_ptr()) };
        if ret < 0 {
            return Err(Error::Vdev {
                name: format!("{name},{args}"),
                errno: Errno::from_ret(ret),
            });
        }
        self.port_by_name(name)
    }

    /// The port DPDK registered under `name`.
    pub fn port_by_name(&self, name: &str) -> Result<PortId> {
        let c_name = cstring(name)?;
        let mut id = 0u16;
        // SAFETY: valid C string and a valid out-pointer.
        let ret = unsafe { dpdk_sys::rte_eth_dev_get_port_by_name(c_name.as_ptr(), &mut id) };
        if ret < 0 {
            return Err(Error::NoDevice(name.to_owned()));
        }
        Ok(PortId(id))
    }

    /// Two ring-backed ports wired back to back: what one transmits, the other receives.
    /// The rings live as long as the process (DPDK's ring PMD never frees attached rings).
    pub fn ring_pair(&self, name: &str, depth: u32) -> Result<(PortId, PortId)> {
        if !depth.is_power_of_two() || depth < 2 {
            return Err(Error::InvalidArgument(format!(
                "ring depth {depth} must be a power of two of at least 2"
            )));
        }
        let ring = |suffix: &str| -> Result<*mut dpdk_sys::rte_ring> {
            let ring_name = cstring(&format!("{name}_{suffix}"))?;
            // SAFETY: valid name; SP/SC flags match one TX queue feeding one RX queue.
            let ring = unsafe {
                dpdk_sys::rte_ring_create(
                    ring_name.as_ptr(),
                    depth,
                    dpdk_sys::rte_socket_id() as c_int,
                    dpdk_sys::RING_F_SP_ENQ | dpdk_sys::RING_F_SC_DEQ,
                )
            };
            if ring.is_null() {
                return Err(Error::Vdev {
                    name: format!("ring {name}_{suffix}"),
                    errno: Errno::last(),
                });
            }
            Ok(ring)
        };
        let (ab, ba) = (ring("ab")?, ring("ba")?);
        let port = |suffix: &str, rx: *mut dpdk_sys::rte_ring, tx: *mut dpdk_sys::rte_ring| {
            let port_name = cstring(&format!("{name}_{suffix}"))?;
            // SAFETY: the ring pointers are live (never freed) and the arrays outlive the call.
            let ret = unsafe {
                dpdk_sys::rte_eth_from_rings(
                    port_name.as_ptr(),
                    &rx,
                    1,
                    &tx,
                    1,
                    dpdk_sys::rte_socket_id(),
                )
            };
            if ret < 0 {
                return Err(Error::Vdev {
                    name: format!("ring port {name}_{suffix}"),
                    errno: Errno::last(),
                });
            }
            Ok(PortId(ret as u16))
        };
        Ok((port("a", ba, ab)?, port("b", ab, ba)?))
    }

    /// TSC ticks per second.
    pub fn tsc_hz(&self) -> u64 {
        // SAFETY: reads a value the EAL computed at init.
        unsafe { dpdk_sys::rte_get_tsc_hz() }
    }
}

pub(crate) fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{s:?} contains NUL")))
}
