//! The ETM deadlines (SIGCOMM'26 Appendix A): an indexed binary heap with one entry per flow
//! whose tail item waits, moved in place when the flow's deadline moves and removed when its
//! items leave.
//!
//! The engine used to push a new heap entry whenever a flow's deadline came earlier, and leave
//! the old one behind, stale. At 3200 flows more than half of all pops were of stale entries,
//! every push and pop sifted through a heap twice as deep as the live deadlines needed, and
//! telling a stale entry from a live one read the flow's entry, which at thousands of flows is
//! rarely in the cache. Here the heap holds exactly the live deadlines: each pop is one to act
//! on, [`Timers::peek`] names the true earliest deadline, and nothing grows past the flow
//! table's size (both arrays are allocated once).

use super::flow_table::NIL;

/// A pending deadline: the deadline above the flow in one integer, so that one compare orders
/// entries as the pair `(deadline, flow)` would (equal deadlines fire in a fixed order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Timer(u128);

impl Timer {
    fn new(due: u64, flow: u32) -> Self {
        Timer(u128::from(due) << 32 | u128::from(flow))
    }
    fn due(self) -> u64 {
        (self.0 >> 32) as u64
    }
    fn flow(self) -> u32 {
        self.0 as u32
    }
}

/// One deadline per flow entry, earliest first.
#[derive(Debug)]
pub(super) struct Timers {
    /// A binary min-heap.
    heap: Vec<Timer>,
    /// Each flow entry's place in `heap`, or [`NIL`].
    pos: Box<[u32]>,
}

impl Timers {
    /// No deadlines, for flow entries `0..flows`.
    pub(super) fn new(flows: usize) -> Self {
        Self {
            heap: Vec::with_capacity(flows),
            pos: vec![NIL; flows].into_boxed_slice(),
        }
    }

    /// Flows with a deadline.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.heap.len()
    }

    /// `flow`'s deadline, or 0 when it has none.
    #[inline]
    pub(super) fn deadline(&self, flow: u32) -> u64 {
        match self.pos[flow as usize] {
            NIL => 0,
            at => self.heap[at as usize].due(),
        }
    }

    /// The earliest deadline and its flow.
    #[inline]
    pub(super) fn peek(&self) -> Option<(u64, u32)> {
        self.heap.first().map(|t| (t.due(), t.flow()))
    }

    /// Sets `flow`'s deadline to `due`: a new entry, or its entry moved.
    pub(super) fn set(&mut self, flow: u32, due: u64) {
        let t = Timer::new(due, flow);
        match self.pos[flow as usize] {
            NIL => {
                let at = self.heap.len();
                self.heap.push(t);
                self.sift_up(at, t);
            }
            at => {
                let at = at as usize;
                if t < self.heap[at] {
                    self.sift_up(at, t);
                } else {
                    self.sift_down(at, t);
                }
            }
        }
    }

    /// Adds a deadline for `flow`, which has none (the caller knows, so `flow`'s place is not
    /// read: at thousands of flows it is rarely in the cache).
    pub(super) fn insert(&mut self, flow: u32, due: u64) {
        debug_assert_eq!(self.pos[flow as usize], NIL, "flow {flow} has a deadline");
        let t = Timer::new(due, flow);
        let at = self.heap.len();
        self.heap.push(t);
        self.sift_up(at, t);
    }

    /// Removes `flow`'s deadline, if it has one.
    #[inline]
    pub(super) fn cancel(&mut self, flow: u32) {
        let at = self.pos[flow as usize];
        if at != NIL {
            self.remove_at(at as usize);
        }
    }

    /// Removes the earliest deadline; returns it and its flow.
    pub(super) fn pop(&mut self) -> Option<(u64, u32)> {
        let top = *self.heap.first()?;
        self.remove_at(0);
        Some((top.due(), top.flow()))
    }

    /// Forgets every deadline.
    pub(super) fn clear(&mut self) {
        for t in &self.heap {
            self.pos[t.flow() as usize] = NIL;
        }
        self.heap.clear();
    }

    fn remove_at(&mut self, at: usize) {
        let gone = self.heap[at];
        self.pos[gone.flow() as usize] = NIL;
        let Some(last) = self.heap.pop() else {
            return;
        };
        if at < self.heap.len() {
            // The last entry fills the hole, and moves whichever way its value takes it.
            if last < gone {
                self.sift_up(at, last);
            } else {
                self.sift_down(at, last);
            }
        }
    }

    /// Places `t` at `at` or above it, moving the larger parents down.
    fn sift_up(&mut self, mut at: usize, t: Timer) {
        while at > 0 {
            let parent = (at - 1) / 2;
            let p = self.heap[parent];
            if p <= t {
                break;
            }
            self.put(at, p);
            at = parent;
        }
        self.put(at, t);
    }

    /// Places `t` at `at` or below it, moving the smaller children up.
    fn sift_down(&mut self, mut at: usize, t: Timer) {
        let n = self.heap.len();
        loop {
            let left = 2 * at + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.heap[right] < self.heap[left] {
                right
            } else {
                left
            };
            let c = self.heap[child];
            if t <= c {
                break;
            }
            self.put(at, c);
            at = child;
        }
        self.put(at, t);
    }

    #[inline]
    fn put(&mut self, at: usize, t: Timer) {
        self.heap[at] = t;
        self.pos[t.flow() as usize] = at as u32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Set(u32, u64),
        Cancel(u32),
        Pop,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..16u32, 1..50u64).prop_map(|(f, d)| Op::Set(f, d)),
            1 => (0..16u32).prop_map(Op::Cancel),
            1 => Just(Op::Pop),
        ]
    }

    proptest! {
        /// Against a plain map of flow to deadline: every deadline read back, every pop the
        /// smallest (deadline, flow) pair, and the heap never holds a flow twice.
        #[test]
        fn the_heap_holds_exactly_the_live_deadlines(ops in proptest::collection::vec(op(), 0..200)) {
            let mut t = Timers::new(16);
            let mut model = std::collections::BTreeMap::<u32, u64>::new();
            for op in ops {
                match op {
                    // A flow without a deadline may be given one by `insert` too.
                    Op::Set(f, d) if !model.contains_key(&f) && d % 2 == 0 => {
                        t.insert(f, d);
                        model.insert(f, d);
                    }
                    Op::Set(f, d) => {
                        t.set(f, d);
                        model.insert(f, d);
                    }
                    Op::Cancel(f) => {
                        t.cancel(f);
                        model.remove(&f);
                    }
                    Op::Pop => {
                        let want = model.iter().map(|(&f, &d)| (d, f)).min();
                        prop_assert_eq!(t.pop(), want);
                        if let Some((_, f)) = want {
                            model.remove(&f);
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.peek(), model.iter().map(|(&f, &d)| (d, f)).min());
                for f in 0..16 {
                    prop_assert_eq!(t.deadline(f), model.get(&f).copied().unwrap_or(0));
                }
            }
            t.clear();
            prop_assert_eq!(t.peek(), None);
            prop_assert!((0..16).all(|f| t.deadline(f) == 0));
        }
    }

    /// An entry orders as its `(deadline, flow)` pair, and gives both back, at the edges of
    /// both ranges too.
    #[test]
    fn entries_order_as_deadline_then_flow() {
        let values = [
            (0u64, 0u32),
            (0, u32::MAX),
            (1, 0),
            (1, 7),
            (u64::MAX - 1, u32::MAX),
            (u64::MAX, 0),
            (u64::MAX, u32::MAX),
            (1 << 40, 3),
        ];
        for a in values {
            let t = Timer::new(a.0, a.1);
            assert_eq!((t.due(), t.flow()), a);
            for b in values {
                assert_eq!(t.cmp(&Timer::new(b.0, b.1)), a.cmp(&b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn a_deadline_moved_later_or_earlier_keeps_one_entry() {
        let mut t = Timers::new(4);
        t.set(1, 10);
        t.set(2, 20);
        t.set(1, 30); // later: flow 2 is now first
        assert_eq!(t.peek(), Some((20, 2)));
        t.set(1, 5); // earlier again
        assert_eq!(t.peek(), Some((5, 1)));
        assert_eq!(t.len(), 2);
        t.cancel(1);
        t.cancel(1); // twice: nothing more to remove
        assert_eq!(t.pop(), Some((20, 2)));
        assert_eq!(t.pop(), None);
    }
}
