//! `classify` and the header views on arbitrary bytes: no panic, and whatever classifies as TCP
//! or UDP has headers inside the buffer.
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxio::wire::{classify, Class};

fuzz_target!(|data: &[u8]| {
    for frame_len in [data.len(), data.len() + 100] {
        if let Class::Tcp(h) | Class::Udp(h) = classify(data, frame_len) {
            assert!(h.hdr_len() <= data.len());
            assert!(h.frame_len() <= frame_len);
        }
    }
});
