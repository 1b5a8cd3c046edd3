//! `pxgw replay`: "what would PacketExpress do to my traffic?", answered offline. Runs a capture
//! of the operator's own traffic (pcap or pcapng, Ethernet) through the same [`Pipeline`] the
//! gateway's workers run, in trace time, with the configuration's iMTU, delay budget and caravan
//! settings, and writes what the inside host would receive as a pcap, with a [`ReplayReport`].
//!
//! - **Direction.** A frame whose destination address is inside (`--inside CIDR`, repeatable)
//!   goes the inbound way (outside → inside, merged, packed into caravans); one whose source is
//!   inside goes outbound (split, unpacked); others are counted and left out.
//! - **Trace time.** The clock is the capture's time stamps. Inbound frames closer than
//!   `burst_ns` to the first of a burst (at most 32, the gateway's RX burst) form one RX burst,
//!   as a busy-polling worker would see them; deadlines (merge windows, caravan timeouts) fire at
//!   their own time between frames. Frames leave at the time they are emitted.
//! - **Reading.** The pure-Rust `pcap-file` crate, not DPDK's `net_pcap`: replay needs no EAL,
//!   no hugepages and no root, runs on [`HeapBuf`]s in a test, and reads pcapng too (with its
//!   per-interface time-stamp resolution).
//! - **Its own loop.** The per-packet step is the worker's: the same [`Pipeline`] calls
//!   (`inbound`, `end_of_burst`, `outbound`, `poll`, `take_replies`). What `crate::worker` adds
//!   around them cannot run here: it polls DPDK queues into `Mbuf` bursts, reads the wall clock,
//!   and transmits through TX queues, while replay takes frames one at a time in capture order,
//!   cuts RX bursts by their time stamps, and fires each deadline at its own time between
//!   frames, so the times it reports are the capture's.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use pxio::split::SplitOffloads;
use pxio::wire::ethernet::ethertype;
use pxio::wire::TcpPacket;
use pxio::wire::{self, ipv4, ipv6, tcp_flags, Class, EthernetFrame, Ipv4Packet, Ipv6Packet};
use pxio::{HeapBuf, HeapPool, PacketBuf};
use serde::Serialize;

use crate::config::Config;
use crate::conn;
use crate::pipeline::Pipeline;
use crate::stats::{CaravanSummary, Drops, MergeSummary};

/// The gateway's RX burst: at most this many frames are handled before the burst settles.
const BURST: usize = 32;
/// Connections idle this long are forgotten, as in a worker.
const CONN_IDLE_NS: u64 = 300_000_000_000;
/// Flows listed by name in the report's `never_merged` (the rest are counted).
const MAX_LISTED_FLOWS: usize = 50;

/// Why a replay failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file could not be opened or written (the reason is the error's source).
    #[error("{path}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The capture is not a pcap or pcapng file this reader understands.
    #[error("{path}: {reason}")]
    Capture {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// An `--inside` value that is not an address prefix.
    #[error("{0}: expected an address with a prefix length, e.g. 10.0.0.0/8 or 2001:db8::/32")]
    Prefix(String),
    /// The pipeline refused the configuration.
    #[error("the configuration: {0}")]
    Config(String),
}

/// An `--inside` address prefix, `10.0.0.0/8` or `2001:db8::/32`; a bare address is a /32 or
/// /128.
pub fn parse_prefix(s: &str) -> Result<IpNet, ReplayError> {
    match s.parse::<IpAddr>() {
        Ok(addr) => Ok(IpNet::from(addr)),
        Err(_) => s.parse().map_err(|_| ReplayError::Prefix(s.to_owned())),
    }
}

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayOptions {
    /// The inside network(s).
    pub inside: Vec<IpNet>,
    /// Inbound frames closer than this to the first of a burst share its RX burst, ns.
    pub burst_ns: u64,
}

/// One direction's frames through the replay.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct ReplayDirection {
    /// Frames of the capture going this way.
    pub packets_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Frames the gateway would send.
    pub packets_out: u64,
    /// Their bytes.
    pub bytes_out: u64,
    /// The network functions' cost after the gateway relative to before: frames out / frames
    /// in (SIGCOMM'26 §2: per-packet NF work scales with the packet count).
    pub nf_cost_ratio: f64,
}

/// The added-delay distribution, µs.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct DelaySummary {
    /// Segments measured.
    pub segments: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// A TCP flow whose inbound data the gateway never merged, and the most likely reason.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct UnmergedFlow {
    /// `src:port -> dst:port`.
    pub flow: String,
    /// Data segments in the capture.
    pub segments: u64,
    /// Their payload bytes.
    pub payload_bytes: u64,
    /// Why (from what the capture shows of the flow; see docs/operations.md, "Replay").
    pub reason: String,
}

/// TCP flows toward the inside.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct FlowSummary {
    /// Inbound TCP flows that carried data.
    pub tcp_flows: u64,
    /// Of those, flows with at least one segment merged (fewer data packets out than in).
    pub merged: u64,
    /// Flows never merged, most payload first (at most 50 listed).
    pub never_merged: Vec<UnmergedFlow>,
    /// Never-merged flows beyond those listed.
    pub never_merged_unlisted: u64,
}

/// Inbound UDP.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct UdpSummary {
    /// Inbound datagrams in the capture.
    pub datagrams: u64,
    /// Of those, carried inside in caravans.
    pub in_caravans: u64,
    /// `in_caravans / datagrams`.
    pub caravan_share: f64,
}

/// What a replay found: the fields docs/operations.md documents ("Replay").
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct ReplayReport {
    /// `pcap` or `pcapng`.
    pub format: String,
    /// Frames in the capture.
    pub frames: u64,
    /// Seconds from its first frame to its last.
    pub duration_s: f64,
    /// Frames neither from nor to the inside (not replayed), and non-Ethernet or cut frames.
    pub skipped: u64,
    /// Frames cut short by the capture's snap length (replayed as cut).
    pub truncated: u64,
    /// Frames above the external MTU: the capture host's offloads (GRO, TSO) were on, so the
    /// capture does not show the wire.
    pub above_emtu: u64,
    /// Outside → inside.
    pub inbound: ReplayDirection,
    /// Inside → outside.
    pub outbound: ReplayDirection,
    /// Conversion yield: share of merged payload that left iMTU-bound (SIGCOMM'26 §4.1).
    pub conversion_yield: f64,
    /// Added delay.
    pub added_delay: DelaySummary,
    /// The merge engine.
    pub merge: MergeSummary,
    /// Caravans.
    pub caravan: CaravanSummary,
    /// UDP.
    pub udp: UdpSummary,
    /// TCP flows.
    pub flows: FlowSummary,
    /// Drops by reason.
    pub drops: Drops,
}

/// One frame of the capture: time stamp (ns) and bytes.
struct Frame {
    t: u64,
    data: Vec<u8>,
    truncated: bool,
}

/// Reads every frame of a pcap or pcapng file (Ethernet link type only).
fn read_capture(path: &Path) -> Result<(String, Vec<Frame>), ReplayError> {
    let p = path.display().to_string();
    let io = |source| ReplayError::Io {
        path: p.clone(),
        source,
    };
    let cap = |reason: String| ReplayError::Capture {
        path: p.clone(),
        reason,
    };
    let mut file = BufReader::new(File::open(path).map_err(io)?);
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic).map_err(io)?;
    let file = BufReader::new(File::open(path).map_err(io)?);
    let mut frames = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(file).map_err(|e| cap(e.to_string()))?;
        // Per interface: link type and time-stamp unit in ns (pcapng's default unit is 1 µs).
        let mut ifaces: Vec<(DataLink, f64)> = Vec::new();
        while let Some(block) = r.next_block() {
            match block.map_err(|e| cap(e.to_string()))? {
                Block::SectionHeader(_) => ifaces.clear(),
                Block::InterfaceDescription(idb) => {
                    let mut unit = 1000.0;
                    for o in &idb.options {
                        if let InterfaceDescriptionOption::IfTsResol(r) = o {
                            unit = if r & 0x80 == 0 {
                                1e9 / 10f64.powi(i32::from(*r))
                            } else {
                                1e9 / 2f64.powi(i32::from(r & 0x7f))
                            };
                        }
                    }
                    ifaces.push((idb.linktype, unit));
                }
                Block::EnhancedPacket(epb) => {
                    let Some(&(link, unit)) = ifaces.get(epb.interface_id as usize) else {
                        return Err(cap(format!(
                            "a packet of interface {} that no block describes",
                            epb.interface_id
                        )));
                    };
                    if link != DataLink::ETHERNET {
                        return Err(cap(format!(
                            "link type {link:?}: only Ethernet captures can be replayed (capture \
                             on an interface, not `-i any`)"
                        )));
                    }
                    // pcap-file hands the raw count of units as nanoseconds.
                    let t = (epb.timestamp.as_nanos() as f64 * unit) as u64;
                    frames.push(Frame {
                        t,
                        truncated: (epb.original_len as usize) > epb.data.len(),
                        data: epb.data.into_owned(),
                    });
                }
                Block::SimplePacket(spb) => {
                    // No time stamp: it shares the previous frame's.
                    let t = frames.last().map_or(0, |f: &Frame| f.t);
                    frames.push(Frame {
                        t,
                        truncated: (spb.original_len as usize) > spb.data.len(),
                        data: spb.data.into_owned(),
                    });
                }
                _ => {}
            }
        }
        Ok(("pcapng".into(), frames))
    } else {
        let mut r = PcapReader::new(file).map_err(|e| cap(e.to_string()))?;
        if r.header().datalink != DataLink::ETHERNET {
            return Err(cap(format!(
                "link type {:?}: only Ethernet captures can be replayed (capture on an \
                 interface, not `-i any`)",
                r.header().datalink
            )));
        }
        while let Some(p) = r.next_packet() {
            let p = p.map_err(|e| cap(e.to_string()))?;
            frames.push(Frame {
                t: p.timestamp.as_nanos() as u64,
                truncated: (p.orig_len as usize) > p.data.len(),
                data: p.data.into_owned(),
            });
        }
        Ok(("pcap".into(), frames))
    }
}

/// The IP source and destination of an Ethernet frame (VLAN tags as `pxio::wire` reads them:
/// up to two). Only the fixed IP header must be there: a frame cut by the snap length is still
/// placed.
fn ip_addrs(f: &[u8]) -> Option<(IpAddr, IpAddr)> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    let ip = eth.payload();
    match eth.ethertype() {
        ethertype::IPV4 if ip.len() >= ipv4::field::HEADER_LEN => {
            let p = Ipv4Packet::new_unchecked(ip);
            Some((
                Ipv4Addr::from(p.src_addr()).into(),
                Ipv4Addr::from(p.dst_addr()).into(),
            ))
        }
        ethertype::IPV6 if ip.len() >= ipv6::field::HEADER_LEN => {
            let p = Ipv6Packet::new_unchecked(ip);
            Some((
                Ipv6Addr::from(p.src_addr()).into(),
                Ipv6Addr::from(p.dst_addr()).into(),
            ))
        }
        _ => None,
    }
}

/// What the capture shows of one inbound TCP flow.
#[derive(Default)]
struct FlowSeen {
    syn: bool,
    data_in: u64,
    payload: u64,
    max_payload: u64,
    first_t: u64,
    last_t: u64,
    data_out: u64,
}

fn flow_name(k: &wire::FlowKey) -> String {
    let addr = |a: &[u8; 16]| -> String {
        if k.v6 {
            format!("[{}]", std::net::Ipv6Addr::from(*a))
        } else {
            std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]).to_string()
        }
    };
    format!(
        "{}:{} -> {}:{}",
        addr(&k.src),
        k.sport,
        addr(&k.dst),
        k.dport
    )
}

/// The TCP flow, payload length and SYN flag of a frame, when it is TCP.
fn tcp_of(f: &[u8]) -> Option<(wire::FlowKey, u64, bool)> {
    match wire::classify(f, f.len()) {
        Class::Tcp(h) => {
            let tcp = TcpPacket::new_checked(f.get(h.l4_offset()..)?).ok()?;
            Some((
                h.key,
                u64::from(h.payload_len),
                tcp.has_flags(tcp_flags::SYN),
            ))
        }
        _ => None,
    }
}

/// Replays `input` through a pipeline configured by `cfg`; writes what the inside host would
/// receive to `inside_out` (pcap, ns time stamps) and, when given, what the outside would to
/// `outside_out`.
pub fn replay(
    cfg: &Config,
    input: &Path,
    inside_out: &Path,
    outside_out: Option<&Path>,
    opts: &ReplayOptions,
) -> Result<ReplayReport, ReplayError> {
    let (format, frames) = read_capture(input)?;
    // Header buffers as the gateway's header pool holds them (256 B data room, 128 headroom).
    let offloads = SplitOffloads {
        tso: false,
        checksum: false,
    };
    let mut px: Pipeline<HeapBuf> =
        Pipeline::new(cfg, HeapPool::new(128), HeapPool::new(128), offloads)
            .map_err(|e| ReplayError::Config(format!("{e:#}")))?;
    let frame_pool = HeapPool::new(usize::from(u16::MAX));
    let writer = |path: &Path| -> Result<PcapWriter<BufWriter<File>>, ReplayError> {
        let p = path.display().to_string();
        let f = File::create(path).map_err(|source| ReplayError::Io {
            path: p.clone(),
            source,
        })?;
        PcapWriter::with_header(
            BufWriter::new(f),
            PcapHeader {
                datalink: DataLink::ETHERNET,
                ts_resolution: TsResolution::NanoSecond,
                snaplen: 262_144,
                ..PcapHeader::default()
            },
        )
        .map_err(|e| ReplayError::Capture {
            path: p,
            reason: e.to_string(),
        })
    };
    let mut to_inside = writer(inside_out)?;
    let mut to_outside = outside_out.map(writer).transpose()?;
    let out_err = |e: pcap_file::PcapError| ReplayError::Capture {
        path: inside_out.display().to_string(),
        reason: e.to_string(),
    };

    let mut report = ReplayReport {
        format,
        frames: frames.len() as u64,
        duration_s: match (frames.first(), frames.last()) {
            (Some(a), Some(b)) => b.t.saturating_sub(a.t) as f64 / 1e9,
            _ => 0.0,
        },
        ..ReplayReport::default()
    };
    let emtu = usize::from(cfg.emtu());
    let mut flows: HashMap<wire::FlowKey, FlowSeen> = HashMap::new();
    let mut udp_in = 0u64;
    let (mut out_int, mut out_ext): (Vec<HeapBuf>, Vec<HeapBuf>) = (Vec::new(), Vec::new());
    // Writes what the pipeline emitted at `t`, and tallies the inbound TCP data it carries.
    let mut emit = |px: &mut Pipeline<HeapBuf>,
                    out_int: &mut Vec<HeapBuf>,
                    out_ext: &mut Vec<HeapBuf>,
                    t: u64,
                    flows: &mut HashMap<wire::FlowKey, FlowSeen>|
     -> Result<(), ReplayError> {
        px.take_replies(out_ext);
        px.take_inside_replies(out_int);
        let ts = Duration::from_nanos(t);
        for b in out_int.drain(..) {
            let bytes = b.to_vec();
            px.count_sent(true, bytes.len());
            if let Some((k, payload, _)) = tcp_of(&bytes) {
                if payload > 0 {
                    if let Some(f) = flows.get_mut(&k) {
                        f.data_out += 1;
                    }
                }
            }
            to_inside
                .write_packet(&PcapPacket::new(ts, bytes.len() as u32, &bytes))
                .map_err(out_err)?;
        }
        for b in out_ext.drain(..) {
            let bytes = b.to_vec();
            px.count_sent(false, bytes.len());
            if let Some(w) = to_outside.as_mut() {
                w.write_packet(&PcapPacket::new(ts, bytes.len() as u32, &bytes))
                    .map_err(out_err)?;
            }
        }
        Ok(())
    };

    let mut burst: Option<(u64, usize)> = None; // (first frame's time, frames in it)
    let mut last_t = 0u64;
    let mut last_expiry = frames.first().map_or(0, |f| f.t);
    for frame in &frames {
        let t = frame.t.max(last_t); // time never runs backwards
        let Some((src, dst)) = ip_addrs(&frame.data) else {
            report.skipped += 1;
            continue;
        };
        let inbound = opts.inside.iter().any(|p| p.contains(&dst));
        let outbound = !inbound && opts.inside.iter().any(|p| p.contains(&src));
        if !inbound && !outbound {
            report.skipped += 1;
            continue;
        }
        // The burst ends when this frame is not part of it (too late, outbound, or full).
        if let Some((t0, n)) = burst {
            if !inbound || t > t0 + opts.burst_ns || n >= BURST {
                px.end_of_burst(last_t, &mut out_int);
                emit(&mut px, &mut out_int, &mut out_ext, last_t, &mut flows)?;
                burst = None;
            }
        }
        // Deadlines that fall before this frame fire at their own time.
        if burst.is_none() {
            let mut guard = 0;
            while let Some(d) = px.next_deadline().filter(|&d| d <= t) {
                px.poll(d.max(last_t), &mut out_int);
                emit(
                    &mut px,
                    &mut out_int,
                    &mut out_ext,
                    d.max(last_t),
                    &mut flows,
                )?;
                guard += 1;
                if guard > 10_000 {
                    break; // a deadline that does not move: go on at the frame's time
                }
            }
            if t.saturating_sub(last_expiry) > 1_000_000_000 {
                px.expire_connections(t, CONN_IDLE_NS);
                last_expiry = t;
            }
        }
        last_t = t;
        report.truncated += u64::from(frame.truncated);
        if frame.data.len() > emtu + 18 {
            report.above_emtu += 1;
        }
        let buf = frame_pool.packet(&frame.data);
        if inbound {
            match tcp_of(&frame.data) {
                Some((k, payload, syn)) => {
                    let f = flows.entry(k).or_default();
                    f.syn |= syn;
                    if payload > 0 {
                        if f.data_in == 0 {
                            f.first_t = t;
                        }
                        f.data_in += 1;
                        f.payload += payload;
                        f.max_payload = f.max_payload.max(payload);
                        f.last_t = t;
                    }
                }
                None => {
                    if matches!(wire::classify(&frame.data, frame.data.len()), Class::Udp(_)) {
                        udp_in += 1;
                    }
                }
            }
            px.inbound(buf, t, &mut out_int);
            burst = Some(burst.map_or((t, 1), |(t0, n)| (t0, n + 1)));
        } else {
            // A SYN from inside opens the connection the inbound flow belongs to.
            if let Some((k, _, true)) = tcp_of(&frame.data) {
                flows.entry(conn::reverse(&k)).or_default().syn = true;
            }
            px.outbound(buf, t, &mut out_ext);
            emit(&mut px, &mut out_int, &mut out_ext, t, &mut flows)?;
        }
    }
    if burst.is_some() {
        px.end_of_burst(last_t, &mut out_int);
    }
    // What is still held leaves when its deadline comes; then everything else (the end).
    while let Some(d) = px.next_deadline() {
        if d > last_t + 60_000_000_000 {
            break;
        }
        let t = d.max(last_t);
        px.poll(t, &mut out_int);
        emit(&mut px, &mut out_int, &mut out_ext, t, &mut flows)?;
        if px.next_deadline() == Some(d) {
            break;
        }
        last_t = t;
    }
    px.flush(last_t, &mut out_int);
    emit(&mut px, &mut out_int, &mut out_ext, last_t, &mut flows)?;
    to_inside.into_writer();
    drop(to_outside);

    let r = px.report();
    let dir = |d: &crate::stats::Direction| ReplayDirection {
        packets_in: d.packets_in,
        bytes_in: d.bytes_in,
        packets_out: d.packets_out,
        bytes_out: d.bytes_out,
        nf_cost_ratio: if d.packets_in == 0 {
            0.0
        } else {
            d.packets_out as f64 / d.packets_in as f64
        },
    };
    report.inbound = dir(&r.inbound);
    report.outbound = dir(&r.outbound);
    report.conversion_yield = r.merge.conversion_yield;
    if let Some(h) = r.delay_ns.as_ref().filter(|h| !h.is_empty()) {
        let us = |ns: u64| ns as f64 / 1e3;
        report.added_delay = DelaySummary {
            segments: h.len(),
            mean_us: h.mean() / 1e3,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
        };
    }
    report.merge = r.merge;
    report.caravan = r.caravan;
    report.drops = r.drops;
    report.udp = UdpSummary {
        datagrams: udp_in,
        in_caravans: r.caravan.datagrams_packed,
        caravan_share: if udp_in == 0 {
            0.0
        } else {
            r.caravan.datagrams_packed as f64 / udp_in as f64
        },
    };
    report.flows = flow_summary(cfg, &flows);
    Ok(report)
}

/// Which inbound TCP flows merged, and why the others did not, from what the capture shows.
fn flow_summary(cfg: &Config, flows: &HashMap<wire::FlowKey, FlowSeen>) -> FlowSummary {
    let mut s = FlowSummary::default();
    let mut never = Vec::new();
    let window_ns = cfg.merge.max_window_us * 1000;
    for (k, f) in flows.iter().filter(|(_, f)| f.data_in > 0) {
        s.tcp_flows += 1;
        if f.data_out < f.data_in {
            s.merged += 1;
            continue;
        }
        // Largest payload that still leaves room to merge a second segment at the iMTU.
        let hdr = if k.v6 { 40 + 20 } else { 20 + 20 };
        let full = u64::from(cfg.imtu()).saturating_sub(hdr);
        let gap = if f.data_in > 1 {
            (f.last_t - f.first_t) / (f.data_in - 1)
        } else {
            0
        };
        let reason = if !cfg.merge.enabled {
            "merging is off in the configuration ([merge] enabled = false)".to_owned()
        } else if f.data_in == 1 {
            "a single data segment: nothing to merge it with".to_owned()
        } else if f.max_payload * 2 > full {
            format!(
                "segments of up to {} B: two do not fit the iMTU's {full} B of payload",
                f.max_payload
            )
        } else if !f.syn {
            "its handshake is not in the capture: the gateway merges connections it saw open, \
             or learns one from its data only once the inside host acknowledges a run of \
             full-sized segments"
                .to_owned()
        } else if gap > window_ns {
            format!(
                "too sparse: segments {:.0} µs apart on average, more than the merge window \
                 ([merge] max_window_us = {})",
                gap as f64 / 1e3,
                cfg.merge.max_window_us
            )
        } else {
            "segments never met in one RX burst or delay window (a rate below \
             [merge] rate_threshold_gbps is not delayed)"
                .to_owned()
        };
        never.push(UnmergedFlow {
            flow: flow_name(k),
            segments: f.data_in,
            payload_bytes: f.payload,
            reason,
        });
    }
    never.sort_by(|a, b| {
        b.payload_bytes
            .cmp(&a.payload_bytes)
            .then(a.flow.cmp(&b.flow))
    });
    s.never_merged_unlisted = never.len().saturating_sub(MAX_LISTED_FLOWS) as u64;
    never.truncate(MAX_LISTED_FLOWS);
    s.never_merged = never;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p = parse_prefix("10.1.0.0/16").unwrap();
        assert!(p.contains(&"10.1.2.3".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"10.2.0.1".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"::1".parse::<IpAddr>().unwrap()));
        let p = parse_prefix("2001:db8::/32").unwrap();
        assert!(p.contains(&"2001:db8:1::2".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"2001:db9::2".parse::<IpAddr>().unwrap()));
        let p = parse_prefix("192.0.2.7").unwrap();
        assert!(p.contains(&"192.0.2.7".parse::<IpAddr>().unwrap()));
        assert!(!p.contains(&"192.0.2.8".parse::<IpAddr>().unwrap()));
        let all = parse_prefix("0.0.0.0/0").unwrap();
        assert!(all.contains(&"203.0.113.1".parse::<IpAddr>().unwrap()));
        assert!(parse_prefix("10.0.0.0/33").is_err());
        assert!(parse_prefix("nonsense").is_err());
    }

    /// Addresses come from after the VLAN tags, and a frame cut after the fixed IP header is
    /// still placed.
    #[test]
    fn addresses_after_vlan_tags_and_in_cut_frames() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
        ip[12..16].copy_from_slice(&[192, 0, 2, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f.extend_from_slice(&ip);
        assert_eq!(
            ip_addrs(&f),
            Some(("192.0.2.1".parse().unwrap(), "10.0.0.2".parse().unwrap()))
        );
        assert_eq!(ip_addrs(&f[..f.len() - 1]), None);
    }
}
