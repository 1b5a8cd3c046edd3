//! A stateful source NAT (NAPT) for IPv4 and IPv6: inside hosts share one public address per
//! family; each inside (address, port, protocol) gets a public port from a pool, kept for as
//! long as the NAT runs (endpoint-independent mapping, RFC 4787 REQ-1), and replies to that
//! public port are translated back. Addresses, ports and checksums are rewritten in place
//! (RFC 1624 incremental updates: the payload is never read, so a merged 9000 B packet costs
//! what a 1500 B one does, SIGCOMM'26 §7.3).

use hashbrown::HashMap;
use pxio::wire::{ip_proto, FlowKey, Headers};

use crate::{rewrite, Frame, Side, Verdict};

/// NAT settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatConfig {
    /// The public IPv4 address inside hosts are translated to.
    pub public_v4: [u8; 4],
    /// The public IPv6 address (NAPT66 on the same rules).
    pub public_v6: [u8; 16],
    /// The first public port handed out.
    pub first_port: u16,
    /// The last public port handed out.
    pub last_port: u16,
}

impl Default for NatConfig {
    fn default() -> Self {
        Self {
            public_v4: [203, 0, 113, 1],
            public_v6: [
                0x20, 0x01, 0x0d, 0xb8, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
            ],
            first_port: 1024,
            last_port: 65535,
        }
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NatStats {
    /// Packets translated outbound.
    pub outbound: u64,
    /// Packets translated back inbound.
    pub inbound: u64,
    /// Mappings created.
    pub mappings: u64,
    /// Dropped: no free public port.
    pub no_port: u64,
    /// Dropped: neither TCP nor UDP (no ports to translate).
    pub not_tcp_udp: u64,
    /// Dropped: inbound to a public port with no mapping.
    pub no_mapping: u64,
    /// Dropped: headers could not be rewritten (shared buffer).
    pub unwritable: u64,
}

/// The inside endpoint a mapping belongs to.
fn inside_key(key: &FlowKey) -> FlowKey {
    FlowKey {
        dst: [0; 16],
        dport: 0,
        ..*key
    }
}

/// The stateful NAT.
pub struct Nat {
    cfg: NatConfig,
    /// Inside endpoint → public port.
    out: HashMap<FlowKey, u16>,
    /// (family, protocol, public port) → inside endpoint.
    back: HashMap<(bool, u8, u16), FlowKey>,
    /// Free public ports, per family and protocol (index: v6 * 2 + udp).
    free: [Vec<u16>; 4],
    stats: NatStats,
}

impl Nat {
    /// A NAT with every public port free.
    pub fn new(cfg: NatConfig) -> Self {
        // Handed out lowest first: pop from the end of a descending list.
        let ports: Vec<u16> = (cfg.first_port..=cfg.last_port).rev().collect();
        Self {
            free: [ports.clone(), ports.clone(), ports.clone(), ports],
            cfg,
            out: HashMap::new(),
            back: HashMap::new(),
            stats: NatStats::default(),
        }
    }

    fn pool(v6: bool, proto: u8) -> usize {
        usize::from(v6) * 2 + usize::from(proto == ip_proto::UDP)
    }

    /// Translates a packet from the inside: its source becomes the public address and the
    /// flow's public port (allocated on its first packet).
    pub fn outbound<B: Frame>(&mut self, pkt: &mut B, hdr: &Headers) -> Verdict {
        if hdr.proto != ip_proto::TCP && hdr.proto != ip_proto::UDP {
            self.stats.not_tcp_udp += 1;
            return Verdict::Drop;
        }
        let key = inside_key(&hdr.key);
        let port = match self.out.get(&key) {
            Some(&p) => p,
            None => {
                let Some(p) = self.free[Self::pool(key.v6, key.proto)].pop() else {
                    self.stats.no_port += 1;
                    return Verdict::Drop;
                };
                self.out.insert(key, p);
                self.back.insert((key.v6, key.proto, p), key);
                self.stats.mappings += 1;
                p
            }
        };
        let public: &[u8] = if hdr.v6 {
            &self.cfg.public_v6
        } else {
            &self.cfg.public_v4
        };
        if !rewrite(pkt, hdr, Side::Src, public, port) {
            self.stats.unwritable += 1;
            return Verdict::Drop;
        }
        self.stats.outbound += 1;
        Verdict::Forward
    }

    /// Translates a reply from the outside back to the inside endpoint its public port maps to.
    pub fn inbound<B: Frame>(&mut self, pkt: &mut B, hdr: &Headers) -> Verdict {
        let Some(inside) = self.back.get(&(hdr.v6, hdr.proto, hdr.key.dport)).copied() else {
            self.stats.no_mapping += 1;
            return Verdict::Drop;
        };
        let alen = if hdr.v6 { 16 } else { 4 };
        if !rewrite(pkt, hdr, Side::Dst, &inside.src[..alen], inside.sport) {
            self.stats.unwritable += 1;
            return Verdict::Drop;
        }
        self.stats.inbound += 1;
        Verdict::Forward
    }

    /// The public port of an inside endpoint (address, port, protocol of `key`), if mapped.
    pub fn mapping(&self, key: &FlowKey) -> Option<u16> {
        self.out.get(&inside_key(key)).copied()
    }

    /// Every mapping: inside endpoint and public port.
    pub fn mappings(&self) -> impl Iterator<Item = (&FlowKey, u16)> {
        self.out.iter().map(|(k, &p)| (k, p))
    }

    /// The counters.
    pub fn stats(&self) -> &NatStats {
        &self.stats
    }
}
