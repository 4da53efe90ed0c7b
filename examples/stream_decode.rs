//! Streaming: hand the audio to a callback chunk by chunk while it is decoded (memory bounded
//! by one decode window whatever the duration; the chunks concatenate to the bytes of a whole
//! decode). Here the callback writes raw little-endian f32 stereo to a file and reports the
//! level of each chunk.
//!
//! ```text
//! cargo run --release -p aria-cli --example stream_decode -- [MODEL] [SECONDS]
//! ```

use std::io::Write;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioChunk, AudioOutput, RunOptions};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};

fn main() -> aria::Result<()> {
    let mut args = std::env::args().skip(1);
    let model = match args.next().filter(|m| m != "-") {
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
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let pipe = Pipeline::load(
        &resolve_model(&model, &SearchPaths::from_env())?,
        &LoadOptions::default(),
    )?;

    let path = std::env::temp_dir().join("aria-stream.f32");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(&path).map_err(|e| aria::Error::io(&path, e))?,
    );
    let mut on_chunk = |c: &AudioChunk<'_>| -> aria::Result<()> {
        let v = c.audio.to_vec_f32()?; // [1, 2, n]
        let n = v.len() / 2;
        let rms = (v.iter().map(|x| x * x).sum::<f32>() / v.len().max(1) as f32).sqrt();
        eprintln!(
            "samples {:>8}..{:>8} of {}: rms {rms:.4}",
            c.start,
            c.start + n,
            c.total
        );
        for i in 0..n {
            for ch in 0..2 {
                file.write_all(&v[ch * n + i].to_le_bytes())
                    .map_err(|e| aria::Error::io(&path, e))?;
            }
        }
        Ok(())
    };
    let opts = RunOptions {
        audio: AudioOutput::Stream(&mut on_chunk),
        ..Default::default()
    };
    pipe.run(
        &GenerateRequest::new("rain on a tin roof", seconds),
        &mut TorchNoise::new(7),
        opts,
    )?;
    println!("wrote {}", path.display());
    Ok(())
}
