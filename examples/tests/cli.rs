//! The `aria` binary: the no-download demo, reproducible noise files, and bad input (one-line
//! error naming the problem, non-zero exit, no panic).
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use aria::synth::{self, Preset};
use aria_testing::{SharedTempDir, TempDir};

/// A tiny random model folder shared by the tests of this file that run at the same time
/// (removed when the last of them finishes).
fn model() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("cli-model");
    DIR.get(|d| {
        synth::write_model(d, Preset::Tiny, aria_core::DType::F32, 5, &mut |_, _| {}).unwrap();
    })
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
    let d = TempDir::new("cli-demo");
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
    let d = TempDir::new("cli-noise");
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
    let d = TempDir::new("cli-badmodel");
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
    let empty_home = TempDir::new("cli-hf");
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
    let d = TempDir::new("cli-dur");
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
    let d = TempDir::new("cli-audio");
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
    let d = TempDir::new("cli-range");
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
    let d = TempDir::new("cli-lora");
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

/// `--text-precision`: the default is bf16-amx where the CPU has an AMX-BF16 unit, else
/// bf16-dot where it has AVX-512 BF16, else f32; the bf16 replay and f32 give other latents.
/// Asking for bf16-dot where it is only emulated warns (and only then); bf16-amx without the
/// unit is an error.
#[test]
fn text_precision_flag() {
    let d = TempDir::new("cli-precision");
    let m = model();
    let m = m.to_str().unwrap();
    let p = |f: &str| d.join(f).display().to_string();
    let run = |extra: &[&str], lat: &str| {
        let mut e = vec!["--seconds", "0.3", "--latents-out", lat];
        e.extend_from_slice(extra);
        let out = aria(&gen_args(m, &p("o.wav"), &e), &d);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let warned = err.contains("no AVX-512 BF16");
        let emulated = extra.contains(&"bf16-dot")
            && !aria_core::nn::Bf16DotWeight::native()
            && !aria_core::nn::Bf16DotWeight::amx();
        assert_eq!(warned, emulated, "{err}");
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
    let dot = run(&["--text-precision", "bf16-dot"], &p("t.safetensors"));
    // `bf16-amx` is another name for bf16-dot: the CPU picks the unit.
    let amx = run(&["--text-precision", "bf16-amx"], &p("a.safetensors"));
    assert_eq!(amx, dot);
    if aria_core::nn::Bf16DotWeight::faster_than_f32() {
        assert_eq!(default, dot);
        assert_ne!(default, f32);
    } else {
        assert_eq!(default, f32);
        assert_ne!(default, dot);
    }
    assert_ne!(default, bf16);
    let out = aria(&gen_args(m, &p("o.wav"), &["--text-precision", "f16"]), &d);
    assert!(!out.status.success());
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// The warning about random weights is printed even with `-q`.
#[test]
fn random_weights_warning_survives_quiet() {
    let d = TempDir::new("cli-quietdemo");
    let wav = d.join("q.wav");
    let err = ok(&aria(
        &[
            "demo",
            "-q",
            "--seconds",
            "0.3",
            "-o",
            wav.to_str().unwrap(),
        ],
        &d,
    ));
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("RANDOM weights"), "{err}");
}

/// The WAV written while decoding has the bytes of a whole-tensor `write_wav` of the library's
/// output; a clip over several decode windows, with `--json` describing it.
#[test]
fn streamed_wav_matches_the_library_and_json_describes_it() {
    let d = TempDir::new("cli-stream");
    let m = model();
    let a = d.join("a.wav");
    let out = aria(
        &gen_args(
            m.to_str().unwrap(),
            a.to_str().unwrap(),
            &[
                "--json",
                "--seconds",
                "20",
                "--duration-padding",
                "1",
                "--steps",
                "2",
            ],
        ),
        &d,
    );
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command"], "generate");
    assert_eq!(v["seed"], 1);
    assert_eq!(v["outputs"][0]["path"], a.display().to_string());
    assert_eq!(v["outputs"][0]["samples"], 20 * 44100);
    assert_eq!(v["timings_s"]["steps"].as_array().unwrap().len(), 2);
    assert_eq!(v["precision"]["dit"], "f32");
    assert_eq!(v["precision"]["w8a8"], false);

    let files = aria::discover::resolve_model(m.to_str().unwrap(), &Default::default()).unwrap();
    let p = aria::Pipeline::load(&files, &Default::default()).unwrap();
    let mut r = aria::GenerateRequest::new("soft rain", 20.0);
    r.steps = 2;
    r.duration_padding_sec = 1.0;
    let g = p
        .run(&r, &mut aria::TorchNoise::new(1), Default::default())
        .unwrap();
    let b = d.join("b.wav");
    aria_codec::audio::write_wav(&b, &g.audio, 44100, aria_codec::audio::WavFormat::F32).unwrap();
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap());
}

/// `--precision fast` runs the machine's fastest measured mode and `--json` names it.
#[test]
fn precision_fast_names_the_mode() {
    let d = TempDir::new("cli-fast");
    let m = model();
    let a = d.join("a.wav");
    let out = aria(
        &gen_args(
            m.to_str().unwrap(),
            a.to_str().unwrap(),
            &[
                "--json",
                "--seconds",
                "0.3",
                "--steps",
                "2",
                "--precision",
                "fast",
            ],
        ),
        &d,
    );
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = aria::quant::WeightPrecision::Fast.resolve(aria::pipeline::DeviceKind::Cpu);
    assert_eq!(v["precision"]["dit"], want.name());
    if want == aria::quant::WeightPrecision::Bf16Dot {
        let kinds = v["precision"]["decoder"].as_object().unwrap();
        assert!(kinds.keys().all(|k| k.contains("bf16_panels")), "{kinds:?}");
    }
}

/// `-o x.flac` writes FLAC (24-bit): it decodes to the WAV's samples within the quantization.
#[test]
fn flac_output_by_extension() {
    let d = TempDir::new("cli-flac");
    let m = model();
    let (w, f) = (d.join("o.wav"), d.join("o.flac"));
    for o in [&w, &f] {
        ok(&aria(
            &gen_args(
                m.to_str().unwrap(),
                o.to_str().unwrap(),
                &["--seconds", "1.5"],
            ),
            &d,
        ));
    }
    assert_eq!(&std::fs::read(&f).unwrap()[..4], b"fLaC");
    let (wa, fa) = (
        aria_codec::audio::read_audio(&w).unwrap(),
        aria_codec::audio::read_audio(&f).unwrap(),
    );
    assert_eq!(
        (fa.channels(), fa.frames(), fa.sample_rate),
        (2, 66150, 44100)
    );
    let (wv, fv) = (wa.data.to_vec_f32().unwrap(), fa.data.to_vec_f32().unwrap());
    let worst = aria_testing::fixtures::max_abs_diff(&wv, &fv);
    assert!(worst <= 1.5 / 8_388_607.0, "max |Δ| {worst}");
    assert!(wv.iter().any(|v| v.abs() > 1e-3), "not silence");
    assert_one_line_error(
        &aria(&gen_args(m.to_str().unwrap(), "o.mp3", &[]), &d),
        "unknown output format",
    );
}

/// The output path is used exactly as given: several dots, no extension, a folder with dots.
/// Nothing is written under a shortened name (an existing file there is left alone).
#[test]
fn output_path_used_exactly_as_given() {
    let d = TempDir::new("cli-names");
    let m = model();
    let dotted = d.join("takes.v1.d");
    std::fs::create_dir_all(&dotted).unwrap();
    let bystander = dotted.join("my.song.wav");
    std::fs::write(&bystander, b"keep me").unwrap();
    for (name, magic) in [
        ("my.song.v2.wav", &b"RIFF"[..]),
        ("take.final.flac", &b"fLaC"[..]),
        ("take", &b"RIFF"[..]),
    ] {
        let o = dotted.join(name);
        ok(&aria(
            &gen_args(
                m.to_str().unwrap(),
                o.to_str().unwrap(),
                &["--seconds", "0.3"],
            ),
            &d,
        ));
        let bytes = std::fs::read(&o).unwrap_or_else(|e| panic!("{name} not written: {e}"));
        assert_eq!(&bytes[..4], magic, "{name}");
    }
    assert_eq!(std::fs::read(&bystander).unwrap(), b"keep me");
    assert!(!dotted.join("take.flac").exists());
    let mut written: Vec<String> = std::fs::read_dir(&dotted)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        ["my.song.v2.wav", "my.song.wav", "take", "take.final.flac"]
    );
}

/// Several prompts (official `-p a b` or repeated `-p`) are one batch with indexed file names;
/// official aliases parse.
#[test]
fn batches_and_official_aliases() {
    let d = TempDir::new("cli-batch");
    let m = model();
    let o = d.join("set.wav");
    let err = ok(&aria(
        &[
            "generate",
            "-m",
            m.to_str().unwrap(),
            "-p",
            "rain",
            "wind",
            "--duration",
            "0.5",
            "0.7",
            "--cfg-scale",
            "1",
            "--seed",
            "-1",
            "-t",
            "1",
            "-o",
            o.to_str().unwrap(),
        ],
        &d,
    ));
    assert!(err.contains("seed: "), "a random seed is printed: {err}");
    for i in 0..2 {
        let c = aria_codec::audio::read_audio(d.join(format!("set_{i}.wav"))).unwrap();
        // Different durations: full length, as the official batch returns it.
        assert_eq!(c.channels(), 2);
        assert!(c.frames() >= 30870, "{}", c.frames());
    }
    assert!(!o.exists());
    let o2 = d.join("rep.wav");
    ok(&aria(
        &gen_args(
            m.to_str().unwrap(),
            o2.to_str().unwrap(),
            &["--batch-size", "2", "--seconds", "0.3"],
        ),
        &d,
    ));
    let (a, b) = (
        aria_codec::audio::read_audio(d.join("rep_0.wav")).unwrap(),
        aria_codec::audio::read_audio(d.join("rep_1.wav")).unwrap(),
    );
    assert_eq!(a.frames(), 13230);
    assert_ne!(
        a.data.to_vec_f32().unwrap(),
        b.data.to_vec_f32().unwrap(),
        "batch items get their own noise"
    );
    let mut neg = gen_args(m.to_str().unwrap(), "x.wav", &[]);
    neg[7] = "-2";
    assert_one_line_error(&aria(&neg, &d), "--seed -2");
    assert_one_line_error(
        &aria(
            &gen_args(
                m.to_str().unwrap(),
                "x.wav",
                &["--inpaint-start", "1", "--inpaint-end", "2"],
            ),
            &d,
        ),
        "--inpaint-audio",
    );
}

/// A Windows path without a strength is a path, not a bad strength.
#[test]
fn lora_windows_path_parses() {
    let d = TempDir::new("cli-winlora");
    let m = model();
    assert_one_line_error(
        &aria(
            &gen_args(
                m.to_str().unwrap(),
                "x.wav",
                &["--lora", r"C:\x.safetensors"],
            ),
            &d,
        ),
        r"C:\x.safetensors",
    );
}

/// `--device` names the cargo feature when the backend is not built in; a built-in wgpu or
/// CUDA generates (or, without an adapter or driver, says so in one line).
#[test]
fn device_not_built_in() {
    let d = TempDir::new("cli-device");
    let m = model();
    for dev in ["wgpu", "cuda"] {
        let mut a = gen_args(m.to_str().unwrap(), "x.wav", &[]);
        a.extend_from_slice(&["--device", dev]);
        let out = aria(&a, &d);
        if cfg!(feature = "wgpu") && dev == "wgpu" {
            if !out.status.success() {
                assert_one_line_error(&out, "adapter");
            }
        } else if cfg!(feature = "cuda") && dev == "cuda" {
            // Built in: it runs where a driver and a device exist, and says why not elsewhere.
            if !out.status.success() {
                assert_one_line_error(&out, "not available on this machine");
            }
        } else {
            assert_one_line_error(&out, &format!("--features {dev}"));
        }
    }
}

/// `aria models` lists the complete folders of the Hugging Face cache.
#[test]
fn models_lists_what_discovery_finds() {
    let d = TempDir::new("cli-models");
    let home = d.join("hf");
    let snap = home.join("hub/models--stabilityai--stable-audio-3-small-sfx/snapshots/r1");
    copy_dir(&model(), &snap);
    let run = |json: bool| {
        let mut args = vec!["models"];
        if json {
            args.push("--json");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_aria"))
            .args(&args)
            .env("HF_HOME", &home)
            .env_remove("HF_HUB_CACHE")
            .env("XDG_CACHE_HOME", &d)
            .current_dir(&d)
            .output()
            .unwrap();
        ok(&out);
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(false);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("FOLDER"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("small-sfx ") && lines[1].contains("hub-cache"),
        "{text}"
    );
    assert!(text.contains("snapshots/r1"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    assert_eq!(v["models"][0]["name"], "small-sfx");
    assert_eq!(v["models"][0]["source"], "hub-cache");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

/// The README's library example is `examples/readme.rs` verbatim (which the test build
/// compiles), and it runs.
#[test]
fn readme_library_example_is_the_example_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ex = std::fs::read_to_string(root.join("readme.rs")).unwrap();
    let a = ex.find("// README:begin\n").unwrap() + "// README:begin\n".len();
    let b = ex.find("// README:end").unwrap();
    let readme = std::fs::read_to_string(root.join("../README.md")).unwrap();
    assert!(
        readme.contains(&format!("```rust\n{}```", &ex[a..b])),
        "the README's library example differs from examples/readme.rs"
    );
}

/// An empty prompt and one longer than the tokenizer reads are warned about; the default WAV
/// is named as 32-bit float and `--pcm24` writes 24-bit PCM.
#[test]
fn prompts_the_model_cannot_read_as_written_are_warned_about() {
    let d = TempDir::new("cli-prompts");
    let m = model();
    let m = m.to_str().unwrap();
    let out_path = d.join("o.wav").display().to_string();
    let run = |prompt: &str, extra: &[&str]| {
        let mut v = vec![
            "generate",
            "--model",
            m,
            "--prompt",
            prompt,
            "--seconds",
            "0.3",
            "--steps",
            "2",
            "-o",
            &out_path,
        ];
        v.extend_from_slice(extra);
        ok(&aria(&v, &d))
    };
    let e = run("", &[]);
    assert!(e.contains("prompt 0 is empty"), "{e}");
    assert!(e.contains("32-bit float WAV"), "{e}");
    let long = "rain ".repeat(2000);
    let e = run(&long, &["--pcm24"]);
    assert!(e.contains("the model reads the first 256"), "{e}");
    assert!(e.contains("24-bit PCM WAV"), "{e}");
    let r = hound::WavReader::open(&out_path).unwrap();
    assert_eq!(r.spec().bits_per_sample, 24);
    let e = run("soft rain", &[]);
    assert!(!e.contains("warning: prompt"), "{e}");
}

/// `--verbose` adds the load report and the step times; `stream --json` describes the run (and
/// refuses stdout, which carries the audio).
#[test]
fn verbose_and_stream_json() {
    let d = TempDir::new("cli-verbose");
    let m = model();
    let m = m.to_str().unwrap();
    let o = d.join("o.wav").display().to_string();
    let e = ok(&aria(
        &[
            "generate",
            "-v",
            "--model",
            m,
            "-p",
            "rain",
            "--seconds",
            "0.3",
            "--steps",
            "2",
            "-o",
            &o,
        ],
        &d,
    ));
    assert!(
        e.contains("DiT weights f32") && e.contains("steps: "),
        "{e}"
    );
    let s = d.join("s.wav").display().to_string();
    let out = aria(
        &[
            "stream", "--json", "--model", m, "-p", "rain", "--total", "2", "-o", &s,
        ],
        &d,
    );
    ok(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["command"], "stream");
    assert!(v["chunks"].as_u64().unwrap() >= 1);
    assert!((v["seconds"].as_f64().unwrap() - 2.0).abs() < 1e-3, "{v}");
    let out = aria(
        &["stream", "--json", "--model", m, "-p", "rain", "-o", "-"],
        &d,
    );
    assert_one_line_error(&out, "--json needs -o FILE");
}

/// `--cache` with a capacity of one entry: the second result evicts the first, and `aria cache
/// stats` prints the store's counters (text and JSON).
#[test]
fn cache_capacity_flags_and_stats_counters() {
    let m = model();
    let dir = TempDir::new("cli-cache");
    let cache = dir.join("warm");
    let (model, cache_s) = (m.to_str().unwrap(), cache.to_str().unwrap());
    for (i, prompt) in ["soft rain", "church bells far away"].iter().enumerate() {
        let out = dir.join(format!("{i}.wav"));
        let o = out.to_str().unwrap();
        let r = aria(
            &[
                "generate",
                "--quiet",
                "--model",
                model,
                "--prompt",
                prompt,
                "--seconds",
                "1",
                "--seed",
                "1",
                "-o",
                o,
                "--cache",
                cache_s,
                "--cache-embedder",
                "t5gemma",
                "--cache-max-entries",
                "1",
            ],
            dir.path(),
        );
        assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    }
    let r = aria(&["cache", "stats", "--cache", cache_s], dir.path());
    let text = String::from_utf8_lossy(&r.stdout);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(text.contains("entries: 1 "), "{text}");
    assert!(text.contains("requests: 2, hits: "), "{text}");
    assert!(text.contains("admitted: 2, evicted: 1,"), "{text}");
    let r = aria(
        &["cache", "stats", "--json", "--cache", cache_s],
        dir.path(),
    );
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["counters"]["requests"], 2, "{v}");
    assert_eq!(v["counters"]["evicted"], 1, "{v}");
    let r = aria(
        &[
            "generate",
            "--model",
            model,
            "-p",
            "x",
            "--cache-max-bytes",
            "4X",
        ],
        dir.path(),
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        !r.status.success() && err.contains("--cache-max-bytes"),
        "{err}"
    );
}
