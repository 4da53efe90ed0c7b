//! The op set's `linear_packed` on the CPU (`aria_core::ops::linear_packed`, run by the CPU
//! backend's kernels on the blocks in place, and what backends are checked against) agrees
//! with the scalar statement of each format's product (`aria_cpu::host::
//! linear_packed_reference`) for `q8_0` (weight-only and W8A8), `q4_k` and `q6_k`, at edge
//! widths (one block, a padded last block) and with a zero row; the blocks it reads are
//! exactly [`PackedWeight::blocks`], and a layer's product is the op's, bit for bit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aria_core::nn::{PackedWeight, WeightFormat};
use aria_core::{ops, Tensor};
use aria_quant::{Compute, Format, PackedMatrix};

fn t(shape: &[usize], seed: u32) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| {
            let h = (i as u32 ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(0x85eb_ca6b);
            (h >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-30);
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            assert!(x.is_finite() && y.is_finite());
            (x - y).abs() / scale
        })
        .fold(0f32, f32::max)
}

#[test]
fn the_kernels_agree_with_the_scalar_reference() {
    let q8 = [(1, 32, 1), (4, 40, 7), (9, 96, 33), (3, 16, 5)];
    let kq = [(3, 256, 8), (2, 300, 5), (5, 512, 3)];
    type Shapes<'a> = &'a [(usize, usize, usize)];
    let sets: [(Format, Compute, Shapes<'_>); 4] = [
        (Format::Q8_0, Compute::WeightOnly, &q8),
        (Format::Q8_0, Compute::W8A8, &q8),
        (Format::Q4K, Compute::WeightOnly, &kq),
        (Format::Q6K, Compute::WeightOnly, &kq),
    ];
    // Blocked f32 sums against sums in order: rounding only.
    let tol = 1e-5;
    for (format, compute, shapes) in sets {
        for &(m, k, n) in shapes {
            let mut xv = t(&[m, k], 1).to_vec::<f32>().unwrap();
            xv[..k].fill(0.0);
            let x = Tensor::from_vec(xv, &[m, k]).unwrap();
            let w = t(&[n, k], 2);
            let b = t(&[n], 3);
            let pm = PackedMatrix::quantize("w", &w, format)
                .unwrap()
                .with_compute(compute)
                .unwrap();
            let blocks = pm.blocks().unwrap();
            assert_eq!(blocks.format, WeightFormat::from(format));
            assert_eq!(blocks.w8a8, compute == Compute::W8A8);
            assert_eq!([blocks.rows, blocks.cols], [n, k]);
            let want = aria_core::cpu::host::linear_packed_reference(
                &x,
                &blocks.data,
                blocks.format,
                blocks.w8a8,
                [n, k],
                Some(&b),
            )
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
            let got = ops::linear_packed(
                &x,
                &blocks.data,
                blocks.format,
                blocks.w8a8,
                [n, k],
                Some(&b),
            )
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
            let e = max_rel(&got, &want);
            assert!(e < tol, "{format} {m}x{k}x{n} {compute:?}: {e}");
            assert_eq!(
                &got[..n],
                &b.to_vec::<f32>().unwrap()[..],
                "the zero row is the bias"
            );
            let layer = pm.forward(&x, Some(&b)).unwrap().to_vec::<f32>().unwrap();
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&layer), bits(&got), "the matrix runs the op");
        }
    }
}

#[test]
fn linear_packed_checks_before_running() {
    let w = t(&[4, 64], 4);
    let pm = PackedMatrix::quantize("w", &w, Format::Q8_0).unwrap();
    let blocks = pm.blocks().unwrap();
    let run = |x: &Tensor, w8a8: bool, format: WeightFormat, b: Option<&Tensor>| {
        ops::linear_packed(x, &blocks.data, format, w8a8, [4, 64], b)
            .unwrap_err()
            .to_string()
    };
    let e = run(&t(&[2, 63], 5), false, WeightFormat::Q8_0, None);
    assert!(e.contains("linear_packed") && e.contains("[2, 63]"), "{e}");
    let e = run(&t(&[2, 64], 5), true, WeightFormat::Q4K, None);
    assert!(e.contains("W8A8") && e.contains("q4_k"), "{e}");
    let e = run(
        &t(&[2, 64], 5),
        false,
        WeightFormat::Q8_0,
        Some(&t(&[5], 6)),
    );
    assert!(e.contains("bias"), "{e}");
    let e = run(
        &t(&[2, 64], 5).to_dtype(aria_core::DType::F16).unwrap(),
        false,
        WeightFormat::Q8_0,
        None,
    );
    assert!(e.contains("f32"), "{e}");
}
