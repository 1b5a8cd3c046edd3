//! pxgw's RX queues (SIGCOMM'26 §4.3, §4.4; the machinery is `pxio::rxq`).
//!
//! With `queues.per_worker = 1` and scaling off, a worker reads its one queue per port as it
//! always did. Otherwise each worker owns `per_worker` queues of each port and reads them through
//! a unified receive ([`WorkerRx`]), and with `queues.scaling` a rule manager thread moves both
//! ports between queue configurations, driven by the external port's active-flow count. The
//! active queue count is sampled every stats interval into `--stats-json` (`rxq`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};
use dpdk::{Burst, Mbuf, Port, RxQueue};
use pxio::rxq::{
    ActiveConfig, ActiveFlowGauge, HeavyHitterMonitor, ManagerSetup, Monitor, PolicyConfig,
    QueueLayout, RuleManager, Sample, Scaler, ScalingPolicy, ScalingView, Steering, UnifiedRx,
};

use crate::config::Config;

/// Packets each queue gives per unified receive.
const PER_QUEUE: usize = 32;

/// A worker's receive side of one port.
pub enum WorkerRx {
    /// One queue.
    Single(RxQueue),
    /// Several, through `pxio::rxq::UnifiedRx`; what does not fit the caller's burst waits.
    Unified {
        /// The unified receive.
        rx: Box<UnifiedRx<RxQueue>>,
        /// Packets read but not yet handed out.
        pending: VecDeque<Mbuf>,
        /// Scratch for one unified read.
        scratch: Vec<Mbuf>,
    },
}

impl WorkerRx {
    /// Receives into the free slots of `burst`, like [`RxQueue::rx_burst`].
    #[inline]
    pub fn rx_burst<const N: usize>(&mut self, burst: &mut Burst<N>) -> usize {
        match self {
            WorkerRx::Single(q) => q.rx_burst(burst),
            WorkerRx::Unified {
                rx,
                pending,
                scratch,
            } => {
                if pending.is_empty() {
                    rx.rx_burst(scratch);
                    pending.extend(scratch.drain(..));
                }
                let mut n = 0;
                while !burst.is_full() {
                    let Some(m) = pending.pop_front() else { break };
                    if let Err(m) = burst.push(m) {
                        pending.push_front(m);
                        break;
                    }
                    n += 1;
                }
                n
            }
        }
    }

    /// Packets read from the NIC but not yet handed out (a stopping worker reads them too).
    pub fn holding(&self) -> bool {
        matches!(self, WorkerRx::Unified { pending, .. } if !pending.is_empty())
    }
}

/// The queue machinery of a running pxgw: the rule manager, the published configuration, and
/// the samples of the active queue count over time.
pub struct QueueControl {
    manager: Option<RuleManager>,
    view: Option<Arc<ScalingView>>,
    config: Arc<ActiveConfig>,
    layout: QueueLayout,
    steering: Vec<(String, Steering)>,
    samples: Vec<(f64, u16, u16)>,
    reported_unavailable: bool,
}

/// RX queues per port for `cfg`.
pub fn rx_queue_count(cfg: &Config) -> u16 {
    cfg.workers.count * cfg.queues.per_worker
}

/// Builds every worker's receive sides (external, internal) and starts the rule manager when
/// scaling or hairpin opt-in is on.
pub fn start(
    cfg: &Config,
    ext: &Port,
    int: &Port,
) -> Result<(QueueControl, Vec<(WorkerRx, WorkerRx)>)> {
    let workers = cfg.workers.count;
    let layout = QueueLayout::new(rx_queue_count(cfg), workers).context("queues.per_worker")?;
    let policy = ScalingPolicy::new(
        layout.clone(),
        PolicyConfig {
            window_ns: cfg.queues.window_ns()?,
            ..Default::default()
        },
    );
    let gauges: Vec<Arc<ActiveFlowGauge>> = (0..workers)
        .map(|_| Arc::new(ActiveFlowGauge::default()))
        .collect();
    let scaler = cfg
        .queues
        .scaling
        .then(|| Scaler::new(policy, 2, gauges.clone(), 0));
    let config = scaler.as_ref().map_or_else(
        || Arc::new(ActiveConfig::new(layout.total())),
        |s| s.config(),
    );
    let view = scaler.as_ref().map(Scaler::view);
    let unified = cfg.queues.per_worker > 1 || cfg.queues.scaling;
    let mut rx = Vec::with_capacity(usize::from(workers));
    for w in 0..workers {
        let side = |port: &Port, gauge: Option<Arc<ActiveFlowGauge>>| -> Result<WorkerRx> {
            if !unified {
                return Ok(WorkerRx::Single(port.rx_queue(w)?));
            }
            let rings = layout
                .worker_pool(w)
                .map(|q| port.rx_queue(q))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(WorkerRx::Unified {
                rx: Box::new(
                    UnifiedRx::new(
                        &layout,
                        rings,
                        config.clone(),
                        gauge.clone().unwrap_or_default(),
                        PER_QUEUE,
                    )
                    .count_flows(gauge.is_some()),
                ),
                pending: VecDeque::with_capacity(PER_QUEUE * rings_per(&layout)),
                scratch: Vec::with_capacity(PER_QUEUE * rings_per(&layout)),
            })
        };
        // The policy follows the external port's flows (inbound merging is what more queues
        // help); nothing counts flows on the internal port, nor anywhere without scaling.
        let ext_rx = side(
            ext,
            cfg.queues.scaling.then(|| gauges[usize::from(w)].clone()),
        )?;
        let int_rx = side(int, None)?;
        rx.push((ext_rx, int_rx));
    }
    let (manager, steering) = if cfg.queues.scaling || cfg.queues.hairpin {
        // With hairpin queues, the external port has one more RX queue after the workers': the
        // sample of the traffic it leaves on the NIC, read by a heavy-hitter monitor in the rule
        // manager thread.
        let monitor_queue = rx_queue_count(cfg);
        let sampled = cfg.queues.hairpin && !ext.hairpin_rx_queues().is_empty();
        let samples = vec![sampled.then_some(Sample {
            ratio: cfg.queues.sample_ratio,
            queue: monitor_queue,
        })];
        let mut monitors: Vec<Box<dyn Monitor>> = Vec::new();
        if sampled {
            monitors.push(Box::new(HeavyHitterMonitor::new(
                ext.rx_queue(monitor_queue)?,
                0,
                cfg.queues.sample_ratio,
                cfg.queues.heavy_hitter_bps()?,
                cfg.queues.window_ns()?,
                4096,
            )));
        }
        let (manager, _clients) = RuleManager::spawn(ManagerSetup {
            scaler,
            // Inbound only: outbound traffic always needs the CPU (split to the path MTU, MSS
            // rewriting, caravans unpacked), so the internal port keeps every flow.
            hairpin: if cfg.queues.hairpin {
                vec![0]
            } else {
                Vec::new()
            },
            hairpin_sample: samples,
            cpu_queues: (0..layout.total()).collect(),
            monitors,
            ..ManagerSetup::new(vec![ext.clone(), int.clone()], 0)
        });
        let steering = ["external", "internal"]
            .into_iter()
            .map(str::to_owned)
            .zip(manager.steering.iter().cloned())
            .collect();
        (Some(manager), steering)
    } else {
        (None, Vec::new())
    };
    for (name, s) in steering.iter().take(1) {
        match s {
            Steering::Hairpin if cfg.queues.hairpin => {
                tracing::info!("ports.{name}: hairpin opt-in: flows stay on the NIC unless chosen")
            }
            Steering::CpuOnly(why) if cfg.queues.hairpin => {
                tracing::warn!(
                    "ports.{name}: hairpin opt-in off: {why}; every flow goes to the CPU"
                )
            }
            _ => {}
        }
    }
    if cfg.queues.scaling {
        tracing::info!(
            "RX queue scaling: {} queues per port, configurations {:?}, window {} ms",
            layout.total(),
            layout.configs(),
            cfg.queues.window_ms
        );
    }
    Ok((
        QueueControl {
            manager,
            view,
            config,
            layout,
            steering,
            samples: Vec::new(),
            reported_unavailable: false,
        },
        rx,
    ))
}

fn rings_per(layout: &QueueLayout) -> usize {
    usize::from(layout.total() / layout.workers())
}

impl QueueControl {
    /// RX queues per port now in the active configuration (a gauge for metrics).
    pub fn active_queues(&self) -> u16 {
        self.config.count()
    }

    /// The queue count the scaling policy wants (equals [`Self::active_queues`] unless
    /// scaling is off or cannot act).
    pub fn advised_queues(&self) -> u16 {
        self.view.as_ref().map_or(self.config.count(), |v| {
            v.advised.load(Ordering::Relaxed) as u16
        })
    }

    /// Configuration changes so far (a counter for metrics).
    pub fn transitions(&self) -> u64 {
        self.config.transitions()
    }

    /// Records the active (and advised) queue count at `t_s` seconds, and says once when
    /// scaling turned out not to be possible.
    pub fn sample(&mut self, t_s: f64) {
        if let (false, Some(v)) = (self.reported_unavailable, &self.view) {
            if let Some(why) = v.unavailable.lock().ok().and_then(|u| u.clone()) {
                tracing::warn!(
                    "RX queue scaling unavailable, all {} queues stay active: {why}",
                    self.layout.total()
                );
                self.reported_unavailable = true;
            }
        }
        let advised = self.view.as_ref().map_or(self.config.count(), |v| {
            v.advised.load(Ordering::Relaxed) as u16
        });
        let active = self.config.count();
        if self
            .samples
            .last()
            .is_none_or(|&(_, a, d)| (a, d) != (active, advised))
        {
            self.samples.push((t_s, active, advised));
        }
    }

    /// The part of the interval log line about queues (empty when there is one per worker).
    pub fn line(&self) -> String {
        if self.layout.total() == self.layout.workers() && self.view.is_none() {
            return String::new();
        }
        let mut s = format!(" | rxq {}/{}", self.config.count(), self.layout.total());
        if let Some(v) = &self.view {
            if let Ok(u) = v.unavailable.lock() {
                if u.is_some() {
                    s += &format!(" (advised {})", v.advised.load(Ordering::Relaxed));
                }
            }
        }
        s
    }

    /// `--stats-json`'s `rxq` object.
    pub fn to_json(&self) -> serde_json::Value {
        let (state, history) = match &self.view {
            None => ("off".to_owned(), Vec::new()),
            Some(v) => (
                v.unavailable
                    .lock()
                    .ok()
                    .and_then(|u| u.clone())
                    .map_or("active".to_owned(), |why| format!("unavailable: {why}")),
                v.history.lock().map(|h| h.clone()).unwrap_or_default(),
            ),
        };
        serde_json::json!({
            "queues_per_port": self.layout.total(),
            "configurations": self.layout.configs(),
            "active_queues": self.config.count(),
            "scaling": state,
            "transitions": history.iter().map(|t| serde_json::json!({
                "at_ms": t.at_ns / 1_000_000, "from": t.from, "to": t.to,
                "active_flows": t.active_flows,
            })).collect::<Vec<_>>(),
            "samples": self.samples.iter().map(|&(t, a, d)| serde_json::json!({
                "t_s": t, "active_queues": a, "advised_queues": d,
            })).collect::<Vec<_>>(),
            "steering": self.steering.iter().map(|(name, s)| serde_json::json!({
                "port": name,
                "mode": match s { Steering::Hairpin => "hairpin".to_owned(), Steering::CpuOnly(w) => format!("cpu: {w}") },
            })).collect::<Vec<_>>(),
        })
    }

    /// Stops the manager thread (it holds the ports).
    pub fn stop(&mut self) {
        if let Some(m) = self.manager.take() {
            m.stop();
        }
    }
}
