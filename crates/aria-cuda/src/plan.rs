//! Which kernel (or cuBLAS product) runs each op of the contract, decided without a device.
//!
//! [`route`] maps an [`Op`] to its [`Route`]; [`CudaBackend`](crate::CudaBackend) refuses
//! every op routed to [`Route::Unsupported`] with [`CoreError::Unsupported`] naming the op and
//! the backend before touching the device, and launches the entry points named here.

use aria_tensor::backend::{Op, UnaryOp};
use aria_tensor::format::WeightFormat;
use aria_tensor::CoreError;

/// How an op runs on the CUDA backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A cuBLAS product, with the kernels it needs around it (bias, im2col).
    Gemm(&'static [&'static str]),
    /// One or more kernel launches of these entry points.
    Kernels(&'static [&'static str]),
    /// Not implemented on this backend.
    Unsupported,
}

/// The route of `op`.
pub fn route(op: &Op) -> Route {
    use Route::*;
    match op {
        Op::Linear { .. } => Gemm(&["add_bias_f32"]),
        Op::Matmul { .. } => Gemm(&[]),
        Op::Conv1d { .. } => Gemm(&["im2col_f32", "add_bias_f32"]),
        Op::Attention { .. } => Kernels(&["flash_attn_f32"]),
        Op::Unary { f, .. } if unary_code(*f).is_some() => Kernels(&["unary_f32"]),
        Op::Affine { .. } | Op::MulScalar { .. } | Op::AddScalar { .. } => Kernels(&["affine_f32"]),
        Op::Binary { .. } => Kernels(&["binary_f32"]),
        Op::Glu { .. } => Kernels(&["glu_f32"]),
        Op::Softmax { .. } => Kernels(&["softmax_f32"]),
        Op::Rope { .. } => Kernels(&["rope_f32"]),
        Op::RmsNorm { .. } => Kernels(&["rms_norm_f32"]),
        Op::LayerNorm { .. } => Kernels(&["layer_norm_f32"]),
        Op::Dyt { .. } => Kernels(&["dyt_f32"]),
        Op::Unfold { .. } => Kernels(&["unfold_f32"]),
        Op::Contiguous { .. } | Op::Cat { .. } | Op::Pad { .. } => Kernels(&[
            "strided_copy_b64",
            "strided_copy_b32",
            "strided_copy_b16",
            "strided_copy_b8",
        ]),
        Op::ToDtype { .. } => Kernels(&[
            "f16_to_f32",
            "bf16_to_f32",
            "f32_to_f16",
            "f32_to_bf16",
            "i8_to_f32",
            "u8_to_f32",
            "i64_to_f32",
        ]),
        Op::RmsNormModulate { .. } => Kernels(&["rms_norm_modulate_f32"]),
        Op::GatedResidualAdd { .. } => Kernels(&["gated_residual_add_f32"]),
        Op::SplitHeads { .. } => Kernels(&["split_heads_f32"]),
        Op::MergeHeads { .. } => Kernels(&["merge_heads_f32"]),
        Op::Axpby { .. } => Kernels(&["axpby_f32"]),
        Op::StdLast { .. } => Kernels(&["std_last_f32"]),
        Op::Embedding { .. } => Kernels(&["embedding_f32"]),
        Op::FourierFeatures { .. } => Kernels(&["fourier_features_f32"]),
        Op::FillMaskedRows { .. } => Kernels(&["fill_masked_rows_f32"]),
        Op::ApgGuidance { .. } => Kernels(&["apg_guidance_f32"]),
        Op::CfgRescale { .. } => Kernels(&["cfg_rescale_f32"]),
        Op::LinearPacked {
            format: WeightFormat::Q8_0,
            w8a8: false,
            ..
        } => Kernels(&["linear_q8_0_f32"]),
        Op::LinearPacked {
            format: WeightFormat::Q8_0,
            w8a8: true,
            ..
        } => Kernels(&["quantize_rows_i8", "linear_q8_0_w8a8_f32"]),
        Op::LinearPacked {
            format: WeightFormat::Bf16Panels,
            w8a8: false,
            ..
        } => Kernels(&["linear_bf16_pairs_f32"]),
        Op::LinearPacked {
            format: WeightFormat::Q4K,
            w8a8: false,
            ..
        } => Kernels(&["linear_q4_k_f32"]),
        Op::LinearPacked {
            format: WeightFormat::Q6K,
            w8a8: false,
            ..
        } => Kernels(&["linear_q6_k_f32"]),
        Op::QkvHeads { .. } => Kernels(&["qkv_heads_f32"]),
        Op::RopeTable { .. } => Kernels(&["rope_table_f32"]),
        _ => Unsupported,
    }
}

/// The `f` code of `unary_f32`.
pub fn unary_code(f: UnaryOp) -> Option<i32> {
    Some(match f {
        UnaryOp::Silu => 0,
        UnaryOp::Sigmoid => 1,
        UnaryOp::Tanh => 2,
        UnaryOp::SinPi => 3,
        UnaryOp::Gelu => 4,
        UnaryOp::GeluTanh => 5,
        _ => return None,
    })
}

/// The error for an op this backend does not run.
pub fn unsupported(op: &Op) -> CoreError {
    CoreError::Unsupported {
        op: op.name(),
        backend: crate::NAME.to_string(),
    }
}

/// `Ok` when `op` has a route, else [`unsupported`].
pub fn check(op: &Op) -> Result<Route, CoreError> {
    match route(op) {
        Route::Unsupported => Err(unsupported(op)),
        r => Ok(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::all_entries;
    use aria_tensor::backend::BinaryOp;
    use aria_tensor::options::{GluAct, RmsStyle};
    use aria_tensor::{DType, Tensor};

    fn t(shape: &[usize]) -> Tensor {
        Tensor::zeros(shape, DType::F32)
    }

    fn sample_ops() -> Vec<Op> {
        let x = t(&[1, 2, 4]);
        vec![
            Op::Linear {
                x: x.clone(),
                w: t(&[3, 4]),
                b: None,
                prepared: None,
            },
            Op::Matmul {
                a: t(&[2, 2]),
                b: t(&[2, 2]),
            },
            Op::Conv1d {
                x: x.clone(),
                w: t(&[1, 2, 3]),
                b: None,
                padding: 1,
            },
            Op::Unary {
                x: x.clone(),
                f: UnaryOp::Gelu,
            },
            Op::Affine {
                x: x.clone(),
                a: 2.0,
                b: 1.0,
            },
            Op::Binary {
                a: x.clone(),
                b: x.clone(),
                f: BinaryOp::Mul,
            },
            Op::Glu {
                x: x.clone(),
                act: GluAct::Silu,
            },
            Op::Softmax { x: x.clone() },
            Op::RmsNorm {
                x: x.clone(),
                w: None,
                eps: 1e-6,
                style: RmsStyle::Plain,
            },
            Op::Contiguous { x: x.clone() },
            Op::ToDtype {
                x: x.clone(),
                dtype: DType::F16,
            },
            Op::Cat {
                xs: vec![x.clone(), x.clone()],
                dim: 1,
            },
            Op::StdLast { x: x.clone() },
            Op::Embedding {
                ids: Tensor::zeros(&[2], DType::I64),
                table: t(&[4, 2]),
            },
            Op::TorchBf16Round { x: x.clone() },
            Op::RopeTable {
                inv_freq: t(&[2]),
                pos0: 0,
                n: 3,
            },
            Op::CfgRescale {
                v: t(&[1, 2, 3]),
                v_cond: t(&[1, 2, 3]),
                phi: 0.7,
            },
            Op::LinearPacked {
                x: t(&[2, 32]),
                w: Tensor::zeros(&[3, 34], DType::U8),
                format: WeightFormat::Q8_0,
                w8a8: true,
                shape: [3, 32],
                b: None,
            },
            Op::LinearPacked {
                x: t(&[2, 32]),
                w: Tensor::zeros(&[3, 34], DType::U8),
                format: WeightFormat::Q8_0,
                w8a8: false,
                shape: [3, 32],
                b: None,
            },
            Op::LinearPacked {
                x: t(&[2, 3]),
                w: Tensor::zeros(&[3, 8], DType::U8),
                format: WeightFormat::Bf16Panels,
                w8a8: false,
                shape: [3, 3],
                b: None,
            },
        ]
    }

    #[test]
    fn every_routed_entry_point_is_compiled() {
        let entries: Vec<&str> = all_entries().map(|(_, e)| e).collect();
        for op in sample_ops() {
            let names = match route(&op) {
                Route::Gemm(k) | Route::Kernels(k) => k,
                Route::Unsupported => continue,
            };
            for n in names {
                assert!(entries.contains(n), "{}: {n} is not in kernels/", op.name());
            }
        }
    }

    #[test]
    fn unsupported_ops_name_the_op_and_the_backend() {
        let op = Op::TorchBf16Round { x: t(&[2]) };
        match check(&op) {
            Err(CoreError::Unsupported { op, backend }) => {
                assert_eq!((op, backend.as_str()), ("torch_bf16_round", "cuda"));
            }
            other => panic!("expected Unsupported, got {other:?}"),
        }
        let msg = unsupported(&Op::TorchBf16Round { x: t(&[1]) }).to_string();
        assert!(
            msg.contains("torch_bf16_round") && msg.contains("cuda"),
            "{msg}"
        );
        assert!(check(&Op::Softmax { x: t(&[2]) }).is_ok());
    }

    #[test]
    fn unary_codes_match_the_kernel() {
        // `unary_f32`'s switch: 0 silu, 1 sigmoid, 2 tanh, 3 sin(pi x), 4 gelu, 5 gelu (tanh).
        let all = [
            UnaryOp::Silu,
            UnaryOp::Sigmoid,
            UnaryOp::Tanh,
            UnaryOp::SinPi,
            UnaryOp::Gelu,
            UnaryOp::GeluTanh,
        ];
        let codes: Vec<i32> = all.iter().filter_map(|&f| unary_code(f)).collect();
        assert_eq!(codes, vec![0, 1, 2, 3, 4, 5]);
    }
}
