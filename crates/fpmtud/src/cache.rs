//! The PMTU cache: a per-destination table behind a counting Bloom filter
//! (SIGCOMM'26 §5.2 "Fast PMTU lookup").
//!
//! The gateway looks up the PMTU of every outbound packet, and most destinations have the
//! default PMTU (1500 B). So the table holds only non-default PMTUs, and a
//! [`CountingBloom`] holds the same keys: a lookup whose key misses the filter returns "default"
//! without touching the table. Only a filter hit (a real entry, or a false positive) reads the
//! table.
//!
//! **Aging.** A lowered path MTU is forgotten [`CacheConfig::max_age`] after it was stored, so
//! the path is tried at the default again (RFC 1191 §6.3, RFC 8201 §4: about 10 minutes). The
//! age runs from when the value was stored, not from its last use: a destination in use is
//! looked up on every packet and would otherwise never age. A changed value restarts the age.
//! From the moment an entry is due, lookups answer the default; [`PmtuCache::expire`] then
//! removes due entries from the table and the filter, the oldest first, a bounded number per
//! call, from a queue in the order they were stored (no walk of the table).

use std::collections::{HashMap, VecDeque};
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
    /// How long a stored PMTU lasts, from when it was stored (RFC 1191 §6.3, RFC 8201 §4: 10
    /// minutes). Greater than zero.
    pub max_age: Duration,
    /// Entries at most; [`PmtuCache::insert`] refuses more.
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            default_pmtu: 1500,
            counters: 1 << 16,
            hashes: 3,
            max_age: Duration::from_secs(600),
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
    /// Entries removed by [`PmtuCache::expire`] because their age reached
    /// [`CacheConfig::max_age`].
    pub expired: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    pmtu: u16,
    /// When this value was stored.
    stored: Nanos,
}

/// What one [`PmtuCache::expire`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Entries removed.
    pub removed: usize,
    /// Queue records read (removed entries and stale records): at most the call's budget.
    pub examined: usize,
    /// Whether due records remain (the budget ran out first).
    pub more: bool,
}

/// Per-destination PMTUs behind a counting Bloom filter (SIGCOMM'26 §5.2).
#[derive(Debug, Clone)]
pub struct PmtuCache<K = IpAddr> {
    cfg: CacheConfig,
    hasher: KeyHashBuilder,
    filter: CountingBloom,
    table: HashMap<K, Entry, KeyHashBuilder>,
    /// `(stored, key)` in the order stored. A record whose entry has since been stored again
    /// (or removed) is stale and skipped; [`PmtuCache::insert`] compacts the queue when stale
    /// records outnumber live ones.
    queue: VecDeque<(Nanos, K)>,
    max_age: Nanos,
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
        if cfg.max_age.is_zero() {
            return Err(ConfigError::Zero("max_age"));
        }
        let max_age = u64::try_from(cfg.max_age.as_nanos()).unwrap_or(u64::MAX);
        Ok(Self {
            table: HashMap::with_hasher(hasher),
            queue: VecDeque::new(),
            cfg,
            hasher,
            filter,
            max_age,
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

    /// Whether an entry stored at `stored` is due at `now`.
    #[inline]
    fn is_due(&self, stored: Nanos, now: Nanos) -> bool {
        now.saturating_sub(stored) >= self.max_age
    }

    /// Records `pmtu` for `key` at `now`. The default PMTU removes the entry instead (the filter
    /// holds only non-default PMTUs). A new or changed value starts its age at `now`; the same
    /// value stored again keeps its age (a path MTU ages from when it was lowered).
    pub fn insert(&mut self, key: K, pmtu: u16, now: Nanos) -> Result<(), CacheFull> {
        if pmtu == self.cfg.default_pmtu {
            self.remove(&key);
            return Ok(());
        }
        let max_age = self.max_age;
        if let Some(e) = self.table.get_mut(&key) {
            // A due entry is gone for lookups: storing into it starts afresh.
            let due = now.saturating_sub(e.stored) >= max_age;
            if e.pmtu == pmtu && !due {
                return Ok(());
            }
            e.pmtu = pmtu;
            if e.stored != now {
                e.stored = now;
                self.enqueue(key, now);
            }
            return Ok(());
        }
        if self.table.len() >= self.cfg.max_entries {
            return Err(CacheFull(self.table.len()));
        }
        let h = self.hash(&key);
        self.filter.insert(h);
        self.table.insert(key.clone(), Entry { pmtu, stored: now });
        self.enqueue(key, now);
        Ok(())
    }

    /// Queues `(now, key)` for expiry. When stale records (of entries stored again or removed)
    /// make the queue twice the table, it keeps only live ones: one per entry, so the queue
    /// stays within twice the table and compaction costs O(1) per insert, amortised.
    fn enqueue(&mut self, key: K, now: Nanos) {
        if self.queue.len() >= 2 * self.table.len() + 64 {
            let table = &self.table;
            self.queue
                .retain(|(t, k)| table.get(k).is_some_and(|e| e.stored == *t));
        }
        self.queue.push_back((now, key));
    }

    /// Forgets `key`; returns its PMTU if it had one.
    pub fn remove(&mut self, key: &K) -> Option<u16> {
        let e = self.table.remove(key)?;
        let h = self.hash(key);
        self.filter.remove(h);
        Some(e.pmtu)
    }

    /// The PMTU stored for `key` and not yet due at `now`, if any. A key that misses the filter
    /// returns `None` without reading the table. Not counted in [`CacheStats`].
    #[inline]
    pub fn get(&self, key: &K, now: Nanos) -> Option<u16> {
        if !self.filter.contains(self.hash(key)) {
            return None;
        }
        self.table
            .get(key)
            .filter(|e| !self.is_due(e.stored, now))
            .map(|e| e.pmtu)
    }

    /// The PMTU to use for `key` at `now`: its entry, or the default once the entry is due (or
    /// when there is none). Counts the lookup in [`CacheStats`]; a filter miss reads no table.
    /// A lookup writes nothing: use does not keep an entry alive.
    #[inline]
    pub fn lookup(&mut self, key: &K, now: Nanos) -> u16 {
        self.stats.lookups += 1;
        // Most paths carry the default (it is never stored): with nothing stored, not even the
        // key is hashed.
        if self.table.is_empty() || !self.filter.contains(self.hash(key)) {
            self.stats.filter_negatives += 1;
            return self.cfg.default_pmtu;
        }
        self.stats.table_probes += 1;
        match self.table.get(key) {
            Some(e) if !self.is_due(e.stored, now) => e.pmtu,
            Some(_) => self.cfg.default_pmtu,
            None => {
                self.stats.false_positives += 1;
                self.cfg.default_pmtu
            }
        }
    }

    /// Removes entries whose age reached [`CacheConfig::max_age`] at `now`, from the table and
    /// the filter, the oldest first, reading at most `budget` queue records: the cost of a call
    /// is bounded whatever the table holds. [`Expired::more`] says whether due records remain.
    pub fn expire(&mut self, now: Nanos, budget: usize) -> Expired {
        let mut out = Expired::default();
        while let Some(&(stored, _)) = self.queue.front() {
            if !self.is_due(stored, now) {
                return out;
            }
            if out.examined == budget {
                out.more = true;
                return out;
            }
            out.examined += 1;
            let Some((stored, key)) = self.queue.pop_front() else {
                break;
            };
            // Stale when the entry was removed or stored again since.
            if self.table.get(&key).is_some_and(|e| e.stored == stored) {
                self.remove(&key);
                out.removed += 1;
                self.stats.expired += 1;
            }
        }
        out
    }

    /// When the oldest queued record falls due: the earliest an entry can expire (a stale record
    /// makes it early, never late). `None` when nothing is queued.
    pub fn next_due(&self) -> Option<Nanos> {
        self.queue
            .front()
            .map(|&(stored, _)| stored.saturating_add(self.max_age))
    }

    /// Records queued for expiry, live and stale (one live record per entry; stale ones are
    /// dropped when they reach the front, or when they make the queue twice the table).
    pub fn queued(&self) -> usize {
        self.queue.len()
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
        assert_eq!(c.get(&addr(1), 0), Some(1400));
        assert_eq!(c.get(&addr(2), 0), None);
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

    fn aging(max_age_s: u64) -> PmtuCache<IpAddr> {
        PmtuCache::new(CacheConfig {
            max_age: Duration::from_secs(max_age_s),
            ..CacheConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn entries_age_from_when_they_were_stored_not_from_their_use() {
        let mut c = aging(600);
        c.insert(addr(1), 1400, 0).unwrap();
        c.insert(addr(2), 1280, 10 * SEC).unwrap();
        // addr(1) is looked up every second: use does not keep it alive.
        for t in 0..600 {
            assert_eq!(c.lookup(&addr(1), t * SEC), 1400, "at {t} s");
            assert_eq!(c.expire(t * SEC, 16).removed, 0);
        }
        // Due at exactly 600 s: the default from then on, before and after expire runs.
        assert_eq!(c.lookup(&addr(1), 600 * SEC - 1), 1400);
        assert_eq!(c.lookup(&addr(1), 600 * SEC), 1500);
        assert_eq!(c.get(&addr(1), 600 * SEC), None);
        assert_eq!(c.get(&addr(2), 600 * SEC), Some(1280));
        assert_eq!(c.next_due(), Some(600 * SEC));
        let e = c.expire(600 * SEC, 16);
        assert_eq!((e.removed, e.more), (1, false));
        assert_eq!(c.next_due(), Some(610 * SEC));
        assert_eq!(c.len(), 1);
        assert_eq!(c.expire(610 * SEC, 16).removed, 1);
        assert!(c.is_empty());
        assert_eq!(c.next_due(), None);
        assert_eq!(c.filter().occupied(), 0);
        assert_eq!(c.stats().expired, 2);
    }

    #[test]
    fn a_new_lower_value_restarts_the_age_and_the_same_value_does_not() {
        let mut c = aging(600);
        c.insert(addr(1), 1400, 0).unwrap();
        // The same value again (another Packet Too Big saying 1400) keeps the age.
        c.insert(addr(1), 1400, 300 * SEC).unwrap();
        assert_eq!(c.lookup(&addr(1), 600 * SEC), 1500);
        c.insert(addr(2), 1400, 0).unwrap();
        c.insert(addr(2), 1280, 300 * SEC).unwrap();
        c.expire(600 * SEC, 16);
        assert_eq!(c.lookup(&addr(2), 899 * SEC), 1280);
        assert_eq!(c.expire(899 * SEC, 16).removed, 0);
        assert_eq!(c.lookup(&addr(2), 900 * SEC), 1500);
        assert_eq!(c.expire(900 * SEC, 16).removed, 1);
        // A due entry stored again with its old value starts afresh.
        c.insert(addr(3), 1400, 0).unwrap();
        c.insert(addr(3), 1400, 700 * SEC).unwrap();
        assert_eq!(c.lookup(&addr(3), 1000 * SEC), 1400);
        assert_eq!(c.expire(1000 * SEC, 16).removed, 0);
    }

    #[test]
    fn expire_reads_at_most_its_budget() {
        let mut c = aging(60);
        for i in 0..1000 {
            c.insert(addr(i), 1400, u64::from(i)).unwrap();
        }
        let mut removed = 0;
        let mut calls = 0;
        loop {
            let e = c.expire(100 * SEC, 64);
            assert!(e.examined <= 64, "{e:?}");
            removed += e.removed;
            calls += 1;
            if !e.more {
                break;
            }
        }
        assert_eq!((removed, calls), (1000, 16));
        assert!(c.is_empty());
        assert_eq!(c.queued(), 0);
    }

    #[test]
    fn the_expiry_queue_stays_within_twice_the_table() {
        let mut c = aging(600);
        // One destination lowered again and again: each store queues a record, the older ones
        // go stale.
        for i in 0..10_000u64 {
            c.insert(addr(1), 1400 - (i % 2) as u16 * 100, i).unwrap();
            assert!(c.queued() <= 2 * c.len() + 64, "{} queued", c.queued());
        }
        assert_eq!(c.lookup(&addr(1), 10_000 + 600 * SEC - 2), 1300);
        assert_eq!(c.expire(10_000 + 600 * SEC, 1000).removed, 1);
        assert!(c.is_empty());
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
        assert_eq!(c.get(&addr(2), 0), Some(1300));
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
                    prop_assert_eq!(c.get(k, 0), Some(v));
                    prop_assert_eq!(c.lookup(k, 0), v);
                }
            }
            prop_assert_eq!(c.len(), model.len());
        }
    }
}
