//! Loading, attaching and observing the caravan-ebpf TC classifier (SIGCOMM'26 §6).

use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::SchedClassifierLinkId;
use aya::programs::{tc, SchedClassifier, TcAttachType, TestRun, TestRunOptions};
use aya::Ebpf;
use caravan_common::{
    Counter, CONFIG_DSCP, CONFIG_MAP, CONFIG_MAX_DATAGRAMS, DEFAULT_DSCP, MAX_DATAGRAMS,
    PASSTHROUGH_MAP, PROGRAM_NAME, STATS_MAP,
};

/// The eBPF object, built by `cargo xtask build-ebpf` and embedded by `build.rs` (empty when it
/// was not built).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/caravan-ebpf.o"));

/// Where `caravan attach` pins the link and the maps: `PIN_ROOT/<iface>/`.
pub const PIN_ROOT: &str = "/sys/fs/bpf/caravan";

/// Name of the pinned TCX link inside an interface's pin directory.
const LINK_PIN: &str = "link";

/// Why the decapsulator could not be loaded, attached or read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading BPF programs needs root (CAP_BPF and CAP_NET_ADMIN).
    #[error("caravan needs root to load and attach eBPF programs (run it with sudo)")]
    NotRoot,
    /// The kernel has no usable BPF syscall or no BPF filesystem.
    #[error("BPF is not available on this kernel: {0}")]
    BpfUnavailable(String),
    /// No interface of that name in this network namespace.
    #[error("interface {0} does not exist (in this network namespace)")]
    NoSuchInterface(String),
    /// The crate was built before the eBPF object existed.
    #[error("eBPF object not built: run `cargo xtask build-ebpf`, then rebuild")]
    ObjectNotBuilt,
    /// Nothing is attached (pinned) on that interface.
    #[error("no caravan decapsulator is attached to {0} (nothing pinned under {PIN_ROOT}/{0})")]
    NotAttached(String),
    /// The loader refused the object.
    #[error("loading the eBPF object failed: {0}")]
    Load(#[from] aya::EbpfError),
    /// The program was refused by the verifier, or attaching it failed.
    #[error("eBPF program: {0}")]
    Program(#[from] aya::programs::ProgramError),
    /// A map operation failed.
    #[error("eBPF map: {0}")]
    Map(#[from] aya::maps::MapError),
    /// Pinning to the BPF filesystem failed.
    #[error("pinning under {PIN_ROOT}: {0}")]
    Pin(String),
    /// A bad setting.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// Settings of the decapsulator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecapConfig {
    /// The DSCP mark of caravans (1..=63).
    pub dscp: u8,
    /// Most datagrams per caravan (1..=[`MAX_DATAGRAMS`]); caravans with more are malformed.
    pub max_datagrams: u32,
}

impl Default for DecapConfig {
    fn default() -> Self {
        Self {
            dscp: DEFAULT_DSCP,
            max_datagrams: MAX_DATAGRAMS,
        }
    }
}

/// The decapsulator's counters, summed over all CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Well-formed caravans seen.
    pub caravans: u64,
    /// Inner datagrams handed to the stack.
    pub datagrams: u64,
    /// Malformed caravans dropped whole.
    pub malformed: u64,
    /// Caravans delivered whole to a pass-through port.
    pub passed_through: u64,
    /// Caravans cut short by a failing kernel helper.
    pub helper_errors: u64,
    /// Packets wearing the caravan mark without a caravan header, passed untouched.
    pub marked_plain: u64,
    /// Caravan headers of an unknown version, passed untouched.
    pub unknown_version: u64,
    /// Marked packets with a failing outer IPv4 header checksum, and caravans with a failing
    /// or zero outer UDP checksum, passed untouched.
    pub bad_checksum: u64,
}

impl Stats {
    fn set(&mut self, counter: Counter, value: u64) {
        match counter {
            Counter::Caravans => self.caravans = value,
            Counter::Datagrams => self.datagrams = value,
            Counter::Malformed => self.malformed = value,
            Counter::PassedThrough => self.passed_through = value,
            Counter::HelperErrors => self.helper_errors = value,
            Counter::MarkedPlain => self.marked_plain = value,
            Counter::UnknownVersion => self.unknown_version = value,
            Counter::BadChecksum => self.bad_checksum = value,
        }
    }

    /// `(name, value)` for every counter, in slot order.
    pub fn rows(&self) -> [(&'static str, u64); Counter::COUNT as usize] {
        Counter::ALL.map(|c| {
            let v = match c {
                Counter::Caravans => self.caravans,
                Counter::Datagrams => self.datagrams,
                Counter::Malformed => self.malformed,
                Counter::PassedThrough => self.passed_through,
                Counter::HelperErrors => self.helper_errors,
                Counter::MarkedPlain => self.marked_plain,
                Counter::UnknownVersion => self.unknown_version,
                Counter::BadChecksum => self.bad_checksum,
            };
            (c.name(), v)
        })
    }
}

/// The caravan decapsulator: the TC classifier loaded into the kernel, attached to at most one
/// interface's clsact ingress (SIGCOMM'26 §6). Dropping it detaches the program, unless
/// [`persist`](Self::persist) pinned it first.
pub struct Decap {
    ebpf: Ebpf,
    iface: Option<String>,
    link: Option<SchedClassifierLinkId>,
}

impl std::fmt::Debug for Decap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decap").field("iface", &self.iface).finish()
    }
}

/// Checks what a load needs, in the order a user can fix it.
fn preflight() -> Result<(), Error> {
    if OBJECT.is_empty() {
        return Err(Error::ObjectNotBuilt);
    }
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::NotRoot);
    }
    if !Path::new("/proc/sys/kernel/unprivileged_bpf_disabled").exists() {
        return Err(Error::BpfUnavailable(
            "the kernel was built without CONFIG_BPF_SYSCALL".into(),
        ));
    }
    Ok(())
}

fn ifindex(iface: &str) -> Result<u32, Error> {
    nix::net::if_::if_nametoindex(iface).map_err(|_| Error::NoSuchInterface(iface.to_owned()))
}

fn sum_stats(map: &PerCpuArray<&MapData, u64>) -> Result<Stats, Error> {
    let mut stats = Stats::default();
    for counter in Counter::ALL {
        let values = map.get(&(counter as u32), 0)?;
        stats.set(counter, values.iter().sum());
    }
    Ok(stats)
}

impl Decap {
    /// Loads the program and its maps into the kernel, configured, without attaching it.
    pub fn load(cfg: DecapConfig) -> Result<Self, Error> {
        if !(1..=63).contains(&cfg.dscp) {
            return Err(Error::Config(format!("DSCP {} is not in 1..=63", cfg.dscp)));
        }
        if !(1..=MAX_DATAGRAMS).contains(&cfg.max_datagrams) {
            return Err(Error::Config(format!(
                "max_datagrams {} is not in 1..={MAX_DATAGRAMS}",
                cfg.max_datagrams
            )));
        }
        preflight()?;
        let mut ebpf = Ebpf::load(OBJECT).map_err(|e| match e {
            aya::EbpfError::MapError(aya::maps::MapError::CreateError { io_error, .. })
                if io_error.raw_os_error() == Some(nix::libc::ENOSYS) =>
            {
                Error::BpfUnavailable(io_error.to_string())
            }
            e => Error::Load(e),
        })?;
        {
            let mut config: Array<_, u32> = Array::try_from(map_mut(&mut ebpf, CONFIG_MAP)?)?;
            config.set(CONFIG_DSCP, u32::from(cfg.dscp), 0)?;
            config.set(CONFIG_MAX_DATAGRAMS, cfg.max_datagrams, 0)?;
        }
        program(&mut ebpf)?.load()?;
        Ok(Self {
            ebpf,
            iface: None,
            link: None,
        })
    }

    /// Loads the program and attaches it to `iface`'s ingress (TCX on kernels ≥ 6.6, else a
    /// clsact qdisc and a netlink filter).
    pub fn attach(iface: &str, cfg: DecapConfig) -> Result<Self, Error> {
        ifindex(iface)?;
        let mut decap = Self::load(cfg)?;
        // Only the netlink fallback needs the qdisc; it may already be there.
        let _ = tc::qdisc_add_clsact(iface);
        decap.link = Some(program(&mut decap.ebpf)?.attach(iface, TcAttachType::Ingress)?);
        decap.iface = Some(iface.to_owned());
        Ok(decap)
    }

    /// The interface the program is attached to, if any.
    pub fn iface(&self) -> Option<&str> {
        self.iface.as_deref()
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN`; returns the TC verdict and
    /// the bytes of the packet as the program left it (written into `out`).
    pub fn test_run(&mut self, frame: &[u8], out: &mut [u8]) -> Result<(i32, usize), Error> {
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: Some(out),
            ..TestRunOptions::default()
        };
        let result = program(&mut self.ebpf)?.test_run(opts)?;
        Ok((result.return_value as i32, result.data_size_out as usize))
    }

    /// The counters, summed over CPUs.
    pub fn stats(&self) -> Result<Stats, Error> {
        let map = self
            .ebpf
            .map(STATS_MAP)
            .ok_or_else(|| Error::Config(format!("object has no map {STATS_MAP}")))?;
        let array: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map)?;
        sum_stats(&array)
    }

    /// Registers `port` (a local UDP port): its caravans are delivered whole, for [`crate::Reader`].
    pub fn add_passthrough_port(&mut self, port: u16) -> Result<(), Error> {
        let mut ports: HashMap<_, u16, u8> =
            HashMap::try_from(map_mut(&mut self.ebpf, PASSTHROUGH_MAP)?)?;
        ports.insert(port, 1, 0)?;
        Ok(())
    }

    /// Unregisters `port`: its caravans are decapsulated again.
    pub fn remove_passthrough_port(&mut self, port: u16) -> Result<(), Error> {
        let mut ports: HashMap<_, u16, u8> =
            HashMap::try_from(map_mut(&mut self.ebpf, PASSTHROUGH_MAP)?)?;
        ports.remove(&port)?;
        Ok(())
    }

    /// Leaves the program attached after this process exits: pins its TCX link and its maps
    /// under `PIN_ROOT/<iface>/`, where `caravan stats`/`detach` find them. Returns that
    /// directory.
    pub fn persist(mut self) -> Result<PathBuf, Error> {
        let iface = self
            .iface
            .clone()
            .ok_or_else(|| Error::Config("persist: the program is not attached".into()))?;
        let dir = pin_dir(&iface);
        if dir.join(LINK_PIN).exists() {
            return Err(Error::Pin(format!(
                "{} exists: run `caravan detach {iface}` first",
                dir.display()
            )));
        }
        ensure_bpffs()?;
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Pin(format!("cannot create {}: {e}", dir.display())))?;
        for name in [STATS_MAP, CONFIG_MAP, PASSTHROUGH_MAP] {
            let map = self
                .ebpf
                .map(name)
                .ok_or_else(|| Error::Config(format!("object has no map {name}")))?;
            map.pin(dir.join(name))
                .map_err(|e| Error::Pin(format!("map {name}: {e}")))?;
        }
        let id = self
            .link
            .take()
            .ok_or_else(|| Error::Config("persist: the program is not attached".into()))?;
        let link = program(&mut self.ebpf)?.take_link(id)?;
        let link = FdLink::try_from(link).map_err(|e| {
            Error::Pin(format!(
                "only a TCX link (kernel >= 6.6) can outlive this process: {e}"
            ))
        })?;
        link.pin(dir.join(LINK_PIN))
            .map_err(|e| Error::Pin(format!("link: {e}")))?;
        Ok(dir)
    }
}

/// Detaches the decapsulator that `caravan attach` pinned for `iface`, and removes its pins.
pub fn detach_pinned(iface: &str) -> Result<(), Error> {
    let dir = pin_dir(iface);
    let link_path = dir.join(LINK_PIN);
    if !link_path.exists() {
        return Err(Error::NotAttached(iface.to_owned()));
    }
    let pinned = PinnedLink::from_pin(&link_path)
        .map_err(|e| Error::Pin(format!("{}: {e}", link_path.display())))?;
    // Unpinning drops the last reference once the returned fd closes: the link detaches.
    drop(
        pinned
            .unpin()
            .map_err(|e| Error::Pin(format!("{}: {e}", link_path.display())))?,
    );
    for name in [STATS_MAP, CONFIG_MAP, PASSTHROUGH_MAP] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}

fn pinned_map(iface: &str, name: &str) -> Result<MapData, Error> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Error::NotRoot);
    }
    let dir = pin_dir(iface);
    if !dir.join(LINK_PIN).exists() {
        return Err(Error::NotAttached(iface.to_owned()));
    }
    Ok(MapData::from_pin(dir.join(name))?)
}

/// The counters of the decapsulator that `caravan attach` pinned for `iface`.
pub fn pinned_stats(iface: &str) -> Result<Stats, Error> {
    let map = Map::PerCpuArray(pinned_map(iface, STATS_MAP)?);
    let array: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(&map)?;
    sum_stats(&array)
}

/// Adds (`on`) or removes a pass-through port of the decapsulator pinned for `iface`.
pub fn pinned_passthrough(iface: &str, port: u16, on: bool) -> Result<(), Error> {
    let mut map = Map::HashMap(pinned_map(iface, PASSTHROUGH_MAP)?);
    let mut ports: HashMap<&mut MapData, u16, u8> = HashMap::try_from(&mut map)?;
    if on {
        ports.insert(port, 1, 0)?;
    } else {
        ports.remove(&port)?;
    }
    Ok(())
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Map, Error> {
    ebpf.map_mut(name)
        .ok_or_else(|| Error::Config(format!("object has no map {name}")))
}

fn program(ebpf: &mut Ebpf) -> Result<&mut SchedClassifier, Error> {
    let prog = ebpf
        .program_mut(PROGRAM_NAME)
        .ok_or_else(|| Error::Config(format!("object has no program {PROGRAM_NAME}")))?;
    Ok(prog.try_into()?)
}

/// Mounts the BPF filesystem on /sys/fs/bpf when it is not there (a fresh system, or a mount
/// namespace that remounted /sys, as `ip netns exec` does: pins made there vanish with it, so
/// run the CLI with `nsenter --net=/run/netns/NAME` instead).
fn ensure_bpffs() -> Result<(), Error> {
    const BPF_FS_MAGIC: i64 = 0xcafe_4a11;
    let root = Path::new("/sys/fs/bpf");
    if let Ok(fs) = nix::sys::statfs::statfs(root) {
        if fs.filesystem_type().0 == BPF_FS_MAGIC {
            return Ok(());
        }
    }
    nix::mount::mount(
        Some("bpf"),
        root,
        Some("bpf"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|e| {
        Error::BpfUnavailable(format!(
            "cannot mount the BPF filesystem on /sys/fs/bpf: {e}"
        ))
    })
}

fn pin_dir(iface: &str) -> PathBuf {
    Path::new(PIN_ROOT).join(iface)
}
