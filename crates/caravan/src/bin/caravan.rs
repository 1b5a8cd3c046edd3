//! `caravan`: attach, detach and observe the PX-caravan decapsulator (SIGCOMM'26 §6).
//!
//! * `caravan attach IFACE [--dscp N] [--max-datagrams N] [--passthrough PORT]...` loads the
//!   eBPF classifier onto IFACE's ingress and pins it under /sys/fs/bpf/caravan/IFACE, so it
//!   stays after this command exits.
//! * `caravan detach IFACE` removes it.
//! * `caravan stats IFACE` prints its counters.
//! * `caravan passthrough IFACE add|del PORT` delivers the caravans to PORT whole (or not).

#![forbid(unsafe_code)]

use anyhow::{Context, Result};
use caravan::{Decap, DecapConfig};
use clap::{Parser, Subcommand, ValueEnum};

/// Command line of `caravan`.
#[derive(Debug, Parser)]
#[command(
    name = "caravan",
    about = "PX-caravan decapsulation at endpoints (eBPF, clsact ingress)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Attach the decapsulator to IFACE's ingress (pinned: it stays after exit).
    Attach {
        /// The interface.
        iface: String,
        /// DSCP mark of caravans.
        #[arg(long, default_value_t = caravan::DEFAULT_DSCP)]
        dscp: u8,
        /// Most datagrams per caravan; more is malformed.
        #[arg(long, default_value_t = caravan::MAX_DATAGRAMS)]
        max_datagrams: u32,
        /// UDP ports whose caravans are delivered whole (for caravan::Reader).
        #[arg(long = "passthrough", value_name = "PORT")]
        passthrough: Vec<u16>,
    },
    /// Detach the decapsulator from IFACE.
    Detach {
        /// The interface.
        iface: String,
    },
    /// Print the decapsulator's counters on IFACE.
    Stats {
        /// The interface.
        iface: String,
    },
    /// Add or remove a pass-through port.
    Passthrough {
        /// The interface.
        iface: String,
        /// add or del.
        #[arg(value_enum)]
        op: Op,
        /// The local UDP port.
        port: u16,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Op {
    Add,
    Del,
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Attach {
            iface,
            dscp,
            max_datagrams,
            passthrough,
        } => {
            let mut decap = Decap::attach(
                &iface,
                DecapConfig {
                    dscp,
                    max_datagrams,
                },
            )
            .with_context(|| format!("caravan attach {iface}"))?;
            for port in passthrough {
                decap.add_passthrough_port(port)?;
            }
            let dir = decap.persist()?;
            println!(
                "caravan: attached to {iface} ingress (pinned in {})",
                dir.display()
            );
        }
        Cmd::Detach { iface } => {
            caravan::detach_pinned(&iface).with_context(|| format!("caravan detach {iface}"))?;
            println!("caravan: detached from {iface}");
        }
        Cmd::Stats { iface } => {
            let stats =
                caravan::pinned_stats(&iface).with_context(|| format!("caravan stats {iface}"))?;
            for (name, value) in stats.rows() {
                println!("{name:<20} {value}");
            }
        }
        Cmd::Passthrough { iface, op, port } => {
            caravan::pinned_passthrough(&iface, port, matches!(op, Op::Add))
                .with_context(|| format!("caravan passthrough {iface}"))?;
        }
    }
    Ok(())
}
