//! The six further LoRA families (dora-cols, bora and the four -xs ones, whose bases come from
//! an SVD of the checkpoint weights) and a two-file blend, replayed against the official code:
//! one DiT forward at strength 0.7 with every hidden state, the merged weights, the duration
//! embedder's LoRA; then strengths changed and files removed without reloading.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use std::sync::Arc;

use aria_core::nn::{Bias, Linear};
use aria_core::{Tensor, WeightLoader};
use aria_dit::dit::Dit;
use aria_dit::lora::{AdapterKind, LoraFile, LoraStack};
use aria_testing::fixtures::{fixture, rel_err};
use common::{get, load_dit, tensors, try_get};

const FOLDER: &str = "sa3-tiny-extra";
/// Acceptance for the forward outputs (max abs diff / max abs reference, against float64).
const TOL: f32 = 1e-5;

fn check(what: &str, got: &Tensor, want: &Tensor, tol: f32) -> f32 {
    let got = got.reshape(want.shape()).unwrap();
    let g = got.to_vec_f32().unwrap();
    assert!(g.iter().all(|x| x.is_finite()), "{what}: non-finite values");
    let e = rel_err(&g, &want.to_vec_f32().unwrap());
    eprintln!("{what}: rel err {e:.3e}");
    assert!(e <= tol, "{what}: rel err {e:.3e} > {tol:.1e}");
    e
}

struct Inputs {
    fwd: WeightLoader,
    fam: WeightLoader,
}

fn inputs() -> Option<Inputs> {
    Some(Inputs {
        fwd: tensors(&format!("{FOLDER}/lora_forward.safetensors"))?,
        fam: tensors(&format!("{FOLDER}/lora_families.safetensors"))?,
    })
}

fn forward(dit: &Dit, i: &Inputs, case: &str) -> (Tensor, Vec<Tensor>) {
    dit.forward_with_hidden(
        &get(&i.fwd, "in.lora.x"),
        &get(&i.fwd, "in.lora.t"),
        &get(&i.fam, &format!("in.{case}.cross_attn_cond")),
        &get(&i.fam, &format!("in.{case}.global_cond")),
        Some(&get(&i.fwd, "in.lora.local_add_cond")),
        Some(&get(&i.fwd, "in.lora.padding_mask")),
    )
    .unwrap()
}

fn open(file: &str) -> Option<Arc<LoraFile>> {
    let path = fixture(&format!("{FOLDER}/{file}"))?;
    Some(Arc::new(LoraFile::open(path).unwrap()))
}

/// The duration embedder's Linear of the fixture model (outside the DiT).
fn seconds_linear() -> Linear {
    let m = WeightLoader::open_checkpoint(fixture(&format!("{FOLDER}/model.safetensors")).unwrap())
        .unwrap();
    let module = "conditioner.conditioners.seconds_total.embedder.embedding.1";
    Linear::load(
        &m.pp(module),
        256,
        get(&m, &format!("{module}.bias")).elem_count(),
        Bias::Yes,
    )
    .unwrap()
}

/// Compare the adapted model's merged weights, `v`, hidden states and duration embedding with
/// the reference of `case`.
fn compare(dit: &Dit, stack: &LoraStack, i: &Inputs, case: &str) {
    // The reference's -xs bases come from a float32 SVD; with the nearly flat spectra of
    // random weights (neighbouring singular values 0.5 % apart) its singular vectors carry
    // errors of a few 1e-5 relative, which the merged weight shows (aria's SVD runs in f64).
    let xs = stack.entries().iter().any(|(f, _)| f.kind().is_xs());
    let weight_tol = if xs { 1e-4 } else { TOL };
    for name in i
        .fam
        .names()
        .into_iter()
        .filter(|n| n.starts_with(&format!("out.{case}.W_eff.model.")))
    {
        let module = name.trim_start_matches(&format!("out.{case}.W_eff.model."));
        let lin = dit.linear(module).unwrap();
        assert!(lin.is_adapted(), "{module} not adapted");
        check(
            &name,
            lin.effective_weight().unwrap(),
            &get(&i.fam, &name),
            weight_tol,
        );
    }
    let (v, hidden) = forward(dit, i, case);
    check(
        &format!("{case}.v"),
        &v,
        &get(&i.fam, &format!("out64.{case}.v")),
        TOL,
    );
    for (k, h) in hidden.iter().enumerate() {
        check(
            &format!("{case}.hidden_state_{k}"),
            h,
            &get(&i.fam, &format!("out64.{case}.hidden_state_{k}")),
            TOL,
        );
    }
    let mut seconds = seconds_linear();
    stack
        .apply_to_linear(
            &mut seconds,
            "conditioners.seconds_total.embedder.embedding.1",
        )
        .unwrap();
    let secs: Vec<f32> = get(&i.fwd, "in.lora.seconds_values")
        .to_vec_f32()
        .unwrap()
        .iter()
        .map(|s| s.clamp(0.0, 384.0) / 384.0)
        .collect();
    let emb = seconds
        .forward(&aria_dit::dit::timestep_features(&secs, 256).unwrap())
        .unwrap();
    check(
        &format!("{case}.seconds_embedding"),
        &emb,
        &get(&i.fam, &format!("out64.{case}.seconds_embedding")),
        TOL,
    );
}

fn family(case: &str, file: &str, kind: AdapterKind, modules: usize) {
    let Some((_, mut dit)) = load_dit(FOLDER) else {
        return;
    };
    let (Some(i), Some(lora)) = (inputs(), open(file)) else {
        return;
    };
    assert_eq!(lora.kind(), kind);
    assert_eq!(lora.modules().count(), modules, "adapted modules of {file}");
    let (v_base, _) = forward(&dit, &i, case);
    if let Some(want) = try_get(&i.fam, &format!("out.{case}.v_without_lora")) {
        check(&format!("{case}.v_without_lora"), &v_base, &want, TOL);
    }
    let mut stack = LoraStack::new();
    stack.push(lora.clone(), 0.7);
    let n = stack.apply(&mut dit).unwrap();
    assert_eq!(
        n,
        lora.modules().filter(|m| m.starts_with("model.")).count()
    );
    compare(&dit, &stack, &i, case);

    // Strength 0 through the same adapters gives the base model back bit for bit; so does
    // removing the file. Nothing is reloaded, the bases are not recomputed.
    stack.set_strength(0, 0.0).unwrap();
    stack.apply(&mut dit).unwrap();
    assert_eq!(
        forward(&dit, &i, case).0.to_vec_f32().unwrap(),
        v_base.to_vec_f32().unwrap()
    );
    stack.set_strength(0, 0.7).unwrap();
    stack.apply(&mut dit).unwrap();
    compare(&dit, &stack, &i, case);
    stack.remove(0).unwrap();
    stack.apply(&mut dit).unwrap();
    assert!(dit.linears().iter().all(|l| !l.is_adapted()));
    assert_eq!(
        forward(&dit, &i, case).0.to_vec_f32().unwrap(),
        v_base.to_vec_f32().unwrap()
    );
}

#[test]
fn dora_cols() {
    family(
        "lora_dora_cols",
        "lora_dora_cols.safetensors",
        AdapterKind::DoraCols,
        18,
    );
}

#[test]
fn bora() {
    family("lora_bora", "lora_bora.safetensors", AdapterKind::Bora, 9);
}

#[test]
fn lora_xs() {
    family("lora_xs", "lora_xs.safetensors", AdapterKind::LoraXs, 31);
}

#[test]
fn dora_rows_xs() {
    family(
        "lora_dora_rows_xs",
        "lora_dora_rows_xs.safetensors",
        AdapterKind::DoraRowsXs,
        18,
    );
}

#[test]
fn dora_cols_xs() {
    family(
        "lora_dora_cols_xs",
        "lora_dora_cols_xs.safetensors",
        AdapterKind::DoraColsXs,
        9,
    );
}

#[test]
fn bora_xs() {
    family(
        "lora_bora_xs",
        "lora_bora_xs.safetensors",
        AdapterKind::BoraXs,
        12,
    );
}

/// `lora_std` (0.7) and `lora_bora` (0.4) together; strengths changed between requests and a
/// file removed and added again, never reloading a file, always giving what a fresh stack
/// gives.
#[test]
fn blend_two_families() {
    let Some((_, mut dit)) = load_dit(FOLDER) else {
        return;
    };
    let (Some(i), Some(std), Some(bora)) = (
        inputs(),
        open("lora_std.safetensors"),
        open("lora_bora.safetensors"),
    ) else {
        return;
    };
    let mut stack = LoraStack::new();
    stack.push(std.clone(), 0.7);
    stack.push(bora.clone(), 0.4);
    stack.apply(&mut dit).unwrap();
    compare(&dit, &stack, &i, "lora_blend");
    let (v_blend, _) = forward(&dit, &i, "lora_blend");

    // Another request with other strengths: equal to a fresh stack with those strengths.
    stack.set_strength(0, 0.2).unwrap();
    stack.set_strength(1, 1.0).unwrap();
    stack.apply(&mut dit).unwrap();
    let (v_other, _) = forward(&dit, &i, "lora_blend");
    let Some((_, mut fresh_dit)) = load_dit(FOLDER) else {
        return;
    };
    let mut fresh = LoraStack::new();
    fresh.push(Arc::new(LoraFile::open(std.path()).unwrap()), 0.2);
    fresh.push(Arc::new(LoraFile::open(bora.path()).unwrap()), 1.0);
    fresh.apply(&mut fresh_dit).unwrap();
    assert_eq!(
        v_other.to_vec_f32().unwrap(),
        forward(&fresh_dit, &i, "lora_blend")
            .0
            .to_vec_f32()
            .unwrap()
    );
    assert_ne!(v_other.to_vec_f32().unwrap(), v_blend.to_vec_f32().unwrap());

    // Back to the recorded strengths: the recorded output again, bit for bit.
    stack.set_strength(0, 0.7).unwrap();
    stack.set_strength(1, 0.4).unwrap();
    stack.apply(&mut dit).unwrap();
    assert_eq!(
        forward(&dit, &i, "lora_blend").0.to_vec_f32().unwrap(),
        v_blend.to_vec_f32().unwrap()
    );

    // Remove the first file, add it back at the end: the order of application changes.
    stack.remove(0).unwrap();
    stack.push(std.clone(), 0.7);
    stack.apply(&mut dit).unwrap();
    let module = "transformer.layers.1.self_attn.to_qkv";
    let key = format!("model.{module}");
    let base = load_dit(FOLDER)
        .unwrap()
        .1
        .linear(module)
        .unwrap()
        .weight()
        .dense()
        .unwrap()
        .clone();
    let want = std
        .merge(&key, &bora.merge(&key, &base, 0.4).unwrap().unwrap(), 0.7)
        .unwrap()
        .unwrap();
    assert_eq!(
        dit.linear(module)
            .unwrap()
            .effective_weight()
            .unwrap()
            .to_vec_f32()
            .unwrap(),
        want.to_vec_f32().unwrap()
    );
}

/// An -xs file blended after another family still takes its bases from the checkpoint
/// weight, not from the weight the first adapter produced.
#[test]
fn xs_bases_come_from_the_checkpoint_weight() {
    let Some((_, mut dit)) = load_dit(FOLDER) else {
        return;
    };
    let (Some(dora), Some(xs)) = (
        open("lora_dora_cols.safetensors"),
        open("lora_dora_rows_xs.safetensors"),
    ) else {
        return;
    };
    let module = "transformer.layers.0.self_attn.to_qkv";
    let key = format!("model.{module}");
    let base = dit
        .linear(module)
        .unwrap()
        .weight()
        .dense()
        .unwrap()
        .clone();
    let mut stack = LoraStack::new();
    stack.push(dora.clone(), 0.7);
    stack.push(xs.clone(), 0.5);
    stack.apply(&mut dit).unwrap();
    let got = dit
        .linear(module)
        .unwrap()
        .effective_weight()
        .unwrap()
        .to_vec_f32()
        .unwrap();
    // A separate copy of the xs file, bases prepared from the checkpoint weight.
    let xs2 = LoraFile::open(xs.path()).unwrap();
    xs2.adapter(&key).unwrap().prepare_bases(&base).unwrap();
    let first = dora.merge(&key, &base, 0.7).unwrap().unwrap();
    let want = xs2.merge(&key, &first, 0.5).unwrap().unwrap();
    assert_eq!(got, want.to_vec_f32().unwrap());
    // Bases taken from the already adapted weight would differ.
    let xs3 = LoraFile::open(xs.path()).unwrap();
    let wrong = xs3.merge(&key, &first, 0.5).unwrap().unwrap();
    assert_ne!(got, wrong.to_vec_f32().unwrap());
}
