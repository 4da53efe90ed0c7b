//! Micro-benchmark: packed-weight products against the f32 `aria_core::ops::linear` at DiT
//! shapes (small-music: E = 1024, FFN 4096; medium: E = 1536), for 10 s and 30 s token counts.
//!
//! ```text
//! cargo run --release -p aria-quant --example quant_bench -- [--threads N] [--reps R] [--medium]
//!     [--only SHAPE-SUBSTRING] [--m ROWS]
//! ```
//!
//! Prints, per shape and kernel, the best time over R repetitions, GFLOP/s (2·M·N·K) and the
//! ratio to f32 (below 1 is faster).

use std::time::Instant;

use aria_core::{ops, threads, Tensor};
use aria_quant::{Compute, Format, PackedMatrix};

fn weights(n: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n * k)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Sum of four uniforms: roughly Gaussian, σ ≈ 0.02.
            let u: f32 = (0..4)
                .map(|i| ((s >> (16 * i)) & 0xFFFF) as f32 / 65536.0)
                .sum();
            (u - 2.0) * 0.035
        })
        .collect()
}

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let nthreads = arg("--threads").unwrap_or(0);
    let reps = arg("--reps").unwrap_or(5);
    threads::set_num_threads(nthreads)?;
    let medium = args.iter().any(|a| a == "--medium");
    // (name, N, K): the DiT block linears.
    let shapes: Vec<(&str, usize, usize)> = if medium {
        vec![
            ("attn.to_out 1536", 1536, 1536),
            ("ff.2 1536←6144", 1536, 6144),
        ]
    } else {
        vec![
            ("to_qkv 3072←1024", 3072, 1024),
            ("to_out 1024←1024", 1024, 1024),
            ("ff.0 8192←1024", 8192, 1024),
            ("ff.2 1024←4096", 1024, 4096),
        ]
    };
    println!(
        "threads {}, cpu paths: f32 {}, int8 {}",
        threads::num_threads(),
        aria_core::cpu::Isa::detect().name(),
        aria_quant::kernels::IntIsa::for_isa(aria_core::cpu::Isa::detect()).name()
    );
    if args.iter().any(|a| a == "--dequant") {
        let (n, k) = (4096, 4096);
        let w = Tensor::from_vec(weights(n, k, 1), &[n, k])?;
        println!("| format | dequantize ns/weight (one thread) |");
        println!("|---|---|");
        for f in Format::ALL {
            let p = PackedMatrix::quantize("w", &w, f)?;
            let bytes = p.bytes()?;
            let rb = p.row_bytes();
            let mut row = vec![0f32; k];
            let t = best(reps, || {
                for r in 0..n {
                    f.dequantize_row(&bytes[r * rb..(r + 1) * rb], &mut row);
                }
            });
            println!("| {} | {:.3} |", f.tag(), t * 1e9 / (n * k) as f64);
        }
    }
    println!("| shape | M | kernel | ms | GFLOP/s | × f32 time |");
    println!("|---|---|---|---|---|---|");
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let ms: Vec<usize> = match arg("--m") {
        Some(m) => vec![m],
        None => vec![238, 452],
    };
    for (name, n, k) in shapes {
        if only.as_ref().is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        let w = weights(n, k, n as u64 * 31 + k as u64);
        let wt = Tensor::from_vec(w.clone(), &[n, k])?;
        let q8 = PackedMatrix::quantize(name, &wt, Format::Q8_0)?;
        let kinds: Vec<(&str, PackedMatrix)> = vec![
            ("q8_0", q8.clone()),
            ("q6_k", PackedMatrix::quantize(name, &wt, Format::Q6K)?),
            ("q4_k", PackedMatrix::quantize(name, &wt, Format::Q4K)?),
            ("q8_0 W8A8", q8.with_compute(Compute::W8A8)?),
        ];
        for &m in &ms {
            let x = Tensor::from_vec(weights(m, k, 7 + m as u64), &[m, k])?;
            let xs = x.to_vec::<f32>()?;
            let flop = 2.0 * (m * n * k) as f64;
            let t32 = best(reps, || {
                let _ = ops::linear(&x, &wt, None);
            });
            println!(
                "| {name} | {m} | f32 | {:.2} | {:.1} | 1.00 |",
                t32 * 1e3,
                flop / t32 / 1e9
            );
            let mut out = vec![0f32; m * n];
            for (kind, p) in &kinds {
                let t = best(reps, || {
                    let _ = p.matmul(&xs, m, &mut out);
                });
                println!(
                    "| {name} | {m} | {kind} ({}) | {:.2} | {:.1} | {:.2} |",
                    p.kernel(m).name(),
                    t * 1e3,
                    flop / t / 1e9,
                    t / t32
                );
            }
        }
    }
    Ok(())
}
