//! The routers' control plane: FRR's zebra, bfdd and bgpd (Debian's `frr` package) in each router
//! namespace, each router with its own configuration, sockets, pid files and logs under the
//! lab's scratch directory, started and stopped by the lab (the system's FRR service plays no
//! part).
//!
//! The outside router (AS 65001) and the inside router (AS 65002) peer with eBGP across every
//! instance, once per family (the routers' addresses on that instance's subnet), each session
//! watched by BFD. Each router announces its host-side subnet; zebra installs the far side's
//! prefix with one next hop per instance whose sessions are up (`maximum-paths`), and the
//! kernel spreads flows over them with its 5-tuple hash (`fib_multipath_hash_policy=1`).
//! docs/scale-out.md shows the configuration this writes, annotated.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use gateway_lab::Family;
use netlab::Netns;

use crate::topology::{ext_addr, int_addr, link_addr, subnet, EcmpLab, INSTANCES};

/// Where Debian's `frr` package puts the daemons.
const FRR_BIN: &str = "/usr/lib/frr";
/// The daemons each router runs, in start order (zebra first: the others connect to it).
const DAEMONS: [&str; 3] = ["zebra", "bfdd", "bgpd"];
/// bfdd's SCHED_FIFO priority (`chrt -f`).
const BFDD_PRIORITY: &str = "50";
/// The outside router's AS.
pub const OUTSIDE_AS: u32 = 65001;
/// The inside router's AS.
pub const INSIDE_AS: u32 = 65002;

/// BFD's timers on every session: a packet every `interval`, the session down after
/// `multiplier` of them missed.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct BfdTimers {
    /// Transmit and receive interval, ms.
    pub interval_ms: u32,
    /// Packets missed before the session goes down.
    pub multiplier: u32,
}

impl BfdTimers {
    /// The lab's: 100 ms × 3, a 300 ms detection time.
    pub const LAB: Self = Self {
        interval_ms: 100,
        multiplier: 3,
    };
}

/// The FRR configuration of one router: `inside` picks the inside router. Every daemon reads
/// the whole file and skips what it does not know; no block ends in `exit`, which would leave
/// configuration mode in a daemon that never entered the block. Instances in `shut`
/// start with their sessions administratively down (an instance not yet in service).
pub fn config(inside: bool, bfd: BfdTimers, shut: &[usize], log: &Path) -> String {
    let (asn, peer_as, id) = if inside {
        (INSIDE_AS, OUTSIDE_AS, "198.19.100.1")
    } else {
        (OUTSIDE_AS, INSIDE_AS, "198.18.0.1")
    };
    let own = |f: Family| subnet(if inside { int_addr(f) } else { ext_addr(f) });
    let mut neighbors = String::new();
    let mut activate = [String::new(), String::new()];
    for (i, name) in INSTANCES.iter().enumerate() {
        for (k, f) in Family::BOTH.into_iter().enumerate() {
            let peer = link_addr(f, i, !inside);
            neighbors.push_str(&format!(
                " neighbor {peer} remote-as {peer_as}\n \
                 neighbor {peer} description instance {name} {f}\n \
                 neighbor {peer} bfd profile pxgw\n \
                 neighbor {peer} timers connect 1\n"
            ));
            if shut.contains(&i) {
                neighbors.push_str(&format!(" neighbor {peer} shutdown\n"));
            }
            activate[k].push_str(&format!("  neighbor {peer} activate\n"));
        }
    }
    format!(
        "! Written by the scale-out lab (labs/scaleout).\n\
         hostname {host}\n\
         log file {log}\n\
         log timestamp precision 3\n\
         ! bfdd logs each session's state changes (the lab reads BFD's detection time there).\n\
         debug bfd peer\n\
         !\n\
         bfd\n \
         profile pxgw\n  \
         transmit-interval {ms}\n  \
         receive-interval {ms}\n  \
         detect-multiplier {mult}\n\
         !\n\
         router bgp {asn}\n \
         bgp router-id {id}\n \
         no bgp default ipv4-unicast\n \
         no bgp ebgp-requires-policy\n \
         no bgp network import-check\n\
         {neighbors} \
         address-family ipv4 unicast\n  \
         network {net4}\n  \
         maximum-paths 8\n\
         {act4} \
         exit-address-family\n \
         address-family ipv6 unicast\n  \
         network {net6}\n  \
         maximum-paths 8\n\
         {act6} \
         exit-address-family\n",
        host = if inside { "so-ri" } else { "so-ro" },
        log = log.display(),
        ms = bfd.interval_ms,
        mult = bfd.multiplier,
        net4 = own(Family::V4),
        net6 = own(Family::V6),
        act4 = activate[0],
        act6 = activate[1],
    )
}

/// One router's FRR daemons.
pub struct Frr {
    ns: String,
    dir: PathBuf,
    /// The inside router (else the outside router).
    pub inside: bool,
}

impl Frr {
    /// Writes the configuration and starts zebra, bfdd and bgpd in `ns`, each detached, with
    /// its pid file, vty socket and log in `dir` and the zebra API socket there.
    pub fn start(
        ns: &Netns,
        dir: &Path,
        inside: bool,
        bfd: BfdTimers,
        shut: &[usize],
    ) -> Result<Self> {
        if !Path::new(FRR_BIN).join("bgpd").exists() {
            bail!("FRR is missing ({FRR_BIN}/bgpd): run `cargo xtask deps`");
        }
        fs::create_dir_all(dir)?;
        let conf = dir.join("frr.conf");
        fs::write(&conf, config(inside, bfd, shut, &dir.join("frr.log")))?;
        // The daemons drop to the `frr` user; their sockets and logs go where it can write.
        netlab::run("chown", &["-R", "frr:frr", &dir.display().to_string()])?;
        let me = Self {
            ns: ns.name().to_owned(),
            dir: dir.to_owned(),
            inside,
        };
        let path = |name: &str| dir.join(name).display().to_string();
        for daemon in DAEMONS {
            let program = format!("{FRR_BIN}/{daemon}");
            let (pid, log) = (
                path(&format!("{daemon}.pid")),
                path(&format!("{daemon}.log")),
            );
            let (zserv, vty, ctl) = (path("zserv.api"), path(""), path("bfdd.sock"));
            let mut args = vec![
                "-d",
                "-f",
                conf.to_str().context("scratch path")?,
                "-i",
                &pid,
                "-z",
                &zserv,
                "--vty_socket",
                &vty,
            ];
            let log_arg = format!("file:{log}");
            args.extend(["--log", &log_arg]);
            if daemon == "bfdd" {
                args.extend(["--bfdctl", &ctl]);
            }
            // bfdd runs at a real-time priority: in the lab the routers' control plane shares
            // two cores with the hosts' transfers, the routers' forwarding and the instances'
            // busy-polling workers, and at normal priority bfdd was starved past its 300 ms
            // detection time now and then (every session of both routers down at once). A
            // router's BFD does not compete with its forwarding that way.
            // TZ=UTC: the log's timestamps are compared with the lab's own clock.
            let mut full = vec!["TZ=UTC"];
            if daemon == "bfdd" {
                full.extend(["chrt", "-f", BFDD_PRIORITY]);
            }
            full.push(program.as_str());
            full.extend(args.iter().copied());
            ns.exec("env", &full)
                .with_context(|| format!("starting {daemon} in {}", ns.name()))?;
        }
        Ok(me)
    }

    /// Runs vtysh commands against this router's daemons (`-c` each, in order).
    pub fn vtysh(&self, commands: &[String]) -> Result<String> {
        let vty = self.dir.display().to_string();
        let mut args = vec!["--vty_socket", &vty];
        for c in commands {
            args.extend(["-c", c.as_str()]);
        }
        netlab::run("vtysh", &args).map_err(Into::into)
    }

    /// Shuts (or, with `up`, re-enables) this router's BGP sessions across instance `i`, both
    /// families: the drain's first step (a NOTIFICATION tells the peer at once; both routers
    /// withdraw the instance's next hops).
    pub fn sessions(&self, i: usize, up: bool) -> Result<()> {
        let asn = if self.inside { INSIDE_AS } else { OUTSIDE_AS };
        let mut c = vec!["configure terminal".to_owned(), format!("router bgp {asn}")];
        for f in Family::BOTH {
            let peer = link_addr(f, i, !self.inside);
            c.push(format!(
                "{}neighbor {peer} shutdown",
                if up { "no " } else { "" }
            ));
        }
        self.vtysh(&c)?;
        Ok(())
    }

    /// BFD session-down events so far, per instance (`show bfd peers counters json`).
    pub fn bfd_downs(&self) -> Result<Vec<u64>> {
        let text = self.vtysh(&["show bfd peers counters json".to_owned()])?;
        let peers: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("show bfd peers counters json: {text}"))?;
        let mut downs = vec![0; INSTANCES.len()];
        for p in peers.as_array().into_iter().flatten() {
            let peer = p["peer"].as_str().unwrap_or_default();
            for (i, d) in downs.iter_mut().enumerate() {
                if Family::BOTH
                    .into_iter()
                    .any(|f| link_addr(f, i, !self.inside).to_string() == peer)
                {
                    *d += p["session-down"].as_u64().unwrap_or(0);
                }
            }
        }
        Ok(downs)
    }

    /// The instances across which every BFD session of this router (both families) is up.
    pub fn bfd_up(&self) -> Result<BTreeSet<usize>> {
        let text = self.vtysh(&["show bfd peers json".to_owned()])?;
        let peers: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("show bfd peers json: {text}"))?;
        let up = |addr: String| {
            peers.as_array().into_iter().flatten().any(|p| {
                p["peer"].as_str() == Some(addr.as_str()) && p["status"].as_str() == Some("up")
            })
        };
        Ok((0..INSTANCES.len())
            .filter(|&i| {
                Family::BOTH
                    .into_iter()
                    .all(|f| up(link_addr(f, i, !self.inside).to_string()))
            })
            .collect())
    }

    /// The daemons' pids, from their pid files.
    fn pids(&self) -> Vec<i32> {
        DAEMONS
            .iter()
            .filter_map(|d| fs::read_to_string(self.dir.join(format!("{d}.pid"))).ok())
            .filter_map(|t| t.trim().parse().ok())
            .collect()
    }

    /// Stops the daemons (SIGTERM, then SIGKILL after 5 s), in reverse start order.
    pub fn stop(&self) {
        for pid in self.pids().into_iter().rev() {
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        for d in DAEMONS {
            let _ = fs::remove_file(self.dir.join(format!("{d}.pid")));
        }
    }

    /// The namespace the daemons run in.
    pub fn ns(&self) -> &str {
        &self.ns
    }
}

impl Drop for Frr {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Both routers' FRR.
pub struct ControlPlane {
    /// The outside router's daemons.
    pub ro: Frr,
    /// The inside router's daemons.
    pub ri: Frr,
    /// The timers every session runs.
    pub bfd: BfdTimers,
}

impl ControlPlane {
    /// Starts FRR on both routers (instances in `shut` not yet in service) and waits until
    /// zebra has installed the far side's routes over every other instance, both families,
    /// both routers.
    pub fn start(lab: &EcmpLab, bfd: BfdTimers, shut: &[usize]) -> Result<Self> {
        let cp = Self {
            ro: Frr::start(&lab.ro, &lab.dir.join("frr-ro"), false, bfd, shut)?,
            ri: Frr::start(&lab.ri, &lab.dir.join("frr-ri"), true, bfd, shut)?,
            bfd,
        };
        Ok(cp)
    }

    /// Both routers.
    pub fn routers(&self) -> [&Frr; 2] {
        [&self.ro, &self.ri]
    }

    /// BFD session-down events so far, per instance, both routers summed.
    pub fn bfd_downs(&self) -> Result<Vec<u64>> {
        let mut sum = vec![0; INSTANCES.len()];
        for r in self.routers() {
            for (s, d) in sum.iter_mut().zip(r.bfd_downs()?) {
                *s += d;
            }
        }
        Ok(sum)
    }

    /// Shuts or re-enables the BGP sessions across instance `i` on both routers.
    pub fn sessions(&self, i: usize, up: bool) -> Result<()> {
        for r in self.routers() {
            r.sessions(i, up)?;
        }
        Ok(())
    }
}

/// The instances the kernel routes over now: the next hops of the far side's route on both
/// routers, both families, each as the instance whose subnet its device is on. `None` unless
/// all four routes agree.
pub fn routed_over(lab: &EcmpLab) -> Result<Option<BTreeSet<usize>>> {
    let mut seen: Option<BTreeSet<usize>> = None;
    for (ns, inside) in [(&lab.ro, false), (&lab.ri, true)] {
        for f in Family::BOTH {
            let far = if inside { ext_addr(f) } else { int_addr(f) };
            let fam = if f == Family::V4 { "-4" } else { "-6" };
            let text = ns.ip(&["-j", fam, "route", "show", &subnet(far)])?;
            let routes: serde_json::Value = serde_json::from_str(&text)?;
            let mut set = BTreeSet::new();
            for r in routes.as_array().into_iter().flatten() {
                let hops: Vec<&serde_json::Value> = match r["nexthops"].as_array() {
                    Some(h) => h.iter().collect(),
                    None => vec![r],
                };
                for h in hops {
                    if let Some(dev) = h["dev"].as_str() {
                        if let Some(i) = lab.slot_of(dev, inside) {
                            set.insert(i);
                        }
                    }
                }
            }
            match &seen {
                None => seen = Some(set),
                Some(s) if *s != set => return Ok(None),
                _ => {}
            }
        }
    }
    Ok(seen)
}

/// Polls until the routers route over exactly the instances `want` and both have every BFD
/// session across them up, for at most `limit`: how long that took. BGP installs an instance's
/// routes while its BFD sessions may still be coming up, and a session that is still
/// initialising when its detection time runs out goes down: a load that starts before that
/// would be charged with a flap it did not cause.
pub fn wait_converged(
    lab: &EcmpLab,
    cp: &ControlPlane,
    want: &[usize],
    limit: Duration,
) -> Result<Duration> {
    let want: BTreeSet<usize> = want.iter().copied().collect();
    let start = Instant::now();
    loop {
        let routes = routed_over(lab)?;
        let up = cp
            .routers()
            .map(Frr::bfd_up)
            .into_iter()
            .collect::<Result<Vec<_>>>()?;
        if routes.as_ref() == Some(&want) && up.iter().all(|u| want.is_subset(u)) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!(
                "the routers did not route over instances {want:?} with every BFD session up \
                 within {limit:?} (routes over {routes:?}; sessions up across {up:?})"
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Polls [`routed_over`] every 5 ms until it is `want`, for at most `limit`: how long that
/// took.
pub fn wait_routes(lab: &EcmpLab, want: &[usize], limit: Duration) -> Result<Duration> {
    let want: BTreeSet<usize> = want.iter().copied().collect();
    let start = Instant::now();
    loop {
        if routed_over(lab)?.as_ref() == Some(&want) {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!(
                "the routers did not route over instances {want:?} within {limit:?} (now: {:?})",
                routed_over(lab)?
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
