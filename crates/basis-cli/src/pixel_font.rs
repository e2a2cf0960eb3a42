//! A 5×7 pixel font for PNG plots: titles, tick values and legends drawn
//! pixel by pixel, so a plot needs no font library (`ttf`/`ab_glyph`) and no
//! font file on the machine; plotters only fills pixels and lines.
//!
//! One file, two users: the CLI's `--plot` (`plot.rs`) and `cargo xtask
//! quality`'s quality-vs-bytes plot, which includes this file with
//! `#[path]` (xtask does not depend on the CLI). It imports only plotters.

use plotters::prelude::*;

/// 5×7 glyphs: 35 bits, row-major from the top-left, `1` = ink.
pub(crate) const GLYPHS: &[(char, u64)] = &[
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

/// Draw `s` (upper-cased; characters without a glyph are blank) with its
/// top-left corner at `(x, y)`, `scale` pixels per font pixel.
pub(crate) fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
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

/// Pixel width of `s` at `scale` (6 font pixels a character: 5 and a gap).
pub(crate) fn text_width(s: &str, scale: i32) -> i32 {
    s.chars().count() as i32 * 6 * scale
}

/// Series colours (matplotlib's first eight).
pub(crate) const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glyphs_are_unique_and_fit_in_35_bits() {
        for (i, (c, bits)) in GLYPHS.iter().enumerate() {
            assert!(*bits < 1 << 35, "{c}");
            assert!(GLYPHS[..i].iter().all(|(d, _)| d != c), "{c}");
        }
        // 'A': " ### ", "#   #", "#   #", "#####", "#   #", "#   #", "#   #".
        let a = GLYPHS.iter().find(|g| g.0 == 'A').unwrap().1;
        assert_eq!(a, 0b01110_10001_10001_11111_10001_10001_10001);
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
        assert_eq!(text_width("a1", 2), 24);
    }
}
