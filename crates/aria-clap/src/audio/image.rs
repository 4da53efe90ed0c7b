//! From log-mel features to the square image HTSAT patches: BatchNorm over the mel bins, the
//! bicubic stretch of a short time axis, the fold of `freq_ratio` time chunks under each other,
//! and the cutting of the image into patches.

use aria_core::ops;
use aria_core::{DType, Tensor, WeightLoader};

use crate::{ClapError, Result};

/// The epsilon of the reference's `nn.BatchNorm2d` layers.
pub(super) const BN_EPS: f64 = 1e-5;

/// An inference-mode BatchNorm as a per-channel affine map `x·scale + shift`.
#[derive(Debug)]
pub(super) struct BatchNorm {
    /// `γ / √(var + eps)`, computed in f64.
    pub scale: Vec<f64>,
    /// `β − mean·scale`, computed in f64.
    pub shift: Vec<f64>,
}

impl BatchNorm {
    /// `weight`, `bias`, `running_mean`, `running_var` (each `[n]`) under `vb`'s prefix.
    pub(super) fn load(vb: &WeightLoader, n: usize) -> Result<Self> {
        let get = |name: &str| -> Result<Vec<f32>> {
            Ok(vb.get_as(name, &[n], DType::F32)?.to_vec::<f32>()?)
        };
        let (g, b) = (get("weight")?, get("bias")?);
        let (m, v) = (get("running_mean")?, get("running_var")?);
        let scale: Vec<f64> = g
            .iter()
            .zip(&v)
            .map(|(&g, &v)| f64::from(g) / (f64::from(v) + BN_EPS).sqrt())
            .collect();
        let shift = b
            .iter()
            .zip(&m)
            .zip(&scale)
            .map(|((&b, &m), &s)| f64::from(b) - f64::from(m) * s)
            .collect();
        Ok(BatchNorm { scale, shift })
    }
}

/// The input BatchNorm over the mel bins (`audio_encoder.batch_norm`), as two `[F]` vectors
/// broadcast along the last axis of `[B, C, T, F]`.
#[derive(Debug)]
pub(super) struct MelNorm {
    scale: Tensor,
    shift: Tensor,
}

impl MelNorm {
    pub(super) fn load(vb: &WeightLoader, mels: usize) -> Result<Self> {
        let bn = BatchNorm::load(vb, mels)?;
        let f = |v: &[f64]| Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), &[mels]);
        Ok(MelNorm {
            scale: f(&bn.scale)?,
            shift: f(&bn.shift)?,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(ops::add(&ops::mul(x, &self.scale)?, &self.shift)?)
    }
}

/// The cubic convolution kernel of the reference's bicubic interpolation (`A = −0.75`): the
/// weights of the taps at offsets −1, 0, 1, 2 for a fractional position `t`.
fn cubic_weights(t: f64) -> [f64; 4] {
    const A: f64 = -0.75;
    let near = |x: f64| ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
    let far = |x: f64| ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

/// The four taps (source index, weight) of each output position of a one-axis bicubic resize
/// from `inp` to `out` entries with `align_corners=True`: source position `i·(inp − 1)/(out − 1)`,
/// taps clamped to the edges, weights computed in f64.
pub(super) fn bicubic_taps(inp: usize, out: usize) -> Vec<[(usize, f64); 4]> {
    let scale = if out > 1 {
        (inp as f64 - 1.0) / (out as f64 - 1.0)
    } else {
        0.0
    };
    let last = inp.saturating_sub(1) as i64;
    (0..out)
        .map(|i| {
            let src = scale * i as f64;
            let base = src.floor();
            let w = cubic_weights(src - base);
            let mut taps = [(0, 0.0); 4];
            for (k, tap) in taps.iter_mut().enumerate() {
                let j = (base as i64 - 1 + k as i64).clamp(0, last) as usize;
                *tap = (j, w[k]);
            }
            taps
        })
        .collect()
}

/// `x [B, C, T, F]` with its time axis resized to `out` frames (bicubic, as above): for each
/// tap, a gather of the source frames times the tap's weights, summed tap by tap.
fn stretch_time(x: &Tensor, out: usize) -> Result<Tensor> {
    let s = x.shape();
    let (b, c, t, f) = (s[0], s[1], s[2], s[3]);
    let taps = bicubic_taps(t, out);
    let table = x.reshape(&[b * c * t, f])?;
    let mut acc: Option<Tensor> = None;
    for k in 0..4 {
        let ids: Vec<i64> = (0..b * c)
            .flat_map(|bc| taps.iter().map(move |tp| (bc * t + tp[k].0) as i64))
            .collect();
        let ids = Tensor::from_vec(ids, &[b * c * out])?;
        let rows = ops::embedding(&ids, &table)?.reshape(&[b * c, out, f])?;
        let w = Tensor::from_vec(taps.iter().map(|tp| tp[k].1 as f32).collect(), &[out, 1])?;
        let term = ops::mul(&rows, &w)?;
        acc = Some(match acc {
            None => term,
            Some(a) => ops::add(&a, &term)?,
        });
    }
    let y = acc.ok_or_else(|| ClapError::invalid("bicubic taps", "none"))?;
    Ok(y.reshape(&[b, c, out, f])?)
}

/// `x [B, C, T, F]` (normalised) → the image `[B, C, R·F, W/R]` with `W = spec_width`,
/// `R = ratio`: the time axis first stretched to `W` when shorter (bicubic, as above), then cut
/// into `R` chunks stacked along the mel axis (`image[r·F + f, t] = x[r·W/R + t, f]`).
pub(super) fn mel_to_image(x: &Tensor, spec_width: usize, ratio: usize) -> Result<Tensor> {
    let s = x.shape();
    let (b, c, t, f) = (s[0], s[1], s[2], s[3]);
    let y = if t < spec_width {
        stretch_time(x, spec_width)?
    } else {
        x.clone()
    };
    let w = spec_width / ratio;
    Ok(y.reshape(&[b, c, ratio, w, f])?
        .permute(&[0, 1, 2, 4, 3])?
        .contiguous()?
        .reshape(&[b, c, ratio * f, w])?)
}

/// Non-overlapping `kh × kw` patches of `img [B, C, H, W]` (a convolution's view with stride =
/// kernel and no padding: trailing rows and columns that fill no patch are dropped) →
/// (`[B, Ho·Wo, C·kh·kw]` in the order of a `[out, C, kh, kw]` weight, `Ho`, `Wo`).
pub(super) fn patchify(img: &Tensor, kh: usize, kw: usize) -> Result<(Tensor, usize, usize)> {
    let s = img.shape();
    let (b, c, h, w) = (s[0], s[1], s[2], s[3]);
    let (ho, wo) = (h / kh, w / kw);
    let v = img.narrow(2, 0, ho * kh)?.narrow(3, 0, wo * kw)?;
    let p = v
        .reshape(&[b, c, ho, kh, wo, kw])?
        .permute(&[0, 2, 4, 1, 3, 5])?
        .contiguous()?
        .reshape(&[b, ho * wo, c * kh * kw])?;
    Ok((p, ho, wo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubic_weights_sum_to_one_and_interpolate_at_knots() {
        for t in [0.0, 0.25, 0.5, 0.9] {
            let w = cubic_weights(t);
            assert!((w.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert_eq!(cubic_weights(0.0), [0.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn bicubic_taps_are_the_identity_at_equal_sizes_and_clamp_at_the_edges() {
        for (i, taps) in bicubic_taps(5, 5).iter().enumerate() {
            assert_eq!(taps[1], (i, 1.0));
            assert!(taps.iter().all(|&(j, w)| j < 5 && (w == 0.0 || j == i)));
        }
        let taps = bicubic_taps(1001, 1024);
        assert_eq!(taps[0][0].0, 0);
        assert_eq!(taps[1023][1], (1000, 1.0));
        assert_eq!(taps[1023][3].0, 1000);
        // One frame: every output copies it.
        assert!(bicubic_taps(1, 4)
            .iter()
            .all(|t| t.iter().all(|&(j, _)| j == 0)));
    }
}
