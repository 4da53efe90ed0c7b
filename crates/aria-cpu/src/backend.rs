//! The CPU backend ([`Cpu`]).

use std::sync::{Arc, OnceLock};

use aria_tensor::backend::{check, format_list, Backend, Device, Op, OutSpec, Prepared};
use aria_tensor::format::{PackedBlocks, WeightFormat};
use aria_tensor::{CoreError, Result, Tensor};

/// The CPU backend: host tensors, run by this crate's kernels.
///
/// [`Cpu`] implements [`Backend`] like the device backends do (`aria-wgpu`, `aria-cuda`), and
/// the registry opens it by the name `cpu` like any other entry. Every op on host tensors goes
/// through it: `aria_core`'s `ops` functions run the check step, find no device operand, and
/// run the op on the CPU backend's body ([`run_checked_host`]: what [`Cpu::run`](Backend::run)
/// runs after its own check), whose result is held to the checked shape and dtype as a device
/// backend's is. Its `run` is the CPU reference of the op set ([`crate::host::run`]): it takes
/// the operands' elements as slices and calls one kernel of this crate (which chooses the ISA
/// at run time: scalar, AVX2, AVX-512, AVX-512 BF16, AMX, NEON) inside the caller's thread
/// pool ([`crate::threads`]).
///
/// Host tensors are the CPU backend's storage ([`Device::Cpu`]), so "uploading" to it and
/// "downloading" from it are clones.
///
/// ```
/// use aria_cpu::Cpu;
/// use aria_tensor::backend::{registry, Backend, Op};
/// use aria_tensor::Tensor;
/// # fn main() -> aria_tensor::Result<()> {
/// assert!(registry::open("cpu", &Default::default())?.is_cpu());
/// let x = Tensor::from_vec(vec![-1.0f32, 2.0], &[1, 2])?;
/// assert_eq!(Cpu.run(Op::AddScalar { x, s: 1.0 })?.to_vec::<f32>()?, [0.0, 3.0]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu;

impl Cpu {
    /// One shared handle (what `aria_core::backend::of` gives for host tensors).
    pub fn shared() -> Arc<dyn Backend> {
        static CPU: OnceLock<Arc<dyn Backend>> = OnceLock::new();
        CPU.get_or_init(|| Arc::new(Cpu)).clone()
    }
}

fn host_only(t: &Tensor, what: &'static str) -> Result<()> {
    match t.device() {
        Device::Cpu => Ok(()),
        Device::Backend(b) => Err(CoreError::Unsupported {
            op: what,
            backend: format!("cpu (the tensor lives on {})", b.name()),
        }),
    }
}

impl Backend for Cpu {
    fn name(&self) -> &str {
        "cpu"
    }

    /// A host tensor is already on the CPU backend: a clone. A device tensor is refused (a
    /// download is [`Device::put`] with [`Device::Cpu`], through the backend it lives on).
    fn upload(&self, t: &Tensor) -> Result<Tensor> {
        host_only(t, "upload")?;
        Ok(t.clone())
    }

    fn to_cpu(&self, t: &Tensor) -> Result<Tensor> {
        host_only(t, "to_cpu")?;
        Ok(t.clone())
    }

    /// The check step, then the op's body ([`crate::host::run`]): a malformed op handed to the
    /// backend directly is refused by the check like one that came through `ops`.
    fn run(&self, op: Op) -> Result<Tensor> {
        op.check()?;
        crate::host::run(&op)
    }

    /// Every format of the op vocabulary: `q8_0` (weight-only and W8A8), `q4_k`, `q6_k` and
    /// `bf16_panels`, on the kernels of [`crate::quant`] and [`crate::bf16dot`].
    fn packed_formats(&self) -> Vec<(WeightFormat, bool)> {
        vec![
            (WeightFormat::Q8_0, true),
            (WeightFormat::Q4K, false),
            (WeightFormat::Q6K, false),
            (WeightFormat::Bf16Panels, false),
        ]
    }

    /// `bf16_panels` where the AMX tile unit is granted or `vdpbf16ps` outruns f32 FMA.
    fn faster_than_f32(&self, format: WeightFormat) -> bool {
        format == WeightFormat::Bf16Panels && crate::host::Bf16DotWeight::faster_than_f32()
    }

    /// The CPU's layout of a packed weight: the blocks themselves for `q8_0`, `q4_k` and
    /// `q6_k` (the kernels read them in place: a memory-mapped weight stays mapped, and W8A8
    /// needs no second copy), the bf16 panels of [`crate::bf16dot`] for `bf16_panels`.
    fn upload_packed(&self, w: &PackedBlocks) -> Result<Tensor> {
        host_only(&w.data, "upload_packed")?;
        let supported = self.packed_formats();
        if !supported
            .iter()
            .any(|&(f, a8)| f == w.format && (a8 || !w.w8a8))
        {
            return Err(CoreError::Backend {
                backend: "cpu".into(),
                reason: format!(
                    "no kernel for packed {}{} weights (formats here: {})",
                    w.format,
                    if w.w8a8 { " (W8A8)" } else { "" },
                    format_list(&supported)
                ),
            });
        }
        let row_bytes = w.format.row_bytes(w.cols);
        if w.data.dtype() != aria_tensor::DType::U8 || w.data.shape() != [w.rows, row_bytes] {
            return Err(CoreError::shape(
                "upload_packed",
                format!("{} blocks of a [{}, {}] weight", w.format, w.rows, w.cols),
                &[w.data.shape(), &[w.rows, row_bytes]],
            ));
        }
        if w.format != WeightFormat::Bf16Panels {
            return Ok(w.data.clone());
        }
        let bytes = w.data.contiguous()?;
        let bytes = bytes.as_bytes()?;
        let panels = crate::threads::install(|| {
            crate::bf16dot::Bf16Panels::from_pair_bytes(w.rows, w.cols, bytes)
        });
        Ok(panels.tensor().clone())
    }

    /// The weight's panels packed for the CPU matrix product of the current path (an f32 copy
    /// as large as the weight in f32; `None` for a weight that is not a rank-2 float tensor).
    /// The product reads them while they fit the path it runs on, and `w` otherwise.
    fn prepare_weight(&self, w: &Tensor) -> Result<Option<Prepared>> {
        host_only(w, "prepare_weight")?;
        Ok(crate::host::pack_weight(w)?.map(|p| {
            let shape = [w.shape()[0], w.shape()[1]];
            Prepared::new("cpu", shape, p.nbytes(), p)
        }))
    }

    /// Equal rows, found by reading and hashing them bit for bit ([`crate::host::distinct_rows`]).
    fn distinct_rows(&self, x: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        crate::host::distinct_rows(x)
    }
}

/// Run an op whose check step has run (`spec` is its result) on the CPU backend's body, the
/// result held to `spec`: what the `ops` functions do for host operands, so the check is not
/// repeated. [`Cpu::run`](Backend::run) is the same body behind the check, for any caller.
pub fn run_checked_host(op: Op, spec: &OutSpec) -> Result<Tensor> {
    let name = op.name();
    check::held_to("cpu", name, crate::host::run(&op)?, spec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn host_ops_go_through_the_cpu_backend_and_are_held_to_the_spec() {
        let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let silu = || Op::Unary {
            x: x.clone(),
            f: aria_tensor::backend::UnaryOp::Silu,
        };
        let bits = |t: Tensor| -> Vec<u32> {
            let v = t.to_vec::<f32>().unwrap();
            v.iter().map(|v| v.to_bits()).collect()
        };
        let spec = silu().check().unwrap();
        let a = bits(run_checked_host(silu(), &spec).unwrap());
        let b = bits(Cpu.run(silu()).unwrap());
        assert_eq!(a, b);
        assert_eq!(a.len(), 4);
        // A result of another shape than the check step's is an error naming the backend.
        let spec = silu().check().unwrap();
        let wrong = Tensor::from_vec(vec![0.0f32; 4], &[4]).unwrap();
        let e = check::held_to("cpu", "unary", wrong, &spec)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("cpu") && e.contains("unary") && e.contains("[2, 2]"),
            "{e}"
        );
    }

    #[test]
    fn a_malformed_op_handed_to_the_cpu_backend_is_refused_by_the_check() {
        let x = Tensor::from_vec(vec![0.0f32; 6], &[2, 3]).unwrap();
        let w = Tensor::from_vec(vec![0.0f32; 20], &[4, 5]).unwrap();
        let e = Cpu
            .run(Op::Linear {
                x,
                w,
                b: None,
                prepared: None,
            })
            .expect_err("K differs");
        assert!(matches!(e, CoreError::Shape { .. }), "{e}");
        assert!(e.to_string().contains("linear"), "{e}");
    }

    #[test]
    fn the_cpu_backend_is_the_host_device() {
        assert_eq!(Cpu::shared().name(), "cpu");
        let t = Tensor::from_vec(vec![1.0f32], &[1]).unwrap();
        assert_eq!(Cpu.upload(&t).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
        assert_eq!(Cpu.to_cpu(&t).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
        assert!(Cpu.packed_formats().contains(&(WeightFormat::Q8_0, true)));
    }

    /// The CPU's `bf16_panels` layout (its panels, packed at upload) gives the format's
    /// reference (the blocks, on the emulation) bit for bit off the tile unit; the block formats
    /// stay the blocks they were.
    #[test]
    fn packed_weights_run_on_the_layout_the_cpu_uploads() {
        let (n, k, m) = (50usize, 37usize, 3usize);
        let wv: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let pairs = WeightFormat::Bf16Panels.row_bytes(k);
        let mut bytes = vec![0u8; n * pairs];
        for (r, row) in bytes.chunks_exact_mut(pairs).enumerate() {
            for (c, o) in row.chunks_exact_mut(2).take(k).enumerate() {
                o.copy_from_slice(&half::bf16::from_f32(wv[r * k + c]).to_le_bytes());
            }
        }
        let blocks = PackedBlocks {
            format: WeightFormat::Bf16Panels,
            w8a8: false,
            rows: n,
            cols: k,
            data: Tensor::from_vec(bytes, &[n, pairs]).unwrap(),
        };
        let panels = Cpu.upload_packed(&blocks).unwrap();
        assert_eq!(panels.rank(), 3);
        let x = Tensor::from_vec(
            (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect(),
            &[m, k],
        )
        .unwrap();
        let b = Tensor::from_vec((0..n).map(|i| i as f32 / 7.0).collect(), &[n]).unwrap();
        let op = |w: &Tensor| Op::LinearPacked {
            x: x.clone(),
            w: w.clone(),
            format: WeightFormat::Bf16Panels,
            w8a8: false,
            shape: [n, k],
            b: Some(b.clone()),
        };
        let got = Cpu.run(op(&panels)).unwrap().to_vec::<f32>().unwrap();
        let want = Cpu.run(op(&blocks.data)).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(got.len(), m * n);
        assert!(got.iter().all(|v| v.is_finite()));
        if !crate::bf16dot::use_tiles() {
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want));
        }
        // A panel tensor of another weight's shape is refused, naming both shapes.
        let e = Cpu
            .run(Op::LinearPacked {
                x: Tensor::from_vec(vec![0.0f32; 2 * 70], &[2, 70]).unwrap(),
                w: panels.clone(),
                format: WeightFormat::Bf16Panels,
                w8a8: false,
                shape: [n, 70],
                b: None,
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("panels") && e.contains("[50, 70]"), "{e}");
        // W8A8 is q8_0's alone.
        let e = Cpu
            .upload_packed(&PackedBlocks {
                w8a8: true,
                ..blocks
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("bf16_panels") && e.contains("W8A8"), "{e}");
    }
}
