//! Results are bit-identical whatever the thread count (no reduction is ever split across
//! threads), on every ISA path.
#![allow(clippy::unwrap_used)]

mod ops_common;

use aria_core::cpu::{self, Isa};
use aria_core::ops::{self, AttnOpts, KeyMaskMode, RmsStyle};
use aria_core::{threads, DType, Tensor};
use ops_common::{randn, t};

fn bits(x: &Tensor) -> Vec<u32> {
    x.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

/// Run `f` on 1, 2, 3 and 5 threads (each ISA) and require identical bits.
fn same_bits(what: &str, f: impl Fn() -> Tensor + Sync) {
    for isa in Isa::available() {
        let mut first: Option<Vec<u32>> = None;
        for n in [1, 2, 3, 5] {
            let got = threads::with_threads(n, || cpu::with_isa(isa, || bits(&f()))).unwrap();
            match &first {
                None => first = Some(got),
                Some(w) => assert!(
                    w == &got,
                    "{what} [{}]: {n} threads differ from 1 thread",
                    isa.name()
                ),
            }
        }
    }
}

#[test]
fn thread_count_bit_identity() {
    // M = 300 with 3 column blocks of the gemm: one row block on 1 thread, two on more threads
    // (the blocking depends on the thread count; the bits must not).
    let (m, k, n) = (300, 530, 270);
    let x = t(&randn(m * k, 1), &[m, k]);
    let w = t(&randn(n * k, 2), &[n, k]);
    let b = t(&randn(n, 3), &[n]);
    same_bits("linear f32", || ops::linear(&x, &w, Some(&b)).unwrap());
    let wb = w.to_dtype(DType::BF16).unwrap();
    same_bits("linear bf16", || ops::linear(&x, &wb, None).unwrap());
    let a3 = t(&randn(3 * 40 * 70, 4), &[3, 40, 70]);
    let b3 = t(&randn(3 * 70 * 50, 5), &[3, 70, 50]);
    same_bits("matmul", || ops::matmul(&a3, &b3).unwrap());

    let (bb, h, nq, d) = (2, 3, 150, 32);
    let q = t(&randn(bb * h * nq * d, 6), &[bb, h, nq, d]);
    let kk = t(&randn(bb * h * nq * d, 7), &[bb, h, nq, d]);
    let v = t(&randn(bb * h * nq * d, 8), &[bb, h, nq, d]);
    let mask = t(
        &(0..bb * nq)
            .map(|i| (i % 7 != 0) as u8 as f32)
            .collect::<Vec<_>>(),
        &[bb, nq],
    );
    for (window, mode) in [
        (None, KeyMaskMode::ZeroValues),
        (Some((17, 17)), KeyMaskMode::Exclude),
    ] {
        let opts = AttnOpts {
            key_mask: Some(&mask),
            mask_mode: mode,
            window,
            ..AttnOpts::new(0.17)
        };
        same_bits("attention", || ops::attention(&q, &kk, &v, &opts).unwrap());
        same_bits("attention_diff", || {
            ops::attention_diff(&q, &kk, &kk, &q, &v, &opts).unwrap()
        });
    }

    let xs = t(
        &randn(64 * 1000, 9)
            .iter()
            .map(|v| v * 3.0)
            .collect::<Vec<_>>(),
        &[64, 1000],
    );
    let g = t(&randn(1000, 10), &[1000]);
    same_bits("rms_norm", || {
        ops::rms_norm(&xs, Some(&g), 1e-6, RmsStyle::OnePlus).unwrap()
    });
    same_bits("layer_norm", || {
        ops::layer_norm(&xs, Some(&g), Some(&g), 1e-5).unwrap()
    });
    same_bits("softmax", || ops::softmax_last(&xs).unwrap());
    same_bits("silu", || ops::silu(&xs).unwrap());
    same_bits("glu", || ops::glu(&xs, ops::GluAct::Silu).unwrap());
    same_bits("add", || ops::add(&xs, &g).unwrap());
    // PyTorch's bf16 arithmetic (`torch_bf16`): bf16-valued inputs, remainders of every tail.
    let xr = ops::torch_bf16::round;
    let xb = t(
        &randn(37 * 200, 13)
            .iter()
            .map(|&v| xr(v))
            .collect::<Vec<_>>(),
        &[37, 200],
    );
    let wbf = t(&randn(70 * 200, 14), &[70, 200])
        .to_dtype(DType::BF16)
        .unwrap();
    same_bits("torch_bf16 linear", || {
        ops::torch_bf16::linear(&xb, &wbf, Some(&b.narrow(0, 0, 70).unwrap())).unwrap()
    });
    let qb = ops::map(&q, xr).unwrap();
    let kb = ops::map(&kk, xr).unwrap();
    let vb = ops::map(&v, xr).unwrap();
    same_bits("torch_bf16 flash_attention", || {
        ops::torch_bf16::flash_attention(&qb, &kb, &vb, 0.125, |bi, i, j| (bi + i + j) % 5 != 0)
            .unwrap()
    });
    let cx = t(&randn(2 * 48 * 300, 11), &[2, 48, 300]);
    let cw = t(&randn(40 * 48 * 3, 12), &[40, 48, 3]);
    same_bits("conv1d", || ops::conv1d(&cx, &cw, None, 1).unwrap());
}

#[test]
fn set_num_threads_roundtrip() {
    threads::set_num_threads(3).unwrap();
    assert_eq!(threads::num_threads(), 3);
    let x = t(&randn(20 * 30, 1), &[20, 30]);
    let w = t(&randn(10 * 30, 2), &[10, 30]);
    let a = bits(&ops::linear(&x, &w, None).unwrap());
    threads::set_num_threads(0).unwrap();
    assert_eq!(a, bits(&ops::linear(&x, &w, None).unwrap()));
}

#[test]
fn with_isa_selects_and_restores() {
    let before = cpu::current();
    cpu::with_isa(Isa::Scalar, || assert_eq!(cpu::current(), Isa::Scalar));
    assert_eq!(cpu::current(), before);
    assert_eq!(Isa::detect(), *Isa::available().last().unwrap());
    eprintln!("paths tested here: {:?}", Isa::available());
    #[cfg(target_arch = "aarch64")]
    assert!(
        Isa::available().contains(&Isa::Neon),
        "NEON path not detected"
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        assert!(Isa::available().contains(&Isa::Avx2));
    }
    // A path this CPU cannot run falls back to scalar.
    #[cfg(target_arch = "x86_64")]
    cpu::with_isa(Isa::Neon, || assert_eq!(cpu::current(), Isa::Scalar));
    #[cfg(target_arch = "aarch64")]
    cpu::with_isa(Isa::Avx2, || assert_eq!(cpu::current(), Isa::Scalar));
}
