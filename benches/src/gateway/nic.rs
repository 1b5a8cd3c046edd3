//! The emulated ports: what a NIC writes into each received mbuf, and its LRO.
//!
//! Untimed, as a NIC's DMA is: the frames are written into fresh mbufs, and a port profile adds
//! what that kind of port gives ([`Profile`]):
//! - **NIC** (a ConnectX-class port): the RSS hash (Toeplitz, the gateway's symmetric key), the
//!   IP and L4 checksum verdicts, TX checksum offload and TSO; with [`Lro`], its large receive
//!   offload.
//! - **none** (`net_af_packet`): the frame and nothing else.
//!
//! **LRO** as a ConnectX does it: within one RX burst, the consecutive in-order segments of a
//! flow (each starting where the last ended, same ACK and time stamps, bare ACK flags) are
//! coalesced into one packet of at most [`Lro::max_pkt`] bytes, its IP length and both checksums
//! rewritten (right: the NIC computes them), delivered as a chain of the queue's mbufs (its
//! scatter mode) with the checksum verdicts good; every session is flushed at the end of the
//! burst. Pure ACKs, UDP and everything else pass as they are.

use std::sync::Arc;

use dpdk::{Burst, Mbuf, Mempool};
use pxio::checksum::Sum;

use super::frames::{be16, be32, l3_len, pseudo, Frame, RxBurst, Workload, ETH_LEN, RX_MAX};
use crate::BenchError;

/// LRO settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lro {
    /// Largest coalesced frame (ConnectX's `max_lro_pkt_size` limit, 65,280 B).
    pub max_pkt: usize,
}

impl Default for Lro {
    fn default() -> Self {
        Self { max_pkt: 65_280 }
    }
}

/// What the ports give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// RSS hash, checksum verdicts, TX checksum offload and TSO; LRO when given.
    Nic {
        /// The receive side's LRO.
        lro: Option<Lro>,
    },
    /// `net_af_packet`: no hash, no verdicts, no transmit offloads.
    None,
}

impl Profile {
    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Nic { .. } => "nic",
            Profile::None => "none",
        }
    }

    /// Whether the ports offload checksums and TSO (and report hashes and verdicts).
    pub fn offloads(self) -> bool {
        matches!(self, Profile::Nic { .. })
    }

    /// Whether the outside port coalesces with LRO.
    pub fn lro(self) -> Option<Lro> {
        match self {
            Profile::Nic { lro } => lro,
            Profile::None => None,
        }
    }
}

/// The bench's mempools, shared by every side and run (each run must give back everything it
/// took: checked after it).
pub struct Pools {
    /// Frames up to 1,514 B (and LRO's chained buffers): 2 KB of data room.
    pub small: Arc<Mempool>,
    /// Frames up to the iMTU.
    pub big: Arc<Mempool>,
    /// Headers the gateways build (pxgw's header pool, rte_gso's direct mbufs).
    pub headers: Arc<Mempool>,
    /// rte_gso's indirect mbufs.
    pub indirect: Arc<Mempool>,
}

impl Pools {
    /// Creates the pools (names are unique per process: a test may create several sets).
    pub fn new(eal: &dpdk::Eal, big_room: u16) -> Result<Self, BenchError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        Ok(Self {
            small: Mempool::new(eal, &format!("gw_small{n}"), 32767, 256, 2048 + 128)?,
            big: Mempool::new(eal, &format!("gw_big{n}"), 2047, 256, big_room)?,
            // pxgw's own header pool, its size and per-lcore cache as one worker has them.
            headers: pxgw::ports::header_pool(eal, &format!("gw_hdr{n}"), 1)?,
            // rte_gso's views get the same cache as pxgw's, whose views share its header pool.
            indirect: Mempool::new(
                eal,
                &format!("gw_ind{n}"),
                32767,
                pxgw::ports::HEADER_POOL_CACHE,
                0,
            )?,
        })
    }

    /// Mbufs out of the pools: 0 after a run that freed everything.
    pub fn in_use(&self) -> [usize; 4] {
        [&self.small, &self.big, &self.headers, &self.indirect].map(|p| p.in_use())
    }
}

/// An LRO session: the coalesced frame so far.
struct Session {
    /// The trace slot that opened it (its RSS hash is the session's).
    first: u32,
    /// The flow's source address (low four bytes) and port.
    flow: (u32, u16),
    next_seq: u32,
    /// ACK number and time-stamp option, which every coalesced segment must share.
    ack: u32,
    tsval: u32,
    segments: u32,
    bytes: Vec<u8>,
    open: bool,
}

/// A packet of the burst being written: a frame as it is, or an LRO session.
enum Pending {
    Frame(usize),
    Session(usize),
}

/// Writes RX bursts into mbufs as a port of a given profile delivers them.
#[derive(Default)]
pub struct Filler {
    scratch: Vec<u8>,
    sessions: Vec<Session>,
    spare: Vec<Vec<u8>>,
    pending: Vec<Pending>,
    /// LRO packets delivered (of two segments or more), and the segments in them.
    pub lro_packets: u64,
    /// Segments in those packets.
    pub lro_segments: u64,
}

impl Filler {
    /// Fills `rx` with `burst`'s frames as a port with `profile` delivers them.
    pub fn fill(
        &mut self,
        w: &Workload,
        burst: &RxBurst,
        profile: Profile,
        pools: &Pools,
        rx: &mut Burst<RX_MAX>,
    ) -> Result<(), BenchError> {
        let lro = profile.lro().filter(|_| burst.outside && w.trace.is_some());
        let Some(lro) = lro else {
            for f in &w.frames[burst.frames.clone()] {
                let m = self.single(w, f, profile.offloads(), pools)?;
                push(rx, m)?;
            }
            return Ok(());
        };
        self.pending.clear();
        for (k, f) in w.frames[burst.frames.clone()].iter().enumerate() {
            match *f {
                Frame::Trace(slot) => self.coalesce(w, slot, lro),
                _ => self.pending.push(Pending::Frame(burst.frames.start + k)),
            }
        }
        let pending = std::mem::take(&mut self.pending);
        for p in &pending {
            let m = match *p {
                Pending::Frame(i) => self.single(w, &w.frames[i], true, pools)?,
                Pending::Session(s) => self.deliver(w, s, pools)?,
            };
            push(rx, m)?;
        }
        self.pending = pending;
        for s in self.sessions.drain(..) {
            let mut b = s.bytes;
            b.clear();
            self.spare.push(b);
        }
        Ok(())
    }

    /// One frame in one mbuf, with what the port adds.
    fn single(
        &mut self,
        w: &Workload,
        f: &Frame,
        offloads: bool,
        pools: &Pools,
    ) -> Result<Mbuf, BenchError> {
        let len = w.frame_len(f);
        let pool = if len + 128 <= usize::from(pools.small.data_room()) {
            &pools.small
        } else {
            &pools.big
        };
        let mut m = pool.alloc()?;
        let room = m.append(len)?;
        w.write(f, room);
        if offloads {
            if let Some(h) = w.rss_hash(f, m.data()) {
                m.set_rss_hash(h);
            }
            match f {
                Frame::Arp { .. } => {}
                Frame::Icmp { .. } => {
                    if !w.spec.v6 {
                        m.set_rx_ip_checksum_verdict(Some(true));
                    }
                }
                _ => m.mark_rx_checksums_good(),
            }
        }
        Ok(m)
    }

    /// Offers trace slot `slot` to the burst's LRO sessions.
    fn coalesce(&mut self, w: &Workload, slot: u32, lro: Lro) {
        let trace = w.trace.as_ref().expect("trace slots come with a trace");
        let l = trace.layout();
        self.scratch.resize(crate::trace::layout::FRAME_LEN, 0);
        trace.write_frame(slot as usize, &mut self.scratch);
        let f = &self.scratch;
        let flow = (be32(f, l.src_low32()), be16(f, l.tcp));
        let seq = be32(f, l.tcp_seq());
        let (ack, tsval) = (be32(f, l.tcp + 8), be32(f, l.tcp_tsval()));
        let payload = &f[l.headers_len..];
        let open = self.sessions.iter().position(|s| s.open && s.flow == flow);
        if let Some(i) = open {
            let s = &mut self.sessions[i];
            if s.next_seq == seq
                && s.ack == ack
                && s.tsval == tsval
                && s.bytes.len() + payload.len() <= lro.max_pkt
            {
                s.bytes.extend_from_slice(payload);
                s.next_seq = seq.wrapping_add(payload.len() as u32);
                s.segments += 1;
                return;
            }
            s.open = false;
        }
        let mut bytes = self.spare.pop().unwrap_or_default();
        bytes.extend_from_slice(f);
        self.sessions.push(Session {
            first: slot,
            flow,
            next_seq: seq.wrapping_add(payload.len() as u32),
            ack,
            tsval,
            segments: 1,
            bytes,
            open: true,
        });
        self.pending.push(Pending::Session(self.sessions.len() - 1));
    }

    /// Session `s` as the NIC delivers it: lengths and checksums rewritten when it coalesced,
    /// in a chain of 2 KB mbufs (headers and the first segment, then a segment per mbuf).
    fn deliver(&mut self, w: &Workload, s: usize, pools: &Pools) -> Result<Mbuf, BenchError> {
        let trace = w.trace.as_ref().expect("trace slots come with a trace");
        let l = trace.layout();
        let session = &mut self.sessions[s];
        let b = &mut session.bytes;
        if session.segments > 1 {
            self.lro_packets += 1;
            self.lro_segments += u64::from(session.segments);
            let total = b.len();
            if l.v6 {
                let plen = (total - ETH_LEN - 40) as u16;
                b[ETH_LEN + 4..ETH_LEN + 6].copy_from_slice(&plen.to_be_bytes());
            } else {
                b[ETH_LEN + 2..ETH_LEN + 4]
                    .copy_from_slice(&((total - ETH_LEN) as u16).to_be_bytes());
                b[ETH_LEN + 10..ETH_LEN + 12].fill(0);
                let sum = Sum::of(&b[ETH_LEN..ETH_LEN + 20]).checksum();
                b[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&sum.to_be_bytes());
            }
            let at = l.tcp_csum();
            b[at..at + 2].fill(0);
            let l4_len = total - ETH_LEN - l3_len(l.v6);
            let sum = pseudo(l.v6, b, 6, l4_len)
                .add(Sum::of(&b[l.tcp..]))
                .checksum();
            b[at..at + 2].copy_from_slice(&sum.to_be_bytes());
        }
        let first = l.headers_len + l.mss;
        let mut head = pools.small.alloc()?;
        head.extend_from_slice(&b[..first.min(b.len())])?;
        for chunk in b.get(first..).unwrap_or_default().chunks(l.mss) {
            let mut m = pools.small.alloc()?;
            m.extend_from_slice(chunk)?;
            head.chain(m).map_err(|(e, _)| e)?;
        }
        head.set_rss_hash(trace.rss_hash(session.first as usize));
        head.mark_rx_checksums_good();
        Ok(head)
    }
}

fn push(rx: &mut Burst<RX_MAX>, m: Mbuf) -> Result<(), BenchError> {
    rx.push(m)
        .map_err(|_| BenchError::Config(format!("an RX burst holds at most {RX_MAX} packets")))
}
