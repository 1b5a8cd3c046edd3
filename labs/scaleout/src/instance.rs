//! One pxgw instance: its own DPDK process (own `--file-prefix`, own worker core), its outside
//! port `net_tap` on its slot's TAP, its inside port `net_af_packet` on its slot's veth.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::topology::{EcmpLab, EMTU, IMTU, INSTANCES};

/// A running pxgw.
pub struct Instance {
    /// Its index in [`INSTANCES`].
    pub index: usize,
    child: Option<Child>,
    stats: PathBuf,
    log: PathBuf,
}

/// What an instance reported when it stopped (`--stats-json`), and what the lab read of it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct InstanceReport {
    /// "A" or "B".
    pub name: &'static str,
    /// Frames from outside.
    pub inbound_packets: u64,
    /// Frames from inside.
    pub outbound_packets: u64,
    /// Connections learned from one direction only.
    pub learned_one_way: u64,
    /// Connections learned mid-stream from both directions.
    pub learned: u64,
    /// Its own merge yield (payload leaving in iMTU-bound packets).
    pub merge_yield: f64,
    /// Packets it split.
    pub split_packets: u64,
    /// pxgw's exit code.
    pub exit_code: i32,
    /// Mbufs not returned to their pool at exit.
    pub leaked_mbufs: u64,
    /// Every drop counter, summed.
    pub drops: u64,
    /// Inbound UDP datagrams held for a caravan (packed, or sent alone when nothing joined
    /// them): in the FRR runs the only UDP is BFD, which `caravan.exclude_ports` passes at once.
    pub caravan_held: u64,
}

/// The instances' scheduling priority (`nice`). On a machine this small the lab's transfers,
/// routers and capture share the two cores the workers are pinned to. At the default priority
/// each worker was preempted about 2,000 times a second (about 140 µs each, `schedstat`), its
/// items waited up to 3 ms (p99) against a 300 µs window, and they left less full (asymmetric
/// paths behind the 1400 B link: 21-47 % yield). A worker owns its core in a deployment
/// (`[workers] cores`, isolated from the scheduler); at -19 it waits a third as long to run,
/// its items' p99 delay is 0.45-1.0 ms, and the same runs merge 89-93 %.
pub const NICE: i32 = -19;

/// The instances' longest merge delay window (`[merge] max_window_us`), µs.
pub const MAX_WINDOW_US: u64 = 300;

/// The configuration of instance `index`, pinned to core `index` modulo the machine's cores (A
/// and B never share one; C, added under load, shares A's on a 2-core machine).
fn config(lab: &EcmpLab, index: usize, one_way: bool) -> String {
    let slot = &lab.slots[index];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "# Written by the scale-out lab (labs/scaleout).\n\
         [ports.external]\ndevice = \"net_tap0,iface={tap}\"\nmtu = {EMTU}\n\
         [ports.internal]\ndevice = \"net_af_packet1,iface={inside},framesz=10240,blocksz=40960,framecnt=2048,qpairs=1\"\nmtu = {IMTU}\n\
         [workers]\ncount = 1\ncores = [{core}]\n\
         # Lab flows carry far less than a NIC: the delay threshold is lowered (as in the gateway lab).\n\
         [merge]\nrate_threshold_gbps = 0.01\nmax_window_us = {MAX_WINDOW_US}\nyield_bypass = 0.97\n\
         [connections]\none_way = {one_way}\n\
         [stats]\ninterval_s = 1.0\n\
         [eal]\nargs = [\"--file-prefix=pxso{pid}{name}\"]\n",
        tap = slot.tap(),
        inside = slot.inside_iface(),
        core = index % cores,
        pid = std::process::id(),
        name = INSTANCES[index],
    )
}

impl Instance {
    /// Starts instance `index` and waits until it forwards; it stops itself after `limit_s`.
    pub fn start(
        lab: &EcmpLab,
        binary: &Path,
        index: usize,
        one_way: bool,
        limit_s: u32,
    ) -> Result<Self> {
        let name = INSTANCES[index];
        let cfg = lab.dir.join(format!("pxgw-{name}.toml"));
        fs::write(&cfg, config(lab, index, one_way))?;
        let stats = lab.dir.join(format!("pxgw-{name}.json"));
        let _ = fs::remove_file(&stats);
        let log = lab.dir.join(format!("pxgw-{name}.log"));
        let out = fs::File::create(&log)?;
        let child = Command::new("nice")
            .args(["-n", &NICE.to_string()])
            .arg(binary)
            .arg("--config")
            .arg(&cfg)
            .arg("--stats-json")
            .arg(&stats)
            .args(["--run-for", &limit_s.to_string()])
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut me = Self {
            index,
            child: Some(child),
            stats,
            log,
        };
        if lab.instance_forwards(index, Duration::from_secs(20)) {
            return Ok(me);
        }
        me.kill();
        let log = fs::read_to_string(&me.log).unwrap_or_default();
        bail!("pxgw {name} did not forward within 20 s; its log:\n{log}")
    }

    /// The instance's name.
    pub fn name(&self) -> &'static str {
        INSTANCES[self.index]
    }

    /// Kills it at once (SIGKILL), as a crash or a power loss would: nothing is flushed.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops it with SIGINT (it flushes and reports) and reads its statistics.
    pub fn stop(mut self) -> Result<InstanceReport> {
        let name = self.name();
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
                bail!("pxgw {name} did not stop within 30 s of SIGINT");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let text = fs::read_to_string(&self.stats).with_context(|| {
            format!(
                "pxgw {name} wrote no statistics; its log:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            )
        })?;
        let s: serde_json::Value = serde_json::from_str(&text)?;
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        Ok(InstanceReport {
            name,
            inbound_packets: n(&s["inbound"]["packets_in"]),
            outbound_packets: n(&s["outbound"]["packets_in"]),
            learned_one_way: n(&s["mss"]["learned_one_way"]),
            learned: n(&s["mss"]["learned"]),
            merge_yield: s["merge"]["conversion_yield"].as_f64().unwrap_or(0.0),
            split_packets: n(&s["split"]["packets"]),
            exit_code: status.code().unwrap_or(-1),
            leaked_mbufs: n(&s["leaked_mbufs"]),
            caravan_held: n(&s["caravan"]["datagrams_packed"])
                + n(&s["caravan"]["unwrapped_single"]),
            drops: s["drops"]
                .as_object()
                .map_or(0, |d| d.values().map(n).sum()),
        })
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.kill();
    }
}
