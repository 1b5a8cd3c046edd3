//! **A simulation**, not a driver: a NIC with RX queues, RSS, prioritised flow rules in groups,
//! and a hairpin queue, kept in memory, so that RX queue scaling, the rule manager and hairpin
//! opt-in can be tested and measured on machines without a NIC that has `rte_flow`.
//!
//! What it models: packets are steered when they arrive, by the matching rule of highest
//! priority (lowest number) in group 0, following JUMP actions into group 1; without a matching
//! rule, by RSS over all queues. Queues have a fixed depth and drop (and count) when full, as a
//! NIC's descriptor ring does. A rule change takes effect atomically for every later packet,
//! which is what insert-then-evict gives on real hardware (§4.3). Rule calls can be made slow
//! (to stand for firmware latency) or refused (to stand for a driver's refusal).
//!
//! What it does not model: LRO, DMA, the time packets spend in the NIC, the real cost of rule
//! updates, or anything about throughput. Those need a real NIC (docs/architecture.md).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::buf::{HeapBuf, HeapPool, PacketBuf};
use crate::rxq::manager::{FlowPort, RuleError, Sample};
use crate::rxq::unified::{flow_id, RxRing};
use crate::wire::{classify, Class, FlowKey};

/// A simulated rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimRule {
    /// Every packet of `group` to RSS over `queues`.
    Subset {
        /// Group.
        group: u32,
        /// Priority (lower wins).
        priority: u32,
        /// Queues.
        queues: Vec<u16>,
    },
    /// Packets of flow `key` jump to `group` (group 0).
    Target {
        /// The flow.
        key: FlowKey,
        /// Priority.
        priority: u32,
        /// Group jumped to.
        group: u32,
    },
    /// Every packet to the hairpin queue (group 0), one in `sample.ratio` also copied to
    /// `sample.queue`.
    Hairpin {
        /// Priority.
        priority: u32,
        /// The sample for the host, if any.
        sample: Option<Sample>,
    },
}

impl SimRule {
    fn group(&self) -> u32 {
        match self {
            SimRule::Subset { group, .. } => *group,
            SimRule::Target { .. } | SimRule::Hairpin { .. } => 0,
        }
    }
    fn priority(&self) -> u32 {
        match self {
            SimRule::Subset { priority, .. }
            | SimRule::Target { priority, .. }
            | SimRule::Hairpin { priority, .. } => *priority,
        }
    }
}

/// Counters of the simulated NIC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimCounters {
    /// Packets offered to the NIC.
    pub arrived: u64,
    /// Packets put on an RX queue.
    pub queued: u64,
    /// Packets dropped because their queue was full (a NIC's `imissed`).
    pub missed: u64,
    /// Packets forwarded by the hairpin queue (never seen by the host but as samples).
    pub hairpinned: u64,
    /// Of those, copies put on the sample queue.
    pub sampled: u64,
    /// Packets read by the host.
    pub read: u64,
    /// Rule insertions accepted.
    pub inserted: u64,
    /// Rule removals.
    pub removed: u64,
}

struct State {
    queues: Vec<VecDeque<HeapBuf>>,
    depth: usize,
    rules: Vec<(u64, SimRule)>,
    next_handle: u64,
    counters: SimCounters,
    rule_delay: Duration,
    refuse: Option<String>,
    hairpin: bool,
    /// Per queue: packets ever queued there.
    per_queue: Vec<u64>,
}

/// A simulated NIC; clones share it. See the module docs for what it models.
#[derive(Clone)]
pub struct SimulatedNic {
    state: Arc<Mutex<State>>,
    name: String,
}

impl SimulatedNic {
    /// A NIC with `queues` RX queues of `depth` packets each, no rules, no hairpin queue.
    pub fn new(name: &str, queues: u16, depth: usize) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                queues: (0..queues).map(|_| VecDeque::new()).collect(),
                depth,
                rules: Vec::new(),
                next_handle: 1,
                counters: SimCounters::default(),
                rule_delay: Duration::ZERO,
                refuse: None,
                hairpin: false,
                per_queue: vec![0; usize::from(queues)],
            })),
            name: name.to_owned(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test thread that panicked while holding the lock leaves consistent state: the
        // simulation has no invariant spanning two statements.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the NIC a hairpin queue.
    pub fn with_hairpin(self) -> Self {
        self.lock().hairpin = true;
        self
    }

    /// Every rule call takes this long (firmware latency stand-in).
    pub fn set_rule_delay(&self, delay: Duration) {
        self.lock().rule_delay = delay;
    }

    /// Every rule insertion is refused with `message` (`None`: accepted again).
    pub fn set_refusal(&self, message: Option<&str>) {
        self.lock().refuse = message.map(str::to_owned);
    }

    /// A packet arrives from the wire: steered, then queued, hairpinned or dropped.
    pub fn arrive(&self, pkt: HeapBuf) {
        let key = match classify(pkt.head(), pkt.len()) {
            Class::Tcp(h) | Class::Udp(h) => Some(h.key),
            _ => None,
        };
        let hash = flow_id(&pkt).unwrap_or(0);
        let mut s = self.lock();
        s.counters.arrived += 1;
        let total = s.queues.len() as u64;
        let pick = |queues: &[u16]| queues[(hash % queues.len() as u64) as usize];
        let mut group = 0;
        let mut target = None;
        // Group 0, then at most one jump.
        for _ in 0..2 {
            let best = s
                .rules
                .iter()
                .filter(|(_, r)| r.group() == group)
                .filter(|(_, r)| match r {
                    SimRule::Target { key: k, .. } => Some(*k) == key,
                    _ => true,
                })
                .min_by_key(|(h, r)| (r.priority(), *h))
                .map(|(_, r)| r.clone());
            match best {
                Some(SimRule::Subset { queues, .. }) => {
                    target = Some(pick(&queues));
                    break;
                }
                Some(SimRule::Target { group: g, .. }) => group = g,
                Some(SimRule::Hairpin { sample, .. }) => {
                    s.counters.hairpinned += 1;
                    if let Some(Sample { ratio, queue }) = sample {
                        if s.counters
                            .hairpinned
                            .is_multiple_of(u64::from(ratio.max(1)))
                        {
                            let q = usize::from(queue);
                            if q < s.queues.len() && s.queues[q].len() < s.depth {
                                s.counters.sampled += 1;
                                s.queues[q].push_back(pkt);
                            }
                        }
                    }
                    return;
                }
                None => break,
            }
        }
        let q = usize::from(target.unwrap_or((hash % total) as u16));
        if s.queues[q].len() >= s.depth {
            s.counters.missed += 1;
            return;
        }
        s.queues[q].push_back(pkt);
        s.per_queue[q] += 1;
        s.counters.queued += 1;
    }

    /// Counters.
    pub fn counters(&self) -> SimCounters {
        self.lock().counters
    }

    /// Packets waiting in each queue now.
    pub fn backlog(&self) -> Vec<usize> {
        self.lock().queues.iter().map(VecDeque::len).collect()
    }

    /// Packets ever queued on each queue.
    pub fn queued_per_queue(&self) -> Vec<u64> {
        self.lock().per_queue.clone()
    }

    /// Rules installed now.
    pub fn rules(&self) -> Vec<SimRule> {
        self.lock().rules.iter().map(|(_, r)| r.clone()).collect()
    }

    /// The handle to RX queue `index`.
    pub fn queue(&self, index: u16) -> SimQueue {
        SimQueue {
            nic: self.clone(),
            index,
        }
    }

    /// The rule-facing side, for a [`crate::rxq::RuleManager`].
    pub fn port(&self) -> SimPort {
        SimPort { nic: self.clone() }
    }
}

/// One RX queue of a [`SimulatedNic`].
pub struct SimQueue {
    nic: SimulatedNic,
    index: u16,
}

impl RxRing for SimQueue {
    type Pkt = HeapBuf;

    fn rx_into(&mut self, out: &mut Vec<HeapBuf>, max: usize) -> usize {
        let mut s = self.nic.lock();
        let q = &mut s.queues[usize::from(self.index)];
        let n = q.len().min(max);
        out.extend(q.drain(..n));
        s.counters.read += n as u64;
        n
    }
}

/// The rule side of a [`SimulatedNic`].
pub struct SimPort {
    nic: SimulatedNic,
}

impl FlowPort for SimPort {
    type Rule = SimRule;
    type Handle = u64;

    fn name(&self) -> String {
        format!("simulated NIC {}", self.nic.name)
    }

    fn insert(&mut self, rule: &SimRule) -> Result<u64, RuleError> {
        let delay = self.nic.lock().rule_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay); // the caller blocks, as on rte_flow_create
        }
        let mut s = self.nic.lock();
        if let Some(message) = &s.refuse {
            return Err(RuleError::Refused {
                port: self.name(),
                message: message.clone(),
            });
        }
        let total = s.queues.len() as u16;
        if let SimRule::Subset { queues, .. } = rule {
            if queues.is_empty() || queues.iter().any(|&q| q >= total) {
                return Err(RuleError::Refused {
                    port: self.name(),
                    message: format!("RSS queues {queues:?} out of range (0..{total})"),
                });
            }
        }
        if let SimRule::Hairpin {
            sample: Some(Sample { queue, .. }),
            ..
        } = rule
        {
            if *queue >= total {
                return Err(RuleError::Refused {
                    port: self.name(),
                    message: format!("sample queue {queue} out of range (0..{total})"),
                });
            }
        }
        if matches!(rule, SimRule::Hairpin { .. }) && !s.hairpin {
            return Err(RuleError::Refused {
                port: self.name(),
                message: "no hairpin queue".into(),
            });
        }
        let h = s.next_handle;
        s.next_handle += 1;
        s.rules.push((h, rule.clone()));
        s.counters.inserted += 1;
        Ok(h)
    }

    fn remove(&mut self, handle: u64) -> Result<(), RuleError> {
        let delay = self.nic.lock().rule_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut s = self.nic.lock();
        let before = s.rules.len();
        s.rules.retain(|(h, _)| *h != handle);
        if s.rules.len() == before {
            return Err(RuleError::UnknownRule(handle));
        }
        s.counters.removed += 1;
        Ok(())
    }

    fn subset_rule(&self, group: u32, priority: u32, queues: &[u16]) -> SimRule {
        SimRule::Subset {
            group,
            priority,
            queues: queues.to_vec(),
        }
    }

    fn target_rule(&self, key: &FlowKey, priority: u32, group: u32) -> SimRule {
        SimRule::Target {
            key: *key,
            priority,
            group,
        }
    }

    fn hairpin_rule(&self, priority: u32, sample: Option<Sample>) -> Result<SimRule, String> {
        if self.nic.lock().hairpin {
            Ok(SimRule::Hairpin { priority, sample })
        } else {
            Err("the simulated NIC has no hairpin queue".into())
        }
    }
}

/// A minimal Ethernet/IP/TCP frame of flow number `flow` (IPv4, or IPv6 when `v6`), with `seq`
/// in its sequence number field and `payload` bytes of payload: traffic for the simulation.
pub fn flow_frame(pool: &HeapPool, flow: u32, v6: bool, seq: u32, payload: usize) -> HeapBuf {
    let mut f = Vec::with_capacity(14 + 40 + 20 + payload);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    let sport = 1024 + (flow % 60000) as u16;
    let host = flow / 60000;
    let l4_len = 20 + payload;
    if v6 {
        f.extend_from_slice(&0x86ddu16.to_be_bytes());
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4_len as u16).to_be_bytes());
        f.extend_from_slice(&[6, 64]);
        let mut src = [0u8; 16];
        src[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        src[12..].copy_from_slice(&host.to_be_bytes());
        let mut dst = [0u8; 16];
        dst[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        dst[15] = 1;
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
    } else {
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&((20 + l4_len) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, 6, 0, 0]);
        f.extend_from_slice(&[198, 18, (host >> 8) as u8, host as u8]);
        f.extend_from_slice(&[198, 51, 100, 1]);
    }
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&443u16.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    f.resize(f.len() + payload, 0xa5);
    HeapBuf::from_segments(pool, &[&f])
}
