//! The lab's path: namespaces A — R1 — R2 — B, links of 9000, 4000 and 1400 B, static routes,
//! and nftables on the routers that count probes and PTBs and, on demand, black-hole every PTB
//! (SIGCOMM'26 §5.1: "routers or firewalls silently drop them").
//!
//! Addresses come from 198.18.0.0/15 (RFC 2544 benchmarking) and exist only inside the lab's
//! namespaces.

use std::cell::Cell;
use std::net::Ipv4Addr;

use netlab::{run, Netns, Veth};

use super::LabError;

/// A's address, on the 9000 B link to R1.
pub const A_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// R1's address toward A: A's next hop.
const R1_TOWARD_A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
/// R1's address toward R2.
const R1_TOWARD_R2: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
/// R2's address toward R1: R1's next hop toward B.
const R2_TOWARD_R1: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 2);
/// R2's address toward B: B's next hop.
const R2_TOWARD_B: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 1);
/// B's address, behind the 1400 B link: where every method probes.
pub const B_ADDR: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 2);
/// Every lab address is in here.
const LAB_PREFIX: &str = "198.18.0.0/15";

/// The MTUs of the links A–R1, R1–R2 and R2–B.
pub const LINK_MTUS: [u32; 3] = [9000, 4000, 1400];

/// The nftables table on both routers that counts (never drops).
const COUNT_TABLE: &str = "fpmtud_lab";
/// The nftables table on both routers that drops PTBs; present only in black-hole runs.
const BLACKHOLE_TABLE: &str = "fpmtud_lab_blackhole";
/// A probe is a UDP packet from A to B longer than this; scamper's traceroute probes (44 B)
/// are not probes.
const SMALL_PROBE_MAX: u16 = 64;

/// The four namespaces and the links between them, deleted on drop.
#[derive(Debug)]
pub struct Topology {
    /// The prober's host.
    pub a: Netns,
    /// The first router (9000 → 4000).
    pub r1: Netns,
    /// The second router (4000 → 1400).
    pub r2: Netns,
    /// The responder's host.
    pub b: Netns,
    /// Dropped after the namespaces, whose deletion already removed them.
    _links: [Veth; 3],
    /// R1's interface toward A, where probes are counted.
    r1_from_a: String,
    blackhole: Cell<bool>,
}

/// Moves `link`'s ends into `left` and `right` and brings them up there.
fn attach(link: &Veth, left: &Netns, right: &Netns) -> Result<(), LabError> {
    run("ip", &["link", "set", link.a(), "netns", left.name()])?;
    left.ip(&["link", "set", link.a(), "up"])?;
    link.move_b_into(right)?;
    Ok(())
}

fn addr(ns: &Netns, ip: Ipv4Addr, dev: &str) -> Result<(), LabError> {
    ns.ip(&["addr", "add", &format!("{ip}/24"), "dev", dev])?;
    Ok(())
}

fn route(ns: &Netns, to: &str, via: Ipv4Addr) -> Result<(), LabError> {
    ns.ip(&["route", "add", to, "via", &via.to_string()])?;
    Ok(())
}

impl Topology {
    /// Builds the path, with forwarding on the routers and the counting tables on them, and
    /// checks that B answers a ping from A (which also resolves every neighbour, so no probe
    /// waits for ARP).
    pub fn new() -> Result<Self, LabError> {
        let a = Netns::new("pmA")?;
        let r1 = Netns::new("pmR1")?;
        let r2 = Netns::new("pmR2")?;
        let b = Netns::new("pmB")?;
        let [mtu_a, mtu_r, mtu_b] = LINK_MTUS;
        let links = [
            Veth::new("pmar", mtu_a)?,
            Veth::new("pmrr", mtu_r)?,
            Veth::new("pmrb", mtu_b)?,
        ];
        let [ar, rr, rb] = &links;
        attach(ar, &a, &r1)?;
        attach(rr, &r1, &r2)?;
        attach(rb, &r2, &b)?;
        addr(&a, A_ADDR, ar.a())?;
        addr(&r1, R1_TOWARD_A, ar.b())?;
        addr(&r1, R1_TOWARD_R2, rr.a())?;
        addr(&r2, R2_TOWARD_R1, rr.b())?;
        addr(&r2, R2_TOWARD_B, rb.a())?;
        addr(&b, B_ADDR, rb.b())?;
        route(&a, LAB_PREFIX, R1_TOWARD_A)?;
        route(&r1, "198.18.3.0/24", R2_TOWARD_R1)?;
        route(&r2, "198.18.1.0/24", R1_TOWARD_R2)?;
        route(&b, LAB_PREFIX, R2_TOWARD_B)?;
        for router in [&r1, &r2] {
            router.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        }
        let r1_from_a = ar.b().to_owned();
        let topo = Self {
            a,
            r1,
            r2,
            b,
            _links: links,
            r1_from_a,
            blackhole: Cell::new(false),
        };
        topo.r1.exec("nft", &[&topo.count_rules(true)])?;
        topo.r2.exec("nft", &[&topo.count_rules(false)])?;
        topo.a
            .exec("ping", &["-c", "1", "-W", "2", &B_ADDR.to_string()])?;
        Ok(topo)
    }

    /// The counting table: PTBs the router sends (before any black hole drops them) and, on
    /// R1, UDP from A to B split into probes and small packets. It runs before defragmentation
    /// (priority -450), so it counts packets as they arrived.
    fn count_rules(&self, probes: bool) -> String {
        let ptb = r#"icmp type destination-unreachable icmp code frag-needed counter name "ptb_sent" ; icmpv6 type packet-too-big counter name "ptb_sent" ;"#;
        let from_a = format!(
            r#"iifname "{}" ip daddr {B_ADDR} meta l4proto udp"#,
            self.r1_from_a
        );
        let count = if probes {
            format!(
                "chain prerouting {{ type filter hook prerouting priority -450 ; \
                 {from_a} ip length {}-65535 counter name \"probes\" ; \
                 {from_a} ip length 0-{SMALL_PROBE_MAX} counter name \"small\" ; }} ;",
                SMALL_PROBE_MAX + 1
            )
        } else {
            String::new()
        };
        format!(
            "table inet {COUNT_TABLE} {{ counter probes {{ }} ; counter small {{ }} ; \
             counter ptb_sent {{ }} ; {count} \
             chain output {{ type filter hook output priority 0 ; {ptb} }} ; }}"
        )
    }

    /// Turns the ICMP black hole on or off: nftables on R1 and R2 drops every ICMP
    /// "fragmentation needed" (and IPv6 "packet too big") the router sends or forwards.
    pub fn set_blackhole(&self, on: bool) -> Result<(), LabError> {
        let drop = r#"icmp type destination-unreachable icmp code frag-needed counter name "ptb_dropped" drop ; icmpv6 type packet-too-big counter name "ptb_dropped" drop ;"#;
        let rules = if on {
            // After the counting chain (priority 0), so a dropped PTB was also counted as sent.
            format!(
                "table inet {BLACKHOLE_TABLE} {{ counter ptb_dropped {{ }} ; \
                 chain output {{ type filter hook output priority 10 ; {drop} }} ; \
                 chain forward {{ type filter hook forward priority 10 ; {drop} }} ; }}"
            )
        } else {
            // Adding first makes the delete succeed whether or not the table was there.
            format!("add table inet {BLACKHOLE_TABLE} ; delete table inet {BLACKHOLE_TABLE}")
        };
        for router in [&self.r1, &self.r2] {
            router.exec("nft", &[&rules])?;
        }
        self.blackhole.set(on);
        Ok(())
    }

    /// Whether the black hole is on.
    pub fn blackhole(&self) -> bool {
        self.blackhole.get()
    }

    /// Forgets every learned PMTU (`ip route flush cache`) in every namespace, so the next
    /// method starts cold.
    pub fn flush_route_caches(&self) -> Result<(), LabError> {
        for ns in [&self.a, &self.r1, &self.r2, &self.b] {
            ns.ip(&["route", "flush", "cache"])?;
        }
        Ok(())
    }

    /// The PMTU toward B that A's kernel has learned from ICMP, if any (`ip route get`).
    pub fn learned_mtu(&self) -> Result<Option<u16>, LabError> {
        let text = self.a.ip(&["route", "get", &B_ADDR.to_string()])?;
        Ok(parse_route_mtu(&text))
    }

    fn counter(&self, ns: &Netns, table: &str, name: &str) -> Result<u64, LabError> {
        let text = ns.exec("nft", &["list", "counter", "inet", table, name])?;
        parse_counter(&text).ok_or_else(|| LabError::Parse {
            what: format!("nft counter {table} {name} in {}", ns.name()),
            text,
        })
    }

    /// The counters so far.
    pub fn counters(&self) -> Result<Counters, LabError> {
        let mut c = Counters {
            probes: self.counter(&self.r1, COUNT_TABLE, "probes")?,
            small: self.counter(&self.r1, COUNT_TABLE, "small")?,
            ..Counters::default()
        };
        for router in [&self.r1, &self.r2] {
            c.ptb_sent += self.counter(router, COUNT_TABLE, "ptb_sent")?;
            if self.blackhole() {
                c.ptb_dropped += self.counter(router, BLACKHOLE_TABLE, "ptb_dropped")?;
            }
        }
        Ok(c)
    }
}

/// What the routers counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// UDP packets longer than 64 B that A sent toward B (seen arriving at R1).
    pub probes: u64,
    /// UDP packets of at most 64 B that A sent toward B (scamper's traceroute probes).
    pub small: u64,
    /// PTBs R1 and R2 sent.
    pub ptb_sent: u64,
    /// PTBs the black hole dropped.
    pub ptb_dropped: u64,
}

impl Counters {
    /// What was counted since `before`.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            probes: self.probes.saturating_sub(before.probes),
            small: self.small.saturating_sub(before.small),
            ptb_sent: self.ptb_sent.saturating_sub(before.ptb_sent),
            // The black-hole table (and its counter) may have been created in between.
            ptb_dropped: self.ptb_dropped.saturating_sub(before.ptb_dropped),
        }
    }
}

/// The packet count in `nft list counter` output (`packets N bytes M`).
pub fn parse_counter(text: &str) -> Option<u64> {
    let mut words = text.split_whitespace();
    words.find(|w| *w == "packets")?;
    words.next()?.parse().ok()
}

/// The learned MTU in `ip route get` output (`... cache expires 599sec mtu 1400`), if any.
pub fn parse_route_mtu(text: &str) -> Option<u16> {
    let mut words = text.split_whitespace();
    words.find(|w| *w == "mtu")?;
    words.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nft_counters() {
        let text =
            "table inet fpmtud_lab {\n\tcounter probes {\n\t\tpackets 3 bytes 14400\n\t}\n}\n";
        assert_eq!(parse_counter(text), Some(3));
        assert_eq!(parse_counter("table inet fpmtud_lab {\n}"), None);
    }

    #[test]
    fn reads_the_learned_mtu() {
        let learned = "198.18.3.2 via 198.18.1.2 dev pmar1 src 198.18.1.1 uid 0 \n    cache expires 599sec mtu 1400 \n";
        assert_eq!(parse_route_mtu(learned), Some(1400));
        let cold = "198.18.3.2 via 198.18.1.2 dev pmar1 src 198.18.1.1 uid 0 \n    cache \n";
        assert_eq!(parse_route_mtu(cold), None);
    }

    #[test]
    fn counters_subtract_per_field() {
        let before = Counters {
            probes: 3,
            small: 3,
            ptb_sent: 2,
            ptb_dropped: 0,
        };
        let after = Counters {
            probes: 4,
            small: 3,
            ptb_sent: 4,
            ptb_dropped: 2,
        };
        assert_eq!(
            after.since(&before),
            Counters {
                probes: 1,
                small: 0,
                ptb_sent: 2,
                ptb_dropped: 2
            }
        );
    }
}
