//! The table of calls: every op of the set × format × shapes, edge shapes included (one
//! element, empty dimensions, widths that are no multiple of a tile or a block, sequences past
//! one tile of keys).

use std::sync::Arc;

use aria_core::backend::BinaryOp;
use aria_core::nn::{Bf16DotWeight, PackedWeight};
use aria_core::ops::{self, AttnOpts, FourierLayout, GluAct, HeadNorm, KeyMaskMode, RmsStyle};
use aria_core::{DType, Result, Tensor};
use aria_quant::{Compute, Format, PackedMatrix};

use super::Case;

/// Deterministic values in [-1, 1).
pub(crate) fn t(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9))
                .wrapping_mul(0x85eb_ca6b)
                .rotate_left(13)
                .wrapping_mul(0xc2b2_ae35);
            (h >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap_or_else(|_| Tensor::zeros(shape, DType::F32))
}

/// Values that exercise conversions: ties, subnormals, overflow, ±0, ±∞, NaN (`[8, 8]`).
fn special() -> Tensor {
    let mut v = vec![
        0.0f32,
        -0.0,
        1.0,
        -1.5,
        65504.0,
        65520.0,
        1e6,
        -1e6,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        1e-9,
        1.0 + 1.0 / 2048.0,
        1.0 + 3.0 / 2048.0,
        1.0 + 1.0 / 256.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-40,
        3.389_531_4e38,
    ];
    let rest = t(&[64 - v.len()], 140).to_vec_f32().unwrap_or_default();
    v.extend(rest.iter().map(|x| x * 300.0));
    Tensor::from_vec(v, &[8, 8]).unwrap_or_else(|_| Tensor::zeros(&[8, 8], DType::F32))
}

/// A 0/1 mask with the given entries zero.
fn mask(shape: &[usize], zeros: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| if zeros.contains(&i) { 0.0 } else { 1.0 })
        .collect();
    Tensor::from_vec(v, shape).unwrap_or_else(|_| Tensor::zeros(shape, DType::F32))
}

fn label(shapes: &[&[usize]]) -> String {
    shapes
        .iter()
        .map(|s| format!("{s:?}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn products(c: &mut Vec<Case>) {
    // linear: one element; odd widths; rows of nothing; a width past one tile; with a bias.
    for (i, &(xs, n, bias)) in [
        (&[1usize, 1][..], 1usize, false),
        (&[3, 5][..], 7, true),
        (&[2, 3, 64][..], 48, true),
        (&[0, 8][..], 5, true),
        (&[4, 129][..], 33, false),
    ]
    .iter()
    .enumerate()
    {
        let k = xs[xs.len() - 1];
        let seed = 10 * i as u32;
        let mut inputs = vec![t(xs, seed), t(&[n, k], seed + 1)];
        if bias {
            inputs.push(t(&[n], seed + 2));
        }
        c.push(Case::new(
            "linear",
            "f32",
            label(&[xs, &[n, k]]),
            inputs,
            |_, v| ops::linear(&v[0], &v[1], v.get(2)),
        ));
    }
    // linear with the weight laid out once by the backend it runs on (`prepare_weight`; the
    // CPU's packed panels, none on a backend that lays nothing out): the value of `w`.
    for (i, &(xs, n)) in [
        (&[1usize, 1][..], 1usize),
        (&[3, 5][..], 7),
        (&[2, 9, 129][..], 33),
    ]
    .iter()
    .enumerate()
    {
        let k = xs[xs.len() - 1];
        let seed = 70 + 10 * i as u32;
        c.push(Case::new(
            "linear",
            "prepared",
            label(&[xs, &[n, k]]),
            vec![t(xs, seed), t(&[n, k], seed + 1), t(&[n], seed + 2)],
            |dev, v| {
                let p = aria_core::backend::of(dev).prepare_weight(&v[1])?;
                ops::linear_prepared(&v[0], &v[1], Some(&v[2]), p.as_ref())
            },
        ));
    }
    for (fmt, dt) in [("bf16", DType::BF16), ("f16", DType::F16)] {
        for (xs, n) in [(&[3usize, 5, 64][..], 48usize), (&[2, 7][..], 3)] {
            let k = xs[xs.len() - 1];
            let w = t(&[n, k], 3).to_dtype(dt).unwrap_or_else(|_| t(&[n, k], 3));
            c.push(Case::new(
                "linear",
                fmt,
                label(&[xs, &[n, k]]),
                vec![t(xs, 4), w, t(&[n], 5)],
                |_, v| ops::linear(&v[0], &v[1], Some(&v[2])),
            ));
        }
    }
    for (a, b) in [
        (&[2usize, 3, 7, 9][..], &[2usize, 3, 9, 5][..]),
        (&[1, 1], &[1, 1]),
        (&[3, 4], &[4, 5]),
        (&[4, 0], &[0, 3]),
    ] {
        c.push(Case::new(
            "matmul",
            "f32",
            label(&[a, b]),
            vec![t(a, 6), t(b, 7)],
            |_, v| ops::matmul(&v[0], &v[1]),
        ));
    }
    for (k, pad) in [(1usize, 0usize), (3, 1), (3, 0), (7, 3)] {
        c.push(Case::new(
            "conv1d",
            "f32",
            format!("x [2, 16, 40] w [24, 16, {k}] pad {pad}"),
            vec![t(&[2, 16, 40], 8), t(&[24, 16, k], 9), t(&[24], 10)],
            move |_, v| ops::conv1d(&v[0], &v[1], Some(&v[2]), pad),
        ));
    }
    c.push(Case::new(
        "conv1d",
        "f32",
        "one element",
        vec![t(&[1, 1, 1], 11), t(&[1, 1, 1], 12)],
        |_, v| ops::conv1d(&v[0], &v[1], None, 0),
    ));
}

/// A packed weight of `format` for `w`, uploaded where the case runs.
fn packed(w: &Tensor, format: Format, compute: Compute) -> Option<Arc<dyn PackedWeight>> {
    let pm = PackedMatrix::quantize("w", w, format)
        .ok()?
        .with_compute(compute)
        .ok()?;
    Some(Arc::new(pm))
}

fn packed_products(c: &mut Vec<Case>) {
    let q8 = [
        (1usize, 32usize, 1usize),
        (4, 40, 7),
        (9, 96, 33),
        (6, 64, 48),
    ];
    let kq = [(3usize, 256usize, 8usize), (2, 512, 5)];
    type Set<'a> = (&'static str, Format, Compute, &'a [(usize, usize, usize)]);
    let sets: [Set<'_>; 4] = [
        ("q8_0", Format::Q8_0, Compute::WeightOnly, &q8),
        ("q8_0+w8a8", Format::Q8_0, Compute::W8A8, &q8),
        ("q4_k", Format::Q4K, Compute::WeightOnly, &kq),
        ("q6_k", Format::Q6K, Compute::WeightOnly, &kq),
    ];
    // bf16 panels: odd widths (the last pair padded), more outputs than one 48-wide panel.
    for (m, k, n) in [
        (1usize, 1usize, 1usize),
        (4, 7, 9),
        (9, 96, 50),
        (3, 129, 48),
    ] {
        let Ok(pw) = Bf16DotWeight::pack(&t(&[n, k], 24)) else {
            continue;
        };
        let pw: Arc<dyn PackedWeight> = Arc::new(pw);
        c.push(Case::new(
            "linear_packed",
            "bf16_panels",
            format!("x [{m}, {k}] w [{n}, {k}]"),
            vec![t(&[m, k], 25), t(&[n], 26)],
            move |dev, v| {
                ops::packed_linear(&v[0], &*aria_core::nn::put_packed(dev, &pw)?, Some(&v[1]))
            },
        ));
    }
    for (name, format, compute, shapes) in sets {
        for &(m, k, n) in shapes {
            let Some(pw) = packed(&t(&[n, k], 21), format, compute) else {
                continue;
            };
            c.push(Case::new(
                "linear_packed",
                name,
                format!("x [{m}, {k}] w [{n}, {k}]"),
                vec![t(&[m, k], 22), t(&[n], 23)],
                move |dev, v| {
                    ops::packed_linear(&v[0], &*aria_core::nn::put_packed(dev, &pw)?, Some(&v[1]))
                },
            ));
        }
    }
}

fn attention(c: &mut Vec<Case>) {
    for &(nq, nk, hd) in &[
        (37usize, 37usize, 64usize),
        (5, 5, 32),
        (1, 1, 8),
        (6, 7, 4),
    ] {
        let shapes = [&[2, 3, nq, hd][..], &[2, 3, nk, hd][..]];
        let inputs = vec![
            t(shapes[0], 30),
            t(shapes[1], 31),
            t(shapes[1], 32),
            mask(&[2, nk], &[1, nk + 2, 2 * nk - 1]),
            t(shapes[0], 33),
            t(shapes[1], 34),
        ];
        let scale = 1.0 / (hd as f32).sqrt();
        c.push(Case::new(
            "attention",
            "f32",
            format!("plain {}", label(&shapes)),
            inputs.clone(),
            move |_, v| ops::attention(&v[0], &v[1], &v[2], &AttnOpts::new(scale)),
        ));
        for mode in [KeyMaskMode::ZeroValues, KeyMaskMode::Exclude] {
            c.push(Case::new(
                "attention",
                "f32",
                format!("masked {mode:?} {}", label(&shapes)),
                inputs.clone(),
                move |_, v| {
                    let mut o = AttnOpts::new(scale);
                    o.key_mask = Some(&v[3]);
                    o.mask_mode = mode;
                    ops::attention(&v[0], &v[1], &v[2], &o)
                },
            ));
        }
        c.push(Case::new(
            "attention",
            "f32",
            format!("differential {}", label(&shapes)),
            inputs.clone(),
            move |_, v| {
                ops::attention_diff(&v[0], &v[1], &v[4], &v[5], &v[2], &AttnOpts::new(scale))
            },
        ));
        c.push(Case::new(
            "attention",
            "bf16_products",
            format!("masked, bf16 products allowed {}", label(&shapes)),
            inputs.clone(),
            move |_, v| {
                let mut o = AttnOpts::new(scale);
                o.key_mask = Some(&v[3]);
                o.mask_mode = KeyMaskMode::Exclude;
                o.bf16_products = true;
                ops::attention(&v[0], &v[1], &v[2], &o)
            },
        ));
        if nq == nk {
            c.push(Case::new(
                "attention",
                "f32",
                format!("banded, soft-capped {}", label(&shapes)),
                inputs,
                move |_, v| {
                    let mut o = AttnOpts::new(scale);
                    o.window = Some((3, 2));
                    o.softcap = Some(2.0);
                    ops::attention(&v[0], &v[1], &v[2], &o)
                },
            ));
        }
    }
    // A head-split view read in place, past one tile of keys, with every key of a row masked.
    c.push(Case::new(
        "attention",
        "f32",
        "views of [1, 130, 4, 32], all keys of item 0 excluded",
        vec![t(&[1, 130, 4, 32], 35), t(&[1, 130, 4, 32], 36), {
            let z: Vec<usize> = (0..130).collect();
            mask(&[1, 130], &z)
        }],
        |_, v| {
            let (q, k) = (v[0].transpose(1, 2)?, v[1].transpose(1, 2)?);
            let mut o = AttnOpts::new(0.2);
            o.key_mask = Some(&v[2]);
            o.mask_mode = KeyMaskMode::Exclude;
            ops::attention(&q, &k, &k, &o)
        },
    ));
}

fn elementwise(c: &mut Vec<Case>) {
    type Un = fn(&Tensor) -> Result<Tensor>;
    let unary: [(&str, Un); 6] = [
        ("silu", ops::silu),
        ("sigmoid", ops::sigmoid),
        ("tanh", ops::tanh),
        ("sin_pi", ops::sin_pi),
        ("gelu", ops::gelu),
        ("gelu_tanh", ops::gelu_tanh),
    ];
    let shapes: [&[usize]; 4] = [&[2, 3, 8], &[1], &[0, 4], &[4097]];
    for (name, f) in unary {
        for s in shapes {
            c.push(Case::new(
                "unary",
                "f32",
                format!("{name} {s:?}"),
                vec![t(s, 40)],
                move |_, v| f(&v[0]),
            ));
        }
    }
    for s in shapes {
        c.push(Case::new(
            "affine",
            "f32",
            format!("{s:?}"),
            vec![t(s, 41)],
            |_, v| ops::affine(&v[0], 1.5, -0.25),
        ));
        c.push(Case::new(
            "mul_scalar",
            "f32",
            format!("{s:?}"),
            vec![t(s, 42)],
            |_, v| ops::mul_scalar(&v[0], -2.0),
        ));
        c.push(Case::new(
            "add_scalar",
            "f32",
            format!("{s:?}"),
            vec![t(s, 43)],
            |_, v| ops::add_scalar(&v[0], 0.75),
        ));
    }
    let pairs: [(&[usize], &[usize]); 4] = [
        (&[2, 3, 8], &[2, 1, 8]),
        (&[8], &[2, 3, 8]),
        (&[1], &[5]),
        (&[4097], &[4097]),
    ];
    for f in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
        for (a, b) in pairs {
            c.push(Case::new(
                "binary",
                "f32",
                format!("{f:?} {}", label(&[a, b])),
                vec![t(a, 44), t(b, 45).add_scalar_or(f)],
                move |_, v| match f {
                    BinaryOp::Add => ops::add(&v[0], &v[1]),
                    BinaryOp::Sub => ops::sub(&v[0], &v[1]),
                    BinaryOp::Mul => ops::mul(&v[0], &v[1]),
                    _ => ops::div(&v[0], &v[1]),
                },
            ));
        }
    }
    for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
        for s in [&[2usize, 3, 8][..], &[1, 2]] {
            c.push(Case::new(
                "glu",
                "f32",
                format!("{act:?} {s:?}"),
                vec![t(s, 46)],
                move |_, v| ops::glu(&v[0], act),
            ));
        }
    }
    for s in [&[2usize, 3, 8][..], &[3, 1], &[2, 300]] {
        c.push(Case::new(
            "softmax",
            "f32",
            format!("{s:?}"),
            vec![t(s, 47)],
            |_, v| ops::softmax_last(&v[0]),
        ));
    }
    c.push(Case::new(
        "axpby",
        "f32",
        "[3, 4, 5]",
        vec![t(&[3, 4, 5], 48), t(&[3, 4, 5], 49)],
        |_, v| ops::axpby(&[1.0, 0.5, -2.0], &v[0], &[-0.3, 1.0, 0.25], &v[1]),
    ));
}

/// Divisors kept away from zero for `div`.
trait AwayFromZero {
    fn add_scalar_or(self, f: BinaryOp) -> Tensor;
}
impl AwayFromZero for Tensor {
    fn add_scalar_or(self, f: BinaryOp) -> Tensor {
        if f == BinaryOp::Div {
            ops::affine(&self, 0.5, 1.5).unwrap_or(self)
        } else {
            self
        }
    }
}

fn rows_and_norms(c: &mut Vec<Case>) {
    for s in [&[2usize, 3, 8][..], &[1, 1], &[2, 300]] {
        let d = s[s.len() - 1];
        for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
            c.push(Case::new(
                "rms_norm",
                "f32",
                format!("{style:?} {s:?}"),
                vec![t(s, 50), t(&[d], 51)],
                move |_, v| ops::rms_norm(&v[0], Some(&v[1]), 1e-6, style),
            ));
        }
        c.push(Case::new(
            "rms_norm",
            "f32",
            format!("no weight {s:?}"),
            vec![t(s, 52)],
            |_, v| ops::rms_norm(&v[0], None, 1e-6, RmsStyle::Plain),
        ));
        c.push(Case::new(
            "layer_norm",
            "f32",
            format!("{s:?}"),
            vec![t(s, 53), t(&[d], 54), t(&[d], 55)],
            |_, v| ops::layer_norm(&v[0], Some(&v[1]), Some(&v[2]), 1e-5),
        ));
        c.push(Case::new(
            "dyt",
            "f32",
            format!("{s:?}"),
            vec![t(s, 56), t(&[d], 57), t(&[d], 58)],
            |_, v| ops::dyt(&v[0], 0.7, &v[1], &v[2]),
        ));
    }
    // (A row of one element has no unbiased deviation: NaN on every backend, which no
    // comparison accepts.)
    for s in [&[2usize, 3, 8][..], &[1, 2], &[2, 300]] {
        c.push(Case::new(
            "std_last",
            "f32",
            format!("{s:?}"),
            vec![t(s, 59)],
            |_, v| ops::std_last(&v[0]),
        ));
    }
    let inv = Tensor::from_vec(vec![1.0f32, 0.1], &[2]).unwrap_or_else(|_| t(&[2], 1));
    let inv4 = Tensor::from_vec(vec![1.0f32, 0.3, 0.1, 0.01], &[4]).unwrap_or_else(|_| t(&[4], 1));
    for (s, f) in [
        (&[2usize, 3, 8][..], &inv),
        (&[1, 2, 5, 8], &inv4),
        (&[1, 8], &inv4),
    ] {
        let n = s[s.len() - 2];
        if let Ok((cos, sin)) = ops::rope_tables(f, n + 2) {
            c.push(Case::new(
                "rope",
                "f32",
                format!("x {s:?} R {}", cos.shape()[1]),
                vec![t(s, 60), cos, sin],
                |_, v| ops::rope(&v[0], &v[1], &v[2]),
            ));
        }
    }
    for (pos0, n) in [(0usize, 6usize), (37, 5), (3, 0)] {
        c.push(Case::new(
            "rope_table",
            "f32",
            format!("positions {pos0}..{}", pos0 + n),
            vec![inv4.clone()],
            move |_, v| ops::rope_table(&v[0], pos0, n),
        ));
    }
}

fn fused(c: &mut Vec<Case>) {
    let (b, n, e) = (2usize, 5usize, 8usize);
    let proj = t(&[b, 2 * e], 70);
    c.push(Case::new(
        "rms_norm_modulate",
        "f32",
        "scale, shift as column views of [2, 16]",
        vec![t(&[b, n, e], 71), t(&[e], 72), proj],
        move |_, v| {
            let (sc, sh) = (v[2].narrow(1, 0, e)?, v[2].narrow(1, e, e)?);
            ops::rms_norm_modulate(&v[0], &v[1], 1e-6, Some((&sc, &sh)))
        },
    ));
    c.push(Case::new(
        "rms_norm_modulate",
        "f32",
        "no modulation",
        vec![t(&[b, n, e], 73), t(&[e], 74)],
        |_, v| ops::rms_norm_modulate(&v[0], &v[1], 1e-6, None),
    ));
    c.push(Case::new(
        "gated_residual_add",
        "f32",
        "tail of 3 tokens, gate, row mask",
        vec![
            t(&[b, n, e], 75),
            t(&[b, 3, e], 76),
            t(&[b, e], 77),
            mask(&[b, n], &[4, 6]),
        ],
        |_, v| ops::gated_residual_add(&v[0], &v[1], Some(&v[2]), Some(&v[3])),
    ));
    c.push(Case::new(
        "gated_residual_add",
        "f32",
        "plain",
        vec![t(&[b, n, e], 78), t(&[b, n, e], 79)],
        |_, v| ops::gated_residual_add(&v[0], &v[1], None, None),
    ));
    let inv = Tensor::from_vec(vec![1.0f32, 0.1], &[2]).unwrap_or_else(|_| t(&[2], 1));
    if let Ok((cos, sin)) = ops::rope_tables(&inv, n) {
        c.push(Case::new(
            "split_heads",
            "f32",
            "heads 2×8 from column 8 of [2, 5, 32], QK-norm, RoPE R 4",
            vec![t(&[b, n, 32], 80), t(&[8], 81), cos, sin],
            |_, v| ops::split_heads(&v[0], 8, 2, 8, Some((&v[1], 1e-6)), Some((&v[2], &v[3]))),
        ));
    }
    c.push(Case::new(
        "split_heads",
        "f32",
        "plain copy",
        vec![t(&[b, n, 24], 82)],
        |_, v| ops::split_heads(&v[0], 0, 3, 8, None, None),
    ));
    c.push(Case::new(
        "merge_heads",
        "f32",
        "[2, 3, 5, 4] with a row mask",
        vec![t(&[b, 3, n, 4], 83), mask(&[b, n], &[0, 9])],
        |_, v| ops::merge_heads(&v[0], Some(&v[1])),
    ));
    c.push(Case::new(
        "merge_heads",
        "f32",
        "transposed view",
        vec![t(&[b, n, 3, 4], 84)],
        |_, v| ops::merge_heads(&v[0].transpose(1, 2)?, None),
    ));
    for (cfg, apg, thr, masked) in [
        (3.0f32, 0.0f32, 0.0f32, false),
        (5.0, 1.0, 0.0, false),
        (4.0, 0.5, 0.8, true),
    ] {
        c.push(Case::new(
            "apg_guidance",
            "f32",
            format!("cfg {cfg} apg {apg} threshold {thr} masked {masked}"),
            vec![
                t(&[b, 4, 9], 85),
                t(&[b, 4, 9], 86),
                t(&[b, 4, 9], 87),
                mask(&[b, 9], &[8, 16, 17]),
            ],
            move |_, v| {
                let m = masked.then_some(&v[3]);
                ops::apg_guidance(&v[0], &v[1], &v[2], &[0.9, 0.3], m, cfg, apg, thr)
            },
        ));
    }
    for (shape, phi) in [([2usize, 64, 9], 0.7f32), ([1, 4, 3], 1.0)] {
        c.push(Case::new(
            "cfg_rescale",
            "f32",
            format!("{shape:?} φ {phi}"),
            vec![
                t(&shape, 91),
                ops::mul_scalar(&t(&shape, 92), 0.5).unwrap_or_else(|_| t(&shape, 92)),
            ],
            move |_, v| ops::cfg_rescale(&v[0], &v[1], phi),
        ));
    }
    let inv = Tensor::from_vec(vec![1.0f32, 0.1], &[2]).unwrap_or_else(|_| t(&[2], 1));
    if let Ok(table) = ops::rope_table(&inv, 0, 7) {
        for part in 0..3 {
            let table = table.clone();
            c.push(Case::new(
                "qkv_heads",
                "f32",
                format!("part {part} of [2, 6, 3·2·8], DyT, RoPE R 4"),
                vec![t(&[b, 6, 48], 88), t(&[8], 89), t(&[8], 90), table],
                move |_, v| {
                    let (cos, sin) = (v[3].get(0)?, v[3].get(1)?);
                    let norm = HeadNorm {
                        alpha: 0.6,
                        gamma: &v[1],
                        beta: &v[2],
                    };
                    ops::qkv_heads(&v[0], 3, part, 2, Some(norm), Some((&cos, &sin)))
                },
            ));
        }
    }
}

fn layout_and_text(c: &mut Vec<Case>) {
    for k in [1usize, 3, 5] {
        c.push(Case::new(
            "unfold",
            "f32",
            format!("[2, 5, 3] window {k}"),
            vec![t(&[2, 5, 3], 100)],
            move |_, v| ops::unfold(&v[0], k),
        ));
    }
    c.push(Case::new(
        "contiguous",
        "f32",
        "transposed view",
        vec![t(&[2, 3, 8], 101)],
        |_, v| v[0].transpose(1, 2)?.contiguous(),
    ));
    c.push(Case::new(
        "contiguous",
        "bf16",
        "narrowed view",
        vec![t(&[4, 6], 102)
            .to_dtype(DType::BF16)
            .unwrap_or_else(|_| t(&[4, 6], 102))],
        |_, v| v[0].narrow(1, 1, 4)?.contiguous(),
    ));
    for (from, to) in [
        (DType::F32, DType::BF16),
        (DType::F32, DType::F16),
        (DType::BF16, DType::F32),
    ] {
        c.push(Case::new(
            "to_dtype",
            "f32",
            format!("{from} → {to}"),
            vec![t(&[3, 7], 103)
                .to_dtype(from)
                .unwrap_or_else(|_| t(&[3, 7], 103))],
            move |_, v| v[0].to_dtype(to),
        ));
    }
    for to in [DType::F16, DType::BF16] {
        c.push(Case::new(
            "to_dtype",
            "f32",
            format!("f32 → {to}: ties, subnormals, overflow, ±0, ±∞, NaN"),
            vec![special()],
            move |_, v| v[0].to_dtype(to),
        ));
        c.push(Case::new(
            "to_dtype",
            "f32",
            format!("{to} → f32 of a transposed view"),
            vec![special().to_dtype(to).unwrap_or_else(|_| special())],
            |_, v| v[0].transpose(0, 1)?.to_dtype(DType::F32),
        ));
    }
    c.push(Case::new(
        "cat",
        "f32",
        "three along dim 1",
        vec![t(&[2, 3, 8], 104), t(&[2, 1, 8], 105), t(&[2, 0, 8], 106)],
        |_, v| Tensor::cat(&[&v[0], &v[1], &v[2]], 1),
    ));
    c.push(Case::new(
        "cat",
        "f32",
        "along dim 0, a view",
        vec![t(&[2, 4], 107), t(&[4, 2], 108)],
        |_, v| Tensor::cat(&[&v[0], &v[1].transpose(0, 1)?], 0),
    ));
    for (dim, before, after) in [(1usize, 2usize, 3usize), (0, 0, 1), (2, 1, 0)] {
        c.push(Case::new(
            "pad",
            "f32",
            format!("[2, 3, 4] dim {dim} +{before}/+{after}"),
            vec![t(&[2, 3, 4], 109)],
            move |_, v| ops::pad(&v[0], dim, before, after),
        ));
    }
    let ids = Tensor::from_vec(vec![3i64, 0, 4, 4], &[2, 2]).unwrap_or_else(|_| t(&[2, 2], 1));
    c.push(Case::new(
        "embedding",
        "bf16",
        "ids [2, 2] table [5, 6]",
        vec![
            ids,
            t(&[5, 6], 110)
                .to_dtype(DType::BF16)
                .unwrap_or_else(|_| t(&[5, 6], 110)),
        ],
        |_, v| ops::embedding(&v[0], &v[1]),
    ));
    let ids = Tensor::from_vec(vec![9i64, 0, 1, 9, 2, 5, 7], &[7]).unwrap_or_else(|_| t(&[7], 1));
    c.push(Case::new(
        "embedding",
        "f32",
        "ids [7] table [10, 3]",
        vec![ids, t(&[10, 3], 111)],
        |_, v| ops::embedding(&v[0], &v[1]),
    ));
    for layout in [FourierLayout::CosSin, FourierLayout::ValueSinCos] {
        c.push(Case::new(
            "fourier_features",
            "f32",
            format!("{layout:?} values [3] freqs [4]"),
            vec![t(&[3], 112), t(&[4], 113)],
            move |_, v| ops::fourier_features(&v[0], &v[1], layout),
        ));
    }
    c.push(Case::new(
        "fill_masked_rows",
        "f32",
        "[2, 4, 3] with a fill row",
        vec![t(&[2, 4, 3], 114), mask(&[2, 4], &[1, 6, 7]), t(&[3], 115)],
        |_, v| ops::fill_masked_rows(&v[0], &v[1], Some(&v[2])),
    ));
    c.push(Case::new(
        "fill_masked_rows",
        "f32",
        "[4, 3] with zeros",
        vec![t(&[4, 3], 116), mask(&[4], &[0])],
        |_, v| ops::fill_masked_rows(&v[0], &v[1], None),
    ));
}

/// bf16 values in f32 tensors, as the replay ops take them.
fn bf16_values(shape: &[usize], seed: u32) -> Tensor {
    ops::torch_bf16::round_tensor(&t(shape, seed)).unwrap_or_else(|_| t(shape, seed))
}

fn torch_bf16(c: &mut Vec<Case>) {
    use ops::torch_bf16 as tb;
    c.push(Case::new(
        "torch_bf16_linear",
        "bf16",
        "x [3, 40] w [6, 40]",
        vec![
            bf16_values(&[3, 40], 120),
            bf16_values(&[6, 40], 121)
                .to_dtype(DType::BF16)
                .unwrap_or_else(|_| t(&[6, 40], 1)),
        ],
        |_, v| tb::linear(&v[0], &v[1], None),
    ));
    c.push(Case::new(
        "torch_bf16_attention",
        "bf16",
        "[1, 2, 6, 8], keys excluded",
        vec![
            bf16_values(&[1, 2, 6, 8], 122),
            bf16_values(&[1, 2, 6, 8], 123),
            bf16_values(&[1, 2, 6, 8], 124),
            mask(&[1, 6], &[2]),
        ],
        |_, v| {
            let mut o = AttnOpts::new(0.35);
            o.key_mask = Some(&v[3]);
            o.mask_mode = KeyMaskMode::Exclude;
            tb::attention(&v[0], &v[1], &v[2], &o)
        },
    ));
    c.push(Case::new(
        "torch_bf16_rms_norm",
        "bf16",
        "[3, 16]",
        vec![bf16_values(&[3, 16], 125), bf16_values(&[16], 126)],
        |_, v| tb::rms_norm(&v[0], &v[1], 1e-6),
    ));
    c.push(Case::new(
        "torch_bf16_rope",
        "bf16",
        "[1, 4, 8]",
        vec![
            bf16_values(&[1, 4, 8], 127),
            bf16_values(&[5, 8], 128),
            bf16_values(&[5, 8], 129),
        ],
        |_, v| tb::rope(&v[0], &v[1], &v[2]),
    ));
    c.push(Case::new(
        "torch_bf16_gelu_tanh",
        "bf16",
        "[5, 7]",
        vec![bf16_values(&[5, 7], 130)],
        |_, v| tb::gelu_tanh(&v[0]),
    ));
    c.push(Case::new(
        "torch_bf16_round",
        "bf16",
        "[5, 7]",
        vec![t(&[5, 7], 131)],
        |_, v| tb::round_tensor(&v[0]),
    ));
    c.push(Case::new(
        "torch_bf16_binary",
        "bf16",
        "mul [2, 3] · [3]",
        vec![bf16_values(&[2, 3], 132), bf16_values(&[3], 133)],
        |_, v| tb::binary(&v[0], &v[1], BinaryOp::Mul),
    ));
}

/// Every case of the table.
pub fn cases() -> Vec<Case> {
    let mut c = Vec::new();
    products(&mut c);
    packed_products(&mut c);
    attention(&mut c);
    elementwise(&mut c);
    rows_and_norms(&mut c);
    fused(&mut c);
    layout_and_text(&mut c);
    torch_bf16(&mut c);
    c
}

/// A call the check step must refuse, before any backend sees it.
pub struct Malformed {
    /// What is wrong.
    pub what: &'static str,
    /// The operands (CPU).
    pub inputs: Vec<Tensor>,
    /// The call.
    pub call: fn(&[Tensor]) -> Result<Tensor>,
}

/// The malformed calls.
pub fn malformed() -> Vec<Malformed> {
    let m = |what, inputs, call| Malformed { what, inputs, call };
    vec![
        m(
            "linear: K differs",
            vec![t(&[2, 4], 1), t(&[3, 5], 2)],
            |v: &[Tensor]| ops::linear(&v[0], &v[1], None),
        ),
        m(
            "linear: bias of the wrong length",
            vec![t(&[2, 4], 1), t(&[3, 4], 2), t(&[2], 3)],
            |v: &[Tensor]| ops::linear(&v[0], &v[1], Some(&v[2])),
        ),
        m(
            "matmul: inner dimensions",
            vec![t(&[2, 3], 1), t(&[4, 2], 2)],
            |v: &[Tensor]| ops::matmul(&v[0], &v[1]),
        ),
        m(
            "conv1d: input shorter than the kernel",
            vec![t(&[1, 2, 2], 1), t(&[3, 2, 5], 2)],
            |v: &[Tensor]| ops::conv1d(&v[0], &v[1], None, 0),
        ),
        m(
            "attention: key mask of the wrong shape",
            vec![t(&[1, 2, 4, 8], 1), t(&[1, 2, 5, 8], 2), t(&[2, 5], 3)],
            |v: &[Tensor]| {
                let mut o = AttnOpts::new(1.0);
                o.key_mask = Some(&v[2]);
                ops::attention(&v[0], &v[1], &v[1], &o)
            },
        ),
        m(
            "attention: a window with Nq ≠ Nk",
            vec![t(&[1, 2, 4, 8], 1), t(&[1, 2, 5, 8], 2)],
            |v: &[Tensor]| {
                let mut o = AttnOpts::new(1.0);
                o.window = Some((1, 1));
                ops::attention(&v[0], &v[1], &v[1], &o)
            },
        ),
        m(
            "binary: shapes that do not broadcast",
            vec![t(&[2, 3], 1), t(&[4], 2)],
            |v: &[Tensor]| ops::add(&v[0], &v[1]),
        ),
        m(
            "glu: odd last dimension",
            vec![t(&[2, 5], 1)],
            |v: &[Tensor]| ops::glu(&v[0], GluAct::Silu),
        ),
        m(
            "rms_norm: gain of the wrong length",
            vec![t(&[2, 5], 1), t(&[4], 2)],
            |v: &[Tensor]| ops::rms_norm(&v[0], Some(&v[1]), 1e-6, RmsStyle::Plain),
        ),
        m(
            "rope: tables shorter than the sequence",
            vec![t(&[1, 6, 8], 1), t(&[3, 4], 2), t(&[3, 4], 3)],
            |v: &[Tensor]| ops::rope(&v[0], &v[1], &v[2]),
        ),
        m(
            "unfold: even window",
            vec![t(&[1, 4, 2], 1)],
            |v: &[Tensor]| ops::unfold(&v[0], 2),
        ),
        m(
            "pad: dimension past the rank",
            vec![t(&[2, 3], 1)],
            |v: &[Tensor]| ops::pad(&v[0], 2, 1, 1),
        ),
        m(
            "cat: other sizes differ",
            vec![t(&[2, 3], 1), t(&[2, 4], 2)],
            |v: &[Tensor]| Tensor::cat(&[&v[0], &v[1]], 0),
        ),
        m(
            "split_heads: columns past the width",
            vec![t(&[1, 2, 8], 1)],
            |v: &[Tensor]| ops::split_heads(&v[0], 4, 2, 4, None, None),
        ),
        m(
            "gated_residual_add: more update tokens than tokens",
            vec![t(&[1, 2, 4], 1), t(&[1, 3, 4], 2)],
            |v: &[Tensor]| ops::gated_residual_add(&v[0], &v[1], None, None),
        ),
        m(
            "axpby: coefficients for another batch",
            vec![t(&[2, 3], 1), t(&[2, 3], 2)],
            |v: &[Tensor]| ops::axpby(&[1.0], &v[0], &[1.0], &v[1]),
        ),
        m(
            "apg_guidance: sigmas for another batch",
            vec![t(&[2, 3, 4], 1), t(&[2, 3, 4], 2), t(&[2, 3, 4], 3)],
            |v: &[Tensor]| ops::apg_guidance(&v[0], &v[1], &v[2], &[1.0], None, 3.0, 0.0, 0.0),
        ),
        m(
            "cfg_rescale: v_cond of another shape",
            vec![t(&[1, 4, 3], 1), t(&[1, 4, 2], 2)],
            |v: &[Tensor]| ops::cfg_rescale(&v[0], &v[1], 0.7),
        ),
        m(
            "qkv_heads: part past the parts",
            vec![t(&[1, 2, 24], 1)],
            |v: &[Tensor]| ops::qkv_heads(&v[0], 3, 3, 2, None, None),
        ),
        m(
            "embedding: table not 2-D",
            vec![t(&[2], 1), t(&[4], 2)],
            |v: &[Tensor]| ops::embedding(&v[0], &v[1]),
        ),
        m(
            "fill_masked_rows: mask of the wrong shape",
            vec![t(&[2, 3], 1), t(&[3], 2)],
            |v: &[Tensor]| ops::fill_masked_rows(&v[0], &v[1], None),
        ),
        m(
            "std_last: rows of nothing",
            vec![t(&[3, 0], 1)],
            |v: &[Tensor]| ops::std_last(&v[0]),
        ),
    ]
}
