//! Spec parsing, direction-file validation and errors, the hook's arithmetic and the probe,
//! without model fixtures.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
use aria_core::Tensor;
use aria_steer::direction::{ContrastSet, FORMAT_VERSION};
use aria_steer::extract::probe_accuracy;
use aria_steer::spec::SiteKind;
use aria_steer::{
    DirectionEntry, DirectionFile, DirectionMeta, ModelDims, ModelIdentity, NormScope, Scale, Site,
    SteerError, SteerOp, SteerSpec, Steering, SteeringHook, StepSpan, StrengthConvention,
};
use aria_testing::TempDir;

fn identity() -> ModelIdentity {
    ModelIdentity {
        dims: ModelDims {
            embed_dim: 4,
            depth: 2,
            io_channels: 3,
            cond_token_dim: 5,
        },
        signature: "00000000000000aa".into(),
        weight_checksum: "00000000000000bb".into(),
    }
}

fn sample_file() -> DirectionFile {
    let entries = vec![
        DirectionEntry {
            site: Site::Residual(0),
            direction: vec![1.0, 0.0, 0.0, 0.0],
            mean_norm: 2.0,
        },
        DirectionEntry {
            site: Site::Residual(1),
            direction: vec![0.0, 0.6, 0.8, 0.0],
            mean_norm: 3.0,
        },
        DirectionEntry {
            site: Site::Latent,
            direction: vec![0.0, 0.0, 1.0],
            mean_norm: 1.5,
        },
        DirectionEntry {
            site: Site::Text,
            direction: vec![0.0, 0.0, 0.0, 0.0, 1.0],
            mean_norm: 0.5,
        },
    ];
    DirectionFile {
        meta: DirectionMeta {
            format_version: FORMAT_VERSION,
            entries: entries.iter().map(|e| e.site).collect(),
            model: identity(),
            method: "difference-in-means".into(),
            positive: Some(ContrastSet {
                name: "pos.txt".into(),
                count: 3,
            }),
            negative: Some(ContrastSet {
                name: "neg.txt".into(),
                count: 4,
            }),
            strength_convention: StrengthConvention::MeanNorm,
            norm_scope: NormScope::ValidLatentTokens,
            probe_accuracy: vec![(0, 0.6), (1, 0.9)],
            best_block: Some(1),
            default_strength: Some(0.1),
            settings: None,
        },
        entries,
    }
}

#[test]
fn spec_parses_every_option_and_windows_paths() {
    let s = SteerSpec::parse(
        "dir.safetensors:site=residual:block=3:strength=-0.25:steps=2-5:op=project:scale=raw",
    )
    .unwrap();
    assert_eq!(s.path, Path::new("dir.safetensors"));
    assert_eq!(s.site, Some(SiteKind::Residual));
    assert_eq!(s.block, Some(3));
    assert_eq!(s.strength, Some(-0.25));
    assert_eq!(s.steps, Some(StepSpan { lo: 2, hi: 5 }));
    assert_eq!(s.op, Some(SteerOp::Project));
    assert_eq!(s.scale, Some(Scale::Raw));
    let w = SteerSpec::parse(r"C:\dirs\x.safetensors:strength=0.1").unwrap();
    assert_eq!(w.path, PathBuf::from(r"C:\dirs\x.safetensors"));
    assert_eq!(w.strength, Some(0.1));
    let w = SteerSpec::parse(r"C:\x.safetensors").unwrap();
    assert_eq!(w.path, PathBuf::from(r"C:\x.safetensors"));
    assert_eq!(w.strength, None);
    for (bad, says) in [
        ("f:strength=abc", "not a number"),
        ("f:strength=0.1:strength=0.2", "twice"),
        ("f:block=x", "block"),
        ("f:steps=5-2", "after"),
        ("f:steps=3", "LO-HI"),
        ("f:op=scale", "add or project"),
        ("f:site=mlp", "residual, latent, text"),
        ("f:strength=1:colour=red", "unknown option `colour`"),
        ("f:strength=1:oops", "not key=value"),
        (":strength=1", "no direction file"),
        ("f:site=text:block=2", "residual site only"),
        ("f:strength=inf", "not finite"),
    ] {
        let e = SteerSpec::parse(bad).unwrap_err();
        assert!(matches!(e, SteerError::Spec { .. }), "{bad}: {e}");
        assert!(
            e.to_string().contains(says),
            "{bad}: `{e}` should say `{says}`"
        );
    }
    // A `:` not followed by an option key belongs to the file name.
    let s = SteerSpec::parse("a:b.safetensors:block=1").unwrap();
    assert_eq!(
        (s.path, s.block),
        (PathBuf::from("a:b.safetensors"), Some(1))
    );
}

#[test]
fn spec_resolves_against_a_file() {
    let f = sample_file();
    let r = SteerSpec::parse("x:site=residual")
        .unwrap()
        .resolve(&f)
        .unwrap();
    assert_eq!(
        (r.site(), r.strength(), r.op()),
        (Site::Residual(1), 0.1, SteerOp::Add)
    );
    let r = SteerSpec::parse("x:block=0:strength=2:op=project")
        .unwrap()
        .resolve(&f)
        .unwrap();
    assert_eq!(
        (r.site(), r.strength(), r.op()),
        (Site::Residual(0), 2.0, SteerOp::Project)
    );
    let r = SteerSpec::parse("x:site=latent:steps=1-3")
        .unwrap()
        .resolve(&f)
        .unwrap();
    assert_eq!(
        (r.site(), r.steps()),
        (Site::Latent, Some(StepSpan { lo: 1, hi: 3 }))
    );
    let e = SteerSpec::parse("x:site=text:steps=1-3")
        .unwrap()
        .resolve(&f)
        .unwrap_err();
    assert!(e.to_string().contains("no step span"), "{e}");
    let e = SteerSpec::parse("x:block=7")
        .unwrap()
        .resolve(&f)
        .unwrap_err();
    assert!(e.to_string().contains("no residual block 7"), "{e}");
    let mut g = f.clone();
    g.meta.default_strength = None;
    let e = SteerSpec::parse("x:block=0")
        .unwrap()
        .resolve(&g)
        .unwrap_err();
    assert!(e.to_string().contains("strength"), "{e}");
}

#[test]
fn file_round_trip_and_model_check() {
    let f = sample_file();
    let p_dir = TempDir::new("steer-units");
    let p = p_dir.join("round.safetensors");
    f.save(&p).unwrap();
    let g = DirectionFile::load(&p).unwrap();
    assert_eq!(g, f);
    g.check_model(&p, &identity(), false).unwrap();
    let mut other = identity();
    other.signature = "1111111111111111".into();
    let e = g.check_model(&p, &other, false).unwrap_err();
    assert!(
        matches!(e, SteerError::ModelMismatch { .. }) && e.to_string().contains("signature"),
        "{e}"
    );
    g.check_model(&p, &other, true).unwrap();
    let mut shallow = identity();
    shallow.dims.depth = 1;
    let e = g.check_model(&p, &shallow, true).unwrap_err();
    assert!(e.to_string().contains("has 1 blocks"), "{e}");
    let mut wide = identity();
    wide.dims.cond_token_dim = 6;
    let e = g.check_model(&p, &wide, true).unwrap_err();
    assert!(
        matches!(
            e,
            SteerError::Dimension {
                expected: 6,
                found: 5,
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn corrupt_files_are_clear_errors() {
    let f = sample_file();
    let p_dir = TempDir::new("steer-units");
    let p = p_dir.join("good.safetensors");
    f.save(&p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    // Truncated data section.
    let t_dir = TempDir::new("steer-units");
    let t = t_dir.join("trunc.safetensors");
    std::fs::write(&t, &bytes[..bytes.len() - 7]).unwrap();
    let e = DirectionFile::load(&t).unwrap_err();
    assert!(e.to_string().contains("truncated"), "{e}");
    // Truncated header.
    std::fs::write(&t, &bytes[..5]).unwrap();
    assert!(DirectionFile::load(&t).is_err());
    // Garbage.
    std::fs::write(&t, b"not a safetensors file at all").unwrap();
    assert!(DirectionFile::load(&t).is_err());
    // A plain safetensors file without metadata (a bare array).
    let bare = Tensor::from_vec(vec![1f32, 0.0, 0.0, 0.0], &[4]).unwrap();
    aria_core::save_safetensors(&t, &[("direction", &bare)], None).unwrap();
    let e = DirectionFile::load(&t).unwrap_err();
    assert!(e.to_string().contains("not an aria direction file"), "{e}");
    // Metadata naming a missing tensor; a non-unit direction; a future version.
    let mut g = f.clone();
    g.entries.pop();
    g.meta.entries.pop();
    g.save(&t).unwrap();
    let mut h = DirectionFile::load(&t).unwrap();
    assert_eq!(h.entries.len(), 3);
    h.meta.entries.push(Site::Text);
    assert!(h
        .save(&t)
        .unwrap_err()
        .to_string()
        .contains("metadata lists"));
    let mut n = f.clone();
    n.entries[0].direction = vec![2.0, 0.0, 0.0, 0.0];
    assert!(n.save(&t).unwrap_err().to_string().contains("unit vector"));
    let mut v = f.clone();
    v.meta.format_version = 99;
    assert!(v.save(&t).unwrap_err().to_string().contains("version 99"));
    // A corrupted metadata string.
    let mut meta = std::collections::HashMap::new();
    meta.insert(
        aria_steer::direction::META_KEY.to_string(),
        "{broken".to_string(),
    );
    aria_core::save_safetensors(&t, &[("direction", &bare)], Some(&meta)).unwrap();
    let e = DirectionFile::load(&t).unwrap_err();
    assert!(e.to_string().contains("malformed"), "{e}");
}

fn ctx(site: HookSite, step: Option<usize>) -> HookContext<'static> {
    HookContext {
        step,
        ..HookContext::new(site)
    }
}

#[test]
fn add_and_project_arithmetic_and_order() {
    // [B=1, N=2, E=2]
    let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 2, 2]).unwrap();
    let add = Steering::new(Site::Residual(0), SteerOp::Add, 0.5, vec![0.0, 1.0], 4.0).unwrap();
    let proj = Steering::new(
        Site::Residual(0),
        SteerOp::Project,
        1.0,
        vec![0.0, 1.0],
        0.0,
    )
    .unwrap();
    let c = ctx(HookSite::Residual(0), Some(0));
    let h = SteeringHook::from_steerings(vec![add.clone()]);
    assert_eq!(
        run_hook(Some(&h), &c, x.clone())
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 4.0, 3.0, 6.0]
    );
    // Raw scale ignores the norm.
    let raw = SteeringHook::from_steerings(vec![add.clone().with_scale(Scale::Raw)]);
    assert_eq!(
        run_hook(Some(&raw), &c, x.clone())
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 2.5, 3.0, 4.5]
    );
    // add then project removes the component; project then add leaves α·n̄·d.
    let ap = SteeringHook::from_steerings(vec![add.clone(), proj.clone()]);
    assert_eq!(
        run_hook(Some(&ap), &c, x.clone())
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 0.0, 3.0, 0.0]
    );
    let pa = SteeringHook::from_steerings(vec![proj, add]);
    assert_eq!(
        run_hook(Some(&pa), &c, x.clone())
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 2.0, 3.0, 2.0]
    );
    // Other blocks are untouched.
    assert!(ap
        .on_activation(&ctx(HookSite::Residual(1), Some(0)), &x)
        .unwrap()
        .is_none());
}

#[test]
fn scaled_hooks_ramp_the_strength() {
    let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 2, 2]).unwrap();
    let add = Steering::new(Site::Residual(0), SteerOp::Add, 0.5, vec![0.0, 1.0], 4.0).unwrap();
    let h = SteeringHook::from_steerings(vec![add.clone()]);
    let c = ctx(HookSite::Residual(0), Some(0));
    // Half the ramp: half the shift (0.5 · 0.5 · 4 = 1).
    let half = h.scaled(0.5).unwrap();
    assert_eq!(half.steerings()[0].strength(), 0.25);
    assert_eq!(
        run_hook(Some(&half), &c, x.clone())
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0, 3.0, 3.0, 5.0]
    );
    // Zero: the hook leaves the activation alone.
    let zero = h.scaled(0.0).unwrap();
    assert!(!zero.wants(HookSite::Residual(0)));
    assert!(zero.on_activation(&c, &x).unwrap().is_none());
    assert!(matches!(
        h.scaled(f32::INFINITY),
        Err(SteerError::Invalid(_))
    ));
    assert!(add.with_strength(f32::NAN).is_err());
}

#[test]
fn latent_acts_on_channels_and_spans_gate() {
    // [B=1, C=2, T=3]: direction over channels.
    let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 10.0, 20.0, 30.0], &[1, 2, 3]).unwrap();
    let p = Steering::new(Site::Latent, SteerOp::Project, 0.5, vec![0.0, 1.0], 0.0)
        .unwrap()
        .with_steps(Some(StepSpan { lo: 2, hi: 3 }))
        .unwrap();
    let h = SteeringHook::from_steerings(vec![p]);
    for (step, active) in [
        (Some(1), false),
        (Some(2), true),
        (Some(3), true),
        (Some(4), false),
        (None, false),
    ] {
        let y = h.on_activation(&ctx(HookSite::Latent, step), &x).unwrap();
        assert_eq!(y.is_some(), active, "step {step:?}");
        if let Some(y) = y {
            assert_eq!(
                y.to_vec::<f32>().unwrap(),
                vec![1.0, 2.0, 3.0, 5.0, 10.0, 15.0]
            );
        }
    }
    // Strength 0 is not even asked for the site.
    let z = SteeringHook::from_steerings(vec![Steering::new(
        Site::Latent,
        SteerOp::Add,
        0.0,
        vec![1.0, 0.0],
        1.0,
    )
    .unwrap()]);
    assert!(!z.wants(HookSite::Latent));
    assert!(z
        .on_activation(&ctx(HookSite::Latent, Some(0)), &x)
        .unwrap()
        .is_none());
    // A width mismatch is a shape error naming the site.
    let w = SteeringHook::from_steerings(vec![Steering::new(
        Site::Latent,
        SteerOp::Add,
        1.0,
        vec![1.0, 0.0, 0.0],
        1.0,
    )
    .unwrap()]);
    let e = w
        .on_activation(&ctx(HookSite::Latent, Some(0)), &x)
        .unwrap_err();
    assert!(
        e.to_string().contains("latent direction has 3 dimensions"),
        "{e}"
    );
    assert!(Steering::new(Site::Latent, SteerOp::Add, f32::NAN, vec![1.0], 1.0).is_err());
    assert!(
        Steering::new(Site::Latent, SteerOp::Add, 1.0, vec![1.0], 1.0)
            .unwrap()
            .with_steps(Some(StepSpan { lo: 3, hi: 1 }))
            .is_err()
    );
}

/// Deterministic pseudo-random numbers in [-1, 1).
fn lcg(state: &mut u64) -> f32 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

#[test]
fn probe_separates_shifted_sets_and_not_random_ones() {
    let mut s = 1u64;
    let mut set = |shift: f32, n: usize| -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                (0..16)
                    .map(|j| lcg(&mut s) + if j == 3 { shift } else { 0.0 })
                    .collect()
            })
            .collect()
    };
    let (p, q) = (set(1.5, 20), set(-1.5, 20));
    let acc = probe_accuracy(&p, &q, 5).unwrap();
    assert!(acc >= 0.95, "separable: {acc}");
    let (p, q) = (set(0.0, 20), set(0.0, 20));
    let acc = probe_accuracy(&p, &q, 5).unwrap();
    assert!(acc <= 0.75, "random: {acc}");
    assert!(probe_accuracy(&p[..1], &q, 5).is_err());
}
