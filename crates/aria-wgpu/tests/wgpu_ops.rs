//! The products and attention on the wgpu backend (`linear` with 16-bit and split weights,
//! `matmul`, `conv1d`, `attention` in every variant) against the CPU ops, 1e-4 relative
//! (max-abs error over max-abs reference), shapes ≤ 128. Skips (with a message) when no
//! adapter is available, except under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use aria_core::ops::{self, AttnOpts, KeyMaskMode};
use aria_core::{DType, Device, Tensor};
use aria_testing::fixtures::rel_err;
use aria_wgpu::{Knobs, WgpuBackend};

const TOL: f32 = 1e-4;

fn ci() -> bool {
    std::env::var("CI").map(|v| v == "true").unwrap_or(false)
}

fn open(knobs: Option<Knobs>) -> Option<WgpuBackend> {
    let r = match knobs {
        Some(k) => WgpuBackend::with_knobs(k),
        None => WgpuBackend::new(),
    };
    match r {
        Ok(b) => {
            eprintln!("wgpu adapter: {} ({:?})", b.adapter_name(), b.knobs());
            Some(b)
        }
        Err(e) => {
            assert!(!ci(), "no wgpu adapter under CI=true: {e}");
            aria_testing::skip(format!("no wgpu adapter ({e})"));
            None
        }
    }
}

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

fn check(what: &str, got: &Tensor, want: &Tensor) -> f32 {
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert!(
        !got.device().is_cpu(),
        "{what}: the result must stay on the device"
    );
    let e = rel_err(&got.to_vec_f32().unwrap(), &want.to_vec_f32().unwrap());
    assert!(e < TOL, "{what}: rel err {e:e}");
    e
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
    for (be, cases) in [(open(None), plain), (open(Some(knobs)), split)] {
        let Some(be) = be else { return };
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
                    let buffers = aria_core_buffers(&wg);
                    assert!(
                        buffers > 1,
                        "{m}x{k}x{n}: the weight must be split ({buffers})"
                    );
                }
                let got = ops::linear(&xg, &wg, Some(&bg)).unwrap();
                worst = worst.max(check(&format!("linear {m}x{k}x{n} {dt}"), &got, &want));
            }
        }
        eprintln!(
            "linear worst rel err {worst:e} (binding limit {} bytes)",
            be.max_binding_bytes()
        );
    }
}

#[test]
fn matmul_matches_cpu() {
    let Some(be) = open(None) else { return };
    let gpu = be.device();
    let mut worst = 0f32;
    for (i, (a, b)) in [
        (vec![3, 5], vec![5, 7]),
        (vec![2, 17, 33], vec![2, 33, 9]),
        (vec![2, 3, 16, 16], vec![2, 3, 16, 16]),
        (vec![1, 128, 64], vec![1, 64, 128]),
    ]
    .into_iter()
    .enumerate()
    {
        let (a, b) = (rand_t(&a, i as u64), rand_t(&b, 10 + i as u64));
        let want = ops::matmul(&a, &b).unwrap();
        let got = ops::matmul(&gpu.put(&a).unwrap(), &gpu.put(&b).unwrap()).unwrap();
        worst = worst.max(check(&format!("matmul {:?}", a.shape()), &got, &want));
    }
    eprintln!("matmul worst rel err {worst:e}");
    let e = ops::matmul(
        &gpu.put(&rand_t(&[3, 4], 1)).unwrap(),
        &gpu.put(&rand_t(&[5, 4], 1)).unwrap(),
    );
    assert!(e.is_err());
}

#[test]
fn conv1d_matches_cpu() {
    let Some(be) = open(None) else { return };
    let gpu = be.device();
    let mut worst = 0f32;
    // (B, Cin, L, Cout, K, padding): the models' k = 1 and k = 3 ("same"), plus ragged ones.
    for (i, &(bn, cin, l, cout, k, pad)) in [
        (1, 8, 16, 8, 1, 0),
        (2, 16, 33, 24, 3, 1),
        (1, 64, 128, 32, 3, 1),
        (3, 5, 7, 6, 3, 0),
        (1, 4, 9, 3, 5, 2),
        (2, 128, 17, 64, 1, 0),
    ]
    .iter()
    .enumerate()
    {
        let x = rand_t(&[bn, cin, l], i as u64);
        let b = rand_t(&[cout], 30 + i as u64);
        for dt in [DType::F32, DType::BF16] {
            let w = rand_t(&[cout, cin, k], 60 + i as u64).to_dtype(dt).unwrap();
            let bias = if i % 2 == 0 { Some(&b) } else { None };
            let want = ops::conv1d(&x, &w.to_dtype(DType::F32).unwrap(), bias, pad).unwrap();
            let bg = bias.map(|b| gpu.put(b).unwrap());
            let got = ops::conv1d(
                &gpu.put(&x).unwrap(),
                &gpu.put(&w).unwrap(),
                bg.as_ref(),
                pad,
            )
            .unwrap();
            worst = worst.max(check(
                &format!("conv1d x{:?} w{:?} pad {pad} {dt}", x.shape(), w.shape()),
                &got,
                &want,
            ));
        }
    }
    eprintln!("conv1d worst rel err {worst:e}");
    let bad = ops::conv1d(
        &gpu.put(&rand_t(&[1, 4, 2], 1)).unwrap(),
        &gpu.put(&rand_t(&[2, 4, 5], 1)).unwrap(),
        None,
        0,
    );
    assert!(bad.is_err(), "input shorter than the kernel");
}

/// How many buffers hold a device tensor.
fn aria_core_buffers(t: &Tensor) -> usize {
    match &**t.storage() {
        aria_core::storage::Storage::Device(d) => d
            .as_any()
            .downcast_ref::<aria_wgpu::WgpuStorage>()
            .map_or(0, |s| s.buffers()),
        _ => 0,
    }
}

/// A key mask `[B, Nk]` with some keys invalid (item 1 has every key masked when `all`).
fn key_mask(b: usize, nk: usize, all: bool) -> Tensor {
    let v: Vec<f32> = (0..b * nk)
        .map(|i| {
            let (bi, j) = (i / nk, i % nk);
            if all && bi == 1 {
                0.0
            } else {
                f32::from((j * 7 + bi * 3) % 5 != 0)
            }
        })
        .collect();
    Tensor::from_vec(v, &[b, nk]).unwrap()
}

#[test]
fn attention_variants_match_cpu() {
    let Some(be) = open(None) else { return };
    let gpu = be.device();
    let put = |t: &Tensor| gpu.put(t).unwrap();
    let mut worst = 0f32;
    // (B, H, Nq, Nk, D, Dv)
    let shapes = [
        (1, 1, 1, 1, 4, 4),
        (2, 3, 17, 17, 16, 16),
        (1, 2, 64, 64, 64, 64),
        (2, 2, 9, 40, 32, 24),
        (1, 1, 128, 128, 8, 8),
    ];
    for (si, &(b, h, nq, nk, d, dv)) in shapes.iter().enumerate() {
        let s = si as u64 * 10;
        let q = rand_t(&[b, h, nq, d], s + 1);
        let k = rand_t(&[b, h, nk, d], s + 2);
        let v = rand_t(&[b, h, nk, dv], s + 3);
        let q2 = rand_t(&[b, h, nq, d], s + 4);
        let k2 = rand_t(&[b, h, nk, d], s + 5);
        let (qg, kg, vg, q2g, k2g) = (put(&q), put(&k), put(&v), put(&q2), put(&k2));
        let scale = 1.0 / (d as f32).sqrt();
        let masks = [
            None,
            Some(key_mask(b, nk, false)),
            Some(key_mask(b, nk, true)),
        ];
        for (mi, mask) in masks.iter().enumerate() {
            let mg = mask.as_ref().map(&put);
            for mode in [KeyMaskMode::ZeroValues, KeyMaskMode::Exclude] {
                if mask.is_none() && mode == KeyMaskMode::Exclude {
                    continue;
                }
                let windows = if nq == nk {
                    vec![None, Some((17, 17)), Some((3, 0))]
                } else {
                    vec![None]
                };
                for window in windows {
                    for softcap in [None, Some(5.0)] {
                        let cpu_opts = AttnOpts {
                            scale: scale * 4.0,
                            softcap,
                            key_mask: mask.as_ref(),
                            mask_mode: mode,
                            window,
                        };
                        let gpu_opts = AttnOpts {
                            key_mask: mg.as_ref(),
                            ..cpu_opts
                        };
                        let what = format!(
                            "attention {:?} mask {mi} {mode:?} window {window:?} cap {softcap:?}",
                            shapes[si]
                        );
                        let want = ops::attention(&q, &k, &v, &cpu_opts).unwrap();
                        let got = ops::attention(&qg, &kg, &vg, &gpu_opts).unwrap();
                        worst = worst.max(check(&what, &got, &want));
                        let want = ops::attention_diff(&q, &k, &q2, &k2, &v, &cpu_opts).unwrap();
                        let got =
                            ops::attention_diff(&qg, &kg, &q2g, &k2g, &vg, &gpu_opts).unwrap();
                        worst = worst.max(check(&format!("{what} diff"), &got, &want));
                    }
                }
            }
        }
    }
    eprintln!("attention worst rel err {worst:e}");
}

#[test]
fn attention_reads_head_split_views_in_place() {
    let Some(be) = open(None) else { return };
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
    check("attention on permuted views", &got, &want);
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
