//! docs/operations.md lists every counter pxgw keeps, and nothing else, as the code declares it:
//! its `--stats-json` path, its Prometheus sample, its `/pxgw/stats` name, its kind and its doc
//! comment. The list is read from the declarations themselves (`pxgw::stats`), not kept by hand:
//! a counter added, renamed or reworded without the page following fails here, which prints
//! the table the page should hold.

use pxgw::stats::counters::{Desc, Group, Kind, Member};
use pxgw::stats::{PortCounters, PortSample, Report};

/// The page, as it is in the repository.
const PAGE: &str = include_str!("../../../docs/operations.md");

const BEGIN: &str = "<!-- counters: begin -->";
const END: &str = "<!-- counters: end -->";

/// A counter's Prometheus sample as the page shows it: the family with its suffix and the
/// labels besides `worker` (`port` for the ports' counters, whichever port).
fn prometheus(m: &Member, d: &Desc, port: bool) -> String {
    let Some(p) = &d.prom else {
        return "–".into();
    };
    let suffix = match d.kind {
        Kind::Counter => "_total",
        _ => "",
    };
    let labels: Vec<String> = if port {
        vec!["port".to_owned()]
    } else {
        m.labels(d)
            .into_iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect()
    };
    let labels = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", labels.join(","))
    };
    format!("`{}{suffix}{labels}`", p.name)
}

fn row(path: &str, m: &Member, d: &Desc, port: bool) -> String {
    let telemetry = m
        .telemetry(d)
        .map_or_else(|| "–".to_owned(), |t| format!("`{t}`"));
    format!(
        "| `{path}` | {} | {telemetry} | {} | {} |",
        prometheus(m, d, port),
        d.kind.word(),
        d.help()
    )
}

/// The table the page should hold, between its markers.
fn expected() -> String {
    let mut lines = vec![
        "| `--stats-json` | Prometheus | `/pxgw/stats` | kind | what it counts |".to_owned(),
        "|---|---|---|---|---|".to_owned(),
    ];
    for (m, d) in Report::declared() {
        lines.push(row(&m.path(d), m, d, false));
    }
    for d in PortSample::FIELDS {
        let m = &PortCounters::MEMBERS[0];
        lines.push(row(&format!("ports.*.{}", d.field), m, d, true));
    }
    lines.join("\n")
}

/// The table on the page, between its markers.
fn documented() -> String {
    let start = PAGE.find(BEGIN).expect("the page marks the counter table") + BEGIN.len();
    let end = PAGE[start..]
        .find(END)
        .expect("the counter table's end is marked")
        + start;
    PAGE[start..end].trim().to_owned()
}

#[test]
fn the_page_lists_every_counter_as_declared() {
    let (want, got) = (expected(), documented());
    if want != got {
        let got_lines: Vec<&str> = got.lines().collect();
        let first = want
            .lines()
            .zip(got_lines.iter().copied().chain(std::iter::repeat("")))
            .position(|(a, b)| a != b);
        panic!(
            "docs/operations.md's counter table differs from the declarations in \
             crates/pxgw/src/stats.rs (first at table line {first:?}); it should read:\n\n{want}\n"
        );
    }
}

/// Every table cell is one line of plain text: no `|` in a doc comment breaks the table.
#[test]
fn doc_comments_fit_a_table() {
    for (m, d) in Report::declared() {
        assert!(!d.help().contains('|'), "{}", m.path(d));
    }
}
