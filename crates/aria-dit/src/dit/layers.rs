//! Building blocks of the DiT: the small conditioning MLPs, parameter loading, and moving
//! tensors between devices. The fused row work (norm + adaLN modulation, gated residual add,
//! head split with QK-norm + RoPE, head merge) is done by the named ops of [`aria_core::ops`].

use aria_core::nn::{Bias, Linear};
use aria_core::{ops, DType, Device, Tensor, WeightLoader};

use crate::Result;

/// RMSNorm epsilon of the DiT block norms (`pre_norm`, `cross_attend_norm`, `ff_norm`).
pub(crate) const BLOCK_NORM_EPS: f32 = 1e-5;
/// RMSNorm epsilon of the attention QK-norms.
pub(crate) const QK_NORM_EPS: f32 = 1e-6;

/// A parameter tensor (gains, memory tokens, modulation offsets) as f32.
pub(crate) fn param(vb: &WeightLoader, name: &str, shape: &[usize]) -> Result<Tensor> {
    Ok(vb.get_as(name, shape, DType::F32)?)
}

/// `t` on `device`: a cheap clone when it already lives there, else an explicit copy.
pub(crate) fn on_device(t: &Tensor, device: &Device) -> Result<Tensor> {
    let same = match (device, t.device()) {
        (Device::Cpu, Device::Cpu) => true,
        (Device::Backend(a), Device::Backend(b)) => a.name() == b.name(),
        _ => false,
    };
    if same {
        Ok(t.clone())
    } else {
        Ok(device.put(t)?)
    }
}

/// Move a parameter to `device` in place.
pub(crate) fn move_to(t: &mut Tensor, device: &Device) -> Result<()> {
    *t = on_device(t, device)?;
    Ok(())
}

/// `Linear → SiLU → Linear` (the DiT's conditioning projections).
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    pub(crate) l0: Linear,
    pub(crate) l2: Linear,
}

impl Mlp {
    /// `0` and `2` under `vb` (e.g. `loader.pp("to_timestep_embed")`).
    pub(crate) fn load(
        vb: &WeightLoader,
        in_dim: usize,
        hidden: usize,
        out_dim: usize,
        bias: Bias,
    ) -> Result<Self> {
        Ok(Mlp {
            l0: Linear::load(&vb.pp("0"), in_dim, hidden, bias)?,
            l2: Linear::load(&vb.pp("2"), hidden, out_dim, bias)?,
        })
    }

    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = ops::silu(&self.l0.forward(x)?)?;
        Ok(self.l2.forward(&h)?)
    }
}

/// RoPE tables of one forward: `cos`, `sin` `[n, r]` (views of one `ops::rope_table`).
pub(crate) struct Rope {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
}
