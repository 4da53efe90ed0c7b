//! A custom activation hook: observe the DiT's residual stream after every block and step (mean
//! token norm), and scale the sampler state by a small factor after each step. A hook sees a
//! tensor and may return a replacement; returning `None` leaves the run bit-identical.
//!
//! ```text
//! cargo run --release -p aria-cli --example custom_hook -- [MODEL]
//! ```

use std::sync::Mutex;

use aria::discover::{resolve_model, SearchPaths};
use aria::pipeline::{AudioOutput, RunOptions};
use aria::{GenerateRequest, LoadOptions, Pipeline, TorchNoise};
use aria_core::hooks::{mean_token_norm, ActivationHook, HookContext, HookSite};
use aria_core::Tensor;

/// Records `(step, block, mean token norm)` and damps the state by `damp` after each step.
struct NormProbe {
    seen: Mutex<Vec<(usize, usize, f32)>>,
    damp: f32,
}

impl ActivationHook for NormProbe {
    fn wants(&self, site: HookSite) -> bool {
        matches!(site, HookSite::Residual(_) | HookSite::Latent)
    }

    fn on_activation(
        &self,
        ctx: &HookContext<'_>,
        x: &Tensor,
    ) -> aria_core::Result<Option<Tensor>> {
        match ctx.site {
            HookSite::Residual(block) => {
                // One value per batch row (the conditional rows come first under CFG).
                let norm = mean_token_norm(x, ctx)?.first().copied().unwrap_or(0.0);
                if let Ok(mut seen) = self.seen.lock() {
                    seen.push((ctx.step.unwrap_or(0), block, norm));
                }
                Ok(None)
            }
            HookSite::Latent => Ok(Some(aria_core::ops::map(x, |v| v * self.damp)?)),
            HookSite::TextConditioning => Ok(None),
        }
    }
}

fn main() -> aria::Result<()> {
    let model = match std::env::args().nth(1) {
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
    let pipe = Pipeline::load(
        &resolve_model(&model, &SearchPaths::from_env())?,
        &LoadOptions::default(),
    )?;
    let probe = NormProbe {
        seen: Mutex::new(Vec::new()),
        damp: 0.999,
    };
    let opts = RunOptions {
        hook: Some(&probe),
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let out = pipe.run(
        &GenerateRequest::new("a dog barks in the distance", 2.0),
        &mut TorchNoise::new(1),
        opts,
    )?;
    for (step, block, norm) in probe.seen.lock().map(|s| s.clone()).unwrap_or_default() {
        println!("step {step} block {block:>2}: mean residual norm {norm:.3}");
    }
    println!("latents {:?}", out.latents.shape());
    Ok(())
}
