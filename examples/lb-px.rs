//! An L4 load balancer (Maglev), ported to pxio: the balancing logic runs once per merged packet, and pxio
//! splits back to the port's MTU (1500 B) on the way out.
//! `cargo run --release --example lb-px` (as root: it boots an EAL on ring ports).

use dpdk::{Burst, Eal};
use px_nfs::harness::{self, Lab};
use px_nfs::lb::{Lb, LbConfig};
use px_nfs::{traffic, Verdict};
use pxio::{PxioBuilder, RxPacket, TscClock};

fn main() -> anyhow::Result<()> {
    let eal = harness::eal(env!("CARGO_CRATE_NAME"))?;
    // 64 clients (IPv4 and IPv6) of one virtual service with 8 backends, 20 bursts of 45 segments each.
    let flows = traffic::flows(64, [10, 0], traffic::VIP_V4, traffic::SERVER_V6, 80);
    let input = traffic::tcp_traffic(&flows, 20, 45, 1500);
    run(
        &eal,
        env!("CARGO_CRATE_NAME"),
        input,
        Lb::new(LbConfig::with_backends(
            traffic::VIP_V4,
            traffic::SERVER_V6,
            80,
            8,
        )),
        false,
    )?;
    Ok(())
}

/// Runs `lb` on `input` between ring ports; returns what left (when `keep`) and the load balancer.
pub fn run(
    eal: &Eal,
    name: &str,
    input: Vec<Vec<u8>>,
    mut lb: Lb,
    keep: bool,
) -> anyhow::Result<(Vec<Vec<u8>>, Lb)> {
    let mut lab = Lab::new(eal, name, input, keep)?;
    let mut burst = Burst::<32>::new();
    let mut px = PxioBuilder::for_ports(&lab.rx_port, &lab.tx_port)?
        .align_imtu(52) // IPv4 + TCP timestamps: merged packets split back into full segments
        .build(lab.headers.clone(), TscClock::new(eal))?;
    let mut merged = Vec::new();
    let mut calls = 0u64;
    let mut more = true;
    while more {
        more = lab.step()?;
        lab.rx.rx_burst(&mut burst);
        px.rx_meta(burst.drain(), &mut merged);
        if !more {
            px.flush_meta(&mut merged); // the input ended: nothing more will join what is held
        }
        for RxPacket { mut pkt, meta } in merged.drain(..) {
            calls += 1;
            let verdict = match meta {
                Some(meta) => lb.process(&mut pkt, &meta.hdr),
                None => Verdict::Drop,
            };
            if verdict == Verdict::Forward {
                let _ = px.tx(pkt); // a packet that cannot be split is dropped and counted
            }
        }
        px.flush_tx(&mut lab.tx);
    }
    drop(px);
    let out = lab.report(name, calls, lb.stats())?;
    Ok((out, lb))
}
