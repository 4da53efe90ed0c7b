//! Backends: where ops run.
//!
//! Model code calls the functions of [`crate::ops`]; each op looks at where its input tensors
//! live ([`Tensor::device`]) and runs on the CPU kernels or on the [`Backend`] that owns the
//! device storage. Adding a device backend (wgpu, CUDA) therefore changes no model code: the
//! backend implements this trait for the ops it supports and provides upload/download.

use std::sync::Arc;

use crate::{CoreError, Result, Tensor};

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

/// A compute backend for device-resident tensors.
///
/// Every op has a default implementation that returns [`CoreError::Unsupported`], so a backend
/// grows op by op. Tensors passed in are on this backend's device (ops check before calling).
pub trait Backend: Send + Sync {
    /// A short name ("wgpu", "cuda").
    fn name(&self) -> &str;

    /// Copy a contiguous CPU tensor to the device.
    fn upload(&self, t: &Tensor) -> Result<Tensor>;

    /// Copy a device tensor back to the CPU.
    fn to_cpu(&self, t: &Tensor) -> Result<Tensor>;

    /// `y = x·Wᵀ + b` with `x [.., K]`, `w [N, K]`, `b [N]`; see [`crate::ops::linear`].
    fn linear(&self, _x: &Tensor, _w: &Tensor, _b: Option<&Tensor>) -> Result<Tensor> {
        Err(CoreError::Unsupported {
            op: "linear",
            backend: self.name().to_string(),
        })
    }
}
