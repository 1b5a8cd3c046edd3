//! What the lab found: one row per method and ICMP setting, the negative runs, the checks that
//! `fpmtud-lab test` asserts (SIGCOMM'26 §5.2: one round trip, no ICMP, nonce-authenticated
//! reports, fallback), the table and the JSON.

use std::fmt::Write as _;
use std::ops::RangeInclusive;

use serde_json::{json, Value};

use super::topology::{B_ADDR, LINK_MTUS};
use super::LabError;

/// The path's bottleneck: the R2–B link.
pub const BOTTLENECK_MTU: u16 = 1400;
/// A's first hop, the probe size and the prober's eMTU fallback.
pub const FIRST_HOP_MTU: u16 = 9000;
/// A correct PMTU: at most the bottleneck and at least the bottleneck rounded down to the
/// 8-byte fragment grid (`docs/fpmtud.md`, "8-byte rounding"): 20 + ⌊1380 / 8⌋ × 8 = 1396.
pub const CORRECT_RANGE: RangeInclusive<u16> = BOTTLENECK_MTU - 7..=BOTTLENECK_MTU;

/// A PMTUD method the lab compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// F-PMTUD: `fpmtud probe` against `fpmtud serve` (SIGCOMM'26 §5.2).
    Fpmtud,
    /// scamper's `trace -M` PMTUD, with its black-hole search.
    Scamper,
    /// The kernel's ICMP-based PMTUD under a DF=1 UDP sender (RFC 1191).
    Kernel,
}

impl Method {
    /// Every method, in the order the lab runs them.
    pub const ALL: [Method; 3] = [Method::Fpmtud, Method::Scamper, Method::Kernel];

    /// Its name in the table and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Method::Fpmtud => "fpmtud",
            Method::Scamper => "scamper",
            Method::Kernel => "kernel",
        }
    }
}

/// One method with ICMP allowed or black-holed.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodResult {
    /// The method.
    pub method: Method,
    /// Whether the routers dropped every PTB.
    pub icmp_blackhole: bool,
    /// The PMTU it settled on.
    pub pmtu: Option<u16>,
    /// Whether that PMTU is in [`CORRECT_RANGE`].
    pub correct: bool,
    /// Probes on the wire: UDP packets longer than 64 B from A to B, counted on R1.
    pub probes: u64,
    /// Probes the method says it sent (fpmtud's JSON, scamper's `probec` minus its traceroute,
    /// the kernel sender's count).
    pub reported_probes: u32,
    /// Small UDP packets from A to B on the wire: scamper's traceroute probes.
    pub small_probes: u64,
    /// Probes that drew an answer: a report (fpmtud's `round_trips`), a PTB, an echo, a port
    /// unreachable.
    pub round_trips: u32,
    /// The method's own discovery time: fpmtud's first probe to its report; scamper's PMTUD
    /// phase after the traceroute, from its timestamps; the kernel sender's first datagram to
    /// the echo, or its time limit.
    pub elapsed_ms: f64,
    /// The whole command (process start to exit) or call.
    pub wall_ms: f64,
    /// PTBs the routers sent.
    pub ptb_sent: u64,
    /// PTBs the black hole dropped.
    pub ptb_dropped: u64,
    /// Whether A's kernel had no learned PMTU toward B when the method started.
    pub cold_start: bool,
    /// Whether fpmtud reported a fallback instead of a measurement.
    pub fallback: bool,
    /// One line of detail.
    pub note: String,
}

impl MethodResult {
    fn to_json(&self) -> Value {
        json!({
            "method": self.method.name(),
            "icmp_blackhole": self.icmp_blackhole,
            "pmtu": self.pmtu,
            "correct": self.correct,
            "probes": self.probes,
            "elapsed_ms": self.elapsed_ms,
            "round_trips": self.round_trips,
            "wall_ms": self.wall_ms,
            "reported_probes": self.reported_probes,
            "traceroute_probes": self.small_probes,
            "ptb_sent": self.ptb_sent,
            "ptb_dropped": self.ptb_dropped,
            "cold_start": self.cold_start,
            "fallback": self.fallback,
            "note": self.note,
        })
    }
}

/// `fpmtud probe --json`'s report (`docs/fpmtud.md`, "Command line").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FpmtudRun {
    /// The PMTU.
    pub pmtu: u16,
    /// Probes sent.
    pub probes: u32,
    /// 1 if the first probe was answered, 2 if the second, 0 on fallback.
    pub round_trips: u32,
    /// First probe to report (or to the end of the round).
    pub elapsed_ms: f64,
    /// The fragment sizes the responder reported.
    pub fragments: Vec<u16>,
    /// Whether the round fell back.
    pub fallback: bool,
    /// `probe`, `mss`, `emtu` or `conservative`.
    pub source: String,
    /// Reports ignored (bad nonce, unknown id, implausible).
    pub ignored_reports: u32,
    /// The `fpmtud probe` process, start to exit (filled in by the lab).
    pub wall_ms: f64,
}

impl FpmtudRun {
    /// Reads `fpmtud probe --json` output.
    pub fn from_json(text: &str) -> Result<Self, LabError> {
        let bad = |what: &str| LabError::Parse {
            what: format!("fpmtud probe --json: {what}"),
            text: text.chars().take(300).collect(),
        };
        let v: Value = serde_json::from_str(text).map_err(|_| bad("not JSON"))?;
        let uint = |key: &str| -> Result<u64, LabError> { v[key].as_u64().ok_or_else(|| bad(key)) };
        let small = |key: &str| -> Result<u32, LabError> {
            u32::try_from(uint(key)?).map_err(|_| bad(key))
        };
        let fragments = v["fragments"]
            .as_array()
            .ok_or_else(|| bad("fragments"))?
            .iter()
            .map(|f| f.as_u64().and_then(|f| u16::try_from(f).ok()))
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| bad("fragments"))?;
        Ok(Self {
            pmtu: u16::try_from(uint("pmtu")?).map_err(|_| bad("pmtu"))?,
            probes: small("probes")?,
            round_trips: small("round_trips")?,
            elapsed_ms: v["elapsed_ms"].as_f64().ok_or_else(|| bad("elapsed_ms"))?,
            fragments,
            fallback: v["fallback"].as_bool().ok_or_else(|| bad("fallback"))?,
            source: v["source"]
                .as_str()
                .ok_or_else(|| bad("source"))?
                .to_owned(),
            ignored_reports: small("ignored_reports")?,
            wall_ms: 0.0,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "pmtu": self.pmtu,
            "probes": self.probes,
            "round_trips": self.round_trips,
            "elapsed_ms": self.elapsed_ms,
            "wall_ms": self.wall_ms,
            "fragments": self.fragments,
            "fallback": self.fallback,
            "source": self.source,
            "ignored_reports": self.ignored_reports,
        })
    }
}

/// A run of `fpmtud probe` without `fpmtud serve` in B.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NegativeRun {
    /// What the prober reported.
    pub run: FpmtudRun,
    /// Forged reports the fake responder sent (0: nobody answered).
    pub forged_sent: u32,
}

/// One assertion of `fpmtud-lab test`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What is asserted, with the values seen.
    pub name: String,
    /// Whether it held.
    pub ok: bool,
}

impl Check {
    fn new(name: impl Into<String>, ok: bool) -> Self {
        Self {
            name: name.into(),
            ok,
        }
    }
}

/// The MSS hint the spoofed-report run passes, as pxgw would have it from a TCP handshake: the
/// fallback it leads to (1400) differs from what the forged reports claim (9000).
pub(crate) const SPOOFED_MSS_HINT: u16 = 1360;

/// Everything one lab run found.
#[derive(Debug, Clone, PartialEq)]
pub struct LabReport {
    /// Every method, ICMP allowed then black-holed.
    pub results: Vec<MethodResult>,
    /// Reports `fpmtud serve` sent over the whole run (from its exit counters).
    pub serve_reports_sent: u64,
    /// A fake responder answered every probe with a bad nonce (probe with an MSS hint).
    pub spoofed: NegativeRun,
    /// Nothing listened in B.
    pub no_responder: NegativeRun,
}

fn icmp_name(blackhole: bool) -> &'static str {
    if blackhole {
        "black hole"
    } else {
        "allowed"
    }
}

fn optional(v: Option<u16>) -> String {
    v.map_or("-".to_owned(), |v| v.to_string())
}

impl LabReport {
    /// The row of `method` with the black hole on or off.
    pub fn row(&self, method: Method, blackhole: bool) -> Option<&MethodResult> {
        self.results
            .iter()
            .find(|r| r.method == method && r.icmp_blackhole == blackhole)
    }

    /// The table `fpmtud-lab run` prints.
    pub fn table(&self) -> String {
        let [a, r, b] = LINK_MTUS;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "PMTUD lab: A —{a}— R1 —{r}— R2 —{b}— B ({B_ADDR}); correct = PMTU in {}..={} \
             (the {BOTTLENECK_MTU} B bottleneck, down to F-PMTUD's 8-byte rounding)",
            CORRECT_RANGE.start(),
            CORRECT_RANGE.end()
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<11} {:<8} {:>5} {:>8} {:>7} {:>12} {:>18} {:>11} {:>10}  note",
            "ICMP",
            "method",
            "PMTU",
            "correct",
            "probes",
            "round trips",
            "PTBs sent/dropped",
            "elapsed ms",
            "wall ms"
        );
        for r in &self.results {
            let mut note = r.note.clone();
            if r.small_probes > 0 {
                let _ = write!(note, " (+{} traceroute probes)", r.small_probes);
            }
            let _ = writeln!(
                out,
                "{:<11} {:<8} {:>5} {:>8} {:>7} {:>12} {:>18} {:>11.2} {:>10.1}  {note}",
                icmp_name(r.icmp_blackhole),
                r.method.name(),
                optional(r.pmtu),
                if r.correct { "yes" } else { "NO" },
                r.probes,
                r.round_trips,
                format!("{}/{}", r.ptb_sent, r.ptb_dropped),
                r.elapsed_ms,
                r.wall_ms,
            );
        }
        let _ = writeln!(out);
        let s = &self.spoofed;
        let _ = writeln!(
            out,
            "spoofed reports (fake responder in B, bad nonce, claiming {FIRST_HOP_MTU}): \
             {} forged, {} ignored -> pmtu {} from {} (--mss-hint {SPOOFED_MSS_HINT}), \
             {} probes, {:.1} ms",
            s.forged_sent,
            s.run.ignored_reports,
            s.run.pmtu,
            s.run.source,
            s.run.probes,
            s.run.elapsed_ms
        );
        let n = &self.no_responder.run;
        let _ = writeln!(
            out,
            "no responder in B: pmtu {} from {}{}, {} probes, {:.1} ms",
            n.pmtu,
            n.source,
            if n.fallback { " (fallback)" } else { "" },
            n.probes,
            n.elapsed_ms
        );
        let _ = writeln!(out, "fpmtud serve sent {} reports", self.serve_reports_sent);
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "probes: UDP packets over 64 B from A to B, counted by nftables on R1. round trips: \
             probes that drew an answer\n(report, PTB, echo, port unreachable). elapsed: the \
             method's own discovery time (fpmtud: first probe to report;\nscamper: PMTUD after \
             its traceroute, from its timestamps; kernel: first datagram to B's echo, or its time \
             limit).\nwall: the whole command."
        );
        out
    }

    /// What `fpmtud-lab test` asserts.
    pub fn checks(&self) -> Vec<Check> {
        let mut checks = Vec::new();
        for blackhole in [false, true] {
            let icmp = format!("ICMP {}", icmp_name(blackhole));
            match self.row(Method::Fpmtud, blackhole) {
                Some(fp) => {
                    checks.push(Check::new(
                        format!(
                            "{icmp}: fpmtud finds the bottleneck within the 8-byte rounding \
                             (pmtu {} in {}..={}, measured)",
                            optional(fp.pmtu),
                            CORRECT_RANGE.start(),
                            CORRECT_RANGE.end()
                        ),
                        fp.correct && !fp.fallback,
                    ));
                    checks.push(Check::new(
                        format!(
                            "{icmp}: fpmtud takes one probe and one round trip \
                             ({} on the wire, {} reported, round trips {})",
                            fp.probes, fp.reported_probes, fp.round_trips
                        ),
                        fp.probes == 1 && fp.reported_probes == 1 && fp.round_trips == 1,
                    ));
                }
                None => checks.push(Check::new(format!("{icmp}: fpmtud ran"), false)),
            }
            let rows: Vec<&MethodResult> = self
                .results
                .iter()
                .filter(|r| r.icmp_blackhole == blackhole)
                .collect();
            checks.push(Check::new(
                format!("{icmp}: every method started with a cold route cache in A"),
                rows.len() == Method::ALL.len() && rows.iter().all(|r| r.cold_start),
            ));
            match (self.row(Method::Kernel, blackhole), blackhole) {
                (Some(k), false) => checks.push(Check::new(
                    format!(
                        "{icmp}: the kernel's PMTUD learns {BOTTLENECK_MTU} from the routers' \
                         PTBs (pmtu {}, {} PTBs)",
                        optional(k.pmtu),
                        k.ptb_sent
                    ),
                    k.pmtu == Some(BOTTLENECK_MTU) && k.ptb_sent >= 2,
                )),
                (Some(k), true) => checks.push(Check::new(
                    format!(
                        "{icmp}: the black hole drops every PTB ({}/{}) and the kernel never \
                         learns the PMTU (pmtu {})",
                        k.ptb_sent,
                        k.ptb_dropped,
                        optional(k.pmtu)
                    ),
                    k.ptb_sent > 0 && k.ptb_dropped == k.ptb_sent && !k.correct,
                )),
                (None, _) => checks.push(Check::new(format!("{icmp}: the kernel ran"), false)),
            }
            if !blackhole {
                let found = self.row(Method::Scamper, false).and_then(|s| s.pmtu);
                checks.push(Check::new(
                    format!(
                        "{icmp}: scamper agrees on the bottleneck (pmtu {})",
                        optional(found)
                    ),
                    found == Some(BOTTLENECK_MTU),
                ));
            }
        }
        let s = &self.spoofed;
        checks.push(Check::new(
            format!(
                "a spoofed report with a bad nonce is ignored ({} forged, {} ignored, pmtu {} \
                 from {})",
                s.forged_sent, s.run.ignored_reports, s.run.pmtu, s.run.source
            ),
            s.forged_sent >= 1
                && s.run.ignored_reports == s.forged_sent
                && s.run.fallback
                && s.run.source == "mss",
        ));
        let n = &self.no_responder.run;
        checks.push(Check::new(
            format!(
                "without a responder fpmtud falls back to the route's eMTU (pmtu {} from {}, \
                 {} probes)",
                n.pmtu, n.source, n.probes
            ),
            n.fallback && n.source == "emtu" && n.pmtu == FIRST_HOP_MTU && n.probes == 2,
        ));
        let measured = self
            .results
            .iter()
            .filter(|r| r.method == Method::Fpmtud && !r.fallback)
            .count() as u64;
        checks.push(Check::new(
            format!(
                "fpmtud serve answered every measured probe ({} reports for {measured})",
                self.serve_reports_sent
            ),
            measured > 0 && self.serve_reports_sent == measured,
        ));
        checks
    }

    /// The JSON `--json FILE` writes: `results` (one object per method and ICMP setting:
    /// `method, icmp_blackhole, pmtu, correct, probes, elapsed_ms`, and more), the negative runs
    /// and the checks.
    pub fn to_json(&self, checks: &[Check]) -> Value {
        let [a, r, b] = LINK_MTUS;
        json!({
            "topology": {
                "path": format!("A —{a}— R1 —{r}— R2 —{b}— B"),
                "link_mtus": LINK_MTUS,
                "destination": B_ADDR.to_string(),
                "bottleneck_mtu": BOTTLENECK_MTU,
                "correct_range": [CORRECT_RANGE.start(), CORRECT_RANGE.end()],
            },
            "results": self.results.iter().map(MethodResult::to_json).collect::<Vec<_>>(),
            "negative": {
                "spoofed_report": {
                    "forged_sent": self.spoofed.forged_sent,
                    "mss_hint": SPOOFED_MSS_HINT,
                    "fpmtud": self.spoofed.run.to_json(),
                },
                "no_responder": { "fpmtud": self.no_responder.run.to_json() },
            },
            "fpmtud_serve_reports_sent": self.serve_reports_sent,
            "checks": checks
                .iter()
                .map(|c| json!({ "name": c.name, "ok": c.ok }))
                .collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(method: Method, blackhole: bool, pmtu: u16) -> MethodResult {
        MethodResult {
            method,
            icmp_blackhole: blackhole,
            pmtu: Some(pmtu),
            correct: CORRECT_RANGE.contains(&pmtu),
            probes: 1,
            reported_probes: 1,
            small_probes: 0,
            round_trips: 1,
            elapsed_ms: 0.4,
            wall_ms: 3.0,
            ptb_sent: 0,
            ptb_dropped: 0,
            cold_start: true,
            fallback: false,
            note: String::new(),
        }
    }

    fn fallback(source: &str, pmtu: u16, ignored: u32) -> FpmtudRun {
        FpmtudRun {
            pmtu,
            probes: 2,
            fallback: true,
            source: source.into(),
            ignored_reports: ignored,
            ..FpmtudRun::default()
        }
    }

    /// What a good run looks like.
    fn good() -> LabReport {
        let mut results = Vec::new();
        for blackhole in [false, true] {
            results.push(row(Method::Fpmtud, blackhole, 1396));
            results.push(row(Method::Scamper, blackhole, 1400));
            let mut kernel = row(
                Method::Kernel,
                blackhole,
                if blackhole { 9000 } else { 1400 },
            );
            kernel.ptb_sent = if blackhole { 3 } else { 2 };
            kernel.ptb_dropped = if blackhole { 3 } else { 0 };
            results.push(kernel);
        }
        LabReport {
            results,
            serve_reports_sent: 2,
            spoofed: NegativeRun {
                run: fallback("mss", 1400, 2),
                forged_sent: 2,
            },
            no_responder: NegativeRun {
                run: fallback("emtu", 9000, 0),
                forged_sent: 0,
            },
        }
    }

    fn failed(report: &LabReport) -> Vec<String> {
        report
            .checks()
            .into_iter()
            .filter(|c| !c.ok)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_good_run_passes_every_check() {
        assert_eq!(failed(&good()), Vec::<String>::new());
    }

    #[test]
    fn each_failure_is_caught() {
        let mut r = good();
        r.results[3].pmtu = Some(1392);
        r.results[3].correct = false;
        assert_eq!(failed(&r).len(), 1, "{:?}", failed(&r));
        let mut r = good();
        r.results[0].probes = 2;
        assert!(failed(&r)[0].contains("one probe"));
        let mut r = good();
        r.spoofed.run = FpmtudRun {
            pmtu: 9000,
            source: "probe".into(),
            probes: 1,
            ..FpmtudRun::default()
        };
        assert!(failed(&r)[0].contains("spoofed"));
        let mut r = good();
        r.results[5].ptb_dropped = 1;
        assert!(failed(&r)[0].contains("black hole drops every PTB"));
        let mut r = good();
        r.results[1].cold_start = false;
        assert!(failed(&r)[0].contains("cold route cache"));
        let mut r = good();
        r.no_responder.run.fallback = false;
        assert!(failed(&r)[0].contains("without a responder"));
        let mut r = good();
        r.results.retain(|row| row.method != Method::Fpmtud);
        assert!(failed(&r).iter().any(|c| c.contains("fpmtud ran")));
    }

    #[test]
    fn table_and_json_carry_every_row() {
        let r = good();
        let table = r.table();
        assert_eq!(table.matches("fpmtud ").count(), 2 + 1, "{table}");
        assert!(
            table.contains("black hole  kernel    9000       NO"),
            "{table}"
        );
        let v = r.to_json(&r.checks());
        let rows = v["results"].as_array().unwrap();
        assert_eq!(rows.len(), 6);
        for key in [
            "method",
            "icmp_blackhole",
            "pmtu",
            "correct",
            "probes",
            "elapsed_ms",
        ] {
            assert!(rows.iter().all(|row| !row[key].is_null()), "{key}");
        }
        assert_eq!(rows[3]["icmp_blackhole"], true);
        assert_eq!(
            v["negative"]["spoofed_report"]["fpmtud"]["ignored_reports"],
            2
        );
    }

    #[test]
    fn reads_fpmtud_probe_json() {
        let text = r#"{"destination": "198.18.3.2", "elapsed_ms": 4.8, "fallback": false,
            "fragments": [1396, 1396, 1244, 1396, 1396, 1244, 1048], "fragments_seen": 7,
            "ignored_reports": 0, "pmtu": 1396, "probes": 1, "round_trips": 1,
            "source": "probe"}"#;
        let run = FpmtudRun::from_json(text).unwrap();
        assert_eq!((run.pmtu, run.probes, run.round_trips), (1396, 1, 1));
        assert_eq!(run.fragments.len(), 7);
        assert_eq!(run.source, "probe");
        assert!(FpmtudRun::from_json("{}").is_err());
        assert!(FpmtudRun::from_json("pmtu 1396").is_err());
    }
}
