//! An L4 load balancer: connections to a virtual IP and port are spread over a backend pool
//! with Maglev consistent hashing (Eisenbud et al., NSDI'16 §3.4), and a connection stays on the
//! backend it got first (connection affinity) even when the pool changes. The destination
//! address is rewritten to the backend's (full NAT toward the backend, incremental checksums),
//! for IPv4 and IPv6 alike.

use hashbrown::HashMap;
use pxio::wire::{FlowKey, Headers};

use crate::{fnv1a, rewrite, Frame, Side, Verdict};

/// Size of the Maglev lookup table: a prime, about 100 times the largest pool (NSDI'16 §3.4).
pub const TABLE_SIZE: usize = 65_537;

/// One backend, reachable on both families.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Backend {
    /// Its IPv4 address.
    pub v4: [u8; 4],
    /// Its IPv6 address.
    pub v6: [u8; 16],
    /// The port it serves on.
    pub port: u16,
}

/// Load-balancer settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbConfig {
    /// The virtual IPv4 address.
    pub vip_v4: [u8; 4],
    /// The virtual IPv6 address.
    pub vip_v6: [u8; 16],
    /// The virtual port.
    pub vip_port: u16,
    /// The pool.
    pub backends: Vec<Backend>,
}

impl LbConfig {
    /// A VIP and `n` backends (10.1.0.x and 2001:db8:1::x, port 8080).
    pub fn with_backends(vip_v4: [u8; 4], vip_v6: [u8; 16], vip_port: u16, n: u8) -> Self {
        Self {
            vip_v4,
            vip_v6,
            vip_port,
            backends: (1..=n)
                .map(|i| Backend {
                    v4: [10, 1, 0, i],
                    v6: [0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, i],
                    port: 8080,
                })
                .collect(),
        }
    }
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LbStats {
    /// Packets sent to a backend.
    pub balanced: u64,
    /// Connections seen (affinity entries made).
    pub connections: u64,
    /// Packets not for the VIP, passed on unchanged.
    pub passed: u64,
    /// Dropped: the pool is empty.
    pub no_backend: u64,
    /// Dropped: headers could not be rewritten (shared buffer).
    pub unwritable: u64,
}

/// The Maglev lookup table for `backends` (NSDI'16 Pseudocode 1): each backend fills the
/// table in its own permutation order, in turns, so each gets an almost equal share and a
/// change of the pool moves few entries.
pub fn maglev_table(backends: &[Backend]) -> Vec<u16> {
    let m = TABLE_SIZE as u64;
    let mut table = vec![u16::MAX; TABLE_SIZE];
    if backends.is_empty() {
        return table;
    }
    let perm: Vec<(u64, u64)> = backends
        .iter()
        .map(|b| {
            let name = [&b.v4[..], &b.v6[..], &b.port.to_be_bytes()[..]].concat();
            (fnv1a(1, &name) % m, fnv1a(2, &name) % (m - 1) + 1)
        })
        .collect();
    let mut next = vec![0u64; backends.len()];
    let mut filled = 0;
    'fill: loop {
        for (i, &(offset, skip)) in perm.iter().enumerate() {
            let mut c = (offset + next[i] * skip) % m;
            while table[c as usize] != u16::MAX {
                next[i] += 1;
                c = (offset + next[i] * skip) % m;
            }
            table[c as usize] = i as u16;
            next[i] += 1;
            filled += 1;
            if filled == TABLE_SIZE {
                break 'fill;
            }
        }
    }
    table
}

/// The load balancer.
pub struct Lb {
    cfg: LbConfig,
    table: Vec<u16>,
    /// Connection (5-tuple) → backend index: affinity.
    conns: HashMap<FlowKey, u16>,
    stats: LbStats,
}

impl Lb {
    /// A load balancer over `cfg.backends`.
    pub fn new(cfg: LbConfig) -> Self {
        Self {
            table: maglev_table(&cfg.backends),
            cfg,
            conns: HashMap::new(),
            stats: LbStats::default(),
        }
    }

    /// Replaces the pool; connections keep the backend they had (while it is in the pool: a
    /// removed backend's connections move to the table's choice).
    pub fn set_backends(&mut self, backends: Vec<Backend>) {
        let old = std::mem::replace(&mut self.cfg.backends, backends);
        self.table = maglev_table(&self.cfg.backends);
        let new = &self.cfg.backends;
        self.conns.retain(
            |_, b| match new.iter().position(|x| *x == old[*b as usize]) {
                Some(i) => {
                    *b = i as u16;
                    true
                }
                None => false,
            },
        );
    }

    fn is_vip(&self, hdr: &Headers) -> bool {
        let k = &hdr.key;
        k.dport == self.cfg.vip_port
            && if k.v6 {
                k.dst == self.cfg.vip_v6
            } else {
                k.dst[..4] == self.cfg.vip_v4
            }
    }

    /// The backend for connection `key`: its affinity entry, else Maglev's choice.
    fn backend_for(&mut self, key: &FlowKey) -> Option<u16> {
        if let Some(&b) = self.conns.get(key) {
            return Some(b);
        }
        let mut k = [0u8; 37];
        k[..16].copy_from_slice(&key.src);
        k[16..32].copy_from_slice(&key.dst);
        k[32..34].copy_from_slice(&key.sport.to_be_bytes());
        k[34..36].copy_from_slice(&key.dport.to_be_bytes());
        k[36] = key.proto;
        let b = self.table[(fnv1a(0, &k) % TABLE_SIZE as u64) as usize];
        if b == u16::MAX {
            return None;
        }
        self.conns.insert(*key, b);
        self.stats.connections += 1;
        Some(b)
    }

    /// Sends a packet for the VIP to its connection's backend; anything else passes unchanged.
    pub fn process<B: Frame>(&mut self, pkt: &mut B, hdr: &Headers) -> Verdict {
        if !self.is_vip(hdr) {
            self.stats.passed += 1;
            return Verdict::Forward;
        }
        let Some(b) = self.backend_for(&hdr.key) else {
            self.stats.no_backend += 1;
            return Verdict::Drop;
        };
        let be = self.cfg.backends[usize::from(b)];
        let addr: &[u8] = if hdr.v6 { &be.v6 } else { &be.v4 };
        if !rewrite(pkt, hdr, Side::Dst, addr, be.port) {
            self.stats.unwritable += 1;
            return Verdict::Drop;
        }
        self.stats.balanced += 1;
        Verdict::Forward
    }

    /// The backend a connection was given, if it was seen.
    pub fn backend_of(&self, key: &FlowKey) -> Option<Backend> {
        self.conns
            .get(key)
            .map(|&b| self.cfg.backends[usize::from(b)])
    }

    /// Every connection and its backend.
    pub fn connections(&self) -> impl Iterator<Item = (&FlowKey, Backend)> {
        self.conns
            .iter()
            .map(|(k, &b)| (k, self.cfg.backends[usize::from(b)]))
    }

    /// The counters.
    pub fn stats(&self) -> &LbStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maglev_spreads_evenly_and_moves_little_when_a_backend_goes() {
        let cfg = LbConfig::with_backends([192, 0, 2, 1], [0; 16], 80, 10);
        let t = maglev_table(&cfg.backends);
        let mut share = [0usize; 10];
        for &b in &t {
            share[usize::from(b)] += 1;
        }
        // NSDI'16 §3.4: each backend gets within a few percent of 1/N.
        for s in share {
            assert!((6200..=6900).contains(&s), "share {s}");
        }
        let mut fewer = cfg.backends.clone();
        fewer.remove(3);
        let t2 = maglev_table(&fewer);
        let moved = t
            .iter()
            .zip(&t2)
            .filter(|(&a, &b)| a != 3 && fewer[usize::from(b)] != cfg.backends[usize::from(a)])
            .count();
        // Entries of the surviving backends mostly stay (the paper: a few percent move).
        assert!(moved < TABLE_SIZE / 20, "{moved} entries moved");
    }
}
