//! Shared helpers of the aria-steer integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioOutput, GenerateRequest, LoadOptions, Pipeline, Precision, RunOptions};
use aria::{NoiseSource, ReplayNoise};
use aria_core::hooks::ActivationHook;
use aria_core::Tensor;
use aria_testing::fixtures::fixture;

/// The fixture pipeline with the f32 text encoder the steering fixture documents.
pub fn pipeline(folder: &str) -> Option<(Pipeline, PathBuf)> {
    let dir = fixture(folder)?;
    let steer = fixture(&format!("{folder}/steer.safetensors"))?;
    let files = resolve_model(&dir.display().to_string(), &SearchPaths::default()).unwrap();
    let opts = LoadOptions {
        text_precision: Some(Precision::F32),
        ..Default::default()
    };
    Some((Pipeline::load(&files, &opts).unwrap(), steer))
}

/// The steering fixture's call: `warm ambient pad`, 0.1 s + 0.1 s headroom, 8 steps.
pub fn request() -> GenerateRequest {
    let mut req = GenerateRequest::new("warm ambient pad", 0.1);
    req.duration_padding_sec = 0.1;
    req
}

/// Run the fixture call with the recorded draws and `hook`; latents only unless `audio`.
pub fn run(
    pipe: &Pipeline,
    steer: &Path,
    hook: Option<&dyn ActivationHook>,
    audio: bool,
) -> (Tensor, Tensor) {
    let mut noise = ReplayNoise::open(steer, "").unwrap();
    let out = pipe
        .run(
            &request(),
            &mut noise as &mut dyn NoiseSource,
            RunOptions {
                hook,
                audio: if audio {
                    AudioOutput::Tensor
                } else {
                    AudioOutput::Skip
                },
                ..Default::default()
            },
        )
        .unwrap();
    (out.latents, out.audio)
}
