//! Caravan parsing and unpacking on arbitrary bytes behind a caravan-marked IPv4/UDP header:
//! no panic, nothing delivered from a refused caravan, nothing leaked.
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxio::caravan::{self, CaravanConfig};
use pxio::HeapPool;

fuzz_target!(|data: &[u8]| {
    let pool = HeapPool::new(256);
    let mut frame = vec![0u8; 42];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    frame[15] = caravan::DEFAULT_DSCP << 2;
    let ip_len = (28 + data.len()).min(65535) as u16;
    frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
    frame[23] = 17;
    frame[38..40].copy_from_slice(&(ip_len.saturating_sub(20)).to_be_bytes());
    frame.extend_from_slice(data);
    let mut out = Vec::new();
    match caravan::unpack(pool.packet(&frame), &CaravanConfig::default(), &pool, &mut out) {
        Ok(n) => assert_eq!(n, out.len()),
        Err(_) => assert!(out.is_empty()),
    }
    drop(out);
    assert_eq!(pool.in_use(), 0);
});
