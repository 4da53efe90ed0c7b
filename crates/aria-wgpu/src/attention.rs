//! `attention` (`attention.wgsl`): full, key-masked (both CPU modes), banded, soft-capped and
//! differential attention with the CPU op's shape rules.

use super::launch::{shader, Bind, Shader, Uniforms};
use super::linear::u32_of;
use super::{be_err, WgpuBackend};
use aria_tensor::backend::AttnSpec;
use aria_tensor::options::KeyMaskMode;
use aria_tensor::storage::Storage;
use aria_tensor::{CoreError, DType, Result, Tensor};

const ATTENTION: Shader = shader!("attention.wgsl", "math.wgsl");

/// The largest head dimension the kernel takes (q/k and v rows live in registers).
const MAX_HEAD_DIM: usize = 256;

impl WgpuBackend {
    /// `t` on this device as f32, views kept (the kernel reads strides), with its
    /// `[offset, s0, s1, s2, s3]` in elements.
    fn strided_f32(&self, t: &Tensor) -> Result<(Tensor, [u32; 5])> {
        let t = match &**t.storage() {
            Storage::Device(_) if t.dtype() == DType::F32 => t.clone(),
            _ => self.operand_as_f32(t)?,
        };
        let (_, off) = self.binding_of(&t)?;
        let st = t.strides();
        let mut v = [off, 0, 0, 0, 0];
        for (dst, &s) in v[1..].iter_mut().zip(st) {
            *dst = u32_of("attention", s)?;
        }
        Ok((t, v))
    }

    pub(crate) fn attention(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        diff: Option<(&Tensor, &Tensor)>,
        opts: &AttnSpec,
    ) -> Result<Tensor> {
        const OP: &str = "attention";
        let aria_tensor::backend::check::AttnDims {
            b,
            h,
            nq,
            nk,
            d,
            dv,
        } = aria_tensor::backend::check::attention_dims(
            q,
            k,
            v,
            diff,
            opts.key_mask.as_ref(),
            opts.window,
        )?;
        if d > MAX_HEAD_DIM || dv > MAX_HEAD_DIM {
            return Err(be_err(format!(
                "attention: head dimensions {d}/{dv} exceed the kernel's {MAX_HEAD_DIM}"
            )));
        }
        let out = self.alloc(&[b, h, nq, dv], DType::F32)?;
        if b * h * nq * dv == 0 {
            return Ok(out);
        }
        let (qt, qv) = self.strided_f32(q)?;
        let (kt, kv) = self.strided_f32(k)?;
        let (vt, vv) = self.strided_f32(v)?;
        let d2 = diff
            .map(|(q2, k2)| Ok::<_, CoreError>((self.strided_f32(q2)?, self.strided_f32(k2)?)))
            .transpose()?;
        let mask = opts
            .key_mask
            .as_ref()
            .map(|m| self.operand_as_f32(m))
            .transpose()?;
        let m_off = mask.as_ref().map(|m| self.binding_of(m)).transpose()?;
        u32_of(OP, b * h * nq * dv)?;
        let (wl, wr) = opts.window.unwrap_or((0, 0));
        let pow2 = |x: usize| x.max(4).next_power_of_two();
        let (maxd, maxdv) = (pow2(d), pow2(dv));
        let isdiff = usize::from(d2.is_some());
        // Keys per tile: the knob, lowered until the tiles fit the workgroup memory.
        let l = &self.ctx.limits;
        let wg_mem = l.max_compute_workgroup_storage_size as usize;
        let per_key = 4 * (maxd * (1 + isdiff) + maxdv + 1);
        let mut tk = (self.ctx.knobs.attn_keys.max(1) as usize).min(nk.max(1));
        while tk > 1 && tk * per_key + 16 > wg_mem {
            tk /= 2;
        }
        if tk * per_key + 16 > wg_mem {
            return Err(be_err(format!(
                "attention: one key tile needs {} bytes of workgroup memory, the device has {wg_mem}",
                per_key + 16
            )));
        }
        let mut qw = self.ctx.knobs.attn_queries.clamp(1, 256);
        while qw > 1
            && (qw > l.max_compute_invocations_per_workgroup || qw > l.max_compute_workgroup_size_x)
        {
            qw /= 2;
        }
        let defs = [
            ("QW", qw),
            ("TK", tk as u32),
            ("MAXD", maxd as u32),
            ("MAXDV", maxdv as u32),
            ("DIFF", isdiff as u32),
        ];
        let bh = b * h;
        let ymax = l.max_compute_workgroups_per_dimension.max(1) as usize;
        let mut bh0 = 0;
        while bh0 < bh {
            let rows = ymax.min(bh - bh0);
            let mut u = Uniforms::new()
                .size("H", h)?
                .size("Nq", nq)?
                .size("Nk", nk)?
                .size("D", d)?
                .size("Dv", dv)?
                .f32(opts.scale)
                .f32(opts.softcap.unwrap_or(0.0))
                .u32(u32::from(opts.mask_mode == KeyMaskMode::Exclude))
                .u32(u32::from(mask.is_some()))
                .u32(u32::from(opts.window.is_some()))
                .size("window", wl.min(u32::MAX as usize))?
                .size("window", wr.min(u32::MAX as usize - nk))?
                .u32(m_off.map_or(0, |(_, o)| o))
                .size("batch·head", bh0)?
                .u32(0)
                .u32(0);
            let views = [
                qv,
                kv,
                vv,
                d2.as_ref().map_or([0; 5], |x| x.0 .1),
                d2.as_ref().map_or([0; 5], |x| x.1 .1),
            ];
            for w in &views {
                for &x in &w[1..] {
                    u = u.u32(x);
                }
            }
            for w in &views {
                u = u.u32(w[0]);
            }
            self.launch(
                &ATTENTION,
                "attention",
                &defs,
                &[
                    Bind::T(&qt),
                    Bind::T(&kt),
                    Bind::T(&vt),
                    Bind::Opt(d2.as_ref().map(|x| &x.0 .0)),
                    Bind::Opt(d2.as_ref().map(|x| &x.1 .0)),
                    Bind::Opt(mask.as_ref()),
                    Bind::T(&out),
                ],
                u,
                [u32_of(OP, nq.div_ceil(qw as usize))?, rows as u32, 1],
            )?;
            bh0 += rows;
        }
        Ok(out)
    }
}
