//! Seed corpora for the fuzz targets (`fuzz/seeds/<target>/`), cut from real traffic:
//! `pxgw-stress seeds --out fuzz/seeds` runs pxgw between the lab's hosts with tcpdump on both
//! sides (ping, file transfers both ways in both families, UDP that becomes caravans, pxgw's
//! F-PMTUD probes answered by the outside host, a few crafted sequences), then splits the
//! captures into frames and writes each seed in the input format of its target.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gateway_lab::{Family, Lab};
use pxio::wire::{classify, Class, Ipv4Packet, Ipv6Packet};

use crate::crafted;

/// `arbitrary` picks enum variant i of n from a leading u32 as `(u32 * n) >> 32`: these four
/// bytes (the same in either byte order) pick the first variant, and the second of two.
const FIRST_VARIANT: [u8; 4] = [0; 4];
const SECOND_OF_TWO: [u8; 4] = [0x80; 4];
/// The F-PMTUD port.
const FPMTUD_PORT: u16 = 4689;
/// Seeds per kind, at most.
const PER_KIND: usize = 6;

/// One captured frame and which side saw it.
struct Captured {
    side: &'static str,
    frame: Vec<u8>,
}

/// Reads the frames of a classic pcap file (Ethernet link type).
fn read_pcap(path: &Path) -> Result<Vec<Vec<u8>>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let Some(magic) = bytes.get(..4) else {
        bail!("{}: not a pcap file", path.display());
    };
    let le = match magic {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => bail!("{}: not a pcap file", path.display()),
    };
    let u32_at = |at: usize| -> Option<u32> {
        let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let mut frames = Vec::new();
    let mut at = 24;
    while let Some(caplen) = u32_at(at + 8) {
        let start = at + 16;
        let Some(frame) = bytes.get(start..start + caplen as usize) else {
            break;
        };
        frames.push(frame.to_vec());
        at = start + caplen as usize;
    }
    Ok(frames)
}

/// tcpdump writing every frame of `iface` in `ns` to `file`.
fn tcpdump(ns: &netlab::Netns, iface: &str, file: &Path) -> Result<Child> {
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "tcpdump",
            "-i",
            iface,
            "-s",
            "0",
            "-U",
            "-w",
        ])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting tcpdump")?;
    Ok(child)
}

fn stop(mut child: Child) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let _ = child.wait();
}

/// Captures real traffic through pxgw and writes the seeds under `out`.
pub fn make(pxgw: &Path, out: &Path) -> Result<BTreeMap<String, usize>> {
    let lab = Lab::new()?;
    crafted::prepare(&lab)?;
    let fpmtud = pxgw.with_file_name("fpmtud");
    let _daemon = if fpmtud.exists() {
        Some(lab.start_fpmtud(&fpmtud)?)
    } else {
        eprintln!(
            "seeds: {} is not built: no F-PMTUD reports in the capture",
            fpmtud.display()
        );
        None
    };
    let gw = lab.start_pxgw(pxgw, 1, 600)?;
    let (ext_pcap, int_pcap) = (lab.dir.join("ext.pcap"), lab.dir.join("int.pcap"));
    let ext_dump = tcpdump(&lab.ext, lab.ext_iface(), &ext_pcap)?;
    let int_dump = tcpdump(&lab.int, lab.int_iface(), &int_pcap)?;
    std::thread::sleep(Duration::from_secs(1));
    for family in Family::BOTH {
        lab.ping(family);
        lab.file_transfer(family, true, 1 << 20)?;
        lab.file_transfer(family, false, 1 << 20)?;
        lab.udp_inbound(family, 64, pxio::caravan::DEFAULT_DSCP, false)?;
    }
    for (k, s) in crafted::scripts().iter().enumerate() {
        let _ = crafted::run(&lab, s, 500 + k as u16);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop(ext_dump);
    stop(int_dump);
    let _ = gw.stop()?;
    let mut frames = Vec::new();
    for (side, file) in [("ext", &ext_pcap), ("int", &int_pcap)] {
        frames.extend(
            read_pcap(file)?
                .into_iter()
                .map(|frame| Captured { side, frame }),
        );
    }
    eprintln!("seeds: {} frames captured", frames.len());
    write_seeds(&frames, out)
}

/// The kind of a frame, for picking a few of each.
fn kind(frame: &[u8]) -> String {
    match classify(frame, frame.len()) {
        Class::Tcp(h) if h.payload_len > 0 => "tcp-data".into(),
        Class::Tcp(_) => "tcp-control".into(),
        Class::Udp(h) if dscp(frame, &h) == pxio::caravan::DEFAULT_DSCP => "caravan".into(),
        Class::Udp(h) if h.key.dport == FPMTUD_PORT || h.key.sport == FPMTUD_PORT => {
            "fpmtud".into()
        }
        Class::Udp(_) => "udp".into(),
        Class::Fragment => "fragment".into(),
        Class::OtherIp => "other-ip".into(),
        Class::NonIp => "non-ip".into(),
        Class::Malformed(_) => "malformed".into(),
    }
}

fn dscp(frame: &[u8], h: &pxio::wire::Headers) -> u8 {
    let l3 = &frame[h.l3_offset()..];
    if h.key.v6 {
        Ipv6Packet::new_unchecked(l3).dscp()
    } else {
        Ipv4Packet::new_unchecked(l3).dscp()
    }
}

fn write_seeds(frames: &[Captured], out: &Path) -> Result<BTreeMap<String, usize>> {
    let mut written: BTreeMap<String, usize> = BTreeMap::new();
    let mut put = |target: &str, name: String, bytes: Vec<u8>| -> Result<()> {
        let dir: PathBuf = out.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(name), bytes)?;
        *written.entry(target.to_owned()).or_default() += 1;
        Ok(())
    };
    // classify: a few frames of every kind each side saw, smallest first.
    let mut by_kind: BTreeMap<(String, &str), Vec<&Captured>> = BTreeMap::new();
    for c in frames {
        by_kind.entry((kind(&c.frame), c.side)).or_default().push(c);
    }
    for ((k, side), list) in &mut by_kind {
        list.sort_by_key(|c| c.frame.len());
        list.dedup_by(|a, b| a.frame == b.frame);
        // The smallest and the largest of each kind.
        let n = list.len();
        let picks: Vec<&&Captured> = list
            .iter()
            .take(PER_KIND / 2)
            .chain(
                list.iter()
                    .skip(n.saturating_sub(PER_KIND / 2).max(PER_KIND / 2)),
            )
            .collect();
        for (i, c) in picks.into_iter().enumerate() {
            put("classify", format!("{side}-{k}-{i}"), c.frame.clone())?;
        }
    }
    // merge: runs of consecutive data segments on the outside link of one flow, as the raw merge target
    // reads them ([length / 8][time step][frame, padded to a multiple of 8] ...).
    let inbound: Vec<&Captured> = frames
        .iter()
        .filter(|c| c.side == "ext" && kind(&c.frame) == "tcp-data" && c.frame.len() <= 2040)
        .collect();
    for (i, run) in inbound.chunks(5).step_by(7).take(PER_KIND).enumerate() {
        let mut seed = Vec::new();
        for c in run {
            let mut f = c.frame.clone();
            f.resize(f.len().div_ceil(8) * 8, 0);
            seed.push((f.len() / 8) as u8);
            seed.push(0);
            seed.extend_from_slice(&f);
        }
        put("merge", format!("ext-tcp-run-{i}"), seed)?;
    }
    // caravan: caravan bodies behind the target's own marked header (variant Unpack).
    let caravans: Vec<&Captured> = frames
        .iter()
        .filter(|c| kind(&c.frame) == "caravan")
        .collect();
    for (i, c) in caravans.iter().take(PER_KIND).enumerate() {
        if let Class::Udp(h) = classify(&c.frame, c.frame.len()) {
            let mut seed = FIRST_VARIANT.to_vec();
            seed.push(u8::from(h.key.v6));
            seed.push(0); // no VLAN tag
            seed.push(0); // as captured: the caravan header is already there
            seed.extend_from_slice(&c.frame[h.hdr_len()..h.frame_len()]);
            put("caravan", format!("{}-caravan-{i}", c.side), seed)?;
        }
    }
    // split: large TCP frames from the inside host, as they reach pxgw (variant Raw).
    let large: Vec<&Captured> = frames
        .iter()
        .filter(|c| c.side == "int" && c.frame.len() > 1600 && kind(&c.frame).starts_with("tcp"))
        .collect();
    for (i, c) in large
        .iter()
        .step_by(large.len().div_ceil(PER_KIND).max(1))
        .enumerate()
    {
        let mut seed = SECOND_OF_TWO.to_vec();
        seed.extend_from_slice(&[0x03, 0x03, 0]); // MTU 576 + 771, software split
        seed.extend_from_slice(&c.frame);
        put("split", format!("int-large-tcp-{i}"), seed)?;
    }
    // fpmtud: probe and report payloads (variant Message).
    let mut n = 0;
    for c in frames.iter().filter(|c| kind(&c.frame) == "fpmtud") {
        if let Class::Udp(h) = classify(&c.frame, c.frame.len()) {
            let mut seed = FIRST_VARIANT.to_vec();
            // Probes are eMTU-sized: their header and a little padding are enough.
            let payload = &c.frame[h.hdr_len()..h.frame_len()];
            seed.extend_from_slice(&payload[..payload.len().min(64)]);
            put("fpmtud", format!("{}-message-{n}", c.side), seed)?;
            n += 1;
            if n == PER_KIND {
                break;
            }
        }
    }
    Ok(written)
}
