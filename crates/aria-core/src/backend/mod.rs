//! Backends: where ops run, and the contract every backend implements.
//!
//! Model code calls the functions of [`crate::ops`] (and the layers of [`crate::nn`]); each op
//! runs its check step, looks at where its input tensors live ([`Tensor::device`]) and hands an
//! [`Op`] to the [`Backend`] that owns them: [`Cpu`] for host tensors, a device backend
//! (wgpu, CUDA, opened from the [`registry`] like the CPU) for its own storage. Adding a
//! backend therefore changes no model code: it implements [`Backend::run`] for the ops it
//! supports, returns [`CoreError::Unsupported`] for the others, and provides upload/download.
//! Nothing is ever copied between host and device implicitly: an op a backend lacks is an
//! error naming the op and the backend, never a silent download.
//!
//! # The op set
//!
//! | op ([`Op`] variant) | name | `ops` functions | used by |
//! |---|---|---|---|
//! | `Linear` | `linear` | [`ops::linear`](crate::ops::linear), [`nn::Linear`](crate::nn::Linear) | every model |
//! | `Matmul` | `matmul` | [`ops::matmul`](crate::ops::matmul) | tests, analysis |
//! | `Conv1d` | `conv1d` | [`ops::conv1d`](crate::ops::conv1d), [`nn::Conv1d`](crate::nn::Conv1d) | SAME, DiT pre/post conv |
//! | `Attention` | `attention` | [`ops::attention`](crate::ops::attention), [`ops::attention_diff`](crate::ops::attention_diff) (full, key-padded, banded, differential) | every model |
//! | `Unary` | `unary` | [`ops::silu`](crate::ops::silu), [`ops::sigmoid`](crate::ops::sigmoid), [`ops::tanh`](crate::ops::tanh), [`ops::sin_pi`](crate::ops::sin_pi), [`ops::gelu`](crate::ops::gelu), [`ops::gelu_tanh`](crate::ops::gelu_tanh) | every model |
//! | `Affine`, `MulScalar`, `AddScalar` | `affine`, `mul_scalar`, `add_scalar` | [`ops::affine`](crate::ops::affine), [`ops::mul_scalar`](crate::ops::mul_scalar), [`ops::add_scalar`](crate::ops::add_scalar) | samplers, guidance |
//! | `Binary` | `binary` | [`ops::add`](crate::ops::add), [`ops::sub`](crate::ops::sub), [`ops::mul`](crate::ops::mul), [`ops::div`](crate::ops::div) (broadcasting) | every model |
//! | `Glu` | `glu` | [`ops::glu`](crate::ops::glu) (SwiGLU, GeGLU, sin gate) | DiT, SAME |
//! | `Softmax` | `softmax` | [`ops::softmax_last`](crate::ops::softmax_last) | |
//! | `Embedding` | `embedding` | [`ops::embedding`](crate::ops::embedding) | T5Gemma |
//! | `Rope` | `rope` | [`ops::rope`](crate::ops::rope) | DiT, T5Gemma, SAME |
//! | `RmsNorm` | `rms_norm` | [`ops::rms_norm`](crate::ops::rms_norm) | DiT, T5Gemma |
//! | `LayerNorm` | `layer_norm` | [`ops::layer_norm`](crate::ops::layer_norm) | |
//! | `Dyt` | `dyt` | [`ops::dyt`](crate::ops::dyt) | SAME |
//! | `Unfold` | `unfold` | [`ops::unfold`](crate::ops::unfold), [`nn::Conv1d`](crate::nn::Conv1d) | SAME mapping convolutions |
//! | `Contiguous` | `contiguous` | [`Tensor::contiguous`] (and `reshape` of a strided view) | everywhere |
//! | `ToDtype` | `to_dtype` | [`Tensor::to_dtype`] | |
//! | `Cat` | `cat` | [`Tensor::cat`], [`Tensor::stack`] | DiT, samplers |
//! | `RmsNormModulate` | `rms_norm_modulate` | [`ops::rms_norm_modulate`](crate::ops::rms_norm_modulate) (norm + adaLN modulation) | DiT |
//! | `GatedResidualAdd` | `gated_residual_add` | [`ops::gated_residual_add`](crate::ops::gated_residual_add) | DiT |
//! | `SplitHeads`, `MergeHeads` | `split_heads`, `merge_heads` | [`ops::split_heads`](crate::ops::split_heads) (QK-norm + RoPE), [`ops::merge_heads`](crate::ops::merge_heads) | DiT |
//! | `Axpby` | `axpby` | [`ops::axpby`](crate::ops::axpby) (per-item `a·x + b·y`) | samplers |
//! | `ApgGuidance` | `apg_guidance` | [`ops::apg_guidance`](crate::ops::apg_guidance) (CFG, APG, norm clamp) | samplers |
//! | `CfgRescale` | `cfg_rescale` | [`ops::cfg_rescale`](crate::ops::cfg_rescale) (the guided velocity toward the conditional one's channel spread) | samplers |
//! | `Pad` | `pad` | [`ops::pad`](crate::ops::pad) (zeros along one dimension) | SAME (patching, chunk padding) |
//! | `RopeTable` | `rope_table` | [`ops::rope_table`](crate::ops::rope_table) (tables at absolute positions) | SAME |
//! | `QkvHeads` | `qkv_heads` | [`ops::qkv_heads`](crate::ops::qkv_heads) (head split + DyT QK-norm + partial RoPE, one pass) | SAME |
//! | `StdLast` | `std_last` | [`ops::std_last`](crate::ops::std_last) | SAME bottleneck noise without `running_std` |
//! | `FourierFeatures` | `fourier_features` | [`ops::fourier_features`](crate::ops::fourier_features) | number conditioners, DiT timestep |
//! | `FillMaskedRows` | `fill_masked_rows` | [`ops::fill_masked_rows`](crate::ops::fill_masked_rows) | prompt padding, unconditional context |
//! | `LinearPacked` | `linear_packed` | [`ops::linear_packed`](crate::ops::linear_packed), [`nn::Linear`](crate::nn::Linear) over a [`nn::DevicePacked`](crate::nn::DevicePacked) weight (`q8_0` weight-only and W8A8, ...) | `--precision q8` on a device |
//! | `TorchBf16Linear`, `TorchBf16Attention`, `TorchBf16RmsNorm`, `TorchBf16Rope`, `TorchBf16GeluTanh`, `TorchBf16Round`, `TorchBf16Binary` | `torch_bf16_linear`, `torch_bf16_attention`, `torch_bf16_rms_norm`, `torch_bf16_rope`, `torch_bf16_gelu_tanh`, `torch_bf16_round`, `torch_bf16_binary` | [`ops::torch_bf16`](crate::ops::torch_bf16) (PyTorch's AVX2 bf16 arithmetic, bit for bit) | T5Gemma in its bf16 replay |
//!
//! Views (`narrow`, `transpose`, `permute`, `unsqueeze`, `squeeze`, `reshape` of contiguous
//! data) only change the layout and work on every device. [`Op::NAMES`] lists the set.

use std::sync::Arc;

use crate::{CoreError, Result, Tensor};

pub mod check;
mod cpu;
mod op;
mod prepared;
pub mod registry;
pub use check::{dispatch, run_checked, OutSpec};
pub(crate) use cpu::run_checked_host;
pub use cpu::Cpu;
pub use op::{device_of, AttnSpec, BinaryOp, Op, UnaryOp};
pub use prepared::Prepared;

/// Where a tensor lives.
#[derive(Clone)]
pub enum Device {
    /// Host memory (owned or memory-mapped).
    Cpu,
    /// Memory owned by a device backend.
    Backend(Arc<dyn Backend>),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("Cpu"),
            Device::Backend(b) => write!(f, "Backend({})", b.name()),
        }
    }
}

impl Device {
    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// The backend that runs ops on this device's tensors: [`Cpu`] for host memory.
    pub fn backend(&self) -> Arc<dyn Backend> {
        match self {
            Device::Cpu => Cpu::shared(),
            Device::Backend(b) => b.clone(),
        }
    }

    /// Whether this device runs products on weights in `format` faster than on dense f32
    /// weights ([`Backend::faster_than_f32`] of its backend; on the CPU, `bf16_panels` where the
    /// AMX tile unit is granted or `vdpbf16ps` outruns f32 FMA).
    pub fn faster_than_f32(&self, format: crate::nn::WeightFormat) -> bool {
        self.backend().faster_than_f32(format)
    }

    /// Move a tensor to this device.
    pub fn put(&self, t: &Tensor) -> Result<Tensor> {
        match (self, t.device()) {
            (Device::Cpu, Device::Cpu) => Ok(t.clone()),
            (Device::Cpu, Device::Backend(b)) => b.to_cpu(t),
            (Device::Backend(b), _) => b.upload(&t.contiguous_on_cpu()?),
        }
    }
}

impl Tensor {
    /// A CPU copy of a tensor that may live on a device.
    pub fn to_cpu(&self) -> Result<Tensor> {
        Device::Cpu.put(self)
    }

    fn contiguous_on_cpu(&self) -> Result<Tensor> {
        self.to_cpu()?.contiguous()
    }
}

/// `q8_0, q8_0+w8a8` (or `none`), for messages.
pub fn format_list(f: &[(crate::nn::WeightFormat, bool)]) -> String {
    if f.is_empty() {
        return "none".into();
    }
    let mut v = Vec::new();
    for (fmt, w8a8) in f {
        v.push(fmt.name().to_string());
        if *w8a8 {
            v.push(format!("{}+w8a8", fmt.name()));
        }
    }
    v.join(", ")
}

/// Device work recorded once by [`Backend::record`] and relaunched as a whole (a CUDA graph):
/// the per-step work of a sampler, which runs the same ops on the same buffers at every step
/// and reads what changes (the state, the noise levels) from device buffers written before
/// each replay ([`Backend::write_into`]).
pub trait Recorded: Send {
    /// Relaunch the recorded work (queued on the device, like any op).
    fn replay(&self) -> Result<()>;
}

/// A compute backend for device-resident tensors.
///
/// [`Backend::run`] receives every op whose operands live on this backend (CPU operands may be
/// mixed in: the backend decides whether it accepts them). Its default returns
/// [`CoreError::Unsupported`], so a backend grows op by op.
pub trait Backend: Send + Sync {
    /// A short name ("wgpu", "cuda").
    fn name(&self) -> &str;

    /// Copy a contiguous CPU tensor to the device.
    fn upload(&self, t: &Tensor) -> Result<Tensor>;

    /// Copy a device tensor back to the CPU.
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor>;

    /// Run one op of the set. The default supports none.
    fn run(&self, op: Op) -> Result<Tensor> {
        Err(self.unsupported(&op))
    }

    /// The packed weight formats [`Backend::upload_packed`] accepts, each with whether W8A8
    /// (int8 activations) runs on it too: the backend's row of the op × weight-format table.
    /// The default: none (a packed layer cannot move to this backend).
    fn packed_formats(&self) -> Vec<(crate::nn::WeightFormat, bool)> {
        Vec::new()
    }

    /// Whether this backend runs products on weights in `format` faster than on dense f32
    /// weights: what a caller asks before choosing a faster, less exact precision mode for a
    /// model part (the default: no format).
    fn faster_than_f32(&self, format: crate::nn::WeightFormat) -> bool {
        let _ = format;
        false
    }

    /// Pack a weight's blocks into this backend's own layout, on the device; the tensor comes
    /// back in [`Op::LinearPacked`]. The default refuses, naming the format.
    fn upload_packed(&self, w: &crate::nn::PackedBlocks) -> Result<Tensor> {
        Err(CoreError::Backend {
            backend: self.name().to_string(),
            reason: format!(
                "no kernel for packed {}{} weights (formats here: {})",
                w.format,
                if w.w8a8 { " (W8A8)" } else { "" },
                format_list(&self.packed_formats())
            ),
        })
    }

    /// Lay the dense weight `w [N, K]` (one of this backend's tensors) out once for the products
    /// of [`Op::Linear`], which then carries the layout beside `w` ([`crate::ops::linear_prepared`],
    /// [`crate::nn::Linear::set_prepack`]). The default lays nothing out (`Ok(None)`): the op
    /// reads `w` in every call.
    fn prepare_weight(&self, w: &Tensor) -> Result<Option<Prepared>> {
        let _ = w;
        Ok(None)
    }

    /// The distinct rows of `x` (one of this backend's tensors), for a model to compute row-wise
    /// results once per distinct row ([`crate::ops::distinct_rows`]). The default looks at
    /// nothing and shares nothing (`None`): finding equal rows means reading them, which a
    /// device keeps where it is unless its backend chooses otherwise.
    fn distinct_rows(&self, x: &Tensor) -> Result<Option<crate::ops::DistinctRows>> {
        let _ = x;
        Ok(None)
    }

    /// Overwrite `dst` (one of this backend's contiguous tensors) in place with the values of
    /// `src` (same shape and dtype; on this backend or on the CPU), so that a [recorded
    /// step](Backend::record) reads new inputs from the buffers it was recorded with. The
    /// default refuses (`write_into` is unsupported).
    fn write_into(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let _ = (dst, src);
        Err(CoreError::Unsupported {
            op: "write_into",
            backend: self.name().to_string(),
        })
    }

    /// Record `work` once so that it can be relaunched as a whole ([`Recorded::replay`]):
    /// CUDA records it as a graph. `work` only queues device ops on tensors of this backend; it
    /// must not upload, download or wait, and it must leave its result in buffers allocated
    /// before the recording ([`Backend::write_into`]); what it allocates is freed inside it.
    /// Nothing runs at recording time: results appear at the first replay. `Ok(None)` (the
    /// default) means this backend does not record, and the caller runs the work itself.
    fn record<'a>(
        &self,
        work: Box<dyn FnMut() -> Result<()> + Send + 'a>,
    ) -> Result<Option<Box<dyn Recorded + 'a>>> {
        drop(work);
        Ok(None)
    }

    /// The error for an op this backend does not implement.
    fn unsupported(&self, op: &Op) -> CoreError {
        CoreError::Unsupported {
            op: op.name(),
            backend: self.name().to_string(),
        }
    }
}
