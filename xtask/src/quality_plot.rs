//! The quality-vs-bytes/row PNG of `cargo xtask quality`: per data set,
//! each optimizer's mean test AUC (± 1 sd bar) against its optimizer-state
//! bytes per row on a log axis, labelled with its spec.
//!
//! Text is drawn with the CLI's 5×7 pixel font (`pixel_font.rs`, the same
//! file), so no font library or font file is needed on the machine.

use plotters::prelude::*;
use std::path::Path;

// The CLI's pixel font, shared as a file (xtask does not depend on the CLI).
#[path = "../../crates/basis-cli/src/pixel_font.rs"]
mod pixel_font;
use pixel_font::{COLORS, text, text_width as width};

/// One optimizer's point.
pub(crate) struct Point {
    /// The optimizer spec.
    pub(crate) label: String,
    /// Optimizer-state bytes per table row.
    pub(crate) bytes_per_row: f64,
    /// Mean test AUC.
    pub(crate) mean: f64,
    /// Sample standard deviation of the test AUC.
    pub(crate) sd: f64,
}

/// Write the plot of `points` to `path` (PNG), titled `title`.
pub(crate) fn draw(path: &Path, title: &str, points: &[Point]) -> Result<(), String> {
    let (w, h) = (900i32, 600i32);
    let root = BitMapBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let black = RGBColor(0, 0, 0);
    let grey = RGBColor(220, 220, 220);
    // x: log2(bytes/row), padded half a step; y: AUC ± sd, padded 8 %.
    let xs = points
        .iter()
        .map(|p| p.bytes_per_row.max(1.0 / 32.0).log2());
    let (x_lo, x_hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let (x_lo, x_hi) = if x_lo.is_finite() {
        (x_lo.floor() - 0.5, x_hi.ceil() + 0.5)
    } else {
        (-1.0, 8.0)
    };
    let mut y_lo = points
        .iter()
        .map(|p| p.mean - p.sd)
        .fold(f64::INFINITY, f64::min);
    let mut y_hi = points
        .iter()
        .map(|p| p.mean + p.sd)
        .fold(f64::NEG_INFINITY, f64::max);
    if !(y_lo.is_finite() && y_hi.is_finite()) {
        (y_lo, y_hi) = (0.5, 1.0);
    }
    if y_hi - y_lo < 1e-4 {
        (y_lo, y_hi) = (y_lo - 0.0005, y_hi + 0.0005);
    }
    let pad = (y_hi - y_lo) * 0.08;
    let (y_lo, y_hi) = (y_lo - pad, y_hi + pad);
    text(&root, (w - width(title, 2)) / 2, 10, title, 2, &black)?;
    let (left, top, right, bottom) = (90, 40, w - 20, h - 50);
    let inner = root.margin(
        top as u32,
        (h - bottom) as u32,
        left as u32,
        (w - right) as u32,
    );
    let mut chart = ChartBuilder::on(&inner)
        .build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)
        .map_err(|e| e.to_string())?;
    let px = |chart: &ChartContext<'_, BitMapBackend<'_>, _>, x: f64, y: f64| {
        let (a, b): (i32, i32) = chart.backend_coord(&(x, y));
        (a, b)
    };
    for t in 0..=5 {
        let y = y_lo + (y_hi - y_lo) * f64::from(t) / 5.0;
        chart
            .draw_series(LineSeries::new([(x_lo, y), (x_hi, y)], grey))
            .map_err(|e| e.to_string())?;
        let (_, py) = px(&chart, x_lo, y);
        let label = format!("{y:.4}");
        text(
            &root,
            left - 8 - width(&label, 1),
            py - 3,
            &label,
            1,
            &black,
        )?;
    }
    let mut k = x_lo.ceil() as i32;
    while f64::from(k) <= x_hi {
        let x = f64::from(k);
        chart
            .draw_series(LineSeries::new([(x, y_lo), (x, y_hi)], grey))
            .map_err(|e| e.to_string())?;
        let (qx, _) = px(&chart, x, y_lo);
        let v = 2f64.powi(k);
        let label = if v >= 1.0 {
            format!("{v}")
        } else {
            format!("{v:.2}")
        };
        text(
            &root,
            qx - width(&label, 1) / 2,
            bottom + 6,
            &label,
            1,
            &black,
        )?;
        k += 1;
    }
    let xl = "OPTIMIZER STATE BYTES/ROW (LOG SCALE)";
    text(&root, (w - width(xl, 1)) / 2, h - 22, xl, 1, &black)?;
    text(&root, 8, top - 14, "TEST AUC", 1, &black)?;
    chart
        .draw_series(LineSeries::new(
            [
                (x_lo, y_lo),
                (x_hi, y_lo),
                (x_hi, y_hi),
                (x_lo, y_hi),
                (x_lo, y_lo),
            ],
            black,
        ))
        .map_err(|e| e.to_string())?;
    for (i, p) in points.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let x = p.bytes_per_row.max(1.0 / 32.0).log2();
        chart
            .draw_series(LineSeries::new(
                [(x, p.mean - p.sd), (x, p.mean + p.sd)],
                color.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        chart
            .draw_series([Circle::new((x, p.mean), 5, color.filled())])
            .map_err(|e| e.to_string())?;
        let (qx, qy) = px(&chart, x, p.mean);
        // Labels alternate above and below so neighbours overlap less.
        let dy = if i % 2 == 0 { -16 } else { 8 };
        let lx = (qx + 8).min(w - 4 - width(&p.label, 1));
        text(&root, lx, qy + dy, &p.label, 1, &color)?;
    }
    root.present().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_is_a_png_file() {
        let path =
            std::env::temp_dir().join(format!("xtask-quality-plot-{}.png", std::process::id()));
        let pts = [
            Point {
                label: "adam".into(),
                bytes_per_row: 136.0,
                mean: 0.67,
                sd: 0.001,
            },
            Point {
                label: "basis".into(),
                bytes_per_row: 1.07,
                mean: 0.66,
                sd: 0.002,
            },
        ];
        draw(&path, "test", &pts).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        std::fs::remove_file(&path).unwrap();
    }
}
