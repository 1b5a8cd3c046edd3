//! pxgw with the kernel's offloads left on, as on an operator's machine: the labs otherwise turn
//! GRO, TSO, GSO and checksum offloads off on every veth.
//!
//! **First pass: everything on.** GRO, TSO, GSO and checksum offloads on every veth end (the
//! hosts' and pxgw's) and on the TAP. The inside port is `net_af_packet`, whose ring frames cut
//! what GRO coalesces (docs/dpdk-notes.md): pxgw must refuse to start with one line naming the
//! interface and the `ethtool` command that fixes it, `pxgw --check` must say the same, and the
//! outside port (`net_tap`, to which the kernel hands segments whatever is on) must not be
//! refused.
//!
//! **Second pass: the fix, as printed.** The lab runs the command from the refusal line word for
//! word; everything else stays on. The inside host's veth stands for its NIC and wire: a veth
//! carries a TSO packet across whole, where a NIC segments it and puts MTU-sized frames with
//! their checksums on the wire, so its TSO and TX checksum offload are off (its stack still
//! builds 64 KB GSO packets, segmented where they leave it, as with a NIC's TSO). The outside
//! host keeps TSO on: its 64 KB packets cross the bridge whole and the kernel segments them on
//! the way into pxgw's TAP. Then sha256-checked transfers both ways, IPv4 and IPv6, and every
//! frame accounted ([`accounting::ledger`], counting the outside port's frames at the TAP).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use netlab::Netns;
use serde_json::json;

use crate::accounting::{self, run_to_end, Check, Outcome};
use crate::{Family, Lab};

/// Longest a transfer may take before it counts as stalled.
const TRANSFER_LIMIT: Duration = Duration::from_secs(120);

/// `ethtool -K` on `iface` (in `ns`, or the root namespace); features a driver fixes make
/// ethtool fail after it has set the others, so its status is not an error.
fn ethtool(ns: Option<&Netns>, iface: &str, settings: &[&str]) {
    let mut args = vec!["-K", iface];
    args.extend_from_slice(settings);
    let _ = match ns {
        Some(ns) => ns.exec("ethtool", &args),
        None => netlab::run("ethtool", &args),
    };
}

/// `ethtool -k` of `iface`, the lines that matter here, for the report.
fn offloads(ns: Option<&Netns>, iface: &str) -> String {
    let text = match ns {
        Some(ns) => ns.exec("ethtool", &["-k", iface]),
        None => netlab::run("ethtool", &["-k", iface]),
    }
    .unwrap_or_default();
    let keep = [
        "tx-checksumming:",
        "tcp-segmentation-offload:",
        "generic-segmentation-offload:",
        "generic-receive-offload:",
        "large-receive-offload:",
    ];
    let parts: Vec<String> = text
        .lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(k)))
        .map(|l| l.replace("-offload", "").replace(" [fixed]", ""))
        .collect();
    format!("{iface}: {}", parts.join(", "))
}

const ALL_ON: [&str; 10] = [
    "gro", "on", "tso", "on", "gso", "on", "tx", "on", "rx", "on",
];

/// The command between backticks at the end of a refusal line.
fn fix_of(line: &str) -> Option<Vec<String>> {
    let (_, rest) = line.rsplit_once("turn it off: `")?;
    let cmd = rest.strip_suffix('`')?;
    Some(cmd.split_whitespace().map(str::to_owned).collect())
}

/// Both passes (module docs), with `bytes` per transfer.
pub fn run(pxgw: &Path, bytes: usize, stop: &AtomicBool) -> Result<Outcome> {
    let l = Lab::new()?;
    let mut out = Outcome::default();
    let gw_int = l.gw_int_iface().to_owned();
    let gw_ext = l.gw_ext_iface().to_owned();
    // Everything on, everywhere: the hosts' veths, pxgw's, the TAP.
    let (ext_ns, ext_if) = l.gw_ext_peer();
    ethtool(Some(ext_ns), ext_if, &ALL_ON);
    ethtool(Some(&l.int), l.int_iface(), &ALL_ON);
    for iface in [gw_ext.as_str(), gw_int.as_str()]
        .into_iter()
        .chain(l.gw_ext_tap())
    {
        ethtool(None, iface, &ALL_ON);
    }
    let before: Vec<String> = [
        offloads(Some(ext_ns), ext_if),
        offloads(None, &gw_ext),
        offloads(None, &gw_int),
        offloads(Some(&l.int), l.int_iface()),
    ]
    .into();
    out.lines.push("offloads left on:".to_owned());
    out.lines.extend(before.iter().map(|s| format!("  {s}")));

    let config = l.dir.join("pxgw-offloads.toml");
    std::fs::write(&config, l.pxgw_config(1))?;
    let (check_code, check_lines) = run_to_end(pxgw, &config, &["--check"])?;
    let (start_code, start_lines) = run_to_end(pxgw, &config, &["--run-for", "20"])?;
    out.lines.push(format!(
        "pxgw --check: exit {check_code}: {}",
        check_lines.join(" / ")
    ));
    out.lines.push(format!(
        "pxgw: exit {start_code}: {}",
        start_lines.join(" / ")
    ));
    let expected_fix = format!("`ethtool -K {gw_int} gro off lro off`");
    let refused = |code: i32, lines: &[String]| {
        code == 1
            && lines.len() == 1
            && lines[0].starts_with(&format!(
                "pxgw: ports.internal: interface {gw_int} has GRO on"
            ))
            && lines[0].ends_with(&expected_fix)
    };
    out.checks.extend([
        (
            format!("offloads on: pxgw refuses to start with one line naming {gw_int} and {expected_fix} (exit {start_code}, {} lines)", start_lines.len()),
            refused(start_code, &start_lines),
        ),
        (
            format!("offloads on: pxgw --check reports the same line (exit {check_code}, {} lines)", check_lines.len()),
            refused(check_code, &check_lines) && check_lines == start_lines,
        ),
        (
            "offloads on: the outside port (net_tap, whose TAP gets segments) is not refused".to_owned(),
            !start_lines.iter().any(|s| s.contains("ports.external")),
        ),
    ]);
    let Some(fix) = start_lines.first().and_then(|s| fix_of(s)) else {
        out.report = json!({ "lines": out.lines });
        return Ok(out);
    };

    // The fix, word for word; the inside host's veth stands for its NIC and wire.
    let args: Vec<&str> = fix.iter().map(String::as_str).collect();
    let Some((program, rest)) = args.split_first() else {
        bail!("an empty fix in pxgw's refusal");
    };
    netlab::run(program, rest).with_context(|| format!("running the fix `{}`", fix.join(" ")))?;
    ethtool(Some(&l.int), l.int_iface(), &["tso", "off", "tx", "off"]);
    out.lines.push(format!(
        "after `{}`, and the inside host's veth as its NIC and wire (TSO and TX checksums off, GSO on):",
        fix.join(" ")
    ));
    out.lines.extend(
        [
            offloads(None, &gw_int),
            offloads(Some(&l.int), l.int_iface()),
        ]
        .map(|s| format!("  {s}")),
    );
    let (code, lines) = run_to_end(pxgw, &config, &["--check"])?;
    out.lines
        .push(format!("pxgw --check after the fix: exit {code}:"));
    out.lines.extend(lines.iter().map(|s| format!("  {s}")));
    let warning = format!("pxgw: warning: ports.internal: interface {gw_int} is a veth");
    out.checks.push((
        format!("offloads on, fix applied: pxgw --check passes (exit {code}) and warns that {gw_int} is a veth whose peer it cannot see"),
        code == 0 && lines.iter().any(|s| s.starts_with(&warning)),
    ));
    let mut transfers: Vec<(Family, bool, bool, f64)> = Vec::new();
    let (run, traffic) = accounting::counted(&l, pxgw, &l.pxgw_config(1), || -> Result<()> {
        for f in Family::BOTH {
            for inbound in [true, false] {
                if stop.load(Ordering::SeqCst) {
                    bail!("interrupted");
                }
                eprintln!(
                    "lab: offloads on: {f}: {} MB {}, checked by sha256",
                    bytes >> 20,
                    if inbound {
                        "outside -> inside"
                    } else {
                        "inside -> outside"
                    }
                );
                let (ok, secs) = l.file_transfer_within(f, inbound, bytes, Some(TRANSFER_LIMIT))?;
                transfers.push((f, inbound, ok, secs));
            }
        }
        Ok(())
    })?;
    traffic?;
    for (f, inbound, ok, secs) in &transfers {
        let dir = if *inbound {
            "outside -> inside"
        } else {
            "inside -> outside"
        };
        out.checks.push((
            format!(
                "offloads on, fix applied: {f}: {} MB {dir} intact (sha256) in {secs:.1} s",
                bytes >> 20
            ),
            *ok,
        ));
    }
    out.checks.push((
        format!(
            "offloads on, fix applied: 4 transfers ran ({})",
            transfers.len()
        ),
        transfers.len() == 4,
    ));
    let ledger = accounting::ledger(&run, true);
    out.lines.extend(ledger.lines);
    out.checks.extend(
        ledger
            .checks
            .into_iter()
            .map(|(name, ok): Check| (format!("offloads on, fix applied: {name}"), ok)),
    );
    let log = std::fs::read_to_string(l.dir.join("pxgw-accounting.log")).unwrap_or_default();
    let warned = log.contains(&format!("interface {gw_int} is a veth"));
    out.checks.extend([
        (
            format!("offloads on, fix applied: pxgw warns that {gw_int} is a veth whose peer it cannot see"),
            warned,
        ),
        ("offloads on, fix applied: pxgw exits cleanly".to_owned(), run.code == 0),
    ]);
    out.report = json!({
        "lines": out.lines,
        "transfers": transfers.iter().map(|(f, i, ok, s)| json!({"family": f, "inbound": i, "sha256_ok": ok, "seconds": s})).collect::<Vec<_>>(),
        "kernel": run.kernel,
        "pxgw": run.stats,
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fix_is_read_from_between_the_backticks() {
        let line =
            "pxgw: ports.internal: interface pxi0 has GRO on: ... would stall; turn it off: \
                    `ethtool -K pxi0 gro off lro off`";
        assert_eq!(
            fix_of(line).unwrap(),
            ["ethtool", "-K", "pxi0", "gro", "off", "lro", "off"]
        );
        assert_eq!(fix_of("pxgw: ports.internal: something else"), None);
    }
}
