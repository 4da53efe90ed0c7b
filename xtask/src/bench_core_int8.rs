//! `bench core`'s int8 section: aria-quant's products on every int8 path of this CPU at DiT
//! shapes, single-threaded, in GOP/s (two per multiply-add) and as a share of the int8 peak
//! probed in the same run (a register-only `vpdpbusd` loop: 12 independent 512-bit chains, or
//! 256-bit with AVX-VNNI alone), next to the f32 product and the weight-only q8 product of the
//! same shape and their share of the f32 FMA peak.
//!
//! W8A8 counts the whole product as the model runs it: the activations quantized per token,
//! the weight panels repacked for the path, the int8 tiles and the f32 scaling.

use std::hint::black_box;

use aria_core::cpu::Isa;
use aria_core::{ops, Tensor};
use aria_quant::kernels::{IntIsa, Kernel};
use aria_quant::{Compute, Format, PackedMatrix};

use crate::bench_core::{measure, median, peak_on, randn};

/// GOP/s of one core's `vpdpbusd` loop (512-bit with AVX-512 VNNI, else 256-bit with
/// AVX-VNNI), and which loop it was.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)]
fn int8_peak() -> Option<(f64, &'static str)> {
    use std::arch::x86_64::*;
    #[target_feature(enable = "avx512f,avx512vnni")]
    #[allow(unused_unsafe)]
    unsafe fn run512(iters: usize, x: i32) -> f32 {
        // SAFETY: register-only AVX-512 VNNI intrinsics; the caller checked the features.
        unsafe {
            let a = _mm512_set1_epi32(x);
            let b = _mm512_set1_epi32(0x0101_0101);
            let mut c = [_mm512_setzero_si512(); 12];
            for _ in 0..iters {
                for v in c.iter_mut() {
                    *v = _mm512_dpbusd_epi32(*v, a, b);
                }
            }
            let mut s = _mm512_setzero_si512();
            for v in c {
                s = _mm512_add_epi32(s, v);
            }
            _mm512_reduce_add_epi32(s) as f32
        }
    }
    #[target_feature(enable = "avx2,avxvnni")]
    #[allow(unused_unsafe)]
    unsafe fn run256(iters: usize, x: i32) -> f32 {
        // SAFETY: register-only AVX-VNNI intrinsics; the caller checked the features.
        unsafe {
            let a = _mm256_set1_epi32(x);
            let b = _mm256_set1_epi32(0x0101_0101);
            let mut c = [_mm256_setzero_si256(); 12];
            for _ in 0..iters {
                for v in c.iter_mut() {
                    *v = _mm256_dpbusd_avx_epi32(*v, a, b);
                }
            }
            let mut s = _mm256_setzero_si256();
            for v in c {
                s = _mm256_add_epi32(s, v);
            }
            _mm256_extract_epi32::<0>(s) as f32
        }
    }
    let iters = 5_000_000;
    if std::arch::is_x86_feature_detected!("avx512vnni") {
        // SAFETY: AVX-512F and AVX-512 VNNI detected (VNNI implies F).
        let g = peak_on(1, (iters * 12 * 64 * 2) as f64, || {
            black_box(unsafe { run512(black_box(iters), black_box(1)) })
        });
        return Some((g, "512-bit vpdpbusd"));
    }
    if std::arch::is_x86_feature_detected!("avxvnni") {
        // SAFETY: AVX2 and AVX-VNNI detected.
        let g = peak_on(1, (iters * 12 * 32 * 2) as f64, || {
            black_box(unsafe { run256(black_box(iters), black_box(1)) })
        });
        return Some((g, "256-bit vpdpbusd"));
    }
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn int8_peak() -> Option<(f64, &'static str)> {
    None
}

/// Print the int8 table (single-threaded; `reps` repetitions, medians).
pub(crate) fn run(reps: usize, quick: bool, f32_peak: Option<f64>) -> Result<(), String> {
    let probes: Vec<(f64, &str)> = (0..reps).filter_map(|_| int8_peak()).collect();
    let label = probes.first().map_or("none", |p| p.1);
    let peak = median(probes.iter().map(|p| p.0).collect());
    println!();
    println!("# int8 and q8 products (aria-quant), one thread");
    match peak {
        Some(p) => println!("one-core int8 peak, {label} loop: {p:.1} GOP/s"),
        None => println!("int8 peak: not probed on this CPU (no VNNI)"),
    }
    let paths: Vec<IntIsa> = IntIsa::available()
        .into_iter()
        .filter(|i| *i != IntIsa::Scalar)
        .collect();
    let shapes: &[(usize, usize, usize)] = if quick {
        &[(174, 1024, 1024)]
    } else {
        &[(174, 1024, 3072), (174, 4096, 1024), (452, 1024, 8192)]
    };
    println!();
    println!("| product | M | K | N | GOP/s | % of int8 peak | % of f32 FMA peak |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let isa = Isa::detect();
    for &(m, k, n) in shapes {
        let x = randn(m * k, 21);
        let wv = randn(n * k, 22);
        let w = Tensor::from_vec(wv.clone(), &[n, k]).map_err(|e| e.to_string())?;
        let xt = Tensor::from_vec(x.clone(), &[m, k]).map_err(|e| e.to_string())?;
        let q8 = PackedMatrix::from_f32("w", n, k, &wv, Format::Q8_0).map_err(|e| e.to_string())?;
        let w8 = q8
            .clone()
            .with_compute(Compute::W8A8)
            .map_err(|e| e.to_string())?;
        let ops_n = 2.0 * (m * n * k) as f64;
        let mut out = vec![0f32; m * n];
        let row = |what: String, g: f64, int8: bool| {
            let of = |p: Option<f64>| p.map_or("-".into(), |p| format!("{:.0} %", 100.0 * g / p));
            let (pi, pf) = if int8 {
                (of(peak), "-".to_string())
            } else {
                ("-".to_string(), of(f32_peak))
            };
            println!("| {what} | {m} | {k} | {n} | {g:.1} | {pi} | {pf} |");
        };
        let r = measure(
            String::new(),
            1,
            reps,
            ops_n,
            &mut || drop(black_box(ops::linear(&xt, &w, None))),
            None,
        )?;
        row(format!("f32 dense ({})", isa.name()), r.gflops, false);
        let r = measure(
            String::new(),
            1,
            reps,
            ops_n,
            &mut || {
                drop(black_box(q8.matmul_with(
                    Kernel::Dequant(isa),
                    &x,
                    m,
                    &mut out,
                )))
            },
            None,
        )?;
        row(
            format!("q8_0 weight-only ({})", isa.name()),
            r.gflops,
            false,
        );
        for &p in &paths {
            let r = measure(
                String::new(),
                1,
                reps,
                ops_n,
                &mut || drop(black_box(w8.matmul_with(Kernel::W8A8(p), &x, m, &mut out))),
                None,
            )?;
            let default = if w8.kernel(m) == Kernel::W8A8(p) {
                ", the default"
            } else {
                ""
            };
            row(format!("q8_0 W8A8 ({}{default})", p.name()), r.gflops, true);
        }
    }
    Ok(())
}
