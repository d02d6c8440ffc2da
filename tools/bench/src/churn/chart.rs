//! A churn run's memory over time, as one PNG of two panels: the isolate's own (wasm memory
//! and held bytes against the budget) and the `workerd` processes' resident memory.

use super::ChurnReport;
use crate::chart::{draw, draw_legend, load_font, DrawResult, FONT, H, PALETTE, W};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const MIB: f64 = 1024.0 * 1024.0;

/// Draws `edge_memory.png` into `dir`; the file written.
pub fn draw_churn(report: &ChurnReport, dir: &Path, font: Option<&Path>) -> Result<PathBuf, String> {
    load_font(font)?;
    let path = dir.join("edge_memory.png");
    draw(&path, (W, 2 * H), |root| {
        let (top, bottom) = root.split_vertically(H);
        isolate_panel(&top, report)?;
        process_panel(&bottom, report)
    })
    .map_err(|e| e.to_string())?;
    Ok(path)
}

type Series = Vec<(f64, f64)>;

fn minutes(secs: f64) -> f64 {
    secs / 60.0
}

fn isolate_panel(area: &DrawingArea<BitMapBackend, Shift>, report: &ChurnReport) -> DrawResult<()> {
    let with = |f: &dyn Fn(&bloomgate_client::api::IsolateReport) -> f64| -> Series {
        report.samples.iter().filter_map(|s| s.isolate.as_ref().map(|i| (minutes(s.secs), f(i)))).collect()
    };
    let wasm = with(&|i| i.wasm_bytes as f64 / MIB);
    let held = with(&|i| i.held.total as f64 / MIB);
    let budget = with(&|i| i.budget_bytes as f64 / MIB);
    let top = wasm.iter().chain(&budget).map(|p| p.1).fold(1.0, f64::max) * 1.25;
    let end = report.samples.last().map_or(1.0, |s| minutes(s.secs)).max(0.1);
    let mut chart = ChartBuilder::on(area)
        .caption("The isolate: wasm memory and bytes held, against the budget", (FONT, 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart.configure_mesh().x_desc("minutes").y_desc("MiB").label_style((FONT, 14)).draw()?;
    for (i, (label, points)) in
        [("wasm memory", wasm), ("held (copies, spares, tails, manifests)", held)].into_iter().enumerate()
    {
        let color = PALETTE[i];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    let red = RGBColor(0xb0, 0x20, 0x20);
    chart
        .draw_series(DashedLineSeries::new(budget, 8, 5, red.stroke_width(2)))?
        .label("budget (EDGE_MAX_HELD_BYTES)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], red.stroke_width(2)));
    draw_legend(&mut chart)
}

fn process_panel(area: &DrawingArea<BitMapBackend, Shift>, report: &ChurnReport) -> DrawResult<()> {
    let worker: Series = report.samples.iter().map(|s| (minutes(s.secs), s.worker_rss_mib)).collect();
    let proxy: Series = report.samples.iter().map(|s| (minutes(s.secs), s.proxy_rss_mib)).collect();
    let top = worker.iter().chain(&proxy).map(|p| p.1).fold(1.0, f64::max) * 1.2;
    let end = report.samples.last().map_or(1.0, |s| minutes(s.secs)).max(0.1);
    let cache = if report.config.cache_api { "Cache API in use" } else { "Cache API bypassed" };
    let mut chart = ChartBuilder::on(area)
        .caption(format!("workerd resident memory under wrangler dev ({cache})"), (FONT, 20))
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..end, 0.0..top)?;
    chart.configure_mesh().x_desc("minutes").y_desc("MiB").label_style((FONT, 14)).draw()?;
    let lines = [("the Worker's workerd (isolate, simulators)", worker), ("wrangler's proxy workerd", proxy)];
    for (i, (label, points)) in lines.into_iter().enumerate() {
        let color = PALETTE[i + 2];
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2)));
    }
    draw_legend(&mut chart)
}
