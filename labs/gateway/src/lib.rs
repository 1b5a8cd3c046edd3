//! The gateway lab (`cargo xtask demo`, and the `pxgw-lab test` integration suite): two network
//! namespaces with real Linux TCP/UDP stacks, an "Internet" host at MTU 1500 (`px-ext`) and a
//! b-network host at MTU 9000 (`px-int`), with pxgw between them on `net_af_packet` ports over
//! veth pairs. Everything it creates is removed on drop, also when interrupted.

#![forbid(unsafe_code)]

use std::fs;
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use netlab::{Netns, Veth};
use pnet_datalink::{Channel, Config as ChannelConfig};
use pxio::wire::{self, Class};
use serde::Serialize;

// TEST-NET-2 (RFC 5737): used only inside the lab's own namespaces. (TEST-NET-1 is taken by the
// development VMs' own network.)

/// The outside host's address.
pub const EXT_ADDR: &str = "198.51.100.1";
/// The inside host's address.
pub const INT_ADDR: &str = "198.51.100.2";
/// MSS of the outside host's segments (1500 - 20 - 20 - 12 B of timestamps).
const EXT_SEGMENT: usize = 1448;

/// How big the lab's runs are.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Bytes of each file transfer.
    pub file_bytes: usize,
    /// Seconds of each iperf3 run.
    pub iperf_seconds: u32,
    /// Parallel iperf3 flows.
    pub iperf_flows: u32,
    /// UDP datagrams sent inbound.
    pub udp_datagrams: u32,
}

/// The two hosts and the wires between them and the gateway.
pub struct Lab {
    /// The Internet host.
    pub ext: Netns,
    /// The b-network host.
    pub int: Netns,
    ext_link: Veth,
    int_link: Veth,
    /// Scratch files.
    pub dir: PathBuf,
}

fn sh(program: &str, args: &[&str]) -> Result<String> {
    netlab::run(program, args).map_err(Into::into)
}

/// Turns off every offload that would let the kernel put other than MTU-sized frames, or
/// partial checksums, on the wire.
fn offloads_off(ns: Option<&Netns>, iface: &str) -> Result<()> {
    let args = [
        "-K", iface, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
    ];
    // Some of these features are fixed on veth; ethtool then exits non-zero having done the rest.
    let _ = match ns {
        Some(ns) => ns.exec("ethtool", &args),
        None => netlab::run("ethtool", &args),
    };
    Ok(())
}

impl Lab {
    /// Builds the namespaces and veth pairs.
    pub fn new() -> Result<Self> {
        if !netlab::is_root() {
            bail!("the lab creates network namespaces: run it as root");
        }
        let ext = Netns::new("px-ext")?;
        let int = Netns::new("px-int")?;
        let ext_link = Veth::new("pxe", 1500)?;
        let int_link = Veth::new("pxi", 9000)?;
        ext_link.move_b_into(&ext)?;
        int_link.move_b_into(&int)?;
        ext.ip(&[
            "addr",
            "add",
            &format!("{EXT_ADDR}/24"),
            "dev",
            ext_link.b(),
        ])?;
        int.ip(&[
            "addr",
            "add",
            &format!("{INT_ADDR}/24"),
            "dev",
            int_link.b(),
        ])?;
        offloads_off(Some(&ext), ext_link.b())?;
        offloads_off(Some(&int), int_link.b())?;
        offloads_off(None, ext_link.a())?;
        offloads_off(None, int_link.a())?;
        for a in [ext_link.a(), int_link.a()] {
            let _ = sh(
                "sysctl",
                &["-qw", &format!("net.ipv6.conf.{a}.disable_ipv6=1")],
            );
        }
        let dir = std::env::temp_dir().join(format!("pxlab-{}", std::process::id()));
        fs::create_dir_all(&dir)?;
        Ok(Self {
            ext,
            int,
            ext_link,
            int_link,
            dir,
        })
    }

    /// The outside host's interface (inside its namespace).
    pub fn ext_iface(&self) -> &str {
        self.ext_link.b()
    }

    /// The inside host's interface.
    pub fn int_iface(&self) -> &str {
        self.int_link.b()
    }

    /// The pxgw configuration for this lab.
    pub fn pxgw_config(&self, workers: u16) -> String {
        let port = |iface: &str, n: u32| {
            format!("net_af_packet{n},iface={iface},framesz=10240,blocksz=40960,framecnt=512,qpairs={workers}")
        };
        format!(
            "# Written by the lab. Flows through veths and net_af_packet carry far less than a NIC,\n\
             # so the delay threshold is lowered from the default 1 Gb/s.\n\
             [ports.external]\ndevice = \"{}\"\nmtu = 1500\n\
             [ports.internal]\ndevice = \"{}\"\nmtu = 9000\n\
             [workers]\ncount = {workers}\n\
             # The lab asserts a 90 % yield; a bypass above the default 93 % leaves it a margin.\n\
             [merge]\nrate_threshold_gbps = 0.01\nmax_window_us = 300\nyield_bypass = 0.97\n\
             [stats]\ninterval_s = 1.0\n",
            port(self.ext_link.a(), 0),
            port(self.int_link.a(), 1),
        )
    }

    /// Starts pxgw (`binary`) between the hosts; it stops itself after `limit_s` at the latest.
    pub fn start_pxgw(&self, binary: &Path, workers: u16, limit_s: u32) -> Result<Gateway> {
        let config = self.dir.join("pxgw.toml");
        fs::write(&config, self.pxgw_config(workers))?;
        let stats = self.dir.join("pxgw-stats.json");
        let _ = fs::remove_file(&stats);
        let log = fs::File::create(self.dir.join("pxgw.log"))?;
        let child = Command::new(binary)
            .args(["--config"])
            .arg(&config)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--run-for", &limit_s.to_string()])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let gw = Gateway {
            child: Some(child),
            stats,
            log: self.dir.join("pxgw.log"),
        };
        if self.forwarding_within(Duration::from_secs(20)) {
            return Ok(gw);
        }
        let log = fs::read_to_string(&gw.log).unwrap_or_default();
        bail!("pxgw did not start forwarding within 20 s; its log:\n{log}")
    }

    /// Whether a ping from outside crosses to the inside host within `limit`.
    fn forwarding_within(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self
                .ext
                .exec("ping", &["-c", "1", "-W", "1", INT_ADDR])
                .is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// Runs the F-PMTUD daemon (`binary serve`) in the outside host, so pxgw's probes of it are
    /// answered. Stopped on drop.
    pub fn start_fpmtud(&self, binary: &Path) -> Result<Daemon> {
        let child = Command::new("ip")
            .args(["netns", "exec", self.ext.name()])
            .arg(binary)
            .args(["serve"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        std::thread::sleep(Duration::from_millis(300));
        Ok(Daemon {
            _child: Spawned(child),
        })
    }

    /// Bridges the two veths with a Linux bridge instead of pxgw (the baseline).
    pub fn bridge(&self) -> Result<Bridge> {
        let name = netlab::unique_name("pxbr");
        sh("ip", &["link", "add", &name, "type", "bridge"])?;
        let br = Bridge { name };
        for a in [self.ext_link.a(), self.int_link.a()] {
            sh("ip", &["link", "set", a, "master", &br.name])?;
        }
        sh("ip", &["link", "set", &br.name, "up"])?;
        if self.forwarding_within(Duration::from_secs(20)) {
            return Ok(br);
        }
        bail!("the bridge did not forward within 20 s")
    }

    /// `ping -c 3` from outside to inside and back.
    pub fn ping(&self) -> bool {
        self.ext
            .exec("ping", &["-c", "3", "-i", "0.2", "-W", "1", INT_ADDR])
            .is_ok()
            && self
                .int
                .exec("ping", &["-c", "3", "-i", "0.2", "-W", "1", EXT_ADDR])
                .is_ok()
    }

    /// iperf3 with `flows` parallel TCP flows for `seconds`; `inbound` is outside → inside.
    /// Returns Gb/s received.
    pub fn iperf(&self, inbound: bool, flows: u32, seconds: u32) -> Result<f64> {
        let mut server = Spawned(
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    self.int.name(),
                    "iperf3",
                    "-s",
                    "-1",
                    "-p",
                    "5201",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        std::thread::sleep(Duration::from_millis(300));
        let mut args = vec!["-c", INT_ADDR, "-p", "5201", "-J"];
        let (p, t) = (flows.to_string(), seconds.to_string());
        args.extend(["-P", &p, "-t", &t]);
        if !inbound {
            args.push("-R");
        }
        let out = self.ext.exec("iperf3", &args)?;
        let _ = server.0.wait();
        let json: serde_json::Value = serde_json::from_str(&out).context("iperf3 JSON")?;
        json["end"]["sum_received"]["bits_per_second"]
            .as_f64()
            .map(|b| b / 1e9)
            .context("iperf3 reported no throughput")
    }

    /// Sends a random file of `bytes` with socat (`inbound`: outside → inside) and checks its
    /// sha256 on arrival. Returns (sha256 equal, seconds).
    pub fn file_transfer(&self, inbound: bool, bytes: usize) -> Result<(bool, f64)> {
        let src = self.dir.join("file.in");
        let dst = self.dir.join("file.out");
        let _ = fs::remove_file(&dst);
        sh(
            "dd",
            &[
                "if=/dev/urandom",
                &format!("of={}", src.display()),
                "bs=1M",
                &format!("count={}", bytes.div_ceil(1 << 20)),
                "status=none",
            ],
        )?;
        let (rx_ns, tx_ns, addr) = if inbound {
            (&self.int, &self.ext, INT_ADDR)
        } else {
            (&self.ext, &self.int, EXT_ADDR)
        };
        let mut receiver = Spawned(
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    rx_ns.name(),
                    "socat",
                    "-u",
                    "TCP-LISTEN:5001,reuseaddr",
                ])
                .arg(format!("OPEN:{},creat,trunc", dst.display()))
                .spawn()?,
        );
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        tx_ns.exec(
            "socat",
            &[
                "-u",
                &format!("OPEN:{}", src.display()),
                &format!("TCP:{addr}:5001"),
            ],
        )?;
        let status = receiver.0.wait()?;
        let secs = started.elapsed().as_secs_f64();
        if !status.success() {
            bail!("the receiving socat failed: {status}");
        }
        let sum = |p: &Path| -> Result<String> {
            Ok(sh("sha256sum", &[&p.display().to_string()])?
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned())
        };
        Ok((sum(&src)? == sum(&dst)?, secs))
    }

    /// Sends `n` UDP datagrams of mixed sizes from outside to inside, and watches what arrives
    /// with a packet socket in the inside host (caravans are counted there).
    ///
    /// With `decap`, the inside host runs the caravan eBPF decapsulator on its interface and an
    /// ordinary UDP socket must receive exactly the datagrams sent, one `recv` each, while the
    /// wire carries caravans. Without it, the caravans seen on the wire are parsed and their
    /// datagrams compared with what was sent.
    pub fn udp_inbound(&self, n: u32, caravan_dscp: u8, decap: bool) -> Result<UdpResult> {
        let sizes = [1usize, 64, 200, 512, 1000, 1472, 7, 333];
        let payload = |i: u32| -> Vec<u8> {
            let len = sizes[i as usize % sizes.len()].max(4);
            let mut p = vec![(i % 251) as u8; len];
            p[..4].copy_from_slice(&i.to_be_bytes());
            p
        };
        let stop = AtomicBool::new(false);
        let ready = AtomicBool::new(false);
        let int_iface = self.int_iface().to_owned();
        // The decapsulator must be attached inside the namespace, and stays attached while held.
        let decapsulator =
            if decap {
                Some(self.int.enter(|| {
                    caravan::Decap::attach(&int_iface, caravan::DecapConfig::default())
                })??)
            } else {
                None
            };
        type Seen = (Vec<(bool, Vec<u8>)>, Vec<Vec<u8>>);
        let (seen, app) = std::thread::scope(|s| -> Result<Seen> {
            let capture = s.spawn(|| {
                self.int.enter(|| -> Result<Seen> {
                    let sink = UdpSocket::bind(format!("{INT_ADDR}:7000"))?;
                    sink.set_nonblocking(true)?;
                    let mut rx = capture_channel(&int_iface)?;
                    ready.store(true, Ordering::SeqCst);
                    let (mut got, mut app) = (Vec::new(), Vec::new());
                    let mut buf = vec![0u8; 65536];
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(frame) = rx.next() {
                            if let Class::Udp(h) = wire::classify(frame, frame.len()) {
                                if h.key.dport == 7000 {
                                    let dscp = frame[h.l3_offset() + 1] >> 2;
                                    got.push((dscp == caravan_dscp, frame.to_vec()));
                                }
                            }
                        }
                        while let Ok(n) = sink.recv(&mut buf) {
                            app.push(buf[..n].to_vec());
                        }
                    }
                    while let Ok(n) = sink.recv(&mut buf) {
                        app.push(buf[..n].to_vec());
                    }
                    Ok((got, app))
                })
            });
            while !ready.load(Ordering::SeqCst) && !capture.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            self.ext.enter(|| -> Result<()> {
                let sock = UdpSocket::bind(format!("{EXT_ADDR}:6000"))?;
                for i in 0..n {
                    sock.send_to(&payload(i), format!("{INT_ADDR}:7000"))?;
                    if i % 16 == 15 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                Ok(())
            })??;
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::SeqCst);
            capture
                .join()
                .map_err(|_| anyhow::anyhow!("capture thread panicked"))??
        })?;
        drop(decapsulator);
        let caravans = seen.iter().filter(|(c, _)| *c).count() as u64;
        let received = if decap {
            app
        } else {
            let mut received = Vec::new();
            for (is_caravan, frame) in &seen {
                let Class::Udp(h) = wire::classify(frame, frame.len()) else {
                    continue;
                };
                let body = &frame[h.hdr_len()..h.frame_len()];
                if *is_caravan {
                    let mut at = 0;
                    while at + 8 <= body.len() {
                        let len = usize::from(u16::from_be_bytes([body[at + 4], body[at + 5]]));
                        if len < 8 || at + len > body.len() {
                            break;
                        }
                        received.push(body[at + 8..at + len].to_vec());
                        at += len;
                    }
                } else {
                    received.push(body.to_vec());
                }
            }
            received
        };
        let bytes_ok = received.len() == n as usize
            && received
                .iter()
                .enumerate()
                .all(|(i, d)| *d == payload(i as u32));
        Ok(UdpResult {
            datagrams_sent: u64::from(n),
            datagrams_received: received.len() as u64,
            caravans_seen: caravans,
            bytes_ok,
            decapsulated_by_ebpf: decap,
        })
    }

    /// Runs `f` while counting the TCP frames `ns` receives on `iface` from `from`; returns what
    /// `f` returned and the counts.
    pub fn with_capture<T>(
        &self,
        ns: &Netns,
        iface: &str,
        from: [u8; 4],
        f: impl FnOnce() -> Result<T>,
    ) -> Result<(T, FrameStats)> {
        let stop = AtomicBool::new(false);
        let ready = AtomicBool::new(false);
        let stats = FrameStats::default();
        let out = std::thread::scope(|s| -> Result<T> {
            let capture = s.spawn(|| {
                ns.enter(|| -> Result<()> {
                    let mut rx = capture_channel(iface)?;
                    ready.store(true, Ordering::SeqCst);
                    while !stop.load(Ordering::SeqCst) {
                        if let Ok(frame) = rx.next() {
                            stats.record(frame, from);
                        }
                    }
                    Ok(())
                })
            });
            while !ready.load(Ordering::SeqCst) && !capture.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let out = f();
            stop.store(true, Ordering::SeqCst);
            capture
                .join()
                .map_err(|_| anyhow::anyhow!("capture thread panicked"))???;
            out
        })?;
        Ok((out, stats))
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn capture_channel(iface: &str) -> Result<Box<dyn pnet_datalink::DataLinkReceiver>> {
    let interface = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.name == iface)
        .with_context(|| format!("no interface {iface}"))?;
    let config = ChannelConfig {
        read_timeout: Some(Duration::from_millis(50)),
        read_buffer_size: 1 << 20,
        ..ChannelConfig::default()
    };
    match pnet_datalink::channel(&interface, config)? {
        Channel::Ethernet(_, rx) => Ok(rx),
        _ => bail!("unexpected channel type"),
    }
}

/// Frames seen by a capture.
#[derive(Debug, Default)]
pub struct FrameStats {
    /// TCP data frames from the watched source.
    pub tcp_frames: AtomicU64,
    /// Their TCP payload bytes.
    pub tcp_payload: AtomicU64,
    /// Payload bytes in iMTU-bound frames (IP length + one more 1448 B segment > 9000).
    pub bound_payload: AtomicU64,
    /// Their frame bytes.
    pub tcp_frame_bytes: AtomicU64,
    /// Largest frame of any kind.
    pub max_frame: AtomicU64,
}

impl FrameStats {
    fn record(&self, frame: &[u8], from: [u8; 4]) {
        self.max_frame
            .fetch_max(frame.len() as u64, Ordering::Relaxed);
        let Class::Tcp(h) = wire::classify(frame, frame.len()) else {
            return;
        };
        if h.key.src[..4] != from || h.payload_len == 0 {
            return;
        }
        let payload = u64::from(h.payload_len);
        self.tcp_frames.fetch_add(1, Ordering::Relaxed);
        self.tcp_payload.fetch_add(payload, Ordering::Relaxed);
        self.tcp_frame_bytes
            .fetch_add(frame.len() as u64, Ordering::Relaxed);
        if usize::from(h.ip_len) + EXT_SEGMENT > 9000 {
            self.bound_payload.fetch_add(payload, Ordering::Relaxed);
        }
    }

    /// Share of TCP payload in iMTU-bound frames.
    pub fn yield_share(&self) -> f64 {
        let total = self.tcp_payload.load(Ordering::Relaxed);
        if total == 0 {
            0.0
        } else {
            self.bound_payload.load(Ordering::Relaxed) as f64 / total as f64
        }
    }

    /// Mean received TCP frame size.
    pub fn mean_frame(&self) -> f64 {
        let n = self.tcp_frames.load(Ordering::Relaxed);
        if n == 0 {
            0.0
        } else {
            self.tcp_frame_bytes.load(Ordering::Relaxed) as f64 / n as f64
        }
    }
}

/// What the UDP run saw.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct UdpResult {
    /// Datagrams sent from outside.
    pub datagrams_sent: u64,
    /// Datagrams recovered at the inside host (from caravans or plain).
    pub datagrams_received: u64,
    /// Caravans that reached the inside host.
    pub caravans_seen: u64,
    /// Every datagram recovered in order, byte for byte.
    pub bytes_ok: bool,
    /// The datagrams were read by an ordinary socket behind the caravan eBPF decapsulator.
    pub decapsulated_by_ebpf: bool,
}

/// A running pxgw.
pub struct Gateway {
    child: Option<Child>,
    /// Its `--stats-json` file.
    pub stats: PathBuf,
    /// Its log.
    pub log: PathBuf,
}

impl Gateway {
    /// The busiest of pxgw's periodic summary lines so far (most packets in).
    pub fn busiest_line(&self) -> Option<String> {
        let log = fs::read_to_string(&self.log).ok()?;
        let rate = |l: &str| -> f64 {
            l.split("in: ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        log.lines()
            .filter(|l| l.contains("in: ") && l.contains("kpps"))
            .max_by(|a, b| rate(a).total_cmp(&rate(b)))
            .map(|l| {
                // Without the ANSI colours and the time stamp.
                let plain: String = l
                    .split('\u{1b}')
                    .map(|p| p.split_once('m').map_or(p, |(_, r)| r))
                    .collect();
                plain
                    .split_once(" INFO ")
                    .map_or(plain.clone(), |(_, r)| format!("INFO {r}"))
            })
    }

    /// Stops it with SIGINT (it flushes and reports) and returns its exit code and statistics.
    pub fn stop(mut self) -> Result<(i32, serde_json::Value)> {
        let mut child = self.child.take().context("already stopped")?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("pxgw did not stop within 30 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stats = fs::read_to_string(&self.stats)
            .with_context(|| format!("pxgw wrote no statistics; see {}", self.log.display()))?;
        Ok((status.code().unwrap_or(-1), serde_json::from_str(&stats)?))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A Linux bridge, deleted on drop.
pub struct Bridge {
    name: String,
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = netlab::run("ip", &["link", "del", &self.name]);
    }
}

/// A background daemon of the lab, stopped on drop.
pub struct Daemon {
    _child: Spawned,
}

/// A child process killed on drop.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Whether `program` runs.
pub fn have(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Interrupts (SIGINT/SIGTERM) turn into a flag, so the lab unwinds and cleans up.
pub fn interrupted() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let _ = signal_hook::flag::register(s, flag.clone());
    }
    flag
}
