//! pxgw's configuration parser and validator on arbitrary text (`pxgw.toml`,
//! `crates/pxgw/src/config.rs`): never a panic, whatever an operator (or a broken deploy
//! script) writes; what it accepts validates again, keeps the MTUs in order
//! (eMTU <= merge iMTU <= internal MTU), and starts: everything pxgw builds from it before the
//! EAL (a worker's pipeline on heap buffers, the summary interval, the metrics endpoint's limits,
//! the RX queue layout and scaling policy, the heavy-hitter threshold, the capabilities kept)
//! builds through the same fallible functions pxgw calls at start.
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxgw::config::Config;
use pxgw::pipeline::Pipeline;
use pxio::rxq::{PolicyConfig, QueueLayout, ScalingPolicy};
use pxio::split::SplitOffloads;
use pxio::{HeapBuf, HeapPool};

/// The largest merge flow table built per input. The table is allocated whole (64 B an entry,
/// up to 16 Mi entries: 1 GiB), which would make libFuzzer's memory limit the finding; its size
/// changes nothing else the pipeline builds.
const MAX_FUZZ_FLOWS: usize = 1 << 16;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(mut cfg) = Config::parse(&text) {
        assert_eq!(
            cfg.validate(),
            Ok(()),
            "an accepted configuration validates again"
        );
        assert!(cfg.emtu() <= cfg.imtu() && cfg.imtu() <= cfg.internal_mtu());
        assert!(cfg.workers.count >= 1);
        let interval = cfg.stats.interval().expect("the summary interval");
        assert!(interval.is_none_or(|i| i.as_secs_f64() <= pxgw::config::MAX_STATS_INTERVAL_S));
        let limits = cfg.stats.prometheus_limits().expect("the metrics limits");
        assert!(limits.max_connections >= 1);
        let window_ns = cfg.queues.window_ns().expect("the queue window");
        cfg.queues
            .heavy_hitter_bps()
            .expect("the heavy-hitter threshold");
        let layout = QueueLayout::new(pxgw::queues::rx_queue_count(&cfg), cfg.workers.count)
            .expect("the RX queue layout");
        ScalingPolicy::new(
            layout,
            PolicyConfig {
                window_ns,
                ..PolicyConfig::default()
            },
        );
        pxgw::privileges::needed_caps(&cfg);
        cfg.merge.flows = cfg.merge.flows.min(MAX_FUZZ_FLOWS);
        if let Err(e) = Pipeline::<HeapBuf>::new(
            &cfg,
            HeapPool::new(64),
            HeapPool::new(64),
            SplitOffloads::default(),
        ) {
            panic!("an accepted configuration builds no pipeline: {e:#}");
        }
    }
});
