//! PNG charts of a report, drawn with plotters into a buffer and encoded with `png`.
//!
//! Text needs a TrueType font, read at run time (DejaVu Sans, from Debian's `fonts-dejavu-core`,
//! by default; `--font` to use another); without one no chart is drawn and the JSON and tables
//! still are.

use crate::report::BenchReport;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where a font is looked for when none is given.
pub const FONT_CANDIDATES: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

pub(crate) const FONT: &str = "sans-serif";
pub(crate) const W: u32 = 1000;
pub(crate) const H: u32 = 560;
pub(crate) const PALETTE: [RGBColor; 6] = [
    RGBColor(0x4c, 0x72, 0xb0),
    RGBColor(0xdd, 0x84, 0x52),
    RGBColor(0x55, 0xa8, 0x68),
    RGBColor(0xc4, 0x4e, 0x52),
    RGBColor(0x81, 0x72, 0xb3),
    RGBColor(0x93, 0x78, 0x60),
];

pub(crate) type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Registers the font once; the path used, or why none could be.
pub fn load_font(path: Option<&Path>) -> Result<PathBuf, String> {
    static LOADED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            let candidates: Vec<PathBuf> = match path {
                Some(p) => vec![p.to_owned()],
                None => FONT_CANDIDATES.iter().map(PathBuf::from).collect(),
            };
            for c in candidates {
                if let Ok(bytes) = std::fs::read(&c) {
                    // plotters keeps fonts for the life of the process.
                    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                    return plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                        .map(|_| c.clone())
                        .map_err(|_| format!("{} is not a usable TrueType font", c.display()));
                }
            }
            Err("no font found (install fonts-dejavu-core or pass --font)".into())
        })
        .clone()
}

fn save_png(path: &Path, (w, h): (u32, u32), rgb: &[u8]) -> DrawResult<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut enc = png::Encoder::new(file, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header()?.write_image_data(rgb)?;
    Ok(())
}

pub(crate) fn draw(
    path: &Path,
    size: (u32, u32),
    f: impl FnOnce(&DrawingArea<BitMapBackend, Shift>) -> DrawResult<()>,
) -> DrawResult<()> {
    let mut buf = vec![0u8; (size.0 * size.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, size).into_drawing_area();
        root.fill(&WHITE)?;
        f(&root)?;
        root.present()?;
    }
    save_png(path, size, &buf)
}

fn label_at(names: &[String], x: f64) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
        names[i as usize].clone()
    } else {
        String::new()
    }
}

/// Grouped bars: one group per name, one bar per series; optional dashed reference line.
pub(crate) struct Bars<'a> {
    pub title: &'a str,
    pub y_desc: &'a str,
    pub names: Vec<String>,
    pub series: Vec<(&'a str, Vec<Option<f64>>)>,
    pub reference: Option<(f64, String)>,
    pub log_y: bool,
    pub value_fmt: fn(f64) -> String,
}

impl Bars<'_> {
    /// The highest bar or reference line.
    fn top(&self) -> f64 {
        self.series
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied())
            .chain(self.reference.as_ref().map(|r| r.0))
            .fold(0.0f64, f64::max)
    }
}

/// The legend every chart with more than one series shows: upper right, on white.
pub(crate) fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> DrawResult<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A bar's value, centred above it.
fn value_style() -> TextStyle<'static> {
    (FONT, 13).into_font().color(&BLACK).pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Bottom,
    ))
}

/// Draws grouped bars into a PNG at `path`.
pub(crate) fn bars(path: &Path, b: &Bars) -> DrawResult<()> {
    draw(path, (W, H), |root| {
        let n = b.names.len();
        let max = b.top();
        let x_range = -0.5f64..(n as f64 - 0.5);
        let per = 0.8 / b.series.len() as f64;
        let mut builder = ChartBuilder::on(root);
        builder.caption(b.title, (FONT, 22)).margin(16).x_label_area_size(36).y_label_area_size(72);
        macro_rules! body {
            ($chart:expr, $floor:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(n)
                    .x_label_formatter(&|x| label_at(&b.names, *x))
                    .y_desc(b.y_desc)
                    .label_style((FONT, 14))
                    .draw()?;
                for (si, (label, values)) in b.series.iter().enumerate() {
                    let color = PALETTE[si % PALETTE.len()];
                    let rects = values.iter().enumerate().filter_map(|(i, v)| {
                        let v = (*v)?;
                        let x0 = i as f64 - 0.4 + per * si as f64;
                        Some(Rectangle::new([(x0, $floor), (x0 + per * 0.92, v)], color.filled()))
                    });
                    let drawn = chart.draw_series(rects)?;
                    if b.series.len() > 1 {
                        drawn
                            .label(*label)
                            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
                    }
                    chart.draw_series(values.iter().enumerate().filter_map(|(i, v)| {
                        let v = (*v)?;
                        let x = i as f64 - 0.4 + per * (si as f64 + 0.46);
                        Some(Text::new((b.value_fmt)(v), (x, v), value_style()))
                    }))?;
                }
                if let Some((y, label)) = &b.reference {
                    let red = RGBColor(0xb0, 0x20, 0x20);
                    chart
                        .draw_series(DashedLineSeries::new(
                            vec![(-0.5, *y), (n as f64 - 0.5, *y)],
                            8,
                            5,
                            red.stroke_width(2),
                        ))?
                        .label(label.as_str())
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red.stroke_width(2)));
                }
                if b.series.len() > 1 || b.reference.is_some() {
                    draw_legend(&mut chart)?;
                }
            }};
        }
        if b.log_y {
            let floor = 0.01;
            body!(builder.build_cartesian_2d(x_range, (floor..max * 12.0).log_scale())?, floor);
        } else {
            body!(builder.build_cartesian_2d(x_range, 0.0..max * 1.4)?, 0.0);
        }
        Ok(())
    })
}

/// The sweep filter's own expected false-positive rate for a configured `fp`.
fn expected_fp(report: &BenchReport, fp: f64) -> Option<f64> {
    report.sweep.iter().find(|p| p.fp_rate == fp).and_then(|p| p.filter_expected_fp)
}

/// The sweep's two panels side by side: reads per lookup, and the false positives' share of them.
fn sweep(path: &Path, report: &BenchReport) -> DrawResult<()> {
    let mut fps: Vec<f64> = report.sweep.iter().map(|p| p.fp_rate).collect();
    fps.sort_by(|a, b| b.total_cmp(a));
    fps.dedup();
    draw(path, (2 * W - 200, H), |root| {
        let (left, right) = root.split_horizontally(W - 100);
        sweep_reads(&left, report, &fps)?;
        sweep_false_positive_reads(&right, report, &fps)
    })
}

/// Cassandra reads per lookup over the miss share: measured dots, theory lines per fp_rate.
fn sweep_reads(area: &DrawingArea<BitMapBackend, Shift>, report: &BenchReport, fps: &[f64]) -> DrawResult<()> {
    let mut chart = ChartBuilder::on(area)
        .caption("Cassandra reads/lookup: dots measured, lines fp_rate, dashed the filter's FPR", (FONT, 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0f64..100.0, 0.0f64..1.05)?;
    chart
        .configure_mesh()
        .x_desc("absent keys, % of lookups")
        .y_desc("Cassandra reads per lookup")
        .label_style((FONT, 14))
        .draw()?;
    for (i, fp) in fps.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let theory = (0..=100).map(|m| {
            let m = m as f64 / 100.0;
            (m * 100.0, (1.0 - m) + m * fp)
        });
        chart
            .draw_series(LineSeries::new(theory, color.stroke_width(2)))?
            .label(format!("fp_rate {} %", fp * 100.0))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
        // The filter's own expectation at its fill (sizing rounds up to whole blocks and
        // segments, so it is at or under the fp_rate asked for), dashed.
        if let Some(e) = expected_fp(report, *fp) {
            let expected = (0..=100).map(|m| {
                let m = m as f64 / 100.0;
                (m * 100.0, (1.0 - m) + m * e)
            });
            chart.draw_series(DashedLineSeries::new(expected, 6, 4, color.stroke_width(1)))?;
        }
        chart.draw_series(
            report
                .sweep
                .iter()
                .filter(|p| p.fp_rate == *fp)
                .map(|p| Circle::new((p.miss_share * 100.0, p.reads_per_lookup), 5, color.filled())),
        )?;
    }
    draw_legend(&mut chart)
}

/// The same runs with the hits taken out: the reads the false positives cost, on a log scale
/// where the fp_rates separate.
fn sweep_false_positive_reads(
    area: &DrawingArea<BitMapBackend, Shift>,
    report: &BenchReport,
    fps: &[f64],
) -> DrawResult<()> {
    let mut chart = ChartBuilder::on(area)
        .caption("…of which false positives: reads − hits (log)", (FONT, 18))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0f64..100.0, (0.0001f64..0.2).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("absent keys, % of lookups")
        .y_desc("false-positive reads per lookup")
        .label_style((FONT, 14))
        .draw()?;
    for (i, fp) in fps.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let theory = (5..=100).map(|m| (m as f64, m as f64 / 100.0 * fp));
        chart.draw_series(LineSeries::new(theory, color.stroke_width(2)))?;
        if let Some(e) = expected_fp(report, *fp) {
            let expected = (5..=100).map(|m| (m as f64, m as f64 / 100.0 * e));
            chart.draw_series(DashedLineSeries::new(expected, 6, 4, color.stroke_width(1)))?;
        }
        chart.draw_series(
            report
                .sweep
                .iter()
                .filter(|p| p.fp_rate == *fp && p.excess_reads_per_lookup > 0.0)
                .map(|p| Circle::new((p.miss_share * 100.0, p.excess_reads_per_lookup), 5, color.filled())),
        )?;
    }
    Ok(())
}

/// Draws every chart of `report` into `dir`; the files written.
pub fn draw_all(report: &BenchReport, dir: &Path, font: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    load_font(font)?;
    let names: Vec<String> = report.targets.iter().map(|t| t.name.clone()).collect();
    let mut written = Vec::new();
    let mut save = |file: &str, spec: Bars| {
        let p = dir.join(file);
        bars(&p, &spec).map_err(|e| e.to_string())?;
        written.push(p);
        Ok::<(), String>(())
    };
    let floor = report.target("floor").map(|f| f.lookups_per_sec);
    save(
        "throughput.png",
        Bars {
            title: "Lookups per second, closed loop (fixed-rate runs at their offered rate)",
            y_desc: "lookups/s",
            names: names.clone(),
            series: vec![("lookups/s", report.targets.iter().map(|t| Some(t.lookups_per_sec)).collect())],
            reference: floor.map(|f| (0.6 * f, "0.6 × hello-world floor (target for filter-negatives)".into())),
            log_y: false,
            value_fmt: |v| format!("{v:.0}"),
        },
    )?;
    save(
        "latency.png",
        Bars {
            title: "Latency per lookup (ms, log scale)",
            y_desc: "ms",
            names: names.clone(),
            series: vec![
                ("p50", report.targets.iter().map(|t| Some(t.p50_ms)).collect()),
                ("p99", report.targets.iter().map(|t| Some(t.p99_ms)).collect()),
                ("p99.9", report.targets.iter().map(|t| Some(t.p999_ms)).collect()),
            ],
            reference: Some((2.0, "2 ms (p99 target at half the max rate)".into())),
            log_y: true,
            value_fmt: |v| format!("{v:.2}"),
        },
    )?;
    save(
        "reads_per_lookup.png",
        Bars {
            title: "What reaches the back: per lookup",
            y_desc: "per lookup",
            names,
            series: vec![
                (
                    "Cassandra reads (origin counter)",
                    report.targets.iter().map(|t| t.cassandra_reads_per_lookup).collect(),
                ),
                (
                    "Cassandra coordinator reads (Cassandra's counter)",
                    report.targets.iter().map(|t| t.cassandra_coordinator_reads_per_lookup).collect(),
                ),
                ("origin requests (edge only)", report.targets.iter().map(|t| t.origin_requests_per_lookup).collect()),
            ],
            reference: Some((0.21, "0.21 target".into())),
            log_y: false,
            value_fmt: |v| format!("{v:.3}"),
        },
    )?;
    if !report.sweep.is_empty() {
        let p = dir.join("sweep.png");
        sweep(&p, report).map_err(|e| e.to_string())?;
        written.push(p);
    }
    Ok(written)
}
