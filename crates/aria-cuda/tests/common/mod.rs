//! Shared helpers of the device tests.
#![allow(dead_code)]

use aria_core::{Device, Tensor};
use aria_cuda::{cuda_available, CudaBackend};

/// Whether `ARIA_REQUIRE_CUDA=1` (a missing device fails instead of skipping).
pub fn required() -> bool {
    std::env::var("ARIA_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

/// The CUDA backend on device 0, or `None` (skipped, with a message) without one.
pub fn backend(test: &str) -> Option<CudaBackend> {
    if !cuda_available() {
        assert!(
            !required(),
            "{test}: no CUDA device but ARIA_REQUIRE_CUDA=1"
        );
        aria_testing::skip_for_hardware(
            "no CUDA driver or device (ARIA_REQUIRE_CUDA=1 makes this fail)",
        );
        return None;
    }
    match CudaBackend::with_cache(0, true, aria_cuda::kernels::PtxCache::from_env()) {
        Ok(b) => Some(b),
        Err(e) => panic!("{test}: a CUDA device is present but the backend failed: {e}"),
    }
}

/// Deterministic values in about [-2, 2].
pub fn rand(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect();
    Tensor::from_vec(v, shape).expect("shape")
}

/// A 0/1 mask with roughly a quarter zeros.
pub fn mask(shape: &[usize], seed: u64) -> Tensor {
    let r = rand(shape, seed).to_vec_f32().expect("f32");
    let v: Vec<f32> = r
        .iter()
        .map(|&x| if x < -1.0 { 0.0 } else { 1.0 })
        .collect();
    Tensor::from_vec(v, shape).expect("shape")
}

/// `t` on `d`.
pub fn put(d: &Device, t: &Tensor) -> Tensor {
    d.put(t).expect("upload")
}
