//! What pxgw's pipeline tests share: a pipeline on heap buffers, built from a configuration.

use pxgw::config::Config;
use pxgw::pipeline::Pipeline;
use pxio::split::SplitOffloads;
use pxio::{HeapBuf, HeapPool};

/// A pipeline on heap buffers for `net_null` ports: `external` adds keys to `[ports.external]`,
/// `extra` adds tables after the ports.
pub fn pipeline_with(external: &str, extra: &str) -> Pipeline<HeapBuf> {
    let cfg = Config::parse(&format!(
        "[ports.external]\ndevice = \"net_null0\"\n{external}\
         [ports.internal]\ndevice = \"net_null1\"\n{extra}"
    ))
    .unwrap();
    Pipeline::new(
        &cfg,
        HeapPool::new(256),
        HeapPool::new(256),
        SplitOffloads::default(),
    )
    .unwrap()
}
