//! Running unprivileged once the ports are open (`[process] user`, `group`).
//!
//! Opening the ports needs privileges (the EAL's memory, raw sockets, TAP devices, XDP programs);
//! forwarding through open ports mostly does not. Once the EAL is up, the ports started and the
//! metrics socket bound, [`drop_to`]:
//! 1. removes from the bounding set every capability it will not keep (so none can come back,
//!    not even through an executed file), and sets `PR_SET_KEEPCAPS` for the switch;
//! 2. clears the supplementary groups, then sets the real, effective and saved group IDs, then the
//!    user IDs (glibc applies each to every thread of the process);
//! 3. sets the permitted and effective capabilities to exactly those its port types need while
//!    running ([`needed_caps`]), the inheritable and ambient sets empty, and `no_new_privs`;
//! 4. checks that it took: the IDs are the user's, no supplementary group is left, `setuid(0)`
//!    fails, and the capability sets are exactly the kept ones.
//!
//! Threads started before the switch (DPDK's interrupt, telemetry and lcore threads) end with no
//! capability at all when pxgw started as root: the kernel clears each thread's capabilities as
//! glibc moves it off uid 0. Capabilities are per thread, though, and no thread can clear
//! another's: when pxgw starts as the target user already (with ambient capabilities), those
//! threads keep what they started with. [`Dropped::unchanged_threads`] names them; start pxgw as
//! root (`dist/pxgw.service` does, with a bounded capability set) for a complete drop. Threads
//! started after the switch (workers, the rule manager) inherit the kept set either way.
//! Which port type needs what, and why, is in docs/operations.md ("Running unprivileged").

use std::collections::HashSet;

use caps::{CapSet, Capability, CapsHashSet};
use nix::unistd::{Gid, Group, Uid, User};

use crate::config::{Backing, Config, Process};

/// Why pxgw could not switch to the configured user.
#[derive(Debug, thiserror::Error)]
pub enum PrivilegeError {
    /// The user is not in the system's user database.
    #[error("process.user: no user {0:?} on this system")]
    NoUser(String),
    /// The group is not in the system's group database.
    #[error("process.group: no group {0:?} on this system")]
    NoGroup(String),
    /// Looking the user or group up failed.
    #[error("process: looking up {0:?}: {1}")]
    Lookup(String, nix::Error),
    /// A step of the switch failed.
    #[error("process: cannot switch to {user}: {step}: {reason}")]
    Switch {
        /// The user.
        user: String,
        /// What was being done.
        step: &'static str,
        /// The system's answer.
        reason: String,
    },
    /// The switch seemed to succeed, but a check shows it did not take.
    #[error("process: switched to {user}, but {what}")]
    NotDropped {
        /// The user.
        user: String,
        /// What the check found.
        what: String,
    },
}

/// The user and group pxgw switches to, looked up at start (before the EAL), so that a missing
/// user stops pxgw before it opens anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The user's name.
    pub user: String,
    /// Its ID.
    pub uid: Uid,
    /// The group's name.
    pub group: String,
    /// Its ID.
    pub gid: Gid,
}

/// Looks `[process]`'s user and group up; `None` when no user is configured.
pub fn resolve(cfg: &Process) -> Result<Option<Target>, PrivilegeError> {
    let Some(name) = &cfg.user else {
        return Ok(None);
    };
    let user = User::from_name(name)
        .map_err(|e| PrivilegeError::Lookup(name.clone(), e))?
        .ok_or_else(|| PrivilegeError::NoUser(name.clone()))?;
    let group = match &cfg.group {
        Some(g) => Group::from_name(g)
            .map_err(|e| PrivilegeError::Lookup(g.clone(), e))?
            .ok_or_else(|| PrivilegeError::NoGroup(g.clone()))?,
        None => match Group::from_gid(user.gid) {
            Ok(Some(g)) => g,
            // A primary group missing from the group database is still a valid ID.
            _ => Group {
                name: user.gid.to_string(),
                passwd: Default::default(),
                gid: user.gid,
                mem: Vec::new(),
            },
        },
    };
    Ok(Some(Target {
        user: user.name,
        uid: user.uid,
        group: group.name,
        gid: group.gid,
    }))
}

/// The capabilities pxgw keeps after the switch: those its ports need while running.
///
/// - `net_tap`: `CAP_NET_ADMIN`. The PMD sets its interface down when the port stops (an
///   `SIOCSIFFLAGS` ioctl) and manages its TC rules over netlink (flow rules, RSS steering).
/// - `net_af_xdp`: `CAP_NET_ADMIN`, to detach its XDP program from the interface when the
///   port closes.
/// - `net_af_packet`, `net_null`, `net_ring`, `net_pcap`: none; their sockets, rings and files
///   are open.
/// - PCI devices: none for the PMDs measured here (none: this machine has no NIC); a driver that
///   needs one names it in its error.
pub fn needed_caps(cfg: &Config) -> CapsHashSet {
    let mut keep = HashSet::new();
    for port in [&cfg.ports.external, &cfg.ports.internal] {
        if let Backing::Kernel { driver, .. } = port.backing() {
            if matches!(driver, "net_tap" | "net_af_xdp") {
                keep.insert(Capability::CAP_NET_ADMIN);
            }
        }
    }
    keep
}

/// The capabilities' names, sorted (for logs and errors).
pub fn names(set: &CapsHashSet) -> Vec<String> {
    let mut v: Vec<String> = set.iter().map(ToString::to_string).collect();
    v.sort();
    v
}

/// What the switch left, as checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// The user now running.
    pub uid: Uid,
    /// The group now running.
    pub gid: Gid,
    /// The permitted and effective capabilities kept.
    pub caps: CapsHashSet,
    /// Threads started before the switch that still hold more than `caps` (see the module docs),
    /// as `name (CapPrm hex)`.
    pub unchanged_threads: Vec<String>,
}

/// Switches the whole process to `target`, keeping only `keep` (see the module docs), and checks
/// that the switch took.
pub fn drop_to(target: &Target, keep: &CapsHashSet) -> Result<Dropped, PrivilegeError> {
    let fail = |step: &'static str, reason: String| PrivilegeError::Switch {
        user: target.user.clone(),
        step,
        reason,
    };
    let effective =
        caps::read(None, CapSet::Effective).map_err(|e| fail("capget", e.to_string()))?;
    // Only with CAP_SETPCAP can the bounding set shrink (a service manager may have shrunk it
    // already: `CapabilityBoundingSet=` in dist/pxgw.service).
    if effective.contains(&Capability::CAP_SETPCAP) {
        let bounding =
            caps::read(None, CapSet::Bounding).map_err(|e| fail("bounding set", e.to_string()))?;
        for cap in bounding.difference(keep) {
            caps::drop(None, CapSet::Bounding, *cap)
                .map_err(|e| fail("dropping from the bounding set", format!("{cap}: {e}")))?;
        }
    }
    let ids = nix::unistd::getresuid().map_err(|e| fail("getresuid", e.to_string()))?;
    let gids = nix::unistd::getresgid().map_err(|e| fail("getresgid", e.to_string()))?;
    let groups = nix::unistd::getgroups().map_err(|e| fail("getgroups", e.to_string()))?;
    if !groups.is_empty() || [gids.real, gids.effective, gids.saved] != [target.gid; 3] {
        nix::unistd::setgroups(&[]).map_err(|e| fail("setgroups", e.to_string()))?;
        nix::unistd::setresgid(target.gid, target.gid, target.gid)
            .map_err(|e| fail("setresgid", e.to_string()))?;
    }
    if [ids.real, ids.effective, ids.saved] != [target.uid; 3] {
        // Without it, leaving uid 0 would clear the permitted set too.
        nix::sys::prctl::set_keepcaps(true).map_err(|e| fail("PR_SET_KEEPCAPS", e.to_string()))?;
        nix::unistd::setresuid(target.uid, target.uid, target.uid)
            .map_err(|e| fail("setresuid", e.to_string()))?;
        nix::sys::prctl::set_keepcaps(false).map_err(|e| fail("PR_SET_KEEPCAPS", e.to_string()))?;
    }
    let permitted =
        caps::read(None, CapSet::Permitted).map_err(|e| fail("capget", e.to_string()))?;
    if let Some(missing) = keep.difference(&permitted).next() {
        return Err(fail(
            "keeping capabilities",
            format!("{missing} is not in the permitted set: start pxgw with it"),
        ));
    }
    caps::clear(None, CapSet::Ambient).map_err(|e| fail("ambient set", e.to_string()))?;
    caps::clear(None, CapSet::Inheritable).map_err(|e| fail("inheritable set", e.to_string()))?;
    // Effective first: it must stay within the permitted set at every step.
    caps::set(None, CapSet::Effective, keep).map_err(|e| fail("effective set", e.to_string()))?;
    caps::set(None, CapSet::Permitted, keep).map_err(|e| fail("permitted set", e.to_string()))?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| fail("PR_SET_NO_NEW_PRIVS", e.to_string()))?;
    verify(target, keep)
}

/// Checks the process is `target` with exactly `keep`, and cannot become root again.
fn verify(target: &Target, keep: &CapsHashSet) -> Result<Dropped, PrivilegeError> {
    let not = |what: String| PrivilegeError::NotDropped {
        user: target.user.clone(),
        what,
    };
    let ids = nix::unistd::getresuid().map_err(|e| not(format!("getresuid failed: {e}")))?;
    if [ids.real, ids.effective, ids.saved] != [target.uid; 3] {
        return Err(not(format!(
            "the user IDs are {}/{}/{}",
            ids.real, ids.effective, ids.saved
        )));
    }
    let gids = nix::unistd::getresgid().map_err(|e| not(format!("getresgid failed: {e}")))?;
    if [gids.real, gids.effective, gids.saved] != [target.gid; 3] {
        return Err(not(format!(
            "the group IDs are {}/{}/{}",
            gids.real, gids.effective, gids.saved
        )));
    }
    let groups = nix::unistd::getgroups().map_err(|e| not(format!("getgroups failed: {e}")))?;
    if !groups.is_empty() {
        return Err(not(format!("supplementary groups {groups:?} are left")));
    }
    if !target.uid.is_root() && nix::unistd::setuid(Uid::from_raw(0)).is_ok() {
        return Err(not("setuid(0) succeeded".into()));
    }
    for set in [CapSet::Permitted, CapSet::Effective] {
        let have = caps::read(None, set).map_err(|e| not(format!("capget failed: {e}")))?;
        if &have != keep {
            return Err(not(format!(
                "the {set:?} capabilities are {:?}, not {:?}",
                names(&have),
                names(keep)
            )));
        }
    }
    Ok(Dropped {
        uid: target.uid,
        gid: target.gid,
        caps: keep.clone(),
        unchanged_threads: threads_beyond(keep),
    })
}

/// This process's threads whose permitted capabilities go beyond `keep`.
fn threads_beyond(keep: &CapsHashSet) -> Vec<String> {
    let allowed = keep.iter().fold(0u64, |m, c| m | c.bitmask());
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let get = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(str::trim)
                .unwrap_or("")
                .to_owned()
        };
        let permitted = u64::from_str_radix(&get("CapPrm:"), 16).unwrap_or(0);
        if permitted & !allowed != 0 {
            out.push(format!("{} (CapPrm {permitted:x})", get("Name:")));
        }
    }
    out.sort();
    out
}
