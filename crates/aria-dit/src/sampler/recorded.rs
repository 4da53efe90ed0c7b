//! The DiT evaluation of a sampler step, recorded once on a backend that records
//! ([`Backend::record`]: a CUDA graph) and replayed at every step.
//!
//! A step's evaluation runs the same ops on buffers of the same shapes at every step; what
//! changes is the state `x` and the noise levels `σ`. [`Recordings`] keeps, per kind of step,
//! three device buffers (`x`, `σ`, the velocity) and one recording that reads the first two
//! and writes the third. Before each replay the step's `x` and `σ` are written into the
//! buffers ([`Backend::write_into`]); `σ` is read on the device by the timestep features, so
//! nothing per step is baked into the recording.
//!
//! A kind of step is whether guidance runs (a CFG interval switches it on and off) and the
//! hook's class of the step ([`ActivationHook::step_class`]: for a steering hook, which
//! steerings' spans hold the step); each kind is recorded the first time it occurs. A hook
//! that gives no class (it may read σ or the step) turns recording off, as does a backend
//! that does not record (the CPU, wgpu): the DiT is then evaluated op by op, as before.

use std::sync::{Arc, Mutex};

use aria_core::backend::Recorded;
use aria_core::hooks::ActivationHook;
use aria_core::ops::KeyMaskMode;
use aria_core::{Backend, CoreError, DType, Device, Tensor};

use crate::dit::{Dit, DitContext, ForwardOptions};
use crate::{DitError, Result};

/// One recorded evaluation and the buffers it reads and writes.
struct Recording<'a> {
    guided: bool,
    class: Vec<u64>,
    x: Tensor,
    sigma: Tensor,
    v: Tensor,
    rec: Box<dyn Recorded + 'a>,
}

/// What a recording needs of the guided model.
pub(super) struct Source<'a, 'b> {
    pub dit: &'a Dit,
    pub ctx: &'b DitContext,
    pub padding_mask: Option<&'b Tensor>,
    pub mask_mode: KeyMaskMode,
    pub hook: Option<&'a dyn ActivationHook>,
}

/// The recorded evaluations of one guided model (see the module docs).
pub(super) struct Recordings<'a> {
    /// `None` once recording is off for this model (a backend that does not record).
    list: Mutex<Option<Vec<Recording<'a>>>>,
}

fn core(e: DitError) -> CoreError {
    match e {
        DitError::Core(c) => c,
        other => CoreError::Invalid(other.to_string()),
    }
}

impl<'a> Recordings<'a> {
    /// Recordings to be made (`on`), or none.
    pub(super) fn new(on: bool) -> Self {
        Recordings {
            list: Mutex::new(on.then(Vec::new)),
        }
    }

    /// The velocity rows of `x` (`[cond; uncond]` when `guided`: `x` twice) at `sigma` (one
    /// value per row of `x`), from a replay; `None` where the step is evaluated op by op.
    /// The result is the recording's buffer, which the next replay overwrites: use it before
    /// then, or copy it.
    pub(super) fn velocity(
        &self,
        src: &Source<'a, '_>,
        x: &Tensor,
        sigma: &[f32],
        step: usize,
        guided: bool,
    ) -> Result<Option<Tensor>> {
        let Device::Backend(be) = x.device() else {
            return Ok(None);
        };
        let class = match src.hook {
            None => Vec::new(),
            Some(h) => match h.step_class(step) {
                Some(c) => c,
                None => return Ok(None),
            },
        };
        let mut guard = self.list.lock().map_err(|_| {
            DitError::Core(CoreError::Invalid("sampler recordings poisoned".into()))
        })?;
        let Some(list) = guard.as_mut() else {
            return Ok(None);
        };
        let i = match list
            .iter()
            .position(|r| r.guided == guided && r.class == class)
        {
            Some(i) => i,
            None => match record(&be, src, x, step, guided, class)? {
                Some(r) => {
                    list.push(r);
                    list.len() - 1
                }
                None => {
                    *guard = None;
                    return Ok(None);
                }
            },
        };
        let r = &list[i];
        let x = x.to_dtype(DType::F32)?;
        let (x, sigma) = if guided {
            let s: Vec<f32> = sigma.iter().chain(sigma).copied().collect();
            (Tensor::cat(&[&x, &x], 0)?, s)
        } else {
            (x, sigma.to_vec())
        };
        be.write_into(&r.x, &x)?;
        let n = sigma.len();
        be.write_into(&r.sigma, &Tensor::from_vec(sigma, &[n])?)?;
        r.rec.replay()?;
        Ok(Some(r.v.clone()))
    }
}

/// Record one evaluation for steps of this kind; `None` if the backend does not record.
fn record<'a>(
    be: &Arc<dyn Backend>,
    src: &Source<'a, '_>,
    x: &Tensor,
    step: usize,
    guided: bool,
    class: Vec<u64>,
) -> Result<Option<Recording<'a>>> {
    let dev = Device::Backend(be.clone());
    let &[b, c, t] = x.shape() else {
        return Err(DitError::Input {
            what: "x".into(),
            reason: format!("shape {:?}, expected [B, C, T]", x.shape()),
        });
    };
    let rows = if guided { 2 * b } else { b };
    let xs = dev.put(&Tensor::zeros(&[rows, c, t], DType::F32))?;
    let sigma = dev.put(&Tensor::zeros(&[rows], DType::F32))?;
    let v = dev.put(&Tensor::zeros(&[rows, c, t], DType::F32))?;
    let key_mask = src.dit.key_mask_of(&xs, src.padding_mask)?;
    if let Some(h) = src.hook {
        h.prepare(&dev)?;
    }
    let (dit, hook, mask_mode) = (src.dit, src.hook, src.mask_mode);
    let ctx = src.ctx.clone();
    let (xw, sw, vw, bw) = (xs.clone(), sigma.clone(), v.clone(), be.clone());
    let work = move || -> aria_core::Result<()> {
        let fo = ForwardOptions {
            mask_mode,
            hook,
            step: Some(step),
            guidance_rows: guided.then_some(b),
            ..Default::default()
        };
        let out = dit
            .forward_recordable(&xw, &sw, &ctx, key_mask.as_ref(), &fo)
            .map_err(core)?;
        bw.write_into(&vw, &out.v)
    };
    Ok(be.record(Box::new(work))?.map(|rec| Recording {
        guided,
        class,
        x: xs,
        sigma,
        v,
        rec,
    }))
}
