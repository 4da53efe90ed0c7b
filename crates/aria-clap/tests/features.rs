//! The CLAP feature extractor against the reference `transformers` `ClapFeatureExtractor`
//! (parity fixtures), and its error paths.
//!
//! Fixtures: `clap-tiny-unfused/features.safetensors` (`rand_trunc.<clip>.*`) and
//! `clap-tiny-fused/features.safetensors` (`fusion.<clip>.*`), each with the waveforms
//! `wave.<clip>` (f32, 48 kHz mono) and `preprocessor_config.json` beside it. Per case:
//! `input_features` (the reference's output for the clip alone, a batch of one), `is_longer`
//! and `draws` (every numpy draw of that call, in order), replayed here.
//!
//! Tolerance: [`MAX_ABS_DB`] on the decibel values (and [`MAX_REL`] of the largest
//! magnitude); the features are computed in f64 and rounded to f32 as in the reference, so
//! the differences left are FFT and summation order before that rounding.

#![allow(clippy::unwrap_used)]

use aria_clap::features::{
    prepare, prepare_at, stack_features, Draw, Draws, FeatureConfig, FeatureExtractor, MelScale,
    Padding, Replay, SeededDraws, Truncation, MAX_SECONDS,
};
use aria_clap::ClapError;
use aria_core::{DType, Tensor, WeightLoader};
use aria_testing::fixtures::{fixture, max_abs_diff, rel_err};

/// Largest absolute difference allowed, in dB.
const MAX_ABS_DB: f32 = 1e-4;
/// Largest difference allowed relative to the largest reference magnitude.
const MAX_REL: f32 = 1e-5;

fn ints(t: &Tensor) -> Vec<i64> {
    match t.dtype() {
        DType::I64 => t.to_vec::<i64>().expect("int64 draws"),
        _ => t
            .to_vec_f32()
            .expect("readable")
            .iter()
            .map(|&v| v as i64)
            .collect(),
    }
}

/// The fixture's recorded draws, rows `[kind, low, high, value]` (kind 0 =
/// `np.random.randint(low, high)`, kind 1 = `np.random.choice(arange(low, high))`, `high`
/// exclusive): each request must ask for exactly the recorded range and kind, and gets the
/// recorded value.
struct Recorded {
    rows: Vec<[i64; 4]>,
    next: usize,
}

impl Recorded {
    fn new(t: &Tensor) -> Self {
        let v = ints(t);
        assert!(
            v.len().is_multiple_of(4),
            "draws: {} values, not rows of 4",
            v.len()
        );
        let rows = v.chunks(4).map(|r| [r[0], r[1], r[2], r[3]]).collect();
        Recorded { rows, next: 0 }
    }
}

impl Draws for Recorded {
    fn draw(&mut self, what: Draw, low: usize, high: usize) -> aria_clap::Result<usize> {
        let Some(&[kind, lo, hi, v]) = self.rows.get(self.next) else {
            panic!("{what:?}: draw {} was not recorded", self.next);
        };
        let want_kind = match what {
            Draw::CropOffset | Draw::LongerClip => 0,
            Draw::FusionFront | Draw::FusionMiddle | Draw::FusionBack => 1,
        };
        assert_eq!(kind, want_kind, "{what:?}: draw {} kind", self.next);
        assert_eq!(
            (lo, hi - 1),
            (low as i64, high as i64),
            "{what:?}: draw {} range",
            self.next
        );
        self.next += 1;
        Ok(v as usize)
    }
}

fn read_fixture(folder: &str) -> Option<(std::path::PathBuf, WeightLoader)> {
    let dir = fixture(folder)?;
    fixture(&format!("{folder}/features.safetensors"))?;
    let w = WeightLoader::open(&[dir.join("features.safetensors")]).expect("fixture opens");
    Some((dir, w))
}

/// Replays every `<mode>.<clip>.input_features` case of one fixture folder.
fn parity(folder: &str, mode: Truncation) {
    let Some((dir, w)) = read_fixture(folder) else {
        return;
    };
    let mut cfg = FeatureConfig::from_file(dir.join("preprocessor_config.json")).expect("config");
    cfg.truncation = mode;
    let fe = FeatureExtractor::new(cfg).expect("extractor");
    let prefix = format!("{}.", mode.name());
    let clips: Vec<String> = w
        .names()
        .iter()
        .filter_map(|n| {
            n.strip_prefix(&prefix)?
                .strip_suffix(".input_features")
                .map(str::to_owned)
        })
        .collect();
    assert!(
        !clips.is_empty(),
        "{folder}: no {prefix}*.input_features cases"
    );
    for clip in clips {
        let case = format!("{prefix}{clip}");
        let wave = w
            .get_any(&format!("wave.{clip}"))
            .unwrap()
            .to_vec_f32()
            .unwrap();
        let want_t = w.get_any(&format!("{case}.input_features")).unwrap();
        let want = want_t.to_vec_f32().unwrap();
        let want_longer: Vec<bool> = ints(&w.get_any(&format!("{case}.is_longer")).unwrap())
            .iter()
            .map(|&v| v != 0)
            .collect();
        let draws = w.get_any(&format!("{case}.draws")).unwrap();

        let mut rec = Recorded::new(&draws);
        let (got_t, longer) = fe.extract_batch(&[&wave], &mut rec).unwrap();
        assert_eq!(rec.next, rec.rows.len(), "{case}: draws left over");
        assert_eq!(longer, want_longer, "{case}: is_longer");
        assert_eq!(got_t.shape(), want_t.shape(), "{case}: shape");
        let got = got_t.to_vec_f32().unwrap();
        let (abs, rel) = (max_abs_diff(&got, &want), rel_err(&got, &want));
        let exact = got.iter().zip(&want).filter(|(a, b)| a == b).count();
        eprintln!(
            "{case}: {} values, max |Δ| {abs:.3e} dB, relative {rel:.3e}, {:.2}% bit-exact",
            want.len(),
            100.0 * exact as f64 / want.len() as f64
        );
        assert!(
            abs <= MAX_ABS_DB,
            "{case}: max |Δ| {abs:e} dB > {MAX_ABS_DB:e}"
        );
        assert!(
            rel <= MAX_REL,
            "{case}: relative error {rel:e} > {MAX_REL:e}"
        );

        // The library's value-only replay and the single-clip entry point agree.
        let values: Vec<i64> = rec.rows.iter().map(|r| r[3]).collect();
        let mut replay = Replay::from_i64(&values).unwrap();
        let one = fe.extract(&wave, &mut replay).unwrap();
        assert_eq!(one.input_features, got, "{case}: extract vs extract_batch");
    }
}

#[test]
fn filter_banks_match_reference() {
    let Some((dir, w)) = read_fixture("clap-tiny-unfused") else {
        return;
    };
    let cfg = FeatureConfig::from_file(dir.join("preprocessor_config.json")).expect("config");
    let fe = FeatureExtractor::new(cfg).unwrap();
    for (name, scale) in [
        ("mel_filters", MelScale::Htk),
        ("mel_filters_slaney", MelScale::Slaney),
    ] {
        let want_t = w.get_any(name).unwrap();
        assert_eq!(want_t.shape(), [513, 64], "{name}");
        let want = want_t.to_vec_f32().unwrap();
        let got: Vec<f32> = fe.filter_bank(scale).iter().map(|&v| v as f32).collect();
        let rel = rel_err(&got, &want);
        eprintln!("{name}: relative error {rel:.3e} (f64 bank rounded to f32)");
        assert!(rel <= 1e-7, "{name}: relative error {rel:e}");
    }
}

#[test]
fn rand_trunc_matches_reference() {
    parity("clap-tiny-unfused", Truncation::RandTrunc);
}

#[test]
fn fusion_matches_reference() {
    parity("clap-tiny-fused", Truncation::Fusion);
}

fn extractor(truncation: Truncation) -> FeatureExtractor {
    FeatureExtractor::new(FeatureConfig {
        truncation,
        ..FeatureConfig::default()
    })
    .unwrap()
}

fn sine(n: usize, hz: f64, rate: f64) -> Vec<f32> {
    (0..n)
        .map(|i| (0.5 * (std::f64::consts::TAU * hz * i as f64 / rate).sin()) as f32)
        .collect()
}

fn audio_err(r: Result<impl std::fmt::Debug, ClapError>, what_has: &str, reason_has: &str) {
    match r {
        Err(ClapError::Audio { what, reason }) => {
            assert!(what.contains(what_has), "what {what:?} lacks {what_has:?}");
            assert!(
                reason.contains(reason_has),
                "reason {reason:?} lacks {reason_has:?}"
            );
        }
        other => panic!("expected an audio error about {what_has}, got {other:?}"),
    }
}

#[test]
fn bad_audio_is_rejected_naming_the_property() {
    audio_err(prepare(&[], 1, 48_000), "samples", "no samples");
    audio_err(
        prepare(&[0.0, f32::NAN, 0.0, 0.0], 2, 48_000),
        "samples",
        "NaN",
    );
    audio_err(prepare(&[0.0, f32::INFINITY], 1, 48_000), "samples", "inf");
    audio_err(prepare(&[0.0; 4], 0, 48_000), "channels", "0");
    audio_err(prepare(&[0.0; 5], 2, 48_000), "samples", "2 channels");
    audio_err(prepare(&[0.0; 4], 1, 0), "sample rate", "0 Hz");
    audio_err(prepare(&[0.0; 4], 1, 999), "sample rate", "999 Hz");
    audio_err(prepare(&[0.0; 4], 1, 3_999), "sample rate", "3999 Hz");
    audio_err(prepare(&[0.0; 4], 1, 400_000), "sample rate", "400000 Hz");
    audio_err(
        prepare_at(&[0.0; 4], 1, 48_000, 10),
        "target sample rate",
        "10 Hz",
    );

    let fe = extractor(Truncation::Fusion);
    let mut d = SeededDraws::new(1);
    audio_err(fe.extract(&[], &mut d), "waveform", "no samples");
    audio_err(
        fe.extract(&[0.0, f32::NAN], &mut d),
        "waveform",
        "sample 1 is NaN",
    );
    audio_err(
        fe.extract_batch(&[&[0.5], &[]], &mut d),
        "clip 1",
        "no samples",
    );
}

fn resident_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

#[test]
fn an_over_long_clip_is_rejected_before_any_work() {
    // 2 h of stereo at 4 kHz (the lowest rate accepted): 58 M zero samples, mapped lazily and
    // never written, with a NaN at the very end. The bound must fire first (not the NaN scan),
    // and nothing clip-sized may be written (a mixdown would touch 115 MB).
    let rate = 4000u32;
    let frames = 2 * 3600 * rate as usize;
    let mut samples = vec![0f32; 2 * frames];
    if let Some(last) = samples.last_mut() {
        *last = f32::NAN;
    }
    let before = resident_bytes();
    let start = std::time::Instant::now();
    audio_err(prepare(&samples, 2, rate), "length", "7200.0 s");
    assert!(
        start.elapsed().as_millis() < 500,
        "rejection took {:?}",
        start.elapsed()
    );
    if let (Some(a), Some(b)) = (before, resident_bytes()) {
        assert!(
            b.saturating_sub(a) < 64 << 20,
            "resident memory grew by {} B",
            b - a
        );
    }

    let fe = FeatureExtractor::new(FeatureConfig {
        sampling_rate: rate,
        hop_length: 10,
        fft_window_size: 32,
        ..FeatureConfig::default()
    })
    .unwrap();
    audio_err(
        fe.extract(&samples[..frames], &mut SeededDraws::new(0)),
        "waveform",
        &format!("{MAX_SECONDS} s bound"),
    );
}

#[test]
fn odd_rates_are_resampled_to_48k() {
    for rate in [22_050u32, 8000, 44_100] {
        let n = rate as usize; // one second
        let mono = sine(n, 1000.0, f64::from(rate));
        // stereo: the mean of the channels is the sine
        let stereo: Vec<f32> = mono.iter().flat_map(|&v| [v + 0.25, v - 0.25]).collect();
        let out = prepare(&stereo, 2, rate).unwrap();
        assert_eq!(
            out.len(),
            (n * 48_000).div_ceil(rate as usize),
            "{rate} Hz length"
        );
        assert!(out.iter().all(|v| v.is_finite()));
        // 1 kHz stays 1 kHz: ~2000 sign changes in one second
        let crossings = out
            .windows(2)
            .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
            .count();
        assert!(
            (1990..=2010).contains(&crossings),
            "{rate} Hz: {crossings} crossings"
        );
        let peak = out[4800..43_200].iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!((peak - 0.5).abs() < 0.02, "{rate} Hz: peak {peak}");
    }
    // 48 kHz mono passes through unchanged
    let x = sine(480, 440.0, 48_000.0);
    assert_eq!(prepare(&x, 1, 48_000).unwrap(), x);
}

fn config_err(json: &str, has: &[&str]) {
    match FeatureConfig::from_json(json, "preprocessor_config.json") {
        Err(ClapError::Config { file, reason }) => {
            assert_eq!(file, "preprocessor_config.json");
            for h in has {
                assert!(reason.contains(h), "{reason:?} lacks {h:?}");
            }
        }
        other => panic!("{json}: expected a config error, got {other:?}"),
    }
}

#[test]
fn configs_are_read_and_checked() {
    let c = FeatureConfig::from_json("{}", "x").unwrap();
    assert_eq!(c, FeatureConfig::default());
    assert_eq!(c.feature_shape(), [4, 1001, 64]);
    let c = FeatureConfig::from_json(
        r#"{"truncation": "rand_trunc", "padding": "pad", "frequency_min": 50, "n_fft": 1024,
            "top_db": null, "max_length_s": 10.0, "nb_max_samples": 480000}"#,
        "x",
    )
    .unwrap();
    assert_eq!(
        (c.truncation, c.padding),
        (Truncation::RandTrunc, Padding::Pad)
    );
    assert_eq!((c.frequency_min, c.feature_shape()), (50.0, [1, 1001, 64]));

    config_err(r#"{"truncation": "zigzag"}"#, &["truncation", "zigzag"]);
    config_err(r#"{"padding": "mirror"}"#, &["padding", "mirror"]);
    config_err(r#"{"max_length_s": 0}"#, &["max_length_s", "0"]);
    config_err(r#"{"max_length_s": 2.5}"#, &["max_length_s", "2.5"]);
    config_err(r#"{"fft_window_size": 1023}"#, &["fft_window_size", "1023"]);
    config_err(r#"{"hop_length": 0}"#, &["hop_length"]);
    config_err(r#"{"sampling_rate": 100}"#, &["sampling_rate", "100"]);
    config_err(
        r#"{"feature_size": 128}"#,
        &["feature_size", "128", "fusion"],
    );
    config_err(
        r#"{"frequency_min": 9000, "frequency_max": 8000}"#,
        &["frequency_max"],
    );
    config_err(r#"{"feature_size": "64"}"#, &["invalid type"]);
    config_err("[1, 2", &["EOF"]);
    assert!(FeatureExtractor::new(FeatureConfig {
        hop_length: 0,
        ..FeatureConfig::default()
    })
    .is_err());
}

#[test]
fn draws_replay_and_seed() {
    let mut r = Replay::new([3usize, 9]);
    assert_eq!(r.draw(Draw::FusionFront, 0, 5).unwrap(), 3);
    let e = r.draw(Draw::FusionMiddle, 0, 5).unwrap_err().to_string();
    assert!(e.contains("fusion middle") && e.contains("9"), "{e}");
    let mut r = Replay::new([1usize]);
    r.draw(Draw::CropOffset, 0, 1).unwrap();
    assert!(r.draw(Draw::CropOffset, 0, 1).is_err());
    assert!(Replay::from_i64(&[-1]).is_err());

    let (mut a, mut b) = (SeededDraws::new(42), SeededDraws::new(42));
    for hi in [0usize, 1, 7, 1000, usize::MAX] {
        let x = a.draw(Draw::CropOffset, 0, hi).unwrap();
        assert_eq!(x, b.draw(Draw::CropOffset, 0, hi).unwrap());
        assert!(x <= hi);
    }
    let mut seen = [false; 3];
    for _ in 0..100 {
        seen[a.draw(Draw::LongerClip, 5, 7).unwrap() - 5] = true;
    }
    assert_eq!(seen, [true; 3]);
}

/// A draw source that answers out of range: the extractor must refuse, not index with it.
struct Rogue;

impl Draws for Rogue {
    fn draw(&mut self, _: Draw, _: usize, high: usize) -> aria_clap::Result<usize> {
        Ok(high + 1)
    }
}

#[test]
fn out_of_range_draws_are_errors() {
    let long = sine(700_000, 440.0, 48_000.0);
    for mode in [Truncation::RandTrunc, Truncation::Fusion] {
        let e = extractor(mode)
            .extract(&long, &mut Rogue)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside"), "{e}");
    }
    let short = sine(1000, 440.0, 48_000.0);
    let e = extractor(Truncation::Fusion)
        .extract_batch(&[&short], &mut Rogue)
        .unwrap_err();
    assert!(e.to_string().contains("clip flagged as longer"), "{e}");
}

#[test]
fn batch_rule_and_stacking() {
    let short = sine(48_000, 440.0, 48_000.0);
    let long = sine(700_000, 440.0, 48_000.0);
    let fusion = extractor(Truncation::Fusion);
    // No clip longer: exactly one is flagged, by the draw.
    let (t, longer) = fusion
        .extract_batch(&[&short, &short, &short], &mut Replay::new([2usize]))
        .unwrap();
    assert_eq!(t.shape(), [3, 4, 1001, 64]);
    assert_eq!(longer, [false, false, true]);
    // A lone short clip ends up flagged; extract alone does not flag it.
    let (_, longer) = fusion
        .extract_batch(&[&short], &mut SeededDraws::new(0))
        .unwrap();
    assert_eq!(longer, [true]);
    assert!(
        !fusion
            .extract(&short, &mut SeededDraws::new(0))
            .unwrap()
            .is_longer
    );
    // A long clip: three draws, no batch draw.
    let mut r = Replay::new([10usize, 200, 400]);
    let (_, longer) = fusion.extract_batch(&[&short, &long], &mut r).unwrap();
    assert_eq!((longer, r.remaining()), (vec![false, true], 0));

    let rt = extractor(Truncation::RandTrunc);
    let (t, longer) = rt
        .extract_batch(&[&short, &long], &mut Replay::new([5usize]))
        .unwrap();
    assert_eq!(
        (t.shape(), longer),
        ([2, 1, 1001, 64].as_slice(), vec![false, true])
    );
    let a = rt.extract(&short, &mut SeededDraws::new(0)).unwrap();
    let b = fusion.extract(&short, &mut SeededDraws::new(0)).unwrap();
    assert!(stack_features(&[a.clone(), b]).is_err());
    assert_eq!(
        stack_features(&[a.clone(), a]).unwrap().shape(),
        [2, 1, 1001, 64]
    );
    assert!(stack_features(&[]).is_err());
}
