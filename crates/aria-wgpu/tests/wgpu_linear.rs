//! `ops::linear` on the wgpu backend, through the same call as on the CPU, against the CPU
//! result. Skips (with a message) when no adapter is available, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aria_core::{ops, CoreError, DType, Device, Tensor};
use aria_testing::fixtures::rel_err;
use aria_wgpu::WgpuBackend;

fn backend() -> Option<WgpuBackend> {
    match WgpuBackend::new() {
        Ok(b) => {
            eprintln!("wgpu adapter: {}", b.adapter_name());
            Some(b)
        }
        Err(e) => {
            if std::env::var("CI").map(|v| v == "true").unwrap_or(false) {
                panic!("no wgpu adapter under CI=true: {e}");
            }
            aria_testing::skip(format!("no wgpu adapter ({e})"));
            None
        }
    }
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn rand_t(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(values(shape.iter().product(), seed), shape).unwrap()
}

#[test]
fn linear_matches_cpu() {
    let Some(be) = backend() else { return };
    let gpu = be.device();
    // (x shape, N): tile-aligned, ragged, tiny, batched; sizes ≤ 128.
    let cases: &[(&[usize], usize)] = &[
        (&[16, 16], 16),
        (&[1, 1], 1),
        (&[3, 5], 7),
        (&[17, 33], 15),
        (&[2, 9, 31], 47),
        (&[128, 128], 128),
        (&[100, 77], 128),
        (&[1, 128], 3),
        (&[128, 1], 100),
        (&[4, 2, 3, 20], 19),
    ];
    for (i, &(xs, n)) in cases.iter().enumerate() {
        let k = *xs.last().unwrap();
        let x = rand_t(xs, 3 * i as u64);
        let w = rand_t(&[n, k], 3 * i as u64 + 1);
        let b = rand_t(&[n], 3 * i as u64 + 2);
        for bias in [None, Some(&b)] {
            let want = ops::linear(&x, &w, bias).unwrap();
            let (xg, wg) = (gpu.put(&x).unwrap(), gpu.put(&w).unwrap());
            assert!(!xg.device().is_cpu());
            let bg = bias.map(|b| gpu.put(b).unwrap());
            let got = ops::linear(&xg, &wg, bg.as_ref()).unwrap();
            assert!(!got.device().is_cpu(), "the result stays on the device");
            assert_eq!(got.shape(), want.shape());
            let got = got.to_cpu().unwrap();
            assert!(got.device().is_cpu());
            let e = rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap());
            assert!(
                e < 1e-5,
                "x {xs:?}, N {n}, bias {}: rel err {e:e}",
                bias.is_some()
            );
        }
    }
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
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) < 1e-5);
    let xt = rand_t(&[24, 40], 13);
    let xtg = gpu.put(&xt).unwrap().transpose(0, 1).unwrap();
    assert!(!xtg.is_contiguous());
    let want = ops::linear(&xt.transpose(0, 1).unwrap(), &w, None).unwrap();
    // A strided device view is compacted on the device (the `contiguous` kernel), never
    // through the host.
    let got = ops::linear(&xtg, &w, None).unwrap();
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) < 1e-5);
    let xtc = gpu.put(&xtg.to_cpu().unwrap()).unwrap();
    let got = ops::linear(&xtc, &w, None).unwrap(); // CPU weight: uploaded on the fly
    assert!(rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap()) < 1e-5);
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
        assert!(e < 1e-5, "{dt}: {e}");
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
