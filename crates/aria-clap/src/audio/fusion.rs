//! The patch embedding (`ClapAudioPatchEmbed`), with the fused models' second path: the three
//! local crops embedded by a wider convolution and blended into the global patches by
//! attentional feature fusion (`ClapAudioAFFBlock`).

use aria_core::ops;
use aria_core::{DType, Tensor, WeightLoader};

use super::image::{patchify, BatchNorm};
use super::{Norm, Tracer};
use crate::{ClapError, Result};

/// A convolution of stride = kernel as a linear map over patches.
#[derive(Debug)]
struct PatchConv {
    /// `[out, in·kh·kw]`.
    w: Tensor,
    b: Tensor,
    kh: usize,
    kw: usize,
}

impl PatchConv {
    fn load(vb: &WeightLoader, cin: usize, out: usize, kh: usize, kw: usize) -> Result<Self> {
        let w = vb.get("weight", &[out, cin, kh, kw])?;
        Ok(PatchConv {
            w: w.reshape(&[out, cin * kh * kw])?,
            b: vb.get_as("bias", &[out], DType::F32)?,
            kh,
            kw,
        })
    }

    /// `img [B, C, H, W]` → (`[B, Ho·Wo, out]`, `Ho`, `Wo`).
    fn forward(&self, img: &Tensor) -> Result<(Tensor, usize, usize)> {
        let (p, ho, wo) = patchify(img, self.kh, self.kw)?;
        Ok((ops::linear(&p, &self.w, Some(&self.b))?, ho, wo))
    }
}

/// A 1×1 convolution followed by an inference-mode BatchNorm, folded into one linear map over
/// channels (in f64, rounded once).
#[derive(Debug)]
struct ConvBn {
    w: Tensor,
    b: Tensor,
}

impl ConvBn {
    fn load(conv: &WeightLoader, bn: &WeightLoader, cin: usize, out: usize) -> Result<Self> {
        let w = conv
            .get_as("weight", &[out, cin, 1, 1], DType::F32)?
            .to_vec::<f32>()?;
        let b = conv.get_as("bias", &[out], DType::F32)?.to_vec::<f32>()?;
        let bn = BatchNorm::load(bn, out)?;
        let mut fw = Vec::with_capacity(out * cin);
        let mut fb = Vec::with_capacity(out);
        for o in 0..out {
            let s = bn.scale[o];
            fw.extend(
                w[o * cin..(o + 1) * cin]
                    .iter()
                    .map(|&v| (f64::from(v) * s) as f32),
            );
            fb.push((f64::from(b[o]) * s + bn.shift[o]) as f32);
        }
        Ok(ConvBn {
            w: Tensor::from_vec(fw, &[out, cin])?,
            b: Tensor::from_vec(fb, &[out])?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::linear(x, &self.w, Some(&self.b))?)
    }
}

/// `conv-bn → relu → conv-bn`, one branch of the fusion.
#[derive(Debug)]
struct Branch {
    down: ConvBn,
    up: ConvBn,
}

impl Branch {
    /// Layers `{first}`/`{first+1}` (conv, bn) and `{first+3}`/`{first+4}` of an
    /// `nn.Sequential` under `vb`.
    fn load(vb: &WeightLoader, first: usize, c: usize, inter: usize) -> Result<Self> {
        let l = |i: usize| vb.pp(format!("{}", first + i));
        Ok(Branch {
            down: ConvBn::load(&l(0), &l(1), c, inter)?,
            up: ConvBn::load(&l(3), &l(4), inter, c)?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = ops::map(&self.down.forward(x)?, |v| v.max(0.0))?;
        self.up.forward(&h)
    }
}

/// Attentional feature fusion of token-major `[b, N, C]` maps: a gate from a per-token branch
/// plus a pooled (global) branch, `2·x·σ + 2·r·(1 − σ)`.
#[derive(Debug)]
struct Aff {
    local: Branch,
    global: Branch,
}

impl Aff {
    fn load(vb: &WeightLoader, c: usize, r: usize) -> Result<Self> {
        let inter = c / r;
        if inter == 0 {
            return Err(ClapError::config(
                "audio_config",
                format!("aff_block_r {r} leaves no channels of {c}"),
            ));
        }
        Ok(Aff {
            local: Branch::load(&vb.pp("local_att"), 0, c, inter)?,
            // `global_att.0` is the average pooling.
            global: Branch::load(&vb.pp("global_att"), 1, c, inter)?,
        })
    }

    fn forward(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        let (b, n) = (x.dim(0)?, x.dim(1)?);
        let a = ops::add(x, residual)?;
        let ones = Tensor::full(&[b, 1, n], 1.0);
        let mean = ops::div(&ops::matmul(&ones, &a)?, &Tensor::full(&[1], n as f32))?;
        let gate = ops::add(&self.local.forward(&a)?, &self.global.forward(&mean)?)?;
        let gate = ops::sigmoid(&gate)?;
        let keep = ops::mul(x, &gate)?;
        let mix = ops::mul(residual, &ops::affine(&gate, -1.0, 1.0)?)?;
        Ok(ops::mul_scalar(&ops::add(&keep, &mix)?, 2.0)?)
    }
}

/// The fused path's extra layers.
#[derive(Debug)]
struct Fusion {
    mel_conv: PatchConv,
    aff: Aff,
}

/// The patch embedding: `[B, C, H, W]` image → `[B, Ho·Wo, width]` tokens.
#[derive(Debug)]
pub(super) struct PatchEmbed {
    proj: PatchConv,
    norm: Option<Norm>,
    fusion: Option<Fusion>,
}

impl PatchEmbed {
    /// `patch_embed.*` (`proj`, `norm`, and for fused models `mel_conv2d`, `fusion_model`).
    pub(super) fn load(vb: &WeightLoader, cfg: &crate::AudioConfig) -> Result<Self> {
        let (p, c, cin) = (
            cfg.patch_size,
            cfg.patch_embeds_hidden_size,
            cfg.patch_embed_input_channels,
        );
        let fusion = if cfg.enable_fusion {
            if cin != 1 {
                return Err(ClapError::config(
                    "audio_config",
                    format!("a fused model needs patch_embed_input_channels 1, got {cin}"),
                ));
            }
            Some(Fusion {
                mel_conv: PatchConv::load(&vb.pp("mel_conv2d"), cin, c, p, 3 * p)?,
                aff: Aff::load(&vb.pp("fusion_model"), c, cfg.aff_block_r)?,
            })
        } else {
            None
        };
        Ok(PatchEmbed {
            proj: PatchConv::load(&vb.pp("proj"), cin, c, p, p)?,
            // The reference's patch norm is a plain `nn.LayerNorm` (eps 1e-5).
            norm: if cfg.enable_patch_layer_norm {
                Some(Norm::load(&vb.pp("norm"), c, 1e-5)?)
            } else {
                None
            },
            fusion,
        })
    }

    /// `img [B, C, H, W]` (C = 4 for fused models: the global view, then the three local
    /// crops) → tokens `[B, Ho·Wo, width]`; `longer[b]` selects the items whose crops are fused.
    pub(super) fn forward(
        &self,
        img: &Tensor,
        longer: &[bool],
        trace: &mut Tracer<'_>,
    ) -> Result<Tensor> {
        let b = img.dim(0)?;
        let tokens = match &self.fusion {
            None => self.proj.forward(img)?.0,
            Some(f) => {
                let (global, ho, wo) = self.proj.forward(&img.narrow(1, 0, 1)?)?;
                let idx: Vec<usize> = (0..b).filter(|&i| longer.get(i) == Some(&true)).collect();
                if idx.is_empty() {
                    global
                } else {
                    let pick = |t: &Tensor| -> Result<Tensor> {
                        let parts = idx
                            .iter()
                            .map(|&i| t.narrow(0, i, 1))
                            .collect::<aria_core::Result<Vec<_>>>()?;
                        let refs: Vec<&Tensor> = parts.iter().collect();
                        Ok(Tensor::cat(&refs, 0)?)
                    };
                    let local = self.local(f, &pick(&img.narrow(1, 1, 3)?)?, ho, wo, trace)?;
                    let fused = f.aff.forward(&pick(&global)?, &local)?;
                    trace.emit("audio.patch_embed.fusion", || {
                        let c = fused.dim(2)?;
                        Ok(fused
                            .reshape(&[idx.len(), ho, wo, c])?
                            .permute(&[0, 3, 1, 2])?
                            .contiguous()?)
                    })?;
                    let mut k = 0;
                    let parts = (0..b)
                        .map(|i| {
                            if idx.get(k) == Some(&i) {
                                k += 1;
                                fused.narrow(0, k - 1, 1)
                            } else {
                                global.narrow(0, i, 1)
                            }
                        })
                        .collect::<aria_core::Result<Vec<_>>>()?;
                    let refs: Vec<&Tensor> = parts.iter().collect();
                    Tensor::cat(&refs, 0)?
                }
            }
        };
        match &self.norm {
            Some(n) => n.forward(&tokens),
            None => Ok(tokens),
        }
    }

    /// The three crops `[b, 3, H, W]`, each embedded by the wide convolution, laid side by side
    /// along the patch columns and zero-padded to `wo` columns → `[b, ho·wo, width]`.
    fn local(
        &self,
        f: &Fusion,
        crops: &Tensor,
        ho: usize,
        wo: usize,
        trace: &mut Tracer<'_>,
    ) -> Result<Tensor> {
        let s = crops.shape();
        let (b, n, h, w) = (s[0], s[1], s[2], s[3]);
        let (e, lh, lw) = f.mel_conv.forward(&crops.reshape(&[b * n, 1, h, w])?)?;
        let c = e.dim(2)?;
        trace.emit("audio.patch_embed.mel_conv2d", || {
            Ok(e.reshape(&[b * n, lh, lw, c])?
                .permute(&[0, 3, 1, 2])?
                .contiguous()?)
        })?;
        if lh != ho || n * lw > wo {
            return Err(ClapError::Shape {
                what: "audio fusion: local patch grid".into(),
                expected: vec![ho, wo],
                got: vec![lh, n * lw],
            });
        }
        let side = e
            .reshape(&[b, n, lh, lw, c])?
            .permute(&[0, 2, 1, 3, 4])?
            .contiguous()?
            .reshape(&[b, lh, n * lw, c])?;
        Ok(ops::pad(&side, 2, 0, wo - n * lw)?.reshape(&[b, ho * wo, c])?)
    }
}
