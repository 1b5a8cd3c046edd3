//! The cases of the stress lab and their report: each runs while sha256-checked transfers
//! cross pxgw both ways, then pxgw must still be running and the transfers intact.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::{Family, Gateway, Lab};
use serde::Serialize;

use crate::border::{self, FlowWatch, HeldAcks, IcmpWatch, Sizes, LINUX_MIN_MSS, RETRANSMIT_SLACK};
use crate::bulk::{Bulk, BulkResult, Counted, YieldMeter};
use crate::crafted::{self, Observed, Reference};
use crate::flood::{self, Kind};
use crate::scrape;

/// How big a run is.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Run only the cases whose name contains this (the clean case always runs).
    pub only: Option<String>,
    /// Frames of each flood (flows, SYNs, UDP datagrams).
    pub flood: u64,
    /// Longest any flood may send.
    pub flood_limit: Duration,
    /// Rate of each bulk transfer, Mb/s.
    pub bulk_mbps: u32,
    /// Seconds of the clean case and of each measuring phase.
    pub measure: Duration,
    /// Whether the mempool-exhaustion case runs (both runs; `false` leaves it out, visibly).
    pub mempool: bool,
}

impl Plan {
    /// Whether the case `name` is to run.
    pub fn wants(&self, name: &str) -> bool {
        (self.mempool || name != "mempool-exhaustion")
            && self.only.as_deref().is_none_or(|o| name.contains(o))
    }

    /// The full run (`cargo xtask lab stress`): floods of 1 M frames.
    pub fn full() -> Self {
        Self {
            only: None,
            flood: 1_000_000,
            flood_limit: Duration::from_secs(60),
            bulk_mbps: 200,
            measure: Duration::from_secs(4),
            mempool: true,
        }
    }

    /// The short run (`cargo xtask test`): floods of 100 k frames.
    pub fn short() -> Self {
        Self {
            only: None,
            flood: 100_000,
            flood_limit: Duration::from_secs(20),
            bulk_mbps: 200,
            measure: Duration::from_secs(2),
            mempool: true,
        }
    }
}

/// One row of the report (the JSON `cases` entries).
#[derive(Clone, Debug, Serialize)]
pub struct Case {
    /// The case's name.
    pub case: String,
    /// Frames the case injected (crafted segments, flood frames).
    pub packets_sent: u64,
    /// The bulk transfers arrived intact (same size and sha256 at both ends) and, for a crafted
    /// sequence, the application read exactly what it reads without pxgw.
    pub bytes_ok: bool,
    /// pxgw was no longer running after the case.
    pub crashed: bool,
    /// Mbufs the pxgw instance that ran the case had not returned when it stopped (`null`
    /// when it was not stopped cleanly).
    pub leaked_mbufs: Option<u64>,
    /// Share of the inbound transfer's payload that reached the inside host in iMTU-bound
    /// packets during the case (after the attack, for the SYN flood; after the restart, for
    /// the restart).
    pub yield_large_flows: Option<f64>,
    /// What happened, what was compared, what the case guards against.
    pub notes: String,
    /// Every check of the case passed.
    pub ok: bool,
    /// Which pxgw instance ran it (leaks are known when that instance stops).
    #[serde(skip)]
    instance: usize,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The cases, in the order they ran.
    pub cases: Vec<Case>,
    /// The inbound transfer's yield with no attack, the reference for yields after attacks.
    pub clean_yield: f64,
    /// Frames per flood.
    pub flood_frames: u64,
}

impl Report {
    /// Whether every case passed.
    pub fn ok(&self) -> bool {
        self.cases.iter().all(|c| c.ok)
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{:<26} {:>9} {:>8} {:>8} {:>7} {:>7}  {}\n",
            "case", "packets", "bytes", "crashed", "leaked", "yield", "notes"
        );
        for c in &self.cases {
            s += &format!(
                "{:<26} {:>9} {:>8} {:>8} {:>7} {:>7}  {}{}\n",
                c.case,
                c.packets_sent,
                if c.bytes_ok { "ok" } else { "BAD" },
                if c.crashed { "CRASHED" } else { "no" },
                c.leaked_mbufs.map_or("?".to_owned(), |l| l.to_string()),
                c.yield_large_flows
                    .map_or("-".to_owned(), |y| format!("{:.1}%", 100.0 * y)),
                if c.ok { "" } else { "FAIL: " },
                c.notes
            );
        }
        let failed = self.cases.iter().filter(|c| !c.ok).count();
        s += &format!("{} passed, {failed} failed\n", self.cases.len() - failed);
        s
    }
}

/// Rate of the mempool case's UDP flood: what pxgw takes in without loss here with its default
/// pool, while 100 ms of it is more datagrams than the small pool has mbufs.
const MEMPOOL_PPS: u64 = 60_000;

/// Longest the restart case waits for the surviving transfer's data to flow again (TCP's
/// retransmission back-off after the gap) before it measures the recovered yield.
const RESUME_WAIT: Duration = Duration::from_secs(20);

/// Datagrams per flow in a row in the mempool case's flood.
const MEMPOOL_BURST: u32 = 8;

/// Rate of the SYN flood: what pxgw takes in here, so every SYN reaches its connection table.
const SYN_PPS: u64 = 60_000;

/// A yield after an attack or a restart must be at least this share of the clean yield.
const YIELD_KEPT: f64 = 0.5;

/// The lab with pxgw running and the yield capture on its inside host.
struct Bench<'a> {
    lab: &'a Lab,
    pxgw: &'a Path,
    gw: Option<Gateway>,
    meter: YieldMeter,
    plan: &'a Plan,
    cases: Vec<Case>,
    instance: usize,
    /// Instance → its leaked mbufs, once stopped.
    leaks: Vec<Option<u64>>,
    next_port: u16,
}

/// The transfers of one case, both ways.
struct Transfers {
    inbound: Bulk,
    outbound: Bulk,
    start: Counted,
}

impl Bench<'_> {
    fn port(&mut self) -> u16 {
        self.next_port += 1;
        self.next_port
    }

    fn start_pxgw(&mut self, config: &str) -> Result<()> {
        self.gw = Some(self.lab.start_pxgw_with(self.pxgw, config, 3600)?);
        self.instance += 1;
        self.leaks.push(None);
        Ok(())
    }

    /// Stops pxgw with SIGINT; returns its exit code and statistics, and records its leaks.
    fn stop_pxgw(&mut self) -> Result<(i32, serde_json::Value)> {
        let gw = self.gw.take().context("pxgw is not running")?;
        let (code, stats) = gw.stop()?;
        self.leaks[self.instance - 1] = stats["leaked_mbufs"].as_u64();
        Ok((code, stats))
    }

    fn running(&mut self) -> bool {
        self.gw.as_mut().is_some_and(Gateway::is_running)
    }

    /// Stops whatever instance runs and starts a new one with `config`, whose statistics will
    /// be the case's alone.
    fn fresh(&mut self, config: &str) -> Result<()> {
        if self.running() {
            self.stop_pxgw()?;
        } else {
            self.gw = None;
        }
        self.start_pxgw(config)
    }

    /// Stops the instance that ran a case: (it had crashed, its exit code, its statistics;
    /// `Null` when it had crashed).
    fn end(&mut self) -> Result<(bool, i32, serde_json::Value)> {
        if self.running() {
            let (code, stats) = self.stop_pxgw()?;
            Ok((false, code, stats))
        } else {
            self.gw = None;
            Ok((true, -1, serde_json::Value::Null))
        }
    }

    fn transfers(&mut self, family: Family) -> Result<Transfers> {
        let (pin, pout) = (self.port(), self.port());
        let inbound = Bulk::start(self.lab, family, true, pin, self.plan.bulk_mbps)?;
        let outbound = Bulk::start(self.lab, family, false, pout, self.plan.bulk_mbps)?;
        Ok(Transfers {
            start: self.meter.get(pin),
            inbound,
            outbound,
        })
    }

    /// Ends the transfers; returns (both intact, inbound yield since they started, notes).
    fn finish(&self, t: Transfers) -> (bool, Option<f64>, String) {
        let port = t.inbound.port;
        let seen = self.meter.get(port).since(&t.start);
        let results: [BulkResult; 2] = [t.inbound.finish(), t.outbound.finish()];
        let ok = results.iter().all(|r| r.sha_ok);
        let mut notes = format!(
            "bulk {} MB in, {} MB out",
            results[0].received >> 20,
            results[1].received >> 20
        );
        for (dir, r) in ["in", "out"].iter().zip(&results) {
            if let Some(e) = &r.error {
                notes += &format!("; bulk {dir}: {e}");
            }
        }
        (ok, (seen.payload > 0).then(|| seen.share()), notes)
    }

    fn push(&mut self, mut case: Case) {
        case.instance = self.instance;
        println!(
            "stress: {:<26} {} {}",
            case.case,
            if case.ok { "ok  " } else { "FAIL" },
            case.notes
        );
        self.cases.push(case);
    }
}

fn row(
    case: &str,
    packets: u64,
    bytes_ok: bool,
    crashed: bool,
    y: Option<f64>,
    notes: String,
    ok: bool,
) -> Case {
    Case {
        case: case.to_owned(),
        packets_sent: packets,
        bytes_ok,
        crashed,
        leaked_mbufs: None,
        yield_large_flows: y,
        notes,
        ok: ok && bytes_ok && !crashed,
        instance: 0,
    }
}

/// pxgw's configuration for the mempool case: caravans that may wait 100 ms, so a UDP flood
/// over 1024 flows holds thousands of datagrams, and with `small` the smallest packet pool the
/// configuration allows (rings of 64 descriptors and one worker's cache: 4736 mbufs), which
/// that cannot hold.
///
/// The outside port is `net_af_packet` on `ext_iface` even where the lab uses `net_tap`: DPDK
/// 22.11's `net_tap` reads its TAP only after a SIGIO, and once a burst ended on a failed mbuf
/// allocation while the TAP's queue was full, no SIGIO comes (the kernel drops at a full queue
/// without signalling), so that port stops receiving for good (seen here about once in three
/// runs: `rx_nombuf` frozen, `ipackets` +0 for a minute while the outside host retransmits).
fn exhaustible(config: &str, small: bool, ext_iface: &str) -> String {
    let mut config: String = config
        .lines()
        .map(|l| {
            if l.starts_with("device = \"net_tap") {
                format!(
                    "device = \"net_af_packet0,iface={ext_iface},framesz=10240,blocksz=40960,framecnt=4096,qpairs=1\"\n"
                )
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    config += "[caravan]\ntimeout_us = 100000\n";
    if small {
        let rings = "rx_descriptors = 64\ntx_descriptors = 64\n";
        config = config
            .replace("[ports.external]\n", &format!("[ports.external]\n{rings}"))
            .replace("[ports.internal]\n", &format!("[ports.internal]\n{rings}"))
            .replace("[workers]\n", "[workers]\npool_size = 4736\n");
    }
    config
}

/// Frames the pxgw that wrote `stats` lost for want of an mbuf or of room: the external port's
/// ring overruns (`imissed`: DPDK 22.11's net_af_packet stops reading its ring when it cannot
/// allocate, without counting `rx_nombuf`), `rx_nombuf` of both ports, and pxgw's own
/// `drops.pool_exhausted`.
fn lost(stats: &serde_json::Value) -> u64 {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    n(&stats["ports"]["external"]["imissed"])
        + n(&stats["ports"]["external"]["rx_nombuf"])
        + n(&stats["ports"]["internal"]["rx_nombuf"])
        + n(&stats["drops"]["pool_exhausted"])
}

/// The mempool case: the same paced UDP flood against a pxgw with the default pool (the
/// control: what it loses without exhaustion) and with the smallest pool; the small pool must
/// lose visibly more, counted, and a later transfer must be intact.
fn mempool(b: &mut Bench<'_>, lab: &Lab) -> Result<Case> {
    let plan = b.plan;
    // Each flow's datagrams in a burst, flows revisited after more than the caravan timeout:
    // every datagram waits the whole 100 ms in its caravan, so pxgw holds 100 ms of the flood
    // (about 6000 datagrams) at any time, more than the small pool's 4736 mbufs.
    let udp = Kind::Udp {
        flows: 1024,
        burst: MEMPOOL_BURST,
    };
    let paced = |b: &Bench<'_>| {
        flood::flood(
            lab,
            udp,
            Family::V4,
            plan.flood,
            plan.flood_limit,
            Some(MEMPOOL_PPS),
        )
        .map(|s| s.frames)
        .map_err(|e| e.context(format!("flood against pxgw instance {}", b.instance)))
    };
    b.start_pxgw(&exhaustible(&lab.pxgw_config(1), false, lab.gw_ext_iface()))?;
    let control_sent = paced(b)?;
    std::thread::sleep(Duration::from_millis(300));
    let (control_code, control) = b.stop_pxgw()?;
    let control_leaked = b.leaks[b.instance - 1];

    b.start_pxgw(&exhaustible(&lab.pxgw_config(1), true, lab.gw_ext_iface()))?;
    let t = b.transfers(Family::V4)?;
    let sent = paced(b)?;
    // Losses while the pool is exhausted are the point; TCP recovers them.
    let (_, _, during) = b.finish(t);
    std::thread::sleep(Duration::from_millis(300));
    let later = b.transfers(Family::V4)?;
    std::thread::sleep(plan.measure);
    let (later_ok, y, after) = b.finish(later);
    let crashed = !b.running();
    let (code, stats) = if crashed {
        (-1, serde_json::Value::Null)
    } else {
        b.stop_pxgw()?
    };
    let (lost_small, lost_control) = (lost(&stats), lost(&control));
    let counted = lost_small >= lost_control + sent / 50;
    let notes = format!(
        "{sent} UDP datagrams at {} kpps over 1024 flows, {MEMPOOL_BURST} in a row each, caravans \
         held 100 ms: with a pool \
         of 4736 mbufs {lost_small} frames lost and counted (imissed {}, rx_nombuf {}, \
         drops.pool_exhausted {}), {} datagrams packed; with the default pool (control, \
         {control_sent} datagrams) {lost_control} lost, {} packed, exit code {control_code}, \
         leaked {}; exit code {code}; during: {during}; a later transfer: {after}",
        MEMPOOL_PPS / 1000,
        stats["ports"]["external"]["imissed"],
        stats["ports"]["external"]["rx_nombuf"],
        stats["drops"]["pool_exhausted"],
        stats["caravan"]["datagrams_packed"],
        control["caravan"]["datagrams_packed"],
        control_leaked.map_or("?".into(), |l| l.to_string()),
    );
    Ok(row(
        "mempool-exhaustion",
        sent,
        later_ok,
        crashed,
        y,
        notes,
        counted && code == 0 && control_code == 0 && control_leaked == Some(0),
    ))
}

/// The clean case's yield must reach this, whatever the other cases do: the share of the
/// inbound transfer's payload in iMTU-bound packets that the gateway exists for.
const CLEAN_YIELD_FLOOR: f64 = 0.85;

/// What the inside server writes to each tiny-MSS client.
const TINY_BYTES: usize = 64 << 10;

/// How long each phase of the spoofed-SYN and ICMP cases watches the outbound transfer.
const PHASE: Duration = Duration::from_millis(800);

/// Frames already on their way when an attack frame is sent are not the attack's effect.
const SETTLE: Duration = Duration::from_millis(100);

/// The MSS of the spoofed SYN: a 154 B frame per segment piece if the gateway believed it.
const SPOOFED_MSS: u16 = 100;

/// After a spoofed SYN, the outbound transfer's frames must keep this share of their mean
/// payload.
const SIZE_KEPT: f64 = 0.75;

/// The MTU of the out-of-window "fragmentation needed" (IPv4) and Packet Too Big (IPv6): above
/// each family's floor, so only the sequence number check can refuse it.
const PTB_OUT_OF_WINDOW: [u16; 2] = [1000, 1280];

/// The MTU of the in-window one, which must be learned.
const PTB_IN_WINDOW: u16 = 1400;

/// The MTU of an in-window one below each family's floor (IPv4: below the 536 B MSS floor's
/// 576 B; IPv6: below its minimum MTU, 1280), which must not be learned.
const PTB_BELOW_FLOOR: [u16; 2] = [400, 1000];

/// An Ethernet header, untagged.
const ETH_HLEN: usize = 14;

/// Connections that send half a request line to the metrics endpoint and stall.
const METRICS_STALLED: usize = 1000;

/// Pipelined requests of the metrics client that never reads: their answers (about 14 KB
/// each) are more than the largest send buffer Linux gives a loopback connection (4 MB), so
/// a server that writes them without a timeout blocks for good.
const METRICS_UNREAD_REQUESTS: usize = 1000;

/// The read and write timeouts of pxgw's metrics endpoint in the metrics case
/// (`[stats] prometheus_timeout_ms`; 5 s by default, shortened to keep the case short).
const METRICS_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the real scrape may take in the metrics case: the stalled connections and the
/// client that never reads hold the endpoint for at most its timeouts, once each (they are
/// dropped then), and 1 s for the scrape itself on a busy machine.
const METRICS_SCRAPE_LIMIT: Duration = Duration::from_secs(2 * METRICS_TIMEOUT.as_secs() + 1);

/// pxgw's configuration for the metrics case: the lab's (whose last section is `[stats]`),
/// with the endpoint's timeouts.
fn metrics_config(lab: &Lab) -> String {
    format!(
        "{}prometheus_timeout_ms = {}\n",
        lab.pxgw_config(1),
        METRICS_TIMEOUT.as_millis()
    )
}

/// A counter of the statistics pxgw wrote when it stopped; `None` when it has no such counter.
fn counter(stats: &serde_json::Value, section: &str, name: &str) -> Option<u64> {
    stats[section][name].as_u64()
}

/// A counter for a report: its value, or "missing".
fn shown(v: Option<u64>) -> String {
    v.map_or("missing".to_owned(), |v| v.to_string())
}

/// The tiny-MSS case: a packet-socket client on the outside host announces `mss` and reads 64
/// KB from a server on the inside host. The data must arrive intact in no more frames than
/// Linux alone sends at its 48 B floor, none smaller than that floor allows, the gateway must
/// count the MSS below its floor, and fail no split.
fn tiny_mss(
    b: &mut Bench<'_>,
    lab: &Lab,
    name: &str,
    family: Family,
    mss: u16,
    k: u16,
) -> Result<Case> {
    b.fresh(&lab.pxgw_config(1))?;
    let t = b.transfers(family)?;
    let got = border::tiny_mss(lab, family, mss, TINY_BYTES, k);
    let (bulk_ok, y, bulk) = b.finish(t);
    let (crashed, code, stats) = b.end()?;
    let below = counter(&stats, "mss", "below_floor");
    let split_failed = counter(&stats, "drops", "split_failed");
    let d = match got {
        Ok(d) => d,
        Err(e) => {
            let notes = format!("{e:#}; exit code {code}; {bulk}");
            return Ok(row(name, 0, false, crashed, y, notes, false));
        }
    };
    // What Linux sends alone at its floor, and a few retransmissions (`RETRANSMIT_SLACK`).
    let linux = d.sent.div_ceil(LINUX_MIN_MSS) as u64;
    let slack = RETRANSMIT_SLACK;
    let ok = d.short == 0
        && d.frames <= linux + slack
        && below.is_some_and(|n| n >= 1)
        && split_failed == Some(0)
        && code == 0;
    let notes = format!(
        "{family} SYN with MSS {mss}: the client read {}/{} B{} in {} data frames ({} \
         retransmitted, smallest {} B, {} below min(48 B, bytes left)) within {:.1} s; Linux alone \
         sends {linux} (+{slack} for retransmissions); mss.below_floor {} (must be >= 1), \
         drops.split_failed {} (must be 0); exit code {code}; {bulk}",
        d.received,
        d.sent,
        if d.intact { " intact" } else { " NOT intact" },
        d.frames,
        d.duplicates,
        d.smallest,
        d.short,
        d.seconds,
        shown(below),
        shown(split_failed),
    );
    Ok(row(
        name,
        d.frames_sent,
        bulk_ok && d.intact,
        crashed,
        y,
        notes,
        ok,
    ))
}

/// The spoofed-SYN case: while the outbound transfer runs, the outside host sends a SYN with
/// its 4-tuple, a random sequence number and MSS 100. The transfer's frames leaving pxgw must
/// keep their size, and the gateway must count the SYN as ignored.
fn spoofed_syn(b: &mut Bench<'_>, lab: &Lab) -> Result<Case> {
    b.fresh(&lab.pxgw_config(1))?;
    let t = b.transfers(Family::V4)?;
    let port = t.outbound.port;
    let ext = lab.ext_addr(Family::V4);
    let watch = FlowWatch::start(&lab.ext, lab.ext_iface(), lab.int_addr(Family::V4), port)?;
    let start = Instant::now();
    std::thread::sleep(PHASE);
    let sent = match watch.last() {
        Some(last) => border::spoofed_syn(lab, ext, port, last.sport, SPOOFED_MSS).map(|()| last),
        None => Err(anyhow::anyhow!(
            "no frame of the outbound transfer reached the outside host"
        )),
    };
    let at = Instant::now();
    std::thread::sleep(PHASE);
    let end = Instant::now();
    let before = Sizes::of(&watch.between(start, at));
    let after = Sizes::of(&watch.between(at + SETTLE, end));
    drop(watch);
    let (bulk_ok, y, bulk) = b.finish(t);
    let (crashed, code, stats) = b.end()?;
    let ignored = counter(&stats, "mss", "syn_ignored");
    let kept = after.frames > 0
        && after.mean_payload >= SIZE_KEPT * before.mean_payload
        && after.max_frame >= before.max_frame;
    let notes = match &sent {
        Ok(last) => format!(
            "a SYN (MSS {SPOOFED_MSS}, random sequence number) on the outbound transfer's \
             4-tuple (port {} -> {port}): before it {before}; after it {after} (must keep \
             {:.0}% of the mean and the largest frame); mss.syn_ignored {} (must be >= 1); \
             exit code {code}; {bulk}",
            last.sport,
            100.0 * SIZE_KEPT,
            shown(ignored)
        ),
        Err(e) => format!("{e:#}; {bulk}"),
    };
    Ok(row(
        "spoofed-syn",
        u64::from(sent.is_ok()),
        bulk_ok,
        crashed,
        y,
        notes,
        sent.is_ok() && kept && ignored.is_some_and(|n| n >= 1) && code == 0,
    ))
}

/// The ICMP case in `family`: an outbound transfer to the outside host's second address; a
/// "fragmentation needed" (IPv4, MTU 1000) or Packet Too Big (IPv6, MTU 1280) quoting it with a
/// sequence number half the sequence space away must change nothing (counted out of window);
/// then, with the outside host's acknowledgements held so that the quoted bytes are surely in
/// flight, one with an MTU below the floor quoting a frame just seen must not be learned (counted)
/// and one with MTU 1400 must: later frames fit 1400. All must reach the inside host, whose
/// Linux honours the in-window ones itself (down to its 552 B floor for IPv4), so the counters
/// tell what pxgw learned.
fn too_big(b: &mut Bench<'_>, lab: &Lab, name: &str, family: Family) -> Result<Case> {
    let out_mtu = PTB_OUT_OF_WINDOW[usize::from(family == Family::V6)];
    let below_mtu = PTB_BELOW_FLOOR[usize::from(family == Family::V6)];
    b.fresh(&lab.pxgw_config(1))?;
    let t = b.transfers(family)?;
    let port = b.port();
    let alt = border::ALT_EXT[usize::from(family == Family::V6)];
    let target = Bulk::start_to(lab, family, false, alt, port, b.plan.bulk_mbps)?;
    let watch = FlowWatch::start(&lab.ext, lab.ext_iface(), lab.int_addr(family), port)?;
    let icmp = IcmpWatch::start(lab)?;
    let start = Instant::now();
    std::thread::sleep(PHASE);
    let t1 = Instant::now();
    let sent = (|| -> Result<()> {
        let last = watch
            .last()
            .context("no frame of the transfer reached the outside host")?;
        let far = last.seq.wrapping_add(1 << 31);
        border::too_big(lab, alt, port, last.sport, far, last.frame_len, out_mtu)?;
        Ok(())
    })();
    std::thread::sleep(PHASE);
    let t2 = Instant::now();
    let in_window = (|| -> Result<()> {
        if sent.is_err() {
            bail!("skipped");
        }
        let held = HeldAcks::start(lab, port)?;
        // Frames that arrive once the hold has taken effect are never acknowledged while it
        // lasts: their sequence numbers are in flight for the inside host, and for pxgw.
        let f = watch
            .next_after(
                Instant::now() + Duration::from_millis(20),
                Duration::from_secs(1),
            )
            .context("no frame of the transfer arrived while acknowledgements were held")?;
        border::too_big(lab, alt, port, f.sport, f.seq, f.frame_len, below_mtu)?;
        border::too_big(lab, alt, port, f.sport, f.seq, f.frame_len, PTB_IN_WINDOW)?;
        std::thread::sleep(Duration::from_millis(20));
        drop(held);
        Ok(())
    })();
    let t3 = Instant::now();
    std::thread::sleep(PHASE);
    let end = Instant::now();
    let before = Sizes::of(&watch.between(start, t1));
    let after_out = Sizes::of(&watch.between(t1 + SETTLE, t2));
    let after_in = Sizes::of(&watch.between(t3 + SETTLE, end));
    let forwarded = icmp.count();
    drop((watch, icmp));
    let target = target.finish();
    let (bulk_ok, y, bulk) = b.finish(t);
    let (crashed, code, stats) = b.end()?;
    let (oow, below, learned) = (
        counter(&stats, "router", "ptb_out_of_window"),
        counter(&stats, "router", "ptb_below_floor"),
        counter(&stats, "router", "ptb_learned"),
    );
    let unchanged = after_out.frames > 0
        && before.max_frame > usize::from(out_mtu) + ETH_HLEN
        && after_out.max_frame >= before.max_frame;
    let lowered =
        after_in.frames > 0 && after_in.max_frame <= usize::from(PTB_IN_WINDOW) + ETH_HLEN;
    let ok = sent.is_ok()
        && in_window.is_ok()
        && unchanged
        && lowered
        && oow.is_some_and(|n| n >= 1)
        && below.is_some_and(|n| n >= 1)
        && learned == Some(1)
        && forwarded == 3
        && code == 0;
    let what = if family == Family::V6 {
        "Packet Too Big"
    } else {
        "frag needed"
    };
    let mut notes = format!(
        "{what} MTU {out_mtu} quoting a sequence number 2^31 away: before {before}; after \
         {after_out} (the split size must not change); then, quoting a frame in flight, MTU \
         {below_mtu} (below the floor) and MTU {PTB_IN_WINDOW}: after {after_in} (must fit \
         {PTB_IN_WINDOW}); router.ptb_out_of_window {} (must be >= 1), router.ptb_below_floor {} \
         (must be >= 1), router.ptb_learned {} (must be 1); {forwarded} of 3 errors reached the \
         inside host; transfer to {alt}: {} MB{}; exit code {code}; {bulk}",
        shown(oow),
        shown(below),
        shown(learned),
        target.received >> 20,
        target
            .error
            .as_deref()
            .map_or(String::new(), |e| format!(" ({e})")),
    );
    if let Err(e) = &sent {
        notes = format!("out of window: {e:#}; {notes}");
    }
    if let Err(e) = &in_window {
        notes = format!("in window: {e:#}; {notes}");
    }
    Ok(row(
        name,
        3,
        bulk_ok && target.sha_ok,
        crashed,
        y,
        notes,
        ok,
    ))
}

/// The caravan-mark case in `family`: pxgw with caravans disabled; the outside host sends one
/// datagram that wears the caravan mark and carries a valid caravan of three datagrams, to an
/// ordinary socket on the inside host behind the eBPF decapsulator. The application must
/// receive one datagram, the caravan-shaped payload whole, and the gateway must count the mark
/// cleared.
fn caravan_mark(b: &mut Bench<'_>, lab: &Lab, name: &str, family: Family) -> Result<Case> {
    b.fresh(&format!(
        "{}[caravan]\nenabled = false\n",
        lab.pxgw_config(1)
    ))?;
    let t = b.transfers(family)?;
    let got = border::caravan_inbound(
        lab,
        family,
        7300 + u16::from(family == Family::V6),
        caravan::DEFAULT_DSCP,
    );
    let (bulk_ok, y, bulk) = b.finish(t);
    let (crashed, code, stats) = b.end()?;
    let cleared = counter(&stats, "caravan", "mark_cleared");
    let (whole, notes) = match &got {
        Ok(c) => {
            let whole = c.received.len() == 1 && c.received[0] == c.payload;
            let sizes: Vec<usize> = c.received.iter().map(Vec::len).collect();
            (
                whole,
                format!(
                    "a datagram wearing DSCP {} whose {} B payload is a caravan of {} \
                     datagrams, caravans disabled: the inside application read {} datagram(s) \
                     of {sizes:?} B (must be 1, the payload whole); caravan.mark_cleared {} \
                     (must be >= 1); exit code {code}; {bulk}",
                    caravan::DEFAULT_DSCP,
                    c.payload.len(),
                    c.packed.len(),
                    c.received.len(),
                    shown(cleared)
                ),
            )
        }
        Err(e) => (false, format!("{e:#}; {bulk}")),
    };
    Ok(row(
        name,
        u64::from(got.is_ok()),
        bulk_ok && whole,
        crashed,
        y,
        notes,
        cleared.is_some_and(|n| n >= 1) && code == 0,
    ))
}

/// The metrics case: 1000 connections send half a request line to pxgw's Prometheus endpoint
/// and stall, and one client asks for 64 answers and never reads them; a real scrape must
/// still be answered within [`METRICS_SCRAPE_LIMIT`], and the transfers stay intact.
fn metrics_stall(b: &mut Bench<'_>, lab: &Lab) -> Result<Case> {
    b.fresh(&metrics_config(lab))?;
    let url =
        b.gw.as_ref()
            .and_then(Gateway::metrics_url)
            .context("pxgw announced no metrics endpoint")?;
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .with_context(|| format!("the metrics endpoint {url}"))?;
    let t = b.transfers(Family::V4)?;
    scrape::room_for(METRICS_STALLED as u64)?;
    let stalled = scrape::stall(addr, METRICS_STALLED);
    let unread = scrape::never_reads(addr, METRICS_UNREAD_REQUESTS);
    // Time for the server to answer the client that never reads until its writes block.
    std::thread::sleep(Duration::from_millis(300));
    let got = scrape::scrape(addr, METRICS_SCRAPE_LIMIT);
    let (opened, failed) = (stalled.opened, stalled.failed);
    drop((stalled, unread));
    let (bulk_ok, y, bulk) = b.finish(t);
    let (crashed, code, _) = b.end()?;
    let scraped = match &got {
        Ok(s) => format!(
            "scraped in {:.2} s ({} attempts, {} B)",
            s.seconds, s.attempts, s.bytes
        ),
        Err(e) => format!("scrape failed: {e:#}"),
    };
    let notes = format!(
        "{opened} connections sent half a request line and stalled ({failed} not accepted), one \
         asked for {METRICS_UNREAD_REQUESTS} answers with a {} B receive buffer and never read: \
         {scraped} (limit {:.1} s: twice the endpoint's {:.1} s timeouts, and 1 s); exit code \
         {code}; {bulk}",
        scrape::UNREAD_RCVBUF,
        METRICS_SCRAPE_LIMIT.as_secs_f64(),
        METRICS_TIMEOUT.as_secs_f64()
    );
    Ok(row(
        "metrics-stall",
        (opened + 1) as u64,
        bulk_ok,
        crashed,
        y,
        notes,
        got.is_ok() && code == 0,
    ))
}

/// Pushes what a border case returned; one that could not run (pxgw refused its configuration,
/// a capture did not start) fails alone.
fn record(b: &mut Bench<'_>, name: &str, case: Result<Case>) {
    let case = case.unwrap_or_else(|e| {
        // One row of the table: pxgw's log, when that is what the error carries, on one line.
        let why: Vec<String> = format!("{e:#}")
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != "|")
            .map(str::to_owned)
            .collect();
        let notes = format!("the case could not run: {}", why.join(" "));
        row(name, 0, false, false, None, notes, false)
    });
    b.push(case);
}

/// The border cases, each on a pxgw instance of its own (its statistics are the case's); a
/// default instance runs again afterwards.
fn border_cases(b: &mut Bench<'_>, lab: &Lab) -> Result<()> {
    let tiny = [
        ("tiny-mss-48", Family::V4, 48),
        ("tiny-mss-8", Family::V4, 8),
        ("tiny-mss-48-v6", Family::V6, 48),
    ];
    for (k, (name, family, mss)) in tiny.into_iter().enumerate() {
        if b.plan.wants(name) {
            let case = tiny_mss(b, lab, name, family, mss, k as u16);
            record(b, name, case);
        }
    }
    if b.plan.wants("spoofed-syn") {
        let case = spoofed_syn(b, lab);
        record(b, "spoofed-syn", case);
    }
    for (name, family) in [("ptb-window", Family::V4), ("ptb-window-v6", Family::V6)] {
        if b.plan.wants(name) {
            let case = too_big(b, lab, name, family);
            record(b, name, case);
        }
    }
    for (name, family) in [
        ("caravan-mark", Family::V4),
        ("caravan-mark-v6", Family::V6),
    ] {
        if b.plan.wants(name) {
            let case = caravan_mark(b, lab, name, family);
            record(b, name, case);
        }
    }
    if b.plan.wants("metrics-stall") {
        let case = metrics_stall(b, lab);
        record(b, "metrics-stall", case);
    }
    if b.gw.is_none() {
        b.start_pxgw(&lab.pxgw_config(1))?;
    }
    Ok(())
}

/// Runs every case; `pxgw` is the gateway binary.
pub fn run(pxgw: &Path, plan: &Plan) -> Result<Report> {
    let started = Instant::now();
    eprintln!("stress: building the reference lab (a Linux bridge) and the pxgw lab");
    let base = Lab::new()?;
    crafted::prepare(&base)?;
    let _bridge = base.bridge()?;
    let lab = Lab::new()?;
    crafted::prepare(&lab)?;
    border::prepare(&lab)?;
    let scripts = crafted::scripts();
    eprintln!(
        "stress: {} crafted sequences through the bridge (the reference)",
        scripts.len()
    );
    let mut references: Vec<Observed> = Vec::new();
    for (k, s) in scripts.iter().enumerate() {
        if !plan.wants(s.name) {
            references.push(crafted::stream_reference(0));
            continue;
        }
        references.push(match s.reference {
            Reference::Bridge => crafted::run(&base, s, k as u16)
                .with_context(|| format!("{} through the bridge", s.name))?,
            Reference::Stream(n) => crafted::stream_reference(n),
        });
    }
    let urgent_ref = [
        crafted::urgent_outbound(&base, Family::V4, 200)?,
        crafted::urgent_outbound(&base, Family::V6, 201)?,
    ];

    let meter = YieldMeter::start(&lab)?;
    let mut b = Bench {
        lab: &lab,
        pxgw,
        gw: None,
        meter,
        plan,
        cases: Vec::new(),
        instance: 0,
        leaks: Vec::new(),
        next_port: 20_000,
    };
    b.start_pxgw(&lab.pxgw_config(1))?;

    // No attack: the yield every later one is held to.
    let t = b.transfers(Family::V4)?;
    std::thread::sleep(plan.measure);
    let (bytes_ok, clean, notes) = b.finish(t);
    let clean_yield = clean.unwrap_or(0.0);
    let crashed = !b.running();
    b.push(row(
        "clean",
        0,
        bytes_ok,
        crashed,
        clean,
        format!(
            "yield {:.1}% (must be >= {:.0}%); {notes}",
            100.0 * clean_yield,
            100.0 * CLEAN_YIELD_FLOOR
        ),
        clean_yield >= CLEAN_YIELD_FLOOR,
    ));

    for (k, s) in scripts.iter().enumerate() {
        if !plan.wants(s.name) {
            continue;
        }
        let t = b.transfers(s.family)?;
        let got = crafted::run(&lab, s, 100 + k as u16);
        let (bulk_ok, y, mut notes) = b.finish(t);
        let crashed = !b.running();
        let (packets, same) = match got {
            Ok(got) => {
                let what = match s.reference {
                    Reference::Bridge => "as through the bridge",
                    Reference::Stream(_) => "the stream sent",
                };
                let verdict = got.matches(&references[k]);
                notes = match &verdict {
                    Ok(()) => format!("app read {} ({what}); {notes}", got.summary()),
                    Err(e) => format!("{e}; {notes}"),
                };
                (got.frames_sent, verdict.is_ok())
            }
            Err(e) => {
                notes = format!("{e:#}; {notes}");
                (0, false)
            }
        };
        b.push(row(
            s.name,
            packets,
            bulk_ok && same,
            crashed,
            y,
            notes,
            true,
        ));
    }
    for (i, family) in Family::BOTH.into_iter().enumerate() {
        let name = if family == Family::V4 {
            "urgent-outbound"
        } else {
            "urgent-outbound-v6"
        };
        if !plan.wants(name) {
            continue;
        }
        let t = b.transfers(family)?;
        let got = crafted::urgent_outbound(&lab, family, 210 + i as u16);
        let (bulk_ok, y, notes) = b.finish(t);
        let crashed = !b.running();
        let (same, notes) = match got {
            Ok(got) => match got.matches(&urgent_ref[i]) {
                Ok(()) => (
                    true,
                    format!(
                        "app read {} (as through the bridge); {notes}",
                        got.summary()
                    ),
                ),
                Err(e) => (false, format!("{e}; {notes}")),
            },
            Err(e) => (false, format!("{e:#}; {notes}")),
        };
        b.push(row(name, 0, bulk_ok && same, crashed, y, notes, true));
    }

    // Floods.
    for (name, kind) in [
        ("flood-flows", Kind::Flows),
        (
            "flood-udp",
            Kind::Udp {
                flows: 4096,
                burst: 1,
            },
        ),
    ] {
        if !plan.wants(name) {
            continue;
        }
        let t = b.transfers(Family::V4)?;
        let sent = flood::flood(&lab, kind, Family::V4, plan.flood, plan.flood_limit, None)?;
        std::thread::sleep(Duration::from_millis(500));
        let (bulk_ok, y, notes) = b.finish(t);
        let crashed = !b.running();
        let notes = format!(
            "{} frames in {:.1} s ({:.0} kpps); {notes}",
            sent.frames,
            sent.seconds,
            sent.frames as f64 / sent.seconds.max(1e-9) / 1e3
        );
        b.push(row(name, sent.frames, bulk_ok, crashed, y, notes, true));
    }
    if plan.wants("flood-syn") {
        // On a pxgw of its own, whose statistics show how full its connection table got.
        b.stop_pxgw()?;
        b.start_pxgw(&lab.pxgw_config(1))?;
        let t = b.transfers(Family::V4)?;
        // Paced so that pxgw sees every SYN rather than its ring overflowing.
        let sent = flood::flood(
            &lab,
            Kind::Syn,
            Family::V4,
            plan.flood,
            plan.flood_limit,
            Some(SYN_PPS),
        )?;
        let (bulk_ok, _, notes) = b.finish(t);
        // A new bulk transfer after the flood must reach its normal yield.
        let after = b.transfers(Family::V4)?;
        std::thread::sleep(plan.measure);
        let (after_ok, y, after_notes) = b.finish(after);
        let crashed = !b.running();
        let (code, stats) = if crashed {
            (-1, serde_json::Value::Null)
        } else {
            b.stop_pxgw()?
        };
        let kept = y.unwrap_or(0.0) >= YIELD_KEPT * clean_yield;
        let notes = format!(
            "{} spoofed SYNs in {:.1} s (pxgw: {} connections at the end, {} evicted for \
             newer ones, exit code {code}); then a new transfer's yield {:.1}% (clean {:.1}%, \
             must keep {:.0}% of it: a SYN flood must not keep later connections from being \
             merged); during: {notes}; after: {after_notes}",
            sent.frames,
            sent.seconds,
            stats["connections"],
            stats["mss"]["established_evicted"],
            100.0 * y.unwrap_or(0.0),
            100.0 * clean_yield,
            100.0 * YIELD_KEPT
        );
        b.push(row(
            "flood-syn",
            sent.frames,
            bulk_ok && after_ok,
            crashed,
            y,
            notes,
            kept && code == 0,
        ));
        if !crashed {
            b.start_pxgw(&lab.pxgw_config(1))?;
        }
    }

    // What a hostile outside host sends at the border, each case on an instance of its own.
    border_cases(&mut b, &lab)?;

    // SIGINT and a restart while the transfers run: TCP retransmits across the gap.
    if plan.wants("sigint-restart") {
        let t = b.transfers(Family::V4)?;
        std::thread::sleep(plan.measure);
        let (code, _) = b.stop_pxgw()?;
        let leaked = b.leaks[b.instance - 1];
        let down = Instant::now();
        b.start_pxgw(&lab.pxgw_config(1))?;
        let gap = down.elapsed().as_secs_f64();
        // The sender backs off while pxgw is down (RTO doubling: after a 4 s gap its next
        // retransmission may come seconds later), so the window that measures the recovered
        // yield opens when the transfer's data flows again, not at the restart.
        let at_restart = b.meter.get(t.inbound.port);
        let resume_deadline = Instant::now() + RESUME_WAIT;
        while b.meter.get(t.inbound.port).since(&at_restart).payload == 0
            && Instant::now() < resume_deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        let at_resume = b.meter.get(t.inbound.port);
        std::thread::sleep(plan.measure * 2);
        let recovered = b.meter.get(t.inbound.port).since(&at_resume);
        let (bulk_ok, _, notes) = b.finish(t);
        let crashed = !b.running();
        let y = (recovered.payload > 0).then(|| recovered.share());
        let kept = y.unwrap_or(0.0) >= YIELD_KEPT * clean_yield;
        let notes = format!(
            "SIGINT: exit code {code}, leaked {}; down {gap:.1} s; the surviving transfer's yield \
             after the restart {:.1}% (clean {:.1}%: a restarted gateway learns running \
             connections again); {notes}",
            leaked.map_or("?".into(), |l| l.to_string()),
            100.0 * y.unwrap_or(0.0),
            100.0 * clean_yield
        );
        let mut case = row(
            "sigint-restart",
            0,
            bulk_ok,
            crashed,
            y,
            notes,
            kept && code == 0 && leaked == Some(0),
        );
        case.leaked_mbufs = leaked;
        b.push(case);
        // This row's leak is the stopped instance's, already recorded.
        if let Some(last) = b.cases.last_mut() {
            last.instance = b.instance - 1;
        }
    }
    let (code, _) = b.stop_pxgw()?;
    if code != 0 {
        eprintln!("stress: pxgw exited with code {code}");
    }

    // Mempool exhaustion: a pool sized to run out.
    if plan.wants("mempool-exhaustion") {
        let case = mempool(&mut b, &lab)?;
        b.push(case);
    } else if !plan.mempool {
        eprintln!("stress: skipped: mempool-exhaustion (left out of this plan)");
    }

    let leaks = b.leaks.clone();
    let mut cases = b.cases;
    for c in &mut cases {
        if c.leaked_mbufs.is_none() {
            c.leaked_mbufs = leaks.get(c.instance.wrapping_sub(1)).copied().flatten();
        }
        if c.leaked_mbufs != Some(0) {
            c.ok = false;
        }
    }
    eprintln!("stress: done in {:.0} s", started.elapsed().as_secs_f64());
    Ok(Report {
        cases,
        clean_yield,
        flood_frames: plan.flood,
    })
}

/// The pxgw binary next to this one.
pub fn pxgw_binary() -> Result<PathBuf> {
    let pxgw = std::env::current_exe()?.with_file_name("pxgw");
    if !pxgw.exists() {
        bail!(
            "{} is not built: `cargo build --release -p pxgw` first",
            pxgw.display()
        );
    }
    Ok(pxgw)
}
