//! Backends: where ops run, and the contract every backend implements.
//!
//! The functions of `aria_core::ops` (and the data-moving methods of [`Tensor`]) build an
//! [`Op`], run its check step ([`Op::check`]), look at where its input tensors live
//! ([`Tensor::device`]) and hand the op to the [`Backend`] that owns them: the CPU backend
//! (`aria_cpu::Cpu`) for host tensors, a device backend (wgpu, CUDA, opened from the
//! [`registry`] like the CPU) for its own storage. Adding a backend therefore changes no model
//! code: it implements [`Backend::run`] for the ops it supports, returns
//! [`CoreError::Unsupported`] for the others, and provides upload/download. Nothing is ever
//! copied between host and device implicitly: an op a backend lacks is an error naming the op
//! and the backend, never a silent download.
//!
//! `aria_core::backend` lists the op set in a table. [`Op::NAMES`] lists its names.

use std::sync::Arc;

use crate::{CoreError, Result, Tensor};

pub mod check;
mod op;
mod prepared;
pub mod registry;
pub use check::{run_checked, OutSpec};
pub use op::{device_of, AttnSpec, BinaryOp, Op, UnaryOp};
pub use prepared::Prepared;

/// Where a tensor lives.
#[derive(Clone)]
pub enum Device {
    /// Host memory (owned or memory-mapped).
    Cpu,
    /// Memory owned by a device backend.
    Backend(Arc<dyn Backend>),
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Device::Cpu => f.write_str("Cpu"),
            Device::Backend(b) => write!(f, "Backend({})", b.name()),
        }
    }
}

impl Device {
    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }

    /// Move a tensor to this device.
    pub fn put(&self, t: &Tensor) -> Result<Tensor> {
        match (self, t.device()) {
            (Device::Cpu, Device::Cpu) => Ok(t.clone()),
            (Device::Cpu, Device::Backend(b)) => b.to_cpu(t),
            (Device::Backend(b), _) => b.upload(&t.contiguous_on_cpu()?),
        }
    }
}

impl Tensor {
    /// A CPU copy of a tensor that may live on a device.
    pub fn to_cpu(&self) -> Result<Tensor> {
        Device::Cpu.put(self)
    }

    fn contiguous_on_cpu(&self) -> Result<Tensor> {
        self.to_cpu()?.contiguous()
    }
}

/// `q8_0, q8_0+w8a8` (or `none`), for messages.
pub fn format_list(f: &[(crate::format::WeightFormat, bool)]) -> String {
    if f.is_empty() {
        return "none".into();
    }
    let mut v = Vec::new();
    for (fmt, w8a8) in f {
        v.push(fmt.name().to_string());
        if *w8a8 {
            v.push(format!("{}+w8a8", fmt.name()));
        }
    }
    v.join(", ")
}

/// Device work recorded once by [`Backend::record`] and relaunched as a whole (a CUDA graph):
/// the per-step work of a sampler, which runs the same ops on the same buffers at every step
/// and reads what changes (the state, the noise levels) from device buffers written before
/// each replay ([`Backend::write_into`]).
pub trait Recorded: Send {
    /// Relaunch the recorded work (queued on the device, like any op).
    fn replay(&self) -> Result<()>;
}

/// A compute backend for device-resident tensors.
///
/// [`Backend::run`] receives every op whose operands live on this backend (CPU operands may be
/// mixed in: the backend decides whether it accepts them). Its default returns
/// [`CoreError::Unsupported`], so a backend grows op by op.
pub trait Backend: Send + Sync {
    /// A short name ("wgpu", "cuda").
    fn name(&self) -> &str;

    /// Copy a contiguous CPU tensor to the device.
    fn upload(&self, t: &Tensor) -> Result<Tensor>;

    /// Copy a device tensor back to the CPU.
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor>;

    /// Run one op of the set. The default supports none.
    fn run(&self, op: Op) -> Result<Tensor> {
        Err(self.unsupported(&op))
    }

    /// The packed weight formats [`Backend::upload_packed`] accepts, each with whether W8A8
    /// (int8 activations) runs on it too: the backend's row of the op × weight-format table.
    /// The default: none (a packed layer cannot move to this backend).
    fn packed_formats(&self) -> Vec<(crate::format::WeightFormat, bool)> {
        Vec::new()
    }

    /// Whether this backend runs products on weights in `format` faster than on dense f32
    /// weights: what a caller asks before choosing a faster, less exact precision mode for a
    /// model part (the default: no format).
    fn faster_than_f32(&self, format: crate::format::WeightFormat) -> bool {
        let _ = format;
        false
    }

    /// Pack a weight's blocks into this backend's own layout, on the device; the tensor comes
    /// back in [`Op::LinearPacked`]. The default refuses, naming the format.
    fn upload_packed(&self, w: &crate::format::PackedBlocks) -> Result<Tensor> {
        Err(CoreError::Backend {
            backend: self.name().to_string(),
            reason: format!(
                "no kernel for packed {}{} weights (formats here: {})",
                w.format,
                if w.w8a8 { " (W8A8)" } else { "" },
                format_list(&self.packed_formats())
            ),
        })
    }

    /// Lay the dense weight `w [N, K]` (one of this backend's tensors) out once for the products
    /// of [`Op::Linear`], which then carries the layout beside `w` (`aria_core::ops::linear_prepared`,
    /// `aria_core::nn::Linear::set_prepack`). The default lays nothing out (`Ok(None)`): the op
    /// reads `w` in every call.
    fn prepare_weight(&self, w: &Tensor) -> Result<Option<Prepared>> {
        let _ = w;
        Ok(None)
    }

    /// The distinct rows of `x` (one of this backend's tensors), for a model to compute row-wise
    /// results once per distinct row (`aria_core::ops::distinct_rows`): the distinct rows
    /// `[1, U, D]` and, for every row of `x`, the index of its distinct row (`I64 [n]`), both
    /// on this backend. The default looks at nothing and shares nothing (`None`): finding equal
    /// rows means reading them, which a device keeps where it is unless its backend chooses
    /// otherwise.
    fn distinct_rows(&self, x: &Tensor) -> Result<Option<(Tensor, Tensor)>> {
        let _ = x;
        Ok(None)
    }

    /// Overwrite `dst` (one of this backend's contiguous tensors) in place with the values of
    /// `src` (same shape and dtype; on this backend or on the CPU), so that a [recorded
    /// step](Backend::record) reads new inputs from the buffers it was recorded with. The
    /// default refuses (`write_into` is unsupported).
    fn write_into(&self, dst: &Tensor, src: &Tensor) -> Result<()> {
        let _ = (dst, src);
        Err(CoreError::Unsupported {
            op: "write_into",
            backend: self.name().to_string(),
        })
    }

    /// Record `work` once so that it can be relaunched as a whole ([`Recorded::replay`]):
    /// CUDA records it as a graph. `work` only queues device ops on tensors of this backend; it
    /// must not upload, download or wait, and it must leave its result in buffers allocated
    /// before the recording ([`Backend::write_into`]); what it allocates is freed inside it.
    /// Nothing runs at recording time: results appear at the first replay. `Ok(None)` (the
    /// default) means this backend does not record, and the caller runs the work itself.
    fn record<'a>(
        &self,
        work: Box<dyn FnMut() -> Result<()> + Send + 'a>,
    ) -> Result<Option<Box<dyn Recorded + 'a>>> {
        drop(work);
        Ok(None)
    }

    /// The error for an op this backend does not implement.
    fn unsupported(&self, op: &Op) -> CoreError {
        CoreError::Unsupported {
            op: op.name(),
            backend: self.name().to_string(),
        }
    }
}
