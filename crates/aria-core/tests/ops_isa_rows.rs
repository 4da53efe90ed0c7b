//! The per-ISA row kernels of the fused and elementwise ops, on every path this machine runs
//! (`cpu::Isa::available()`), against the scalar path.
//!
//! - Arithmetic ops without a reduction (gated residual add, head split with RoPE, RoPE, axpby,
//!   affine/scalar ops): **bit-identical** to scalar. The norms (whose sums of squares each path
//!   reduces in its own order, as before) within 1e-6 of scalar relative to the largest
//!   magnitude; their per-element kernels are bit-identical (unit tests in `cpu::kernels`).
//! - Transcendental ops (tanh, softcap, sin(π·x), GELU erf/tanh and the GLUs built on them):
//!   against an f64 reference, per element `|got − want| ≤ tol_rel·|want| + tol_abs`, stated per
//!   op below, including special values (±0, ±∞, NaN, huge arguments); and an element's bits do
//!   not depend on where its row or chunk starts.
#![allow(clippy::unwrap_used)]

mod ops_common;

use aria_core::cpu::{self, Isa};
use aria_core::ops::{self, AttnOpts, GluAct, RmsStyle};
use aria_core::Tensor;
use ops_common::{randn, t};

/// Run `f` on every path and require the same bits as the scalar path.
fn same_bits(what: &str, f: impl Fn() -> Tensor) {
    let want = cpu::with_isa(Isa::Scalar, &f).to_vec_f32().unwrap();
    for isa in Isa::available() {
        let got = cpu::with_isa(isa, &f).to_vec_f32().unwrap();
        assert_eq!(got.len(), want.len(), "{what} [{}]: length", isa.name());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.to_bits() == w.to_bits(),
                "{what} [{}]: element {i}: {g} vs scalar {w}",
                isa.name()
            );
        }
    }
}

/// Run `f` on every path and require results within `tol` (relative to the largest magnitude)
/// of the scalar path: for ops with a reduction, which each path orders its own way.
fn near_scalar(what: &str, tol: f32, f: impl Fn() -> Tensor) {
    let want = cpu::with_isa(Isa::Scalar, &f).to_vec_f32().unwrap();
    let scale = want
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    for isa in Isa::available() {
        let got = cpu::with_isa(isa, &f).to_vec_f32().unwrap();
        let err = aria_testing::fixtures::max_abs_diff(&got, &want);
        assert!(err <= tol * scale, "{what} [{}]: {err:e}", isa.name());
    }
}

/// Row lengths around the vector widths (4, 8) and the 32-element unrolls.
const LENS: [usize; 8] = [1, 3, 7, 8, 9, 33, 64, 130];

#[test]
fn norms_match_scalar_on_every_path() {
    for (si, &d) in LENS.iter().enumerate() {
        let rows = 5;
        let x = t(&randn(rows * d, si as u64 + 1), &[rows, d]);
        let w = t(&randn(d, si as u64 + 2), &[d]);
        let b = t(&randn(d, si as u64 + 3), &[d]);
        for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
            near_scalar(&format!("rms_norm d={d} {style:?}"), 1e-6, || {
                ops::rms_norm(&x, Some(&w), 1e-6, style).unwrap()
            });
        }
        near_scalar(&format!("rms_norm d={d} no gain"), 1e-6, || {
            ops::rms_norm(&x, None, 1e-6, RmsStyle::Plain).unwrap()
        });
        for (wi, bi) in [(true, true), (true, false), (false, true), (false, false)] {
            near_scalar(&format!("layer_norm d={d} w={wi} b={bi}"), 1e-6, || {
                ops::layer_norm(&x, wi.then_some(&w), bi.then_some(&b), 1e-5).unwrap()
            });
        }
        // [B, N, E] with modulation from column views of one projection.
        let (bb, n) = (2, 3);
        let x3 = t(&randn(bb * n * d, si as u64 + 4), &[bb, n, d]);
        let p = t(&randn(bb * 3 * d, si as u64 + 5), &[bb, 3 * d]);
        let (sc, sh) = (p.narrow(1, d, d).unwrap(), p.narrow(1, 2 * d, d).unwrap());
        near_scalar(&format!("rms_norm_modulate d={d}"), 1e-6, || {
            ops::rms_norm_modulate(&x3, &w, 1e-5, Some((&sc, &sh))).unwrap()
        });
        near_scalar(&format!("rms_norm_modulate d={d} plain"), 1e-6, || {
            ops::rms_norm_modulate(&x3, &w, 1e-5, None).unwrap()
        });
    }
}

#[test]
fn residual_heads_rope_axpby_are_bit_identical_on_every_path() {
    for (si, &d) in LENS.iter().enumerate() {
        let s = si as u64 * 10;
        let (b, n, h) = (2, 5, 3);
        let e = h * d;
        let hid = t(&randn(b * n * e, s + 1), &[b, n, e]);
        let u = t(&randn(b * n * e, s + 2), &[b, n, e]);
        let u_tail = t(&randn(b * 2 * e, s + 3), &[b, 2, e]);
        let gate = t(&randn(b * 2 * e, s + 4), &[b, 2 * e])
            .narrow(1, e, e)
            .unwrap();
        let mask = t(&[1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0], &[b, n]);
        same_bits(&format!("gated_residual_add d={d}"), || {
            ops::gated_residual_add(&hid, &u, Some(&gate), Some(&mask)).unwrap()
        });
        same_bits(&format!("gated_residual_add d={d} tail, no gate"), || {
            ops::gated_residual_add(&hid, &u_tail, None, None).unwrap()
        });
        // Head split with QK-norm and partial RoPE (R = the even part of d, at most 2·4).
        let r = (d & !1).min(8);
        let proj = t(&randn(b * n * 3 * e, s + 5), &[b, n, 3 * e]);
        let g = t(&randn(d, s + 6), &[d]);
        let inv: Vec<f32> = (0..r / 2).map(|i| 1.0 / (1.0 + i as f32)).collect();
        let tables = (r > 0).then(|| ops::rope_tables(&t(&inv, &[r / 2]), n).unwrap());
        let rope = tables.as_ref().map(|(c, s)| (c, s));
        near_scalar(&format!("split_heads d={d} norm"), 1e-6, || {
            ops::split_heads(&proj, e, h, d, Some((&g, 1e-6)), rope).unwrap()
        });
        same_bits(&format!("split_heads d={d}"), || {
            ops::split_heads(&proj, e, h, d, None, rope).unwrap()
        });
        // DyT is a transcendental kernel: only the plain split + RoPE is bit-identical.
        same_bits(&format!("qkv_heads d={d} rope"), || {
            ops::qkv_heads(&proj, 3, 1, h, None, rope).unwrap()
        });
        if let Some((c, sn)) = &tables {
            same_bits(&format!("rope d={d}"), || ops::rope(&hid, c, sn).unwrap());
        }
        let y = t(&randn(b * n * e, s + 8), &[b, n, e]);
        same_bits(&format!("axpby d={d}"), || {
            ops::axpby(&[1.0, -0.75], &hid, &[-0.3, 2.5], &y).unwrap()
        });
        same_bits(&format!("affine d={d}"), || {
            ops::affine(&hid, 0.7, -0.1).unwrap()
        });
        same_bits(&format!("add_scalar d={d}"), || {
            ops::add_scalar(&hid, 0.3).unwrap()
        });
        same_bits(&format!("mul_scalar d={d}"), || {
            ops::mul_scalar(&hid, -1.7).unwrap()
        });
    }
}

/// Inputs for the transcendental ops: random values at several scales plus special values.
fn trans_inputs() -> Vec<f32> {
    let mut v: Vec<f32> = Vec::new();
    for (k, sc) in [0.01f32, 0.3, 1.0, 4.0, 20.0, 300.0].iter().enumerate() {
        v.extend(randn(517, k as u64 + 40).iter().map(|x| x * sc));
    }
    v.extend([
        0.0,
        -0.0,
        1e-30,
        -1e-30,
        1e-40,
        0.4,
        -0.4,
        0.399_999_98,
        9.0,
        -9.0,
        88.0,
        -88.0,
        100.0,
        -100.0,
        0.5,
        1.0,
        -1.0,
        1.5,
        65_535.5,
        -65_536.0,
        65_537.0,
        1e7,
        -3e9,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    v
}

/// Check `got` against `want` element by element: `|got − want| ≤ tol(x, want)`, with NaN
/// where (and only where) the reference is NaN and infinities equal. Returns the largest
/// `|got − want| / tol`.
fn close(what: &str, x: &[f32], got: &[f32], want: &[f64], tol: &dyn Fn(f32, f64) -> f64) -> f64 {
    let mut worst = 0f64;
    for i in 0..got.len() {
        let (g, w) = (got[i] as f64, want[i]);
        if w.is_nan() || g.is_nan() {
            assert!(
                w.is_nan() && g.is_nan(),
                "{what}: x = {:e}: {g} vs {w}",
                x[i]
            );
            continue;
        }
        if w.is_infinite() || g.is_infinite() {
            assert_eq!(g, w, "{what}: x = {:e}", x[i]);
            continue;
        }
        let (err, tl) = ((g - w).abs(), tol(x[i], w));
        worst = worst.max(err / tl);
        assert!(
            err <= tl,
            "{what}: x = {:e}: {g:e} vs {w:e} (error {err:.2e} > {tl:.2e})",
            x[i]
        );
    }
    worst
}

/// Run a unary op on every path; check each against the reference and check that an element's
/// bits do not depend on its position (the op on `x[1..]` gives the same bits as on `x`).
fn unary(
    what: &str,
    x: &[f32],
    tol: impl Fn(f32, f64) -> f64,
    op: impl Fn(&Tensor) -> Tensor,
    r: impl Fn(f32) -> f64,
) {
    let want: Vec<f64> = x.iter().map(|&v| r(v)).collect();
    for isa in Isa::available() {
        let got = cpu::with_isa(isa, || op(&t(x, &[x.len()])).to_vec_f32().unwrap());
        let w = close(&format!("{what} [{}]", isa.name()), x, &got, &want, &tol);
        eprintln!("{what} [{}]: worst error / tolerance {w:.3}", isa.name());
        let shifted = cpu::with_isa(isa, || {
            op(&t(&x[1..], &[x.len() - 1])).to_vec_f32().unwrap()
        });
        for (i, (a, b)) in shifted.iter().zip(&got[1..]).enumerate() {
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{what} [{}]: element {} depends on its position",
                isa.name(),
                i + 1
            );
        }
    }
}

fn gelu64(v: f32) -> f64 {
    // `1 + erf` is evaluated in f32 by the op (as PyTorch does): the reference rounds it too.
    let e = libm::erf(v as f64 * std::f64::consts::FRAC_1_SQRT_2);
    0.5 * v as f64 * ((1.0 + e) as f32) as f64
}

fn gelu_tanh64(v: f32) -> f64 {
    let inner = 0.797_884_6f32 * (v + 0.044715 * v * v * v);
    0.5 * v as f64 * ((1.0 + (inner as f64).tanh()) as f32) as f64
}

fn sin_pi64(v: f32) -> f64 {
    ((std::f32::consts::PI * v) as f64).sin()
}

#[test]
fn tanh_on_every_path() {
    // 3 ulp of the result.
    let x = trans_inputs();
    unary(
        "tanh",
        &x,
        |_, w| 3.6e-7 * w.abs() + 1e-44,
        |x| ops::tanh(x).unwrap(),
        |v| (v as f64).tanh(),
    );
}

#[test]
fn sin_pi_on_every_path() {
    // The argument is the f32 product π·v (rounded as the reference rounds it): within 2 ulp at
    // 1 (1.2e-7) absolute plus 1e-6 relative of its exact sine.
    let x = trans_inputs();
    unary(
        "sin_pi",
        &x,
        |_, w| 1e-6 * w.abs() + 1.2e-7,
        |x| ops::sin_pi(x).unwrap(),
        sin_pi64,
    );
}

#[test]
fn gelu_on_every_path() {
    // `1 + erf` rounds in f32 (6e-8) and the vector erf adds up to 2e-7: 0.5·|v|·3e-7, plus
    // 1e-6 relative.
    let x = trans_inputs();
    let tol = |v: f32, w: f64| 1e-6 * w.abs() + 1.5e-7 * (v as f64).abs() + 1e-44;
    unary("gelu", &x, tol, |x| ops::gelu(x).unwrap(), gelu64);
    // The tanh form: `1 + tanh` rounds in f32 and tanh is within 3 ulp.
    unary(
        "gelu_tanh",
        &x,
        tol,
        |x| ops::gelu_tanh(x).unwrap(),
        gelu_tanh64,
    );
}

#[test]
fn glu_gates_do_not_depend_on_the_row_start() {
    // [rows, 2F] with F odd, so the rows start at every vector offset.
    let (rows, f) = (9, 37);
    let x = randn(rows * 2 * f, 77);
    for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
        for isa in Isa::available() {
            let whole = cpu::with_isa(isa, || {
                ops::glu(&t(&x, &[rows, 2 * f]), act)
                    .unwrap()
                    .to_vec_f32()
                    .unwrap()
            });
            for r in 0..rows {
                let one = cpu::with_isa(isa, || {
                    ops::glu(&t(&x[r * 2 * f..(r + 1) * 2 * f], &[1, 2 * f]), act)
                        .unwrap()
                        .to_vec_f32()
                        .unwrap()
                });
                assert_eq!(
                    one,
                    whole[r * f..(r + 1) * f],
                    "{act:?} [{}] row {r}",
                    isa.name()
                );
            }
        }
    }
}

#[test]
fn softcap_attention_matches_scalar_closely() {
    let (b, h, n, d) = (1, 2, 45, 16);
    let q = t(
        &randn(b * h * n * d, 1)
            .iter()
            .map(|v| v * 4.0)
            .collect::<Vec<_>>(),
        &[b, h, n, d],
    );
    let k = t(&randn(b * h * n * d, 2), &[b, h, n, d]);
    let v = t(&randn(b * h * n * d, 3), &[b, h, n, d]);
    let opts = AttnOpts {
        softcap: Some(5.0),
        ..AttnOpts::new(0.25)
    };
    let want = cpu::with_isa(Isa::Scalar, || ops::attention(&q, &k, &v, &opts).unwrap())
        .to_vec_f32()
        .unwrap();
    let scale = want.iter().fold(0f32, |m, v| m.max(v.abs()));
    for isa in Isa::available() {
        let got = cpu::with_isa(isa, || ops::attention(&q, &k, &v, &opts).unwrap())
            .to_vec_f32()
            .unwrap();
        let err = aria_testing::fixtures::max_abs_diff(&got, &want);
        assert!(
            err <= 2e-6 * scale,
            "[{}] softcap attention: {err:e}",
            isa.name()
        );
    }
}
