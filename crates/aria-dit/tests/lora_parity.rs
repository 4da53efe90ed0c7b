//! LoRA / DoRA parity: the official file format, merge rule at strength 0.7 (merged weights and a
//! full DiT forward with every hidden state), removal restoring the base model bit for bit, and
//! stacking.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use std::sync::Arc;

use aria_core::nn::{Bias, Linear};
use aria_core::Tensor;
use aria_dit::dit::Dit;
use aria_dit::lora::{AdapterKind, LoraFile, LoraStack};
use aria_testing::fixtures::{assert_close, fixture};
use common::{get, load_dit, tensors};

const TOL: f32 = 5e-6;

fn forward(dit: &Dit, w: &aria_core::WeightLoader, case: &str) -> (Tensor, Vec<Tensor>) {
    dit.forward_with_hidden(
        &get(w, "in.lora.x"),
        &get(w, "in.lora.t"),
        &get(w, &format!("in.{case}.cross_attn_cond")),
        &get(w, &format!("in.{case}.global_cond")),
        Some(&get(w, "in.lora.local_add_cond")),
        Some(&get(w, "in.lora.padding_mask")),
    )
    .unwrap()
}

fn case(folder: &str, case: &str, file: &str, kind: AdapterKind) {
    let Some((_, mut dit)) = load_dit(folder) else {
        return;
    };
    let Some(w) = tensors(&format!("{folder}/lora_forward.safetensors")) else {
        return;
    };
    let Some(path) = fixture(&format!("{folder}/{file}")) else {
        return;
    };
    let lora = Arc::new(LoraFile::open(path).unwrap());
    assert_eq!(lora.kind(), kind);
    let (v_base, _) = forward(&dit, &w, case);
    assert_close(
        &format!("{case} v_without_lora"),
        &v_base,
        &get(&w, &format!("out.{case}.v_without_lora")),
        TOL,
    );

    let mut stack = LoraStack::new();
    stack.push(lora.clone(), 0.7);
    let n = stack.apply(&mut dit).unwrap();
    assert_eq!(
        n,
        lora.modules().filter(|m| m.starts_with("model.")).count()
    );
    // Merged weights the reference layers used.
    for name in w
        .names()
        .into_iter()
        .filter(|n| n.starts_with(&format!("out.{case}.W_eff.model.")))
    {
        let module = name.trim_start_matches(&format!("out.{case}.W_eff.model."));
        let lin = dit.linear(module).unwrap();
        let want = get(&w, &name);
        let got = lin
            .effective_weight()
            .unwrap()
            .reshape(want.shape())
            .unwrap();
        assert_close(&name, &got, &want, 1e-6);
        assert!(lin.is_adapted());
    }
    let (v, hidden) = forward(&dit, &w, case);
    assert_close(
        &format!("{case}.v"),
        &v,
        &get(&w, &format!("out64.{case}.v")),
        TOL,
    );
    for (i, h) in hidden.iter().enumerate() {
        assert_close(
            &format!("{case}.hidden_state_{i}"),
            h,
            &get(&w, &format!("out64.{case}.hidden_state_{i}")),
            TOL,
        );
    }

    // The duration embedder's LoRA (conditioner side): the stack sets the adapters of a layer
    // outside the DiT, named as in the file.
    let m = aria_core::WeightLoader::open_checkpoint(
        fixture(&format!("{folder}/model.safetensors")).unwrap(),
    )
    .unwrap();
    let module = "conditioners.seconds_total.embedder.embedding.1";
    let mut seconds = Linear::load(
        &m.pp(format!("conditioner.{module}")),
        256,
        get(&m, &format!("conditioner.{module}.bias")).elem_count(),
        Bias::Yes,
    )
    .unwrap();
    let adapted = stack.apply_to_linear(&mut seconds, module).unwrap();
    assert_eq!(adapted, lora.target(module).is_some());
    let secs: Vec<f32> = get(&w, "in.lora.seconds_values")
        .to_vec_f32()
        .unwrap()
        .iter()
        .map(|s| s.clamp(0.0, 384.0) / 384.0)
        .collect();
    let emb = seconds
        .forward(&aria_dit::dit::timestep_features(&secs, 256).unwrap())
        .unwrap();
    let want = get(&w, &format!("out.{case}.seconds_embedding"));
    assert_close(
        &format!("{case}.seconds_embedding"),
        &emb.reshape(want.shape()).unwrap(),
        &want,
        TOL,
    );

    // Strength 0 through the same adapters, without reloading, gives the base model back bit
    // for bit (LoRA adds a zero update; DoRA/BoRA leave the weight unchanged at strength 0).
    stack.set_strength(0, 0.0).unwrap();
    stack.apply(&mut dit).unwrap();
    let (v0, _) = forward(&dit, &w, case);
    assert_eq!(v0.to_vec_f32().unwrap(), v_base.to_vec_f32().unwrap());

    // Removal restores the base model exactly; base weights were never touched.
    stack.remove(0).unwrap();
    stack.apply(&mut dit).unwrap();
    assert!(dit.linears().iter().all(|l| !l.is_adapted()));
    let (v_again, _) = forward(&dit, &w, case);
    assert_eq!(v_again.to_vec_f32().unwrap(), v_base.to_vec_f32().unwrap());
}

#[test]
fn lora_std_small() {
    case(
        "sa3-tiny-extra",
        "lora_std",
        "lora_std.safetensors",
        AdapterKind::Lora,
    );
}

#[test]
fn lora_dora_small() {
    case(
        "sa3-tiny-extra",
        "lora_dora",
        "lora_dora.safetensors",
        AdapterKind::DoraRows,
    );
}

#[test]
fn lora_std_medium() {
    case(
        "sa3-tiny-medium",
        "lora_std",
        "lora_std.safetensors",
        AdapterKind::Lora,
    );
}

#[test]
fn lora_dora_medium() {
    case(
        "sa3-tiny-medium",
        "lora_dora",
        "lora_dora.safetensors",
        AdapterKind::DoraRows,
    );
}

/// Two adapters compose in order; strength 0 of a plain LoRA is the identity; clearing works;
/// a context prepared before a weight change is refused.
#[test]
fn lora_stacking_and_context_invalidation() {
    let Some((_, mut dit)) = load_dit("sa3-tiny-extra") else {
        return;
    };
    let (Some(p1), Some(p2)) = (
        fixture("sa3-tiny-extra/lora_std.safetensors"),
        fixture("sa3-tiny-extra/lora_dora.safetensors"),
    ) else {
        return;
    };
    let (a, b) = (
        Arc::new(LoraFile::open(p1).unwrap()),
        Arc::new(LoraFile::open(p2).unwrap()),
    );
    let module = "transformer.layers.0.self_attn.to_qkv";
    let base = dit
        .linear(module)
        .unwrap()
        .weight()
        .dense()
        .unwrap()
        .clone();
    let mut stack = LoraStack::new();
    stack.push(a.clone(), 0.5);
    stack.push(b.clone(), 0.7);
    stack.apply(&mut dit).unwrap();
    let got = dit
        .linear(module)
        .unwrap()
        .effective_weight()
        .unwrap()
        .clone();
    let key = format!("model.{module}");
    let want = b
        .merge(&key, &a.merge(&key, &base, 0.5).unwrap().unwrap(), 0.7)
        .unwrap()
        .unwrap();
    assert_eq!(got.to_vec_f32().unwrap(), want.to_vec_f32().unwrap());
    let zero = a.merge(&key, &base, 0.0).unwrap().unwrap();
    assert_eq!(zero.to_vec_f32().unwrap(), base.to_vec_f32().unwrap());

    let x = Tensor::zeros(&[1, 16, 4], aria_core::DType::F32);
    let c = Tensor::zeros(&[1, 3, 768], aria_core::DType::F32);
    let g = Tensor::zeros(&[1, 768], aria_core::DType::F32);
    let cond = aria_dit::dit::DitConditioning {
        cross_attn_cond: &c,
        global_cond: &g,
        local_add_cond: None,
    };
    let ctx = dit.prepare(&cond, None).unwrap();
    dit.clear_loras().unwrap();
    assert!(dit
        .forward_ctx(&x, &[0.5], &ctx, None, &Default::default())
        .is_err());
    let ctx = dit.prepare(&cond, None).unwrap();
    assert!(dit
        .forward_ctx(&x, &[0.5], &ctx, None, &Default::default())
        .is_ok());
}
