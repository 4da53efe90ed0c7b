//! `aria score` and `aria clap` on generated clips with a random-weight CLAP: the report on
//! stdout (table and JSON), the CSV and the plot, and one-line errors for bad arguments.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::{Command, Output};

use aria::synth::{self, Preset};
use aria_testing::TempDir;

fn aria(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_aria"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("ARIA_CLAP")
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn score_generated_clips_against_baseline_and_reseed() {
    let tmp = TempDir::new("score-cli");
    let root = tmp.path();
    let sa3 = root.join("sa3");
    synth::write_model(&sa3, Preset::Tiny, aria_core::DType::F32, 5, &mut |_, _| {}).unwrap();
    let clap = root.join("clap");
    aria_clap::synth::write_random(&clap, &aria_clap::synth::Preset::Tiny.config(), 2, None)
        .unwrap();
    // The variant (euler), the baseline (the default sampler) with the same seeds, and the
    // baseline with other seeds.
    for (set, seeds, extra) in [
        ("variant", [1, 2, 3], vec!["--sampler", "euler"]),
        ("against", [1, 2, 3], vec![]),
        ("reseed", [11, 12, 13], vec![]),
    ] {
        let d = root.join(set);
        std::fs::create_dir_all(&d).unwrap();
        for (i, seed) in seeds.iter().enumerate() {
            let out = d.join(format!("p{i}.wav"));
            let (seed, out) = (seed.to_string(), out.to_string_lossy().into_owned());
            let mut args = vec![
                "generate",
                "--quiet",
                "--model",
                sa3.to_str().unwrap(),
                "--prompt",
                "soft rain",
                "--seconds",
                "1",
                "--seed",
                &seed,
                "-o",
                &out,
            ];
            args.extend(extra.iter().copied());
            ok(&aria(&args, root));
        }
    }
    let (v, a, r) = (
        root.join("variant"),
        root.join("against"),
        root.join("reseed"),
    );
    let csv = root.join("report.csv");
    let svg = root.join("report.svg");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (clap_s, v_s, a_s, r_s) = (s(&clap), s(&v), s(&a), s(&r));
    // `aria CMD --quiet --clap DIR ARGS…`, its stdout.
    let run = |cmd: &str, args: &[&str]| -> String {
        let mut all = vec![cmd, "--quiet", "--clap", clap_s.as_str()];
        all.extend_from_slice(args);
        ok(&aria(&all, root))
    };
    let (csv_s, svg_s) = (s(&csv), s(&svg));
    let table = run(
        "score",
        &[
            &v_s,
            "--against",
            &a_s,
            "--reseed",
            &r_s,
            "--csv",
            &csv_s,
            "--plot",
            &svg_s,
        ],
    );
    assert!(table.contains("fad.variant_vs_against"), "{table}");
    assert!(table.contains("drift.variant_vs_against"), "{table}");
    assert!(table.contains("normalised to -14 LUFS"), "{table}");
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert!(csv.starts_with("measure,set,stat,index,value"), "{csv}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.contains("<svg") && svg.contains("drift.variant_vs_against"));

    let json = run(
        "score",
        &["--json", &v_s, "--against", &a_s, "--lufs", "none"],
    );
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    let m = j["measures"].as_array().unwrap();
    assert_eq!(m.len(), 2);
    assert!(m
        .iter()
        .all(|x| x["value"].as_f64().is_some_and(f64::is_finite)));

    // `aria clap` on clips without a text: embeddings written, a one-line summary.
    let emb = root.join("emb.json");
    let p0 = s(&v.join("p0.wav"));
    let out = run("clap", &["--audio", &p0, "--out", &s(&emb)]);
    assert!(
        out.contains("embedded 0 text(s) and 1 clip(s) into 24 dimensions"),
        "{out}"
    );
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&emb).unwrap()).unwrap();
    assert_eq!(
        e["audio"][0]["embedding"].as_array().map(Vec::len),
        Some(24)
    );

    // Texts too (the random checkpoint carries the byte-level vocabulary): a CLAP score per
    // clip against the prompt.
    let table = run("score", &[&v_s, "--prompt", "soft rain"]);
    assert!(table.contains("clap_score.variant"), "{table}");
    let out = run("clap", &["--text", "rain", "--audio", &p0]);
    assert!(out.contains("cosine similarity"), "{out}");

    // Text without tokenizer files in the folder: a one-line error naming them.
    std::fs::remove_file(clap.join("vocab.json")).unwrap();
    std::fs::remove_file(clap.join("merges.txt")).unwrap();
    let out = aria(&["clap", "--clap", &clap_s, "--text", "rain"], root);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("tokenizer") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn score_argument_errors() {
    let tmp = TempDir::new("score-cli-err");
    let root = tmp.path();
    let one_line = |out: &Output, needle: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].starts_with("error: ") && lines[0].contains(needle),
            "{err}"
        );
    };
    let d = root.to_str().unwrap();
    one_line(
        &aria(&["score", "--clap", d, d], root),
        "nothing to measure",
    );
    one_line(
        &aria(
            &["score", "--clap", "no/such/clap", d, "--prompt", "x"],
            root,
        ),
        "`no/such/clap` not found",
    );
    one_line(
        &aria(&["score", "--clap", d, d, "--prompt", "x"], root),
        "config.json",
    );
    one_line(&aria(&["score", d, "--prompt", "x"], root), "ARIA_CLAP");
}
