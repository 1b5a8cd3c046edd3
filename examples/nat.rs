//! A stateful source NAT, plain: the NAT logic runs on every 1500 B packet.
//! `cargo run --release --example nat` (as root: it boots an EAL on ring ports).

use dpdk::{Burst, Eal};
use px_nfs::harness::{self, Lab, Sender};
use px_nfs::nat::{Nat, NatConfig};
use px_nfs::{traffic, Verdict};
use pxio::wire::{classify, Class};

fn main() -> anyhow::Result<()> {
    let eal = harness::eal(env!("CARGO_CRATE_NAME"))?;
    // 64 inside hosts (IPv4 and IPv6) talking to one server, 20 bursts of 45 segments each.
    let flows = traffic::flows(64, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 443);
    let input = traffic::tcp_traffic(&flows, 20, 45, 1500);
    run(
        &eal,
        env!("CARGO_CRATE_NAME"),
        input,
        Nat::new(NatConfig::default()),
        false,
    )?;
    Ok(())
}

/// Runs `nat` on `input` between ring ports; returns what left (when `keep`) and the NAT.
pub fn run(
    eal: &Eal,
    name: &str,
    input: Vec<Vec<u8>>,
    mut nat: Nat,
    keep: bool,
) -> anyhow::Result<(Vec<Vec<u8>>, Nat)> {
    let mut lab = Lab::new(eal, name, input, keep)?;
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
    drop(sender);
    let out = lab.report(name, calls, nat.stats())?;
    Ok((out, nat))
}
