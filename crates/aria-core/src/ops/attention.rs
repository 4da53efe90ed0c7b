use super::{f32_data, route};
use crate::backend::{AttnSpec, Op};
use crate::cpu::attention::{self as kernel, Dims};
use crate::{threads, CoreError, Result, Tensor};

/// How a key mask is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyMaskMode {
    /// The official CPU semantics (PyTorch SDPA after `v ← v ⊙ mask`): masked keys keep their
    /// weight in the softmax denominator but contribute zero values.
    #[default]
    ZeroValues,
    /// True masking: masked keys are excluded from the softmax. A query with no valid key
    /// outputs zeros.
    Exclude,
}

/// Options of [`attention`].
#[derive(Debug, Clone, Copy)]
pub struct AttnOpts<'a> {
    /// Multiplier of `q·k` (usually `1/sqrt(head_dim)`).
    pub scale: f32,
    /// Logit soft-capping `c·tanh(s/c)` applied after scaling.
    pub softcap: Option<f32>,
    /// Key validity mask `[B, Nk]` (any dtype; non-zero = valid).
    pub key_mask: Option<&'a Tensor>,
    /// How `key_mask` is applied.
    pub mask_mode: KeyMaskMode,
    /// Band: query `i` sees keys `j` with `i - left <= j <= i + right` (self-attention).
    pub window: Option<(usize, usize)>,
    /// The two products may round `q`, `k`, the probabilities and `v` to bf16 (f32
    /// accumulation; scaling, masking and the softmax stay f32). A permission, not an order: a
    /// backend takes it where it has a faster unit for bf16 products (the CPU: the AMX tile
    /// unit, see [`attention_amx`]) and computes in f32 elsewhere. Models set it for a bf16
    /// precision mode; they never ask which unit runs it.
    pub bf16_products: bool,
}

impl<'a> AttnOpts<'a> {
    /// Plain attention with the given scale.
    pub fn new(scale: f32) -> Self {
        AttnOpts {
            scale,
            softcap: None,
            key_mask: None,
            mask_mode: KeyMaskMode::ZeroValues,
            window: None,
            bf16_products: false,
        }
    }
}

/// Fused scaled-dot-product attention.
///
/// `q [B, H, Nq, D]`, `k [B, H, Nk, D]`, `v [B, H, Nk, Dv]` (f32; any strides, so head-split views
/// of `[B, N, H, D]` projections can be passed without copying) → `[B, H, Nq, Dv]` contiguous.
/// Softmax is computed in f32 with the maximum subtracted.
///
/// On the CPU this runs [`aria_cpu::attention::attention`]: queries in tiles, each computing its
/// row of scores (only the keys its rows can see: with a `window` the work is O(N · band), never
/// O(N²)), an exact max-subtracted softmax, and `P·V`, with the packed matrix micro-kernels.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: None,
            opts: AttnSpec::of(opts)
        }
    )
}

/// The CPU body of [`attention`] (the CPU backend runs it on checked operands).
pub(crate) fn attention_host(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    // The CPU takes the bf16 permission on the AMX tile unit only (elsewhere f32 is as fast).
    #[cfg(target_arch = "x86_64")]
    if opts.bf16_products
        && crate::cpu::current() == crate::cpu::Isa::Avx512
        && crate::cpu::bf16dot::use_tiles()
    {
        return attention_amx(q, k, v, opts);
    }
    attention_impl(q, k, None, v, opts)
}

/// Differential attention `Attn(q, k, v) − Attn(q2, k2, v)` (same `v`, same options for both
/// halves), fused: the two probability rows are subtracted before one product with `v`.
///
/// Shapes as in [`attention`]; `q2` must match `q` and `k2` must match `k`.
pub fn attention_diff(
    q: &Tensor,
    k: &Tensor,
    q2: &Tensor,
    k2: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    route!(
        "attention",
        [q, k, q2, k2, v, opts.key_mask],
        Op::Attention {
            q: q.clone(),
            k: k.clone(),
            v: v.clone(),
            diff: Some((q2.clone(), k2.clone())),
            opts: AttnSpec::of(opts)
        }
    )
}

/// The CPU body of [`attention_diff`] (the CPU backend runs it on checked operands).
pub(crate) fn attention_diff_host(
    q: &Tensor,
    k: &Tensor,
    q2: &Tensor,
    k2: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<Tensor> {
    attention_impl(q, k, Some((q2, k2)), v, opts)
}

/// [`attention`] with its two products on the AMX tile unit (x86-64 CPUs with AMX-BF16 and
/// AVX-512 BF16, on Linux): `q`, `k`, the probabilities and `v` rounded to bf16 (nearest even),
/// f32 accumulation, scaling, soft-capping, masking and the softmax in f32 as in [`attention`].
/// Each output is one accumulation in one tile register on one thread, so neither the blocking
/// nor the thread count changes a bit; the unit's rounding inside a `tdpbf16ps` is its own.
/// A window is applied to the scores (the whole score row is computed).
///
/// CPU tensors only; an error names what is missing where the unit is not there.
pub fn attention_amx(q: &Tensor, k: &Tensor, v: &Tensor, opts: &AttnOpts<'_>) -> Result<Tensor> {
    for t in [q, k, v] {
        if let crate::Device::Backend(be) = t.device() {
            return Err(CoreError::Unsupported {
                op: "attention (AMX)",
                backend: be.name().to_string(),
            });
        }
    }
    let (dims, mask) = dims_and_mask(q, k, v, opts)?;
    #[cfg(target_arch = "x86_64")]
    if crate::cpu::bf16dot::amx_available() && crate::cpu::bf16dot::native() {
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

/// The sizes (the check step's rules) and the key mask as flags.
fn dims_and_mask(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: &AttnOpts<'_>,
) -> Result<(Dims, Option<Vec<bool>>)> {
    let dims = crate::backend::check::attention_dims(q, k, v, None, opts.key_mask, opts.window)?;
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
