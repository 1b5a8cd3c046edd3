//! The flow table (SIGCOMM'26 §4.1, "Fast flow identification"): keyed by the RSS hash, every hit
//! verified against the full 5-tuple, fixed capacity, O(1).
//!
//! It is 4-way set associative: the hash picks a bucket of four entries; a miss takes a free
//! entry of the bucket, or evicts the one seen least recently (the caller flushes its items
//! first). Nothing allocates after construction.
//!
//! The bucket comes from [`key_hash`], a seeded hash of the 5-tuple, not from the NIC's RSS
//! hash. The gateway programs its ports with the symmetric Toeplitz key (`0x6d5a` repeated),
//! and with a key whose bits repeat every 16 the hash depends only on the XOR of the tuple's
//! 16-bit words: flows whose address and port rise together (a NAT pool; the merge
//! benchmark's trace, where flow i sends from 198.18.0.i, port 32768 + i) all hash alike, and
//! anyone can pick flows that do. Such flows fell into one bucket of four and evicted each
//! other on almost every burst. [`key_hash`] costs a few ns per lookup, and a flow is looked up
//! once per RX burst ([`Merger::rx_burst`](super::Merger::rx_burst)).

use crate::wire::FlowKey;

/// The flow-table hash of `key`: a folded-multiply hash (as in foldhash) of the addresses,
/// ports, protocol and IP version, keyed by `seed`, so that which flows collide cannot be
/// chosen from outside.
#[inline]
pub fn key_hash(key: &FlowKey, seed: u64) -> u32 {
    /// Multiplies into 128 bits and folds the halves: every input bit reaches most output bits.
    #[inline]
    fn fold_mul(a: u64, b: u64) -> u64 {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    }
    /// Fractional digits of pi: arbitrary odd-looking constants with no structure.
    const K: [u64; 4] = [
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
        0x082e_fa98_ec4e_6c89,
    ];
    let word = |bytes: &[u8; 16], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let rest = u64::from(key.sport)
        | u64::from(key.dport) << 16
        | u64::from(key.proto) << 32
        | u64::from(key.v6) << 40;
    let a = fold_mul(word(&key.src, 0) ^ seed, word(&key.src, 8) ^ K[0]);
    let b = fold_mul(word(&key.dst, 0) ^ K[1], word(&key.dst, 8) ^ K[2]);
    let h = fold_mul(a ^ rest ^ K[3], b ^ seed.rotate_left(32));
    (h ^ (h >> 32)) as u32
}

/// Entries per bucket.
pub const WAYS: usize = 4;

/// No item / no entry.
pub const NIL: u32 = u32::MAX;

/// Per-flow state, one cache line. `size_of::<FlowEntry>()` is what the paper counts as
/// per-flow state (80 B in the C prototype); a waiting tail's deadline is kept in the timer
/// heap, and the merged packets themselves live in the item slab.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct FlowEntry {
    /// The 5-tuple; every lookup compares it in full.
    pub key: FlowKey,
    /// Largest payload seen: what "one more input segment" means for this flow.
    pub mss: u16,
    /// Bit flags, see `flags`.
    pub flags: u8,
    /// Items held (at most the configured maximum).
    pub n_items: u8,
    /// First held item (lowest sequence number), or `NIL` (`u32::MAX`).
    pub items: u32,
    /// Throughput estimate, bytes per ns.
    pub rate: f32,
    /// Conversion-yield estimate, 0..=1.
    pub yield_avg: f32,
    /// Last arrival, ns.
    pub last_seen: u64,
}

/// `FlowEntry::flags` bits.
pub mod flags {
    /// The entry holds a flow.
    pub const OCCUPIED: u8 = 1;
    /// The flow is on this burst's list of flows to settle.
    pub const TOUCHED: u8 = 2;
    /// The flow's tail item has an ETM deadline in the engine's timer heap: the heap's index
    /// by flow is read only for flows that have one (for the others, it is rarely in the cache
    /// when the entry is).
    pub const TIMED: u8 = 4;
}

impl FlowEntry {
    /// The all-zero key of an empty entry.
    pub const EMPTY_KEY: FlowKey = FlowKey::ZERO;

    const EMPTY: FlowEntry = FlowEntry {
        key: Self::EMPTY_KEY,
        mss: 0,
        flags: 0,
        n_items: 0,
        items: NIL,
        rate: 0.0,
        yield_avg: 0.0,
        last_seen: 0,
    };

    /// Whether the entry holds a flow.
    #[inline]
    pub fn occupied(&self) -> bool {
        self.flags & flags::OCCUPIED != 0
    }
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The flow's entry.
    Hit(u32),
    /// A fresh entry, initialised for the flow.
    New(u32),
    /// The bucket was full: this entry's old flow must be flushed, then it is reinitialised by
    /// [`FlowTable::claim`].
    Evict(u32),
}

/// Fixed-capacity, set-associative flow table.
#[derive(Debug)]
pub struct FlowTable {
    entries: Box<[FlowEntry]>,
    bucket_mask: u32,
    len: usize,
}

impl FlowTable {
    /// A table of at least `capacity` entries (rounded up to a power of two, and to a multiple of
    /// the bucket width, 4).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(WAYS).next_power_of_two();
        Self {
            entries: vec![FlowEntry::EMPTY; capacity].into_boxed_slice(),
            bucket_mask: (capacity / WAYS - 1) as u32,
            len: 0,
        }
    }

    /// Entries in the table.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Flows in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no flow.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Finds `key`'s entry, or picks the entry it should take.
    #[inline]
    pub fn lookup(&mut self, hash: u32, key: &FlowKey, now: u64) -> Slot {
        let base = ((hash & self.bucket_mask) as usize) * WAYS;
        let bucket = &self.entries[base..base + WAYS];
        let mut free = None;
        let mut oldest = 0;
        for (i, e) in bucket.iter().enumerate() {
            if e.occupied() {
                if e.key == *key {
                    return Slot::Hit((base + i) as u32);
                }
                if e.last_seen < bucket[oldest].last_seen || !bucket[oldest].occupied() {
                    oldest = i;
                }
            } else if free.is_none() {
                free = Some(i);
            }
        }
        match free {
            Some(i) => {
                let idx = (base + i) as u32;
                self.claim(idx, key, now);
                self.len += 1;
                Slot::New(idx)
            }
            None => Slot::Evict((base + oldest) as u32),
        }
    }

    /// Prefetches the first entry of `hash`'s bucket, so it is in the cache by the time a
    /// lookup needs it.
    #[inline]
    pub fn warm(&self, hash: u32) {
        let base = ((hash & self.bucket_mask) as usize) * WAYS;
        crate::prefetch(&self.entries[base]);
    }

    /// Prefetches entry `idx` (one cache line).
    #[inline]
    pub fn warm_entry(&self, idx: u32) {
        if let Some(e) = self.entries.get(idx as usize) {
            crate::prefetch(e);
        }
    }

    /// Finds `key`'s entry without inserting.
    #[inline]
    pub fn find(&self, hash: u32, key: &FlowKey) -> Option<u32> {
        let base = ((hash & self.bucket_mask) as usize) * WAYS;
        self.entries[base..base + WAYS]
            .iter()
            .position(|e| e.occupied() && e.key == *key)
            .map(|i| (base + i) as u32)
    }

    /// Whether entry `idx` holds `key`'s flow.
    #[inline]
    pub fn holds(&self, idx: u32, key: &FlowKey) -> bool {
        self.entries
            .get(idx as usize)
            .is_some_and(|e| e.occupied() && e.key == *key)
    }

    /// Reinitialises entry `idx` for `key` (after its previous flow was flushed).
    #[inline]
    pub fn claim(&mut self, idx: u32, key: &FlowKey, now: u64) {
        self.entries[idx as usize] = FlowEntry {
            key: *key,
            flags: flags::OCCUPIED,
            last_seen: now,
            ..FlowEntry::EMPTY
        };
    }

    /// Frees entry `idx` (it must hold no items).
    pub fn remove(&mut self, idx: u32) {
        let e = &mut self.entries[idx as usize];
        debug_assert_eq!(e.n_items, 0);
        if e.occupied() {
            *e = FlowEntry::EMPTY;
            self.len -= 1;
        }
    }

    /// The entry at `idx`.
    #[inline]
    pub fn get(&self, idx: u32) -> &FlowEntry {
        &self.entries[idx as usize]
    }

    /// The entry at `idx`, mutably.
    #[inline]
    pub fn get_mut(&mut self, idx: u32) -> &mut FlowEntry {
        &mut self.entries[idx as usize]
    }

    /// Indices of every occupied entry.
    pub fn occupied(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.occupied())
            .map(|(i, _)| i as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u16) -> FlowKey {
        FlowKey {
            src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            sport: n,
            dport: 80,
            proto: 6,
            v6: false,
        }
    }

    #[test]
    fn flows_the_symmetric_rss_key_collapses_spread_over_the_table() {
        // Flow i from 198.18.0.i, port 32768 + i: one Toeplitz hash for all of them with the
        // symmetric key; the key hash spreads them like random flows.
        let toeplitz = crate::toeplitz::Toeplitz::default();
        let keys: Vec<FlowKey> = (0..800u16)
            .map(|i| FlowKey {
                src: {
                    let mut a = [0; 16];
                    a[..4].copy_from_slice(&[198, 18, (i >> 8) as u8, i as u8]);
                    a
                },
                dst: [10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                sport: 32768 + i,
                dport: 5201,
                proto: 6,
                v6: false,
            })
            .collect();
        let rss: std::collections::HashSet<u32> =
            keys.iter().map(|k| k.rss_hash(&toeplitz)).collect();
        assert_eq!(
            rss.len(),
            1,
            "the symmetric key's weakness this guards against"
        );
        let mut t = FlowTable::new(4096);
        let mut evicted = 0;
        for (n, k) in keys.iter().enumerate() {
            match t.lookup(key_hash(k, 7), k, n as u64) {
                Slot::New(_) => {}
                Slot::Evict(_) => evicted += 1,
                Slot::Hit(_) => panic!("distinct keys"),
            }
        }
        // 800 random flows in 1024 buckets of four: about 2.5 evictions expected (a bucket
        // drawing five or more); with the RSS hash all but four of the 800 would be evicted.
        assert!(evicted <= 12, "{evicted} evictions");
        assert_eq!(key_hash(&keys[0], 7), key_hash(&keys[0], 7));
        assert_ne!(key_hash(&keys[0], 7), key_hash(&keys[0], 8));
    }

    #[test]
    fn a_flow_entry_is_one_cache_line_within_the_papers_80_bytes() {
        assert_eq!(std::mem::size_of::<FlowEntry>(), 64);
        assert_eq!(std::mem::align_of::<FlowEntry>(), 64);
    }

    #[test]
    fn hits_are_verified_against_the_full_tuple() {
        let mut t = FlowTable::new(16);
        let a = match t.lookup(7, &key(1), 0) {
            Slot::New(i) => i,
            other => panic!("{other:?}"),
        };
        assert_eq!(t.lookup(7, &key(1), 1), Slot::Hit(a));
        // Same hash, different tuple: a different entry of the same bucket, never the first.
        match t.lookup(7, &key(2), 2) {
            Slot::New(b) => assert_ne!(a, b),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_full_bucket_evicts_the_least_recently_seen() {
        let mut t = FlowTable::new(8); // two buckets of four
        let mut idx = Vec::new();
        for n in 0..4u16 {
            match t.lookup(0, &key(n), u64::from(n) + 10) {
                Slot::New(i) => idx.push(i),
                other => panic!("{other:?}"),
            }
        }
        t.get_mut(idx[0]).last_seen = 100; // flow 0 was seen recently; flow 1 is now the oldest
        assert_eq!(t.lookup(0, &key(9), 200), Slot::Evict(idx[1]));
        t.claim(idx[1], &key(9), 200);
        assert_eq!(t.lookup(0, &key(9), 201), Slot::Hit(idx[1]));
        assert_eq!(t.len(), 4);
    }
}
