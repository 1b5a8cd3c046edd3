//! Connections whose handshake the gateway saw, with their path MTU hint. Flows not in this
//! table are forwarded untranslated (no merging; outbound packets are still cut to the eMTU if
//! they must be).
//!
//! **Half-open connections are kept apart**, so a SYN flood cannot switch merging off. A SYN costs
//! its sender nothing and its source may be spoofed, so a SYN alone only makes a half-open entry,
//! in a bounded table that evicts its oldest entries when full ([`Slots`]: four-way
//! set-associative, keyed by a per-process random hash, so an attacker cannot aim at one
//! connection's slot). A connection reaches the established table, the one merging depends on,
//! only when a segment proves that both ends took part: one from outside that acknowledges the
//! inside host's SYN or SYN-ACK (its sequence number is only seen on the path toward the outside,
//! so a spoofer cannot know it), or a plain ACK from the inside host acknowledging the outside's
//! SYN (an inside host answers a SYN it did not ask for with a SYN-ACK, and never acknowledges a
//! SYN-ACK it did not solicit). A flood of spoofed SYNs therefore only churns the half-open table,
//! and a real handshake completes in it within one round trip, as a SYN cache does
//! (RFC 4987 §3.3).
//!
//! **Connections whose handshake was not seen are learned from their data**, so connections that
//! survive a restart of the gateway are merged again. A connection from outside is learned when
//! [`LEARN_SEGMENTS`] segments in a row arrive in order (each starting where the last ended), all
//! of one size of at least [`LEARN_MIN_IP_LEN`] bytes (MSS-sized: a bulk sender's), with an ACK
//! number that never goes back (a consistent stream), **and** the inside host acknowledged data of
//! that stream (a spoofer's segments are never acknowledged: the inside host answers them with a
//! RST). The observed IP length becomes the path MTU hint, since the path carried it. A shorter
//! in-order segment (a write boundary) neither counts nor breaks the run; anything else starts it
//! over. Learning entries live in a bounded table of their own ([`Slots`]), so spoofed data cannot
//! fill anything merging depends on. The window is not used: it is the outside's receive window
//! and says nothing about the stream being merged.
//!
//! **Connections seen in one direction only** (scale-out behind ECMP). Routers that
//! spread flows over several gateways by a 5-tuple hash choose each direction's gateway on
//! their own, so one instance may see everything the outside sends and nothing the inside host
//! answers (docs/scale-out.md). Such an instance never sees the inside host's SYN-ACK or ACKs,
//! so neither rule above can ever admit the connection. With one-way learning on
//! ([`ConnTable::with_one_way`], `[connections] one_way = true`), the learning rule admits a run
//! of [`LEARN_SEGMENTS`] in-order MSS-sized segments from outside **while this instance has seen
//! no segment of the connection from inside** (had it seen one, the inside host's
//! acknowledgement is still required). Those connections go to a table of their own, bounded
//! and evicting its least recently seen entries ([`Slots`]), so spoofed one-way data can only
//! churn it, never fill the established table; a RST from the inside host removes its entry.
//! Merging needs nothing else: the merger joins only contiguous in-order segments of one flow,
//! whoever saw the handshake. MSS rewriting needs no state at all (each SYN and SYN-ACK is
//! rewritten by the instance it crosses), and the split size of an instance that never saw the
//! outside's MSS comes from its path MTU cache, else the eMTU.
//!
//! Each connection also remembers how far the inside host's data that the gateway split has
//! gone, so that a segment sent again, and again, is seen: that is the IPv6 black-hole signal
//! (docs/fpmtud.md, "IPv6: Packet Too Big and black holes"). Connections the gateway splits but
//! does not know (an instance that sees only the inside host's segments, behind ECMP; or after a
//! restart, a connection whose data only goes out) are followed the same way in a bounded table
//! of their own ([`ConnTable::retransmits_mut`]): only the inside host's segments create entries
//! there, and a wrong guess only lowers one destination's split size.

use std::hash::{BuildHasher, RandomState};

use crate::lru_slab::LruSlab;

use pxio::wire::{tcp_flags, FlowKey};

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Path MTU toward the outside peer; 0 when unknown (this instance never saw the outside's
    /// SYN or SYN-ACK: it crossed another instance, or came before a restart).
    pub pmtu: u16,
    /// Last packet seen, ns.
    pub last_seen: u64,
    /// Retransmissions of split segments, for black-hole detection.
    pub retx: Retransmits,
    /// What the inside host has in flight, for ICMP errors that quote it.
    pub flight: Flight,
}

impl Conn {
    fn new(pmtu: u16, now: u64) -> Self {
        Self {
            pmtu,
            last_seen: now,
            retx: Retransmits::default(),
            flight: Flight::default(),
        }
    }
}

/// The inside host's send window as the gateway sees it (RFC 9293 §3.3.1: SND.UNA and SND.NXT),
/// for the check an endpoint makes on an ICMP error that quotes one of its segments (RFC 5927
/// §4.1; Linux's `tcp_v4_err` and `tcp_v6_err`): the quoted sequence number must lie between
/// the oldest unacknowledged byte and the next byte to send.
///
/// Either end may be unknown: a connection learned from its data, or seen one way, has not shown
/// both. [`Flight::in_flight`] then checks against the end it knows, within [`MAX_WINDOW`], and
/// refuses everything when it knows neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flight {
    /// The oldest byte the outside has not acknowledged: the highest ACK from outside that
    /// acknowledges nothing beyond what the inside host sent.
    pub una: Option<u32>,
    /// The next byte the inside host sends: the end of its highest segment seen.
    pub nxt: Option<u32>,
}

/// The most a TCP sender can have in flight: a window of 2^30 bytes (RFC 7323 §2.3, the largest
/// window scale).
pub const MAX_WINDOW: u32 = 1 << 30;

impl Flight {
    /// The inside host sent `seg`.
    pub fn on_inside(&mut self, seg: &Segment) {
        let end = seg.seq.wrapping_add(seg.len);
        if self.nxt.is_none_or(|n| before(n, end)) {
            self.nxt = Some(end);
        }
    }

    /// The outside acknowledged up to `ack`. An ACK beyond what the inside host sent, or one
    /// more than a window ahead of the last, proves nothing and moves nothing (RFC 5961 §5.2:
    /// what an endpoint accepts as an acknowledgement).
    pub fn on_outside_ack(&mut self, ack: u32) {
        let sent = self.nxt.is_none_or(|n| !before(n, ack));
        let forward = self
            .una
            .is_none_or(|u| before(u, ack) && ack.wrapping_sub(u) < MAX_WINDOW);
        if sent && forward {
            self.una = Some(ack);
        }
    }

    /// Whether a segment of the inside host starting at `seq` may be in flight: SND.UNA ≤ `seq`
    /// ≤ SND.NXT, as Linux checks (`between(seq, snd_una, snd_nxt)`). With one end unknown, within
    /// [`MAX_WINDOW`] of the other; with both unknown, never.
    pub fn in_flight(&self, seq: u32) -> bool {
        match (self.una, self.nxt) {
            (Some(u), Some(n)) => !before(seq, u) && !before(n, seq),
            (Some(u), None) => !before(seq, u) && seq.wrapping_sub(u) < MAX_WINDOW,
            (None, Some(n)) => !before(n, seq) && n.wrapping_sub(seq) < MAX_WINDOW,
            (None, None) => false,
        }
    }
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

/// What the gateway saw of a connection whose handshake has not completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct HalfOpen {
    /// Path MTU hint from the outside's SYN or SYN-ACK; 0 until one was seen.
    pmtu: u16,
    /// The outside's initial sequence number, once its SYN or SYN-ACK was seen.
    outside_isn: Option<u32>,
    /// The inside's initial sequence number, once its SYN or SYN-ACK was seen.
    inside_isn: Option<u32>,
    /// The end of the inside's sequence space seen so far (its SYN counts one).
    inside_snd_max: u32,
}

/// Connections split but not known whose retransmissions are followed, per table (oldest
/// evicted).
const UNKNOWN_RETX_CAPACITY: usize = 4096;

/// Segments in a row that teach the gateway a connection whose handshake it did not see.
pub const LEARN_SEGMENTS: u8 = 8;

/// The smallest IP length of a segment that counts toward learning: the IPv6 minimum MTU, so
/// the path MTU hint learned is one every path carries, and flows of small segments (which
/// merging gains little from) are not learned.
pub const LEARN_MIN_IP_LEN: u16 = 1280;

/// What the gateway saw of a connection it is learning from its data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Learning {
    /// The lowest sequence number seen from outside.
    base: u32,
    /// The end of the highest segment seen from outside.
    high: u32,
    /// Where the next in-order segment from outside starts.
    next: u32,
    /// The latest ACK number from outside.
    ack: u32,
    /// Payload bytes of the run's segments.
    seg_len: u32,
    /// Their IP length: the path MTU hint.
    ip_len: u16,
    /// In-order segments of that size in a row.
    run: u8,
    /// The inside host acknowledged data between `base` and `high`.
    acked: bool,
    /// A segment of this connection from inside was seen (then only `acked` admits it).
    inside_seen: bool,
}

/// A bounded map from flows to `V` that never allocates after construction and evicts the
/// least recently seen entry of a full set: four-way set-associative, indexed by a keyed hash
/// (`std`'s SipHash with per-table random keys), so crafted 5-tuples cannot all land in the set
/// of one chosen connection.
#[derive(Debug)]
pub struct Slots<V> {
    slots: Vec<Option<(FlowKey, u64, V)>>,
    sets: usize,
    hasher: RandomState,
    len: usize,
}

/// A flow key as a hash table's key (the established connections', the open caravans'), hashed
/// as five machine words (the addresses' halves, then ports, protocol and family) rather than
/// field by field and byte by byte as `FlowKey`'s derived `Hash` does: the same keyed hash, a
/// fifth of the instructions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyWords(pub(crate) FlowKey);

impl std::hash::Hash for KeyWords {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for w in key_words(&self.0) {
            state.write_u64(w);
        }
    }
}

/// `key` as five machine words: the addresses' halves, then ports, protocol and family.
#[inline]
pub(crate) fn key_words(k: &FlowKey) -> [u64; 5] {
    let word = |b: &[u8; 16], at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[at..at + 8]);
        u64::from_ne_bytes(w)
    };
    [
        word(&k.src, 0),
        word(&k.src, 8),
        word(&k.dst, 0),
        word(&k.dst, 8),
        // The ports a bit apart: with `dport` right above `sport`, the compiler reads both in
        // one 4-byte load, which spans the two 2-byte stores a key just built was written
        // with, and such a load waits for both to reach the cache (no store forwarding: about
        // a dozen cycles on every bare ACK). Still one-to-one, so no two keys share words.
        u64::from(k.sport)
            | u64::from(k.dport) << 17
            | u64::from(k.proto) << 33
            | u64::from(k.v6) << 41,
    ]
}

/// How often at most an established connection moves to the front of the recency order
/// (about 17 ms: [`ConnTable::touch_mut`]). Eviction and expiry follow that order, and idle
/// timeouts are seconds long: a sighting known to within 17 ms is as good as an exact one.
pub const PROMOTE_EVERY_NS: u64 = 1 << 24;

/// Entries per set of a [`Slots`] table. With two, three handshakes in flight whose keys share
/// a set evict one of them even in a table far from full (at 3,200 handshakes in a table of
/// 65,536 entries, about one in 350); with four, five must meet in a set, which at that load
/// practically never happens. Only a flood fills sets, and then the oldest entry makes room.
const WAYS: usize = 4;

impl<V> Slots<V> {
    /// A table of at least `capacity` entries (rounded up to a power of two, at least one set
    /// of four).
    pub fn new(capacity: usize) -> Self {
        let sets = (capacity.max(WAYS) / WAYS).next_power_of_two();
        let mut slots = Vec::with_capacity(sets * WAYS);
        slots.resize_with(sets * WAYS, || None);
        Self {
            slots,
            sets,
            hasher: RandomState::new(),
            len: 0,
        }
    }

    fn set(&self, key: &FlowKey) -> usize {
        // The low bits of SipHash select the set (`sets` is a power of two).
        (self.hasher.hash_one(KeyWords(*key)) as usize & (self.sets - 1)) * WAYS
    }

    fn find(&self, key: &FlowKey) -> Option<usize> {
        let set = self.set(key);
        (set..set + WAYS).find(|&i| matches!(&self.slots[i], Some((k, _, _)) if k == key))
    }

    /// The entry of `key`, marked as seen at `now`.
    pub fn get_mut(&mut self, key: &FlowKey, now: u64) -> Option<&mut V> {
        let i = self.find(key)?;
        let (_, seen, v) = self.slots[i].as_mut()?;
        *seen = now;
        Some(v)
    }

    /// Inserts or replaces the entry of `key`; true when another flow's entry was evicted to
    /// make room.
    pub fn insert(&mut self, key: FlowKey, value: V, now: u64) -> bool {
        let set = self.set(&key);
        let ways = set..set + WAYS;
        let slot = ways
            .clone()
            .find(|&i| matches!(&self.slots[i], Some((k, _, _)) if *k == key))
            .or_else(|| ways.clone().find(|&i| self.slots[i].is_none()));
        let (slot, evicted) = match slot {
            Some(i) => (i, false),
            None => {
                let oldest = ways
                    .min_by_key(|&i| self.slots[i].as_ref().map_or(0, |(_, seen, _)| *seen))
                    .unwrap_or(set);
                (oldest, true)
            }
        };
        if self.slots[slot].is_none() {
            self.len += 1;
        }
        self.slots[slot] = Some((key, now, value));
        evicted
    }

    /// Removes and returns the entry of `key`.
    pub fn remove(&mut self, key: &FlowKey) -> Option<V> {
        let i = self.find(key)?;
        self.len -= 1;
        self.slots[i].take().map(|(_, _, v)| v)
    }

    /// Forgets entries not seen since `cutoff` ns; returns how many.
    pub fn expire(&mut self, cutoff: u64) -> usize {
        let mut n = 0;
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|(_, seen, _)| *seen < cutoff) {
                *slot = None;
                n += 1;
            }
        }
        self.len -= n;
        n
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What a TCP segment says that the connection table needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number, when the ACK flag is set.
    pub ack: Option<u32>,
    /// The SYN flag.
    pub syn: bool,
    /// The RST flag.
    pub rst: bool,
    /// The FIN flag.
    pub fin: bool,
    /// Sequence space it occupies: payload, plus one for SYN and for FIN.
    pub len: u32,
    /// Payload bytes.
    pub payload: u32,
    /// The IP packet's length.
    pub ip_len: u16,
}

impl Segment {
    /// Reads the TCP header of `frame` (classified as `h`); `None` when it is not readable.
    #[inline]
    pub fn parse(frame: &[u8], h: &pxio::wire::Headers) -> Option<Self> {
        let tcp =
            pxio::wire::TcpPacket::new_checked(frame.get(h.l4_offset()..h.hdr_len())?).ok()?;
        let flags = tcp.flags();
        let syn = flags & tcp_flags::SYN != 0;
        let fin = flags & tcp_flags::FIN != 0;
        Some(Self {
            seq: tcp.seq_number(),
            ack: (flags & tcp_flags::ACK != 0).then(|| tcp.ack_number()),
            syn,
            rst: flags & tcp_flags::RST != 0,
            fin,
            len: u32::from(h.payload_len) + u32::from(syn) + u32::from(fin),
            payload: u32::from(h.payload_len),
            ip_len: h.ip_len,
        })
    }
}

/// What the table made of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The connection is established (it was, or this segment completed it).
    Established,
    /// Still half-open (or unknown).
    Pending,
}

/// What an ICMP error quoting one of the inside host's TCP segments is worth
/// ([`ConnTable::check_quoted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quoted {
    /// The quoted segment may be in flight: the error is believable.
    InFlight,
    /// The quoted sequence number is not in flight (RFC 5927 §4.1): a guess, or a stale error.
    OutOfWindow,
    /// No connection this instance knows (established or learned one way).
    Unknown,
}

/// The connection table: established connections and half-open ones, kept apart, each bounded
/// and evicting rather than refusing. The established table evicts its least recently seen
/// connection when full (a connection that went quiet loses its translation first; an active
/// one is seen again and refreshed on every packet), so connections made by one flooding host
/// cannot keep every later real connection from being merged.
#[derive(Debug)]
pub struct ConnTable {
    /// Established connections, least recently seen first out. Looked up on every packet, so
    /// hashed with foldhash, seeded at random per table, rather than SipHash (a third of the
    /// lookup's cost): only a handshake the inside host completes places an entry here, so an
    /// outside host cannot fill it with forged keys, and it is bounded and evicts. The tables
    /// forged packets can fill (half-open, learning) keep SipHash.
    map: LruSlab<KeyWords, Conn, foldhash::fast::RandomState>,
    /// An entry seen in a new recency period, to move to the front ([`ConnTable::touch_mut`]):
    /// its slot and key.
    promote: Option<(u32, FlowKey)>,
    /// Changes whenever an established connection may have been added or removed.
    generation: u32,
    /// Established connections evicted to make room for newer ones.
    established_evicted: u64,
    /// SYN and SYN-ACK segments on an established connection that changed nothing.
    syn_ignored: u64,
    half_open: Slots<HalfOpen>,
    learning: Slots<Learning>,
    /// Half-open entries evicted to make room for newer ones.
    evicted: u64,
    /// Connections learned from their data.
    learned: u64,
    /// Connections learned from one direction only (`None`: one-way learning is off).
    one_way: Option<Slots<Conn>>,
    /// Connections learned from one direction only, so far.
    learned_one_way: u64,
    /// Retransmissions of split segments of connections neither established nor one-way.
    unknown_retx: Slots<Retransmits>,
}

/// The key of a connection, oriented outside → inside whichever way the packet goes.
pub fn inbound_key(key: &FlowKey) -> FlowKey {
    *key
}

/// The inbound-oriented key of an outbound packet's flow key.
pub fn reverse(key: &FlowKey) -> FlowKey {
    key.reversed()
}

impl ConnTable {
    /// A table for up to `capacity` established, `half_open` half-open connections and
    /// `learning` connections being learned from their data, allocated up front.
    pub fn new(capacity: usize, half_open: usize, learning: usize) -> Self {
        Self {
            map: LruSlab::with_hasher(capacity, foldhash::fast::RandomState::default()),
            promote: None,
            generation: 0,
            established_evicted: 0,
            syn_ignored: 0,
            half_open: Slots::new(half_open),
            learning: Slots::new(learning),
            evicted: 0,
            learned: 0,
            one_way: None,
            learned_one_way: 0,
            unknown_retx: Slots::new(UNKNOWN_RETX_CAPACITY),
        }
    }

    /// Turns on one-way learning (module docs), with a table of at least `capacity` one-way
    /// connections (least recently seen evicted).
    pub fn with_one_way(mut self, capacity: usize) -> Self {
        self.one_way = Some(Slots::new(capacity));
        self
    }

    /// Records an established connection, evicting the least recently seen one when the table
    /// is full.
    fn establish(&mut self, key: FlowKey, conn: Conn) {
        self.promote_pending();
        self.generation = self.generation.wrapping_add(1);
        if let Some((old, _)) = self.map.push(KeyWords(key), conn) {
            if old.0 != key {
                self.established_evicted += 1;
            }
        }
    }

    /// A SYN or SYN-ACK of the connection `key` (inbound-oriented) from outside (`inbound`) or
    /// from inside, with the outside's path MTU hint when it came from outside. A SYN-ACK from
    /// outside that acknowledges the inside's SYN completes the connection; anything else is
    /// remembered as half-open.
    ///
    /// **On an established connection** a SYN or SYN-ACK changes nothing, as an endpoint that
    /// answers it with a challenge ACK changes nothing (RFC 5961 §4): its sequence number is
    /// anyone's guess, and its MSS must not set the split size of a connection it may not belong
    /// to. The inside host alone decides whether it starts a new incarnation (after FIN or RST,
    /// or reusing a connection in TIME-WAIT, as Linux allows), and says so in its answer: a
    /// SYN-ACK that acknowledges the outside's SYN, or a SYN of its own. Only then is the old
    /// connection forgotten and the new one handled as any handshake is. Until then the
    /// outside's SYN waits as a half-open entry, where a flood of them only churns that table.
    pub fn on_handshake(
        &mut self,
        key: FlowKey,
        seg: &Segment,
        inbound: bool,
        pmtu: Option<u16>,
        now: u64,
    ) -> Outcome {
        if let Some(c) = self.map.get_mut(&KeyWords(key)) {
            c.last_seen = now;
            let new_incarnation = match (inbound, seg.ack) {
                (true, _) => {
                    let candidate = HalfOpen {
                        pmtu: pmtu.unwrap_or(0),
                        outside_isn: Some(seg.seq),
                        ..HalfOpen::default()
                    };
                    if self.half_open.insert(key, candidate, now) {
                        self.evicted += 1;
                    }
                    false
                }
                // The inside host opens a connection on this 4-tuple: it holds the old one
                // closed.
                (false, None) => true,
                // The inside host accepts the outside's SYN.
                (false, Some(ack)) => self
                    .half_open
                    .get_mut(&key, now)
                    .and_then(|h| h.outside_isn)
                    .is_some_and(|isn| ack == isn.wrapping_add(1)),
            };
            if !new_incarnation {
                self.syn_ignored += 1;
                return Outcome::Established;
            }
            self.map.pop(&KeyWords(key));
            self.generation = self.generation.wrapping_add(1);
        }
        let mut entry = self
            .half_open
            .get_mut(&key, now)
            .copied()
            .unwrap_or_default();
        if let Some(p) = pmtu {
            entry.pmtu = p;
        }
        if inbound {
            entry.outside_isn = Some(seg.seq);
            if let (Some(isn), Some(ack)) = (entry.inside_isn, seg.ack) {
                if acknowledges(ack, isn, entry.inside_snd_max) {
                    return self.promote(key, entry, now);
                }
            }
        } else {
            entry.inside_isn = Some(seg.seq);
            entry.inside_snd_max = seg.seq.wrapping_add(seg.len.max(1));
        }
        if self.half_open.insert(key, entry, now) {
            self.evicted += 1;
        }
        Outcome::Pending
    }

    /// A segment without SYN of a connection not (yet) established, from outside (`inbound`) or
    /// from inside. It completes a half-open connection when it acknowledges the other side's
    /// SYN: from outside, within what the inside has sent; from inside, a plain ACK of the
    /// outside's SYN. Otherwise it teaches the table the connection from its data (see the
    /// module documentation, "learned").
    pub fn on_segment(&mut self, key: &FlowKey, seg: &Segment, inbound: bool, now: u64) -> Outcome {
        if self.map.contains(&KeyWords(*key)) {
            return Outcome::Established;
        }
        let inside_rst = seg.rst && !inbound;
        if let Some(one_way) = &mut self.one_way {
            if let Some(c) = one_way.get_mut(key, now) {
                // The inside host resetting it: a spoofer's stream, or the connection's end.
                if inside_rst {
                    one_way.remove(key);
                    return Outcome::Pending;
                }
                if let (true, Some(ack)) = (inbound, seg.ack) {
                    c.flight.on_outside_ack(ack);
                }
                return Outcome::Established;
            }
        }
        if inside_rst {
            self.learning.remove(key);
        }
        if seg.syn || seg.rst {
            return Outcome::Pending;
        }
        match self.half_open_segment(key, seg, inbound, now) {
            Outcome::Pending => self.learn(key, seg, inbound, now),
            done => done,
        }
    }

    /// [`on_segment`](Self::on_segment) for a half-open connection.
    fn half_open_segment(
        &mut self,
        key: &FlowKey,
        seg: &Segment,
        inbound: bool,
        now: u64,
    ) -> Outcome {
        let Some(entry) = self.half_open.get_mut(key, now) else {
            return Outcome::Pending;
        };
        let proven = match (inbound, seg.ack) {
            (true, Some(ack)) => entry
                .inside_isn
                .is_some_and(|isn| acknowledges(ack, isn, entry.inside_snd_max)),
            (false, Some(ack)) => entry
                .outside_isn
                .is_some_and(|isn| acknowledges(ack, isn, isn.wrapping_add(1 << 30))),
            (_, None) => false,
        };
        if !inbound {
            let end = seg.seq.wrapping_add(seg.len);
            if entry.inside_isn.is_some() && before(entry.inside_snd_max, end) {
                entry.inside_snd_max = end;
            }
        }
        if !proven {
            return Outcome::Pending;
        }
        let entry = *entry;
        self.promote(*key, entry, now)
    }

    /// [`on_segment`](Self::on_segment) for a connection neither established nor half-open:
    /// learns it from its data.
    fn learn(&mut self, key: &FlowKey, seg: &Segment, inbound: bool, now: u64) -> Outcome {
        let Some(ack) = seg.ack else {
            return Outcome::Pending;
        };
        if !inbound {
            // The inside host acknowledging data the outside sent: the connection is real.
            let Some(e) = self.learning.get_mut(key, now) else {
                return Outcome::Pending;
            };
            e.inside_seen = true;
            if before(e.base, ack) && !before(e.high, ack) {
                e.acked = true;
            }
        } else if let Some(e) = self.learning.get_mut(key, now) {
            let ack_ok = !before(ack, e.ack) && ack.wrapping_sub(e.ack) < 1 << 30;
            let sized = seg.ip_len >= LEARN_MIN_IP_LEN;
            if seg.seq == e.next
                && ack_ok
                && !seg.fin
                && seg.payload > 0
                && seg.payload <= e.seg_len
            {
                // In order: a segment of the run's size counts, a shorter one (a write
                // boundary) neither counts nor breaks the run.
                if seg.payload == e.seg_len && sized {
                    e.run = e.run.saturating_add(1);
                }
                e.next = e.next.wrapping_add(seg.payload);
                e.ack = ack;
            } else {
                // Out of order, a retransmission, a larger segment, an ACK that went back: the
                // run starts over at this segment (what the inside acknowledged still counts).
                e.next = seg.seq.wrapping_add(seg.payload);
                e.ack = ack;
                e.seg_len = seg.payload;
                e.ip_len = seg.ip_len;
                e.run = u8::from(sized && seg.payload > 0 && !seg.fin);
                if before(seg.seq, e.base) {
                    e.base = seg.seq;
                }
            }
            if before(e.high, e.next) {
                e.high = e.next;
            }
        } else {
            if seg.payload == 0 {
                return Outcome::Pending;
            }
            let end = seg.seq.wrapping_add(seg.payload);
            // The inside host's SYN or SYN-ACK counts as a segment seen from inside.
            let inside_seen = self
                .half_open
                .get_mut(key, now)
                .is_some_and(|h| h.inside_isn.is_some());
            let entry = Learning {
                base: seg.seq,
                high: end,
                next: end,
                ack,
                seg_len: seg.payload,
                ip_len: seg.ip_len,
                run: u8::from(seg.ip_len >= LEARN_MIN_IP_LEN && !seg.fin),
                acked: false,
                inside_seen,
            };
            self.learning.insert(*key, entry, now);
            return Outcome::Pending;
        }
        let Some(e) = self.learning.get_mut(key, now).copied() else {
            return Outcome::Pending;
        };
        if e.run < LEARN_SEGMENTS {
            return Outcome::Pending;
        }
        if !e.acked {
            // Without the inside host's acknowledgement, only a connection this instance sees
            // one way (none of its segments from inside) is admitted, to the one-way table.
            let Some(one_way) = self.one_way.as_mut().filter(|_| inbound && !e.inside_seen) else {
                return Outcome::Pending;
            };
            self.learning.remove(key);
            let mut conn = Conn::new(e.ip_len, now);
            conn.flight.on_outside_ack(ack);
            one_way.insert(*key, conn, now);
            self.learned_one_way += 1;
            return Outcome::Established;
        }
        self.learning.remove(key);
        let mut conn = Conn::new(e.ip_len, now);
        if inbound {
            conn.flight.on_outside_ack(ack);
        } else {
            conn.flight.on_inside(seg);
        }
        self.establish(*key, conn);
        self.learned += 1;
        Outcome::Established
    }

    /// Moves a half-open connection whose handshake completed to the established table.
    fn promote(&mut self, key: FlowKey, entry: HalfOpen, now: u64) -> Outcome {
        self.half_open.remove(&key);
        let mut conn = Conn::new(entry.pmtu, now);
        if let Some(isn) = entry.inside_isn {
            // The inside host's SYN is in flight until the outside acknowledges it.
            conn.flight = Flight {
                una: Some(isn),
                nxt: Some(entry.inside_snd_max),
            };
        }
        self.establish(key, conn);
        Outcome::Established
    }

    /// The path MTU hint of a connection, established, one-way or half-open, refreshing it;
    /// `None` when it is unknown, also for a connection whose handshake completed without the
    /// outside's SYN or SYN-ACK crossing this instance (behind ECMP: a split size of 0 would
    /// drop every segment the inside host sends; the caller falls back to its default).
    pub fn pmtu_hint(&mut self, key: &FlowKey, now: u64) -> Option<u16> {
        let hint = if let Some(c) = self.touch(key, now) {
            c.pmtu
        } else if let Some(c) = self.one_way.as_mut().and_then(|t| t.get_mut(key, now)) {
            c.pmtu
        } else {
            self.half_open.get_mut(key, now).map_or(0, |e| e.pmtu)
        };
        (hint > 0).then_some(hint)
    }

    /// What an ICMP error quoting the inside host's segment at `seq` of the connection `key`
    /// (inbound-oriented) is worth: whether the connection is known here (established, or
    /// learned one way) and the segment may be in flight ([`Flight::in_flight`]).
    pub fn check_quoted(&mut self, key: &FlowKey, seq: u32, now: u64) -> Quoted {
        let conn = match self.touch(key, now) {
            Some(c) => c,
            None => match self.one_way.as_mut().and_then(|t| t.get_mut(key, now)) {
                Some(c) => *c,
                None => return Quoted::Unknown,
            },
        };
        if conn.flight.in_flight(seq) {
            Quoted::InFlight
        } else {
            Quoted::OutOfWindow
        }
    }

    /// A segment from outside (`seg`, when its TCP header was readable) of the connection
    /// `key`: its slot when the connection is established, which the segment refreshes (and
    /// its acknowledgement, [`Flight::on_outside_ack`]). `at`: the slot the connection had
    /// when last seen ([`on_outside`](Self::on_outside) returns it), which saves the lookup
    /// while it still holds the connection.
    pub fn on_outside(
        &mut self,
        at: Option<u32>,
        key: &FlowKey,
        seg: Option<&Segment>,
        now: u64,
    ) -> Option<u32> {
        let (slot, c) = self.touch_slot(at, key, now)?;
        if let Some(ack) = seg.and_then(|s| s.ack) {
            c.flight.on_outside_ack(ack);
        }
        Some(slot)
    }

    /// [`on_outside`](Self::on_outside) for an acknowledgement `ack` from outside, of the
    /// connection `key` found in slot `at` when the table's [`generation`](Self::generation)
    /// was `seen`: while it still is, the slot still holds that connection (nothing was added,
    /// evicted or removed since), and neither a key compare nor a lookup is needed; otherwise
    /// as [`on_outside`](Self::on_outside).
    #[inline]
    pub fn on_outside_ack(
        &mut self,
        at: u32,
        seen: u32,
        key: &FlowKey,
        ack: u32,
        now: u64,
    ) -> Option<u32> {
        let (slot, c) = if seen == self.generation {
            debug_assert!(self.map.key_at(at).is_some_and(|k| k.0 == *key));
            self.touch_at(at, key, now)?
        } else {
            self.touch_slot(Some(at), key, now)?
        };
        c.flight.on_outside_ack(ack);
        Some(slot)
    }

    /// Asks the CPU to bring the connection in slot `at` into its cache, for a packet of it a
    /// little later in the burst: a burst's misses then overlap instead of following one
    /// another.
    #[inline]
    pub fn prefetch(&self, at: u32) {
        self.map.prefetch(at);
    }

    /// A segment from inside of the connection `key` (inbound-oriented), when the connection is
    /// established: one lookup (none while slot `at` still holds it) refreshes it, records what
    /// the segment sent ([`Flight::on_inside`]), and returns its slot and the connection, for
    /// its path MTU hint and black-hole record.
    pub fn on_inside_mut(
        &mut self,
        at: Option<u32>,
        key: &FlowKey,
        seg: &Segment,
        now: u64,
    ) -> Option<(u32, &mut Conn)> {
        let (slot, c) = self.touch_slot(at, key, now)?;
        c.flight.on_inside(seg);
        Some((slot, c))
    }

    /// The established connection, refreshed.
    pub fn touch(&mut self, key: &FlowKey, now: u64) -> Option<Conn> {
        self.touch_mut(key, now).map(|c| *c)
    }

    /// The established connection, refreshed (and made the most recently seen), to update.
    pub fn touch_mut(&mut self, key: &FlowKey, now: u64) -> Option<&mut Conn> {
        self.touch_slot(None, key, now).map(|(_, c)| c)
    }

    /// [`touch_mut`](Self::touch_mut), looking in slot `at` first; with the connection's slot.
    ///
    /// One lookup at most, which leaves the recency order alone: moving an entry to the front
    /// of the order rewrites it and its neighbours, a miss each at thousands of connections, on
    /// every packet. An entry moves at most once per [`PROMOTE_EVERY_NS`] instead, one call
    /// later, the first time it is seen in a new such period; so the order, which eviction and
    /// [`expire`](Self::expire) follow, is that of the last sighting to within that period.
    #[inline]
    fn touch_slot(&mut self, at: Option<u32>, key: &FlowKey, now: u64) -> Option<(u32, &mut Conn)> {
        // The slot remembered, when it still holds the connection (one key compare); else
        // the lookup.
        let held = at.filter(|&at| self.map.key_at(at).is_some_and(|k| k.0 == *key));
        let slot = match held {
            Some(at) => at,
            None => self.map.find(&KeyWords(*key))?,
        };
        self.touch_at(slot, key, now)
    }

    /// Refreshes the connection `key` in `slot`, which holds it, as
    /// [`touch_slot`](Self::touch_slot) does once it found it.
    #[inline]
    fn touch_at(&mut self, slot: u32, key: &FlowKey, now: u64) -> Option<(u32, &mut Conn)> {
        if self.promote.is_some() {
            self.promote_pending();
        }
        let (_, c) = self.map.slot_mut(slot)?;
        if c.last_seen / PROMOTE_EVERY_NS != now / PROMOTE_EVERY_NS {
            self.promote = Some((slot, *key));
        }
        c.last_seen = now;
        Some((slot, c))
    }

    /// Moves the entry a [`touch_mut`](Self::touch_mut) left to promote to the front.
    fn promote_pending(&mut self) {
        if let Some((slot, key)) = self.promote.take() {
            self.map.promote_at(slot, &KeyWords(key));
        }
    }

    /// What the gateway saw of the split segments of the connection `key`, refreshed: the
    /// established or one-way connection's, else an entry of the bounded table of connections
    /// split but not known (made now if needed). `None` only if a table cannot hold it.
    pub fn retransmits_mut(&mut self, key: &FlowKey, now: u64) -> Option<&mut Retransmits> {
        if self.map.contains(&KeyWords(*key)) {
            return self.touch_mut(key, now).map(|c| &mut c.retx);
        }
        if self.one_way.as_ref().is_some_and(|t| t.find(key).is_some()) {
            return self
                .one_way
                .as_mut()?
                .get_mut(key, now)
                .map(|c| &mut c.retx);
        }
        if self.unknown_retx.get_mut(key, now).is_none() {
            self.unknown_retx.insert(*key, Retransmits::default(), now);
        }
        self.unknown_retx.get_mut(key, now)
    }

    /// Forgets connections idle since before `cutoff` ns, half-open and learning ones too;
    /// returns how many established ones went.
    pub fn expire(&mut self, cutoff: u64) -> usize {
        self.promote_pending();
        self.generation = self.generation.wrapping_add(1);
        let before = self.map.len();
        // Least recently seen first: every refresh moves an entry to the front, so the idle
        // ones are at the back, and the walk stops at the first one seen since `cutoff`.
        while self
            .map
            .peek_lru()
            .is_some_and(|(_, c)| c.last_seen < cutoff)
        {
            self.map.pop_lru();
        }
        self.half_open.expire(cutoff);
        self.learning.expire(cutoff);
        if let Some(t) = &mut self.one_way {
            t.expire(cutoff);
        }
        self.unknown_retx.expire(cutoff);
        before - self.map.len()
    }

    /// A number that changes whenever an established connection may have been added, evicted
    /// or removed: while it stays the same, one found established still is.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Established connections held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no established connection is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Half-open connections held.
    pub fn half_open(&self) -> usize {
        self.half_open.len()
    }

    /// Half-open entries evicted so far to make room for newer ones.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Established connections evicted so far to make room for newer ones.
    pub fn established_evicted(&self) -> u64 {
        self.established_evicted
    }

    /// SYN and SYN-ACK segments on established connections that changed nothing, so far.
    pub fn syn_ignored(&self) -> u64 {
        self.syn_ignored
    }

    /// Connections learned from their data so far.
    pub fn learned(&self) -> u64 {
        self.learned
    }

    /// Connections learned from one direction only so far (module docs).
    pub fn learned_one_way(&self) -> u64 {
        self.learned_one_way
    }

    /// One-way connections held now.
    pub fn one_way(&self) -> usize {
        self.one_way.as_ref().map_or(0, Slots::len)
    }
}

/// Whether `ack` acknowledges the SYN sent with `isn` and nothing beyond `snd_max` (sequence
/// space, RFC 9293 §3.4).
fn acknowledges(ack: u32, isn: u32, snd_max: u32) -> bool {
    before(isn, ack) && !before(snd_max, ack)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u32) -> FlowKey {
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&i.to_be_bytes());
        FlowKey {
            src,
            dst: [9; 16],
            sport: 1,
            dport: 80,
            proto: 6,
            v6: false,
        }
    }

    fn seg(seq: u32, ack: Option<u32>, syn: bool) -> Segment {
        Segment {
            seq,
            ack,
            syn,
            rst: false,
            fin: false,
            len: u32::from(syn),
            payload: 0,
            ip_len: 40,
        }
    }

    fn data(seq: u32, ack: u32, payload: u32) -> Segment {
        Segment {
            seq,
            ack: Some(ack),
            syn: false,
            rst: false,
            fin: false,
            len: payload,
            payload,
            ip_len: payload as u16 + 40,
        }
    }

    #[test]
    fn a_run_acknowledged_by_the_inside_host_is_learned() {
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(7);
        let mut seq = u32::MAX - 5000; // across the wrap
        let feed = |t: &mut ConnTable, seq: &mut u32, payload: u32| {
            let o = t.on_segment(&k, &data(*seq, 77, payload), true, 0);
            *seq = seq.wrapping_add(payload);
            o
        };
        for _ in 0..20 {
            let o = feed(&mut t, &mut seq, 1448);
            assert_eq!(o, Outcome::Pending, "not acknowledged yet");
        }
        // An ACK beyond what was sent proves nothing; one within it does.
        let lie = data(77, seq.wrapping_add(10), 0);
        assert_eq!(t.on_segment(&k, &lie, false, 0), Outcome::Pending);
        assert_eq!(feed(&mut t, &mut seq, 1448), Outcome::Pending);
        let ack = data(77, seq.wrapping_sub(1448), 0);
        assert_eq!(t.on_segment(&k, &ack, false, 0), Outcome::Established);
        assert_eq!(
            t.touch(&k, 0).map(|c| c.pmtu),
            Some(1488),
            "the observed size"
        );
        assert_eq!(t.learned(), 1);
    }

    #[test]
    fn a_broken_run_starts_over_and_small_segments_never_count() {
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(8);
        let ack_all = |t: &mut ConnTable, upto: u32| t.on_segment(&k, &data(1, upto, 0), false, 0);
        let mut seq = 1000;
        for i in 0..7 {
            t.on_segment(&k, &data(seq, 5, 1448), true, 0);
            seq += 1448;
            if i == 3 {
                // A write boundary: shorter, in order; neither counts nor breaks.
                t.on_segment(&k, &data(seq, 5, 100), true, 0);
                seq += 100;
            }
        }
        assert_eq!(
            ack_all(&mut t, seq),
            Outcome::Pending,
            "7 in a row: not yet"
        );
        // A gap (a lost segment): the run starts over.
        seq += 1448;
        for _ in 0..7 {
            assert_eq!(
                t.on_segment(&k, &data(seq, 5, 1448), true, 0),
                Outcome::Pending
            );
            seq += 1448;
        }
        assert_eq!(
            t.on_segment(&k, &data(seq, 5, 1448), true, 0),
            Outcome::Established
        );
        // Small segments are never learned.
        let k2 = key(9);
        let mut seq = 0;
        for _ in 0..50 {
            t.on_segment(&k2, &data(seq, 5, 200), true, 0);
            seq += 200;
        }
        assert_eq!(
            t.on_segment(&k2, &data(1, seq, 0), false, 0),
            Outcome::Pending
        );
        assert_eq!(
            t.on_segment(&k2, &data(seq, 5, 200), true, 0),
            Outcome::Pending
        );
    }

    /// Feeds `n` in-order MSS-sized segments from outside; returns the last outcome.
    fn run_from_outside(t: &mut ConnTable, k: &FlowKey, seq: &mut u32, n: usize) -> Outcome {
        let mut last = Outcome::Pending;
        for _ in 0..n {
            last = t.on_segment(k, &data(*seq, 77, 1448), true, 0);
            *seq = seq.wrapping_add(1448);
        }
        last
    }

    #[test]
    fn a_connection_seen_one_way_is_learned_only_with_one_way_learning() {
        // Off (the default): the inside host's acknowledgement is required, as before.
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(20);
        t.on_handshake(k, &seg(99, None, true), true, Some(1500), 0);
        let mut seq = 100;
        assert_eq!(run_from_outside(&mut t, &k, &mut seq, 50), Outcome::Pending);
        // On: the outside's SYN, then its data, nothing from inside (the SYN-ACK and the ACKs
        // crossed another instance).
        let mut t = ConnTable::new(4, 16, 16).with_one_way(8);
        t.on_handshake(k, &seg(99, None, true), true, Some(1500), 0);
        let mut seq = 100;
        let n = usize::from(LEARN_SEGMENTS);
        assert_eq!(
            run_from_outside(&mut t, &k, &mut seq, n - 1),
            Outcome::Pending
        );
        assert_eq!(
            run_from_outside(&mut t, &k, &mut seq, 1),
            Outcome::Established
        );
        assert_eq!(
            run_from_outside(&mut t, &k, &mut seq, 1),
            Outcome::Established
        );
        assert_eq!((t.len(), t.one_way(), t.learned_one_way()), (0, 1, 1));
        assert_eq!(t.pmtu_hint(&k, 0), Some(1488), "the observed size");
        // Its acknowledgements bound what an ICMP error may quote: from the last one on.
        assert_eq!(t.check_quoted(&k, 77, 0), Quoted::InFlight);
        assert_eq!(t.check_quoted(&k, 76, 0), Quoted::OutOfWindow);
        // The inside host resets it: gone.
        let mut rst = data(5, seq, 0);
        rst.rst = true;
        assert_eq!(t.on_segment(&k, &rst, false, 0), Outcome::Pending);
        assert_eq!(t.one_way(), 0);
        assert_eq!(t.check_quoted(&k, 5, 0), Quoted::Unknown);
    }

    #[test]
    fn a_connection_whose_inside_segments_this_instance_sees_still_needs_their_ack() {
        let mut t = ConnTable::new(4, 16, 16).with_one_way(8);
        // The inside host's SYN-ACK crossed this instance: it is not one-way here.
        let k = key(21);
        t.on_handshake(k, &seg(5000, Some(100), true), false, None, 0);
        let mut seq = 100;
        assert_eq!(run_from_outside(&mut t, &k, &mut seq, 30), Outcome::Pending);
        // An inside segment seen mid-stream (acknowledging nothing sent) counts the same way.
        let k = key(22);
        let mut seq = 100;
        run_from_outside(&mut t, &k, &mut seq, 1);
        let lie = data(5, seq.wrapping_add(1_000_000), 0);
        assert_eq!(t.on_segment(&k, &lie, false, 0), Outcome::Pending);
        assert_eq!(run_from_outside(&mut t, &k, &mut seq, 30), Outcome::Pending);
        // Its real acknowledgement admits it to the established table.
        let ack = data(5, seq, 0);
        assert_eq!(t.on_segment(&k, &ack, false, 0), Outcome::Established);
        assert_eq!((t.len(), t.one_way(), t.learned_one_way()), (1, 0, 0));
    }

    #[test]
    fn spoofed_one_way_streams_only_churn_their_own_bounded_table() {
        let mut t = ConnTable::new(4, 16, 64).with_one_way(8);
        for i in 0..1000 {
            let mut seq = i * 7;
            let k = key(1000 + i);
            assert_eq!(
                run_from_outside(&mut t, &k, &mut seq, usize::from(LEARN_SEGMENTS)),
                Outcome::Established
            );
            assert!(t.one_way() <= 8);
        }
        assert_eq!(t.len(), 0, "the established table is untouched");
        // A real connection still completes its handshake into the established table.
        let k = key(1);
        t.on_handshake(k, &seg(7, None, true), false, None, 0);
        assert_eq!(
            t.on_handshake(k, &seg(900, Some(8), true), true, Some(1300), 1),
            Outcome::Established
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn slots_evict_the_oldest_of_a_full_set_and_stay_bounded() {
        let mut t = Slots::new(8);
        for i in 0..1000 {
            t.insert(key(i), i, u64::from(i));
            assert!(t.len() <= 8);
        }
        // The newest entry is always there.
        assert_eq!(t.get_mut(&key(999), 1000), Some(&mut 999));
        t.expire(995);
        assert!(t.slots.iter().flatten().all(|(_, seen, _)| *seen >= 995));
        assert_eq!(t.len(), t.slots.iter().flatten().count());
        assert_eq!(t.remove(&key(999)), Some(999));
    }

    /// The words a key is hashed as are one-to-one: keys that differ in any field, the ports and
    /// the protocol and family bits included, never share them (shared words would be collisions
    /// an outside host could choose, whatever the tables' secret hash keys).
    #[test]
    fn keys_that_differ_never_share_words() {
        let mut seen = std::collections::HashMap::new();
        let edges = [0u16, 1, 0x7fff, 0x8000, 0xfffe, u16::MAX];
        for (sport, dport, proto, v6) in edges.iter().flat_map(|&s| {
            edges.iter().flat_map(move |&d| {
                [6u8, 17, 255]
                    .into_iter()
                    .flat_map(move |p| [(s, d, p, false), (s, d, p, true)])
            })
        }) {
            let key = FlowKey {
                src: [10, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                dst: [192, 0, 2, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                sport,
                dport,
                proto,
                v6,
            };
            if let Some(other) = seen.insert(key_words(&key), key) {
                panic!("{key:?} and {other:?} share their words");
            }
        }
        assert_eq!(seen.len(), edges.len() * edges.len() * 3 * 2);
    }

    /// A set holds four entries: in a table of one set, four keys stay whatever they hash to,
    /// and a fifth evicts the least recently seen of them, not a newer one.
    #[test]
    fn a_set_holds_four_and_evicts_the_oldest() {
        let mut t = Slots::new(WAYS);
        assert_eq!(t.sets, 1);
        for i in 0..4 {
            assert!(
                !t.insert(key(i), i, u64::from(10 + i)),
                "key {i} evicted another"
            );
        }
        assert_eq!(t.len(), 4);
        // Key 0 seen again: key 1 is now the oldest.
        assert_eq!(t.get_mut(&key(0), 20), Some(&mut 0));
        assert!(t.insert(key(9), 9, 21));
        assert_eq!(t.len(), 4);
        assert!(t.find(&key(1)).is_none());
        for k in [0, 2, 3, 9] {
            assert!(t.find(&key(k)).is_some(), "key {k} lost");
        }
    }

    #[test]
    fn an_outside_syn_completes_only_with_the_inside_isn() {
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(1);
        assert_eq!(
            t.on_handshake(k, &seg(100, None, true), true, Some(1400), 0),
            Outcome::Pending
        );
        assert_eq!(
            t.pmtu_hint(&k, 1),
            Some(1400),
            "for the SYN-ACK's MSS clamp"
        );
        assert_eq!(
            t.on_handshake(k, &seg(5000, Some(101), true), false, None, 2),
            Outcome::Pending,
            "the inside's SYN-ACK proves nothing about the outside"
        );
        // A spoofer guesses the ACK.
        assert_eq!(
            t.on_segment(&k, &seg(101, Some(4242), false), true, 3),
            Outcome::Pending
        );
        assert_eq!(
            t.on_segment(&k, &seg(101, Some(5002), false), true, 3),
            Outcome::Pending
        );
        assert!(t.is_empty());
        assert_eq!(
            t.on_segment(&k, &seg(101, Some(5001), false), true, 4),
            Outcome::Established
        );
        assert_eq!(t.touch(&k, 5).map(|c| c.pmtu), Some(1400));
        assert_eq!(t.half_open(), 0);
    }

    #[test]
    fn an_inside_syn_completes_with_the_outside_syn_ack_or_the_inside_ack() {
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(2);
        assert_eq!(
            t.on_handshake(k, &seg(7, None, true), false, None, 0),
            Outcome::Pending
        );
        assert_eq!(
            t.on_handshake(k, &seg(900, Some(8), true), true, Some(1300), 1),
            Outcome::Established
        );
        assert_eq!(t.touch(&k, 2).map(|c| c.pmtu), Some(1300));
        // The inside's SYN was not seen: its ACK of the outside's SYN-ACK completes it.
        let k = key(3);
        assert_eq!(
            t.on_handshake(k, &seg(900, Some(8), true), true, Some(1300), 1),
            Outcome::Pending
        );
        assert_eq!(
            t.on_segment(&k, &seg(8, Some(901), false), false, 2),
            Outcome::Established
        );
    }

    #[test]
    fn a_connection_completed_without_the_outside_syn_ack_has_no_pmtu_hint() {
        // The inside's SYN crossed this instance, the outside's SYN-ACK another one; then the
        // routes changed and the outside's ACKs arrive here (a failover behind ECMP).
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(4);
        t.on_handshake(k, &seg(7, None, true), false, None, 0);
        assert_eq!(
            t.on_segment(&k, &seg(901, Some(8), false), true, 1),
            Outcome::Established
        );
        assert_eq!(t.pmtu_hint(&k, 2), None, "unknown, not 0");
    }

    #[test]
    fn a_full_established_table_evicts_the_least_recently_seen() {
        // Times in recency periods: within one, the order does not move (`touch_mut`).
        let p = PROMOTE_EVERY_NS;
        let mut t = ConnTable::new(2, 16, 16);
        let open = |t: &mut ConnTable, k: FlowKey, now: u64| {
            t.on_handshake(k, &seg(1, None, true), true, Some(1500), now);
            t.on_handshake(k, &seg(50, Some(2), true), false, None, now);
            t.on_segment(&k, &seg(2, Some(51), false), true, now)
        };
        for i in 0..3u64 {
            assert_eq!(
                open(&mut t, key(10 + i as u32), i * p),
                Outcome::Established
            );
            if i == 1 {
                // The first connection is seen again: the second is now the idlest.
                assert!(t.touch(&key(10), 2 * p).is_some());
            }
        }
        assert_eq!((t.len(), t.established_evicted()), (2, 1));
        assert!(t.touch(&key(10), 3 * p).is_some() && t.touch(&key(12), 3 * p).is_some());
        assert!(t.touch(&key(11), 3 * p).is_none());
        // Expiry walks from the idlest end and stops at the first one seen since the cutoff.
        assert!(t.touch(&key(12), 9 * p).is_some());
        assert_eq!(t.expire(5 * p), 1);
        assert!(t.touch(&key(12), 9 * p).is_some());
    }

    /// Seen again within the same recency period, a connection keeps its place: the order is
    /// that of the last sighting to within a period, no finer.
    #[test]
    fn the_recency_order_moves_once_per_period() {
        let p = PROMOTE_EVERY_NS;
        let mut t = ConnTable::new(2, 16, 16);
        for (k, now) in [(key(20), 10), (key(21), 20)] {
            t.on_handshake(k, &seg(1, None, true), true, Some(1500), now);
            t.on_handshake(k, &seg(50, Some(2), true), false, None, now);
            t.on_segment(&k, &seg(2, Some(51), false), true, now);
        }
        // Same period: key 20 stays the idlest, and a third connection evicts it.
        assert!(t.touch(&key(20), 30).is_some());
        let k = key(22);
        t.on_handshake(k, &seg(1, None, true), true, Some(1500), 40);
        t.on_handshake(k, &seg(50, Some(2), true), false, None, 40);
        t.on_segment(&k, &seg(2, Some(51), false), true, 40);
        assert!(t.touch(&key(20), 50).is_none());
        // A new period: key 21, seen again, moves ahead of key 22, which goes next.
        assert!(t.touch(&key(21), p + 1).is_some());
        let k = key(23);
        t.on_handshake(k, &seg(1, None, true), true, Some(1500), p + 2);
        t.on_handshake(k, &seg(50, Some(2), true), false, None, p + 2);
        t.on_segment(&k, &seg(2, Some(51), false), true, p + 2);
        assert!(t.touch(&key(21), p + 3).is_some());
        assert!(t.touch(&key(22), p + 3).is_none());
    }

    #[test]
    fn the_flight_window_follows_what_the_inside_sent_and_the_outside_acknowledged() {
        let mut f = Flight::default();
        assert!(!f.in_flight(0), "nothing known: nothing believed");
        f.on_inside(&data(1000, 1, 500));
        assert!(f.in_flight(1000) && f.in_flight(1500) && !f.in_flight(1501));
        assert!(!f.in_flight(1000u32.wrapping_sub(MAX_WINDOW)));
        f.on_outside_ack(1200);
        assert!(!f.in_flight(1199) && f.in_flight(1200));
        // An ACK beyond what was sent, or one going back, moves nothing.
        f.on_outside_ack(9999);
        f.on_outside_ack(1100);
        assert_eq!(f.una, Some(1200));
        // Across the wrap.
        let mut f = Flight::default();
        f.on_inside(&data(u32::MAX - 10, 1, 100));
        f.on_outside_ack(u32::MAX - 5);
        assert!(f.in_flight(5) && !f.in_flight(u32::MAX - 6) && !f.in_flight(90));
    }

    #[test]
    fn a_syn_on_an_established_connection_waits_for_the_inside_hosts_answer() {
        let mut t = ConnTable::new(4, 16, 16);
        let k = key(30);
        t.on_handshake(k, &seg(100, None, true), true, Some(1400), 0);
        t.on_handshake(k, &seg(500, Some(101), true), false, None, 0);
        t.on_segment(&k, &seg(101, Some(501), false), true, 0);
        assert_eq!(t.pmtu_hint(&k, 1), Some(1400));
        // A SYN with another MSS: remembered apart, the connection unchanged.
        let outcome = t.on_handshake(k, &seg(9000, None, true), true, Some(600), 2);
        assert_eq!(outcome, Outcome::Established);
        assert_eq!((t.pmtu_hint(&k, 3), t.syn_ignored()), (Some(1400), 1));
        // The inside host answers with a SYN-ACK for another SYN: still nothing.
        t.on_handshake(k, &seg(7000, Some(1234), true), false, None, 4);
        assert_eq!((t.pmtu_hint(&k, 5), t.syn_ignored()), (Some(1400), 2));
        // It accepts the SYN: a new incarnation, with that SYN's hint, once the outside's ACK
        // of the inside's SYN-ACK completes it.
        t.on_handshake(k, &seg(7000, Some(9001), true), false, None, 6);
        assert_eq!(t.len(), 0);
        assert_eq!(
            t.on_segment(&k, &seg(9001, Some(7001), false), true, 7),
            Outcome::Established
        );
        assert_eq!((t.pmtu_hint(&k, 8), t.syn_ignored()), (Some(600), 2));
    }
}
