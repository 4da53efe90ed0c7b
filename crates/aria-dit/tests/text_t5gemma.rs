//! T5Gemma encoder parity against the official encoder (`t5_last_hidden.*` of `text.safetensors`)
//! and its masking invariants.
#![allow(clippy::unwrap_used)]

use aria_core::fixtures::{assert_close, fixture, fixture_tensors, rel_err};
use aria_core::{DType, Tensor};
use aria_dit::t5gemma::{AttnImplementation, T5GemmaEncoder};
use aria_dit::tokenizer::TokenBatch;

const TOL: f32 = 5e-6;

fn load(model: &str) -> Option<(T5GemmaEncoder, aria_core::WeightLoader)> {
    let dir = fixture(&format!("{model}/t5gemma-b-b-ul2"))?;
    let t = fixture_tensors(&format!("{model}/text.safetensors"))?.unwrap();
    Some((T5GemmaEncoder::load(dir).unwrap(), t))
}

fn get(t: &aria_core::WeightLoader, name: &str) -> Tensor {
    t.get_any(name).unwrap().to_dtype(DType::F32).unwrap()
}

fn parity(model: &str) {
    let Some((mut enc, t)) = load(model) else {
        return;
    };
    // The folder's config.json has no attn_implementation: the official default (SDPA, no cap).
    assert_eq!(enc.attn_implementation(), AttnImplementation::Sdpa);
    assert_eq!(enc.softcap(), None);
    // bf16 weights are used from the map, not copied.
    assert!(enc.weights_mapped());
    let ids = t.get_any("input_ids").unwrap();
    let mask = t.get_any("attention_mask").unwrap();
    let out = enc.forward(&ids, &mask).unwrap();
    assert_close(
        &format!("{model} t5 fp32_sdpa"),
        &out,
        &get(&t, "t5_last_hidden.fp32_sdpa"),
        TOL,
    );
    // The bf16 default path only loosely.
    assert_close(
        &format!("{model} t5 default (bf16)"),
        &out,
        &get(&t, "t5_last_hidden.default"),
        2e-2,
    );

    enc.set_attn_implementation(AttnImplementation::Eager);
    assert_eq!(enc.softcap(), Some(50.0));
    let out = enc.forward(&ids, &mask).unwrap();
    assert_close(
        &format!("{model} t5 fp32_eager"),
        &out,
        &get(&t, "t5_last_hidden.fp32_eager"),
        TOL,
    );
    assert_close(
        &format!("{model} t5 fp64_eager"),
        &out,
        &get(&t, "t5_last_hidden.fp64_eager"),
        TOL,
    );
    // The soft-cap matters at this tolerance: without it, eager is not matched.
    let sdpa = get(&t, "t5_last_hidden.fp32_sdpa").to_vec_f32().unwrap();
    let eager = get(&t, "t5_last_hidden.fp32_eager").to_vec_f32().unwrap();
    assert!(rel_err(&sdpa, &eager) > 4.0 * TOL);
}

#[test]
fn t5_parity_small() {
    parity("sa3-tiny");
}

#[test]
fn t5_parity_medium() {
    parity("sa3-tiny-medium");
}

/// Padded keys are excluded: the valid rows of a padded prompt equal the unpadded encoding, and
/// a batch row does not depend on the other rows.
#[test]
fn t5_padding_is_excluded() {
    let Some((enc, t)) = load("sa3-tiny") else {
        return;
    };
    let full = TokenBatch::from_tensors(
        &t.get_any("input_ids").unwrap(),
        &t.get_any("attention_mask").unwrap(),
    )
    .unwrap();
    let n = 9;
    let short_ids: Vec<i64> = full.row_ids(1)[..n].to_vec();
    let alone = enc
        .encode(&TokenBatch::new(short_ids.clone(), vec![1; n], 1, n).unwrap())
        .unwrap();
    // The same ids padded to 16 with garbage pad ids under mask 0, batched with prompt 0.
    let mut ids = full.row_ids(0).to_vec();
    let mut mask = vec![1u8; 16];
    ids.extend(
        short_ids
            .iter()
            .copied()
            .chain((n..16).map(|j| 100 + j as i64)),
    );
    mask.extend((0..16).map(|j| u8::from(j < n)));
    let batch = enc
        .encode(&TokenBatch::new(ids, mask, 2, 16).unwrap())
        .unwrap();
    let row1 = batch
        .get(1)
        .unwrap()
        .narrow(0, 0, n)
        .unwrap()
        .contiguous()
        .unwrap();
    assert_close(
        "padded row vs alone",
        &row1.unsqueeze(0).unwrap(),
        &alone,
        1e-6,
    );
    let row0 = batch.get(0).unwrap().unsqueeze(0).unwrap();
    let ref0 = get(&t, "t5_last_hidden.fp32_sdpa")
        .get(0)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    assert_close("row 0 in a padded batch", &row0, &ref0, TOL);
}

/// A row with no valid token (mask all zero) gives finite values, not NaN.
#[test]
fn t5_fully_masked_row_is_finite() {
    let Some((enc, _)) = load("sa3-tiny") else {
        return;
    };
    let out = enc
        .encode(&TokenBatch::new(vec![0; 8], vec![0; 8], 1, 8).unwrap())
        .unwrap();
    assert!(out.to_vec_f32().unwrap().iter().all(|v| v.is_finite()));
}
