//! Connections whose handshake the gateway saw, with their path MTU hint. Flows not in this
//! table are forwarded untranslated (no merging; outbound packets are still cut to the eMTU if
//! they must be).

use std::collections::HashMap;

use pxio::wire::FlowKey;

/// A connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Path MTU toward the outside peer.
    pub pmtu: u16,
    /// Last packet seen, ns.
    pub last_seen: u64,
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
