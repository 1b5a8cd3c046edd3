//! Time for the engine (SIGCOMM'26 Appendix A: the ETM windows and the per-flow rate average are
//! measured in ns). Injectable, so tests and simulations drive time by hand; production reads the
//! CPU time-stamp counter.

use std::cell::Cell;

/// A source of nanoseconds. Injectable, so tests drive time by hand.
pub trait Clock {
    /// Now, in ns, monotonic.
    fn now_ns(&self) -> u64;
}

/// The CPU time-stamp counter, converted to ns (production; needs the `dpdk` feature).
#[cfg(feature = "dpdk")]
#[derive(Clone, Copy, Debug)]
pub struct TscClock {
    hz: u64,
}

#[cfg(feature = "dpdk")]
impl TscClock {
    /// A clock at the EAL's measured TSC frequency.
    pub fn new(eal: &dpdk::Eal) -> Self {
        Self {
            hz: eal.tsc_hz().max(1),
        }
    }
}

#[cfg(feature = "dpdk")]
impl Clock for TscClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        (u128::from(dpdk::rdtsc()) * 1_000_000_000 / u128::from(self.hz)) as u64
    }
}

/// A clock that moves only when told (tests, simulations, traces).
#[derive(Debug, Default)]
pub struct ManualClock(Cell<u64>);

impl ManualClock {
    /// A clock at `ns`.
    pub fn new(ns: u64) -> Self {
        Self(Cell::new(ns))
    }
    /// Sets the time.
    pub fn set(&self, ns: u64) {
        self.0.set(ns);
    }
    /// Moves time forward.
    pub fn advance(&self, ns: u64) {
        self.0.set(self.0.get() + ns);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.get()
    }
}

impl<C: Clock> Clock for &C {
    fn now_ns(&self) -> u64 {
        (*self).now_ns()
    }
}
