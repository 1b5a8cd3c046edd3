//! Connections whose handshake the gateway saw, with their path MTU hint. Flows not in this
//! table are forwarded untranslated (no merging; outbound packets are still cut to the eMTU if
//! they must be).
//!
//! Each connection also remembers how far the inside host's data that the gateway split has
//! gone, so that a segment sent again, and again, is seen: that is the IPv6 black-hole signal
//! (docs/fpmtud.md, "IPv6: Packet Too Big and black holes").

use std::collections::HashMap;

use pxio::wire::FlowKey;

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Path MTU toward the outside peer.
    pub pmtu: u16,
    /// Last packet seen, ns.
    pub last_seen: u64,
    /// Retransmissions of split segments, for black-hole detection.
    pub retx: Retransmits,
}

/// What the gateway saw of the inside host's segments it split.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retransmits {
    /// Whether a segment was split yet.
    pub seen: bool,
    /// The sequence number after the highest byte split.
    pub high: u32,
    /// The segment being retransmitted (its sequence number).
    pub seq: u32,
    /// How many times it was sent again.
    pub count: u8,
    /// When it was first sent again, ns.
    pub since: u64,
}

impl Retransmits {
    /// A segment of `len` bytes at `seq` that the gateway is about to split, at `now`. True
    /// when it is the `limit`-th retransmission of the same segment within `window_ns` (the
    /// count then starts over).
    ///
    /// The segment followed is the lowest one retransmitted in the window: the head of the
    /// retransmission queue, which a host in a black hole sends again on every timeout, even
    /// when it resends the whole window behind it each time (go-back-N). Retransmissions above
    /// it are part of the same recovery and do not reset the count; new data never counts.
    /// Ordinary loss recovery retransmits a segment once, so it does not add up to `limit`
    /// (2 by default) unless the retransmission is lost too.
    pub fn on_split(&mut self, seq: u32, len: u32, now: u64, limit: u8, window_ns: u64) -> bool {
        let end = seq.wrapping_add(len);
        if !self.seen {
            *self = Self {
                seen: true,
                high: end,
                ..Self::default()
            };
            return false;
        }
        let mut fired = false;
        if before(seq, self.high) {
            let fresh = self.count == 0 || now.saturating_sub(self.since) > window_ns;
            if fresh || before(seq, self.seq) {
                self.seq = seq;
                self.count = 1;
                self.since = now;
            } else if seq == self.seq {
                self.count = self.count.saturating_add(1);
            }
            if limit > 0 && self.count >= limit {
                self.count = 0;
                fired = true;
            }
        }
        if before(self.high, end) {
            self.high = end;
        }
        fired
    }
}

/// Sequence-space comparison (RFC 9293 §3.4): `a` comes before `b`.
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// A bounded table; it never grows past its capacity (new connections are then left
/// untranslated and counted).
#[derive(Debug)]
pub struct ConnTable {
    map: HashMap<FlowKey, Conn>,
    capacity: usize,
}

/// The key of a connection, oriented outside → inside whichever way the packet goes.
pub fn inbound_key(key: &FlowKey) -> FlowKey {
    *key
}

/// The inbound-oriented key of an outbound packet's flow key.
pub fn reverse(key: &FlowKey) -> FlowKey {
    FlowKey {
        src: key.dst,
        dst: key.src,
        sport: key.dport,
        dport: key.sport,
        ..*key
    }
}

impl ConnTable {
    /// A table for up to `capacity` connections, allocated up front.
    pub fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::with_capacity(capacity),
            capacity,
        }
    }

    /// Records or refreshes a connection; false when the table is full.
    pub fn upsert(&mut self, key: FlowKey, pmtu: u16, now: u64) -> bool {
        if let Some(c) = self.map.get_mut(&key) {
            c.pmtu = pmtu;
            c.last_seen = now;
            return true;
        }
        if self.map.len() >= self.capacity {
            return false;
        }
        self.map.insert(
            key,
            Conn {
                pmtu,
                last_seen: now,
                retx: Retransmits::default(),
            },
        );
        true
    }

    /// The connection, refreshed.
    pub fn touch(&mut self, key: &FlowKey, now: u64) -> Option<Conn> {
        let c = self.map.get_mut(key)?;
        c.last_seen = now;
        Some(*c)
    }

    /// The connection, refreshed, to update.
    pub fn touch_mut(&mut self, key: &FlowKey, now: u64) -> Option<&mut Conn> {
        let c = self.map.get_mut(key)?;
        c.last_seen = now;
        Some(c)
    }

    /// Forgets connections idle since before `cutoff` ns.
    pub fn expire(&mut self, cutoff: u64) -> usize {
        let before = self.map.len();
        self.map.retain(|_, c| c.last_seen >= cutoff);
        before - self.map.len()
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}
