//! What the PX-caravan decapsulator's eBPF program (`crates/caravan-ebpf`), its user-space
//! side (`crates/caravan`) and the gateway's packer (`pxio::caravan`) must agree on: the wire
//! format's constants and validation rules ([`format`]), map names, map layouts, counter slots
//! (SIGCOMM'26 §6, `docs/caravan.md`).
//!
//! `no_std` and free of dependencies, so the eBPF crate (built for `bpfel-unknown-none`) and the
//! host crates use the very same definitions. Every map value is a plain integer, so neither side
//! needs an `unsafe impl Pod`.

#![forbid(unsafe_code)]
#![no_std]

pub mod format;

/// The DSCP codepoint that marks a caravan unless [`CONFIG_DSCP`] says otherwise.
pub use format::DEFAULT_DSCP;

/// The most datagrams one caravan may carry: the receiver's hard bound.
pub use format::MAX_DATAGRAMS;

/// The caravan format version this code writes and reads.
pub use format::VERSION;

/// Name of the per-CPU counter array (`PerCpuArray<u64>`, [`Counter::COUNT`] slots).
pub const STATS_MAP: &str = "CARAVAN_STATS";

/// Name of the configuration array (`Array<u32>`, [`CONFIG_LEN`] slots; 0 means "the default").
pub const CONFIG_MAP: &str = "CARAVAN_CONFIG";

/// Name of the pass-through port set (`HashMap<u16, u8>`: UDP destination port in host byte order
/// → 1). Caravans to these ports are delivered whole, for `caravan::Reader`.
pub const PASSTHROUGH_MAP: &str = "CARAVAN_PASSTHROUGH";

/// Most ports the pass-through set holds.
pub const PASSTHROUGH_MAX_PORTS: u32 = 256;

/// Name of the TC classifier program in the object.
pub const PROGRAM_NAME: &str = "caravan_decap";

/// [`CONFIG_MAP`] slot: the DSCP mark (1..=63); 0 selects [`DEFAULT_DSCP`].
pub const CONFIG_DSCP: u32 = 0;

/// [`CONFIG_MAP`] slot: the most datagrams per caravan (1..=[`MAX_DATAGRAMS`]); 0 selects
/// [`MAX_DATAGRAMS`], larger values are capped to it.
pub const CONFIG_MAX_DATAGRAMS: u32 = 1;

/// Slots in [`CONFIG_MAP`].
pub const CONFIG_LEN: u32 = 2;

/// The slots of the per-CPU counter array [`STATS_MAP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Counter {
    /// Well-formed caravans seen (decapsulated or passed through).
    Caravans = 0,
    /// Inner datagrams handed to the stack as ordinary UDP packets.
    Datagrams = 1,
    /// Caravans refused as malformed (dropped whole, nothing delivered).
    Malformed = 2,
    /// Caravans delivered whole to a registered pass-through port.
    PassedThrough = 3,
    /// Caravans whose decapsulation failed inside a kernel helper (e.g. no memory) after it had
    /// started: the datagrams before the failure were delivered intact, the rest dropped.
    HelperErrors = 4,
    /// UDP packets wearing the caravan mark without a caravan header: ordinary datagrams,
    /// passed untouched.
    MarkedPlain = 5,
    /// Caravan headers of a version this program does not understand: passed untouched.
    UnknownVersion = 6,
    /// Marked packets whose outer IPv4 header checksum fails, and caravans whose outer UDP
    /// checksum fails or is zero: damaged or forged, passed untouched (never rewritten or
    /// cut) for the kernel to judge as any datagram.
    BadChecksum = 7,
}

impl Counter {
    /// Number of counter slots.
    pub const COUNT: u32 = 8;

    /// Every counter, in slot order.
    pub const ALL: [Counter; Self::COUNT as usize] = [
        Counter::Caravans,
        Counter::Datagrams,
        Counter::Malformed,
        Counter::PassedThrough,
        Counter::HelperErrors,
        Counter::MarkedPlain,
        Counter::UnknownVersion,
        Counter::BadChecksum,
    ];

    /// The counter's name as `caravan stats` prints it.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::Caravans => "caravans",
            Counter::Datagrams => "datagrams_delivered",
            Counter::Malformed => "malformed",
            Counter::PassedThrough => "passed_through",
            Counter::HelperErrors => "helper_errors",
            Counter::MarkedPlain => "marked_not_caravan",
            Counter::UnknownVersion => "unknown_version",
            Counter::BadChecksum => "bad_checksum",
        }
    }
}
