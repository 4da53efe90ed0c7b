//! [`Linear`]: `y = x·Wᵀ + b` over any [`Weight`] kind, with run-time adapters.

use std::sync::{Arc, Mutex, PoisonError};

use super::weight::{Adapter, Weight};
use crate::backend::Prepared;
use crate::{ops, CoreError, Device, Result, Tensor, WeightLoader};

/// The weight laid out by its backend ([`Backend::prepare_weight`](crate::Backend::prepare_weight)),
/// kept between calls when the layer asks for it ([`Linear::set_prepack`]). Clones share the
/// layout.
#[derive(Default)]
struct Panels(Mutex<Option<Prepared>>);

impl Panels {
    fn get(&self) -> Option<Prepared> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, p: Option<Prepared>) -> Option<Prepared> {
        std::mem::replace(
            &mut *self.0.lock().unwrap_or_else(PoisonError::into_inner),
            p,
        )
    }
}

impl Clone for Panels {
    fn clone(&self) -> Self {
        Panels(Mutex::new(self.get()))
    }
}

impl std::fmt::Debug for Panels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.get() {
            Some(p) => write!(f, "{p:?}"),
            None => write!(f, "none"),
        }
    }
}

/// Whether a layer has a bias (`<key>.bias` in the checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bias {
    /// Load `<key>.bias` `[out]`.
    Yes,
    /// No bias.
    No,
}

/// A linear layer `y = x·Wᵀ + b` (`x [.., in]` → `[.., out]`), also used for kernel-1
/// convolutions ([`Linear::load_conv1x1`]).
///
/// The weight is a [`Weight`] (dense or packed). Adapters set with [`Linear::set_adapters`]
/// apply in order at their strengths: on a dense weight the adapted matrix is computed once
/// (the checkpoint weight stays untouched, so removing the adapters or changing a strength
/// recomputes it from the original); on a packed weight low-rank adapters run as a run-time
/// delta.
#[derive(Debug, Clone)]
pub struct Linear {
    name: String,
    weight: Weight,
    bias: Option<Tensor>,
    stored_shape: Vec<usize>,
    adapters: Vec<(Arc<dyn Adapter>, f32)>,
    merged: Option<Tensor>,
    prepack: bool,
    panels: Panels,
}

fn shape_err(name: &str, reason: String) -> CoreError {
    CoreError::Invalid(format!("layer `{name}`: {reason}"))
}

impl Linear {
    /// Load `weight` `[out, in]` (and `bias` `[out]` with [`Bias::Yes`]) under `vb`'s prefix,
    /// in the stored dtype (memory-mapped when the file allows). When the loader has a packed
    /// source ([`WeightLoader::with_packed`]) holding this weight, the packed form is used and
    /// the dense tensor is never read.
    pub fn load(vb: &WeightLoader, in_dim: usize, out_dim: usize, bias: Bias) -> Result<Self> {
        if let Some(p) = vb.packed_weight("weight", [out_dim, in_dim])? {
            return Self::finish(vb, Weight::Packed(p), vec![out_dim, in_dim], out_dim, bias);
        }
        let w = vb.get("weight", &[out_dim, in_dim])?;
        Self::finish(vb, Weight::Dense(w), vec![out_dim, in_dim], out_dim, bias)
    }

    /// Load a kernel-1 `Conv1d` weight `[out, in, 1]` as a linear layer over the channel axis.
    pub fn load_conv1x1(
        vb: &WeightLoader,
        in_dim: usize,
        out_dim: usize,
        bias: Bias,
    ) -> Result<Self> {
        let stored = vec![out_dim, in_dim, 1];
        if let Some(p) = vb.packed_weight("weight", [out_dim, in_dim])? {
            return Self::finish(vb, Weight::Packed(p), stored, out_dim, bias);
        }
        let w = vb
            .get("weight", &[out_dim, in_dim, 1])?
            .reshape(&[out_dim, in_dim])?;
        Self::finish(vb, Weight::Dense(w), stored, out_dim, bias)
    }

    fn finish(
        vb: &WeightLoader,
        weight: Weight,
        stored_shape: Vec<usize>,
        out_dim: usize,
        bias: Bias,
    ) -> Result<Self> {
        let bias = match bias {
            Bias::Yes => Some(vb.get("bias", &[out_dim])?),
            Bias::No => None,
        };
        Ok(Linear {
            name: vb.prefix().trim_end_matches('.').to_string(),
            weight,
            bias,
            stored_shape,
            adapters: Vec::new(),
            merged: None,
            prepack: false,
            panels: Panels::default(),
        })
    }

    /// A layer from parts (`weight [out, in]`, `bias [out]`); `name` is used in messages and
    /// adapter matching.
    pub fn new(name: impl Into<String>, weight: Weight, bias: Option<Tensor>) -> Result<Self> {
        let name = name.into();
        let [out, inn] = weight.shape();
        if let Weight::Dense(t) = &weight {
            if t.rank() != 2 {
                return Err(shape_err(
                    &name,
                    format!("weight shape {:?}, expected [out, in]", t.shape()),
                ));
            }
        }
        if let Some(b) = &bias {
            if b.shape() != [out] {
                return Err(shape_err(
                    &name,
                    format!("bias shape {:?}, expected [{out}]", b.shape()),
                ));
            }
        }
        Ok(Linear {
            name,
            weight,
            bias,
            stored_shape: vec![out, inn],
            adapters: Vec::new(),
            merged: None,
            prepack: false,
            panels: Panels::default(),
        })
    }

    /// The full checkpoint key of the layer (without `.weight`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Input width.
    pub fn in_dim(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Output width.
    pub fn out_dim(&self) -> usize {
        self.weight.shape()[0]
    }

    /// The weight as loaded or packed (adapters not applied).
    pub fn weight(&self) -> &Weight {
        &self.weight
    }

    /// The bias.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// The weight's shape in the checkpoint (`[out, in]`, or `[out, in, 1]` for a kernel-1
    /// convolution).
    pub fn stored_shape(&self) -> &[usize] {
        &self.stored_shape
    }

    /// The dense matrix the layer computes with: the adapted one when adapters are set, else
    /// the dense weight (`None` for a packed weight).
    pub fn effective_weight(&self) -> Option<&Tensor> {
        self.merged.as_ref().or(self.weight.dense())
    }

    /// Replace the weight (e.g. by its packed form); adapters are re-applied.
    pub fn set_weight(&mut self, weight: Weight) -> Result<()> {
        if weight.shape() != self.weight.shape() {
            return Err(shape_err(
                &self.name,
                format!(
                    "new weight {:?} does not match {:?}",
                    weight.shape(),
                    self.weight.shape()
                ),
            ));
        }
        self.weight = weight;
        self.refresh()
    }

    /// Set the adapters and their strengths (applied in order; empty: none). Nothing is
    /// reloaded: the adapted matrix is recomputed from the original weight.
    pub fn set_adapters(&mut self, adapters: Vec<(Arc<dyn Adapter>, f32)>) -> Result<()> {
        self.adapters = adapters;
        self.refresh()
    }

    /// The adapters and their strengths.
    pub fn adapters(&self) -> &[(Arc<dyn Adapter>, f32)] {
        &self.adapters
    }

    /// Whether adapters are applied.
    pub fn is_adapted(&self) -> bool {
        !self.adapters.is_empty()
    }

    fn refresh(&mut self) -> Result<()> {
        self.merged = None;
        self.panels.set(None);
        if self.adapters.is_empty() {
            return Ok(());
        }
        match &self.weight {
            Weight::Dense(w) => {
                let mut cur = w.clone();
                for (a, s) in &self.adapters {
                    let m = a.merge(&cur, *s)?;
                    if m.shape() != w.shape() {
                        return Err(shape_err(
                            &self.name,
                            format!(
                                "adapter {} produced {:?}, expected {:?}",
                                a.describe(),
                                m.shape(),
                                w.shape()
                            ),
                        ));
                    }
                    cur = m;
                }
                self.merged = Some(cur);
            }
            Weight::Packed(_) => {
                if let Some((a, _)) = self.adapters.iter().find(|(a, _)| a.low_rank().is_none()) {
                    return Err(shape_err(
                        &self.name,
                        format!(
                            "adapter {} has no low-rank form and cannot run on a packed weight",
                            a.describe()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Move the weight and bias to `device`. A packed weight is uploaded in the layout the
    /// backend packs for its format ([`put_packed`](super::put_packed)); a backend without a kernel for the
    /// format is an error naming the layer, the format and the formats it has.
    pub fn to_device(&mut self, device: &Device) -> Result<()> {
        self.panels.set(None);
        match &self.weight {
            Weight::Dense(w) => self.weight = Weight::Dense(device.put(w)?),
            Weight::Packed(p) => {
                let moved = super::put_packed(device, p).map_err(|e| {
                    shape_err(&self.name, format!("packed weight {}: {e}", p.format()))
                })?;
                self.weight = Weight::Packed(moved);
            }
        }
        if let Some(b) = &self.bias {
            self.bias = Some(device.put(b)?);
        }
        if let Some(m) = &self.merged {
            self.merged = Some(device.put(m)?);
        }
        Ok(())
    }

    /// Drop the resident pages of the weight and bias where they are borrowed from a
    /// memory-mapped file (see [`Tensor::release_pages`]), for a layer that is not needed
    /// for a while; they read back from the file on the next [`Linear::forward`]. Adapted
    /// matrices and owned weights are untouched; panels kept by [`Linear::set_prepack`] are
    /// dropped (and packed again on the next forward). Returns the bytes released.
    pub fn release_pages(&self) -> Result<usize> {
        let b = match &self.bias {
            Some(b) => b.release_pages()?,
            None => 0,
        };
        let p = self.panels.set(None).map_or(0, |p| p.nbytes());
        Ok(self.weight.release_pages()? + b + p)
    }

    /// Keep the dense weight laid out by its backend for the matrix product
    /// ([`Backend::prepare_weight`](crate::Backend::prepare_weight); the CPU's packed f32
    /// panels) after the first [`Linear::forward`] (`true`), instead of laying it out in every
    /// call (`false`, the default): for layers run many times, such as a diffusion model's at
    /// every sampler step. The CPU's copy is f32, as large as the weight in f32; it is dropped
    /// when the weight, adapters or device change, and by [`Linear::release_pages`]. Results are
    /// bit-identical either way; a backend that lays nothing out reads the weight as before.
    pub fn set_prepack(&mut self, on: bool) {
        self.prepack = on;
        if !on {
            self.panels.set(None);
        }
    }

    /// `x·Wᵀ + b` for `x [.., in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(w) = self.effective_weight() {
            if self.prepack {
                let p = match self.panels.get() {
                    Some(p) => Some(p),
                    None => {
                        let p = crate::backend::of(&w.device()).prepare_weight(w)?;
                        self.panels.set(p.clone());
                        p
                    }
                };
                return ops::linear_prepared(x, w, self.bias.as_ref(), p.as_ref());
            }
            return ops::linear(x, w, self.bias.as_ref());
        }
        let Weight::Packed(p) = &self.weight else {
            return Err(shape_err(&self.name, "no weight".into()));
        };
        let mut y = ops::packed_linear(x, p.as_ref(), self.bias.as_ref())?;
        for (a, s) in &self.adapters {
            if let Some(lr) = a.low_rank() {
                // The low-rank factors are small: they go where the activations are.
                let dev = x.device();
                let h = ops::linear(x, &dev.put(&lr.a)?, None)?;
                let d = ops::linear(&h, &dev.put(&lr.b)?, None)?;
                y = ops::add(&y, &ops::mul_scalar(&d, lr.scale * s)?)?;
            }
        }
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(n: usize, shape: &[usize], seed: usize) -> Tensor {
        let v: Vec<f32> = (0..n)
            .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 50.0)
            .collect();
        Tensor::from_vec(v, shape).expect("tensor")
    }

    /// A layer that keeps its packed panels gives the same bits as one that packs in every
    /// call, on every run; replacing the weight drops the panels (the new weight is used).
    #[test]
    fn prepack_bit_identical_and_follows_weight() {
        let (m, k, n) = (13, 70, 40);
        let x = t(m * k, &[m, k], 1);
        let w = Weight::Dense(t(n * k, &[n, k], 2));
        let b = Some(t(n, &[n], 3));
        let plain = Linear::new("l", w.clone(), b.clone()).expect("layer");
        let mut packed = plain.clone();
        packed.set_prepack(true);
        let want = plain.forward(&x).expect("plain").to_vec_f32().expect("vec");
        for _ in 0..2 {
            let got = packed
                .forward(&x)
                .expect("packed")
                .to_vec_f32()
                .expect("vec");
            assert_eq!(got, want);
        }
        assert!(packed.panels.get().is_some(), "panels kept after a forward");
        let w2 = Weight::Dense(t(n * k, &[n, k], 4));
        packed.set_weight(w2.clone()).expect("set weight");
        let mut plain2 = plain.clone();
        plain2.set_weight(w2).expect("set weight");
        let want2 = plain2
            .forward(&x)
            .expect("plain")
            .to_vec_f32()
            .expect("vec");
        assert_ne!(want2, want);
        let got2 = packed
            .forward(&x)
            .expect("packed")
            .to_vec_f32()
            .expect("vec");
        assert_eq!(got2, want2);
        assert!(packed.release_pages().expect("release") > 0);
        assert!(
            packed.panels.get().is_none(),
            "release_pages drops the panels"
        );
    }
}
