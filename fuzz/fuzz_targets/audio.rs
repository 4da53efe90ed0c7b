//! Arbitrary bytes as an uploaded audio file (audio-to-audio and inpainting inputs): the same
//! bytes are read through `read_audio` as a `.wav` and as a `.flac` (WAV through hound, the rest
//! through symphonia, as the server does with an upload).
//!
//! Properties: no panic (bounded time and memory are left to libFuzzer's `-timeout` and
//! `-rss_limit_mb`); a decoded clip has a positive sample rate, at least one channel and one
//! frame, a rate within `SAMPLE_RATES`, and a `[channels, frames]` tensor holding exactly
//! `channels × frames` samples; a clip short enough to be accepted as an upload then goes
//! through `prepare_audio` (resampling to 44.1 kHz, pad / crop, channel fixing) with the output
//! shape asked for. The resampled length of every channel together is bounded (`MAX_PREPARED`)
//! so that one input stays well inside libFuzzer's timeout under the sanitizer: a few KB of
//! FLAC can decode to minutes of audio.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use aria_codec::audio::{prepare_audio, read_audio};
use libfuzzer_sys::fuzz_target;

/// Longest upload the server accepts by default (`upload_seconds`).
const UPLOAD_SECONDS: f64 = 190.0;
/// Largest resampled clip the harness asks for, in samples of all channels together.
const MAX_PREPARED: u64 = 1 << 18;

fn temp(ext: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("aria-fuzz-audio-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp folder");
        d
    });
    dir.join(format!("input.{ext}"))
}

fuzz_target!(|data: &[u8]| {
    for ext in ["wav", "flac"] {
        let path = temp(ext);
        std::fs::write(&path, data).expect("temp file");
        let clip = match read_audio(&path) {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    e.to_string().contains(&format!("input.{ext}")),
                    "unnamed error: {e}"
                );
                continue;
            }
        };
        let (ch, n) = (clip.channels(), clip.frames());
        assert!(
            aria_codec::audio::SAMPLE_RATES.contains(&clip.sample_rate),
            "decoded at {} Hz",
            clip.sample_rate
        );
        assert!(ch >= 1 && n >= 1, "empty clip accepted: {ch} × {n}");
        assert_eq!(clip.data.shape(), &[ch, n]);
        let v = clip.data.to_vec_f32().expect("decoded samples read back");
        assert_eq!(v.len(), ch * n);
        let secs = n as f64 / f64::from(clip.sample_rate);
        let resampled = (n as u64 * 44_100).div_ceil(u64::from(clip.sample_rate));
        if secs <= UPLOAD_SECONDS && resampled * ch as u64 <= MAX_PREPARED && ch <= 8 {
            let len = (resampled as usize).min(4096);
            let x = prepare_audio(&clip, 44_100, Some(len), 2).expect("a decoded clip prepares");
            assert_eq!(x.shape(), &[1, 2, len]);
        }
    }
});
