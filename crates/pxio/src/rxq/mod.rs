//! Scaling PXIO across RX queues and cores on one machine (SIGCOMM'26 §4.3, §4.4).
//!
//! - [`QueueLayout`]: the five configurations (all queues, and rule-selected subsets of
//!   2/8/32/128) and their partition among workers (Figure 6).
//! - [`UnifiedRx`]: one receive call over a worker's queues (`px_eth_rx_burst`), which follows
//!   the active configuration and drains queues that leave it.
//! - [`ScalingPolicy`]: the active-flow count (distinct flows per RX batch, averaged over a
//!   window) against the queue count: scale up above it, down below 10 % of it.
//! - [`RuleManager`], [`FlowClient`]: `px_flow`, one manager thread for every port, a lock-free
//!   queue pair per worker; [`Scaler`] applies the policy there by insert-then-evict.
//! - Hairpin opt-in ([`Op::OptIn`], [`Steering`], [`HeavyHitters`]): flows stay on the NIC
//!   unless chosen, or everything goes to the CPU where the NIC has no hairpin queues.
//! - `sim` (feature `testing`): a **simulated** NIC that stands in for hardware with `rte_flow`
//!   in tests.
//!
//! With the `dpdk` feature, [`dpdk::Port`] is a [`FlowPort`] and [`dpdk::RxQueue`] an [`RxRing`].

mod heavy;
mod layout;
mod manager;
mod policy;
#[cfg(feature = "testing")]
pub mod sim;
mod unified;
#[cfg(feature = "dpdk")]
mod with_dpdk;

pub use heavy::{HeavyHitterMonitor, HeavyHitters};
pub use layout::{LayoutError, QueueLayout, SUBSET_SIZES};
pub use manager::{
    Completion, FlowClient, FlowPort, ManagerSetup, ManagerStats, Monitor, Op, Outcome, RuleError,
    RuleId, RuleManager, Sample, Scaler, ScalingState, ScalingView, Steering, Transition,
    CATCH_ALL_PRIORITY,
};
pub use policy::{
    active_flows, ActiveConfig, ActiveFlowGauge, BatchFlows, Decision, PolicyConfig, ScalingPolicy,
    DEFAULT_WINDOW_NS, SCALE_DOWN_SHARE,
};
pub use unified::{flow_id, RxRing, UnifiedRx, UnifiedRxStats, DRAIN_EMPTY_PASSES};
