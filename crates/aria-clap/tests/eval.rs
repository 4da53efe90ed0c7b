//! Evaluating folders of clips: embedding with loudness normalisation, the CLAP score against
//! prompts, FAD and drift against a baseline folder beside the re-seed floor, the report, and
//! the errors a user meets (unpaired files, bad prompt files, absurd clips).

use std::path::Path;

use aria_clap::eval::{self, Prompts, Sets};
use aria_clap::synth::{write_random, Preset};
use aria_clap::Clap;
use aria_testing::tempdir::TempDir;

fn model(tmp: &Path) -> Clap {
    let dir = tmp.join("clap");
    write_random(&dir, &Preset::Tiny.config(), 3, None).expect("write");
    // Without tokenizer files given, the random checkpoint gets the byte-level vocabulary.
    let clap = Clap::load(&dir).expect("load");
    assert!(clap.tokenizer().is_some());
    clap
}

/// A stereo clip at 44.1 kHz: a tone with seeded noise, at `gain`.
fn write_clip(path: &Path, freq: f32, seed: u64, gain: f32) {
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 44_100,
        bits_per_sample: 32,
        sample_format: hound::SampleFormat::Float,
    };
    let mut w = hound::WavWriter::create(path, spec).expect("wav");
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in 0..44_100 * 2 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let noise = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2;
        let x = gain * ((std::f32::consts::TAU * freq * i as f32 / 44_100.0).sin() * 0.5 + noise);
        w.write_sample(x).expect("sample");
        w.write_sample(x * 0.8).expect("sample");
    }
    w.finalize().expect("finalize");
}

fn folder(root: &Path, name: &str, seed: u64, gain: f32) -> std::path::PathBuf {
    let d = root.join(name);
    std::fs::create_dir_all(&d).expect("mkdir");
    for (i, f) in [220.0f32, 440.0, 660.0, 880.0].iter().enumerate() {
        write_clip(&d.join(format!("clip{i}.wav")), *f, seed + i as u64, gain);
    }
    d
}

#[test]
fn report_measures_against_the_reseed_floor() {
    let tmp = TempDir::new("clap-eval");
    let clap = model(tmp.path());
    let v = folder(tmp.path(), "variant", 100, 1.0);
    let a = folder(tmp.path(), "against", 200, 1.0);
    let r = folder(tmp.path(), "reseed", 300, 1.0);
    let embed =
        |d: &Path| eval::embed_folder(&clap, d, Some(-14.0), &mut |_, _, _| {}).expect("embed");
    let sets = Sets {
        variant: embed(&v),
        against: Some(embed(&a)),
        reseed: Some(embed(&r)),
    };
    assert_eq!(sets.variant.names, ["clip0", "clip1", "clip2", "clip3"]);
    assert!(sets
        .variant
        .loudness
        .iter()
        .all(|l| l.is_some_and(f64::is_finite)));
    let prompts = tmp.path().join("prompts.csv");
    std::fs::write(
        &prompts,
        "file,prompt\nclip0.wav,a low hum\nclip1,\"a beep, loud\"\nclip2,a whistle\nclip3,a flute\n",
    )
    .expect("prompts");
    let p = Prompts::PerFile(eval::read_prompts(&prompts).expect("read prompts"));
    let report = eval::evaluate(&clap, &sets, &p).expect("evaluate");
    let names: Vec<&str> = report.measures.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "clap_score.variant",
            "clap_score.against",
            "fad.variant_vs_against",
            "drift.variant_vs_against",
            "clap_score.reseed"
        ]
    );
    for m in &report.measures {
        assert!(m.value.is_finite(), "{}: {}", m.name, m.value);
    }
    let drift = &report.measures[3];
    assert_eq!(drift.items.len(), 4);
    let floor = drift.baseline.as_ref().expect("re-seed floor");
    assert_eq!(floor.items.len(), 4);
    assert!(drift.ratio.is_some());
    let csv = report.to_csv();
    assert!(csv.starts_with("measure,set,stat,index,value"), "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&report.to_json().expect("json")).expect("parse");
    assert_eq!(json["measures"].as_array().map(Vec::len), Some(5));

    // A set against itself: no drift, no distance.
    let same = Sets {
        variant: sets.against.clone().expect("against"),
        against: sets.against.clone(),
        reseed: None,
    };
    let r = eval::evaluate(&clap, &same, &Prompts::None).expect("evaluate");
    assert!(
        r.measures[0].value.abs() < 1e-9,
        "FAD(a, a) = {}",
        r.measures[0].value
    );
    assert!(
        r.measures[1].value.abs() < 1e-6,
        "drift(a, a) = {}",
        r.measures[1].value
    );
}

#[test]
fn loudness_normalisation_removes_gain() {
    let tmp = TempDir::new("clap-lufs");
    let clap = model(tmp.path());
    let quiet = folder(tmp.path(), "quiet", 7, 0.05);
    let loud = folder(tmp.path(), "loud", 7, 0.8);
    let e = |d: &Path, l| eval::embed_folder(&clap, d, l, &mut |_, _, _| {}).expect("embed");
    let (q, l) = (e(&quiet, Some(-14.0)), e(&loud, Some(-14.0)));
    let d = aria_clap::measure::drift(&q.embeddings, &l.embeddings).expect("drift");
    assert!(d.max < 1e-5, "normalised: drift {}", d.max);
    let (q, l) = (e(&quiet, None), e(&loud, None));
    let d = aria_clap::measure::drift(&q.embeddings, &l.embeddings).expect("drift");
    assert!(
        d.max > 1e-4,
        "as read, gain moves the embedding: drift {}",
        d.max
    );
}

#[test]
fn errors_name_what_is_wrong() {
    let tmp = TempDir::new("clap-eval-err");
    let clap = model(tmp.path());
    let msg = |e: aria_clap::ClapError| e.to_string();

    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).expect("mkdir");
    let e = msg(eval::embed_folder(&clap, &empty, None, &mut |_, _, _| {}).expect_err("no clips"));
    assert!(e.contains("no audio files"), "{e}");

    // Unpaired names.
    let v = folder(tmp.path(), "v", 1, 1.0);
    let a = tmp.path().join("a");
    std::fs::create_dir_all(&a).expect("mkdir");
    write_clip(&a.join("other.wav"), 300.0, 1, 1.0);
    let sets = Sets {
        variant: eval::embed_folder(&clap, &v, None, &mut |_, _, _| {}).expect("v"),
        against: Some(eval::embed_folder(&clap, &a, None, &mut |_, _, _| {}).expect("a")),
        reseed: None,
    };
    let e = msg(eval::evaluate(&clap, &sets, &Prompts::None).expect_err("unpaired"));
    assert!(
        e.contains("clip0") && e.contains("no file of that name"),
        "{e}"
    );

    // A prompt missing for a clip; a malformed prompts file.
    let p = tmp.path().join("p.csv");
    std::fs::write(&p, "clip0,a tone\n").expect("write");
    let prompts = Prompts::PerFile(eval::read_prompts(&p).expect("prompts"));
    let only_v = Sets {
        against: None,
        ..sets.clone()
    };
    let e = msg(eval::evaluate(&clap, &only_v, &prompts).expect_err("no prompt"));
    assert!(e.contains("no prompt for `clip1`"), "{e}");
    std::fs::write(&p, "just a line without a separator\n").expect("write");
    let e = msg(eval::read_prompts(&p).expect_err("malformed"));
    assert!(e.contains("line 1"), "{e}");
    std::fs::write(&p, "{\"file\": 3}\n").expect("write");
    let e = msg(eval::read_prompts(&p).expect_err("bad json line"));
    assert!(e.contains("\"file\""), "{e}");

    // A WAV whose header declares ten hours is refused from the header, before decoding.
    let big = tmp.path().join("big.wav");
    let frames: u32 = 48_000 * 3600 * 10;
    let data_bytes = frames * 2;
    let mut h = Vec::new();
    h.extend_from_slice(b"RIFF");
    h.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes()); // PCM
    h.extend_from_slice(&1u16.to_le_bytes()); // mono
    h.extend_from_slice(&48_000u32.to_le_bytes());
    h.extend_from_slice(&96_000u32.to_le_bytes());
    h.extend_from_slice(&2u16.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_bytes.to_le_bytes());
    h.extend_from_slice(&[0u8; 64]);
    std::fs::write(&big, &h).expect("write");
    let t0 = std::time::Instant::now();
    let e = msg(eval::read_clip(&big).expect_err("ten hours"));
    assert!(e.contains("36000 s") && e.contains("big.wav"), "{e}");
    assert!(t0.elapsed().as_secs() < 5);
}

#[test]
fn a_text_vector_does_not_depend_on_its_batch() {
    let tmp = TempDir::new("clap-text-batch");
    let clap = model(tmp.path());
    let texts = [
        "a much longer description of rain falling on a metal roof at night",
        "dog",
        "birdsong at dawn",
    ];
    let together = clap.embed_texts(&texts).expect("batch");
    for (i, t) in texts.iter().enumerate() {
        let alone = clap.embed_texts(&[t]).expect("alone");
        let d = aria_clap::measure::drift(&alone, &together[i..i + 1]).expect("drift");
        assert!(d.max < 1e-6, "{t}: {}", d.max);
    }
}
