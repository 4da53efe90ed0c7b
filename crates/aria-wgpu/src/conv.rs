//! `conv1d` (`conv1d.wgsl`): the CPU op's shape rules, weights f32, f16 or bf16.

use super::launch::{shader, Bind, Shader, Uniforms};
use super::linear::{u32_of, weight_code};
use super::WgpuBackend;
use aria_tensor::{DType, Result, Tensor};

const CONV1D: Shader = shader!("conv1d.wgsl", "weights.wgsl");

impl WgpuBackend {
    pub(crate) fn conv1d(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: Option<&Tensor>,
        padding: usize,
    ) -> Result<Tensor> {
        const OP: &str = "conv1d";
        let aria_tensor::backend::check::ConvDims {
            b: bn,
            cin,
            l,
            cout,
            k,
            lo,
            ..
        } = aria_tensor::backend::check::conv1d_dims(x, w, b, padding)?;
        let wdt = weight_code(OP, w)?;
        let xt = self.operand_as_f32(x)?;
        let wt = self.operand(w)?;
        let bt = b.map(|b| self.operand_as_f32(b)).transpose()?;
        let out = self.alloc(&[bn, cout, lo], DType::F32)?;
        if bn * cout * lo == 0 {
            return Ok(out);
        }
        u32_of(OP, bn * cin * l)?;
        u32_of(OP, cout * cin * k)?;
        u32_of(OP, bn * cout * lo)?;
        let tile = self.gemm_tile() as usize;
        let (_, x_off) = self.binding_of(&xt)?;
        let (_, w_off) = self.binding_of(&wt)?;
        let b_off = bt.as_ref().map(|t| self.binding_of(t)).transpose()?;
        let u = Uniforms::new()
            .size("Cin", cin)?
            .size("L", l)?
            .size("Cout", cout)?
            .size("K", k)?
            .size("padding", padding)?
            .size("Lo", lo)?
            .u32(u32::from(bt.is_some()))
            .u32(x_off)
            .u32(w_off)
            .u32(b_off.map_or(0, |(_, o)| o));
        self.launch(
            &CONV1D,
            "conv1d",
            &[("TILE", tile as u32), ("WDT", wdt)],
            &[
                Bind::T(&xt),
                Bind::T(&wt),
                Bind::Opt(bt.as_ref()),
                Bind::T(&out),
            ],
            u,
            [
                u32_of(OP, lo.div_ceil(tile))?,
                u32_of(OP, cout.div_ceil(tile))?,
                u32_of(OP, bn)?,
            ],
        )?;
        Ok(out)
    }
}
