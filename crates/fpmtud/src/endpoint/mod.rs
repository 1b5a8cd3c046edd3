//! The std-socket drivers of the sans-IO core: the endpoint daemon ([`Server`], `fpmtud
//! serve`) and a one-shot prober ([`probe`], `fpmtud probe`). HotNets'25 §4.2 splits F-PMTUD
//! into a "PMTU prober" and an "F-PMTUD daemon running on the destination node"; these are
//! those two, for Linux end hosts. pxgw drives the same core from its DPDK ports.

pub mod capture;
mod client;
mod server;

pub use client::{probe, probe_socket, route_mtu};
pub use server::{ServeConfig, Server, ServerStats};

use crate::prober::ConfigError;
use crate::responder::ResponderConfigError;

/// What went wrong in a driver.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// A socket call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A prober or cache setting is out of range.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A responder setting is out of range.
    #[error(transparent)]
    Responder(#[from] ResponderConfigError),
}

impl EndpointError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| EndpointError::Io { what, source }
    }
}
