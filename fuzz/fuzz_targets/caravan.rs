//! PX-caravans (SIGCOMM'26 §6, `docs/caravan.md`), two ways:
//! - unpacking arbitrary bytes behind a caravan-marked IPv4 or IPv6 UDP header (with or without
//!   an 802.1Q tag), as a buggy or hostile inside host could send them, either as they are
//!   (mostly ordinary datagrams that wear the mark, which must be refused) or behind the caravan
//!   header a packer would write for them (magic, version, the count of inner headers their
//!   length fields lead to, the check), so the fuzzer reaches the walk without guessing the
//!   check: no panic; only a caravan header makes a caravan; a refused caravan comes back
//!   unchanged with nothing delivered; an accepted one gives well-formed UDP datagrams that fit
//!   in it;
//! - packing arbitrary datagrams of one flow with `CaravanBuilder` and unpacking the caravan:
//!   the same datagrams come back, byte for byte, in order.
//!
//! Nothing leaks either way.
#![forbid(unsafe_code)]
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pxio::caravan::{self, format, CaravanBuilder, CaravanConfig, CaravanError};
use pxio::wire::repr::{udp_frame, EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr};
use pxio::wire::{classify, Class};
use pxio::{HeapBuf, HeapPool, PacketBuf};
use pxio_fuzz::segment::{v4_addr, v6_addr, DST_MAC, SRC_MAC};

#[derive(Arbitrary, Debug)]
enum Case {
    /// Arbitrary caravan payload behind a marked header, sealed with a caravan header or not.
    Unpack {
        v6: bool,
        vlan: Option<u16>,
        sealed: bool,
        body: Vec<u8>,
    },
    /// Datagrams of these payload sizes (modulo 1472) packed, then unpacked.
    RoundTrip {
        v6: bool,
        vlan: Option<u16>,
        sizes: Vec<u16>,
        dont_frag: bool,
    },
}

fn headers(v6: bool, vlan: Option<u16>, dscp: u8, dont_frag: bool) -> (EthernetRepr, IpRepr) {
    let eth = EthernetRepr {
        dst: DST_MAC,
        src: SRC_MAC,
        vlan_tci: vlan.map(|v| v & 0x0fff),
        ethertype: 0,
    };
    let ip = if v6 {
        IpRepr::V6(Ipv6Repr {
            dscp,
            ..Ipv6Repr::new(v6_addr(1), v6_addr(2))
        })
    } else {
        IpRepr::V4(Ipv4Repr {
            dscp,
            dont_frag,
            ..Ipv4Repr::new(v4_addr(1), v4_addr(2))
        })
    };
    (eth, ip)
}

/// `body` behind a caravan header counting the inner headers its length fields lead to.
fn sealed(body: &[u8]) -> Vec<u8> {
    let (mut at, mut count) = (0usize, 0u8);
    while let Some(h) = body.get(at..).and_then(|r| r.first_chunk::<8>()) {
        count = count.wrapping_add(1);
        at += usize::from(u16::from_be_bytes([h[4], h[5]])).max(8);
        if count == u8::MAX {
            break;
        }
    }
    [&format::encode_header(count)[..], body].concat()
}

const PORTS: UdpRepr = UdpRepr {
    src_port: 5000,
    dst_port: 7000,
};

fuzz_target!(|case: Case| {
    let pool = HeapPool::new(256);
    let cfg = CaravanConfig::default();
    match case {
        Case::Unpack {
            v6,
            vlan,
            sealed: seal,
            body,
        } => {
            let body = &body[..body.len().min(9000)];
            let payload = if seal { sealed(body) } else { body.to_vec() };
            let (eth, ip) = headers(v6, vlan, cfg.dscp, true);
            let Ok(frame) = udp_frame(eth, ip, PORTS, &payload) else {
                return;
            };
            let mut out = Vec::new();
            match caravan::unpack(pool.packet(&frame), &cfg, &pool, &mut out) {
                Ok(n) => {
                    assert_eq!(n, out.len());
                    assert!(
                        payload.starts_with(&caravan::MAGIC),
                        "only a caravan header makes a caravan"
                    );
                    let mut inner = 0;
                    for d in &out {
                        let bytes = d.to_vec();
                        let Class::Udp(h) = classify(&bytes, bytes.len()) else {
                            panic!("an unpacked datagram is not well-formed UDP");
                        };
                        inner += usize::from(h.ip_len - h.l3_len);
                    }
                    assert!(inner <= payload.len(), "datagrams larger than the caravan");
                }
                Err((e, back)) => {
                    assert!(out.is_empty(), "nothing delivered from a refused caravan");
                    assert_eq!(
                        back.to_vec(),
                        frame,
                        "a refused caravan comes back unchanged"
                    );
                    if !payload.starts_with(&caravan::MAGIC) {
                        assert!(
                            matches!(e, CaravanError::NotCaravan | CaravanError::NotUdp),
                            "without the magic: {e}"
                        );
                    }
                }
            }
        }
        Case::RoundTrip {
            v6,
            vlan,
            sizes,
            dont_frag,
        } => {
            let (eth, ip) = headers(v6, vlan, 0, dont_frag);
            let datagrams: Vec<Vec<u8>> = sizes
                .iter()
                .take(80)
                .enumerate()
                .map(|(i, s)| {
                    let payload: Vec<u8> = (0..usize::from(s % 1472))
                        .map(|k| (i * 31 + k * 7) as u8)
                        .collect();
                    udp_frame(eth, ip, PORTS, &payload).expect("fits")
                })
                .collect();
            let Some((first, rest)) = datagrams.split_first() else {
                return;
            };
            let mut builder = match CaravanBuilder::start(pool.packet(first), cfg, &pool) {
                Ok(b) => b,
                Err((e, _)) => panic!("a plain datagram refused as a caravan's first: {e}"),
            };
            let mut packed = vec![first];
            for d in rest {
                match builder.push(pool.packet(d)) {
                    Ok(()) => packed.push(d),
                    Err(_) => break,
                }
            }
            let built: HeapBuf = builder.finish();
            let mut out = Vec::new();
            let n = match caravan::unpack(built, &cfg, &pool, &mut out) {
                Ok(n) => n,
                Err((e, _)) => panic!("a caravan the builder made does not unpack: {e}"),
            };
            assert_eq!(n, packed.len(), "every packed datagram comes back");
            for (k, (d, want)) in out.iter().zip(&packed).enumerate() {
                let got = d.to_vec();
                let (Class::Udp(g), Class::Udp(w)) =
                    (classify(&got, got.len()), classify(want, want.len()))
                else {
                    panic!("datagram {k}: not UDP after the round trip");
                };
                assert_eq!(g.key, w.key, "datagram {k}: flow");
                assert_eq!(
                    &got[g.l4_offset()..g.frame_len()],
                    &want[w.l4_offset()..w.frame_len()],
                    "datagram {k}: UDP header and payload"
                );
            }
        }
    }
    assert_eq!(pool.in_use(), 0, "buffers leaked");
});
