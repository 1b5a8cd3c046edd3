//! The file-transfer example (`examples/caravan-file.rs`) through pxgw between network
//! namespaces (the gateway lab): a file sent over UDP from the outside host crosses pxgw, which
//! packs it into caravans; the inside host runs the eBPF decapsulator with the receiver's port
//! registered as a pass-through port, and the receiver reads the caravans whole with
//! `caravan::BatchReader`. The file must arrive byte for byte (sha256), in both families, and
//! caravans must have carried it. Needs root, so it is `#[ignore]`d: `cargo xtask test` runs it.

use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::Duration;

use gateway_lab::{Family, Lab};
use sha2::{Digest, Sha256};

#[allow(dead_code)]
#[path = "../caravan-file.rs"]
mod caravan_file;

/// The receiver's UDP port.
const PORT: u16 = 7100;
/// The file: 300 blocks' worth would take long on a loaded machine; 3 MB is 41 blocks.
const FILE_BYTES: usize = 3 << 20;

/// pxgw of the same build profile: this test runs from `target/<profile>/deps`, and
/// `cargo build -p pxgw` (or the workspace's tests, for pxgw's own) puts the binary in
/// `target/<profile>`. `cargo xtask test` runs this test after the workspace's tests.
fn pxgw() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("pxgw");
    assert!(
        bin.is_file(),
        "{} is missing: build it first (`cargo build -p pxgw`, with --release for a release test)",
        bin.display()
    );
    bin
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Bytes no transfer could produce by accident: a position-dependent pattern with no period
/// of a chunk's length.
fn file(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u64)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(17) as u8
                ^ (i >> 11) as u8
        })
        .collect()
}

#[test]
#[ignore = "needs root (network namespaces)"]
fn a_file_crosses_pxgw_in_caravans_and_arrives_intact() {
    let lab = Lab::new().expect("the gateway lab");
    let gw = lab.start_pxgw(&pxgw(), 1, 300).expect("pxgw forwarding");
    let iface = lab.int_iface().to_owned();
    let mut decap = lab
        .int
        .enter(|| caravan::Decap::attach(&iface, caravan::DecapConfig::default()))
        .unwrap()
        .expect("attach the decapsulator (`cargo xtask build-ebpf`)");
    decap.add_passthrough_port(PORT).unwrap();
    let data = file(FILE_BYTES);
    for family in Family::BOTH {
        let before = decap.stats().unwrap();
        let out_path = lab.dir.join(format!("caravan-file-{family:?}.out"));
        let to = SocketAddr::new(lab.int_addr(family), PORT);
        let received = std::thread::scope(|s| {
            let rx = s.spawn(|| {
                lab.int
                    .enter(|| {
                        let sock = UdpSocket::bind(to)?;
                        let out = File::create(&out_path)?;
                        caravan_file::receive(
                            &sock,
                            &out,
                            Duration::from_secs(30),
                            Duration::from_millis(500),
                        )
                    })
                    .unwrap()
            });
            // The receiver binds before the first datagram: a lost start only costs a resend,
            // but the test should not depend on the receiver winning a race.
            std::thread::sleep(Duration::from_millis(300));
            let sent = lab
                .ext
                .enter(|| {
                    let sock = UdpSocket::bind(SocketAddr::new(lab.ext_addr(family), 0))?;
                    caravan_file::send(&sock, to, &data)
                })
                .unwrap();
            let received = rx.join().expect("receiver thread");
            (sent, received)
        });
        let (sent, received) = match received {
            (Ok(sent), Ok(received)) => (sent, received),
            (sent, received) => panic!("{family}: send {sent:?}, receive {received:?}"),
        };
        let arrived = std::fs::read(&out_path).unwrap();
        assert_eq!(received.bytes, FILE_BYTES as u64, "{family}: length");
        assert_eq!(
            sha256(&arrived),
            sha256(&data),
            "{family}: the file arrived changed ({} B of {})",
            arrived.len(),
            data.len()
        );
        let after = decap.stats().unwrap();
        let whole = after.passed_through - before.passed_through;
        assert!(
            received.caravans > 0 && whole >= received.caravans,
            "{family}: the receiver read {} caravans, the decapsulator passed {whole} whole; \
             {received:?}, {sent} datagrams sent",
            received.caravans
        );
        assert_eq!(
            after.datagrams, before.datagrams,
            "{family}: nothing to the pass-through port may be cut up"
        );
        eprintln!("{family}: {FILE_BYTES} B intact, {sent} datagrams sent, {received:?}");
    }
    drop(decap);
    let (code, stats) = gw.stop().expect("pxgw stops");
    assert_eq!(code, 0, "pxgw exit code");
    assert!(
        stats["caravan"]["caravans_built"].as_u64().unwrap_or(0) > 0,
        "pxgw built no caravan: {}",
        stats["caravan"]
    );
}
