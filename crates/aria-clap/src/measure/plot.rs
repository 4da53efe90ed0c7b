//! Self-contained SVG plots (no fonts, scripts or external references): overlaid histograms
//! and per-measure bars against a baseline.

use std::fmt::Write as _;

use crate::{ClapError, Result};

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 460.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 56.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];
const BASELINE_COLOR: &str = "#9a9a9a";
const FONT: &str = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\"";

/// Overlaid histograms of several series on shared bins, as a standalone SVG document.
///
/// Each series is `(name, values)`; non-finite values are skipped. The bins (between 5 and 50,
/// about `√n` of the largest series) span the range of all finite values; each series is drawn
/// as translucent bars with a solid outline, its mean as a dashed vertical line, and a legend
/// entry `name (n, mean)`. Axes have ticks and labels (`x_label` below, "count" at the side).
/// With no finite value at all the plot says "no data".
pub fn svg_histogram(title: &str, series: &[(&str, &[f64])], x_label: &str) -> String {
    let bottom = 64.0;
    let (pw, ph) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - bottom);
    let mut svg = open_svg(title, HEIGHT);
    let finite: Vec<Vec<f64>> = series
        .iter()
        .map(|(_, v)| v.iter().copied().filter(|x| x.is_finite()).collect())
        .collect();
    let all = finite.iter().flatten();
    let lo = all.clone().fold(f64::INFINITY, |a, &b| a.min(b));
    let hi = all.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
    if !lo.is_finite() {
        frame(&mut svg, pw, ph);
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"16\" {FONT} fill=\"#666\">no data</text>",
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
        svg.push_str("</svg>\n");
        return svg;
    }
    let (lo, hi) = if hi > lo {
        (lo, hi)
    } else {
        let pad = if lo == 0.0 { 0.5 } else { lo.abs() * 0.05 };
        (lo - pad, hi + pad)
    };
    let largest = finite.iter().map(Vec::len).max().unwrap_or(0);
    let bins = ((largest as f64).sqrt().ceil() as usize).clamp(5, 50);
    let width = (hi - lo) / bins as f64;
    let counts: Vec<Vec<usize>> = finite
        .iter()
        .map(|v| {
            let mut c = vec![0usize; bins];
            for &x in v {
                let b = (((x - lo) / width) as usize).min(bins - 1);
                c[b] += 1;
            }
            c
        })
        .collect();
    let max_count = counts.iter().flatten().copied().max().unwrap_or(0).max(1);

    let xt = Ticks::new(lo, hi, 7);
    let (x0, x1) = (xt.first.min(lo), xt.last.max(hi));
    // Headroom so that the legend (top right) clears the tallest bar.
    let room = ph / (ph - legend_height(series.len()) - 16.0);
    let yt = Ticks::new(0.0, max_count as f64 * room, 6);
    let y1 = yt.last.max(max_count as f64);
    let sx = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| TOP + ph - y / y1 * ph;

    grid_and_axes(&mut svg, &xt, &yt, sx, sy, pw, ph, x_label, "count");
    for (i, c) in counts.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut outline = format!("M{:.2},{:.2}", sx(lo), sy(0.0));
        for (b, &n) in c.iter().enumerate() {
            let (ea, eb) = (lo + b as f64 * width, lo + (b + 1) as f64 * width);
            let _ = write!(
                outline,
                " L{:.2},{:.2} L{:.2},{:.2}",
                sx(ea),
                sy(n as f64),
                sx(eb),
                sy(n as f64)
            );
            if n > 0 {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{:.2}\" y=\"{:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{color}\" fill-opacity=\"0.3\"/>",
                    sx(ea),
                    sy(n as f64),
                    sx(eb) - sx(ea),
                    sy(0.0) - sy(n as f64)
                );
            }
        }
        let _ = write!(outline, " L{:.2},{:.2}", sx(hi), sy(0.0));
        let _ = writeln!(
            svg,
            "<path d=\"{outline}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"1.6\"/>"
        );
        if !finite[i].is_empty() {
            let mean = finite[i].iter().sum::<f64>() / finite[i].len() as f64;
            let _ = writeln!(
                svg,
                "<line x1=\"{x:.2}\" y1=\"{:.2}\" x2=\"{x:.2}\" y2=\"{:.2}\" stroke=\"{color}\" stroke-width=\"1.4\" stroke-dasharray=\"5,4\"/>",
                TOP,
                TOP + ph,
                x = sx(mean)
            );
        }
    }
    let entries: Vec<(String, &str)> = series
        .iter()
        .zip(&finite)
        .enumerate()
        .map(|(i, ((name, _), v))| {
            let text = if v.is_empty() {
                format!("{name} (no data)")
            } else {
                let mean = v.iter().sum::<f64>() / v.len() as f64;
                format!("{name} (n={}, mean={})", v.len(), fmt_sig(mean))
            };
            (text, COLORS[i % COLORS.len()])
        })
        .collect();
    legend(&mut svg, &entries, LEFT + pw);
    svg.push_str("</svg>\n");
    svg
}

/// Bars of per-measure values, each beside its baseline bar (grey) when `baseline` is given,
/// with the value printed above each bar and `×ratio` (value / baseline) above each pair, as a
/// standalone SVG document.
///
/// A non-finite value draws no bar (`n/a`); a non-finite baseline entry draws no baseline bar,
/// so measures without a baseline can share a plot with those that have one (pass `NaN`). The value axis spans 0 and every
/// finite value. Errors: no labels, or `values` / `baseline` not one per label.
pub fn svg_bars(
    title: &str,
    labels: &[&str],
    values: &[f64],
    baseline: Option<&[f64]>,
) -> Result<String> {
    if labels.is_empty() {
        return Err(ClapError::invalid("svg_bars labels", "no bars to draw"));
    }
    if values.len() != labels.len() || baseline.is_some_and(|b| b.len() != labels.len()) {
        return Err(ClapError::invalid(
            "svg_bars",
            format!(
                "{} labels but {} values and {} baseline values",
                labels.len(),
                values.len(),
                baseline.map_or(0, <[f64]>::len)
            ),
        ));
    }
    let bottom = 120.0;
    let height = HEIGHT + 40.0;
    let (pw, ph) = (WIDTH - LEFT - RIGHT, height - TOP - bottom);
    let mut svg = open_svg(title, height);
    let finite = values
        .iter()
        .chain(baseline.unwrap_or(&[]))
        .copied()
        .filter(|v| v.is_finite());
    let lo = finite.clone().fold(0.0f64, f64::min);
    let hi = finite.fold(0.0f64, f64::max);
    let hi = if hi > lo { hi } else { lo + 1.0 };
    let reserve = if baseline.is_some() {
        legend_height(2) + 34.0
    } else {
        24.0
    };
    let room = ph / (ph - reserve);
    let yt = Ticks::new(lo, lo + (hi - lo) * room, 6);
    let (y0, y1) = (yt.first.min(lo), yt.last.max(hi));
    let sy = |y: f64| TOP + ph - (y - y0) / (y1 - y0) * ph;
    let xt = Ticks::empty();
    grid_and_axes(&mut svg, &xt, &yt, |x| x, sy, pw, ph, "", "value");
    let groups = labels.len() as f64;
    let gw = pw / groups;
    let bw = if baseline.is_some() {
        gw * 0.34
    } else {
        gw * 0.5
    };
    for (i, (&label, &v)) in labels.iter().zip(values).enumerate() {
        let cx = LEFT + gw * (i as f64 + 0.5);
        let color = COLORS[0];
        let b = baseline.map(|b| b[i]).filter(|b| b.is_finite());
        let vx = if b.is_some() {
            cx - bw - 2.0
        } else {
            cx - bw / 2.0
        };
        bar(&mut svg, vx, bw, v, color, &sy);
        if let Some(b) = b {
            bar(&mut svg, cx + 2.0, bw, b, BASELINE_COLOR, &sy);
            if v.is_finite() && b != 0.0 {
                let top = sy(v.max(b).max(0.0)) - 20.0;
                let _ = writeln!(
                    svg,
                    "<text x=\"{cx:.2}\" y=\"{top:.2}\" text-anchor=\"middle\" font-size=\"12\" font-weight=\"bold\" {FONT} fill=\"#333\">×{}</text>",
                    fmt_sig(v / b)
                );
            }
        }
        let ly = TOP + ph + 14.0;
        let _ = writeln!(
            svg,
            "<text x=\"{cx:.2}\" y=\"{ly:.2}\" text-anchor=\"end\" font-size=\"12\" {FONT} fill=\"#222\" transform=\"rotate(-30 {cx:.2} {ly:.2})\">{}</text>",
            escape(&truncate(label, 28))
        );
    }
    if baseline.is_some() {
        let entries = [
            ("measure".to_string(), COLORS[0]),
            ("baseline (re-seed spread)".to_string(), BASELINE_COLOR),
        ];
        legend(&mut svg, &entries, LEFT + pw);
    }
    svg.push_str("</svg>\n");
    Ok(svg)
}

/// One bar from 0 to `v` with its value printed beyond its end.
fn bar(svg: &mut String, x: f64, w: f64, v: f64, color: &str, sy: &dyn Fn(f64) -> f64) {
    let cx = x + w / 2.0;
    if !v.is_finite() {
        let _ = writeln!(
            svg,
            "<text x=\"{cx:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"11\" {FONT} fill=\"#888\">n/a</text>",
            sy(0.0) - 4.0
        );
        return;
    }
    let (top, bot) = (sy(v.max(0.0)), sy(v.min(0.0)));
    let _ = writeln!(
        svg,
        "<rect x=\"{x:.2}\" y=\"{top:.2}\" width=\"{w:.2}\" height=\"{:.2}\" fill=\"{color}\" fill-opacity=\"0.85\"/>",
        (bot - top).max(0.5)
    );
    let ty = if v >= 0.0 { top - 4.0 } else { bot + 13.0 };
    let _ = writeln!(
        svg,
        "<text x=\"{cx:.2}\" y=\"{ty:.2}\" text-anchor=\"middle\" font-size=\"11\" {FONT} fill=\"#222\">{}</text>",
        fmt_sig(v)
    );
}

fn open_svg(title: &str, height: f64) -> String {
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"32\" text-anchor=\"middle\" font-size=\"18\" font-weight=\"bold\" {FONT} fill=\"#111\">{}</text>",
        WIDTH / 2.0,
        escape(title)
    );
    s
}

fn frame(svg: &mut String, pw: f64, ph: f64) {
    let _ = writeln!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{pw:.2}\" height=\"{ph:.2}\" fill=\"none\" stroke=\"#333\"/>"
    );
}

/// Grid lines, tick marks and labels on both axes, the frame and the axis labels.
#[allow(clippy::too_many_arguments)]
fn grid_and_axes(
    svg: &mut String,
    xt: &Ticks,
    yt: &Ticks,
    sx: impl Fn(f64) -> f64,
    sy: impl Fn(f64) -> f64,
    pw: f64,
    ph: f64,
    x_label: &str,
    y_label: &str,
) {
    let (xa, xb, ya, yb) = (LEFT, LEFT + pw, TOP, TOP + ph);
    for &t in &yt.values {
        let y = sy(t);
        if y < ya - 0.5 || y > yb + 0.5 {
            continue;
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{xa:.2}\" y1=\"{y:.2}\" x2=\"{xb:.2}\" y2=\"{y:.2}\" stroke=\"#e4e4e4\"/>\n<line x1=\"{:.2}\" y1=\"{y:.2}\" x2=\"{xa:.2}\" y2=\"{y:.2}\" stroke=\"#333\"/>\n<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"end\" font-size=\"12\" {FONT} fill=\"#222\">{}</text>",
            xa - 5.0,
            xa - 8.0,
            y + 4.0,
            yt.label(t)
        );
    }
    for &t in &xt.values {
        let x = sx(t);
        if x < xa - 0.5 || x > xb + 0.5 {
            continue;
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.2}\" y1=\"{ya:.2}\" x2=\"{x:.2}\" y2=\"{yb:.2}\" stroke=\"#eeeeee\"/>\n<line x1=\"{x:.2}\" y1=\"{yb:.2}\" x2=\"{x:.2}\" y2=\"{:.2}\" stroke=\"#333\"/>\n<text x=\"{x:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"12\" {FONT} fill=\"#222\">{}</text>",
            yb + 5.0,
            yb + 19.0,
            xt.label(t)
        );
    }
    if y0_visible(&sy, ya, yb) {
        let y = sy(0.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{xa:.2}\" y1=\"{y:.2}\" x2=\"{xb:.2}\" y2=\"{y:.2}\" stroke=\"#555\"/>"
        );
    }
    frame(svg, pw, ph);
    if !x_label.is_empty() {
        let _ = writeln!(
            svg,
            "<text x=\"{:.2}\" y=\"{:.2}\" text-anchor=\"middle\" font-size=\"14\" {FONT} fill=\"#111\">{}</text>",
            LEFT + pw / 2.0,
            yb + 44.0,
            escape(x_label)
        );
    }
    let (lx, ly) = (20.0, TOP + ph / 2.0);
    let _ = writeln!(
        svg,
        "<text x=\"{lx}\" y=\"{ly:.2}\" text-anchor=\"middle\" font-size=\"14\" {FONT} fill=\"#111\" transform=\"rotate(-90 {lx} {ly:.2})\">{}</text>",
        escape(y_label)
    );
}

fn y0_visible(sy: &impl Fn(f64) -> f64, ya: f64, yb: f64) -> bool {
    let y = sy(0.0);
    y > ya + 0.5 && y < yb - 0.5
}

/// Legend box in the top-right corner of the plot area; `(text, color)` entries.
fn legend(svg: &mut String, entries: &[(String, &str)], right: f64) {
    if entries.is_empty() {
        return;
    }
    let chars = entries
        .iter()
        .map(|e| e.0.chars().count())
        .max()
        .unwrap_or(0);
    let w = 34.0 + 6.8 * chars as f64;
    let h = legend_height(entries.len());
    let (x, y) = (right - w - 8.0, TOP + 8.0);
    let _ = writeln!(
        svg,
        "<rect x=\"{x:.2}\" y=\"{y:.2}\" width=\"{w:.2}\" height=\"{h:.2}\" fill=\"white\" fill-opacity=\"0.9\" stroke=\"#bbb\"/>"
    );
    for (i, (text, color)) in entries.iter().enumerate() {
        let ey = y + 8.0 + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            "<rect x=\"{:.2}\" y=\"{ey:.2}\" width=\"14\" height=\"14\" fill=\"{color}\" fill-opacity=\"0.7\" stroke=\"{color}\"/>\n<text x=\"{:.2}\" y=\"{:.2}\" font-size=\"12\" {FONT} fill=\"#222\">{}</text>",
            x + 8.0,
            x + 28.0,
            ey + 11.5,
            escape(text)
        );
    }
}

fn legend_height(entries: usize) -> f64 {
    10.0 + 20.0 * entries as f64
}

/// "Nice" tick positions (steps of 1, 2, 2.5 or 5 × 10^k) covering `[lo, hi]`.
struct Ticks {
    values: Vec<f64>,
    first: f64,
    last: f64,
    decimals: usize,
}

impl Ticks {
    fn empty() -> Ticks {
        Ticks {
            values: Vec::new(),
            first: 0.0,
            last: 0.0,
            decimals: 0,
        }
    }

    fn new(lo: f64, hi: f64, target: usize) -> Ticks {
        let range = (hi - lo).max(f64::MIN_POSITIVE);
        let raw = range / target.max(1) as f64;
        let mag = 10f64.powf(raw.log10().floor());
        let m = raw / mag;
        let nice = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .find(|&c| m <= c * (1.0 + 1e-9))
            .unwrap_or(10.0);
        let step = nice * mag;
        let first = (lo / step).floor() * step;
        let last = (hi / step).ceil() * step;
        let count = (((last - first) / step).round() as usize).min(100);
        let values = (0..=count).map(|k| first + k as f64 * step).collect();
        let mut decimals = (-step.log10().floor()).max(0.0) as usize;
        if nice == 2.5 {
            decimals += 1;
        }
        Ticks {
            values,
            first,
            last,
            decimals,
        }
    }

    fn label(&self, v: f64) -> String {
        let s = format!("{:.*}", self.decimals, v);
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            format!("{:.*}", self.decimals, 0.0)
        } else {
            s
        }
    }
}

/// About four significant digits.
fn fmt_sig(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if !(1e-3..1e5).contains(&a) {
        return format!("{v:.3e}");
    }
    let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max - 1).collect();
        t.push('…');
        t
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
