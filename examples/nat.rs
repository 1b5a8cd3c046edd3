//! A stateful source NAT, plain: the NAT logic runs on every 1500 B packet.
//! `cargo run --release --example nat` (as root: it boots an EAL on ring ports).

use dpdk::Burst;
use px_nfs::harness::{self, Lab, Sender};
use px_nfs::nat::{Nat, NatConfig};
use px_nfs::{traffic, Verdict};
use pxio::wire::{classify, Class};

fn main() -> anyhow::Result<()> {
    let eal = harness::eal("nat")?;
    // 64 inside hosts (IPv4 and IPv6) talking to one server, 20 bursts of 45 segments each.
    let flows = traffic::flows(64, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 443);
    let mut lab = Lab::new(
        &eal,
        "nat",
        traffic::tcp_traffic(&flows, 20, 45, 1500),
        false,
    )?;
    let mut nat = Nat::new(NatConfig::default());
    let mut burst = Burst::<32>::new();
    let mut sender = Sender::default();
    let mut calls = 0u64;
    let mut more = true;
    while more {
        more = lab.step()?;
        lab.rx.rx_burst(&mut burst);
        for mut pkt in burst.drain() {
            calls += 1;
            let verdict = match classify(pkt.data(), pkt.len()) {
                Class::Tcp(hdr) | Class::Udp(hdr) => nat.outbound(&mut pkt, &hdr),
                _ => Verdict::Drop,
            };
            if verdict == Verdict::Forward {
                sender.push(pkt);
            }
        }
        sender.flush(&mut lab.tx);
    }
    let stats = *nat.stats();
    drop(sender);
    lab.report("nat", calls, &stats)?;
    Ok(())
}
