//! `ops::attention_amx`: the attention products on the AMX tile unit against an f64 evaluation
//! on the same bf16-rounded inputs, the same bits on 1 and 2 threads, and a clear error where
//! the unit is missing.

#![allow(clippy::unwrap_used)]

use aria_core::ops::{self, AttnOpts, KeyMaskMode};
use aria_core::{threads, Tensor};

fn lcg(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
        })
        .collect()
}

/// Round to bf16, nearest even (the inputs here are normal numbers).
fn bf16(x: f32) -> f64 {
    let b = x.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f64::from(f32::from_bits(r))
}

struct Case {
    shape: (usize, usize, usize, usize, usize, usize),
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Option<Vec<f32>>,
}

fn case(
    seed: u64,
    (b, h, nq, nk, d, dv): (usize, usize, usize, usize, usize, usize),
    masked: bool,
) -> Case {
    let mask = masked.then(|| {
        (0..b * nk)
            .map(|i| if (i * 7 + 3) % 5 == 0 { 0.0 } else { 1.0 })
            .collect()
    });
    Case {
        shape: (b, h, nq, nk, d, dv),
        q: lcg(seed, b * h * nq * d, 1.0),
        k: lcg(seed + 1, b * h * nk * d, 1.0),
        v: lcg(seed + 2, b * h * nk * dv, 1.0),
        mask,
    }
}

fn tensors(c: &Case) -> (Tensor, Tensor, Tensor, Option<Tensor>) {
    let (b, h, nq, nk, d, dv) = c.shape;
    (
        Tensor::from_vec(c.q.clone(), &[b, h, nq, d]).unwrap(),
        Tensor::from_vec(c.k.clone(), &[b, h, nk, d]).unwrap(),
        Tensor::from_vec(c.v.clone(), &[b, h, nk, dv]).unwrap(),
        c.mask
            .as_ref()
            .map(|m| Tensor::from_vec(m.clone(), &[b, nk]).unwrap()),
    )
}

/// Each output against f64 on bf16 inputs; the probabilities are rounded to bf16 from f32
/// there and from f64 here, which may differ by one bf16 step (2⁻⁸ of the probability): the
/// bound is that over the row plus f32 accumulation.
fn check_against_f64(c: &Case, opts: &AttnOpts<'_>, got: &[f32]) {
    let (b, h, nq, nk, d, dv) = c.shape;
    for bh in 0..b * h {
        let bi = bh / h;
        for i in 0..nq {
            let valid = |j: usize| c.mask.as_ref().is_none_or(|m| m[bi * nk + j] != 0.0);
            let seen = |j: usize| match opts.window {
                Some((l, r)) => j + l >= i && j <= i + r,
                None => true,
            };
            let mut s: Vec<f64> = (0..nk)
                .map(|j| {
                    let dot: f64 = (0..d)
                        .map(|e| {
                            bf16(c.q[(bh * nq + i) * d + e]) * bf16(c.k[(bh * nk + j) * d + e])
                        })
                        .sum();
                    let x = dot * f64::from(opts.scale);
                    match opts.softcap {
                        Some(cap) => f64::from(cap) * (x / f64::from(cap)).tanh(),
                        None => x,
                    }
                })
                .collect();
            let live = |j: usize| seen(j) && (opts.mask_mode != KeyMaskMode::Exclude || valid(j));
            let mx = (0..nk)
                .filter(|&j| live(j))
                .map(|j| s[j])
                .fold(f64::NEG_INFINITY, f64::max);
            let den: f64 = (0..nk)
                .filter(|&j| live(j))
                .map(|j| (s[j] - mx).exp())
                .sum();
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = if live(j) && valid(j) {
                    (*sj - mx).exp() / den
                } else {
                    0.0
                };
            }
            for e in 0..dv {
                let vj = |j: usize| bf16(c.v[(bh * nk + j) * dv + e]);
                let want: f64 = (0..nk).map(|j| bf16(s[j] as f32) * vj(j)).sum();
                let scale: f64 = (0..nk).map(|j| s[j] * vj(j).abs()).sum();
                let o = f64::from(got[(bh * nq + i) * dv + e]);
                assert!(
                    (o - want).abs() <= scale * (1.0 / 256.0 + 1e-5) + 1e-7,
                    "{:?} ({bh},{i},{e}): {o} vs {want} (scale {scale})",
                    c.shape
                );
            }
        }
    }
}

/// Under `CI=true` a CPU whose CPUID reports AMX-TILE and AMX-BF16 must get the tile unit: the
/// OS refusing it (`arch_prctl(ARCH_REQ_XCOMP_PERM)`) fails there. Elsewhere the test then skips
/// as on a CPU without AMX.
fn fail_if_amx_refused_under_ci() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let refused = aria_core::cpu::bf16dot::amx_in_cpuid() && !aria_core::nn::Bf16DotWeight::amx();
    assert!(
        !(ci && refused),
        "CPUID reports AMX-TILE and AMX-BF16 but the OS refused the tile data state; \
         the AMX paths must run under CI=true"
    );
}

#[test]
fn amx_attention_is_accurate_and_thread_invariant() {
    let c0 = case(1, (1, 2, 8, 8, 64, 64), false);
    let (q, k, v, _) = tensors(&c0);
    let opts0 = AttnOpts::new(0.125);
    fail_if_amx_refused_under_ci();
    if !aria_core::nn::Bf16DotWeight::amx() {
        let e = ops::attention_amx(&q, &k, &v, &opts0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("AMX"), "{e}");
        aria_testing::skip_for_hardware("this CPU (or OS) has no AMX-BF16 tile unit");
        return;
    }
    let shapes = [
        ((1, 2, 8, 8, 64, 64), false, None, None),
        ((2, 3, 45, 77, 64, 64), true, Some(50.0), None),
        ((1, 2, 33, 33, 40, 24), true, None, Some((5, 3))),
        ((1, 1, 100, 257, 64, 96), false, Some(3.0), None),
    ];
    for (seed, (shape, masked, softcap, window)) in shapes.into_iter().enumerate() {
        for mode in [KeyMaskMode::Exclude, KeyMaskMode::ZeroValues] {
            let c = case(10 + seed as u64, shape, masked);
            let (q, k, v, m) = tensors(&c);
            let opts = AttnOpts {
                scale: 1.0 / (shape.4 as f32).sqrt(),
                softcap,
                key_mask: m.as_ref(),
                mask_mode: mode,
                window,
                bf16_products: false,
            };
            let run = |n: usize| {
                threads::with_threads(n, || ops::attention_amx(&q, &k, &v, &opts))
                    .unwrap()
                    .unwrap()
            };
            let one = run(1);
            assert_eq!(one.shape(), &[shape.0, shape.1, shape.2, shape.5]);
            let got = one.to_vec_f32().unwrap();
            check_against_f64(&c, &opts, &got);
            let two = run(2).to_vec_f32().unwrap();
            assert!(
                got.iter()
                    .zip(&two)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{shape:?}: threads"
            );
            // The inputs were rounded: not the f32 attention's result.
            let f32_out = ops::attention(&q, &k, &v, &opts)
                .unwrap()
                .to_vec_f32()
                .unwrap();
            assert!(got.iter().zip(&f32_out).any(|(a, b)| a != b), "{shape:?}");
        }
    }
    // Shape errors name the problem.
    let bad = Tensor::from_vec(vec![0.0; 8 * 32], &[1, 1, 8, 32]).unwrap();
    let e = ops::attention_amx(&q, &bad, &v, &opts0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("disagree"), "{e}");
}
