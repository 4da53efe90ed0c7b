//! One adapted module of a LoRA file and its merge rules (see the [module docs](super)).

use std::path::PathBuf;
use std::sync::OnceLock;

use aria_core::nn::{Adapter, LowRank, Weight};
use aria_core::{CoreError, DType, Tensor};

use super::{lora_err, svd, AdapterKind, LoraTarget};
use crate::{DitError, Result};

/// The low-rank factors of an -XS adapter once its bases are known: `A = Vᵀ [r, in]`,
/// `B = U·M [out, r]`, so that `U·M·Vᵀ = B·A`.
#[derive(Debug)]
struct XsFactors {
    a: Tensor,
    b: Tensor,
}

/// One adapted module of a LoRA file: the layer adapter that merges it.
#[derive(Debug)]
pub struct LoraAdapter {
    pub(super) path: PathBuf,
    pub(super) adapter_type: String,
    pub(super) kind: AdapterKind,
    pub(super) scaling: f64,
    pub(super) rank: usize,
    pub(super) module: String,
    pub(super) target: LoraTarget,
    xs: OnceLock<XsFactors>,
}

fn core_err(e: DitError) -> CoreError {
    match e {
        DitError::Core(c) => c,
        other => CoreError::Invalid(other.to_string()),
    }
}

/// The dense f32 form of a layer weight (a packed one dequantized).
pub(super) fn dense_of(w: &Weight) -> Result<Tensor> {
    Ok(match w {
        Weight::Dense(t) => t.clone(),
        Weight::Packed(p) => p.dequantize()?,
    })
}

impl LoraAdapter {
    pub(super) fn new(
        path: PathBuf,
        adapter_type: String,
        kind: AdapterKind,
        scaling: f64,
        rank: usize,
        module: String,
        target: LoraTarget,
    ) -> Self {
        LoraAdapter {
            path,
            adapter_type,
            kind,
            scaling,
            rank,
            module,
            target,
            xs: OnceLock::new(),
        }
    }

    /// The module it adapts (`model.<DiT path>` or `conditioners.<…>`).
    pub fn module(&self) -> &str {
        &self.module
    }

    /// The adapter type.
    pub fn kind(&self) -> AdapterKind {
        self.kind
    }

    /// The module's tensors.
    pub fn target(&self) -> &LoraTarget {
        &self.target
    }

    /// Whether this is an -XS adapter whose bases are still to be computed.
    pub fn needs_bases(&self) -> bool {
        self.kind.is_xs() && self.xs.get().is_none()
    }

    /// For the -XS families: compute the frozen bases from the checkpoint weight `base`
    /// (`[out, in·k]`) of the module, once; later calls (and the other families) do nothing.
    /// The bases must come from the layer's own checkpoint weight, not from a weight that
    /// other adapters already changed.
    pub fn prepare_bases(&self, base: &Tensor) -> Result<()> {
        if !self.needs_bases() {
            return Ok(());
        }
        let f = self.xs_factors(base)?;
        // A concurrent preparation from the same weight gives the same factors.
        let _ = self.xs.set(f);
        Ok(())
    }

    fn xs_factors(&self, base: &Tensor) -> Result<XsFactors> {
        let module = self.module.as_str();
        let out = base.shape().first().copied().unwrap_or(0);
        let inn = base.elem_count() / out.max(1);
        let r = self.rank;
        let m = self
            .target
            .core
            .as_ref()
            .ok_or_else(|| lora_err(&self.path, format!("`{module}`: M_xs missing")))?;
        if m.shape() != [r, r] {
            return Err(lora_err(
                &self.path,
                format!("`{module}`: M_xs {:?}, expected [{r}, {r}]", m.shape()),
            ));
        }
        let (u, v) = svd::top_bases(&base.to_vec_f32()?, out, inn, r)
            .map_err(|e| lora_err(&self.path, format!("`{module}`: {e}")))?;
        let mv = m.to_vec_f32()?;
        // B = U·M [out, r].
        let mut b = vec![0f32; out * r];
        for o in 0..out {
            for j in 0..r {
                let mut acc = 0f32;
                for k in 0..r {
                    acc += u[o * r + k] * mv[k * r + j];
                }
                b[o * r + j] = acc;
            }
        }
        // A = Vᵀ [r, in].
        let mut a = vec![0f32; r * inn];
        for i in 0..inn {
            for k in 0..r {
                a[k * inn + i] = v[i * r + k];
            }
        }
        Ok(XsFactors {
            a: Tensor::from_vec(a, &[r, inn])?,
            b: Tensor::from_vec(b, &[out, r])?,
        })
    }

    /// The low-rank factors `(A [r, in], B [out, r])` of the update: the file's for the
    /// LoRA/DoRA/BoRA families, `(Vᵀ, U·M)` for the -XS ones (`None` before their bases).
    pub fn factors(&self) -> Option<(&Tensor, &Tensor)> {
        if self.kind.is_xs() {
            self.xs.get().map(|f| (&f.a, &f.b))
        } else {
            self.target.a.as_ref().zip(self.target.b.as_ref())
        }
    }

    /// The adapted weight of `w` (`[out, in·k]`, any float dtype) at `strength`, in f32. An
    /// -XS adapter whose bases were not prepared takes them from `w`.
    pub fn merged(&self, w: &Tensor, strength: f32) -> Result<Tensor> {
        let module = self.module.as_str();
        self.prepare_bases(w)?;
        let (a, b) = self
            .factors()
            .ok_or_else(|| lora_err(&self.path, format!("`{module}`: factors missing")))?;
        let shape = w.shape().to_vec();
        let out = shape.first().copied().unwrap_or(0);
        let inn = w.elem_count() / out.max(1);
        let (ash, bsh) = (a.shape(), b.shape());
        if bsh[0] != out || ash[1] != inn {
            return Err(lora_err(
                &self.path,
                format!("`{module}`: A {ash:?} / B {bsh:?} do not fit weight {shape:?}"),
            ));
        }
        let family = self.kind.family();
        if family != AdapterKind::Lora && strength == 0.0 {
            return w.to_dtype(DType::F32)?.reshape(&shape).map_err(Into::into);
        }
        let r = ash[0];
        let av = a.to_vec_f32()?;
        let bv = b.to_vec_f32()?;
        let c = (self.scaling * strength as f64) as f32;
        let mut v = w.to_vec_f32()?;
        for o in 0..out {
            let brow = &bv[o * r..(o + 1) * r];
            let row = &mut v[o * inn..(o + 1) * inn];
            for (i, x) in row.iter_mut().enumerate() {
                let mut d = 0f32;
                for k in 0..r {
                    d += brow[k] * av[k * inn + i];
                }
                *x += c * d;
            }
        }
        let t = &self.target;
        let mag = |m: &Option<Tensor>, n: usize| -> Result<Vec<f32>> {
            let m = m
                .as_ref()
                .ok_or_else(|| lora_err(&self.path, format!("`{module}`: magnitude missing")))?;
            if m.elem_count() != n {
                return Err(lora_err(
                    &self.path,
                    format!("`{module}`: magnitude {:?}, expected {n}", m.shape()),
                ));
            }
            Ok(m.to_vec_f32()?)
        };
        match family {
            AdapterKind::DoraRows | AdapterKind::Bora => {
                normalize_rows(&mut v, inn, &mag(&t.magnitude, out)?);
                if family == AdapterKind::Bora {
                    normalize_cols(&mut v, inn, &mag(&t.magnitude_c, inn)?);
                }
            }
            AdapterKind::DoraCols => normalize_cols(&mut v, inn, &mag(&t.magnitude, inn)?),
            _ => {}
        }
        Ok(Tensor::from_vec(v, &shape)?)
    }
}

/// `v[o, :] ← m[o] · v[o, :] / (‖v[o, :]‖ + 1e−12)`.
fn normalize_rows(v: &mut [f32], inn: usize, m: &[f32]) {
    for (row, &mo) in v.chunks_mut(inn.max(1)).zip(m) {
        let n = row.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt() as f32;
        let d = n + 1e-12;
        row.iter_mut().for_each(|x| *x = *x / d * mo);
    }
}

/// `v[:, i] ← m[i] · v[:, i] / (‖v[:, i]‖ + 1e−12)`.
fn normalize_cols(v: &mut [f32], inn: usize, m: &[f32]) {
    let mut s = vec![0f64; inn];
    for r in v.chunks(inn.max(1)) {
        for (a, x) in s.iter_mut().zip(r) {
            *a += (*x as f64).powi(2);
        }
    }
    let n: Vec<f32> = s.into_iter().map(|x| x.sqrt() as f32).collect();
    for row in v.chunks_mut(inn.max(1)) {
        for (i, x) in row.iter_mut().enumerate() {
            *x = *x / (n[i] + 1e-12) * m[i];
        }
    }
}

impl Adapter for LoraAdapter {
    fn describe(&self) -> String {
        format!(
            "{} `{}` of {}",
            self.adapter_type,
            self.module,
            self.path.display()
        )
    }

    /// The merge is computed on the host (once per strength change, never per forward) and the
    /// result is put where `w` lives.
    fn merge(&self, w: &Tensor, strength: f32) -> aria_core::Result<Tensor> {
        let m = self.merged(w, strength).map_err(core_err)?;
        crate::dit::on_device(&m, &w.device()).map_err(core_err)
    }

    fn low_rank(&self) -> Option<LowRank> {
        if self.kind.family() != AdapterKind::Lora {
            return None;
        }
        self.factors().map(|(a, b)| LowRank {
            a: a.clone(),
            b: b.clone(),
            scale: self.scaling as f32,
        })
    }
}
