//! `cargo xtask <task>`: development tasks (benchmarks, random real-shape checkpoints).
//!
//! Each task lives in its own module; `main` only dispatches.

use std::process::ExitCode;

fn usage() -> &'static str {
    "usage: cargo xtask <task>\n\
     tasks:\n\
     \x20 bench core|text|dit|codec|e2e   run a benchmark\n\
     \x20 synth-model --preset P --dtype D --out DIR   write a random real-shape checkpoint"
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res: Result<(), String> = match args.first().map(String::as_str) {
        Some("bench") => match args.get(1).map(String::as_str) {
            Some(other) => Err(format!("unknown benchmark `{other}`\n{}", usage())),
            None => Err(usage().to_string()),
        },
        _ => Err(usage().to_string()),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
