//! A picture of the translation: one SVG with three panels, drawn with `plotters` from what pxgw's
//! Prometheus endpoint showed during a lab run ([`crate::observe`]):
//! - the inbound frame sizes on the outside wire (received) and the inside wire (sent);
//! - the conversion yield over time (SIGCOMM'26 §4.1): each scrape interval's merged payload
//!   that left iMTU-bound;
//! - the delay merging added per segment.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use plotters::prelude::*;
use prometheus_parse::Scrape;

use crate::observe::{histogram, sum, Timed};

/// Where Debian's fonts-dejavu-core puts the font used to measure text (`cargo xtask deps`
/// installs it); the SVG names the family, the viewer renders it.
const FONT: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The figure's data.
#[derive(Clone, Debug, Default)]
pub struct Figure {
    /// Frame-size bucket labels, e.g. `≤1518`.
    pub size_labels: Vec<String>,
    /// Share of inbound frames per bucket on the outside wire, %.
    pub outside: Vec<f64>,
    /// Share of inbound frames per bucket on the inside wire, %.
    pub inside: Vec<f64>,
    /// Frames counted (outside, inside).
    pub frames: (f64, f64),
    /// (seconds, yield %) per scrape interval with merged payload.
    pub yield_series: Vec<(f64, f64)>,
    /// Delay bucket labels, µs.
    pub delay_labels: Vec<String>,
    /// Share of segments per delay bucket, %.
    pub delay: Vec<f64>,
    /// The yield over the whole run, when anything merged.
    pub overall_yield: Option<f64>,
}

/// Per-bucket shares (%) of a cumulative histogram, and the total.
fn shares(cumulative: &[(f64, f64)]) -> (Vec<f64>, f64) {
    let total = cumulative.last().map_or(0.0, |b| b.1);
    let mut prev = 0.0;
    let v = cumulative
        .iter()
        .map(|&(_, c)| {
            let d = c - prev;
            prev = c;
            if total > 0.0 {
                100.0 * d / total
            } else {
                0.0
            }
        })
        .collect();
    (v, total)
}

/// Scrape intervals with less merged payload than this are left out of the yield series.
const MIN_INTERVAL_PAYLOAD: f64 = 100_000.0;

fn bound_labels(cumulative: &[(f64, f64)], scale: f64, unit: &str) -> Vec<String> {
    cumulative
        .iter()
        .map(|&(le, _)| {
            if le.is_infinite() {
                "more".to_owned()
            } else {
                format!("≤{}{unit}", le * scale)
            }
        })
        .collect()
}

impl Figure {
    /// The figure from scrapes during traffic and the final one (`last`; else the last of
    /// `during`).
    pub fn from_scrapes(during: &[Timed], last: Option<&Scrape>) -> Self {
        let Some(last) = last.or(during.last().map(|t| &t.scrape)) else {
            return Self::default();
        };
        let labels = |side: &str| {
            histogram(
                last,
                "pxgw_frame_size_bytes",
                &[("direction", "inbound"), ("side", side)],
            )
        };
        let (rx, tx) = (labels("received"), labels("sent"));
        let (outside, n_out) = shares(&rx);
        let (inside, n_in) = shares(&tx);
        let delay_h = histogram(last, "pxgw_added_delay_seconds", &[]);
        let (delay, _) = shares(&delay_h);
        let mut yield_series = Vec::new();
        for w in during.windows(2) {
            let d = |m: &str| sum(&w[1].scrape, m, &[]) - sum(&w[0].scrape, m, &[]);
            let payload = d("pxgw_merge_payload_bytes_total");
            // An interval with a few stray segments says nothing about the yield.
            if payload >= MIN_INTERVAL_PAYLOAD {
                yield_series.push((
                    w[1].t,
                    100.0 * d("pxgw_merge_full_payload_bytes_total") / payload,
                ));
            }
        }
        let (payload, full) = (
            sum(last, "pxgw_merge_payload_bytes_total", &[]),
            sum(last, "pxgw_merge_full_payload_bytes_total", &[]),
        );
        Self {
            overall_yield: (payload > 0.0).then(|| full / payload),
            size_labels: bound_labels(&rx, 1.0, ""),
            outside,
            inside,
            frames: (n_out, n_in),
            yield_series,
            delay_labels: delay_h
                .iter()
                .map(|&(le, _)| match le {
                    le if le.is_infinite() => "more".to_owned(),
                    le if le < 1e-3 => format!("≤{}µs", (le * 1e6).round()),
                    le => format!("≤{}ms", (le * 1e3).round()),
                })
                .collect(),
            delay,
        }
    }

    /// Draws the figure as an SVG at `path`.
    pub fn draw(&self, path: &Path, title: &str) -> Result<()> {
        load_font()?;
        let err = |e: &dyn std::fmt::Display| anyhow!("drawing {}: {e}", path.display());
        let root = SVGBackend::new(path, (1400, 900)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 22))
            .map_err(|e| err(&e))?;
        // Frame sizes across the top; yield and delay below.
        let (top_area, bottom) = root.split_vertically(450);
        let bottom = bottom.split_evenly((1, 2));
        let panels = [top_area, bottom[0].clone(), bottom[1].clone()];
        let outside_c = RGBColor(0x1f, 0x77, 0xb4);
        let inside_c = RGBColor(0xff, 0x7f, 0x0e);

        // (a) Frame sizes, grouped bars.
        let top = self
            .outside
            .iter()
            .chain(&self.inside)
            .fold(0.0f64, |a, &b| a.max(b))
            .max(1.0)
            * 1.1;
        let mut c = bar_chart(
            &panels[0],
            (
                "Inbound frame sizes",
                "frame size (Ethernet, bytes)",
                "% of frames",
            ),
            &self.size_labels,
            13,
            top,
        )
        .map_err(|e| err(&e))?;
        let bars = |v: &[f64], off: f64, col: RGBColor| -> Vec<Rectangle<(f64, f64)>> {
            v.iter()
                .enumerate()
                .map(|(i, &y)| {
                    let x = i as f64 + off;
                    Rectangle::new([(x, 0.0), (x + 0.38, y)], col.filled())
                })
                .collect()
        };
        c.draw_series(bars(&self.outside, -0.4, outside_c))
            .map_err(|e| err(&e))?
            .label(format!("outside wire ({} frames)", self.frames.0))
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], outside_c.filled())
            });
        c.draw_series(bars(&self.inside, 0.02, inside_c))
            .map_err(|e| err(&e))?
            .label(format!("inside wire ({} frames)", self.frames.1))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], inside_c.filled()));
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;

        // (b) Yield over time.
        let t_max = self.yield_series.iter().map(|p| p.0).fold(1.0f64, f64::max);
        let mut c = ChartBuilder::on(&panels[1])
            .caption("Conversion yield over time", ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(55)
            .build_cartesian_2d(0f64..t_max, 0f64..105f64)
            .map_err(|e| err(&e))?;
        c.configure_mesh()
            .x_desc("seconds since the first scrape")
            .y_desc("% of merged payload sent iMTU-bound")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        c.draw_series(
            self.yield_series
                .iter()
                .map(|&p| Circle::new(p, 4, outside_c.filled())),
        )
        .map_err(|e| err(&e))?
        .label("each 0.5 s scrape interval with inbound TCP")
        .legend(move |(x, y)| Circle::new((x + 6, y), 4, outside_c.filled()));
        if let Some(overall) = self.overall_yield {
            c.draw_series(LineSeries::new(
                [(0.0, 100.0 * overall), (t_max, 100.0 * overall)],
                inside_c.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(format!("whole run: {:.1} %", 100.0 * overall))
            .legend(move |(x, y)| {
                PathElement::new([(x, y), (x + 14, y)], inside_c.stroke_width(2))
            });
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()
            .map_err(|e| err(&e))?;

        // (c) Added delay.
        let top = self.delay.iter().fold(0.0f64, |a, &b| a.max(b)).max(1.0) * 1.1;
        let mut c = bar_chart(
            &panels[2],
            ("Delay added per segment", "delay added", "% of segments"),
            &self.delay_labels,
            12,
            top,
        )
        .map_err(|e| err(&e))?;
        c.draw_series(self.delay.iter().enumerate().map(|(i, &y)| {
            Rectangle::new(
                [(i as f64 - 0.35, 0.0), (i as f64 + 0.35, y)],
                inside_c.filled(),
            )
        }))
        .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
        Ok(())
    }
}

/// A bar chart's axes and mesh on `area`: one bar slot per label (x = 0, 1, ...), percentages
/// up to `top`. `text` is (caption, x description, y description).
fn bar_chart<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, plotters::coord::Shift>,
    text: (&str, &str, &str),
    labels: &[String],
    label_size: u32,
    top: f64,
) -> std::result::Result<
    ChartContext<
        'a,
        SVGBackend<'b>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    String,
> {
    let (caption, x_desc, y_desc) = text;
    let n = labels.len().max(1);
    let mut c = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(n)
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_style(("sans-serif", label_size))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(c)
}

/// Registers the font plotters measures text with (once per process).
fn load_font() -> Result<()> {
    static LOADED: std::sync::OnceLock<std::result::Result<(), String>> =
        std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT)
                .with_context(|| {
                    format!("reading {FONT}: install fonts-dejavu-core (`cargo xtask deps`)")
                })
                .map_err(|e| format!("{e:#}"))?;
            // The font lives as long as the process: plotters keeps a reference to it.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT} is not a font plotters can read"))
        })
        .clone()
        .map_err(|e| anyhow!(e))
}
