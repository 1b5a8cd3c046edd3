//! `caravan-file`: a file sent over UDP, received through `caravan::BatchReader` (SIGCOMM'26 §6).
//!
//! ```text
//! caravan-file receive BIND_ADDR:PORT OUT_FILE     # inside the b-network, behind pxgw
//! caravan-file send DEST_ADDR:PORT IN_FILE         # anywhere outside
//! ```
//!
//! The receiver is the application that reads caravans itself: a gateway packs the sender's
//! datagrams into caravans, and one `recvmmsg` hands the receiver up to 64 of them, each split in
//! user space without a copy, instead of one system call and one trip through the kernel per
//! datagram. On a host that runs the eBPF decapsulator for its other applications, the port is
//! registered as a pass-through port (`caravan attach IFACE --passthrough PORT`, or
//! `caravan passthrough IFACE add PORT`), so its caravans arrive whole. Without a decapsulator
//! they arrive whole anyway. Datagrams that were not packed (a gateway sends a lone datagram as
//! it came) arrive as they are; [`receive`]'s loop takes both.
//!
//! The protocol is small enough to read in one sitting. The file goes in blocks of
//! [`BLOCK_CHUNKS`] chunks of [`CHUNK`] bytes. Each datagram is `offset (u64 LE) ‖ bytes`. After
//! a block the sender asks, with a probe (`offset = PROBE`, then the block's first offset and the
//! file's length), which chunks are missing. The receiver answers with the block's first offset
//! and a 64-bit mask of them, and the sender sends those again. UDP may lose or reorder, so
//! nothing depends on order or on every datagram arriving. Retries are bounded.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use caravan::{BatchReader, Refused};

/// Payload bytes per datagram: with its 8-byte offset it crosses a 1500 B path in IPv4 and IPv6.
pub const CHUNK: usize = 1200;
/// Chunks per block: one probe and one answer per block.
pub const BLOCK_CHUNKS: u64 = 64;
/// The offset that marks a probe.
const PROBE: u64 = u64::MAX;
/// Caravans (or plain datagrams) per `recvmmsg`.
const BATCH: usize = 64;
/// The largest caravan payload a 9000 B iMTU carries (its outer IPv4 and UDP headers off).
const MAX_CARAVAN: usize = 9000 - 20 - 8;
/// How long a sender waits for an answer before it probes again.
const ANSWER_WAIT: Duration = Duration::from_millis(200);
/// Probes per block before the sender gives up.
const MAX_PROBES: u32 = 50;

/// What [`receive`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Receipt {
    /// Bytes of the file.
    pub bytes: u64,
    /// `recvmmsg` calls.
    pub calls: u64,
    /// Caravans read, and the datagrams they carried.
    pub caravans: u64,
    /// Datagrams taken out of caravans.
    pub from_caravans: u64,
    /// Datagrams that arrived on their own.
    pub plain: u64,
    /// Messages refused: marked but malformed, or not of this protocol.
    pub refused: u64,
}

/// The file's state at the receiver.
struct Assembly<'f> {
    out: &'f File,
    /// One bit per chunk.
    have: Vec<u64>,
    /// The file's length, once a probe told it.
    len: Option<u64>,
    /// Whether the last block was answered complete.
    complete: bool,
}

impl Assembly<'_> {
    /// Takes one datagram of the protocol; returns the answer to send back, if any.
    fn take(&mut self, d: &[u8]) -> io::Result<Option<[u8; 16]>> {
        let Some((head, body)) = d.split_first_chunk::<8>() else {
            return Ok(None);
        };
        let offset = u64::from_le_bytes(*head);
        if offset == PROBE {
            let (Some(block), Some(len)) = (le(body, 0), le(body, 8)) else {
                return Ok(None);
            };
            self.len = Some(len);
            let missing = self.missing(block, len);
            if missing == 0 && block + BLOCK_CHUNKS * CHUNK as u64 >= len {
                self.complete = true;
            }
            let mut answer = [0u8; 16];
            answer[..8].copy_from_slice(&block.to_le_bytes());
            answer[8..].copy_from_slice(&missing.to_le_bytes());
            return Ok(Some(answer));
        }
        if offset % CHUNK as u64 != 0 || body.len() > CHUNK {
            return Ok(None);
        }
        self.out.write_at(body, offset)?;
        let chunk = (offset / CHUNK as u64) as usize;
        if self.have.len() <= chunk / 64 {
            self.have.resize(chunk / 64 + 1, 0);
        }
        self.have[chunk / 64] |= 1 << (chunk % 64);
        Ok(None)
    }

    /// The chunks of the block starting at `block` still missing, one bit each, for a file of
    /// `len` bytes.
    fn missing(&self, block: u64, len: u64) -> u64 {
        let first = block / CHUNK as u64;
        (0..BLOCK_CHUNKS)
            .filter(|i| (first + i) * (CHUNK as u64) < len)
            .filter(|i| {
                let c = (first + i) as usize;
                self.have
                    .get(c / 64)
                    .is_none_or(|w| w & (1 << (c % 64)) == 0)
            })
            .fold(0, |m, i| m | (1 << i))
    }
}

fn le(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(*b.get(at..)?.first_chunk::<8>()?))
}

/// Receives one file on `sock` into `out`, until the sender's last block is complete and no
/// probe came for `linger` (the sender may not have heard the last answer). Gives up after
/// `idle` without any datagram.
///
/// This is the loop to copy: report traffic classes once, then take what is queued with one
/// `recvmmsg`, and read each message as a caravan when it wore the mark, or as one datagram.
pub fn receive(sock: &UdpSocket, out: &File, idle: Duration, linger: Duration) -> Result<Receipt> {
    // Without the traffic class, no message is taken for a caravan (a payload alone proves
    // nothing: anyone can send bytes that look like one).
    caravan::report_traffic_class(sock)?;
    sock.set_read_timeout(Some(linger.min(idle)))?;
    let mut batch = BatchReader::new(BATCH, MAX_CARAVAN)?;
    let mut file = Assembly {
        out,
        have: Vec::new(),
        len: None,
        complete: false,
    };
    let mut seen = Receipt::default();
    let mut last = Instant::now();
    let mut answers: Vec<([u8; 16], SocketAddr)> = Vec::new();
    loop {
        match batch.recv(sock) {
            Ok(_) => last = Instant::now(),
            Err(caravan::BatchError::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let quiet = last.elapsed();
                if file.complete && quiet >= linger {
                    break;
                }
                ensure!(quiet < idle, "nothing received for {idle:?}");
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        seen.calls += 1;
        for msg in batch.iter() {
            let Some(peer) = msg.peer else { continue };
            let mut take = |d: &[u8]| -> io::Result<()> {
                if let Some(a) = file.take(d)? {
                    answers.push((a, peer));
                }
                Ok(())
            };
            match msg.caravan() {
                Ok(reader) => {
                    seen.caravans += 1;
                    for d in reader {
                        seen.from_caravans += 1;
                        take(d.payload)?;
                    }
                }
                Err(Refused::NotCaravan) => {
                    seen.plain += 1;
                    take(msg.payload)?;
                }
                // Marked, but not a caravan this reader takes: dropped, as a decapsulator would.
                Err(_) => seen.refused += 1,
            }
        }
        // Each answer says what had arrived before its probe; they go out once the batch is read.
        for (a, peer) in answers.drain(..) {
            sock.send_to(&a, peer)?;
        }
    }
    seen.bytes = file.len.unwrap_or(0);
    Ok(seen)
}

/// Sends `data` to `to` from `sock`; returns the datagrams sent (chunks, resends and probes).
pub fn send(sock: &UdpSocket, to: SocketAddr, data: &[u8]) -> Result<u64> {
    sock.set_read_timeout(Some(ANSWER_WAIT))?;
    let len = data.len() as u64;
    let mut sent = 0u64;
    let mut buf = Vec::with_capacity(8 + CHUNK);
    let mut block = 0u64;
    // An empty file is one block of no chunk: its probe still tells the length.
    loop {
        // Every chunk of the block, then what the receiver reports missing.
        let mut missing = (0..BLOCK_CHUNKS)
            .filter(|i| block + i * (CHUNK as u64) < len)
            .fold(0u64, |m, i| m | (1 << i));
        for probe in 1.. {
            for i in (0..BLOCK_CHUNKS).filter(|i| missing & (1 << i) != 0) {
                let offset = block + i * CHUNK as u64;
                let end = (offset + CHUNK as u64).min(len);
                buf.clear();
                buf.extend_from_slice(&offset.to_le_bytes());
                buf.extend_from_slice(&data[offset as usize..end as usize]);
                sock.send_to(&buf, to)?;
                sent += 1;
            }
            ensure!(
                probe <= MAX_PROBES,
                "no complete answer for the block at {block} after {MAX_PROBES} probes"
            );
            buf.clear();
            buf.extend_from_slice(&PROBE.to_le_bytes());
            buf.extend_from_slice(&block.to_le_bytes());
            buf.extend_from_slice(&len.to_le_bytes());
            sock.send_to(&buf, to)?;
            sent += 1;
            match answer(sock, to, block)? {
                Some(0) => break,
                Some(m) => missing = m,
                // Nothing heard: probe again, without sending the chunks again.
                None => missing = 0,
            }
        }
        block += BLOCK_CHUNKS * CHUNK as u64;
        if block >= len {
            return Ok(sent);
        }
    }
}

/// The receiver's answer for the block at `block` (its mask of missing chunks), or `None` when
/// none came within [`ANSWER_WAIT`]. Answers to earlier probes are skipped.
fn answer(sock: &UdpSocket, to: SocketAddr, block: u64) -> Result<Option<u64>> {
    let deadline = Instant::now() + ANSWER_WAIT;
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        match sock.recv_from(&mut buf) {
            Ok((16, from)) if from == to && le(&buf, 0) == Some(block) => return Ok(le(&buf, 8)),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(None)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: caravan-file receive BIND_ADDR:PORT OUT_FILE | send DEST_ADDR:PORT IN_FILE";
    let [cmd, addr, path] = args.as_slice() else {
        bail!("{usage}");
    };
    let addr: SocketAddr = addr.parse().with_context(|| format!("{addr}: {usage}"))?;
    match cmd.as_str() {
        "receive" => {
            let sock = UdpSocket::bind(addr).with_context(|| format!("binding {addr}"))?;
            let out = File::create(path).with_context(|| format!("creating {path}"))?;
            let r = receive(&sock, &out, Duration::from_secs(30), Duration::from_secs(1))?;
            println!(
                "{} B in {} recvmmsg calls: {} caravans ({} datagrams), {} plain datagrams, {} refused",
                r.bytes, r.calls, r.caravans, r.from_caravans, r.plain, r.refused
            );
        }
        "send" => {
            let data = std::fs::read(path).with_context(|| format!("reading {path}"))?;
            let bind: SocketAddr = if addr.is_ipv4() {
                "0.0.0.0:0".parse()?
            } else {
                "[::]:0".parse()?
            };
            let sock = UdpSocket::bind(bind)?;
            let n = send(&sock, addr, &data)?;
            println!("{} B sent in {n} datagrams", data.len());
        }
        _ => bail!("{usage}"),
    }
    Ok(())
}
