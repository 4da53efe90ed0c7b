//! The T5Gemma encoder and the text conditioner with weights and activations resident on the
//! counting test backend: no download before the final output, no CPU operand passed to a
//! device op, and results bit-identical to the CPU path, in every compute precision (bf16-dot
//! included: its matrices travel in the `bf16_panels` weight format).
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
    // The counting backend runs the op set's reference; where the CPU would take its AMX tile
    // unit for bf16 products (its own rounding), both sides leave it out.
    use aria_core::cpu::bf16dot::without_tiles as no_tiles;
    let want = bits(&no_tiles(|| enc.forward(&ids, &mask)).unwrap());

    let be = CountingBackend::new();
    let dev = be.device();
    enc.to_device(&dev).unwrap();
    // bf16-dot packs its matrices for the device here, before the forward.
    let packed = enc.prepare().unwrap();
    assert_eq!(packed > 0, precision == Precision::Bf16Dot);
    let (ids, mask) = (dev.put(&ids).unwrap(), dev.put(&mask).unwrap());
    be.reset();
    let out = no_tiles(|| enc.forward(&ids, &mask)).unwrap();
    let c = be.counts();
    check_resident(&format!("T5Gemma {precision:?}"), &c);
    assert_eq!(c.uploads, 0, "the inputs were uploaded before the forward");
    let layers = enc.config().num_hidden_layers;
    // Seven projections per layer, through the op of the precision (bf16-dot: four products,
    // the query, key and value projections stacked, and the up and gate ones).
    let (lin, per_layer) = match precision {
        Precision::F32 => ("linear", 7),
        Precision::Bf16 => ("torch_bf16_linear", 7),
        Precision::Bf16Dot => ("linear_packed", 4),
    };
    assert_eq!(c.ops.get(lin), Some(&(per_layer * layers)), "{:?}", c.ops);
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

#[test]
fn t5gemma_bf16_dot_stays_on_device() {
    encoder_resident(Precision::Bf16Dot);
}

/// A backend without the `bf16_panels` format refuses bf16-dot naming the format and the
/// formats it has, before any product runs.
#[test]
fn t5gemma_bf16_dot_refused_by_a_backend_without_the_format() {
    let Some(dir) = fixture("sa3-tiny/t5gemma-b-b-ul2") else {
        return;
    };
    let mut enc = T5GemmaEncoder::load(dir).unwrap();
    enc.set_precision(Precision::Bf16Dot);
    let be = aria_testing::counting::CountingBackend::without_packed();
    enc.to_device(&be.device()).unwrap();
    let e = enc.prepare().unwrap_err().to_string();
    assert!(e.contains("bf16_panels"), "{e}");
    assert!(e.contains("formats here: none"), "{e}");
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
