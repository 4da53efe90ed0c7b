//! Backends: where ops run, and the contract every backend implements.
//!
//! The contract itself (the [`Op`] set with its check step, the [`Backend`] trait, [`Device`],
//! the [`registry`]) is the `aria-tensor` crate, re-exported here; the CPU backend ([`Cpu`]) is
//! `aria-cpu`'s, a peer of `aria-wgpu` and `aria-cuda`.
//!
//! Model code calls the functions of [`crate::ops`] (and the layers of [`crate::nn`]); each op
//! runs its check step, looks at where its input tensors live ([`Tensor::device`]) and hands an
//! [`Op`] to the [`Backend`] that owns them: [`Cpu`] for host tensors, a device backend
//! (wgpu, CUDA, opened from the [`registry`] like the CPU) for its own storage. Adding a
//! backend therefore changes no model code: it implements [`Backend::run`] for the ops it
//! supports, returns [`CoreError::Unsupported`](crate::CoreError::Unsupported) for the others, and provides upload/download.
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

pub use aria_cpu::Cpu;
pub use aria_tensor::backend::*;

use crate::{Result, Tensor};

/// The backend that runs ops on `device`'s tensors: [`Cpu`] for host memory.
pub fn of(device: &Device) -> Arc<dyn Backend> {
    match device {
        Device::Cpu => Cpu::shared(),
        Device::Backend(b) => b.clone(),
    }
}

/// Whether `device` runs products on weights in `format` faster than on dense f32 weights
/// ([`Backend::faster_than_f32`] of its backend; on the CPU, `bf16_panels` where the AMX tile
/// unit is granted or `vdpbf16ps` outruns f32 FMA).
pub fn faster_than_f32(device: &Device, format: crate::nn::WeightFormat) -> bool {
    of(device).faster_than_f32(format)
}

/// Check an op and run it on the backend its operands live on (the CPU backend, [`Cpu`], when
/// they are all host tensors), the result held to the check step's spec.
pub fn dispatch(mut op: Op) -> Result<Tensor> {
    let spec = op.check()?;
    let name = op.name();
    let be = {
        let ops: Vec<Option<&Tensor>> = op.operands_mut().into_iter().map(|t| Some(&*t)).collect();
        device_of(name, &ops)?
    };
    match be {
        Some(be) => run_checked(&*be, op, &spec),
        None => aria_cpu::run_checked_host(op, &spec),
    }
}
