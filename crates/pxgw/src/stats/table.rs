//! The periodic table: one row per `[stats] interval_s`, each column declared once below with
//! its header, its width and what it shows, so header and rows cannot drift apart.

use super::{PortCounters, PortSample, Report};

/// The counters at one moment: each worker's, their sum, and the ports'.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// Seconds since the start.
    pub t: f64,
    /// Each worker's report, in worker order.
    pub workers: Vec<Report>,
    /// Their sum.
    pub total: Report,
    /// Both ports' counters.
    pub ports: PortCounters,
}

impl Sample {
    /// The counters of `workers` and `ports` at `t` seconds since the start.
    pub fn new(t: f64, workers: Vec<Report>, ports: PortCounters) -> Self {
        let total = Report::sum(&workers);
        Self {
            t,
            workers,
            total,
            ports,
        }
    }
}

/// What a column shows.
#[derive(Clone, Copy)]
enum Cell {
    /// Seconds since the start.
    Time,
    /// Thousands of frames per second over the interval, all workers.
    Rate(fn(&Report) -> u64),
    /// A ratio now, in percent.
    Percent(fn(&Report) -> f64),
    /// Mean and 99th percentile of the delay merging added, µs, since the start.
    Delay,
    /// A count now.
    Now(fn(&Report) -> u64),
    /// The change of a count over the interval.
    Change(fn(&Report) -> u64),
    /// The change of both ports' counter over the interval.
    Ports(fn(&PortSample) -> u64),
    /// Each worker's share of the interval's TSC cycles spent in busy polls, in percent.
    Busy,
    /// Each worker's busy cycles per frame received over the interval.
    CyclesPerPacket,
}

/// A column: its header (which gives its width, unless the values are wider) and its cell.
struct Column {
    header: &'static str,
    width: usize,
    cell: Cell,
}

/// Digits of one worker's value in the per-worker columns.
const PER_WORKER: [(Cell, usize); 2] = [(Cell::Busy, 3), (Cell::CyclesPerPacket, 5)];

/// The table, section by section. `ext→`/`→int` are frames received outside and sent inside
/// (inbound), `int→`/`→ext` the other way; the drops and the ports' counters are changes over
/// the interval, both ports added up; the load is per worker, over the interval.
const SECTIONS: &[&[Column]] = &[
    &[Column {
        header: "t [s]",
        width: 7,
        cell: Cell::Time,
    }],
    &[
        Column {
            header: "ext→ kpps",
            width: 9,
            cell: Cell::Rate(|r| r.inbound.packets_in),
        },
        Column {
            header: "→int kpps",
            width: 9,
            cell: Cell::Rate(|r| r.inbound.packets_out),
        },
        Column {
            header: "yield %",
            width: 7,
            cell: Cell::Percent(|r| r.merge.conversion_yield),
        },
        Column {
            header: "delay µs avg/p99",
            width: 16,
            cell: Cell::Delay,
        },
        Column {
            header: "held",
            width: 5,
            cell: Cell::Now(|r| r.merge.held_items),
        },
    ],
    &[
        Column {
            header: "int→ kpps",
            width: 9,
            cell: Cell::Rate(|r| r.outbound.packets_in),
        },
        Column {
            header: "→ext kpps",
            width: 9,
            cell: Cell::Rate(|r| r.outbound.packets_out),
        },
        Column {
            header: "max B",
            width: 6,
            cell: Cell::Now(|r| r.inbound.max_frame_out.max(r.outbound.max_frame_out)),
        },
    ],
    &[
        Column {
            header: "+drops",
            width: 6,
            cell: Cell::Change(|r| r.drops.total()),
        },
        Column {
            header: "+missed",
            width: 7,
            cell: Cell::Ports(|c| c.imissed),
        },
        Column {
            header: "+nombuf",
            width: 7,
            cell: Cell::Ports(|c| c.rx_nombuf),
        },
        Column {
            header: "+oerr",
            width: 7,
            cell: Cell::Ports(|c| c.oerrors),
        },
    ],
    &[
        Column {
            header: "busy %",
            width: 6,
            cell: Cell::Busy,
        },
        Column {
            header: "cyc/pkt",
            width: 7,
            cell: Cell::CyclesPerPacket,
        },
    ],
];

/// The periodic table for a number of workers (the load columns hold one value per worker).
#[derive(Clone, Copy, Debug)]
pub struct Table {
    workers: usize,
}

impl Table {
    /// The table of `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self {
            workers: workers.max(1),
        }
    }

    /// A column's width: its header's, or its values' when wider.
    fn width(&self, c: &Column) -> usize {
        let per_worker = PER_WORKER
            .iter()
            .find(|(cell, _)| std::mem::discriminant(cell) == std::mem::discriminant(&c.cell))
            .map_or(0, |(_, digits)| self.workers * (digits + 1) - 1);
        c.width.max(per_worker)
    }

    /// Lays out one line: each section's cells right-aligned under their columns.
    fn line(&self, cell: impl Fn(&Column) -> String) -> String {
        let sections: Vec<String> = SECTIONS
            .iter()
            .map(|s| {
                s.iter()
                    .map(|c| format!("{:>w$}", cell(c), w = self.width(c)))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        format!("| {} |", sections.join(" | "))
    }

    /// The header: column names with their units.
    pub fn header(&self) -> String {
        self.line(|c| c.header.to_owned())
    }

    /// The row of the interval from `prev` to `now`.
    pub fn row(&self, now: &Sample, prev: &Sample) -> String {
        let dt = (now.t - prev.t).max(1e-9);
        let (n, p) = (&now.total, &prev.total);
        let zero = Report::default();
        let per_worker = |f: &dyn Fn(&Report, &Report) -> String| -> String {
            (0..self.workers)
                .map(|i| {
                    let w = now.workers.get(i).unwrap_or(&zero);
                    f(w, prev.workers.get(i).unwrap_or(&zero))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        self.line(|c| match c.cell {
            Cell::Time => format!("{:.1}", now.t),
            Cell::Rate(get) => format!("{:.1}", get(n).saturating_sub(get(p)) as f64 / dt / 1e3),
            Cell::Percent(get) => format!("{:.1}", 100.0 * get(n)),
            Cell::Delay => format!("{:.0}/{:.0}", n.merge.mean_delay_us, n.merge.p99_delay_us),
            Cell::Now(get) => get(n).to_string(),
            Cell::Change(get) => get(n).saturating_sub(get(p)).to_string(),
            Cell::Ports(get) => now
                .ports
                .by_port()
                .iter()
                .zip(prev.ports.by_port())
                .map(|((_, a), (_, b))| get(a).saturating_sub(get(b)))
                .sum::<u64>()
                .to_string(),
            Cell::Busy => per_worker(&|w, pw| {
                let (busy, idle) = interval_cycles(w, pw);
                match busy + idle {
                    0 => format!("{:>3}", "-"),
                    all => format!("{:>3.0}", 100.0 * busy as f64 / all as f64),
                }
            }),
            Cell::CyclesPerPacket => per_worker(&|w, pw| {
                let (busy, _) = interval_cycles(w, pw);
                match w.packets_received().saturating_sub(pw.packets_received()) {
                    0 => format!("{:>5}", "-"),
                    pkts => format!("{:>5}", compact(busy as f64 / pkts as f64)),
                }
            }),
        })
    }
}

/// A worker's busy and idle TSC cycles between two of its reports.
fn interval_cycles(now: &Report, prev: &Report) -> (u64, u64) {
    (
        now.load.busy_cycles.saturating_sub(prev.load.busy_cycles),
        now.load.idle_cycles.saturating_sub(prev.load.idle_cycles),
    )
}

/// A non-negative number in at most five characters.
fn compact(v: f64) -> String {
    if v < 99_999.5 {
        format!("{v:.0}")
    } else {
        format!("{v:.0e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars(s: &str) -> Vec<usize> {
        s.chars()
            .enumerate()
            .filter(|(_, c)| *c == '|')
            .map(|(i, _)| i)
            .collect()
    }

    /// The row lines up under its header (same width, column bars at the same places) for one
    /// worker and for several; rates are per second over the interval, the load per worker
    /// over the interval.
    #[test]
    fn row_aligns_with_header_and_shows_the_interval() {
        for workers in [1, 2, 5] {
            let mut now = vec![Report::default(); workers];
            now[0].inbound.packets_in = 2_000_000;
            now[0].inbound.packets_out = 400_000;
            now[0].inbound.max_frame_out = 9014;
            now[0].merge.payload_in = 1000;
            now[0].merge.payload_full = 959;
            now[0].drops.oversize = 3;
            // Worker 0: 250 M busy and 750 M idle cycles since the last row, 1.25 M frames.
            now[0].load.busy_cycles = 300_000_000;
            now[0].load.idle_cycles = 800_000_000;
            let mut prev = vec![Report::default(); workers];
            prev[0].inbound.packets_in = 750_000;
            prev[0].load.busy_cycles = 50_000_000;
            prev[0].load.idle_cycles = 50_000_000;
            let mut ports = PortCounters::default();
            ports.external.counters.imissed = 7;
            let now = Sample::new(14.5, now, ports);
            let prev = Sample::new(12.5, prev, PortCounters::default());
            let table = Table::new(workers);
            let (header, row) = (table.header(), table.row(&now, &prev));
            assert_eq!(bars(&row), bars(&header), "\n{header}\n{row}");
            assert_eq!(row.chars().count(), header.chars().count());
            let cells: Vec<&str> = row.split_whitespace().collect();
            // t, then 625 kpps in, 200 kpps out, yield, delay, held...
            assert_eq!(
                &cells[1..9],
                ["14.5", "|", "625.0", "200.0", "95.9", "0/0", "0", "|"]
            );
            // ... max frame, then the interval's drops and missed frames...
            assert_eq!(&cells[11..17], ["9014", "|", "3", "7", "0", "0"]);
            // ... and each worker's load: 25 % busy, 200 cycles per frame; idle workers "-".
            let load = &cells[18..cells.len() - 1];
            assert_eq!(load[0], "25");
            assert!(load[1..workers].iter().all(|c| *c == "-"), "{load:?}");
            assert_eq!(load[workers], "200");
            assert!(load[workers + 1..].iter().all(|c| *c == "-"), "{load:?}");
        }
    }

    /// The header names every column.
    #[test]
    fn header_names_the_columns() {
        let h = Table::new(1).header();
        assert!(h.starts_with("|   t [s] | ext→ kpps →int kpps yield % delay µs avg/p99  held |"));
        assert!(h.ends_with("| busy % cyc/pkt |"), "{h}");
    }
}
