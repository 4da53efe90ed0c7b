//! Every op on every ISA path this machine runs (`cpu::Isa::available()`), against a plain f64
//! reference written here and against the scalar path, on edge shapes (0, 1, 63, sizes that are
//! not multiples of the tiles); plus bit-identity across thread counts.
//!
//! Tolerances (max-abs error relative to the reference's max-abs, `fixtures::rel_err`):
//! products and attention 2e-6 against f64 and between paths; exp-based activations 1e-6;
//! everything else 1e-6.
#![allow(clippy::unwrap_used)]

mod ops_common;

use aria_core::cpu::{self, Isa};
use aria_core::ops::{self, AttnOpts, GluAct, KeyMaskMode, RmsStyle};
use aria_core::{DType, Tensor};
use ops_common::{check, randn, t};

/// Run `f` on every available path and compare each to `want` (and to the scalar result).
fn each_isa(what: &str, tol: f32, want: &[f64], f: impl Fn() -> Tensor) {
    let mut scalar: Option<Vec<f32>> = None;
    for isa in Isa::available() {
        let got = cpu::with_isa(isa, &f).to_vec_f32().unwrap();
        check(&format!("{what} [{}] vs f64", isa.name()), &got, want, tol);
        match &scalar {
            None => scalar = Some(got),
            Some(s) => {
                let s64: Vec<f64> = s.iter().map(|&v| v as f64).collect();
                check(
                    &format!("{what} [{}] vs scalar", isa.name()),
                    &got,
                    &s64,
                    tol,
                );
            }
        }
    }
}

fn linear_ref(x: &[f32], w: &[f32], b: Option<&[f32]>, m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for kk in 0..k {
                s += x[i * k + kk] as f64 * w[j * k + kk] as f64;
            }
            out[i * n + j] = s + b.map_or(0.0, |b| b[j] as f64);
        }
    }
    out
}

#[test]
fn linear_all_paths() {
    let shapes = [
        (0, 5, 3),
        (3, 0, 4),
        (1, 1, 1),
        (1, 63, 17),
        (7, 64, 16),
        (13, 300, 33),
        (63, 257, 129),
        (245, 520, 130),
    ];
    for (si, &(m, k, n)) in shapes.iter().enumerate() {
        let x = randn(m * k, si as u64 * 3 + 1);
        let w = randn(n * k, si as u64 * 3 + 2);
        let b = randn(n, si as u64 * 3 + 3);
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let wt = t(&w, &[n, k]).to_dtype(dt).unwrap();
            let wq = wt.to_vec_f32().unwrap();
            for bias in [false, true] {
                let want = linear_ref(&x, &wq, bias.then_some(&b[..]), m, k, n);
                let xt = t(&x, &[m, k]);
                let bt = t(&b, &[n]);
                each_isa(
                    &format!("linear {m}x{k}x{n} {dt} bias={bias}"),
                    2e-6,
                    &want,
                    || ops::linear(&xt, &wt, bias.then_some(&bt)).unwrap(),
                );
            }
        }
    }
    // Batched input [B, M, K].
    let x = randn(2 * 5 * 70, 9);
    let w = randn(33 * 70, 10);
    let want = linear_ref(&x, &w, None, 10, 70, 33);
    each_isa("linear batched", 2e-6, &want, || {
        ops::linear(&t(&x, &[2, 5, 70]), &t(&w, &[33, 70]), None).unwrap()
    });
}

#[test]
fn matmul_all_paths() {
    for (si, &(bt, m, k, n)) in [(1, 1, 1, 1), (2, 7, 63, 17), (3, 13, 300, 40), (1, 0, 3, 3)]
        .iter()
        .enumerate()
    {
        let a = randn(bt * m * k, 20 + si as u64);
        let b = randn(bt * k * n, 40 + si as u64);
        let mut want = vec![0f64; bt * m * n];
        for z in 0..bt {
            for i in 0..m {
                for j in 0..n {
                    want[(z * m + i) * n + j] = (0..k)
                        .map(|kk| a[(z * m + i) * k + kk] as f64 * b[(z * k + kk) * n + j] as f64)
                        .sum();
                }
            }
        }
        each_isa(&format!("matmul {bt}x{m}x{k}x{n}"), 2e-6, &want, || {
            ops::matmul(&t(&a, &[bt, m, k]), &t(&b, &[bt, k, n])).unwrap()
        });
    }
    // B given as a transposed (strided) view.
    let a = randn(5 * 20, 1);
    let bt_ = randn(9 * 20, 2);
    let want = linear_ref(&a, &bt_, None, 5, 20, 9);
    each_isa("matmul strided", 2e-6, &want, || {
        ops::matmul(
            &t(&a, &[5, 20]),
            &t(&bt_, &[9, 20]).transpose(0, 1).unwrap(),
        )
        .unwrap()
    });
}

/// The f64 reference of attention with the documented semantics.
#[allow(clippy::too_many_arguments)]
fn attn_ref(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dims: (usize, usize, usize, usize, usize, usize),
    opts: &AttnOpts<'_>,
    mask: Option<&[f32]>,
) -> Vec<f64> {
    let (b, h, nq, nk, d, dv) = dims;
    let mut out = vec![0f64; b * h * nq * dv];
    for bh in 0..b * h {
        let bi = bh / h;
        for i in 0..nq {
            let (lo, hi) = match opts.window {
                Some((l, r)) => (i.saturating_sub(l), (i + r + 1).min(nk)),
                None => (0, nk),
            };
            let valid = |j: usize| mask.is_none_or(|m| m[bi * nk + j] != 0.0);
            let mut s: Vec<(usize, f64)> = Vec::new();
            for j in lo..hi {
                if !valid(j) && opts.mask_mode == KeyMaskMode::Exclude {
                    continue;
                }
                let mut x = (0..d)
                    .map(|c| q[(bh * nq + i) * d + c] as f64 * k[(bh * nk + j) * d + c] as f64)
                    .sum::<f64>()
                    * opts.scale as f64;
                if let Some(cap) = opts.softcap {
                    x = cap as f64 * (x / cap as f64).tanh();
                }
                s.push((j, x));
            }
            if s.is_empty() {
                continue;
            }
            let mx = s.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
            let den: f64 = s.iter().map(|p| (p.1 - mx).exp()).sum();
            for &(j, x) in &s {
                if !valid(j) {
                    continue;
                }
                let p = (x - mx).exp() / den;
                for c in 0..dv {
                    out[(bh * nq + i) * dv + c] += p * v[(bh * nk + j) * dv + c] as f64;
                }
            }
        }
    }
    out
}

#[test]
fn attention_all_paths() {
    // (b, h, nq, nk, d, dv)
    let dims = [
        (1, 1, 1, 1, 1, 1),
        (1, 2, 0, 5, 8, 8),
        (1, 1, 3, 0, 8, 8),
        (2, 3, 63, 63, 16, 16),
        (1, 2, 34, 34, 64, 64),
        (2, 2, 70, 257, 64, 64),
        (1, 1, 130, 130, 24, 17),
    ];
    for (si, &dm) in dims.iter().enumerate() {
        let (b, h, nq, nk, d, dv) = dm;
        let s = si as u64 * 10;
        let q = randn(b * h * nq * d, s + 1);
        let k = randn(b * h * nk * d, s + 2);
        let v = randn(b * h * nk * dv, s + 3);
        let maskv: Vec<f32> = (0..b * nk)
            .map(|i| if (i * 7 + 3) % 5 == 0 { 0.0 } else { 1.0 })
            .collect();
        let mask_t = t(&maskv, &[b, nk]);
        let (qt, kt, vt) = (
            t(&q, &[b, h, nq, d]),
            t(&k, &[b, h, nk, d]),
            t(&v, &[b, h, nk, dv]),
        );
        let scale = 1.0 / (d as f32).sqrt();
        let windows: Vec<Option<(usize, usize)>> = if nq == nk {
            vec![None, Some((17, 17)), Some((2, 0)), Some((0, 5))]
        } else {
            vec![None]
        };
        for window in windows {
            for (mask, mode) in [
                (false, KeyMaskMode::ZeroValues),
                (true, KeyMaskMode::ZeroValues),
                (true, KeyMaskMode::Exclude),
            ] {
                for softcap in [None, Some(5.0)] {
                    let opts = AttnOpts {
                        scale,
                        softcap,
                        key_mask: mask.then_some(&mask_t),
                        mask_mode: mode,
                        window,
                        bf16_products: false,
                    };
                    let want = attn_ref(&q, &k, &v, dm, &opts, mask.then_some(&maskv[..]));
                    let what = format!(
                        "attention {dm:?} window={window:?} mask={mask} {mode:?} cap={softcap:?}"
                    );
                    each_isa(&what, 2e-6, &want, || {
                        ops::attention(&qt, &kt, &vt, &opts).unwrap()
                    });
                }
            }
        }
    }
}

#[test]
fn attention_strided_and_diff() {
    let (b, n, h, d) = (2, 45, 3, 16);
    // [B, N, H, D] projections viewed as [B, H, N, D].
    let q = randn(b * n * h * d, 1);
    let k = randn(b * n * h * d, 2);
    let v = randn(b * n * h * d, 3);
    let q2 = randn(b * n * h * d, 4);
    let k2 = randn(b * n * h * d, 5);
    let view = |x: &[f32]| t(x, &[b, n, h, d]).permute(&[0, 2, 1, 3]).unwrap();
    let cont = |x: &[f32]| view(x).contiguous().unwrap().to_vec_f32().unwrap();
    let opts = AttnOpts {
        window: Some((4, 4)),
        ..AttnOpts::new(0.25)
    };
    let dm = (b, h, n, n, d, d);
    let a1 = attn_ref(&cont(&q), &cont(&k), &cont(&v), dm, &opts, None);
    let a2 = attn_ref(&cont(&q2), &cont(&k2), &cont(&v), dm, &opts, None);
    each_isa("attention strided", 2e-6, &a1, || {
        ops::attention(&view(&q), &view(&k), &view(&v), &opts).unwrap()
    });
    let want: Vec<f64> = a1.iter().zip(&a2).map(|(x, y)| x - y).collect();
    each_isa("attention_diff", 2e-6, &want, || {
        ops::attention_diff(
            &view(&q),
            &view(&k),
            &view(&q2),
            &view(&k2),
            &view(&v),
            &opts,
        )
        .unwrap()
    });
    assert!(ops::attention_diff(
        &view(&q),
        &view(&k),
        &view(&k),
        &t(&k[..10], &[1, 1, 10, 1]),
        &view(&v),
        &opts
    )
    .is_err());
}

#[test]
fn norms_and_softmax_all_paths() {
    for (si, &(rows, d)) in [(0, 4), (1, 1), (3, 63), (5, 130), (2, 1024)]
        .iter()
        .enumerate()
    {
        let x: Vec<f32> = randn(rows * d, si as u64 + 100)
            .iter()
            .map(|v| v * 3.0 + 0.5)
            .collect();
        let w = randn(d, si as u64 + 200);
        let bb = randn(d, si as u64 + 300);
        let xt = t(&x, &[rows, d]);
        let (wt, bt) = (t(&w, &[d]), t(&bb, &[d]));
        for style in [RmsStyle::Plain, RmsStyle::OnePlus] {
            let mut want = Vec::new();
            for r in x.chunks(d) {
                let ms = r.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / d as f64;
                let inv = 1.0 / (ms + 1e-6).sqrt();
                for (v, w) in r.iter().zip(&w) {
                    let g = if style == RmsStyle::Plain {
                        *w as f64
                    } else {
                        1.0 + *w as f64
                    };
                    want.push(*v as f64 * inv * g);
                }
            }
            each_isa(
                &format!("rms_norm {rows}x{d} {style:?}"),
                1e-6,
                &want,
                || ops::rms_norm(&xt, Some(&wt), 1e-6, style).unwrap(),
            );
        }
        let mut want = Vec::new();
        let mut sm = Vec::new();
        for r in x.chunks(d) {
            let mean = r.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = r.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            for ((v, w), b) in r.iter().zip(&w).zip(&bb) {
                want.push((*v as f64 - mean) / (var + 1e-5).sqrt() * *w as f64 + *b as f64);
            }
            let mx = r
                .iter()
                .map(|&v| v as f64)
                .fold(f64::NEG_INFINITY, f64::max);
            let den: f64 = r.iter().map(|&v| (v as f64 - mx).exp()).sum();
            sm.extend(r.iter().map(|&v| (v as f64 - mx).exp() / den));
        }
        each_isa(&format!("layer_norm {rows}x{d}"), 1e-6, &want, || {
            ops::layer_norm(&xt, Some(&wt), Some(&bt), 1e-5).unwrap()
        });
        each_isa(&format!("softmax {rows}x{d}"), 1e-6, &sm, || {
            ops::softmax_last(&xt).unwrap()
        });
        let dy: Vec<f64> = x
            .chunks(d)
            .flat_map(|r| {
                r.iter()
                    .zip(&w)
                    .zip(&bb)
                    .map(|((v, g), b)| *g as f64 * (0.7 * *v as f64).tanh() + *b as f64)
            })
            .collect();
        each_isa(&format!("dyt {rows}x{d}"), 1e-6, &dy, || {
            ops::dyt(&xt, 0.7, &wt, &bt).unwrap()
        });
    }
}

fn erf64(x: f64) -> f64 {
    libm::erf(x)
}

#[test]
fn activations_all_paths() {
    for (si, &n) in [0usize, 1, 7, 63, 4097 * 2 + 5].iter().enumerate() {
        let x: Vec<f32> = randn(2 * n, si as u64 + 7)
            .iter()
            .map(|v| v * 4.0)
            .collect();
        let xt = t(&x, &[2, n]);
        let xs: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        // `1 + erf` cancels for large negative inputs: like PyTorch, the op evaluates it in f32,
        // and so does this reference (a single tiny output would otherwise set the scale).
        let gelu = |v: f64| {
            let v = v as f32;
            (0.5 * v * (1.0 + erf64((v * std::f32::consts::FRAC_1_SQRT_2) as f64) as f32)) as f64
        };
        let gelu_t = |v: f64| {
            let v = v as f32;
            (0.5 * v * (1.0 + (0.797_884_6 * (v + 0.044715 * v * v * v) as f64).tanh() as f32))
                as f64
        };
        let silu_want: Vec<f64> = xs.iter().map(|&v| v * sig(v)).collect();
        each_isa("silu", 1e-6, &silu_want, || ops::silu(&xt).unwrap());
        each_isa(
            "sigmoid",
            1e-6,
            &xs.iter().map(|&v| sig(v)).collect::<Vec<_>>(),
            || ops::sigmoid(&xt).unwrap(),
        );
        each_isa(
            "gelu",
            1e-6,
            &xs.iter().map(|&v| gelu(v)).collect::<Vec<_>>(),
            || ops::gelu(&xt).unwrap(),
        );
        each_isa(
            "gelu_tanh",
            1e-6,
            &xs.iter().map(|&v| gelu_t(v)).collect::<Vec<_>>(),
            || ops::gelu_tanh(&xt).unwrap(),
        );
        each_isa(
            "tanh",
            1e-6,
            &xs.iter().map(|&v| v.tanh()).collect::<Vec<_>>(),
            || ops::tanh(&xt).unwrap(),
        );
        if n % 2 == 0 {
            continue;
        }
        // GLU over [2, n] needs an even last dim: use [n, 2].
        let gt = t(&x, &[n, 2]);
        for act in [GluAct::Silu, GluAct::Gelu, GluAct::GeluTanh, GluAct::SinPi] {
            let want: Vec<f64> = xs
                .chunks(2)
                .map(|p| {
                    let g = p[1];
                    p[0] * match act {
                        GluAct::Silu => g * sig(g),
                        GluAct::Gelu => gelu(g),
                        GluAct::GeluTanh => gelu_t(g),
                        GluAct::SinPi => (std::f32::consts::PI as f64 * g).sin(),
                    }
                })
                .collect();
            // sin(π·x) is evaluated in f32 like the reference (the f32 product rounds first).
            let tol = if act == GluAct::SinPi { 2e-6 } else { 1e-6 };
            each_isa(&format!("glu {act:?} n={n}"), tol, &want, || {
                ops::glu(&gt, act).unwrap()
            });
        }
    }
}

#[test]
fn conv_rope_broadcast_embedding_all_paths() {
    for &(bn, cin, l, cout, kw, pad) in &[
        (1, 1, 1, 1, 1, 0),
        (2, 3, 63, 5, 3, 1),
        (1, 70, 130, 17, 3, 1),
        (2, 64, 33, 40, 1, 0),
        (1, 4, 10, 3, 3, 0),
    ] {
        let x = randn(bn * cin * l, 11);
        let w = randn(cout * cin * kw, 12);
        let b = randn(cout, 13);
        let lo = l + 2 * pad - kw + 1;
        let mut want = vec![0f64; bn * cout * lo];
        for z in 0..bn {
            for co in 0..cout {
                for tt in 0..lo {
                    let mut s = b[co] as f64;
                    for ci in 0..cin {
                        for kk in 0..kw {
                            let p = tt + kk;
                            if p >= pad && p - pad < l {
                                s += w[(co * cin + ci) * kw + kk] as f64
                                    * x[(z * cin + ci) * l + p - pad] as f64;
                            }
                        }
                    }
                    want[(z * cout + co) * lo + tt] = s;
                }
            }
        }
        each_isa(
            &format!("conv1d {bn}x{cin}x{l} -> {cout} k{kw} p{pad}"),
            2e-6,
            &want,
            || {
                ops::conv1d(
                    &t(&x, &[bn, cin, l]),
                    &t(&w, &[cout, cin, kw]),
                    Some(&t(&b, &[cout])),
                    pad,
                )
                .unwrap()
            },
        );
    }
    // Partial rotary embedding on the first 8 of 12 dims.
    let (n, d) = (37, 12);
    let x = randn(2 * n * d, 5);
    let inv: Vec<f32> = (0..4)
        .map(|i| 1.0 / 10000f32.powf(i as f32 / 4.0))
        .collect();
    let (c, s) = ops::rope_tables(&t(&inv, &[4]), n).unwrap();
    let (cv, sv) = (c.to_vec_f32().unwrap(), s.to_vec_f32().unwrap());
    let mut want: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    for row in 0..2 * n {
        let p = row % n;
        for i in 0..4 {
            let (a, bb) = (x[row * d + i] as f64, x[row * d + i + 4] as f64);
            want[row * d + i] = a * cv[p * 8 + i] as f64 - bb * sv[p * 8 + i] as f64;
            want[row * d + i + 4] = bb * cv[p * 8 + i + 4] as f64 + a * sv[p * 8 + i + 4] as f64;
        }
    }
    each_isa("rope", 1e-6, &want, || {
        ops::rope(&t(&x, &[2, n, d]), &c, &s).unwrap()
    });
    // Broadcasting.
    let a = randn(3 * 5 * 7, 1);
    let b = randn(5, 2);
    let want: Vec<f64> = (0..105)
        .map(|i| a[i] as f64 * b[(i / 7) % 5] as f64)
        .collect();
    each_isa("mul broadcast", 1e-6, &want, || {
        ops::mul(&t(&a, &[3, 5, 7]), &t(&b, &[5, 1])).unwrap()
    });
    let want: Vec<f64> = (0..105).map(|i| a[i] as f64 + b[i % 5] as f64).collect();
    each_isa("add broadcast", 1e-6, &want, || {
        ops::add(&t(&a, &[21, 5]), &t(&b, &[5])).unwrap()
    });
    // Embedding gather from a bf16 table.
    let table = t(&randn(11 * 6, 3), &[11, 6])
        .to_dtype(DType::BF16)
        .unwrap();
    let tv = table.to_vec_f32().unwrap();
    let ids = Tensor::from_vec(vec![3i64, 0, 10, 3], &[2, 2]).unwrap();
    let want: Vec<f64> = [3usize, 0, 10, 3]
        .iter()
        .flat_map(|&i| tv[i * 6..i * 6 + 6].iter().map(|&v| v as f64))
        .collect();
    each_isa("embedding", 0.0, &want, || {
        ops::embedding(&ids, &table).unwrap()
    });
    assert!(ops::embedding(&Tensor::from_vec(vec![11i64], &[1]).unwrap(), &table).is_err());
}

/// Distance in units in the last place between two finite f32 of the same sign (or zero).
fn ulps(a: f32, b: f32) -> u32 {
    let key = |v: f32| {
        let i = v.to_bits() as i32;
        if i < 0 {
            i32::MIN - i
        } else {
            i
        }
    };
    key(a).abs_diff(key(b))
}

/// The row kernel `cpu::dyt` with γ = 1, β = 0, α = 1 is `tanh` itself: on every path, within
/// 3 ulp of the correctly rounded value over a dense sweep of both branches of the vector
/// method (the polynomial below |x| = 0.4, the exponential above, the clamp at 9), exact at
/// 0 and ±∞, NaN in → NaN out; and γ, β, α and ragged lengths are applied as stated.
#[test]
fn dyt_kernel_tanh_accuracy_all_paths() {
    let mut xs: Vec<f32> = (-200_000..=200_000).map(|i| i as f32 * 6e-5).collect();
    xs.extend(
        (0..200)
            .map(|i| 1e-30f32 * 1.7f32.powi(i))
            .flat_map(|v| [v, -v]),
    );
    xs.extend([
        0.0,
        -0.0,
        0.4,
        -0.4,
        0.399_999_98,
        9.0,
        -9.0,
        20.0,
        1e30,
        f32::MAX,
    ]);
    xs.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MIN_POSITIVE,
        1e-45,
    ]);
    let n = xs.len();
    let (ones, zeros) = (vec![1f32; n], vec![0f32; n]);
    for isa in Isa::available() {
        let mut o = vec![0f32; n];
        cpu::dyt_on(isa, &mut o, &xs, 1.0, &ones, &zeros);
        let mut worst = (0u32, 0f32);
        for (&x, &y) in xs.iter().zip(&o) {
            if x.is_nan() {
                assert!(y.is_nan(), "[{}] tanh(NaN) = {y}", isa.name());
                continue;
            }
            let want = (x as f64).tanh() as f32;
            // (β = +0 is added, so tanh(−0) comes out as +0 on every path.)
            assert!(
                want == 0.0 || y.is_sign_negative() == want.is_sign_negative(),
                "[{}] sign at {x}",
                isa.name()
            );
            let u = ulps(y, want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(
            worst.0 <= 3,
            "[{}] tanh {} ulp off at x = {}",
            isa.name(),
            worst.0,
            worst.1
        );

        // γ, β, α and a length that is not a multiple of any vector width.
        let m = 37;
        let x = randn(m, 5);
        let g = randn(m, 6);
        let b = randn(m, 7);
        let mut o = vec![f32::NAN; m + 3];
        cpu::dyt_on(isa, &mut o, &x, 0.7, &g, &b);
        for i in 0..m {
            let want = g[i] as f64 * (0.7 * x[i] as f64).tanh() + b[i] as f64;
            assert!(
                (o[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                "[{}] dyt[{i}]",
                isa.name()
            );
        }
        assert!(
            o[m..].iter().all(|v| v.is_nan()),
            "[{}] wrote past the shortest input",
            isa.name()
        );
    }
}
