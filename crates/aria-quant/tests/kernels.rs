//! Weight-only kernels: on every ISA path, bit for bit the CPU's f32 product of the
//! dequantized weight on that path; every thread count bit for bit against one thread; the
//! scalar reference against an f64 product of the dequantized weight.

mod common;

use std::sync::Arc;

use aria_core::cpu::{with_isa, Isa};
use aria_core::nn::{Linear, PackedWeight, Weight};
use aria_core::{threads, Tensor};
use aria_quant::kernels::{select, IntIsa, Kernel, KernelQuery};
use aria_quant::{Compute, Format, PackedMatrix};
use common::{naive_linear, rel_rms, Rng};

/// `(m, n, k)`: empty, single, odd and non-block-multiple shapes, plus a few DiT-like ones.
const SHAPES: [(usize, usize, usize); 13] = [
    (0, 5, 32),
    (3, 0, 32),
    (2, 3, 0),
    (1, 1, 1),
    (1, 40, 300),
    (7, 19, 63),
    (6, 16, 256),
    (13, 33, 257),
    (12, 32, 512),
    (25, 70, 512),
    (5, 129, 96),
    (31, 48, 1024),
    (64, 130, 520),
];

fn run(p: &PackedMatrix, kernel: Kernel, x: &[f32], m: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; m * p.rows()];
    p.matmul_with(kernel, x, m, &mut out).expect("matmul");
    out
}

fn paths() -> Vec<Isa> {
    let v = Isa::available();
    eprintln!(
        "f32 paths on this CPU: {:?} (paths this CPU lacks are not run here)",
        v.iter().map(|i| i.name()).collect::<Vec<_>>()
    );
    v
}

/// The f32 product `x · dqᵀ` of the CPU backend on `isa`.
fn dense(isa: Isa, dq: &[f32], x: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    use aria_core::cpu::gemm::{gemm, BSrc, WData};
    let mut out = vec![f32::NAN; m * n];
    gemm(isa, m, n, k, x, k, &BSrc::Nk(WData::F32(dq), k), &mut out);
    out
}

#[test]
fn every_isa_is_the_dense_product_of_the_dequantized_weight() {
    let mut rng = Rng::new(10);
    let isas = paths();
    for format in Format::ALL {
        for (m, n, k) in SHAPES {
            let w = rng.normals(n * k, 0.05);
            let x = rng.normals(m * k, 1.0);
            let p = PackedMatrix::from_f32("w", n, k, &w, format).expect("quantize");
            let want = run(&p, Kernel::Dequant(Isa::Scalar), &x, m);
            // The reference against an f64 product with the dequantized weight.
            let wd = p.dequantize_f32().expect("dq");
            let exact = naive_linear(&x, &wd, m, n, k);
            let e = rel_rms(&want, &exact);
            assert!(e < 1e-5, "{format} {m}x{n}x{k}: scalar vs f64 {e}");
            for &isa in &isas {
                let got = run(&p, Kernel::Dequant(isa), &x, m);
                let dense = dense(isa, &wd, &x, m, n, k);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    dense.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{format} {} {m}x{n}x{k}",
                    isa.name()
                );
                let e = rel_rms(&got, &exact);
                assert!(e < 1e-5, "{format} {} {m}x{n}x{k}: vs f64 {e}", isa.name());
            }
        }
    }
}

#[test]
fn any_thread_count_is_bit_identical() {
    let mut rng = Rng::new(11);
    let (m, n, k) = (40, 300, 520);
    let x = rng.normals(m * k, 1.0);
    let w = rng.normals(n * k, 0.05);
    for format in Format::ALL {
        let p = PackedMatrix::from_f32("w", n, k, &w, format).expect("quantize");
        for compute in [Compute::WeightOnly, Compute::W8A8] {
            let Ok(p) = p.clone().with_compute(compute) else {
                continue;
            };
            let one = threads::with_threads(1, || run(&p, p.kernel(m), &x, m)).expect("pool");
            for t in [2, 3, 5] {
                let got = threads::with_threads(t, || run(&p, p.kernel(m), &x, m)).expect("pool");
                assert!(
                    got.iter()
                        .zip(&one)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{format} {compute:?}: {t} threads differ from 1"
                );
            }
        }
    }
}

/// Through `nn::Linear` (the packed weight behind the layer vocabulary): shape, bias, leading
/// dimensions, and closeness to the dense f32 layer.
#[test]
fn linear_through_nn() {
    let mut rng = Rng::new(12);
    let (n, k) = (48, 200);
    let w = rng.normals(n * k, 0.05);
    let b = rng.normals(n, 0.1);
    let dense = Tensor::from_vec(w.clone(), &[n, k]).expect("w");
    let bias = Tensor::from_vec(b, &[n]).expect("b");
    let x = Tensor::from_vec(rng.normals(2 * 3 * k, 1.0), &[2, 3, k]).expect("x");
    let want = aria_core::ops::linear(&x, &dense, Some(&bias))
        .expect("f32")
        .to_vec::<f32>()
        .expect("v");
    for (format, bound) in [
        (Format::Q8_0, 0.01),
        (Format::Q6K, 0.03),
        (Format::Q4K, 0.1),
    ] {
        let p = PackedMatrix::quantize("proj.weight", &dense, format).expect("quantize");
        assert_eq!(PackedWeight::format(&p), format.tag());
        assert_eq!(PackedWeight::shape(&p), [n, k]);
        assert_eq!(PackedWeight::nbytes(&p), n * format.row_bytes(k));
        let dq = PackedWeight::dequantize(&p).expect("dq");
        assert_eq!(dq.shape(), &[n, k]);
        let layer =
            Linear::new("proj", Weight::Packed(Arc::new(p)), Some(bias.clone())).expect("layer");
        let y = layer.forward(&x).expect("forward");
        assert_eq!(y.shape(), &[2, 3, n]);
        let e = rel_rms(&y.to_vec::<f32>().expect("v"), &want);
        assert!(e < bound, "{format}: {e}");
        // The packed product equals the f32 product with the dequantized weight (same
        // K order, so only FMA rounding differs).
        let yd = aria_core::ops::linear(&x, &dq, Some(&bias)).expect("f32");
        let e2 = rel_rms(
            &y.to_vec::<f32>().expect("v"),
            &yd.to_vec::<f32>().expect("v"),
        );
        assert!(e2 < 1e-5, "{format}: vs dequantized {e2}");
    }
    // Wrong input width and wrong bias are errors, not panics.
    let p = PackedMatrix::quantize("proj.weight", &dense, Format::Q8_0).expect("quantize");
    let bad = Tensor::from_vec(vec![0f32; 7], &[1, 7]).expect("x");
    assert!(p.forward(&bad, None).is_err());
    let bad_b = Tensor::from_vec(vec![0f32; 3], &[3]).expect("b");
    let x1 = Tensor::from_vec(vec![0f32; k], &[1, k]).expect("x");
    assert!(p.forward(&x1, Some(&bad_b)).is_err());
    let mut out = vec![0f32; 3];
    assert!(p.matmul(&[0f32; 10], 1, &mut out).is_err());
}

/// f16 activations are widened (same result as their f32 values).
#[test]
fn half_activations() {
    let mut rng = Rng::new(13);
    let (m, n, k) = (3, 20, 64);
    let p =
        PackedMatrix::from_f32("w", n, k, &rng.normals(n * k, 0.1), Format::Q4K).expect("quantize");
    let xh: Vec<aria_core::f16> = rng
        .normals(m * k, 1.0)
        .iter()
        .map(|&v| aria_core::f16::from_f32(v))
        .collect();
    let xf: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    let a = p
        .forward(&Tensor::from_vec(xh, &[m, k]).expect("x"), None)
        .expect("f16");
    let b = p
        .forward(&Tensor::from_vec(xf, &[m, k]).expect("x"), None)
        .expect("f32");
    assert_eq!(a.to_vec::<f32>().expect("a"), b.to_vec::<f32>().expect("b"));
}

/// Kernel selection is a pure function of explicit inputs: the mode fixes what is computed,
/// the ISA how; `with_isa(Scalar)` selects the references.
#[test]
fn selection_ladder() {
    let q = |format: Format, compute, isa, int_isa| KernelQuery {
        format: format.into(),
        compute,
        isa,
        int_isa,
        m: 238,
        n: 1024,
        k: 1024,
    };
    let s = Isa::Scalar;
    assert_eq!(
        select(&q(Format::Q4K, Compute::WeightOnly, s, IntIsa::Scalar)),
        Kernel::Dequant(Isa::Scalar)
    );
    assert_eq!(
        select(&q(Format::Q8_0, Compute::W8A8, s, IntIsa::Scalar)),
        Kernel::W8A8(IntIsa::Scalar)
    );
    for isa in Isa::available() {
        let k = select(&q(
            Format::Q8_0,
            Compute::WeightOnly,
            isa,
            IntIsa::for_isa(isa),
        ));
        assert_eq!(k, Kernel::Dequant(isa));
        assert_eq!(k.is_optimized(), isa != Isa::Scalar);
        let k = select(&q(Format::Q8_0, Compute::W8A8, isa, IntIsa::for_isa(isa)));
        assert_eq!(k, Kernel::W8A8(IntIsa::for_isa(isa)));
        // A 4-bit format never takes the int8 path.
        let k = select(&q(Format::Q4K, Compute::W8A8, isa, IntIsa::for_isa(isa)));
        assert!(!matches!(k, Kernel::W8A8(i) if i != IntIsa::Scalar));
    }
    let p = PackedMatrix::from_f32("w", 4, 32, &[0.1; 128], Format::Q8_0).expect("q");
    assert_eq!(
        with_isa(Isa::Scalar, || p.kernel(8)),
        Kernel::Dequant(Isa::Scalar)
    );
    let p = p.with_compute(Compute::W8A8).expect("w8a8");
    assert_eq!(
        with_isa(Isa::Scalar, || p.kernel(8)),
        Kernel::W8A8(IntIsa::Scalar)
    );
    assert_eq!(IntIsa::for_isa(Isa::Scalar), IntIsa::Scalar);
}
