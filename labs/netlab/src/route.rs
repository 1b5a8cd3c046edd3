//! Routers in namespaces: forwarding, and multipath (ECMP) routes hashed on the 5-tuple, as a
//! datacenter or border router spreads flows over several next hops (scale-out behind ECMP).

use std::net::IpAddr;

use crate::{Netns, Result};

/// One next hop of a route: a gateway address and the interface it is reached through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextHop<'a> {
    /// The next hop's address (same family as the route's prefix).
    pub via: IpAddr,
    /// The interface toward it.
    pub dev: &'a str,
}

/// Makes `ns` a router: IPv4 and IPv6 forwarding on, reverse-path filtering off (with ECMP one
/// direction of a flow may arrive on an interface its replies do not leave by), and the
/// multipath hash over the 5-tuple (`fib_multipath_hash_policy=1`, "layer 4") in both
/// families, so flows between the same two hosts spread over the next hops.
pub fn make_router(ns: &Netns) -> Result<()> {
    for setting in [
        "net.ipv4.ip_forward=1",
        "net.ipv6.conf.all.forwarding=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        "net.ipv4.fib_multipath_hash_policy=1",
        "net.ipv6.fib_multipath_hash_policy=1",
    ] {
        ns.exec("sysctl", &["-qw", setting])?;
    }
    Ok(())
}

/// Installs (or replaces: `ip route replace`) the route to `prefix` in `ns` over `hops`, in
/// routing table `table` (the main table when `None`). One next hop makes an ordinary route,
/// several an equal-cost multipath route. Replacing an ECMP route by one without a next hop
/// is what a routing daemon does when BFD or BGP declares that next hop down.
pub fn route_via(ns: &Netns, prefix: &str, hops: &[NextHop<'_>], table: Option<u32>) -> Result<()> {
    let family = if prefix.contains(':') { "-6" } else { "-4" };
    let table = table.map(|t| t.to_string());
    let vias: Vec<String> = hops.iter().map(|h| h.via.to_string()).collect();
    let mut args = vec![family, "route", "replace", prefix];
    if let Some(t) = &table {
        args.extend(["table", t.as_str()]);
    }
    match hops {
        [one] => args.extend(["via", vias[0].as_str(), "dev", one.dev]),
        _ => {
            for (hop, via) in hops.iter().zip(&vias) {
                args.extend([
                    "nexthop",
                    "via",
                    via.as_str(),
                    "dev",
                    hop.dev,
                    "weight",
                    "1",
                ]);
            }
        }
    }
    ns.ip(&args)?;
    Ok(())
}

/// Adds a policy-routing rule in `ns`: packets carrying firewall mark `mark` look up `table`
/// (in both families).
pub fn mark_rule(ns: &Netns, mark: u32, table: u32) -> Result<()> {
    let (mark, table) = (mark.to_string(), table.to_string());
    for family in ["-4", "-6"] {
        ns.ip(&[family, "rule", "add", "fwmark", &mark, "lookup", &table])?;
    }
    Ok(())
}

/// Removes every rule [`mark_rule`] added for `mark` in `ns` (both families).
pub fn clear_mark_rules(ns: &Netns, mark: u32) -> Result<()> {
    let mark = mark.to_string();
    for family in ["-4", "-6"] {
        while ns.ip(&[family, "rule", "del", "fwmark", &mark]).is_ok() {}
    }
    Ok(())
}
