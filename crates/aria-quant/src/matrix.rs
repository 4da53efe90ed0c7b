//! [`PackedMatrix`]: a quantized `[out, in]` weight, its products and its
//! [`aria_core::nn::PackedWeight`] implementation.

use std::fmt;

use aria_core::cpu::quant::WView;
use aria_core::nn::{PackedBlocks, PackedWeight};
use aria_core::{ops, threads, DType, Tensor};
use half::{bf16, f16};
use rayon::prelude::*;

use crate::kernels::{IntIsa, Kernel};
use crate::{Compute, Format, QuantError, Result};

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

    /// The rows as the CPU kernels read them.
    pub fn view(&self) -> Result<WView<'_>> {
        Ok(WView::new(
            self.format.into(),
            self.rows,
            self.cols,
            self.bytes()?,
        )?)
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
        match self.view() {
            Ok(v) => v.kernel(self.compute, m),
            // A matrix always views its own bytes; the mode's scalar reference otherwise.
            Err(_) => match self.compute {
                Compute::WeightOnly => Kernel::Dequant(aria_core::cpu::Isa::Scalar),
                Compute::W8A8 => Kernel::W8A8(IntIsa::Scalar),
            },
        }
    }

    /// `out[m, rows] = x[m, cols] · Wᵀ` (row-major slices) with the calling thread's kernel
    /// ([`PackedMatrix::kernel`]), on the [`aria_core::threads`] pool.
    pub fn matmul(&self, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        self.matmul_with(self.kernel(m), x, m, out)
    }

    /// As [`PackedMatrix::matmul`] on an explicit kernel (a path this CPU cannot run falls
    /// back to the scalar reference of the same mode): the CPU backend's kernels
    /// ([`WView::matmul`]). W8A8 kernels need a `q8_0` weight.
    pub fn matmul_with(&self, kernel: Kernel, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
        Ok(self.view()?.matmul(kernel, x, m, out)?)
    }

    /// The exact int32 W8A8 block sums `[m][rows][blocks]` for `x [m, cols]` on the int8 path
    /// `isa` (single-threaded; `q8_0` only). Every path gives the same sums; this exposes
    /// them for tests.
    pub fn w8a8_block_sums(&self, isa: IntIsa, x: &[f32], m: usize) -> Result<Vec<i32>> {
        Ok(self.view()?.w8a8_block_sums(isa, x, m)?)
    }

    /// `y = x·Wᵀ + b` for a tensor `x [.., cols]` (f32, or f16/bf16 widened), `b [rows]`: the
    /// op set's `linear_packed` ([`aria_core::ops::packed_linear`]), which the backend the
    /// operands live on runs (the CPU's kernels for a host tensor).
    pub fn forward(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        Ok(ops::packed_linear(x, self, bias)?)
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

    /// The blocks: the CPU's layout of the block formats (its kernels read them in place).
    fn operand(&self) -> PackedBlocks {
        PackedBlocks {
            format: self.format.into(),
            w8a8: self.compute == Compute::W8A8,
            rows: self.rows,
            cols: self.cols,
            data: self.data.clone(),
        }
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
        Some(self.operand())
    }
}
