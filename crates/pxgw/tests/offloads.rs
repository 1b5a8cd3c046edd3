//! GRO or LRO on the interface under a `net_af_packet` port: pxgw refuses to start, and
//! `--check` says the same, in one line naming the interface and the `ethtool` command that fixes
//! it; with the fix applied, the ports open and `--check` reports the interface's offloads. (The
//! gateway lab runs traffic both ways with the offloads left on: `pxgw-lab offloads`.)

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use netlab::Veth;

fn config(ext: &str, int: &str) -> String {
    let port = |iface: &str, n: u32, mtu: u32, framesz: u32| {
        format!(
            "device = \"net_af_packet{n},iface={iface},framesz={framesz},blocksz={},framecnt=64\"\n\
             mtu = {mtu}\n",
            framesz * 4
        )
    };
    format!(
        "[ports.external]\n{}[ports.internal]\n{}",
        port(ext, 0, 1500, 2048),
        port(int, 1, 9000, 10240)
    )
}

fn pxgw(dir: &Path, config: &str, extra: &[&str]) -> Output {
    common::run_pxgw(dir, config, extra, "warn")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("offloads", name)
}

/// pxgw's own lines (not DPDK's EAL log), from both streams.
fn own_lines(out: &Output) -> Vec<String> {
    [&out.stdout, &out.stderr]
        .iter()
        .flat_map(|s| {
            String::from_utf8_lossy(s)
                .lines()
                .filter(|l| l.starts_with("pxgw: "))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn ethtool(iface: &str, settings: &[&str]) {
    let mut args = vec!["-K", iface];
    args.extend_from_slice(settings);
    netlab::run("ethtool", &args).unwrap();
}

#[test]
fn gro_under_af_packet_is_refused_in_one_line_with_the_fix_until_it_is_applied() {
    let (ext, int) = (
        Veth::new("pxoe", 1500).unwrap(),
        Veth::new("pxoi", 9000).unwrap(),
    );
    ethtool(int.a(), &["gro", "on"]);
    let dir = scratch("gro");
    let config = config(ext.a(), int.a());
    let expected = vec![format!(
        "pxgw: ports.internal: interface {i} has GRO on: the kernel hands pxgw TCP segments \
         coalesced into packets of up to 64 KB, which net_af_packet cuts to its 10240 B ring \
         frames (packets of at most 10160 B), and transfers would stall; turn it off: \
         `ethtool -K {i} gro off lro off`",
        i = int.a()
    )];
    for args in [&["--check"][..], &["--run-for", "5"][..]] {
        let out = pxgw(&dir, &config, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert_eq!(own_lines(&out), expected, "{args:?}");
    }
    // The fix, as printed: the ports open, and --check shows the interface's offloads.
    ethtool(int.a(), &["gro", "off", "lro", "off"]);
    let out = pxgw(&dir, &config, &["--check"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let lines = own_lines(&out);
    let internal = lines
        .iter()
        .find(|l| l.starts_with("pxgw: ports.internal:"))
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert!(
        internal.contains(&format!(
            "interface {} (veth): GRO off, LRO off, hardware GRO off",
            int.a()
        )),
        "{internal}"
    );
    // A veth's peer is out of pxgw's sight: said, not refused.
    assert!(
        lines.iter().any(|l| l.starts_with(&format!(
            "pxgw: warning: ports.internal: interface {} is a veth",
            int.a()
        ))),
        "{lines:?}"
    );
}
