//! Helpers shared by the wgpu op tests: the backend (each test records its skip when no adapter
//! is available; a failure under `CI=true`), deterministic inputs, and comparisons with the CPU.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::OnceLock;

use aria_core::ops;
use aria_core::Tensor;
use aria_testing::fixtures::rel_err;
use aria_wgpu::WgpuBackend;

/// The shared backend, or `None` with the skip recorded for the calling test.
pub fn backend() -> Option<WgpuBackend> {
    static BE: OnceLock<Result<WgpuBackend, String>> = OnceLock::new();
    let be = BE.get_or_init(|| {
        WgpuBackend::new()
            .inspect(|b| eprintln!("wgpu adapter: {}", b.adapter_name()))
            .map_err(|e| e.to_string())
    });
    match be {
        Ok(b) => Some(b.clone()),
        Err(e) => {
            // Every test that asks records its own skip (a failure under CI=true).
            aria_testing::skip(format!("no wgpu adapter ({e})"));
            None
        }
    }
}

/// Deterministic values in [-1, 1).
pub fn values(n: usize, seed: u64) -> Vec<f32> {
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

pub fn rand_t(shape: &[usize], seed: u64) -> Tensor {
    Tensor::from_vec(values(shape.iter().product(), seed), shape).unwrap()
}

pub fn scaled(shape: &[usize], seed: u64, s: f32) -> Tensor {
    ops::mul_scalar(&rand_t(shape, seed), s).unwrap()
}

/// Compare a device result with the CPU one: same shape, dtype, on the device, within `tol`.
pub fn check(op: &str, got: &Tensor, want: &Tensor, tol: f32) -> f32 {
    assert!(
        !got.device().is_cpu(),
        "{op}: the result stays on the device"
    );
    assert_eq!(got.shape(), want.shape(), "{op}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{op}: dtype");
    let g = got.to_cpu().unwrap().to_vec_f32().unwrap();
    let w = want.to_vec_f32().unwrap();
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        assert_eq!(a.is_nan(), b.is_nan(), "{op}: NaN at {i} ({a} vs {b})");
    }
    let (gf, wf): (Vec<f32>, Vec<f32>) = g
        .iter()
        .zip(&w)
        .filter(|(a, _)| !a.is_nan())
        .map(|(a, b)| (*a, *b))
        .unzip();
    let e = rel_err(&gf, &wf);
    eprintln!("parity {op} {:?}: {e:e}", want.shape());
    assert!(e <= tol, "{op} {:?}: rel err {e:e} > {tol:e}", want.shape());
    e
}

/// Bit-for-bit equality of a device result with the CPU one.
pub fn check_bits(op: &str, got: &Tensor, want: &Tensor) {
    assert!(
        !got.device().is_cpu(),
        "{op}: the result stays on the device"
    );
    assert_eq!(got.shape(), want.shape(), "{op}: shape");
    assert_eq!(got.dtype(), want.dtype(), "{op}: dtype");
    let g = got.to_cpu().unwrap();
    assert_eq!(
        g.as_bytes().unwrap(),
        want.contiguous().unwrap().as_bytes().unwrap(),
        "{op} {:?}: bits differ",
        want.shape()
    );
    eprintln!("parity {op} {:?}: bit-exact", want.shape());
}

/// A view of `t` with stride 0 on `dim` (a broadcast of a size-1 dimension to `n`).
pub fn broadcast_view(t: &Tensor, dim: usize, n: usize) -> Tensor {
    assert_eq!(t.shape()[dim], 1);
    let mut shape = t.shape().to_vec();
    let mut strides = t.strides().to_vec();
    shape[dim] = n;
    strides[dim] = 0;
    Tensor::from_storage(t.storage().clone(), t.dtype(), shape, strides, t.offset()).unwrap()
}

/// The op harness's bound for `op` in f32 (`aria_testing::harness::TOLERANCES`).
pub fn tol(op: &str) -> f32 {
    tol_of(op, "f32")
}

/// The op harness's bound for `op` in `format`.
pub fn tol_of(op: &str, format: &str) -> f32 {
    aria_testing::harness::tolerance(op, format)
        .unwrap_or_else(|| panic!("no row ({op}, {format}) in the op harness's table"))
        .rel
}
