//! The asynchronous rule manager (SIGCOMM'26 §4.4, `px_flow`, Figure 7).
//!
//! Rule updates through `rte_flow` are synchronous and slow on real NICs (over 330 µs each on
//! ConnectX, §4.4): a worker that made them itself would stop forwarding meanwhile. Instead one
//! manager thread serves every port. Each worker gets a [`FlowClient`]: a pair of lock-free
//! bounded queues (crossbeam's `ArrayQueue`), one for submissions and one for completions.
//! [`FlowClient::submit`] never blocks: a full queue hands the request back. Every request gets
//! exactly one [`Completion`]; a rule the driver refuses comes back as an `Err` in it.
//!
//! The same thread runs RX queue scaling ([`Scaler`]): at the end of every window it reads the
//! workers' active-flow gauges, asks the [`ScalingPolicy`], and moves between configurations by
//! insert-then-evict (§4.3), so each transition is atomic in the NIC.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::rxq::layout::QueueLayout;
use crate::rxq::policy::{active_flows, ActiveConfig, ActiveFlowGauge, Decision, ScalingPolicy};
use crate::wire::FlowKey;

/// Why a rule request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The port's driver has no flow rules at all.
    #[error("{port}: the driver has no rte_flow support")]
    Unsupported {
        /// The port.
        port: String,
    },
    /// The driver refused this rule; `message` is its own explanation.
    #[error("{port}: rule refused: {message}")]
    Refused {
        /// The port.
        port: String,
        /// The driver's message.
        message: String,
    },
    /// The port has no hairpin queues, so flows cannot be left on the NIC.
    #[error("{port}: no hairpin queues ({reason}); every flow goes to the CPU")]
    NoHairpin {
        /// The port.
        port: String,
        /// Why.
        reason: String,
    },
    /// No port with this index.
    #[error("no port {0}")]
    NoSuchPort(usize),
    /// No installed rule with this id.
    #[error("no rule {0}")]
    UnknownRule(u64),
}

/// A port the manager can install rules on.
pub trait FlowPort: Send + 'static {
    /// A rule, as the port takes it.
    type Rule: Send + 'static;
    /// An installed rule.
    type Handle: Send + 'static;
    /// The port's name, for errors.
    fn name(&self) -> String;
    /// Installs `rule` (synchronously: the manager thread is the one that waits).
    fn insert(&mut self, rule: &Self::Rule) -> Result<Self::Handle, RuleError>;
    /// Removes an installed rule.
    fn remove(&mut self, handle: Self::Handle) -> Result<(), RuleError>;
    /// Every packet of `group`, spread by RSS over `queues`, at `priority`.
    fn subset_rule(&self, group: u32, priority: u32, queues: &[u16]) -> Self::Rule;
    /// The flow `key` (exactly, in the direction given), sent on to `group` for the CPU.
    fn target_rule(&self, key: &FlowKey, priority: u32, group: u32) -> Self::Rule;
    /// Every packet to the NIC's hairpin queue, at `priority` in group 0, with a `sample` of
    /// them copied to a host queue; `Err` with the reason when the port has no hairpin queue.
    fn hairpin_rule(&self, priority: u32, sample: Option<Sample>) -> Result<Self::Rule, String>;
}

/// One packet in `ratio` of the traffic left on the NIC is copied to RX queue `queue`, where a
/// [`crate::rxq::HeavyHitterMonitor`] finds the flows to opt in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// One packet in `ratio`.
    pub ratio: u32,
    /// The host queue the copies go to.
    pub queue: u16,
}

/// Something the manager thread polls for flows to opt in (heavy hitters, §4.4).
pub trait Monitor: Send {
    /// Appends `(port, flow)` pairs that should go to the merging workers.
    fn poll(&mut self, now_ns: u64, out: &mut Vec<(usize, FlowKey)>);
}

/// Priority of the catch-all rule that spreads opted-in flows over the CPU queues (group 1),
/// below every subset rule of the scaler.
pub const CATCH_ALL_PRIORITY: u32 = 1000;

/// An installed rule's id (unique in one manager).
pub type RuleId = u64;

/// What a worker asks for.
pub enum Op<R> {
    /// Install `rule` on port `port`.
    Insert {
        /// Port index (in the manager's port list).
        port: usize,
        /// The rule.
        rule: R,
    },
    /// Remove a rule installed by an earlier request.
    Remove(RuleId),
    /// Steer flow `key` of port `port` to the merging workers (hairpin opt-in, §4.4). Where the
    /// port has no hairpin queues every flow already goes to the CPU: the completion says so
    /// with [`Outcome::AlreadyOnCpu`].
    OptIn {
        /// Port index.
        port: usize,
        /// The flow.
        key: FlowKey,
    },
}

/// What a request achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A rule was installed.
    Installed(RuleId),
    /// The rule was removed.
    Removed(RuleId),
    /// Nothing to do: the port has no hairpin queues, so the flow is on the CPU already.
    AlreadyOnCpu,
}

/// The answer to one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The id [`FlowClient::submit`] returned.
    pub request: u64,
    /// What happened.
    pub result: Result<Outcome, RuleError>,
}

struct Request<R> {
    id: u64,
    op: Op<R>,
}

struct Channel<R> {
    submit: ArrayQueue<Request<R>>,
    complete: ArrayQueue<Completion>,
}

/// A worker's end of its queue pair. `Send`, used by one worker.
pub struct FlowClient<R> {
    channel: Arc<Channel<R>>,
    worker: u64,
    next: u64,
    outstanding: usize,
    capacity: usize,
    manager: std::thread::Thread,
}

impl<R> FlowClient<R> {
    /// Submits `op` without blocking; returns the request id, or hands `op` back when this
    /// worker already has as many requests outstanding as its queues hold.
    pub fn submit(&mut self, op: Op<R>) -> Result<u64, Op<R>> {
        if self.outstanding >= self.capacity {
            return Err(op);
        }
        let id = (self.worker << 48) | self.next;
        match self.channel.submit.push(Request { id, op }) {
            Ok(()) => {
                self.next += 1;
                self.outstanding += 1;
                self.manager.unpark();
                Ok(id)
            }
            Err(r) => Err(r.op),
        }
    }

    /// The next completion, if one is ready (never blocks).
    pub fn poll(&mut self) -> Option<Completion> {
        let c = self.channel.complete.pop()?;
        self.outstanding -= 1;
        Some(c)
    }

    /// Requests submitted and not yet polled back.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }
}

/// What the manager thread has done; plain atomics, for metrics.
#[derive(Debug, Default)]
pub struct ManagerStats {
    /// Requests completed.
    pub completed: AtomicU64,
    /// Of those, completed with an error.
    pub errors: AtomicU64,
    /// Rules installed (requests and scaling).
    pub inserted: AtomicU64,
    /// Rules removed (requests and scaling).
    pub removed: AtomicU64,
    /// Time spent in driver calls, nanoseconds.
    pub driver_ns: AtomicU64,
    /// Flows the monitor opted in (heavy hitters).
    pub opted_in: AtomicU64,
    /// Scaling transitions whose old rule the driver would not remove (the new configuration
    /// is in force regardless; the stale rule is shadowed or harmless).
    pub evict_failures: AtomicU64,
}

/// One RX queue transition, as the metrics show it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transition {
    /// When, nanoseconds since the manager started.
    pub at_ns: u64,
    /// Active queues before.
    pub from: u16,
    /// Active queues after.
    pub to: u16,
    /// The active-flow count that triggered it.
    pub active_flows: f64,
}

/// Whether RX queue scaling can act on the ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScalingState {
    /// Rules are applied; the active configuration follows the policy.
    Active,
    /// A port refused the subset rules: all queues stay active and polled, and the policy only
    /// advises ([`Scaler::advised`]).
    Unavailable(String),
}

/// What a running [`Scaler`] shows the outside (metrics), shared with it.
#[derive(Debug)]
pub struct ScalingView {
    /// The configuration workers poll.
    pub config: Arc<ActiveConfig>,
    /// The queue count the policy wants (equals the active count unless scaling is
    /// unavailable).
    pub advised: std::sync::atomic::AtomicU32,
    /// Why scaling cannot act, once a port refused its rules.
    pub unavailable: Mutex<Option<String>>,
    /// Transitions so far.
    pub history: Mutex<Vec<Transition>>,
}

/// RX queue scaling on every port: the policy, the installed subset rules, and the published
/// configuration (§4.3). Run by the manager thread; tests may drive it directly.
pub struct Scaler<P: FlowPort> {
    policy: ScalingPolicy,
    advisory: ScalingPolicy,
    gauges: Vec<Arc<ActiveFlowGauge>>,
    config: Arc<ActiveConfig>,
    installed: Vec<Option<P::Handle>>,
    groups: Vec<u32>,
    state: ScalingState,
    history: Arc<Mutex<Vec<Transition>>>,
    view: Arc<ScalingView>,
}

impl<P: FlowPort> Scaler<P> {
    /// Scaling over `layout` for `ports` ports; `gauges` one per worker. Subset rules go in
    /// `group` (0, or 1 behind hairpin opt-in rules).
    pub fn new(
        policy: ScalingPolicy,
        ports: usize,
        gauges: Vec<Arc<ActiveFlowGauge>>,
        group: u32,
    ) -> Self {
        let config = Arc::new(ActiveConfig::new(policy.current()));
        let view = Arc::new(ScalingView {
            config: config.clone(),
            advised: std::sync::atomic::AtomicU32::new(u32::from(policy.current())),
            unavailable: Mutex::new(None),
            history: Mutex::new(Vec::new()),
        });
        Self {
            view,
            advisory: policy.clone(),
            policy,
            gauges,
            config,
            installed: (0..ports).map(|_| None).collect(),
            groups: vec![group; ports],
            state: ScalingState::Active,
            history: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The configuration workers poll.
    pub fn config(&self) -> Arc<ActiveConfig> {
        self.config.clone()
    }

    /// Puts port `port`'s subset rules in `group` (1 behind hairpin opt-in rules).
    pub fn set_group(&mut self, port: usize, group: u32) {
        if let Some(g) = self.groups.get_mut(port) {
            *g = group;
        }
    }

    /// The shared view, for metrics while the manager thread runs the scaler.
    pub fn view(&self) -> Arc<ScalingView> {
        self.view.clone()
    }

    fn update_view(&self) {
        self.view
            .advised
            .store(u32::from(self.advised()), Ordering::Relaxed);
        if let ScalingState::Unavailable(why) = &self.state {
            if let Ok(mut u) = self.view.unavailable.lock() {
                u.get_or_insert_with(|| why.clone());
            }
        }
        if let (Ok(src), Ok(mut dst)) = (self.history.lock(), self.view.history.lock()) {
            if dst.len() != src.len() {
                *dst = src.clone();
            }
        }
    }

    /// Transitions so far (for metrics).
    pub fn history(&self) -> Arc<Mutex<Vec<Transition>>> {
        self.history.clone()
    }

    /// Whether rules can be applied.
    pub fn state(&self) -> &ScalingState {
        &self.state
    }

    /// The queue count the policy would run at; equals the active count unless scaling is
    /// [`ScalingState::Unavailable`].
    pub fn advised(&self) -> u16 {
        self.advisory.current()
    }

    /// The layout.
    pub fn layout(&self) -> &QueueLayout {
        self.policy.layout()
    }

    /// Call often; at the end of each window, judges it and applies the decision to every port.
    pub fn tick(&mut self, now_ns: u64, ports: &mut [P], stats: &ManagerStats) -> Option<Decision> {
        if !self.policy.window_over(now_ns) {
            return None;
        }
        let d = self.judge(now_ns, ports, stats);
        self.update_view();
        d
    }

    fn judge(&mut self, now_ns: u64, ports: &mut [P], stats: &ManagerStats) -> Option<Decision> {
        self.advisory.window_over(now_ns);
        let flows = active_flows(&self.gauges);
        if let ScalingState::Unavailable(_) = self.state {
            let d = self.advisory.end_window(now_ns, flows)?;
            self.advisory.applied(&d);
            return None;
        }
        let d = self.policy.end_window(now_ns, flows)?;
        match self.apply(&d, ports, stats) {
            Ok(()) => {
                self.policy.applied(&d);
                self.advisory = self.policy.clone();
                if let Ok(mut h) = self.history.lock() {
                    h.push(Transition {
                        at_ns: now_ns,
                        from: d.from,
                        to: d.to,
                        active_flows: d.active_flows,
                    });
                }
                Some(d)
            }
            Err(e) => {
                // Reported through the view (ScalingView::unavailable); pxio does not log.
                self.policy.failed(&d);
                self.advisory.applied(&d);
                self.state = ScalingState::Unavailable(e.to_string());
                None
            }
        }
    }

    /// Insert-then-evict on every port. A larger configuration is published before the rules
    /// change (workers start polling the new queues, empty until then), a smaller one after
    /// (workers then drain the queues that left). On a failure the ports are put back as they
    /// were.
    fn apply(
        &mut self,
        d: &Decision,
        ports: &mut [P],
        stats: &ManagerStats,
    ) -> Result<(), RuleError> {
        let layout = self.policy.layout().clone();
        let growing = d.to > d.from;
        if growing {
            self.config.publish(d.to);
        }
        let mut new_rules: Vec<Option<P::Handle>> = Vec::with_capacity(ports.len());
        for (i, port) in ports.iter_mut().enumerate() {
            let group = self.groups[i];
            let inserted = match layout.priority(d.to) {
                None => Ok(None),
                Some(prio) => {
                    let rule = port.subset_rule(group, prio, &layout.queues(d.to));
                    timed(stats, || port.insert(&rule)).map(Some)
                }
            };
            match inserted {
                Ok(h) => {
                    if h.is_some() {
                        stats.inserted.fetch_add(1, Ordering::Relaxed);
                    }
                    new_rules.push(h);
                }
                Err(e) => {
                    for (j, h) in new_rules.into_iter().enumerate() {
                        if let Some(h) = h {
                            let _ = ports[j].remove(h);
                        }
                    }
                    if growing {
                        self.config.publish(d.from);
                    }
                    return Err(e);
                }
            }
        }
        // Every port now has the new rule next to the old one; evicting the old one is what
        // switches a growing port over, and tidies a shrinking one.
        let mut first_error = None;
        for (i, new) in new_rules.into_iter().enumerate() {
            if let Some(old) = std::mem::replace(&mut self.installed[i], new) {
                match timed(stats, || ports[i].remove(old)) {
                    Ok(()) => {
                        stats.removed.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
        }
        if !growing {
            self.config.publish(d.to);
        }
        match first_error {
            // The new configuration is in force (a shrinking rule shadows the old one; a growing
            // port whose old rule stuck stays on the smaller subset, which is still polled).
            Some(_) => {
                stats.evict_failures.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

fn timed<T>(stats: &ManagerStats, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let r = f();
    stats
        .driver_ns
        .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

/// Hairpin opt-in on one port (§4.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Steering {
    /// Flows stay on the NIC's hairpin queue unless opted in.
    Hairpin,
    /// The port has no hairpin queues: every flow goes to the CPU.
    CpuOnly(String),
}

/// Everything the manager thread runs with.
pub struct ManagerSetup<P: FlowPort> {
    /// The ports, in the order requests name them.
    pub ports: Vec<P>,
    /// Workers (one queue pair each).
    pub workers: usize,
    /// Requests each worker may have outstanding.
    pub capacity: usize,
    /// RX queue scaling, if on.
    pub scaler: Option<Scaler<P>>,
    /// The ports (by index) on which to try hairpin opt-in: their flows stay on the NIC unless
    /// opted in. Every other port sends every flow to the CPU.
    pub hairpin: Vec<usize>,
    /// With hairpin: per port (by index; missing means none), a sample of the traffic left on
    /// the NIC, for a monitor.
    pub hairpin_sample: Vec<Option<Sample>>,
    /// With hairpin: the CPU queues opted-in flows are spread over when no subset rule of the
    /// scaler applies (all of them).
    pub cpu_queues: Vec<u16>,
    /// With hairpin: what finds flows to opt in (see [`crate::rxq::HeavyHitterMonitor`]).
    pub monitors: Vec<Box<dyn Monitor>>,
}

impl<P: FlowPort> ManagerSetup<P> {
    /// `ports` and `workers`, 64 outstanding requests per worker, nothing else on.
    pub fn new(ports: Vec<P>, workers: usize) -> Self {
        Self {
            ports,
            workers,
            capacity: 64,
            scaler: None,
            hairpin: Vec::new(),
            hairpin_sample: Vec::new(),
            cpu_queues: Vec::new(),
            monitors: Vec::new(),
        }
    }
}

/// The running manager thread.
pub struct RuleManager {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Counters.
    pub stats: Arc<ManagerStats>,
    /// Per port, whether flows stay on the NIC by default, decided at start.
    pub steering: Vec<Steering>,
}

impl RuleManager {
    /// Starts the manager thread; returns it and one client per worker. With `hairpin`, each
    /// port first gets its default hairpin rule; a port without hairpin queues is reported in
    /// [`RuleManager::steering`] (with the driver's reason) and keeps every flow on the CPU.
    pub fn spawn<P: FlowPort>(setup: ManagerSetup<P>) -> (Self, Vec<FlowClient<P::Rule>>) {
        let ManagerSetup {
            mut ports,
            workers,
            capacity,
            mut scaler,
            hairpin,
            hairpin_sample,
            cpu_queues,
            mut monitors,
        } = setup;
        let capacity = capacity.max(1);
        let stats = Arc::new(ManagerStats::default());
        let mut next_rule: RuleId = 1;
        let mut rules: std::collections::HashMap<RuleId, (usize, P::Handle)> =
            std::collections::HashMap::new();
        let mut steering = Vec::with_capacity(ports.len());
        for (i, port) in ports.iter_mut().enumerate() {
            if !hairpin.contains(&i) {
                steering.push(Steering::CpuOnly(
                    "hairpin opt-in is off on this port".into(),
                ));
                continue;
            }
            // Group 0: opted-in flows (priority 0) jump to group 1, everything else (priority 1)
            // stays on the hairpin queue. Group 1: the scaler's subset rules, then a catch-all
            // over every CPU queue.
            let installed = port
                .hairpin_rule(1, hairpin_sample.get(i).copied().flatten())
                .and_then(|rule| port.insert(&rule).map_err(|e| e.to_string()))
                .and_then(|hairpin| {
                    let all = port.subset_rule(1, CATCH_ALL_PRIORITY, &cpu_queues);
                    match port.insert(&all) {
                        Ok(catch_all) => Ok((hairpin, catch_all)),
                        Err(e) => {
                            let _ = port.remove(hairpin);
                            Err(e.to_string())
                        }
                    }
                });
            match installed {
                Ok((h, c)) => {
                    for handle in [h, c] {
                        rules.insert(next_rule, (i, handle));
                        next_rule += 1;
                    }
                    if let Some(s) = scaler.as_mut() {
                        s.set_group(i, 1);
                    }
                    steering.push(Steering::Hairpin);
                }
                // The caller reports it (RuleManager::steering), as pxgw does at start.
                Err(reason) => steering.push(Steering::CpuOnly(reason)),
            }
        }
        let channels: Vec<Arc<Channel<P::Rule>>> = (0..workers)
            .map(|_| {
                Arc::new(Channel {
                    submit: ArrayQueue::new(capacity),
                    complete: ArrayQueue::new(capacity),
                })
            })
            .collect();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (channels, stop, stats, steering) = (
                channels.clone(),
                stop.clone(),
                stats.clone(),
                steering.clone(),
            );
            std::thread::Builder::new()
                .name("px-flow".into())
                .spawn(move || {
                    let start = Instant::now();
                    let mut heavy = Vec::new();
                    loop {
                        let stopping = stop.load(Ordering::Acquire);
                        let mut served = 0;
                        for ch in &channels {
                            while let Some(req) = ch.submit.pop() {
                                let result = execute(
                                    req.op,
                                    &mut ports,
                                    &mut rules,
                                    &mut next_rule,
                                    &steering,
                                    &stats,
                                );
                                if result.is_err() {
                                    stats.errors.fetch_add(1, Ordering::Relaxed);
                                }
                                stats.completed.fetch_add(1, Ordering::Relaxed);
                                // Cannot fail: a client never has more outstanding requests
                                // than the completion queue holds.
                                let _ = ch.complete.push(Completion {
                                    request: req.id,
                                    result,
                                });
                                served += 1;
                            }
                        }
                        let now = start.elapsed().as_nanos() as u64;
                        for m in monitors.iter_mut() {
                            m.poll(now, &mut heavy);
                            for (port, key) in heavy.drain(..) {
                                let op = Op::OptIn { port, key };
                                if let Ok(Outcome::Installed(_)) = execute(
                                    op,
                                    &mut ports,
                                    &mut rules,
                                    &mut next_rule,
                                    &steering,
                                    &stats,
                                ) {
                                    stats.opted_in.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        if let Some(s) = scaler.as_mut() {
                            s.tick(now, &mut ports, &stats);
                        }
                        if stopping {
                            break;
                        }
                        if served == 0 {
                            std::thread::park_timeout(Duration::from_micros(200));
                        }
                    }
                    // Installed rules are removed with the ports (dropping a handle destroys it).
                    drop(rules);
                    drop(scaler);
                })
                .expect("spawn the rule manager thread")
        };
        let manager = thread.thread().clone();
        let clients = channels
            .into_iter()
            .enumerate()
            .map(|(w, channel)| FlowClient {
                channel,
                worker: w as u64,
                next: 0,
                outstanding: 0,
                capacity,
                manager: manager.clone(),
            })
            .collect();
        (
            Self {
                stop,
                thread: Some(thread),
                stats,
                steering,
            },
            clients,
        )
    }

    /// Stops the thread after it has answered what was already submitted.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

impl Drop for RuleManager {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn execute<P: FlowPort>(
    op: Op<P::Rule>,
    ports: &mut [P],
    rules: &mut std::collections::HashMap<RuleId, (usize, P::Handle)>,
    next_rule: &mut RuleId,
    steering: &[Steering],
    stats: &ManagerStats,
) -> Result<Outcome, RuleError> {
    let mut install = |port: usize, rule: &P::Rule, ports: &mut [P]| {
        let p = ports.get_mut(port).ok_or(RuleError::NoSuchPort(port))?;
        let h = timed(stats, || p.insert(rule))?;
        stats.inserted.fetch_add(1, Ordering::Relaxed);
        let id = *next_rule;
        *next_rule += 1;
        rules.insert(id, (port, h));
        Ok(Outcome::Installed(id))
    };
    match op {
        Op::Insert { port, rule } => install(port, &rule, ports),
        Op::OptIn { port, key } => match steering.get(port) {
            None => Err(RuleError::NoSuchPort(port)),
            Some(Steering::CpuOnly(_)) => Ok(Outcome::AlreadyOnCpu),
            Some(Steering::Hairpin) => {
                let rule = ports[port].target_rule(&key, 0, 1);
                install(port, &rule, ports)
            }
        },
        Op::Remove(id) => {
            let (port, h) = rules.remove(&id).ok_or(RuleError::UnknownRule(id))?;
            timed(stats, || ports[port].remove(h))?;
            stats.removed.fetch_add(1, Ordering::Relaxed);
            Ok(Outcome::Removed(id))
        }
    }
}
