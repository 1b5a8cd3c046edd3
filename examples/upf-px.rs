//! A 5G UPF data path (dUPF design), ported to pxio: PDR/FAR/QER lookups once per merged downlink
//! packet, split back to the sender's segments, each GTP-U encapsulated; uplink decapsulated and
//! split to the N6 MTU by pxio. 256 k sessions of 16 PDRs with SDF filters: 4 M PDRs,
//! 512 k FARs, 512 k QERs.
//! `cargo run --release --example upf-px` (as root: it boots an EAL on ring ports).

use dpdk::{Burst, Eal};
use px_nfs::harness::{self, Lab};
use px_nfs::upf::{SessionSpec, Upf, UpfConfig};
use px_nfs::{traffic, Verdict};
use pxio::{PxioBuilder, RxPacket, TscClock};

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
    let mut px = PxioBuilder::for_ports(&lab.rx_port, &lab.tx_port)?
        .tx_mtu(upf.config().n6_mtu)
        .align_imtu(52) // IPv4 + TCP timestamps: merged packets split back into full segments
        .build(lab.headers.clone(), TscClock::new(eal))?;
    let (mut merged, mut pieces) = (Vec::new(), Vec::new());
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
            match meta {
                Some(m) if Upf::is_uplink(&m.hdr) => {
                    let verdict = upf.uplink(&mut pkt, &m.hdr, lab.now_ns());
                    if verdict == Verdict::Forward {
                        let _ = px.tx(pkt); // split to the N6 MTU if a gNB sent more
                    }
                }
                Some(m) => {
                    if let Some(rule) = upf.downlink(&m.hdr, lab.now_ns()) {
                        let _ = px.split(pkt, m.seg_mtu(), &mut pieces); // the sender's segments
                        for pkt in pieces.drain(..) {
                            if let Some(pkt) = upf.encap(pkt, m.hdr.l2_len, rule, px.pool()) {
                                px.enqueue(pkt);
                            }
                        }
                    }
                }
                None => {} // neither TCP nor UDP: dropped
            }
        }
        px.flush_tx(&mut lab.tx);
    }
    drop(px);
    let out = lab.report(name, calls, upf.stats())?;
    Ok((out, upf))
}
