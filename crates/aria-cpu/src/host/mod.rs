//! The CPU backend's bodies of the op set: for each op, a function that takes the operands'
//! elements as slices and calls one kernel of this crate inside the caller's thread pool
//! ([`crate::threads`]). [`run`] is the whole op set's CPU reference: what
//! [`Cpu`](crate::Cpu) runs for an op that has passed its check step.
//!
//! Besides the op bodies, the host-only functions models may call on host tensors live here
//! (`aria_core::ops` re-exports them): [`map`] and [`binary_map`] (a closure over the
//! elements), [`attention_amx`] (the attention products on the AMX tile unit, refused where
//! there is none) and [`torch_bf16::flash_attention`] with a mask closure; and the bf16-panel
//! weight, [`Bf16DotWeight`].

use std::borrow::Cow;

use aria_tensor::backend::{BinaryOp, Op, UnaryOp};
use aria_tensor::{CoreError, DType, Device, Result, Tensor};

mod attention;
mod bf16dot;
mod conv;
mod elementwise;
mod fused;
mod layout;
mod linear;
mod norm;
mod packed;
mod pad;
mod rows;
mod same;
mod text;
pub mod torch_bf16;

pub use attention::attention_amx;
pub use bf16dot::Bf16DotWeight;
pub use elementwise::{binary_map, map};
pub use linear::pack_weight;
pub use rows::distinct_rows;

use attention::{attention_diff_host, attention_host};
use conv::conv1d_host;
use elementwise::*;
use fused::*;
use layout::unfold_host;
use linear::{linear_host, matmul_host};
use norm::{dyt_host, layer_norm_host, rms_norm_host};
use packed::linear_packed_host;
pub use packed::linear_packed_reference;
use pad::pad_host;
use same::{qkv_heads_host, rope_table_host, std_last_host};
use text::{fill_masked_rows_host, fourier_features_host};

/// Run a checked op on the CPU: every operand must be a host tensor (a device operand is an
/// error naming its backend). The caller has run [`Op::check`]; [`Cpu`](crate::Cpu)'s `run`
/// does both.
pub fn run(op: &Op) -> Result<Tensor> {
    match op {
        Op::Linear { x, w, b, prepared } => linear_host(
            x,
            w,
            b.as_ref(),
            prepared
                .as_ref()
                .and_then(|p| p.layout::<crate::gemm::PackedB>()),
        ),
        Op::LinearPacked {
            x,
            w,
            format,
            w8a8,
            shape,
            b,
        } => linear_packed_host(x, w, *format, *w8a8, *shape, b.as_ref()),
        Op::Matmul { a, b } => matmul_host(a, b),
        Op::Conv1d { x, w, b, padding } => conv1d_host(x, w, b.as_ref(), *padding),
        Op::Attention {
            q,
            k,
            v,
            diff,
            opts,
        } => match diff {
            None => attention_host(q, k, v, &opts.opts()),
            Some((q2, k2)) => attention_diff_host(q, k, q2, k2, v, &opts.opts()),
        },
        Op::Unary { x, f } => match f {
            UnaryOp::Silu => silu_host(x),
            UnaryOp::Sigmoid => sigmoid_host(x),
            UnaryOp::Tanh => tanh_host(x),
            UnaryOp::SinPi => sin_pi_host(x),
            UnaryOp::Gelu => gelu_host(x),
            UnaryOp::GeluTanh => gelu_tanh_host(x),
            _ => Err(CoreError::Unsupported {
                op: "unary",
                backend: "cpu".into(),
            }),
        },
        Op::Affine { x, a, b } => affine_host(x, *a, *b),
        Op::MulScalar { x, s } => mul_scalar_host(x, *s),
        Op::AddScalar { x, s } => add_scalar_host(x, *s),
        Op::Binary { a, b, f } => match f {
            BinaryOp::Add => add_host(a, b),
            BinaryOp::Sub => sub_host(a, b),
            BinaryOp::Mul => mul_host(a, b),
            BinaryOp::Div => div_host(a, b),
            _ => Err(CoreError::Unsupported {
                op: "binary",
                backend: "cpu".into(),
            }),
        },
        Op::Glu { x, act } => glu_host(x, *act),
        Op::Softmax { x } => softmax_last_host(x),
        Op::Embedding { ids, table } => embedding_host(ids, table),
        Op::Rope { x, cos, sin } => rope_host(x, cos, sin),
        Op::RmsNorm { x, w, eps, style } => rms_norm_host(x, w.as_ref(), *eps, *style),
        Op::LayerNorm { x, w, b, eps } => layer_norm_host(x, w.as_ref(), b.as_ref(), *eps),
        Op::Dyt {
            x,
            alpha,
            gamma,
            beta,
        } => dyt_host(x, *alpha, gamma, beta),
        Op::Unfold { x, k } => unfold_host(x, *k),
        Op::Contiguous { x } => x.contiguous_host(),
        Op::ToDtype { x, dtype } => x.to_dtype_host(*dtype),
        Op::FourierFeatures {
            values,
            freqs,
            layout,
        } => fourier_features_host(values, freqs, *layout),
        Op::FillMaskedRows { x, mask, fill } => fill_masked_rows_host(x, mask, fill.as_ref()),
        Op::TorchBf16Linear { x, w, b } => torch_bf16::linear_host(x, w, b.as_ref()),
        Op::TorchBf16Attention { q, k, v, opts } => {
            torch_bf16::attention_host(q, k, v, &opts.opts())
        }
        Op::TorchBf16RmsNorm { x, w, eps } => torch_bf16::rms_norm_host(x, w, *eps),
        Op::TorchBf16Rope { x, cos, sin } => torch_bf16::rope_host(x, cos, sin),
        Op::TorchBf16GeluTanh { x } => torch_bf16::gelu_tanh_host(x),
        Op::TorchBf16Round { x } => torch_bf16::round_tensor_host(x),
        Op::TorchBf16Binary { a, b, f } => torch_bf16::binary_host(a, b, *f),
        Op::Cat { xs, dim } => {
            let refs: Vec<&Tensor> = xs.iter().collect();
            Tensor::cat_host(&refs, *dim)
        }
        Op::RmsNormModulate {
            x,
            gamma,
            eps,
            scale_shift,
        } => rms_norm_modulate_host(x, gamma, *eps, scale_shift.as_ref().map(|(a, b)| (a, b))),
        Op::GatedResidualAdd {
            h,
            u,
            gate,
            row_mask,
        } => gated_residual_add_host(h, u, gate.as_ref(), row_mask.as_ref()),
        Op::SplitHeads {
            x,
            col,
            heads,
            head_dim,
            norm,
            rope,
        } => split_heads_host(
            x,
            *col,
            *heads,
            *head_dim,
            norm.as_ref().map(|(g, e)| (g, *e)),
            rope.as_ref().map(|(c, s)| (c, s)),
        ),
        Op::MergeHeads { x, row_mask } => merge_heads_host(x, row_mask.as_ref()),
        Op::Axpby { a, x, b, y } => axpby_host(a, x, b, y),
        Op::ApgGuidance {
            x,
            v_cond,
            v_uncond,
            sigma,
            mask,
            cfg_scale,
            apg_scale,
            norm_threshold,
        } => apg_guidance_host(
            x,
            v_cond,
            v_uncond,
            sigma,
            mask.as_ref(),
            *cfg_scale,
            *apg_scale,
            *norm_threshold,
        ),
        Op::CfgRescale { v, v_cond, phi } => cfg_rescale_host(v, v_cond, *phi),
        Op::Pad {
            x,
            dim,
            before,
            after,
        } => pad_host(x, *dim, *before, *after),
        Op::RopeTable { inv_freq, pos0, n } => rope_table_host(inv_freq, *pos0, *n),
        Op::QkvHeads {
            x,
            parts,
            part,
            heads,
            alpha,
            norm,
            rope,
        } => qkv_heads_host(
            x,
            *parts,
            *part,
            *heads,
            norm.as_ref()
                .map(|(gamma, beta)| aria_tensor::options::HeadNorm {
                    alpha: *alpha,
                    gamma,
                    beta,
                }),
            rope.as_ref().map(|(c, s)| (c, s)),
        ),
        Op::StdLast { x } => std_last_host(x),
        // An op this crate does not know yet (the set is `#[non_exhaustive]`).
        _ => Err(CoreError::Unsupported {
            op: op.name(),
            backend: "cpu".into(),
        }),
    }
}

/// The f32 elements of a host tensor, borrowed if it is contiguous f32, copied otherwise. A
/// device tensor is an error: CPU kernels never download their inputs.
pub(crate) fn f32_data(t: &Tensor) -> Result<Cow<'_, [f32]>> {
    match t.device() {
        Device::Backend(b) => Err(CoreError::Unsupported {
            op: "cpu kernel input",
            backend: b.name().to_string(),
        }),
        Device::Cpu if t.dtype() == DType::F32 && t.is_contiguous() => {
            Ok(Cow::Borrowed(t.as_slice::<f32>()?))
        }
        Device::Cpu => Ok(Cow::Owned(t.to_vec_f32()?)),
    }
}

/// The elements of a contiguous host float tensor for the product kernels (typed when the
/// storage is aligned for its type).
pub(crate) fn wdata<'a>(op: &'static str, t: &'a Tensor) -> Result<crate::gemm::WData<'a>> {
    use crate::gemm::{Float, WData};
    let ty = match t.dtype() {
        DType::F32 => Float::F32,
        DType::F16 => Float::F16,
        DType::BF16 => Float::Bf16,
        d => {
            return Err(CoreError::DType {
                op,
                dtype: d,
                reason: "a float tensor is required".into(),
            })
        }
    };
    Ok(WData::from_bytes(ty, t.as_bytes()?))
}
