//! Configuration errors name the key, the value and what is allowed; nothing panics.

use proptest::prelude::*;
use pxgw::config::{Config, ConfigError, Mode, PmtuPolicy};

const MINIMAL: &str = r#"
[ports.external]
device = "net_null0"
[ports.internal]
device = "net_null1"
"#;

#[test]
fn the_shipped_example_and_a_minimal_file_are_valid() {
    let example = Config::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/pxgw.toml"
    )))
    .unwrap();
    assert_eq!(example.emtu(), 1500);
    assert_eq!(example.imtu(), 9000);
    let min = Config::parse(MINIMAL).unwrap();
    assert_eq!(min.mode, Mode::Transparent);
    assert_eq!((min.emtu(), min.imtu()), (1500, 9000));
    assert_eq!(min.pmtu.policy, PmtuPolicy::Mss);
    assert!(min.caravan.enabled && min.mss.rewrite && min.merge.delay);
}

fn invalid(text: &str) -> ConfigError {
    Config::parse(text).unwrap_err()
}

#[test]
fn bad_values_name_key_value_and_what_is_allowed() {
    let cases = [
        ("[merge]\nimtu = 1000\n", "merge.imtu", "1000"),
        (
            "[ports.external]\ndevice = \"x\"\nmtu = 9500\n",
            "ports.external.mtu",
            "9500",
        ),
        ("[workers]\ncount = 0\n", "workers.count", "0"),
        ("[caravan]\ndscp = 64\n", "caravan.dscp", "64"),
        ("[caravan]\ndscp = 0\n", "caravan.dscp", "0"),
        ("[merge]\nyield_bypass = 1.5\n", "merge.yield_bypass", "1.5"),
        ("[pmtu]\nfallback = \"mss\"\n", "pmtu.fallback", "mss"),
        (
            "[pmtu]\nconservative_mtu = 100\n",
            "pmtu.conservative_mtu",
            "100",
        ),
        (
            "[workers]\ncount = 2\ncores = [0]\n",
            "workers.cores",
            "[0]",
        ),
    ];
    for (extra, key, value) in cases {
        // Later tables win for the ports; the rest merge with the minimal file.
        let text = merge(MINIMAL, extra);
        match invalid(&text) {
            ConfigError::Invalid {
                key: k,
                value: v,
                allowed,
            } => {
                assert_eq!(k, key, "{extra}");
                assert_eq!(v, value, "{extra}");
                assert!(!allowed.is_empty());
                let msg = ConfigError::Invalid {
                    key: k,
                    value: v,
                    allowed,
                }
                .to_string();
                assert!(msg.contains(key) && msg.contains(value), "{msg}");
            }
            other => panic!("{extra}: expected Invalid, got {other:?}"),
        }
    }
}

/// Appends `extra` to `base`, letting a `[ports.external]` in `extra` replace the base's.
fn merge(base: &str, extra: &str) -> String {
    if extra.starts_with("[ports.external]") {
        format!("{extra}[ports.internal]\ndevice = \"net_null1\"\n")
    } else {
        format!("{base}{extra}")
    }
}

#[test]
fn unknown_keys_types_and_syntax_are_rejected_with_the_key() {
    let unknown = invalid(&format!("{MINIMAL}[merge]\nimtuu = 9000\n"));
    assert!(
        matches!(&unknown, ConfigError::Parse(m) if m.contains("imtuu")),
        "{unknown}"
    );
    let typed = invalid(&format!("{MINIMAL}[merge]\nimtu = \"big\"\n"));
    assert!(
        matches!(&typed, ConfigError::Parse(m) if m.contains("imtu")),
        "{typed}"
    );
    let mode = invalid(&format!("mode = \"bridge\"\n{MINIMAL}"));
    assert!(
        matches!(&mode, ConfigError::Parse(m) if m.contains("bridge")),
        "{mode}"
    );
    assert!(matches!(
        invalid("[ports.external\n"),
        ConfigError::Parse(_)
    ));
    assert!(matches!(invalid(""), ConfigError::Parse(m) if m.contains("ports")));
    let l3 = invalid(&format!("mode = \"l3\"\n{MINIMAL}"));
    assert!(
        matches!(&l3, ConfigError::Invalid { key, .. } if key == "ports.external.next_hop_mac"),
        "{l3}"
    );
    let missing = Config::load(std::path::Path::new("/nonexistent/pxgw.toml")).unwrap_err();
    assert!(matches!(missing, ConfigError::Read { .. }));
}

/// What pxgw builds from a configuration at start, short of the EAL and the ports: every
/// pipeline (on heap buffers), the summary interval, the metrics endpoint's limits, the RX
/// queue layout and scaling policy, the heavy-hitter threshold, the capabilities kept.
fn build_without_eal(cfg: &Config) -> anyhow::Result<()> {
    use pxgw::pipeline::Pipeline;
    use pxio::rxq::{PolicyConfig, QueueLayout, ScalingPolicy};
    use pxio::split::SplitOffloads;
    use pxio::{HeapBuf, HeapPool};
    Pipeline::<HeapBuf>::new(
        cfg,
        HeapPool::new(256),
        HeapPool::new(256),
        SplitOffloads::default(),
    )?;
    cfg.stats.interval()?;
    cfg.stats.prometheus_limits()?;
    let layout = QueueLayout::new(pxgw::queues::rx_queue_count(cfg), cfg.workers.count)?;
    let policy = PolicyConfig {
        window_ns: cfg.queues.window_ns()?,
        ..PolicyConfig::default()
    };
    ScalingPolicy::new(layout, policy);
    cfg.queues.heavy_hitter_bps()?;
    pxgw::privileges::needed_caps(cfg);
    Ok(())
}

/// Values for an integer key: mostly within `lo..=hi`, sometimes at or past a limit.
fn int(lo: i64, hi: i64) -> BoxedStrategy<String> {
    prop_oneof![
        8 => lo..=hi,
        1 => prop_oneof![
            Just(0),
            Just(1),
            Just(lo - 1),
            Just(hi + 1),
            Just(i64::from(u16::MAX)),
            Just(i64::from(u32::MAX)),
            Just(i64::MAX),
            any::<u32>().prop_map(i64::from),
        ],
    ]
    .prop_map(|v| v.to_string())
    .boxed()
}

/// Values for a float key: mostly within `lo..hi`, sometimes huge, tiny, negative or not a
/// number.
fn float(lo: f64, hi: f64) -> BoxedStrategy<String> {
    prop_oneof![
        8 => lo..hi,
        1 => prop_oneof![
            Just(0.0),
            Just(hi),
            Just(1e20),
            Just(f64::MAX),
            Just(1e-300),
            Just(-1.0),
            Just(f64::INFINITY),
            Just(f64::NAN),
        ],
    ]
    .prop_map(|v| {
        if v.is_nan() {
            "nan".to_owned()
        } else if v.is_infinite() {
            "inf".to_owned()
        } else {
            format!("{v:?}")
        }
    })
    .boxed()
}

fn boolean() -> BoxedStrategy<String> {
    any::<bool>().prop_map(|b| b.to_string()).boxed()
}

fn one_of(values: &'static [&'static str]) -> BoxedStrategy<String> {
    proptest::sample::select(values)
        .prop_map(str::to_owned)
        .boxed()
}

/// A table whose keys are each present or not.
fn table(
    name: &'static str,
    keys: Vec<(&'static str, BoxedStrategy<String>)>,
) -> BoxedStrategy<String> {
    keys.into_iter()
        .map(|(key, value)| {
            proptest::option::weighted(0.3, value)
                .prop_map(move |v| v.map_or(String::new(), |v| format!("{key} = {v}\n")))
                .boxed()
        })
        .collect::<Vec<_>>()
        .prop_map(move |lines| format!("[{name}]\n{}", lines.concat()))
        .boxed()
}

fn port(name: &'static str) -> BoxedStrategy<String> {
    let devices: &'static [&'static str] = if name == "ports.external" {
        &[
            "\"net_null0\"",
            "\"net_ring0\"",
            "\"net_af_packet0,iface=ext0,framesz=2048\"",
            "\"net_tap0,iface=ext0\"",
        ]
    } else {
        &[
            "\"net_null1\"",
            "\"net_af_packet1,iface=int0,framesz=10240\"",
            "\"0000:3b:00.0\"",
        ]
    };
    let device = one_of(devices);
    let mtu = if name == "ports.external" {
        int(576, 1968)
    } else {
        int(576, 9216)
    };
    let keys = vec![
        ("mtu", mtu),
        ("rx_descriptors", int(64, 4096)),
        ("tx_descriptors", int(64, 4096)),
        (
            "next_hop_mac",
            prop_oneof![9 => Just("\"02:00:00:00:00:01\"".to_owned()), 1 => Just("\"02:00\"".to_owned())]
                .boxed(),
        ),
    ];
    (device, table(name, keys))
        .prop_map(|(device, t)| format!("{t}device = {device}\n"))
        .boxed()
}

/// A configuration file: every table, each key present or not, its value mostly plausible.
fn config_text() -> impl Strategy<Value = String> {
    let head = (
        proptest::option::weighted(0.1, one_of(&["\"transparent\"", "\"l3\""])),
        port("ports.external"),
        port("ports.internal"),
        table(
            "workers",
            vec![
                ("count", int(1, 64)),
                ("pool_size", int(100_000, 4_000_000)),
            ],
        ),
        table(
            "queues",
            vec![
                ("per_worker", int(1, 16)),
                ("scaling", boolean()),
                ("window_ms", int(10, 60_000)),
                ("hairpin", boolean()),
                ("sample_ratio", int(1, 1024)),
                ("heavy_hitter_mbps", int(0, 10_000_000)),
                ("header_split", boolean()),
                ("header_bytes", int(64, 1024)),
            ],
        ),
        table(
            "merge",
            vec![
                ("enabled", boolean()),
                ("imtu", int(576, 9216)),
                ("delay", boolean()),
                ("rate_threshold_gbps", float(0.0, 400.0)),
                ("yield_bypass", float(0.0, 1.0)),
                ("max_window_us", int(1, 100_000)),
                // The flow table is allocated whole: kept to sizes a test can afford.
                ("flows", (0i64..=70_000).prop_map(|v| v.to_string()).boxed()),
                ("max_segs", int(2, 256)),
            ],
        ),
    );
    let tail = (
        table(
            "caravan",
            vec![
                ("enabled", boolean()),
                ("dscp", int(1, 63)),
                ("timeout_us", int(1, 100_000)),
                ("max_datagrams", int(1, 64)),
                ("pass_ttl", int(0, 255)),
                (
                    "families",
                    one_of(&["[\"ipv4\"]", "[\"ipv6\", \"ipv4\"]", "[]"]),
                ),
            ],
        ),
        table(
            "pmtu",
            vec![
                (
                    "policy",
                    one_of(&["\"mss\"", "\"emtu\"", "\"conservative\""]),
                ),
                (
                    "fallback",
                    one_of(&["\"mss\"", "\"emtu\"", "\"conservative\""]),
                ),
                ("conservative_mtu", int(576, 1500)),
                ("probe", boolean()),
                ("port", int(1, 65535)),
                ("blackhole_retransmits", int(0, 16)),
                ("blackhole_window_ms", int(1, 600_000)),
                ("blackhole_mtu", int(1280, 1500)),
            ],
        ),
        table(
            "icmp",
            vec![
                ("enabled", boolean()),
                ("ratelimit_ms", int(0, 3_600_000)),
                ("ratelimit_burst", int(1, 100)),
                ("msgs_per_sec", int(1, 100_000)),
                ("msgs_burst", int(1, 1000)),
                ("max_destinations", int(1, 1 << 20)),
            ],
        ),
        table(
            "stats",
            vec![
                ("interval_s", float(0.0, 86_400.0)),
                ("prometheus", one_of(&["\"127.0.0.1:0\"", "\"[::1]:9469\""])),
                ("prometheus_max_connections", int(1, 1024)),
                ("prometheus_timeout_ms", int(10, 600_000)),
            ],
        ),
        table(
            "process",
            vec![
                ("user", one_of(&["\"nobody\"", "\"\"", "\"-x\"", "\"a b\""])),
                ("group", one_of(&["\"nogroup\"", "\"\""])),
            ],
        ),
        table("eal", vec![("memory_mb", int(128, 4096))]),
    );
    (head, tail).prop_map(|((mode, ext, int, w, q, m), (c, p, i, s, pr, e))| {
        let mode = mode.map_or(String::new(), |m| format!("mode = {m}\n"));
        format!("{mode}{ext}{int}{w}{q}{m}{c}{p}{i}{s}{pr}{e}")
    })
}

/// Every configuration `validate` accepts starts: nothing pxgw builds from it before the EAL
/// refuses it or panics (a summary interval of 1e20 s once passed validation, then panicked
/// converting it to a Duration after the ports were up).
#[test]
fn every_accepted_configuration_builds() {
    use proptest::test_runner::{Config as Cases, TestCaseError, TestRunner};
    let accepted = std::cell::Cell::new(0u32);
    let mut runner = TestRunner::new(Cases {
        cases: 2000,
        failure_persistence: None,
        ..Cases::default()
    });
    runner
        .run(&config_text(), |text| {
            if let Ok(cfg) = Config::parse(&text) {
                accepted.set(accepted.get() + 1);
                build_without_eal(&cfg)
                    .map_err(|e| TestCaseError::fail(format!("accepted, cannot build: {e:#}")))?;
            }
            Ok(())
        })
        .unwrap();
    // The generator must reach the accepting side often enough to mean something.
    assert!(
        accepted.get() >= 100,
        "only {} of 2000 accepted",
        accepted.get()
    );
}

#[test]
fn values_that_cannot_start_are_refused_by_name() {
    for (extra, key, value) in [
        (
            "[stats]\ninterval_s = 1e20\n",
            "stats.interval_s",
            "100000000000000000000",
        ),
        (
            "[stats]\ninterval_s = 86400.5\n",
            "stats.interval_s",
            "86400.5",
        ),
        (
            "[caravan]\nmax_datagrams = 65\n",
            "caravan.max_datagrams",
            "65",
        ),
        (
            "[queues]\nheavy_hitter_mbps = 9223372036854775807\n",
            "queues.heavy_hitter_mbps",
            "9223372036854775807",
        ),
        (
            "[icmp]\nratelimit_ms = 3600001\n",
            "icmp.ratelimit_ms",
            "3600001",
        ),
        (
            "[stats]\nprometheus_max_connections = 0\n",
            "stats.prometheus_max_connections",
            "0",
        ),
        (
            "[stats]\nprometheus_timeout_ms = 0\n",
            "stats.prometheus_timeout_ms",
            "0",
        ),
        ("[process]\nuser = \"\"\n", "process.user", "\"\""),
        ("[process]\ngroup = \"adm\"\n", "process.group", "\"adm\""),
    ] {
        match invalid(&format!("{MINIMAL}{extra}")) {
            ConfigError::Invalid {
                key: k, value: v, ..
            } => {
                assert_eq!((k.as_str(), v.as_str()), (key, value), "{extra}");
            }
            other => panic!("{extra}: expected Invalid, got {other:?}"),
        }
    }
    // The caravan format's own limit is the configuration's.
    let most = format!(
        "{MINIMAL}[caravan]\nmax_datagrams = {}\n",
        pxio::caravan::format::MAX_DATAGRAMS
    );
    Config::parse(&most).unwrap();
}
