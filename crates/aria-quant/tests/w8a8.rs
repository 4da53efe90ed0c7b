//! W8A8: activation quantization, exact int32 block sums on every int8 path, bit-identical
//! f32 results, saturation extremes, and accuracy against f32.

mod common;

use aria_core::nn::PackedWeight;
use aria_core::Tensor;
use aria_quant::format::BlockQ8_0;
use aria_quant::kernels::{quantize_activations, IntIsa, Kernel};
use aria_quant::{Compute, Format, PackedMatrix, QuantError};
use common::{naive_linear, rel_rms, Rng};

fn int_paths() -> Vec<IntIsa> {
    let v = IntIsa::available();
    eprintln!(
        "int8 paths on this CPU: {:?} (paths this CPU lacks are not run here)",
        v.iter().map(|i| i.name()).collect::<Vec<_>>()
    );
    v
}

/// The block sums from first principles: quantized activations × the blocks' int8 weights.
fn naive_sums(p: &PackedMatrix, x: &[f32], m: usize) -> Vec<i32> {
    let (n, k) = (p.rows(), p.cols());
    let nb = k.div_ceil(32);
    let acts = quantize_activations(x, m, k, false);
    let blocks: &[BlockQ8_0] = bytemuck::cast_slice(p.bytes().expect("bytes"));
    let mut out = vec![0i32; m * n * nb];
    for r in 0..m {
        for j in 0..n {
            for b in 0..nb {
                let blk = &blocks[j * nb + b];
                let mut s = 0i32;
                for t in 0..32 {
                    s += acts.q[r * acts.kp + 32 * b + t] as i8 as i32 * blk.qs[t] as i32;
                }
                out[(r * n + j) * nb + b] = s;
            }
        }
    }
    out
}

/// Shapes: single, odd and non-block-multiple ones, and rows past one or two tiles of the
/// widest path (32 rows on AMX) over several K slabs.
const SHAPES: [(usize, usize, usize); 13] = [
    (1, 1, 1),
    (1, 40, 300),
    (7, 19, 63),
    (4, 16, 32),
    (13, 33, 257),
    (6, 32, 512),
    (25, 70, 256),
    (3, 100, 96),
    (0, 4, 32),
    (2, 3, 0),
    (32, 32, 256),
    (40, 70, 520),
    (67, 33, 1024),
];

#[test]
fn int32_block_sums_identical_on_every_path() {
    let mut rng = Rng::new(20);
    let isas = int_paths();
    for (m, n, k) in SHAPES {
        let w = rng.normals(n * k, 0.05);
        let x = rng.normals(m * k, 1.0);
        let p = PackedMatrix::from_f32("w", n, k, &w, Format::Q8_0).expect("quantize");
        let want = naive_sums(&p, &x, m);
        for &isa in &isas {
            let got = p.w8a8_block_sums(isa, &x, m).expect("sums");
            assert_eq!(got, want, "{} {m}x{n}x{k}", isa.name());
        }
    }
}

#[test]
fn f32_results_identical_on_every_path() {
    let mut rng = Rng::new(21);
    let isas = int_paths();
    for (m, n, k) in SHAPES {
        let w = rng.normals(n * k, 0.05);
        let x = rng.normals(m * k, 1.0);
        let p = PackedMatrix::from_f32("w", n, k, &w, Format::Q8_0)
            .expect("quantize")
            .with_compute(Compute::W8A8)
            .expect("w8a8");
        let mut want = vec![0f32; m * n];
        p.matmul_with(Kernel::W8A8(IntIsa::Scalar), &x, m, &mut want)
            .expect("scalar");
        for &isa in &isas {
            let mut got = vec![f32::NAN; m * n];
            p.matmul_with(Kernel::W8A8(isa), &x, m, &mut got)
                .expect("simd");
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{} {m}x{n}x{k}",
                isa.name()
            );
        }
    }
}

/// The largest sums: activations and weights at ±127 everywhere. One `vpmaddubsw` pair is
/// then `2 · 127 · 127 = 32258` (no i16 saturation with the sign trick), one block
/// `32 · 127² = 516128`.
#[test]
fn extremes_do_not_saturate() {
    let isas = int_paths();
    let k = 96;
    for (xs, ws) in [(1.0f32, 1.0f32), (-1.0, 1.0), (1.0, -1.0), (-1.0, -1.0)] {
        let x: Vec<f32> = vec![xs; 2 * k];
        let w: Vec<f32> = vec![ws; 3 * k];
        let p = PackedMatrix::from_f32("w", 3, k, &w, Format::Q8_0).expect("q");
        let want = 32 * 127 * 127 * (xs * ws) as i32;
        for &isa in &isas {
            let sums = p.w8a8_block_sums(isa, &x, 2).expect("sums");
            assert!(
                sums.iter().all(|&s| s == want),
                "{} {xs} {ws}: {sums:?}",
                isa.name()
            );
        }
    }
    // Alternating signs, mixed magnitudes.
    let x: Vec<f32> = (0..k)
        .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
        .collect();
    let w: Vec<f32> = (0..k)
        .map(|i| if i % 3 == 0 { -1.0 } else { 1.0 })
        .collect();
    let p = PackedMatrix::from_f32("w", 1, k, &w, Format::Q8_0).expect("q");
    let want = naive_sums(&p, &x, 1);
    for &isa in &isas {
        assert_eq!(
            p.w8a8_block_sums(isa, &x, 1).expect("sums"),
            want,
            "{}",
            isa.name()
        );
    }
}

#[test]
fn activation_quantization() {
    let x = [0.0f32, 1.0, -2.0, 0.5, 2.0, -0.0049];
    let a = quantize_activations(&x, 2, 3, false);
    assert_eq!((a.m, a.k, a.kp), (2, 3, 32));
    assert_eq!(a.scale, vec![2.0 / 127.0, 2.0 / 127.0]);
    let q: Vec<i8> = a.q.iter().map(|&v| v as i8).collect();
    assert_eq!(&q[..4], &[0, 64, -127, 0]); // 63.5 rounds to even
    assert_eq!(&q[32..35], &[32, 127, 0]);
    assert!(q[3..32].iter().all(|&v| v == 0), "padding");
    let b = quantize_activations(&x, 2, 3, true);
    for (u, s) in b.q.iter().zip(&a.q) {
        assert_eq!(*u as i32 - 128, *s as i8 as i32);
    }
    // Zero rows, non-finite rows.
    let z = quantize_activations(&[0.0; 8], 1, 8, false);
    assert_eq!(z.scale, vec![0.0]);
    let nan = quantize_activations(&[1.0, f32::NAN], 1, 2, false);
    assert!(nan.scale[0].is_nan());
    // Every f32 path quantizes to the same bytes and scales (rows of 1 to 40 values: vector
    // bodies and tails; ties, zeros, specials).
    let mut rng = Rng::new(23);
    for k in [1, 5, 16, 17, 31, 32, 40] {
        let mut x = rng.normals(6 * k, 3.0);
        x[0] = 0.5;
        x[k.min(5) - 1] = -2.5;
        x[k..2 * k].fill(0.0);
        x[2 * k] = f32::INFINITY;
        x[3 * k] = f32::NAN;
        x[4 * k] = -0.0;
        for offset in [false, true] {
            let want = aria_core::cpu::with_isa(aria_core::cpu::Isa::Scalar, || {
                quantize_activations(&x, 6, k, offset)
            });
            for isa in aria_core::cpu::Isa::available() {
                let got = aria_core::cpu::with_isa(isa, || quantize_activations(&x, 6, k, offset));
                assert_eq!(got.q, want.q, "{} k {k}", isa.name());
                let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got.scale), bits(&want.scale), "{} k {k}", isa.name());
            }
        }
    }
}

/// W8A8 tracks the f32 product (per-token int8 activations add ~0.5 % on Gaussian data), and
/// a row with a NaN gives NaN as in f32.
#[test]
fn accuracy_against_f32() {
    let mut rng = Rng::new(22);
    let (m, n, k) = (16, 64, 1024);
    let w = rng.normals(n * k, 0.02);
    let x = rng.normals(m * k, 1.0);
    let want = naive_linear(&x, &w, m, n, k);
    let p = PackedMatrix::from_f32("w", n, k, &w, Format::Q8_0).expect("q");
    let mut wo = vec![0f32; m * n];
    p.matmul(&x, m, &mut wo).expect("weight-only");
    let p8 = p.with_compute(Compute::W8A8).expect("w8a8");
    let mut y = vec![0f32; m * n];
    p8.matmul(&x, m, &mut y).expect("w8a8");
    let (e_wo, e_88) = (rel_rms(&wo, &want), rel_rms(&y, &want));
    println!("rel RMS vs f32: q8_0 weight-only {e_wo:.5}, W8A8 {e_88:.5}");
    assert!(e_wo < 0.008, "{e_wo}");
    assert!(e_88 < 0.015, "{e_88}");
    let mut xn = x.clone();
    xn[5] = f32::NAN;
    p8.matmul(&xn, m, &mut y).expect("w8a8");
    assert!(y[..n].iter().all(|v| v.is_nan()));
    assert!(y[n..].iter().all(|v| v.is_finite()));
}

/// W8A8 is q8_0 only, refused with a clear error elsewhere; the mode shows in the tag.
#[test]
fn mode_checks() {
    let w = vec![0.1f32; 4 * 256];
    for f in [Format::Q4K, Format::Q6K] {
        let p = PackedMatrix::from_f32("w", 4, 256, &w, f).expect("q");
        let e = p.clone().with_compute(Compute::W8A8).expect_err("4-bit");
        assert!(matches!(e, QuantError::Compute { .. }), "{e}");
        assert!(e.to_string().contains(&f.tag()), "{e}");
        let mut out = vec![0f32; 4];
        assert!(p
            .matmul_with(Kernel::W8A8(IntIsa::Scalar), &[0.0; 256], 1, &mut out)
            .is_err());
    }
    let p = PackedMatrix::from_f32("w", 4, 256, &w, Format::Q8_0)
        .expect("q")
        .with_compute(Compute::W8A8)
        .expect("w8a8");
    assert_eq!(PackedWeight::format(&p), "q8_0/v1+w8a8");
    let x = Tensor::from_vec(vec![1.0f32; 2 * 256], &[2, 256]).expect("x");
    let y = p.forward(&x, None).expect("linear");
    assert_eq!(y.shape(), &[2, 4]);
}
