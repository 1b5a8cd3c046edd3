//! PXGW, the MTU-translating gateway (SIGCOMM'26 §3): it sits at the border of a large-MTU
//! network, merges inbound TCP to the internal MTU, splits outbound TCP to the path MTU,
//! rewrites MSS options, and carries UDP as caravans.

#![forbid(unsafe_code)]

pub mod config;
pub mod conn;
pub mod fragmenter;
pub mod icmp;
pub mod lru_slab;
pub mod metrics;
pub mod mss;
pub mod offload_check;
pub mod pipeline;
pub mod pmtud;
pub mod ports;
pub mod privileges;
pub mod publish;
pub mod queues;
pub mod replay;
pub mod rss;
pub mod stats;
pub mod sysfs;
pub mod worker;
