//! Arbitrary bytes as a `POST /v1/generate` request: the JSON body is parsed as the server
//! parses it (`serde_json` into `GenerateBody`) and validated with the default `Limits`, once
//! against a permissive server (allow-listed folders, uploaded directions, warm-start cache)
//! and once against a strict one (none of those, `max_seconds` = 5). Multipart file parts are
//! taken from the input too: after the JSON, each NUL byte starts a part `NAME=BYTES`.
//!
//! Properties: no panic; every refusal names its field or limit; an accepted request respects
//! every limit (prompt lengths, duration, steps, guidance, sampler, noise level, inpainting
//! ranges, LoRA and steering counts and values, upload sizes, warm-start combinations), its
//! allow-listed names stay inside their folder, and its `JobSpec` survives the JSON round trip
//! the job store makes. Accepted uploads then go through the readers the server runs on them
//! (audio decoding, direction-file parsing).
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use aria_core::SafeTensorsFile;
use aria_serve::request::{
    validate, Checks, GenerateBody, JobSpec, ModelLimits, SavedInputs, SteerSource, Upload,
};
use aria_serve::Limits;
use libfuzzer_sys::fuzz_target;

const JOB: &str = "0123456789abcdef";

/// A folder holding one allow-listed file `a.safetensors`, made once per process.
fn allow_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("aria-fuzz-request-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp folder");
        std::fs::write(d.join("a.safetensors"), b"x").expect("temp file");
        d
    })
}

/// Split `data` into the JSON body and the multipart parts that follow it.
fn split(data: &[u8]) -> (&[u8], Vec<Upload>) {
    let mut it = data.split(|b| *b == 0);
    let body = it.next().unwrap_or_default();
    let uploads = it
        .map(|p| {
            let (name, bytes) = match p.iter().position(|b| *b == b'=') {
                Some(i) => (&p[..i], &p[i + 1..]),
                None => (p, &p[..0]),
            };
            Upload {
                field: String::from_utf8_lossy(name).into_owned(),
                bytes: bytes.to_vec(),
            }
        })
        .collect();
    (body, uploads)
}

fn check_accepted(spec: &JobSpec, checks: &Checks<'_>, saved: &SavedInputs) {
    let (l, m) = (checks.limits, checks.model);
    let chars = |s: &str| s.chars().count();
    assert!(!spec.prompt.trim().is_empty(), "empty prompt accepted");
    assert!(chars(&spec.prompt) <= l.prompt_chars, "prompt too long");
    if let Some(n) = &spec.negative_prompt {
        assert!(chars(n) <= l.prompt_chars, "negative prompt too long");
    }
    let max_seconds = l
        .max_seconds
        .map_or(m.max_seconds, |s| s.min(m.max_seconds));
    assert!(
        spec.seconds.is_finite() && spec.seconds > 0.0 && spec.seconds <= max_seconds,
        "seconds {} outside (0, {max_seconds}]",
        spec.seconds
    );
    assert!(
        (1..=l.max_steps).contains(&spec.steps),
        "steps {}",
        spec.steps
    );
    assert!(
        spec.cfg.is_finite() && (0.0..=100.0).contains(&spec.cfg),
        "cfg {}",
        spec.cfg
    );
    assert!(
        aria::SamplerKind::parse(&spec.sampler).is_ok(),
        "sampler `{}`",
        spec.sampler
    );
    if let Some(i) = &spec.init {
        assert!(
            i.noise_level > 0.0 && i.noise_level <= 1.0,
            "noise level {}",
            i.noise_level
        );
        assert!(i.ranges.is_empty());
    }
    if let Some(i) = &spec.inpaint {
        assert!(!i.ranges.is_empty(), "inpainting without ranges");
        for &(a, b) in &i.ranges {
            assert!(
                a >= 0.0 && a < b && b <= spec.seconds,
                "range [{a}, {b}] of {} s",
                spec.seconds
            );
        }
    }
    assert!(spec.loras.len() <= l.max_loras, "too many LoRAs");
    for lora in &spec.loras {
        assert!(lora.strength.is_finite() && lora.strength.abs() <= 10.0);
        assert!(checks.lora_dir.is_some(), "LoRA without a LoRA folder");
        assert!(
            !lora.name.contains(['/', '\\']) && !lora.name.starts_with('.'),
            "LoRA name `{}` leaves its folder",
            lora.name
        );
    }
    assert!(spec.steer.len() <= l.max_steer, "too many directions");
    for s in &spec.steer {
        match &s.source {
            SteerSource::Name(n) => {
                assert!(checks.steer_dir.is_some(), "direction without a folder");
                assert!(
                    !n.contains(['/', '\\']) && !n.starts_with('.'),
                    "direction name `{n}` leaves its folder"
                );
            }
            SteerSource::Upload(f) => {
                assert!(checks.steer_uploads, "uploaded direction accepted");
                assert!(saved.files.iter().any(|(n, _)| n == f), "upload not saved");
            }
        }
        if let Some(st) = s.strength {
            assert!(st.is_finite() && st.abs() <= 1000.0, "strength {st}");
        }
        if let Some(mode) = &s.mode {
            assert!(mode == "add" || mode == "project", "mode `{mode}`");
        }
        if let Some(site) = &s.site {
            assert!(matches!(site.as_str(), "residual" | "latent" | "text"));
        }
        if let Some([lo, hi]) = s.steps {
            assert!(lo <= hi && hi < spec.steps, "step span [{lo}, {hi}]");
        }
    }
    if spec.warm_start {
        assert!(checks.warm_available, "warm start without a cache");
        assert!(spec.init.is_none() && spec.inpaint.is_none() && spec.steer.is_empty());
    }
    for (name, bytes) in &saved.files {
        assert!(bytes.len() <= l.upload_bytes, "{name}: upload too large");
        assert!(
            name.starts_with(&format!("inputs/{JOB}.")) && !name.contains(".."),
            "saved as `{name}`"
        );
    }
    let json = serde_json::to_string(spec).expect("an accepted spec encodes");
    let mut back: JobSpec = serde_json::from_str(&json).expect("a stored spec decodes");
    // serde_json (without `float_roundtrip`) may read an f64 back one ulp off: allow that on
    // the f64 fields, then require everything else to be identical.
    let near = |a: f64, b: f64| (a - b).abs() <= 4.0 * f64::EPSILON * a.abs().max(b.abs());
    assert!(near(back.seconds, spec.seconds), "seconds round trip");
    back.seconds = spec.seconds;
    if let (Some(b), Some(s)) = (back.inpaint.as_mut(), spec.inpaint.as_ref()) {
        assert_eq!(b.ranges.len(), s.ranges.len());
        for (rb, rs) in b.ranges.iter_mut().zip(&s.ranges) {
            assert!(near(rb.0, rs.0) && near(rb.1, rs.1), "range round trip");
            *rb = *rs;
        }
    }
    assert_eq!(&back, spec, "the job store's round trip changes the spec");
    let _ = spec.batch_key();
}

/// Run the readers the server runs on saved uploads (before it queues the job).
fn read_saved(saved: &SavedInputs) {
    for (name, bytes) in &saved.files {
        if name.ends_with(".safetensors") {
            if let Ok(st) = SafeTensorsFile::from_bytes(name.as_str(), bytes) {
                let _ = aria_steer::DirectionFile::from_safetensors(Path::new(name), &st);
            }
        } else {
            let path = allow_dir().join("upload.audio");
            std::fs::write(&path, bytes).expect("temp file");
            if let Ok(clip) = aria_codec::audio::read_audio(&path) {
                assert!(clip.sample_rate > 0, "decoded audio at 0 Hz");
                assert_eq!(clip.data.shape(), &[clip.channels(), clip.frames()]);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (json, uploads) = split(data);
    let Ok(body) = serde_json::from_slice::<GenerateBody>(json) else {
        return;
    };
    let limits = Limits::default();
    let strict_limits = Limits {
        max_seconds: Some(5.0),
        ..Limits::default()
    };
    let model = ModelLimits {
        max_seconds: 47.5,
        default_steps: 8,
        default_cfg: 1.0,
        default_sampler: "pingpong".into(),
    };
    let permissive = Checks {
        limits: &limits,
        model: &model,
        lora_dir: Some(allow_dir()),
        steer_dir: Some(allow_dir()),
        steer_uploads: true,
        warm_available: true,
    };
    let strict = Checks {
        limits: &strict_limits,
        model: &model,
        lora_dir: None,
        steer_dir: None,
        steer_uploads: false,
        warm_available: false,
    };
    for checks in [permissive, strict] {
        let mut saved = SavedInputs::default();
        match validate(body.clone(), uploads.clone(), JOB, &checks, &mut saved) {
            Ok(spec) => {
                check_accepted(&spec, &checks, &saved);
                read_saved(&saved);
            }
            Err(e) => assert!(
                e.field.is_some() || e.limit.is_some(),
                "refusal names nothing: {}",
                e.message
            ),
        }
    }
});
