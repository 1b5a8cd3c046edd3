//! A bounded map in least-recently-used order whose entries stay in numbered slots: the
//! established-connection table ([`crate::conn::ConnTable`]).
//!
//! It does what the `lru` crate's `LruCache` does (push evicting the least recently used entry
//! when full, get with or without refreshing the order, pop), and one thing more: each entry
//! lives in a slot of a fixed array, whose number a caller may keep ([`LruSlab::find`]) and
//! use later ([`LruSlab::at_mut`]) with the key, which the slot's own key is compared with. A
//! packet path that remembers a connection's slot, by the NIC's RSS hash say, reaches it again
//! with one key compare instead of a hash and a probe: an outside receiver's ACKs, each with a
//! new acknowledgement number to record, then cost no lookup. A slot kept past its entry's
//! removal only fails the compare (or finds the same key's new entry, which is as good).
//!
//! The order is a doubly linked list through the slots, by index; the index is a
//! `hashbrown::HashTable` of slot numbers. Everything is allocated up front.

use std::hash::{BuildHasher, Hash};

use hashbrown::HashTable;

/// No slot (the ends of the order, an empty list).
const NIL: u32 = u32::MAX;

/// One slot: its entry (when used) and its neighbours in the order.
#[derive(Debug)]
struct Slot<K, V> {
    entry: Option<(K, V)>,
    /// The slot used more recently, or [`NIL`].
    newer: u32,
    /// The slot used less recently, or [`NIL`].
    older: u32,
}

/// A map of at most `capacity` entries, least recently used out first (see the module docs).
#[derive(Debug)]
pub struct LruSlab<K, V, S> {
    slots: Vec<Slot<K, V>>,
    index: HashTable<u32>,
    hasher: S,
    /// The most recently used slot, or [`NIL`].
    newest: u32,
    /// The least recently used slot, or [`NIL`].
    oldest: u32,
    /// Unused slots.
    free: Vec<u32>,
}

impl<K: Hash + Eq + Copy, V, S: BuildHasher> LruSlab<K, V, S> {
    /// An empty map of `capacity` slots (at least one), allocated now.
    pub fn with_hasher(capacity: usize, hasher: S) -> Self {
        let capacity = capacity.clamp(1, NIL as usize - 1);
        Self {
            slots: (0..capacity)
                .map(|_| Slot {
                    entry: None,
                    newer: NIL,
                    older: NIL,
                })
                .collect(),
            index: HashTable::with_capacity(capacity),
            hasher,
            newest: NIL,
            oldest: NIL,
            free: (0..capacity as u32).rev().collect(),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The slot of `key`'s entry, if it has one.
    #[inline]
    pub fn find(&self, key: &K) -> Option<u32> {
        let hash = self.hasher.hash_one(key);
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                slots[i as usize]
                    .entry
                    .as_ref()
                    .is_some_and(|(k, _)| k == key)
            })
            .copied()
    }

    /// Whether `key` has an entry.
    pub fn contains(&self, key: &K) -> bool {
        self.find(key).is_some()
    }

    /// Whether slot `slot` (from [`find`](Self::find)) still holds `key`'s entry.
    #[inline]
    pub fn holds(&self, slot: u32, key: &K) -> bool {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.entry.as_ref())
            .is_some_and(|(k, _)| k == key)
    }

    /// Asks the CPU to bring slot `slot` into its cache, for a lookup of it soon after (a
    /// slot out of range is ignored).
    #[inline]
    pub fn prefetch(&self, slot: u32) {
        if let Some(s) = self.slots.get(slot as usize) {
            dpdk::prefetch(s);
        }
    }

    /// The key of the entry in `slot`, if the slot is used: for a caller that compares it with
    /// a key of its own kind, without making a `K`.
    #[inline]
    pub fn key_at(&self, slot: u32) -> Option<&K> {
        self.slots
            .get(slot as usize)?
            .entry
            .as_ref()
            .map(|(k, _)| k)
    }

    /// `key`'s entry in slot `slot` (from [`find`](Self::find)), if the slot still holds it;
    /// the order is left as it is.
    #[inline]
    pub fn at_mut(&mut self, slot: u32, key: &K) -> Option<&mut V> {
        match self.slots.get_mut(slot as usize)?.entry.as_mut() {
            Some((k, v)) if k == key => Some(v),
            _ => None,
        }
    }

    /// The entry in `slot` with its key, whatever key it has (the order left as it is): for a
    /// caller that has just found or checked the slot.
    #[inline]
    pub fn slot_mut(&mut self, slot: u32) -> Option<(&K, &mut V)> {
        let (k, v) = self.slots.get_mut(slot as usize)?.entry.as_mut()?;
        Some((&*k, v))
    }

    /// `key`'s entry, made the most recently used.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let slot = self.find(key)?;
        self.move_to_front(slot);
        self.slots[slot as usize].entry.as_mut().map(|(_, v)| v)
    }

    /// Makes the entry in `slot` the most recently used, if it is `key`'s.
    pub fn promote_at(&mut self, slot: u32, key: &K) {
        if self.holds(slot, key) {
            self.move_to_front(slot);
        }
    }

    /// Replaces the entry in `slot` (from [`find`](Self::find)) with what `f` makes of its key
    /// and value, in the same place in the order; `f` returning no value removes the entry.
    /// `f`'s answer comes back, or `None` for an unused slot. For a value that changes kind
    /// by taking ownership of what it holds, without losing its age.
    pub fn update_at<R>(
        &mut self,
        slot: u32,
        f: impl FnOnce(&K, V) -> (Option<V>, R),
    ) -> Option<R> {
        // While `f` runs the slot is empty but still indexed and linked: nothing else runs.
        let (key, value) = self.slots.get_mut(slot as usize)?.entry.take()?;
        let (value, answer) = f(&key, value);
        match value {
            Some(value) => self.slots[slot as usize].entry = Some((key, value)),
            None => {
                let hash = self.hasher.hash_one(key);
                if let Ok(found) = self.index.find_entry(hash, |&i| i == slot) {
                    found.remove();
                }
                self.unlink(slot);
                self.free.push(slot);
            }
        }
        Some(answer)
    }

    /// Replaces the value in `slot` (from [`find`](Self::find)) with `value` and makes the entry
    /// the most recently used: its key starts afresh (a flow's next caravan) where it is,
    /// without a lookup. The old value comes back, or `value` itself (`Err`) for an unused
    /// slot.
    pub fn renew_at(&mut self, slot: u32, value: V) -> Result<V, V> {
        let Some((_, old)) = self
            .slots
            .get_mut(slot as usize)
            .and_then(|s| s.entry.as_mut())
        else {
            return Err(value);
        };
        let old = std::mem::replace(old, value);
        self.move_to_front(slot);
        Ok(old)
    }

    /// Puts `value` under `key` as the most recently used entry. Returns the entry it replaced:
    /// `key`'s own old one, or, when the map was full, the least recently used one, evicted.
    pub fn push(&mut self, key: K, value: V) -> Option<(K, V)> {
        self.push_at(key, value).1
    }

    /// [`push`](Self::push), which also says in which slot the entry now is.
    pub fn push_at(&mut self, key: K, value: V) -> (u32, Option<(K, V)>) {
        if let Some(slot) = self.find(&key) {
            self.move_to_front(slot);
            let old = self.slots[slot as usize].entry.replace((key, value));
            return (slot, old);
        }
        let evicted = if self.free.is_empty() {
            self.pop_lru()
        } else {
            None
        };
        let slot = self.free.pop().expect("a slot was freed");
        self.slots[slot as usize].entry = Some((key, value));
        self.link_front(slot);
        let hash = self.hasher.hash_one(key);
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.insert_unique(hash, slot, |&i| {
            let (k, _) = slots[i as usize]
                .entry
                .as_ref()
                .expect("indexed slots are used");
            hasher.hash_one(k)
        });
        (slot, evicted)
    }

    /// Removes `key`'s entry and returns its value.
    pub fn pop(&mut self, key: &K) -> Option<V> {
        let slot = self.find(key)?;
        self.remove_slot(slot).map(|(_, v)| v)
    }

    /// The least recently used entry.
    pub fn peek_lru(&self) -> Option<(&K, &V)> {
        let slot = self.slots.get(self.oldest as usize)?;
        slot.entry.as_ref().map(|(k, v)| (k, v))
    }

    /// Removes the least recently used entry and returns it.
    pub fn pop_lru(&mut self) -> Option<(K, V)> {
        match self.oldest {
            NIL => None,
            slot => self.remove_slot(slot),
        }
    }

    fn remove_slot(&mut self, slot: u32) -> Option<(K, V)> {
        let (key, _) = self.slots[slot as usize].entry.as_ref()?;
        let hash = self.hasher.hash_one(key);
        if let Ok(found) = self.index.find_entry(hash, |&i| i == slot) {
            found.remove();
        }
        self.unlink(slot);
        self.free.push(slot);
        self.slots[slot as usize].entry.take()
    }

    fn move_to_front(&mut self, slot: u32) {
        if self.newest != slot {
            self.unlink(slot);
            self.link_front(slot);
        }
    }

    fn link_front(&mut self, slot: u32) {
        let old_newest = self.newest;
        let s = &mut self.slots[slot as usize];
        s.newer = NIL;
        s.older = old_newest;
        match old_newest {
            NIL => self.oldest = slot,
            n => self.slots[n as usize].newer = slot,
        }
        self.newest = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let (newer, older) = {
            let s = &self.slots[slot as usize];
            (s.newer, s.older)
        };
        match newer {
            NIL => self.newest = older,
            n => self.slots[n as usize].older = older,
        }
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o as usize].newer = newer,
        }
        let s = &mut self.slots[slot as usize];
        s.newer = NIL;
        s.older = NIL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::num::NonZeroUsize;

    type Slab = LruSlab<u16, u32, foldhash::fast::RandomState>;

    #[derive(Clone, Debug)]
    enum Op {
        Push(u16, u32),
        Get(u16),
        Peek(u16),
        Promote(u16),
        Pop(u16),
        PopLru,
        SlotThenAt(u16),
        /// Replace the value in place (`Some`) or remove it (`None`).
        UpdateAt(u16, Option<u32>),
        /// Replace the value and make it the newest.
        RenewAt(u16, u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few keys, so pushes collide with live entries and evictions happen.
        let key = 0u16..12;
        prop_oneof![
            (key.clone(), any::<u32>()).prop_map(|(k, v)| Op::Push(k, v)),
            key.clone().prop_map(Op::Get),
            key.clone().prop_map(Op::Peek),
            key.clone().prop_map(Op::Promote),
            key.clone().prop_map(Op::Pop),
            Just(Op::PopLru),
            key.clone().prop_map(Op::SlotThenAt),
            (key.clone(), proptest::option::of(any::<u32>())).prop_map(|(k, v)| Op::UpdateAt(k, v)),
            (key, any::<u32>()).prop_map(|(k, v)| Op::RenewAt(k, v)),
        ]
    }

    proptest! {
        /// Every operation answers as the `lru` crate's `LruCache` answers, and the eviction
        /// order is the same; a slot found for a key reaches that key's entry while it lives,
        /// and nothing else after.
        #[test]
        fn behaves_as_the_lru_crate(cap in 1usize..6, ops in proptest::collection::vec(op(), 0..200)) {
            let mut model = lru::LruCache::<u16, u32>::new(NonZeroUsize::new(cap).unwrap());
            let mut slab = Slab::with_hasher(cap, Default::default());
            let mut kept: Vec<(u32, u16)> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(k, v) => {
                        let (at, evicted) = slab.push_at(k, v);
                        prop_assert_eq!(evicted, model.push(k, v));
                        prop_assert_eq!(slab.find(&k), Some(at));
                    }
                    Op::Get(k) => prop_assert_eq!(slab.get_mut(&k).copied(), model.get_mut(&k).copied()),
                    Op::Peek(k) => {
                        let got = slab.find(&k).and_then(|s| slab.at_mut(s, &k).copied());
                        prop_assert_eq!(got, model.peek_mut(&k).copied());
                    }
                    Op::Promote(k) => {
                        if let Some(s) = slab.find(&k) {
                            slab.promote_at(s, &k);
                        }
                        model.promote(&k);
                    }
                    Op::Pop(k) => prop_assert_eq!(slab.pop(&k), model.pop(&k)),
                    Op::PopLru => prop_assert_eq!(slab.pop_lru(), model.pop_lru()),
                    Op::UpdateAt(k, v) => {
                        let got = slab.find(&k).and_then(|s| slab.update_at(s, |key, old| (v, (*key, old))));
                        let want = match v {
                            Some(v) => model.peek_mut(&k).map(|old| (k, std::mem::replace(old, v))),
                            None => model.pop(&k).map(|old| (k, old)),
                        };
                        prop_assert_eq!(got, want);
                    }
                    Op::RenewAt(k, v) => {
                        let got = slab.find(&k).map(|s| slab.renew_at(s, v));
                        // `put` on a live key: the value replaced, the entry the newest.
                        let want = model.peek(&k).map(|&old| Ok(old));
                        if want.is_some() {
                            model.put(k, v);
                        }
                        prop_assert_eq!(got, want);
                    }
                    Op::SlotThenAt(k) => {
                        if let Some(s) = slab.find(&k) {
                            kept.push((s, k));
                        }
                    }
                }
                prop_assert_eq!(slab.len(), model.len());
                prop_assert_eq!(slab.peek_lru().map(|(k, v)| (*k, *v)), model.peek_lru().map(|(k, v)| (*k, *v)));
                for &(s, k) in &kept {
                    let live = slab.find(&k) == Some(s);
                    prop_assert_eq!(slab.holds(s, &k), live);
                    let got = slab.at_mut(s, &k).copied();
                    prop_assert_eq!(got.is_some(), live);
                    if live {
                        prop_assert_eq!(got, model.peek(&k).copied());
                    }
                }
            }
            // The whole order, oldest first.
            while let Some(e) = model.pop_lru() {
                prop_assert_eq!(slab.pop_lru(), Some(e));
            }
            prop_assert!(slab.is_empty());
        }
    }
}
