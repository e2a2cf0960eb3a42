//! The quality-vs-bytes/row PNG of `cargo xtask quality`: per data set,
//! each optimizer's mean test AUC (± 1 sd bar) against its optimizer-state
//! bytes per row on a log axis, labelled with its spec.
//!
//! Text is drawn with a built-in 5×7 pixel font (the glyphs of the CLI's
//! `plot.rs`, packed one per `u64`), so no font library or font file is
//! needed on the machine; plotters only fills pixels and lines.

use plotters::prelude::*;
use std::path::Path;

/// 5×7 glyphs: 35 bits, row-major from the top-left, `1` = ink.
const GLYPHS: &[(char, u64)] = &[
    ('A', 0x3a31fc631),
    ('B', 0x7a31f463e),
    ('C', 0x3e108420f),
    ('D', 0x7a318c63e),
    ('E', 0x7e10f421f),
    ('F', 0x7e10f4210),
    ('G', 0x3e109c62f),
    ('H', 0x4631fc631),
    ('I', 0x7c842109f),
    ('J', 0x1c4210a4c),
    ('K', 0x4654c5251),
    ('L', 0x42108421f),
    ('M', 0x4775ac631),
    ('N', 0x47359c631),
    ('O', 0x3a318c62e),
    ('P', 0x7a31f4210),
    ('Q', 0x3a318d64d),
    ('R', 0x7a31f5251),
    ('S', 0x3e107043e),
    ('T', 0x7c8421084),
    ('U', 0x46318c62e),
    ('V', 0x46318c544),
    ('W', 0x4631ad771),
    ('X', 0x462a22a31),
    ('Y', 0x462a21084),
    ('Z', 0x7c222221f),
    ('0', 0x3a33ae62e),
    ('1', 0x11842108e),
    ('2', 0x3a211111f),
    ('3', 0x7c441062e),
    ('4', 0x08ca97c42),
    ('5', 0x7e1e0862e),
    ('6', 0x1910f462e),
    ('7', 0x7c2222108),
    ('8', 0x3a317462e),
    ('9', 0x3a317844c),
    ('.', 0x00000018c),
    (',', 0x000003088),
    ('-', 0x0000f8000),
    ('+', 0x0084f9080),
    ('=', 0x001f07c00),
    (':', 0x018c03180),
    ('/', 0x002222200),
    ('(', 0x088842082),
    (')', 0x208210888),
    ('_', 0x00000001f),
];

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

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Draw `s` (upper-cased; unknown characters blank) with its top-left corner
/// at `(x, y)`, `scale` pixels per font pixel.
fn text(
    area: &Area<'_>,
    x: i32,
    y: i32,
    s: &str,
    scale: i32,
    color: &RGBColor,
) -> Result<(), String> {
    for (i, c) in s.chars().enumerate() {
        let c = c.to_ascii_uppercase();
        let Some(&(_, bits)) = GLYPHS.iter().find(|(g, _)| *g == c) else {
            continue;
        };
        let x0 = x + i as i32 * 6 * scale;
        for k in 0..35 {
            if bits >> (34 - k) & 1 == 1 {
                let (px, py) = (x0 + (k % 5) * scale, y + (k / 5) * scale);
                // Pixel by pixel: plotters draws a 1×1 filled rectangle as nothing.
                for dy in 0..scale {
                    for dx in 0..scale {
                        area.draw_pixel((px + dx, py + dy), color)
                            .map_err(|e| e.to_string())?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Pixel width of `s` at `scale`.
fn width(s: &str, scale: i32) -> i32 {
    s.chars().count() as i32 * 6 * scale
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

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
    fn glyphs_are_unique_and_fit_in_35_bits() {
        for (i, (c, bits)) in GLYPHS.iter().enumerate() {
            assert!(*bits < 1 << 35, "{c}");
            assert!(GLYPHS[..i].iter().all(|(d, _)| d != c), "{c}");
        }
        // 'A' from the CLI's table: " ### ", "#   #", "#   #", "#####", …
        let a = GLYPHS.iter().find(|g| g.0 == 'A').unwrap().1;
        assert_eq!(a >> 30, 0b01110);
    }

    #[test]
    fn text_inks_exactly_the_glyph_pixels() {
        let (w, h) = (40u32, 10u32);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            text(&root, 0, 0, "a1", 1, &RGBColor(0, 0, 0)).unwrap();
            root.present().unwrap();
        }
        let ink = buf.chunks(3).filter(|p| p[0] == 0).count() as u32;
        let bits = |c: char| GLYPHS.iter().find(|g| g.0 == c).unwrap().1.count_ones();
        assert_eq!(ink, bits('A') + bits('1'));
    }

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
