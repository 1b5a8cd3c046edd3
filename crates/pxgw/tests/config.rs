//! Configuration errors name the key, the value and what is allowed; nothing panics.

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
