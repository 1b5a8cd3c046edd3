//! The PMTU cache: a per-destination table behind a counting Bloom filter
//! (SIGCOMM'26 §5.2 "Fast PMTU lookup").
//!
//! The gateway looks up the PMTU of every outbound packet, and most destinations have the
//! default PMTU (1500 B). So the table holds only non-default PMTUs, and a
//! [`CountingBloom`] holds the same keys: a lookup whose key misses the filter returns "default"
//! without touching the table. Only a filter hit (a real entry, or a false positive) reads the
//! table. Entries idle for [`CacheConfig::idle_timeout`] are removed by
//! [`PmtuCache::expire`], and from the filter with them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::time::Duration;

use crate::bloom::{mix64, CountingBloom};
use crate::prober::ConfigError;
use crate::Nanos;

/// A fast seeded hasher for cache keys: multiply-rotate per word, splitmix64 to finish.
#[derive(Debug, Clone)]
pub struct KeyHasher {
    state: u64,
}

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl KeyHasher {
    #[inline]
    fn step(&mut self, word: u64) {
        self.state = (self.state ^ word).wrapping_mul(MUL).rotate_left(29);
    }
}

impl Hasher for KeyHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0; 8];
            w.copy_from_slice(c);
            self.step(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.step(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.step(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.step(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.step(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.step(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.step(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        mix64(self.state)
    }
}

/// Builds [`KeyHasher`]s from one seed, random per cache so that keys an attacker picks do not
/// collide on every gateway alike.
#[derive(Debug, Clone, Copy)]
pub struct KeyHashBuilder {
    seed: u64,
}

impl KeyHashBuilder {
    /// A builder with a seed from the OS's random source.
    pub fn random() -> Self {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0);
        Self { seed: h.finish() }
    }

    /// A builder with a fixed seed (reproducible measurements).
    pub fn with_seed(seed: u64) -> Self {
        Self { seed }
    }
}

impl BuildHasher for KeyHashBuilder {
    type Hasher = KeyHasher;

    #[inline]
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher { state: self.seed }
    }
}

/// Settings of a [`PmtuCache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The PMTU of destinations not in the table (the eMTU, 1500 B on the Internet). Entries
    /// with this value are not stored.
    pub default_pmtu: u16,
    /// Bloom filter counters (SIGCOMM'26: 64 K).
    pub counters: usize,
    /// Bloom filter hash functions (SIGCOMM'26: 3).
    pub hashes: u32,
    /// An entry not looked up for this long is removed by [`PmtuCache::expire`].
    pub idle_timeout: Duration,
    /// Entries at most; [`PmtuCache::insert`] refuses more.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            default_pmtu: 1500,
            counters: 1 << 16,
            hashes: 3,
            idle_timeout: Duration::from_secs(1800),
            max_entries: 1 << 16,
        }
    }
}

/// The table is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("PMTU cache full ({0} entries)")]
pub struct CacheFull(pub usize);

/// Counters of a [`PmtuCache`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups through [`PmtuCache::lookup`].
    pub lookups: u64,
    /// Lookups the filter answered alone (certainly default).
    pub filter_negatives: u64,
    /// Lookups that read the table.
    pub table_probes: u64,
    /// Table reads that found nothing: the filter's false positives.
    pub false_positives: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    pmtu: u16,
    last_used: Nanos,
}

/// Per-destination PMTUs behind a counting Bloom filter (SIGCOMM'26 §5.2).
#[derive(Debug, Clone)]
pub struct PmtuCache<K = IpAddr> {
    cfg: CacheConfig,
    hasher: KeyHashBuilder,
    filter: CountingBloom,
    table: HashMap<K, Entry, KeyHashBuilder>,
    idle: Nanos,
    stats: CacheStats,
}

impl<K: Hash + Eq + Clone> PmtuCache<K> {
    /// An empty cache with a random hash seed.
    pub fn new(cfg: CacheConfig) -> Result<Self, ConfigError> {
        Self::with_hasher(cfg, KeyHashBuilder::random())
    }

    /// An empty cache with the given hash seed.
    pub fn with_hasher(cfg: CacheConfig, hasher: KeyHashBuilder) -> Result<Self, ConfigError> {
        let filter = CountingBloom::new(cfg.counters, cfg.hashes)?;
        if cfg.max_entries == 0 {
            return Err(ConfigError::Zero("max_entries"));
        }
        let idle = u64::try_from(cfg.idle_timeout.as_nanos()).unwrap_or(u64::MAX);
        Ok(Self {
            table: HashMap::with_hasher(hasher),
            cfg,
            hasher,
            filter,
            idle,
            stats: CacheStats::default(),
        })
    }

    /// The settings.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The filter (for inspection).
    pub fn filter(&self) -> &CountingBloom {
        &self.filter
    }

    /// Counters so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Entries with a non-default PMTU.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether every destination has the default PMTU.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    #[inline]
    fn hash(&self, key: &K) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Records `pmtu` for `key`. The default PMTU removes the entry instead (the filter holds
    /// only non-default PMTUs).
    pub fn insert(&mut self, key: K, pmtu: u16, now: Nanos) -> Result<(), CacheFull> {
        if pmtu == self.cfg.default_pmtu {
            self.remove(&key);
            return Ok(());
        }
        if let Some(e) = self.table.get_mut(&key) {
            e.pmtu = pmtu;
            e.last_used = now;
            return Ok(());
        }
        if self.table.len() >= self.cfg.max_entries {
            return Err(CacheFull(self.table.len()));
        }
        let h = self.hash(&key);
        self.filter.insert(h);
        self.table.insert(
            key,
            Entry {
                pmtu,
                last_used: now,
            },
        );
        Ok(())
    }

    /// Forgets `key`; returns its PMTU if it had one.
    pub fn remove(&mut self, key: &K) -> Option<u16> {
        let e = self.table.remove(key)?;
        let h = self.hash(key);
        self.filter.remove(h);
        Some(e.pmtu)
    }

    /// The PMTU stored for `key`, if any. A key that misses the filter returns `None` without
    /// reading the table. Does not count as use (see [`PmtuCache::lookup`]).
    #[inline]
    pub fn get(&self, key: &K) -> Option<u16> {
        if !self.filter.contains(self.hash(key)) {
            return None;
        }
        self.table.get(key).map(|e| e.pmtu)
    }

    /// The PMTU to use for `key`: its entry, or the default. Marks the entry used at `now`
    /// and counts the lookup in [`CacheStats`]. A filter miss reads no table.
    #[inline]
    pub fn lookup(&mut self, key: &K, now: Nanos) -> u16 {
        self.stats.lookups += 1;
        if !self.filter.contains(self.hash(key)) {
            self.stats.filter_negatives += 1;
            return self.cfg.default_pmtu;
        }
        self.stats.table_probes += 1;
        match self.table.get_mut(key) {
            Some(e) => {
                e.last_used = now;
                e.pmtu
            }
            None => {
                self.stats.false_positives += 1;
                self.cfg.default_pmtu
            }
        }
    }

    /// Removes entries not used for [`CacheConfig::idle_timeout`], from the table and the
    /// filter; returns how many.
    pub fn expire(&mut self, now: Nanos) -> usize {
        let idle = self.idle;
        let stale: Vec<K> = self
            .table
            .iter()
            .filter(|(_, e)| now.saturating_sub(e.last_used) > idle)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &stale {
            self.remove(k);
        }
        stale.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const SEC: u64 = 1_000_000_000;

    /// A destination address numbered `n` (distinct for distinct `n`), from the benchmark range
    /// 198.18.0.0/15 and on into other space: keys only, never sent to.
    fn addr(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0xc612_0000u32.wrapping_add(n)))
    }

    #[test]
    fn only_non_default_pmtus_are_stored() {
        let mut c = PmtuCache::new(CacheConfig::default()).unwrap();
        c.insert(addr(1), 1400, 0).unwrap();
        c.insert(addr(2), 1500, 0).unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c.get(&addr(1)), Some(1400));
        assert_eq!(c.get(&addr(2)), None);
        assert_eq!(c.lookup(&addr(2), 0), 1500);
        // Back to the default: the entry and its filter counters go.
        c.insert(addr(1), 1500, 0).unwrap();
        assert!(c.is_empty());
        assert_eq!(c.filter().occupied(), 0);
    }

    #[test]
    fn a_filter_miss_reads_no_table() {
        let mut c = PmtuCache::new(CacheConfig::default()).unwrap();
        c.insert(addr(1), 9000, 0).unwrap();
        assert_eq!(c.lookup(&addr(1), 0), 9000);
        assert_eq!(c.stats().table_probes, 1);
        for i in 100..1100 {
            assert_eq!(c.lookup(&addr(i), 0), 1500);
        }
        let s = c.stats();
        assert_eq!(s.lookups, 1001);
        // Every lookup the filter rejected cost no table read.
        assert_eq!(s.filter_negatives + s.table_probes, s.lookups);
        assert_eq!(s.table_probes, 1 + s.false_positives);
        assert!(s.filter_negatives >= 990, "{s:?}");
    }

    #[test]
    fn idle_entries_expire_from_table_and_filter() {
        let mut c = PmtuCache::new(CacheConfig {
            idle_timeout: Duration::from_secs(60),
            ..CacheConfig::default()
        })
        .unwrap();
        c.insert(addr(1), 1400, 0).unwrap();
        c.insert(addr(2), 1280, 0).unwrap();
        // addr(1) stays in use; addr(2) does not.
        assert_eq!(c.lookup(&addr(1), 50 * SEC), 1400);
        assert_eq!(c.expire(61 * SEC), 1);
        assert_eq!(c.get(&addr(1)), Some(1400));
        assert_eq!(c.get(&addr(2)), None);
        assert_eq!(c.expire(200 * SEC), 1);
        assert!(c.is_empty());
        assert_eq!(c.filter().occupied(), 0);
    }

    #[test]
    fn table_is_bounded() {
        let mut c = PmtuCache::new(CacheConfig {
            max_entries: 2,
            ..CacheConfig::default()
        })
        .unwrap();
        c.insert(addr(1), 1400, 0).unwrap();
        c.insert(addr(2), 1400, 0).unwrap();
        assert_eq!(c.insert(addr(3), 1400, 0), Err(CacheFull(2)));
        // Updating an existing entry still works.
        c.insert(addr(2), 1300, 0).unwrap();
        assert_eq!(c.get(&addr(2)), Some(1300));
    }

    /// The filter's false-positive rate on absent keys is what the textbook formula predicts,
    /// so a miss almost never reads the table. (The lookup times are measured by
    /// `cargo xtask bench pmtu-cache`; they depend on the machine, this does not.)
    #[test]
    fn false_positive_rate_matches_theory() {
        const ABSENT: u32 = 200_000;
        for entries in [800u32, 1000, 4000] {
            let cfg = CacheConfig {
                counters: 1 << 16,
                hashes: 3,
                max_entries: entries as usize,
                ..CacheConfig::default()
            };
            let mut c = PmtuCache::with_hasher(cfg, KeyHashBuilder::with_seed(1)).unwrap();
            for i in 0..entries {
                c.insert(addr(i), 1400, 0).unwrap();
            }
            // Absent keys: numbered after the present ones. Every one must answer "default".
            for i in 0..ABSENT {
                assert_eq!(c.lookup(&addr(entries + 1 + i), 0), 1500);
            }
            let s = c.stats();
            assert_eq!(s.lookups, u64::from(ABSENT));
            let fp_rate = s.false_positives as f64 / f64::from(ABSENT);
            let expected = c.filter().expected_fp_rate(c.len());
            assert!(
                fp_rate <= expected * 3.0 + 5e-5,
                "entries {entries}: fp {fp_rate} vs theory {expected} ({s:?})"
            );
        }
    }

    proptest! {
        /// The cache never answers "default" for a key it holds a non-default PMTU for.
        #[test]
        fn no_false_negatives(ops in proptest::collection::vec((0u32..50, 1200u16..1600), 0..300),
                              counters in 1usize..200) {
            let mut c = PmtuCache::new(CacheConfig { counters, ..CacheConfig::default() }).unwrap();
            let mut model: HashMap<IpAddr, u16> = HashMap::new();
            for (i, (k, pmtu)) in ops.into_iter().enumerate() {
                let key = addr(k);
                if i % 5 == 4 {
                    c.remove(&key);
                    model.remove(&key);
                } else {
                    c.insert(key, pmtu, 0).unwrap();
                    if pmtu == 1500 { model.remove(&key); } else { model.insert(key, pmtu); }
                }
                for (k, &v) in &model {
                    prop_assert_eq!(c.get(k), Some(v));
                    prop_assert_eq!(c.lookup(k, 0), v);
                }
            }
            prop_assert_eq!(c.len(), model.len());
        }
    }
}
