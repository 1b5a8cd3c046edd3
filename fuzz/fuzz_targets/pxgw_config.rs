//! pxgw's configuration parser and validator on arbitrary text (`pxgw.toml`,
//! `crates/pxgw/src/config.rs`): never a panic, whatever an operator (or a broken deploy
//! script) writes; what it accepts validates again and keeps the MTUs in order
//! (eMTU <= merge iMTU <= internal MTU).
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxgw::config::Config;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(cfg) = Config::parse(&text) {
        assert_eq!(
            cfg.validate(),
            Ok(()),
            "an accepted configuration validates again"
        );
        assert!(cfg.emtu() <= cfg.imtu() && cfg.imtu() <= cfg.internal_mtu());
        assert!(cfg.workers.count >= 1);
    }
});
