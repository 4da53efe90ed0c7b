//! `bench core`'s tile-unit section (x86-64 with AMX): the one-core peaks of `tdpbf16ps` and
//! `tdpbssd` probed in the same run (four accumulator tiles on operands held in the tile
//! registers, `aria_cpu::amx_peak`), and the products that run on the unit at DiT shapes,
//! single-threaded, as a share of them: the bf16 product of `--precision bf16-dot`/`fast` and
//! the W8A8 product of `--precision q8 --w8a8`. Each counts the whole product as the model runs
//! it (activations rounded or quantized, packed into tiles, the results stored or folded).

use std::hint::black_box;

use aria_core::cpu::amx_peak::{self, TileOp};
use aria_core::nn::Bf16DotWeight;
use aria_core::{DType, Tensor};
use aria_quant::kernels::{IntIsa, Kernel};
use aria_quant::{Compute, Format, PackedMatrix};

use crate::bench_core::{measure, median, peak_on, randn};

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// The median over `reps` probes of one core's `op` rate (GFLOP/s or GOP/s), if the unit runs it.
fn peak(op: TileOp, reps: usize) -> Option<f64> {
    if !amx_peak::available(op) {
        return None;
    }
    let iters = 2_000_000;
    let runs = (0..reps)
        .map(|_| {
            peak_on(1, iters as f64 * op.ops_per_iter(), || {
                black_box(amx_peak::run(op, black_box(iters)).unwrap_or(0.0))
            })
        })
        .collect();
    median(runs)
}

/// Print the tile section (nothing but a line where the CPU has no tile unit).
pub(crate) fn run(reps: usize, quick: bool, f32_peak: Option<f64>) -> Result<(), String> {
    println!();
    println!("# products on the AMX tile unit, one thread");
    let (pb, pi) = (peak(TileOp::Bf16, reps), peak(TileOp::Int8, reps));
    let line = |op: TileOp, p: Option<f64>| match p {
        Some(p) => println!(
            "one-core {} peak (register-only loop): {p:.1} GOP/s",
            op.name()
        ),
        None => println!("{}: not on this CPU (or not granted by the OS)", op.name()),
    };
    line(TileOp::Bf16, pb);
    line(TileOp::Int8, pi);
    if pb.is_none() && pi.is_none() {
        return Ok(());
    }
    let shapes: &[(usize, usize, usize)] = if quick {
        &[(174, 1024, 1024)]
    } else {
        &[(174, 1024, 3072), (174, 4096, 1024), (452, 1024, 8192)]
    };
    println!();
    println!("| product | M | K | N | GOP/s | % of its tile peak | % of f32 FMA peak |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let pct = |g: f64, p: Option<f64>| p.map_or("-".into(), |p| format!("{:.0} %", 100.0 * g / p));
    // Time `f` (one product of the shape) on one thread and print its row.
    let row = |what: &str, (m, k, n): (usize, usize, usize), peak, f: &mut (dyn FnMut() + Send)| {
        let ops = 2.0 * (m * n * k) as f64;
        let g = measure(String::new(), 1, reps, ops, f, None)?.gflops;
        let (pt, pf) = (pct(g, peak), pct(g, f32_peak));
        println!("| {what} | {m} | {k} | {n} | {g:.1} | {pt} | {pf} |");
        Ok::<_, String>(())
    };
    for &(m, k, n) in shapes {
        let xv = randn(m * k, 31);
        let wv = randn(n * k, 32);
        if pb.is_some() {
            let x = Tensor::from_vec(xv.clone(), &[m, k]).map_err(err)?;
            let w = Tensor::from_vec(wv.clone(), &[n, k])
                .and_then(|w| w.to_dtype(DType::BF16))
                .map_err(err)?;
            let p = Bf16DotWeight::pack(&w).map_err(err)?;
            row("bf16 panels (tdpbf16ps)", (m, k, n), pb, &mut || {
                drop(black_box(p.linear_amx(&x, None)))
            })?;
        }
        if pi.is_some() && IntIsa::available().contains(&IntIsa::Amx) {
            let w8 = PackedMatrix::from_f32("w", n, k, &wv, Format::Q8_0)
                .and_then(|q| q.with_compute(Compute::W8A8))
                .map_err(err)?;
            let mut out = vec![0f32; m * n];
            row(
                "q8_0 W8A8 (tdpbssd, K = 32 a product)",
                (m, k, n),
                pi,
                &mut || {
                    let k = Kernel::W8A8(IntIsa::Amx);
                    drop(black_box(w8.matmul_with(k, &xv, m, &mut out)))
                },
            )?;
        }
    }
    Ok(())
}
