//! The research / serving API of [`aria::Pipeline`] on a tiny random-weight model (no fixtures
//! needed): warm start, latent inputs, streamed decoding with the bytes of a whole decode,
//! cancellation, hooks and LoRA strengths.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use aria::discover::{resolve_model, SearchPaths};
use aria::noise::RecordingNoise;
use aria::pipeline::{
    AudioChunk, AudioOutput, InitAudio, InitLatents, RunOptions, SameNoise, WarmStart,
};
use aria::synth::{self, Preset};
use aria::{
    AudioClip, CancelToken, Error, Event, GenerateRequest, LoadOptions, Pipeline, ReplayNoise,
    TorchNoise,
};
use aria_core::hooks::{ActivationHook, HookContext, HookSite};
use aria_core::{DType, Tensor};
use aria_testing::{SharedTempDir, TempDir};

/// The tiny model, shared by the tests of this binary that run at the same time (removed when
/// the last of them finishes).
fn model_dir() -> Arc<TempDir> {
    static DIR: SharedTempDir = SharedTempDir::new("api-model");
    DIR.get(|d| {
        synth::write_model(d, Preset::Tiny, DType::F32, 3, &mut |_, _| {}).unwrap();
    })
}

/// A pipeline of the tiny model, and the model's folder: keep it while the pipeline runs.
fn pipe(opts: &LoadOptions) -> (Pipeline, Arc<TempDir>) {
    let model = model_dir();
    let files = resolve_model(&model.display().to_string(), &SearchPaths::default()).unwrap();
    (Pipeline::load(&files, opts).unwrap(), model)
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

fn req(seconds: f64) -> GenerateRequest {
    let mut r = GenerateRequest::new("soft rain on a window", seconds);
    r.steps = 4;
    r
}

#[test]
fn warm_start_at_step_zero_is_a_cold_generation_bit_for_bit() {
    let (p, _model) = pipe(&LoadOptions::default());
    let r = req(0.5);
    let cold = p
        .run(&r, &mut TorchNoise::new(9), RunOptions::default())
        .unwrap();
    // Any clean latents: at σ = 1 they do not enter.
    let mut warm = r.clone();
    warm.warm_start = Some(WarmStart {
        latents: cold.latents.clone(),
        start_step: 0,
    });
    let w = p
        .run(&warm, &mut TorchNoise::new(9), RunOptions::default())
        .unwrap();
    assert_eq!(bits(&w.latents), bits(&cold.latents));
    assert_eq!(bits(&w.audio), bits(&cold.audio));
    assert_eq!(w.timings.steps.len(), 4);

    // From step 2 only two steps run; from the last step the latents come back unchanged.
    let mut steps = 0;
    let mut count = |e: &Event| steps += usize::from(matches!(e, Event::Step { .. }));
    warm.warm_start = Some(WarmStart {
        latents: cold.latents.clone(),
        start_step: 2,
    });
    let opts = RunOptions {
        progress: Some(&mut count),
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let w2 = p.run(&warm, &mut TorchNoise::new(9), opts).unwrap();
    assert_eq!(steps, 2);
    assert_ne!(bits(&w2.latents), bits(&cold.latents));
    assert_eq!(w2.audio.shape()[1], 0, "latents only");
    warm.warm_start = Some(WarmStart {
        latents: cold.latents.clone(),
        start_step: 4,
    });
    let w4 = p
        .run(
            &warm,
            &mut TorchNoise::new(9),
            RunOptions {
                audio: AudioOutput::Skip,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(bits(&w4.latents), bits(&cold.latents));

    // Wrong shapes and steps are named.
    warm.warm_start = Some(WarmStart {
        latents: Tensor::zeros(&[1, 3, 2], DType::F32),
        start_step: 1,
    });
    let e = p.run(&warm, &mut TorchNoise::new(9), RunOptions::default());
    assert!(e.unwrap_err().to_string().contains("[1, 3, 2]"));
    warm.warm_start = Some(WarmStart {
        latents: cold.latents.clone(),
        start_step: 5,
    });
    assert!(p
        .run(&warm, &mut TorchNoise::new(9), RunOptions::default())
        .is_err());
}

/// The streamed chunks tile the output and concatenate to the gathered tensor, which is what
/// the whole-sequence path produced before: `Autoencoder::decode_chunked` with the same draws,
/// then zero past the valid latents, clamp and crop.
#[test]
fn streamed_decode_has_the_bytes_of_the_whole_decode() {
    let (p, _model) = pipe(&LoadOptions::default());
    assert!(p.chunked_decode());
    let mut r = req(20.0);
    r.steps = 2;
    r.duration_padding_sec = 1.0; // 228 latents: windows at 0, 96 and 100
    let mut rec_noise = TorchNoise::new(4);
    let mut rec = RecordingNoise::new(&mut rec_noise);
    let gathered = p.run(&r, &mut rec, RunOptions::default()).unwrap();
    let draws: Vec<Tensor> = rec.draws().iter().map(|d| d.1.clone()).collect();
    let t = gathered.latents.shape()[2];
    assert!(t > 200, "{t} latents");

    let mut chunks: Vec<(usize, usize, Vec<f32>)> = Vec::new();
    let mut sink = |c: &AudioChunk<'_>| -> aria::Result<()> {
        chunks.push((c.start, c.total, c.audio.to_vec_f32()?));
        Ok(())
    };
    let opts = RunOptions {
        audio: AudioOutput::Stream(&mut sink),
        ..Default::default()
    };
    let streamed = p.run(&r, &mut TorchNoise::new(4), opts).unwrap();
    assert_eq!(bits(&streamed.latents), bits(&gathered.latents));
    assert_eq!(streamed.audio.shape(), &[2, 0]);
    assert!(chunks.len() >= 3, "{} chunks", chunks.len());
    // Chunks are [1, 2, n]: rebuild [2, total].
    let total = chunks[0].1;
    let mut rebuilt = vec![0f32; 2 * total];
    let mut at = 0;
    for (start, tot, v) in &chunks {
        assert_eq!((*start, *tot), (at, total));
        let n = v.len() / 2;
        for ch in 0..2 {
            rebuilt[ch * total + at..ch * total + at + n].copy_from_slice(&v[ch * n..(ch + 1) * n]);
        }
        at += n;
    }
    assert_eq!(at, total);
    let g: Vec<u32> = gathered
        .audio
        .to_vec_f32()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(rebuilt.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), g);

    // The previous whole-sequence path, with the recorded decoder draws.
    let decoder_draws = draws[1 + r.steps..].to_vec();
    let mut replay = ReplayNoise::new(decoder_draws);
    let raw = p
        .autoencoder()
        .decode_chunked(&gathered.latents, Some(&mut replay))
        .unwrap();
    let raw = raw.to_vec_f32().unwrap();
    let len = raw.len() / 2;
    let ratio = p.geometry().downsampling_ratio;
    let valid = gathered.lengths.valid;
    let out_len = gathered.lengths.output_samples;
    let mut old = Vec::new();
    for ch in 0..2 {
        for i in 0..out_len {
            let m = if i / ratio < valid { 1.0 } else { 0.0 };
            old.push((raw[ch * len + i] * m).clamp(-1.0, 1.0).to_bits());
        }
    }
    assert_eq!(old, g);
}

/// Without stochastic decoder terms an unchunked decode streams through `StreamingDecoder`:
/// same bytes as one whole `Autoencoder::decode`.
#[test]
fn unchunked_streaming_matches_a_whole_decode() {
    let (p, _model) = pipe(&LoadOptions {
        chunked_decode: Some(false),
        same_noise: Some(SameNoise::OFF),
        ..Default::default()
    });
    let mut r = req(12.0);
    r.steps = 1;
    r.duration_padding_sec = 1.0;
    let mut n = 0;
    let mut sink = |_: &AudioChunk<'_>| -> aria::Result<()> {
        n += 1;
        Ok(())
    };
    let opts = RunOptions {
        audio: AudioOutput::Stream(&mut sink),
        ..Default::default()
    };
    p.run(&r, &mut TorchNoise::new(1), opts).unwrap();
    assert!(n >= 2, "{n} chunks");
    let out = p
        .run(&r, &mut TorchNoise::new(1), RunOptions::default())
        .unwrap();
    let whole = p.autoencoder().decode(&out.latents, None).unwrap();
    let whole = whole.to_vec_f32().unwrap();
    let len = whole.len() / 2;
    let got = out.audio.to_vec_f32().unwrap();
    let k = got.len() / 2;
    let valid = out.lengths.valid * p.geometry().downsampling_ratio;
    for ch in 0..2 {
        for i in 0..k {
            let m = if i < valid { 1.0 } else { 0.0 };
            let want = (whole[ch * len + i] * m).clamp(-1.0, 1.0);
            assert_eq!(
                got[ch * k + i].to_bits(),
                want.to_bits(),
                "ch {ch} sample {i}"
            );
        }
    }
    // decode_latents (used by `aria decode`) gives the same bytes through the same path.
    let d = p
        .decode_latents(&out.latents, &mut TorchNoise::new(1))
        .unwrap();
    let d = d.to_vec_f32().unwrap();
    assert_eq!(d.len(), whole.len());
    assert!(d
        .iter()
        .zip(&whole)
        .all(|(a, b)| a.to_bits() == b.clamp(-1.0, 1.0).to_bits()));
}

#[test]
fn cancel_token_stops_at_the_next_step() {
    let (p, _model) = pipe(&LoadOptions::default());
    let cancel = CancelToken::new();
    let mut steps = 0;
    let c2 = cancel.clone();
    let mut progress = |e: &Event| {
        if let Event::Step { index, .. } = e {
            steps += 1;
            if *index == 1 {
                c2.cancel();
            }
        }
    };
    let opts = RunOptions {
        cancel: Some(cancel.clone()),
        progress: Some(&mut progress),
        ..Default::default()
    };
    let r = p.run(&req(0.5), &mut TorchNoise::new(1), opts);
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    assert_eq!(steps, 2);
    // A token cancelled before the run stops it after the text stage.
    let opts = RunOptions {
        cancel: Some(cancel),
        ..Default::default()
    };
    assert!(matches!(
        p.run(&req(0.5), &mut TorchNoise::new(1), opts),
        Err(Error::Cancelled)
    ));
}

/// Counts the sites it sees and optionally scales the sampler state.
struct Probe {
    residual: AtomicUsize,
    latent: AtomicUsize,
    text: AtomicUsize,
    scale: Option<f32>,
}

impl ActivationHook for Probe {
    fn on_activation(
        &self,
        ctx: &HookContext<'_>,
        x: &Tensor,
    ) -> aria_core::Result<Option<Tensor>> {
        match ctx.site {
            HookSite::Residual(_) => self.residual.fetch_add(1, Ordering::Relaxed),
            HookSite::Latent => self.latent.fetch_add(1, Ordering::Relaxed),
            HookSite::TextConditioning => self.text.fetch_add(1, Ordering::Relaxed),
        };
        match (ctx.site, self.scale) {
            (HookSite::Latent, Some(s)) => Ok(Some(aria_core::ops::map(x, |v| v * s)?)),
            _ => Ok(None),
        }
    }
}

#[test]
fn hooks_see_every_site_and_can_change_the_result() {
    let (p, _model) = pipe(&LoadOptions::default());
    let r = req(0.5);
    let plain = p
        .run(
            &r,
            &mut TorchNoise::new(2),
            RunOptions {
                audio: AudioOutput::Skip,
                ..Default::default()
            },
        )
        .unwrap();
    let probe = Probe {
        residual: AtomicUsize::new(0),
        latent: AtomicUsize::new(0),
        text: AtomicUsize::new(0),
        scale: None,
    };
    let opts = RunOptions {
        hook: Some(&probe),
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let observed = p.run(&r, &mut TorchNoise::new(2), opts).unwrap();
    assert_eq!(
        bits(&observed.latents),
        bits(&plain.latents),
        "observing changes nothing"
    );
    let depth = p.config().model.diffusion.config.depth;
    assert_eq!(probe.residual.load(Ordering::Relaxed), depth * r.steps);
    assert_eq!(probe.latent.load(Ordering::Relaxed), r.steps);
    assert!(probe.text.load(Ordering::Relaxed) >= 1);
    let scaler = Probe {
        scale: Some(0.5),
        ..probe
    };
    let opts = RunOptions {
        hook: Some(&scaler),
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let changed = p.run(&r, &mut TorchNoise::new(2), opts).unwrap();
    assert_ne!(bits(&changed.latents), bits(&plain.latents));
}

/// Audio-to-audio from latents equals audio-to-audio from the clip those latents encode.
#[test]
fn init_latents_match_init_audio() {
    let (p, _model) = pipe(&LoadOptions {
        same_noise: Some(SameNoise::OFF),
        ..Default::default()
    });
    let r = req(0.5);
    let lengths = p.lengths(r.seconds, r.duration_padding_sec);
    let n = lengths.samples;
    let v: Vec<f32> = (0..2 * n)
        .map(|i| ((i % 97) as f32 / 97.0 - 0.5) * 0.4)
        .collect();
    let clip = AudioClip {
        data: Tensor::from_vec(v, &[2, n]).unwrap(),
        sample_rate: p.sample_rate(),
    };
    let z = p.encode_audio(&clip, &mut TorchNoise::new(0)).unwrap();
    assert_eq!(z.shape(), &[1, p.latent_channels(), lengths.latents]);
    let mut a = r.clone();
    a.init_audio = Some(InitAudio {
        clip,
        noise_level: 0.6,
    });
    let mut b = r.clone();
    b.init_latents = Some(InitLatents {
        latents: z,
        noise_level: 0.6,
    });
    let skip = || RunOptions {
        audio: AudioOutput::Skip,
        ..Default::default()
    };
    let xa = p.run(&a, &mut TorchNoise::new(5), skip()).unwrap();
    let xb = p.run(&b, &mut TorchNoise::new(5), skip()).unwrap();
    assert_eq!(bits(&xa.latents), bits(&xb.latents));
    b.warm_start = Some(WarmStart {
        latents: xa.latents.clone(),
        start_step: 1,
    });
    assert!(
        p.run(&b, &mut TorchNoise::new(5), skip()).is_err(),
        "exclusive"
    );
}
