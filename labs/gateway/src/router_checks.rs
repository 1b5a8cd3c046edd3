//! The router behaviour of pxgw, with real Linux hosts:
//!
//! - **eMTU 1400, no router.** `ping -M dont -s 2000` from inside is answered (pxgw fragments
//!   it); `ping -M do -s 2000` gets "Frag needed and DF set (mtu = 1400)" from pxgw;
//!   `ping -6 -s 2000` is answered once the host learned pxgw's Packet Too Big; a UDP
//!   application sending 3000 B datagrams with DF (IPv4 and IPv6) learns the path MTU (its
//!   socket's `IP_MTU`/`IPV6_MTU` reads 1400, later sends fail with EMSGSIZE).
//! - **A router behind pxgw with a 1400 B link, eMTU 1500.** An IPv6 transfer from inside is
//!   split by pxgw to the outside host's MSS (1440, advertised on purpose so the bottleneck is
//!   in the middle of the path): the router answers Packet Too Big, pxgw learns it and forwards
//!   it. The same with the router black-holing ICMPv6: pxgw detects the black hole from the
//!   inside host's retransmissions and falls back to 1280. Both transfers arrive intact.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Result};
use serde_json::json;

use crate::{Family, Lab, RouterConfig, Topology};

/// A named assertion.
pub type Check = (String, bool);

/// The eMTU of the first topology.
const EMTU: u16 = 1400;
/// Second addresses of the outside host for the UDP application: a destination whose path MTU
/// no ping taught the inside host yet.
const UDP_DEST: [&str; 2] = ["198.51.100.11", "2001:db8:100::11"];

/// Runs `program args` in the namespace `ns`: (exit success, stdout and stderr).
fn run_in(ns: &str, program: &str, args: &[&str]) -> (bool, String) {
    match Command::new("ip")
        .args(["netns", "exec", ns, program])
        .args(args)
        .output()
    {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        ),
        Err(e) => (false, e.to_string()),
    }
}

/// Replies counted by ping's summary line ("N received").
fn received(ping_output: &str) -> u64 {
    ping_output
        .split(',')
        .find(|p| p.contains("received"))
        .and_then(|p| p.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The UDP application: sends 3000 B datagrams with DF (path MTU discovery "do") to `dst`,
/// five times 200 ms apart, then prints the socket's path MTU and how many sends failed.
const UDP_APP: &str = r#"
import socket, sys, time
dst = sys.argv[1]
v6 = ':' in dst
fam = socket.AF_INET6 if v6 else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
# IP_MTU_DISCOVER 10 / IPV6_MTU_DISCOVER 23, PMTUDISC_DO 2; IP_MTU 14 / IPV6_MTU 24
level = socket.IPPROTO_IPV6 if v6 else socket.IPPROTO_IP
s.setsockopt(level, 23 if v6 else 10, 2)
s.connect((dst, 9999))
refused = 0
for i in range(5):
    try:
        s.send(b'x' * 3000)
    except OSError:
        refused += 1
    time.sleep(0.2)
print(s.getsockopt(level, 24 if v6 else 14), refused)
"#;

/// (path MTU the socket reports, sends refused) of [`UDP_APP`] run in `ns` toward `dst`.
fn udp_app(ns: &str, dst: &str) -> (u64, u64, String) {
    let (_, out) = run_in(ns, "python3", &["-c", UDP_APP, dst]);
    let mut it = out
        .split_whitespace()
        .map(|w| w.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0), out)
}

/// pxgw's `router` counter `name` in its final statistics.
fn counter(stats: &serde_json::Value, name: &str) -> u64 {
    stats["router"][name].as_u64().unwrap_or(0)
}

/// Both scenarios: the JSON report and the checks.
pub fn run(pxgw: &Path, stop: &AtomicBool) -> Result<(serde_json::Value, Vec<Check>)> {
    let (r1, mut checks) = small_emtu(pxgw)?;
    if stop.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    let mut report = json!({ "emtu_1400": r1 });
    for blackhole in [false, true] {
        let (r, c) = ipv6_bottleneck(pxgw, blackhole)?;
        report[if blackhole {
            "ipv6_bottleneck_blackhole"
        } else {
            "ipv6_bottleneck"
        }] = r;
        checks.extend(c);
        if stop.load(Ordering::Relaxed) {
            bail!("interrupted");
        }
    }
    Ok((report, checks))
}

/// eMTU 1400, no router: pings and the UDP application from inside.
fn small_emtu(pxgw: &Path) -> Result<(serde_json::Value, Vec<Check>)> {
    let topo = Topology {
        emtu: EMTU,
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    eprintln!("lab: {topo}: oversize packets from inside");
    for (f, addr) in Family::BOTH.into_iter().zip(UDP_DEST) {
        let plen = if f == Family::V6 { "64" } else { "24" };
        let cidr = format!("{addr}/{plen}");
        let mut args = vec!["addr", "add", &cidr, "dev", l.ext_iface()];
        if f == Family::V6 {
            args.push("nodad");
        }
        l.ext.ip(&args)?;
    }
    let gw = l.start_pxgw(pxgw, 1, 300)?;
    let ns = l.int.name().to_owned();
    let (ext4, ext6) = (
        l.ext_addr(Family::V4).to_string(),
        l.ext_addr(Family::V6).to_string(),
    );
    // DF clear first: pxgw fragments (the host has learned no smaller MTU yet).
    let (_, dont) = run_in(
        &ns,
        "ping",
        &[
            "-c", "3", "-i", "0.2", "-W", "2", "-M", "dont", "-s", "2000", &ext4,
        ],
    );
    let (_, df) = run_in(
        &ns,
        "ping",
        &["-c", "1", "-W", "2", "-M", "do", "-s", "2000", &ext4],
    );
    let (_, v6) = run_in(
        &ns,
        "ping",
        &["-6", "-c", "4", "-i", "0.3", "-W", "2", "-s", "2000", &ext6],
    );
    let udp4 = udp_app(&ns, UDP_DEST[0]);
    let udp6 = udp_app(&ns, UDP_DEST[1]);
    let (_, route4) = run_in(&ns, "ip", &["-4", "route", "get", UDP_DEST[0]]);
    // The inside host opens a connection: pxgw probes the outside host on its behalf. No F-PMTUD
    // responder runs there, so its kernel answers the probe with a port unreachable addressed to
    // the inside host, which pxgw must consume: it answers pxgw's own probe, not the host.
    let unreach_before = icmp_dest_unreachables(&ns);
    let (tcp_ok, _) = l.file_transfer(Family::V4, false, 256 * 1024)?;
    std::thread::sleep(std::time::Duration::from_millis(500));
    let unreach_after = icmp_dest_unreachables(&ns);
    let (code, stats) = gw.stop()?;
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    let frag_needed_line = format!("Frag needed and DF set (mtu = {EMTU})");
    let report = json!({
        "topology": topo.to_string(),
        "ping_dont_received": received(&dont),
        "ping_do_output": df,
        "ping6_output": v6,
        "udp_v4": { "ip_mtu": udp4.0, "sends_refused": udp4.1 },
        "udp_v6": { "ip_mtu": udp6.0, "sends_refused": udp6.1 },
        "route_get_v4": route4.trim(),
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "router": stats["router"] },
    });
    let t = format!("eMTU {EMTU}");
    let checks = vec![
        (
            format!("{t}: ping -M dont -s 2000 from inside is answered ({} of 3), pxgw fragmented {}", received(&dont), counter(&stats, "fragmented")),
            received(&dont) >= 2 && counter(&stats, "fragmented") >= 2,
        ),
        (
            format!("{t}: ping -M do -s 2000 from inside gets \"{frag_needed_line}\""),
            df.contains(&frag_needed_line),
        ),
        (
            format!("{t}: ping -6 -s 2000 gets a Packet Too Big (mtu=1400), then answers ({} of 4)", received(&v6)),
            v6.contains("Packet too big") && v6.contains("mtu=1400") && received(&v6) >= 2,
        ),
        (
            format!("{t}: a UDP application sending 3000 B with DF learns the IPv4 path MTU (IP_MTU {}, {} sends refused)", udp4.0, udp4.1),
            udp4.0 == u64::from(EMTU) && udp4.1 >= 1 && route4.contains("mtu 1400"),
        ),
        (
            format!("{t}: the same over IPv6 (IPV6_MTU {}, {} sends refused)", udp6.0, udp6.1),
            udp6.0 == u64::from(EMTU) && udp6.1 >= 1,
        ),
        (
            format!(
                "{t}: pxgw counted its errors (frag needed {}, packet too big {})",
                counter(&stats, "frag_needed_sent"),
                counter(&stats, "ptb_sent")
            ),
            counter(&stats, "frag_needed_sent") >= 2 && counter(&stats, "ptb_sent") >= 2,
        ),
        (
            format!(
                "{t}: a connection the inside host opens to a host without an F-PMTUD responder: \
                 transfer {}, pxgw consumed {} port unreachable(s) for its probe, the inside \
                 host received {} destination unreachable(s)",
                if tcp_ok { "intact" } else { "FAILED" },
                counter(&stats, "probe_errors_consumed"),
                unreach_after.saturating_sub(unreach_before)
            ),
            tcp_ok
                && counter(&stats, "probe_errors_consumed") >= 1
                && unreach_after == unreach_before,
        ),
        (format!("{t}: pxgw exits cleanly, no leaked mbufs"), code == 0 && leaked == 0),
    ];
    Ok((report, checks))
}

/// ICMP destination-unreachable messages the kernel of namespace `ns` has received
/// (`Icmp: InDestUnreachs` in its /proc/net/snmp).
fn icmp_dest_unreachables(ns: &str) -> u64 {
    let (_, snmp) = run_in(ns, "cat", &["/proc/net/snmp"]);
    let mut icmp = snmp.lines().filter(|l| l.starts_with("Icmp: "));
    let (Some(names), Some(values)) = (icmp.next(), icmp.next()) else {
        return u64::MAX;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "InDestUnreachs")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// eMTU 1500, a router with a 1400 B link behind pxgw, with or without an ICMP black hole: an
/// IPv6 transfer from inside.
fn ipv6_bottleneck(pxgw: &Path, blackhole: bool) -> Result<(serde_json::Value, Vec<Check>)> {
    let topo = Topology {
        router: Some(RouterConfig {
            link_mtu: 1400,
            blackhole_icmp: blackhole,
        }),
        ..Topology::default()
    };
    let l = Lab::with_topology(topo)?;
    eprintln!("lab: {topo}: IPv6 split across the bottleneck");
    // The outside host advertises MSS 1440, as a host on a 1500 B link behind the bottleneck
    // would: pxgw's split size (1500) is then too big for the router's link.
    if let Some((_, far)) = l.router_addrs(Family::V6) {
        let via = far.to_string();
        l.ext.ip(&[
            "-6", "route", "replace", "default", "via", &via, "advmss", "1440",
        ])?;
    }
    let gw = l.start_pxgw(pxgw, 1, 300)?;
    let result = l.file_transfer(Family::V6, false, 4 << 20);
    let dropped = l.icmp_blackholed().unwrap_or(0);
    let (code, stats) = gw.stop()?;
    let (sha_ok, secs) = result?;
    let leaked = stats["leaked_mbufs"].as_u64().unwrap_or(u64::MAX);
    let (learned, fallbacks) = (
        counter(&stats, "ptb_learned"),
        counter(&stats, "blackhole_fallbacks"),
    );
    let t = format!(
        "IPv6 via a 1400 B router link{}",
        if blackhole {
            " with an ICMP black hole"
        } else {
            ""
        }
    );
    let report = json!({
        "topology": topo.to_string(),
        "sha256_out_ok": sha_ok,
        "seconds": secs,
        "icmp_blackholed": dropped,
        "pxgw": { "exit_code": code, "leaked_mbufs": leaked, "router": stats["router"] },
    });
    let learned_check = if blackhole {
        (
            format!("{t}: the router dropped {dropped} ICMPv6 errors; pxgw fell back to 1280 ({fallbacks})"),
            dropped > 0 && fallbacks >= 1,
        )
    } else {
        (
            format!("{t}: pxgw learned the Packet Too Big ({learned}) and forwarded it"),
            learned >= 1 && fallbacks == 0,
        )
    };
    let checks = vec![
        (
            format!("{t}: 4 MB inside -> outside, sha256 ok ({secs:.1} s)"),
            sha_ok,
        ),
        learned_check,
        (
            format!("{t}: pxgw exits cleanly, no leaked mbufs"),
            code == 0 && leaked == 0,
        ),
    ];
    Ok((report, checks))
}
