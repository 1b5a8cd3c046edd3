//! docs/configuration.md documents every key `pxgw.toml` accepts, and nothing else, with the
//! defaults the code has; the `toml` examples of the page and the README are valid.
//!
//! The keys the configuration accepts are read from the configuration itself, not from a list
//! kept by hand: a table given an unknown key is refused with the names of the keys it takes
//! (`deny_unknown_fields`), so probing each table in turn walks the whole structure. A key added
//! to `Config` without a row in the page, or a row for a key that no longer exists, fails here.

use std::collections::{BTreeMap, BTreeSet};

use pxgw::config::{Config, ConfigError};

/// The page, as it is in the repository.
const PAGE: &str = include_str!("../../../docs/configuration.md");

/// A key no table accepts, used to make a table list the keys it does.
const PROBE: &str = "__undocumented_probe__";

/// The smallest valid configuration, as a TOML table.
fn minimal() -> toml::Table {
    toml::from_str(
        "[ports.external]\ndevice = \"net_null0\"\n[ports.internal]\ndevice = \"net_null1\"\n",
    )
    .unwrap()
}

/// `table` with `key = value` set at the dotted `path`, tables created on the way (a value on
/// the way, such as `ports.external.device`, becomes a table).
fn with(mut table: toml::Table, path: &[&str], key: &str, value: toml::Value) -> toml::Table {
    let mut t = &mut table;
    for part in path {
        let entry = t
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = entry.as_table_mut().expect("made a table just above");
    }
    t.insert(key.to_owned(), value);
    table
}

/// The keys the table at `path` accepts, or `None` when `path` is not a table of keys (a value).
fn accepted_keys(path: &[&str]) -> Option<Vec<String>> {
    let text = toml::to_string(&with(minimal(), path, PROBE, toml::Value::Integer(0))).unwrap();
    let err = match Config::parse(&text) {
        Err(ConfigError::Parse(msg)) => msg,
        other => panic!("an unknown key at {path:?} was not refused: {other:?}"),
    };
    let line = err
        .lines()
        .find(|l| l.contains(&format!("unknown field `{PROBE}`")))?;
    let expected = line
        .split_once("expected")
        .expect("serde names what it expected")
        .1;
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every table of the configuration with its leaf keys, by dotted path ("" for the top level).
fn accepted() -> BTreeMap<String, BTreeSet<String>> {
    fn walk(path: &mut Vec<String>, out: &mut BTreeMap<String, BTreeSet<String>>) {
        let parts: Vec<&str> = path.iter().map(String::as_str).collect();
        let keys = accepted_keys(&parts).expect("a table");
        let mut leaves = BTreeSet::new();
        for key in keys {
            path.push(key.clone());
            let parts: Vec<&str> = path.iter().map(String::as_str).collect();
            if accepted_keys(&parts).is_some() {
                walk(path, out);
            } else {
                leaves.insert(key);
            }
            path.pop();
        }
        if !leaves.is_empty() {
            out.insert(path.join("."), leaves);
        }
    }
    let mut out = BTreeMap::new();
    walk(&mut Vec::new(), &mut out);
    out
}

/// One documented key: its table, its name and its default cell.
#[derive(Debug)]
struct Row {
    table: String,
    key: String,
    default: String,
}

/// The rows of the page's key tables (those whose header starts `| key | default |`), each under
/// the tables its heading names in backticks (`[merge]`; none: the top level).
fn documented(page: &str) -> Vec<Row> {
    let mut tables = vec![String::new()];
    let mut in_key_table = false;
    let mut in_fence = false;
    let mut rows = Vec::new();
    for line in page.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        if line.starts_with('#') {
            tables = line
                .split('`')
                .skip(1)
                .step_by(2)
                .filter_map(|s| s.strip_prefix('[')?.strip_suffix(']'))
                .map(str::to_owned)
                .collect();
            if tables.is_empty() {
                tables.push(String::new());
            }
            in_key_table = false;
            continue;
        }
        if !line.starts_with('|') {
            in_key_table = false;
            continue;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.first() == Some(&"key") && cells.get(1) == Some(&"default") {
            in_key_table = true;
            continue;
        }
        if !in_key_table || cells[0].starts_with("---") {
            continue;
        }
        let key = cells[0]
            .strip_prefix('`')
            .and_then(|k| k.strip_suffix('`'))
            .unwrap_or_else(|| panic!("a key row must start with the key in backticks: {line}"));
        for table in &tables {
            rows.push(Row {
                table: table.clone(),
                key: key.to_owned(),
                default: cells.get(1).copied().unwrap_or("").to_owned(),
            });
        }
    }
    rows
}

fn dotted(table: &str, key: &str) -> String {
    if table.is_empty() {
        key.to_owned()
    } else {
        format!("{table}.{key}")
    }
}

#[test]
fn the_page_documents_exactly_the_keys_the_configuration_accepts() {
    let accepted: BTreeSet<String> = accepted()
        .iter()
        .flat_map(|(table, keys)| keys.iter().map(|k| dotted(table, k)))
        .collect();
    let rows = documented(PAGE);
    let documented: BTreeSet<String> = rows.iter().map(|r| dotted(&r.table, &r.key)).collect();
    // The walk itself must see the whole structure, or the comparison proves nothing.
    for key in [
        "mode",
        "ports.internal.mtu",
        "merge.imtu",
        "stats.prometheus",
        "rss.key",
    ] {
        assert!(
            accepted.contains(key),
            "the walk missed {key}: {accepted:?}"
        );
    }
    let undocumented: Vec<&String> = accepted.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/configuration.md is out of step with pxgw::config::Config:\n  \
         accepted but not documented: {undocumented:?}\n  \
         documented but not accepted: {unknown:?}"
    );
}

/// A default written as a TOML value (in backticks) must be the default: setting the key to it
/// gives the configuration that leaving it out gives.
#[test]
fn every_documented_default_is_the_codes() {
    let base = Config::parse(&toml::to_string(&minimal()).unwrap()).unwrap();
    let mut checked = 0;
    for row in documented(PAGE) {
        let Some(literal) = row
            .default
            .strip_prefix('`')
            .and_then(|d| d.strip_suffix('`'))
        else {
            continue;
        };
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {literal}"))
            .unwrap_or_else(|e| panic!("{}: default `{literal}` is not TOML: {e}", row.key))
            .remove("v")
            .unwrap();
        let path: Vec<&str> = row.table.split('.').filter(|p| !p.is_empty()).collect();
        let text = toml::to_string(&with(minimal(), &path, &row.key, value)).unwrap();
        let cfg = Config::parse(&text).unwrap_or_else(|e| {
            panic!(
                "{}: the documented default is refused: {e}",
                dotted(&row.table, &row.key)
            )
        });
        assert!(
            cfg == base,
            "{}: the documented default `{literal}` is not the code's",
            dotted(&row.table, &row.key)
        );
        checked += 1;
    }
    assert!(checked >= 50, "only {checked} defaults checked");
}

/// The `toml` examples of the README and of the page are configurations pxgw accepts.
#[test]
fn the_documented_examples_are_valid() {
    let readme = include_str!("../../../README.md");
    let mut checked = 0;
    for (name, text) in [("README.md", readme), ("docs/configuration.md", PAGE)] {
        let mut block: Option<String> = None;
        for line in text.lines() {
            let trimmed = line.trim_start();
            match &mut block {
                None if trimmed == "```toml" => block = Some(String::new()),
                Some(b) if trimmed.starts_with("```") => {
                    Config::parse(b).unwrap_or_else(|e| panic!("{name}: {e}\n{b}"));
                    checked += 1;
                    block = None;
                }
                Some(b) => {
                    b.push_str(trimmed);
                    b.push('\n');
                }
                None => {}
            }
        }
    }
    assert!(checked >= 2, "only {checked} examples found");
}
