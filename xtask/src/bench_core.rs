//! `cargo xtask bench core`: throughput of the aria-core CPU kernels.
//!
//! Reports medians over repetitions of
//! * `ops::linear` at DiT shapes (M ∈ {238, 452, 1356}; K × N: 1024 × 1024 attention out and
//!   cross q, 1024 × 3072 self-attention qkv, 1024 × 8192 feed-forward in, 4096 × 1024
//!   feed-forward out, and 4096 × 4096) with f32 weights, and at a T5 shape with bf16 weights;
//! * `ops::attention` with 16 heads × 64: self-attention (N = 238 … 1356), cross-attention
//!   (context 257), differential self-attention, SAME-S style tiny chunks (34 tokens, hundreds of
//!   chunks) and SAME-L style banded attention (±17 on 4096 tokens);
//!
//! each in GFLOP/s, as a percentage of this machine's f32 FMA peak measured in the same run (a
//! register-blocked FMA loop on one core; × threads for multi-threaded rows), and as a ratio
//! against the `gemm` crate measured in the same run (for attention: an unfused baseline, two
//! `gemm` products per head and a plain softmax in between). Single-threaded and 2 threads.
//!
//! Each repetition runs an FMA-peak probe, our op and the baseline back to back, and the reported
//! percentages and ratios are medians of the per-repetition values, so that they compare runs
//! made under the same machine load. Single-threaded rows are timed with the thread's on-CPU time
//! (Linux `schedstat`; wall time elsewhere), so that time given to other processes on a shared
//! machine is not counted; multi-threaded rows use wall time.
//!
//! Then, single-threaded, the int8 section ([`crate::bench_core_int8`]): the W8A8 product on
//! every int8 path as a share of the probed int8 peak, next to f32 and weight-only q8; and on a
//! CPU with AMX, the products on the tile unit as a share of its probed `tdpbf16ps` and
//! `tdpbssd` peaks.
//!
//! Options: `--reps N` (default 5), `--threads a,b` (default 1,2), `--quick` (smallest shapes),
//! `--narrow` (only the int8 and tile-unit sections).

use std::hint::black_box;
use std::time::Instant;

use aria_core::cpu::{self, Isa};
use aria_core::ops::{self, AttnOpts};
use aria_core::{threads, DType, Tensor};

struct Opts {
    reps: usize,
    threads: Vec<usize>,
    quick: bool,
    /// Only the int8 and tile-unit sections (`--narrow`).
    narrow: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        reps: 5,
        threads: vec![1, 2],
        quick: false,
        narrow: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--reps" => {
                o.reps = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or("--reps needs a number")?;
            }
            "--threads" => {
                let v = it.next().ok_or("--threads needs a list")?;
                o.threads = v
                    .split(',')
                    .map(|s| s.parse().map_err(|_| format!("bad thread count `{s}`")))
                    .collect::<Result<_, _>>()?;
            }
            "--quick" => o.quick = true,
            "--narrow" => o.narrow = true,
            other => {
                return Err(format!(
                    "unknown option `{other}` (use --reps N, --threads 1,2, --quick, --narrow)"
                ))
            }
        }
    }
    o.reps = o.reps.max(1);
    Ok(o)
}

pub(crate) fn randn(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn tensor(v: Vec<f32>, shape: &[usize]) -> Result<Tensor, String> {
    Tensor::from_vec(v, shape).map_err(|e| e.to_string())
}

/// GFLOP/s of `threads` OS threads each running `probe` (worth `flops`) once, side by side.
/// With one thread the probe's on-CPU time is used (see [`Clock`]).
pub(crate) fn peak_on(threads: usize, flops: f64, probe: impl Fn() -> f32 + Sync) -> f64 {
    if threads <= 1 {
        let c = Clock::start(true);
        black_box(probe());
        return flops / c.secs() / 1e9;
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(&probe);
        }
    });
    flops * threads as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// Nanoseconds the calling thread has spent on a CPU (Linux `schedstat`), if readable.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// A stopwatch: on-CPU time of the calling thread when asked for and available (single-threaded
/// runs, so that time the shared machine gives to other processes is not counted), else wall time.
struct Clock {
    wall: Instant,
    cpu: Option<u64>,
}

impl Clock {
    fn start(on_cpu: bool) -> Clock {
        Clock {
            wall: Instant::now(),
            cpu: if on_cpu { thread_cpu_ns() } else { None },
        }
    }

    fn secs(&self) -> f64 {
        match (self.cpu, thread_cpu_ns()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
            _ => self.wall.elapsed().as_secs_f64(),
        }
    }
}

/// Best f32 FMA rate of `threads` cores in GFLOP/s (the 512-bit loop where AVX-512F exists).
pub(crate) fn peak_gflops(threads: usize) -> Option<f64> {
    match (fma_peak_gflops(threads), fma512_peak_gflops(threads)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The largest of `tries` runs of [`peak_gflops`]: one probe lasts tens of milliseconds, and
/// whatever else the machine does then (write-back of a freshly written checkpoint, a neighbour
/// on a shared host) only lowers it, so the largest is the one to set work against.
pub(crate) fn best_peak_gflops(threads: usize, tries: usize) -> Option<f64> {
    (0..tries.max(1))
        .filter_map(|_| peak_gflops(threads))
        .reduce(f64::max)
}

/// f32 FMA rate of `threads` cores in GFLOP/s: 12 independent 8-lane FMA chains per core.
#[cfg(target_arch = "x86_64")]
pub(crate) fn fma_peak_gflops(threads: usize) -> Option<f64> {
    use std::arch::x86_64::*;
    if !(std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
    {
        return None;
    }
    #[target_feature(enable = "avx2,fma")]
    #[allow(unused_unsafe)]
    unsafe fn run(iters: usize, x: f32) -> f32 {
        // SAFETY: register-only AVX2/FMA intrinsics; the caller checked the CPU features.
        unsafe {
            let a = _mm256_set1_ps(x);
            let b = _mm256_set1_ps(0.999_999);
            let mut c = [_mm256_set1_ps(1.0); 12];
            for _ in 0..iters {
                for v in c.iter_mut() {
                    *v = _mm256_fmadd_ps(*v, b, a);
                }
            }
            let mut s = _mm256_setzero_ps();
            for v in c {
                s = _mm256_add_ps(s, v);
            }
            let mut o = [0f32; 8];
            _mm256_storeu_ps(o.as_mut_ptr(), s);
            o.iter().sum()
        }
    }
    let iters = 20_000_000;
    // SAFETY: AVX2 and FMA detected above.
    Some(peak_on(threads, (iters * 12 * 8 * 2) as f64, || {
        black_box(unsafe { run(black_box(iters), black_box(1e-7)) })
    }))
}

/// f32 FMA rate of `threads` cores in GFLOP/s with 512-bit registers: 12 independent 16-lane
/// chains per core.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::incompatible_msrv)]
fn fma512_peak_gflops(threads: usize) -> Option<f64> {
    use std::arch::x86_64::*;
    if !std::arch::is_x86_feature_detected!("avx512f") {
        return None;
    }
    #[target_feature(enable = "avx512f")]
    #[allow(unused_unsafe)]
    unsafe fn run(iters: usize, x: f32) -> f32 {
        // SAFETY: register-only AVX-512F intrinsics; the caller checked the CPU feature.
        unsafe {
            let a = _mm512_set1_ps(x);
            let b = _mm512_set1_ps(0.999_999);
            let mut c = [_mm512_set1_ps(1.0); 12];
            for _ in 0..iters {
                for v in c.iter_mut() {
                    *v = _mm512_fmadd_ps(*v, b, a);
                }
            }
            let mut s = _mm512_setzero_ps();
            for v in c {
                s = _mm512_add_ps(s, v);
            }
            _mm512_reduce_add_ps(s)
        }
    }
    let iters = 10_000_000;
    // SAFETY: AVX-512F detected above.
    Some(peak_on(threads, (iters * 12 * 16 * 2) as f64, || {
        black_box(unsafe { run(black_box(iters), black_box(1e-7)) })
    }))
}

#[cfg(not(target_arch = "x86_64"))]
fn fma512_peak_gflops(_threads: usize) -> Option<f64> {
    None
}

/// f32 FMA rate: not measured on this architecture.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn fma_peak_gflops(_threads: usize) -> Option<f64> {
    None
}

/// `C[M, N] = A[M, K] · W[N, K]ᵀ` with the `gemm` crate.
fn gemm_linear(a: &[f32], w: &[f32], c: &mut [f32], m: usize, k: usize, n: usize, threads: usize) {
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: a is M×K row-major, w is N×K row-major (read as K×N with column stride K), c is
    // M×N row-major; all slices hold exactly those extents.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            k as isize,
            w.as_ptr(),
            k as isize,
            1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    }
}

/// Unfused attention baseline with `gemm`: per head `S = q·kᵀ`, softmax, `O = P·v`.
#[allow(clippy::too_many_arguments)]
fn gemm_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    heads: usize,
    nq: usize,
    nk: usize,
    d: usize,
    threads: usize,
) {
    let mut s = vec![0f32; nq * nk];
    let scale = 1.0 / (d as f32).sqrt();
    for h in 0..heads {
        let (qh, kh, vh) = (
            &q[h * nq * d..(h + 1) * nq * d],
            &k[h * nk * d..(h + 1) * nk * d],
            &v[h * nk * d..(h + 1) * nk * d],
        );
        gemm_linear(qh, kh, &mut s, nq, d, nk, threads);
        for r in s.chunks_mut(nk) {
            let mx = r.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x * scale));
            let mut den = 0.0;
            for x in r.iter_mut() {
                *x = (*x * scale - mx).exp();
                den += *x;
            }
            let inv = 1.0 / den;
            r.iter_mut().for_each(|x| *x *= inv);
        }
        let par = if threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        let o = &mut out[h * nq * d..(h + 1) * nq * d];
        // SAFETY: s is nq×nk, vh is nk×d, o is nq×d, all row-major with exactly those extents.
        unsafe {
            gemm::gemm(
                nq,
                d,
                nk,
                o.as_mut_ptr(),
                1,
                d as isize,
                false,
                s.as_ptr(),
                1,
                nk as isize,
                vh.as_ptr(),
                1,
                d as isize,
                0.0f32,
                1.0f32,
                false,
                false,
                false,
                par,
            );
        }
    }
}

pub(crate) struct Row {
    what: String,
    threads: usize,
    /// Median GFLOP/s of ours.
    pub(crate) gflops: f64,
    /// Median of the per-repetition ratios ours / FMA peak measured next to it.
    of_peak: Option<f64>,
    /// Median GFLOP/s of the baseline.
    base_gflops: Option<f64>,
    /// Median of the per-repetition ratios ours / baseline.
    ratio: Option<f64>,
}

pub(crate) fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    Some(v[v.len() / 2])
}

/// Interleave, per repetition: an FMA-peak probe, our op, and the baseline (each once, after one
/// warm-up), so that the ratios compare runs made under the same machine load.
pub(crate) fn measure(
    what: String,
    nt: usize,
    reps: usize,
    flops: f64,
    ours: &mut (dyn FnMut() + Send),
    mut base: Option<&mut (dyn FnMut() + Send)>,
) -> Result<Row, String> {
    // One thread: the op runs on the pool's only worker, where the on-CPU clock is read. Each
    // timing repeats the op `n` times (chosen at warm-up for at least ~60 ms), since the on-CPU
    // clock advances in scheduler ticks.
    let time = |f: &mut (dyn FnMut() + Send), n: usize| {
        threads::with_threads(nt, || {
            let c = Clock::start(nt == 1);
            for _ in 0..n {
                f();
            }
            c.secs() / n as f64
        })
        .map_err(|e| e.to_string())
    };
    let count = |t: f64| ((0.06 / t.max(1e-6)).ceil() as usize).clamp(1, 1000);
    let n_ours = count(time(ours, 1)?);
    let n_base = match base.as_mut() {
        Some(b) => count(time(*b, 1)?),
        None => 1,
    };
    let (mut g, mut gp, mut gb, mut gr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let peak = peak_gflops(nt);
        let ours_g = flops / time(ours, n_ours)? / 1e9;
        g.push(ours_g);
        if let Some(p) = peak {
            gp.push(ours_g / p);
        }
        if let Some(b) = base.as_mut() {
            let bg = flops / time(*b, n_base)? / 1e9;
            gb.push(bg);
            gr.push(ours_g / bg);
        }
    }
    Ok(Row {
        what,
        threads: nt,
        gflops: median(g).unwrap_or(0.0),
        of_peak: median(gp),
        base_gflops: median(gb),
        ratio: median(gr),
    })
}

/// Run the benchmark with its arguments.
pub fn run(args: &[String]) -> Result<(), String> {
    let o = parse(args)?;
    println!("machine: {}", crate::bench_official::machine_line());
    let isa = Isa::detect();
    println!(
        "# aria-core CPU kernels (path: {}, medians of {} runs)",
        isa.name(),
        o.reps
    );
    let p256 = median((0..o.reps).filter_map(|_| fma_peak_gflops(1)).collect());
    let p512 = median((0..o.reps).filter_map(|_| fma512_peak_gflops(1)).collect());
    if let Some(p) = p256 {
        println!("one-core f32 FMA peak, 256-bit (AVX2) loop: {p:.1} GFLOP/s");
    }
    if let Some(p) = p512 {
        println!("one-core f32 FMA peak, 512-bit (AVX-512F) loop: {p:.1} GFLOP/s");
    }
    if p256.is_none() && p512.is_none() {
        println!("f32 FMA peak: not measured on this architecture");
    }
    println!("(% of peak: against the best of these, measured on as many cores as threads, next to each run)");
    if o.narrow {
        return narrow(o.reps, o.quick, p512.or(p256));
    }
    let mut rows: Vec<Row> = Vec::new();
    let mut avx2_rows: Vec<Row> = Vec::new();
    let err = |e: aria_core::CoreError| e.to_string();
    let ms: &[usize] = if o.quick { &[238] } else { &[238, 452, 1356] };
    let kns: &[(usize, usize)] = if o.quick {
        &[(1024, 1024)]
    } else {
        &[
            (1024, 1024),
            (1024, 3072),
            (1024, 8192),
            (4096, 1024),
            (4096, 4096),
        ]
    };
    for &nt in &o.threads {
        for &m in ms {
            for &(k, n) in kns {
                let x = tensor(randn(m * k, 1), &[m, k])?;
                let w = tensor(randn(n * k, 2), &[n, k])?;
                let (xv, wv) = (x.to_vec_f32().map_err(err)?, w.to_vec_f32().map_err(err)?);
                let mut c = vec![0f32; m * n];
                rows.push(measure(
                    format!("linear f32 M={m} K={k} N={n}"),
                    nt,
                    o.reps,
                    2.0 * (m * n * k) as f64,
                    &mut || drop(black_box(ops::linear(&x, &w, None))),
                    Some(&mut || gemm_linear(&xv, &wv, &mut c, m, k, n, nt)),
                )?);
            }
        }
        // The AVX2 micro-kernel where a wider path was detected (what CPUs without AVX-512 run),
        // single-threaded; its % of peak is reported against the 256-bit peak below the table.
        if nt == 1 && isa == Isa::Avx512 {
            for &m in ms {
                let (k, n) = (4096, 4096);
                let x = tensor(randn(m * k, 1), &[m, k])?;
                let w = tensor(randn(n * k, 2), &[n, k])?;
                let r = measure(
                    format!("linear f32 M={m} K={k} N={n}, AVX2 path"),
                    nt,
                    o.reps,
                    2.0 * (m * n * k) as f64,
                    &mut || cpu::with_isa(Isa::Avx2, || drop(black_box(ops::linear(&x, &w, None)))),
                    None,
                )?;
                avx2_rows.push(r);
            }
        }
        // T5 linear with bf16 weights; the baseline converts the weight to f32, then calls gemm.
        for &(m, k, n) in &[(256usize, 768usize, 768usize), (256, 768, 2048)] {
            let x = tensor(randn(m * k, 3), &[m, k])?;
            let w = tensor(randn(n * k, 4), &[n, k])?
                .to_dtype(DType::BF16)
                .map_err(err)?;
            let xv = x.to_vec_f32().map_err(err)?;
            let mut c = vec![0f32; m * n];
            rows.push(measure(
                format!("linear bf16 M={m} K={k} N={n}"),
                nt,
                o.reps,
                2.0 * (m * n * k) as f64,
                &mut || drop(black_box(ops::linear(&x, &w, None))),
                Some(&mut || {
                    let wv = w.to_vec_f32().unwrap_or_default();
                    gemm_linear(&xv, &wv, &mut c, m, k, n, nt)
                }),
            )?);
        }
        // The same T5 shapes with bf16 products (`Bf16DotWeight`: `vdpbf16ps` with AVX-512
        // BF16, its peak twice the f32 FMA peak); the baseline is the f32 path on the same
        // bf16 weight (`ops::linear`), so the ratio is bf16-dot / f32 speed.
        for &(m, k, n) in &[
            (256usize, 768usize, 768usize),
            (256, 768, 2048),
            (256, 2048, 768),
        ] {
            let x = tensor(randn(m * k, 3), &[m, k])?;
            let w = tensor(randn(n * k, 4), &[n, k])?
                .to_dtype(DType::BF16)
                .map_err(err)?;
            let p = aria_core::nn::Bf16DotWeight::pack(&w).map_err(err)?;
            let native = if aria_core::nn::Bf16DotWeight::native() {
                "vdpbf16ps"
            } else {
                "emulated"
            };
            rows.push(measure(
                format!("linear bf16-dot ({native}) M={m} K={k} N={n}"),
                nt,
                o.reps,
                2.0 * (m * n * k) as f64,
                &mut || {
                    // The tile unit left out (the CPU's own choice where it has one: next row).
                    let y =
                        aria_core::cpu::bf16dot::without_tiles(|| ops::packed_linear(&x, &p, None));
                    drop(black_box(y))
                },
                Some(&mut || drop(black_box(ops::linear(&x, &w, None)))),
            )?);
            // The same panels on the AMX tile unit where the CPU has one (its own rounding).
            if aria_core::nn::Bf16DotWeight::amx() {
                rows.push(measure(
                    format!("linear bf16 AMX (tdpbf16ps) M={m} K={k} N={n}"),
                    nt,
                    o.reps,
                    2.0 * (m * n * k) as f64,
                    &mut || drop(black_box(p.linear_amx(&x, None))),
                    Some(&mut || drop(black_box(ops::linear(&x, &w, None)))),
                )?);
            }
        }
        let (h, d) = (16usize, 64usize);
        let seqs: &[usize] = if o.quick { &[238] } else { &[238, 452, 1356] };
        for &nq in seqs {
            for (kind, nk) in [("self", nq), ("cross", 257)] {
                let (qv, kv, vv) = (
                    randn(h * nq * d, 5),
                    randn(h * nk * d, 6),
                    randn(h * nk * d, 7),
                );
                let q = tensor(qv.clone(), &[1, h, nq, d])?;
                let k = tensor(kv.clone(), &[1, h, nk, d])?;
                let v = tensor(vv.clone(), &[1, h, nk, d])?;
                let opts = AttnOpts::new(1.0 / (d as f32).sqrt());
                let flops = 4.0 * (h * nq * nk * d) as f64;
                let mut out = vec![0f32; h * nq * d];
                rows.push(measure(
                    format!("attention {kind} 16x64 Nq={nq} Nk={nk}"),
                    nt,
                    o.reps,
                    flops,
                    &mut || drop(black_box(ops::attention(&q, &k, &v, &opts))),
                    Some(&mut || gemm_attention(&qv, &kv, &vv, &mut out, h, nq, nk, d, nt)),
                )?);
                if kind == "self" && nq == 452 {
                    let q2 = tensor(randn(h * nq * d, 8), &[1, h, nq, d])?;
                    let k2 = tensor(randn(h * nk * d, 9), &[1, h, nk, d])?;
                    rows.push(measure(
                        format!("attention_diff self 16x64 N={nq}"),
                        nt,
                        o.reps,
                        2.0 * flops,
                        &mut || drop(black_box(ops::attention_diff(&q, &k, &q2, &k2, &v, &opts))),
                        None,
                    )?);
                }
            }
        }
        // SAME-S: many tiny chunks of 34 tokens (12 heads × 64).
        let (chunks, n, hh) = (if o.quick { 64 } else { 256 }, 34usize, 12usize);
        let mk = |s| tensor(randn(chunks * hh * n * d, s), &[chunks, hh, n, d]);
        let (q, k, v) = (mk(10)?, mk(11)?, mk(12)?);
        let opts = AttnOpts::new(0.125);
        rows.push(measure(
            format!("attention {chunks} chunks x12 heads x34 tokens"),
            nt,
            o.reps,
            4.0 * (chunks * hh * n * n * d) as f64,
            &mut || drop(black_box(ops::attention(&q, &k, &v, &opts))),
            None,
        )?);
        // SAME-L: ±17 band (24 heads × 64); flops counted over the band only.
        let (n, hh) = (if o.quick { 1024 } else { 4096 }, 24usize);
        let mk = |s| tensor(randn(hh * n * d, s), &[1, hh, n, d]);
        let (q, k, v) = (mk(13)?, mk(14)?, mk(15)?);
        let opts = AttnOpts {
            window: Some((17, 17)),
            ..AttnOpts::new(0.125)
        };
        rows.push(measure(
            format!("attention band ±17, 24 heads, N={n}"),
            nt,
            o.reps,
            4.0 * (hh * n * 35 * d) as f64,
            &mut || drop(black_box(ops::attention(&q, &k, &v, &opts))),
            None,
        )?);
    }
    println!();
    println!("| op | threads | GFLOP/s | % of FMA peak | gemm crate GFLOP/s | ratio vs gemm |");
    println!("|---|---:|---:|---:|---:|---:|");
    for r in &rows {
        let pct = r
            .of_peak
            .map_or("-".to_string(), |p| format!("{:.0} %", 100.0 * p));
        let b = r.base_gflops.map_or("-".to_string(), |b| format!("{b:.1}"));
        let ratio = r.ratio.map_or("-".to_string(), |x| format!("{x:.2}x"));
        println!(
            "| {} | {} | {:.1} | {} | {} | {} |",
            r.what, r.threads, r.gflops, pct, b, ratio
        );
    }
    if let (false, Some(p)) = (avx2_rows.is_empty(), p256) {
        println!();
        println!("| AVX2 path | threads | GFLOP/s | % of the 256-bit FMA peak |");
        println!("|---|---:|---:|---:|");
        for r in &avx2_rows {
            println!(
                "| {} | {} | {:.1} | {:.0} % |",
                r.what,
                r.threads,
                r.gflops,
                100.0 * r.gflops / p
            );
        }
    }
    narrow(o.reps, o.quick, p512.or(p256))
}

/// The int8 and tile-unit sections, against the one-core f32 FMA peak `f32_peak`.
fn narrow(reps: usize, quick: bool, f32_peak: Option<f64>) -> Result<(), String> {
    crate::bench_core_int8::run(reps, quick, f32_peak)?;
    #[cfg(target_arch = "x86_64")]
    crate::bench_core_tiles::run(reps, quick, f32_peak)?;
    Ok(())
}
