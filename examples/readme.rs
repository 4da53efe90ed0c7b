//! The library example of the README, kept equal to it by a test (`cli.rs`).
//!
//! ```text
//! cargo run --release -p aria-cli --example readme
//! ```
// README:begin
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};

fn run() -> aria::Result<()> {
    aria::retain_freed_memory(); // keep freed buffers for the next op (see below)
                                 // The tiny random-weight model of `aria demo` (its output is noise). For real audio:
                                 // aria::discover::resolve_model("small-music", &aria::discover::SearchPaths::from_env())?
    let files = aria::synth::tiny_model(&std::env::temp_dir().join("aria-tiny"))?;
    let pipe = Pipeline::load(&files, &LoadOptions::default())?;
    let req = GenerateRequest::new("warm ambient pad", 2.0);
    let out = pipe.run(&req, &mut TorchNoise::new(42), Default::default())?;
    let samples: Vec<f32> = out.audio.to_vec_f32()?; // [2, n], channel by channel, 44.1 kHz
    println!("{} samples per channel", samples.len() / 2);
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}"); // the message, not the enum's debug form
        std::process::exit(1);
    }
}
// README:end
