//! `cargo xtask <task>`: development tasks (benchmarks, random real-shape checkpoints).
//!
//! Each task lives in its own module; `main` only dispatches.

use std::process::ExitCode;

mod bench_cache;
mod bench_clap;
mod bench_codec;
mod bench_core;
mod bench_core_int8;
#[cfg(target_arch = "x86_64")]
mod bench_core_tiles;
mod bench_dit;
mod bench_e2e;
mod bench_index;
mod bench_official;
mod bench_quant;
mod bench_serve;
mod bench_steer;
mod bench_text;
mod cuda_check;
mod fidelity;
mod quant_clap;
mod synth;

/// This program, for re-running itself as a measurement child. On Linux `/proc/self/exe`
/// still names the running image after a rebuild replaced the file on disk (long benches
/// would otherwise fail to spawn their children half-way).
pub(crate) fn self_exe() -> std::io::Result<std::path::PathBuf> {
    let proc_exe = std::path::Path::new("/proc/self/exe");
    if proc_exe.exists() {
        return Ok(proc_exe.to_path_buf());
    }
    std::env::current_exe()
}

fn usage() -> &'static str {
    "usage: cargo xtask <task>\n\
     tasks:\n\
     \x20 bench core|text|dit|codec|e2e [options]   run a benchmark\n\
     \x20 bench steer [--reps N] [--preset tiny]     DiT forward with and without steering\n\
     \x20 bench index [--sizes A,B] [options]       vector indexes on MiniLM caption embeddings\n\
     \x20 bench cache [--requests N] [options]      replay AudioCaps prompts through the warm-start cache\n\
     \x20 bench official [--ref-dir DIR] [options]  the official code and aria side by side\n\
     \x20 bench quant [--model DIR] [options]       quantized DiT: peak RSS, speed, quality\n\
     \x20 bench serve [--jobs N] [options]          resident server against one CLI process per job\n\
     \x20 bench clap [--model DIR] [--ref-python PY] CLAP embedding: aria against transformers\n\
     \x20 synth-model --preset small-music|small-sfx|medium --dtype f32|f16 --out DIR\n\
     \x20                                            write a random real-shape checkpoint\n\
     \x20 synth-model --clap htsat-unfused|htsat-fused|larger-music|tiny --out DIR [--tokenizer DIR]\n\
     \x20                                            the same for CLAP (the LAION releases' shapes)\n\
     \x20 fidelity --model DIR --cases FILE          compare with official reference outputs\n\
     \x20 cuda-check [--skip-tests] [options]        CUDA backend: build, parity, timing (GPU)"
}

fn main() -> ExitCode {
    // As the `aria` program does: freed activations are kept for the next op.
    aria_core::alloc::retain_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = |n: usize| args.get(n..).unwrap_or(&[]).to_vec();
    let res: Result<(), String> = match args.first().map(String::as_str) {
        Some("bench") => match args.get(1).map(String::as_str) {
            Some("core") => bench_core::run(&rest(2)),
            Some("text") => bench_text::run(&rest(2)),
            Some("dit") => bench_dit::run(&rest(2)),
            Some("codec") => bench_codec::run(&rest(2)),
            Some("e2e") => bench_e2e::run(&rest(2)),
            Some("index") => bench_index::run(&rest(2)),
            Some("official") => bench_official::run(&rest(2)),
            Some("quant") => bench_quant::run(&rest(2)),
            Some("steer") => bench_steer::run(&rest(2)),
            Some("cache") => bench_cache::run(&rest(2)),
            Some("clap") => bench_clap::run(&rest(2)),
            Some("serve") => bench_serve::run(&rest(2)),
            Some(other) => Err(format!("unknown benchmark `{other}`\n{}", usage())),
            None => Err(usage().to_string()),
        },
        Some("synth-model") => synth::run(&rest(1)),
        Some("fidelity") => fidelity::run(&rest(1)),
        Some("cuda-check") => cuda_check::run(&rest(1)),
        _ => Err(usage().to_string()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
