//! The lab's network: an outside host, an outside router, pxgw instances side by side (A and B,
//! and C for the run that adds one, on 198.19.3.0/24), an inside router and an inside host,
//! every host dual stack.
//!
//! ```text
//!                        ┌── pxgw A ──┐   198.19.1.0/24   2001:db8:19:1::/64
//!  px-ext ── px-ro ──────┤            ├────── px-ri ── px-int
//!        198.18.0.0/24   └── pxgw B ──┘   198.19.2.0/24   2001:db8:19:2::/64   198.19.100.0/24
//!        2001:db8:18::/64      (MTU 1500 outside, 9000 inside)                 2001:db8:19:100::/64
//! ```
//!
//! pxgw is a bump in the wire, so each instance sits on one subnet between the routers: the
//! outside router's end (`.1`/`::1`, MTU 1500) on pxgw's outside port (`net_tap` on a TAP
//! bridged to a veth, as in the gateway lab), the inside router's end (`.2`/`::2`, MTU 9000) on
//! its inside port (`net_af_packet`). Each router reaches the far side over the instances with
//! an equal-cost multipath route hashed on the 5-tuple ([`netlab::make_router`]): the lab's own
//! routes for the runs with forced paths, then FRR's ([`crate::frr`]), once
//! [`EcmpLab::remove_static_routes`] removed the lab's.
//!
//! **Paths.** [`Paths::Ecmp`] leaves each router's hash to choose each direction's instance on
//! its own, as plain ECMP does: a flow's two directions cross the same instance or not, by
//! chance. [`Paths::Symmetric`] and [`Paths::Asymmetric`] keep the outside router's hash for a
//! connection's first packet and then pin it: each router marks a connection (conntrack) with
//! the instance its packets first arrived from, and policy routing sends the connection's
//! packets toward the gateways through that same instance (symmetric, what routers with
//! symmetric ECMP hashing achieve) or through the other one (asymmetric, deliberately: every
//! connection's SYN crosses one instance and its SYN-ACK the other).

use std::fs;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use gateway_lab::Family;
use netlab::{Netns, NextHop, TapWire, Veth};
use serde::Serialize;

/// The instances, by name: A and B carry the runs, C is the one added under load.
pub const INSTANCES: [&str; 3] = ["A", "B", "C"];
/// The instances in service from the start (A and B).
pub const PAIR: usize = 2;
/// The external MTU: the outside host, the outside router, pxgw's outside ports.
pub const EMTU: u16 = 1500;
/// The internal MTU: pxgw's inside ports, the inside router, the inside host.
pub const IMTU: u16 = 9000;
/// The nftables table that marks connections on the routers.
const MARK_TABLE: &str = "pxso_paths";
/// Policy routing tables: the route toward the gateways through instance `i` is in table
/// `TABLE_BASE + i`.
const TABLE_BASE: u32 = 101;

/// How the routers choose each direction's instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Paths {
    /// Each router's 5-tuple hash alone: some connections symmetric, some not.
    Ecmp,
    /// A connection's two directions cross the same instance.
    Symmetric,
    /// A connection's two directions cross different instances.
    Asymmetric,
}

impl std::fmt::Display for Paths {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Paths::Ecmp => "ecmp",
            Paths::Symmetric => "symmetric",
            Paths::Asymmetric => "asymmetric",
        })
    }
}

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn v6(seg3: u16, seg4: u16, last: u16) -> IpAddr {
    IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, seg3, seg4, 0, 0, 0, last))
}

/// The outside host.
pub fn ext_addr(f: Family) -> IpAddr {
    match f {
        Family::V4 => v4(198, 18, 0, 2),
        Family::V6 => v6(0x18, 0, 2),
    }
}

/// The inside host.
pub fn int_addr(f: Family) -> IpAddr {
    match f {
        Family::V4 => v4(198, 19, 100, 2),
        Family::V6 => v6(0x19, 0x100, 2),
    }
}

/// The outside router on its link to the outside host, and the inside router on its link to the
/// inside host (the hosts' default gateways).
fn host_gateway(f: Family, inside: bool) -> IpAddr {
    match (f, inside) {
        (Family::V4, false) => v4(198, 18, 0, 1),
        (Family::V6, false) => v6(0x18, 0, 1),
        (Family::V4, true) => v4(198, 19, 100, 1),
        (Family::V6, true) => v6(0x19, 0x100, 1),
    }
}

/// A router's address on instance `i`'s subnet: the outside router's (`inside` false) or the
/// inside router's.
pub fn link_addr(f: Family, i: usize, inside: bool) -> IpAddr {
    let (n, host) = (i as u8 + 1, if inside { 2 } else { 1 });
    match f {
        Family::V4 => v4(198, 19, n, host),
        Family::V6 => v6(0x19, u16::from(n), u16::from(host)),
    }
}

fn prefix(addr: IpAddr) -> &'static str {
    match addr {
        IpAddr::V4(_) => "/24",
        IpAddr::V6(_) => "/64",
    }
}

/// The subnet an address of this lab is in, as a route prefix.
pub fn subnet(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.0/24", o[0], o[1], o[2])
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
        }
    }
}

/// One instance's place in the lab: its outside wire (a veth from the outside router, bridged
/// to a TAP for `net_tap`) and its inside wire (a veth to the inside router).
pub struct Slot {
    /// Outside router end (`b`, in the router) and pxgw's end (`a`, bridged to [`Self::tap`]).
    outside: Veth,
    tap: TapWire,
    /// pxgw's inside port (`a`, `net_af_packet`) and the inside router's end (`b`).
    inside: Veth,
}

impl Slot {
    /// The TAP pxgw's outside port opens (`net_tap0,iface=...`).
    pub fn tap(&self) -> &str {
        self.tap.tap()
    }

    /// The veth pxgw's inside port opens (`net_af_packet1,iface=...`).
    pub fn inside_iface(&self) -> &str {
        self.inside.a()
    }

    /// Bytes the inside wire carried in both directions so far (root namespace counters of
    /// pxgw's inside veth): what this instance forwarded, whether pxgw is alive or not.
    pub fn inside_bytes(&self) -> Result<u64> {
        let read = |c: &str| -> Result<u64> {
            let path = format!("/sys/class/net/{}/statistics/{c}", self.inside.a());
            let text = fs::read_to_string(&path).with_context(|| path.clone())?;
            text.trim().parse().with_context(|| path.clone())
        };
        Ok(read("rx_bytes")? + read("tx_bytes")?)
    }
}

/// A TCP connection between the outside and the inside host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// The outside host's address.
    pub ext: String,
    /// Its port.
    pub ext_port: u16,
    /// The inside host's address.
    pub int: String,
    /// Its port.
    pub int_port: u16,
}

/// The whole lab; everything it created goes away on drop.
pub struct EcmpLab {
    /// The outside host.
    pub ext: Netns,
    /// The outside router.
    pub ro: Netns,
    /// The inside router.
    pub ri: Netns,
    /// The inside host.
    pub int: Netns,
    /// The inside host's interface.
    pub int_iface: String,
    /// The outside router's interface toward the outside host.
    ro_host_iface: String,
    /// The outside host's interface.
    ext_iface: String,
    /// The inside router's interface toward the inside host.
    ri_host_iface: String,
    /// Each instance's wires.
    pub slots: Vec<Slot>,
    /// Scratch files (configurations, logs, statistics).
    pub dir: PathBuf,
    /// Leave [`dir`](Self::dir) in place when the lab ends (`--keep-logs`).
    pub keep_logs: bool,
}

/// Turns off the offloads that would let the kernel put other than MTU-sized frames on the wire
/// or merge frames on receipt (GRO on a router or on the inside host would look like pxgw's
/// merging). Some are fixed on veths; ethtool then fails having done the rest.
fn offloads_off(ns: Option<&Netns>, iface: &str) {
    let args = [
        "-K", iface, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
    ];
    let _ = match ns {
        Some(ns) => ns.exec("ethtool", &args),
        None => netlab::run("ethtool", &args),
    };
}

/// Adds both families' addresses to `iface` in `ns` (IPv6 without DAD).
fn addresses(ns: &Netns, iface: &str, addrs: [IpAddr; 2]) -> Result<()> {
    ns.exec(
        "sysctl",
        &["-qw", &format!("net.ipv6.conf.{iface}.accept_dad=0")],
    )?;
    for a in addrs {
        let cidr = format!("{a}{}", prefix(a));
        let mut args = vec!["addr", "add", cidr.as_str(), "dev", iface];
        if a.is_ipv6() {
            args.push("nodad");
        }
        ns.ip(&args)?;
    }
    Ok(())
}

fn namespace(prefix: &str) -> Result<Netns> {
    let ns = Netns::new(prefix)?;
    for s in [
        "net.ipv6.conf.all.accept_dad=0",
        "net.ipv6.conf.default.accept_dad=0",
    ] {
        ns.exec("sysctl", &["-qw", s])?;
    }
    Ok(ns)
}

impl EcmpLab {
    /// Builds the namespaces, wires, addresses and routes ([`Paths::Ecmp`]).
    pub fn new() -> Result<Self> {
        if !netlab::is_root() {
            bail!("the lab creates network namespaces: run it as root");
        }
        let (ext, ro, ri, int) = (
            namespace("so-ext")?,
            namespace("so-ro")?,
            namespace("so-ri")?,
            namespace("so-int")?,
        );
        netlab::make_router(&ro)?;
        netlab::make_router(&ri)?;
        let both = |f: fn(Family) -> IpAddr| [f(Family::V4), f(Family::V6)];
        let gw = |inside: bool| {
            [
                host_gateway(Family::V4, inside),
                host_gateway(Family::V6, inside),
            ]
        };
        let (ro_host_iface, ext_iface) = netlab::veth_pair(&ro, &ext, "soe", EMTU.into())?;
        addresses(&ro, &ro_host_iface, gw(false))?;
        addresses(&ext, &ext_iface, both(ext_addr))?;
        let (ri_host_iface, int_iface) = netlab::veth_pair(&ri, &int, "soi", IMTU.into())?;
        addresses(&ri, &ri_host_iface, gw(true))?;
        addresses(&int, &int_iface, both(int_addr))?;
        for (ns, iface) in [
            (&ro, &ro_host_iface),
            (&ext, &ext_iface),
            (&ri, &ri_host_iface),
            (&int, &int_iface),
        ] {
            offloads_off(Some(ns), iface);
        }
        for (ns, inside) in [(&ext, false), (&int, true)] {
            for (fam, via) in ["-4", "-6"].into_iter().zip(gw(inside)) {
                ns.ip(&[fam, "route", "add", "default", "via", &via.to_string()])?;
            }
        }
        let mut slots = Vec::new();
        for i in 0..INSTANCES.len() {
            let outside = Veth::new("soo", EMTU.into())?;
            let inside = Veth::new("sog", IMTU.into())?;
            // pxgw's ends carry no IPv6 of the root namespace's own.
            for a in [outside.a(), inside.a()] {
                let _ = netlab::run(
                    "sysctl",
                    &["-qw", &format!("net.ipv6.conf.{a}.disable_ipv6=1")],
                );
                offloads_off(None, a);
            }
            outside.move_b_into(&ro)?;
            inside.move_b_into(&ri)?;
            offloads_off(Some(&ro), outside.b());
            offloads_off(Some(&ri), inside.b());
            let f = |inside: bool| {
                [
                    link_addr(Family::V4, i, inside),
                    link_addr(Family::V6, i, inside),
                ]
            };
            addresses(&ro, outside.b(), f(false))?;
            addresses(&ri, inside.b(), f(true))?;
            let tap = TapWire::new("sot", outside.a(), EMTU.into())?;
            slots.push(Slot {
                outside,
                tap,
                inside,
            });
        }
        let dir = std::env::temp_dir().join(format!(
            "pxso-{}-{}",
            std::process::id(),
            netlab::unique_name("l")
        ));
        fs::create_dir_all(&dir)?;
        let lab = Self {
            ext,
            ro,
            ri,
            int,
            int_iface,
            ro_host_iface,
            ext_iface,
            ri_host_iface,
            slots,
            dir,
            keep_logs: false,
        };
        lab.install_routes(&[0, 1])?;
        for i in 0..PAIR {
            for f in Family::BOTH {
                lab.route(i, f, Some(TABLE_BASE + i as u32))?;
            }
        }
        Ok(lab)
    }

    /// The far side's prefix and this router's next hops for it over instances `up`, on the
    /// outside router (`inside` false) or the inside router.
    fn hops(&self, f: Family, inside: bool, up: &[usize]) -> (String, Vec<NextHop<'_>>) {
        let far = if inside { ext_addr(f) } else { int_addr(f) };
        let hops = up
            .iter()
            .map(|&i| NextHop {
                via: link_addr(f, i, !inside),
                dev: if inside {
                    self.slots[i].inside.b()
                } else {
                    self.slots[i].outside.b()
                },
            })
            .collect();
        (subnet(far), hops)
    }

    /// Routes through instance `i` alone, on both routers, in `table`.
    fn route(&self, i: usize, f: Family, table: Option<u32>) -> Result<()> {
        for (ns, inside) in [(&self.ro, false), (&self.ri, true)] {
            let (prefix, hops) = self.hops(f, inside, &[i]);
            netlab::route_via(ns, &prefix, &hops, table)?;
        }
        Ok(())
    }

    /// The main tables' routes across the gateways: ECMP over the instances `up` (a single
    /// route when one is left), on both routers, both families.
    pub fn install_routes(&self, up: &[usize]) -> Result<()> {
        for f in Family::BOTH {
            for (ns, inside) in [(&self.ro, false), (&self.ri, true)] {
                let (prefix, hops) = self.hops(f, inside, up);
                netlab::route_via(ns, &prefix, &hops, None)?;
            }
        }
        Ok(())
    }

    /// Removes the lab's own routes across the gateways (main table and the path tables), so
    /// that only FRR's steer traffic from then on.
    pub fn remove_static_routes(&self) -> Result<()> {
        self.set_paths(Paths::Ecmp)?;
        for f in Family::BOTH {
            let fam = if f == Family::V4 { "-4" } else { "-6" };
            for (ns, inside) in [(&self.ro, false), (&self.ri, true)] {
                let far = if inside { ext_addr(f) } else { int_addr(f) };
                ns.ip(&[fam, "route", "del", &subnet(far)])?;
                for i in 0..PAIR {
                    ns.ip(&[
                        fam,
                        "route",
                        "flush",
                        "table",
                        &(TABLE_BASE + i as u32).to_string(),
                    ])?;
                }
            }
        }
        Ok(())
    }

    /// The router-side interface of instance `i`: on the inside router (`inside`) or the
    /// outside router.
    pub fn router_iface(&self, i: usize, inside: bool) -> &str {
        if inside {
            self.slots[i].inside.b()
        } else {
            self.slots[i].outside.b()
        }
    }

    /// The instance whose router-side interface `dev` is, on the inside router or the outside
    /// router.
    pub fn slot_of(&self, dev: &str, inside: bool) -> Option<usize> {
        (0..self.slots.len()).find(|&i| self.router_iface(i, inside) == dev)
    }

    /// The lab's established connections, seen from the outside host (`ss`): its address and
    /// port, the inside host's address and port.
    pub fn connections(&self) -> Result<Vec<Connection>> {
        let text = self.ext.exec("ss", &["-Htn", "state", "established"])?;
        let split = |s: &str| -> Option<(String, u16)> {
            let (a, p) = s.rsplit_once(':')?;
            Some((a.trim_matches(['[', ']']).to_owned(), p.parse().ok()?))
        };
        Ok(text
            .lines()
            .filter_map(|line| {
                // Recv-Q, Send-Q, local address:port, peer address:port.
                let cols: Vec<&str> = line.split_whitespace().collect();
                let (ext, ext_port) = split(cols.get(2)?)?;
                let (int, int_port) = split(cols.get(3)?)?;
                Some(Connection {
                    ext,
                    ext_port,
                    int,
                    int_port,
                })
            })
            .collect())
    }

    /// The instances each router's ECMP hash sends `conn` through now (`ip route get` with its
    /// 5-tuple, arriving from the host side): (inbound, outbound).
    pub fn path_of(&self, conn: &Connection) -> (Option<usize>, Option<usize>) {
        let get = |ns: &Netns, iif: &str, from: &str, to: &str, sport: u16, dport: u16, inside| {
            let (sport, dport) = (sport.to_string(), dport.to_string());
            let out = ns
                .ip(&[
                    "-j", "route", "get", to, "from", from, "iif", iif, "ipproto", "tcp", "sport",
                    &sport, "dport", &dport,
                ])
                .ok()?;
            let v: serde_json::Value = serde_json::from_str(&out).ok()?;
            self.slot_of(v[0]["dev"].as_str()?, inside)
        };
        let c = conn;
        (
            get(
                &self.ro,
                &self.ro_host_iface,
                &c.ext,
                &c.int,
                c.ext_port,
                c.int_port,
                false,
            ),
            get(
                &self.ri,
                &self.ri_host_iface,
                &c.int,
                &c.ext,
                c.int_port,
                c.ext_port,
                true,
            ),
        )
    }

    /// Sets how the routers choose each direction's instance (module docs).
    pub fn set_paths(&self, paths: Paths) -> Result<()> {
        for (ns, host_iface, inside) in [
            (&self.ro, &self.ro_host_iface, false),
            (&self.ri, &self.ri_host_iface, true),
        ] {
            let _ = ns.exec("nft", &["delete", "table", "inet", MARK_TABLE]);
            for i in 0..PAIR {
                netlab::clear_mark_rules(ns, i as u32 + 1)?;
            }
            if paths == Paths::Ecmp {
                continue;
            }
            // A connection's mark: 1 + the instance its packets first came from.
            let mut rules = String::new();
            for (i, slot) in self.slots.iter().take(PAIR).enumerate() {
                let iface = if inside {
                    slot.inside.b()
                } else {
                    slot.outside.b()
                };
                rules.push_str(&format!(
                    "iifname \"{iface}\" ct mark 0 ct mark set {}\n",
                    i + 1
                ));
            }
            rules.push_str(&format!("iifname \"{host_iface}\" meta mark set ct mark\n"));
            let script = format!(
                "table inet {MARK_TABLE} {{\n chain pre {{ type filter hook prerouting priority mangle; policy accept;\n{rules} }}\n}}\n"
            );
            let file = self.dir.join(format!("paths-{}.nft", ns.name()));
            fs::write(&file, script)?;
            ns.exec("nft", &["-f", &file.display().to_string()])?;
            for i in 0..PAIR {
                let via = match paths {
                    Paths::Symmetric => i,
                    _ => (i + 1) % PAIR,
                };
                netlab::mark_rule(ns, i as u32 + 1, TABLE_BASE + via as u32)?;
            }
        }
        Ok(())
    }

    /// Sets the MTU of the link between the outside router and the outside host (both ends):
    /// below the eMTU it is the path's bottleneck, and the router answers larger packets with
    /// "fragmentation needed" or Packet Too Big. The inside host's learned path MTUs are
    /// flushed, so each run starts without them.
    pub fn set_outside_link_mtu(&self, mtu: u16) -> Result<()> {
        let mtu = mtu.to_string();
        self.ro
            .ip(&["link", "set", &self.ro_host_iface, "mtu", &mtu])?;
        self.ext
            .ip(&["link", "set", &self.ext_iface, "mtu", &mtu])?;
        for family in ["-4", "-6"] {
            self.int.ip(&[family, "route", "flush", "cache"])?;
        }
        Ok(())
    }

    /// ICMP "fragmentation needed" and ICMPv6 Packet Too Big messages the outside router sent
    /// so far (`nstat`'s counters in its namespace).
    pub fn router_too_big_sent(&self) -> Result<u64> {
        let out = self.ro.exec("nstat", &["-asz"])?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let name = w.next()?;
                let v: u64 = w.next()?.parse().ok()?;
                matches!(name, "IcmpOutDestUnreachs" | "Icmp6OutPktTooBigs").then_some(v)
            })
            .sum())
    }

    /// Whether a ping from the outside router to the inside router's address on instance `i`'s
    /// subnet (which only that instance carries) answers in both families within `limit`.
    pub fn instance_forwards(&self, i: usize, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        Family::BOTH.into_iter().all(|f| {
            let to = link_addr(f, i, true).to_string();
            while std::time::Instant::now() < deadline {
                if self.ro.exec("ping", &["-c", "1", "-W", "1", &to]).is_ok() {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            false
        })
    }
}

impl Drop for EcmpLab {
    fn drop(&mut self) {
        if self.keep_logs {
            eprintln!(
                "scale-out: kept {} (pxgw's and FRR's configurations and logs)",
                self.dir.display()
            );
            return;
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
