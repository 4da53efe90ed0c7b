use super::f32_data;
use crate::attention::{self as kernel, Dims};
use crate::threads;
use aria_tensor::options::{AttnOpts, KeyMaskMode};
use aria_tensor::{CoreError, Result, Tensor};

/// The CPU body of `aria_core::ops::attention`, on checked operands.
pub fn attention_host(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    // The CPU takes the bf16 permission on the AMX tile unit only (elsewhere f32 is as fast).
    #[cfg(target_arch = "x86_64")]
    if opts.bf16_products && crate::current() == crate::Isa::Avx512 && crate::bf16dot::use_tiles() {
        return attention_amx(q, k, v, opts);
    }
    attention_impl(q, k, None, v, opts)
}

/// The CPU body of `aria_core::ops::attention_diff`, on checked operands.
pub fn attention_diff_host(
    q: &Tensor,
    k: &Tensor,
    q2: &Tensor,
    k2: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    attention_impl(q, k, Some((q2, k2)), v, opts)
}

/// The sizes (the check step's rules) and the key mask as flags.
fn dims_and_mask(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<(Dims, Option<Vec<bool>>)> {
    let dims =
        aria_tensor::backend::check::attention_dims(q, k, v, None, opts.key_mask, opts.window)?;
    let mask = match opts.key_mask {
        Some(m) => Some(m.to_vec_f32()?.iter().map(|&x| x != 0.0).collect()),
        None => None,
    };
    Ok((dims, mask))
}

/// The kernel's rule for these options.
fn rule(opts: &AttnOpts<'_>) -> kernel::Rule {
    kernel::Rule {
        scale: opts.scale,
        softcap: opts.softcap,
        exclude: opts.mask_mode == KeyMaskMode::Exclude,
        window: opts.window,
    }
}

fn attention_impl(
    q: &Tensor,
    k: &Tensor,
    diff: Option<(&Tensor, &Tensor)>,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    let (dims, mask) = dims_and_mask(q, k, v, opts)?;
    let (qc, kc, vc) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
    let (qd, kd, vd) = (f32_data(&qc)?, f32_data(&kc)?, f32_data(&vc)?);
    let diff_c = diff
        .map(|(q2, k2)| Ok::<_, CoreError>((q2.contiguous()?, k2.contiguous()?)))
        .transpose()?;
    let diff_d = match &diff_c {
        Some((q2, k2)) => Some((f32_data(q2)?, f32_data(k2)?)),
        None => None,
    };
    let db = diff_d.as_ref().map(|(q2, k2)| (&q2[..], &k2[..]));
    let out = threads::install(|| {
        kernel::attention(&qd, &kd, db, &vd, dims, &rule(opts), mask.as_deref())
    });
    Tensor::from_vec(out, &[dims.b, dims.h, dims.nq, dims.dv])
}

/// Attention (`aria_core::ops::attention`) with its two products on the AMX tile unit (x86-64 CPUs with AMX-BF16 and
/// AVX-512 BF16, on Linux): `q`, `k`, the probabilities and `v` rounded to bf16 (nearest even),
/// f32 accumulation, scaling, soft-capping, masking and the softmax in f32 as in the op.
/// Each output is one accumulation in one tile register on one thread, so neither the blocking
/// nor the thread count changes a bit; the unit's rounding inside a `tdpbf16ps` is its own.
/// A window is applied to the scores (the whole score row is computed).
///
/// CPU tensors only; an error names what is missing where the unit is not there.
pub fn attention_amx(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    for t in [q, k, v] {
        if let aria_tensor::Device::Backend(be) = t.device() {
            return Err(CoreError::Unsupported {
                op: "attention (AMX)",
                backend: be.name().to_string(),
            });
        }
    }
    let (dims, mask) = dims_and_mask(q, k, v, opts)?;
    #[cfg(target_arch = "x86_64")]
    if crate::bf16dot::amx_available() && crate::bf16dot::native() {
        let (qc, kc, vc) = (q.contiguous()?, k.contiguous()?, v.contiguous()?);
        let (qd, kd, vd) = (f32_data(&qc)?, f32_data(&kc)?, f32_data(&vc)?);
        let out = threads::install(|| {
            kernel::attention_amx(&qd, &kd, &vd, dims, &rule(opts), mask.as_deref())
        });
        return Tensor::from_vec(out, &[dims.b, dims.h, dims.nq, dims.dv]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (dims, mask);
    Err(CoreError::Unsupported {
        op: "attention (AMX)",
        backend: "cpu (no AMX-BF16 tile unit with AVX-512 BF16 granted)".into(),
    })
}
