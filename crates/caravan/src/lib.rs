//! User-space side of the PX-caravan decapsulator (SIGCOMM'26 §6, §3.5).
//!
//! The paper patches the Linux UDP stack so that endpoints inside the b-network receive caravans.
//! Here an eBPF TC classifier (`crates/caravan-ebpf`) does that job on clsact ingress, and this
//! crate loads it:
//! * [`Decap`] loads the embedded object, attaches it to an interface, reads its counters
//!   ([`Stats`]) and manages the pass-through ports. It detaches on drop, unless
//!   [`Decap::persist`] pinned it for the `caravan` CLI.
//! * [`Reader`] splits a caravan that was delivered whole to a pass-through port into its inner
//!   datagrams: one `recv` brings many datagrams, like `UDP_GRO` (beyond the paper).
//! * [`recv`] receives one datagram with the traffic class its IP header carried, and
//!   [`BatchReader`] many per system call (`recvmmsg`): the receive path to set against
//!   `recvmmsg` and `UDP_GRO` on plain UDP. Each message is a [`Received`], read as a caravan
//!   only when it wore the caravan mark ([`report_traffic_class`] makes the socket report it).
//!
//! The map layouts are shared with the eBPF program through `caravan-common`.

#![forbid(unsafe_code)]

mod batch;
mod decap;
mod reader;
mod received;

pub use batch::{BatchError, BatchReader};
pub use caravan_common::{Counter, DEFAULT_DSCP, MAX_DATAGRAMS, VERSION};
pub use decap::{
    detach_pinned, pinned_passthrough, pinned_stats, Decap, DecapConfig, Error, Stats, PIN_ROOT,
};
pub use reader::{Datagram, Malformed, Reader, Refused};
pub use received::{recv, report_traffic_class, Received};
