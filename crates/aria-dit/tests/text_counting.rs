//! The T5Gemma encoder and the text conditioner with weights and activations resident on the
//! counting test backend: no download before the final output, no CPU operand passed to a
//! device op, and results bit-identical to the CPU path, in both compute precisions.
#![allow(clippy::unwrap_used)]

use aria_core::{Tensor, WeightLoader};
use aria_dit::conditioner::{Conditioning, TextConditioner};
use aria_dit::config::ModelConfig;
use aria_dit::t5gemma::{Precision, T5GemmaEncoder};
use aria_testing::counting::{CountingBackend, Counts};
use aria_testing::fixtures::{fixture, fixture_tensors};

const PROMPTS: [&str; 2] = ["lofi house loop", "Amen break 174 BPM, dusty vinyl drums"];
const NEGATIVE: [&str; 2] = ["", "muffled, low quality"];
const SECONDS: [f32; 2] = [1.0, 30.0];

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

/// The counts of a device run: nothing came back, no CPU tensor went in unannounced.
fn check_resident(what: &str, c: &Counts) {
    println!("{what}: {c:?}");
    assert_eq!(c.downloads, 0, "{what}: downloads before the output");
    assert_eq!(
        c.implicit_uploads, 0,
        "{what}: CPU operands {:?}",
        c.mixed_ops
    );
}

fn encoder_resident(precision: Precision) {
    let Some(dir) = fixture("sa3-tiny/t5gemma-b-b-ul2") else {
        return;
    };
    let t = fixture_tensors("sa3-tiny/text.safetensors")
        .unwrap()
        .unwrap();
    let mut enc = T5GemmaEncoder::load(dir).unwrap();
    enc.set_precision(precision);
    let ids = t.get_any("input_ids").unwrap();
    let mask = t.get_any("attention_mask").unwrap();
    let want = bits(&enc.forward(&ids, &mask).unwrap());

    let be = CountingBackend::new();
    let dev = be.device();
    enc.to_device(&dev).unwrap();
    let (ids, mask) = (dev.put(&ids).unwrap(), dev.put(&mask).unwrap());
    be.reset();
    let out = enc.forward(&ids, &mask).unwrap();
    let c = be.counts();
    check_resident(&format!("T5Gemma {precision:?}"), &c);
    assert_eq!(c.uploads, 0, "the inputs were uploaded before the forward");
    let layers = enc.config().num_hidden_layers;
    // Seven projections per layer, through the op of the precision.
    let lin = match precision {
        Precision::F32 => "linear",
        Precision::Bf16 => "torch_bf16_linear",
        Precision::Bf16Dot | Precision::Bf16Amx => unreachable!("bf16 panels are CPU only"),
    };
    assert_eq!(c.ops.get(lin), Some(&(7 * layers)), "{:?}", c.ops);
    assert!(!out.device().is_cpu());
    let got = bits(&out.to_cpu().unwrap());
    assert_eq!(be.counts().downloads, 1);
    assert_eq!(got.len(), want.len());
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(
        differ, 0,
        "{precision:?}: {differ} elements differ from the CPU path"
    );
}

/// bf16-dot products run on the CPU only: an encoder moved to a device backend says so.
#[test]
fn t5gemma_bf16_dot_refuses_a_device() {
    let Some(dir) = fixture("sa3-tiny/t5gemma-b-b-ul2") else {
        return;
    };
    let t = fixture_tensors("sa3-tiny/text.safetensors")
        .unwrap()
        .unwrap();
    let mut enc = T5GemmaEncoder::load(dir).unwrap();
    enc.set_precision(Precision::Bf16Dot);
    let be = CountingBackend::new();
    let dev = be.device();
    enc.to_device(&dev).unwrap();
    let ids = dev.put(&t.get_any("input_ids").unwrap()).unwrap();
    let mask = dev.put(&t.get_any("attention_mask").unwrap()).unwrap();
    let e = enc.forward(&ids, &mask).unwrap_err().to_string();
    assert!(e.contains("runs on the CPU"), "{e}");
}

#[test]
fn t5gemma_f32_stays_on_device() {
    encoder_resident(Precision::F32);
}

#[test]
fn t5gemma_bf16_replay_stays_on_device() {
    encoder_resident(Precision::Bf16);
}

/// The conditioning of a positive and a negative batch and the unconditional context.
fn conditioning(cond: &TextConditioner) -> (Conditioning, Tensor, Tensor) {
    let pos = cond.conditioning(&PROMPTS, &SECONDS).unwrap();
    let neg = cond.negative(&NEGATIVE, &SECONDS).unwrap();
    let null = pos.cfg_null_context(Some(&neg)).unwrap();
    let zeros = pos.cfg_null_context(None).unwrap();
    (pos, null, zeros)
}

fn conditioner_resident(precision: Precision) {
    let (Some(cfg), Some(ckpt)) = (
        fixture("sa3-tiny/model_config.json"),
        fixture("sa3-tiny/model.safetensors"),
    ) else {
        return;
    };
    let cfg = ModelConfig::from_file(cfg).unwrap();
    let loader = WeightLoader::open_checkpoint(ckpt).unwrap();
    let mut cond = TextConditioner::load(&cfg, &loader).unwrap();
    cond.prompt_mut().encoder_mut().set_precision(precision);
    let (pos, null, zeros) = conditioning(&cond);

    let be = CountingBackend::new();
    cond.to_device(&be.device()).unwrap();
    be.reset();
    let (dpos, dnull, dzeros) = conditioning(&cond);
    let c = be.counts();
    check_resident(&format!("conditioner {precision:?}"), &c);
    // Per conditioning: ids, mask, normalised seconds, the seconds mask; then the zeros of the
    // context without a negative prompt.
    assert_eq!(c.uploads, 2 * 4 + 1, "{c:?}");
    for (name, a, b) in [
        (
            "cross_attn_cond",
            &pos.cross_attn_cond,
            &dpos.cross_attn_cond,
        ),
        ("global_cond", &pos.global_cond, &dpos.global_cond),
        ("null context", &null, &dnull),
        ("zero context", &zeros, &dzeros),
    ] {
        assert!(!b.device().is_cpu(), "{name} left the device");
        assert_eq!(bits(a), bits(&b.to_cpu().unwrap()), "{name} differs");
    }
    assert_eq!(
        pos.cross_attn_mask.to_vec::<u8>().unwrap(),
        dpos.cross_attn_mask
            .to_cpu()
            .unwrap()
            .to_vec::<u8>()
            .unwrap()
    );
    // The padded prompt rows were replaced on the device: the null context has zero rows there.
    assert!(bits(&dnull.to_cpu().unwrap()).contains(&0));
}

#[test]
fn conditioner_f32_stays_on_device() {
    conditioner_resident(Precision::F32);
}

#[test]
fn conditioner_bf16_replay_stays_on_device() {
    conditioner_resident(Precision::Bf16);
}
