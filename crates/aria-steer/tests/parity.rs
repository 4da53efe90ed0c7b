//! Parity with the reference interventions of `steer.safetensors` (official code + PyTorch
//! forward hooks), replayed through `aria::Pipeline` with the recorded draws: each steered run's
//! latents within 1e-5 relative, the baseline mean norms within 1e-6 relative.
#![allow(clippy::unwrap_used)]

mod common;

use aria_core::hooks::ActivationHook;
use aria_core::{Tensor, WeightLoader};
use aria_steer::direction::{normalize, ContrastSet, FORMAT_VERSION};
use aria_steer::spec::hook_from_specs;
use aria_steer::{
    DirectionEntry, DirectionFile, DirectionMeta, ModelIdentity, NormScope, ResidualCapture, Scale,
    Site, SteerOp, SteerSpec, Steering, SteeringHook, StepSpan, StrengthConvention,
};
use aria_testing::fixtures::rel_err;
use aria_testing::TempDir;

const TOL: f32 = 1e-5;

fn vec(w: &WeightLoader, k: &str) -> Vec<f32> {
    w.get_any(k).unwrap().to_vec_f32().unwrap()
}

fn int(w: &WeightLoader, k: &str) -> Vec<usize> {
    w.get_any(k)
        .unwrap()
        .to_vec::<i64>()
        .unwrap()
        .into_iter()
        .map(|x| x as usize)
        .collect()
}

fn check(what: &str, a: &Tensor, r: &Tensor, base: &Tensor) {
    assert_eq!(a.shape(), r.shape(), "{what}: shape");
    let (a, r, b) = (
        a.to_vec_f32().unwrap(),
        r.to_vec_f32().unwrap(),
        base.to_vec_f32().unwrap(),
    );
    let e = rel_err(&a, &r);
    eprintln!(
        "{what}: relative error {e:.2e} (effect size {:.2e})",
        rel_err(&r, &b)
    );
    assert!(e <= TOL, "{what}: relative error {e:.3e} > {TOL:.0e}");
}

struct Reference {
    add: Steering,
    project: Steering,
    text: Steering,
}

fn reference(w: &WeightLoader) -> Reference {
    let add_block = int(w, "add.block")[0];
    let steps = int(w, "add.steps");
    let norm = vec(w, &format!("mean_norm.block{add_block}"))[0];
    let add = Steering::new(
        Site::Residual(add_block),
        SteerOp::Add,
        vec(w, "add.alpha")[0],
        vec(w, "add.direction"),
        norm,
    )
    .unwrap()
    .with_steps(Some(StepSpan {
        lo: steps[0],
        hi: steps[1],
    }))
    .unwrap();
    let project = Steering::new(
        Site::Residual(int(w, "project.block")[0]),
        SteerOp::Project,
        vec(w, "project.beta")[0],
        vec(w, "project.direction"),
        0.0,
    )
    .unwrap();
    // `text.vector` is a raw vector: its direction with a raw strength of its norm.
    let (d, n) = normalize(&vec(w, "text.vector"), "text.vector").unwrap();
    let text = Steering::new(Site::Text, SteerOp::Add, n as f32, d, 0.0)
        .unwrap()
        .with_scale(Scale::Raw);
    Reference { add, project, text }
}

fn replay(folder: &str) {
    let Some((pipe, steer)) = common::pipeline(folder) else {
        return;
    };
    let w = WeightLoader::open(&[&steer]).unwrap();
    let base_ref = w.get_any("base.latents").unwrap();

    // Baseline and mean norms (every token, every row, every step: the fixture's convention).
    let depth = pipe.dit().config().depth;
    let blocks: Vec<usize> = (0..depth).collect();
    let cap = ResidualCapture::new(&blocks, NormScope::AllTokens);
    let (base, _) = common::run(&pipe, &steer, Some(&cap), false);
    check(&format!("{folder} base"), &base, &base_ref, &base_ref);
    for k in 0..depth {
        let ours = cap.mean_norm(k).unwrap().unwrap();
        let theirs = vec(&w, &format!("mean_norm.block{k}"))[0] as f64;
        let e = (ours - theirs).abs() / theirs;
        eprintln!("{folder} mean_norm.block{k}: {ours:.7} vs {theirs:.7}, relative {e:.2e}");
        assert!(
            e <= 1e-6,
            "{folder} mean_norm.block{k}: relative error {e:.3e} > 1e-6"
        );
    }

    let r = reference(&w);
    let cases: [(&str, Vec<&Steering>); 4] = [
        ("add", vec![&r.add]),
        ("project", vec![&r.project]),
        ("text", vec![&r.text]),
        ("multi", vec![&r.add, &r.project]),
    ];
    for (name, items) in cases {
        let hook = SteeringHook::from_steerings(items.into_iter().cloned().collect());
        let (lat, _) = common::run(&pipe, &steer, Some(&hook as &dyn ActivationHook), false);
        let want = w.get_any(&format!("{name}.latents")).unwrap();
        check(&format!("{folder} {name}"), &lat, &want, &base_ref);
    }

    // The same add through a direction file and the CLI spec form.
    let files = pipe.files();
    let id = ModelIdentity::from_model_files(&files.config, &files.weights).unwrap();
    let add_block = int(&w, "add.block")[0];
    let file = DirectionFile {
        meta: DirectionMeta {
            format_version: FORMAT_VERSION,
            entries: vec![Site::Residual(add_block)],
            model: id.clone(),
            method: "synthetic".into(),
            positive: Some(ContrastSet {
                name: "reference".into(),
                count: 0,
            }),
            negative: None,
            strength_convention: StrengthConvention::MeanNorm,
            norm_scope: NormScope::AllTokens,
            probe_accuracy: vec![],
            best_block: None,
            default_strength: None,
            settings: None,
        },
        entries: vec![DirectionEntry {
            site: Site::Residual(add_block),
            direction: vec(&w, "add.direction"),
            mean_norm: vec(&w, &format!("mean_norm.block{add_block}"))[0],
        }],
    };
    let dir = TempDir::new(&format!("steer-parity-{folder}"));
    let path = dir.join("add.safetensors");
    file.save(&path).unwrap();
    let loaded = DirectionFile::load_for(&path, &id, false).unwrap();
    assert_eq!(loaded, file);
    let steps = int(&w, "add.steps");
    let spec = SteerSpec::parse(&format!(
        "{}:block={add_block}:strength={}:steps={}-{}",
        path.display(),
        vec(&w, "add.alpha")[0],
        steps[0],
        steps[1]
    ))
    .unwrap();
    let hook = hook_from_specs(&[spec], &id, false).unwrap();
    let (lat, _) = common::run(&pipe, &steer, Some(&hook as &dyn ActivationHook), false);
    check(
        &format!("{folder} add via file"),
        &lat,
        &w.get_any("add.latents").unwrap(),
        &base_ref,
    );
}

#[test]
fn reference_interventions_small_structure() {
    replay("sa3-tiny");
}

#[test]
fn reference_interventions_medium_structure() {
    replay("sa3-tiny-medium");
}
