#![allow(clippy::unwrap_used)]
//! WAV round trips, reading errors, resampling, channel fixing and padding.

use aria_codec::audio::{self, AudioClip, WavFormat};
use aria_codec::CodecError;
use aria_core::Tensor;
use aria_testing::TempDir;

fn sine(ch: usize, n: usize, sr: f32, f: f32) -> Tensor {
    let mut v = Vec::with_capacity(ch * n);
    for c in 0..ch {
        for i in 0..n {
            v.push(0.5 * (std::f32::consts::TAU * f * i as f32 / sr + c as f32).sin());
        }
    }
    Tensor::from_vec(v, &[ch, n]).unwrap()
}

#[test]
fn wav_f32_round_trip_is_exact() {
    let x = sine(2, 1000, 44100.0, 440.0);
    let dir = TempDir::new("codec-test");
    let p = dir.join("f32.wav");
    audio::write_wav(&p, &x.unsqueeze(0).unwrap(), 44100, WavFormat::F32).unwrap();
    let c = audio::read_audio(&p).unwrap();
    assert_eq!(c.sample_rate, 44100);
    assert_eq!(c.data.shape(), &[2, 1000]);
    assert_eq!(c.data.to_vec_f32().unwrap(), x.to_vec_f32().unwrap());
}

#[test]
fn wav_pcm16_round_trip_within_quantisation() {
    let x = sine(2, 1000, 44100.0, 440.0);
    let dir = TempDir::new("codec-test");
    let p = dir.join("i16.wav");
    audio::write_wav(&p, &x, 44100, WavFormat::Pcm16).unwrap();
    let c = audio::read_audio(&p).unwrap();
    let (a, b) = (c.data.to_vec_f32().unwrap(), x.to_vec_f32().unwrap());
    let e = aria_testing::fixtures::max_abs_diff(&a, &b);
    assert!(e < 1.0 / 16000.0, "max error {e}");
}

#[test]
fn unreadable_and_empty_files_name_the_file() {
    let dir = TempDir::new("codec-test");
    let p = dir.join("garbage.mp3");
    std::fs::write(&p, b"this is not audio at all").unwrap();
    let e = audio::read_audio(&p).unwrap_err();
    assert!(matches!(e, CodecError::Audio { .. }));
    assert!(e.to_string().contains("garbage.mp3"), "{e}");

    let dir = TempDir::new("codec-test");
    let p = dir.join("empty.wav");
    audio::write_wav(
        &p,
        &Tensor::zeros(&[2, 0], aria_core::DType::F32),
        44100,
        WavFormat::F32,
    )
    .unwrap();
    let e = audio::read_audio(&p).unwrap_err();
    assert!(
        e.to_string().contains("empty.wav") && e.to_string().contains("no audio"),
        "{e}"
    );

    let dir = TempDir::new("codec-test");
    let e = audio::read_audio(dir.join("missing.flac")).unwrap_err();
    assert!(e.to_string().contains("missing.flac"), "{e}");
}

/// A header rate outside `SAMPLE_RATES` (a 17 Hz WAV made a fuzz run resample 16 samples into
/// 370 000 outputs) is refused when read, naming the file and the rate, and `resample` refuses
/// it too; the edges of the range are accepted.
#[test]
fn absurd_sample_rates_are_refused_with_the_rate() {
    let dir = TempDir::new("codec-test");
    let x = sine(1, 64, 44100.0, 440.0);
    for rate in [17u32, 3_999, 768_001, 4_000_000] {
        let p = dir.join(format!("at-{rate}.wav"));
        audio::write_wav(&p, &x, rate, WavFormat::F32).unwrap();
        let e = audio::read_audio(&p).unwrap_err().to_string();
        assert!(
            e.contains(&format!("at-{rate}.wav")) && e.contains(&format!("{rate} Hz")),
            "{e}"
        );
        let e = audio::resample(&x, rate, 44_100).unwrap_err().to_string();
        assert!(e.contains(&format!("{rate} Hz")), "{e}");
        let e = audio::resample(&x, 44_100, rate).unwrap_err().to_string();
        assert!(e.contains(&format!("{rate} Hz")), "{e}");
    }
    for rate in [*audio::SAMPLE_RATES.start(), *audio::SAMPLE_RATES.end()] {
        let p = dir.join(format!("at-{rate}.wav"));
        audio::write_wav(&p, &x, rate, WavFormat::F32).unwrap();
        let c = audio::read_audio(&p).unwrap();
        assert_eq!(c.sample_rate, rate);
        let y = audio::prepare_audio(&c, 44_100, None, 2).unwrap();
        let want = (64 * 44_100u64).div_ceil(u64::from(rate)) as usize;
        assert_eq!(y.shape(), &[1, 2, want]);
        assert!(y.to_vec_f32().unwrap().iter().all(|v| v.is_finite()));
    }
}

#[test]
fn resample_keeps_a_sine_and_the_length() {
    let x = sine(1, 48000, 48000.0, 1000.0);
    let y = audio::resample(&x, 48000, 44100).unwrap();
    assert_eq!(y.shape(), &[1, 44100]);
    let v = y.to_vec_f32().unwrap();
    assert!(v.iter().all(|s| s.is_finite()), "non-finite output");
    // Compare against the ideal 1 kHz sine at 44.1 kHz away from the edges.
    let mut err = 0f32;
    for (i, s) in v.iter().enumerate().take(40000).skip(1000) {
        let want = 0.5 * (std::f32::consts::TAU * 1000.0 * i as f32 / 44100.0).sin();
        err = err.max((s - want).abs());
    }
    assert!(err < 2e-3, "max deviation {err}");
    // Same rate: untouched.
    let z = audio::resample(&x, 48000, 48000).unwrap();
    assert_eq!(z.to_vec_f32().unwrap(), x.to_vec_f32().unwrap());
}

#[test]
fn prepare_audio_fixes_channels_and_length() {
    let mono = AudioClip {
        data: sine(1, 300, 44100.0, 100.0),
        sample_rate: 44100,
    };
    let y = audio::prepare_audio(&mono, 44100, Some(500), 2).unwrap();
    assert_eq!(y.shape(), &[1, 2, 500]);
    let v = y.to_vec_f32().unwrap();
    assert_eq!(&v[..300], &v[500..800], "mono duplicated");
    assert!(v[300..500].iter().all(|&s| s == 0.0), "zero padded");

    let quad = AudioClip {
        data: sine(4, 300, 44100.0, 100.0),
        sample_rate: 44100,
    };
    let y = audio::prepare_audio(&quad, 44100, Some(200), 2).unwrap();
    assert_eq!(y.shape(), &[1, 2, 200]);
    let q = quad.data.to_vec_f32().unwrap();
    let v = y.to_vec_f32().unwrap();
    assert_eq!(
        &v[..200],
        &q[..200],
        "first channel, cropped from the start"
    );
    assert_eq!(&v[200..400], &q[300..500], "second channel");
}

/// A 16-bit PCM AIFF file written by hand (read through symphonia, not hound).
fn write_aiff(path: &std::path::Path, ch: u16, rate: u16, samples: &[i16]) {
    let frames = (samples.len() / ch as usize) as u32;
    let data_len = (samples.len() * 2) as u32;
    let mut b = Vec::new();
    b.extend_from_slice(b"FORM");
    b.extend_from_slice(&(4 + 8 + 18 + 8 + 8 + data_len).to_be_bytes());
    b.extend_from_slice(b"AIFF");
    b.extend_from_slice(b"COMM");
    b.extend_from_slice(&18u32.to_be_bytes());
    b.extend_from_slice(&ch.to_be_bytes());
    b.extend_from_slice(&frames.to_be_bytes());
    b.extend_from_slice(&16u16.to_be_bytes());
    // 80-bit extended sample rate.
    let e = 15 - rate.leading_zeros() as u16;
    b.extend_from_slice(&(16383 + e).to_be_bytes());
    b.extend_from_slice(&((rate as u64) << (63 - e)).to_be_bytes());
    b.extend_from_slice(b"SSND");
    b.extend_from_slice(&(8 + data_len).to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    b.extend_from_slice(&0u32.to_be_bytes());
    for s in samples {
        b.extend_from_slice(&s.to_be_bytes());
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn aiff_is_read_through_symphonia() {
    let n = 500;
    let mut inter = Vec::new();
    for i in 0..n {
        inter.push((i as i16 - 250) * 100);
        inter.push(-(i as i16 - 250) * 100);
    }
    let dir = TempDir::new("codec-test");
    let p = dir.join("tone.aiff");
    write_aiff(&p, 2, 32000, &inter);
    let c = audio::read_audio(&p).unwrap();
    assert_eq!(c.sample_rate, 32000);
    assert_eq!(c.data.shape(), &[2, n]);
    let v = c.data.to_vec_f32().unwrap();
    for i in 0..n {
        assert_eq!(v[i], inter[2 * i] as f32 / 32768.0);
        assert_eq!(v[n + i], inter[2 * i + 1] as f32 / 32768.0);
    }
    // Into the model's format: 44.1 kHz stereo of the requested length.
    let x = audio::prepare_audio(&c, 44100, Some(700), 2).unwrap();
    assert_eq!(x.shape(), &[1, 2, 700]);
}
