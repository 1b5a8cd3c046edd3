//! A 5G UPF data path (dUPF design), plain: PDR/FAR/QER lookups and GTP-U encapsulation or
//! decapsulation on every packet. 256 k sessions of 16 PDRs with SDF filters: 4 M PDRs,
//! 512 k FARs, 512 k QERs.
//! `cargo run --release --example upf` (as root: it boots an EAL on ring ports).

use dpdk::{Burst, Eal};
use px_nfs::harness::{self, Lab, Sender};
use px_nfs::upf::{SessionSpec, Upf, UpfConfig};
use px_nfs::{traffic, Verdict};
use pxio::wire::{classify, Class};

fn main() -> anyhow::Result<()> {
    let eal = harness::eal(env!("CARGO_CRATE_NAME"))?;
    // 64 UEs (IPv4 and IPv6) downloading from and uploading to one server.
    let flows = traffic::flows(64, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 443);
    let ues: Vec<SessionSpec> = (0..64)
        .map(|i| SessionSpec::for_host(i, 10_000_000_000))
        .collect();
    let upf = Upf::synthetic(UpfConfig::default(), 256 * 1024, 100_000_000, &ues)?;
    println!("(PDRs, FARs, QERs) = {:?}", upf.rule_counts());
    let input = traffic::upf_traffic(&flows, 20, 45, 1500, upf.config().n3_addr);
    run(&eal, env!("CARGO_CRATE_NAME"), input, upf, false)?;
    Ok(())
}

/// Runs `upf` on `input` between ring ports; returns what left (when `keep`) and the UPF.
pub fn run(
    eal: &Eal,
    name: &str,
    input: Vec<Vec<u8>>,
    mut upf: Upf,
    keep: bool,
) -> anyhow::Result<(Vec<Vec<u8>>, Upf)> {
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
            match classify(pkt.data(), pkt.len()) {
                Class::Tcp(hdr) | Class::Udp(hdr) if Upf::is_uplink(&hdr) => {
                    let verdict = upf.uplink(&mut pkt, &hdr, lab.now_ns());
                    if verdict == Verdict::Forward {
                        sender.push(pkt);
                    }
                }
                Class::Tcp(hdr) | Class::Udp(hdr) => {
                    if let Some(rule) = upf.downlink(&hdr, lab.now_ns()) {
                        if let Some(pkt) = upf.encap(pkt, hdr.l2_len, rule, &lab.headers) {
                            sender.push(pkt);
                        }
                    }
                }
                _ => {} // neither TCP nor UDP: dropped
            }
        }
        sender.flush(&mut lab.tx);
    }
    drop(sender);
    let out = lab.report(name, calls, upf.stats())?;
    Ok((out, upf))
}
