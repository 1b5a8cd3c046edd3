//! The scale-out lab (docs/scale-out.md): pxgw instances between two Linux routers that spread
//! flows over them with ECMP, as an operator puts several gateways behind the routers they
//! already run. Runs transfers with symmetric and with deliberately asymmetric paths
//! ([`topology::Paths`]), in IPv4 and IPv6, checks every byte (sha256), the MSS the inside host
//! uses and the yield; then FRR's BGP and BFD across every instance steer the routes
//! ([`frr`]) through steady full load, a crash, a planned drain and an instance added under
//! load ([`events`]).

#![forbid(unsafe_code)]

pub mod events;
pub mod flows;
pub mod frr;
pub mod instance;
pub mod run;
pub mod topology;

use std::path::PathBuf;

use anyhow::{bail, Result};

/// The `pxgw` binary next to this one (`target/<profile>/pxgw`).
pub fn pxgw_binary() -> Result<PathBuf> {
    let pxgw = std::env::current_exe()?.with_file_name("pxgw");
    if !pxgw.exists() {
        bail!(
            "{} is not built: `cargo build --release -p pxgw` first",
            pxgw.display()
        );
    }
    Ok(pxgw)
}
