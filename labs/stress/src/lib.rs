//! The stress lab (`cargo xtask lab stress`, and `pxgw-stress test` in `cargo xtask test`):
//! hostile input against pxgw between network namespaces, as an attacker or a buggy peer would
//! send it, while sha256-checked bulk transfers cross the gateway both ways.
//!
//! - [`crafted`]: TCP segment sequences from a packet-socket client that completes real
//!   handshakes, each compared with what the same sequence gives a Linux receiver through a
//!   plain Linux bridge;
//! - [`flood`]: floods of new flows, spoofed SYNs and UDP datagrams;
//! - [`cases`]: those, a SIGINT and restart of pxgw mid-transfer, and a packet pool sized to
//!   run out; after each case pxgw must still run and the transfers be intact, and at the end
//!   no mbuf may be leaked;
//! - [`border`]: what a hostile outside host sends at the border: a tiny MSS, a SYN spoofed on
//!   an established connection, ICMP "packet too big" in and out of the window, a caravan
//!   formed outside; [`scrape`]: metrics clients that stall or never read;
//! - [`bulk`]: the transfers and the capture measuring their yield (SIGCOMM'26 §7);
//! - [`seeds`]: the fuzz targets' seed corpora, cut from captures of real traffic through pxgw.

#![forbid(unsafe_code)]

pub mod border;
pub mod bulk;
pub mod cases;
pub mod crafted;
pub mod flood;
pub mod scrape;
pub mod seeds;
pub mod wire;
