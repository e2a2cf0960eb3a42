//! `--plot out.png`: per-epoch test AUC and test log-loss of every optimizer
//! (plotters, bitmap backend).
//!
//! Titles, tick values and the legend are drawn with the 5×7 pixel font of
//! `pixel_font.rs`, so the binary needs no font library or font file.

use crate::pixel_font::{COLORS, text, text_width};
use crate::run::EpochPoint;
use plotters::prelude::*;
use std::path::Path;

/// One optimizer's line: its name and its per-epoch points.
pub(crate) type Curve<'a> = (&'a str, &'a [EpochPoint]);

/// One panel: a metric against epochs for every optimizer.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    curves: &[Curve<'_>],
    metric: fn(&EpochPoint) -> f64,
) -> Result<(), String> {
    let series: Vec<Vec<(f64, f64)>> = curves
        .iter()
        .map(|(_, points)| {
            points
                .iter()
                .map(|p| (f64::from(p.epoch), metric(p)))
                .collect()
        })
        .collect();
    let pts = series.iter().flatten().filter(|p| p.1.is_finite());
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut max_epoch = 1.5f64;
    for &(x, y) in pts {
        lo = lo.min(y);
        hi = hi.max(y);
        max_epoch = max_epoch.max(x);
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi - lo < 1e-6 {
        (lo, hi) = (lo - 0.01, hi + 0.01);
    }
    let x0 = if max_epoch <= 1.5 { 0.5 } else { 1.0 };
    let pad = (hi - lo) * 0.08;
    let (lo, hi) = (lo - pad, hi + pad);
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let black = RGBColor(0, 0, 0);
    text(area, (w - text_width(title, 2)) / 2, 8, title, 2, &black)?;
    let (left, top, right, bottom) = (80, 34, w - 16, h - 40);
    let inner = area.margin(
        top as u32,
        (h - bottom) as u32,
        left as u32,
        (w - right) as u32,
    );
    let mut chart = ChartBuilder::on(&inner)
        .build_cartesian_2d(x0..max_epoch, lo..hi)
        .map_err(|e| e.to_string())?;
    let grey = RGBColor(220, 220, 220);
    let ticks = 5;
    for t in 0..=ticks {
        let y = lo + (hi - lo) * f64::from(t) / f64::from(ticks);
        chart
            .draw_series(LineSeries::new([(x0, y), (max_epoch, y)], grey))
            .map_err(|e| e.to_string())?;
        let (_, py) = chart.backend_coord(&(x0, y));
        let py = py - area.get_base_pixel().1;
        let label = format!("{y:.4}");
        text(
            area,
            left - 8 - text_width(&label, 1),
            py - 3,
            &label,
            1,
            &black,
        )?;
    }
    for e in (x0.ceil() as u32)..=(max_epoch as u32) {
        let x = f64::from(e);
        chart
            .draw_series(LineSeries::new([(x, lo), (x, hi)], grey))
            .map_err(|e| e.to_string())?;
        let (px, _) = chart.backend_coord(&(x, lo));
        let px = px - area.get_base_pixel().0;
        let label = e.to_string();
        text(
            area,
            px - text_width(&label, 1) / 2,
            bottom + 6,
            &label,
            1,
            &black,
        )?;
    }
    text(
        area,
        (w - text_width("EPOCH", 1)) / 2,
        h - 16,
        "EPOCH",
        1,
        &black,
    )?;
    chart
        .draw_series(LineSeries::new(
            [
                (x0, lo),
                (max_epoch, lo),
                (max_epoch, hi),
                (x0, hi),
                (x0, lo),
            ],
            black,
        ))
        .map_err(|e| e.to_string())?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(s.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(s.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Draw `curves` (one per optimizer) into the PNG at `path`.
///
/// Fails with a message when the image cannot be drawn or written.
pub(crate) fn draw(path: &Path, curves: &[Curve<'_>]) -> Result<(), String> {
    let legend_h = 24 * curves.len().div_ceil(3) as u32 + 16;
    let root = BitMapBackend::new(path, (1200, 480 + legend_h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (plots, legend) = root.split_vertically(480);
    let (left, right) = plots.split_horizontally(600);
    panel(&left, "TEST AUC", curves, |p| p.test_auc)?;
    panel(&right, "TEST LOG-LOSS", curves, |p| p.test_loss)?;
    for (i, (name, _)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let (x, y) = (80 + (i % 3) as i32 * 370, 8 + (i / 3) as i32 * 24);
        legend
            .draw(&Rectangle::new(
                [(x, y + 2), (x + 24, y + 12)],
                color.filled(),
            ))
            .map_err(|e| e.to_string())?;
        let scale = if name.len() > 26 { 1 } else { 2 };
        text(&legend, x + 32, y, name, scale, &RGBColor(0, 0, 0))?;
    }
    root.present().map_err(|e| e.to_string())
}
