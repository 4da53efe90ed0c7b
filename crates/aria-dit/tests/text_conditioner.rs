//! Conditioner parity: prompt conditioner (`prompt_cond.*`), seconds embedding (including
//! clamping), `get_conditioning_inputs` (`cond_inputs.*`), the negative-prompt branch and the
//! local-add (inpainting) condition.
#![allow(clippy::unwrap_used)]

use aria_core::{DType, Tensor, WeightLoader};
use aria_dit::conditioner::{
    latent_mask_nearest, local_add_cond, TextConditioner, CONDITIONER_PREFIX,
};
use aria_dit::config::ModelConfig;
use aria_dit::t5gemma::{AttnImplementation, Precision};
use aria_dit::tokenizer::TokenBatch;
use aria_testing::fixtures::{assert_close, fixture, fixture_tensors};

const TOL: f32 = 5e-6;
const PROMPTS: [&str; 2] = ["lofi house loop", "Amen break 174 BPM, dusty vinyl drums"];

fn get(t: &WeightLoader, name: &str) -> Tensor {
    t.get_any(name).unwrap().to_dtype(DType::F32).unwrap()
}

fn load(model: &str) -> Option<(TextConditioner, WeightLoader)> {
    let cfg = fixture(&format!("{model}/model_config.json"))?;
    let ckpt = fixture(&format!("{model}/model.safetensors"))?;
    let cfg = ModelConfig::from_file(cfg).unwrap();
    let loader = WeightLoader::open_checkpoint(ckpt).unwrap();
    let cond = TextConditioner::load(&cfg, &loader).unwrap();
    Some((cond, loader))
}

fn text_groups(model: &str) {
    let Some((mut cond, _)) = load(model) else {
        return;
    };
    let Some(t) = fixture_tensors(&format!("{model}/text.safetensors")) else {
        return;
    };
    let t = t.unwrap();
    // prompt_cond.default: the official path (bf16 encoder, SDPA), reproduced exactly by the
    // bf16 replay.
    cond.prompt_mut()
        .encoder_mut()
        .set_precision(Precision::Bf16);
    let (emb, mask) = cond.encode_prompts(&PROMPTS).unwrap();
    assert_eq!(
        mask.to_vec_f32().unwrap(),
        get(&t, "prompt_cond_mask").to_vec_f32().unwrap()
    );
    assert_close(
        &format!("{model} prompt_cond.default (bf16)"),
        &emb,
        &get(&t, "prompt_cond.default"),
        0.0,
    );
    // prompt_cond.fp32_sdpa: the same with the encoder in f32 (the default).
    cond.prompt_mut()
        .encoder_mut()
        .set_precision(Precision::F32);
    let (emb, _) = cond.encode_prompts(&PROMPTS).unwrap();
    assert_close(
        &format!("{model} prompt_cond.fp32_sdpa"),
        &emb,
        &get(&t, "prompt_cond.fp32_sdpa"),
        TOL,
    );
    assert_close(
        &format!("{model} prompt_cond.default (bf16) from f32"),
        &emb,
        &get(&t, "prompt_cond.default"),
        2e-2,
    );
    // The stored ids give the same thing.
    let tokens = TokenBatch::from_tensors(
        &t.get_any("input_ids").unwrap(),
        &t.get_any("attention_mask").unwrap(),
    )
    .unwrap();
    let (emb2, _) = cond.prompt().encode_tokens(&tokens).unwrap();
    assert_close("from stored ids", &emb2, &emb, 0.0);
    // Eager (soft-cap) path.
    cond.prompt_mut()
        .encoder_mut()
        .set_attn_implementation(AttnImplementation::Eager);
    let (emb, _) = cond.encode_prompts(&PROMPTS).unwrap();
    assert_close(
        &format!("{model} prompt_cond.fp32_eager"),
        &emb,
        &get(&t, "prompt_cond.fp32_eager"),
        TOL,
    );
    assert_close(
        &format!("{model} prompt_cond.fp64_eager"),
        &emb,
        &get(&t, "prompt_cond.fp64_eager"),
        TOL,
    );

    // seconds_total.embedding (values 0, 0.25, 1, 30, 384, 500: the last one clamps).
    let values = get(&t, "seconds_total.values").to_vec_f32().unwrap();
    let e = cond.seconds_embedding(&values).unwrap();
    assert_close(
        &format!("{model} seconds_total.embedding"),
        &e,
        &get(&t, "seconds_total.embedding"),
        TOL,
    );

    // cond_inputs.* for prompt 0 and 1 s, built from the stored (bf16 default path) prompt output.
    let pc = get(&t, "prompt_cond.default")
        .narrow(0, 0, 1)
        .unwrap()
        .contiguous()
        .unwrap();
    let pm = t
        .get_any("prompt_cond_mask")
        .unwrap()
        .narrow(0, 0, 1)
        .unwrap()
        .contiguous()
        .unwrap();
    let c = cond.conditioning_from_prompt(&pc, &pm, &[1.0]).unwrap();
    assert_close(
        &format!("{model} cond_inputs.cross_attn_cond"),
        &c.cross_attn_cond,
        &get(&t, "cond_inputs.cross_attn_cond"),
        TOL,
    );
    assert_close(
        &format!("{model} cond_inputs.global_cond"),
        &c.global_cond,
        &get(&t, "cond_inputs.global_cond"),
        TOL,
    );
    assert_eq!(c.cross_attn_mask.shape(), &[1, 17]);
    assert_eq!(
        c.cross_attn_mask.to_vec_f32().unwrap(),
        get(&t, "cond_inputs.cross_attn_mask").to_vec_f32().unwrap()
    );
    // End to end from text with the default (bf16) encoder: the reference's conditioning.
    cond.prompt_mut()
        .encoder_mut()
        .set_attn_implementation(AttnImplementation::Sdpa);
    cond.prompt_mut()
        .encoder_mut()
        .set_precision(Precision::Bf16);
    let c = cond.conditioning(&PROMPTS[..1], &[1.0]).unwrap();
    assert_close(
        "cond_inputs from text (bf16 ref)",
        &c.cross_attn_cond,
        &get(&t, "cond_inputs.cross_attn_cond"),
        TOL,
    );
    assert_close(
        "global_cond from text",
        &c.global_cond,
        &get(&t, "cond_inputs.global_cond"),
        TOL,
    );
}

#[test]
fn text_groups_small() {
    text_groups("sa3-tiny");
}

#[test]
fn text_groups_medium() {
    text_groups("sa3-tiny-medium");
}

/// `tokens` right-padded to `len` positions.
fn repad(tokens: &TokenBatch, len: usize) -> TokenBatch {
    let (mut ids, mut mask) = (
        vec![0i64; tokens.batch * len],
        vec![0u8; tokens.batch * len],
    );
    for b in 0..tokens.batch {
        let (src, dst) = (
            b * tokens.len..(b + 1) * tokens.len,
            b * len..b * len + tokens.len,
        );
        ids[dst.clone()].copy_from_slice(&tokens.ids[src.clone()]);
        mask[dst].copy_from_slice(&tokens.mask[src]);
    }
    TokenBatch::new(ids, mask, tokens.batch, len).unwrap()
}

/// The encoder runs only up to the last real token (rounded up to 32 positions) when pad rows
/// are replaced: the result has the bits of the full forward followed by the pad handling, on
/// every compute path, for batches padded to 80 and 100 positions with real tokens ending
/// anywhere in the first block, an empty prompt (nothing to encode) and a batch of empty
/// prompts; the bf16 replay runs every position.
fn truncated_encode(model: &str) {
    let Some((mut cond, _)) = load(model) else {
        return;
    };
    let precisions = vec![Precision::F32, Precision::Bf16Dot];
    let batches: [&[&str]; 5] = [
        &["rain", "lofi house loop"],
        &["", "tape hiss"],
        &["", ""],
        &["kick"],
        &PROMPTS,
    ];
    for p in precisions.into_iter().chain([Precision::Bf16]) {
        cond.prompt_mut().encoder_mut().set_precision(p);
        let pc = cond.prompt();
        for (i, prompts) in batches.into_iter().enumerate() {
            let tokens = repad(&pc.tokenize(prompts).unwrap(), 80 + 20 * (i % 2));
            let used = pc.rows_needed(&tokens);
            let last = (0..tokens.len)
                .rev()
                .find(|&j| (0..tokens.batch).any(|b| tokens.mask[b * tokens.len + j] != 0))
                .map_or(0, |j| j + 1);
            if p == Precision::Bf16 {
                assert_eq!(used, tokens.len, "the replay runs every position");
            } else {
                assert_eq!(used, last.div_ceil(32) * 32, "{p:?} {prompts:?}");
                assert!(used < tokens.len);
            }
            let (emb, mask) = pc.encode_tokens(&tokens).unwrap();
            let (ids, m) = tokens.to_device(&aria_core::Device::Cpu).unwrap();
            let full = pc
                .finish(&pc.encoder().forward(&ids, &m).unwrap(), &m)
                .unwrap();
            assert_eq!(mask.to_vec_f32().unwrap(), m.to_vec_f32().unwrap());
            assert_eq!(emb.shape(), full.shape());
            let (a, b) = (emb.to_vec_f32().unwrap(), full.to_vec_f32().unwrap());
            assert!(
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
                "{model} {p:?} {prompts:?}: truncated encode differs from the full forward"
            );
        }
    }
}

#[test]
fn truncated_encode_small() {
    truncated_encode("sa3-tiny");
}

#[test]
fn truncated_encode_medium() {
    truncated_encode("sa3-tiny-medium");
}

/// `seconds.safetensors`: 18 values including clamping below 0 and above 384, and the full
/// conditioner for a batch of 3.
#[test]
fn seconds_clamping() {
    let Some((cond, _)) = load("sa3-tiny-extra") else {
        return;
    };
    let Some(t) = fixture_tensors("sa3-tiny-extra/seconds.safetensors") else {
        return;
    };
    let t = t.unwrap();
    let values = get(&t, "in.seconds.values").to_vec_f32().unwrap();
    let n = cond.number("seconds_total").unwrap();
    let norm: Vec<f32> = values.iter().map(|&v| n.normalize(v)).collect();
    assert_eq!(
        norm,
        get(&t, "out.seconds.normalized").to_vec_f32().unwrap()
    );
    let e = cond.seconds_embedding(&values).unwrap();
    assert_close(
        "seconds embedding",
        &e,
        &get(&t, "out.seconds.embedding"),
        TOL,
    );
    assert_close(
        "seconds embedding (fp64)",
        &e,
        &get(&t, "out64.seconds.embedding"),
        TOL,
    );
    let mv = get(&t, "in.seconds.multi_values").to_vec_f32().unwrap();
    let c = cond.conditioning(&["x", "x", "x"], &mv).unwrap();
    assert_close(
        "multi global_cond",
        &c.global_cond,
        &get(&t, "out.seconds.multi_global_cond"),
        TOL,
    );
    let last = c
        .cross_attn_cond
        .narrow(1, 16, 1)
        .unwrap()
        .contiguous()
        .unwrap();
    assert_close(
        "multi last token",
        &last,
        &get(&t, "out.seconds.multi_cross_attn_last_token"),
        TOL,
    );
    assert!(cond.seconds_embedding(&[f32::NAN]).is_err());
}

/// Negative prompts (`cfg.safetensors`): pad positions carry the learned padding embedding in
/// the conditioner output exactly, the seconds token matches, and the DiT's unconditional
/// context zeroes the masked positions.
#[test]
fn negative_prompt_branch() {
    let Some((mut cond, loader)) = load("sa3-tiny-extra") else {
        return;
    };
    // The reference's bf16 text encoder, replayed (the default is f32).
    cond.prompt_mut()
        .encoder_mut()
        .set_precision(Precision::Bf16);
    let Some(t) = fixture_tensors("sa3-tiny-extra/cfg.safetensors") else {
        return;
    };
    let t = t.unwrap();
    let pad = get(
        &loader,
        &format!("{CONDITIONER_PREFIX}.prompt.padding_embedding"),
    )
    .to_vec_f32()
    .unwrap();
    let pos = cond
        .conditioning(&["lofi house loop", "Amen break 174 BPM"], &[0.1, 0.03])
        .unwrap();
    let neg = cond.negative(&["harsh noise", ""], &[0.1, 0.03]).unwrap();
    let want = get(&t, "out.cfg_b2.dit_in.negative_cross_attn_cond");
    let want_mask = t
        .get_any("out.cfg_b2.dit_in.negative_cross_attn_mask")
        .unwrap()
        .to_vec_f32()
        .unwrap();
    assert_eq!(neg.cross_attn_mask.to_vec_f32().unwrap(), want_mask);
    assert_close(
        "negative context (bf16 ref)",
        &neg.cross_attn_cond,
        &want,
        TOL,
    );
    let got = neg.cross_attn_cond.to_vec_f32().unwrap();
    let wv = want.to_vec_f32().unwrap();
    let mut pads = 0;
    for (j, &m) in want_mask.iter().enumerate() {
        let row = &got[j * 768..(j + 1) * 768];
        if m == 0.0 {
            assert_eq!(row, &pad[..], "pad row {j} is the padding embedding");
            pads += 1;
        }
        if j % 17 == 16 {
            let a = Tensor::from_slice(row, &[768]).unwrap();
            let b = Tensor::from_slice(&wv[j * 768..(j + 1) * 768], &[768]).unwrap();
            assert_close("negative seconds token", &a, &b, TOL);
        }
    }
    assert_eq!(pads, 4 + 15);
    // Positive global condition, and the positive context against the stored one (bf16).
    assert_close(
        "global",
        &pos.global_cond,
        &get(&t, "out.cfg_b2.dit_in.global_cond"),
        TOL,
    );
    assert_close(
        "positive context (bf16 ref)",
        &pos.cross_attn_cond,
        &get(&t, "out.cfg_b2.dit_in.cross_attn_cond"),
        2e-2,
    );
    // The unconditional context of CFG.
    let null = pos
        .cfg_null_context(Some(&neg))
        .unwrap()
        .to_vec_f32()
        .unwrap();
    for (j, &m) in want_mask.iter().enumerate() {
        let row = &null[j * 768..(j + 1) * 768];
        if m == 0.0 {
            assert!(row.iter().all(|&v| v == 0.0));
        } else {
            assert_eq!(row, &got[j * 768..(j + 1) * 768]);
        }
    }
    let zeros = pos.cfg_null_context(None).unwrap();
    assert_eq!(zeros.shape(), &[2, 17, 768]);
    assert!(zeros.to_vec_f32().unwrap().iter().all(|&v| v == 0.0));
}

/// Local-add condition of an inpainting run (`inpaint.safetensors`): nearest latent mask and
/// `[mask ; latents · mask]`.
#[test]
fn local_add_condition() {
    let Some(t) = fixture_tensors("sa3-tiny-extra/inpaint.safetensors") else {
        return;
    };
    let t = t.unwrap();
    let samples = get(&t, "out.inpaint.mask_samples").to_vec_f32().unwrap();
    let m = latent_mask_nearest(&samples, 36, 256).unwrap();
    assert_eq!(m, get(&t, "out.inpaint.mask_latent").to_vec_f32().unwrap());
    let lat = get(&t, "out.inpaint.encoded_latents");
    let mask = Tensor::from_vec(m, &[1, 1, 36]).unwrap();
    let masked = aria_core::ops::mul(&lat, &mask).unwrap();
    let l = local_add_cond(1, 16, 36, Some((&mask, &masked))).unwrap();
    assert_close(
        "local_add_cond",
        &l,
        &get(&t, "out.inpaint.dit_in.local_add_cond"),
        0.0,
    );
    let z = local_add_cond(2, 16, 36, None).unwrap();
    assert_eq!(z.shape(), &[2, 17, 36]);
    assert!(local_add_cond(1, 15, 36, Some((&mask, &masked))).is_err());
}

/// A test adapter: `W + s·Δ` with a fixed `Δ`.
#[derive(Debug)]
struct AddDelta(Tensor);

impl aria_core::nn::Adapter for AddDelta {
    fn describe(&self) -> String {
        "test delta".into()
    }
    fn merge(&self, w: &Tensor, strength: f32) -> aria_core::Result<Tensor> {
        aria_core::ops::add(w, &aria_core::ops::mul_scalar(&self.0, strength)?)
    }
}

/// The duration embedder's Linear takes adapters through the layer API: set at a strength,
/// changed, and removed without reloading (removal gives back the checkpoint's result exactly).
#[test]
fn seconds_linear_takes_adapters() {
    let Some((mut cond, _)) = load("sa3-tiny") else {
        return;
    };
    let values = [0.0f32, 1.0, 30.0];
    let base = cond
        .seconds_embedding(&values)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    let lin = cond.number_mut("seconds_total").unwrap().linear_mut();
    assert_eq!(
        lin.name(),
        "conditioner.conditioners.seconds_total.embedder.embedding.1"
    );
    let (o, i) = (lin.out_dim(), lin.in_dim());
    let delta: Vec<f32> = (0..o * i).map(|k| ((k % 13) as f32 - 6.0) * 1e-3).collect();
    let ad: std::sync::Arc<dyn aria_core::nn::Adapter> =
        std::sync::Arc::new(AddDelta(Tensor::from_vec(delta, &[o, i]).unwrap()));
    lin.set_adapters(vec![(ad.clone(), 1.0)]).unwrap();
    let one = cond
        .seconds_embedding(&values)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    assert!(one.iter().zip(&base).any(|(a, b)| a != b));
    let lin = cond.number_mut("seconds_total").unwrap().linear_mut();
    lin.set_adapters(vec![(ad, 0.5)]).unwrap();
    let half = cond
        .seconds_embedding(&values)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    // Linear in the strength (up to f32 rounding).
    for ((h, a), b) in half.iter().zip(&one).zip(&base) {
        assert!((h - (a + b) / 2.0).abs() < 1e-5, "{h} vs {a}, {b}");
    }
    let lin = cond.number_mut("seconds_total").unwrap().linear_mut();
    lin.set_adapters(Vec::new()).unwrap();
    let back = cond
        .seconds_embedding(&values)
        .unwrap()
        .to_vec_f32()
        .unwrap();
    assert_eq!(back, base);
}
