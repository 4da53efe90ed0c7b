//! [`Bf16DotWeight`]: a weight packed for products with bf16 inputs and f32 accumulation.

use super::f32_data;
use crate::bf16dot::{self, to_bf16, Bf16Panels};
use crate::gemm::WData;
use crate::threads;
use aria_tensor::{CoreError, Device, Result, Tensor};

use aria_tensor::format::{PackedBlocks, PackedWeight, WeightFormat};

/// A weight matrix `[out, in]` in bf16 panels for the CPU product of
/// [`aria_core::cpu::bf16dot`](crate::bf16dot): activations rounded to bf16, products of
/// bf16 pairs accumulated in f32 (`vdpbf16ps` on CPUs with AVX-512 BF16, twice the f32 FMA
/// rate; the same bits from a scalar emulation elsewhere). bf16 weights are packed as they are;
/// f32 and f16 weights are rounded to bf16 (to nearest even).
///
/// It holds a packed copy as large as a bf16 weight, so a layer that switches to it can release
/// the pages of its mapped dense weight.
#[derive(Debug, Clone)]
pub struct Bf16DotWeight {
    panels: Bf16Panels,
}

impl Bf16DotWeight {
    /// Pack a dense weight `[out, in]` (f32, f16 or bf16, on the CPU).
    pub fn pack(w: &Tensor) -> Result<Bf16DotWeight> {
        Self::pack_stacked(&[w])
    }

    /// Pack several dense weights `[out_i, in]` with the same `in` as one `[Σ out_i, in]`
    /// (their rows one after the other), so that one product computes all of them (e.g. the
    /// query, key and value projections of a layer).
    pub fn pack_stacked(parts: &[&Tensor]) -> Result<Bf16DotWeight> {
        let shapes: Vec<&[usize]> = parts.iter().map(|w| w.shape()).collect();
        let k = shapes.first().and_then(|s| s.get(1)).copied().unwrap_or(0);
        if parts.is_empty() || shapes.iter().any(|s| s.len() != 2 || s[1] != k) {
            return Err(CoreError::shape(
                "bf16-dot pack",
                "weights must be [out, in] with the same `in`",
                &shapes,
            ));
        }
        let mut data = Vec::with_capacity(parts.len());
        for w in parts {
            if let Device::Backend(b) = w.device() {
                return Err(CoreError::Unsupported {
                    op: "bf16-dot pack",
                    backend: b.name().to_string(),
                });
            }
            data.push(w.contiguous()?);
        }
        let views = data
            .iter()
            .map(|t| super::wdata("bf16-dot pack", t))
            .collect::<Result<Vec<_>>>()?;
        // Row `i` of the stack: part and row within it.
        let starts: Vec<usize> = shapes
            .iter()
            .scan(0, |acc, s| {
                let st = *acc;
                *acc += s[0];
                Some(st)
            })
            .collect();
        let n: usize = shapes.iter().map(|s| s[0]).sum();
        let locate = |i: usize| {
            let p = starts.partition_point(|&s| s <= i) - 1;
            (views[p], i - starts[p])
        };
        // Rows as bf16 pairs: a little-endian bf16 row is already its pair words.
        let panels = threads::install(|| {
            Bf16Panels::from_pairs(n, k, |row, out| {
                let (wd, i) = locate(row);
                match wd {
                    WData::Bf16(s) => pair_words(&s[i * k..(i + 1) * k], out, |v| v.to_bits()),
                    WData::Raw(crate::gemm::Float::Bf16, b) => {
                        let r = &b[i * k * 2..(i + 1) * k * 2];
                        let whole = r.chunks_exact(4);
                        let last = match *whole.remainder() {
                            [a, b] => Some(u32::from(u16::from_le_bytes([a, b]))),
                            _ => None,
                        };
                        for (o, c) in out.iter_mut().zip(whole) {
                            *o = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                        }
                        if let (Some(v), Some(o)) = (last, out.get_mut(k / 2)) {
                            *o = v;
                        }
                    }
                    // f32 rows converted where they lie (no copy, no buffer per row).
                    WData::F32(s) => pair_words(&s[i * k..(i + 1) * k], out, to_bf16),
                    _ => {
                        let mut v = vec![0f32; k];
                        wd.read(i * k, &mut v);
                        pair_words(&v, out, to_bf16);
                    }
                }
            })
        });
        Ok(Bf16DotWeight { panels })
    }

    /// Whether this CPU runs the product with `vdpbf16ps` (AVX-512 BF16); elsewhere it runs the
    /// scalar emulation (same results, many times slower: a choice for tests, not for speed).
    pub fn native() -> bool {
        bf16dot::native()
    }

    /// Whether this CPU runs the product faster than f32 FMA: on the AMX tile unit where it is
    /// granted (several times the `vdpbf16ps` rate), or with `vdpbf16ps` on an AMD core
    /// ([`bf16dot::beats_f32`]: twice the f32 rate there; Intel cores run it at half the f32
    /// rate).
    pub fn faster_than_f32() -> bool {
        bf16dot::amx_available() || bf16dot::beats_f32()
    }

    /// Whether this CPU runs [`Bf16DotWeight::linear_amx`] on the AMX tile unit (AMX-BF16, and
    /// Linux granting the tile state to the process).
    pub fn amx() -> bool {
        bf16dot::amx_available()
    }

    /// `x · Wᵀ (+ bias)` for a host `x [.., in]` (f32, or f16/bf16 widened to f32): the op
    /// set's `linear_packed` on the CPU backend ([`Cpu`](crate::Cpu)'s `run`: the check step,
    /// then the panels' product on the AMX tile unit where it is granted, else `vdpbf16ps` or
    /// its scalar emulation).
    pub fn linear(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        use aria_tensor::backend::{Backend, Op};
        let x = if x.dtype().is_float() && x.dtype() != aria_tensor::DType::F32 {
            x.to_dtype(aria_tensor::DType::F32)?
        } else {
            x.clone()
        };
        let o = self.operand();
        crate::Cpu.run(Op::LinearPacked {
            x,
            w: o.data,
            format: o.format,
            w8a8: o.w8a8,
            shape: [o.rows, o.cols],
            b: bias.cloned(),
        })
    }

    /// `x · Wᵀ (+ bias)` on the AMX tile unit: the same bf16 inputs and per-output accumulation
    /// order as [`Bf16DotWeight::linear`], with the unit's own rounding inside each tile product
    /// (so not the same bits; f32-accumulation accuracy, and the same bits for any thread
    /// count). An error where [`Bf16DotWeight::amx`] does not hold.
    pub fn linear_amx(&self, x: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        if !Self::amx() {
            return Err(CoreError::Unsupported {
                op: "bf16 AMX linear",
                backend: "cpu (no AMX-BF16 tile unit granted)".into(),
            });
        }
        self.product(bf16dot::Kernel::Amx, x, bias)
    }
}

/// A row as bf16 pair words, `bits(r[2p]) | bits(r[2p + 1]) << 16`, the odd last element alone
/// in the low half (whole pairs in exact chunks, which vectorise).
fn pair_words<T: Copy>(r: &[T], out: &mut [u32], bits: impl Fn(T) -> u16) {
    let whole = r.chunks_exact(2);
    let last = whole.remainder().first().map(|&v| u32::from(bits(v)));
    for (o, c) in out.iter_mut().zip(whole) {
        *o = u32::from(bits(c[0])) | (u32::from(bits(c[1])) << 16);
    }
    if let (Some(v), Some(o)) = (last, out.get_mut(r.len() / 2)) {
        *o = v;
    }
}

impl PackedWeight for Bf16DotWeight {
    fn format(&self) -> &str {
        "bf16_panels/v1"
    }

    fn shape(&self) -> [usize; 2] {
        self.panels.shape()
    }

    fn nbytes(&self) -> usize {
        self.panels.nbytes()
    }

    /// The CPU's choice of unit: the AMX tile unit where [`bf16dot::use_tiles`] holds (its own
    /// rounding inside each tile product), else `vdpbf16ps` on the AVX-512 path, else its scalar
    /// emulation (the same bits as `vdpbf16ps`, and as the op set's reference
    /// `aria_core::ops::linear_packed`).
    /// The panels, the CPU's layout of the format (the CPU runs them on the AMX tile unit
    /// where it is granted, else `vdpbf16ps` or its scalar emulation).
    fn operand(&self) -> PackedBlocks {
        let [n, k] = self.panels.shape();
        PackedBlocks {
            format: WeightFormat::Bf16Panels,
            w8a8: false,
            rows: n,
            cols: k,
            data: self.panels.tensor().clone(),
        }
    }

    /// The bf16 pairs of every row (`U8 [out, ⌈in / 2⌉ · 4]`), the format's reference layout.
    fn blocks(&self) -> Option<PackedBlocks> {
        let [n, k] = self.panels.shape();
        let row_bytes = WeightFormat::Bf16Panels.row_bytes(k);
        let mut data = vec![0u8; n * row_bytes];
        let mut row = vec![0f32; k];
        for (i, out) in data.chunks_exact_mut(row_bytes.max(1)).enumerate().take(n) {
            self.panels.row(i, &mut row);
            for (o, v) in out.chunks_exact_mut(2).zip(&row) {
                o.copy_from_slice(&to_bf16(*v).to_le_bytes());
            }
        }
        let data = Tensor::from_vec(data, &[n, row_bytes]).ok()?;
        Some(PackedBlocks {
            format: WeightFormat::Bf16Panels,
            w8a8: false,
            rows: n,
            cols: k,
            data,
        })
    }

    fn dequantize(&self) -> Result<Tensor> {
        let [n, k] = self.panels.shape();
        let mut v = vec![0f32; n * k];
        for (i, row) in v.chunks_exact_mut(k.max(1)).enumerate().take(n) {
            self.panels.row(i, row);
        }
        Tensor::from_vec(v, &[n, k])
    }
}

impl Bf16DotWeight {
    /// The checked product with `kernel`.
    fn product(
        &self,
        kernel: bf16dot::Kernel,
        x: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Tensor> {
        let [n, k] = self.panels.shape();
        let xs = x.shape();
        if xs.last() != Some(&k) {
            return Err(CoreError::shape(
                "bf16-dot linear",
                format!("x must be [.., {k}] for a [{n}, {k}] weight"),
                &[xs],
            ));
        }
        if let Some(b) = bias {
            if b.shape() != [n] {
                return Err(CoreError::shape(
                    "bf16-dot linear",
                    format!("bias must be [{n}]"),
                    &[xs, b.shape()],
                ));
            }
        }
        if let Device::Backend(b) = x.device() {
            return Err(CoreError::Unsupported {
                op: "bf16-dot linear",
                backend: b.name().to_string(),
            });
        }
        if !x.dtype().is_float() {
            return Err(CoreError::DType {
                op: "bf16-dot linear",
                dtype: x.dtype(),
                reason: "a float tensor is required".into(),
            });
        }
        let m: usize = xs[..xs.len() - 1].iter().product();
        let xd = f32_data(x)?;
        let bd = bias.map(f32_data).transpose()?;
        let out = threads::install(|| {
            bf16dot::matmul_vec(kernel, m, &xd, k, &self.panels, bd.as_deref())
        });
        let mut shape = xs.to_vec();
        if let Some(l) = shape.last_mut() {
            *l = n;
        }
        Tensor::from_vec(out, &shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aria_tensor::DType;

    /// The op set's f32 `linear` on the CPU backend: the reference.
    fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
        use aria_tensor::backend::{Backend, Op};
        crate::Cpu.run(Op::Linear {
            x: x.clone(),
            w: w.clone(),
            b: b.cloned(),
            prepared: None,
        })
    }

    fn t(n: usize, shape: &[usize], seed: usize) -> Tensor {
        let v: Vec<f32> = (0..n)
            .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 50.0)
            .collect();
        Tensor::from_vec(v, shape).expect("tensor")
    }

    /// bf16, f16 and f32 weights pack to the same panels when their values are bf16; the
    /// product is within bf16 rounding of the f32 product, and the bias is added.
    #[test]
    fn packs_every_float_dtype_and_computes() {
        for k in [70, 33] {
            packs_every_float_dtype(k);
        }
    }

    fn packs_every_float_dtype(k: usize) {
        let (m, n) = (9, 45);
        let x = t(m * k, &[3, 3, k], 1);
        let w32 = t(n * k, &[n, k], 2);
        let b = t(n, &[n], 3);
        let want = linear(&x, &w32, Some(&b))
            .expect("f32")
            .to_vec_f32()
            .expect("v");
        let mut first: Option<Vec<f32>> = None;
        for dt in [DType::F32, DType::F16, DType::BF16] {
            let w = w32
                .to_dtype(DType::BF16)
                .expect("bf16")
                .to_dtype(dt)
                .expect("cast");
            let p = Bf16DotWeight::pack(&w).expect("pack");
            assert_eq!(p.shape(), [n, k]);
            assert_eq!(p.format(), "bf16_panels/v1");
            let y = p.linear(&x, Some(&b)).expect("linear");
            assert_eq!(y.shape(), &[3, 3, n]);
            let y = y.to_vec_f32().expect("v");
            for (g, w) in y.iter().zip(&want) {
                assert!((g - w).abs() < 0.05 * (1.0 + w.abs()), "{dt}: {g} vs {w}");
            }
            match &first {
                None => first = Some(y),
                Some(f) => assert!(f.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits())),
            }
            let d = p.dequantize().expect("dequantize").to_vec_f32().expect("v");
            let r = w.to_vec_f32().expect("v");
            assert_eq!(d, r, "{dt}: the panels hold the bf16 values");
        }
    }

    /// f32 weights of any value pack to their bf16 roundings (to nearest, ties to even; odd
    /// and even widths, infinities, subnormals, ties).
    #[test]
    fn f32_weights_pack_to_their_bf16_rounding() {
        for k in [33usize, 64] {
            let n = 21;
            let v: Vec<f32> = (0..n * k)
                .map(|i| match i % 9 {
                    0 => f32::INFINITY,
                    1 => -1e-40,
                    2 => 1.0 + 1.0 / 256.0,
                    3 => 1.0 + 3.0 / 256.0,
                    _ => ((i * 7919 % 10007) as f32 - 5000.0) * 1.37e-3,
                })
                .collect();
            let w = Tensor::from_vec(v, &[n, k]).expect("tensor");
            let got = Bf16DotWeight::pack(&w)
                .expect("pack")
                .dequantize()
                .expect("dequantize")
                .to_vec_f32()
                .expect("v");
            let want = w
                .to_dtype(DType::BF16)
                .expect("bf16")
                .to_vec_f32()
                .expect("v");
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "k {k}");
        }
    }

    /// A stack of weights computes each part's outputs bit for bit, side by side.
    #[test]
    fn stacked_parts_match_separate_products() {
        let k = 50;
        let x = t(7 * k, &[7, k], 5);
        let parts = [
            t(3 * k, &[3, k], 6),
            t(40 * k, &[40, k], 7),
            t(9 * k, &[9, k], 8),
        ];
        let refs: Vec<&Tensor> = parts.iter().collect();
        let all = Bf16DotWeight::pack_stacked(&refs).expect("pack");
        assert_eq!(all.shape(), [52, k]);
        let y = all.linear(&x, None).expect("y").to_vec_f32().expect("v");
        let mut col = 0;
        for p in &parts {
            let n = p.shape()[0];
            let one = Bf16DotWeight::pack(p).expect("pack");
            let yp = one.linear(&x, None).expect("y").to_vec_f32().expect("v");
            for r in 0..7 {
                for j in 0..n {
                    assert_eq!(y[r * 52 + col + j].to_bits(), yp[r * n + j].to_bits());
                }
            }
            col += n;
        }
        let e = Bf16DotWeight::pack_stacked(&[&parts[0], &t(8, &[2, 4], 1)]).expect_err("k");
        assert!(e.to_string().contains("same `in`"), "{e}");
    }

    /// Wrong shapes are errors naming them.
    #[test]
    fn shape_errors() {
        let p = Bf16DotWeight::pack(&t(12, &[3, 4], 1)).expect("pack");
        let e = p.linear(&t(10, &[2, 5], 1), None).expect_err("k");
        assert!(
            e.to_string().contains("linear_packed") && e.to_string().contains("[2, 5]"),
            "{e}"
        );
        let e = p
            .linear(&t(8, &[2, 4], 1), Some(&t(4, &[4], 1)))
            .expect_err("bias");
        assert!(e.to_string().contains("bias"), "{e}");
        assert!(Bf16DotWeight::pack(&t(12, &[12], 1)).is_err());
    }
}
