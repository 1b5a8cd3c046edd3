//! scamper's PMTUD (Luckie et al., "Inferring and Debugging Path MTU Discovery Failures", IMC'05;
//! the tool SIGCOMM'26 §7.4 compares F-PMTUD with). `trace -M` first runs a traceroute to B,
//! then probes with DF set from the interface MTU down: it follows PTBs when they come, and
//! when a probe is lost without one it searches for the largest size that gets through (a
//! black hole), then looks for the hop that should have sent the PTB.
//!
//! The lab runs `scamper -p 1000 -O warts -o FILE -c "trace -M -w WAIT" -i B` in A, so neither
//! its default 20 packets/s pacing nor its 5 s per-probe wait dominates, and reads the result
//! with `sc_wartsdump`, the only one of Debian's warts tools (scamper 20211212) that prints the
//! PMTUD section: the PMTU, the notes, and each answered PMTUD probe with its send time.

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::background::{Child, Scratch};
use super::topology::{Topology, B_ADDR};
use super::{LabConfig, LabError, Outcome};

/// Bound on one scamper run. With the black hole and a 1 s wait it takes about 18 s.
const SCAMPER_LIMIT: Duration = Duration::from_secs(120);
/// Bound on `sc_wartsdump`.
const DUMP_LIMIT: Duration = Duration::from_secs(10);
/// An RTT beyond this is one of scamper's unsynchronised datalink timestamps, not a delay.
const SANE_RTT_S: f64 = 10.0;

/// One answered probe as `sc_wartsdump` prints it (`hop N ADDR` then `attempt: 1, tx: ..`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScamperProbe {
    /// Who answered.
    pub addr: String,
    /// Send time, seconds after the trace started.
    pub tx_s: f64,
    /// Round-trip time, seconds.
    pub rtt_s: f64,
    /// The probe's IP size.
    pub size: u16,
}

impl ScamperProbe {
    /// When the answer came, seconds after the trace started (the send time alone if the RTT
    /// is not believable).
    fn answered_s(&self) -> f64 {
        if self.rtt_s < SANE_RTT_S {
            self.tx_s + self.rtt_s
        } else {
            self.tx_s
        }
    }
}

/// What the lab reads from `sc_wartsdump` for one `trace -M`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScamperDump {
    /// Every probe the trace sent, traceroute and PMTUD (`probec`).
    pub probe_count: Option<u32>,
    /// The traceroute's answered probes.
    pub trace: Vec<ScamperProbe>,
    /// The MTU of the interface toward B.
    pub ifmtu: Option<u16>,
    /// The PMTU found (`None` if there is no PMTUD section, or it says 0).
    pub pmtu: Option<u16>,
    /// The PMTUD notes: each PTB followed (`nhmtu 4000, ptb 198.18.1.2`) or a black hole
    /// inferred (`nhmtu 1400, silence > ttl 1`).
    pub notes: Vec<String>,
    /// The PMTUD phase's answered probes.
    pub pmtud: Vec<ScamperProbe>,
}

impl ScamperDump {
    /// How long PMTUD took: from the end of the traceroute to the last answer of the PMTUD
    /// phase; `None` without PMTUD answers.
    pub fn pmtud_elapsed(&self) -> Option<Duration> {
        let start = self
            .trace
            .iter()
            .map(ScamperProbe::answered_s)
            .fold(0.0, f64::max);
        let end = self
            .pmtud
            .iter()
            .map(ScamperProbe::answered_s)
            .reduce(f64::max)?;
        Some(Duration::from_secs_f64((end - start).max(0.0)))
    }
}

/// The number after `key` in `line` (`"probec: 6"`, `"pmtu 1400,"`), if any.
fn number_after<T: std::str::FromStr>(line: &str, key: &str) -> Option<T> {
    let rest = line.split(key).nth(1)?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    digits.parse().ok()
}

/// Parses `sc_wartsdump` output for one traceroute with PMTUD.
pub fn parse_dump(text: &str) -> Result<ScamperDump, LabError> {
    let mut dump = ScamperDump::default();
    let mut in_pmtud = false;
    let mut addr = String::new();
    let mut saw_trace = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("traceroute from") {
            saw_trace = true;
        } else if line.contains("probec:") {
            dump.probe_count = number_after(line, "probec:");
        } else if let Some(rest) = line.strip_prefix("pmtud:") {
            in_pmtud = true;
            dump.ifmtu = number_after(rest, "ifmtu");
            dump.pmtu = number_after(rest, " pmtu").filter(|&m: &u16| m > 0);
        } else if line.starts_with("note ") {
            if let Some((_, note)) = line.split_once(": ") {
                dump.notes.push(note.to_owned());
            }
        } else if line.starts_with("hop ") {
            addr = line
                .split_whitespace()
                .last()
                .unwrap_or_default()
                .to_owned();
        } else if line.starts_with("attempt:") {
            let parse = || -> Option<ScamperProbe> {
                Some(ScamperProbe {
                    addr: addr.clone(),
                    tx_s: number_after(line, "tx:")?,
                    rtt_s: number_after(line, "rtt:")?,
                    size: number_after(line, "probe-size:")?,
                })
            };
            let probe = parse().ok_or_else(|| LabError::Parse {
                what: "an sc_wartsdump probe line".into(),
                text: line.to_owned(),
            })?;
            if in_pmtud {
                dump.pmtud.push(probe);
            } else {
                dump.trace.push(probe);
            }
        }
    }
    if !saw_trace {
        return Err(LabError::Parse {
            what: "sc_wartsdump: no traceroute in the output".into(),
            text: text.chars().take(200).collect(),
        });
    }
    Ok(dump)
}

/// The `scamper` row.
pub(crate) fn measure(
    topo: &Topology,
    cfg: &LabConfig,
    scratch: &Scratch,
    stop: &AtomicBool,
) -> Result<Outcome, LabError> {
    let name = if topo.blackhole() {
        "scamper-blackhole"
    } else {
        "scamper-icmp"
    };
    let warts = scratch.file(&format!("{name}.warts"));
    let trace = format!("trace -M -w {}", cfg.scamper_wait_s);
    let b = B_ADDR.to_string();
    let args = [
        "-p".as_ref(),
        "1000".as_ref(),
        "-O".as_ref(),
        "warts".as_ref(),
        "-o".as_ref(),
        warts.as_os_str(),
        "-c".as_ref(),
        trace.as_ref(),
        "-i".as_ref(),
        b.as_ref(),
    ];
    let run = Child::spawn_in(&topo.a, scratch, name, "scamper", &args)?
        .wait_within(SCAMPER_LIMIT, stop)?;
    let dump_text = Child::spawn_in(
        &topo.a,
        scratch,
        &format!("{name}-dump"),
        "sc_wartsdump",
        &[warts.as_os_str()],
    )?
    .wait_within(DUMP_LIMIT, stop)?
    .stdout;
    let dump = parse_dump(&dump_text)?;
    let trace_probes = u32::try_from(dump.trace.len()).unwrap_or(u32::MAX);
    let note = if dump.notes.is_empty() {
        "no PMTUD notes".to_owned()
    } else {
        dump.notes.join("; ")
    };
    Ok(Outcome {
        pmtu: dump.pmtu,
        reported_probes: pmtud_probes(&dump, trace_probes),
        round_trips: u32::try_from(dump.pmtud.len()).unwrap_or(u32::MAX),
        elapsed: dump.pmtud_elapsed().unwrap_or(run.wall),
        wall: run.wall,
        fallback: false,
        note,
    })
}

/// PMTUD probes scamper says it sent: all of them (`probec`) minus the traceroute's, which
/// were all answered in this lab (one per hop).
fn pmtud_probes(dump: &ScamperDump, trace_probes: u32) -> u32 {
    dump.probe_count
        .map_or(0, |all| all.saturating_sub(trace_probes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scamper -p 1000 -c "trace -M -w 1"` through the lab with ICMP allowed.
    const WITH_ICMP: &str = "\
traceroute from 198.18.1.1 to 198.18.3.2
 start: Sat Nov 21 22:24:10 2026 810627
 attempts: 2, hoplimit: 0, loops: 1, probec: 6
 flags: 0x02 ( pmtud )
hop  1  198.18.1.2
 attempt: 1, tx: 0.011642s, rtt: 4294.967269s, probe-size: 44
 icmp-type: 11, icmp-code: 0, q-ttl: 1, q-len: 44, q-tos 0
hop  2  198.18.2.2
 attempt: 1, tx: 0.011645s, rtt: 0.000011s, probe-size: 44
hop  3  198.18.3.2
 attempt: 1, tx: 0.011665s, rtt: 0.000010s, probe-size: 44
pmtud: ver 2 ifmtu 9000, pmtu 1400, notec 2
 note 0: nhmtu 4000, ptb 198.18.1.2
 note 1: nhmtu 1400, ptb 198.18.2.2
hop 255  198.18.1.2
 attempt: 1, tx: 0.011710s, rtt: 0.000010s, probe-size: 9000
 icmp-type: 3, icmp-code: 4, q-ttl: 255, q-len: 9000, q-tos 0, nhmtu: 4000
hop 255  198.18.2.2
 attempt: 1, tx: 0.011735s, rtt: 0.000007s, probe-size: 4000
hop 255  198.18.3.2
 attempt: 1, tx: 0.011751s, rtt: 0.000011s, probe-size: 1400
";

    /// The same with every PTB dropped: scamper's black-hole search.
    const BLACK_HOLE: &str = "\
traceroute from 198.18.1.1 to 198.18.3.2
 attempts: 2, hoplimit: 0, loops: 1, probec: 28
hop  1  198.18.1.2
 attempt: 1, tx: 0.013242s, rtt: 0.000022s, probe-size: 44
hop  2  198.18.2.2
 attempt: 1, tx: 0.013292s, rtt: 0.000014s, probe-size: 44
hop  3  198.18.3.2
 attempt: 1, tx: 0.013317s, rtt: 0.000015s, probe-size: 44
pmtud: ver 2 ifmtu 9000, pmtu 1400, notec 1
 note 0: nhmtu 1400, silence > ttl 1
hop 255  198.18.3.2
 attempt: 1, tx: 10.020816s, rtt: 0.000076s, probe-size: 1280
hop 255  198.18.3.2
 attempt: 1, tx: 16.027423s, rtt: 0.000082s, probe-size: 1400
hop  1  198.18.1.2
 attempt: 1, tx: 16.028663s, rtt: 0.000044s, probe-size: 9000
";

    #[test]
    fn reads_pmtud_that_followed_ptbs() {
        let d = parse_dump(WITH_ICMP).unwrap();
        assert_eq!(d.probe_count, Some(6));
        assert_eq!((d.ifmtu, d.pmtu), (Some(9000), Some(1400)));
        assert_eq!(
            d.notes,
            ["nhmtu 4000, ptb 198.18.1.2", "nhmtu 1400, ptb 198.18.2.2"]
        );
        assert_eq!(d.trace.len(), 3);
        let sizes: Vec<u16> = d.pmtud.iter().map(|p| p.size).collect();
        assert_eq!(sizes, [9000, 4000, 1400]);
        assert_eq!(d.pmtud[1].addr, "198.18.2.2");
        // From the destination's traceroute answer (0.011675 s) to the last PMTUD answer
        // (0.011762 s); hop 1's absurd RTT is not believed.
        let us = d.pmtud_elapsed().unwrap().as_secs_f64() * 1e6;
        assert!((us - 87.0).abs() < 1.0, "{us}");
    }

    #[test]
    fn reads_a_black_hole_search() {
        let d = parse_dump(BLACK_HOLE).unwrap();
        assert_eq!(d.probe_count, Some(28));
        assert_eq!(d.pmtu, Some(1400));
        assert_eq!(d.notes, ["nhmtu 1400, silence > ttl 1"]);
        assert_eq!(d.pmtud.len(), 3);
        assert_eq!(pmtud_probes(&d, 3), 25);
        let s = d.pmtud_elapsed().unwrap().as_secs_f64();
        assert!((s - 16.0154).abs() < 1e-3, "{s}");
    }

    #[test]
    fn no_pmtud_section_means_no_pmtu() {
        let d = parse_dump("traceroute from 198.18.1.1 to 198.18.3.2\n probec: 3\n").unwrap();
        assert_eq!((d.pmtu, d.pmtud_elapsed()), (None, None));
        assert!(parse_dump("scamper: could not open").is_err());
        assert!(parse_dump("traceroute from a to b\n attempt: 1, tx: x").is_err());
    }
}
