//! Typed errors for every fallible DPDK call.

use std::ffi::CStr;
use std::fmt;

/// A DPDK / libc error number, printed with `rte_strerror`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's `rte_errno`.
    pub(crate) fn last() -> Self {
        // SAFETY: reads a thread-local integer.
        Self(unsafe { dpdk_sys::px_errno() })
    }

    /// From a DPDK return value that is a negated errno (`-EINVAL`).
    pub(crate) fn from_ret(ret: i32) -> Self {
        Self(ret.abs())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated
        // string for any input, valid until the next call on this thread; we copy it at once.
        let text = unsafe { CStr::from_ptr(dpdk_sys::rte_strerror(self.0)) };
        write!(f, "{} (errno {})", text.to_string_lossy(), self.0)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Everything that can go wrong in this crate. No call panics on bad input; it returns one of
/// these.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `rte_eal_init` already ran in this process (successfully, or past its argument parsing).
    #[error(
        "the DPDK EAL is already initialised in this process; it can be initialised only once"
    )]
    AlreadyInitialised,
    /// `rte_eal_init` failed; the message adds what the errno means at this step.
    #[error("DPDK EAL initialisation failed: {0}{hint}", hint = eal_hint(.0))]
    EalInit(Errno),
    /// An argument Rust could not hand to C, or that DPDK would misread.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// `rte_thread_register` refused the calling thread (no free lcore id, say).
    #[error("cannot register the thread with the DPDK EAL: {0}")]
    ThreadRegister(Errno),
    /// No device or port by that name or id.
    #[error("no such DPDK device: {0}")]
    NoDevice(String),
    /// Adding a vdev failed.
    #[error("cannot create vdev {name}: {errno}")]
    Vdev {
        /// The vdev name with its arguments.
        name: String,
        /// DPDK's reason.
        errno: Errno,
    },
    /// A port operation failed.
    #[error("port {port}: {op} failed: {errno}")]
    Port {
        /// Port id.
        port: u16,
        /// The DPDK call.
        op: &'static str,
        /// DPDK's reason.
        errno: Errno,
    },
    /// The port cannot be configured as asked.
    #[error("port {port}: {what}")]
    PortConfig {
        /// Port id.
        port: u16,
        /// What is not possible, with the device's limit.
        what: String,
    },
    /// The device cannot take the MTU asked for, or did not keep it.
    #[error("port {port} ({driver}): cannot use MTU {mtu}: {reason}")]
    Mtu {
        /// Port id.
        port: u16,
        /// The driver's name.
        driver: String,
        /// The MTU asked for.
        mtu: u16,
        /// Why, with the device's limits.
        reason: String,
    },
    /// A queue index past the port's queue count.
    #[error("port {port}: {kind} queue {index} out of range (the port has {count})")]
    QueueOutOfRange {
        /// Port id.
        port: u16,
        /// "rx" or "tx".
        kind: &'static str,
        /// The index asked for.
        index: u16,
        /// How many queues the port has.
        count: u16,
    },
    /// Each queue has one owner; this one is taken.
    #[error("port {port}: {kind} queue {index} is already in use")]
    QueueTaken {
        /// Port id.
        port: u16,
        /// "rx" or "tx".
        kind: &'static str,
        /// The queue.
        index: u16,
    },
    /// Creating a mempool failed.
    #[error("cannot create mempool {name}: {errno}")]
    Mempool {
        /// Pool name.
        name: String,
        /// DPDK's reason.
        errno: Errno,
    },
    /// The pool has no free mbufs.
    #[error("mempool {0} is exhausted")]
    PoolExhausted(String),
    /// Not enough headroom or tailroom for the requested prepend/append, or the length is longer
    /// than the data for adj/trim.
    #[error("mbuf has {available} bytes of {what}, {requested} requested")]
    NoRoom {
        /// "headroom", "tailroom" or "data".
        what: &'static str,
        /// Bytes available.
        available: usize,
        /// Bytes requested.
        requested: usize,
    },
    /// The data buffer is shared with a clone, so writing to it would change the clone too.
    #[error("mbuf data is shared with a clone and cannot be written")]
    SharedData,
    /// A chain would exceed DPDK's segment limit.
    #[error("chain would have {0} segments, more than DPDK allows")]
    TooManySegments(usize),
    /// `rte_gro_ctx_create` failed: bad sizes or no DPDK memory for the tables.
    #[error(
        "cannot create an rte_gro context for {max_flows} flows x {max_items_per_flow} items \
         (zero sizes, or not enough DPDK memory for the tables)"
    )]
    GroContext {
        /// Flows asked for.
        max_flows: u16,
        /// Items per flow asked for.
        max_items_per_flow: u16,
    },
    /// The PMD has no `rte_flow` support at all.
    #[error("port {0}: the driver does not support rte_flow")]
    Unsupported(u16),
    /// The device has no hairpin queues (`rte_eth_dev_hairpin_capability_get` fails), or fewer
    /// than asked for (SIGCOMM'26 §4.4).
    #[error("port {port} ({driver}): no hairpin queues: {reason}")]
    HairpinUnsupported {
        /// Port id.
        port: u16,
        /// The driver's name.
        driver: String,
        /// DPDK's answer, or the device's limit.
        reason: String,
    },
    /// The device does not offer an offload that was required (not merely requested): the port
    /// is not started rather than started without it.
    #[error("port {port} ({driver}): the device does not offer {offload}")]
    OffloadUnsupported {
        /// Port id.
        port: u16,
        /// The driver's name.
        driver: String,
        /// The offload, by its DPDK name.
        offload: &'static str,
    },
    /// The PMD rejected a flow rule; `message` is DPDK's own explanation.
    #[error("port {port}: rte_flow {op} failed: {message} ({errno})")]
    Flow {
        /// Port id.
        port: u16,
        /// "validate", "create" or "destroy".
        op: &'static str,
        /// DPDK's message.
        message: String,
        /// DPDK's reason.
        errno: Errno,
    },
}

/// What `rte_eal_init`'s errno means in DPDK 22.11 (`lib/eal/linux/eal.c` sets one errno per
/// failing step), so the one-line error names the cause instead of only "Operation not
/// supported".
fn eal_hint(errno: &Errno) -> &'static str {
    match errno.0 {
        libc::EACCES => {
            " (permission denied reading hugepage or device files: run as root, or with \
             CAP_SYS_ADMIN, CAP_NET_RAW and CAP_IPC_LOCK)"
        }
        libc::ENOMEM => " (not enough memory: lower eal.memory_mb, or reserve more hugepages)",
        libc::ENOTSUP => {
            " (a device failed to probe: a vdev's interface is missing or cannot be opened, or \
             a PCI device is not bound to a DPDK driver; the EAL lines above name it)"
        }
        libc::EINVAL => " (invalid EAL arguments)",
        libc::EALREADY => " (already initialised in this process)",
        libc::ENODEV => " (no usable device or memory driver, e.g. VFIO)",
        libc::EFAULT | libc::EPROTO | libc::ENOEXEC => " (internal EAL set-up failed)",
        _ => "",
    }
}

/// Result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;
