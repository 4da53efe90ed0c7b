//! [`PackedMatrix`]: a quantized `[out, in]` weight, its products and its
//! [`aria_core::nn::PackedWeight`] implementation.

use std::fmt;

use aria_core::nn::{PackedBlocks, PackedWeight, WeightFormat};
use aria_core::{threads, DType, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;

use crate::kernels::{self, Kernel, KernelQuery};
use crate::{Format, QuantError, Result};

/// How a packed weight computes `x · Wᵀ`. An explicit configuration value (there is no
/// environment switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compute {
    /// f32 activations; the weight is dequantized inside the kernel.
    #[default]
    WeightOnly,
    /// Activations quantized per token to int8, int8 × int8 dot products (`q8_0` only).
    W8A8,
}

impl Compute {
    /// A short name (`weight-only`, `w8a8`).
    pub fn name(self) -> &'static str {
        match self {
            Compute::WeightOnly => "weight-only",
            Compute::W8A8 => "w8a8",
        }
    }

    /// Whether the mode can run on a weight of `format`.
    pub fn supports(self, format: Format) -> bool {
        match self {
            Compute::WeightOnly => true,
            Compute::W8A8 => format == Format::Q8_0,
        }
    }
}

/// A borrowed view of packed rows for the kernels.
pub(crate) struct WView<'a> {
    pub format: Format,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
    pub row_bytes: usize,
}

impl WView<'_> {
    /// Packed row `j`.
    #[inline]
    pub fn row(&self, j: usize) -> &[u8] {
        &self.bytes[j * self.row_bytes..(j + 1) * self.row_bytes]
    }
}

/// A quantized weight matrix `[rows, cols]` (`[out, in]`) in one [`Format`]: `rows` packed
/// rows of `format.row_bytes(cols)` bytes each, held in a `U8 [rows, row_bytes]` tensor
/// (owned, or borrowed from a memory-mapped packed file).
#[derive(Clone)]
pub struct PackedMatrix {
    format: Format,
    rows: usize,
    cols: usize,
    data: Tensor,
    compute: Compute,
    /// `format.tag()`, with `+w8a8` in W8A8 mode ([`PackedWeight::format`]).
    tag: String,
}

impl fmt::Debug for PackedMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "PackedMatrix({} [{}, {}], {}, {} bytes)",
            self.format.tag(),
            self.rows,
            self.cols,
            self.compute.name(),
            self.nbytes()
        )
    }
}

/// Convert `out.len()` elements from `start` of little-endian float bytes to f32.
fn read_f32(dtype: DType, bytes: &[u8], start: usize, out: &mut [f32]) {
    let sz = dtype.size();
    let b = &bytes[start * sz..(start + out.len()) * sz];
    match dtype {
        DType::F32 => match bytemuck::try_cast_slice::<u8, f32>(b) {
            Ok(s) => out.copy_from_slice(s),
            Err(_) => {
                for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
        },
        DType::F16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        _ => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
    }
}

impl PackedMatrix {
    /// Quantize a weight `w [out, in]` (f32, f16 or bf16 on the CPU, memory-mapped or owned)
    /// row by row, in parallel on the [`aria_core::threads`] pool; no f32 copy of the whole
    /// weight is made. `what` names the weight in errors.
    pub fn quantize(what: &str, w: &Tensor, format: Format) -> Result<PackedMatrix> {
        if w.rank() != 2 {
            return Err(QuantError::Shape {
                what: what.to_string(),
                reason: "a weight must be [out, in]".into(),
                shape: w.shape().to_vec(),
            });
        }
        if !w.dtype().is_float() {
            return Err(QuantError::DType {
                what: what.to_string(),
                dtype: w.dtype(),
                reason: "f32, f16 or bf16 weights are quantized".into(),
            });
        }
        let (rows, cols) = (w.shape()[0], w.shape()[1]);
        let wc = w.contiguous()?;
        let bytes = wc.as_bytes()?;
        let dtype = w.dtype();
        let rb = format.row_bytes(cols);
        let mut data = vec![0u8; rows * rb];
        if rb > 0 {
            threads::install(|| {
                data.par_chunks_mut(rb).enumerate().try_for_each_init(
                    || vec![0f32; cols],
                    |buf, (r, out)| {
                        read_f32(dtype, bytes, r * cols, buf);
                        format.quantize_row(what, r, buf, out)
                    },
                )
            })?;
        }
        PackedMatrix::from_bytes(format, rows, cols, data)
    }

    /// Quantize a row-major f32 matrix `[rows, cols]`.
    pub fn from_f32(
        what: &str,
        rows: usize,
        cols: usize,
        w: &[f32],
        format: Format,
    ) -> Result<PackedMatrix> {
        if w.len() != rows * cols {
            return Err(QuantError::Shape {
                what: what.to_string(),
                reason: format!("{} values for [{rows}, {cols}]", w.len()),
                shape: vec![rows, cols],
            });
        }
        let t = Tensor::from_slice(w, &[rows, cols])?;
        PackedMatrix::quantize(what, &t, format)
    }

    /// A matrix from packed rows (`rows · format.row_bytes(cols)` bytes).
    pub fn from_bytes(
        format: Format,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<PackedMatrix> {
        let rb = format.row_bytes(cols);
        let t = Tensor::from_vec(data, &[rows, rb])?;
        PackedMatrix::from_tensor(format, rows, cols, t)
    }

    /// A matrix over a `U8 [rows, row_bytes]` tensor (e.g. borrowed from a memory-mapped
    /// packed file). The bytes are checked for size only: blocks hold no invalid bit
    /// patterns.
    pub fn from_tensor(
        format: Format,
        rows: usize,
        cols: usize,
        data: Tensor,
    ) -> Result<PackedMatrix> {
        let what = format!("packed {} [{rows}, {cols}]", format.tag());
        if data.dtype() != DType::U8 {
            return Err(QuantError::DType {
                what,
                dtype: data.dtype(),
                reason: "packed data is U8".into(),
            });
        }
        let rb = format.row_bytes(cols);
        if data.shape() != [rows, rb] {
            return Err(QuantError::Shape {
                what,
                reason: format!("packed data must be [{rows}, {rb}] bytes"),
                shape: data.shape().to_vec(),
            });
        }
        if !data.device().is_cpu() {
            return Err(QuantError::Shape {
                what,
                reason: "packed data must be on the CPU".into(),
                shape: data.shape().to_vec(),
            });
        }
        let data = data.contiguous()?;
        Ok(PackedMatrix {
            format,
            rows,
            cols,
            data,
            compute: Compute::WeightOnly,
            tag: format.tag(),
        })
    }

    /// The same weight computing in `compute` mode (the packed bytes are shared). W8A8 needs
    /// `q8_0`.
    pub fn with_compute(mut self, compute: Compute) -> Result<PackedMatrix> {
        if !compute.supports(self.format) {
            return Err(QuantError::Compute {
                format: self.format.tag(),
                mode: compute.name().into(),
                reason: "W8A8 runs on q8_0 weights only".into(),
            });
        }
        self.compute = compute;
        self.tag = match compute {
            Compute::WeightOnly => self.format.tag(),
            Compute::W8A8 => format!("{}+w8a8", self.format.tag()),
        };
        Ok(self)
    }

    /// The format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The compute mode.
    pub fn compute(&self) -> Compute {
        self.compute
    }

    /// Rows (`out`).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns (`in`).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of packed data.
    pub fn nbytes(&self) -> usize {
        self.rows * self.row_bytes()
    }

    /// Bytes per packed row.
    pub fn row_bytes(&self) -> usize {
        self.format.row_bytes(self.cols)
    }

    /// The packed bytes, `U8 [rows, row_bytes]`.
    pub fn data(&self) -> &Tensor {
        &self.data
    }

    /// The packed bytes, row after row.
    pub fn bytes(&self) -> Result<&[u8]> {
        Ok(self.data.as_bytes()?)
    }

    pub(crate) fn view(&self) -> Result<WView<'_>> {
        Ok(WView {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            bytes: self.bytes()?,
            row_bytes: self.row_bytes(),
        })
    }

    /// The reference dequantization, row-major `[rows, cols]` f32.
    pub fn dequantize_f32(&self) -> Result<Vec<f32>> {
        let v = self.view()?;
        let mut out = vec![0f32; self.rows * self.cols];
        if self.cols > 0 {
            for (r, o) in out.chunks_mut(self.cols).enumerate() {
                self.format.dequantize_row(v.row(r), o);
            }
        }
        Ok(out)
    }

    /// The kernel a product with `m` activation rows runs on, on the calling thread's paths.
    pub fn kernel(&self, m: usize) -> Kernel {
        kernels::select(&KernelQuery::current(
            self.format,
            self.compute,
            m,
            self.rows,
            self.cols,
        ))
    }

    /// `out[m, rows] = x[m, cols] · Wᵀ` (row-major slices) with the calling thread's kernel
    /// ([`PackedMatrix::kernel`]), on the [`aria_core::threads`] pool.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        self.matmul_with(self.kernel(m), x, m, out)
    }

    /// As [`PackedMatrix::matmul`] on an explicit kernel (a path this CPU cannot run falls
    /// back to the scalar reference of the same mode). The kernel's mode must be supported by
    /// the format.
    pub fn matmul_with(&self, kernel: Kernel, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        let (n, k) = (self.rows, self.cols);
        if x.len() < m * k || out.len() < m * n {
            return Err(QuantError::Shape {
                what: format!("{self:?} matmul"),
                reason: format!(
                    "x has {} values and out {} for m = {m} (need {} and {})",
                    x.len(),
                    out.len(),
                    m * k,
                    m * n
                ),
                shape: vec![m, k],
            });
        }
        let v = self.view()?;
        match kernel {
            Kernel::Dequant(isa) => {
                let isa = kernels::checked(isa);
                threads::install(|| kernels::gemm_dequant(isa, &v, x, m, out));
            }
            Kernel::W8A8(isa) => {
                if self.format != Format::Q8_0 {
                    return Err(QuantError::Compute {
                        format: self.format.tag(),
                        mode: Compute::W8A8.name().into(),
                        reason: "W8A8 runs on q8_0 weights only".into(),
                    });
                }
                let isa = isa.checked();
                threads::install(|| {
                    let acts = kernels::quantize_activations(x, m, k, isa.offset_acts());
                    kernels::gemm_w8a8(isa, &v, &acts, out);
                });
            }
        }
        Ok(())
    }

    /// `x · Wᵀ + b` into a new `[m, rows]` vector: the bias added after each output's K-sum
    /// (the bits of adding it to the product afterwards). The weight-only product writes every
    /// output itself, with the bias, so the vector is not zero-filled first.
    fn matmul_bias(
        &self,
        kernel: Kernel,
        x: &[f32],
        m: usize,
        bias: Option<&[f32]>,
    ) -> Result<Vec<f32>> {
        let n = self.rows;
        if let Kernel::Dequant(isa) = kernel {
            if x.len() < m * self.cols {
                return Err(QuantError::Shape {
                    what: format!("{self:?} matmul"),
                    reason: format!("x has {} values for m = {m}", x.len()),
                    shape: vec![m, self.cols],
                });
            }
            let v = self.view()?;
            let isa = kernels::checked(isa);
            return Ok(threads::install(|| {
                kernels::gemm_dequant_vec(isa, &v, x, m, bias)
            }));
        }
        let mut out = vec![0f32; m * n];
        self.matmul_with(kernel, x, m, &mut out)?;
        if let Some(bd) = bias.filter(|b| !b.is_empty()) {
            threads::install(|| {
                out.par_chunks_mut(n).with_min_len(8).for_each(|row| {
                    for (o, b) in row.iter_mut().zip(bd) {
                        *o += b;
                    }
                })
            });
        }
        Ok(out)
    }

    /// The exact int32 W8A8 block sums `[m][rows][blocks]` for `x [m, cols]` on the int8 path
    /// `isa` (single-threaded; `q8_0` only). Every path gives the same sums; this exposes
    /// them for tests.
    pub fn w8a8_block_sums(&self, isa: kernels::IntIsa, x: &[f32], m: usize) -> Result<Vec<i32>> {
        if self.format != Format::Q8_0 {
            return Err(QuantError::Compute {
                format: self.format.tag(),
                mode: Compute::W8A8.name().into(),
                reason: "W8A8 runs on q8_0 weights only".into(),
            });
        }
        if x.len() < m * self.cols {
            return Err(QuantError::Shape {
                what: format!("{self:?} block sums"),
                reason: format!("x has {} values for m = {m}", x.len()),
                shape: vec![m, self.cols],
            });
        }
        let isa = isa.checked();
        let acts = kernels::quantize_activations(x, m, self.cols, isa.offset_acts());
        Ok(kernels::w8a8_block_sums(isa, &self.view()?, &acts))
    }

    /// `y = x·Wᵀ + b` for a tensor `x [.., cols]` (f32, or f16/bf16 widened), `b [rows]`.
    pub fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let xs = x.shape();
        let what = || format!("{self:?} linear");
        if xs.last() != Some(&self.cols) {
            return Err(QuantError::Shape {
                what: what(),
                reason: format!("x must be [.., {}]", self.cols),
                shape: xs.to_vec(),
            });
        }
        if !x.dtype().is_float() {
            return Err(QuantError::DType {
                what: what(),
                dtype: x.dtype(),
                reason: "activations must be float".into(),
            });
        }
        let m: usize = xs[..xs.len() - 1].iter().product();
        let xf = if x.dtype() == DType::F32 {
            x.to_cpu()?.contiguous()?
        } else {
            x.to_cpu()?.to_dtype(DType::F32)?.contiguous()?
        };
        let xd = xf.as_slice::<f32>()?;
        let bd = match bias {
            Some(b) if b.shape() != [self.rows] => {
                return Err(QuantError::Shape {
                    what: what(),
                    reason: format!("bias must be [{}]", self.rows),
                    shape: b.shape().to_vec(),
                })
            }
            Some(b) => Some(b.to_vec_f32()?),
            None => None,
        };
        let out = self.matmul_bias(self.kernel(m), xd, m, bd.as_deref())?;
        let mut shape = xs.to_vec();
        if let Some(l) = shape.last_mut() {
            *l = self.rows;
        }
        Ok(Tensor::from_vec(out, &shape)?)
    }
}

impl PackedWeight for PackedMatrix {
    /// The format tag (`q8_0/v1`), with `+w8a8` in W8A8 mode.
    fn format(&self) -> &str {
        &self.tag
    }

    fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    fn nbytes(&self) -> usize {
        PackedMatrix::nbytes(self)
    }

    fn linear(&self, x: &Tensor, bias: Option<&Tensor>) -> aria_core::Result<Tensor> {
        Ok(self.forward(x, bias)?)
    }

    fn dequantize(&self) -> aria_core::Result<Tensor> {
        let v = self.dequantize_f32()?;
        Tensor::from_vec(v, &[self.rows, self.cols])
    }

    fn release_pages(&self) -> aria_core::Result<usize> {
        self.data.release_pages()
    }

    /// The blocks in the op vocabulary's format, for a backend to pack at upload.
    fn blocks(&self) -> Option<PackedBlocks> {
        let format = match self.format {
            Format::Q8_0 => WeightFormat::Q8_0,
            Format::Q4K => WeightFormat::Q4K,
            Format::Q6K => WeightFormat::Q6K,
        };
        Some(PackedBlocks {
            format,
            w8a8: self.compute == Compute::W8A8,
            rows: self.rows,
            cols: self.cols,
            data: self.data.clone(),
        })
    }
}
