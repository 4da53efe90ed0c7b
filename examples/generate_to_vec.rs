//! Embed generation in an application: text in, interleaved stereo `Vec<f32>` out.
//!
//! ```text
//! cargo run --release -p aria-cli --example generate_to_vec -- [MODEL] [PROMPT]
//! ```
//! Without MODEL a tiny random-weight model is written to a temporary folder (its output is
//! noise, but every stage runs).

use aria::discover::{resolve_model, SearchPaths};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};

fn main() -> aria::Result<()> {
    // Every op allocates its output: keep freed memory for the next one (process-wide, so the
    // library leaves it to the program).
    aria::retain_freed_memory();
    let mut args = std::env::args().skip(1);
    let model = match args.next() {
        Some(m) => m,
        None => {
            let dir = std::env::temp_dir().join("aria-example-tiny");
            aria::synth::write_model(
                &dir,
                aria::synth::Preset::Tiny,
                aria_core::DType::F32,
                0,
                &mut |_, _| {},
            )?;
            dir.display().to_string()
        }
    };
    let prompt = args.next().unwrap_or_else(|| "warm ambient pad".into());

    let pipe = Pipeline::load(
        &resolve_model(&model, &SearchPaths::from_env())?,
        &LoadOptions::default(),
    )?;
    let out = pipe.run(
        &GenerateRequest::new(prompt, 2.0),
        &mut TorchNoise::new(42),
        Default::default(),
    )?;

    // `out.audio` is [channels, n], channel-major; interleave it the way most audio APIs want.
    let (ch, n) = (out.audio.shape()[0], out.audio.shape()[1]);
    let planar = out.audio.to_vec_f32()?;
    let interleaved: Vec<f32> = (0..n)
        .flat_map(|i| (0..ch).map(move |c| (c, i)))
        .map(|(c, i)| planar[c * n + i])
        .collect();
    println!("{} samples × {ch} channels at {} Hz", n, pipe.sample_rate());
    println!(
        "first frames: {:?}",
        &interleaved[..interleaved.len().min(8)]
    );
    Ok(())
}
