//! Token buckets per key (a source or destination address) under one global bucket, with the
//! per-key state in a bounded set-associative table.
//!
//! A responder or an ICMP sender facing the Internet meets keys an attacker chooses: spoofed
//! sources by the hundred thousand. So the cost of a key never depends on how many keys are
//! tracked:
//! - **Global first.** An empty global bucket refuses at once, before the table is read: a flood
//!   beyond the global rate costs one comparison per packet.
//! - **A set per key.** A keyed hash (seeded from the OS's random source, so an attacker cannot
//!   aim at one set) picks a set of [`WAYS`] slots. Lookup, insertion and eviction read that set
//!   only; [`LimiterStats::slots_examined`] counts every slot read.
//! - **A full set** gives up a slot whose bucket has refilled (it holds nothing a fresh bucket
//!   would not), else, by [`WhenFull`], the slot used least recently, or refuses the new key.
//!
//! Buckets count credit in nanoseconds, like Linux's `inet_peer_xrlim_allow`: a token costs
//! `interval` ns of credit, and the credit grows by one per nanosecond up to `interval × burst`.

use std::hash::{BuildHasher, Hash};

use crate::cache::KeyHashBuilder;
use crate::Nanos;

/// Slots per set: the most slots one key ever costs to find, insert or evict.
pub const WAYS: usize = 4;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A rate and a burst, as one token's cost and the bucket's capacity in nanoseconds of credit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    interval: u64,
    cap: u64,
}

impl Limit {
    /// `rate` tokens per second sustained, `burst` at once (both at least 1; a rate above 10⁹
    /// per second does not limit).
    pub fn per_second(rate: u32, burst: u32) -> Self {
        Self::every(NANOS_PER_SEC / u64::from(rate.max(1)), burst)
    }

    /// One token per `interval_ns`, `burst` at once (at least 1; an interval of 0 does not
    /// limit).
    pub fn every(interval_ns: u64, burst: u32) -> Self {
        Self {
            interval: interval_ns,
            cap: interval_ns.saturating_mul(u64::from(burst.max(1))),
        }
    }
}

/// One token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    credit: u64,
    last: Nanos,
}

impl Bucket {
    /// A full bucket.
    pub fn full(limit: &Limit, now: Nanos) -> Self {
        Self {
            credit: limit.cap,
            last: now,
        }
    }

    /// The credit at `now`, refilled (not stored).
    fn credit_at(&self, limit: &Limit, now: Nanos) -> u64 {
        self.credit
            .saturating_add(now.saturating_sub(self.last))
            .min(limit.cap)
    }

    /// Whether the bucket is full again at `now`: it then holds nothing a fresh bucket would not.
    fn is_full(&self, limit: &Limit, now: Nanos) -> bool {
        self.credit_at(limit, now) >= limit.cap
    }

    /// Whether a token is there at `now` (nothing taken).
    pub fn has_token(&self, limit: &Limit, now: Nanos) -> bool {
        self.credit_at(limit, now) >= limit.interval
    }

    /// Takes a token if there is one at `now`; true when it did.
    pub fn take(&mut self, limit: &Limit, now: Nanos) -> bool {
        self.credit = self.credit_at(limit, now);
        self.last = self.last.max(now);
        if self.credit < limit.interval {
            return false;
        }
        self.credit -= limit.interval;
        true
    }
}

/// What a full set does with a new key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Forget the key used least recently, and track the new one (a responder: a flood of new
    /// sources costs old ones their state, never the table its bound).
    EvictOldest,
    /// Refuse the new key until a bucket of its set has refilled.
    Refuse,
}

/// The answer of [`RateLimiter::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed; both tokens taken.
    Allowed,
    /// The global bucket is empty.
    Global,
    /// The key's own bucket is empty.
    PerKey,
    /// The key's set is full of buckets still in use ([`WhenFull::Refuse`]).
    TableFull,
}

/// Counters of a [`RateLimiter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LimiterStats {
    /// Allowed.
    pub allowed: u64,
    /// Refused by the global bucket.
    pub global_limited: u64,
    /// Refused by the key's own bucket.
    pub key_limited: u64,
    /// Refused because the key's set was full ([`WhenFull::Refuse`]).
    pub table_full: u64,
    /// Keys forgotten while their bucket was still in use, to make room for a new key
    /// ([`WhenFull::EvictOldest`]).
    pub evicted: u64,
    /// Table slots read, over all checks: at most [`WAYS`] per check.
    pub slots_examined: u64,
}

#[derive(Debug, Clone, Copy)]
struct Slot<K> {
    key: K,
    bucket: Bucket,
}

/// Per-key token buckets under a global one, in a bounded set-associative table (the module
/// docs say why).
#[derive(Debug, Clone)]
pub struct RateLimiter<K> {
    per_key: Option<Limit>,
    global: Limit,
    global_bucket: Bucket,
    when_full: WhenFull,
    slots: Box<[Option<Slot<K>>]>,
    sets: usize,
    ways: usize,
    len: usize,
    hasher: KeyHashBuilder,
    stats: LimiterStats,
}

impl<K: Hash + Eq + Copy> RateLimiter<K> {
    /// A limiter whose keys are limited by `per_key` (`None`: only the global limit, and no
    /// table), all of them together by `global`, tracking at most `max_keys` keys (at least 1).
    /// The set hash is seeded from the OS's random source. Both buckets start full at `now`.
    pub fn new(
        per_key: Option<Limit>,
        global: Limit,
        max_keys: usize,
        when_full: WhenFull,
        now: Nanos,
    ) -> Self {
        Self::with_hasher(
            per_key,
            global,
            max_keys,
            when_full,
            now,
            KeyHashBuilder::random(),
        )
    }

    /// [`RateLimiter::new`] with a given set hash (reproducible tests).
    pub fn with_hasher(
        per_key: Option<Limit>,
        global: Limit,
        max_keys: usize,
        when_full: WhenFull,
        now: Nanos,
        hasher: KeyHashBuilder,
    ) -> Self {
        let max_keys = if per_key.is_some() {
            max_keys.max(1)
        } else {
            0
        };
        let ways = WAYS.min(max_keys);
        let sets = max_keys.checked_div(ways).unwrap_or(0);
        Self {
            per_key,
            global,
            global_bucket: Bucket::full(&global, now),
            when_full,
            slots: vec![None; sets * ways].into_boxed_slice(),
            sets,
            ways,
            len: 0,
            hasher,
            stats: LimiterStats::default(),
        }
    }

    /// Keys tracked now: never more than [`RateLimiter::capacity`].
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most keys tracked at once: `max_keys` rounded down to whole sets.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> LimiterStats {
        self.stats
    }

    /// Whether `key` may have one more at `now`; takes its token and a global one when it may.
    pub fn check(&mut self, key: K, now: Nanos) -> Verdict {
        let verdict = self.decide(key, now);
        let counter = match verdict {
            Verdict::Allowed => &mut self.stats.allowed,
            Verdict::Global => &mut self.stats.global_limited,
            Verdict::PerKey => &mut self.stats.key_limited,
            Verdict::TableFull => &mut self.stats.table_full,
        };
        *counter += 1;
        verdict
    }

    fn decide(&mut self, key: K, now: Nanos) -> Verdict {
        // An empty global bucket answers before the table is read.
        if !self.global_bucket.has_token(&self.global, now) {
            return Verdict::Global;
        }
        if let Some(limit) = self.per_key {
            let Some(i) = self.slot_for(key, &limit, now) else {
                return Verdict::TableFull;
            };
            let slot = self.slots[i].get_or_insert(Slot {
                key,
                bucket: Bucket::full(&limit, now),
            });
            if !slot.bucket.take(&limit, now) {
                return Verdict::PerKey;
            }
        }
        self.global_bucket.take(&self.global, now);
        Verdict::Allowed
    }

    /// The slot index holding `key`, or the one it may take (emptied), reading its set only.
    fn slot_for(&mut self, key: K, limit: &Limit, now: Nanos) -> Option<usize> {
        let hash = self.hasher.hash_one(key);
        // Multiply-shift onto [0, sets): any set count, no modulo bias worth the name.
        let set = ((u128::from(hash) * self.sets as u128) >> 64) as usize;
        let base = set * self.ways;
        let mut free = None;
        let mut refilled = None;
        let mut oldest: Option<(usize, Nanos)> = None;
        for i in base..base + self.ways {
            self.stats.slots_examined += 1;
            match &self.slots[i] {
                Some(s) if s.key == key => return Some(i),
                Some(s) => {
                    if refilled.is_none() && s.bucket.is_full(limit, now) {
                        refilled = Some(i);
                    }
                    if oldest.is_none_or(|(_, t)| s.bucket.last < t) {
                        oldest = Some((i, s.bucket.last));
                    }
                }
                None => free = free.or(Some(i)),
            }
        }
        if let Some(i) = free {
            self.len += 1;
            return Some(i);
        }
        let i = match (refilled, self.when_full, oldest) {
            (Some(i), _, _) => i,
            (None, WhenFull::EvictOldest, Some((i, _))) => {
                self.stats.evicted += 1;
                i
            }
            _ => return None,
        };
        self.slots[i] = None;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    const MS: u64 = 1_000_000;

    fn ip(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0xc612_0000u32.wrapping_add(n)))
    }

    fn limiter(max_keys: usize, when_full: WhenFull) -> RateLimiter<IpAddr> {
        RateLimiter::with_hasher(
            Some(Limit::per_second(10, 3)),
            Limit::per_second(1_000_000, 1_000_000),
            max_keys,
            when_full,
            0,
            KeyHashBuilder::with_seed(3),
        )
    }

    #[test]
    fn a_key_gets_its_burst_then_its_rate() {
        let mut l = limiter(16, WhenFull::EvictOldest);
        let v: Vec<Verdict> = (0..4).map(|_| l.check(ip(1), 0)).collect();
        assert_eq!(v[..3], [Verdict::Allowed; 3]);
        assert_eq!(v[3], Verdict::PerKey);
        // 10 per second: one token every 100 ms.
        assert_eq!(l.check(ip(1), 99 * MS), Verdict::PerKey);
        assert_eq!(l.check(ip(1), 100 * MS), Verdict::Allowed);
        assert_eq!(l.check(ip(2), 100 * MS), Verdict::Allowed, "its own bucket");
        let s = l.stats();
        assert_eq!((s.allowed, s.key_limited), (5, 2));
    }

    #[test]
    fn the_global_bucket_holds_over_all_keys_and_answers_first() {
        let mut l = RateLimiter::with_hasher(
            Some(Limit::per_second(10, 3)),
            Limit::per_second(100, 5),
            64,
            WhenFull::EvictOldest,
            0,
            KeyHashBuilder::with_seed(3),
        );
        let allowed = (0..20)
            .filter(|&i| l.check(ip(i), 0) == Verdict::Allowed)
            .count();
        assert_eq!(allowed, 5);
        let s = l.stats();
        assert_eq!(s.global_limited, 15);
        // Refused by the global bucket before the table was read: only five keys went in.
        assert_eq!(l.len(), 5);
        // A key refused by its own bucket takes no global token.
        let mut l = RateLimiter::with_hasher(
            Some(Limit::per_second(10, 1)),
            Limit::per_second(100, 2),
            64,
            WhenFull::EvictOldest,
            0,
            KeyHashBuilder::with_seed(3),
        );
        assert_eq!(l.check(ip(1), 0), Verdict::Allowed);
        assert_eq!(l.check(ip(1), 0), Verdict::PerKey);
        assert_eq!(l.check(ip(2), 0), Verdict::Allowed);
        // 10 ms at 100/s: one global token back.
        assert_eq!(l.check(ip(3), 0), Verdict::Global);
        assert_eq!(l.check(ip(3), 10 * MS), Verdict::Allowed);
    }

    #[test]
    fn a_full_set_evicts_its_oldest_or_refuses() {
        // One set of four.
        let mut l = limiter(4, WhenFull::EvictOldest);
        for i in 0..4 {
            assert_eq!(l.check(ip(i), u64::from(i) * MS), Verdict::Allowed);
        }
        assert_eq!(l.len(), 4);
        assert_eq!(l.check(ip(9), 5 * MS), Verdict::Allowed);
        assert_eq!((l.len(), l.stats().evicted), (4, 1));
        // ip(0) was the oldest: it is gone and comes back with a full bucket (three more),
        // while ip(1)'s bucket kept its two.
        for _ in 0..2 {
            assert_eq!(l.check(ip(1), 6 * MS), Verdict::Allowed);
        }
        assert_eq!(l.check(ip(1), 6 * MS), Verdict::PerKey);

        let mut l = limiter(4, WhenFull::Refuse);
        for i in 0..4 {
            assert_eq!(l.check(ip(i), 0), Verdict::Allowed);
        }
        assert_eq!(l.check(ip(9), 0), Verdict::TableFull);
        // Once a bucket refilled (one token: 100 ms), its key holds nothing worth keeping.
        assert_eq!(l.check(ip(9), 100 * MS), Verdict::Allowed);
        assert_eq!(l.len(), 4);
        assert_eq!(l.stats().table_full, 1);
    }

    #[test]
    fn a_refilled_bucket_goes_before_the_oldest() {
        // One set of four; 10 per second (a token per 100 ms), burst 3.
        let mut l = limiter(4, WhenFull::EvictOldest);
        for i in 1..4 {
            for _ in 0..3 {
                assert_eq!(l.check(ip(i), 50 * MS), Verdict::Allowed);
            }
        }
        // ip(0) is used last (at 60 ms), but takes one token only: full again at 160 ms.
        assert_eq!(l.check(ip(0), 60 * MS), Verdict::Allowed);
        // At 250 ms ip(1..4), the oldest, still hold state (two tokens each); ip(0) holds none.
        assert_eq!(l.check(ip(7), 250 * MS), Verdict::Allowed);
        assert_eq!(
            l.stats().evicted,
            0,
            "a refilled bucket gives its slot up for free"
        );
        for i in 1..4 {
            for _ in 0..2 {
                assert_eq!(l.check(ip(i), 250 * MS), Verdict::Allowed);
            }
            assert_eq!(
                l.check(ip(i), 250 * MS),
                Verdict::PerKey,
                "ip({i}) kept its state"
            );
        }
    }

    #[test]
    fn no_check_reads_more_than_one_set() {
        let mut l = limiter(4096, WhenFull::EvictOldest);
        let mut checks = 0u64;
        for i in 0..100_000u32 {
            l.check(ip(i), u64::from(i) * 1_000);
            checks += 1;
            assert!(l.len() <= l.capacity());
        }
        assert_eq!(l.capacity(), 4096);
        assert!(l.stats().slots_examined <= checks * WAYS as u64);
        assert!(l.stats().evicted > 0);
    }

    #[test]
    fn without_a_per_key_limit_there_is_no_table() {
        let mut l: RateLimiter<IpAddr> =
            RateLimiter::new(None, Limit::per_second(1, 2), 4096, WhenFull::Refuse, 0);
        assert_eq!(l.capacity(), 0);
        assert_eq!(l.check(ip(1), 0), Verdict::Allowed);
        assert_eq!(l.check(ip(1), 0), Verdict::Allowed);
        assert_eq!(l.check(ip(2), 0), Verdict::Global);
        assert_eq!(l.stats().slots_examined, 0);
    }

    #[test]
    fn small_tables_keep_their_bound() {
        for max in 1..10 {
            let mut l = limiter(max, WhenFull::EvictOldest);
            for i in 0..50 {
                l.check(ip(i), 0);
                assert!(l.len() <= max && l.capacity() <= max, "max {max}");
            }
            assert!(l.capacity() >= 1);
        }
    }
}
