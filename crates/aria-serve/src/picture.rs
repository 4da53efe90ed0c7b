//! Pictures of a result: waveform and spectrogram PNGs.
//!
//! Both take interleaved samples as the codec writes them and return a complete PNG file (8-bit
//! RGB). Sizes are clamped to `1..=MAX_SIDE` pixels so that a request cannot ask for an absurd
//! allocation; a channel count of 0 is read as 1, and non-finite samples count as silence.

use realfft::RealFftPlanner;

/// The largest width or height drawn; larger requests are clamped to it.
pub const MAX_SIDE: u32 = 4096;

/// Background of both pictures (matches the page's panel colour).
const BACKGROUND: [u8; 3] = [17, 21, 34];
/// The zero line and the lane separators of the waveform.
const AXIS: [u8; 3] = [52, 60, 86];
/// The min..max envelope of the waveform.
const PEAK: [u8; 3] = [86, 118, 230];
/// The ±RMS band drawn over the envelope.
const RMS: [u8; 3] = [168, 190, 255];

/// The dynamic range of the spectrogram: magnitudes this far below the loudest are black.
const FLOOR_DB: f32 = 90.0;

/// Colour-map control points (position, RGB), dark to bright, close to "magma".
const COLORMAP: [(f32, [u8; 3]); 6] = [
    (0.0, [0, 0, 4]),
    (0.2, [40, 11, 84]),
    (0.4, [114, 31, 129]),
    (0.6, [183, 55, 121]),
    (0.8, [252, 137, 97]),
    (1.0, [252, 253, 191]),
];

/// An RGB raster.
struct Image {
    w: usize,
    h: usize,
    px: Vec<u8>,
}

impl Image {
    fn new(w: u32, h: u32, fill: [u8; 3]) -> Self {
        let (w, h) = (w as usize, h as usize);
        let mut px = Vec::with_capacity(w * h * 3);
        for _ in 0..w * h {
            px.extend_from_slice(&fill);
        }
        Image { w, h, px }
    }

    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.w && y < self.h {
            let i = (y * self.w + x) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    /// A vertical run from row `y0` to row `y1` inclusive (either order).
    fn vline(&mut self, x: usize, y0: usize, y1: usize, c: [u8; 3]) {
        let (a, b) = if y0 <= y1 { (y0, y1) } else { (y1, y0) };
        for y in a..=b.min(self.h.saturating_sub(1)) {
            self.set(x, y, c);
        }
    }

    fn hline(&mut self, y: usize, c: [u8; 3]) {
        for x in 0..self.w {
            self.set(x, y, c);
        }
    }

    fn to_png(&self) -> Vec<u8> {
        encode_rgb(self.w as u32, self.h as u32, &self.px)
    }
}

/// PNG bytes of an RGB raster. Writing into memory cannot fail for a raster whose length matches
/// its size, which every caller here guarantees; should the encoder still refuse, the result is
/// empty (which no PNG decoder accepts) rather than a panic.
fn encode_rgb(w: u32, h: u32, px: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let written = (|| -> Result<(), png::EncodingError> {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Fast);
        let mut writer = enc.write_header()?;
        writer.write_image_data(px)?;
        writer.finish()
    })();
    match written {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

fn clamp_side(v: u32) -> u32 {
    v.clamp(1, MAX_SIDE)
}

fn finite(v: f32) -> f32 {
    if v.is_finite() {
        v
    } else {
        0.0
    }
}

/// A waveform PNG of interleaved `samples` (`channels` channels), `width`×`height` pixels.
///
/// Each channel gets a horizontal lane of its own, top to bottom. Every pixel column covers an
/// equal share of the frames and shows their min..max envelope, with the ±RMS band drawn
/// brighter over it; values are clipped to [-1, 1].
pub fn waveform_png(samples: &[f32], channels: usize, width: u32, height: u32) -> Vec<u8> {
    let (width, height) = (clamp_side(width), clamp_side(height));
    let channels = channels.max(1);
    let frames = samples.len() / channels;
    let mut img = Image::new(width, height, BACKGROUND);
    let h = height as usize;
    // One lane per channel while there are rows for them; extra channels are not drawn.
    let lanes = channels.min(h);
    // Lane c spans rows [top(c), top(c + 1)).
    let top = |c: usize| c * h / lanes;
    for c in 1..lanes {
        img.hline(top(c), AXIS);
    }
    for c in 0..lanes {
        let (y0, y1) = (top(c), top(c + 1));
        // Leave the lane's first row to the separator when the lane has rows to spare.
        let inner0 = if c > 0 && y1 - y0 > 1 { y0 + 1 } else { y0 };
        let lane = (y1 - inner0).max(1) as f32;
        let row = |v: f32| -> usize {
            let v = v.clamp(-1.0, 1.0);
            let y = inner0 as f32 + (1.0 - v) * 0.5 * (lane - 1.0);
            (y.round() as usize).clamp(inner0, y1 - 1)
        };
        img.hline(row(0.0), AXIS);
        if frames == 0 {
            continue;
        }
        for x in 0..width as usize {
            let f0 = x * frames / width as usize;
            let f1 = ((x + 1) * frames / width as usize).max(f0 + 1).min(frames);
            if f0 >= frames {
                continue;
            }
            let (mut lo, mut hi, mut sq) = (f32::INFINITY, f32::NEG_INFINITY, 0.0f64);
            for f in f0..f1 {
                let v = finite(samples[f * channels + c]);
                lo = lo.min(v);
                hi = hi.max(v);
                sq += f64::from(v) * f64::from(v);
            }
            let rms = (sq / (f1 - f0) as f64).sqrt() as f32;
            img.vline(x, row(hi), row(lo), PEAK);
            // The ±RMS band, clipped to the envelope.
            let (band_hi, band_lo) = (rms.min(hi), (-rms).max(lo));
            if band_hi >= band_lo {
                img.vline(x, row(band_hi), row(band_lo), RMS);
            }
        }
    }
    img.to_png()
}

/// The colour of a level in [0, 1].
fn colormap(t: f32) -> [u8; 3] {
    let t = if t.is_finite() {
        t.clamp(0.0, 1.0)
    } else {
        0.0
    };
    for pair in COLORMAP.windows(2) {
        let ((a, ca), (b, cb)) = (pair[0], pair[1]);
        if t <= b {
            let u = (t - a) / (b - a);
            let mut out = [0u8; 3];
            for k in 0..3 {
                let v = f32::from(ca[k]) + u * (f32::from(cb[k]) - f32::from(ca[k]));
                out[k] = v.round().clamp(0.0, 255.0) as u8;
            }
            return out;
        }
    }
    COLORMAP[COLORMAP.len() - 1].1
}

/// The FFT length for a picture `height` rows tall: at least twice the rows (so that every row
/// has a bin of its own), at least 1024 for useful frequency resolution, a power of two.
fn fft_len(height: u32) -> usize {
    (2 * height as usize).max(1024).next_power_of_two()
}

/// The linear-frequency row (0 = top, `height - 1` = 0 Hz) on which FFT bin `bin` of an
/// `n_fft`-point transform lands.
fn row_of_bin(bin: usize, n_fft: usize, height: usize) -> usize {
    let nyquist_bin = n_fft / 2;
    let r = (bin as f64 / nyquist_bin as f64 * (height as f64 - 1.0)).round() as usize;
    height - 1 - r.min(height - 1)
}

/// A spectrogram PNG of interleaved `samples` at `sample_rate`, `width`×`height` pixels.
///
/// The channels are averaged, a Hann-windowed STFT is taken with one frame centred on each pixel
/// column, and the log magnitude (dB relative to the loudest bin, `FLOOR_DB` of range) is drawn
/// through a magma-like colour map. Frequency runs linearly from 0 Hz at the bottom to
/// `sample_rate / 2` at the top; where several bins share a row the loudest is shown.
pub fn spectrogram_png(
    samples: &[f32],
    channels: usize,
    sample_rate: u32,
    width: u32,
    height: u32,
) -> Vec<u8> {
    // The rate only labels the axis; the picture always spans 0..Nyquist.
    let _ = sample_rate;
    let (width, height) = (clamp_side(width), clamp_side(height));
    let channels = channels.max(1);
    let frames = samples.len() / channels;
    let (w, h) = (width as usize, height as usize);
    if frames == 0 {
        return Image::new(width, height, colormap(0.0)).to_png();
    }
    let mono: Vec<f32> = (0..frames)
        .map(|f| {
            let s: f32 = samples[f * channels..(f + 1) * channels]
                .iter()
                .map(|&v| finite(v))
                .sum();
            s / channels as f32
        })
        .collect();

    let n_fft = fft_len(height);
    let window: Vec<f32> = (0..n_fft)
        .map(|i| {
            let p = std::f32::consts::TAU * i as f32 / n_fft as f32;
            0.5 - 0.5 * p.cos()
        })
        .collect();
    let fft = RealFftPlanner::<f32>::new().plan_fft_forward(n_fft);
    let mut input = fft.make_input_vec();
    let mut spectrum = fft.make_output_vec();
    let mut scratch = fft.make_scratch_vec();

    // Power per (row, column), the loudest bin of each row.
    let mut power = vec![0.0f32; w * h];
    for x in 0..w {
        let centre = ((x as f64 + 0.5) * frames as f64 / w as f64) as i64;
        let start = centre - (n_fft / 2) as i64;
        for (i, slot) in input.iter_mut().enumerate() {
            let t = start + i as i64;
            *slot = if t >= 0 && (t as usize) < frames {
                mono[t as usize] * window[i]
            } else {
                0.0
            };
        }
        if fft
            .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
            .is_err()
        {
            // Only a length mismatch fails, and the buffers come from the plan itself.
            continue;
        }
        for (bin, c) in spectrum.iter().enumerate() {
            let p = c.norm_sqr();
            let cell = &mut power[row_of_bin(bin, n_fft, h) * w + x];
            *cell = cell.max(p);
        }
    }
    // fft_len gives at least as many bins as rows, so every row has received one.
    let peak = power.iter().copied().fold(0.0f32, f32::max);
    let mut img = Image::new(width, height, colormap(0.0));
    if peak > 0.0 {
        for y in 0..h {
            for x in 0..w {
                let db = 10.0 * (power[y * w + x] / peak).max(1e-30).log10();
                img.set(x, y, colormap(1.0 + db / FLOOR_DB));
            }
        }
    }
    img.to_png()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes a PNG into (width, height, RGB bytes).
    fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = dec.read_info().expect("a valid PNG header");
        let mut buf = vec![0; reader.output_buffer_size().expect("a known size")];
        let info = reader.next_frame(&mut buf).expect("a decodable frame");
        assert_eq!(info.color_type, png::ColorType::Rgb);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    fn px(img: &(u32, u32, Vec<u8>), x: u32, y: u32) -> [u8; 3] {
        let i = ((y * img.0 + x) * 3) as usize;
        [img.2[i], img.2[i + 1], img.2[i + 2]]
    }

    fn luma(c: [u8; 3]) -> u32 {
        u32::from(c[0]) * 3 + u32::from(c[1]) * 6 + u32::from(c[2])
    }

    fn sine(freq: f32, rate: u32, frames: usize, channels: usize, amp: f32) -> Vec<f32> {
        let mut out = Vec::with_capacity(frames * channels);
        for f in 0..frames {
            let v = amp * (std::f32::consts::TAU * freq * f as f32 / rate as f32).sin();
            out.extend(std::iter::repeat_n(v, channels));
        }
        out
    }

    #[test]
    fn waveform_decodes_at_the_asked_size() {
        let s = sine(440.0, 44_100, 44_100, 2, 0.5);
        let img = decode(&waveform_png(&s, 2, 320, 120));
        assert_eq!((img.0, img.1), (320, 120));
        assert_eq!(img.2.len(), 320 * 120 * 3);
    }

    #[test]
    fn waveform_envelope_follows_the_amplitude() {
        // Left channel full scale, right channel silent: the left lane is covered top to
        // bottom in some column, the right lane only at its zero line.
        let frames = 8_000;
        let mut s = Vec::with_capacity(frames * 2);
        for f in 0..frames {
            s.push(if f % 2 == 0 { 1.0 } else { -1.0 });
            s.push(0.0);
        }
        let img = decode(&waveform_png(&s, 2, 100, 101));
        // Left lane rows 0..50: envelope (and RMS band, equal to it here) reaches both edges.
        assert_eq!(px(&img, 50, 0), RMS);
        assert_eq!(px(&img, 50, 49), RMS);
        // Right lane rows 51..101: its top and bottom rows stay background.
        assert_eq!(px(&img, 50, 52), BACKGROUND);
        assert_eq!(px(&img, 50, 100), BACKGROUND);
        // A half-amplitude signal reaches about a quarter of the lane from the top.
        let half: Vec<f32> = s.iter().map(|v| v * 0.5).collect();
        let img = decode(&waveform_png(&half, 2, 100, 101));
        let first_lit = (0..50)
            .find(|&y| px(&img, 50, y) != BACKGROUND)
            .expect("lit");
        assert!((11..=14).contains(&first_lit), "first lit row {first_lit}");
    }

    #[test]
    fn waveform_survives_degenerate_input() {
        for (s, ch, w, h) in [
            (vec![], 2, 64, 32),
            (vec![f32::NAN, f32::INFINITY, -f32::INFINITY, 3.0], 1, 4, 4),
            (vec![0.1; 7], 0, 0, 0),
            (vec![0.2; 5], 3, 1, 2),
            (vec![0.3; 3], 2, 9_999_999, 1),
        ] {
            let img = decode(&waveform_png(&s, ch, w, h));
            assert_eq!(img.0, clamp_side(w));
            assert_eq!(img.1, clamp_side(h));
        }
    }

    #[test]
    fn spectrogram_decodes_at_the_asked_size() {
        let s = sine(1_000.0, 44_100, 22_050, 2, 0.5);
        let img = decode(&spectrogram_png(&s, 2, 44_100, 256, 128));
        assert_eq!((img.0, img.1), (256, 128));
    }

    #[test]
    fn a_sine_lights_the_row_of_its_frequency() {
        let rate = 44_100;
        let (w, h) = (64u32, 200u32);
        for freq in [1_000.0f32, 5_512.5, 15_000.0] {
            let s = sine(freq, rate, rate as usize, 2, 0.3);
            let img = decode(&spectrogram_png(&s, 2, rate, w, h));
            let expect = (h - 1) as f32 - (freq / (rate as f32 / 2.0) * (h - 1) as f32);
            for x in [8, w / 2, w - 8] {
                let brightest = (0..h).max_by_key(|&y| luma(px(&img, x, y))).expect("rows");
                assert!(
                    (brightest as f32 - expect).abs() <= 1.0,
                    "{freq} Hz at column {x}: brightest row {brightest}, expected {expect}"
                );
                // The peak is near the top of the colour map; far rows are dark.
                assert!(luma(px(&img, x, brightest)) > luma(COLORMAP[4].1));
                let far = if brightest > h / 2 { 5 } else { h - 5 };
                assert!(
                    luma(px(&img, x, far)) < luma(COLORMAP[2].1),
                    "row {far} not dark"
                );
            }
        }
    }

    #[test]
    fn spectrogram_of_silence_is_uniform() {
        let img = decode(&spectrogram_png(&vec![0.0; 4_000], 1, 44_100, 40, 30));
        assert!(img.2.chunks(3).all(|c| c == colormap(0.0)));
        let img = decode(&spectrogram_png(&[], 2, 44_100, 0, 0));
        assert_eq!((img.0, img.1), (1, 1));
    }

    #[test]
    fn colormap_is_monotone_in_brightness() {
        let mut last = 0;
        for i in 0..=100 {
            let l = luma(colormap(i as f32 / 100.0));
            assert!(l >= last, "level {i}");
            last = l;
        }
        assert_eq!(colormap(f32::NAN), colormap(0.0));
    }
}
