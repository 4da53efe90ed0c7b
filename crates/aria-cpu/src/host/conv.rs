use super::f32_data;
use crate::products;
use crate::threads;
use aria_tensor::{Result, Tensor};

/// The CPU body of `aria_core::ops::conv1d`, on checked operands.
pub fn conv1d_host(x: &Tensor, w: &Tensor, b: Option<&Tensor>, padding: usize) -> Result<Tensor> {
    let dims = aria_tensor::backend::check::conv1d_dims(x, w, b, padding)?;
    let xd = f32_data(x)?;
    let wd = f32_data(w)?;
    let bd = b.map(f32_data).transpose()?;
    let out = threads::install(|| products::conv1d(&xd, &wd, bd.as_deref(), dims));
    Tensor::from_vec(out, &[dims.b, dims.cout, dims.lo])
}
