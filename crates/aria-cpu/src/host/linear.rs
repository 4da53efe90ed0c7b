use super::f32_data;
use crate as cpu;
use crate::gemm::{gemm_vec, BSrc, PackedB};
use crate::threads;
use aria_tensor::backend::check::linear_dims;
use aria_tensor::backend::check::require_float;
use aria_tensor::{Result, Tensor};

/// The weight `w [N, K]` of a linear layer packed for the CPU matrix product of the current
/// path (`None` for a tensor on a device backend, or not a rank-2 float tensor): the CPU
/// backend's `Prepared` layout.
pub fn pack_weight(w: &Tensor) -> Result<Option<PackedB>> {
    let ws = w.shape();
    if !w.device().is_cpu() || ws.len() != 2 || require_float("linear", w).is_err() {
        return Ok(None);
    }
    let (n, k) = (ws[0], ws[1]);
    let wc = w.contiguous()?;
    let wd = super::wdata("linear", &wc)?;
    let isa = cpu::current();
    Ok(Some(threads::install(|| {
        PackedB::new(isa, &BSrc::Nk(wd, k), n, k)
    })))
}

/// The CPU body of `aria_core::ops::linear`, reading `panels` (the layout `Cpu` prepares) when
/// they fit the product and the path.
pub fn linear_host(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    panels: Option<&PackedB>,
) -> Result<Tensor> {
    // Checked: float operands, `w [N, K]`, `b [N]`.
    let xs = x.shape();
    let (m, k, n) = linear_dims(x, w, b)?;
    let xd = f32_data(x)?;
    let isa = cpu::current();
    let bd = b.map(f32_data).transpose()?;
    let out = match panels.filter(|p| p.fits(isa, n, k)) {
        // B is not read when the panels fit.
        Some(p) => threads::install(|| {
            let none = BSrc::Kn(&[], 0);
            gemm_vec(isa, (m, n, k), &xd, k, &none, Some(p), bd.as_deref())
        }),
        None => {
            let wc = w.contiguous()?;
            let wd = super::wdata("linear", &wc)?;
            threads::install(|| {
                let src = BSrc::Nk(wd, k);
                gemm_vec(isa, (m, n, k), &xd, k, &src, None, bd.as_deref())
            })
        }
    };
    let mut shape = xs.to_vec();
    *shape.last_mut().unwrap_or(&mut 0) = n;
    Tensor::from_vec(out, &shape)
}

/// The CPU body of `aria_core::ops::matmul`, on checked operands.
pub fn matmul_host(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (batch, m, k, n) = aria_tensor::backend::check::matmul_dims(a, b)?;
    let ad = f32_data(a)?;
    let bd = f32_data(b)?;
    let out = threads::install(|| crate::products::matmul(&ad, &bd, [batch, m, k, n]));
    let mut shape = a.shape().to_vec();
    if let Some(l) = shape.last_mut() {
        *l = n;
    }
    Tensor::from_vec(out, &shape)
}
