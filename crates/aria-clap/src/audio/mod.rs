//! The audio tower: HTSAT (a Swin transformer over the log-mel image), as `transformers`'
//! `ClapAudioModel` computes it.
//!
//! The path: BatchNorm over the mel bins → the time axis stretched to `spec_size·freq_ratio`
//! frames (bicubic, `align_corners=True`) when shorter → the `freq_ratio` time chunks stacked
//! into a square `spec_size × spec_size` image → patch embedding (for fused models, the three
//! local crops blended in by attentional feature fusion for the clips marked longer) → Swin
//! stages (shifted windows, patch merging) → LayerNorm → the mean over all tokens, which is the
//! pooled output the audio projection reads.

mod fusion;
mod image;
mod swin;

use aria_core::ops;
use aria_core::{DType, Tensor, WeightLoader};

use crate::{AudioConfig, ClapError, Result};

use crate::layers::LayerNorm as Norm;

/// A receiver of named boundary tensors.
type TraceFn<'a> = dyn FnMut(&str, &Tensor) -> Result<()> + 'a;

/// The receiver of a traced forward's boundaries; `None` computes nothing extra.
struct Tracer<'a>(Option<&'a mut TraceFn<'a>>);

impl Tracer<'_> {
    /// Hand `make()` to the receiver under `name` (`make` runs only when there is one).
    fn emit(&mut self, name: &str, make: impl FnOnce() -> Result<Tensor>) -> Result<()> {
        match &mut self.0 {
            Some(f) => f(name, &make()?),
            None => Ok(()),
        }
    }
}

/// What [`AudioTower::forward`] returns.
#[derive(Debug, Clone)]
pub struct AudioOutput {
    /// The mean of the final token states, `[B, hidden]` (what the audio projection reads).
    pub pooler: Tensor,
    /// The final token states in the reference's layout `[B, hidden, Hf/R, R·Wf]`: the `Hf × Wf`
    /// token grid with its `R = freq_ratio` row groups laid side by side along the last axis.
    pub last_hidden_state: Tensor,
}

/// The HTSAT audio tower of CLAP.
#[derive(Debug)]
pub struct AudioTower {
    cfg: AudioConfig,
    mel_norm: image::MelNorm,
    embed: fusion::PatchEmbed,
    stages: Vec<swin::Stage>,
    norm: Norm,
    /// Side of the final token grid.
    last_res: usize,
}

impl AudioTower {
    /// Load from a loader rooted at the checkpoint's `audio_model.` prefix
    /// (`audio_encoder.batch_norm.*`, `audio_encoder.patch_embed.*`,
    /// `audio_encoder.layers.{i}.*`, `audio_encoder.norm.*`).
    pub fn load(vb: &WeightLoader, cfg: &AudioConfig) -> Result<Self> {
        let bad = |r: String| Err(ClapError::config("audio_config", r));
        let p = cfg.patch_size;
        if cfg.patch_stride.len() != 2 || cfg.patch_stride.iter().any(|&s| s != p) {
            return bad(format!(
                "only patch_stride equal to patch_size is supported (patch_size {p}, patch_stride {:?})",
                cfg.patch_stride
            ));
        }
        if !cfg.flatten_patch_embeds {
            return bad("flatten_patch_embeds false is not supported".into());
        }
        if cfg.depths.is_empty()
            || cfg.depths.len() != cfg.num_attention_heads.len()
            || p == 0
            || cfg.window_size == 0
            || cfg.num_mel_bins == 0
            || !cfg.spec_size.is_multiple_of(cfg.num_mel_bins.max(1))
            || cfg.spec_size < p
        {
            return bad(format!(
                "unusable geometry: spec_size {}, num_mel_bins {}, patch_size {p}, window_size {}, depths {:?}, heads {:?}",
                cfg.spec_size, cfg.num_mel_bins, cfg.window_size, cfg.depths, cfg.num_attention_heads
            ));
        }
        let enc = vb.pp("audio_encoder");
        let n = cfg.depths.len();
        let mut res = cfg.spec_size / p;
        let mut stages = Vec::with_capacity(n);
        for i in 0..n {
            let dim = cfg.patch_embeds_hidden_size << i;
            let heads = cfg.num_attention_heads[i];
            if heads == 0 || !dim.is_multiple_of(heads) {
                return bad(format!(
                    "stage {i} width {dim} is not a multiple of its {heads} heads"
                ));
            }
            let spec = swin::StageSpec {
                res,
                dim,
                depth: cfg.depths[i],
                heads,
                merge: i + 1 < n,
            };
            stages.push(swin::Stage::load(
                &enc.pp(format!("layers.{i}")),
                cfg,
                &spec,
            )?);
            if i + 1 < n {
                res /= 2;
            }
        }
        let hidden = cfg.patch_embeds_hidden_size << (n - 1);
        if hidden != cfg.hidden_size {
            return bad(format!(
                "hidden_size {} is not patch_embeds_hidden_size × 2^(stages − 1) = {hidden}",
                cfg.hidden_size
            ));
        }
        // The reference groups the final grid rows by `freq_ratio`; it needs whole groups.
        let ratio = cfg.spec_size / cfg.num_mel_bins;
        let group = res / ratio;
        if group == 0 || !res.is_multiple_of(group) {
            return bad(format!(
                "the final {res}×{res} token grid cannot be grouped by freq_ratio {ratio}"
            ));
        }
        Ok(AudioTower {
            mel_norm: image::MelNorm::load(&enc.pp("batch_norm"), cfg.num_mel_bins)?,
            embed: fusion::PatchEmbed::load(&enc.pp("patch_embed"), cfg)?,
            stages,
            // The reference's final norm is a plain `nn.LayerNorm` (eps 1e-5).
            norm: Norm::load(&enc.pp("norm"), hidden, 1e-5)?,
            last_res: res,
            cfg: cfg.clone(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &AudioConfig {
        &self.cfg
    }

    /// The input channels `forward` takes: 4 for fused models (the whole clip, then three
    /// local crops), `patch_embed_input_channels` (1) otherwise.
    pub fn input_channels(&self) -> usize {
        if self.cfg.enable_fusion {
            4
        } else {
            self.cfg.patch_embed_input_channels
        }
    }

    /// The most frames the tower takes (`spec_size · freq_ratio`); shorter inputs are stretched
    /// to it.
    pub fn max_frames(&self) -> usize {
        self.cfg.spec_size * (self.cfg.spec_size / self.cfg.num_mel_bins)
    }

    /// Pack the Swin stages' linear layers as bf16 panels (see [`crate::Precision::Bf16Dot`];
    /// the patch embedding and the fusion block stay f32: a few percent of the work).
    pub fn pack_bf16(&mut self) -> Result<()> {
        for s in &mut self.stages {
            s.pack_bf16()?;
        }
        Ok(())
    }

    /// Run the tower on log-mel features `[B, C, T, F]` (f32; `C` = [`Self::input_channels`],
    /// `F` = `num_mel_bins`, `1 ≤ T ≤` [`Self::max_frames`]). `is_longer` (empty, or one flag per
    /// item) marks the clips whose local crops a fused model blends in; unfused models ignore it.
    pub fn forward(&self, input_features: &Tensor, is_longer: &[bool]) -> Result<AudioOutput> {
        self.run(input_features, is_longer, Tracer(None))
    }

    /// [`AudioTower::forward`], handing each boundary to `trace` as it is computed, in the
    /// reference's layouts:
    /// - `audio.mel2img` `[B, C, S, S]`: the image after the mel BatchNorm, the stretch and the
    ///   fold (`S = spec_size`);
    /// - fused models with longer clips only: `audio.patch_embed.mel_conv2d` `[3n, C0, Ho, Wl]`
    ///   (the wide convolution of the `n` longer items' crops) and `audio.patch_embed.fusion`
    ///   `[n, C0, Ho, Wo]` (the fused maps of those items);
    /// - `audio.patch_embed` `[B, N0, C0]`;
    /// - per stage `i`: `audio.layer{i}.pre_down` (before the patch merging) and `audio.layer{i}`
    ///   (after it; the same tensor for the last stage);
    /// - `audio.norm` `[B, N, hidden]`, `audio.last_hidden_state`, `audio.pooler`.
    pub fn forward_traced(
        &self,
        input_features: &Tensor,
        is_longer: &[bool],
        trace: &mut dyn FnMut(&str, &Tensor) -> Result<()>,
    ) -> Result<AudioOutput> {
        self.run(input_features, is_longer, Tracer(Some(trace)))
    }

    fn run(&self, x: &Tensor, is_longer: &[bool], mut trace: Tracer<'_>) -> Result<AudioOutput> {
        let s = x.shape();
        let (c, f) = (self.input_channels(), self.cfg.num_mel_bins);
        let bad_shape = |expected: Vec<usize>| ClapError::Shape {
            what: "audio input_features [B, C, T, F]".into(),
            expected,
            got: s.to_vec(),
        };
        let &[b, cx, t, fx] = s else {
            return Err(bad_shape(vec![1, c, self.max_frames(), f]));
        };
        if cx != c || fx != f || b == 0 || t == 0 || t > self.max_frames() {
            return Err(bad_shape(vec![
                b.max(1),
                c,
                t.clamp(1, self.max_frames()),
                f,
            ]));
        }
        if x.dtype() != DType::F32 {
            return Err(ClapError::invalid(
                "audio input_features",
                format!("must be f32, got {}", x.dtype()),
            ));
        }
        if !is_longer.is_empty() && is_longer.len() != b {
            return Err(ClapError::Shape {
                what: "audio is_longer".into(),
                expected: vec![b],
                got: vec![is_longer.len()],
            });
        }
        let ratio = self.cfg.spec_size / self.cfg.num_mel_bins;
        let normed = self.mel_norm.forward(x)?;
        let img = image::mel_to_image(&normed, self.max_frames(), ratio)?;
        trace.emit("audio.mel2img", || Ok(img.clone()))?;
        let mut h = self.embed.forward(&img, is_longer, &mut trace)?;
        trace.emit("audio.patch_embed", || Ok(h.clone()))?;
        for (i, stage) in self.stages.iter().enumerate() {
            let (out, pre) = stage.forward(&h)?;
            trace.emit(&format!("audio.layer{i}.pre_down"), || Ok(pre))?;
            trace.emit(&format!("audio.layer{i}"), || Ok(out.clone()))?;
            h = out;
        }
        let last = self.norm.forward(&h)?;
        trace.emit("audio.norm", || Ok(last.clone()))?;
        let (n, hidden) = (last.dim(1)?, last.dim(2)?);
        // Grid rows h = g·group + i (g < ratio): [B, g, i, w, C] → [B, C, i, g, w].
        let r = self.last_res;
        let group = r / ratio;
        let last_hidden_state = last
            .reshape(&[b, r / group, group, r, hidden])?
            .permute(&[0, 4, 2, 1, 3])?
            .contiguous()?
            .reshape(&[b, hidden, group, (r / group) * r])?;
        trace.emit("audio.last_hidden_state", || Ok(last_hidden_state.clone()))?;
        let ones = Tensor::full(&[b, 1, n], 1.0);
        let pooler = ops::div(&ops::matmul(&ones, &last)?, &Tensor::full(&[1], n as f32))?
            .reshape(&[b, hidden])?;
        trace.emit("audio.pooler", || Ok(pooler.clone()))?;
        Ok(AudioOutput {
            pooler,
            last_hidden_state,
        })
    }
}
