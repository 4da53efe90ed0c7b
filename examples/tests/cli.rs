//! The `aria` binary: the no-download demo, reproducible noise files, and bad input (one-line
//! error naming the problem, non-zero exit, no panic).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use aria::synth::{self, Preset};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aria-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A tiny random model folder shared by the tests of this file.
fn model() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tmp("model");
        synth::write_model(&d, Preset::Tiny, aria_core::DType::F32, 5, &mut |_, _| {}).unwrap();
        d
    })
    .clone()
}

fn aria(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aria"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap()
}

/// Fails unless the command failed with exactly one `error: …` line mentioning `needle`.
fn assert_one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, stderr: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    assert!(lines[0].contains(needle), "`{needle}` not in: {err}");
}

fn gen_args<'a>(model: &'a str, out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "generate",
        "--quiet",
        "--model",
        model,
        "--prompt",
        "soft rain",
        "--seed",
        "1",
        "-o",
        out,
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn demo_writes_a_stereo_wav_without_downloads() {
    let d = tmp("demo");
    let wav = d.join("demo.wav");
    let out = aria(&["demo", "--seconds", "1", "-o", wav.to_str().unwrap()], &d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("RANDOM weights"),
        "the demo says the weights are random: {err}"
    );
    assert!(err.contains("timing:"), "timing summary: {err}");
    let clip = aria_codec::audio::read_audio(&wav).unwrap();
    assert_eq!(
        (clip.channels(), clip.frames(), clip.sample_rate),
        (2, 44100, 44100)
    );
    assert!(clip
        .data
        .to_vec_f32()
        .unwrap()
        .iter()
        .all(|v| v.is_finite() && v.abs() <= 1.0));
}

#[test]
fn noise_file_replays_a_generation_exactly() {
    let d = tmp("noise");
    let m = model();
    let (m, p) = (m.to_str().unwrap(), |f: &str| {
        d.join(f).display().to_string()
    });
    let (a, b, n, la, lb) = (
        p("a.wav"),
        p("b.wav"),
        p("noise.safetensors"),
        p("la.safetensors"),
        p("lb.safetensors"),
    );
    let out = aria(
        &gen_args(
            m,
            &a,
            &["--seconds", "0.5", "--noise-out", &n, "--latents-out", &la],
        ),
        &d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 1 initial draw, 8 sampler steps, bottleneck and decoder new-token draws.
    let draws = aria_core::WeightLoader::open(&[&n]).unwrap().names();
    assert_eq!(draws.len(), 11, "{draws:?}");
    let out = aria(
        &[
            "generate",
            "--quiet",
            "--model",
            m,
            "--prompt",
            "soft rain",
            "--seconds",
            "0.5",
            "--noise",
            &n,
            "-o",
            &b,
            "--latents-out",
            &lb,
        ],
        &d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let get = |f: &str| {
        aria_core::WeightLoader::open(&[f])
            .unwrap()
            .get_any("latents")
            .unwrap()
            .to_vec_f32()
            .unwrap()
    };
    assert_eq!(get(&la), get(&lb));
    // A different seed gives different latents.
    let lc = p("lc.safetensors");
    let mut args = gen_args(m, &b, &["--seconds", "0.5", "--latents-out", &lc]);
    args[7] = "2";
    assert!(aria(&args, &d).status.success());
    assert_ne!(get(&la), get(&lc));
}

#[test]
fn bad_model_paths() {
    let d = tmp("badmodel");
    let out = aria(&gen_args("/nonexistent/aria-model", "o.wav", &[]), &d);
    assert_one_line_error(&out, "/nonexistent/aria-model");
    let partial = d.join("partial");
    std::fs::create_dir_all(&partial).unwrap();
    std::fs::copy(
        model().join("model_config.json"),
        partial.join("model_config.json"),
    )
    .unwrap();
    let out = aria(&gen_args(partial.to_str().unwrap(), "o.wav", &[]), &d);
    assert_one_line_error(&out, "model.safetensors");
    let empty_home = tmp("hf");
    let out = Command::new(env!("CARGO_BIN_EXE_aria"))
        .args(gen_args("medium", "o.wav", &[]))
        .env("HF_HOME", &empty_home)
        .env_remove("HF_HUB_CACHE")
        .current_dir(&empty_home)
        .output()
        .unwrap();
    assert_one_line_error(&out, "models--stabilityai--stable-audio-3-medium");
}

#[test]
fn bad_durations() {
    let d = tmp("dur");
    let m = model();
    let o = d.join("o.wav").display().to_string();
    for s in ["0", "-3"] {
        assert_one_line_error(
            &aria(&gen_args(m.to_str().unwrap(), &o, &["--seconds", s]), &d),
            "positive",
        );
    }
    assert_one_line_error(
        &aria(
            &gen_args(m.to_str().unwrap(), &o, &["--seconds", "1000"]),
            &d,
        ),
        "maximum",
    );
}

#[test]
fn bad_audio_inputs() {
    let d = tmp("audio");
    let m = model();
    let m = m.to_str().unwrap();
    let o = d.join("o.wav").display().to_string();
    let junk = d.join("junk.wav");
    std::fs::write(&junk, b"this is not audio").unwrap();
    assert_one_line_error(
        &aria(
            &gen_args(m, &o, &["--init-audio", junk.to_str().unwrap()]),
            &d,
        ),
        "junk.wav",
    );
    let missing = d.join("missing.wav");
    assert_one_line_error(
        &aria(
            &gen_args(m, &o, &["--init-audio", missing.to_str().unwrap()]),
            &d,
        ),
        "missing.wav",
    );
    let empty = d.join("empty.wav");
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44100,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    hound::WavWriter::create(&empty, spec)
        .unwrap()
        .finalize()
        .unwrap();
    assert_one_line_error(
        &aria(
            &gen_args(
                m,
                &o,
                &[
                    "--inpaint-audio",
                    empty.to_str().unwrap(),
                    "--inpaint-range",
                    "0,0.5",
                ],
            ),
            &d,
        ),
        "empty.wav",
    );
}

#[test]
fn inpaint_range_outside_the_clip() {
    let d = tmp("range");
    let m = model();
    let o = d.join("o.wav").display().to_string();
    let wav = d.join("in.wav");
    let data = aria_core::Tensor::from_vec(vec![0.1f32; 2 * 44100], &[2, 44100]).unwrap();
    aria_codec::audio::write_wav(&wav, &data, 44100, aria_codec::audio::WavFormat::F32).unwrap();
    let args = [
        "--seconds",
        "1",
        "--inpaint-audio",
        wav.to_str().unwrap(),
        "--inpaint-range",
        "0.5,3",
    ];
    assert_one_line_error(
        &aria(&gen_args(m.to_str().unwrap(), &o, &args), &d),
        "inpaint range",
    );
    let args = [
        "--seconds",
        "1",
        "--inpaint-audio",
        wav.to_str().unwrap(),
        "--inpaint-range",
        "abc",
    ];
    assert_one_line_error(
        &aria(&gen_args(m.to_str().unwrap(), &o, &args), &d),
        "START,END",
    );
}

#[test]
fn lora_that_does_not_fit() {
    let d = tmp("lora");
    let m = model();
    let o = d.join("o.wav").display().to_string();
    let lora = d.join("bad_lora.safetensors");
    let a = aria_core::Tensor::from_vec(vec![0f32; 4 * 999], &[4, 999])
        .unwrap()
        .to_dtype(aria_core::DType::F16)
        .unwrap();
    let b = aria_core::Tensor::from_vec(vec![0f32; 384 * 4], &[384, 4])
        .unwrap()
        .to_dtype(aria_core::DType::F16)
        .unwrap();
    let key = "model.transformer.layers.0.self_attn.to_qkv.parametrizations.weight.0";
    let (ka, kb) = (format!("{key}.lora_A"), format!("{key}.lora_B"));
    let mut meta = std::collections::HashMap::new();
    meta.insert(
        "lora_config".to_string(),
        r#"{"rank": 4, "alpha": 8, "adapter_type": "lora", "dropout": 0.0, "include": null, "exclude": null}"#.to_string(),
    );
    aria_core::save_safetensors(&lora, &[(ka.as_str(), &a), (kb.as_str(), &b)], Some(&meta))
        .unwrap();
    let spec = format!("{}:0.7", lora.display());
    assert_one_line_error(
        &aria(
            &gen_args(
                m.to_str().unwrap(),
                &o,
                &["--seconds", "0.5", "--lora", &spec],
            ),
            &d,
        ),
        "bad_lora",
    );
    let missing = format!("{}:0.7", d.join("none.safetensors").display());
    assert_one_line_error(
        &aria(
            &gen_args(
                m.to_str().unwrap(),
                &o,
                &["--seconds", "0.5", "--lora", &missing],
            ),
            &d,
        ),
        "none.safetensors",
    );
}

/// `--text-precision`: the folder's bf16 text encoder is the default; f32 gives other latents.
#[test]
fn text_precision_flag() {
    let d = tmp("precision");
    let m = model();
    let m = m.to_str().unwrap();
    let p = |f: &str| d.join(f).display().to_string();
    let run = |extra: &[&str], lat: &str| {
        let mut e = vec!["--seconds", "0.3", "--latents-out", lat];
        e.extend_from_slice(extra);
        let out = aria(&gen_args(m, &p("o.wav"), &e), &d);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        aria_core::WeightLoader::open(&[lat])
            .unwrap()
            .get_any("latents")
            .unwrap()
            .to_vec_f32()
            .unwrap()
    };
    let default = run(&[], &p("d.safetensors"));
    let bf16 = run(&["--text-precision", "bf16"], &p("b.safetensors"));
    let f32 = run(&["--text-precision", "f32"], &p("f.safetensors"));
    assert_eq!(default, bf16);
    assert_ne!(default, f32);
    let out = aria(&gen_args(m, &p("o.wav"), &["--text-precision", "f16"]), &d);
    assert!(!out.status.success());
}
