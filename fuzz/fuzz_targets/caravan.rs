//! Caravan parsing and unpacking on arbitrary bytes behind a caravan-marked IPv4/UDP header:
//! no panic, nothing delivered from a refused caravan, nothing leaked.
//!
//! The first input byte chooses what follows the UDP header: the rest of the input as it is
//! (mostly ordinary datagrams that wear the mark, which must be refused as `NotCaravan`), or
//! behind the caravan header a packer would write for it (magic, version, the count of inner
//! headers found by walking their lengths, and the check), so the fuzzer reaches the walk and
//! the unpacking without having to guess the check.
#![forbid(unsafe_code)]
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxio::caravan::{self, format, CaravanConfig, CaravanError};
use pxio::HeapPool;

/// `body` behind a caravan header counting the inner headers its length fields lead to.
fn sealed(body: &[u8]) -> Vec<u8> {
    let (mut at, mut count) = (0usize, 0u8);
    while let Some(h) = body.get(at..).and_then(|r| r.first_chunk::<8>()) {
        count = count.wrapping_add(1);
        at += usize::from(u16::from_be_bytes([h[4], h[5]])).max(8);
        if count == u8::MAX {
            break;
        }
    }
    [&format::encode_header(count)[..], body].concat()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let sealed_input = mode & 1 == 1;
    let payload = if sealed_input {
        sealed(rest)
    } else {
        rest.to_vec()
    };
    let pool = HeapPool::new(256);
    let mut frame = vec![0u8; 42];
    frame[12..14].copy_from_slice(&[0x08, 0x00]);
    frame[14] = 0x45;
    frame[15] = caravan::DEFAULT_DSCP << 2;
    let ip_len = (28 + payload.len()).min(65535) as u16;
    frame[16..18].copy_from_slice(&ip_len.to_be_bytes());
    frame[23] = 17;
    frame[38..40].copy_from_slice(&(ip_len.saturating_sub(20)).to_be_bytes());
    frame.extend_from_slice(&payload);
    let mut out = Vec::new();
    match caravan::unpack(
        pool.packet(&frame),
        &CaravanConfig::default(),
        &pool,
        &mut out,
    ) {
        Ok(n) => {
            assert_eq!(n, out.len());
            assert!(
                payload.starts_with(&caravan::MAGIC),
                "only a caravan header makes a caravan"
            );
        }
        Err((e, _)) => {
            assert!(out.is_empty());
            if !payload.starts_with(&caravan::MAGIC) {
                assert!(
                    matches!(e, CaravanError::NotCaravan | CaravanError::NotUdp),
                    "without the magic: {e}"
                );
            }
        }
    }
    drop(out);
    assert_eq!(pool.in_use(), 0);
});
