//! Ports configured as the configuration says, or a clear one-line refusal, and no invisible
//! loss: the port counters reach `--stats-json` and match what went through.
//!
//! The binary tests run `pxgw` itself (each run is its own process, so its own EAL).

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use netlab::Veth;
use pxgw::config::{Config, ConfigError};
use pxio::wire::repr::{udp_frame, EthernetRepr, IpRepr, Ipv4Repr, UdpRepr};

fn ports(ext: &str, int: &str, int_mtu: u16) -> String {
    format!(
        "[ports.external]\ndevice = \"{ext}\"\nmtu = 1500\n\
         [ports.internal]\ndevice = \"{int}\"\nmtu = {int_mtu}\n"
    )
}

fn refusal(text: &str) -> String {
    match Config::parse(text) {
        Err(e @ ConfigError::Invalid { .. }) => e.to_string(),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

const NULLS: (&str, &str) = ("net_null0", "net_null1");

#[test]
fn eal_help_options_are_refused_before_the_eal_sees_them() {
    for arg in ["--help", "-h", "-vh", "--he", "--help=x"] {
        let text = format!(
            "{}[eal]\nargs = [\"{arg}\"]\n",
            ports(NULLS.0, NULLS.1, 9000)
        );
        assert_eq!(
            refusal(&text),
            format!(
                "invalid value for `eal.args`: \"{arg}\"; the EAL prints its usage and exits on \
                 -h/--help; run `pxgw --help` or `dpdk-testpmd -h` instead"
            )
        );
    }
    // Options with values that merely contain an h are not help.
    let ok = format!(
        "{}[eal]\nargs = [\"--huge-dir\", \"/mnt/huge\", \"-l\", \"0\", \"--log-level=debug\"]\n",
        ports(NULLS.0, NULLS.1, 9000)
    );
    Config::parse(&ok).unwrap();
    let vdev = format!(
        "{}[eal]\nargs = [\"--vdev=net_null9\"]\n",
        ports(NULLS.0, NULLS.1, 9000)
    );
    assert!(refusal(&vdev).contains("ports.*.device"));
}

#[test]
fn an_af_packet_ring_too_small_for_the_mtu_is_refused() {
    let text = ports(
        "net_af_packet0,iface=ext0",
        "net_af_packet1,iface=int0,framesz=4096",
        9000,
    );
    assert_eq!(
        refusal(&text),
        "invalid value for `ports.internal.device`: framesz=4096; a net_af_packet ring frame of \
         4096 B cannot hold MTU 9000 (it needs framesz >= 9080, and blocksz a multiple of it)"
    );
}

#[test]
fn a_pool_smaller_than_the_rings_is_refused() {
    let text = format!(
        "{}[workers]\ncount = 2\npool_size = 16383\n",
        ports(NULLS.0, NULLS.1, 9000)
    );
    assert_eq!(
        refusal(&text),
        "invalid value for `workers.pool_size`: 16383; at least 21248: the RX and TX rings of 2 \
         worker(s) hold 16384 mbufs, their caches up to 768, plus 4096 for bursts and held \
         packets"
    );
}

/// Runs `pxgw` with `config` written to a file in `dir`, and `extra` arguments.
fn pxgw(dir: &Path, config: &str, extra: &[&str]) -> Output {
    common::run_pxgw(dir, config, extra, "warn")
}

fn scratch(name: &str) -> PathBuf {
    common::scratch("ports", name)
}

/// The lines pxgw wrote on stderr that are its own (not DPDK's EAL log).
fn own_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("pxgw: "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn check_refuses_eal_help_with_one_line_and_a_failure_code() {
    let dir = scratch("help");
    let out = pxgw(
        &dir,
        &format!(
            "{}[eal]\nargs = [\"--help\"]\n",
            ports(NULLS.0, NULLS.1, 9000)
        ),
        &["--check"],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("eal.args"), "{stderr}");
    // The EAL never ran: its usage text is not there.
    assert!(!String::from_utf8_lossy(&out.stdout).contains("EAL common options"));
}

fn af_packet(iface: &str, n: u32, framesz: u32) -> String {
    format!(
        "net_af_packet{n},iface={iface},framesz={framesz},blocksz={},framecnt=64",
        framesz * 4
    )
}

#[test]
fn check_refuses_a_kernel_mtu_mismatch_naming_both() {
    let (ext, int) = (
        Veth::new("pxce", 1500).unwrap(),
        Veth::new("pxci", 1500).unwrap(),
    );
    let dir = scratch("mtu");
    let config = ports(
        &af_packet(ext.a(), 0, 2048),
        &af_packet(int.a(), 1, 10240),
        9000,
    );
    let out = pxgw(&dir, &config, &["--check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        own_lines(&out),
        vec![format!(
            "pxgw: ports.internal: configured MTU 9000 but interface {i} has MTU 1500; make them \
             equal (`ip link set {i} mtu 9000` or ports.internal.mtu = 1500)",
            i = int.a()
        )]
    );
    // Nothing was changed behind the operator's back.
    let mtu = std::fs::read_to_string(format!("/sys/class/net/{}/mtu", int.a())).unwrap();
    assert_eq!(mtu.trim(), "1500");
}

#[test]
fn check_names_a_missing_interface() {
    let ext = Veth::new("pxcm", 1500).unwrap();
    let dir = scratch("missing");
    let config = ports(
        &af_packet(ext.a(), 0, 2048),
        &af_packet("pxnosuch0", 1, 10240),
        9000,
    );
    let out = pxgw(&dir, &config, &["--check"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        own_lines(&out),
        vec![format!(
            "pxgw: ports.internal: interface pxnosuch0 does not exist in this network namespace \
             (device {})",
            af_packet("pxnosuch0", 1, 10240)
        )]
    );
}

#[test]
fn check_opens_matching_ports_and_reports_them() {
    let (ext, int) = (
        Veth::new("pxck", 1500).unwrap(),
        Veth::new("pxck", 9000).unwrap(),
    );
    let dir = scratch("ok");
    let config = ports(
        &af_packet(ext.a(), 0, 2048),
        &af_packet(int.a(), 1, 10240),
        9000,
    );
    let out = pxgw(&dir, &config, &["--check"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(stdout.contains("check passed"), "{stdout}");
    let int_line = stdout
        .lines()
        .find(|l| l.starts_with("pxgw: ports.internal:"))
        .unwrap_or_else(|| panic!("no internal port line in {stdout}"));
    assert!(
        int_line.contains(&format!("MTU 9000, interface {} MTU 9000", int.a()))
            && int_line.contains("chained TX (MULTI_SEGS) yes"),
        "{int_line}"
    );
}

/// A pcap file (microsecond timestamps, Ethernet) holding `frames`.
fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut out = Vec::new();
    for v in [0xa1b2_c3d4u32.to_le_bytes(), [2, 0, 4, 0]] {
        out.extend_from_slice(&v);
    }
    out.extend_from_slice(&[0; 8]); // thiszone, sigfigs
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes()); // LINKTYPE_ETHERNET
    for (i, f) in frames.iter().enumerate() {
        out.extend_from_slice(&(i as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(path, out).unwrap();
}

/// The number of records in a pcap file.
fn pcap_records(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let (mut at, mut n) = (24, 0);
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        at += 16 + len;
        n += 1;
    }
    n
}

#[test]
fn port_counters_reach_the_json_and_match_what_went_through() {
    const N: usize = 300;
    let dir = scratch("pcap");
    let frames: Vec<Vec<u8>> = (0..N)
        .map(|i| {
            let payload = vec![i as u8; 100 + i % 700];
            // DNS: excluded from caravans, so every datagram passes one for one.
            udp_frame(
                EthernetRepr {
                    dst: [0x02, 0, 0, 0, 0, 2],
                    src: [0x02, 0, 0, 0, 0, 1],
                    vlan_tci: None,
                    ethertype: 0x0800,
                },
                IpRepr::V4(Ipv4Repr::new([198, 51, 100, 1], [198, 18, 0, 2])),
                UdpRepr {
                    src_port: 40000 + i as u16,
                    dst_port: 53,
                },
                &payload,
            )
            .unwrap()
        })
        .collect();
    let (ext_in, int_in) = (dir.join("ext_in.pcap"), dir.join("int_in.pcap"));
    let (ext_out, int_out) = (dir.join("ext_out.pcap"), dir.join("int_out.pcap"));
    write_pcap(&ext_in, &frames);
    write_pcap(&int_in, &[]);
    let dev = |n: u32, rx: &Path, tx: &Path| {
        format!(
            "net_pcap{n},rx_pcap={},tx_pcap={}",
            rx.display(),
            tx.display()
        )
    };
    let json = dir.join("stats.json");
    let config = format!(
        "{}[pmtu]\nprobe = false\n[stats]\ninterval_s = 0.5\n",
        ports(&dev(0, &ext_in, &ext_out), &dev(1, &int_in, &int_out), 9000)
    );
    let out = pxgw(
        &dir,
        &config,
        &["--run-for", "2", "--stats-json", json.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let port = |side: &str, key: &str| stats["ports"][side][key].as_u64().unwrap();
    let bytes: u64 = frames.iter().map(|f| f.len() as u64).sum();
    assert_eq!(port("external", "ipackets"), N as u64, "{stats:#}");
    assert_eq!(port("external", "ibytes"), bytes);
    for key in ["imissed", "ierrors", "rx_nombuf", "oerrors"] {
        assert_eq!(port("external", key), 0, "{key}");
        assert_eq!(port("internal", key), 0, "{key}");
    }
    assert_eq!(port("internal", "opackets"), N as u64, "{stats:#}");
    assert_eq!(port("internal", "obytes"), bytes);
    assert_eq!(stats["inbound"]["packets_out"].as_u64(), Some(N as u64));
    assert_eq!(stats["drops"]["tx_dropped"].as_u64(), Some(0));
    assert_eq!(pcap_records(&int_out), N, "what the driver wrote out");
    let _ = std::fs::remove_dir_all(&dir);
}
