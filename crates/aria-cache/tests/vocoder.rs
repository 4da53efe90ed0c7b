//! The phase vocoder against `librosa.effects.time_stretch` (float64) on test signals
//! (goldens from scripts/cache/vocoder_goldens.py), and the output-length rule.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use aria_cache::vocoder::{stretch_to, stretched_len, time_stretch};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn read_f32(name: &str) -> Vec<f32> {
    let b = std::fs::read(data(name)).unwrap();
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The bound on the relative error (max |Δ| / max |ref|) per case. Measured: 5.3e-8 at worst
/// (tones at rate 1.25; clicks and short signals ≤ 8.5e-15). The FFT picks its butterflies by
/// the CPU's vector extensions at run time; 5e-7 (9.4×) leaves room for another CPU's.
const MAX_REL: f64 = 5e-7;

#[test]
fn matches_librosa_time_stretch() {
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("vocoder_goldens.json")).unwrap())
            .unwrap();
    let cases = m["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 12);
    let mut worst = 0f64;
    for c in cases {
        let rate = c["rate"].as_f64().unwrap();
        let ch = c["channels"].as_u64().unwrap() as usize;
        let x = read_f32(c["input"].as_str().unwrap());
        let want = read_f32(c["output"].as_str().unwrap());
        let n_out = c["output_frames"].as_u64().unwrap() as usize;
        assert_eq!(stretched_len(x.len() / ch, rate), n_out);
        let got = time_stretch(&x, ch, rate).unwrap();
        assert_eq!(got.len(), want.len(), "{c}");
        assert!(got.iter().all(|v| v.is_finite()), "{c}: non-finite output");
        let (mut num, mut den) = (0f64, 0f64);
        for (g, w) in got.iter().zip(&want) {
            num = num.max(f64::from(g - w).abs());
            den = den.max(f64::from(*w).abs());
        }
        let rel = num / den;
        eprintln!(
            "{} rate {rate}: rel err {rel:.2e}",
            c["signal"].as_str().unwrap()
        );
        assert!(rel <= MAX_REL, "{c}: relative error {rel:.3e}");
        worst = worst.max(rel);
    }
    eprintln!("worst relative error vs librosa: {worst:.2e}");
}

#[test]
fn lengths_and_bad_input() {
    // round(n / rate) with Python's half-to-even rounding: 5 / 2 = 2.5 -> 2, 7 / 2 = 3.5 -> 4.
    assert_eq!(stretched_len(5, 2.0), 2);
    assert_eq!(stretched_len(7, 2.0), 4);
    assert_eq!(stretched_len(44_100, 1.25), 35_280);
    let x: Vec<f32> = (0..2 * 3000).map(|i| (i as f32 * 0.01).sin()).collect();
    assert_eq!(time_stretch(&x, 2, 0.75).unwrap().len(), 2 * 4000);
    assert_eq!(stretch_to(&x, 2, 4411).unwrap().len(), 2 * 4411);
    assert_eq!(
        stretch_to(&x, 2, 3000).unwrap(),
        x,
        "same length: unchanged"
    );
    assert!(time_stretch(&x, 2, 0.0).is_err());
    assert!(time_stretch(&x, 2, f64::NAN).is_err());
    assert!(time_stretch(&x[..5], 2, 1.0).is_err());
    assert!(stretch_to(&x, 2, 0).is_err());
}

#[test]
fn ten_seconds_of_stereo_stretch_to_the_rounded_length_timed() {
    let n = 441_000;
    let x: Vec<f32> = (0..2 * n)
        .map(|i| ((i % n) as f32 * 0.0313).sin() * 0.5)
        .collect();
    let t0 = std::time::Instant::now();
    let y = time_stretch(&x, 2, 1.25).unwrap();
    let dt = t0.elapsed();
    eprintln!("10 s stereo at rate 1.25: {:.1} ms", dt.as_secs_f64() * 1e3);
    assert_eq!(y.len(), 2 * 352_800);
}
