//! DiT single-forward parity against the official implementation (fixtures `dit_forward` and
//! `dit_extra` of the tiny small- and medium-structure models): velocity and every hidden state.
#![allow(clippy::unwrap_used)]

#[path = "dit_common.rs"]
mod common;

use aria_core::WeightLoader;
use aria_dit::dit::Dit;
use aria_testing::fixtures::assert_close;
use common::{get, load_dit, tensors, try_get};

const TOL: f32 = 5e-6;

fn check_group(dit: &Dit, w: &WeightLoader, g: &str) {
    let x = get(w, &format!("in.{g}.x"));
    let t = get(w, &format!("in.{g}.t"));
    let c = get(w, &format!("in.{g}.cross_attn_cond"));
    let gc = get(w, &format!("in.{g}.global_cond"));
    let l = try_get(w, &format!("in.{g}.local_add_cond"));
    let pm = try_get(w, &format!("in.{g}.padding_mask"));
    let (v, hidden) = dit
        .forward_with_hidden(&x, &t, &c, &gc, l.as_ref(), pm.as_ref())
        .unwrap();
    assert_close(
        &format!("{g}.v vs out64"),
        &v,
        &get(w, &format!("out64.{g}.v")),
        TOL,
    );
    assert_close(
        &format!("{g}.v vs out"),
        &v,
        &get(w, &format!("out.{g}.v")),
        TOL,
    );
    for (i, h) in hidden.iter().enumerate() {
        assert_close(
            &format!("{g}.hidden_state_{i}"),
            h,
            &get(w, &format!("out64.{g}.hidden_state_{i}")),
            TOL,
        );
    }
    assert_eq!(hidden.len(), dit.config().depth);
    // The plain forward gives the same bits as the one collecting hidden states.
    let v2 = dit
        .forward(&x, &t, &c, &gc, l.as_ref(), pm.as_ref())
        .unwrap();
    assert_eq!(v.to_vec_f32().unwrap(), v2.to_vec_f32().unwrap());
}

fn run(folder: &str, file: &str, groups: &[&str]) {
    let Some((_, dit)) = load_dit(folder) else {
        return;
    };
    let Some(w) = tensors(&format!("{folder}/{file}")) else {
        return;
    };
    for g in groups {
        check_group(&dit, &w, g);
    }
}

#[test]
fn dit_small_forward() {
    run("sa3-tiny", "dit_forward.safetensors", &["dit_a", "dit_b"]);
}

#[test]
fn dit_medium_differential_forward() {
    run(
        "sa3-tiny-medium",
        "dit_forward.safetensors",
        &["dit_a", "dit_b"],
    );
}

#[test]
fn dit_small_padding_and_batch() {
    run(
        "sa3-tiny-extra",
        "dit_extra.safetensors",
        &["dit_pad", "dit_b2"],
    );
}

#[test]
fn dit_medium_padding_and_batch() {
    run(
        "sa3-tiny-medium",
        "dit_extra.safetensors",
        &["dit_pad", "dit_b2"],
    );
}

/// Items of a batch are independent: each row equals the item run alone.
#[test]
fn dit_batch_items_match_single_runs() {
    let Some((_, dit)) = load_dit("sa3-tiny-extra") else {
        return;
    };
    let Some(w) = tensors("sa3-tiny-extra/dit_extra.safetensors") else {
        return;
    };
    let g = "dit_b2";
    let (x, t, c, gc, l, pm) = (
        get(&w, &format!("in.{g}.x")),
        get(&w, &format!("in.{g}.t")),
        get(&w, &format!("in.{g}.cross_attn_cond")),
        get(&w, &format!("in.{g}.global_cond")),
        get(&w, &format!("in.{g}.local_add_cond")),
        get(&w, &format!("in.{g}.padding_mask")),
    );
    for i in 0..2 {
        let one = |t: &aria_core::Tensor| t.narrow(0, i, 1).unwrap().contiguous().unwrap();
        let v = dit
            .forward(
                &one(&x),
                &one(&t),
                &one(&c),
                &one(&gc),
                Some(&one(&l)),
                Some(&one(&pm)),
            )
            .unwrap();
        assert_close(
            &format!("item{i}_v"),
            &v,
            &get(&w, &format!("out.{g}.item{i}_v")),
            TOL,
        );
    }
}
