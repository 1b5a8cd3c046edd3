//! `pxgw replay` on the capture the gateway lab recorded (`pxgw-lab capture`: tcpdump on the
//! outside host while 192 KiB crossed pxgw inbound in IPv4 and in IPv6, 64 KiB outbound in IPv4,
//! 24 UDP datagrams inbound in each family, and an interactive flow of eight lines 50 ms apart):
//! the inside host's TCP byte streams are those the outside host sent, the bulk flows are merged
//! and the interactive one is reported as too sparse, and pcapng input gives the same result as
//! pcap.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use pxgw::config::Config;
use pxgw::replay::{replay, ReplayOptions, ReplayReport};

const CAPTURE: &str = "tests/captures/lab-outside.pcap";
/// The lab's inside host.
const INSIDE: [&str; 2] = ["198.51.100.2/32", "2001:db8:100::2/128"];
/// What each inbound transfer carried.
const INBOUND_BYTES: usize = 192 << 10;

fn config(imtu: u16, extra: &str) -> Config {
    Config::parse(&format!(
        "[ports.external]\ndevice = \"net_null0\"\nmtu = 1500\n\
         [ports.internal]\ndevice = \"net_null1\"\nmtu = {imtu}\n\
         [merge]\nrate_threshold_gbps = 0.01\nmax_window_us = 300\n{extra}"
    ))
    .expect("a valid configuration")
}

fn opts() -> ReplayOptions {
    ReplayOptions {
        inside: INSIDE.iter().map(|p| p.parse().unwrap()).collect(),
        burst_ns: 10_000,
    }
}

fn frames(path: &Path) -> Vec<(Duration, Vec<u8>)> {
    let mut r = PcapReader::new(BufReader::new(File::open(path).unwrap())).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        v.push((p.timestamp, p.data.into_owned()));
    }
    v
}

type Flow = (IpAddr, u16, IpAddr, u16);

/// Each TCP flow's byte stream toward the inside host, reassembled by sequence number from
/// `frames` (retransmissions must carry the same bytes). Frames not to the inside are ignored.
fn streams(frames: &[(Duration, Vec<u8>)]) -> HashMap<Flow, Vec<u8>> {
    let inside: Vec<IpAddr> = ["198.51.100.2", "2001:db8:100::2"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let mut isn: HashMap<Flow, u32> = HashMap::new();
    let mut segs: HashMap<Flow, BTreeMap<u32, Vec<u8>>> = HashMap::new();
    for (_, f) in frames {
        let p = SlicedPacket::from_ethernet(f).expect("an Ethernet frame");
        let (src, dst): (IpAddr, IpAddr) = match &p.net {
            Some(NetSlice::Ipv4(ip)) => (
                ip.header().source_addr().into(),
                ip.header().destination_addr().into(),
            ),
            Some(NetSlice::Ipv6(ip)) => (
                ip.header().source_addr().into(),
                ip.header().destination_addr().into(),
            ),
            _ => continue,
        };
        let Some(TransportSlice::Tcp(t)) = &p.transport else {
            continue;
        };
        if !inside.contains(&dst) {
            continue;
        }
        let key = (src, t.source_port(), dst, t.destination_port());
        if t.syn() {
            isn.insert(key, t.sequence_number().wrapping_add(1));
        }
        if !t.payload().is_empty() {
            let base = *isn.get(&key).expect("the handshake is in the capture");
            let off = t.sequence_number().wrapping_sub(base);
            let e = segs.entry(key).or_default();
            if let Some(prev) = e.get(&off) {
                assert_eq!(
                    &prev[..prev.len().min(t.payload().len())],
                    &t.payload()[..prev.len().min(t.payload().len())],
                    "a retransmission with other bytes"
                );
            }
            let longer = e.get(&off).is_none_or(|p| p.len() < t.payload().len());
            if longer {
                e.insert(off, t.payload().to_vec());
            }
        }
    }
    segs.into_iter()
        .map(|(k, parts)| {
            let mut s: Vec<u8> = Vec::new();
            for (off, bytes) in parts {
                let off = off as usize;
                assert!(off <= s.len(), "{k:?}: a hole at byte {}", s.len());
                let end = off + bytes.len();
                if end > s.len() {
                    let overlap = s.len() - off;
                    assert_eq!(
                        &s[off..],
                        &bytes[..overlap],
                        "{k:?}: overlapping bytes differ"
                    );
                    s.extend_from_slice(&bytes[overlap..]);
                }
            }
            (k, s)
        })
        .collect()
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pxgw-replay-{}-{name}", std::process::id()))
}

fn run(cfg: &Config, input: &Path, name: &str) -> (ReplayReport, Vec<(Duration, Vec<u8>)>) {
    let out = tmp(name);
    let report = replay(cfg, input, &out, None, &opts()).expect("the replay runs");
    let got = frames(&out);
    let _ = std::fs::remove_file(&out);
    (report, got)
}

/// The shipped capture, through iMTU 9000 and 4000: the inside host gets the very byte streams
/// the outside host sent (IPv4 and IPv6), in fewer, larger frames, none above the iMTU.
#[test]
fn replay_keeps_tcp_streams_and_merges() {
    let input = frames(Path::new(CAPTURE));
    let sent = streams(&input);
    assert_eq!(
        sent.len(),
        3,
        "a bulk transfer per family and the interactive flow"
    );
    let bulk: Vec<&Flow> = sent.keys().filter(|k| k.3 == 5001).collect();
    assert_eq!(bulk.len(), 2);
    assert!(bulk.iter().all(|k| sent[*k].len() == INBOUND_BYTES));
    assert!(bulk.iter().any(|k| k.0.is_ipv6()) && bulk.iter().any(|k| k.0.is_ipv4()));
    let lines: String = (1..=8).map(|i| format!("line-{i}\n")).collect();
    assert!(sent.values().any(|s| s == lines.as_bytes()));
    for imtu in [9000u16, 4000] {
        let cfg = config(imtu, "");
        let (r, got) = run(&cfg, Path::new(CAPTURE), &format!("imtu{imtu}.pcap"));
        assert_eq!(
            streams(&got),
            sent,
            "iMTU {imtu}: the inside streams differ"
        );
        assert_eq!(r.frames, input.len() as u64);
        assert_eq!(r.inbound.packets_out, got.len() as u64);
        // The per-packet work inside drops to well under half, every frame fits the iMTU.
        assert!(
            r.inbound.nf_cost_ratio < 0.5,
            "iMTU {imtu}: {:?}",
            r.inbound
        );
        assert!(got.iter().all(|(_, f)| f.len() <= usize::from(imtu) + 18));
        assert!(got.iter().any(|(_, f)| f.len() > 1514 + 18));
        assert!(
            r.conversion_yield > 0.5,
            "iMTU {imtu}: yield {}",
            r.conversion_yield
        );
        assert_eq!(r.flows.tcp_flows, 3);
        assert_eq!(r.flows.merged, 2);
        assert_eq!(r.flows.never_merged.len(), 1);
        let sparse = &r.flows.never_merged[0];
        assert!(sparse.flow.ends_with(":5003"), "{sparse:?}");
        assert_eq!((sparse.segments, sparse.payload_bytes), (8, 56));
        assert!(sparse.reason.starts_with("too sparse"), "{sparse:?}");
        // 24 datagrams each way in each family; most ride in caravans.
        assert_eq!(r.udp.datagrams, 48);
        assert!(
            r.udp.in_caravans > 24 && r.caravan.caravans_built >= 2,
            "{:?}",
            r.udp
        );
        assert!(r.added_delay.segments > 0 && r.added_delay.max_us < 300.0 + 50.0);
        assert_eq!(r.drops.total(), 0);
        // Time stamps follow the capture's: the output spans it, and never runs backwards.
        assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
        assert!(got.first().unwrap().0 >= input.first().unwrap().0);
    }
}

/// Merging off: nothing merges, the streams are still intact, and the report says why.
#[test]
fn replay_without_merging_says_why() {
    let cfg = config(9000, "enabled = false\n");
    let (r, got) = run(&cfg, Path::new(CAPTURE), "off.pcap");
    assert_eq!(streams(&got), streams(&frames(Path::new(CAPTURE))));
    assert_eq!(r.flows.merged, 0);
    assert_eq!(r.flows.never_merged.len(), 3);
    assert!(r.flows.never_merged[0].reason.contains("merging is off"));
    assert_eq!(r.flows.never_merged[0].payload_bytes, INBOUND_BYTES as u64);
}

/// The same capture as pcapng (time stamps in the default unit, µs) replays exactly as the pcap.
#[test]
fn pcapng_input_replays_like_pcap() {
    let input = frames(Path::new(CAPTURE));
    let ng = tmp("in.pcapng");
    {
        let mut w = PcapNgWriter::new(File::create(&ng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![],
        })
        .unwrap();
        for (ts, f) in &input {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                // pcap-file writes the count of units it is given; the unit is 1 µs.
                timestamp: Duration::from_nanos(ts.as_micros() as u64),
                original_len: f.len() as u32,
                data: f.as_slice().into(),
                options: vec![],
            })
            .unwrap();
        }
    }
    let cfg = config(9000, "");
    let (a, from_pcap) = run(&cfg, Path::new(CAPTURE), "a.pcap");
    let (b, from_ng) = run(&cfg, &ng, "b.pcap");
    let _ = std::fs::remove_file(&ng);
    assert_eq!(b.format, "pcapng");
    assert_eq!(streams(&from_ng), streams(&from_pcap));
    assert!(
        (a.duration_s - b.duration_s).abs() < 1e-6,
        "{} vs {}",
        a.duration_s,
        b.duration_s
    );
    assert_eq!(
        (a.inbound, a.outbound, a.conversion_yield),
        (b.inbound, b.outbound, b.conversion_yield)
    );
}

/// A capture that is not one, and one of another link type, are refused with a reason.
#[test]
fn bad_captures_are_refused() {
    let junk = tmp("junk.pcap");
    std::fs::write(&junk, b"not a capture at all").unwrap();
    let e = replay(&config(9000, ""), &junk, &tmp("x.pcap"), None, &opts()).unwrap_err();
    assert!(e.to_string().contains("junk.pcap"), "{e}");
    let _ = std::fs::remove_file(&junk);
    // `tcpdump -i any` writes Linux cooked headers, not Ethernet.
    let sll = tmp("sll.pcap");
    pcap_file::pcap::PcapWriter::with_header(
        File::create(&sll).unwrap(),
        pcap_file::pcap::PcapHeader {
            datalink: DataLink::LINUX_SLL,
            ..Default::default()
        },
    )
    .unwrap();
    let e = replay(&config(9000, ""), &sll, &tmp("x.pcap"), None, &opts()).unwrap_err();
    assert!(e.to_string().contains("only Ethernet"), "{e}");
    let _ = std::fs::remove_file(&sll);
    let _ = std::fs::remove_file(tmp("x.pcap"));
}
