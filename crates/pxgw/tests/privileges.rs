//! `[process] user`: once its ports are open, pxgw runs as that user with only the capabilities
//! its port types need, forwards as before, and stops cleanly on SIGINT. Each test runs the
//! `pxgw` binary itself (as root, as the other binary tests do) and reads `/proc/<pid>/status`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use netlab::{Netns, Veth};

const PXGW: &str = env!("CARGO_BIN_EXE_pxgw");

/// One net_af_packet gateway at a time: DPDK 22.11 names each port's fanout group after the
/// process ID XOR the interface index, and two gateways started together on other interfaces can
/// draw the same group (the second then fails with EINVAL).
static LAB: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `CAP_NET_RAW`, `CAP_NET_ADMIN` and `CAP_IPC_LOCK`: what dist/pxgw.service grants pxgw to open
/// net_af_packet ports.
const START_CAPS: &str = "+net_raw,+net_admin,+ipc_lock";

/// `CAP_NET_ADMIN`'s bit.
const CAP_NET_ADMIN: u64 = 1 << 12;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pxgw-priv-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A running pxgw, its output lines (stdout: its log and summary; stderr: DPDK's) forwarded to
/// a channel.
struct Gateway {
    child: Child,
    lines: mpsc::Receiver<String>,
    log: Vec<String>,
}

impl Gateway {
    fn start(dir: &Path, config: &str, extra: &[&str]) -> Self {
        let path = dir.join("pxgw.toml");
        std::fs::write(&path, config).unwrap();
        Self::spawn(Command::new(PXGW), &path, extra)
    }

    /// Runs `cmd` (pxgw, or a wrapper whose last argument is pxgw) on the configuration at
    /// `path`.
    fn spawn(mut cmd: Command, path: &Path, extra: &[&str]) -> Self {
        let mut child = cmd
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .arg("--config")
            .arg(path)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = mpsc::channel();
        let forward = |out: Box<dyn std::io::Read + Send>, tx: mpsc::Sender<String>| {
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        };
        forward(Box::new(child.stdout.take().unwrap()), tx.clone());
        forward(Box::new(child.stderr.take().unwrap()), tx);
        Self {
            child,
            lines,
            log: Vec::new(),
        }
    }

    /// Waits (at most 30 s) for an output line containing `text`.
    fn wait_for(&mut self, text: &str) {
        let end = Instant::now() + Duration::from_secs(30);
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.log.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = self.child.kill();
        panic!("pxgw never logged {text:?}:\n{}", self.log.join("\n"));
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGINT, then its exit status (at most 30 s) and everything it wrote.
    fn interrupt(mut self) -> (ExitStatus, String) {
        let pid = self.pid().to_string();
        let status = Command::new("kill").args(["-INT", &pid]).status().unwrap();
        assert!(status.success());
        let end = Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("pxgw did not stop on SIGINT");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The forwarding threads end with the pipes.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.log.push(line);
        }
        (status, self.log.join("\n"))
    }
}

/// The fields of a `/proc/.../status` file.
fn status(path: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect()
}

fn field<'a>(status: &'a [(String, String)], key: &str) -> &'a str {
    status
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {status:?}"))
}

fn caps(status: &[(String, String)], key: &str) -> u64 {
    u64::from_str_radix(field(status, key), 16).unwrap()
}

/// The identity and capability lines of a status, for messages.
fn ids(status: &[(String, String)]) -> String {
    status
        .iter()
        .filter(|(k, _)| {
            matches!(k.as_str(), "Name" | "Uid" | "Gid" | "Groups" | "NoNewPrivs")
                || k.starts_with("Cap")
        })
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks that `pid` runs as nobody (IDs 65534, no supplementary group) with exactly `kept` in
/// its permitted and effective sets, nothing inheritable or ambient, `no_new_privs` set, and so
/// do the threads pxgw started itself (`pxgw-*`: workers, the metrics server). Returns the other
/// threads (started by the EAL) that hold more than `kept`.
fn check_dropped(pid: u32, kept: u64, bounded: bool) -> Vec<String> {
    let main = status(&format!("/proc/{pid}/status"));
    assert_eq!(
        field(&main, "Uid"),
        "65534\t65534\t65534\t65534",
        "{}",
        ids(&main)
    );
    assert_eq!(
        field(&main, "Gid"),
        "65534\t65534\t65534\t65534",
        "{}",
        ids(&main)
    );
    assert_eq!(field(&main, "Groups"), "", "{}", ids(&main));
    assert_eq!(field(&main, "NoNewPrivs"), "1", "{}", ids(&main));
    assert_eq!(caps(&main, "CapEff"), kept, "{}", ids(&main));
    assert_eq!(caps(&main, "CapPrm"), kept, "{}", ids(&main));
    assert_eq!(caps(&main, "CapInh"), 0, "{}", ids(&main));
    assert_eq!(caps(&main, "CapAmb"), 0, "{}", ids(&main));
    if bounded {
        // Started as root with CAP_SETPCAP: nothing else can come back, even through exec.
        assert_eq!(caps(&main, "CapBnd"), kept, "{}", ids(&main));
    }
    let mut ours = 0;
    let mut beyond = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let s = status(&format!("{}/status", task.unwrap().path().display()));
        // glibc moves every thread to the new IDs.
        assert_eq!(
            field(&s, "Uid"),
            "65534\t65534\t65534\t65534",
            "{}",
            ids(&s)
        );
        let more = (caps(&s, "CapPrm") | caps(&s, "CapEff")) & !kept != 0;
        if field(&s, "Name").starts_with("pxgw") {
            ours += 1;
            assert!(!more, "{}", ids(&s));
        } else if more {
            beyond.push(ids(&s));
        }
    }
    assert!(ours >= 2, "pxgw's own threads: {ours}");
    beyond
}

/// The `pxgw: final` summary's inbound frame count.
fn inbound_frames(log: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.starts_with("pxgw: final"))
        .unwrap_or_else(|| panic!("no final line in {log}"));
    line.split("inbound ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no inbound count in {line}"))
}

/// Two namespaces joined through a gateway's net_af_packet ports: (outside, inside, the veths,
/// the configuration with `[process] user = "nobody"`).
fn af_packet_lab() -> (Netns, Netns, Veth, Veth, String) {
    let (outside, inside) = (Netns::new("pxpo").unwrap(), Netns::new("pxpi").unwrap());
    let (ext, int) = (
        Veth::new("pxpe", 1500).unwrap(),
        Veth::new("pxpi", 9000).unwrap(),
    );
    ext.move_b_into(&outside).unwrap();
    int.move_b_into(&inside).unwrap();
    outside
        .ip(&["addr", "add", "198.18.7.1/24", "dev", ext.b()])
        .unwrap();
    inside
        .ip(&["addr", "add", "198.18.7.2/24", "dev", int.b()])
        .unwrap();
    let config = format!(
        "[ports.external]\ndevice = \"net_af_packet0,iface={},framesz=2048,blocksz=8192,framecnt=512\"\n\
         mtu = 1500\nrx_descriptors = 256\ntx_descriptors = 256\n\
         [ports.internal]\ndevice = \"net_af_packet1,iface={},framesz=10240,blocksz=40960,framecnt=512\"\n\
         mtu = 9000\nrx_descriptors = 256\ntx_descriptors = 256\n\
         [pmtu]\nprobe = false\n[stats]\ninterval_s = 0\n[process]\nuser = \"nobody\"\n",
        ext.a(),
        int.a()
    );
    (outside, inside, ext, int, config)
}

/// net_af_packet ports between two namespaces: after the switch to nobody pxgw holds no
/// capability at all, still forwards (a ping crosses it both ways), writes its statistics, and
/// stops cleanly on SIGINT.
#[test]
fn af_packet_ports_forward_as_nobody_without_capabilities() {
    let _lab = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let (outside, _inside, _ext, _int, config) = af_packet_lab();
    let dir = scratch("afp");
    // Created before the switch: nobody may not write to the directory.
    let json = dir.join("stats.json");
    let mut gw = Gateway::start(&dir, &config, &["--stats-json", json.to_str().unwrap()]);
    gw.wait_for("worker started");
    assert_eq!(check_dropped(gw.pid(), 0, true), Vec::<String>::new());
    let ping = outside
        .exec("ping", &["-c", "3", "-i", "0.2", "-W", "2", "198.18.7.2"])
        .expect("a ping through the unprivileged gateway");
    assert!(ping.contains("3 received"), "{ping}");
    // Still unprivileged after forwarding.
    assert_eq!(check_dropped(gw.pid(), 0, true), Vec::<String>::new());
    let (status, log) = gw.interrupt();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(inbound_frames(&log) >= 3, "{log}");
    assert!(log.contains("pxgw: leaked mbufs 0"), "{log}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        stats["inbound"]["packets_in"].as_u64() >= Some(3),
        "{stats:#}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// net_tap ports: pxgw keeps CAP_NET_ADMIN and nothing else, which the driver needs to set its
/// interfaces down when the ports stop (without it, `SIOCSIFFLAGS` fails with EPERM, which the
/// driver logs only at debug level).
#[test]
fn tap_ports_keep_cap_net_admin_and_nothing_else() {
    let tap = |n: u32| netlab::unique_name(&format!("pxpt{n}"));
    let (ext, int) = (tap(0), tap(1));
    let dir = scratch("tap");
    let config = format!(
        "[ports.external]\ndevice = \"net_tap0,iface={ext}\"\nmtu = 1500\n\
         rx_descriptors = 256\ntx_descriptors = 256\n\
         [ports.internal]\ndevice = \"net_tap1,iface={int}\"\nmtu = 1500\n\
         rx_descriptors = 256\ntx_descriptors = 256\n\
         [pmtu]\nprobe = false\n[stats]\ninterval_s = 0\n[process]\nuser = \"nobody\"\n\
         [eal]\nargs = [\"--log-level=pmd.net.tap:debug\"]\n"
    );
    let mut gw = Gateway::start(&dir, &config, &[]);
    gw.wait_for("worker started");
    assert_eq!(
        check_dropped(gw.pid(), CAP_NET_ADMIN, true),
        Vec::<String>::new()
    );
    let (status, log) = gw.interrupt();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("pxgw: leaked mbufs 0"), "{log}");
    assert!(
        !log.contains("SIOCSIFFLAGS) failed"),
        "the driver could not set its interfaces down:\n{log}"
    );
    // The interfaces went with the ports.
    for iface in [&ext, &int] {
        assert!(
            !Path::new(&format!("/sys/class/net/{iface}")).exists(),
            "{iface}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A user that does not exist is one line and exit code 2, before the EAL opens anything.
#[test]
fn a_missing_user_stops_pxgw_before_it_opens_a_port() {
    let dir = scratch("nouser");
    let path = dir.join("pxgw.toml");
    std::fs::write(
        &path,
        "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n\
         [process]\nuser = \"pxgw-no-such-user\"\n",
    )
    .unwrap();
    let out = Command::new(PXGW)
        .env("RUST_LOG", "warn")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(
        stderr.trim(),
        format!(
            "pxgw: {}: process.user: no user \"pxgw-no-such-user\" on this system",
            path.display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Started as dist/pxgw.service starts it: root, but with a bounding set of only what opening
/// net_af_packet ports and switching user need, and `no_new_privs`. Once the ports are open no
/// thread holds any capability, and pxgw forwards.
#[test]
fn started_as_the_unit_starts_it_no_thread_keeps_a_capability() {
    let _lab = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let (outside, _inside, _ext, _int, config) = af_packet_lab();
    let dir = scratch("unit");
    let path = dir.join("pxgw.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!(
        "--bounding-set=-all,{START_CAPS},+setuid,+setgid,+setpcap"
    ))
    .arg("--no-new-privs")
    .arg(PXGW);
    let mut gw = Gateway::spawn(cmd, &path, &[]);
    gw.wait_for("worker started");
    assert_eq!(check_dropped(gw.pid(), 0, true), Vec::<String>::new());
    let ping = outside
        .exec("ping", &["-c", "3", "-i", "0.2", "-W", "2", "198.18.7.2"])
        .expect("a ping through the unprivileged gateway");
    assert!(ping.contains("3 received"), "{ping}");
    let (status, log) = gw.interrupt();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(inbound_frames(&log) >= 3, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Started as the user already, with the same capabilities ambient: pxgw gives them up in its
/// own threads, but the threads the EAL started while it opened the ports keep them (capabilities
/// are per thread, and with no change of user nothing clears theirs). pxgw names them in a
/// warning.
#[test]
fn started_as_the_user_the_eal_threads_keep_their_capabilities_and_pxgw_says_so() {
    let _lab = LAB.lock().unwrap_or_else(|p| p.into_inner());
    let (_outside, _inside, _ext, _int, config) = af_packet_lab();
    let dir = scratch("ambient");
    // DPDK's runtime directory for a user other than root.
    let runtime = dir.join("run");
    std::fs::create_dir_all(&runtime).unwrap();
    std::os::unix::fs::chown(&runtime, Some(65534), Some(65534)).unwrap();
    let path = dir.join("pxgw.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(format!("--inh-caps={START_CAPS}"))
        .arg(format!("--ambient-caps={START_CAPS}"))
        .arg(PXGW)
        .env("XDG_RUNTIME_DIR", &runtime);
    let mut gw = Gateway::spawn(cmd, &path, &[]);
    gw.wait_for("worker started");
    let kept = check_dropped(gw.pid(), 0, false);
    assert!(
        kept.iter().any(|t| t.contains("eal-intr-thread")),
        "{kept:?}"
    );
    let (status, log) = gw.interrupt();
    assert_eq!(status.code(), Some(0), "{log}");
    let warning = log
        .lines()
        .find(|l| l.contains("keep their capabilities"))
        .unwrap_or_else(|| panic!("no warning in {log}"));
    assert!(warning.contains("eal-intr-thread"), "{warning}");
    let _ = std::fs::remove_dir_all(&dir);
}
