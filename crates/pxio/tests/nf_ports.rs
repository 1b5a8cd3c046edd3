//! `Pxio` on real ports (ring PMD, under the test EAL): `PxioBuilder::for_ports` derives its
//! settings from the devices, and the TX queue keeps what a full ring did not take, in order,
//! until the next `flush_tx`.

#![cfg(feature = "dpdk")]

use dpdk::{testing, Burst, Port, TxOffloads};
use pxio::split::SplitOffloads;
use pxio::{ManualClock, Pxio, PxioBuilder};

#[test]
fn for_ports_derives_the_settings_and_tx_keeps_what_a_full_ring_left() {
    let eal = testing::eal();
    let pool = testing::pool(1024, 2048 + 128);
    let headers = testing::pool(256, 256 + 128);
    // What a transmits, b receives; the ring holds 63 packets.
    let (a, b) = eal.ring_pair(&testing::unique("nfring"), 64).unwrap();
    let (pa, pb) = (
        Port::builder(eal, a).start(&pool).unwrap(),
        Port::builder(eal, b).start(&pool).unwrap(),
    );
    let builder = PxioBuilder::for_ports(&pb, &pa).unwrap();
    let cfg = builder.config().clone();
    assert_eq!(Pxio::for_ports(&pb, &pa).unwrap().config(), &cfg);
    assert_eq!(cfg.tx_mtu, pa.mtu().unwrap());
    let granted = pa.tx_offloads();
    assert_eq!(
        cfg.offloads,
        SplitOffloads {
            tso: granted.contains(TxOffloads::TCP_TSO),
            checksum: granted.contains(TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM),
        }
    );
    let limit = pb.device_info().unwrap().mtu_limit();
    assert!(cfg.merge.imtu >= 1280 && cfg.merge.imtu <= 9000.min(limit.max(1280)));
    let clock = ManualClock::new(0);
    let mut px = builder.build(headers.clone(), &clock).unwrap();

    // 100 distinct frames, queued as they are.
    let frames: Vec<Vec<u8>> = (0..100u8)
        .map(|i| {
            let mut f = vec![i; 60];
            f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental EtherType
            f
        })
        .collect();
    for f in &frames {
        let mut m = pool.alloc().unwrap();
        m.extend_from_slice(f).unwrap();
        assert!(px.enqueue(m));
    }
    let (mut tx, mut rx) = (pa.tx_queue(0).unwrap(), pb.rx_queue(0).unwrap());
    let first = px.flush_tx(&mut tx);
    assert!(first < 100, "the ring cannot take 100: it took {first}");
    assert_eq!(px.tx_pending(), 100 - first, "what the ring left is kept");
    let mut got = Vec::new();
    let mut burst = Burst::<32>::new();
    let mut drain = |got: &mut Vec<Vec<u8>>| {
        while rx.rx_burst(&mut burst) > 0 {
            got.extend(burst.drain().map(|m| m.to_vec()));
        }
    };
    drain(&mut got);
    assert_eq!(px.flush_tx(&mut tx), 100 - first);
    drain(&mut got);
    assert_eq!(px.tx_pending(), 0);
    assert!(got == frames, "every frame once, in order");
    assert_eq!(px.tx_stats().sent, 100);
    drop((px, tx, rx, pa, pb));
    testing::assert_no_leaks(&pool);
    testing::assert_no_leaks(&headers);
}
