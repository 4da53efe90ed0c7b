//! A self-contained line-chart renderer for dose-response curves: stacked panels sharing the x
//! axis, drawn into a paletted canvas with an embedded 5×7 bitmap font and written as PNG
//! (4-bit indexed colour, stored deflate blocks). No font files, no image crates.

use std::path::Path;

use aria_core::CoreError;

use crate::{Result, SteerError};

/// The palette (RGB); canvas pixels index it.
const PALETTE: [[u8; 3]; 8] = [
    [255, 255, 255], // 0 background
    [20, 20, 20],    // 1 text, axes
    [225, 225, 225], // 2 grid
    [140, 140, 140], // 3 frame
    [31, 119, 180],  // 4 series blue
    [214, 39, 40],   // 5 series red
    [44, 160, 44],   // 6 series green
    [255, 127, 14],  // 7 series orange
];

/// The colours of successive panels.
const SERIES: [u8; 4] = [4, 5, 6, 7];

/// One panel: a title and the y values (one per x; NaN: no point).
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title drawn above the panel.
    pub title: String,
    /// One value per x position.
    pub values: Vec<f64>,
}

/// A chart: shared x values, an x-axis label, panels top to bottom.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Heading of the whole chart.
    pub title: String,
    /// Label of the shared x axis.
    pub x_label: String,
    /// The x values.
    pub x: Vec<f64>,
    /// The panels.
    pub panels: Vec<Panel>,
}

struct Canvas {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Canvas {
    fn new(w: usize, h: usize) -> Self {
        Canvas {
            w,
            h,
            px: vec![0; w * h],
        }
    }

    fn set(&mut self, x: i64, y: i64, c: u8) {
        if x >= 0 && y >= 0 && (x as usize) < self.w && (y as usize) < self.h {
            self.px[y as usize * self.w + x as usize] = c;
        }
    }

    fn rect(&mut self, x0: i64, y0: i64, x1: i64, y1: i64, c: u8) {
        for y in y0..=y1 {
            for x in x0..=x1 {
                self.set(x, y, c);
            }
        }
    }

    fn hline(&mut self, x0: i64, x1: i64, y: i64, c: u8) {
        self.rect(x0, y, x1, y, c);
    }

    fn vline(&mut self, x: i64, y0: i64, y1: i64, c: u8) {
        self.rect(x, y0, x, y1, c);
    }

    /// A 2-pixel-wide line (Bresenham, a 2×2 pen).
    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: u8) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            self.rect(x, y, x + 1, y + 1, c);
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    /// Text at `scale`× the 5×7 font, top-left at (x, y). Lowercase draws as uppercase;
    /// characters without a glyph draw as a box.
    fn text(&mut self, x: i64, y: i64, s: &str, scale: i64, c: u8) {
        let mut cx = x;
        for ch in s.chars() {
            let g = glyph(ch);
            for (row, bits) in g.iter().enumerate() {
                for col in 0..5 {
                    if bits & (0x10 >> col) != 0 {
                        let (px, py) = (cx + col * scale, y + row as i64 * scale);
                        self.rect(px, py, px + scale - 1, py + scale - 1, c);
                    }
                }
            }
            cx += 6 * scale;
        }
    }
}

/// Width in pixels of `s` at `scale`.
fn text_width(s: &str, scale: i64) -> i64 {
    s.chars().count() as i64 * 6 * scale - scale
}

/// The 5×7 glyph of `c` (rows top to bottom, bit 4 = leftmost column).
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        ' ' => [0; 7],
        '0' => [0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E],
        '1' => [0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E],
        '2' => [0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F],
        '3' => [0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E],
        '4' => [0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02],
        '5' => [0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E],
        '6' => [0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E],
        '7' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08],
        '8' => [0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E],
        '9' => [0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C],
        'A' => [0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'B' => [0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E],
        'C' => [0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E],
        'D' => [0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C],
        'E' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F],
        'F' => [0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10],
        'G' => [0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F],
        'H' => [0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11],
        'I' => [0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E],
        'J' => [0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C],
        'K' => [0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11],
        'L' => [0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F],
        'M' => [0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11],
        'N' => [0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11],
        'O' => [0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'P' => [0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10],
        'Q' => [0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D],
        'R' => [0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11],
        'S' => [0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E],
        'T' => [0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04],
        'U' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E],
        'V' => [0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04],
        'W' => [0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A],
        'X' => [0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11],
        'Y' => [0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04],
        'Z' => [0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F],
        '.' => [0, 0, 0, 0, 0, 0x0C, 0x0C],
        ',' => [0, 0, 0, 0, 0x0C, 0x04, 0x08],
        ':' => [0, 0x0C, 0x0C, 0, 0x0C, 0x0C, 0],
        '-' => [0, 0, 0, 0x1F, 0, 0, 0],
        '+' => [0, 0x04, 0x04, 0x1F, 0x04, 0x04, 0],
        '=' => [0, 0, 0x1F, 0, 0x1F, 0, 0],
        '(' => [0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02],
        ')' => [0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08],
        '[' => [0x0E, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0E],
        ']' => [0x0E, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0E],
        '/' => [0, 0x01, 0x02, 0x04, 0x08, 0x10, 0],
        '%' => [0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03],
        '_' => [0, 0, 0, 0, 0, 0, 0x1F],
        '|' => [0x04; 7],
        '\'' => [0x04, 0x04, 0x08, 0, 0, 0, 0],
        '#' => [0x0A, 0x0A, 0x1F, 0x0A, 0x1F, 0x0A, 0x0A],
        '<' => [0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02],
        '>' => [0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08],
        _ => [0x1F, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1F],
    }
}

/// A short tick label: up to 4 significant digits, exponent form for very large or small
/// magnitudes.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.2e}");
    }
    let decimals = (3 - a.log10().floor() as i64).clamp(0, 6) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

const W: usize = 960;
const PANEL_H: usize = 210;
const TOP: usize = 56;
const BOTTOM: usize = 64;
const LEFT: i64 = 90;
const RIGHT: i64 = 30;

impl Chart {
    /// Render to a paletted canvas.
    fn render(&self) -> Canvas {
        let n = self.panels.len().max(1);
        let h = TOP + n * PANEL_H + BOTTOM;
        let mut cv = Canvas::new(W, h);
        let widest = self
            .panels
            .iter()
            .flat_map(|p| {
                let (a, b) = padded_range(&p.values);
                y_ticks(a, b).into_iter().map(|(_, l)| text_width(&l, 2))
            })
            .max()
            .unwrap_or(0);
        let x0 = (widest + 20).max(LEFT);
        let scale = if text_width(&self.title, 3) <= W as i64 - x0 - RIGHT {
            3
        } else {
            2
        };
        let max_chars = ((W as i64 - 20) / (6 * scale)) as usize;
        let title: String = self.title.chars().take(max_chars).collect();
        cv.text(
            x0.min(W as i64 - 10 - text_width(&title, scale)).max(10),
            16,
            &title,
            scale,
            1,
        );
        let (xmin, xmax) = range(&self.x);
        let x1 = W as i64 - RIGHT;
        let xpix = |x: f64| -> i64 {
            if xmax > xmin {
                x0 + ((x - xmin) / (xmax - xmin) * (x1 - x0) as f64).round() as i64
            } else {
                (x0 + x1) / 2
            }
        };
        let xticks = ticks(&self.x);
        for (pi, panel) in self.panels.iter().enumerate() {
            let color = SERIES[pi % SERIES.len()];
            let top = (TOP + pi * PANEL_H) as i64 + 24;
            let bottom = (TOP + (pi + 1) * PANEL_H) as i64 - 14;
            cv.text(x0, top - 20, &panel.title, 2, color);
            let (ymin, ymax) = padded_range(&panel.values);
            let ypix = |y: f64| -> i64 {
                bottom - ((y - ymin) / (ymax - ymin) * (bottom - top) as f64).round() as i64
            };
            // Grid and y labels at round values.
            for (v, label) in y_ticks(ymin, ymax) {
                let y = ypix(v);
                cv.hline(x0, x1, y, 2);
                cv.text(x0 - 8 - text_width(&label, 2), y - 7, &label, 2, 1);
            }
            for &xv in &xticks {
                cv.vline(xpix(xv), top, bottom, 2);
            }
            // Frame.
            cv.hline(x0, x1, top, 3);
            cv.hline(x0, x1, bottom, 3);
            cv.vline(x0, top, bottom, 3);
            cv.vline(x1, top, bottom, 3);
            // Series: segments between consecutive finite points, then markers.
            let pts: Vec<Option<(i64, i64)>> = self
                .x
                .iter()
                .zip(&panel.values)
                .map(|(&x, &y)| y.is_finite().then(|| (xpix(x), ypix(y))))
                .collect();
            for w in pts.windows(2) {
                if let (Some(a), Some(b)) = (w[0], w[1]) {
                    cv.line(a, b, color);
                }
            }
            for p in pts.iter().flatten() {
                cv.rect(p.0 - 3, p.1 - 3, p.0 + 4, p.1 + 4, color);
            }
        }
        // Shared x axis labels under the last panel.
        let axis_y = (TOP + n * PANEL_H) as i64 - 14;
        for &xv in &xticks {
            let label = tick_label(xv);
            let x = xpix(xv);
            cv.vline(x, axis_y, axis_y + 5, 1);
            cv.text(x - text_width(&label, 2) / 2, axis_y + 10, &label, 2, 1);
        }
        let lw = text_width(&self.x_label, 2);
        cv.text((x0 + x1) / 2 - lw / 2, axis_y + 34, &self.x_label, 2, 1);
        cv
    }

    /// Render and encode as PNG bytes.
    pub fn to_png(&self) -> Vec<u8> {
        let cv = self.render();
        encode_png(cv.w, cv.h, &cv.px)
    }

    /// Render and write a PNG file.
    pub fn save_png(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_png()).map_err(|source| {
            SteerError::Core(CoreError::Io {
                path: path.to_path_buf(),
                source,
            })
        })
    }
}

/// The y range of a panel: the values' range with 8 % margins (a constant series gets ±10 %).
fn padded_range(v: &[f64]) -> (f64, f64) {
    let (ymin, ymax) = range(v);
    if !(ymin.is_finite() && ymax.is_finite()) {
        return (0.0, 1.0);
    }
    if ymax - ymin <= 1e-12 * ymax.abs().max(1e-30) {
        let pad = if ymax == 0.0 { 1.0 } else { ymax.abs() * 0.1 };
        return (ymin - pad, ymax + pad);
    }
    let pad = (ymax - ymin) * 0.08;
    (ymin - pad, ymax + pad)
}

/// Round tick values (steps of 1, 2 or 5 × 10^k, about 4 intervals) within `[a, b]`, with
/// labels that show just the digits the step needs.
fn y_ticks(a: f64, b: f64) -> Vec<(f64, String)> {
    let raw = (b - a) / 4.0;
    if !(raw.is_finite() && raw > 0.0) {
        return vec![(a, tick_label(a))];
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let step = mag
        * if norm < 1.5 {
            1.0
        } else if norm < 3.0 {
            2.0
        } else if norm < 7.0 {
            5.0
        } else {
            10.0
        };
    let big = a.abs().max(b.abs());
    let step_exp = step.log10().floor() as i64;
    let label = |v: f64| -> String {
        if v.abs() < step * 1e-6 {
            return "0".into();
        }
        if !(1e-3..1e5).contains(&big) {
            let prec = (big.log10().floor() as i64 - step_exp).clamp(1, 6) as usize;
            format!("{v:.prec$e}")
        } else {
            let decimals = (-step_exp).clamp(0, 10) as usize;
            format!("{v:.decimals$}")
        }
    };
    let mut out = Vec::new();
    let mut k = (a / step).ceil();
    while k * step <= b + step * 1e-9 && out.len() < 12 {
        out.push((k * step, label(k * step)));
        k += 1.0;
    }
    out
}

fn range(v: &[f64]) -> (f64, f64) {
    v.iter()
        .filter(|x| x.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

/// X ticks: every value when there are few, else 6 evenly spaced.
fn ticks(x: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = x.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    if v.len() <= 11 {
        return v;
    }
    let (a, b) = range(&v);
    (0..6).map(|i| a + (b - a) * i as f64 / 5.0).collect()
}

/// CRC-32 (IEEE) of `data`.
fn crc32(chunks: &[&[u8]]) -> u32 {
    let mut table = [0u32; 256];
    for (i, t) in table.iter_mut().enumerate() {
        let mut c = i as u32;
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
        *t = c;
    }
    let mut crc = 0xFFFF_FFFFu32;
    for d in chunks {
        for &b in *d {
            crc = table[((crc ^ b as u32) & 0xFF) as usize] ^ (crc >> 8);
        }
    }
    crc ^ 0xFFFF_FFFF
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    out.extend_from_slice(&crc32(&[kind, data]).to_be_bytes());
}

/// zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let mut blocks = data.chunks(65_535).peekable();
    if blocks.peek().is_none() {
        out.extend_from_slice(&[1, 0, 0, 0xFF, 0xFF]);
    }
    while let Some(b) = blocks.next() {
        out.push(u8::from(blocks.peek().is_none()));
        let len = b.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(b);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &x in data {
        a = (a + x as u32) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

/// PNG of a `w × h` image of [`PALETTE`] indices (4 bits per pixel).
fn encode_png(w: usize, h: usize, px: &[u8]) -> Vec<u8> {
    let mut out = vec![0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A];
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(w as u32).to_be_bytes());
    ihdr.extend_from_slice(&(h as u32).to_be_bytes());
    ihdr.extend_from_slice(&[4, 3, 0, 0, 0]); // 4-bit, indexed, deflate, filter 0, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    let plte: Vec<u8> = PALETTE.iter().flatten().copied().collect();
    chunk(&mut out, b"PLTE", &plte);
    let row_bytes = w.div_ceil(2);
    let mut raw = Vec::with_capacity(h * (row_bytes + 1));
    for y in 0..h {
        raw.push(0); // filter: none
        let row = &px[y * w..(y + 1) * w];
        for pair in row.chunks(2) {
            let hi = pair[0] & 0x0F;
            let lo = pair.get(1).map_or(0, |p| p & 0x0F);
            raw.push((hi << 4) | lo);
        }
    }
    chunk(&mut out, b"IDAT", &zlib_stored(&raw));
    chunk(&mut out, b"IEND", &[]);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn crc_and_labels() {
        // The CRC of the IEND chunk type is a well-known constant.
        assert_eq!(crc32(&[b"IEND"]), 0xAE42_6082);
        assert_eq!(tick_label(0.05), "0.05");
        assert_eq!(tick_label(12.5), "12.5");
        assert_eq!(tick_label(-0.1), "-0.1");
        assert_eq!(tick_label(1.0e-5), "1.00e-5");
    }

    #[test]
    fn png_structure() {
        let c = Chart {
            title: "t".into(),
            x_label: "x".into(),
            x: vec![0.0, 1.0],
            panels: vec![Panel {
                title: "p".into(),
                values: vec![0.0, 1.0],
            }],
        };
        let png = c.to_png();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        assert_eq!(
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            W as u32
        );
        assert_eq!(&png[png.len() - 8..png.len() - 4], b"IEND");
    }
}
