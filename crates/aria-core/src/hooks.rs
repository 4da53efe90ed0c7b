//! Activation hooks: the one door through which steering and analysis observe or modify model
//! activations.
//!
//! A model calls [`run_hook`] at a few named [`HookSite`]s with a [`HookContext`] (step index,
//! sigma, token layout). A hook may return `None` (leave the tensor alone: nothing is copied, and
//! the result is bit-identical to a run without the hook) or `Some(new)` to replace the tensor
//! (same shape). With no hook installed the call is a branch on an `Option`.
//!
//! Sites called by the DiT and its samplers:
//! * [`HookSite::Residual`]`(i)`: the residual stream after block `i` — `[B, P+T, E]`, `P` prefix
//!   (memory) tokens first, then one token per latent frame;
//! * [`HookSite::Latent`]: the sampler state `x` `[B, C, T]` after each step's update;
//! * [`HookSite::TextConditioning`]: the cross-attention context `[B, Nc, Dc]` before the model
//!   projects it (once per generation: the conditioning does not change across steps).
//!
//! Steering ("add or project a direction, strength in units of the mean residual norm") is a hook
//! that reads [`mean_token_norm`] of the tensor it receives and returns the modified tensor; the
//! model code has no other knowledge of it.
//!
//! ```
//! use aria_core::hooks::{run_hook, ActivationHook, HookContext, HookSite};
//! use aria_core::{ops, Result, Tensor};
//!
//! /// Adds 1 to the residual stream after block 0.
//! struct AddOne;
//! impl ActivationHook for AddOne {
//!     fn wants(&self, site: HookSite) -> bool {
//!         site == HookSite::Residual(0)
//!     }
//!     fn on_activation(&self, _ctx: &HookContext<'_>, x: &Tensor) -> Result<Option<Tensor>> {
//!         Ok(Some(ops::add_scalar(x, 1.0)?))
//!     }
//! }
//! # fn main() -> Result<()> {
//! let x = Tensor::zeros(&[1, 2, 3], aria_core::DType::F32);
//! let ctx = HookContext::new(HookSite::Residual(0));
//! let y = run_hook(Some(&AddOne), &ctx, x)?;
//! assert_eq!(y.to_vec::<f32>()?, vec![1.0; 6]);
//! # Ok(()) }
//! ```

use std::sync::Arc;

use crate::{CoreError, Result, Tensor};

/// Where in the model an activation is observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookSite {
    /// Residual stream after DiT block `i` (0-based): `[B, P+T, E]`, prefix tokens first.
    Residual(usize),
    /// The sampler state between steps: `[B, C, T]`.
    Latent,
    /// The cross-attention (text) conditioning before use: `[B, Nc, Dc]`.
    TextConditioning,
}

/// What a hook is told about the tensor it receives.
#[derive(Debug, Clone, Copy)]
pub struct HookContext<'a> {
    /// The site.
    pub site: HookSite,
    /// Sampler step index (0-based), when the call happens inside a sampling loop.
    pub step: Option<usize>,
    /// Noise level per batch row: the `t` the model is evaluated at ([`HookSite::Residual`]), or
    /// the level the state has reached after the step ([`HookSite::Latent`]).
    pub sigma: Option<&'a [f32]>,
    /// Number of leading tokens that are not sequence positions (memory tokens) along the token
    /// axis of a [`HookSite::Residual`] tensor.
    pub prefix_tokens: usize,
    /// Token validity `[B, N]` over the tensor's token axis (non-zero = valid), when the batch
    /// has padded positions.
    pub token_mask: Option<&'a Tensor>,
    /// `Some(b)` when the batch holds `[conditional (b rows); unconditional (b rows)]` for
    /// classifier-free guidance.
    pub guidance_rows: Option<usize>,
}

impl<'a> HookContext<'a> {
    /// A context with only the site set.
    pub fn new(site: HookSite) -> Self {
        HookContext {
            site,
            step: None,
            sigma: None,
            prefix_tokens: 0,
            token_mask: None,
            guidance_rows: None,
        }
    }
}

/// An observer/modifier of activations. Implementations that record state use interior
/// mutability (a `Mutex`), since models hold hooks by shared reference.
pub trait ActivationHook: Send + Sync {
    /// Whether the hook wants to see `site` (a cheap filter; `true` by default). When `false`
    /// the model does not call [`ActivationHook::on_activation`] for that site.
    fn wants(&self, site: HookSite) -> bool {
        let _ = site;
        true
    }

    /// Observe `x`; return `Some(replacement)` (same shape) to modify it, `None` to keep it.
    fn on_activation(&self, ctx: &HookContext<'_>, x: &Tensor) -> Result<Option<Tensor>>;

    /// The class of sampler step `step` for this hook at the model's inner sites
    /// ([`HookSite::Residual`]): `Some(c)` promises that at every step of class `c` the hook
    /// does the same device work, reading nothing of its context but the site, the prefix
    /// tokens, the token mask and the guidance rows (not `step` beyond its class, not `sigma`).
    /// A backend that records a sampler's model evaluation ([`crate::Backend::record`]) then
    /// records one evaluation per class and replays it. `None` (the default): unknown, so the
    /// model is evaluated op by op at every step.
    fn step_class(&self, step: usize) -> Option<Vec<u64>> {
        let _ = step;
        None
    }

    /// Put what the hook will need on `device` (a direction, a table) before a model
    /// evaluation is recorded there, since a recording may not upload. The default has nothing
    /// to put.
    fn prepare(&self, device: &crate::Device) -> Result<()> {
        let _ = device;
        Ok(())
    }
}

/// Call `hook` (if any, and if it wants `ctx.site`) on `x`, returning the tensor to continue with.
/// Checks that a replacement keeps the shape.
pub fn run_hook(
    hook: Option<&dyn ActivationHook>,
    ctx: &HookContext<'_>,
    x: Tensor,
) -> Result<Tensor> {
    let Some(h) = hook else { return Ok(x) };
    if !h.wants(ctx.site) {
        return Ok(x);
    }
    match h.on_activation(ctx, &x)? {
        None => Ok(x),
        Some(y) if y.shape() == x.shape() => Ok(y),
        Some(y) => Err(CoreError::shape(
            "activation hook",
            format!("a hook at {:?} returned another shape", ctx.site),
            &[x.shape(), y.shape()],
        )),
    }
}

/// A hook that does nothing (for tests and as a placeholder).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopHook;

impl ActivationHook for NoopHook {
    fn on_activation(&self, _ctx: &HookContext<'_>, _x: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Every step alike.
    fn step_class(&self, _step: usize) -> Option<Vec<u64>> {
        Some(Vec::new())
    }
}

/// Several hooks applied in order (each sees the previous one's output).
#[derive(Clone, Default)]
pub struct HookList {
    hooks: Vec<Arc<dyn ActivationHook>>,
}

impl HookList {
    /// An empty list.
    pub fn new() -> Self {
        HookList::default()
    }

    /// Append a hook.
    pub fn push(&mut self, hook: Arc<dyn ActivationHook>) {
        self.hooks.push(hook);
    }

    /// Number of hooks.
    pub fn len(&self) -> usize {
        self.hooks.len()
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// `Some(self)` as a hook if non-empty, so that an empty list costs nothing.
    pub fn as_hook(&self) -> Option<&dyn ActivationHook> {
        if self.is_empty() {
            None
        } else {
            Some(self)
        }
    }
}

impl ActivationHook for HookList {
    fn wants(&self, site: HookSite) -> bool {
        self.hooks.iter().any(|h| h.wants(site))
    }

    /// The classes of the hooks, each preceded by its length: `None` if any hook's is.
    fn step_class(&self, step: usize) -> Option<Vec<u64>> {
        let mut c = Vec::new();
        for h in &self.hooks {
            let one = h.step_class(step)?;
            c.push(one.len() as u64);
            c.extend(one);
        }
        Some(c)
    }

    fn prepare(&self, device: &crate::Device) -> Result<()> {
        self.hooks.iter().try_for_each(|h| h.prepare(device))
    }

    fn on_activation(&self, ctx: &HookContext<'_>, x: &Tensor) -> Result<Option<Tensor>> {
        let mut cur: Option<Tensor> = None;
        for h in &self.hooks {
            if !h.wants(ctx.site) {
                continue;
            }
            let input = cur.as_ref().unwrap_or(x);
            if let Some(y) = h.on_activation(ctx, input)? {
                cur = Some(y);
            }
        }
        Ok(cur)
    }
}

/// A hook made of a closure, for a given set of sites (`None`: every site).
pub struct FnHook<F> {
    sites: Option<Vec<HookSite>>,
    f: F,
}

impl<F> FnHook<F>
where
    F: Fn(&HookContext<'_>, &Tensor) -> Result<Option<Tensor>> + Send + Sync,
{
    /// Wrap `f`, called at `sites` (`None`: all sites).
    pub fn new(sites: Option<Vec<HookSite>>, f: F) -> Self {
        FnHook { sites, f }
    }
}

impl<F> ActivationHook for FnHook<F>
where
    F: Fn(&HookContext<'_>, &Tensor) -> Result<Option<Tensor>> + Send + Sync,
{
    fn wants(&self, site: HookSite) -> bool {
        self.sites.as_ref().is_none_or(|s| s.contains(&site))
    }

    fn on_activation(&self, ctx: &HookContext<'_>, x: &Tensor) -> Result<Option<Tensor>> {
        (self.f)(ctx, x)
    }
}

/// Mean L2 norm of the token vectors of a `[B, N, D]` tensor, per batch row, over valid tokens
/// (those past `ctx.prefix_tokens` with a non-zero `ctx.token_mask` entry). The unit in which
/// steering strengths are expressed. Rows with no valid token give 0.
pub fn mean_token_norm(x: &Tensor, ctx: &HookContext<'_>) -> Result<Vec<f32>> {
    let s = x.shape();
    if s.len() != 3 {
        return Err(CoreError::shape(
            "mean_token_norm",
            "x must be [B, N, D]",
            &[s],
        ));
    }
    let (b, n, d) = (s[0], s[1], s[2]);
    let mask = match ctx.token_mask {
        Some(m) if m.shape() == [b, n] => Some(m.to_vec_f32()?),
        Some(m) => {
            return Err(CoreError::shape(
                "mean_token_norm",
                "token_mask must be [B, N]",
                &[s, m.shape()],
            ))
        }
        None => None,
    };
    let data = x.contiguous()?.to_vec_f32()?;
    let mut out = Vec::with_capacity(b);
    for bi in 0..b {
        let (mut sum, mut cnt) = (0f64, 0usize);
        for ni in ctx.prefix_tokens.min(n)..n {
            if mask.as_ref().is_some_and(|m| m[bi * n + ni] == 0.0) {
                continue;
            }
            let row = &data[(bi * n + ni) * d..(bi * n + ni + 1) * d];
            sum += row
                .iter()
                .map(|v| (*v as f64) * (*v as f64))
                .sum::<f64>()
                .sqrt();
            cnt += 1;
        }
        out.push(if cnt == 0 {
            0.0
        } else {
            (sum / cnt as f64) as f32
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn noop_keeps_tensor_and_list_chains() -> Result<()> {
        let x = Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], &[1, 2, 2])?;
        let ctx = HookContext::new(HookSite::Latent);
        let y = run_hook(Some(&NoopHook), &ctx, x.clone())?;
        assert!(Arc::ptr_eq(x.storage(), y.storage()));
        let mut list = HookList::new();
        assert!(list.as_hook().is_none());
        list.push(Arc::new(FnHook::new(
            Some(vec![HookSite::Latent]),
            |_c: &HookContext<'_>, t: &Tensor| Ok(Some(crate::ops::mul_scalar(t, 2.0)?)),
        )));
        list.push(Arc::new(FnHook::new(
            None,
            |_c: &HookContext<'_>, t: &Tensor| Ok(Some(crate::ops::add_scalar(t, 1.0)?)),
        )));
        let y = run_hook(list.as_hook(), &ctx, x.clone())?;
        assert_eq!(y.to_vec::<f32>()?, vec![3.0, 5.0, 7.0, 9.0]);
        // The first hook does not want Residual sites.
        let y = run_hook(list.as_hook(), &HookContext::new(HookSite::Residual(3)), x)?;
        assert_eq!(y.to_vec::<f32>()?, vec![2.0, 3.0, 4.0, 5.0]);
        Ok(())
    }

    #[test]
    fn shape_change_is_an_error() {
        let x = Tensor::zeros(&[1, 2, 2], DType::F32);
        let h = FnHook::new(None, |_c: &HookContext<'_>, _t: &Tensor| {
            Ok(Some(Tensor::zeros(&[4], DType::F32)))
        });
        assert!(run_hook(Some(&h), &HookContext::new(HookSite::Latent), x).is_err());
    }

    #[test]
    fn mean_norm_respects_prefix_and_mask() -> Result<()> {
        // B=1, N=3, D=2: prefix token (norm 10), valid token (norm 5), padded token (norm 1).
        let x = Tensor::from_vec(vec![6f32, 8.0, 3.0, 4.0, 1.0, 0.0], &[1, 3, 2])?;
        let m = Tensor::from_vec(vec![1u8, 1, 0], &[1, 3])?;
        let mut ctx = HookContext::new(HookSite::Residual(0));
        ctx.prefix_tokens = 1;
        ctx.token_mask = Some(&m);
        assert_eq!(mean_token_norm(&x, &ctx)?, vec![5.0]);
        ctx.token_mask = None;
        assert_eq!(mean_token_norm(&x, &ctx)?, vec![3.0]);
        Ok(())
    }
}
