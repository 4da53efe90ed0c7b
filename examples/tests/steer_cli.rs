//! `aria generate --steer`, `aria steer extract|sweep|show` on a tiny random-weight model:
//! strength 0 and an out-of-span step window give the very same WAV bytes as no steering,
//! extraction writes a direction file that loads back and is checked against the model (another
//! model is a one-line error unless `--force`), and the dose-response of a synthetic direction
//! is monotone at low strength.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use aria::synth::{self, Preset};
use aria_steer::direction::FORMAT_VERSION;
use aria_steer::{
    DirectionEntry, DirectionFile, DirectionMeta, ModelIdentity, NormScope, Site,
    StrengthConvention,
};
use aria_testing::{SharedTempDir, TempDir};

/// A tiny random model folder (`seed` picks the weights: 5 or 6), shared by the tests of this
/// file that run at the same time and removed when the last of them finishes. The first caller
/// writes it while the others wait, so no one sees a half-written `model.safetensors`.
fn model(seed: u64) -> Arc<TempDir> {
    static FIVE: SharedTempDir = SharedTempDir::new("steer-cli-model5");
    static SIX: SharedTempDir = SharedTempDir::new("steer-cli-model6");
    let shared = match seed {
        5 => &FIVE,
        6 => &SIX,
        _ => panic!("no shared model for seed {seed}"),
    };
    shared.get(|d| {
        synth::write_model(d, Preset::Tiny, aria_core::DType::F32, seed, &mut |_, _| {}).unwrap();
    })
}

fn identity(m: &Path) -> ModelIdentity {
    ModelIdentity::from_model_files(&m.join("model_config.json"), &m.join("model.safetensors"))
        .unwrap()
}

fn aria(args: &[&str]) -> Output {
    let cache = TempDir::new("steer-cli-cache");
    Command::new(env!("CARGO_BIN_EXE_aria"))
        .args(args)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "command failed: {err}");
    err
}

fn one_line_error(out: &Output, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line expected: {err}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains(needle),
        "{err}"
    );
}

/// Short runs: 1 s, no headroom, 4 steps.
const RUN: [&str; 6] = ["--seconds", "1", "--duration-padding", "0", "--steps", "4"];

fn generate(m: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut v = vec![
        "generate",
        "--quiet",
        "--model",
        m.to_str().unwrap(),
        "-p",
        "soft rain on a roof",
        "--seed",
        "3",
        "-o",
        out.to_str().unwrap(),
    ];
    v.extend_from_slice(&RUN);
    v.extend_from_slice(extra);
    aria(&v)
}

/// A quick `aria generate` of prompt `x` (1 s, 2 steps, seed 1) into `out`, `extra` after.
fn quick_generate(m: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut v = vec![
        "generate",
        "--model",
        m.to_str().unwrap(),
        "-p",
        "x",
        "--seconds",
        "1",
        "--steps",
        "2",
        "--seed",
        "1",
        "-o",
        out.to_str().unwrap(),
    ];
    v.extend_from_slice(extra);
    aria(&v)
}

/// `aria steer extract` from the prompt sets `pos` and `neg` at `blocks` into `out`, `extra`
/// after.
fn extract(m: &Path, pos: &Path, neg: &Path, blocks: &str, out: &Path, extra: &[&str]) -> Output {
    let mut v = vec![
        "steer",
        "extract",
        "--model",
        m.to_str().unwrap(),
        "--pos",
        pos.to_str().unwrap(),
        "--neg",
        neg.to_str().unwrap(),
        "--blocks",
        blocks,
        "-o",
        out.to_str().unwrap(),
    ];
    v.extend_from_slice(extra);
    aria(&v)
}

/// A direction file holding a fixed pseudo-random unit direction at every residual block.
fn synthetic_file(m: &Path, path: &Path) {
    let id = identity(m);
    let e = id.dims.embed_dim;
    let entries: Vec<DirectionEntry> = (0..id.dims.depth)
        .map(|k| {
            let v: Vec<f32> = (0..e)
                .map(|i| ((i as f32 + 1.0) * (0.37 + k as f32)).sin())
                .collect();
            DirectionEntry {
                site: Site::Residual(k),
                direction: aria_steer::direction::normalize(&v, "synthetic").unwrap().0,
                mean_norm: 1.0,
            }
        })
        .collect();
    DirectionFile {
        meta: DirectionMeta {
            format_version: FORMAT_VERSION,
            entries: entries.iter().map(|e| e.site).collect(),
            model: id,
            method: "synthetic".into(),
            positive: None,
            negative: None,
            strength_convention: StrengthConvention::MeanNorm,
            norm_scope: NormScope::ValidLatentTokens,
            probe_accuracy: Vec::new(),
            best_block: None,
            default_strength: None,
            settings: None,
        },
        entries,
    }
    .save(path)
    .unwrap();
}

#[test]
fn strength_zero_and_out_of_span_give_identical_wav_bytes() {
    let m = model(5);
    let d = TempDir::new("steer-cli-bits");
    let dir = d.join("dir.safetensors");
    synthetic_file(&m, &dir);
    let base = d.join("base.wav");
    ok(&generate(&m, &base, &[]));
    let base_bytes = std::fs::read(&base).unwrap();
    let ds = dir.to_str().unwrap();
    let same = [
        format!("{ds}:block=0:strength=0"),
        format!("{ds}:block=1:strength=0:op=project"),
        format!("{ds}:block=0:strength=0.5:steps=50-60"),
    ];
    for spec in &same {
        let p = d.join("s.wav");
        ok(&generate(&m, &p, &["--steer", spec]));
        assert_eq!(
            std::fs::read(&p).unwrap(),
            base_bytes,
            "{spec}: WAV bytes differ"
        );
    }
    // Several at once, all inactive.
    let p = d.join("s.wav");
    ok(&generate(
        &m,
        &p,
        &["--steer", &same[0], "--steer", &same[2]],
    ));
    assert_eq!(
        std::fs::read(&p).unwrap(),
        base_bytes,
        "two inactive steerings"
    );
    // Control: active steering changes the bytes; so does a span the run reaches.
    for spec in [
        format!("{ds}:block=0:strength=0.5"),
        format!("{ds}:block=0:strength=0.5:steps=3-3"),
    ] {
        ok(&generate(&m, &p, &["--steer", &spec]));
        assert_ne!(std::fs::read(&p).unwrap(), base_bytes, "{spec}: unchanged");
    }
    // The steerings are reported in order.
    let err = ok(&quick_generate(
        &m,
        &p,
        &[
            "--steer",
            &format!("{ds}:block=1:strength=0.2"),
            "--steer",
            &format!("{ds}:block=0:op=project:strength=1"),
        ],
    ));
    let a = err.find("steering 1: residual block 1 add").unwrap();
    let b = err.find("steering 2: residual block 0 project").unwrap();
    assert!(a < b, "{err}");
    // A malformed spec fails before anything loads.
    one_line_error(
        &generate(
            &m,
            &p,
            &["--steer", &format!("{ds}:strength=0.1:steps=4-2")],
        ),
        "LO is after HI",
    );
}

fn sine_clips(dir: &Path, freq: f32, n: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..n {
        let spec = hound::WavSpec {
            channels: 2,
            sample_rate: 44_100,
            bits_per_sample: 32,
            sample_format: hound::SampleFormat::Float,
        };
        let mut w = hound::WavWriter::create(dir.join(format!("clip{i}.wav")), spec).unwrap();
        let f = freq * (1.0 + 0.05 * i as f32);
        for k in 0..22_050 {
            let x = 0.3 * (std::f32::consts::TAU * f * k as f32 / 44_100.0).sin();
            w.write_sample(x).unwrap();
            w.write_sample(x).unwrap();
        }
        w.finalize().unwrap();
    }
}

#[test]
fn extract_writes_a_checked_direction_file() {
    let m = model(5);
    let other = model(6);
    let d = TempDir::new("steer-cli-extract");
    let (pos, neg) = (d.join("pos.txt"), d.join("neg.txt"));
    std::fs::write(
        &pos,
        "# positive\nbright piano melody\nbright guitar riff\nbright synth pad\nbright bells\n",
    )
    .unwrap();
    std::fs::write(
        &neg,
        "dark piano melody\ndark guitar riff\n\ndark synth pad\ndark bells\n",
    )
    .unwrap();
    let out = d.join("bright.safetensors");
    let mut extra = vec!["--folds", "2"];
    extra.extend_from_slice(&RUN);
    let err = ok(&extract(&m, &pos, &neg, "0,1", &out, &extra));
    assert!(err.contains("separability per block"), "{err}");
    assert!(
        err.contains("block  0") && err.contains("block  1"),
        "{err}"
    );

    let id = identity(&m);
    let f = DirectionFile::load_for(&out, &id, false).unwrap();
    assert_eq!(f.meta.entries, vec![Site::Residual(0), Site::Residual(1)]);
    assert_eq!(f.meta.method, "difference-in-means");
    assert_eq!(f.meta.positive.as_ref().unwrap().count, 4);
    assert_eq!(f.meta.negative.as_ref().unwrap().count, 4);
    assert_eq!(f.meta.probe_accuracy.len(), 2);
    assert!(f
        .meta
        .probe_accuracy
        .iter()
        .all(|(_, a)| (0.0..=1.0).contains(a)));
    assert!(f.meta.best_block.is_some());
    assert!(f.entries.iter().all(|e| e.mean_norm > 0.0));
    let s = f.meta.settings.as_ref().unwrap();
    assert_eq!((s.steps, s.folds, s.audio_noise_level), (4, 2, None));

    // `steer show` prints the report.
    let show = aria(&["steer", "show", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.status.success() && text.contains("separability"),
        "{text}"
    );

    // Against another model: a one-line error naming it; --force uses it anyway.
    let w = d.join("o.wav");
    let spec = format!("{}:strength=0.1", out.display());
    let o = quick_generate(&other, &w, &["--quiet", "--steer", &spec]);
    one_line_error(&o, "extracted from another model");
    let o = quick_generate(&other, &w, &["--steer", &spec, "--force"]);
    let err = ok(&o);
    assert!(err.contains("--force"), "the override is reported: {err}");

    // Audio-side sets through audio-to-audio.
    let (pa, na) = (d.join("pos_audio"), d.join("neg_audio"));
    sine_clips(&pa, 1760.0, 3);
    sine_clips(&na, 110.0, 3);
    let out2 = d.join("audio.safetensors");
    let o = aria(&[
        "steer",
        "extract",
        "--quiet",
        "--model",
        m.to_str().unwrap(),
        "--pos-audio",
        pa.to_str().unwrap(),
        "--neg-audio",
        na.to_str().unwrap(),
        "--blocks",
        "1",
        "--folds",
        "3",
        "--steps",
        "4",
        "--duration-padding",
        "0",
        "-o",
        out2.to_str().unwrap(),
    ]);
    ok(&o);
    let f = DirectionFile::load_for(&out2, &id, false).unwrap();
    assert_eq!(f.meta.entries, vec![Site::Residual(1)]);
    let s = f.meta.settings.as_ref().unwrap();
    assert_eq!(s.audio_noise_level, Some(0.5));
    assert!(f.meta.positive.as_ref().unwrap().name.contains("audio"));

    // Bad inputs.
    one_line_error(
        &extract(&m, &pos, &neg, "9", &out, &[]),
        "block 9 does not exist",
    );
}

fn csv_column(csv: &str, name: &str) -> Vec<f64> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let i = header.iter().position(|h| *h == name).unwrap();
    lines
        .map(|l| l.split(',').nth(i).unwrap().parse().unwrap())
        .collect()
}

#[test]
fn sweep_is_monotone_at_low_strength_and_plots() {
    let m = model(5);
    let d = TempDir::new("steer-cli-sweep");
    let dir = d.join("dir.safetensors");
    synthetic_file(&m, &dir);
    let out_dir = d.join("out");
    let clap_dir = d.join("clap");
    aria_clap::synth::write_random(&clap_dir, &aria_clap::synth::Preset::Tiny.config(), 1, None)
        .unwrap();
    let spec = format!("{}:block=1", dir.display());
    let mut v = vec![
        "steer",
        "sweep",
        "--quiet",
        "--model",
        m.to_str().unwrap(),
        "--dir",
        &spec,
        "--strengths",
        "0,0.02,0.04,0.06,0.08",
        "-p",
        "soft rain on a roof",
        "--seed",
        "3",
        "--wav",
        "-o",
        out_dir.to_str().unwrap(),
        "--clap",
        clap_dir.to_str().unwrap(),
    ];
    v.extend_from_slice(&RUN);
    ok(&aria(&v));
    // The CLAP columns: one row per strength and the re-seed floor; strength 0 is the
    // baseline itself (drift 0).
    let clap_csv = std::fs::read_to_string(out_dir.join("sweep_clap.csv")).unwrap();
    let rows: Vec<&str> = clap_csv.lines().collect();
    assert_eq!(rows.len(), 1 + 5 + 1, "{clap_csv}");
    assert_eq!(rows[0], "row,clap_score,clap_drift");
    assert!(
        rows[1].starts_with("0,") && rows[1].ends_with(",0.000000e0"),
        "{clap_csv}"
    );
    assert!(rows[6].starts_with("reseed,"), "{clap_csv}");
    for r in &rows[1..] {
        let vals: Vec<f64> = r.split(',').skip(1).map(|x| x.parse().unwrap()).collect();
        assert!(vals.iter().all(|x| x.is_finite()), "{clap_csv}");
    }
    let csv = std::fs::read_to_string(out_dir.join("sweep.csv")).unwrap();
    let proj = csv_column(&csv, "proj_site");
    let out = csv_column(&csv, "proj_output");
    let drift = csv_column(&csv, "drift");
    assert_eq!(proj.len(), 5, "{csv}");
    assert_eq!(drift[0], 0.0, "strength 0 is the baseline: {csv}");
    assert!(aria_steer::sweep::strictly_increasing(&proj), "{csv}");
    assert!(aria_steer::sweep::strictly_increasing(&drift), "{csv}");
    // The projection at the steered block rises by α·n̄ per unit of strength (n̄ = 1 here)
    // on top of the model's own response; it must at least rise by that much to first order.
    let slope = (proj[1] - proj[0]) / 0.02;
    assert!(slope > 0.5, "slope {slope}: {csv}");
    assert!(out.iter().all(|x| x.is_finite()), "{csv}");
    let png = std::fs::read(out_dir.join("sweep.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // The audio of strength 0 is the unsteered generation's, sample for sample.
    let base = d.join("base.wav");
    ok(&generate(&m, &base, &[]));
    let samples = |p: &Path| -> Vec<u32> {
        let c = aria_codec::audio::read_audio(p).unwrap();
        c.data
            .to_vec_f32()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect()
    };
    assert_eq!(samples(&out_dir.join("strength_0.wav")), samples(&base));
    assert_ne!(samples(&out_dir.join("strength_0.08.wav")), samples(&base));
    // A strength in --dir is refused.
    one_line_error(
        &aria(&[
            "steer",
            "sweep",
            "--model",
            m.to_str().unwrap(),
            "--dir",
            &format!("{}:strength=1", dir.display()),
        ]),
        "--strengths gives them",
    );
}
