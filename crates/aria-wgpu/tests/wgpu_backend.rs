//! What is particular to the wgpu backend, beyond the op harness (`aria-testing`'s
//! `op_harness`, which runs every op × format × shape here against the CPU): tensors stored
//! across several bindings (`max_binding_bytes`), the tuning knobs (tile and workgroup sizes, 2-D
//! grids), views read in place (narrowed, transposed, head-split), round trips of every dtype,
//! typed refusals (integer weights, a tensor of another device), and packed layers moving to
//! the device and back. Tolerances come from the harness's table. Skips (recorded) when no
//! adapter is available; under `CI=true` that fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod wgpu_common;

use std::sync::Arc;

use aria_core::nn::{Linear, PackedWeight, Weight};
use aria_core::ops::{self, AttnOpts, RmsStyle};
use aria_core::{CoreError, DType, Device, Tensor};
use aria_quant::{Compute, Format, PackedMatrix};
use aria_testing::fixtures::rel_err;
use aria_wgpu::{Knobs, WgpuBackend};
use wgpu_common::{backend, check, check_bits, rand_t, scaled, tol, tol_of};

/// How many buffers hold a device tensor.
fn buffers(t: &Tensor) -> usize {
    match &**t.storage() {
        aria_core::storage::Storage::Device(d) => d
            .as_any()
            .downcast_ref::<aria_wgpu::WgpuStorage>()
            .map_or(0, |s| s.buffers()),
        _ => 0,
    }
}

#[test]
fn linear_weight_dtypes_and_split_weights() {
    // A 4 KiB binding limit splits the weights over several buffers (x and y stay within one).
    let knobs = Knobs {
        max_binding_bytes: 4096,
        ..Knobs::integrated()
    };
    let plain: &[(usize, usize, usize)] = &[(5, 24, 40), (33, 64, 128), (1, 128, 77), (17, 31, 9)];
    let split: &[(usize, usize, usize)] = &[(1, 128, 77), (4, 64, 128), (8, 100, 100), (3, 6, 300)];
    let Some(base) = backend() else { return };
    let split_be = WgpuBackend::with_knobs(knobs).unwrap();
    for (be, cases) in [(base, plain), (split_be, split)] {
        let gpu = be.device();
        let mut worst = 0f32;
        for (i, &(m, k, n)) in cases.iter().enumerate() {
            let x = rand_t(&[m, k], i as u64);
            let b = rand_t(&[n], 50 + i as u64);
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let w = rand_t(&[n, k], 100 + i as u64).to_dtype(dt).unwrap();
                let want = ops::linear(&x, &w, Some(&b)).unwrap();
                let (xg, wg, bg) = (
                    gpu.put(&x).unwrap(),
                    gpu.put(&w).unwrap(),
                    gpu.put(&b).unwrap(),
                );
                if cases == split && dt == DType::F32 {
                    let buffers = buffers(&wg);
                    assert!(
                        buffers > 1,
                        "{m}x{k}x{n}: the weight must be split ({buffers})"
                    );
                }
                let got = ops::linear(&xg, &wg, Some(&bg)).unwrap();
                let fmt = match dt {
                    DType::F16 => "f16",
                    DType::BF16 => "bf16",
                    _ => "f32",
                };
                let e = check(
                    &format!("linear {m}x{k}x{n} {dt}"),
                    &got,
                    &want,
                    tol_of("linear", fmt).min(1e-4),
                );
                worst = worst.max(e);
            }
        }
        eprintln!(
            "linear worst rel err {worst:e} (binding limit {} bytes)",
            be.max_binding_bytes()
        );
    }
}

#[test]
fn attention_reads_head_split_views_in_place() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    // [B, N, H, D] projections viewed as [B, H, N, D] (strided), as the models split heads.
    let (b, n, h, d) = (2, 33, 4, 16);
    let x = rand_t(&[b, n, h, d], 7);
    let y = rand_t(&[b, n, h, d], 8);
    let view = |t: &Tensor| t.permute(&[0, 2, 1, 3]).unwrap();
    let want = ops::attention(&view(&x), &view(&y), &view(&x), &AttnOpts::new(0.25)).unwrap();
    let (xg, yg) = (gpu.put(&x).unwrap(), gpu.put(&y).unwrap());
    let (qv, kv) = (view(&xg), view(&yg));
    assert!(!qv.is_contiguous());
    let got = ops::attention(&qv, &kv, &view(&xg), &AttnOpts::new(0.25)).unwrap();
    check("attention on permuted views", &got, &want, tol("attention"));
    // Shape errors are the CPU op's.
    let bad = ops::attention(
        &qv,
        &kv,
        &gpu.put(&rand_t(&[b, h, n + 1, d], 1)).unwrap(),
        &AttnOpts::new(1.0),
    );
    assert!(bad.is_err());
    let on_cpu = Device::Cpu.put(&got).unwrap();
    assert!(on_cpu.device().is_cpu());
}

#[test]
fn linear_views_and_mixed_operands() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let x = rand_t(&[40, 24], 10);
    let w = rand_t(&[30, 24], 11);
    let b = rand_t(&[30], 12);
    // Narrowed device views start inside their buffer; a transposed one is strided.
    let xg = gpu.put(&x).unwrap().narrow(0, 7, 21).unwrap();
    let wg = gpu.put(&w).unwrap().narrow(0, 5, 19).unwrap();
    let bg = gpu.put(&b).unwrap().narrow(0, 5, 19).unwrap();
    let want = ops::linear(
        &x.narrow(0, 7, 21).unwrap(),
        &w.narrow(0, 5, 19).unwrap(),
        Some(&b.narrow(0, 5, 19).unwrap()),
    )
    .unwrap();
    let got = ops::linear(&xg, &wg, Some(&bg)).unwrap();
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) <= tol("linear"));
    let xt = rand_t(&[24, 40], 13);
    let xtg = gpu.put(&xt).unwrap().transpose(0, 1).unwrap();
    assert!(!xtg.is_contiguous());
    let want = ops::linear(&xt.transpose(0, 1).unwrap(), &w, None).unwrap();
    // A strided device view is compacted on the device (the `contiguous` kernel), never
    // through the host.
    let got = ops::linear(&xtg, &w, None).unwrap();
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) <= tol("linear"));
    let xtc = gpu.put(&xtg.to_cpu().unwrap()).unwrap();
    let got = ops::linear(&xtc, &w, None).unwrap(); // CPU weight: uploaded on the fly
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) <= tol("linear"));
    // Round trips keep every dtype bit-exact, views included.
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I64,
    ] {
        let t = x.to_dtype(dt).unwrap();
        let g = gpu.put(&t).unwrap();
        assert_eq!(g.dtype(), dt);
        let back = Device::Cpu.put(&g).unwrap();
        assert_eq!(back.as_bytes().unwrap(), t.as_bytes().unwrap(), "{dt}");
        let v = g.narrow(1, 3, 5).unwrap().transpose(0, 1).unwrap();
        let cpu_v = t.narrow(1, 3, 5).unwrap().transpose(0, 1).unwrap();
        assert_eq!(v.to_vec_f32().unwrap(), cpu_v.to_vec_f32().unwrap(), "{dt}");
    }
    // Zero-size outputs and an empty inner dimension (y = b).
    let z = ops::linear(
        &gpu.put(&Tensor::zeros(&[0, 8], DType::F32)).unwrap(),
        &wg,
        None,
    );
    assert!(z.is_err(), "K mismatch must be rejected");
    let z = ops::linear(
        &gpu.put(&Tensor::zeros(&[0, 24], DType::F32)).unwrap(),
        &gpu.put(&w).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(z.shape(), &[0, 30]);
    let e = ops::linear(
        &gpu.put(&Tensor::zeros(&[3, 0], DType::F32)).unwrap(),
        &gpu.put(&Tensor::zeros(&[4, 0], DType::F32)).unwrap(),
        Some(
            &gpu.put(&Tensor::from_vec(vec![1f32, 2., 3., 4.], &[4]).unwrap())
                .unwrap(),
        ),
    )
    .unwrap();
    assert_eq!(e.to_vec::<f32>().unwrap(), [1f32, 2., 3., 4.].repeat(3));
}

#[test]
fn linear_errors_are_typed() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    let x = gpu.put(&rand_t(&[4, 8], 1)).unwrap();
    let w = gpu.put(&rand_t(&[5, 8], 2)).unwrap();
    let e = ops::linear(&x, &gpu.put(&rand_t(&[5, 7], 3)).unwrap(), None).unwrap_err();
    assert!(matches!(e, CoreError::Shape { op: "linear", .. }), "{e}");
    let e = ops::linear(&x, &w, Some(&gpu.put(&rand_t(&[4], 4)).unwrap())).unwrap_err();
    assert!(matches!(e, CoreError::Shape { .. }), "{e}");
    // 16-bit weights stay 16-bit on the device and match the CPU (which widens them too).
    for dt in [DType::BF16, DType::F16] {
        let wc = rand_t(&[5, 8], 2).to_dtype(dt).unwrap();
        let wh = gpu.put(&wc).unwrap();
        let got = ops::linear(&x, &wh, None).unwrap();
        let want = ops::linear(&x.to_cpu().unwrap(), &wc, None).unwrap();
        let e = rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap());
        assert!(
            e <= tol_of("linear", if dt == DType::F16 { "f16" } else { "bf16" }).min(1e-5),
            "{dt}: {e}"
        );
    }
    let wi = gpu
        .put(&rand_t(&[5, 8], 2).to_dtype(DType::I8).unwrap())
        .unwrap();
    let e = ops::linear(&x, &wi, None).unwrap_err();
    assert!(
        matches!(
            e,
            CoreError::DType {
                dtype: DType::I8,
                ..
            }
        ),
        "{e}"
    );
    // A tensor from another wgpu device is refused rather than misread.
    if let Ok(other) = WgpuBackend::new() {
        let w2 = other.device().put(&rand_t(&[5, 8], 2)).unwrap();
        let e = ops::linear(&x, &w2, None).unwrap_err();
        assert!(matches!(e, CoreError::Backend { .. }), "{e}");
    }
}

/// Tensors past one binding (here a 256-byte limit, so `[40, 8]` f32 spans five buffers of
/// eight rows): the same-shape elementwise and row ops (DyT and axpby included) run buffer by
/// buffer, broadcasting
/// binaries, the layout copies and `embedding` buffer pair by buffer pair (views whose
/// elements straddle buffers included); ops that need one binding refuse by name.
#[test]
fn ops_past_one_binding() {
    let Some(base) = backend() else { return };
    let knobs = aria_wgpu::Knobs {
        max_binding_bytes: 256,
        ..base.knobs()
    };
    let be = WgpuBackend::with_knobs(knobs).unwrap();
    let gpu = be.device();
    let x = scaled(&[40, 8], 170, 3.0);
    let y = rand_t(&[40, 8], 171);
    let w = rand_t(&[8], 172);
    let (xg, yg, wg) = (
        gpu.put(&x).unwrap(),
        gpu.put(&y).unwrap(),
        gpu.put(&w).unwrap(),
    );
    assert_eq!(buffers(&xg), 5);
    check(
        "gelu",
        &ops::gelu(&xg).unwrap(),
        &ops::gelu(&x).unwrap(),
        tol("unary").min(2e-6),
    );
    check(
        "affine",
        &ops::affine(&xg, 0.5, 1.0).unwrap(),
        &ops::affine(&x, 0.5, 1.0).unwrap(),
        tol("affine"),
    );
    check(
        "rms_norm",
        &ops::rms_norm(&xg, Some(&wg), 1e-6, RmsStyle::Plain).unwrap(),
        &ops::rms_norm(&x, Some(&w), 1e-6, RmsStyle::Plain).unwrap(),
        tol("rms_norm").min(2e-6),
    );
    check(
        "layer_norm",
        &ops::layer_norm(&xg, Some(&wg), Some(&wg), 1e-5).unwrap(),
        &ops::layer_norm(&x, Some(&w), Some(&w), 1e-5).unwrap(),
        tol("layer_norm").min(2e-6),
    );
    check(
        "softmax",
        &ops::softmax_last(&xg).unwrap(),
        &ops::softmax_last(&x).unwrap(),
        tol("softmax").min(2e-6),
    );

    check(
        "dyt",
        &ops::dyt(&xg, 0.7, &wg, &wg).unwrap(),
        &ops::dyt(&x, 0.7, &w, &w).unwrap(),
        tol("dyt").min(2e-6),
    );
    // Four items of 80 elements over buffers of 64: the item index is global.
    let (p3, q3) = (rand_t(&[4, 10, 8], 178), rand_t(&[4, 10, 8], 179));
    let (p3g, q3g) = (gpu.put(&p3).unwrap(), gpu.put(&q3).unwrap());
    let (ca, cb) = ([1.0, 0.5, -2.0, 0.25], [-0.3, 2.0, 1.5, 0.0]);
    check(
        "axpby",
        &ops::axpby(&ca, &p3g, &cb, &q3g).unwrap(),
        &ops::axpby(&ca, &p3, &cb, &q3).unwrap(),
        tol("axpby"),
    );

    // Binaries: equal shapes, a broadcast row, a broadcast column, a transposed operand
    // (every element of a row in another buffer), a row slice starting mid-buffer.
    check(
        "sub",
        &ops::sub(&xg, &yg).unwrap(),
        &ops::sub(&x, &y).unwrap(),
        tol("binary"),
    );
    check(
        "mul (row broadcast)",
        &ops::mul(&xg, &wg).unwrap(),
        &ops::mul(&x, &w).unwrap(),
        tol("binary"),
    );
    let col = rand_t(&[40, 1], 173);
    check(
        "div (column broadcast)",
        &ops::div(&gpu.put(&col).unwrap(), &xg).unwrap(),
        &ops::div(&col, &x).unwrap(),
        tol("binary"),
    );
    let t = rand_t(&[8, 40], 174);
    let tg = gpu.put(&t).unwrap();
    check(
        "add (transposed)",
        &ops::add(&xg, &tg.transpose(0, 1).unwrap()).unwrap(),
        &ops::add(&x, &t.transpose(0, 1).unwrap()).unwrap(),
        tol("binary"),
    );
    check(
        "mul (row slice)",
        &ops::mul(&xg.narrow(0, 3, 30).unwrap(), &yg.narrow(0, 9, 30).unwrap()).unwrap(),
        &ops::mul(&x.narrow(0, 3, 30).unwrap(), &y.narrow(0, 9, 30).unwrap()).unwrap(),
        tol("binary"),
    );
    let x3 = rand_t(&[4, 10, 8], 175);
    let g3 = rand_t(&[4, 1, 8], 176);
    check(
        "mul (gate [B, 1, D])",
        &ops::mul(&gpu.put(&x3).unwrap(), &gpu.put(&g3).unwrap()).unwrap(),
        &ops::mul(&x3, &g3).unwrap(),
        tol("binary"),
    );

    // Layout copies, from and into several buffers.
    check_bits(
        "contiguous (transpose)",
        &xg.transpose(0, 1).unwrap().contiguous().unwrap(),
        &x.transpose(0, 1).unwrap().contiguous().unwrap(),
    );
    check_bits(
        "contiguous (slice)",
        &tg.narrow(1, 5, 30).unwrap().contiguous().unwrap(),
        &t.narrow(1, 5, 30).unwrap().contiguous().unwrap(),
    );
    for dt in [DType::BF16, DType::F16, DType::I64, DType::I8] {
        let got = xg.to_dtype(dt).unwrap();
        check_bits("to_dtype", &got, &x.to_dtype(dt).unwrap());
        check_bits(
            "to_dtype (back to f32)",
            &got.to_dtype(DType::F32).unwrap(),
            &x.to_dtype(dt).unwrap().to_dtype(DType::F32).unwrap(),
        );
    }
    check_bits(
        "to_dtype (transposed)",
        &xg.transpose(0, 1).unwrap().to_dtype(DType::BF16).unwrap(),
        &x.transpose(0, 1).unwrap().to_dtype(DType::BF16).unwrap(),
    );
    for dim in [0, 1] {
        check_bits(
            "cat",
            &Tensor::cat(&[&xg, &yg, &xg], dim).unwrap(),
            &Tensor::cat(&[&x, &y, &x], dim).unwrap(),
        );
        check_bits(
            "pad",
            &ops::pad(&xg, dim, 3, 5).unwrap(),
            &ops::pad(&x, dim, 3, 5).unwrap(),
        );
    }
    let xb = x.to_dtype(DType::BF16).unwrap();
    check_bits(
        "pad (bf16)",
        &ops::pad(&gpu.put(&xb).unwrap(), 0, 1, 2).unwrap(),
        &ops::pad(&xb, 0, 1, 2).unwrap(),
    );

    // Embedding from a table of seven (f32) or four (bf16) buffers, ids at both ends of
    // the vocabulary, into an output of several buffers; ids from the host and the device.
    let table = scaled(&[50, 8], 177, 2.0);
    let idv: Vec<i64> = (0..21)
        .map(|i| (i * 17 + 3) % 50)
        .chain([0, 49, 48])
        .collect();
    let ids = Tensor::from_vec(idv, &[3, 8]).unwrap();
    for tab in [table.clone(), table.to_dtype(DType::BF16).unwrap()] {
        let tg = gpu.put(&tab).unwrap();
        assert!(buffers(&tg) >= 4);
        let want = ops::embedding(&ids, &tab).unwrap();
        check_bits("embedding", &ops::embedding(&ids, &tg).unwrap(), &want);
        check_bits(
            "embedding (device ids)",
            &ops::embedding(&gpu.put(&ids).unwrap(), &tg).unwrap(),
            &want,
        );
    }
    let bad = Tensor::from_vec(vec![3i64, 50], &[2]).unwrap();
    assert!(ops::embedding(&bad, &gpu.put(&table).unwrap()).is_err());

    // An op that needs each operand within one binding refuses by name, never computes
    // wrongly.
    let e = ops::glu(&xg, ops::GluAct::Silu).unwrap_err();
    assert!(matches!(e, CoreError::Backend { .. }), "{e}");
}

/// The workgroup-size knob changes nothing but speed: one invocation per workgroup (so that
/// 70 000 elements or rows need a 2-D grid past the 65 535 workgroups of one dimension) and
/// 256 (wider than most rows here).
#[test]
fn knobs_and_two_dimensional_grids() {
    let Some(base) = backend() else { return };
    for wg in [1u32, 256] {
        let knobs = aria_wgpu::Knobs {
            elementwise: wg,
            ..base.knobs()
        };
        let be = WgpuBackend::with_knobs(knobs).unwrap();
        let gpu = be.device();
        let limit = be.limits().max_compute_workgroups_per_dimension as usize;
        let n = if wg == 1 { limit + 4465 } else { 4096 };
        let x = scaled(&[n, 1], 160, 3.0);
        let xg = gpu.put(&x).unwrap();
        check(
            "silu",
            &ops::silu(&xg).unwrap(),
            &ops::silu(&x).unwrap(),
            tol("unary").min(2e-6),
        );
        let w = scaled(&[n, 2], 161, 3.0);
        let wg_ = gpu.put(&w).unwrap();
        check(
            "softmax",
            &ops::softmax_last(&wg_).unwrap(),
            &ops::softmax_last(&w).unwrap(),
            tol("softmax").min(2e-6),
        );
        check_bits(
            "contiguous",
            &wg_.transpose(0, 1).unwrap().contiguous().unwrap(),
            &w.transpose(0, 1).unwrap().contiguous().unwrap(),
        );
        let r = scaled(&[3, 130], 162, 2.0);
        check(
            "layer_norm",
            &ops::layer_norm(&gpu.put(&r).unwrap(), None, None, 1e-5).unwrap(),
            &ops::layer_norm(&r, None, None, 1e-5).unwrap(),
            tol("layer_norm").min(2e-6),
        );
    }
}

fn packed(w: &Tensor, format: Format, compute: Compute) -> PackedMatrix {
    PackedMatrix::quantize("w", w, format)
        .unwrap()
        .with_compute(compute)
        .unwrap()
}

#[test]
fn a_packed_layer_moves_to_the_device_and_back() {
    let Some(be) = backend() else { return };
    let dev = Device::Backend(Arc::new(be));
    let (k, n) = (64, 48);
    let w = rand_t(&[n, k], 9);
    let x = rand_t(&[4, k], 10);
    let pm = packed(&w, Format::Q8_0, Compute::WeightOnly);
    let mut layer = Linear::new("proj", Weight::Packed(Arc::new(pm)), None).unwrap();
    let want = layer.forward(&x).unwrap().to_vec::<f32>().unwrap();
    layer.to_device(&dev).unwrap();
    let got = layer.forward(&dev.put(&x).unwrap()).unwrap();
    let got = got.to_cpu().unwrap().to_vec::<f32>().unwrap();
    assert!(rel_err(&got, &want) <= tol_of("linear_packed", "q8_0"));
    layer.to_device(&Device::Cpu).unwrap();
    let back = layer.forward(&x).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(back, want, "back on the CPU: the CPU kernels, bit for bit");
}

#[test]
fn other_formats_and_bad_shapes_are_refused_by_name() {
    let Some(be) = backend() else { return };
    let dev = Device::Backend(Arc::new(be));
    let w = rand_t(&[8, 256], 11);
    let p: Arc<dyn PackedWeight> = Arc::new(aria_core::nn::Bf16DotWeight::pack(&w).unwrap());
    let e = aria_core::nn::put_packed(&dev, &p).unwrap_err().to_string();
    assert!(
        e.contains("bf16_panels") && e.contains("q8_0") && e.contains("q4_k"),
        "{e}"
    );
    let p: Arc<dyn PackedWeight> = Arc::new(packed(&w, Format::Q8_0, Compute::WeightOnly));
    let on = aria_core::nn::put_packed(&dev, &p).unwrap();
    let x = dev.put(&rand_t(&[2, 128], 12)).unwrap();
    let e = aria_core::ops::packed_linear(&x, &*on, None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("linear_packed") && e.contains("[2, 128]"), "{e}");
}
